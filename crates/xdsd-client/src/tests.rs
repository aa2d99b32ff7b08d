//! One test per rule of the client, named after it: the machine against a scripted server (each
//! test writes the server's responses), time an input.

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::single_constraint::{
    ConstraintType, Exists,
};
use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::{
    ConstraintList, SingleConstraint, Type,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
    DynamicParameterConstraints, Resource as WireResource, ResourceName,
};
use envoy_types::pb::google::protobuf::{Any, Duration as ProtoDuration};
use prost::Message;

use crate::types::{CLUSTER, CLUSTER_LOAD_ASSIGNMENT, LISTENER};
use crate::*;

/// The machine and the test's clock.
struct Pair {
    client: Client,
    now: Instant,
}

impl Pair {
    fn new(flavor: Flavor, ads: bool) -> Pair {
        let mut config = Config::new(Node {
            id: "node-1".into(),
            cluster: "edge".into(),
            ..Default::default()
        });
        config.flavor = flavor;
        config.ads = ads;
        Pair {
            client: Client::new(config),
            now: Instant::now(),
        }
    }

    fn sotw() -> Pair {
        Pair::new(Flavor::Sotw, true)
    }

    fn delta() -> Pair {
        Pair::new(Flavor::Delta, true)
    }

    fn with_limits(mut self, limits: Limits) -> Pair {
        let mut config = self.client.config().clone();
        config.limits = limits;
        self.client = Client::new(config);
        self
    }

    fn requests(&mut self) -> Vec<Request> {
        std::iter::from_fn(|| self.client.poll_request(self.now)).collect()
    }

    fn sotw_requests(&mut self) -> Vec<DiscoveryRequest> {
        self.requests()
            .into_iter()
            .map(|r| match r {
                Request::Sotw(r) => r,
                Request::Delta(r) => panic!("a delta request from a SotW client: {r:?}"),
            })
            .collect()
    }

    fn sotw_request(&mut self) -> DiscoveryRequest {
        let mut all = self.sotw_requests();
        assert_eq!(all.len(), 1, "one request: {all:?}");
        all.remove(0)
    }

    fn delta_request(&mut self) -> DeltaDiscoveryRequest {
        let mut all: Vec<DeltaDiscoveryRequest> = self
            .requests()
            .into_iter()
            .map(|r| match r {
                Request::Delta(r) => r,
                Request::Sotw(r) => panic!("a SotW request from a delta client: {r:?}"),
            })
            .collect();
        assert_eq!(all.len(), 1, "one request: {all:?}");
        all.remove(0)
    }

    fn events(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.client.poll_event()).collect()
    }

    /// Events other than Connected/Disconnected.
    fn news(&mut self) -> Vec<Event> {
        self.events()
            .into_iter()
            .filter(|e| !matches!(e, Event::Connected | Event::Disconnected { .. }))
            .collect()
    }

    fn sotw_in(&mut self, response: DiscoveryResponse) {
        self.client.handle_sotw(self.now, response);
    }

    fn delta_in(&mut self, response: DeltaDiscoveryResponse) {
        self.client.handle_delta(self.now, response);
    }

    fn advance(&mut self, by: Duration) {
        self.now += by;
        self.client.handle_timeout(self.now);
    }

    /// A delta client that subscribed to cluster `a` and received it (version 1, nonce n1).
    fn delta_holding_a(&mut self) {
        self.client.connected();
        self.client.subscribe(CLUSTER, ["a"]).expect("subscribed");
        self.delta_request();
        self.delta_in(delta(
            CLUSTER,
            "n1",
            vec![wire("a", "1", Some(cluster("a", "1")))],
            &[],
        ));
    }

    fn names(&self, type_url: &str) -> Vec<String> {
        self.client
            .resources(type_url)
            .map(|r| r.name.clone())
            .collect()
    }
}

fn cluster(name: &str, tag: &str) -> Any {
    Any {
        type_url: CLUSTER.into(),
        value: Cluster {
            name: name.into(),
            alt_stat_name: tag.into(),
            ..Default::default()
        }
        .encode_to_vec(),
    }
}

fn endpoints(name: &str) -> Any {
    Any {
        type_url: CLUSTER_LOAD_ASSIGNMENT.into(),
        value: ClusterLoadAssignment {
            cluster_name: name.into(),
            ..Default::default()
        }
        .encode_to_vec(),
    }
}

fn sotw(type_url: &str, version: &str, nonce: &str, resources: Vec<Any>) -> DiscoveryResponse {
    DiscoveryResponse {
        version_info: version.into(),
        resources,
        type_url: type_url.into(),
        nonce: nonce.into(),
        ..Default::default()
    }
}

fn wrapped(resource: WireResource) -> Any {
    Any {
        type_url: RESOURCE_WRAPPER.into(),
        value: resource.encode_to_vec(),
    }
}

fn wire(name: &str, version: &str, body: Option<Any>) -> WireResource {
    WireResource {
        name: name.into(),
        version: version.into(),
        resource: body,
        ..Default::default()
    }
}

fn variant(name: &str, version: &str, body: Any, c: DynamicParameterConstraints) -> WireResource {
    WireResource {
        resource_name: Some(ResourceName {
            name: name.into(),
            dynamic_parameter_constraints: Some(c),
        }),
        version: version.into(),
        resource: Some(body),
        ..Default::default()
    }
}

fn delta(
    type_url: &str,
    nonce: &str,
    resources: Vec<WireResource>,
    removed: &[&str],
) -> DeltaDiscoveryResponse {
    DeltaDiscoveryResponse {
        system_version_info: format!("sys-{nonce}"),
        resources,
        type_url: type_url.into(),
        removed_resources: removed.iter().map(|s| s.to_string()).collect(),
        nonce: nonce.into(),
        ..Default::default()
    }
}

fn env_is(value: &str) -> DynamicParameterConstraints {
    DynamicParameterConstraints {
        r#type: Some(Type::Constraint(SingleConstraint {
            key: "env".into(),
            constraint_type: Some(ConstraintType::Value(value.into())),
        })),
    }
}

fn params(pairs: &[(&str, &str)]) -> Params {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn added_names(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Update(u) => Some(u.added.iter().map(|r| r.name.clone())),
            _ => None,
        })
        .flatten()
        .collect()
}

fn missing(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::DoesNotExist { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect()
}

fn removed(events: &[Event]) -> Vec<(Vec<String>, bool)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Removed { names, expired, .. } => Some((names.clone(), *expired)),
            _ => None,
        })
        .collect()
}

#[test]
fn nothing_is_sent_before_the_stream_is_up() {
    let mut p = Pair::sotw();
    p.client.subscribe(CLUSTER, ["a"]).expect("subscribed");
    assert!(p.requests().is_empty());
    p.client.connected();
    assert_eq!(p.events(), vec![Event::Connected]);
    assert_eq!(p.sotw_request().resource_names, vec!["a"]);
}

