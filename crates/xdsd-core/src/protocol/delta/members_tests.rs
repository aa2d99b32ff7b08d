//! The held glob members (xRFC TP1) counted apart against the names budget: one count per glob,
//! kept right by each rule that changes it, each test against a recount of everything held
//! (`DeltaMachine::recount_members`). (The first rules are `glob::held_members_*`.)

use super::*;

// The glob tests' set-up: the same type, collection, store and checks.
use super::glob::{counted, harness, n, subscribe, unsubscribe, T};

fn holds(h: &Harness, name: &str) -> bool {
    h.sub.client_version(name).is_some()
}

#[test]
fn a_glob_of_many_members_is_one_count_not_a_name_per_member() {
    let ids: Vec<String> = (0..1000).map(|i| format!("e{i:04}")).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let mut h = harness(&ids);
    subscribe(&mut h, &[&n("*")]);
    assert_eq!(h.expect().0.len(), 1000);
    assert_eq!(counted(&h), 1000);
    assert_eq!(
        h.sub.glob_members.counts(),
        1,
        "one count for the glob's 1,000 members"
    );
    assert_eq!(h.sub.key_count(), 1001);
}

#[test]
fn the_wildcard_and_a_glob_subscribed_together_count_each_member_once() {
    let mut h = harness(&["e1", "e2"]);
    set(&h.store, T, "plain", "1");
    subscribe(&mut h, &["*", &n("*")]);
    assert_eq!(h.expect(), seen(&["plain", &n("e1"), &n("e2")], &[]));
    assert_eq!(counted(&h), 2, "each member once, the plain name not");
    h.set(&n("e3"), "1");
    assert_eq!(h.expect(), seen(&[&n("e3")], &[]));
    assert_eq!(counted(&h), 3);
    h.set(&n("e3"), "2");
    h.expect();
    assert_eq!(counted(&h), 3, "a member sent again is counted once");
}

#[test]
fn a_glob_and_one_of_its_members_subscribed_together_under_the_wildcard_count_the_others() {
    for names in [[n("*"), n("e1")], [n("e1"), n("*")]] {
        let mut h = harness(&["e1", "e2", "e3"]);
        subscribe(&mut h, &["*"]);
        h.expect();
        assert_eq!(counted(&h), 0);
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        subscribe(&mut h, &names);
        assert_eq!(counted(&h), 2, "e2 and e3 apart, e1 by name ({names:?})");
    }
}

#[test]
fn a_member_named_then_its_glob_under_the_wildcard_counts_the_member_as_a_name() {
    let mut h = harness(&["e1", "e2"]);
    subscribe(&mut h, &["*"]);
    h.expect();
    subscribe(&mut h, &[&n("e1")]);
    assert_eq!(counted(&h), 0);
    subscribe(&mut h, &[&n("*")]);
    assert_eq!(counted(&h), 1, "e2 only");
    unsubscribe(&mut h, &[&n("e1")]);
    assert_eq!(counted(&h), 2, "e1 held through its glob again");
}

#[test]
fn a_member_named_twice_in_one_request_counts_once_as_a_name() {
    let mut h = harness(&["e1", "e2"]);
    subscribe(&mut h, &[&n("*")]);
    h.expect();
    assert_eq!(counted(&h), 2);
    subscribe(&mut h, &[&n("e1"), &n("e1")]);
    assert_eq!(counted(&h), 1, "e2 only");
}

#[test]
fn a_glob_dropped_while_the_wildcard_holds_its_members_keeps_them_uncounted() {
    let mut h = harness(&["e1", "e2"]);
    subscribe(&mut h, &["*", &n("*")]);
    h.expect();
    assert_eq!(counted(&h), 2);
    unsubscribe(&mut h, &[&n("*")]);
    assert_eq!(counted(&h), 0);
    assert!(
        holds(&h, &n("e1")) && holds(&h, &n("e2")),
        "the wildcard gives them"
    );
    h.expect_none();
    h.set(&n("e1"), "2");
    assert_eq!(h.expect(), seen(&[&n("e1")], &[]));
    assert_eq!(counted(&h), 0);
}

