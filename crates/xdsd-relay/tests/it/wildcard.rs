//! A downstream wildcard client of clusters is never sent a partial state through a relay. The
//! relay's group holds cluster `a` by name (another client asks for it) when a wildcard client
//! arrives; the relay adds the wildcard to its upstream stream, and the upstream first answers
//! with a push of a change of `a` only — as a server does that sent that response before it
//! read the request (SotW: the request is then stale, and the server answers the ACK that
//! carries the wildcard again) — and only then with the whole type, `a, b, c`. A SotW
//! client's full state without `b` and `c` would remove them (Envoy drops those clusters'
//! traffic), and a delta client's first answer without them ends Envoy's initial fetch without
//! them. Each pair of upstream and downstream flavors.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
    Resource as WireResource,
};
use envoy_types::pb::google::protobuf::Any;
use prost::Message;
use tokio::sync::{mpsc, Notify};
use tokio::time::timeout;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use xdsd_client::types::CLUSTER;
use xdsd_client::Flavor;
use xdsd_relay::{relay, RelayOptions};
use xdsd_testsupport::server::WAIT;

/// How long the downstream wildcard client is watched for a partial state after the upstream
/// sent its first answer and read the relay's ACK of it (the relay needs milliseconds to pass
/// an answer on; nothing else can end this wait but a response, which is the failure).
const WATCH: Duration = Duration::from_secs(2);

/// The upstream's script, shared with the test: told when it has read the relay's ACK of its
/// answer without `b` and `c`, and told by the test when to send the whole type.
#[derive(Default)]
struct Script {
    /// The relay ACKed the answer sent before the wildcard was read.
    acked: Notify,
    /// The test lets the upstream send the whole type.
    go: Notify,
    /// The upstream has cluster `a` only (SotW): its answer to the wildcard is `a` again,
    /// unchanged, which cannot be told from its answer to `a`.
    only_a: bool,
}

/// Clusters `a`, `b` and `c`, answered by name, and a wildcard answered first with `a` alone
/// (see the module documentation), then, once the test says so, with all three.
struct Scripted(Arc<Script>);

fn cluster_any(name: &str, timeout_s: i64) -> Any {
    Any {
        type_url: CLUSTER.into(),
        value: Cluster {
            name: name.into(),
            connect_timeout: Some(envoy_types::pb::google::protobuf::Duration {
                seconds: timeout_s,
                nanos: 0,
            }),
            ..Default::default()
        }
        .encode_to_vec(),
    }
}

type DeltaResponses =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<DeltaDiscoveryResponse, Status>> + Send>>;

