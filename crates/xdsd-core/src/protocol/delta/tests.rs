//! One test per rule of the spec's incremental protocol, driving the state machine directly.

use std::collections::HashMap;
use std::sync::Arc;

use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
use envoy_types::pb::google::rpc::Status;

use super::*;
use crate::protocol::test_support::{remove, set, store_with, views};
use crate::protocol::RequestKind;
use crate::store::{Change, ResourceInput, Store};
use crate::types::{CLUSTER, CLUSTER_LOAD_ASSIGNMENT};
use prost::Message as _;

struct Harness {
    store: Store,
    sub: DeltaMachine,
    nonces: NonceGen,
}

#[derive(Default)]
struct Req<'a> {
    subscribe: &'a [&'a str],
    unsubscribe: &'a [&'a str],
    nonce: &'a str,
    error: bool,
    initial: &'a [(&'a str, &'a str)],
}

/// (resource names, removed names) of a response.
type Seen = (Vec<String>, Vec<String>);

impl Harness {
    fn new(type_url: &str, resources: &[(&str, &str)]) -> Harness {
        Harness {
            store: store_with(type_url, resources),
            sub: DeltaMachine::new(type_url.into()),
            nonces: NonceGen::default(),
        }
    }

    fn set(&mut self, name: &str, content: &str) {
        set(&self.store, self.sub.type_url(), name, content);
        self.sub.mark_changed([&Arc::from(name)]);
    }

    fn remove(&mut self, name: &str) {
        remove(&self.store, self.sub.type_url(), name);
        self.sub.mark_changed([&Arc::from(name)]);
    }

    fn version(&self, name: &str) -> String {
        self.store
            .snapshot()
            .resource(self.sub.type_url(), name)
            .unwrap()
            .version()
            .to_string()
    }

    fn request(&mut self, r: Req<'_>) -> RequestKind {
        let req = DeltaDiscoveryRequest {
            type_url: self.sub.type_url().to_string(),
            resource_names_subscribe: r.subscribe.iter().map(|n| n.to_string()).collect(),
            resource_names_unsubscribe: r.unsubscribe.iter().map(|n| n.to_string()).collect(),
            response_nonce: r.nonce.into(),
            error_detail: r.error.then(|| Status {
                code: 3,
                message: "rejected by test".into(),
                details: vec![],
            }),
            initial_resource_versions: r
                .initial
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect::<HashMap<_, _>>(),
            ..Default::default()
        };
        let snap = self.store.snapshot();
        self.sub
            .handle_request(&(&req).into(), snap.get(self.sub.type_url()))
            .0
    }

    fn poll(&mut self) -> Option<DeltaResponse> {
        let snap = self.store.snapshot();
        self.sub
            .poll_response(&views(&snap, self.sub.type_url()), &mut self.nonces)
    }

    fn expect(&mut self) -> Seen {
        let r = self.poll().expect("a response is owed");
        assert!(self.poll().is_none(), "one response settles what was owed");
        (
            r.resources.iter().map(|r| r.name().to_string()).collect(),
            r.removed.iter().map(|n| n.to_string()).collect(),
        )
    }

    fn expect_none(&mut self) {
        if let Some(r) = self.poll() {
            panic!("no response expected, got {r:?}");
        }
    }
}

fn seen(resources: &[&str], removed: &[&str]) -> Seen {
    (
        resources.iter().map(|s| s.to_string()).collect(),
        removed.iter().map(|s| s.to_string()).collect(),
    )
}

#[test]
fn subscribe_by_name_sends_the_resource() {
    let mut h = Harness::new(CLUSTER_LOAD_ASSIGNMENT, &[("a", "1"), ("b", "1")]);
    h.request(Req {
        subscribe: &["a"],
        ..Default::default()
    });
    assert_eq!(h.expect(), seen(&["a"], &[]));
}

#[test]
fn streams_with_the_same_first_subscription_share_its_keys_and_each_changes_only_its_own() {
    let mut h = Harness::new(
        CLUSTER_LOAD_ASSIGNMENT,
        &[("shared-x", "1"), ("shared-y", "1")],
    );
    let subscribe = &["shared-x", "shared-y"];
    h.request(Req {
        subscribe,
        ..Default::default()
    });
    assert_eq!(h.expect(), seen(&["shared-x", "shared-y"], &[]));
    let first = std::mem::replace(
        &mut h.sub,
        DeltaMachine::new(CLUSTER_LOAD_ASSIGNMENT.into()),
    );
    h.request(Req {
        subscribe,
        ..Default::default()
    });
    let r = h.poll().expect("a first response");
    assert_eq!(r.resources.len(), 2);
    h.request(Req {
        nonce: &r.nonce,
        ..Default::default()
    });
    assert!(
        h.sub.names.is_shared_with(&first.names),
        "an ACK leaves the keys shared"
    );
    h.request(Req {
        subscribe: &["shared-x"],
        ..Default::default()
    });
    assert!(
        h.sub.names.is_shared_with(&first.names),
        "subscribing again to a name it has leaves them shared"
    );
    assert_eq!(h.expect(), seen(&["shared-x"], &[]), "and it is sent again");
    // The second stream unsubscribes from y: the first one still gets it.
    h.request(Req {
        unsubscribe: &["shared-y"],
        ..Default::default()
    });
    assert!(!h.sub.names.is_shared_with(&first.names));
    h.set("shared-y", "2");
    h.expect_none();
    let _second = std::mem::replace(&mut h.sub, first);
    h.sub.mark_changed([&Arc::from("shared-y")]);
    assert_eq!(h.expect(), seen(&["shared-y"], &[]));
}

#[test]
fn streams_subscribing_in_the_same_steps_share_the_keys_of_each_step() {
    let mut h = Harness::new(
        CLUSTER_LOAD_ASSIGNMENT,
        &[("step-a", "1"), ("step-b", "1"), ("step-c", "1")],
    );
    let steps = |h: &mut Harness| {
        h.request(Req {
            subscribe: &["step-a", "step-b"],
            ..Default::default()
        });
        assert_eq!(h.expect(), seen(&["step-a", "step-b"], &[]));
        h.request(Req {
            subscribe: &["step-c", "step-a"],
            ..Default::default()
        });
        // The key new to the stream is owed, and the one subscribed again.
        assert_eq!(h.expect(), seen(&["step-a", "step-c"], &[]));
    };
    steps(&mut h);
    let first = std::mem::replace(
        &mut h.sub,
        DeltaMachine::new(CLUSTER_LOAD_ASSIGNMENT.into()),
    );
    steps(&mut h);
    assert!(h.sub.names.is_shared_with(&first.names));
    assert_eq!(h.sub.key_count(), 3);
}

#[test]
fn shared_keys_that_covered_a_view_are_checked_again_against_the_next_one() {
    let names: Vec<String> = (0..100).map(|i| format!("covered-{i:03}")).collect();
    let contents: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "1")).collect();
    let mut h = Harness::new(CLUSTER_LOAD_ASSIGNMENT, &contents);
    let subscribe: Vec<&str> = names.iter().map(|n| n.as_str()).collect();
    h.request(Req {
        subscribe: &subscribe,
        ..Default::default()
    });
    assert_eq!(h.expect().0, names, "every name of the view");
    // A name the subscription does not have comes into the view: a stream subscribing to the
    // same list now is sent its names only.
    let first = std::mem::replace(
        &mut h.sub,
        DeltaMachine::new(CLUSTER_LOAD_ASSIGNMENT.into()),
    );
    set(&h.store, CLUSTER_LOAD_ASSIGNMENT, "covered-extra", "1");
    h.request(Req {
        subscribe: &subscribe,
        ..Default::default()
    });
    assert!(h.sub.names.is_shared_with(&first.names));
    assert_eq!(h.expect().0, names, "not the name it did not subscribe to");
}

#[test]
fn subscribed_name_that_does_not_exist_is_reported_removed_at_once() {
    let mut h = Harness::new(CLUSTER_LOAD_ASSIGNMENT, &[("a", "1")]);
    h.request(Req {
        subscribe: &["a", "ghost"],
        ..Default::default()
    });
    assert_eq!(h.expect(), seen(&["a"], &["ghost"]));
    // And sent when it springs into existence.
    h.set("ghost", "1");
    assert_eq!(h.expect(), seen(&["ghost"], &[]));
}

#[test]
fn a_subscription_to_most_names_comes_in_name_order_with_missing_names_removed() {
    // Over 64 names, most of the view: read in the view's order.
    let names: Vec<String> = (0..100).map(|i| format!("n{i:03}")).collect();
    let contents: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "1")).collect();
    let mut h = Harness::new(CLUSTER_LOAD_ASSIGNMENT, &contents);
    let mut subscribe: Vec<&str> = names[1..].iter().map(|n| n.as_str()).rev().collect();
    subscribe.extend(["ghost", "a-ghost"]);
    h.request(Req {
        subscribe: &subscribe,
        ..Default::default()
    });
    let expected: Vec<&str> = names[1..].iter().map(|n| n.as_str()).collect();
    assert_eq!(h.expect(), seen(&expected, &["a-ghost", "ghost"]));
    // Every name but one unsubscribed and subscribed again: it comes again.
    h.request(Req {
        unsubscribe: &["n050"],
        ..Default::default()
    });
    h.expect_none();
    h.request(Req {
        subscribe: &["n050"],
        ..Default::default()
    });
    assert_eq!(h.expect(), seen(&["n050"], &[]));
    // A name added to the store after subscribing comes when it appears; others stay quiet.
    h.set("ghost", "1");
    assert_eq!(h.expect(), seen(&["ghost"], &[]));
    h.set("n000", "1");
    h.expect_none();
}

