//! xRFC TP2 variants over real gRPC on loopback: what a client that subscribes with dynamic
//! parameters receives on the wire (resources wrapped in `Resource` with `resource_name`,
//! removals in `removed_resource_names`), and what a legacy client receives (plain resources).

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DiscoveryRequest, DynamicParameterConstraints, Resource, ResourceLocator,
};
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use xdsd_core::params::Constraints;
use xdsd_core::store::{Change, RESOURCE_WRAPPER};
use xdsd_core::types::CLUSTER_LOAD_ASSIGNMENT;

use crate::support::{label, labelled, node_with_metadata, protocol_tests, Mode, Server, WAIT};

fn env(value: &str) -> DynamicParameterConstraints {
    crate::support::env_constraint(value)
}

/// A server whose ClusterLoadAssignment "e" has a prod and a test variant (labelled so).
async fn server(mode: Mode) -> Server {
    let server = Server::start_in(mode).await;
    server
        .store
        .replace_all(["prod", "test"].map(|v| {
            labelled(CLUSTER_LOAD_ASSIGNMENT, "e", v)
                .with_constraints(Some(Constraints::new(env(v)).unwrap()))
        }))
        .unwrap();
    server
}

fn locator(env: &str) -> ResourceLocator {
    ResourceLocator {
        name: "e".into(),
        dynamic_parameters: [("env".to_string(), env.to_string())].into_iter().collect(),
    }
}

