//! Reading the prefix: what a client or etcdctl put, reserved keys ignored, values over the limit
//! named, every page at one revision.

use std::time::Duration;

use etcd_client::{Txn, TxnOp};
use xdsd_etcd::{load, EtcdError};

use xdsd_testsupport::etcd::{options, put, Etcd};

#[tokio::test]
async fn load_reads_every_key_under_the_prefix_and_ignores_reserved_ones() {
    let etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    put(&mut client, "/xdsd/a.yaml", "a: 1").await;
    put(&mut client, "/xdsd/dir/b.json", "{}").await;
    put(&mut client, "/xdsd/.push", "marker").await;
    put(&mut client, "/xdsd/dir/.rollout", "reserved").await;
    put(&mut client, "/xdsd0", "after the prefix's range").await;
    put(&mut client, "/other/c.yaml", "elsewhere").await;
    // And one written by etcdctl.
    let status = std::process::Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args([
            "--endpoints",
            &etcd.endpoint(),
            "put",
            "/xdsd/.d/c.yaml",
            "c: 3",
        ])
        .stdout(std::process::Stdio::null())
        .status()
        .expect("etcdctl runs");
    assert!(status.success(), "etcdctl put failed");
    let latest = client
        .get("none", None)
        .await
        .expect("get")
        .header()
        .expect("a header")
        .revision();

    let (_etcd, snapshot) = load(&options(&etcd.endpoint(), "/xdsd/"))
        .await
        .expect("load");
    assert_eq!(snapshot.revision, latest);
    let entries: Vec<(&str, &[u8])> = snapshot
        .entries
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_ref()))
        .collect();
    assert_eq!(
        entries,
        [
            (".d/c.yaml", b"c: 3".as_slice()),
            ("a.yaml", b"a: 1".as_slice()),
            ("dir/b.json", b"{}".as_slice()),
        ]
    );
    assert!(snapshot.rejected.is_empty(), "{:?}", snapshot.rejected);
}

#[tokio::test]
async fn a_prefix_of_more_keys_than_a_page_is_read_whole_at_one_revision() {
    let etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    // 1,100 keys in 11 transactions of 100 (more than two pages of 512).
    for batch in 0..11 {
        let ops: Vec<TxnOp> = (0..100)
            .map(|i| TxnOp::put(format!("/p/k{:05}", batch * 100 + i), "v", None))
            .collect();
        client.txn(Txn::new().and_then(ops)).await.expect("txn");
    }
    let (_etcd, snapshot) = load(&options(&etcd.endpoint(), "/p/")).await.expect("load");
    assert_eq!(snapshot.entries.len(), 1100);
    assert_eq!(snapshot.revision, 12);
}

#[tokio::test]
async fn values_over_the_limit_are_named_as_rejected_even_when_too_large_to_receive() {
    let etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    put(&mut client, "/r/small.yaml", "ok").await;
    // Over the limit but received (named with its size).
    put(&mut client, "/r/big.yaml", &"x".repeat(300)).await;
    // 1.2 MiB: over the limit plus the response slack (1 MiB), so the client never receives it.
    put(&mut client, "/r/huge.yaml", &"y".repeat(1_200_000)).await;
    put(&mut client, "/r/z.yaml", "after").await;
    // A key that is not UTF-8 cannot name a resource: named with the invalid bytes replaced.
    client
        .put(b"/r/\xffbad".to_vec(), "v", None)
        .await
        .expect("put");
    let (_etcd, snapshot) = load(&options(&etcd.endpoint(), "/r/").with_max_value_bytes(100))
        .await
        .expect("load");
    let keys: Vec<&str> = snapshot.entries.keys().map(String::as_str).collect();
    assert_eq!(keys, ["small.yaml", "z.yaml"]);
    let big = snapshot
        .rejected
        .get("big.yaml")
        .expect("big.yaml rejected");
    assert!(
        big.contains("300 bytes") && big.contains("limit of 100"),
        "{big}"
    );
    let huge = snapshot
        .rejected
        .get("huge.yaml")
        .expect("huge.yaml rejected");
    assert!(huge.contains("over the limit of 100"), "{huge}");
    let bad = snapshot
        .rejected
        .get("\u{fffd}bad")
        .expect("the non-UTF-8 key rejected");
    assert!(bad.contains("not UTF-8"), "{bad}");
    assert_eq!(snapshot.rejected.len(), 3, "{:?}", snapshot.rejected);
}

#[tokio::test]
async fn an_etcd_that_is_not_there_is_unreachable_and_named() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let endpoint = format!("http://127.0.0.1:{port}");
    let options = options(&endpoint, "/x/").with_request_timeout(Duration::from_secs(3));
    let error = load(&options).await.expect_err("no etcd there");
    assert!(
        matches!(
            error,
            EtcdError::Unreachable { .. } | EtcdError::Timeout { .. }
        ),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(message.contains(&endpoint), "{message}");
    assert!(message.contains("reading prefix /x/"), "{message}");
}
