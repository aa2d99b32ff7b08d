//! SotW over real gRPC on loopback: a tonic client (envoy-types' generated stubs) against the
//! in-process server. Checks that the pre-encoded responses decode as DiscoveryResponses and
//! that the stream-level rules (type URLs, node identity, per-type services) hold.

use std::time::Duration;

use envoy_types::pb::envoy::service::cluster::v3::cluster_discovery_service_client::ClusterDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::envoy::service::endpoint::v3::endpoint_discovery_service_client::EndpointDiscoveryServiceClient;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;
use xdsd_core::types::{CLUSTER, CLUSTER_LOAD_ASSIGNMENT, LISTENER};
use xdsd_core::ServerOptions;

use crate::support::{label, node, protocol_tests, Mode, Server, WAIT};

async fn ads(server: &Server) -> Stream {
    let (tx, rx) = mpsc::channel(16);
    let responses = AggregatedDiscoveryServiceClient::new(server.channel.clone())
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    Stream { tx, responses }
}

struct Stream {
    tx: mpsc::Sender<DiscoveryRequest>,
    responses: Streaming<DiscoveryResponse>,
}

impl Stream {
    async fn send(&self, type_url: &str, names: &[&str], nonce: &str) {
        self.tx
            .send(DiscoveryRequest {
                node: node("n1", "test"),
                type_url: type_url.into(),
                resource_names: names.iter().map(|n| n.to_string()).collect(),
                response_nonce: nonce.into(),
                ..Default::default()
            })
            .await
            .unwrap();
    }

    async fn recv(&mut self) -> DiscoveryResponse {
        tokio::time::timeout(WAIT, self.responses.message())
            .await
            .expect("a response in time")
            .expect("a response, not an error")
            .expect("an open stream")
    }

    async fn recv_status(&mut self) -> tonic::Status {
        match tokio::time::timeout(WAIT, self.responses.message())
            .await
            .expect("an answer in time")
        {
            Err(status) => status,
            Ok(other) => panic!("expected an error status, got {other:?}"),
        }
    }

    /// Asserts that nothing arrives for a short while (used only to check silence).
    async fn expect_silence(&mut self) {
        if let Ok(r) =
            tokio::time::timeout(Duration::from_millis(300), self.responses.message()).await
        {
            panic!("expected no response, got {r:?}");
        }
    }
}

/// Each resource here is named by the label `put` gave it.
fn names(r: &DiscoveryResponse) -> Vec<String> {
    r.resources.iter().map(|any| label(&any.value)).collect()
}

async fn ads_wildcard_cds_then_named_eds_and_pushes_on_change(mode: Mode) {
    let server = Server::start_in(mode).await;
    server.put(CLUSTER, "c1", "c1-v1");
    server.put(CLUSTER, "c2", "c2-v1");
    server.put(CLUSTER_LOAD_ASSIGNMENT, "c1", "e1-v1");
    let mut s = ads(&server).await;

    s.send(CLUSTER, &[], "").await;
    let cds = s.recv().await;
    assert_eq!(cds.type_url, CLUSTER);
    assert_eq!(names(&cds), ["c1-v1", "c2-v1"]);
    assert!(cds.resources.iter().all(|a| a.type_url == CLUSTER));
    assert!(!cds.nonce.is_empty() && !cds.version_info.is_empty());

    s.send(CLUSTER, &[], &cds.nonce).await; // ACK
    s.send(CLUSTER_LOAD_ASSIGNMENT, &["c1", "c2"], "").await;
    let eds = s.recv().await;
    assert_eq!(names(&eds), ["e1-v1"], "c2 has no endpoints yet");
    assert_ne!(eds.nonce, cds.nonce);
    s.send(CLUSTER_LOAD_ASSIGNMENT, &["c1", "c2"], &eds.nonce)
        .await;
    s.expect_silence().await;

    // c2's endpoints spring into existence: only they are sent.
    server.put(CLUSTER_LOAD_ASSIGNMENT, "c2", "e2-v1");
    let eds2 = s.recv().await;
    assert_eq!(names(&eds2), ["e2-v1"]);
    // One cluster changes: CDS resends the full state.
    server.put(CLUSTER, "c2", "c2-v2");
    let cds2 = s.recv().await;
    assert_eq!(cds2.type_url, CLUSTER);
    assert_eq!(names(&cds2), ["c1-v1", "c2-v2"]);
    assert_ne!(cds2.version_info, cds.version_info);
    server.stop().await;
}

async fn empty_type_url_on_ads_ends_the_stream_with_invalid_argument(mode: Mode) {
    let server = Server::start_in(mode).await;
    let mut s = ads(&server).await;
    s.send("", &[], "").await;
    assert_eq!(s.recv_status().await.code(), tonic::Code::InvalidArgument);
    server.stop().await;
}

