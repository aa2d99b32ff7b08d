//! A legacy upstream — SotW, no TP2 constraints — that varies a name's body by node cluster, the
//! case `--aggregate-by` exists for: each downstream client must get its own group's body.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::cluster::v3::cluster_discovery_service_client::ClusterDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::google::protobuf::{Any, Duration as PbDuration};
use prost::Message;
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use xdsd_client::types::CLUSTER;
use xdsd_core::store::ReferencePolicy;
use xdsd_core::{Feed, Store, XdsServer};
use xdsd_relay::{relay, AggregateBy, RelayOptions};
use xdsd_testsupport::server::WAIT;

/// A SotW ADS server without TP2: it answers each first request of a stream with cluster `web`,
/// whose connect timeout is 2 s for nodes of cluster `b` and 1 s for any other.
struct Legacy;

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
                let response = DiscoveryResponse {
                    version_info: "1".into(),
                    type_url: CLUSTER.into(),
                    nonce: nonce.to_string(),
                    resources: vec![Any {
                        type_url: CLUSTER.into(),
                        value: web.encode_to_vec(),
                    }],
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

/// A SotW relay of `upstream` grouping `by`, serving on 127.0.0.1: its address.
async fn start_relay(upstream: SocketAddr, by: AggregateBy) -> SocketAddr {
    let node = Node {
        id: "relay-legacy".into(),
        ..Default::default()
    };
    let mut options = RelayOptions::new(xdsd_client::Options::new(upstream.to_string()), node);
    options.flavor = xdsd_client::Flavor::Sotw;
    options.aggregate_by = by;
    options.first_wait = WAIT;
    let (mut source, observer, _metrics) = relay(options);
    let store = Store::with_reference_policy(ReferencePolicy::off());
    let feed = Feed::new(store.clone()).allow_empty(true);
    feed.first_load(&mut source).await.expect("first load");
    tokio::spawn(feed.follow(source));
    let observer = Arc::new(observer);
    let server = XdsServer::builder(store)
        .observer(observer.clone())
        .store_picker(observer)
        .build()
        .expect("a server without TLS builds");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("local address");
    tokio::spawn(server.serve(listener, std::future::pending()));
    addr
}

/// The connect timeout (seconds) of `web` as the relay first serves it to a node of `cluster`.
async fn web_timeout(relay: SocketAddr, id: &str, cluster: &str) -> i64 {
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
    let mut responses = client
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .expect("an ADS stream")
        .into_inner();
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
