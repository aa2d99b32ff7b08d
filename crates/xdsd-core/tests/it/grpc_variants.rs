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

use crate::support::{input, node_with_metadata, Server, WAIT};

fn env(value: &str) -> DynamicParameterConstraints {
    crate::support::env_constraint(value)
}

/// A server whose ClusterLoadAssignment "e" has a prod and a test variant.
async fn server() -> Server {
    let server = Server::start().await;
    server
        .store
        .replace_all(["prod", "test"].map(|v| {
            input(CLUSTER_LOAD_ASSIGNMENT, "e", v.as_bytes())
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

#[tokio::test]
async fn sotw_locators_get_resources_wrapped_with_their_constraints() {
    let server = server().await;
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
    assert_eq!(inner.value, b"test");
    drop(tx);
    server.stop().await;
}

#[tokio::test]
async fn sotw_legacy_client_gets_the_plain_variant_of_its_metadata() {
    let server = server().await;
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
    assert_eq!(r.resources[0].value, b"prod");
    drop(tx);
    server.stop().await;
}

#[tokio::test]
async fn delta_locators_get_resource_names_and_removed_resource_names() {
    let server = server().await;
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

/// `GET path` on `addr` (HTTP/1.1): the status and the body.
async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(WAIT, conn.read_to_end(&mut raw))
        .await
        .expect("an answer in time")
        .unwrap();
    let text = String::from_utf8(raw).expect("UTF-8");
    let (head, body) = text.split_once("\r\n\r\n").expect("a head and a body");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status");
    (status, body.to_owned())
}

/// The admin API's `GET /config?node=…&metadata=…`: what a client with that node would be served,
/// the variant its parameters pick, without connecting one.
#[tokio::test]
async fn the_admin_api_shows_what_a_node_would_receive() {
    let server = server().await;
    server.set(xdsd_core::types::CLUSTER, "c", b"c");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(xdsd_core::admin::serve(
        listener,
        server.handle.clone(),
        async move {
            let _ = stopped.await;
        },
    ));
    let config = |path: &'static str| async move {
        let (status, body) = http_get(admin, path).await;
        assert_eq!(status, 200, "{body}");
        serde_json::from_str::<serde_json::Value>(&body).expect("JSON")
    };
    let endpoints = |config: &serde_json::Value| {
        config["types"]
            .as_array()
            .expect("types")
            .iter()
            .find(|t| t["type_url"] == CLUSTER_LOAD_ASSIGNMENT)
            .map(|t| t["resources"].clone())
            .expect("the endpoints type")
    };
    // %7B"env":"prod"%7D
    let prod = config("/config?node=n1&metadata=%7B%22env%22%3A%22prod%22%7D").await;
    assert_eq!(prod["node"]["id"], "n1");
    let e = endpoints(&prod);
    assert_eq!(e.as_array().map(Vec::len), Some(1), "{prod}");
    assert_eq!(e[0]["name"], "e");
    assert!(
        e[0]["constraints"]
            .as_str()
            .is_some_and(|c| c.contains("prod")),
        "{prod}"
    );
    let clusters = prod["types"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["type_url"] == xdsd_core::types::CLUSTER)
        .expect("clusters");
    assert_eq!(clusters["resources"][0]["name"], "c");
    let test = config("/config?node=n1&metadata=%7B%22env%22%3A%22test%22%7D").await;
    assert!(
        endpoints(&test)[0]["constraints"]
            .as_str()
            .is_some_and(|c| c.contains("test")),
        "{test}"
    );
    // No parameters: no variant matches.
    let none = config("/config?node=n1").await;
    assert_eq!(endpoints(&none).as_array().map(Vec::len), Some(0), "{none}");
    // Bad requests are answered 400.
    assert_eq!(http_get(admin, "/config").await.0, 400);
    assert_eq!(
        http_get(admin, "/config?node=n&metadata=%5B1%5D").await.0,
        400
    );
    assert_eq!(http_get(admin, "/config?node=n&metadata=nope").await.0, 400);
    let _ = stop.send(());
    let _ = tokio::time::timeout(WAIT, serving).await;
}