#[test]
fn each_response_carries_only_what_changed() {
    let mut h = Harness::new(CLUSTER, &[("a", "1"), ("b", "1"), ("c", "1")]);
    h.request(Req::default());
    assert_eq!(h.expect(), seen(&["a", "b", "c"], &[]));
    h.set("b", "2");
    assert_eq!(h.expect(), seen(&["b"], &[]));
    // Content-identical bytes are not a change.
    h.set("c", "1");
    h.expect_none();
}

#[test]
fn each_resource_carries_its_own_version_and_the_response_a_system_version() {
    let mut h = Harness::new(CLUSTER, &[("a", "1"), ("b", "2")]);
    h.request(Req::default());
    let r = h.poll().unwrap();
    assert_ne!(r.resources[0].version(), r.resources[1].version());
    assert_eq!(
        &*r.system_version_info,
        &**h.store.snapshot().get(CLUSTER).unwrap().version()
    );
    assert!(!r.nonce.is_empty());
}

#[test]
fn deletion_is_sent_in_removed_resources() {
    let mut h = Harness::new(CLUSTER, &[("a", "1"), ("b", "1")]);
    h.request(Req::default());
    h.expect();
    h.remove("a");
    assert_eq!(h.expect(), seen(&[], &["a"]));
}

#[test]
fn unsubscribe_needs_no_response_and_stops_updates() {
    let mut h = Harness::new(CLUSTER_LOAD_ASSIGNMENT, &[("a", "1"), ("b", "1")]);
    h.request(Req {
        subscribe: &["a", "b"],
        ..Default::default()
    });
    h.expect();
    h.request(Req {
        unsubscribe: &["b"],
        ..Default::default()
    });
    h.expect_none();
    h.set("b", "2");
    h.expect_none();
}

#[test]
fn phantom_unsubscribe_is_ignored() {
    let mut h = Harness::new(CLUSTER_LOAD_ASSIGNMENT, &[("a", "1")]);
    h.request(Req {
        subscribe: &["a"],
        ..Default::default()
    });
    h.expect();
    let (_, change) = {
        let req = DeltaDiscoveryRequest {
            resource_names_unsubscribe: vec!["never-subscribed".into()],
            ..Default::default()
        };
        h.sub.handle_request(&(&req).into(), None)
    };
    assert!(change.removed.is_empty());
    h.expect_none();
    assert_eq!(h.sub.names().count(), 1);
}

/// A request's `SubscriptionChange` (what the transport and the observers watch anew or no
/// longer) from the request's own names, as the stream held them before it.
fn change_of(
    h: &mut Harness,
    subscribe: &[&str],
    unsubscribe: &[&str],
    pid: ParamSetId,
) -> SubscriptionChange {
    use crate::protocol::machine::Machine as _;
    let req = DeltaDiscoveryRequest {
        resource_names_subscribe: subscribe.iter().map(|n| n.to_string()).collect(),
        resource_names_unsubscribe: unsubscribe.iter().map(|n| n.to_string()).collect(),
        ..Default::default()
    };
    let with = Subscribe {
        default: pid,
        locators: &[],
        authorities: &[],
    };
    let snap = h.store.snapshot();
    h.sub
        .handle(&(&req).into(), &with, &[], snap.get(h.sub.type_url()))
        .1
}

#[test]
fn a_subscription_change_names_only_what_the_request_added_or_removed() {
    let mut h = Harness::new(
        CLUSTER_LOAD_ASSIGNMENT,
        &[("a", "1"), ("b", "1"), ("c", "1"), ("d", "1")],
    );
    let first = change_of(&mut h, &["c", "a", "b"], &[], 0);
    assert_eq!(
        first.added,
        [Arc::from("a"), "b".into(), "c".into()],
        "in order"
    );
    // `c` held already, `d` new (named twice), `a` held and let go of, `never` never held.
    let change = change_of(&mut h, &["d", "c", "d"], &["a", "never"], 0);
    assert_eq!(change.added, [Arc::from("d")]);
    assert_eq!(change.removed, [Arc::from("a")]);
    let names: Vec<&str> = h
        .sub
        .names()
        .map(|n| &**n)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(names, ["b", "c", "d"]);
    // Subscribed and unsubscribed in one request (the subscriptions are taken first): held
    // neither before nor after it, so no change.
    let both = change_of(&mut h, &["e"], &["e"], 0);
    assert!(both.added.is_empty() && both.removed.is_empty(), "{both:?}");
}

#[test]
fn a_name_held_under_two_parameter_sets_is_removed_with_the_last() {
    let mut h = Harness::new(CLUSTER_LOAD_ASSIGNMENT, &[("a", "1"), ("b", "1")]);
    assert_eq!(
        change_of(&mut h, &["a", "b"], &[], 0).added,
        [Arc::from("a"), "b".into()]
    );
    let again = change_of(&mut h, &["a"], &[], 1);
    assert!(
        again.added.is_empty(),
        "the name was watched already: {again:?}"
    );
    let one = change_of(&mut h, &[], &["a"], 0);
    assert!(
        one.removed.is_empty(),
        "still held under the other set: {one:?}"
    );
    assert_eq!(change_of(&mut h, &[], &["a"], 1).removed, [Arc::from("a")]);
    assert_eq!(change_of(&mut h, &[], &["b"], 0).removed, [Arc::from("b")]);
    assert_eq!(h.sub.names().count(), 0);
    assert!(h.sub.core.pids.is_empty(), "no parameter set held");
    assert_eq!(change_of(&mut h, &["b"], &[], 1).added, [Arc::from("b")]);
    assert_eq!(h.sub.core.pids, [1]);
}

#[test]
fn subscribe_to_a_name_the_client_has_is_still_answered() {
    let mut h = Harness::new(CLUSTER_LOAD_ASSIGNMENT, &[("a", "1")]);
    h.request(Req {
        subscribe: &["a"],
        ..Default::default()
    });
    h.expect();
    h.request(Req {
        subscribe: &["a"],
        ..Default::default()
    });
    assert_eq!(
        h.expect(),
        seen(&["a"], &[]),
        "the client may have forgotten it"
    );
}

#[test]
fn legacy_wildcard_no_names_ever_subscribed() {
    let mut h = Harness::new(CLUSTER, &[("a", "1")]);
    h.request(Req::default());
    assert!(h.sub.is_wildcard());
    assert_eq!(h.expect(), seen(&["a"], &[]));
    h.set("new", "1");
    assert_eq!(h.expect(), seen(&["new"], &[]));
}

#[test]
fn explicit_wildcard_star() {
    let mut h = Harness::new(CLUSTER, &[("a", "1")]);
    h.request(Req {
        subscribe: &["*"],
        ..Default::default()
    });
    assert!(h.sub.is_wildcard());
    assert_eq!(h.expect(), seen(&["a"], &[]));
}

#[test]
fn four_step_incremental_example_from_the_spec() {
    let mut h = Harness::new(CLUSTER, &[("A", "1"), ("B", "1")]);
    // 1. resource_names_subscribe unset: a subscription to *.
    h.request(Req::default());
    assert!(h.sub.is_wildcard());
    assert_eq!(h.expect(), seen(&["A", "B"], &[]));
    // 2. subscribe A: the wildcard continues and A is added (and answered: it was subscribed).
    h.request(Req {
        subscribe: &["A"],
        ..Default::default()
    });
    assert!(h.sub.is_wildcard());
    assert_eq!(h.sub.names().count(), 1);
    assert_eq!(h.expect(), seen(&["A"], &[]));
    // 3. unsubscribe *: A continues.
    h.request(Req {
        unsubscribe: &["*"],
        ..Default::default()
    });
    assert!(!h.sub.is_wildcard());
    h.expect_none();
    h.set("B", "2");
    h.expect_none();
    h.set("A", "2");
    assert_eq!(h.expect(), seen(&["A"], &[]));
    // 4. unsubscribe A: nothing is subscribed, and this is not the legacy wildcard.
    h.request(Req {
        unsubscribe: &["A"],
        ..Default::default()
    });
    assert!(!h.sub.is_wildcard());
    h.request(Req::default());
    assert!(
        !h.sub.is_wildcard(),
        "an empty request later is not a wildcard subscription"
    );
    h.set("A", "3");
    h.set("C", "1");
    h.expect_none();
}

#[test]
fn wildcard_and_specific_name_unsubscribe_sends_the_resource_if_still_in_the_wildcard() {
    let mut h = Harness::new(CLUSTER, &[("A", "1")]);
    h.request(Req {
        subscribe: &["*", "A"],
        ..Default::default()
    });
    h.expect();
    h.request(Req {
        unsubscribe: &["A"],
        ..Default::default()
    });
    assert_eq!(
        h.expect(),
        seen(&["A"], &[]),
        "A is still covered by the wildcard"
    );
}

