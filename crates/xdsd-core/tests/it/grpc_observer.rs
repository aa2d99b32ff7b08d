//! Stream observers over real gRPC on loopback: each event of a stream reaches them in order
//! (opened, request, response sent, ACK, NACK, closed), and a refused request ends its stream
//! with the observer's status before anything is sent; a `Fetch*` call is refused the same way.

use std::sync::Arc;

use envoy_types::pb::envoy::service::cluster::v3::cluster_discovery_service_client::ClusterDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Status, Streaming};
use xdsd_core::protocol::RequestKind;
use xdsd_core::types::CLUSTER;
use xdsd_core::{
    Acked, Nacked, RequestSeen, ResponseSent, Store, StreamClosed, StreamObserver, StreamOpened,
    XdsServer,
};

use crate::common::{cds_answer, connect, input, node, WAIT};

/// Records every event as a line, and refuses the requests of nodes other than `alpha`.
struct Recorder(mpsc::UnboundedSender<String>);

impl StreamObserver for Recorder {
    fn stream_opened(&self, e: &StreamOpened<'_>) {
        let _ = self.0.send(format!(
            "{} opened {:?} {:?}",
            e.stream, e.flavor, e.type_url
        ));
    }

    fn request(&self, e: &RequestSeen<'_>) -> Result<(), Status> {
        let node = e.node.map(|n| n.id.as_str()).unwrap_or("");
        let kind = match e.kind {
            RequestKind::Initial => "initial",
            RequestKind::Ack { .. } => "ack",
            RequestKind::Nack { .. } => "nack",
            RequestKind::Update => "update",
            RequestKind::Stale { .. } => "stale",
            _ => "other",
        };
        let _ = self
            .0
            .send(format!("{} request {node} {} {kind}", e.stream, e.type_url));
        if node == "alpha" {
            Ok(())
        } else {
            Err(Status::permission_denied(format!("unknown node {node:?}")))
        }
    }

    fn response_sent(&self, e: &ResponseSent<'_>) {
        let _ = self.0.send(format!(
            "{} response {} {} v={} nonce={} resources={}",
            e.stream, e.node_id, e.type_url, e.version, e.nonce, e.resources
        ));
    }

    fn acked(&self, e: &Acked<'_>) {
        let _ = self
            .0
            .send(format!("{} ack {} nonce={}", e.stream, e.type_url, e.nonce));
    }

    fn nacked(&self, e: &Nacked<'_>) {
        let _ = self.0.send(format!(
            "{} nack {} v={} nonce={} {}",
            e.stream,
            e.type_url,
            e.version.map_or("-", |v| &**v),
            e.nonce,
            e.message
        ));
    }

    fn stream_closed(&self, e: &StreamClosed<'_>) {
        let _ = self.0.send(format!(
            "{} closed {} {:?}",
            e.stream,
            e.node_id,
            e.status.map(|s| s.code())
        ));
    }
}

async fn next(events: &mut mpsc::UnboundedReceiver<String>) -> String {
    tokio::time::timeout(WAIT, events.recv())
        .await
        .expect("an event in time")
        .expect("the observer is alive")
}

fn request(id: &str, last: Option<&DiscoveryResponse>, error: Option<&str>) -> DiscoveryRequest {
    cds_answer(node(id, ""), last, error)
}

async fn open(
    addr: std::net::SocketAddr,
) -> (mpsc::Sender<DiscoveryRequest>, Streaming<DiscoveryResponse>) {
    let (tx, rx) = mpsc::channel(4);
    let responses = AggregatedDiscoveryServiceClient::new(connect(addr).await)
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    (tx, responses)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_see_each_event_of_a_stream_and_a_refusal_ends_it_with_their_status() {
    let store = Store::new();
    store.replace_all([input(CLUSTER, "c", b"1")]).unwrap();
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let server = XdsServer::builder(store.clone())
        .observer(Arc::new(Recorder(events_tx)))
        .build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server.serve(listener, async move {
        let _ = stopped.await;
    }));

    // A known node: served, and each of its events observed in order.
    let (tx, mut responses) = open(addr).await;
    tx.send(request("alpha", None, None)).await.unwrap();
    let first = tokio::time::timeout(WAIT, responses.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let opened = next(&mut events).await;
    let id = opened.split(' ').next().unwrap().to_string();
    assert_eq!(opened, format!("{id} opened Sotw None"));
    assert_eq!(
        next(&mut events).await,
        format!("{id} request alpha {CLUSTER} initial")
    );
    assert_eq!(
        next(&mut events).await,
        format!(
            "{id} response alpha {CLUSTER} v={} nonce={} resources=1",
            first.version_info, first.nonce
        )
    );
    tx.send(request("alpha", Some(&first), Some("bad cluster")))
        .await
        .unwrap();
    assert_eq!(
        next(&mut events).await,
        format!("{id} request alpha {CLUSTER} nack")
    );
    assert_eq!(
        next(&mut events).await,
        format!(
            "{id} nack {CLUSTER} v={} nonce={} bad cluster",
            first.version_info, first.nonce
        )
    );
    store.replace_all([input(CLUSTER, "c", b"2")]).unwrap();
    let second = tokio::time::timeout(WAIT, responses.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(next(&mut events).await.starts_with(&format!(
        "{id} response alpha {CLUSTER} v={}",
        second.version_info
    )));
    tx.send(request("alpha", Some(&second), None))
        .await
        .unwrap();
    assert_eq!(
        next(&mut events).await,
        format!("{id} request alpha {CLUSTER} ack")
    );
    assert_eq!(
        next(&mut events).await,
        format!("{id} ack {CLUSTER} nonce={}", second.nonce)
    );
    drop(tx);
    assert_eq!(next(&mut events).await, format!("{id} closed alpha None"));

    // An unknown node: refused with the observer's status, and sent nothing before it.
    let (tx, mut responses) = open(addr).await;
    tx.send(request("mallory", None, None)).await.unwrap();
    let status = tokio::time::timeout(WAIT, responses.message())
        .await
        .expect("an answer in time")
        .expect_err("the stream is refused");
    assert_eq!(status.code(), Code::PermissionDenied);
    assert_eq!(status.message(), "unknown node \"mallory\"");
    let opened = next(&mut events).await;
    let id = opened.split(' ').next().unwrap().to_string();
    assert_eq!(
        next(&mut events).await,
        format!("{id} request mallory {CLUSTER} initial")
    );
    assert_eq!(
        next(&mut events).await,
        format!("{id} closed mallory Some(PermissionDenied)")
    );

    // A one-shot Fetch is told as a request of stream 0, and refused the same way.
    let mut cds = ClusterDiscoveryServiceClient::new(connect(addr).await);
    let fetched = cds
        .fetch_clusters(request("alpha", None, None))
        .await
        .expect("a known node's fetch is answered")
        .into_inner();
    assert_eq!(fetched.resources.len(), 1);
    assert_eq!(
        next(&mut events).await,
        format!("0 request alpha {CLUSTER} initial")
    );
    let status = cds
        .fetch_clusters(request("mallory", None, None))
        .await
        .expect_err("an unknown node's fetch is refused");
    assert_eq!(status.code(), Code::PermissionDenied);
    assert_eq!(
        next(&mut events).await,
        format!("0 request mallory {CLUSTER} initial")
    );

    let _ = stop.send(());
    tokio::time::timeout(WAIT, task)
        .await
        .expect("serve returns in time")
        .unwrap()
        .unwrap();
}
