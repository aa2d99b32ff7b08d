//! Shutdown over real gRPC on loopback, with a client that stopped reading: HTTP/2 flow control
//! then blocks the server's sends to it, which must not keep `serve` (or the stream) from ending.
//! A client that does read still gets UNAVAILABLE.

use std::time::Duration;

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Code, Status, Streaming};
use xdsd_core::store::{Change, ResourceInput, Store};
use xdsd_core::types::{CLUSTER, CLUSTER_LOAD_ASSIGNMENT};
use xdsd_core::{ServerOptions, StreamStatus, XdsServer};

use crate::support::{connect, Server, WAIT};

/// Endpoints of this many clusters, [`RESOURCE_BYTES`] each: 18 MB, far more than HTTP/2 flow
/// control (a 2 MiB stream window by default) and the server's buffers let through to a client
/// that does not read.
const RESOURCES: usize = 1500;
const RESOURCE_BYTES: usize = 12 * 1024;
/// Responses of at most one resource each: the stream has many to send, one after the other.
const MAX_RESPONSE_BYTES: usize = 16 * 1024;

fn options() -> ServerOptions {
    ServerOptions::default().max_response_bytes(MAX_RESPONSE_BYTES)
}

fn eds_name(i: usize) -> String {
    format!("cluster-{i:05}")
}

fn big_endpoints(store: &Store) {
    store
        .apply((0..RESOURCES).map(|i| {
            Change::Set(ResourceInput::new(
                CLUSTER_LOAD_ASSIGNMENT,
                eds_name(i),
                Bytes::from(vec![b'a' + (i % 26) as u8; RESOURCE_BYTES]),
            ))
        }))
        .unwrap();
}

fn request(node: &str, type_url: &str, names: Vec<String>) -> DiscoveryRequest {
    DiscoveryRequest {
        node: Some(Node {
            id: node.into(),
            cluster: "test".into(),
            ..Default::default()
        }),
        type_url: type_url.into(),
        resource_names: names,
        ..Default::default()
    }
}

/// An ADS stream that sent `first`. Hold both halves: dropping them would reset the stream.
async fn ads(
    channel: &Channel,
    first: DiscoveryRequest,
) -> (mpsc::Sender<DiscoveryRequest>, Streaming<DiscoveryResponse>) {
    let (tx, rx) = mpsc::channel(4);
    tx.send(first).await.unwrap();
    let responses = AggregatedDiscoveryServiceClient::new(channel.clone())
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    (tx, responses)
}

/// Types xdsd has no resources of: each still gets a response (empty).
const EMPTY_TYPES: [&str; 3] = [
    "type.googleapis.com/test.EmptyA",
    "type.googleapis.com/test.EmptyB",
    "type.googleapis.com/test.EmptyC",
];

/// On a connection of its own, subscribes to every big resource, then to [`EMPTY_TYPES`], and
/// never reads a response. The transport takes the first response and is blocked sending it, the
/// stream's buffer holds the second, and the stream is blocked handing over the third.
async fn stuck_client(addr: std::net::SocketAddr) -> (Channel, impl Sized) {
    let channel = connect(addr).await;
    let names = (0..RESOURCES).map(eds_name).collect();
    let (tx, responses) = ads(&channel, request("stuck", CLUSTER_LOAD_ASSIGNMENT, names)).await;
    for type_url in EMPTY_TYPES {
        tx.send(request("stuck", type_url, vec![])).await.unwrap();
    }
    (channel, (tx, responses))
}

/// A client reading on `channel`: subscribed to clusters, its first response taken; the task
/// reads on and gives the status its stream ends with.
async fn reading_client(
    channel: &Channel,
) -> (
    mpsc::Sender<DiscoveryRequest>,
    tokio::task::JoinHandle<Status>,
) {
    let (tx, mut responses) = ads(channel, request("reading", CLUSTER, vec![])).await;
    let first = tokio::time::timeout(WAIT, responses.message())
        .await
        .expect("a response in time")
        .expect("a response, not an error")
        .expect("an open stream");
    assert_eq!(first.resources.len(), 1);
    let ending = tokio::spawn(async move {
        loop {
            match responses.message().await {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("the stream ended OK, not with a status"),
                Err(status) => return status,
            }
        }
    });
    (tx, ending)
}

/// Waits until `streams()` satisfies `test`.
async fn until(streams: impl Fn() -> Vec<StreamStatus>, test: impl Fn(&[StreamStatus]) -> bool) {
    tokio::time::timeout(WAIT, async {
        while !test(&streams()) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("streams in time: {:?}", streams()));
}

/// The stuck client's stream handed over its third response (or is trying to).
fn blocked(streams: &[StreamStatus]) -> bool {
    streams
        .iter()
        .any(|s| s.node == "stuck" && s.counters.responses >= 3)
}

#[tokio::test]
async fn serve_returns_after_shutdown_while_a_client_has_stopped_reading() {
    let server = Server::start_with(options()).await;
    server.set(CLUSTER, "c", b"cluster-c");
    big_endpoints(&server.store);
    let (_reading_tx, reading) = reading_client(&server.channel).await;
    let (_stuck_channel, _stuck) = stuck_client(server.addr).await;
    until(|| server.streams(), blocked).await;

    // Panics if `serve` does not return: HTTP/2 graceful shutdown alone waits for the stuck
    // stream forever.
    server.stop().await;

    let status = tokio::time::timeout(WAIT, reading)
        .await
        .expect("the reading client's stream ends in time")
        .unwrap();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(status.message(), "xdsd is shutting down");
}

#[tokio::test]
async fn end_streams_ends_a_stream_blocked_on_a_client_that_stopped_reading() {
    // A server of the embedder's own, with xdsd's routes: `end_streams` alone must end the
    // streams, also one whose sends are blocked.
    let store = Store::new();
    store
        .apply([Change::Set(ResourceInput::new(
            CLUSTER,
            "c",
            Bytes::from_static(b"cluster-c"),
        ))])
        .unwrap();
    big_endpoints(&store);
    let xds = XdsServer::builder(store)
        .options(options())
        .build()
        .expect("a server without TLS builds");
    let stats = xds.handle();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_routes(xds.routes())
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    let channel = connect(addr).await;
    let (_reading_tx, reading) = reading_client(&channel).await;
    let (_stuck_channel, _stuck) = stuck_client(addr).await;
    until(|| stats.streams(), blocked).await;

    xds.end_streams();
    let status = tokio::time::timeout(WAIT, reading)
        .await
        .expect("the reading client's stream ends in time")
        .unwrap();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    // The stuck stream gives up its blocked send and ends too.
    until(|| stats.streams(), |open| open.is_empty()).await;
    server.abort();
}