async fn sotw_locators_get_resources_wrapped_with_their_constraints(mode: Mode) {
    let server = server(mode).await;
    let (tx, rx) = mpsc::channel(4);
    let mut responses = AggregatedDiscoveryServiceClient::new(server.channel.clone())
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(DiscoveryRequest {
        node: node_with_metadata("variants-test", "", &[]),
        type_url: CLUSTER_LOAD_ASSIGNMENT.into(),
        resource_locators: vec![locator("test")],
        ..Default::default()
    })
    .await
    .unwrap();
    let r = tokio::time::timeout(WAIT, responses.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(!r.version_info.is_empty());
    assert_eq!(r.resources.len(), 1);
    let any = &r.resources[0];
    assert_eq!(any.type_url, RESOURCE_WRAPPER);
    let wrapped = Resource::decode(any.value.as_slice()).unwrap();
    assert!(wrapped.name.is_empty(), "resource_name replaces name");
    let name = wrapped.resource_name.unwrap();
    assert_eq!(name.name, "e");
    assert_eq!(name.dynamic_parameter_constraints, Some(env("test")));
    let inner = wrapped.resource.unwrap();
    assert_eq!(inner.type_url, CLUSTER_LOAD_ASSIGNMENT);
    assert_eq!(label(&inner.value), "test");
    drop(tx);
    server.stop().await;
}

async fn sotw_legacy_client_gets_the_plain_variant_of_its_metadata(mode: Mode) {
    let server = server(mode).await;
    let (tx, rx) = mpsc::channel(4);
    let mut responses = AggregatedDiscoveryServiceClient::new(server.channel.clone())
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(DiscoveryRequest {
        node: node_with_metadata("variants-test", "", &[("env", "prod")]),
        type_url: CLUSTER_LOAD_ASSIGNMENT.into(),
        resource_names: vec!["e".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let r = tokio::time::timeout(WAIT, responses.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(r.resources.len(), 1);
    assert_eq!(r.resources[0].type_url, CLUSTER_LOAD_ASSIGNMENT);
    assert_eq!(label(&r.resources[0].value), "prod");
    drop(tx);
    server.stop().await;
}

async fn delta_locators_get_resource_names_and_removed_resource_names(mode: Mode) {
    let server = server(mode).await;
    let (tx, rx) = mpsc::channel(4);
    let mut responses = AggregatedDiscoveryServiceClient::new(server.channel.clone())
        .delta_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(DeltaDiscoveryRequest {
        node: node_with_metadata("variants-test", "", &[]),
        type_url: CLUSTER_LOAD_ASSIGNMENT.into(),
        resource_locators_subscribe: vec![locator("test")],
        ..Default::default()
    })
    .await
    .unwrap();
    let mut next = async || {
        tokio::time::timeout(WAIT, responses.message())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
    };
    let r = next().await;
    assert_eq!(r.resources.len(), 1);
    let name = r.resources[0].resource_name.clone().unwrap();
    assert_eq!(name.dynamic_parameter_constraints, Some(env("test")));
    assert!(r.resources[0].name.is_empty());
    tx.send(DeltaDiscoveryRequest {
        type_url: CLUSTER_LOAD_ASSIGNMENT.into(),
        response_nonce: r.nonce.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    server
        .store
        .apply([Change::RemoveVariant {
            type_url: CLUSTER_LOAD_ASSIGNMENT.into(),
            name: "e".into(),
            constraints: Some(Constraints::new(env("test")).unwrap()),
        }])
        .unwrap();
    let r = next().await;
    assert!(r.resources.is_empty());
    assert!(r.removed_resources.is_empty());
    assert_eq!(r.removed_resource_names.len(), 1);
    assert_eq!(r.removed_resource_names[0].name, "e");
    assert_eq!(
        r.removed_resource_names[0].dynamic_parameter_constraints,
        Some(env("test"))
    );
    drop(tx);
    server.stop().await;
}

/// `ServerHandle::preview` (the admin API's `GET /config`): what a client with that node would
/// be served, the variant its parameters pick, without connecting one.
async fn a_preview_shows_what_a_node_would_receive(mode: Mode) {
    use envoy_types::pb::envoy::config::core::v3::Node;
    use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
    let server = server(mode).await;
    server.put(xdsd_core::types::CLUSTER, "c", "c");
    let node = |env: Option<&str>| Node {
        id: "n1".into(),
        metadata: env.map(|env| Struct {
            fields: [(
                "env".to_owned(),
                Value {
                    kind: Some(Kind::StringValue(env.into())),
                },
            )]
            .into(),
        }),
        ..Default::default()
    };
    let preview = |env: Option<&str>| server.handle.preview(&node(env)).expect("a preview");
    let of = |types: &[xdsd_core::session::SotwResponse], type_url: &str| {
        types
            .iter()
            .find(|t| &*t.type_url == type_url)
            .map(|t| t.resources.iter().cloned().collect::<Vec<_>>())
            .unwrap_or_else(|| panic!("no {type_url}"))
    };
    let prod = preview(Some("prod"));
    let e = of(&prod, CLUSTER_LOAD_ASSIGNMENT);
    assert_eq!(e.len(), 1);
    assert_eq!(&**e[0].name(), "e");
    assert!(e[0]
        .constraints()
        .is_some_and(|c| c.to_string().contains("prod")));
    let clusters = of(&prod, xdsd_core::types::CLUSTER);
    assert_eq!(&**clusters[0].name(), "c");
    let test = of(&preview(Some("test")), CLUSTER_LOAD_ASSIGNMENT);
    assert!(test[0]
        .constraints()
        .is_some_and(|c| c.to_string().contains("test")));
    // No parameters: no variant matches.
    assert!(of(&preview(None), CLUSTER_LOAD_ASSIGNMENT).is_empty());
    // A type pending whole (a relay's wildcard, asked upstream and not answered yet) holds back a client's
    // clusters, not the preview of what the store holds.
    server
        .store
        .pending_names()
        .declare(
            xdsd_core::store::PendingName::new(
                xdsd_core::types::CLUSTER,
                xdsd_core::store::WHOLE_TYPE,
            ),
            std::time::Instant::now() + std::time::Duration::from_secs(60),
        )
        .expect("room for it");
    let clusters = of(&preview(Some("prod")), xdsd_core::types::CLUSTER);
    assert_eq!(
        clusters.len(),
        1,
        "the store's clusters, pending name or not"
    );
}

protocol_tests! {
    through_a_relay: [
        sotw_locators_get_resources_wrapped_with_their_constraints,
        delta_locators_get_resource_names_and_removed_resource_names,
    ],
    // What the server the client reaches holds, not a rule of the protocol.
    direct_only: [a_preview_shows_what_a_node_would_receive],
    // A legacy client's variant is chosen by its node's metadata, which a relay presents
    // upstream only with --aggregate-by cluster or node (docs/relay.md).
    relay_by_node: [sotw_legacy_client_gets_the_plain_variant_of_its_metadata],
}
