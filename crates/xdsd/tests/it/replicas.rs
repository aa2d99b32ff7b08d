//! Two xdsd replicas on the same directory give every resource the same version (versions are
//! content hashes): a client that moves from one to the other is resent nothing — delta with its
//! `initial_resource_versions`, SotW with its `version_info`. This is how a fleet outgrows one xdsd.

use std::collections::HashMap;
use std::time::Duration;

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::support::{client_node, ResourceDir, Xdsd, CLUSTER, DEADLINE};

fn cluster_yaml(name: &str, port: u16) -> String {
    format!(
        "\"@type\": {CLUSTER}\nname: {name}\ntype: STATIC\nconnect_timeout: 1s\nload_assignment:\n  \
         cluster_name: {name}\n  endpoints:\n  - lb_endpoints:\n    - endpoint:\n        address:\n          \
         socket_address: {{ address: 127.0.0.1, port_value: {port} }}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_moving_between_replicas_is_resent_nothing() {
    let dir = ResourceDir::new();
    dir.write("a.yaml", &cluster_yaml("a", 1001));
    dir.write("b.yaml", &cluster_yaml("b", 1002));
    let one = Xdsd::start(&dir.path()).await;
    let two = Xdsd::start(&dir.path()).await;

    // SotW: everything from the first replica, then the second with that version.
    let (tx, rx) = mpsc::channel(4);
    tx.send(DiscoveryRequest {
        node: client_node("replica-client"),
        type_url: CLUSTER.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut first = AggregatedDiscoveryServiceClient::connect(one.url())
        .await
        .unwrap()
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let sent = tokio::time::timeout(DEADLINE, first.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(sent.resources.len(), 2);
    let (tx2, rx2) = mpsc::channel(4);
    tx2.send(DiscoveryRequest {
        node: client_node("replica-client"),
        type_url: CLUSTER.into(),
        version_info: sent.version_info.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut moved = AggregatedDiscoveryServiceClient::connect(two.url())
        .await
        .unwrap()
        .stream_aggregated_resources(ReceiverStream::new(rx2))
        .await
        .unwrap()
        .into_inner();
    let nothing = tokio::time::timeout(Duration::from_secs(1), moved.message()).await;
    assert!(
        nothing.is_err(),
        "the second replica resends nothing: {nothing:?}"
    );

    // Delta: the versions of the first replica's resources, given to the second.
    let (dtx, drx) = mpsc::channel(4);
    dtx.send(DeltaDiscoveryRequest {
        node: client_node("replica-client"),
        type_url: CLUSTER.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut delta_one = AggregatedDiscoveryServiceClient::connect(one.url())
        .await
        .unwrap()
        .delta_aggregated_resources(ReceiverStream::new(drx))
        .await
        .unwrap()
        .into_inner();
    let got = tokio::time::timeout(DEADLINE, delta_one.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let versions: HashMap<String, String> = got
        .resources
        .iter()
        .map(|r| (r.name.clone(), r.version.clone()))
        .collect();
    assert_eq!(versions.len(), 2);
    let (dtx2, drx2) = mpsc::channel(4);
    dtx2.send(DeltaDiscoveryRequest {
        node: client_node("replica-client"),
        type_url: CLUSTER.into(),
        initial_resource_versions: versions,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut delta_two = AggregatedDiscoveryServiceClient::connect(two.url())
        .await
        .unwrap()
        .delta_aggregated_resources(ReceiverStream::new(drx2))
        .await
        .unwrap()
        .into_inner();
    let answer = tokio::time::timeout(DEADLINE, delta_two.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        answer.resources.is_empty() && answer.removed_resources.is_empty(),
        "the second replica resends nothing: {answer:?}"
    );

    // A change reaches the moved clients from the second replica.
    dir.write("b.yaml", &cluster_yaml("b", 2002));
    let update = tokio::time::timeout(DEADLINE, moved.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(update.resources.len(), 2, "CDS is sent whole");
    drop((tx, tx2, dtx, dtx2));
}