#[test]
fn wildcard_and_specific_name_unsubscribe_reports_removed_if_not_in_the_wildcard() {
    let mut h = Harness::new(CLUSTER, &[("A", "1")]);
    h.request(Req {
        subscribe: &["*", "ghost"],
        ..Default::default()
    });
    assert_eq!(h.expect(), seen(&["A"], &["ghost"]));
    h.request(Req {
        unsubscribe: &["ghost"],
        ..Default::default()
    });
    assert_eq!(h.expect(), seen(&[], &["ghost"]));
}

#[test]
fn ack_and_nack_are_paired_by_nonce_and_decided_by_error_detail() {
    let mut h = Harness::new(CLUSTER, &[("a", "1")]);
    assert_eq!(h.request(Req::default()), RequestKind::Initial);
    let r = h.poll().unwrap();
    assert_eq!(
        h.request(Req {
            nonce: &r.nonce,
            ..Default::default()
        }),
        RequestKind::Ack {
            nonce: r.nonce.to_string().into()
        }
    );
    h.set("a", "2");
    let r2 = h.poll().unwrap();
    match h.request(Req {
        nonce: &r2.nonce,
        error: true,
        ..Default::default()
    }) {
        RequestKind::Nack {
            nonce,
            rejected_version,
            message,
        } => {
            assert_eq!(r2.nonce, nonce);
            assert_eq!(rejected_version, Some(r2.system_version_info.clone()));
            assert_eq!(message, "rejected by test");
        }
        other => panic!("expected a NACK, got {other:?}"),
    }
}

#[test]
fn nacked_resource_version_is_not_resent_until_it_changes() {
    let mut h = Harness::new(CLUSTER, &[("a", "bad")]);
    h.request(Req::default());
    let r = h.poll().unwrap();
    h.request(Req {
        nonce: &r.nonce,
        error: true,
        ..Default::default()
    });
    h.expect_none();
    h.set("a", "good");
    assert_eq!(h.expect(), seen(&["a"], &[]));
}

#[test]
fn subscription_change_is_honoured_even_with_a_stale_nonce() {
    let mut h = Harness::new(CLUSTER_LOAD_ASSIGNMENT, &[("a", "1"), ("b", "1")]);
    h.request(Req {
        subscribe: &["a"],
        ..Default::default()
    });
    let r1 = h.poll().unwrap();
    h.set("a", "2");
    let _r2 = h.poll().unwrap();
    // The client ACKs the first response (stale now) and subscribes to b in the same request.
    h.request(Req {
        subscribe: &["b"],
        nonce: &r1.nonce,
        ..Default::default()
    });
    assert_eq!(h.expect(), seen(&["b"], &[]));
}

#[test]
fn reconnect_with_initial_resource_versions_sends_only_differences() {
    let mut h = Harness::new(CLUSTER, &[("same", "1"), ("changed", "2"), ("new", "1")]);
    let same = h.version("same");
    h.request(Req {
        initial: &[
            ("same", &same),
            ("changed", "old-version"),
            ("deleted", "v"),
        ],
        ..Default::default()
    });
    assert_eq!(
        h.expect(),
        seen(&["changed", "new"], &["deleted"]),
        "unchanged not resent, changed resent, deleted removed"
    );
}

#[test]
fn reconnect_with_named_subscriptions_and_initial_versions() {
    let mut h = Harness::new(CLUSTER_LOAD_ASSIGNMENT, &[("a", "1"), ("b", "2")]);
    let a = h.version("a");
    h.request(Req {
        subscribe: &["a", "b", "gone"],
        initial: &[("a", &a), ("b", "old"), ("gone", "v")],
        ..Default::default()
    });
    assert_eq!(h.expect(), seen(&["b"], &["gone"]));
}

#[test]
fn first_request_is_answered_even_when_nothing_differs() {
    let mut h = Harness::new(CLUSTER, &[("a", "1")]);
    let a = h.version("a");
    h.request(Req {
        initial: &[("a", &a)],
        ..Default::default()
    });
    assert_eq!(
        h.expect(),
        seen(&[], &[]),
        "an empty answer lets the client finish its initial fetch"
    );
}

#[test]
fn wildcard_on_a_type_with_no_resources_gets_an_empty_state() {
    let mut h = Harness::new("type.googleapis.com/example.v1.Unknown", &[]);
    h.request(Req::default());
    assert_eq!(h.expect(), seen(&[], &[]));
}

#[test]
fn many_updates_coalesce_into_the_latest_state() {
    let mut h = Harness::new(CLUSTER, &[("a", "0")]);
    h.request(Req::default());
    h.expect();
    for i in 1..100 {
        h.set("a", &i.to_string());
        h.set(&format!("tmp{}", i % 3), &i.to_string());
    }
    h.remove("tmp0");
    let r = h.poll().unwrap();
    let names: Vec<&str> = r.resources.iter().map(|r| &**r.name()).collect();
    assert_eq!(
        names,
        ["a", "tmp1", "tmp2"],
        "one response with the latest of each"
    );
    assert!(
        r.removed.is_empty(),
        "tmp0 never reached the client, so nothing to remove"
    );
    assert_eq!(r.resources[0].version(), &Arc::from(h.version("a")));
}

mod aliases {
    use super::*;
    use crate::types::{ROUTE_CONFIGURATION, VIRTUAL_HOST};
    use envoy_types::pb::envoy::config::core::v3::ConfigSource;
    use envoy_types::pb::envoy::config::route::v3::{RouteConfiguration, Vhds, VirtualHost};
    use prost::Message;

    fn vhds_harness(domains: &[&str]) -> Harness {
        let h = Harness::new(VIRTUAL_HOST, &[]);
        h.store.replace_all([route(domains)]).unwrap();
        h
    }

    fn route(domains: &[&str]) -> ResourceInput {
        let rc = RouteConfiguration {
            name: "rc".into(),
            virtual_hosts: vec![VirtualHost {
                name: "web".into(),
                domains: domains.iter().map(|d| d.to_string()).collect(),
                ..Default::default()
            }],
            vhds: Some(Vhds {
                config_source: Some(ConfigSource::default()),
            }),
            ..Default::default()
        };
        ResourceInput::new(ROUTE_CONFIGURATION, "rc", rc.encode_to_vec().into())
    }

    #[test]
    fn subscribe_by_alias_sends_the_resource_under_its_name_with_aliases() {
        let mut h = vhds_harness(&["a.example"]);
        h.request(Req {
            subscribe: &["rc/a.example"],
            ..Default::default()
        });
        let r = h.poll().unwrap();
        assert_eq!(&**r.resources[0].name(), "rc/web");
        assert_eq!(r.resources[0].aliases(), [Arc::from("rc/a.example")]);
    }

    #[test]
    fn name_and_alias_of_the_same_resource_send_it_once() {
        let mut h = vhds_harness(&["a.example"]);
        h.request(Req {
            subscribe: &["rc/web", "rc/a.example"],
            ..Default::default()
        });
        assert_eq!(h.expect(), seen(&["rc/web"], &[]));
    }

    #[test]
    fn alias_of_an_unknown_domain_is_answered_with_a_resource_carrying_the_alias_and_no_body() {
        use crate::transport::wire::DeltaWire;
        use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryResponse;
        let mut h = vhds_harness(&["a.example"]);
        h.request(Req {
            subscribe: &["rc/unknown.example"],
            ..Default::default()
        });
        let r = h.poll().unwrap();
        assert!(r.removed.is_empty(), "not a removal: Envoy would wait on");
        assert_eq!(r.unresolved, [Arc::from("rc/unknown.example")]);
        let wire = DeltaDiscoveryResponse::decode(&*DeltaWire::from(r).encode_to_vec()).unwrap();
        assert_eq!(wire.resources.len(), 1);
        let entry = &wire.resources[0];
        assert_eq!(entry.name, "rc/unknown.example");
        assert_eq!(entry.aliases, ["rc/unknown.example"]);
        assert!(entry.resource.is_none());
        assert!(!entry.version.is_empty());
        // When the domain appears, its virtual host is sent.
        h.store
            .apply([Change::Set(route(&["a.example", "unknown.example"]))])
            .unwrap();
        h.sub.mark_changed([&Arc::from("rc/unknown.example")]);
        assert_eq!(h.expect(), seen(&["rc/web"], &[]));
    }

    #[test]
    fn a_virtual_host_held_through_an_alias_is_removed_under_its_name() {
        let mut h = vhds_harness(&["a.example"]);
        h.request(Req {
            subscribe: &["rc/a.example"],
            ..Default::default()
        });
        assert_eq!(h.expect(), seen(&["rc/web"], &[]));
        h.store
            .apply([Change::Remove {
                type_url: ROUTE_CONFIGURATION.into(),
                name: "rc".into(),
            }])
            .unwrap();
        h.sub.mark_changed([&Arc::from("rc/a.example")]);
        assert_eq!(
            h.expect(),
            seen(&[], &["rc/web"]),
            "the client holds it as rc/web, not by the alias it asked with"
        );
    }

    #[test]
    fn change_seen_through_an_alias_is_sent_once() {
        let mut h = vhds_harness(&["a.example"]);
        h.request(Req {
            subscribe: &["rc/a.example"],
            ..Default::default()
        });
        h.expect();
        h.store
            .apply([Change::Set(route(&["a.example", "b.example"]))])
            .unwrap();
        h.sub
            .mark_changed([&Arc::from("rc/a.example"), &Arc::from("rc/web")]);
        assert_eq!(h.expect(), seen(&["rc/web"], &[]));
        h.sub.mark_changed([&Arc::from("rc/a.example")]);
        h.expect_none();
    }
}

