//! A legacy upstream — SotW, no TP2 constraints — that varies a name's body by node cluster, the
//! case `--aggregate-by` exists for: each downstream client must get its own group's body.

use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::cluster::v3::cluster_discovery_service_client::ClusterDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::{
    single_constraint::ConstraintType, SingleConstraint, Type,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
    DynamicParameterConstraints, Resource as WireResource, ResourceName,
};
use envoy_types::pb::google::protobuf::{Any, Duration as PbDuration};
use prost::Message;
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use xdsd_client::types::CLUSTER;
use xdsd_core::{ChangeSet, Rejection, Source, SourceEvent};
use xdsd_relay::{relay, AggregateBy, RelayOptions};
use xdsd_testsupport::server::WAIT;

/// A SotW ADS server without TP2: it answers each first request of a stream with cluster `web`,
/// whose connect timeout is 2 s for nodes of cluster `b` and 1 s for any other; to nodes of
/// cluster `mixed` it sends two variants of `web`, one unconstrained and one for `env=prod`,
/// which no store takes together.
struct Legacy;

/// `web`'s two variants that a store refuses together: plain, and constrained to `env=prod`.
fn mixed_variants(web: &Cluster) -> Vec<Any> {
    let prod = DynamicParameterConstraints {
        r#type: Some(Type::Constraint(SingleConstraint {
            key: "env".into(),
            constraint_type: Some(ConstraintType::Value("prod".into())),
        })),
    };
    [None, Some(prod)]
        .into_iter()
        .map(|constraints| Any {
            type_url: RESOURCE_WRAPPER.into(),
            value: WireResource {
                resource_name: Some(ResourceName {
                    name: web.name.clone(),
                    dynamic_parameter_constraints: constraints,
                }),
                version: "1".into(),
                resource: Some(Any {
                    type_url: CLUSTER.into(),
                    value: web.encode_to_vec(),
                }),
                ..Default::default()
            }
            .encode_to_vec(),
        })
        .collect()
}

const RESOURCE_WRAPPER: &str = "type.googleapis.com/envoy.service.discovery.v3.Resource";

type Responses =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<DeltaDiscoveryResponse, Status>> + Send>>;