#[test]
fn first_request_of_a_stream_carries_the_node_and_the_features() {
    let mut p = Pair::sotw();
    p.client.connected();
    p.client.subscribe(CLUSTER, ["a"]).expect("subscribed");
    let first = p.sotw_request();
    let node = first.node.expect("the first request carries the node");
    assert_eq!(node.id, "node-1");
    assert!(node
        .client_features
        .iter()
        .any(|f| f == FEATURE_RESOURCE_TTL));
    assert!(node
        .client_features
        .iter()
        .any(|f| f == FEATURE_RESOURCE_IN_SOTW));
    p.sotw_in(sotw(CLUSTER, "v1", "n1", vec![cluster("a", "1")]));
    assert!(
        p.sotw_request().node.is_none(),
        "the ACK does not repeat it"
    );
}

#[test]
fn ads_sends_the_node_once_for_every_type() {
    let mut p = Pair::sotw();
    p.client.connected();
    p.client.subscribe(CLUSTER, ["a"]).expect("subscribed");
    p.client.subscribe(LISTENER, ["l"]).expect("subscribed");
    let requests = p.sotw_requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests.iter().filter(|r| r.node.is_some()).count(), 1);
}

#[test]
fn per_type_streams_each_send_the_node_first() {
    let mut p = Pair::new(Flavor::Sotw, false);
    p.client.connected();
    p.client.subscribe(CLUSTER, ["a"]).expect("subscribed");
    p.client.subscribe(LISTENER, ["l"]).expect("subscribed");
    let requests = p.sotw_requests();
    assert_eq!(requests.len(), 2);
    assert!(requests.iter().all(|r| r.node.is_some()));
}

#[test]
fn ads_asks_for_types_in_make_before_break_order() {
    let mut p = Pair::sotw();
    p.client.subscribe(LISTENER, ["l"]).expect("subscribed");
    p.client
        .subscribe(CLUSTER_LOAD_ASSIGNMENT, ["a"])
        .expect("subscribed");
    p.client.subscribe(CLUSTER, ["a"]).expect("subscribed");
    p.client.connected();
    let order: Vec<String> = p.sotw_requests().into_iter().map(|r| r.type_url).collect();
    assert_eq!(order, vec![CLUSTER, CLUSTER_LOAD_ASSIGNMENT, LISTENER]);
}

#[test]
fn sotw_ack_carries_the_version_and_nonce_and_every_name() {
    let mut p = Pair::sotw();
    p.client.connected();
    p.client.subscribe(CLUSTER, ["a", "b"]).expect("subscribed");
    p.sotw_request();
    p.sotw_in(sotw(
        CLUSTER,
        "v1",
        "n1",
        vec![cluster("a", "1"), cluster("b", "1")],
    ));
    let ack = p.sotw_request();
    assert_eq!(
        (ack.version_info.as_str(), ack.response_nonce.as_str()),
        ("v1", "n1")
    );
    assert_eq!(ack.resource_names, vec!["a", "b"]);
    assert!(ack.error_detail.is_none());
}

#[test]
fn update_reports_what_was_added_and_what_changed() {
    let mut p = Pair::sotw();
    p.client.connected();
    p.client.subscribe(CLUSTER, ["*"]).expect("subscribed");
    p.sotw_request();
    p.sotw_in(sotw(
        CLUSTER,
        "v1",
        "n1",
        vec![cluster("a", "1"), cluster("b", "1")],
    ));
    assert_eq!(added_names(&p.news()), vec!["a", "b"]);
    p.sotw_request();
    p.sotw_in(sotw(
        CLUSTER,
        "v2",
        "n2",
        vec![cluster("a", "2"), cluster("b", "1"), cluster("c", "1")],
    ));
    match p.news().as_slice() {
        [Event::Update(u)] => {
            assert_eq!(u.version, "v2");
            let added: Vec<&str> = u.added.iter().map(|r| r.name.as_str()).collect();
            let changed: Vec<&str> = u.changed.iter().map(|r| r.name.as_str()).collect();
            assert_eq!((added, changed), (vec!["c"], vec!["a"]));
        }
        other => panic!("one update: {other:?}"),
    }
    // Unchanged, so not reported, but held as of the response that sent it again.
    let b = p.client.resource(CLUSTER, "b", &Params::new());
    assert_eq!(b.map(|r| r.version.as_str()), Some("v2"));
}

/// A client that keeps no bodies (`Config::keep_bodies` off), as `Pair::new` makes it.
fn without_bodies(mut p: Pair) -> Pair {
    let mut config = p.client.config().clone();
    config.keep_bodies = false;
    p.client = Client::new(config);
    p
}

#[test]
fn a_client_that_keeps_no_bodies_hands_each_body_to_its_event_and_holds_none() {
    let mut p = without_bodies(Pair::delta());
    p.delta_holding_a();
    match p.news().as_slice() {
        [Event::Update(u)] => {
            assert_eq!(u.added.len(), 1);
            assert_eq!(
                u.added[0].body,
                cluster("a", "1"),
                "the event carries the body"
            );
        }
        other => panic!("one update: {other:?}"),
    }
    let held = p
        .client
        .resource(CLUSTER, "a", &Params::new())
        .expect("held");
    assert_eq!(held.version, "1");
    assert_eq!(held.type_url, CLUSTER);
    assert_eq!(
        held.body,
        Any::default(),
        "the body is not kept, nor its type URL"
    );
    p.client.check_invariants().expect("sound");
}

#[test]
fn a_client_that_keeps_no_bodies_tells_a_resend_from_a_change_by_the_bodys_digest() {
    let mut p = without_bodies(Pair::sotw());
    p.client.connected();
    p.client.subscribe(CLUSTER, ["*"]).expect("subscribed");
    p.sotw_request();
    let (a1, b1) = (cluster("a", "1"), cluster("b", "1"));
    p.sotw_in(sotw(CLUSTER, "v1", "n1", vec![a1.clone(), b1.clone()]));
    assert_eq!(added_names(&p.news()), vec!["a", "b"]);
    p.sotw_request();
    // `a` sent again as it was, `b` changed (same size: only the digest tells them apart).
    let b2 = cluster("b", "2");
    assert_eq!(b1.value.len(), b2.value.len());
    p.sotw_in(sotw(CLUSTER, "v2", "n2", vec![a1, b2.clone()]));
    match p.news().as_slice() {
        [Event::Update(u)] => {
            assert!(u.added.is_empty());
            let changed: Vec<(&str, &Any)> = u
                .changed
                .iter()
                .map(|r| (r.name.as_str(), &r.body))
                .collect();
            assert_eq!(changed, vec![("b", &b2)]);
        }
        other => panic!("one update: {other:?}"),
    }
    p.client.check_invariants().expect("sound");
}