#[test]
fn after_unsubscribing_the_legacy_wildcard_an_empty_ack_does_not_bring_it_back() {
    let mut h = Harness::new(CLUSTER, &[("a", "1")]);
    h.request(Req::default());
    let r = h.poll().unwrap();
    h.request(Req {
        unsubscribe: &["*"],
        nonce: &r.nonce,
        ..Default::default()
    });
    assert!(!h.sub.is_wildcard());
    h.request(Req::default());
    assert!(
        !h.sub.is_wildcard(),
        "an empty request after an explicit unsubscription is not `*`"
    );
    h.set("b", "1");
    h.expect_none();
}

/// Responses over the size limit go out in parts (`set_max_response_bytes`).
mod split {
    use prost::Message as _;

    use super::*;
    use crate::transport::wire::DeltaWire;

    const LIMIT: usize = 16 * 1024;

    /// `n` resources of about 1 KiB each, named r000, r001, ….
    fn harness(type_url: &str, n: usize) -> Harness {
        let names: Vec<String> = (0..n).map(|i| format!("r{i:03}")).collect();
        let content = "x".repeat(1000);
        let resources: Vec<(&str, &str)> = names
            .iter()
            .map(|n| (n.as_str(), content.as_str()))
            .collect();
        let mut h = Harness::new(type_url, &resources);
        h.sub.set_max_response_bytes(LIMIT);
        h
    }

    /// Every response until none is owed: each under the limit, each with its own nonce.
    fn drain(h: &mut Harness) -> Vec<DeltaResponse> {
        let mut out: Vec<DeltaResponse> = Vec::new();
        while let Some(r) = h.poll() {
            let len = DeltaWire::from(r.clone()).encoded_len();
            assert!(
                len <= LIMIT,
                "a part of {len} bytes is over the {LIMIT}-byte limit"
            );
            assert!(
                out.iter().all(|o| o.nonce != r.nonce),
                "parts have their own nonces"
            );
            out.push(r);
        }
        out
    }

    fn names(parts: &[DeltaResponse]) -> Vec<String> {
        parts
            .iter()
            .flat_map(|r| r.resources.iter().map(|r| r.name().to_string()))
            .collect()
    }

    fn all(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("r{i:03}")).collect()
    }

    #[test]
    fn a_response_over_the_size_limit_goes_out_in_parts_each_under_it() {
        let mut h = harness(CLUSTER, 100);
        h.request(Req::default());
        let parts = drain(&mut h);
        assert!(
            parts.len() >= 7,
            "100 KiB in 16 KiB parts: {} parts",
            parts.len()
        );
        assert_eq!(
            names(&parts),
            all(100),
            "every resource once, in name order"
        );
    }

    #[test]
    fn the_rest_of_a_split_response_is_computed_again_after_a_change() {
        let mut h = harness(CLUSTER, 100);
        h.request(Req::default());
        let first = h.poll().unwrap();
        assert!(!names(std::slice::from_ref(&first)).contains(&"r090".to_owned()));
        // The store changes a resource still owed, and removes another still owed.
        h.set("r090", "changed");
        h.remove("r091");
        let parts = drain(&mut h);
        let rest = names(&parts);
        assert_eq!(rest.iter().filter(|n| *n == "r090").count(), 1);
        let r090 = parts
            .iter()
            .flat_map(|p| &p.resources)
            .find(|r| &**r.name() == "r090")
            .unwrap();
        assert_eq!(
            r090.version().to_string(),
            h.version("r090"),
            "the new version"
        );
        assert!(
            !rest.contains(&"r091".to_owned()),
            "a removed resource is not sent"
        );
        assert!(
            parts.iter().all(|p| p.removed.is_empty()),
            "nor reported removed: the client never had it"
        );
        let mut got = names(std::slice::from_ref(&first));
        got.extend(rest);
        got.sort();
        let mut want = all(100);
        want.retain(|n| n != "r091");
        assert_eq!(got, want);
    }

    #[test]
    fn a_resubscribed_resource_stays_owed_across_a_split_and_a_change() {
        let mut h = harness(CLUSTER_LOAD_ASSIGNMENT, 40);
        let names_owned = all(40);
        let subscribe: Vec<&str> = names_owned.iter().map(|s| s.as_str()).collect();
        // The client says it has every resource at its current version, and subscribes: what
        // it has is not sent again.
        let versions: Vec<(String, String)> = names_owned
            .iter()
            .map(|n| (n.clone(), h.version(n)))
            .collect();
        let initial: Vec<(&str, &str)> = versions
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        h.request(Req {
            subscribe: &subscribe,
            initial: &initial,
            ..Default::default()
        });
        assert!(h.poll().is_none_or(|r| r.resources.is_empty()));
        // Subscribing again forces every one of them out (the client may have forgotten them),
        // in parts; a change in between does not make the rest look already held.
        h.request(Req {
            subscribe: &subscribe,
            ..Default::default()
        });
        let first = h.poll().unwrap();
        h.set("r000", "changed");
        let mut got = names(std::slice::from_ref(&first));
        got.extend(names(&drain(&mut h)));
        got.sort();
        got.dedup();
        assert_eq!(got, all(40));
    }

    #[test]
    fn a_key_unsubscribed_during_a_split_is_not_sent() {
        let mut h = harness(CLUSTER_LOAD_ASSIGNMENT, 40);
        let names_owned = all(40);
        let subscribe: Vec<&str> = names_owned.iter().map(|s| s.as_str()).collect();
        h.request(Req {
            subscribe: &subscribe,
            ..Default::default()
        });
        let first = h.poll().unwrap();
        h.request(Req {
            unsubscribe: &["r039"],
            ..Default::default()
        });
        let mut got = names(std::slice::from_ref(&first));
        got.extend(names(&drain(&mut h)));
        assert!(!got.contains(&"r039".to_owned()));
        assert_eq!(got.len(), 39);
    }

    #[test]
    fn removals_over_the_size_limit_go_out_in_parts() {
        let long: Vec<String> = (0..2000)
            .map(|i| format!("{i:04}-{}", "n".repeat(40)))
            .collect();
        let resources: Vec<(&str, &str)> = long.iter().map(|n| (n.as_str(), "1")).collect();
        let mut h = Harness::new(CLUSTER, &resources);
        h.sub.set_max_response_bytes(LIMIT);
        h.request(Req::default());
        drain(&mut h);
        h.store.replace_all(std::iter::empty()).unwrap();
        let changed: Vec<Arc<str>> = long.iter().map(|n| Arc::from(n.as_str())).collect();
        h.sub.mark_changed(changed.iter());
        let parts = drain(&mut h);
        assert!(
            parts.len() >= 6,
            "about 96 KiB of removals: {} parts",
            parts.len()
        );
        let mut removed: Vec<String> = parts
            .iter()
            .flat_map(|p| p.removed.iter().map(|n| n.to_string()))
            .collect();
        removed.sort();
        assert_eq!(removed, long);
    }

    #[test]
    fn one_resource_over_the_size_limit_goes_alone_and_is_reported_once() {
        let big = "x".repeat(LIMIT * 2);
        let mut h = Harness::new(CLUSTER, &[("a", "1"), ("big", &big), ("c", "1")]);
        h.sub.set_max_response_bytes(LIMIT);
        h.request(Req::default());
        let mut parts = Vec::new();
        while let Some(r) = h.poll() {
            parts.push(r);
        }
        let big_part = parts
            .iter()
            .find(|p| p.resources.iter().any(|r| &**r.name() == "big"))
            .unwrap();
        assert_eq!(big_part.resources.len(), 1, "alone");
        assert!(big_part.oversized.is_some_and(|s| s > LIMIT));
        h.set("big", &"y".repeat(LIMIT * 2));
        let again = h.poll().unwrap();
        assert_eq!(again.resources.len(), 1);
        assert_eq!(again.oversized, None, "reported once per stream and type");
    }

    #[test]
    fn a_response_sent_whole_or_to_its_last_part_leaves_no_room_for_a_rest() {
        // Whole: no size limit.
        let mut h = harness(CLUSTER, 100);
        h.sub.set_max_response_bytes(usize::MAX);
        h.request(Req::default());
        let whole = h.poll().expect("the whole view");
        assert!(h.poll().is_none(), "in one response");
        assert_eq!(names(&[whole]), all(100));
        assert_eq!(
            h.sub.split.capacity(),
            0,
            "what a response owed is not kept once it went out whole"
        );
        // In parts: room for the rest while there is one, none after the last part.
        let mut h = harness(CLUSTER, 100);
        h.request(Req::default());
        let first = h.poll().expect("a first part");
        assert!(!h.sub.split.is_empty(), "the rest is owed");
        let rest = drain(&mut h);
        assert_eq!(names(&[vec![first], rest].concat()), all(100));
        assert_eq!(
            h.sub.split.capacity(),
            0,
            "nothing kept after the last part"
        );
        // A change then goes out whole, and keeps nothing either.
        h.set("r050", "changed");
        let change = drain(&mut h);
        assert_eq!(names(&change), ["r050"]);
        assert_eq!(h.sub.split.capacity(), 0);
    }
}

