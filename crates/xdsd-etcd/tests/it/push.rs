//! The write path: a push's plan counts right, it lands in one revision, two pushes planned at
//! the same revision cannot both land (a rollout record written meanwhile aside), and a push over
//! the transaction limit writes nothing.

use std::collections::BTreeMap;

use bytes::Bytes;
use xdsd_etcd::{load, EtcdError, PushPlan, PUSH_MARKER};

use xdsd_testsupport::etcd::{changes, next, options, put, Etcd};

fn desired(pairs: &[(&str, &str)]) -> BTreeMap<String, Bytes> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Bytes::from(v.to_string())))
        .collect()
}

fn contents(snapshot: &xdsd_etcd::Snapshot) -> Vec<(String, String)> {
    snapshot
        .entries
        .iter()
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
        .collect()
}

#[tokio::test]
async fn a_push_counts_puts_deletes_and_unchanged_and_lands_in_one_revision() {
    let etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    put(&mut client, "/p/a.yaml", "1").await;
    put(&mut client, "/p/b.yaml", "2").await;
    put(&mut client, "/p/c.yaml", "3").await;
    put(&mut client, "/p/.rollout", "someone else's record").await;
    let (source, snapshot) = load(&options(&etcd.endpoint(), "/p/")).await.expect("load");
    let mut watch = source.watch(snapshot.revision);

    let plan = source
        .plan_push(desired(&[
            ("a.yaml", "1"),
            ("b.yaml", "22"),
            ("d/e.yaml", "4"),
        ]))
        .await
        .expect("plan");
    assert_eq!(
        plan,
        PushPlan {
            revision: snapshot.revision,
            puts: vec![
                ("b.yaml".into(), Bytes::from("22")),
                ("d/e.yaml".into(), Bytes::from("4")),
            ],
            deletes: vec!["c.yaml".into()],
            unchanged: 1,
        }
    );
    assert_eq!(plan.operations(), 4);
    let written = source.apply_push(&plan).await.expect("apply");

    // One revision with every change; the marker is not a change.
    assert_eq!(
        changes(&next(&mut watch).await),
        (
            written,
            vec![
                ("b.yaml".into(), Some("22".into())),
                ("d/e.yaml".into(), Some("4".into())),
                ("c.yaml".into(), None),
            ]
        )
    );
    let after = source.read().await.expect("read");
    assert_eq!(
        contents(&after),
        [
            ("a.yaml".to_string(), "1".to_string()),
            ("b.yaml".into(), "22".into()),
            ("d/e.yaml".into(), "4".into()),
        ]
    );
    // Reserved keys are left alone; the marker records the revision read.
    let rollout = client.get("/p/.rollout", None).await.expect("get");
    assert_eq!(rollout.kvs().len(), 1);
    let marker = client
        .get(format!("/p/{PUSH_MARKER}"), None)
        .await
        .expect("get");
    let value = marker
        .kvs()
        .first()
        .expect("a marker")
        .value_str()
        .expect("utf-8");
    assert!(
        value.contains(&format!("\"read_revision\":{}", snapshot.revision)),
        "{value}"
    );

    // Pushing the same again changes nothing but the marker.
    let again = source
        .plan_push(desired(&[
            ("a.yaml", "1"),
            ("b.yaml", "22"),
            ("d/e.yaml", "4"),
        ]))
        .await
        .expect("plan");
    assert!(again.is_empty());
    assert_eq!(again.unchanged, 3);
}

