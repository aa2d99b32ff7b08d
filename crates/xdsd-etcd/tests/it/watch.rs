//! The watch: one event per revision, health when etcd goes and comes back with nothing lost or
//! repeated, a resync after a compaction past the watcher's revision.

use etcd_client::{CompactionOptions, Txn, TxnOp};
use xdsd_etcd::{load, Event, KeyChange};

use xdsd_testsupport::etcd::{changes, client_of, next, options, put, Etcd};

fn some(s: &str) -> Option<String> {
    Some(s.to_string())
}

#[tokio::test]
async fn a_transaction_of_three_puts_and_a_delete_is_one_revision_event() {
    let etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    put(&mut client, "/w/old.yaml", "old").await;
    let (source, snapshot) = load(&options(&etcd.endpoint(), "/w/")).await.expect("load");
    let mut watch = source.watch(snapshot.revision);

    let txn = Txn::new().and_then([
        TxnOp::put("/w/a.yaml", "a", None),
        TxnOp::put("/w/b.yaml", "b", None),
        TxnOp::put("/w/.push", "marker, ignored", None),
        TxnOp::delete("/w/old.yaml", None),
        TxnOp::put("/w/c.yaml", "c", None),
    ]);
    let written = client.txn(txn).await.expect("txn");
    let revision = written.header().expect("header").revision();

    let (got, list) = changes(&next(&mut watch).await);
    assert_eq!(got, revision);
    assert_eq!(
        list,
        [
            ("a.yaml".to_string(), some("a")),
            ("b.yaml".to_string(), some("b")),
            ("old.yaml".to_string(), None),
            ("c.yaml".to_string(), some("c")),
        ]
    );
}

#[tokio::test]
async fn two_revisions_arrive_as_two_events_in_order() {
    let etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    let (source, snapshot) = load(&options(&etcd.endpoint(), "/w/")).await.expect("load");
    // Both written before the watch starts: etcd sends them in one response, split here.
    let first = put(&mut client, "/w/a.yaml", "1").await;
    let second = put(&mut client, "/w/a.yaml", "2").await;
    let mut watch = source.watch(snapshot.revision);
    assert_eq!(
        changes(&next(&mut watch).await),
        (first, vec![("a.yaml".to_string(), some("1"))])
    );
    assert_eq!(
        changes(&next(&mut watch).await),
        (second, vec![("a.yaml".to_string(), some("2"))])
    );
    let third = put(&mut client, "/w/b.yaml", "3").await;
    assert_eq!(
        changes(&next(&mut watch).await),
        (third, vec![("b.yaml".to_string(), some("3"))])
    );
}

#[tokio::test]
async fn a_value_over_the_limit_is_a_rejected_change_for_its_key() {
    let etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    let options = options(&etcd.endpoint(), "/w/").with_max_value_bytes(10);
    let (source, snapshot) = load(&options).await.expect("load");
    let mut watch = source.watch(snapshot.revision);
    put(&mut client, "/w/big.yaml", "more than ten bytes").await;
    match next(&mut watch).await {
        Event::Revision { changes, .. } => match changes.as_slice() {
            [KeyChange::Rejected { key, reason }] => {
                assert_eq!(key, "big.yaml");
                assert!(
                    reason.contains("19 bytes, over the limit of 10"),
                    "{reason}"
                );
            }
            other => panic!("expected one rejected change, got {other:?}"),
        },
        other => panic!("expected a revision, got {other:?}"),
    }
}

/// The health events until `healthy` is reported, asserting there are no others in between.
async fn expect_health(watch: &mut xdsd_etcd::Watch, healthy: bool) -> String {
    match next(watch).await {
        Event::Health { healthy: h, reason } if h == healthy => reason,
        other => panic!("expected Health {{ healthy: {healthy} }}, got {other:?}"),
    }
}