#[tonic::async_trait]
impl AggregatedDiscoveryService for Scripted {
    type StreamAggregatedResourcesStream = ReceiverStream<Result<DiscoveryResponse, Status>>;
    type DeltaAggregatedResourcesStream = DeltaResponses;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Self::StreamAggregatedResourcesStream>, Status> {
        let mut requests = request.into_inner();
        let (tx, rx) = mpsc::channel(8);
        let script = self.0.clone();
        tokio::spawn(async move {
            let mut nonce = 0u64;
            let mut last: Option<BTreeSet<String>> = None;
            // 0: no wildcard read; 1: its "stale" answer (`a` alone) sent; 2: the whole type.
            let mut phase = 0;
            while let Ok(Some(r)) = requests.message().await {
                if r.type_url != CLUSTER {
                    continue;
                }
                let names: BTreeSet<String> = r.resource_names.iter().cloned().collect();
                let wildcard = names.contains("*");
                // `a`'s body: changed (2 s) once the wildcard's request is on its way.
                let a = if (phase == 0 && !wildcard) || script.only_a {
                    1
                } else {
                    2
                };
                let send: Option<Vec<&str>> = if wildcard && phase == 0 && script.only_a {
                    phase = 2;
                    Some(vec!["a"])
                } else if wildcard && phase == 0 {
                    // A push of a change of `a`, sent as a server sends a response before it
                    // reads the request (which is stale then).
                    phase = 1;
                    Some(vec!["a"])
                } else if wildcard && phase == 1 {
                    // The ACK of that response, which carries the wildcard again: fresh.
                    script.acked.notify_one();
                    script.go.notified().await;
                    phase = 2;
                    Some(vec!["a", "b", "c"])
                } else if last.as_ref() != Some(&names) {
                    Some(
                        ["a", "b", "c"]
                            .into_iter()
                            .filter(|n| wildcard || names.contains(*n))
                            .collect(),
                    )
                } else {
                    None
                };
                last = Some(names);
                let Some(send) = send else { continue };
                nonce += 1;
                let response = DiscoveryResponse {
                    version_info: nonce.to_string(),
                    type_url: CLUSTER.into(),
                    nonce: nonce.to_string(),
                    resources: send
                        .iter()
                        .map(|n| cluster_any(n, if *n == "a" { a } else { 1 }))
                        .collect(),
                    ..Default::default()
                };
                if tx.send(Ok(response)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn delta_aggregated_resources(
        &self,
        request: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<Self::DeltaAggregatedResourcesStream>, Status> {
        let mut requests = request.into_inner();
        let (tx, rx) = mpsc::channel(8);
        let script = self.0.clone();
        tokio::spawn(async move {
            let mut nonce = 0u64;
            // 0: no wildcard read; 1: a push of `a` sent before it was read; 2: its answer.
            let mut phase = 0;
            let mut pushed = String::new();
            while let Ok(Some(r)) = requests.message().await {
                if r.type_url != CLUSTER {
                    continue;
                }
                let wildcard = r.resource_names_subscribe.iter().any(|n| n == "*");
                let send: Vec<(&str, i64)> = if wildcard && phase == 0 {
                    // A change of `a` pushed before the server read the request.
                    phase = 1;
                    vec![("a", 2)]
                } else if phase == 1 && r.response_nonce == pushed {
                    // The ACK of that push: the server has read the wildcard by now.
                    script.acked.notify_one();
                    script.go.notified().await;
                    phase = 2;
                    vec![("b", 1), ("c", 1)]
                } else {
                    r.resource_names_subscribe
                        .iter()
                        .filter_map(|n| ["a", "b", "c"].into_iter().find(|m| m == n))
                        .map(|n| (n, 1))
                        .collect()
                };
                if send.is_empty() {
                    continue;
                }
                nonce += 1;
                if phase == 1 && pushed.is_empty() {
                    pushed = nonce.to_string();
                }
                let response = DeltaDiscoveryResponse {
                    system_version_info: nonce.to_string(),
                    type_url: CLUSTER.into(),
                    nonce: nonce.to_string(),
                    resources: send
                        .iter()
                        .map(|(n, v)| WireResource {
                            name: (*n).into(),
                            version: v.to_string(),
                            resource: Some(cluster_any(n, *v)),
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                };
                if tx.send(Ok(response)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

async fn start_scripted(script: Arc<Script>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("an address");
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(AggregatedDiscoveryServiceServer::new(Scripted(script)))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    addr
}

/// A relay of `upstream` speaking `flavor` upstream, nothing prefetched, serving on 127.0.0.1.
/// Names stay pending for a minute: only the upstream's answer ends a wait in these tests.
async fn start_relay(upstream: SocketAddr, flavor: Flavor) -> SocketAddr {
    start_relay_waiting(upstream, flavor, Duration::from_secs(60)).await
}

/// [`start_relay`], names pending (and a wildcard told from no answer) for `wait` at most.
async fn start_relay_waiting(upstream: SocketAddr, flavor: Flavor, wait: Duration) -> SocketAddr {
    let node = Node {
        id: "relay-wildcard".into(),
        ..Default::default()
    };
    let mut options = RelayOptions::new(xdsd_client::Options::new(upstream.to_string()), node);
    options.flavor = flavor;
    options.first_wait = wait;
    let (source, observer, _metrics) = relay(options);
    crate::serve_relay(source, observer).await.1
}

fn node(id: &str) -> Option<Node> {
    Some(Node {
        id: id.into(),
        ..Default::default()
    })
}

/// A downstream ADS stream of clusters: its request sender (the stream lives while it does) and
/// a receiver of the names of each response (a delta response's added names).
async fn downstream(
    relay: SocketAddr,
    flavor: Flavor,
    id: &str,
    names: &[&str],
) -> (Box<dyn Send>, mpsc::UnboundedReceiver<Vec<String>>) {
    let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://{relay}"))
        .await
        .expect("connect to the relay");
    let (names_tx, names_rx) = mpsc::unbounded_channel();
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    match flavor {
        Flavor::Sotw => {
            let (tx, rx) = mpsc::channel(8);
            tx.send(DiscoveryRequest {
                node: node(id),
                type_url: CLUSTER.into(),
                resource_names: names.clone(),
                ..Default::default()
            })
            .await
            .expect("queue the request");
            let mut responses = client
                .stream_aggregated_resources(ReceiverStream::new(rx))
                .await
                .expect("an ADS stream")
                .into_inner();
            let acks = tx.clone();
            tokio::spawn(async move {
                while let Ok(Some(r)) = responses.message().await {
                    let got = r
                        .resources
                        .iter()
                        .map(|any| {
                            Cluster::decode(any.value.as_slice())
                                .expect("a cluster")
                                .name
                        })
                        .collect();
                    let _ = names_tx.send(got);
                    let _ = acks
                        .send(DiscoveryRequest {
                            type_url: CLUSTER.into(),
                            resource_names: names.clone(),
                            version_info: r.version_info,
                            response_nonce: r.nonce,
                            ..Default::default()
                        })
                        .await;
                }
            });
            (Box::new(tx), names_rx)
        }
        Flavor::Delta => {
            let (tx, rx) = mpsc::channel(8);
            tx.send(DeltaDiscoveryRequest {
                node: node(id),
                type_url: CLUSTER.into(),
                resource_names_subscribe: names,
                ..Default::default()
            })
            .await
            .expect("queue the request");
            let mut responses = client
                .delta_aggregated_resources(ReceiverStream::new(rx))
                .await
                .expect("a delta ADS stream")
                .into_inner();
            let acks = tx.clone();
            tokio::spawn(async move {
                while let Ok(Some(r)) = responses.message().await {
                    let got = r.resources.iter().map(|w| w.name.clone()).collect();
                    let _ = names_tx.send(got);
                    let _ = acks
                        .send(DeltaDiscoveryRequest {
                            type_url: CLUSTER.into(),
                            response_nonce: r.nonce,
                            ..Default::default()
                        })
                        .await;
                }
            });
            (Box::new(tx), names_rx)
        }
    }
}

async fn next_names(rx: &mut mpsc::UnboundedReceiver<Vec<String>>, what: &str) -> Vec<String> {
    let mut names = timeout(WAIT, rx.recv())
        .await
        .unwrap_or_else(|_| panic!("{what}: no response in time"))
        .expect("the stream lives");
    names.sort();
    names
}

async fn a_wildcard_client_is_never_sent_the_answer_to_names_asked_before_it(
    upstream: Flavor,
    downstream_flavor: Flavor,
) {
    let script = Arc::new(Script::default());
    let relay = start_relay(start_scripted(script.clone()).await, upstream).await;
    // A client of cluster `a` by name: the relay's group holds `a` upstream.
    let (_named, mut named) = downstream(relay, downstream_flavor, "named", &["a"]).await;
    assert_eq!(next_names(&mut named, "the named client").await, ["a"]);
    // A wildcard client of the same group (no parameters either).
    let wildcard_names: &[&str] = match downstream_flavor {
        Flavor::Sotw => &[],
        Flavor::Delta => &["*"],
    };
    let (_wild, mut wild) = downstream(relay, downstream_flavor, "wild", wildcard_names).await;
    timeout(WAIT, script.acked.notified())
        .await
        .expect("the relay ACKs the upstream's answer sent before it read the wildcard");
    if let Ok(Some(names)) = timeout(WATCH, wild.recv()).await {
        panic!(
            "the wildcard client was sent {names:?} before the upstream answered the wildcard \
             (it has b and c)"
        );
    }
    script.go.notify_one();
    assert_eq!(
        next_names(&mut wild, "the wildcard client").await,
        ["a", "b", "c"],
        "the wildcard client's first answer is the whole type"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_sotw_upstream_a_sotw_wildcard_client_is_never_sent_the_answer_to_names_asked_before_it(
) {
    a_wildcard_client_is_never_sent_the_answer_to_names_asked_before_it(Flavor::Sotw, Flavor::Sotw)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_sotw_upstream_a_delta_wildcard_client_is_never_sent_the_answer_to_names_asked_before_it(
) {
    a_wildcard_client_is_never_sent_the_answer_to_names_asked_before_it(
        Flavor::Sotw,
        Flavor::Delta,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_delta_upstream_a_sotw_wildcard_client_is_never_sent_the_answer_to_names_asked_before_it(
) {
    a_wildcard_client_is_never_sent_the_answer_to_names_asked_before_it(
        Flavor::Delta,
        Flavor::Sotw,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_delta_upstream_a_delta_wildcard_client_is_never_sent_the_answer_to_names_asked_before_it(
) {
    a_wildcard_client_is_never_sent_the_answer_to_names_asked_before_it(
        Flavor::Delta,
        Flavor::Delta,
    )
    .await;
}

/// Every cluster the upstream has is asked by name: its answer to the wildcard cannot be told
/// from its answer to those names, and the wildcard client is answered with what the relay
/// holds once `--upstream-wait` has passed (bounded; logged at WARN), not never.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wildcard_whose_answer_cannot_be_told_from_the_names_is_answered_at_the_upstream_wait() {
    let script = Arc::new(Script {
        only_a: true,
        ..Script::default()
    });
    let relay = start_relay_waiting(
        start_scripted(script.clone()).await,
        Flavor::Sotw,
        Duration::from_millis(500),
    )
    .await;
    let (_named, mut named) = downstream(relay, Flavor::Sotw, "named", &["a"]).await;
    assert_eq!(next_names(&mut named, "the named client").await, ["a"]);
    let (_wild, mut wild) = downstream(relay, Flavor::Sotw, "wild", &[]).await;
    assert_eq!(next_names(&mut wild, "the wildcard client").await, ["a"]);
}
