//! The session's own rules: node identity, type resolution, parameter sets, push order.

use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};

use super::*;
use crate::protocol::test_support::input;
use crate::store::Store;
use crate::types::{CLUSTER, CLUSTER_LOAD_ASSIGNMENT, LISTENER};

fn node(id: &str, cluster: &str) -> Node {
    Node {
        id: id.into(),
        cluster: cluster.into(),
        ..Default::default()
    }
}

fn with_metadata(mut node: Node, fields: &[(&str, &str)]) -> Node {
    node.metadata = Some(Struct {
        fields: fields
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    Value {
                        kind: Some(Kind::StringValue(v.to_string())),
                    },
                )
            })
            .collect(),
    });
    node
}

fn sotw(type_url: &str, names: &[&str], nonce: &str, node: Option<&Node>) -> SotwRequest {
    (&DiscoveryRequest {
        type_url: type_url.into(),
        resource_names: names.iter().map(|n| n.to_string()).collect(),
        response_nonce: nonce.into(),
        node: node.cloned(),
        ..Default::default()
    })
        .into()
}

fn ads() -> Session<SotwSubscription> {
    Session::new(None)
}

#[test]
fn node_identity_is_taken_from_the_first_request() {
    let mut s = ads();
    let handled = s
        .handle_request(
            &sotw(CLUSTER, &[], "", Some(&node("a", "c"))),
            &Snapshot::default(),
        )
        .unwrap();
    assert!(handled.identified);
    assert_eq!(s.node_id(), "a");
    assert_eq!(s.node().unwrap().cluster, "c");
}

#[test]
fn later_requests_may_omit_the_node() {
    let mut s = ads();
    let snap = Snapshot::default();
    s.handle_request(&sotw(CLUSTER, &[], "", Some(&node("a", "c"))), &snap)
        .unwrap();
    s.handle_request(&sotw(LISTENER, &[], "", None), &snap)
        .unwrap();
    s.handle_request(&sotw(LISTENER, &[], "", Some(&node("", ""))), &snap)
        .unwrap();
    assert_eq!(s.node_id(), "a");
}

#[test]
fn a_later_request_with_a_different_node_is_an_error() {
    let snap = Snapshot::default();
    for other in [node("b", "c"), node("a", "other")] {
        let mut s = ads();
        s.handle_request(&sotw(CLUSTER, &[], "", Some(&node("a", "c"))), &snap)
            .unwrap();
        let err = s
            .handle_request(&sotw(LISTENER, &[], "", Some(&other)), &snap)
            .unwrap_err();
        assert!(matches!(err, SessionError::NodeChanged { .. }), "{err}");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    }
}

#[test]
fn an_aggregated_request_without_a_type_url_is_an_error() {
    let err = ads()
        .handle_request(&sotw("", &[], "", None), &Snapshot::default())
        .unwrap_err();
    assert_eq!(err, SessionError::MissingTypeUrl);
}

#[test]
fn a_per_type_service_serves_only_its_type() {
    let mut s: Session<SotwSubscription> = Session::new(Some(Arc::from(CLUSTER)));
    let snap = Snapshot::default();
    // An empty type URL means the service's type.
    assert_eq!(
        &*s.handle_request(&sotw("", &[], "", None), &snap)
            .unwrap()
            .type_url,
        CLUSTER
    );
    let err = s
        .handle_request(&sotw(LISTENER, &[], "", None), &snap)
        .unwrap_err();
    assert!(matches!(err, SessionError::WrongType { .. }));
}

#[test]
fn node_metadata_strings_and_cluster_become_parameters() {
    let mut n = with_metadata(node("a", "edge"), &[("env", "prod"), ("zone", "z1")]);
    if let Some(m) = n.metadata.as_mut() {
        m.fields.insert(
            "replicas".into(),
            Value {
                kind: Some(Kind::NumberValue(3.0)),
            },
        );
    }
    let client = ClientNode::from_node(&n).unwrap();
    let expected: ParamSet = [
        ("env", "prod"),
        ("zone", "z1"),
        (NODE_CLUSTER_PARAM, "edge"),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        client.derived, expected,
        "non-string metadata is not a parameter"
    );
    assert_eq!(client.params_for(CLUSTER), &expected);
}

#[test]
fn node_dynamic_parameters_for_a_type_take_precedence_over_metadata() {
    let mut n = with_metadata(node("a", "c"), &[("env", "prod")]);
    n.dynamic_parameters.insert(
        CLUSTER.into(),
        envoy_types::pb::xds::core::v3::ContextParams {
            params: [("env".to_string(), "test".to_string())]
                .into_iter()
                .collect(),
        },
    );
    let client = ClientNode::from_node(&n).unwrap();
    assert_eq!(client.params_for(CLUSTER).get("env"), Some("test"));
    assert_eq!(client.params_for(LISTENER).get("env"), Some("prod"));
}

#[test]
fn too_many_distinct_parameter_sets_is_a_resource_limit() {
    let mut s = ads();
    let snap = Snapshot::default();
    let locators: Vec<ResourceLocator> = (0..=MAX_PARAM_SETS)
        .map(|i| ResourceLocator {
            name: format!("r{i}"),
            dynamic_parameters: [("k".to_string(), i.to_string())].into_iter().collect(),
        })
        .collect();
    let mut request = sotw(CLUSTER, &[], "", None);
    request.resource_locators = locators;
    let err = s.handle_request(&request, &snap).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ResourceExhausted, "{err}");
}

#[test]
fn responses_go_out_in_make_before_break_order() {
    let store = Store::new();
    store
        .replace_all([
            input(LISTENER, "l", "1"),
            input(CLUSTER, "c", "1"),
            input(CLUSTER_LOAD_ASSIGNMENT, "c", "1"),
        ])
        .unwrap();
    let snap = store.snapshot();
    let mut s = ads();
    for (t, names) in [
        (LISTENER, &[][..]),
        (CLUSTER_LOAD_ASSIGNMENT, &["c"][..]),
        (CLUSTER, &[][..]),
    ] {
        s.handle_request(&sotw(t, names, "", Some(&node("a", "c"))), &snap)
            .unwrap();
    }
    let mut order = Vec::new();
    while let Some((type_url, _)) = s.poll_response(&snap) {
        order.push(type_url.to_string());
    }
    assert_eq!(order, [CLUSTER, CLUSTER_LOAD_ASSIGNMENT, LISTENER]);
}
