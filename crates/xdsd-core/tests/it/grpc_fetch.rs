//! The unary `Fetch*` methods over real gRPC on loopback, through envoy-types' generated clients:
//! each per-type service answers with what one of its streams would send first for the same
//! request (same resources, same version), at once, and keeps nothing.

use envoy_types::pb::envoy::service::cluster::v3::cluster_discovery_service_client::ClusterDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::single_constraint::ConstraintType;
use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::{
    SingleConstraint, Type,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DiscoveryRequest, DiscoveryResponse, DynamicParameterConstraints, Resource, ResourceLocator,
};
use envoy_types::pb::envoy::service::endpoint::v3::endpoint_discovery_service_client::EndpointDiscoveryServiceClient;
use envoy_types::pb::envoy::service::listener::v3::listener_discovery_service_client::ListenerDiscoveryServiceClient;
use envoy_types::pb::envoy::service::route::v3::route_discovery_service_client::RouteDiscoveryServiceClient;
use envoy_types::pb::envoy::service::route::v3::scoped_routes_discovery_service_client::ScopedRoutesDiscoveryServiceClient;
use envoy_types::pb::envoy::service::runtime::v3::runtime_discovery_service_client::RuntimeDiscoveryServiceClient;
use envoy_types::pb::envoy::service::secret::v3::secret_discovery_service_client::SecretDiscoveryServiceClient;
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Code, Status};
use xdsd_core::params::Constraints;
use xdsd_core::store::RESOURCE_WRAPPER;
use xdsd_core::types::{
    CLUSTER, CLUSTER_LOAD_ASSIGNMENT, LISTENER, ROUTE_CONFIGURATION, RUNTIME,
    SCOPED_ROUTE_CONFIGURATION, SECRET,
};

use crate::support::{
    body, input, label, labelled, node_with_metadata, protocol_tests, Mode, Server, WAIT,
};

/// For each per-type service with a `Fetch*` method: `fetch` calls it, `stream_first` opens its
/// stream, sends the same request and takes the first response.
macro_rules! services {
    ($($type_url:ident => $client:ident . $fetch:ident / $stream:ident),* $(,)?) => {
        const TYPES: &[&str] = &[$($type_url),*];

        async fn fetch(
            channel: &Channel,
            request: DiscoveryRequest,
        ) -> Result<DiscoveryResponse, Status> {
            $(
                if request.type_url == $type_url {
                    let mut client = $client::new(channel.clone());
                    return tokio::time::timeout(WAIT, client.$fetch(request))
                        .await
                        .expect("an answer in time")
                        .map(|r| r.into_inner());
                }
            )*
            panic!("no Fetch method for {}", request.type_url)
        }

        async fn stream_first(channel: &Channel, request: DiscoveryRequest) -> DiscoveryResponse {
            let (tx, rx) = mpsc::channel(1);
            tx.send(request.clone()).await.unwrap();
            $(
                if request.type_url == $type_url {
                    let mut responses = $client::new(channel.clone())
                        .$stream(ReceiverStream::new(rx))
                        .await
                        .unwrap()
                        .into_inner();
                    return tokio::time::timeout(WAIT, responses.message())
                        .await
                        .expect("a response in time")
                        .expect("a response, not an error")
                        .expect("an open stream");
                }
            )*
            panic!("no stream method for {}", request.type_url)
        }
    };
}

services! {
    LISTENER => ListenerDiscoveryServiceClient.fetch_listeners / stream_listeners,
    ROUTE_CONFIGURATION => RouteDiscoveryServiceClient.fetch_routes / stream_routes,
    SCOPED_ROUTE_CONFIGURATION =>
        ScopedRoutesDiscoveryServiceClient.fetch_scoped_routes / stream_scoped_routes,
    CLUSTER => ClusterDiscoveryServiceClient.fetch_clusters / stream_clusters,
    CLUSTER_LOAD_ASSIGNMENT => EndpointDiscoveryServiceClient.fetch_endpoints / stream_endpoints,
    SECRET => SecretDiscoveryServiceClient.fetch_secrets / stream_secrets,
    RUNTIME => RuntimeDiscoveryServiceClient.fetch_runtime / stream_runtime,
}

fn request(type_url: &str, names: &[&str]) -> DiscoveryRequest {
    DiscoveryRequest {
        node: node_with_metadata("fetch-test", "test", &[]),
        type_url: type_url.into(),
        resource_names: names.iter().map(|n| n.to_string()).collect(),
        ..Default::default()
    }
}

