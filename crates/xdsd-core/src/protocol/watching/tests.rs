//! The watcher contract, one test per rule, in the in-memory harness.

use super::*;
use crate::protocol::session::DEFAULT_ACK_WAIT;
use crate::protocol::sotw::SotwMachine;
use crate::protocol::test_support::set;
use crate::store::Store;
use crate::testing::Pair;
use crate::types::CLUSTER;

/// A wildcard client of clusters that got its first response and has not answered it.
fn waiting_pair() -> Pair<SotwMachine> {
    let store = Store::new();
    set(&store, CLUSTER, "a", "1");
    let mut pair: Pair<SotwMachine> = Pair::new(store, Session::new(None), None);
    let ask = pair.client.subscribe(CLUSTER, &[]);
    pair.send(&ask).expect("a subscription");
    assert_eq!(pair.flush().len(), 1);
    pair
}

#[test]
fn a_request_gives_the_watcher_the_parameter_sets_then_what_it_watches() {
    let mut pair = waiting_pair();
    assert_eq!(
        pair.watcher.params_len(),
        Some(pair.session.param_sets().len())
    );
    let ack = pair.client.ack(CLUSTER);
    pair.send(&ack).expect("an ACK");
    assert!(pair.flush().is_empty());
    set(&pair.store, CLUSTER, "b", "1");
    assert!(pair.wake(), "the wildcard is watched");
}

#[test]
fn a_change_of_a_type_waiting_for_its_ack_is_muted_and_goes_out_after_the_ack() {
    let mut pair = waiting_pair();
    set(&pair.store, CLUSTER, "a", "2");
    assert!(!pair.wake(), "a change of a waiting type woke the session");
    assert!(pair.flush().is_empty());
    let ack = pair.client.ack(CLUSTER);
    pair.send(&ack).expect("an ACK");
    let sent = pair.flush();
    assert_eq!(
        sent.len(),
        1,
        "the muted change did not go out after the ACK"
    );
    assert_eq!(
        pair.client.held(CLUSTER).unwrap().resources["a"],
        pair.store
            .snapshot()
            .resource(CLUSTER, "a")
            .unwrap()
            .version()
            .to_string()
    );
}

#[test]
fn a_change_muted_while_waiting_goes_out_when_the_wait_ends() {
    let mut pair = waiting_pair();
    set(&pair.store, CLUSTER, "a", "2");
    assert!(!pair.wake());
    pair.advance(DEFAULT_ACK_WAIT);
    assert_eq!(
        pair.flush().len(),
        1,
        "the muted change did not go out after the wait"
    );
}

#[test]
fn the_types_are_muted_only_while_they_wait() {
    let mut pair = waiting_pair();
    assert!(pair.watcher.is_muting());
    let ack = pair.client.ack(CLUSTER);
    pair.send(&ack).expect("an ACK");
    assert!(pair.flush().is_empty());
    assert!(!pair.watcher.is_muting());
    set(&pair.store, CLUSTER, "a", "2");
    assert!(
        pair.wake(),
        "a change of a type that does not wait must wake the session"
    );
    assert_eq!(pair.flush().len(), 1);
}
