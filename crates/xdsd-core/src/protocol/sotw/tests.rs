//! One test per rule of the spec's SotW protocol, driving the state machine directly.

use std::sync::Arc;

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use envoy_types::pb::google::rpc::Status;

use super::*;
use crate::protocol::test_support::{input, remove, set, store_with, views};
use crate::protocol::{NonceGen, RequestKind, Subscribe};
use crate::store::{Change, Store};
use crate::types::{CLUSTER, CLUSTER_LOAD_ASSIGNMENT, LISTENER};

/// A store, one subscription and the stream's nonce generator.
struct Harness {
    store: Store,
    sub: SotwMachine,
    nonces: NonceGen,
}

impl Harness {
    fn new(type_url: &str, resources: &[(&str, &str)]) -> Harness {
        Harness {
            store: store_with(type_url, resources),
            sub: SotwMachine::new(type_url.into()),
            nonces: NonceGen::default(),
        }
    }

    fn set(&self, name: &str, content: &str) {
        set(&self.store, self.sub.type_url(), name, content);
    }

    fn remove(&self, name: &str) {
        remove(&self.store, self.sub.type_url(), name);
    }

    /// Tells the machine that `names` changed (what the session does on a store notification:
    /// how many first, then the names unless the machine skips them).
    fn notify(&mut self, names: &[&str]) {
        let names: Vec<Arc<str>> = names.iter().map(|n| Arc::from(*n)).collect();
        if !self.sub.skips_changes(names.len()) {
            self.sub.mark_changed(names.iter());
        }
    }

    fn request(&mut self, names: &[&str], nonce: &str, version: &str) -> RequestKind {
        self.request_full(names, nonce, version, None)
    }

    fn nack(&mut self, names: &[&str], nonce: &str, version: &str) -> RequestKind {
        self.request_full(names, nonce, version, Some("rejected by test"))
    }

    fn request_full(
        &mut self,
        names: &[&str],
        nonce: &str,
        version: &str,
        error: Option<&str>,
    ) -> RequestKind {
        let req = DiscoveryRequest {
            version_info: version.into(),
            resource_names: names.iter().map(|n| n.to_string()).collect(),
            type_url: self.sub.type_url().to_string(),
            response_nonce: nonce.into(),
            error_detail: error.map(|m| Status {
                code: 3,
                message: m.into(),
                details: vec![],
            }),
            ..Default::default()
        };
        self.sub.handle_request(&(&req).into(), None).0
    }

    fn poll(&mut self) -> Option<SotwResponse> {
        let snap = self.store.snapshot();
        self.sub
            .poll_response(&views(&snap, self.sub.type_url()), &mut self.nonces)
    }

    /// Polls and returns (names, version, nonce) of the response; panics if there is none.
    fn expect(&mut self) -> (Vec<String>, String, String) {
        let r = self.poll().expect("a response is owed");
        assert!(self.poll().is_none(), "one response settles what was owed");
        (
            r.names().iter().map(|n| n.to_string()).collect(),
            r.version_info.to_string(),
            r.nonce.to_string(),
        )
    }

    fn expect_none(&mut self) {
        if let Some(r) = self.poll() {
            panic!("no response expected, got {:?}", r.names());
        }
    }
}

#[test]
fn ack_or_nack_is_decided_by_error_detail_not_by_version() {
    let mut h = Harness::new(CLUSTER_LOAD_ASSIGNMENT, &[("a", "1")]);
    h.request(&["a"], "", "");
    let (_, version, nonce) = h.expect();
    // An ACK that reports an older version is still an ACK: only error_detail makes a NACK.
    assert_eq!(
        h.request(&["a"], &nonce, "some-other-version"),
        RequestKind::Ack {
            nonce: nonce.clone().into()
        }
    );
    h.set("a", "2");
    h.notify(&["a"]);
    let (_, v2, nonce2) = h.expect();
    assert_ne!(v2, version);
    // A NACK that reports the version just sent is still a NACK.
    match h.nack(&["a"], &nonce2, &v2) {
        RequestKind::Nack {
            rejected_version,
            message,
            ..
        } => {
            assert_eq!(rejected_version.as_deref(), Some(v2.as_str()));
            assert_eq!(message, "rejected by test");
        }
        other => panic!("expected a NACK, got {other:?}"),
    }
}

#[test]
fn nack_is_not_answered_and_the_rejected_version_is_not_resent() {
    let mut h = Harness::new(CLUSTER, &[("c", "1")]);
    h.request(&[], "", "");
    let (_, _, nonce) = h.expect();
    h.nack(&[], &nonce, "");
    h.expect_none();
    // Nothing changed: a repeated request (e.g. re-sent resource hints) still gets nothing.
    h.request(&[], "", "");
    h.expect_none();
}

#[test]
fn nack_then_ack_at_new_version() {
    let mut h = Harness::new(CLUSTER, &[("c", "bad")]);
    h.request(&[], "", "");
    let (_, v1, n1) = h.expect();
    h.nack(&[], &n1, "");
    h.set("c", "good");
    h.notify(&["c"]);
    let (names, v2, n2) = h.expect();
    assert_eq!(names, ["c"]);
    assert_ne!(v1, v2, "the fix goes out at a new version");
    assert_eq!(
        h.request(&[], &n2, &v2),
        RequestKind::Ack { nonce: n2.into() }
    );
    h.expect_none();
}

#[test]
fn every_response_has_a_fresh_nonce() {
    let mut h = Harness::new(CLUSTER_LOAD_ASSIGNMENT, &[("a", "1")]);
    h.request(&["a"], "", "");
    let mut seen = std::collections::HashSet::new();
    let (_, _, nonce) = h.expect();
    seen.insert(nonce);
    for i in 2..10 {
        h.set("a", &i.to_string());
        h.notify(&["a"]);
        let (_, _, nonce) = h.expect();
        assert!(seen.insert(nonce), "nonce reused");
    }
}

#[test]
fn stale_nonce_is_ignored() {
    let mut h = Harness::new(CLUSTER_LOAD_ASSIGNMENT, &[("a", "1"), ("b", "1")]);
    h.request(&["a"], "", "");
    let (_, _, n1) = h.expect();
    h.set("a", "2");
    h.notify(&["a"]);
    let (_, _, n2) = h.expect();
    // The client answers the first response after the server already sent the second one.
    assert_eq!(
        h.request(&["a", "b"], &n1, ""),
        RequestKind::Stale { nonce: n1.into() }
    );
    h.expect_none();
    assert_eq!(
        h.sub.names().count(),
        1,
        "a stale request changes no subscription"
    );
    // The request for the latest nonce is processed.
    assert_eq!(
        h.request(&["a", "b"], &n2, ""),
        RequestKind::Ack { nonce: n2.into() }
    );
    assert_eq!(h.expect().0, ["b"]);
}