#[tonic::async_trait]
impl AggregatedDiscoveryService for Legacy {
    type StreamAggregatedResourcesStream = ReceiverStream<Result<DiscoveryResponse, Status>>;
    type DeltaAggregatedResourcesStream = Responses;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Self::StreamAggregatedResourcesStream>, Status> {
        let mut requests = request.into_inner();
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(async move {
            let mut cluster = String::new();
            let mut nonce = 0;
            while let Ok(Some(r)) = requests.message().await {
                if let Some(node) = &r.node {
                    cluster = node.cluster.clone();
                }
                if !r.response_nonce.is_empty() {
                    continue;
                }
                nonce += 1;
                let web = Cluster {
                    name: "web".into(),
                    connect_timeout: Some(PbDuration {
                        seconds: if cluster == "b" { 2 } else { 1 },
                        nanos: 0,
                    }),
                    ..Default::default()
                };
                let resources = if cluster == "mixed" {
                    mixed_variants(&web)
                } else {
                    vec![Any {
                        type_url: CLUSTER.into(),
                        value: web.encode_to_vec(),
                    }]
                };
                let response = DiscoveryResponse {
                    version_info: "1".into(),
                    type_url: CLUSTER.into(),
                    nonce: nonce.to_string(),
                    resources,
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
        _request: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<Self::DeltaAggregatedResourcesStream>, Status> {
        Err(Status::unimplemented("SotW only"))
    }
}

async fn start_legacy() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("an address");
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(AggregatedDiscoveryServiceServer::new(Legacy))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    addr
}

/// Forwards a source, telling each rejection it reports (what the feed logs and counts).
struct Reporting<S> {
    inner: S,
    rejected: mpsc::UnboundedSender<Vec<String>>,
}

impl<S: Source + Send> Source for Reporting<S> {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    async fn load(&mut self) -> Result<ChangeSet, Rejection> {
        self.inner.load().await
    }

    async fn next(&mut self) -> Option<SourceEvent> {
        let event = self.inner.next().await;
        if let Some(SourceEvent::Rejected(rejection)) = &event {
            let _ = self.rejected.send(rejection.messages().to_vec());
        }
        event
    }

    fn committed(&mut self, ok: bool) {
        self.inner.committed(ok);
    }

    fn metrics(&mut self, metrics: &xdsd_core::Metrics) {
        self.inner.metrics(metrics);
    }

    fn pending(&mut self, pending: xdsd_core::store::PendingNames) {
        self.inner.pending(pending);
    }
}

/// A SotW relay of `upstream` grouping `by`, serving on 127.0.0.1: its address.
async fn start_relay(upstream: SocketAddr, by: AggregateBy) -> SocketAddr {
    start_reporting_relay(upstream, by, WAIT).await.0
}

/// [`start_relay`] with `first_wait` (how long a name stays pending), and the rejections its
/// source reports to the feed.
async fn start_reporting_relay(
    upstream: SocketAddr,
    by: AggregateBy,
    first_wait: Duration,
) -> (SocketAddr, mpsc::UnboundedReceiver<Vec<String>>) {
    let node = Node {
        id: "relay-legacy".into(),
        ..Default::default()
    };
    let mut options = RelayOptions::new(xdsd_client::Options::new(upstream.to_string()), node);
    options.flavor = xdsd_client::Flavor::Sotw;
    options.aggregate_by = by;
    options.first_wait = first_wait;
    let (source, observer, _metrics) = relay(options);
    let (rejected, rejections) = mpsc::unbounded_channel();
    let source = Reporting {
        inner: source,
        rejected,
    };
    let (_, addr) = crate::serve_relay(source, observer).await;
    (addr, rejections)
}

/// An ADS stream of a node of `cluster` to `relay` subscribing `web`: its request sender (the
/// stream lives while it does) and its responses.
async fn subscribe_web(
    relay: SocketAddr,
    id: &str,
    cluster: &str,
) -> (mpsc::Sender<DiscoveryRequest>, Streaming<DiscoveryResponse>) {
    let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://{relay}"))
        .await
        .expect("connect to the relay");
    let (tx, rx) = mpsc::channel(4);
    tx.send(DiscoveryRequest {
        node: Some(Node {
            id: id.into(),
            cluster: cluster.into(),
            ..Default::default()
        }),
        type_url: CLUSTER.into(),
        resource_names: vec!["web".into()],
        ..Default::default()
    })
    .await
    .expect("queue the request");
    let responses = client
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .expect("an ADS stream")
        .into_inner();
    (tx, responses)
}

/// The connect timeout (seconds) of `web` as the relay first serves it to a node of `cluster`.
async fn web_timeout(relay: SocketAddr, id: &str, cluster: &str) -> i64 {
    let (_tx, mut responses) = subscribe_web(relay, id, cluster).await;
    let r = timeout(WAIT, responses.message())
        .await
        .expect("an answer in time")
        .expect("a response")
        .expect("not the end of the stream");
    assert_eq!(r.resources.len(), 1, "{r:?}");
    let web = Cluster::decode(r.resources[0].value.as_slice()).expect("a cluster");
    web.connect_timeout.expect("a connect timeout").seconds
}

/// The connect timeout (seconds) of `web` as the relay answers a one-shot `FetchClusters` of a
/// node of `cluster`.
async fn fetched_web_timeout(relay: SocketAddr, id: &str, cluster: &str) -> i64 {
    let mut client = ClusterDiscoveryServiceClient::connect(format!("http://{relay}"))
        .await
        .expect("connect to the relay");
    let request = DiscoveryRequest {
        node: Some(Node {
            id: id.into(),
            cluster: cluster.into(),
            ..Default::default()
        }),
        type_url: CLUSTER.into(),
        resource_names: vec!["web".into()],
        ..Default::default()
    };
    let r = timeout(WAIT, client.fetch_clusters(request))
        .await
        .expect("an answer in time")
        .expect("a response")
        .into_inner();
    assert_eq!(r.resources.len(), 1, "{r:?}");
    let web = Cluster::decode(r.resources[0].value.as_slice()).expect("a cluster");
    web.connect_timeout.expect("a connect timeout").seconds
}

async fn each_group_gets_its_own_body(by: AggregateBy) {
    let relay = start_relay(start_legacy().await, by).await;
    assert_eq!(web_timeout(relay, "n-a", "a").await, 1);
    assert_eq!(
        web_timeout(relay, "n-b", "b").await,
        2,
        "a client of cluster b is served cluster a's body of web"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_aggregate_by_cluster_a_client_gets_its_clusters_body_of_a_name() {
    each_group_gets_its_own_body(AggregateBy::Cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_aggregate_by_node_a_client_gets_its_nodes_body_of_a_name() {
    each_group_gets_its_own_body(AggregateBy::Node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_aggregate_by_cluster_a_one_shot_fetch_gets_its_clusters_body_of_a_name() {
    let relay = start_relay(start_legacy().await, AggregateBy::Cluster).await;
    assert_eq!(web_timeout(relay, "n-a", "a").await, 1);
    assert_eq!(
        fetched_web_timeout(relay, "n-b", "b").await,
        2,
        "a fetch of cluster b is answered with cluster a's body of web"
    );
    assert_eq!(fetched_web_timeout(relay, "n-a2", "a").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_store_refusing_a_change_is_reported_at_once() {
    // Names stay pending for a minute: nothing else wakes the relay before the report is due.
    let (relay, mut rejections) = start_reporting_relay(
        start_legacy().await,
        AggregateBy::Cluster,
        Duration::from_secs(60),
    )
    .await;
    // The upstream answered once: the relay is ready, and its readiness changes no more (an
    // event of its own that would carry the report along).
    assert_eq!(web_timeout(relay, "n-a", "a").await, 1);
    let _stream = subscribe_web(relay, "n-m", "mixed").await;
    let messages = timeout(WAIT, rejections.recv())
        .await
        .expect("cluster mixed's refused change reported without waiting for another event")
        .expect("the source lives");
    assert!(
        messages
            .iter()
            .any(|m| m.contains("mixed") && m.contains("\"web\"")),
        "the report names the group and the name: {messages:?}"
    );
}