#[test]
fn nack_carries_the_validators_reason_and_keeps_the_last_good_resource() {
    let mut p = Pair::sotw();
    p.client.set_validator(Box::new(|r: &Resource| {
        let c = Cluster::decode(r.body.value.as_slice()).map_err(|e| e.to_string())?;
        if c.alt_stat_name == "bad" {
            return Err("alt_stat_name is bad".into());
        }
        Ok(())
    }));
    p.client.connected();
    p.client.subscribe(CLUSTER, ["a"]).expect("subscribed");
    p.sotw_request();
    p.sotw_in(sotw(CLUSTER, "v1", "n1", vec![cluster("a", "good")]));
    p.sotw_request();
    p.news();
    p.sotw_in(sotw(CLUSTER, "v2", "n2", vec![cluster("a", "bad")]));
    let nack = p.sotw_request();
    assert_eq!(
        nack.version_info, "v1",
        "a NACK names the last version accepted"
    );
    assert_eq!(nack.response_nonce, "n2");
    let detail = nack.error_detail.expect("a NACK has error_detail");
    assert!(
        detail.message.contains("alt_stat_name is bad"),
        "{}",
        detail.message
    );
    assert!(matches!(p.news().as_slice(), [Event::Rejected { .. }]));
    let held = p
        .client
        .resource(CLUSTER, "a", &Params::new())
        .expect("kept");
    assert_eq!(held.body, cluster("a", "good"));
    assert_eq!(p.client.version(CLUSTER), Some("v1"));
}

#[test]
fn delta_nack_keeps_the_last_good_resource() {
    let mut p = Pair::delta();
    p.client.set_validator(Box::new(|r: &Resource| {
        (r.version != "bad")
            .then_some(())
            .ok_or("version bad".to_string())
    }));
    p.delta_holding_a();
    let ack = p.delta_request();
    assert_eq!(ack.response_nonce, "n1");
    assert!(ack.error_detail.is_none() && ack.resource_names_subscribe.is_empty());
    p.delta_in(delta(
        CLUSTER,
        "n2",
        vec![wire("a", "bad", Some(cluster("a", "2")))],
        &[],
    ));
    let nack = p.delta_request();
    assert_eq!(nack.response_nonce, "n2");
    assert!(nack.error_detail.is_some());
    assert_eq!(
        p.client
            .resource(CLUSTER, "a", &Params::new())
            .map(|r| r.version.as_str()),
        Some("1")
    );
}

#[test]
fn resource_of_another_type_is_nacked() {
    let mut p = Pair::sotw();
    p.client.connected();
    p.client.subscribe(CLUSTER, ["a"]).expect("subscribed");
    p.sotw_request();
    p.sotw_in(sotw(CLUSTER, "v1", "n1", vec![endpoints("a")]));
    let nack = p.sotw_request();
    assert!(nack
        .error_detail
        .is_some_and(|d| d.message.contains("ClusterLoadAssignment")));
    assert!(p.names(CLUSTER).is_empty());
}

#[test]
fn legacy_wildcard_names_nothing() {
    let mut p = Pair::sotw();
    p.client.connected();
    p.client
        .subscribe_legacy_wildcard(CLUSTER)
        .expect("subscribed");
    assert!(p.sotw_request().resource_names.is_empty());
    let mut d = Pair::delta();
    d.client.connected();
    d.client
        .subscribe_legacy_wildcard(CLUSTER)
        .expect("subscribed");
    assert!(d.delta_request().resource_names_subscribe.is_empty());
}

#[test]
fn explicit_wildcard_is_a_star() {
    let mut p = Pair::sotw();
    p.client.connected();
    p.client.subscribe(CLUSTER, ["*"]).expect("subscribed");
    assert_eq!(p.sotw_request().resource_names, vec!["*"]);
    let mut d = Pair::delta();
    d.client.connected();
    d.client.subscribe_wildcard(CLUSTER).expect("subscribed");
    assert_eq!(d.delta_request().resource_names_subscribe, vec!["*"]);
}

#[test]
fn legacy_wildcard_with_names_is_sent_as_a_star() {
    let mut p = Pair::sotw();
    p.client.connected();
    p.client
        .subscribe_legacy_wildcard(CLUSTER)
        .expect("subscribed");
    p.sotw_request();
    p.client.subscribe(CLUSTER, ["a"]).expect("subscribed");
    assert_eq!(p.sotw_request().resource_names, vec!["a", "*"]);
    let mut d = Pair::delta();
    d.client.connected();
    d.client
        .subscribe_legacy_wildcard(CLUSTER)
        .expect("subscribed");
    d.delta_request();
    d.client.subscribe(CLUSTER, ["a"]).expect("subscribed");
    assert_eq!(d.delta_request().resource_names_subscribe, vec!["a", "*"]);
}

#[test]
fn delta_requests_carry_only_the_changes_of_the_subscription() {
    let mut p = Pair::delta();
    p.client.connected();
    p.client.subscribe(CLUSTER, ["a", "b"]).expect("subscribed");
    assert_eq!(p.delta_request().resource_names_subscribe, vec!["a", "b"]);
    p.client.subscribe(CLUSTER, ["c"]).expect("subscribed");
    p.client.unsubscribe(CLUSTER, "a");
    let r = p.delta_request();
    assert_eq!(r.resource_names_subscribe, vec!["c"]);
    assert_eq!(r.resource_names_unsubscribe, vec!["a"]);
}

#[test]
fn sotw_unsubscribe_sends_the_remaining_list_and_drops_the_resource() {
    let mut p = Pair::sotw();
    p.client.connected();
    p.client
        .subscribe(CLUSTER_LOAD_ASSIGNMENT, ["a", "b"])
        .expect("subscribed");
    p.sotw_request();
    p.sotw_in(sotw(
        CLUSTER_LOAD_ASSIGNMENT,
        "v1",
        "n1",
        vec![endpoints("a"), endpoints("b")],
    ));
    p.sotw_request();
    p.client.unsubscribe(CLUSTER_LOAD_ASSIGNMENT, "a");
    assert_eq!(p.sotw_request().resource_names, vec!["b"]);
    assert_eq!(p.names(CLUSTER_LOAD_ASSIGNMENT), vec!["b"]);
}

#[test]
fn unsubscribed_resource_in_a_response_is_not_taken() {
    let mut p = Pair::sotw();
    p.client.connected();
    p.client
        .subscribe(CLUSTER_LOAD_ASSIGNMENT, ["a"])
        .expect("subscribed");
    p.sotw_request();
    p.sotw_in(sotw(
        CLUSTER_LOAD_ASSIGNMENT,
        "v1",
        "n1",
        vec![endpoints("a"), endpoints("z")],
    ));
    assert_eq!(p.names(CLUSTER_LOAD_ASSIGNMENT), vec!["a"]);
}

#[test]
fn locator_subscription_sends_its_dynamic_parameters() {
    let mut p = Pair::sotw();
    p.client.connected();
    p.client
        .subscribe_locator(CLUSTER, "a", params(&[("env", "prod")]))
        .expect("subscribed");
    let r = p.sotw_request();
    assert!(r.resource_names.is_empty());
    assert_eq!(r.resource_locators.len(), 1);
    assert_eq!(r.resource_locators[0].name, "a");
    assert_eq!(
        r.resource_locators[0]
            .dynamic_parameters
            .get("env")
            .map(String::as_str),
        Some("prod")
    );
    let mut d = Pair::delta();
    d.client.connected();
    d.client
        .subscribe_locator(CLUSTER, "a", params(&[("env", "prod")]))
        .expect("subscribed");
    d.delta_request();
    d.client
        .unsubscribe_locator(CLUSTER, "a", params(&[("env", "prod")]));
    let r = d.delta_request();
    assert_eq!(r.resource_locators_unsubscribe.len(), 1);
}

