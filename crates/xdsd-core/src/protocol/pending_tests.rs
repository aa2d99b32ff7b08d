//! Pending names (`store::pending`) as the machines answer them, one test per rule, in the
//! in-memory harness: a name pending is not known yet, neither sent nor told missing, until the
//! source resolves it (committed, or absent) or it expires; then the watch path wakes the
//! stream and the normal rules answer.

use std::time::{Duration, Instant};

use crate::protocol::delta::DeltaMachine;
use crate::protocol::session::Session;
use crate::protocol::sotw::SotwMachine;
use crate::protocol::test_support::set;
use crate::store::{PendingName, PendingNames, Store, WHOLE_TYPE};
use crate::testing::{Flavor, Pair, Received};
use crate::types::{CLUSTER, CLUSTER_LOAD_ASSIGNMENT};

const WAIT: Duration = Duration::from_secs(10);

/// A client of `store` (with no node) that subscribed to `names` of `type_url` (none: the
/// wildcard), and what it was sent at once.
fn subscribed<M: Flavor>(
    store: &Store,
    type_url: &str,
    names: &[&str],
) -> (Pair<M>, Vec<Received>) {
    let mut pair: Pair<M> = Pair::new(store.clone(), Session::new(None), None);
    let ask = pair.client.subscribe(type_url, names);
    pair.send(&ask).expect("a subscription");
    let sent = flushed(&mut pair);
    (pair, sent)
}

/// What the client is sent now, after taking the store's changes.
fn flushed<M: Flavor>(pair: &mut Pair<M>) -> Vec<Received> {
    pair.wake();
    pair.flush()
        .iter()
        .map(|(_, response)| M::received(response))
        .collect()
}

fn names(received: &Received) -> Vec<&str> {
    received.resources.iter().map(|(n, _)| n.as_str()).collect()
}

fn declare(store: &Store, type_url: &str, name: &str) -> PendingNames {
    let pending = store.pending_names();
    pending
        .declare(PendingName::new(type_url, name), Instant::now() + WAIT)
        .expect("room for it");
    pending
}

#[test]
fn a_pending_name_is_not_removed_in_delta() {
    let store = Store::new();
    declare(&store, CLUSTER, "a");
    let (_, sent) = subscribed::<DeltaMachine>(&store, CLUSTER, &["a"]);
    assert!(sent.is_empty(), "no response for it at all: {sent:?}");
}

#[test]
fn a_pending_name_resolved_absent_is_removed() {
    let store = Store::new();
    let pending = declare(&store, CLUSTER, "a");
    let (mut pair, _) = subscribed::<DeltaMachine>(&store, CLUSTER, &["a"]);
    pending.resolve([&PendingName::new(CLUSTER, "a")]);
    let sent = flushed(&mut pair);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].removed, ["a"]);
}

#[test]
fn a_pending_name_committed_then_resolved_is_sent_once_and_never_removed() {
    let store = Store::new();
    let pending = declare(&store, CLUSTER, "a");
    let (mut pair, _) = subscribed::<DeltaMachine>(&store, CLUSTER, &["a"]);
    // The source commits the answer, then resolves the name.
    set(&store, CLUSTER, "a", "1");
    let sent = flushed(&mut pair);
    assert_eq!(sent.len(), 1);
    assert_eq!((names(&sent[0]), sent[0].removed.len()), (vec!["a"], 0));
    let ack = pair.client.ack(CLUSTER);
    pair.send(&ack).expect("an ACK");
    pending.resolve([&PendingName::new(CLUSTER, "a")]);
    assert!(flushed(&mut pair).is_empty(), "sent once");
}

#[test]
fn a_pending_name_that_expires_is_answered_as_the_store_has_it() {
    let store = Store::new();
    let pending = store.pending_names();
    let t0 = Instant::now();
    let name = PendingName::new(CLUSTER, "a");
    pending.declare(name.clone(), t0 + WAIT).expect("room");
    let (mut pair, _) = subscribed::<DeltaMachine>(&store, CLUSTER, &["a"]);
    assert_eq!(pending.next_expiry(), Some(t0 + WAIT));
    assert!(pending.expire(t0 + WAIT / 2).is_empty());
    assert!(flushed(&mut pair).is_empty());
    assert_eq!(pending.expire(t0 + WAIT), vec![name]);
    let sent = flushed(&mut pair);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].removed, ["a"]);
}

#[test]
fn a_name_pending_for_other_parameters_is_removed_at_once() {
    let store = Store::new();
    store
        .pending_names()
        .declare(
            PendingName::new(CLUSTER, "a").with_params([("env", "prod")].into_iter().collect()),
            Instant::now() + WAIT,
        )
        .expect("room");
    let (_, sent) = subscribed::<DeltaMachine>(&store, CLUSTER, &["a"]);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].removed, ["a"], "pending for other clients only");
}