/// A first subscription owes every key it names without listing them apart (`forced_all`): what
/// the requests before the response add or take away is what the response carries.
mod first_subscription {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("n{i:03}")).collect()
    }

    fn harness(n: usize) -> Harness {
        let all = names(n);
        let contents: Vec<(&str, &str)> = all.iter().map(|n| (n.as_str(), "1")).collect();
        Harness::new(CLUSTER_LOAD_ASSIGNMENT, &contents)
    }

    #[test]
    fn names_subscribed_and_unsubscribed_before_the_first_response_are_what_it_carries() {
        let mut h = harness(100);
        let all = names(100);
        let first: Vec<&str> = all[..80].iter().map(|n| n.as_str()).collect();
        h.request(Req {
            subscribe: &first,
            ..Default::default()
        });
        // Before the response: one more name, one taken away, one that does not exist.
        h.request(Req {
            subscribe: &["n090", "ghost"],
            unsubscribe: &["n010"],
            ..Default::default()
        });
        let mut expected: Vec<&str> = first.iter().copied().filter(|n| *n != "n010").collect();
        expected.push("n090");
        assert_eq!(h.expect(), seen(&expected, &["ghost"]));
        // Settled: a later change of a subscribed name comes alone, of another not at all.
        h.set("n000", "2");
        assert_eq!(h.expect(), seen(&["n000"], &[]));
        h.set("n010", "2");
        h.expect_none();
    }

    #[test]
    fn names_subscribed_again_after_unsubscribing_every_name_are_sent_again() {
        let mut h = harness(3);
        h.request(Req {
            subscribe: &["n000", "n001"],
            ..Default::default()
        });
        assert_eq!(h.expect(), seen(&["n000", "n001"], &[]));
        h.request(Req {
            unsubscribe: &["n000", "n001"],
            ..Default::default()
        });
        h.expect_none();
        h.request(Req {
            subscribe: &["n001"],
            ..Default::default()
        });
        assert_eq!(h.expect(), seen(&["n001"], &[]), "it may have forgotten it");
    }

    #[test]
    fn names_subscribed_under_the_wildcard_with_a_resend_owed_are_each_sent_once() {
        let mut h = harness(100);
        h.request(Req {
            subscribe: &["*"],
            ..Default::default()
        });
        assert_eq!(h.expect().0.len(), 100);
        // The first names of a client that holds everything through the wildcard, and a resend
        // of a name only the wildcard covers: both owed, each once.
        let all = names(100);
        let some: Vec<&str> = all[..70].iter().map(|n| n.as_str()).collect();
        h.request(Req {
            subscribe: &some,
            ..Default::default()
        });
        h.sub.resend(&Arc::from("n099"));
        let mut expected = some.clone();
        expected.push("n099");
        assert_eq!(h.expect(), seen(&expected, &[]));
        h.expect_none();
    }

    #[test]
    fn reconnect_with_initial_resource_versions_sends_only_differences_of_many_names() {
        let mut h = harness(100);
        let v = h.version("n000");
        let all = names(100);
        let subscribe: Vec<&str> = all.iter().map(|n| n.as_str()).collect();
        let initial: Vec<(&str, &str)> =
            all[..90].iter().map(|n| (n.as_str(), v.as_str())).collect();
        h.request(Req {
            subscribe: &subscribe,
            initial: &initial,
            ..Default::default()
        });
        let expected: Vec<&str> = subscribe[90..].to_vec();
        assert_eq!(h.expect(), seen(&expected, &[]));
    }
}

/// A wildcard client sent a whole view holds it as the view (`Holdings::base`), with what differs
/// from it apart: each rule below holds as with one entry per key.
mod held_view {
    use super::*;

    fn harness() -> Harness {
        let mut h = Harness::new(CLUSTER, &[("a", "1"), ("b", "1"), ("c", "1")]);
        h.request(Req::default());
        assert_eq!(h.expect(), seen(&["a", "b", "c"], &[]));
        assert!(h.sub.has.base.is_some(), "held as the view");
        assert!(h.sub.has.over.is_empty(), "no key apart");
        h
    }

    fn has_sent(h: &Harness, name: &str) -> bool {
        let snap = h.store.snapshot();
        h.sub
            .has_sent(&Arc::from(name), &views(&snap, h.sub.type_url()))
    }

    #[test]
    fn a_resource_changed_then_changed_back_is_sent_each_time() {
        let mut h = harness();
        let v1 = h.version("b");
        h.set("b", "2");
        assert_eq!(h.expect(), seen(&["b"], &[]));
        assert!(has_sent(&h, "b"));
        h.set("b", "1");
        assert_eq!(h.expect(), seen(&["b"], &[]), "back to the content it had");
        assert_eq!(h.sub.client_version("b").map(|v| v.to_string()), Some(v1));
        assert!(has_sent(&h, "a") && has_sent(&h, "c"));
    }

    #[test]
    fn a_resource_removed_then_added_back_with_its_old_content_is_sent_again() {
        let mut h = harness();
        h.remove("b");
        assert_eq!(h.expect(), seen(&[], &["b"]));
        assert_eq!(h.sub.client_version("b"), None);
        h.set("b", "1");
        assert_eq!(h.expect(), seen(&["b"], &[]), "the client dropped it");
        h.set("d", "1");
        assert_eq!(h.expect(), seen(&["d"], &[]));
        h.expect_none();
    }

    #[test]
    fn unsubscribing_the_wildcard_keeps_the_names_subscribed_held() {
        let mut h = harness();
        h.request(Req {
            subscribe: &["a"],
            ..Default::default()
        });
        assert_eq!(h.expect(), seen(&["a"], &[]));
        h.request(Req {
            subscribe: &["c"],
            unsubscribe: &["*"],
            ..Default::default()
        });
        assert_eq!(h.expect(), seen(&["c"], &[]));
        assert!(
            h.sub.has.base.is_none(),
            "what stays held is held key by key"
        );
        h.set("b", "2");
        h.expect_none();
        assert!(!has_sent(&h, "b"));
        h.remove("c");
        assert_eq!(h.expect(), seen(&[], &["c"]));
        h.set("a", "2");
        assert_eq!(h.expect(), seen(&["a"], &[]));
    }

    #[test]
    fn a_name_unsubscribed_under_the_wildcard_is_sent_again_and_stays_held() {
        let mut h = harness();
        h.request(Req {
            subscribe: &["b"],
            ..Default::default()
        });
        assert_eq!(h.expect(), seen(&["b"], &[]));
        h.request(Req {
            unsubscribe: &["b"],
            ..Default::default()
        });
        assert_eq!(h.expect(), seen(&["b"], &[]), "still in the wildcard");
        h.set("b", "2");
        assert_eq!(h.expect(), seen(&["b"], &[]));
    }

    #[test]
    fn a_client_that_reconnects_with_versions_is_held_key_by_key() {
        let mut h = Harness::new(CLUSTER, &[("a", "1"), ("b", "1")]);
        let va = h.version("a");
        h.request(Req {
            initial: &[("a", va.as_str())],
            ..Default::default()
        });
        assert_eq!(h.expect(), seen(&["b"], &[]));
        assert!(h.sub.has.base.is_none());
        h.set("a", "2");
        assert_eq!(h.expect(), seen(&["a"], &[]));
    }

    #[test]
    fn a_view_sent_in_parts_is_held_up_to_the_last_part_sent() {
        let names: Vec<String> = (0..40).map(|i| format!("r{i:03}")).collect();
        let content = "x".repeat(1000);
        let resources: Vec<(&str, &str)> = names
            .iter()
            .map(|n| (n.as_str(), content.as_str()))
            .collect();
        let mut h = Harness::new(CLUSTER, &resources);
        h.sub.set_max_response_bytes(8 * 1024);
        h.request(Req::default());
        let first = h.poll().expect("a first part");
        let sent = first.resources.len();
        assert!(sent < 40);
        assert!(has_sent(&h, &names[sent - 1]));
        assert!(!has_sent(&h, &names[sent]), "not sent yet");
        // A change to a name already sent, in the middle: the rest is computed again.
        h.set(&names[0], "changed");
        let mut rest: Vec<String> = Vec::new();
        while let Some(r) = h.poll() {
            rest.extend(r.resources.iter().map(|r| r.name().to_string()));
        }
        rest.sort();
        let mut want: Vec<String> = names[sent..].to_vec();
        want.push(names[0].clone());
        want.sort();
        assert_eq!(rest, want);
        assert!(names.iter().all(|n| has_sent(&h, n)));
    }
}