#[test]
fn node_dynamic_parameters_go_out_with_the_node() {
    let mut node = Node::default();
    node.dynamic_parameters.insert(
        CLUSTER.into(),
        envoy_types::pb::xds::core::v3::ContextParams {
            params: [("env".to_string(), "prod".to_string())]
                .into_iter()
                .collect(),
        },
    );
    let mut client = Client::new(Config::new(node));
    client.connected();
    client.subscribe(CLUSTER, ["a"]).expect("subscribed");
    match client.poll_request(Instant::now()) {
        Some(Request::Sotw(r)) => {
            let node = r.node.expect("node");
            assert_eq!(node.dynamic_parameters[CLUSTER].params["env"], "prod");
        }
        other => panic!("a SotW request: {other:?}"),
    }
}

#[test]
fn variants_are_kept_with_their_constraints_and_matched_by_them() {
    let mut p = Pair::sotw();
    p.client.connected();
    p.client
        .subscribe_locator(CLUSTER, "a", params(&[("env", "prod")]))
        .expect("subscribed");
    p.client
        .subscribe_locator(CLUSTER, "a", params(&[("env", "test")]))
        .expect("subscribed");
    p.sotw_request();
    p.sotw_in(sotw(
        CLUSTER,
        "v1",
        "n1",
        vec![
            wrapped(variant("a", "1", cluster("a", "prod"), env_is("prod"))),
            wrapped(variant("a", "1", cluster("a", "test"), env_is("test"))),
        ],
    ));
    assert!(p.sotw_request().error_detail.is_none());
    let prod = p
        .client
        .resource(CLUSTER, "a", &params(&[("env", "prod")]))
        .expect("prod");
    assert_eq!(prod.body, cluster("a", "prod"));
    assert_eq!(prod.constraints, Some(env_is("prod")));
    let test = p
        .client
        .resource(CLUSTER, "a", &params(&[("env", "test")]))
        .expect("test");
    assert_eq!(test.body, cluster("a", "test"));
    assert!(p
        .client
        .resource(CLUSTER, "a", &params(&[("env", "dev")]))
        .is_none());
}

#[test]
fn variant_that_matches_no_locator_is_not_taken() {
    let mut p = Pair::delta();
    p.client.connected();
    p.client
        .subscribe_locator(CLUSTER, "a", params(&[("env", "prod")]))
        .expect("subscribed");
    p.delta_request();
    p.delta_in(delta(
        CLUSTER,
        "n1",
        vec![variant("a", "1", cluster("a", "test"), env_is("test"))],
        &[],
    ));
    assert!(p.names(CLUSTER).is_empty());
}

#[test]
fn delta_removal_of_a_variant_keeps_the_others() {
    let mut p = Pair::delta();
    p.client.connected();
    p.client.subscribe(CLUSTER, ["*"]).expect("subscribed");
    p.delta_request();
    p.delta_in(delta(
        CLUSTER,
        "n1",
        vec![
            variant("a", "1", cluster("a", "prod"), env_is("prod")),
            variant("a", "1", cluster("a", "test"), env_is("test")),
        ],
        &[],
    ));
    p.delta_request();
    let mut response = delta(CLUSTER, "n2", vec![], &[]);
    response.removed_resource_names.push(ResourceName {
        name: "a".into(),
        dynamic_parameter_constraints: Some(env_is("test")),
    });
    p.delta_in(response);
    assert!(p
        .client
        .resource(CLUSTER, "a", &params(&[("env", "prod")]))
        .is_some());
    assert!(p
        .client
        .resource(CLUSTER, "a", &params(&[("env", "test")]))
        .is_none());
}

