//! The prefix's history against a real etcd: pushes with their notes and direct writes with their
//! keys, newest first; a delete-only direct write as the latest change is found; the limit keeps
//! the newest; a rollout record's state lands on its candidate's row; after a compaction the
//! history starts at the oldest revision left, and a read before it is refused.

use std::collections::BTreeMap;

use bytes::Bytes;
use etcd_client::CompactionOptions;
use xdsd_etcd::{Etcd, EtcdError, PushNote};

use xdsd_testsupport::etcd::{options, put, Etcd as EtcdServer};

fn desired(pairs: &[(&str, &str)]) -> BTreeMap<String, Bytes> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Bytes::from(v.to_string())))
        .collect()
}

async fn push(etcd: &Etcd, pairs: &[(&str, &str)], note: &PushNote) -> i64 {
    let plan = etcd.plan_push(desired(pairs)).await.expect("plan");
    etcd.apply_push_noted(&plan, note).await.expect("apply")
}

fn note(author: &str, message: &str, changed: &[&str]) -> PushNote {
    let mut note = PushNote {
        author: author.into(),
        message: message.into(),
        ..PushNote::default()
    };
    for name in changed {
        note.changed.add(name);
    }
    note
}

#[tokio::test]
async fn pushes_and_direct_writes_are_listed_newest_first_with_their_notes_and_keys() {
    let server = EtcdServer::start().await;
    let mut client = server.client().await;
    let etcd = Etcd::connect(&options(&server.endpoint(), "/p/"))
        .await
        .expect("connect");
    // Outside the prefix: not in its history.
    put(&mut client, "/other/x", "1").await;
    let first = push(
        &etcd,
        &[("a.yaml", "1"), ("b.yaml", "2")],
        &note("ana@host", "first", &[]),
    )
    .await;
    let second = push(
        &etcd,
        &[("a.yaml", "11"), ("c.yaml", "3")],
        &note("bob@host", "second", &["Cluster/a"]),
    )
    .await;
    let direct = put(&mut client, "/p/d.yaml", "4").await;
    // The latest change deletes only: no key is left to tell it, yet it is listed.
    let deleted = client
        .delete("/p/a.yaml", None)
        .await
        .expect("delete")
        .header()
        .expect("a header")
        .revision();

    let history = etcd.history(10).await.expect("history");
    let revisions: Vec<i64> = history.changes.iter().map(|c| c.revision).collect();
    assert_eq!(revisions, [deleted, direct, second, first], "{history:#?}");
    assert!(!history.more);
    assert_eq!(history.current, deleted);

    let [del, put_d, two, one] = &history.changes[..] else {
        unreachable!()
    };
    assert_eq!(del.push, None, "a direct write");
    assert_eq!(del.keys.removed.first, ["a.yaml"]);
    assert_eq!(put_d.push, None);
    assert_eq!(
        (put_d.keys.added.first.as_slice(), put_d.keys.total()),
        (&["d.yaml".to_string()][..], 1)
    );
    let two_push = two.push.as_ref().expect("a push");
    assert_eq!(two_push.note, note("bob@host", "second", &["Cluster/a"]));
    assert_eq!(two_push.read_revision, first);
    assert!(two_push.unix_ms > 0);
    assert_eq!(two.keys.added.first, ["c.yaml"]);
    assert_eq!(two.keys.changed.first, ["a.yaml"]);
    assert_eq!(two.keys.removed.first, ["b.yaml"]);
    assert_eq!(
        one.push.as_ref().map(|p| p.note.message.as_str()),
        Some("first")
    );
    assert_eq!(one.keys.added.count, 2);

    // The limit keeps the newest, and says there is more.
    let two_newest = etcd.history(2).await.expect("history");
    let revisions: Vec<i64> = two_newest.changes.iter().map(|c| c.revision).collect();
    assert_eq!(revisions, [deleted, direct]);
    assert!(two_newest.more);
}

#[tokio::test]
async fn the_rollout_state_a_revision_reached_is_on_its_row() {
    let server = EtcdServer::start().await;
    let etcd = Etcd::connect(&options(&server.endpoint(), "/p/"))
        .await
        .expect("connect");
    let first = push(&etcd, &[("a.yaml", "1")], &note("a", "one", &[])).await;
    let second = push(&etcd, &[("a.yaml", "2")], &note("a", "two", &[])).await;
    assert!(etcd.promote_now(second).await.expect("written"));
    let history = etcd.history(10).await.expect("history");
    let states: Vec<(i64, Option<&str>)> = history
        .changes
        .iter()
        .map(|c| (c.revision, c.rollout))
        .collect();
    assert_eq!(
        states,
        [(second, Some("promoted")), (first, None)],
        "the record's own revision is not a change: {history:#?}"
    );
}

#[tokio::test]
async fn after_a_compaction_the_history_starts_at_the_oldest_revision_left() {
    let server = EtcdServer::start().await;
    let mut client = server.client().await;
    let etcd = Etcd::connect(&options(&server.endpoint(), "/p/"))
        .await
        .expect("connect");
    let first = push(&etcd, &[("a.yaml", "1")], &note("a", "one", &[])).await;
    let second = push(&etcd, &[("a.yaml", "2")], &note("a", "two", &[])).await;
    let third = push(&etcd, &[("a.yaml", "3")], &note("a", "three", &[])).await;
    client
        .compact(second, Some(CompactionOptions::new().with_physical()))
        .await
        .expect("compact");
    assert_eq!(etcd.oldest_revision().await.expect("oldest"), second);
    let history = etcd.history(10).await.expect("history");
    assert_eq!(history.oldest, second);
    let revisions: Vec<i64> = history.changes.iter().map(|c| c.revision).collect();
    assert_eq!(revisions, [third, second]);
    assert!(matches!(
        etcd.read_at(first).await,
        Err(EtcdError::Compacted { revision, .. }) if revision == first
    ));
}