/// The content of resource `name` of a type: labelled uniquely across types.
fn content(type_url: &str, name: &str) -> Vec<u8> {
    let short = type_url.rsplit('.').next().unwrap_or(type_url);
    body(&format!("{short}-{name}"))
}

/// A server with resources a, b and c of every type that has a `Fetch*` method.
async fn server(mode: Mode) -> Server {
    let server = Server::start_in(mode).await;
    server
        .store
        .replace_all(
            TYPES
                .iter()
                .flat_map(|t| ["a", "b", "c"].map(|n| input(t, n, &content(t, n)))),
        )
        .unwrap();
    server
}

fn values(r: &DiscoveryResponse) -> Vec<&[u8]> {
    r.resources.iter().map(|a| a.value.as_slice()).collect()
}

fn assert_same(fetched: &DiscoveryResponse, streamed: &DiscoveryResponse) {
    assert_eq!(fetched.type_url, streamed.type_url);
    assert_eq!(fetched.version_info, streamed.version_info);
    assert_eq!(fetched.resources, streamed.resources);
}

async fn fetch_answers_every_resource_like_a_stream_of_its_service(mode: Mode) {
    let server = server(mode).await;
    for type_url in TYPES {
        let fetched = fetch(&server.channel, request(type_url, &[]))
            .await
            .unwrap();
        let streamed = stream_first(&server.channel, request(type_url, &[])).await;
        assert_same(&fetched, &streamed);
        assert_eq!(fetched.type_url, *type_url);
        assert!(!fetched.version_info.is_empty());
        let all: Vec<Vec<u8>> = ["a", "b", "c"].map(|n| content(type_url, n)).into();
        assert_eq!(values(&fetched), all, "{type_url}");
        assert!(
            fetched.resources.iter().all(|a| a.type_url == *type_url),
            "{type_url}"
        );
    }
    server.stop().await;
}

async fn fetch_of_named_resources_answers_those_like_a_stream(mode: Mode) {
    let server = server(mode).await;
    for type_url in TYPES {
        let fetched = fetch(&server.channel, request(type_url, &["c", "a"]))
            .await
            .unwrap();
        let streamed = stream_first(&server.channel, request(type_url, &["c", "a"])).await;
        assert_same(&fetched, &streamed);
        let named: Vec<Vec<u8>> = ["a", "c"].map(|n| content(type_url, n)).into();
        assert_eq!(values(&fetched), named, "{type_url}");
    }
    server.stop().await;
}

async fn fetch_of_unknown_names_answers_no_resources_at_the_current_version(mode: Mode) {
    let server = server(mode).await;
    for type_url in TYPES {
        let everything = fetch(&server.channel, request(type_url, &[]))
            .await
            .unwrap();
        let fetched = fetch(&server.channel, request(type_url, &["nope"]))
            .await
            .unwrap();
        assert!(fetched.resources.is_empty(), "{type_url}");
        assert_eq!(fetched.type_url, *type_url);
        assert_eq!(
            fetched.version_info, everything.version_info,
            "{type_url}: the version of the type"
        );
        // Only some of the names exist: those.
        let some = fetch(&server.channel, request(type_url, &["nope", "b"]))
            .await
            .unwrap();
        assert_eq!(values(&some), [content(type_url, "b")], "{type_url}");
    }
    server.stop().await;
}

async fn fetch_answers_the_state_of_the_moment(mode: Mode) {
    let server = server(mode).await;
    let before = fetch(&server.channel, request(CLUSTER_LOAD_ASSIGNMENT, &["a"]))
        .await
        .unwrap();
    // Again, unchanged: the same answer (nothing is kept between calls).
    let again = fetch(&server.channel, request(CLUSTER_LOAD_ASSIGNMENT, &["a"]))
        .await
        .unwrap();
    assert_eq!(before.version_info, again.version_info);
    assert_eq!(before.resources, again.resources);

    server.put(CLUSTER_LOAD_ASSIGNMENT, "a", "new-a");
    // The moment is that of the server the client asks: with a relay, once it has the change.
    server
        .relayed_for(
            request(CLUSTER_LOAD_ASSIGNMENT, &["a"]).node.as_ref(),
            CLUSTER_LOAD_ASSIGNMENT,
            "a",
        )
        .await;
    let after = fetch(&server.channel, request(CLUSTER_LOAD_ASSIGNMENT, &["a"]))
        .await
        .unwrap();
    assert_ne!(after.version_info, before.version_info);
    assert_eq!(values(&after), [body("new-a").as_slice()]);
    server.stop().await;
}