async fn unknown_type_url_on_ads_is_an_empty_type_and_the_stream_stays_up(mode: Mode) {
    let server = Server::start_in(mode).await;
    server.put(CLUSTER, "c1", "c1");
    let mut s = ads(&server).await;
    s.send("type.googleapis.com/example.v1.Unknown", &[], "")
        .await;
    let r = s.recv().await;
    assert_eq!(r.type_url, "type.googleapis.com/example.v1.Unknown");
    assert!(r.resources.is_empty(), "wildcard gets an empty state");
    s.send("type.googleapis.com/example.v1.Unknown", &["x"], &r.nonce)
        .await;
    s.send(CLUSTER, &[], "").await;
    assert_eq!(
        names(&s.recv().await),
        ["c1"],
        "other types are still served"
    );
    server.stop().await;
}

async fn a_different_node_mid_stream_ends_it_with_invalid_argument(mode: Mode) {
    let server = Server::start_in(mode).await;
    server.put(CLUSTER, "c1", "c1");
    let mut s = ads(&server).await;
    s.send(CLUSTER, &[], "").await;
    let r = s.recv().await;
    // Omitting the node later is fine.
    s.tx.send(DiscoveryRequest {
        type_url: LISTENER.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let lds = s.recv().await;
    assert_eq!(lds.type_url, LISTENER);
    s.tx.send(DiscoveryRequest {
        node: node("someone-else", "test"),
        type_url: CLUSTER.into(),
        response_nonce: r.nonce,
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(s.recv_status().await.code(), tonic::Code::InvalidArgument);
    server.stop().await;
}

/// With `--aggregate-by node` (or `cluster`) which content a client is served depends on its
/// node, which the protocol asks a client to send on a stream's first request: a first
/// request without one is refused with INVALID_ARGUMENT saying so, rather than served the
/// shared partition's content (another group's, for an upstream that varies it by node).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_a_relay_by_node_a_first_request_without_a_node_is_invalid_argument() {
    let server = Server::start_in(Mode::RelayByNode).await;
    server.put(CLUSTER, "c1", "c1");
    let mut s = ads(&server).await;
    s.tx.send(DiscoveryRequest {
        type_url: CLUSTER.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let status = s.recv_status().await;
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("node"), "{status:?}");
    // With its node, the same request is served.
    let mut s = ads(&server).await;
    s.send(CLUSTER, &[], "").await;
    let r = s.recv().await;
    assert_eq!(r.type_url, CLUSTER);
    assert_eq!(r.resources.len(), 1);
    server.stop().await;
}

async fn per_type_services_serve_their_type_and_reject_others(mode: Mode) {
    let server = Server::start_in(mode).await;
    server.put(CLUSTER, "c1", "c1");
    server.put(CLUSTER_LOAD_ASSIGNMENT, "c1", "e1");

    let (tx, rx) = mpsc::channel(4);
    let mut cds = ClusterDiscoveryServiceClient::new(server.channel.clone())
        .stream_clusters(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    // The type URL may be left out on a per-type stream.
    tx.send(DiscoveryRequest {
        node: node("n1", "test"),
        ..Default::default()
    })
    .await
    .unwrap();
    let r = tokio::time::timeout(WAIT, cds.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(r.type_url, CLUSTER);
    assert_eq!(r.resources.len(), 1);

    let (tx, rx) = mpsc::channel(4);
    let mut eds = EndpointDiscoveryServiceClient::new(server.channel.clone())
        .stream_endpoints(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(DiscoveryRequest {
        node: node("n1", "test"),
        type_url: CLUSTER.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let status = tokio::time::timeout(WAIT, eds.message())
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    server.stop().await;
}

async fn shutdown_ends_open_streams(mode: Mode) {
    let server = Server::start_in(mode).await;
    let mut s = ads(&server).await;
    s.send(CLUSTER, &[], "").await;
    s.recv().await;
    server.stop().await; // would hang if open streams kept the server up
    assert_eq!(s.recv_status().await.code(), tonic::Code::Unavailable);
}

/// An EDS cluster, encoded, with a connect timeout that makes each version distinct.
fn eds_cluster(name: &str, timeout_secs: i64) -> Vec<u8> {
    use envoy_types::pb::envoy::config::cluster::v3::cluster::{
        ClusterDiscoveryType, DiscoveryType, EdsClusterConfig,
    };
    use envoy_types::pb::envoy::config::cluster::v3::Cluster;
    use envoy_types::pb::google::protobuf::Duration as PbDuration;
    use prost::Message;
    Cluster {
        name: name.into(),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32)),
        eds_cluster_config: Some(EdsClusterConfig::default()),
        connect_timeout: Some(PbDuration {
            seconds: timeout_secs,
            nanos: 0,
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

async fn an_updated_eds_cluster_gets_its_unchanged_endpoints_again_to_finish_warming(mode: Mode) {
    let server = Server::start_in(mode).await;
    // Endpoints first: the store rejects an EDS cluster whose endpoints do not exist.
    server.put(CLUSTER_LOAD_ASSIGNMENT, "web", "endpoints-of-web");
    server.put(CLUSTER_LOAD_ASSIGNMENT, "other", "endpoints-of-other");
    server.set(CLUSTER, "web", &eds_cluster("web", 1));
    server.set(CLUSTER, "other", &eds_cluster("other", 1));
    let mut s = ads(&server).await;
    s.send(CLUSTER, &[], "").await;
    let cds = s.recv().await;
    s.send(CLUSTER, &[], &cds.nonce).await;
    s.send(CLUSTER_LOAD_ASSIGNMENT, &["web", "other"], "").await;
    let eds = s.recv().await;
    assert_eq!(eds.resources.len(), 2);
    s.send(CLUSTER_LOAD_ASSIGNMENT, &["web", "other"], &eds.nonce)
        .await;
    s.expect_silence().await;

    server.set(CLUSTER, "web", &eds_cluster("web", 2));
    let cds = s.recv().await;
    assert_eq!(cds.type_url, CLUSTER, "clusters first");
    let eds = s.recv().await;
    assert_eq!(eds.type_url, CLUSTER_LOAD_ASSIGNMENT);
    assert_eq!(
        names(&eds),
        ["endpoints-of-web"],
        "only the updated cluster's endpoints, unchanged"
    );
    server.stop().await;
}

async fn streams_subscribed_to_the_same_names_each_keep_their_own_subscription_and_sends(
    mode: Mode,
) {
    let server = Server::start_in(mode).await;
    let all = server.set_named(CLUSTER_LOAD_ASSIGNMENT, "same", 100);
    let list: Vec<&str> = all.iter().map(|n| n.as_str()).collect();
    let mut streams = Vec::new();
    for _ in 0..3 {
        let mut s = ads(&server).await;
        s.send(CLUSTER_LOAD_ASSIGNMENT, &list, "").await;
        let r = s.recv().await;
        assert_eq!(names(&r), all, "every subscribed name, in order");
        s.send(CLUSTER_LOAD_ASSIGNMENT, &list, &r.nonce).await;
        streams.push(s);
    }
    // The second drops a name (the same list otherwise, in another order).
    let mut fewer: Vec<&str> = list[1..].to_vec();
    fewer.reverse();
    streams[1].send(CLUSTER_LOAD_ASSIGNMENT, &fewer, "").await;
    streams[1].expect_silence().await;
    server.put(CLUSTER_LOAD_ASSIGNMENT, "same-000", "same-000 v2");
    for (i, s) in streams.iter_mut().enumerate() {
        if i == 1 {
            s.expect_silence().await;
        } else {
            assert_eq!(names(&s.recv().await), ["same-000 v2"]);
        }
    }
    server.put(CLUSTER_LOAD_ASSIGNMENT, "same-001", "same-001 v2");
    for s in &mut streams {
        assert_eq!(
            names(&s.recv().await),
            ["same-001 v2"],
            "each stream was sent what it was sent, not another's"
        );
    }
    server.stop().await;
}

/// One response in flight per type (`ServerOptions::ack_wait`): changes made while the client
/// has not answered the last response go out together once it does, and without an answer
/// after the wait.
async fn changes_wait_for_the_answer_to_the_last_response_and_go_out_together(mode: Mode) {
    let server = Server::start_with_in(
        ServerOptions::default().ack_wait(Duration::from_millis(1500)),
        mode,
    )
    .await;
    server.put(CLUSTER_LOAD_ASSIGNMENT, "a", "a-v1");
    server.put(CLUSTER_LOAD_ASSIGNMENT, "b", "b-v1");
    let mut s = ads(&server).await;
    s.send(CLUSTER_LOAD_ASSIGNMENT, &["a", "b"], "").await;
    let first = s.recv().await;
    assert_eq!(names(&first), ["a-v1", "b-v1"]);
    server.put(CLUSTER_LOAD_ASSIGNMENT, "a", "a-v2");
    server.put(CLUSTER_LOAD_ASSIGNMENT, "b", "b-v2");
    s.expect_silence().await;
    s.send(CLUSTER_LOAD_ASSIGNMENT, &["a", "b"], &first.nonce)
        .await;
    let second = s.recv().await;
    assert_eq!(names(&second), ["a-v2", "b-v2"], "both in one response");
    // Not answered: the next change goes out after the wait all the same.
    let before = std::time::Instant::now();
    server.put(CLUSTER_LOAD_ASSIGNMENT, "a", "a-v3");
    let third = s.recv().await;
    assert_eq!(names(&third), ["a-v3"]);
    assert!(
        before.elapsed() >= Duration::from_millis(1000),
        "sent after {:?}",
        before.elapsed()
    );
    server.stop().await;
}

protocol_tests! {
    through_a_relay: [],
    direct_only: [],
    // The protocol's rules hold through a relay in either grouping.
    relay_by_node: [],
    through_both_relays: [
        ads_wildcard_cds_then_named_eds_and_pushes_on_change,
        empty_type_url_on_ads_ends_the_stream_with_invalid_argument,
        unknown_type_url_on_ads_is_an_empty_type_and_the_stream_stays_up,
        a_different_node_mid_stream_ends_it_with_invalid_argument,
        per_type_services_serve_their_type_and_reject_others,
        shutdown_ends_open_streams,
        an_updated_eds_cluster_gets_its_unchanged_endpoints_again_to_finish_warming,
        streams_subscribed_to_the_same_names_each_keep_their_own_subscription_and_sends,
        changes_wait_for_the_answer_to_the_last_response_and_go_out_together,
    ],
}