#[test]
fn a_glob_subscribed_while_a_members_removal_is_owed_counts_it_until_the_removal_is_sent() {
    let mut h = harness(&["e1", "e2"]);
    subscribe(&mut h, &["*"]);
    h.expect();
    h.remove(&n("e2"));
    subscribe(&mut h, &[&n("*")]);
    assert_eq!(counted(&h), 2, "e2 is still held");
    let (_, removed) = h.expect();
    assert_eq!(removed, vec![n("e2")]);
    assert_eq!(counted(&h), 1);
}

#[test]
fn a_glob_dropped_while_a_members_removal_is_owed_forgets_that_member_too() {
    let mut h = harness(&["e1", "e2"]);
    subscribe(&mut h, &[&n("*")]);
    h.expect();
    h.remove(&n("e2"));
    unsubscribe(&mut h, &[&n("*")]);
    assert_eq!(counted(&h), 0);
    assert!(
        !holds(&h, &n("e1")) && !holds(&h, &n("e2")),
        "the client dropped both"
    );
    h.expect_none();
}

#[test]
fn a_reconnecting_wildcard_client_with_a_glob_counts_the_members_it_claims_once() {
    let mut h = harness(&["e1", "e2"]);
    let v1 = h.version(&n("e1"));
    let (e1, gone) = (n("e1"), n("gone"));
    h.request(Req {
        subscribe: &["*", &n("*")],
        initial: &[(&e1, &v1), (&gone, "7")],
        ..Default::default()
    });
    assert_eq!(counted(&h), 2, "e1 and gone, claimed");
    // A glob subscribed is owed every member (as a name subscribed is owed its resource).
    assert_eq!(h.expect(), seen(&[&e1, &n("e2")], &[&gone]));
    assert_eq!(counted(&h), 2, "e1 and e2");
}

#[test]
fn members_of_two_globs_count_apart_and_a_glob_dropped_takes_its_own() {
    let mut h = harness(&["e1", "e2"]);
    let other = "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c2/*";
    set(
        &h.store,
        T,
        "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c2/x",
        "1",
    );
    subscribe(&mut h, &[&n("*"), other]);
    h.expect();
    assert_eq!(counted(&h), 3);
    assert_eq!(h.sub.glob_members.counts(), 2, "a count per glob");
    unsubscribe(&mut h, &[other]);
    assert_eq!(counted(&h), 2);
    assert_eq!(h.sub.glob_members.counts(), 1);
}

/// Removed in the store, the stream not yet told (a request reads the store's newest snapshot,
/// the stream learns of the removal after): the member is still held.
fn remove_untold(h: &Harness, id: &str) {
    remove(&h.store, T, &n(id));
}

fn tell(h: &mut Harness, id: &str) {
    h.sub.mark_changed([&Arc::from(n(id).as_str())]);
}

#[test]
fn a_glob_subscribed_under_the_wildcard_counts_a_held_member_whose_removal_the_stream_was_not_told_yet(
) {
    let mut h = harness(&["e1", "e2"]);
    subscribe(&mut h, &["*"]);
    h.expect();
    // e3 comes after the wildcard's first response: held apart from the view it recorded.
    h.set(&n("e3"), "1");
    assert_eq!(h.expect(), seen(&[&n("e3")], &[]));
    remove_untold(&h, "e2");
    remove_untold(&h, "e3");
    subscribe(&mut h, &[&n("*")]);
    assert_eq!(counted(&h), 3, "e1, and e2 and e3: still held");
    h.expect();
    assert_eq!(counted(&h), 3);
    tell(&mut h, "e2");
    tell(&mut h, "e3");
    let (_, mut removed) = h.expect();
    removed.sort();
    assert_eq!(removed, vec![n("e2"), n("e3")]);
    assert_eq!(counted(&h), 1, "e1");
}

#[test]
fn a_glob_dropped_forgets_a_held_member_whose_removal_the_stream_was_not_told_yet() {
    let mut h = harness(&["e1", "e2"]);
    subscribe(&mut h, &[&n("*")]);
    h.expect();
    h.set(&n("e3"), "1");
    assert_eq!(h.expect(), seen(&[&n("e3")], &[]));
    remove_untold(&h, "e2");
    remove_untold(&h, "e3");
    unsubscribe(&mut h, &[&n("*")]);
    assert_eq!(counted(&h), 0);
    for id in ["e1", "e2", "e3"] {
        assert!(!holds(&h, &n(id)), "the client dropped {id}");
    }
    tell(&mut h, "e2");
    tell(&mut h, "e3");
    h.expect_none();
}