/// A first response that sends a whole view in its order (every name subscribed, or a
/// wildcard), whole or in parts, or its first names, carries the view's entries as runs,
/// encoded once and shared by every stream that sends them; its bytes are those of the
/// resources one by one. A response that skips a name before one it sends, or sends anything
/// else besides, lists its resources one by one.
#[test]
fn a_first_response_of_a_whole_view_shares_the_view_s_encoding() {
    use crate::transport::wire::{Chunks, DeltaWire};
    let all: Vec<String> = (0..100).map(|i| format!("n{i:03}")).collect();
    let contents: Vec<(&str, &str)> = all.iter().map(|n| (n.as_str(), "1")).collect();
    let refs: Vec<&str> = all.iter().map(|n| n.as_str()).collect();
    let bytes = |r: &DeltaResponse| DeltaWire::from(r.clone()).encode_to_vec();
    let one_by_one = |r: &DeltaResponse| {
        let mut r = r.clone();
        r.whole = None;
        DeltaWire::from(r).encode_to_vec()
    };
    for wildcard in [false, true] {
        let mut h = Harness::new(CLUSTER, &contents);
        let subscribe: &[&str] = if wildcard { &["*"] } else { &refs };
        h.request(Req {
            subscribe,
            ..Default::default()
        });
        let r = h.poll().expect("the view");
        assert_eq!(r.resources.len(), 100);
        let whole = r.whole.clone().expect("sent whole");
        let snap = h.store.snapshot();
        let view = views(&snap, CLUSTER).view(0).clone();
        assert_eq!(
            Some(whole),
            view.delta_run(r.encoding, 0, 100),
            "the view's own bytes"
        );
        assert_eq!(bytes(&r), one_by_one(&r), "the same bytes as one by one");
        assert_eq!(
            DeltaWire::from(r.clone()).encoded_len(),
            one_by_one(&r).len()
        );
        // As the transport writes it: the message header, then the pieces.
        let mut chunks = Chunks::new(r.clone()).expect("small enough");
        let mut written = Vec::new();
        while let Some(chunk) = chunks.next_chunk() {
            written.extend_from_slice(&chunk);
        }
        assert_eq!(
            written[5..],
            one_by_one(&r)[..],
            "the pieces write the same bytes"
        );
        // A later response sends changes one by one.
        h.set("n007", "2");
        let r = h.poll().expect("the change");
        assert!(r.whole.is_none());
    }
    // The view in parts (a size limit): each part the next run of the view's bytes.
    for wildcard in [false, true] {
        let mut h = Harness::new(CLUSTER, &contents);
        h.sub.core.max_response_bytes = 1_000;
        let subscribe: &[&str] = if wildcard { &["*"] } else { &refs };
        h.request(Req {
            subscribe,
            ..Default::default()
        });
        let mut names = Vec::new();
        let mut parts = 0;
        while let Some(r) = h.poll() {
            parts += 1;
            assert!(r.whole.is_some(), "part {parts} is a run of the view");
            assert_eq!(bytes(&r), one_by_one(&r), "part {parts}");
            names.extend(r.resources.iter().map(|r| r.name().to_string()));
        }
        assert!(parts > 2, "{parts} parts");
        assert_eq!(names, all, "every resource once, in order");
    }
    // All but the first name: not a run of the view.
    let mut h = Harness::new(CLUSTER, &contents);
    h.request(Req {
        subscribe: &refs[1..],
        ..Default::default()
    });
    let r = h.poll().expect("most of the view");
    assert_eq!(r.resources.len(), 99);
    assert!(r.whole.is_none());
    // The first 90 names (the last ones skipped): the view's first run.
    let mut h = Harness::new(CLUSTER, &contents);
    h.request(Req {
        subscribe: &refs[..90],
        ..Default::default()
    });
    let r = h.poll().expect("most of the view");
    assert_eq!(r.resources.len(), 90);
    let snap = h.store.snapshot();
    let view = views(&snap, CLUSTER).view(0).clone();
    assert_eq!(r.whole, view.delta_run(r.encoding, 0, 90));
    assert_eq!(bytes(&r), one_by_one(&r));
}

/// A first response to most names of a view, sent in its order, is held as the view too
/// (`Holdings::base`), the view's names it did not send apart as not held: each rule below holds
/// as with one entry per key.
mod held_names {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("n{i:03}")).collect()
    }

    /// 100 names in the store; the client subscribes to all but every tenth.
    fn harness() -> (Harness, Vec<String>) {
        let all = names(100);
        let contents: Vec<(&str, &str)> = all.iter().map(|n| (n.as_str(), "1")).collect();
        let mut h = Harness::new(CLUSTER, &contents);
        let subscribed: Vec<String> = all
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 10 != 5)
            .map(|(_, n)| n.clone())
            .collect();
        let refs: Vec<&str> = subscribed.iter().map(|n| n.as_str()).collect();
        h.request(Req {
            subscribe: &refs,
            ..Default::default()
        });
        assert_eq!(h.expect(), seen(&refs, &[]));
        assert!(h.sub.has.base.is_some(), "held as the view");
        assert!(
            h.sub.has.over.values().all(|held| held.is_none()),
            "only the names skipped apart"
        );
        (h, subscribed)
    }

    fn held(h: &Harness, name: &str) -> bool {
        h.sub.client_version(name).is_some()
    }

    #[test]
    fn names_of_the_view_not_subscribed_are_not_held_and_sent_when_subscribed() {
        let (mut h, subscribed) = harness();
        assert!(subscribed.iter().all(|n| held(&h, n)));
        assert!(!held(&h, "n005") && !held(&h, "n095"));
        h.request(Req {
            subscribe: &["n005", "n095"],
            ..Default::default()
        });
        assert_eq!(h.expect(), seen(&["n005", "n095"], &[]));
        assert!(held(&h, "n005") && held(&h, "n095"));
    }

    #[test]
    fn a_change_to_a_name_not_subscribed_is_not_sent_and_to_a_subscribed_one_is() {
        let (mut h, _) = harness();
        h.set("n005", "2");
        h.expect_none();
        h.set("n006", "2");
        assert_eq!(h.expect(), seen(&["n006"], &[]));
        h.set("n006", "1");
        assert_eq!(
            h.expect(),
            seen(&["n006"], &[]),
            "back to the content it had"
        );
        h.remove("n007");
        assert_eq!(h.expect(), seen(&[], &["n007"]));
        h.set("n007", "1");
        assert_eq!(h.expect(), seen(&["n007"], &[]), "the client dropped it");
    }

    #[test]
    fn a_name_unsubscribed_is_no_longer_held_and_is_sent_again_when_resubscribed() {
        let (mut h, _) = harness();
        h.request(Req {
            unsubscribe: &["n010"],
            ..Default::default()
        });
        h.expect_none();
        assert!(!held(&h, "n010"));
        h.set("n010", "2");
        h.expect_none();
        h.request(Req {
            subscribe: &["n010"],
            ..Default::default()
        });
        assert_eq!(h.expect(), seen(&["n010"], &[]));
    }

    #[test]
    fn names_sent_in_parts_are_held_up_to_the_last_part_sent_and_the_names_skipped_never() {
        let all = names(160);
        let content = "x".repeat(1000);
        let resources: Vec<(&str, &str)> =
            all.iter().map(|n| (n.as_str(), content.as_str())).collect();
        let mut h = Harness::new(CLUSTER, &resources);
        h.sub.set_max_response_bytes(8 * 1024);
        let subscribed: Vec<&str> = all
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 2 == 0)
            .map(|(_, n)| n.as_str())
            .collect();
        let mut subscribe: Vec<&str> = subscribed.clone();
        subscribe.push("ghost");
        h.request(Req {
            subscribe: &subscribe,
            ..Default::default()
        });
        let first = h.poll().expect("a first part");
        let sent = first.resources.len();
        assert!(sent < subscribed.len());
        assert!(h.sub.has.base.is_some());
        assert!(held(&h, subscribed[sent - 1]));
        assert!(!held(&h, subscribed[sent]), "not sent yet");
        assert!(all.iter().step_by(2).count() == subscribed.len());
        assert!(
            all.iter().skip(1).step_by(2).all(|n| !held(&h, n)),
            "skipped"
        );
        // A name skipped, subscribed in the middle: the rest is computed again with it.
        let skipped = all[2 * sent + 1].clone();
        h.request(Req {
            subscribe: &[skipped.as_str()],
            ..Default::default()
        });
        let mut rest: Vec<String> = Vec::new();
        let mut removed: Vec<String> = Vec::new();
        while let Some(r) = h.poll() {
            rest.extend(r.resources.iter().map(|r| r.name().to_string()));
            removed.extend(r.removed.iter().map(|n| n.to_string()));
        }
        rest.sort();
        let mut want: Vec<String> = subscribed[sent..].iter().map(|n| n.to_string()).collect();
        want.push(skipped.clone());
        want.sort();
        assert_eq!(rest, want);
        assert_eq!(removed, ["ghost"]);
        assert!(subscribed.iter().all(|n| held(&h, n)) && held(&h, &skipped));
        let others = all
            .iter()
            .skip(1)
            .step_by(2)
            .filter(|n| **n != skipped)
            .all(|n| !held(&h, n));
        assert!(others, "names never subscribed are never held");
    }
}

#[test]
fn the_control_plane_is_named_in_the_first_response_of_the_type_only() {
    let mut h = Harness::new(CLUSTER_LOAD_ASSIGNMENT, &[("a", "1")]);
    h.request(Req {
        subscribe: &["a"],
        ..Default::default()
    });
    let first = h.poll().expect("the first response");
    assert!(
        first.control_plane,
        "the first response names the control plane"
    );
    h.request(Req {
        nonce: &first.nonce,
        ..Default::default()
    });
    h.set("a", "2");
    let push = h.poll().expect("a push");
    assert!(!push.control_plane, "a later one does not repeat it");
}