#[test]
fn versions_are_per_type() {
    let store = Store::new();
    store
        .replace_all([input(CLUSTER, "c", "1"), input(LISTENER, "l", "1")])
        .unwrap();
    let mut nonces = NonceGen::default();
    let mut cds = SotwMachine::new(CLUSTER.into());
    let mut lds = SotwMachine::new(LISTENER.into());
    let req = |t: &str| DiscoveryRequest {
        type_url: t.into(),
        ..Default::default()
    };
    cds.handle_request(&(&req(CLUSTER)).into(), None);
    lds.handle_request(&(&req(LISTENER)).into(), None);
    let snap = store.snapshot();
    let c1 = cds
        .poll_response(&views(&snap, CLUSTER), &mut nonces)
        .unwrap();
    let l1 = lds
        .poll_response(&views(&snap, LISTENER), &mut nonces)
        .unwrap();
    store
        .apply([Change::Set(input(CLUSTER, "c", "2"))])
        .unwrap();
    cds.mark_changed([&Arc::from("c")]);
    let snap = store.snapshot();
    let c2 = cds
        .poll_response(&views(&snap, CLUSTER), &mut nonces)
        .unwrap();
    assert!(lds
        .poll_response(&views(&snap, LISTENER), &mut nonces)
        .is_none());
    assert_ne!(c1.version_info, c2.version_info);
    assert_eq!(
        snap.get(LISTENER).unwrap().version(),
        &l1.version_info,
        "LDS version did not move"
    );
}

#[test]
fn no_response_without_a_change_after_ack() {
    let mut h = Harness::new(LISTENER, &[("l", "1")]);
    h.request(&[], "", "");
    let (_, v, n) = h.expect();
    h.request(&[], &n, &v);
    h.expect_none();
    // A store change to content-identical bytes is not a change.
    h.set("l", "1");
    h.notify(&["l"]);
    h.expect_none();
}

#[test]
fn legacy_wildcard_empty_first_request_subscribes_to_everything() {
    let mut h = Harness::new(CLUSTER, &[("a", "1"), ("b", "1")]);
    h.request(&[], "", "");
    assert!(h.sub.is_wildcard());
    assert_eq!(h.expect().0, ["a", "b"]);
}

#[test]
fn four_step_wildcard_example_from_the_spec() {
    let mut h = Harness::new(LISTENER, &[("A", "1"), ("B", "1")]);
    // 1. resource_names unset: a subscription to *.
    h.request(&[], "", "");
    assert!(h.sub.is_wildcard());
    let (names, v, n) = h.expect();
    assert_eq!(names, ["A", "B"]);
    // 2. * and A: the wildcard continues, A is added.
    let (_, change) = h.sub.handle_request(
        &SotwRequest::from(&DiscoveryRequest {
            version_info: v.clone(),
            resource_names: vec!["*".into(), "A".into()],
            response_nonce: n.clone(),
            type_url: LISTENER.into(),
            ..Default::default()
        }),
        None,
    );
    assert!(h.sub.is_wildcard());
    assert_eq!(change.wildcard, None);
    assert_eq!(change.added, [Arc::from("A")]);
    // A newly subscribed name is sent, even if sent before: the full state again.
    let (names, v, n) = h.expect();
    assert_eq!(names, ["A", "B"], "full state, A not duplicated");
    // 3. only A: the wildcard ends, A continues.
    h.request(&["A"], &n, &v);
    assert!(!h.sub.is_wildcard());
    assert_eq!(
        h.sub.names().map(|n| n.to_string()).collect::<Vec<_>>(),
        ["A"]
    );
    h.expect_none();
    h.set("B", "2");
    h.notify(&["B"]);
    h.expect_none();
    // 4. unset again: now it unsubscribes from A, it is not the legacy wildcard.
    h.request(&[], &n, &v);
    assert!(!h.sub.is_wildcard());
    assert_eq!(h.sub.names().count(), 0);
    h.set("A", "2");
    h.notify(&["A"]);
    h.expect_none();
}

#[test]
fn explicit_wildcard_star_subscribes_to_everything() {
    let mut h = Harness::new(CLUSTER, &[("a", "1")]);
    h.request(&["*"], "", "");
    assert!(h.sub.is_wildcard());
    assert_eq!(h.expect().0, ["a"]);
    h.set("new", "1");
    h.notify(&["new"]);
    assert_eq!(h.expect().0, ["a", "new"]);
}

#[test]
fn full_state_types_resend_everything_on_one_change() {
    let mut h = Harness::new(CLUSTER, &[("a", "1"), ("b", "1"), ("c", "1")]);
    h.request(&[], "", "");
    h.expect();
    h.set("b", "2");
    h.notify(&["b"]);
    assert_eq!(h.expect().0, ["a", "b", "c"]);
}

#[test]
fn full_state_deletion_and_empty_response_deletes_all() {
    let mut h = Harness::new(LISTENER, &[("a", "1"), ("b", "1")]);
    h.request(&[], "", "");
    h.expect();
    h.remove("a");
    h.notify(&["a"]);
    assert_eq!(h.expect().0, ["b"]);
    h.remove("b");
    h.notify(&["b"]);
    let (names, _, _) = h.expect();
    assert!(
        names.is_empty(),
        "an empty full-state response deletes everything"
    );
}

#[test]
fn full_state_named_subscription_drops_a_deleted_resource() {
    let mut h = Harness::new(LISTENER, &[("a", "1"), ("b", "1")]);
    h.request(&["a", "b"], "", "");
    assert_eq!(h.expect().0, ["a", "b"]);
    h.remove("b");
    h.notify(&["b"]);
    assert_eq!(h.expect().0, ["a"]);
}

#[test]
fn other_types_send_only_what_changed() {
    let mut h = Harness::new(CLUSTER_LOAD_ASSIGNMENT, &[("a", "1"), ("b", "1")]);
    h.request(&["a", "b"], "", "");
    assert_eq!(h.expect().0, ["a", "b"]);
    h.set("a", "2");
    h.notify(&["a"]);
    assert_eq!(h.expect().0, ["a"]);
}

#[test]
fn newly_subscribed_name_is_sent_even_if_sent_before() {
    let mut h = Harness::new(CLUSTER_LOAD_ASSIGNMENT, &[("a", "1"), ("b", "1")]);
    h.request(&["a"], "", "");
    let (_, v, n) = h.expect();
    h.request(&["a", "b"], &n, &v);
    assert_eq!(h.expect().0, ["b"], "only the new name; a did not change");
    let n = h.sub.core.last_nonce.unwrap();
    h.request(&["b"], &n, &v);
    h.expect_none();
    h.request(&["a", "b"], &n, &v);
    assert_eq!(
        h.expect().0,
        ["a"],
        "a comes again although the client had it before"
    );
}

