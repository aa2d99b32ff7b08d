//! The embedding example (`examples/embed.rs`), its own pieces run: a known node is served and
//! sent a change, an unknown one refused.

use std::collections::HashSet;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient as Ads;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use prost::Message as _;
use tokio::sync::mpsc;
use tonic::{Code, Status, Streaming};
use xdsd_core::types::CLUSTER;
use xdsd_core::ChangeSet;

#[path = "../../examples/embed.rs"]
#[allow(dead_code)]
mod example;

#[tokio::test]
async fn the_embedding_example_serves_a_known_node_its_changes_and_refuses_an_unknown_one() {
    let (changes, rx) = mpsc::channel(1);
    let source = example::Memory(vec![example::cluster("backend")], rx);
    let server = example::server(source, HashSet::from(["edge-1".to_string()]))
        .await
        .expect("the example's server");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let addr = listener.local_addr().expect("its address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve(listener, async { stopped.await.unwrap_or(()) }));

    let (tx, mut known) = ask(addr, "edge-1").await.expect("edge-1's stream");
    assert_eq!(names(next(&mut known).await), ["backend"]);
    changes
        .send(ChangeSet::all(vec![
            example::cluster("backend"),
            example::cluster("canary"),
        ]))
        .await
        .expect("the source takes a change");
    assert_eq!(names(next(&mut known).await), ["backend", "canary"]);

    let refused = match ask(addr, "intruder").await {
        Ok((_tx, mut unknown)) => unknown.message().await.err(),
        Err(status) => Some(status),
    };
    assert_eq!(
        refused.as_ref().map(Status::code),
        Some(Code::PermissionDenied),
        "{refused:?}"
    );
    drop(tx);
    let _ = stop.send(());
    serving.await.expect("the server task").expect("serve");
}

/// An ADS stream to `addr` whose first request asks for every cluster as `node`.
async fn ask(
    addr: std::net::SocketAddr,
    node: &str,
) -> Result<(mpsc::Sender<DiscoveryRequest>, Streaming<DiscoveryResponse>), Status> {
    let (tx, rx) = mpsc::channel(1);
    let request = DiscoveryRequest {
        node: Some(Node {
            id: node.into(),
            ..Default::default()
        }),
        type_url: CLUSTER.into(),
        ..Default::default()
    };
    tx.try_send(request).expect("room for the first request");
    let mut client = Ads::connect(format!("http://{addr}"))
        .await
        .expect("a connection");
    let stream =
        client.stream_aggregated_resources(tokio_stream::wrappers::ReceiverStream::new(rx));
    Ok((tx, stream.await?.into_inner()))
}

/// The next response, within 10 s (a stream that stays silent fails the test, not hangs it).
async fn next(stream: &mut Streaming<DiscoveryResponse>) -> DiscoveryResponse {
    tokio::time::timeout(std::time::Duration::from_secs(10), stream.message())
        .await
        .expect("a response within 10 s")
        .expect("a response")
        .expect("the stream goes on")
}

fn names(response: DiscoveryResponse) -> Vec<String> {
    response
        .resources
        .iter()
        .map(|any| Cluster::decode(&*any.value).expect("a cluster").name)
        .collect()
}