#[test]
fn a_delta_wildcard_waits_while_its_type_is_pending() {
    let store = Store::new();
    let pending = declare(&store, CLUSTER, WHOLE_TYPE);
    let (mut pair, sent) = subscribed::<DeltaMachine>(&store, CLUSTER, &[]);
    assert!(sent.is_empty(), "no first answer yet: {sent:?}");
    set(&store, CLUSTER, "a", "1");
    assert!(flushed(&mut pair).is_empty(), "the type is still pending");
    pending.resolve([&PendingName::new(CLUSTER, WHOLE_TYPE)]);
    let sent = flushed(&mut pair);
    assert_eq!(sent.len(), 1);
    assert_eq!(names(&sent[0]), ["a"]);
}

#[test]
fn a_sotw_full_state_response_waits_for_a_pending_name() {
    let store = Store::new();
    set(&store, CLUSTER, "b", "1");
    let pending = declare(&store, CLUSTER, "a");
    let (mut pair, sent) = subscribed::<SotwMachine>(&store, CLUSTER, &["a", "b"]);
    assert!(sent.is_empty(), "no response without it: {sent:?}");
    set(&store, CLUSTER, "a", "1");
    pending.resolve([&PendingName::new(CLUSTER, "a")]);
    let sent = flushed(&mut pair);
    assert_eq!(sent.len(), 1);
    assert_eq!(names(&sent[0]), ["a", "b"]);
}

#[test]
fn a_sotw_full_state_response_goes_without_a_pending_name_resolved_absent() {
    let store = Store::new();
    set(&store, CLUSTER, "b", "1");
    let pending = declare(&store, CLUSTER, "a");
    let (mut pair, _) = subscribed::<SotwMachine>(&store, CLUSTER, &["a", "b"]);
    pending.resolve([&PendingName::new(CLUSTER, "a")]);
    let sent = flushed(&mut pair);
    assert_eq!(sent.len(), 1);
    assert_eq!(names(&sent[0]), ["b"]);
}

#[test]
fn a_sotw_wildcard_waits_while_its_type_is_pending() {
    let store = Store::new();
    let pending = declare(&store, CLUSTER, WHOLE_TYPE);
    let (mut pair, sent) = subscribed::<SotwMachine>(&store, CLUSTER, &[]);
    assert!(sent.is_empty(), "not first answered empty: {sent:?}");
    set(&store, CLUSTER, "a", "1");
    pending.resolve([&PendingName::new(CLUSTER, WHOLE_TYPE)]);
    let sent = flushed(&mut pair);
    assert_eq!(sent.len(), 1);
    assert_eq!(names(&sent[0]), ["a"]);
}

#[test]
fn a_sotw_type_but_the_full_state_ones_sends_what_there_is() {
    let store = Store::new();
    set(&store, CLUSTER_LOAD_ASSIGNMENT, "b", "1");
    declare(&store, CLUSTER_LOAD_ASSIGNMENT, "a");
    let (_, sent) = subscribed::<SotwMachine>(&store, CLUSTER_LOAD_ASSIGNMENT, &["a", "b"]);
    assert_eq!(sent.len(), 1, "a missing endpoint tells a client nothing");
    assert_eq!(names(&sent[0]), ["b"]);
}

#[test]
fn a_reconnecting_delta_client_is_not_told_a_pending_name_it_holds_is_removed() {
    let store = Store::new();
    let pending = declare(&store, CLUSTER, "r0");
    let mut pair: Pair<DeltaMachine> = Pair::new(store.clone(), Session::new(None), None);
    // The harness's client says it holds `r0` (from another server: a relay it moved from).
    let mut ask = pair.client.subscribe(CLUSTER, &["r0"]);
    ask.version = Some("elsewhere".into());
    pair.send(&ask).expect("a subscription");
    assert!(flushed(&mut pair).is_empty(), "what it holds stands");
    set(&store, CLUSTER, "r0", "1");
    pending.resolve([&PendingName::new(CLUSTER, "r0")]);
    let sent = flushed(&mut pair);
    assert_eq!(sent.len(), 1);
    assert_eq!((names(&sent[0]), sent[0].removed.len()), (vec!["r0"], 0));
}