#[tokio::test]
async fn a_killed_etcd_is_reported_and_the_watch_resumes_after_its_restart_without_loss_or_repeat()
{
    let mut etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    let (source, snapshot) = load(&options(&etcd.endpoint(), "/w/")).await.expect("load");
    let mut watch = source.watch(snapshot.revision);
    let before = put(&mut client, "/w/a.yaml", "before").await;
    assert_eq!(
        changes(&next(&mut watch).await),
        (before, vec![("a.yaml".to_string(), some("before"))])
    );

    etcd.kill().await;
    let reason = expect_health(&mut watch, false).await;
    assert!(reason.contains(&etcd.endpoint()), "{reason}");

    // While the watcher cannot reach it (etcd back on another port), a change is made.
    let elsewhere = etcd.restart_elsewhere().await;
    let mut other = client_of(&elsewhere).await;
    let while_down = put(&mut other, "/w/b.yaml", "while down").await;
    drop(other);
    etcd.kill().await;

    // Back on its own port: healthy again, the change made meanwhile arrives, then a new one.
    etcd.restart().await;
    expect_health(&mut watch, true).await;
    assert_eq!(
        changes(&next(&mut watch).await),
        (while_down, vec![("b.yaml".to_string(), some("while down"))])
    );
    let mut client = etcd.client().await;
    let after = put(&mut client, "/w/c.yaml", "after").await;
    assert_eq!(
        changes(&next(&mut watch).await),
        (after, vec![("c.yaml".to_string(), some("after"))])
    );
}

#[tokio::test]
async fn a_compaction_past_the_revision_of_a_watch_that_was_down_is_a_resync() {
    let mut etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    put(&mut client, "/w/a.yaml", "a").await;
    put(&mut client, "/w/b.yaml", "b").await;
    let (source, snapshot) = load(&options(&etcd.endpoint(), "/w/")).await.expect("load");
    let mut watch = source.watch(snapshot.revision);
    etcd.kill().await;
    expect_health(&mut watch, false).await;

    // Several revisions, then a compaction to the latest, all out of the watcher's reach.
    let elsewhere = etcd.restart_elsewhere().await;
    let mut other = client_of(&elsewhere).await;
    put(&mut other, "/w/a.yaml", "a2").await;
    other.delete("/w/b.yaml", None).await.expect("delete");
    let latest = put(&mut other, "/w/c.yaml", "c").await;
    other
        .compact(latest, Some(CompactionOptions::new().with_physical()))
        .await
        .expect("compact");
    drop(other);
    etcd.kill().await;
    etcd.restart().await;

    expect_health(&mut watch, true).await;
    match next(&mut watch).await {
        Event::Resync(snapshot) => {
            assert_eq!(snapshot.revision, latest);
            let entries: Vec<(&str, &[u8])> = snapshot
                .entries
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_ref()))
                .collect();
            assert_eq!(
                entries,
                [("a.yaml", b"a2".as_slice()), ("c.yaml", b"c".as_slice())]
            );
        }
        other => panic!("expected a resync, got {other:?}"),
    }
    // And the watch goes on from there.
    let mut client = etcd.client().await;
    let next_revision = put(&mut client, "/w/d.yaml", "d").await;
    assert_eq!(
        changes(&next(&mut watch).await),
        (next_revision, vec![("d.yaml".to_string(), some("d"))])
    );
}

#[tokio::test]
async fn a_watch_from_a_compacted_revision_is_a_resync_without_a_health_change() {
    let etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    let (source, snapshot) = load(&options(&etcd.endpoint(), "/w/")).await.expect("load");
    put(&mut client, "/w/a.yaml", "1").await;
    let latest = put(&mut client, "/w/a.yaml", "2").await;
    client.compact(latest, None).await.expect("compact");
    let mut watch = source.watch(snapshot.revision);
    match next(&mut watch).await {
        Event::Resync(snapshot) => {
            assert_eq!(snapshot.revision, latest);
            assert_eq!(
                snapshot.entries.get("a.yaml").map(|v| v.as_ref()),
                Some(b"2".as_slice())
            );
        }
        other => panic!("expected a resync, got {other:?}"),
    }
}

#[tokio::test]
async fn a_consumer_that_lags_behind_a_small_queue_still_gets_every_revision_in_order() {
    let etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    let options = options(&etcd.endpoint(), "/w/").with_event_capacity(2);
    let (source, snapshot) = load(&options).await.expect("load");
    let mut watch = source.watch(snapshot.revision);
    // The watch holds two events and stops reading from etcd until they are taken.
    let mut written = Vec::new();
    for i in 0..40 {
        written.push(put(&mut client, &format!("/w/k{}.yaml", i % 3), &i.to_string()).await);
    }
    for (i, revision) in written.into_iter().enumerate() {
        assert_eq!(
            changes(&next(&mut watch).await),
            (
                revision,
                vec![(format!("k{}.yaml", i % 3), Some(i.to_string()))]
            )
        );
    }
}