async fn fetch_of_another_type_is_invalid_argument(mode: Mode) {
    let server = server(mode).await;
    let mut wrong = request(CLUSTER, &[]);
    let status = ClusterDiscoveryServiceClient::new(server.channel.clone())
        .fetch_clusters({
            wrong.type_url = LISTENER.into();
            wrong
        })
        .await
        .expect_err("a listener request to the cluster service");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains(CLUSTER), "{status:?}");

    // An empty type URL is the service's own type.
    let mut untyped = request(CLUSTER, &["a"]);
    untyped.type_url.clear();
    let fetched = ClusterDiscoveryServiceClient::new(server.channel.clone())
        .fetch_clusters(untyped)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(fetched.type_url, CLUSTER);
    assert_eq!(values(&fetched), [content(CLUSTER, "a")]);
    server.stop().await;
}

fn env(value: &str) -> DynamicParameterConstraints {
    DynamicParameterConstraints {
        r#type: Some(Type::Constraint(SingleConstraint {
            key: "env".into(),
            constraint_type: Some(ConstraintType::Value(value.into())),
        })),
    }
}

async fn fetch_with_dynamic_parameters_answers_the_matching_variant(mode: Mode) {
    let server = Server::start_in(mode).await;
    server
        .store
        .replace_all(["prod", "test"].map(|v| {
            labelled(CLUSTER_LOAD_ASSIGNMENT, "e", v)
                .with_constraints(Some(Constraints::new(env(v)).unwrap()))
        }))
        .unwrap();

    // A TP2 client: a locator with its parameters, the variant wrapped with its constraints.
    let located = DiscoveryRequest {
        node: node_with_metadata("fetch-test", "test", &[]),
        type_url: CLUSTER_LOAD_ASSIGNMENT.into(),
        resource_locators: vec![ResourceLocator {
            name: "e".into(),
            dynamic_parameters: [("env".to_string(), "test".to_string())].into(),
        }],
        ..Default::default()
    };
    let fetched = fetch(&server.channel, located.clone()).await.unwrap();
    assert_same(&fetched, &stream_first(&server.channel, located).await);
    assert_eq!(fetched.resources.len(), 1);
    assert_eq!(fetched.resources[0].type_url, RESOURCE_WRAPPER);
    let wrapped = Resource::decode(fetched.resources[0].value.as_slice()).unwrap();
    let name = wrapped.resource_name.unwrap();
    assert_eq!(name.name, "e");
    assert_eq!(name.dynamic_parameter_constraints, Some(env("test")));
    assert_eq!(label(&wrapped.resource.unwrap().value), "test");

    // A legacy client: the variant of its node's metadata, plain.
    let legacy = DiscoveryRequest {
        node: node_with_metadata("fetch-test", "test", &[("env", "prod")]),
        ..request(CLUSTER_LOAD_ASSIGNMENT, &["e"])
    };
    let fetched = fetch(&server.channel, legacy.clone()).await.unwrap();
    assert_same(&fetched, &stream_first(&server.channel, legacy).await);
    assert_eq!(values(&fetched), [body("prod").as_slice()]);
    server.stop().await;
}

async fn a_fetch_request_over_the_limit_is_resource_exhausted_like_on_a_stream(mode: Mode) {
    let limit = 64 * 1024;
    let server = Server::start_with_in(
        xdsd_core::ServerOptions::default().max_request_bytes(limit),
        mode,
    )
    .await;
    let names: Vec<String> = (0..limit / 16).map(|i| format!("cluster-{i:08}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let status = fetch(&server.channel, request(CLUSTER_LOAD_ASSIGNMENT, &names))
        .await
        .expect_err("a request over the limit");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains(&format!("{limit} bytes")),
        "{status:?}"
    );
    server.stop().await;
}

protocol_tests! {
    through_a_relay: [],
    // One node id asking as a TP2 client and as a legacy client with metadata: a relay
    // presents a legacy client's metadata upstream only per node (--aggregate-by node), and
    // then as the node first seen. The locator half runs through a relay in grpc_variants.
    direct_only: [fetch_with_dynamic_parameters_answers_the_matching_variant],
    // The protocol's rules hold through a relay in either grouping.
    relay_by_node: [],
    through_both_relays: [
        fetch_answers_every_resource_like_a_stream_of_its_service,
        fetch_of_named_resources_answers_those_like_a_stream,
        fetch_of_unknown_names_answers_no_resources_at_the_current_version,
        fetch_answers_the_state_of_the_moment,
        fetch_of_another_type_is_invalid_argument,
        a_fetch_request_over_the_limit_is_resource_exhausted_like_on_a_stream,
    ],
}
