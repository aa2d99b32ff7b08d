//! `ServerOptions::max_connection_age` over real gRPC on loopback: a connection past its age
//! (± 10 %) is told to go away, its streams end with UNAVAILABLE after the grace, and the
//! client's next stream is served on a new connection; without the option a stream stays open.

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Code, Streaming};
use xdsd_core::defaults::SHUTDOWN_GRACE;
use xdsd_core::types::CLUSTER;
use xdsd_core::ServerOptions;

use crate::support::{Server, WAIT};

const AGE: Duration = Duration::from_secs(1);
const GRACE: Duration = Duration::from_secs(1);

fn request(node: &str) -> DiscoveryRequest {
    DiscoveryRequest {
        node: Some(Node {
            id: node.into(),
            cluster: "test".into(),
            ..Default::default()
        }),
        type_url: CLUSTER.into(),
        ..Default::default()
    }
}

/// An ADS stream subscribed to every cluster, its first response taken. Hold both halves:
/// dropping them would reset the stream.
async fn ads(
    channel: &Channel,
    node: &str,
) -> (
    mpsc::Sender<DiscoveryRequest>,
    Streaming<DiscoveryResponse>,
    DiscoveryResponse,
) {
    let (tx, rx) = mpsc::channel(4);
    tx.send(request(node)).await.unwrap();
    let mut responses = AggregatedDiscoveryServiceClient::new(channel.clone())
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .expect("the stream is served")
        .into_inner();
    let first = tokio::time::timeout(WAIT, responses.message())
        .await
        .expect("a response in time")
        .expect("a response, not an error")
        .expect("an open stream");
    (tx, responses, first)
}

/// Reads `responses` until the stream ends; asserts it ends with the max age's UNAVAILABLE
/// within `WAIT`.
async fn ended_by_max_age(responses: &mut Streaming<DiscoveryResponse>) {
    let status = tokio::time::timeout(WAIT, async {
        loop {
            match responses.message().await {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("the stream ended OK, not with a status"),
                Err(status) => return status,
            }
        }
    })
    .await
    .expect("the stream ends in time");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains("max age"), "{status:?}");
}

#[tokio::test]
async fn a_connection_past_its_max_age_and_grace_ends_its_streams_and_the_client_reconnects() {
    let started = Instant::now();
    let aged =
        Server::start_with(ServerOptions::default().max_connection_age(Some(AGE), GRACE)).await;
    // The same client against a server without a max age, over the same time.
    let kept = Server::start().await;
    aged.set(CLUSTER, "c", b"cluster-c");
    kept.set(CLUSTER, "c", b"cluster-c");
    let (_aged_tx, mut aged_stream, first) = ads(&aged.channel, "aged").await;
    assert_eq!(first.resources.len(), 1);
    let (_kept_tx, mut kept_stream, _) = ads(&kept.channel, "kept").await;

    // Open streams go on through the age (GOAWAY only stops new ones) and end at the grace.
    ended_by_max_age(&mut aged_stream).await;
    let ended = started.elapsed();
    let earliest = AGE.mul_f64(0.9) + GRACE;
    let latest = AGE.mul_f64(1.1) + GRACE + SHUTDOWN_GRACE;
    assert!(
        ended >= earliest,
        "the stream ended {ended:?} after the start, before the age's lower bound and the grace ({earliest:?})"
    );
    assert!(
        ended <= latest + Duration::from_secs(3),
        "the stream ended {ended:?} after the start, the age, jitter and grace being at most {latest:?}"
    );

    // The client's next stream, on the same channel, is served (on a new connection: the old
    // one went away), and in turn ends at its connection's age.
    let (_again_tx, mut again, first) = ads(&aged.channel, "aged").await;
    assert_eq!(first.resources.len(), 1);
    let reconnected = Instant::now();
    ended_by_max_age(&mut again).await;
    assert!(reconnected.elapsed() >= AGE.mul_f64(0.9));
    assert!(
        started.elapsed() > latest,
        "by now the first connection's age, jitter and grace have passed"
    );

    // The stream of the server without a max age, open all that time, is still served.
    kept.set(CLUSTER, "d", b"cluster-d");
    let update = tokio::time::timeout(WAIT, kept_stream.message())
        .await
        .expect("the change reaches the stream in time")
        .expect("the stream is open, not ended with a status")
        .expect("the stream is open");
    assert_eq!(update.resources.len(), 2);

    aged.stop().await;
    kept.stop().await;
}

/// One gRPC message: its 5-byte prefix and the encoded `request`.
fn grpc_frame(request: &DiscoveryRequest) -> bytes::Bytes {
    let body = prost::Message::encode_to_vec(request);
    let mut frame = vec![0];
    frame.extend_from_slice(&u32::try_from(body.len()).unwrap().to_be_bytes());
    frame.extend_from_slice(&body);
    frame.into()
}

/// Opens an ADS stream on a raw HTTP/2 connection and sends `request`; `None` once the
/// connection takes no new streams (the server sent GOAWAY).
async fn raw_ads(
    client: &h2::client::SendRequest<bytes::Bytes>,
    request: &DiscoveryRequest,
) -> Option<(h2::SendStream<bytes::Bytes>, h2::RecvStream)> {
    let http = http::Request::post(
        "http://xdsd/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources",
    )
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(())
    .unwrap();
    let mut client = client.clone().ready().await.ok()?;
    let (response, mut send) = client.send_request(http, false).ok()?;
    send.send_data(grpc_frame(request), false).ok()?;
    let response = response.await.ok()?;
    Some((send, response.into_body()))
}

#[tokio::test]
async fn past_its_age_a_connection_takes_no_new_streams_while_its_open_ones_are_served_for_the_grace(
) {
    const LONG_GRACE: Duration = Duration::from_secs(5);
    let server =
        Server::start_with(ServerOptions::default().max_connection_age(Some(AGE), LONG_GRACE))
            .await;
    server.set(CLUSTER, "c", b"cluster-c");
    let tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    let driver = tokio::spawn(conn);
    let (_send, mut open) = raw_ads(&client, &request("raw"))
        .await
        .expect("a new connection takes streams");
    assert!(open.data().await.is_some(), "a first response");
    let connected = Instant::now();

    // New streams are taken until the age, then refused (GOAWAY).
    let refused = tokio::time::timeout(WAIT, async {
        loop {
            match raw_ads(&client, &request("probe")).await {
                Some(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                None => return connected.elapsed(),
            }
        }
    })
    .await
    .expect("the connection goes away in time");
    assert!(
        refused >= AGE.mul_f64(0.9) - Duration::from_millis(100),
        "{refused:?}"
    );

    // In the grace the open stream is still served: a change reaches it.
    server.set(CLUSTER, "d", b"cluster-d");
    let data = tokio::time::timeout(LONG_GRACE, open.data())
        .await
        .expect("the change reaches the open stream within the grace");
    assert!(matches!(data, Some(Ok(_))), "{data:?}");
    assert!(connected.elapsed() < AGE.mul_f64(1.1) + LONG_GRACE);
    driver.abort();
    server.stop().await;
}