#[test]
fn delta_request_reads_the_wire_format_of_a_full_delta_discovery_request() {
    use envoy_types::pb::envoy::config::core::v3::Node;
    use envoy_types::pb::envoy::service::discovery::v3::ResourceLocator;
    use prost::Message;
    let full = DeltaDiscoveryRequest {
        node: Some(Node {
            id: "envoy-1".into(),
            cluster: "edge".into(),
            user_agent_name: "envoy".into(),
            ..Default::default()
        }),
        type_url: CLUSTER_LOAD_ASSIGNMENT.into(),
        resource_names_subscribe: vec!["a".into(), "é".into(), "*".into()],
        resource_names_unsubscribe: vec!["b".into(), "c".into()],
        initial_resource_versions: [("a".to_string(), "v1".to_string())].into(),
        response_nonce: "3".into(),
        error_detail: Some(Status {
            code: 3,
            message: "bad".into(),
            details: vec![],
        }),
        resource_locators_subscribe: vec![ResourceLocator {
            name: "l".into(),
            ..Default::default()
        }],
        resource_locators_unsubscribe: vec![ResourceLocator {
            name: "m".into(),
            ..Default::default()
        }],
    };
    let bytes = full.encode_to_vec();
    let read = DeltaRequest::decode(bytes.as_slice()).unwrap();
    assert_eq!(read, DeltaRequest::from(&full));
    let subscribe: Vec<&[u8]> = read.resource_names_subscribe.iter().collect();
    assert_eq!(subscribe, [&b"a"[..], "é".as_bytes(), b"*"]);
    let unsubscribe: Vec<&[u8]> = read.resource_names_unsubscribe.iter().collect();
    assert_eq!(unsubscribe, [b"b", b"c"]);
    // Encoded again, it is the request it was read from.
    assert_eq!(read.encoded_len(), read.encode_to_vec().len());
    assert_eq!(
        DeltaDiscoveryRequest::decode(read.encode_to_vec().as_slice()).unwrap(),
        full
    );
}

#[test]
fn delta_request_read_from_bytes_holds_slices_of_them() {
    use prost::Message;
    let full = DeltaDiscoveryRequest {
        type_url: CLUSTER_LOAD_ASSIGNMENT.into(),
        resource_names_subscribe: (0..100).map(|i| format!("cluster-{i}")).collect(),
        resource_names_unsubscribe: (0..10).map(|i| format!("gone-{i}")).collect(),
        response_nonce: "17".into(),
        ..Default::default()
    };
    let frame = bytes::Bytes::from(full.encode_to_vec());
    let read = DeltaRequest::decode(frame.clone()).unwrap();
    assert_eq!(read, DeltaRequest::from(&full));
    let inside = |s: &[u8]| frame.as_ptr_range().contains(&s.as_ptr());
    let names = read.resource_names_subscribe.iter();
    for name in names.chain(read.resource_names_unsubscribe.iter()) {
        assert!(inside(name), "a name was copied");
    }
    assert!(inside(read.type_url.as_bytes()));
    assert!(inside(read.response_nonce.as_bytes()));
}

#[test]
fn delta_request_names_to_subscribe_and_unsubscribe_interleaved_read_apart() {
    use bytes::Buf;
    use prost::Message;
    // Subscriptions and unsubscriptions alternate (the format allows it): each list keeps its
    // own names in order, however the bytes are cut.
    let mut bytes = Vec::new();
    let field = |tag: u32, value: &str, out: &mut Vec<u8>| {
        prost::encoding::string::encode(tag, &value.to_string(), out)
    };
    field(3, "s1", &mut bytes);
    field(4, "u1", &mut bytes);
    field(3, "s2", &mut bytes);
    field(3, "s3", &mut bytes);
    field(4, "u2", &mut bytes);
    field(4, "u3", &mut bytes);
    for cut in 0..=bytes.len() {
        let (a, b) = bytes.split_at(cut);
        let buf = bytes::Bytes::copy_from_slice(a).chain(bytes::Bytes::copy_from_slice(b));
        let read = DeltaRequest::decode(buf).unwrap();
        let subscribe: Vec<&[u8]> = read.resource_names_subscribe.iter().collect();
        let unsubscribe: Vec<&[u8]> = read.resource_names_unsubscribe.iter().collect();
        assert_eq!(subscribe, [b"s1", b"s2", b"s3"], "cut at {cut}");
        assert_eq!(unsubscribe, [b"u1", b"u2", b"u3"], "cut at {cut}");
    }
}

#[test]
fn delta_request_rejects_a_nonce_that_is_not_utf8() {
    use prost::Message;
    // Field 6 (response_nonce), two bytes that are not UTF-8.
    let bad = [0x32, 2, 0xff, 0xfe];
    assert!(DeltaRequest::decode(bytes::Bytes::copy_from_slice(&bad)).is_err());
}

#[test]
fn a_name_that_is_not_utf8_subscribes_to_nothing_and_is_reported_as_not_there() {
    use prost::Message;
    // Subscribes to "a" and to two bytes that are not UTF-8: "a" is sent, the other is reported
    // as not there (under its lossy form).
    let mut h = Harness::new(CLUSTER, &[("a", "1")]);
    let mut bytes = Vec::new();
    prost::encoding::string::encode(2, &CLUSTER.to_string(), &mut bytes);
    bytes.extend_from_slice(&[0x1a, 1, b'a', 0x1a, 2, 0xff, 0xfe]);
    let req = DeltaRequest::decode(bytes.as_slice()).unwrap();
    let snap = h.store.snapshot();
    h.sub.handle_request(&req, snap.get(CLUSTER));
    let (names, removed) = h.expect();
    assert_eq!(names, ["a"]);
    assert_eq!(removed, ["\u{fffd}\u{fffd}"]);
}

/// Glob collections (xRFC TP1), delta: the rules of #57.
#[path = "members_tests.rs"]
mod held_members;

mod glob {
    use super::*;

    pub(super) const T: &str = "type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint";
    const C1: &str = "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1";

    pub(super) fn n(id: &str) -> String {
        format!("{C1}/{id}")
    }

    pub(super) fn harness(members: &[&str]) -> Harness {
        let names: Vec<String> = members.iter().map(|m| n(m)).collect();
        let resources: Vec<(&str, &str)> = names.iter().map(|m| (m.as_str(), "1")).collect();
        Harness::new(T, &resources)
    }

    #[test]
    fn glob_sends_the_members_directly_under_its_path_not_below() {
        let mut h = harness(&["e1", "e2", "sub/e3"]);
        set(
            &h.store,
            T,
            "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c10/e4",
            "1",
        );
        let glob = n("*");
        h.request(Req {
            subscribe: &[&glob],
            ..Default::default()
        });
        assert_eq!(h.expect(), seen(&[&n("e1"), &n("e2")], &[]));
    }

    #[test]
    fn glob_with_parameters_matches_members_with_equal_parameters() {
        let mut h = harness(&["e1", "e2?k=v", "e3?k=v&z=1", "e4?k=w"]);
        let glob = n("*?k=v");
        h.request(Req {
            subscribe: &[&glob],
            ..Default::default()
        });
        assert_eq!(h.expect(), seen(&[&n("e2?k=v")], &[]));
    }

    #[test]
    fn glob_parameters_are_matched_in_any_order() {
        // The store keeps names canonical (parameters sorted): a file's `?z=1&k=v` is
        // `?k=v&z=1`, and a glob subscribed as `?z=1&k=v` finds it.
        let mut h = harness(&[]);
        set(&h.store, T, &n("e1?z=1&k=v"), "1");
        let glob = n("*?z=1&k=v");
        h.request(Req {
            subscribe: &[&glob],
            ..Default::default()
        });
        assert_eq!(h.expect(), seen(&[&n("e1?k=v&z=1")], &[]));
    }

    #[test]
    fn empty_glob_is_answered_with_its_name_in_removed_resources() {
        let mut h = harness(&["e1"]);
        let glob = "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c2/*";
        h.request(Req {
            subscribe: &[glob],
            ..Default::default()
        });
        assert_eq!(h.expect(), seen(&[], &[glob]));
    }

    #[test]
    fn glob_members_added_changed_and_removed_are_sent() {
        let mut h = harness(&["e1"]);
        let glob = n("*");
        h.request(Req {
            subscribe: &[&glob],
            ..Default::default()
        });
        assert_eq!(h.expect(), seen(&[&n("e1")], &[]));
        h.set(&n("e2"), "1");
        assert_eq!(h.expect(), seen(&[&n("e2")], &[]));
        h.set(&n("e1"), "2");
        assert_eq!(h.expect(), seen(&[&n("e1")], &[]));
        h.remove(&n("e1"));
        assert_eq!(h.expect(), seen(&[], &[&n("e1")]));
        // Not a member: nothing.
        h.set(&n("sub/e9"), "1");
        h.expect_none();
    }

    #[test]
    fn glob_members_changed_and_added_are_sent_with_no_look_at_their_names() {
        // A changed member's collection is the one the store worked out when it built its
        // resource: a stream works nothing of the member's name out.
        let mut h = harness(&["e1"]);
        let glob = n("*");
        h.request(Req {
            subscribe: &[&glob],
            ..Default::default()
        });
        assert_eq!(h.expect(), seen(&[&n("e1")], &[]));
        let changed: Vec<Arc<str>> = [n("e1"), n("e2"), n("sub/e9")]
            .iter()
            .map(|m| Arc::from(m.as_str()))
            .collect();
        set(&h.store, T, &changed[0], "2");
        set(&h.store, T, &changed[1], "1");
        set(&h.store, T, &changed[2], "1");
        crate::xdstp::WORKED_OUT.with(|w| w.set(0));
        h.sub.mark_changed(changed.iter());
        assert_eq!(h.expect(), seen(&[&n("e1"), &n("e2")], &[]));
        assert_eq!(crate::xdstp::WORKED_OUT.with(|w| w.get()), 0);
    }