#[test]
fn names_resolved_with_a_commit_are_answered_with_its_resources_in_one_response() {
    let store = Store::new();
    let pending = declare(&store, CLUSTER_LOAD_ASSIGNMENT, "a");
    let a = PendingName::new(CLUSTER_LOAD_ASSIGNMENT, "a");
    let ghost = PendingName::new(CLUSTER_LOAD_ASSIGNMENT, "ghost");
    pending
        .declare(ghost.clone(), Instant::now() + WAIT)
        .expect("room for it");
    let (mut pair, sent) =
        subscribed::<DeltaMachine>(&store, CLUSTER_LOAD_ASSIGNMENT, &["a", "ghost"]);
    assert!(sent.is_empty(), "{sent:?}");
    // The upstream answered both at once: "a" with its resource, "ghost" as missing. Resolved in
    // the commit's own swap, a stream woken by the commit reads both answers.
    pending.resolve_with_next_commit([&a, &ghost]);
    set(&store, CLUSTER_LOAD_ASSIGNMENT, "a", "1");
    assert!(!pending.is_pending(&a) && !pending.is_pending(&ghost));
    let sent = flushed(&mut pair);
    assert_eq!(sent.len(), 1, "one response: {sent:?}");
    assert_eq!(names(&sent[0]), ["a"]);
    assert_eq!(sent[0].removed, ["ghost"]);
}

#[test]
fn a_name_staged_for_a_commit_that_never_came_is_not_resolved_by_a_later_one() {
    let store = Store::new();
    let pending = declare(&store, CLUSTER_LOAD_ASSIGNMENT, "a");
    let a = PendingName::new(CLUSTER_LOAD_ASSIGNMENT, "a");
    pending.resolve_with_next_commit([&a]);
    // The source's change was refused: it resolves the name itself. Asked again later, the
    // name is pending anew, and the next commit leaves it so.
    pending.resolve([&a]);
    pending
        .declare(a.clone(), Instant::now() + WAIT)
        .expect("room for it");
    set(&store, CLUSTER_LOAD_ASSIGNMENT, "b", "1");
    assert!(pending.is_pending(&a));
}

const LB: &str = "type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint";
const GLOB: &str = "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/*";
const E1: &str = "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/e1";

#[test]
fn a_pending_glob_collection_is_not_answered_empty_in_delta() {
    let store = Store::new();
    let pending = declare(&store, LB, GLOB);
    let (mut pair, sent) = subscribed::<DeltaMachine>(&store, LB, &[GLOB]);
    assert!(sent.is_empty(), "not told first that it is empty: {sent:?}");
    // Resolved with no member: empty, as TP1 answers an empty glob.
    pending.resolve([&PendingName::new(LB, GLOB)]);
    let sent = flushed(&mut pair);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].removed, [GLOB]);
}

#[test]
fn a_pending_glob_collections_members_committed_with_it_are_sent_and_it_is_never_removed() {
    let store = Store::new();
    let pending = declare(&store, LB, GLOB);
    let (mut pair, sent) = subscribed::<DeltaMachine>(&store, LB, &[GLOB]);
    assert!(sent.is_empty(), "{sent:?}");
    pending.resolve_with_next_commit([&PendingName::new(LB, GLOB)]);
    set(&store, LB, E1, "1");
    let sent = flushed(&mut pair);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!((names(&sent[0]), sent[0].removed.len()), (vec![E1], 0));
}

const CLUSTER_GLOB: &str = "xdstp://a/envoy.config.cluster.v3.Cluster/in/*";

#[test]
fn sotw_a_pending_glob_collection_of_a_full_state_type_resolved_empty_is_answered_without_members()
{
    let store = Store::new();
    set(&store, CLUSTER, "other", "1");
    let pending = declare(&store, CLUSTER, CLUSTER_GLOB);
    let (mut pair, sent) = subscribed::<SotwMachine>(&store, CLUSTER, &[CLUSTER_GLOB, "other"]);
    assert!(sent.is_empty(), "held while the glob is pending: {sent:?}");
    // Resolved with no member: the full-state response, without a member (the client tells
    // from it that the collection is empty).
    pending.resolve([&PendingName::new(CLUSTER, CLUSTER_GLOB)]);
    let sent = flushed(&mut pair);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(names(&sent[0]), ["other"]);
}

#[test]
fn sotw_a_full_state_response_waits_for_a_pending_glob_collection_through_other_changes() {
    let store = Store::new();
    set(&store, CLUSTER, "other", "1");
    let (mut pair, sent) = subscribed::<SotwMachine>(&store, CLUSTER, &["other"]);
    assert_eq!(sent.len(), 1, "{sent:?}");
    let ack = pair.client.ack(CLUSTER);
    pair.send(&ack).expect("an ACK");
    let pending = declare(&store, CLUSTER, CLUSTER_GLOB);
    let ask = pair.client.subscribe(CLUSTER, &[CLUSTER_GLOB]);
    pair.send(&ask).expect("a subscription");
    assert!(
        flushed(&mut pair).is_empty(),
        "held while the glob is pending"
    );
    set(&store, CLUSTER, "other", "2");
    let sent = flushed(&mut pair);
    assert!(sent.is_empty(), "still held: {sent:?}");
    pending.resolve([&PendingName::new(CLUSTER, CLUSTER_GLOB)]);
    let sent = flushed(&mut pair);
    assert_eq!(sent.len(), 1, "the subscription's answer: {sent:?}");
}