#[test]
fn a_subscription_to_most_names_comes_in_name_order_and_a_missing_one_when_it_appears() {
    let mut h = Harness::new(
        CLUSTER_LOAD_ASSIGNMENT,
        &[("a", "1"), ("b", "1"), ("c", "1"), ("d", "1")],
    );
    h.request(&["d", "b", "a", "x"], "", "");
    let (names, v, n) = h.expect();
    assert_eq!(names, ["a", "b", "d"]);
    h.request(&["d", "b", "a", "x"], &n, &v);
    h.expect_none();
    h.set("x", "1");
    h.notify(&["x"]);
    assert_eq!(h.expect().0, ["x"], "x was never sent");
}

#[test]
fn every_name_then_one_unsubscribed_and_subscribed_again_is_sent_again() {
    let mut h = Harness::new(
        CLUSTER_LOAD_ASSIGNMENT,
        &[("a", "1"), ("b", "1"), ("c", "1")],
    );
    h.request(&["a", "b", "c"], "", "");
    let (names, v, n) = h.expect();
    assert_eq!(names, ["a", "b", "c"]);
    h.request(&["a", "b"], &n, &v);
    h.expect_none();
    h.set("c", "2");
    h.notify(&["c"]);
    h.expect_none();
    h.request(&["a", "b", "c"], &n, &v);
    assert_eq!(h.expect().0, ["c"]);
    h.set("a", "2");
    h.notify(&["a"]);
    assert_eq!(h.expect().0, ["a"], "a changed; b and c did not");
}

#[test]
fn a_dense_subscription_is_woken_by_names_it_does_not_watch_and_sends_none_of_them() {
    let names: Vec<String> = (0..100).map(|i| format!("n{i:03}")).collect();
    let contents: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "1")).collect();
    let mut h = Harness::new(CLUSTER_LOAD_ASSIGNMENT, &contents);
    let snap = h.store.snapshot();
    let current = snap.get(CLUSTER_LOAD_ASSIGNMENT);
    let req = |names: &[String], nonce: &str| DiscoveryRequest {
        resource_names: names.to_vec(),
        type_url: CLUSTER_LOAD_ASSIGNMENT.into(),
        response_nonce: nonce.into(),
        ..Default::default()
    };
    let (_, change) = h
        .sub
        .handle_request(&(&req(&names[..70], "")).into(), current);
    assert_eq!(change.dense, Some(true), "70 of 100 names");
    let (sent, _, nonce) = h.expect();
    assert_eq!(sent, names[..70]);
    // The transport wakes it for every name of the type: the others are not its business.
    h.set("n099", "2");
    h.notify(&["n099"]);
    h.expect_none();
    h.set("n000", "2");
    h.notify(&["n000", "n099"]);
    assert_eq!(h.expect().0, ["n000"]);
    // Down to 20 names: watched by name again, every one of them.
    let nonce2 = h.sub.core.last_nonce.unwrap();
    assert_ne!(nonce, nonce2);
    let (_, change) = h
        .sub
        .handle_request(&(&req(&names[..20], &nonce2)).into(), current);
    assert_eq!(change.dense, Some(false));
    assert_eq!(
        change
            .added
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>(),
        names[..20]
    );
}

/// Past a quarter of its keys in changed names since the last response (repeats counted), a
/// subscription stops recording names and looks at every key: it sends exactly what changed,
/// and records it as sent (what follows goes out name by name again).
#[test]
fn more_changes_than_a_quarter_of_the_keys_are_found_by_looking_at_every_key() {
    for subscribed in [100, 40] {
        // 100 of 120 names: read in the view's order; 40: each key looked up.
        let names: Vec<String> = (0..120).map(|i| format!("n{i:03}")).collect();
        let contents: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "1")).collect();
        let mut h = Harness::new(CLUSTER_LOAD_ASSIGNMENT, &contents);
        let list: Vec<&str> = names[..subscribed].iter().map(|n| n.as_str()).collect();
        h.request(&list, "", "");
        let (sent, v, n) = h.expect();
        assert_eq!(sent.len(), subscribed);
        h.request(&list, &n, &v);
        // n001 changes and comes back as sent, n002 goes, n003 changes twice, the names past
        // the subscription change: 30 names offered, repeats included.
        h.set("n001", "2");
        h.set("n001", "1");
        h.remove("n002");
        h.set("n003", "2");
        h.set("n003", "3");
        h.set("n005", "2");
        let mut offered = vec!["n001", "n002", "n003", "n003", "n005"];
        for name in &names[100..120] {
            h.set(name, "2");
            offered.push(name);
        }
        offered.extend(["n001", "n003", "n005", "n005", "n001"]);
        h.notify(&offered);
        assert!(
            h.sub.check_all,
            "{subscribed} keys, {} names",
            offered.len()
        );
        assert!(h.sub.core.dirty.is_empty(), "no name recorded one by one");
        assert_eq!(h.expect().0, ["n003", "n005"]);
        // Recorded as sent: nothing more, and one change goes out alone.
        h.notify(&["n003"]);
        h.expect_none();
        h.set("n007", "2");
        h.notify(&["n007"]);
        assert!(!h.sub.check_all);
        assert_eq!(h.expect().0, ["n007"]);
        // The removed name, back as it was sent: sent again (the client was told nothing of it
        // since, but it counts as gone).
        h.set("n002", "1");
        h.notify(&["n002"]);
        assert_eq!(h.expect().0, ["n002"]);
    }
}