#[test]
fn a_removal_names_each_variant_removed_with_its_constraints() {
    let mut p = Pair::delta();
    p.client.connected();
    p.client.subscribe(CLUSTER, ["*"]).expect("subscribed");
    p.delta_request();
    p.delta_in(delta(
        CLUSTER,
        "n1",
        vec![
            variant("a", "1", cluster("a", "prod"), env_is("prod")),
            variant("a", "1", cluster("a", "test"), env_is("test")),
        ],
        &[],
    ));
    p.delta_request();
    p.events();
    let mut response = delta(CLUSTER, "n2", vec![], &[]);
    response.removed_resource_names.push(ResourceName {
        name: "a".into(),
        dynamic_parameter_constraints: Some(env_is("test")),
    });
    p.delta_in(response);
    let variants: Vec<_> = p
        .news()
        .into_iter()
        .filter_map(|e| match e {
            Event::Removed { variants, .. } => Some(variants),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(variants, vec![("a".to_owned(), Some(env_is("test")))]);
}

#[test]
fn unsubscribing_a_locator_keeps_the_other_locators_of_its_name() {
    let mut p = Pair::delta();
    p.client.connected();
    for env in ["prod", "test"] {
        p.client
            .subscribe_locator(CLUSTER, "a", params(&[("env", env)]))
            .expect("subscribed");
    }
    p.delta_request();
    p.client
        .unsubscribe_locator(CLUSTER, "a", params(&[("env", "test")]));
    let request = p.delta_request();
    assert_eq!(request.resource_locators_unsubscribe.len(), 1);
    assert_eq!(
        request.resource_locators_unsubscribe[0].dynamic_parameters["env"],
        "test"
    );
    assert!(request.resource_locators_subscribe.is_empty());
}

#[test]
fn sotw_resume_sends_the_last_version_so_nothing_is_resent() {
    let mut p = Pair::sotw();
    p.client.connected();
    p.client.subscribe(CLUSTER, ["a"]).expect("subscribed");
    p.sotw_request();
    p.sotw_in(sotw(CLUSTER, "v1", "n1", vec![cluster("a", "1")]));
    p.sotw_request();
    p.client.disconnected("gone");
    assert!(p.requests().is_empty());
    p.client.connected();
    let again = p.sotw_request();
    assert_eq!(again.version_info, "v1");
    assert_eq!(again.response_nonce, "", "a new stream has no nonce yet");
    assert!(again.node.is_some());
    assert_eq!(again.resource_names, vec!["a"]);
}

#[test]
fn delta_resume_sends_initial_resource_versions() {
    let mut p = Pair::delta();
    p.client.connected();
    p.client.subscribe(CLUSTER, ["a", "b"]).expect("subscribed");
    p.delta_request();
    p.delta_in(delta(
        CLUSTER,
        "n1",
        vec![wire("a", "7", Some(cluster("a", "1")))],
        &[],
    ));
    p.delta_request();
    p.client.disconnected("gone");
    p.client.connected();
    let again = p.delta_request();
    assert_eq!(
        again.resource_names_subscribe,
        vec!["a", "b"],
        "every name again"
    );
    assert_eq!(again.initial_resource_versions.len(), 1);
    assert_eq!(again.initial_resource_versions["a"], "7");
}

#[test]
fn resource_sent_again_unchanged_is_not_reported() {
    let mut p = Pair::sotw();
    p.client.connected();
    p.client.subscribe(CLUSTER, ["a"]).expect("subscribed");
    p.sotw_request();
    p.sotw_in(sotw(CLUSTER, "v1", "n1", vec![cluster("a", "1")]));
    p.news();
    p.client.disconnected("gone");
    p.client.connected();
    p.sotw_request();
    p.sotw_in(sotw(CLUSTER, "v1", "n2", vec![cluster("a", "1")]));
    assert!(p.news().is_empty());
}

#[test]
fn full_state_response_without_a_subscribed_name_says_it_does_not_exist() {
    let mut p = Pair::sotw();
    p.client.connected();
    p.client.subscribe(CLUSTER, ["a", "b"]).expect("subscribed");
    p.sotw_request();
    p.sotw_in(sotw(CLUSTER, "v1", "n1", vec![cluster("a", "1")]));
    assert_eq!(missing(&p.news()), vec!["b"]);
}

#[test]
fn full_state_response_without_a_held_resource_removes_it() {
    let mut p = Pair::sotw();
    p.client.connected();
    p.client.subscribe(CLUSTER, ["*"]).expect("subscribed");
    p.sotw_request();
    p.sotw_in(sotw(
        CLUSTER,
        "v1",
        "n1",
        vec![cluster("a", "1"), cluster("b", "1")],
    ));
    p.sotw_request();
    p.news();
    p.sotw_in(sotw(CLUSTER, "v2", "n2", vec![cluster("a", "1")]));
    assert_eq!(removed(&p.news()), vec![(vec!["b".to_string()], false)]);
    assert_eq!(p.names(CLUSTER), vec!["a"]);
}

#[test]
fn response_of_a_type_that_is_not_full_state_removes_nothing() {
    let mut p = Pair::sotw();
    p.client.connected();
    p.client
        .subscribe(CLUSTER_LOAD_ASSIGNMENT, ["a", "b"])
        .expect("subscribed");
    p.sotw_request();
    p.sotw_in(sotw(
        CLUSTER_LOAD_ASSIGNMENT,
        "v1",
        "n1",
        vec![endpoints("a"), endpoints("b")],
    ));
    p.sotw_request();
    p.news();
    p.sotw_in(sotw(
        CLUSTER_LOAD_ASSIGNMENT,
        "v2",
        "n2",
        vec![endpoints("a")],
    ));
    let news = p.news();
    assert!(
        missing(&news).is_empty() && removed(&news).is_empty(),
        "{news:?}"
    );
    assert_eq!(p.names(CLUSTER_LOAD_ASSIGNMENT), vec!["a", "b"]);
}

#[test]
fn delta_removed_resources_says_a_name_does_not_exist() {
    let mut p = Pair::delta();
    p.client.connected();
    p.client.subscribe(CLUSTER, ["a", "b"]).expect("subscribed");
    p.delta_request();
    p.delta_in(delta(
        CLUSTER,
        "n1",
        vec![wire("a", "1", Some(cluster("a", "1")))],
        &["b"],
    ));
    assert_eq!(missing(&p.news()), vec!["b"]);
    p.delta_request();
    p.delta_in(delta(CLUSTER, "n2", vec![], &["a"]));
    assert_eq!(removed(&p.news()), vec![(vec!["a".to_string()], false)]);
    assert!(p.names(CLUSTER).is_empty());
}

#[test]
fn name_unanswered_for_the_timeout_does_not_exist() {
    let mut p = Pair::sotw();
    p.client.connected();
    p.client
        .subscribe(CLUSTER_LOAD_ASSIGNMENT, ["a", "b"])
        .expect("subscribed");
    p.sotw_request();
    assert_eq!(
        p.client.poll_timeout(),
        Some(p.now + DEFAULT_DOES_NOT_EXIST_TIMEOUT)
    );
    p.sotw_in(sotw(
        CLUSTER_LOAD_ASSIGNMENT,
        "v1",
        "n1",
        vec![endpoints("a")],
    ));
    p.news();
    p.advance(DEFAULT_DOES_NOT_EXIST_TIMEOUT - Duration::from_millis(1));
    assert!(p.news().is_empty());
    p.advance(Duration::from_millis(1));
    assert_eq!(missing(&p.news()), vec!["b"]);
    p.advance(DEFAULT_DOES_NOT_EXIST_TIMEOUT);
    assert!(p.news().is_empty(), "reported once");
}

#[test]
fn does_not_exist_timer_stops_while_disconnected_and_starts_again_with_the_request() {
    let mut p = Pair::sotw();
    p.client.connected();
    p.client
        .subscribe(CLUSTER_LOAD_ASSIGNMENT, ["a"])
        .expect("subscribed");
    p.sotw_request();
    p.advance(Duration::from_secs(10));
    p.client.disconnected("gone");
    assert_eq!(p.client.poll_timeout(), None);
    p.advance(Duration::from_secs(60));
    assert!(p.news().is_empty());
    p.client.connected();
    p.sotw_request();
    p.advance(DEFAULT_DOES_NOT_EXIST_TIMEOUT);
    assert_eq!(missing(&p.news()), vec!["a"]);
}

#[test]
fn resource_whose_ttl_passes_is_removed_as_expired() {
    let mut p = Pair::delta();
    p.client.connected();
    p.client.subscribe(CLUSTER, ["a"]).expect("subscribed");
    p.delta_request();
    let mut r = wire("a", "1", Some(cluster("a", "1")));
    r.ttl = Some(ProtoDuration {
        seconds: 5,
        nanos: 0,
    });
    p.delta_in(delta(CLUSTER, "n1", vec![r], &[]));
    p.news();
    p.advance(Duration::from_secs(5));
    assert_eq!(removed(&p.news()), vec![(vec!["a".to_string()], true)]);
    assert!(p.names(CLUSTER).is_empty());
}

#[test]
fn heartbeat_renews_the_ttl_without_an_update() {
    let mut p = Pair::sotw();
    p.client.connected();
    p.client.subscribe(CLUSTER, ["a"]).expect("subscribed");
    p.sotw_request();
    let mut r = wire("a", "1", Some(cluster("a", "1")));
    r.ttl = Some(ProtoDuration {
        seconds: 5,
        nanos: 0,
    });
    p.sotw_in(sotw(CLUSTER, "v1", "n1", vec![wrapped(r.clone())]));
    p.sotw_request();
    p.news();
    p.advance(Duration::from_secs(4));
    let mut heartbeat = wire("a", "1", None);
    heartbeat.ttl = r.ttl;
    p.sotw_in(sotw(CLUSTER, "v1", "n2", vec![wrapped(heartbeat)]));
    assert!(p.news().is_empty(), "a heartbeat is not an update");
    p.advance(Duration::from_secs(4));
    assert!(
        p.news().is_empty(),
        "renewed: 8 s after the resource, 4 after the heartbeat"
    );
    p.advance(Duration::from_secs(1));
    assert_eq!(removed(&p.news()), vec![(vec!["a".to_string()], true)]);
}

#[test]
fn response_past_the_name_limit_is_nacked_and_not_held() {
    let mut p = Pair::sotw().with_limits(Limits {
        max_names: 2,
        ..Limits::default()
    });
    p.client.connected();
    p.client.subscribe(CLUSTER, ["*"]).expect("subscribed");
    p.sotw_request();
    p.sotw_in(sotw(
        CLUSTER,
        "v1",
        "n1",
        vec![cluster("a", "1"), cluster("b", "1"), cluster("c", "1")],
    ));
    let nack = p.sotw_request();
    assert!(nack
        .error_detail
        .is_some_and(|d| d.message.contains("limit of 2")));
    assert!(p.names(CLUSTER).is_empty());
}

#[test]
fn response_past_the_byte_limit_is_nacked_and_not_held() {
    let mut p = Pair::delta().with_limits(Limits {
        max_bytes: 10,
        ..Limits::default()
    });
    p.client.connected();
    p.client.subscribe(CLUSTER, ["*"]).expect("subscribed");
    p.delta_request();
    let big = cluster("a", &"x".repeat(64));
    p.delta_in(delta(CLUSTER, "n1", vec![wire("a", "1", Some(big))], &[]));
    assert!(p
        .delta_request()
        .error_detail
        .is_some_and(|d| d.message.contains("bytes")));
    assert!(p.names(CLUSTER).is_empty());
}

#[test]
fn subscription_past_the_limit_is_refused() {
    let mut p = Pair::sotw().with_limits(Limits {
        max_names: 1,
        max_types: 1,
        ..Limits::default()
    });
    p.client.subscribe(CLUSTER, ["a"]).expect("subscribed");
    assert!(p.client.subscribe(CLUSTER, ["b"]).is_err());
    assert!(p.client.subscribe(LISTENER, ["l"]).is_err());
}

#[test]
fn disconnect_keeps_what_is_held() {
    let mut p = Pair::sotw();
    p.client.connected();
    p.client.subscribe(CLUSTER, ["a"]).expect("subscribed");
    p.sotw_request();
    p.sotw_in(sotw(CLUSTER, "v1", "n1", vec![cluster("a", "1")]));
    p.client.disconnected("reset");
    assert!(matches!(p.events().last(), Some(Event::Disconnected { reason }) if reason == "reset"));
    assert_eq!(p.names(CLUSTER), vec!["a"]);
}

#[test]
fn constraints_match_values_presence_and_their_combinations() {
    let exists = DynamicParameterConstraints {
        r#type: Some(Type::Constraint(SingleConstraint {
            key: "zone".into(),
            constraint_type: Some(ConstraintType::Exists(Exists {})),
        })),
    };
    let both = DynamicParameterConstraints {
        r#type: Some(Type::AndConstraints(ConstraintList {
            constraints: vec![env_is("prod"), exists.clone()],
        })),
    };
    let either = DynamicParameterConstraints {
        r#type: Some(Type::OrConstraints(ConstraintList {
            constraints: vec![env_is("prod"), env_is("test")],
        })),
    };
    let not_prod = DynamicParameterConstraints {
        r#type: Some(Type::NotConstraints(Box::new(env_is("prod")))),
    };
    let prod = params(&[("env", "prod")]);
    let prod_zoned = params(&[("env", "prod"), ("zone", "a")]);
    assert!(matches(&env_is("prod"), &prod) && !matches(&env_is("test"), &prod));
    assert!(matches(&exists, &prod_zoned) && !matches(&exists, &prod));
    assert!(matches(&both, &prod_zoned) && !matches(&both, &prod));
    assert!(matches(&either, &params(&[("env", "test")])) && !matches(&either, &Params::new()));
    assert!(!matches(&not_prod, &prod) && matches(&not_prod, &Params::new()));
}

