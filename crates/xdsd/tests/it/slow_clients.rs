//! Clients that stop reading, through the real binary: streams whose client advertised a large
//! HTTP/2 window and then stopped reading its socket pin a small, bounded amount of xdsd's
//! memory each, not a copy of their response (the responses are written from the store's
//! shared bytes).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Endpoint, Uri};

use crate::support::ads::{self, AdsStream};
use crate::support::{unique_name, ResourceDir, Xdsd, CLUSTER};

/// A connection whose reads can be stopped for good: the client then never reads what the
/// server sends, while its writes still go out.
struct Stoppable {
    tcp: TcpStream,
    stopped: Arc<AtomicBool>,
}

impl AsyncRead for Stoppable {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.stopped.load(Ordering::Relaxed) {
            return Poll::Pending;
        }
        Pin::new(&mut this.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for Stoppable {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

#[derive(Clone)]
struct Connector {
    addr: String,
    stopped: Arc<AtomicBool>,
}

type Connecting = Pin<Box<dyn Future<Output = io::Result<TokioIo<Stoppable>>> + Send>>;

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<Stoppable>;
    type Error = io::Error;
    type Future = Connecting;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Connecting {
        let this = self.clone();
        Box::pin(async move {
            let tcp = TcpStream::connect(&this.addr).await?;
            Ok(TokioIo::new(Stoppable {
                tcp,
                stopped: this.stopped,
            }))
        })
    }
}

/// `count` clusters of about 5 KB each, in one multi-document file.
fn clusters(count: usize) -> String {
    let padding = "x".repeat(5_000);
    (0..count)
        .map(|i| {
            format!(
                "\"@type\": {CLUSTER}\nname: c{i}\ntype: STATIC\nconnect_timeout: 1s\nmetadata:\n  filter_metadata:\n    pad: {{ p: {padding} }}\n"
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

const STREAMS: usize = 50;

/// What one stream of a client that stopped reading may cost xdsd (the bound).
const PER_STREAM_KIB: u64 = 64;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_whose_client_stopped_reading_pin_no_copy_of_their_response() {
    let dir = ResourceDir::new();
    // About 3.5 MB of clusters (under gRPC clients' default 4 MiB): one SotW CDS response.
    dir.write("clusters.yaml", &clusters(700));
    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    // A client that reads: the response body is built (once, shared).
    let mut reader = AdsStream::open(&xdsd.url(), &unique_name("reader"), CLUSTER, &[])
        .await
        .expect("an ADS stream to xdsd");
    assert_eq!(ads::names(&reader.recv().await.expect("CDS")).len(), 700);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = xdsd.rss_kib();

    // One connection with 1 GiB windows (Envoy's are 256 MiB), 50 CDS streams on it, then the
    // client stops reading its socket.
    let stopped = Arc::new(AtomicBool::new(false));
    let channel = Endpoint::from_static("http://localhost")
        .initial_stream_window_size(1 << 30)
        .initial_connection_window_size(1 << 30)
        .connect_with_connector(Connector {
            addr: xdsd.authority(),
            stopped: stopped.clone(),
        })
        .await
        .expect("connected");
    let mut open = Vec::new();
    for _ in 0..STREAMS {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        tx.send(DiscoveryRequest {
            node: Some(Node {
                id: unique_name("stalled"),
                ..Default::default()
            }),
            type_url: CLUSTER.into(),
            ..Default::default()
        })
        .await
        .expect("queued");
        let responses = AggregatedDiscoveryServiceClient::new(channel.clone())
            .stream_aggregated_resources(ReceiverStream::new(rx))
            .await
            .expect("a stream");
        open.push((tx, responses));
    }
    stopped.store(true, Ordering::Relaxed);
    // xdsd answers all of them; the socket and HTTP/2 then hold what the client does not read.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = xdsd.rss_kib();
    let per_stream = after.saturating_sub(before) / STREAMS as u64;
    println!(
        "xdsd RSS: {before} KiB before, {after} KiB with {STREAMS} stalled streams of a 3.5 MB response: {per_stream} KiB per stream"
    );
    assert!(
        per_stream <= PER_STREAM_KIB,
        "each stalled stream costs {per_stream} KiB (RSS {before} → {after} KiB)"
    );
    // The reading client is still served.
    dir.write(
        "extra.yaml",
        &format!("\"@type\": {CLUSTER}\nname: extra\ntype: STATIC\nconnect_timeout: 1s\n"),
    );
    let update = reader.recv().await.expect("an update");
    assert_eq!(ads::names(&update).len(), 701);
    drop(open);
}

/// Requests that never finish: 100 streams on one connection each send 3.9 MB of a 4 MB message
/// and stop (433 MiB of xdsd's memory before requests were metered). xdsd keeps at most
/// --max-buffered-request-bytes of them (64 MiB by default): the streams past it end with
/// RESOURCE_EXHAUSTED, and xdsd's memory grows by about that bound, not by 390 MB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_that_never_finish_hold_at_most_the_connection_budget() {
    use http_body_util::BodyExt;
    use tower_service::Service;
    const STALLED: usize = 100;
    const SENT: usize = 3_900_000;
    let dir = ResourceDir::new();
    dir.write(
        "c.yaml",
        &format!("\"@type\": {CLUSTER}\nname: c\ntype: STATIC\nconnect_timeout: 1s\n"),
    );
    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    let before = xdsd.rss_kib();
    let channel = Endpoint::from_shared(xdsd.url())
        .expect("a URL")
        .initial_stream_window_size(1 << 30)
        .initial_connection_window_size(1 << 30)
        .connect()
        .await
        .expect("connected");
    let mut stalled = Vec::new();
    for _ in 0..STALLED {
        let (tx, rx) =
            tokio::sync::mpsc::channel::<Result<http_body::Frame<bytes::Bytes>, tonic::Status>>(1);
        let mut start = vec![0u8];
        start.extend_from_slice(&4_000_000u32.to_be_bytes());
        start.extend(std::iter::repeat_n(0x0a, SENT));
        tx.send(Ok(http_body::Frame::data(start.into())))
            .await
            .expect("queued");
        let request = http::Request::builder()
            .method("POST")
            .uri(format!(
                "{}/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources",
                xdsd.url()
            ))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(tonic::body::Body::new(http_body_util::StreamBody::new(
                ReceiverStream::new(rx),
            )))
            .expect("a request");
        let mut channel = channel.clone();
        let response = tokio::spawn(async move {
            std::future::poll_fn(|cx| channel.poll_ready(cx))
                .await
                .ok()?;
            let response = channel.call(request).await.ok()?;
            // Its status, if it ends within 15 s (a refused stream ends as soon as xdsd has read
            // enough of it; the others hold until the test ends).
            let mut body = response.into_body();
            let ended = tokio::time::timeout(Duration::from_secs(15), async {
                while let Some(frame) = body.frame().await {
                    match frame {
                        Ok(frame) => {
                            if let Ok(trailers) = frame.into_trailers() {
                                return tonic::Status::from_header_map(&trailers);
                            }
                        }
                        Err(status) => return Some(status),
                    }
                }
                None
            });
            ended.await.ok().flatten()
        });
        stalled.push((tx, response));
    }
    let mut refused = 0;
    for (_, response) in &mut stalled {
        if let Ok(Some(status)) = response.await {
            assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
            refused += 1;
        }
    }
    let after = xdsd.rss_kib();
    let grown = after.saturating_sub(before);
    println!(
        "xdsd RSS: {before} KiB before, {after} KiB with {STALLED} requests stalled at 3.9 MB each ({refused} refused): +{} MiB",
        grown / 1024
    );
    // 16 of them fit in 64 MiB; the others are refused.
    assert!(refused >= STALLED - 17, "only {refused} refused");
    assert!(grown < 128 * 1024, "xdsd grew by {grown} KiB");
    // xdsd still serves.
    let mut fresh = AdsStream::open(&xdsd.url(), &unique_name("after"), CLUSTER, &[])
        .await
        .expect("an ADS stream to xdsd");
    assert_eq!(ads::names(&fresh.recv().await.expect("CDS")), ["c"]);
}
