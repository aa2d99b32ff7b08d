//! The pending set, one test per rule: what a snapshot holds of it, what a commit keeps, whom
//! a resolution wakes, the limit and the expiry.

use std::time::{Duration, Instant};

use futures::FutureExt as _;

use super::*;
use crate::store::{Change, ResourceInput};
use crate::types::CLUSTER;

const WAIT: Duration = Duration::from_secs(10);

fn name(n: &str) -> PendingName {
    PendingName::new(CLUSTER, n)
}

fn set(store: &Store, n: &str) {
    store
        .apply([Change::Set(ResourceInput::new(
            CLUSTER,
            n,
            bytes::Bytes::from_static(b"x"),
        ))])
        .expect("a change");
}

#[test]
fn a_declared_name_is_in_the_snapshot_until_resolved() {
    let store = Store::new();
    let pending = store.pending_names();
    let generation = store.snapshot().generation();
    assert_eq!(pending.declare(name("a"), Instant::now() + WAIT), Ok(true));
    assert_eq!(
        pending.declare(name("a"), Instant::now() + WAIT),
        Ok(false),
        "declared once"
    );
    let snapshot = store.snapshot();
    assert_eq!(snapshot.generation(), generation, "no resource changed");
    let of_type = snapshot
        .pending(CLUSTER)
        .expect("pending names of the type");
    assert!(of_type.is_pending("a", &ParamSet::new()));
    assert!(!of_type.is_pending("b", &ParamSet::new()));
    assert_eq!(pending.resolve([&name("a")]), 1);
    assert!(store.snapshot().pending(CLUSTER).is_none());
    assert!(pending.is_empty());
}

#[test]
fn a_commit_keeps_the_pending_names() {
    let store = Store::new();
    let pending = store.pending_names();
    pending
        .declare(name("a"), Instant::now() + WAIT)
        .expect("room");
    set(&store, "b");
    let snapshot = store.snapshot();
    assert!(snapshot.get(CLUSTER).is_some());
    assert!(snapshot
        .pending(CLUSTER)
        .is_some_and(|p| p.is_pending("a", &ParamSet::new())));
}

#[test]
fn a_name_is_pending_for_the_clients_with_its_parameters() {
    let store = Store::new();
    let prod: ParamSet = [("env", "prod")].into_iter().collect();
    store
        .pending_names()
        .declare(name("a").with_params(prod.clone()), Instant::now() + WAIT)
        .expect("room");
    let snapshot = store.snapshot();
    let of_type = snapshot.pending(CLUSTER).expect("pending");
    assert!(of_type.is_pending("a", &prod));
    let more: ParamSet = [("env", "prod"), ("zone", "a")].into_iter().collect();
    assert!(of_type.is_pending("a", &more), "a set that holds them");
    assert!(!of_type.is_pending("a", &ParamSet::new()));
    let dev: ParamSet = [("env", "dev")].into_iter().collect();
    assert!(!of_type.is_pending("a", &dev));
}

#[test]
fn a_resolved_name_wakes_its_watchers_and_a_declared_one_wakes_none() {
    let store = Store::new();
    let pending = store.pending_names();
    let mut by_name = store.watcher();
    by_name.watch(&Arc::from(CLUSTER), [&Arc::from("a")]);
    let mut whole = store.watcher();
    whole.set_wildcard(&Arc::from(CLUSTER), true);
    pending
        .declare(name("a"), Instant::now() + WAIT)
        .expect("room");
    assert!(by_name.changed().now_or_never().is_none());
    assert!(whole.changed().now_or_never().is_none());
    pending.resolve([&name("a")]);
    for watcher in [&by_name, &whole] {
        assert!(watcher.changed().now_or_never().is_some());
        let changes = watcher.take_changes();
        let names: Vec<&Arc<str>> = changes.names(CLUSTER).collect();
        assert_eq!(names, [&Arc::<str>::from("a")]);
    }
}