#[tokio::test]
async fn of_two_pushes_planned_at_one_revision_the_second_conflicts_and_writes_nothing() {
    let etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    put(&mut client, "/p/a.yaml", "1").await;
    put(&mut client, "/p/b.yaml", "2").await;
    let (source, _) = load(&options(&etcd.endpoint(), "/p/")).await.expect("load");

    // The first only deletes: only the marker lets the second see it.
    let deletes_only = source.plan_push(BTreeMap::new()).await.expect("plan");
    let other = source
        .plan_push(desired(&[
            ("a.yaml", "1"),
            ("b.yaml", "2"),
            ("c.yaml", "3"),
        ]))
        .await
        .expect("plan");
    assert_eq!(deletes_only.revision, other.revision);
    source
        .apply_push(&deletes_only)
        .await
        .expect("the first push");
    let before = source.read().await.expect("read");

    let error = source.apply_push(&other).await.expect_err("a conflict");
    assert!(matches!(error, EtcdError::Conflict { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains(&format!(
            "the prefix /p/ changed since it was read at revision {}",
            other.revision
        )) && message.contains("nothing was written"),
        "{message}"
    );
    let after = source.read().await.expect("read");
    assert_eq!(after, before, "the conflicting push wrote something");
    assert!(after.entries.is_empty());
}

#[tokio::test]
async fn a_push_over_the_transaction_limit_writes_nothing() {
    let etcd = Etcd::start().await;
    let (source, snapshot) = load(&options(&etcd.endpoint(), "/p/")).await.expect("load");
    let many: BTreeMap<String, Bytes> = (0..128)
        .map(|i| (format!("k{i:03}.yaml"), Bytes::from("v")))
        .collect();

    // Refused before anything is sent: 128 puts and the marker are 129 operations.
    let plan = source.plan_push(many.clone()).await.expect("plan");
    let error = source.apply_push(&plan).await.expect_err("too many");
    assert!(
        matches!(
            error,
            EtcdError::TooManyOperations {
                operations: 129,
                limit: Some(128)
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("--max-txn-ops"), "{error}");

    // With a limit above etcd's (128 by default), etcd refuses it, and says so.
    let (source, _) = load(&options(&etcd.endpoint(), "/p/").with_max_txn_ops(1000))
        .await
        .expect("load");
    let plan = source.plan_push(many).await.expect("plan");
    let error = source.apply_push(&plan).await.expect_err("too many");
    assert!(
        matches!(
            error,
            EtcdError::TooManyOperations {
                operations: 129,
                limit: None
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("--max-txn-ops"), "{error}");
    let after = source.read().await.expect("read");
    assert!(after.entries.is_empty());
    assert_eq!(after.revision, snapshot.revision, "something was written");
}

#[tokio::test]
async fn reserved_keys_and_values_over_the_limit_cannot_be_pushed() {
    let etcd = Etcd::start().await;
    let (source, _) = load(&options(&etcd.endpoint(), "/p/").with_max_value_bytes(4))
        .await
        .expect("load");
    for key in [".push", "d/.hidden", ""] {
        let error = source
            .plan_push(desired(&[(key, "v")]))
            .await
            .expect_err("refused");
        assert!(matches!(error, EtcdError::Options(_)), "{key}: {error:?}");
    }
    let error = source
        .plan_push(desired(&[("a.yaml", "12345")]))
        .await
        .expect_err("refused");
    assert_eq!(
        error.to_string(),
        "the value of key /p/a.yaml is 5 bytes, over the limit of 4 bytes"
    );
}

#[tokio::test]
async fn the_rollout_record_written_meanwhile_does_not_make_a_push_conflict_but_other_keys_do() {
    let etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    put(&mut client, "/p/a.yaml", "1").await;
    let (source, _) = load(&options(&etcd.endpoint(), "/p/")).await.expect("load");
    let plan = source
        .plan_push(desired(&[("a.yaml", "2")]))
        .await
        .expect("plan");
    // A replica records a rollout decision between the push's read and its write.
    put(&mut client, "/p/.rollout", r#"{"state":"soaking"}"#).await;
    source.apply_push(&plan).await.expect("no conflict");
    assert_eq!(
        contents(&source.read().await.expect("read")),
        [("a.yaml".to_string(), "2".to_string())]
    );
    // Any other key under the prefix written meanwhile still conflicts (keys just before and
    // just after the record's).
    for key in ["/p/.rollou", "/p/.rolloutx"] {
        let plan = source
            .plan_push(desired(&[("a.yaml", "3")]))
            .await
            .expect("plan");
        put(&mut client, key, "x").await;
        let error = source.apply_push(&plan).await.expect_err("a conflict");
        assert!(
            matches!(error, EtcdError::Conflict { .. }),
            "{key}: {error:?}"
        );
    }
}

/// `xdsd push --etcd-endpoints DEAD,LIVE`: the client may send the read or the transaction to
/// the dead endpoint (`Unavailable: … Connection refused`); the push retries (bounded) and lands.
#[tokio::test]
async fn a_push_lands_when_a_listed_endpoint_is_down() {
    let etcd = Etcd::start().await;
    let dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        format!("http://{}", listener.local_addr().expect("addr"))
    };
    let options = xdsd_etcd::EtcdOptions::new([dead, etcd.endpoint()], "/p/")
        .with_backoff(
            std::time::Duration::from_millis(50),
            std::time::Duration::from_millis(500),
        )
        .with_request_timeout(std::time::Duration::from_secs(10));
    let source = xdsd_etcd::Etcd::connect(&options).await.expect("connect");
    for round in 0..8 {
        let current = source.read().await.expect("read");
        let value = round.to_string();
        let plan = source
            .plan_push_on(&current, desired(&[("a.yaml", value.as_str())]))
            .expect("plan");
        let written = source.apply_push(&plan).await.expect("apply");
        assert!(written > current.revision);
    }
}