/// A subscription to most of a view is read beside the view, both in name order: every name
/// it holds is found whatever order its request listed them in, names of the view it does not
/// hold and names it holds that the view lacks are passed over.
#[test]
fn a_scan_in_name_order_finds_each_subscribed_name_whatever_the_request_order() {
    // Names whose order as text is not the order they are made in (n9 < n10 as numbers).
    let names: Vec<String> = (0..150).map(|i| format!("n{i}")).collect();
    let contents: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "1")).collect();
    let mut h = Harness::new(CLUSTER_LOAD_ASSIGNMENT, &contents);
    // Every other name of the first 140 and ten the store does not have, listed backwards.
    let mut list: Vec<String> = (0..140).step_by(2).map(|i| format!("n{i}")).collect();
    list.extend((0..10).map(|i| format!("m{i}")));
    list.extend((140..150).map(|i| format!("n{i}")));
    list.reverse();
    let list: Vec<&str> = list.iter().map(|n| n.as_str()).collect();
    h.request(&list, "", "");
    let (mut sent, v, n) = h.expect();
    let mut want: Vec<String> = (0..140).step_by(2).map(|i| format!("n{i}")).collect();
    want.extend((140..150).map(|i| format!("n{i}")));
    want.sort();
    assert_eq!(
        sent, want,
        "every subscribed name the store has, in name order"
    );
    h.request(&list, &n, &v);
    // Every name of the store changes: the subscription looks at every key.
    for name in &names {
        h.set(name, "2");
    }
    let changed: Vec<&str> = names.iter().map(|n| n.as_str()).collect();
    h.notify(&changed);
    assert!(h.sub.check_all);
    sent = h.expect().0;
    assert_eq!(sent, want, "each subscribed name once, the others not");
    h.notify(&changed);
    h.expect_none();
}

/// Told how many changed names are coming, a subscription past the threshold skips them all and
/// looks at every key; under it, it takes them name by name.
#[test]
fn a_batch_of_changes_past_a_quarter_of_the_keys_is_not_looked_at_name_by_name() {
    let names: Vec<String> = (0..100).map(|i| format!("n{i:03}")).collect();
    let contents: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "1")).collect();
    let mut h = Harness::new(CLUSTER_LOAD_ASSIGNMENT, &contents);
    let list: Vec<&str> = names.iter().map(|n| n.as_str()).collect();
    h.request(&list, "", "");
    let (_, v, n) = h.expect();
    h.request(&list, &n, &v);
    assert!(!h.sub.skips_changes(25), "25 of 100 keys: name by name");
    h.set("n010", "2");
    h.set("n020", "2");
    assert!(h.sub.skips_changes(26));
    assert!(h.sub.check_all && h.sub.core.dirty.is_empty());
    assert_eq!(h.expect().0, ["n010", "n020"]);
    assert!(!h.sub.skips_changes(1), "counted afresh after the response");
}

#[test]
fn resource_springing_into_existence_is_sent_when_it_appears() {
    let mut h = Harness::new(CLUSTER_LOAD_ASSIGNMENT, &[]);
    h.request(&["later"], "", "");
    h.expect_none();
    h.set("later", "1");
    h.notify(&["later"]);
    assert_eq!(h.expect().0, ["later"]);
}

#[test]
fn deleted_then_recreated_resource_is_sent_again() {
    let mut h = Harness::new(CLUSTER_LOAD_ASSIGNMENT, &[("a", "1")]);
    h.request(&["a"], "", "");
    h.expect();
    h.remove("a");
    h.notify(&["a"]);
    h.expect_none();
    h.set("a", "1");
    h.notify(&["a"]);
    assert_eq!(h.expect().0, ["a"]);
}

#[test]
fn unsubscribing_by_omission() {
    let mut h = Harness::new(CLUSTER_LOAD_ASSIGNMENT, &[("a", "1"), ("b", "1")]);
    h.request(&["a", "b"], "", "");
    let (_, v, n) = h.expect();
    let (_, change) = h.sub.handle_request(
        &SotwRequest::from(&DiscoveryRequest {
            version_info: v,
            resource_names: vec!["a".into()],
            response_nonce: n,
            ..Default::default()
        }),
        None,
    );
    assert_eq!(change.removed, [Arc::from("b")]);
    h.set("b", "2");
    h.notify(&["b"]);
    h.expect_none();
}

#[test]
fn never_two_resources_of_the_same_name_in_one_response() {
    // Wildcard plus the same name explicitly, on a type sent incrementally.
    let mut h = Harness::new(CLUSTER_LOAD_ASSIGNMENT, &[("a", "1")]);
    h.request(&["*", "a"], "", "");
    assert_eq!(h.expect().0, ["a"]);
    h.set("a", "2");
    h.notify(&["a", "a"]);
    assert_eq!(h.expect().0, ["a"]);
}

#[test]
fn wildcard_on_a_type_with_no_resources_gets_an_empty_state() {
    let mut h = Harness::new("type.googleapis.com/example.v1.Unknown", &[]);
    h.request(&[], "", "");
    let (names, _, _) = h.expect();
    assert!(names.is_empty());
}

#[test]
fn named_subscription_to_missing_full_state_resource_gets_an_empty_full_state() {
    let mut h = Harness::new(LISTENER, &[]);
    h.request(&["missing"], "", "");
    let (names, _, _) = h.expect();
    assert!(
        names.is_empty(),
        "the full state tells the client it does not exist"
    );
}

#[test]
fn first_request_with_unknown_nonce_is_not_stale() {
    // A nonce from a previous stream does not survive a reconnect: nothing newer was sent here.
    let mut h = Harness::new(CLUSTER, &[("a", "1")]);
    assert_eq!(
        h.request(&[], "nonce-from-old-stream", "v0"),
        RequestKind::Initial
    );
    assert_eq!(h.expect().0, ["a"]);
}

#[test]
fn an_ack_repeating_the_names_changes_nothing_and_a_new_list_is_still_seen() {
    let mut h = Harness::new(CLUSTER_LOAD_ASSIGNMENT, &[("a", "1"), ("b", "1")]);
    h.request(&["a", "b"], "", "");
    let (_, v, n) = h.expect();
    h.request(&["a", "b"], &n, &v);
    h.expect_none();
    // Same length, a duplicate instead of b: b is unsubscribed.
    h.request(&["a", "a"], &n, &v);
    assert_eq!(h.sub.names().count(), 1);
    h.set("b", "2");
    h.notify(&["b"]);
    h.expect_none();
}