#[test]
fn past_the_limit_a_name_is_refused() {
    let store = Store::new();
    let pending = store.pending_names();
    pending.set_limit(1);
    let until = Instant::now() + WAIT;
    pending.declare(name("a"), until).expect("room");
    assert_eq!(
        pending.declare(name("b"), until),
        Err(PendingError::Full { limit: 1 })
    );
    assert!(!pending.is_pending(&name("b")));
    pending.resolve([&name("a")]);
    assert_eq!(pending.declare(name("b"), until), Ok(true), "room again");
}

#[test]
fn a_name_expires_at_its_time_and_wakes_its_watchers() {
    let store = Store::new();
    let pending = store.pending_names();
    let mut watcher = store.watcher();
    watcher.watch(&Arc::from(CLUSTER), [&Arc::from("a")]);
    let t0 = Instant::now();
    pending.declare(name("a"), t0 + WAIT).expect("room");
    pending.declare(name("b"), t0 + WAIT * 2).expect("room");
    assert_eq!(pending.next_expiry(), Some(t0 + WAIT));
    assert!(pending.expire(t0).is_empty());
    assert_eq!(pending.expire(t0 + WAIT), vec![name("a")]);
    assert!(watcher.changed().now_or_never().is_some());
    assert_eq!(pending.next_expiry(), Some(t0 + WAIT * 2));
    let snapshot = store.snapshot();
    let of_type = snapshot.pending(CLUSTER).expect("b still pending");
    assert!(!of_type.is_pending("a", &ParamSet::new()));
    assert!(of_type.is_pending("b", &ParamSet::new()));
}

#[test]
fn names_declared_together_are_declared_in_one_swap_up_to_the_limit() {
    let store = Store::new();
    let pending = store.pending_names();
    pending.set_limit(3);
    let until = Instant::now() + WAIT;
    pending.declare(name("a"), until).expect("room");
    let results = pending.declare_all(["a", "b", "c", "d"].map(name), until);
    assert_eq!(
        results,
        vec![
            Ok(false),
            Ok(true),
            Ok(true),
            Err(PendingError::Full { limit: 3 })
        ]
    );
    let snapshot = store.snapshot();
    let of_type = snapshot.pending(CLUSTER).expect("pending names");
    for n in ["a", "b", "c"] {
        assert!(of_type.is_pending(n, &ParamSet::new()), "{n}");
    }
    assert!(!of_type.is_pending("d", &ParamSet::new()));
}

#[test]
fn a_declaration_copies_only_what_it_changes_of_the_names_pending() {
    let store = Store::new();
    let pending = store.pending_names();
    pending.set_limit(100_000);
    let until = Instant::now() + WAIT;
    let many: Vec<PendingName> = (0..10_000).map(|i| name(&format!("n{i}"))).collect();
    pending.declare_all(many, until);
    let before = store.snapshot();
    pending.declare(name("one-more"), until).expect("room");
    let after = store.snapshot();
    let (a, b) = (
        before.pending(CLUSTER).expect("pending"),
        after.pending(CLUSTER).expect("pending"),
    );
    let shared = a
        .shards
        .iter()
        .zip(b.shards.iter())
        .filter(|(x, y)| Arc::ptr_eq(x, y))
        .count();
    assert_eq!(shared, SHARDS - 1, "one shard copied, the others shared");
    assert!(!a.is_pending("one-more", &ParamSet::new()));
    assert!(b.is_pending("one-more", &ParamSet::new()));
    // Resolving one copies one shard too.
    pending.resolve([&name("n7")]);
    let resolved = store.snapshot();
    let c = resolved.pending(CLUSTER).expect("pending");
    let shared = b
        .shards
        .iter()
        .zip(c.shards.iter())
        .filter(|(x, y)| Arc::ptr_eq(x, y))
        .count();
    assert_eq!(shared, SHARDS - 1);
    assert!(!c.is_pending("n7", &ParamSet::new()));
}
