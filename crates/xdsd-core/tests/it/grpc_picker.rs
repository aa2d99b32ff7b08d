//! An embedder's store picker (`XdsServerBuilder::store_picker`): each client reads and watches
//! the store picked for its node, streams and one-shot requests alike; the others the server's.

use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::cluster::v3::cluster_discovery_service_client::ClusterDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use prost::Message as _;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use xdsd_core::types::CLUSTER;
use xdsd_core::{PickStore, Store, XdsServer};

use crate::support::{label, labelled, node, Server, WAIT};

/// Nodes of cluster `b` read `b`; the others the server's store.
struct ByCluster {
    b: Store,
}

impl PickStore for ByCluster {
    fn store_for(&self, node: &[u8]) -> Option<Store> {
        let node = Node::decode(node).ok()?;
        (node.cluster == "b").then(|| self.b.clone())
    }
}

async fn recv(stream: &mut tonic::Streaming<DiscoveryResponse>) -> DiscoveryResponse {
    tokio::time::timeout(WAIT, stream.message())
        .await
        .expect("a response in time")
        .expect("a response")
        .expect("an open stream")
}

fn labels(r: &DiscoveryResponse) -> Vec<String> {
    r.resources.iter().map(|a| label(&a.value)).collect()
}

fn cds(id: &str, cluster: &str, nonce: &str) -> DiscoveryRequest {
    DiscoveryRequest {
        node: node(id, cluster),
        type_url: CLUSTER.into(),
        resource_names: vec!["web".into()],
        response_nonce: nonce.into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_store_picker_serves_and_pushes_each_node_the_store_picked_for_it() {
    let main = Store::new();
    main.replace_all([labelled(CLUSTER, "web", "main")])
        .expect("the server's store");
    let b = Store::new();
    b.replace_all([labelled(CLUSTER, "web", "b1")])
        .expect("b's store");
    let built = XdsServer::builder(main.clone())
        .store_picker(Arc::new(ByCluster { b: b.clone() }))
        .build()
        .expect("a server without TLS builds");
    let server = Server::serve(main.clone(), built).await;

    let (tx, rx) = mpsc::channel(4);
    tx.send(cds("n-b", "b", "")).await.expect("queue");
    let mut stream = AggregatedDiscoveryServiceClient::new(server.channel.clone())
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .expect("an ADS stream")
        .into_inner();
    let first = recv(&mut stream).await;
    assert_eq!(labels(&first), ["b1"], "cluster b reads b's store");
    tx.send(cds("n-b", "b", &first.nonce)).await.expect("ACK");

    // A change of the server's store is not b's; a change of b's store is pushed.
    main.replace_all([labelled(CLUSTER, "web", "main2")])
        .expect("a change of the server's store");
    b.replace_all([labelled(CLUSTER, "web", "b2")])
        .expect("a change of b's store");
    assert_eq!(
        labels(&recv(&mut stream).await),
        ["b2"],
        "b's change pushed to cluster b"
    );

    let mut fetch = ClusterDiscoveryServiceClient::new(server.channel.clone());
    let a = fetch.fetch_clusters(cds("n-a", "a", "")).await;
    let a = a.expect("a fetch is answered").into_inner();
    assert_eq!(labels(&a), ["main2"], "the server's store");
    let b2 = fetch.fetch_clusters(cds("n-b2", "b", "")).await;
    let b2 = b2.expect("a fetch is answered").into_inner();
    assert_eq!(labels(&b2), ["b2"], "b's store");
    server.stop().await;
}