#[test]
fn sotw_request_reads_the_wire_format_of_a_full_discovery_request() {
    use envoy_types::pb::envoy::config::core::v3::{Extension, Locality, Node};
    use prost::Message;
    let full = DiscoveryRequest {
        version_info: "v7".into(),
        node: Some(Node {
            id: "envoy-1".into(),
            cluster: "edge".into(),
            locality: Some(Locality {
                region: "r".into(),
                ..Default::default()
            }),
            user_agent_name: "envoy".into(),
            extensions: vec![Extension {
                name: "envoy.filters.http.router".into(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        resource_names: vec!["a".into(), "é".into(), "*".into()],
        type_url: CLUSTER_LOAD_ASSIGNMENT.into(),
        response_nonce: "3".into(),
        error_detail: Some(Status {
            code: 3,
            message: "bad".into(),
            details: vec![],
        }),
        ..Default::default()
    };
    let read = SotwRequest::decode(full.encode_to_vec().as_slice()).unwrap();
    assert_eq!(read, SotwRequest::from(&full));
    assert_eq!(read.node().unwrap().id, "envoy-1");
    assert_eq!(read.resource_names.iter().nth(1), Some("é".as_bytes()));
    assert_eq!(read.resource_names.len(), 3);
}

#[test]
fn sotw_request_rejects_a_name_longer_than_the_message() {
    use prost::Message;
    // Field 3 (resource_names), length-delimited, claims 100 bytes but 2 follow.
    let truncated = [0x1a, 100, b'a', b'b'];
    assert!(SotwRequest::decode(truncated.as_slice()).is_err());
}

#[test]
fn sotw_request_encodes_what_it_decodes() {
    use prost::Message;
    let request = SotwRequest::from(&DiscoveryRequest {
        version_info: "v".into(),
        resource_names: vec!["x".into(), "".into(), "yz".into()],
        type_url: CLUSTER.into(),
        response_nonce: "1".into(),
        ..Default::default()
    });
    let bytes = request.encode_to_vec();
    assert_eq!(bytes.len(), request.encoded_len());
    let full = DiscoveryRequest::decode(bytes.as_slice()).unwrap();
    assert_eq!(full.resource_names, ["x", "", "yz"]);
    assert_eq!(SotwRequest::decode(bytes.as_slice()).unwrap(), request);
}

#[test]
fn sotw_request_read_from_bytes_holds_slices_of_them() {
    use prost::Message;
    let full = DiscoveryRequest {
        version_info: "v1".into(),
        resource_names: (0..100).map(|i| format!("cluster-{i}")).collect(),
        type_url: CLUSTER_LOAD_ASSIGNMENT.into(),
        response_nonce: "17".into(),
        ..Default::default()
    };
    let frame = bytes::Bytes::from(full.encode_to_vec());
    let read = SotwRequest::decode(frame.clone()).unwrap();
    assert_eq!(read, SotwRequest::from(&full));
    let inside = |s: &[u8]| frame.as_ptr_range().contains(&s.as_ptr());
    for name in read.resource_names.iter() {
        assert!(inside(name), "a name was copied");
    }
    assert!(inside(read.type_url.as_bytes()));
    assert!(inside(read.version_info.as_bytes()));
    assert!(inside(read.response_nonce.as_bytes()));
}

#[test]
fn sotw_request_names_read_the_same_however_the_bytes_are_cut_or_placed() {
    use bytes::Buf;
    use prost::Message;
    // Names interleaved with other fields (no client does it, the format allows it), and a
    // name longer than 127 bytes (a two-byte length).
    let long = "l".repeat(200);
    let names = ["a", "", "bc", long.as_str(), "d"];
    let mut bytes = Vec::new();
    let field = |tag: u32, value: &str, out: &mut Vec<u8>| {
        prost::encoding::string::encode(tag, &value.to_string(), out)
    };
    field(3, names[0], &mut bytes);
    field(3, names[1], &mut bytes);
    field(4, CLUSTER, &mut bytes);
    field(3, names[2], &mut bytes);
    field(3, names[3], &mut bytes);
    field(5, "9", &mut bytes);
    field(3, names[4], &mut bytes);
    for cut in 0..=bytes.len() {
        let (a, b) = bytes.split_at(cut);
        let buf = bytes::Bytes::copy_from_slice(a).chain(bytes::Bytes::copy_from_slice(b));
        let read = SotwRequest::decode(buf).unwrap();
        let read_names: Vec<&[u8]> = read.resource_names.iter().collect();
        let want: Vec<&[u8]> = names.iter().map(|n| n.as_bytes()).collect();
        assert_eq!(read_names, want, "cut at {cut}");
        assert_eq!(read.resource_names.len(), names.len());
        assert_eq!((&*read.type_url, &*read.response_nonce), (CLUSTER, "9"));
        // Encoded again, it reads as the same request.
        let again = SotwRequest::decode(read.encode_to_vec().as_slice()).unwrap();
        assert_eq!(again.resource_names.iter().collect::<Vec<_>>(), want);
    }
}

#[test]
fn sotw_request_rejects_a_type_url_that_is_not_utf8() {
    use prost::Message;
    // Field 4 (type_url), two bytes that are not UTF-8.
    let bad = [0x22, 2, 0xff, 0xfe];
    assert!(SotwRequest::decode(bytes::Bytes::copy_from_slice(&bad)).is_err());
}

#[test]
fn a_type_with_no_resources_is_answered_with_a_non_empty_version() {
    // An empty version_info is what a client sends before it has seen anything: a response must
    // never carry it, also when the store has nothing of the type.
    let mut h = Harness::new(LISTENER, &[]);
    h.request(&[], "", "");
    let (names, version, _) = h.expect();
    assert!(names.is_empty());
    assert!(!version.is_empty());
}

/// Responses over the size limit go out in parts (`set_max_response_bytes`), except for listeners
/// and clusters.
mod split {
    use prost::Message as _;

    use super::*;
    use crate::transport::wire::SotwWire;

    const LIMIT: usize = 16 * 1024;

    fn all(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("r{i:03}")).collect()
    }

    /// `n` resources of about 1 KiB each, named r000, r001, ….
    fn harness(type_url: &str, n: usize) -> Harness {
        let names = all(n);
        let content = "x".repeat(1000);
        let resources: Vec<(&str, &str)> = names
            .iter()
            .map(|n| (n.as_str(), content.as_str()))
            .collect();
        let mut h = Harness::new(type_url, &resources);
        h.sub.set_max_response_bytes(LIMIT);
        h
    }

    fn drain(h: &mut Harness) -> Vec<SotwResponse> {
        let mut out: Vec<SotwResponse> = Vec::new();
        while let Some(r) = h.poll() {
            let len = SotwWire::from(r.clone()).encoded_len();
            assert!(
                len <= LIMIT,
                "a part of {len} bytes is over the {LIMIT}-byte limit"
            );
            out.push(r);
        }
        out
    }

    fn names(parts: &[SotwResponse]) -> Vec<String> {
        parts
            .iter()
            .flat_map(|r| r.names())
            .map(|n| n.to_string())
            .collect()
    }

    #[test]
    fn endpoints_over_the_size_limit_go_out_in_parts_versioned_part_n_until_the_last() {
        let mut h = harness(CLUSTER_LOAD_ASSIGNMENT, 100);
        let names_owned = all(100);
        let subscribe: Vec<&str> = names_owned.iter().map(|s| s.as_str()).collect();
        h.request(&subscribe, "", "");
        let parts = drain(&mut h);
        assert!(parts.len() >= 7, "100 KiB in 16 KiB parts: {}", parts.len());
        assert_eq!(
            names(&parts),
            all(100),
            "every resource once, in name order"
        );
        let version = parts.last().unwrap().version_info.to_string();
        assert!(!version.contains("-part-"));
        for (i, part) in parts[..parts.len() - 1].iter().enumerate() {
            assert_eq!(&*part.version_info, format!("{version}-part-{}", i + 1));
        }
        let mut nonces: Vec<&str> = parts.iter().map(|p| p.nonce.as_str()).collect();
        nonces.dedup();
        assert_eq!(nonces.len(), parts.len(), "each part has its own nonce");
    }

    #[test]
    fn listeners_and_clusters_go_out_whole_over_the_size_limit_reported_once() {
        for type_url in [LISTENER, CLUSTER] {
            let mut h = harness(type_url, 100);
            h.request(&[], "", "");
            let r = h.poll().unwrap();
            assert_eq!(r.len(), 100, "{type_url}: whole");
            assert!(r.oversized.is_some_and(|s| s > LIMIT));
            h.set("r000", "changed");
            h.notify(&["r000"]);
            let again = h.poll().unwrap();
            assert_eq!(again.len(), 100);
            assert_eq!(again.oversized, None, "reported once per stream and type");
        }
    }

    #[test]
    fn the_rest_of_a_split_sotw_response_is_computed_again_after_a_change() {
        let mut h = harness(CLUSTER_LOAD_ASSIGNMENT, 100);
        h.request(&[], "", "");
        let first = h.poll().unwrap();
        h.set("r090", "changed");
        h.notify(&["r090"]);
        h.remove("r091");
        h.notify(&["r091"]);
        let parts = drain(&mut h);
        let r090: Vec<&Arc<Resource>> = parts
            .iter()
            .flat_map(|p| match &p.resources {
                SotwResources::Some(list) => list.iter().collect::<Vec<_>>(),
                SotwResources::All(view) => view.iter().collect(),
            })
            .filter(|r| &**r.name() == "r090")
            .collect();
        assert_eq!(r090.len(), 1);
        assert_eq!(&r090[0].value()[..], b"changed".as_slice());
        let mut got = names(std::slice::from_ref(&first));
        got.extend(names(&parts));
        got.sort();
        got.dedup();
        let mut want = all(100);
        want.retain(|n| n != "r091");
        assert_eq!(got, want, "every resource that exists, the removed one not");
    }

    #[test]
    fn a_name_unsubscribed_during_a_split_is_not_sent() {
        let mut h = harness(CLUSTER_LOAD_ASSIGNMENT, 40);
        let names_owned = all(40);
        let subscribe: Vec<&str> = names_owned.iter().map(|s| s.as_str()).collect();
        h.request(&subscribe, "", "");
        let first = h.poll().unwrap();
        h.request(&subscribe[..39], &first.nonce, &first.version_info);
        let mut got = names(std::slice::from_ref(&first));
        got.extend(names(&drain(&mut h)));
        assert!(!got.contains(&"r039".to_owned()));
    }

    #[test]
    fn a_resource_in_the_rest_of_a_split_response_counts_as_not_sent() {
        let mut h = harness(CLUSTER_LOAD_ASSIGNMENT, 100);
        let names_owned = all(100);
        let subscribe: Vec<&str> = names_owned.iter().map(|s| s.as_str()).collect();
        h.request(&subscribe, "", "");
        h.poll().unwrap();
        let snap = h.store.snapshot();
        let v = views(&snap, CLUSTER_LOAD_ASSIGNMENT);
        assert!(!h.sub.has_sent(&Arc::from("r099"), &v));
        assert!(h.sub.unsent(&v).iter().any(|r| &**r.name() == "r099"));
        drain(&mut h);
        assert!(h.sub.has_sent(&Arc::from("r099"), &v));
    }
}

#[test]
fn a_reconnecting_client_that_has_the_current_version_is_resent_nothing() {
    let mut first = Harness::new(CLUSTER, &[("a", "1"), ("b", "1")]);
    first.request(&[], "", "");
    let (_, version, _) = first.expect();
    // A new stream (another replica with the same resources has the same version).
    let mut again = Harness::new(CLUSTER, &[("a", "1"), ("b", "1")]);
    again.request(&[], "", &version);
    again.expect_none();
    // Later changes go out as usual, whole (CDS is full state).
    again.set("b", "2");
    again.notify(&["b"]);
    assert_eq!(again.expect().0, ["a", "b"]);
    // A client with another version gets everything at once.
    let mut stale = Harness::new(CLUSTER, &[("a", "1"), ("b", "1")]);
    stale.request(&[], "", "some-other-version");
    assert_eq!(stale.expect().0, ["a", "b"]);
}

#[test]
fn a_name_subscribed_with_a_parameter_set_of_its_own_is_a_key_of_its_own() {
    let mut h = Harness::new(CLUSTER_LOAD_ASSIGNMENT, &[("a", "1"), ("b", "1")]);
    let located = [("a".to_string(), 1)];
    let request = |nonce: &str| SotwRequest {
        resource_names: ["a"].iter().collect(),
        type_url: CLUSTER_LOAD_ASSIGNMENT.into(),
        response_nonce: nonce.into(),
        ..Default::default()
    };
    let with = |locators| Subscribe {
        default: 0,
        locators,
        authorities: &[],
    };
    let snap = h.store.snapshot();
    let current = snap.get(CLUSTER_LOAD_ASSIGNMENT);
    let (kind, change) = h.sub.handle(&request(""), &with(&located), &[], current);
    assert_eq!(kind, RequestKind::Initial);
    assert_eq!(h.sub.key_count(), 2, "the plain name and the located one");
    assert_eq!(
        change.added,
        vec![Arc::<str>::from("a")],
        "one name to watch"
    );
    let (names, _, nonce) = h.expect();
    assert_eq!(names, ["a"], "the same variant goes out once");
    h.set("a", "2");
    h.notify(&["a"]);
    let (names, _, nonce2) = h.expect();
    assert_eq!(names, ["a"]);
    assert_ne!(nonce, nonce2);
    // The locator goes: the name stays subscribed, and watched, by its plain key.
    let (_, change) = h.sub.handle(&request(&nonce2), &with(&[]), &[], current);
    assert_eq!(h.sub.key_count(), 1);
    assert!(
        change.removed.is_empty(),
        "still subscribed by its plain name"
    );
    h.expect_none();
    // Subscribed again under its own set: a new key, sent even though the client has it.
    let (_, change) = h
        .sub
        .handle(&request(&nonce2), &with(&located), &[], current);
    assert!(change.added.is_empty(), "the name is watched already");
    assert_eq!(h.sub.key_count(), 2);
    let (names, ..) = h.expect();
    assert_eq!(names, ["a"]);
}

#[test]
fn the_control_plane_is_named_in_the_first_response_of_the_type_only() {
    let mut h = Harness::new(CLUSTER_LOAD_ASSIGNMENT, &[("a", "1")]);
    h.request(&["a"], "", "");
    let first = h.poll().expect("the first response");
    assert!(
        first.control_plane,
        "the first response names the control plane"
    );
    h.request(&["a"], &first.nonce, &first.version_info);
    h.set("a", "2");
    h.notify(&["a"]);
    let push = h.poll().expect("a push");
    assert!(!push.control_plane, "a later one does not repeat it");
}

/// Glob collections (xRFC TP1), SotW: the rules of #57.
mod glob {
    use super::*;

    const T: &str = "type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint";
    const C1: &str = "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1";

    fn n(id: &str) -> String {
        format!("{C1}/{id}")
    }

    fn harness(members: &[&str]) -> Harness {
        let names: Vec<String> = members.iter().map(|m| n(m)).collect();
        let resources: Vec<(&str, &str)> = names.iter().map(|m| (m.as_str(), "1")).collect();
        Harness::new(T, &resources)
    }

    /// The `DiscoveryResponse.resources` entry a client is sent of `resource`, decoded: its Any's
    /// type URL, and the name it carries (a `Resource` wrapper's; none in the bare body).
    fn entry_of(resource: &crate::store::Resource, encoding: Encoding) -> (String, String) {
        use prost::Message;
        let any =
            envoy_types::pb::google::protobuf::Any::decode(resource.sotw_entry(encoding).clone())
                .expect("an Any");
        let name = if any.type_url == crate::store::RESOURCE_WRAPPER {
            envoy_types::pb::envoy::service::discovery::v3::Resource::decode(any.value.as_slice())
                .expect("a Resource")
                .name
        } else {
            String::new()
        };
        (any.type_url, name)
    }

    #[test]
    fn sotw_resource_of_a_type_without_a_name_field_goes_wrapped_with_its_name_to_a_client_that_takes_wrappers(
    ) {
        let mut h = harness(&["e1"]);
        h.request(&[&n("*")], "", "");
        let response = h.poll().expect("a response");
        let sent = response
            .resources
            .iter()
            .next()
            .expect("the member")
            .clone();
        // A client that takes TTLs and wrappers (Envoy, xdsd-client): wrapped, named.
        let wraps = Encoding {
            ttl: true,
            ..Default::default()
        };
        assert_eq!(
            entry_of(&sent, wraps),
            (crate::store::RESOURCE_WRAPPER.to_owned(), n("e1"))
        );
        // One that does not: the bare body, as before.
        assert_eq!(
            entry_of(&sent, Encoding::default()),
            (T.to_owned(), String::new())
        );
        // A type with a name field goes bare to both.
        let store = store_with(CLUSTER, &[("c", "1")]);
        let snap = store.snapshot();
        let cluster = views(&snap, CLUSTER)
            .view(0)
            .iter()
            .next()
            .expect("c")
            .clone();
        assert_eq!(entry_of(&cluster, wraps).0, CLUSTER);
        // A whole view's shared body is wrapped alike.
        let snap = h.store.snapshot();
        let body = views(&snap, T).view(0).sotw_body(wraps);
        assert!(
            body.windows(n("e1").len()).any(|w| w == n("e1").as_bytes()),
            "the member's name is in the view's body"
        );
    }

    /// The keys counted against the names budget, checked against a recount of the members
    /// sent that are also subscribed by name.
    fn counted(h: &Harness) -> usize {
        let names = &h.sub.names;
        let named = h
            .sub
            .members
            .keys()
            .filter(|(n, p)| names.contains(n, *p))
            .count();
        assert_eq!(h.sub.named_members, named, "counted and recounted");
        h.sub.key_count()
    }

    #[test]
    fn sotw_held_members_a_member_also_subscribed_by_name_counts_once_and_apart_again_when_unnamed()
    {
        let mut h = harness(&["e1", "e2"]);
        let glob = n("*");
        h.request(&[&glob], "", "");
        let (_, version, nonce) = h.expect();
        assert_eq!(counted(&h), 3, "the glob and its two members");
        h.request(&[&glob, &n("e1")], &nonce, &version);
        assert_eq!(counted(&h), 3, "e1 by name and as a member counts once");
        let (_, version, nonce) = h.expect();
        h.request(&[&glob], &nonce, &version);
        assert_eq!(counted(&h), 3, "e1 a member only again");
    }

    #[test]
    fn sotw_held_members_a_glob_dropped_forgets_its_members_and_a_named_one_counts_as_a_name() {
        let mut h = harness(&["e1", "e2"]);
        let glob = n("*");
        h.request(&[&glob, &n("e2")], "", "");
        let (_, version, nonce) = h.expect();
        assert_eq!(counted(&h), 3);
        h.request(&[&n("e2")], &nonce, &version);
        assert_eq!(counted(&h), 1, "e2 by name only");
        assert!(h.sub.members.is_empty(), "the glob's members forgotten");
    }

    #[test]
    fn sotw_held_members_a_glob_dropped_looks_at_its_own_members_not_the_other_globs() {
        // c1 with 200 members, c2 with 50 (e7 of c2 also by name): dropping c2 forgets its 50
        // and looks at them alone, not at c1's 200.
        let ids: Vec<String> = (0..200).map(|i| format!("e{i:03}")).collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let mut h = harness(&ids);
        let c2 = |id: &str| format!("xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c2/{id}");
        for i in 0..50 {
            set(&h.store, T, &c2(&format!("e{i}")), "1");
        }
        let (g1, g2, named) = (n("*"), c2("*"), c2("e7"));
        h.request(&[&g1, &g2, &named], "", "");
        let (_, version, nonce) = h.expect();
        assert_eq!(
            counted(&h),
            2 + 200 + 50,
            "the globs and their members, e7 once"
        );
        super::super::members::LOOKED_AT.with(|l| l.set(0));
        h.request(&[&g1, &named], &nonce, &version);
        let looked = super::super::members::LOOKED_AT.with(|l| l.replace(0));
        assert_eq!(looked, 50, "c2's own members looked at, not c1's");
        assert_eq!(counted(&h), 1 + 200 + 1, "c1 and its members, e7 by name");
        assert_eq!(h.sub.members.len(), 200);
    }

    #[test]
    fn sotw_glob_sends_the_members_directly_under_its_path_with_equal_parameters() {
        let mut h = harness(&["e1", "e2", "sub/e3", "e4?k=v"]);
        let glob = n("*");
        h.request(&[&glob], "", "");
        assert_eq!(h.expect().0, [n("e1"), n("e2")]);
    }

    #[test]
    fn sotw_glob_members_added_and_changed_are_sent() {
        let mut h = harness(&["e1"]);
        let glob = n("*");
        h.request(&[&glob], "", "");
        let (names, version, nonce) = h.expect();
        assert_eq!(names, [n("e1")]);
        h.request(&[&glob], &nonce, &version);
        h.set(&n("e2"), "1");
        h.notify(&[&n("e2")]);
        assert_eq!(h.expect().0, [n("e2")]);
        h.set(&n("e1"), "2");
        h.notify(&[&n("e1")]);
        assert_eq!(h.expect().0, [n("e1")]);
        // Not a member: nothing.
        h.set(&n("sub/e9"), "1");
        h.notify(&[&n("sub/e9")]);
        assert!(h.poll().is_none());
    }

    #[test]
    fn sotw_glob_members_changed_and_added_are_sent_with_no_look_at_their_names() {
        // A changed member's collection is the one the store worked out when it built its
        // resource: a stream works nothing of the member's name out (it did three times per
        // member and change: marking it changed, finding its key, recording what was sent).
        let mut h = harness(&["e1"]);
        let glob = n("*");
        h.request(&[&glob], "", "");
        let (_, version, nonce) = h.expect();
        h.request(&[&glob], &nonce, &version);
        h.set(&n("e1"), "2");
        h.set(&n("e2"), "1");
        h.set(&n("sub/e9"), "1");
        crate::xdstp::WORKED_OUT.with(|w| w.set(0));
        h.notify(&[&n("e1"), &n("e2"), &n("sub/e9")]);
        assert_eq!(h.expect().0, [n("e1"), n("e2")], "not sub/e9: not a member");
        assert_eq!(crate::xdstp::WORKED_OUT.with(|w| w.get()), 0);
        assert_eq!(counted(&h), 3, "the glob and its two members");
    }

    #[test]
    fn sotw_full_state_glob_response_holds_every_member_and_drops_a_removed_one() {
        let l1 = "xdstp://a/envoy.config.listener.v3.Listener/in/l1";
        let l2 = "xdstp://a/envoy.config.listener.v3.Listener/in/l2";
        let mut h = Harness::new(LISTENER, &[(l1, "1"), (l2, "1")]);
        let glob = "xdstp://a/envoy.config.listener.v3.Listener/in/*";
        h.request(&[glob], "", "");
        let (names, version, nonce) = h.expect();
        assert_eq!(names, [l1, l2]);
        h.request(&[glob], &nonce, &version);
        h.remove(l2);
        h.notify(&[l2]);
        assert_eq!(h.expect().0, [l1]);
    }

    #[test]
    fn sotw_glob_parameters_are_matched_in_any_order() {
        // The glob subscribed as `?z=1&k=v` is the glob `?k=v&z=1`: its member is sent, under
        // its own (canonical) name; an ACK that repeats the list changes nothing.
        let mut h = harness(&["e1?k=v&z=1", "e2?k=v"]);
        let glob = n("*?z=1&k=v");
        h.request(&[&glob], "", "");
        let (names, version, nonce) = h.expect();
        assert_eq!(names, [n("e1?k=v&z=1")]);
        h.request(&[&glob], &nonce, &version);
        h.set(&n("e3?k=v&z=1"), "1");
        h.notify(&[&n("e3?k=v&z=1")]);
        assert_eq!(h.expect().0, [n("e3?k=v&z=1")]);
    }

    #[test]
    fn sotw_singleton_spelled_non_canonically_is_answered_under_the_clients_spelling() {
        // The store has `?a=1&b=2`; the client asks for `?b=2&a=1`: it is sent the resource
        // under `?b=2&a=1`, and its changes too; an ACK repeating the list changes nothing.
        let mut h = harness(&["e1?a=1&b=2"]);
        let spelled = n("e1?b=2&a=1");
        h.request(&[&spelled], "", "");
        let (names, version, nonce) = h.expect();
        assert_eq!(names, [spelled.as_str()]);
        h.request(&[&spelled], &nonce, &version);
        h.expect_none();
        h.set(&n("e1?a=1&b=2"), "2");
        h.notify(&[&n("e1?a=1&b=2")]);
        assert_eq!(h.expect().0, [spelled.as_str()]);
    }

    #[test]
    fn sotw_singleton_with_lower_case_percent_encoding_is_answered_under_the_clients_spelling() {
        // `%3a` is `%3A`; `%7E` is `~` (unreserved, decoded): one resource.
        let mut h = harness(&["e%3A1~"]);
        let spelled = n("e%3a1%7E");
        h.request(&[&spelled], "", "");
        assert_eq!(h.expect().0, [spelled]);
    }

    #[test]
    fn sotw_singleton_listed_under_two_spellings_is_sent_under_each() {
        // The canonical name and another spelling in one list: the client waits for both.
        let mut h = harness(&["e1?a=1&b=2"]);
        let spelled = n("e1?b=2&a=1");
        let canonical = n("e1?a=1&b=2");
        h.request(&[&spelled, &canonical], "", "");
        let mut names = h.expect().0;
        names.sort();
        assert_eq!(names, [canonical, spelled]);
    }

    #[test]
    fn sotw_full_state_singleton_spelled_non_canonically_is_answered_under_the_clients_spelling() {
        // Listeners: every response holds every subscribed resource, under the client's
        // spelling; one removed is left out of the next.
        let l1 = "xdstp://a/envoy.config.listener.v3.Listener/l1?a=1&b=2";
        let l2 = "xdstp://a/envoy.config.listener.v3.Listener/l2";
        let spelled = "xdstp://a/envoy.config.listener.v3.Listener/l1?b=2&a=1";
        let mut h = Harness::new(LISTENER, &[(l1, "1"), (l2, "1")]);
        h.request(&[spelled, l2], "", "");
        let (mut names, version, nonce) = h.expect();
        names.sort();
        assert_eq!(names, [spelled, l2]);
        h.request(&[spelled, l2], &nonce, &version);
        h.remove(l2);
        h.notify(&[l2]);
        assert_eq!(h.expect().0, [spelled]);
    }

    #[test]
    fn sotw_opaque_names_are_not_respelled() {
        // A name that is not xdstp is bytes: `b?y=2&x=1` is not `b?x=1&y=2`.
        let mut h = Harness::new(T, &[("b?x=1&y=2", "1")]);
        h.request(&["b?y=2&x=1"], "", "");
        assert!(h.poll().is_none_or(|r| r.is_empty()));
    }
}