    #[test]
    fn unsubscribing_a_glob_forgets_its_members() {
        let mut h = harness(&["e1", "e2"]);
        let glob = n("*");
        h.request(Req {
            subscribe: &[&glob, &n("e2")],
            ..Default::default()
        });
        assert_eq!(h.expect(), seen(&[&n("e1"), &n("e2")], &[]));
        h.request(Req {
            unsubscribe: &[&glob],
            ..Default::default()
        });
        h.expect_none();
        // e1 is no longer watched; e2 still is, by name.
        h.set(&n("e1"), "2");
        h.expect_none();
        h.set(&n("e2"), "2");
        assert_eq!(h.expect(), seen(&[&n("e2")], &[]));
    }

    /// The members held apart (against the names budget), as the requests and responses
    /// changed the count, checked against a recount of everything held.
    pub(super) fn counted(h: &Harness) -> usize {
        let counted = h.sub.glob_members.len();
        assert_eq!(counted, h.sub.recount_members(), "counted and recounted");
        counted
    }

    pub(super) fn subscribe(h: &mut Harness, names: &[&str]) {
        h.request(Req {
            subscribe: names,
            ..Default::default()
        });
    }

    pub(super) fn unsubscribe(h: &mut Harness, names: &[&str]) {
        h.request(Req {
            unsubscribe: names,
            ..Default::default()
        });
    }

    #[test]
    fn held_members_count_from_the_response_that_sends_them() {
        let mut h = harness(&["e1", "e2"]);
        subscribe(&mut h, &[&n("*")]);
        assert_eq!(counted(&h), 0, "nothing sent yet");
        assert_eq!(h.expect(), seen(&[&n("e1"), &n("e2")], &[]));
        assert_eq!(counted(&h), 2);
        assert_eq!(h.sub.key_count(), 3, "the glob and its two members");
    }

    #[test]
    fn held_members_a_member_also_subscribed_by_name_counts_once() {
        let mut h = harness(&["e1", "e2"]);
        subscribe(&mut h, &[&n("*")]);
        h.expect();
        subscribe(&mut h, &[&n("e1")]);
        assert_eq!(counted(&h), 1, "e1 counts as a name");
        assert_eq!(h.sub.key_count(), 3);
    }

    #[test]
    fn held_members_a_member_unsubscribed_by_name_while_its_glob_holds_it_counts_apart_again() {
        let mut h = harness(&["e1", "e2"]);
        subscribe(&mut h, &[&n("*"), &n("e1")]);
        h.expect();
        assert_eq!(counted(&h), 1);
        unsubscribe(&mut h, &[&n("e1")]);
        assert_eq!(counted(&h), 2);
        assert_eq!(
            h.expect(),
            seen(&[&n("e1")], &[]),
            "sent again (the wildcard rule)"
        );
        assert_eq!(counted(&h), 2);
    }

    #[test]
    fn held_members_a_member_removed_in_the_source_counts_until_its_removal_is_sent() {
        let mut h = harness(&["e1", "e2"]);
        subscribe(&mut h, &[&n("*")]);
        h.expect();
        h.remove(&n("e2"));
        assert_eq!(counted(&h), 2, "the client holds it until told");
        assert_eq!(h.expect(), seen(&[], &[&n("e2")]));
        assert_eq!(counted(&h), 1);
        h.set(&n("e3"), "1");
        assert_eq!(h.expect(), seen(&[&n("e3")], &[]));
        assert_eq!(counted(&h), 2, "a member added counts when it is sent");
    }

    #[test]
    fn held_members_a_glob_dropped_takes_its_members_and_a_named_one_stays() {
        let mut h = harness(&["e1", "e2"]);
        let other = "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c2/*";
        set(
            &h.store,
            T,
            "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c2/x",
            "1",
        );
        subscribe(&mut h, &[&n("*"), &n("e2"), other]);
        h.expect();
        assert_eq!(counted(&h), 2, "e1 and c2's x");
        unsubscribe(&mut h, &[&n("*")]);
        assert_eq!(counted(&h), 1, "c2's x, another glob's, stays");
        assert_eq!(
            h.sub.key_count(),
            3,
            "e2 by name, the other glob and its member"
        );
        h.expect_none();
        h.set(&n("e2"), "2");
        assert_eq!(h.expect(), seen(&[&n("e2")], &[]));
    }

    #[test]
    fn held_members_a_glob_subscribed_while_the_wildcard_holds_its_members_counts_them_at_once() {
        let mut h = harness(&["e1", "e2"]);
        subscribe(&mut h, &["*"]);
        h.expect();
        assert_eq!(counted(&h), 0);
        subscribe(&mut h, &[&n("*")]);
        assert_eq!(counted(&h), 2);
    }

    #[test]
    fn held_members_the_wildcard_dropped_keeps_a_globs_members() {
        let mut h = harness(&["e1", "e2"]);
        subscribe(&mut h, &["*", &n("*")]);
        h.expect();
        assert_eq!(counted(&h), 2);
        unsubscribe(&mut h, &["*"]);
        assert_eq!(counted(&h), 2, "still held through the glob");
        h.expect_none();
        h.set(&n("e1"), "2");
        assert_eq!(h.expect(), seen(&[&n("e1")], &[]));
        assert_eq!(counted(&h), 2);
    }

    #[test]
    fn held_members_a_request_of_opaque_names_leaves_the_count_as_it_is() {
        let mut h = harness(&["e1"]);
        set(&h.store, T, "plain", "1");
        subscribe(&mut h, &[&n("*")]);
        h.expect();
        subscribe(&mut h, &["plain"]);
        assert_eq!(counted(&h), 1);
        unsubscribe(&mut h, &["plain"]);
        assert_eq!(counted(&h), 1);
    }

    #[test]
    fn glob_and_singleton_overlap_follow_the_wildcard_rule() {
        // Subscribed by the glob and by name; the name unsubscribed: the client cannot tell
        // whether the glob still covers it, so it is sent again (it is still a member).
        let mut h = harness(&["e1"]);
        let glob = n("*");
        h.request(Req {
            subscribe: &[&glob, &n("e1")],
            ..Default::default()
        });
        assert_eq!(h.expect(), seen(&[&n("e1")], &[]));
        h.request(Req {
            unsubscribe: &[&n("e1")],
            ..Default::default()
        });
        assert_eq!(h.expect(), seen(&[&n("e1")], &[]));
        // And still followed through the glob.
        h.set(&n("e1"), "2");
        assert_eq!(h.expect(), seen(&[&n("e1")], &[]));
    }

    #[test]
    fn singleton_spelled_non_canonically_is_answered_under_the_clients_spelling() {
        // The store has `?a=1&b=2`; the client asks for `?b=2&a=1`: it is sent the resource
        // under `?b=2&a=1`, its changes and its removal too, until it unsubscribes by that
        // spelling.
        let mut h = harness(&["e1?a=1&b=2"]);
        let spelled = n("e1?b=2&a=1");
        h.request(Req {
            subscribe: &[&spelled],
            ..Default::default()
        });
        assert_eq!(h.expect(), seen(&[&spelled], &[]));
        h.set(&n("e1?a=1&b=2"), "2");
        assert_eq!(h.expect(), seen(&[&spelled], &[]));
        h.remove(&n("e1?a=1&b=2"));
        assert_eq!(h.expect(), seen(&[], &[&spelled]));
        h.set(&n("e1?a=1&b=2"), "3");
        assert_eq!(h.expect(), seen(&[&spelled], &[]));
        h.request(Req {
            unsubscribe: &[&spelled],
            ..Default::default()
        });
        h.expect_none();
        h.set(&n("e1?a=1&b=2"), "4");
        h.expect_none();
    }

    #[test]
    fn singleton_with_lower_case_percent_encoding_is_answered_under_the_clients_spelling() {
        // `%3a` is `%3A`; `%7E` is `~` (unreserved, decoded): one resource.
        let mut h = harness(&["e%3A1~"]);
        let spelled = n("e%3a1%7E");
        h.request(Req {
            subscribe: &[&spelled],
            ..Default::default()
        });
        assert_eq!(h.expect(), seen(&[&spelled], &[]));
    }

    #[test]
    fn glob_spelled_non_canonically_is_answered_under_the_clients_spelling() {
        // An empty glob's removal names the glob as the client spelled it.
        let mut h = harness(&["e1?k=v&z=1"]);
        let empty = "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c2/*?z=1&k=v";
        h.request(Req {
            subscribe: &[empty],
            ..Default::default()
        });
        assert_eq!(h.expect(), seen(&[], &[empty]));
        // Its members keep their own (canonical) names.
        let glob = n("*?z=1&k=v");
        h.request(Req {
            subscribe: &[&glob],
            ..Default::default()
        });
        assert_eq!(h.expect(), seen(&[&n("e1?k=v&z=1")], &[]));
    }

    #[test]
    fn opaque_names_are_not_respelled() {
        // A name that is not xdstp is bytes: `b?y=2&x=1` is not `b?x=1&y=2`.
        let mut h = Harness::new(T, &[("b?x=1&y=2", "1")]);
        h.request(Req {
            subscribe: &["b?y=2&x=1"],
            ..Default::default()
        });
        assert_eq!(h.expect(), seen(&[], &["b?y=2&x=1"]));
    }
}