#[test]
fn type_names_resolve_to_type_urls() {
    assert_eq!(types::resolve("cluster").as_deref(), Some(CLUSTER));
    assert_eq!(types::resolve("clusters").as_deref(), Some(CLUSTER));
    assert_eq!(types::resolve("CDS").as_deref(), Some(CLUSTER));
    assert_eq!(
        types::resolve("endpoints").as_deref(),
        Some(CLUSTER_LOAD_ASSIGNMENT)
    );
    assert_eq!(
        types::resolve("endpoint").as_deref(),
        Some(CLUSTER_LOAD_ASSIGNMENT)
    );
    assert_eq!(types::resolve("listeners").as_deref(), Some(LISTENER));
    assert_eq!(
        types::resolve("type.example/x.Y").as_deref(),
        Some("type.example/x.Y")
    );
    assert_eq!(types::resolve("clustr"), None);
}

#[test]
fn first_response_of_a_type_is_reported_even_when_empty() {
    let mut p = Pair::sotw();
    p.client.connected();
    p.client.subscribe(CLUSTER, ["*"]).expect("subscribed");
    p.sotw_request();
    p.sotw_in(sotw(CLUSTER, "v0", "n1", vec![]));
    match p.news().as_slice() {
        // (And the wildcard's answer: it was in the stream's first request of the type.)
        [Event::Update(u), Event::WildcardAnswered { .. }] => {
            assert!(u.added.is_empty() && u.version == "v0")
        }
        other => panic!("one empty update: {other:?}"),
    }
    p.sotw_request();
    p.sotw_in(sotw(CLUSTER, "v0", "n2", vec![]));
    assert!(p.news().is_empty(), "only the first");
}

#[test]
fn ttl_past_what_the_clock_counts_never_expires() {
    let mut p = Pair::delta();
    p.client.connected();
    p.client.subscribe(CLUSTER, ["a"]).expect("subscribed");
    p.delta_request();
    let mut r = wire("a", "1", Some(cluster("a", "1")));
    r.ttl = Some(ProtoDuration {
        seconds: i64::MAX,
        nanos: 999_999_999,
    });
    p.delta_in(delta(CLUSTER, "n1", vec![r], &[]));
    assert_eq!(added_names(&p.news()), vec!["a"]);
    assert_eq!(p.client.poll_timeout(), None);
}

#[test]
fn full_state_response_that_may_predate_a_new_name_leaves_it_to_the_timer() {
    let mut p = Pair::sotw();
    p.client.connected();
    p.client.subscribe(CLUSTER, ["a"]).expect("subscribed");
    p.sotw_request();
    p.sotw_in(sotw(CLUSTER, "v1", "n1", vec![cluster("a", "1")]));
    p.sotw_request();
    p.news();
    p.client.subscribe(CLUSTER, ["b"]).expect("subscribed");
    p.sotw_request();
    // This response may answer the request before b was asked for.
    p.sotw_in(sotw(CLUSTER, "v2", "n2", vec![cluster("a", "2")]));
    assert!(missing(&p.news()).is_empty());
    p.sotw_request();
    // This one comes after a response that followed the request for b.
    p.sotw_in(sotw(CLUSTER, "v3", "n3", vec![cluster("a", "3")]));
    assert_eq!(missing(&p.news()), vec!["b"]);
}

/// A VirtualHost body named `name`.
fn virtual_host(name: &str) -> Any {
    use envoy_types::pb::envoy::config::route::v3::VirtualHost;
    Any {
        type_url: types::VIRTUAL_HOST.into(),
        value: VirtualHost {
            name: name.into(),
            ..Default::default()
        }
        .encode_to_vec(),
    }
}

fn aliased(name: &str, aliases: &[&str], body: Option<Any>) -> WireResource {
    WireResource {
        aliases: aliases.iter().map(|a| a.to_string()).collect(),
        ..wire(name, "1", body)
    }
}

#[test]
fn a_resource_is_taken_for_a_subscription_to_one_of_its_aliases() {
    let mut p = Pair::delta();
    p.client.connected();
    p.client
        .subscribe(types::VIRTUAL_HOST, ["rc/backend.example"])
        .expect("subscribed");
    p.delta_request();
    p.delta_in(delta(
        types::VIRTUAL_HOST,
        "n1",
        vec![aliased(
            "rc/backend",
            &["rc/backend.example"],
            Some(virtual_host("rc/backend")),
        )],
        &[],
    ));
    let events = p.news();
    assert_eq!(added_names(&events), ["rc/backend"], "{events:?}");
    let Some(Event::Update(update)) = events.first() else {
        panic!("an update: {events:?}");
    };
    assert_eq!(update.added[0].aliases, ["rc/backend.example"], "reported");
    assert_eq!(p.names(types::VIRTUAL_HOST), ["rc/backend"]);
    // Answered: its does-not-exist timer is stopped, and a reconnect starts none.
    assert_eq!(p.client.poll_timeout(), None);
    p.client.disconnected("gone");
    p.client.connected();
    p.delta_request();
    assert_eq!(p.client.poll_timeout(), None);
    p.advance(DEFAULT_DOES_NOT_EXIST_TIMEOUT * 2);
    assert!(missing(&p.news()).is_empty());
    // The alias unsubscribed: the resource is no longer wanted.
    p.client
        .unsubscribe(types::VIRTUAL_HOST, "rc/backend.example");
    assert!(p.names(types::VIRTUAL_HOST).is_empty());
}

#[test]
fn a_resource_without_a_body_naming_an_alias_says_the_alias_does_not_exist() {
    let mut p = Pair::delta();
    p.client.connected();
    p.client
        .subscribe(types::VIRTUAL_HOST, ["rc/nope.example"])
        .expect("subscribed");
    p.delta_request();
    p.delta_in(delta(
        types::VIRTUAL_HOST,
        "n1",
        vec![aliased("rc/nope.example", &["rc/nope.example"], None)],
        &[],
    ));
    let events = p.news();
    assert_eq!(missing(&events), ["rc/nope.example"], "{events:?}");
    assert!(p.names(types::VIRTUAL_HOST).is_empty());
    assert_eq!(p.client.poll_timeout(), None, "no timer left");
    // Said again: not reported twice.
    p.delta_request();
    p.delta_in(delta(
        types::VIRTUAL_HOST,
        "n2",
        vec![aliased("rc/nope.example", &["rc/nope.example"], None)],
        &[],
    ));
    assert!(missing(&p.news()).is_empty());
}

#[test]
fn sotw_response_of_a_type_no_longer_subscribed_still_sets_the_nonce() {
    let mut p = Pair::sotw();
    p.client.connected();
    p.client.subscribe(CLUSTER, ["a"]).expect("subscribed");
    p.sotw_request();
    p.sotw_in(sotw(CLUSTER, "v1", "n1", vec![cluster("a", "1")]));
    p.sotw_request();
    p.client.unsubscribe(CLUSTER, "a");
    p.sotw_request();
    // The server answers the unsubscription; the client holds nothing of the type.
    p.sotw_in(sotw(CLUSTER, "v2", "n2", vec![]));
    p.client.subscribe(CLUSTER, ["b"]).expect("subscribed");
    let request = p.sotw_request();
    // A server ignores a request with a stale nonce (spec, "When to send an update").
    assert_eq!(request.response_nonce, "n2", "{request:?}");
    assert_eq!(request.resource_names, ["b"]);
}

#[test]
fn costs_follow_the_change_timers_and_indexes_stay_in_step() {
    // A first load by name, an ACK, then a change: the indexes the machine keeps (names
    // held, bytes, timers) agree with what it holds.
    let mut p = Pair::delta();
    p.client.connected();
    let names: Vec<String> = (0..50).map(|i| format!("e{i}")).collect();
    p.client
        .subscribe(CLUSTER_LOAD_ASSIGNMENT, &names)
        .expect("subscribed");
    p.delta_request();
    let half: Vec<WireResource> = names[..25]
        .iter()
        .map(|n| wire(n, "1", Some(endpoints(n))))
        .collect();
    p.delta_in(delta(CLUSTER_LOAD_ASSIGNMENT, "n1", half, &[]));
    p.delta_request();
    p.client.check_invariants().expect("invariants");
    // The names not received keep their timers: they fire once.
    p.advance(DEFAULT_DOES_NOT_EXIST_TIMEOUT);
    assert_eq!(missing(&p.news()).len(), 25);
    assert_eq!(p.client.poll_timeout(), None);
    p.client.unsubscribe(CLUSTER_LOAD_ASSIGNMENT, "e0");
    p.client.check_invariants().expect("invariants");
    assert_eq!(p.names(CLUSTER_LOAD_ASSIGNMENT).len(), 24);
}

/// Glob collections (xRFC TP1): a glob subscription takes the members the server sends, each
/// held under its own name.
mod glob {
    use super::*;

    const IN: &str = "xdstp://a/envoy.config.cluster.v3.Cluster/in";

    fn n(id: &str) -> String {
        format!("{IN}/{id}")
    }

    fn member(id: &str, version: &str) -> WireResource {
        wire(&n(id), version, Some(cluster(&n(id), version)))
    }

    #[test]
    fn glob_members_are_taken_and_held_each_under_its_own_name() {
        let mut p = Pair::delta();
        p.client.connected();
        p.client.subscribe(CLUSTER, [n("*")]).expect("subscribed");
        p.delta_request();
        // Members, and what is not one: below the path, another path, other parameters.
        p.delta_in(delta(
            CLUSTER,
            "n1",
            vec![
                member("c1", "1"),
                member("c2", "1"),
                member("sub/c3", "1"),
                member("c4?k=v", "1"),
                wire(
                    "xdstp://a/envoy.config.cluster.v3.Cluster/other/c5",
                    "1",
                    Some(cluster("c5", "1")),
                ),
            ],
            &[],
        ));
        assert_eq!(added_names(&p.news()), [n("c1"), n("c2")]);
        assert_eq!(p.names(CLUSTER), [n("c1"), n("c2")]);
        // A member added, one removed.
        p.delta_request();
        p.delta_in(delta(CLUSTER, "n2", vec![member("c9", "1")], &[&n("c1")]));
        let news = p.news();
        assert_eq!(added_names(&news), [n("c9")]);
        assert_eq!(removed(&news), [(vec![n("c1")], false)]);
        assert!(missing(&news).is_empty(), "{news:?}");
        assert_eq!(p.names(CLUSTER), [n("c2"), n("c9")]);
        p.client.check_invariants().unwrap();
    }

    #[test]
    fn glob_with_context_parameters_takes_the_members_with_equal_parameters() {
        let mut p = Pair::delta();
        p.client
            .subscribe(CLUSTER, [n("*?k=v")])
            .expect("subscribed");
        p.client.connected();
        p.delta_request();
        p.delta_in(delta(
            CLUSTER,
            "n1",
            vec![
                member("c1?k=v", "1"),
                member("c2", "1"),
                member("c3?k=w", "1"),
            ],
            &[],
        ));
        assert_eq!(p.names(CLUSTER), [n("c1?k=v")]);
    }

    #[test]
    fn a_member_received_stops_the_globs_does_not_exist_timer() {
        let mut p = Pair::delta();
        p.client.connected();
        p.client.subscribe(CLUSTER, [n("*")]).expect("subscribed");
        p.delta_request();
        p.delta_in(delta(CLUSTER, "n1", vec![member("c1", "1")], &[]));
        p.news();
        p.client.check_invariants().unwrap();
        p.advance(DEFAULT_DOES_NOT_EXIST_TIMEOUT * 2);
        assert!(missing(&p.news()).is_empty());
    }

    #[test]
    fn an_empty_glob_answered_by_its_name_in_removed_resources_does_not_exist_until_a_member_comes()
    {
        let mut p = Pair::delta();
        p.client.connected();
        p.client.subscribe(CLUSTER, [n("*")]).expect("subscribed");
        p.delta_request();
        p.delta_in(delta(CLUSTER, "n1", vec![], &[&n("*")]));
        assert_eq!(missing(&p.news()), [n("*")]);
        p.delta_request();
        p.delta_in(delta(CLUSTER, "n2", vec![member("c1", "1")], &[]));
        assert_eq!(added_names(&p.news()), [n("c1")]);
        p.client.check_invariants().unwrap();
    }

    #[test]
    fn sotw_full_state_glob_holds_its_members_and_a_member_left_out_is_removed() {
        let mut p = Pair::sotw();
        p.client.connected();
        p.client.subscribe(CLUSTER, [n("*")]).expect("subscribed");
        p.sotw_request();
        p.sotw_in(sotw(
            CLUSTER,
            "v1",
            "n1",
            vec![cluster(&n("c1"), "1"), cluster(&n("c2"), "1")],
        ));
        let news = p.news();
        assert_eq!(added_names(&news), [n("c1"), n("c2")]);
        assert!(missing(&news).is_empty(), "the glob has members: {news:?}");
        p.sotw_request();
        p.sotw_in(sotw(CLUSTER, "v2", "n2", vec![cluster(&n("c1"), "1")]));
        assert_eq!(removed(&p.news()), [(vec![n("c2")], false)]);
        assert_eq!(p.names(CLUSTER), [n("c1")]);
        p.client.check_invariants().unwrap();
    }

    #[test]
    fn sotw_full_state_glob_without_members_does_not_exist() {
        let mut p = Pair::sotw();
        p.client.connected();
        p.client.subscribe(CLUSTER, [n("*")]).expect("subscribed");
        p.sotw_request();
        p.sotw_in(sotw(CLUSTER, "v1", "n1", vec![]));
        assert_eq!(missing(&p.news()), [n("*")]);
    }

    #[test]
    fn a_glob_spelled_non_canonically_is_asked_canonically_and_takes_its_members() {
        let mut p = Pair::delta();
        p.client.connected();
        p.client
            .subscribe(CLUSTER, [n("*?b=2&a=1")])
            .expect("subscribed");
        assert_eq!(
            p.delta_request().resource_names_subscribe,
            [n("*?a=1&b=2")],
            "asked canonically"
        );
        // The server sends its members canonical (and one in another spelling of them).
        p.delta_in(delta(
            CLUSTER,
            "n1",
            vec![
                member("c1?a=1&b=2", "1"),
                member("c2?b=2&a=%31", "1"),
                member("c3?a=1", "1"),
            ],
            &[],
        ));
        assert_eq!(
            added_names(&p.news()),
            [n("c1?a=1&b=2"), n("c2?a=1&b=2")],
            "members matched canonically, each held under its canonical name"
        );
        p.advance(DEFAULT_DOES_NOT_EXIST_TIMEOUT * 2);
        assert!(missing(&p.news()).is_empty(), "the glob is answered");
        // A removal spelled otherwise removes the member.
        p.delta_request();
        p.delta_in(delta(CLUSTER, "n2", vec![], &[&n("c2?b=2&a=1")]));
        assert_eq!(removed(&p.news()), [(vec![n("c2?a=1&b=2")], false)]);
        // Unsubscribed in yet another spelling, the glob and its members go.
        p.client.unsubscribe(CLUSTER, &n("*?%62=2&a=1"));
        assert!(p.names(CLUSTER).is_empty());
        assert_eq!(
            p.delta_request().resource_names_unsubscribe,
            [n("*?a=1&b=2")]
        );
        p.client.check_invariants().unwrap();
    }

    #[test]
    fn sotw_a_name_spelled_non_canonically_is_answered_by_the_resource_sent_canonically() {
        let mut p = Pair::sotw();
        p.client.connected();
        p.client
            .subscribe(CLUSTER, [n("c1?b=2&a=1"), n("c%32")])
            .expect("subscribed");
        assert_eq!(
            p.sotw_request().resource_names,
            [n("c1?a=1&b=2"), n("c2")],
            "asked canonically"
        );
        p.sotw_in(sotw(
            CLUSTER,
            "v1",
            "n1",
            vec![cluster(&n("c1?a=1&b=2"), "1"), cluster(&n("c2"), "1")],
        ));
        let news = p.news();
        assert_eq!(added_names(&news), [n("c1?a=1&b=2"), n("c2")]);
        assert!(missing(&news).is_empty(), "both answered: {news:?}");
        p.client.unsubscribe(CLUSTER, &n("c1?b=2&a=1"));
        assert_eq!(p.names(CLUSTER), [n("c2")]);
        p.client.check_invariants().unwrap();
    }

    #[test]
    fn unsubscribing_a_glob_drops_the_members_only_it_wanted() {
        let mut p = Pair::delta();
        p.client.connected();
        p.client
            .subscribe(CLUSTER, [n("*"), n("c2")])
            .expect("subscribed");
        p.delta_request();
        p.delta_in(delta(
            CLUSTER,
            "n1",
            vec![member("c1", "1"), member("c2", "1")],
            &[],
        ));
        assert_eq!(p.names(CLUSTER), [n("c1"), n("c2")]);
        p.client.unsubscribe(CLUSTER, &n("*"));
        assert_eq!(p.names(CLUSTER), [n("c2")]);
        p.client.check_invariants().unwrap();
    }
}

mod cost;
mod wildcard;
