//! A minimal SotW ADS client on tonic for the tests: open a stream, send requests, receive
//! responses with a timeout, and decode the names of the resources received.

use std::time::Duration;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::protobuf::Any;
use prost::Message;
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

use super::{CLUSTER, DEADLINE, ENDPOINTS, LISTENER, ROUTE};

/// One open `StreamAggregatedResources` stream.
pub struct AdsStream {
    node: Node,
    requests: mpsc::Sender<DiscoveryRequest>,
    responses: Streaming<DiscoveryResponse>,
}

impl AdsStream {
    /// Connects to xdsd at `url` (`http://127.0.0.1:PORT`), opens an ADS stream for `node_id`
    /// and sends a first request for `type_url` with `names` (empty = wildcard). The request is
    /// queued before the call starts, so a server that waits for it before answering works too.
    pub async fn open(
        url: &str,
        node_id: &str,
        type_url: &str,
        names: &[&str],
    ) -> Result<AdsStream, String> {
        AdsStream::open_in(url, node_id, "xdsd-tests", type_url, names).await
    }

    /// [`AdsStream::open`] for a node of `cluster`.
    pub async fn open_in(
        url: &str,
        node_id: &str,
        cluster: &str,
        type_url: &str,
        names: &[&str],
    ) -> Result<AdsStream, String> {
        let (requests, rx) = mpsc::channel(16);
        let node = Node {
            id: node_id.to_string(),
            cluster: cluster.to_string(),
            user_agent_name: "xdsd-tests".to_string(),
            ..Default::default()
        };
        requests
            .send(request(&node, type_url, names, None))
            .await
            .map_err(|_| "cannot queue the first request".to_string())?;
        let mut client = timeout(
            DEADLINE,
            AggregatedDiscoveryServiceClient::connect(url.to_string()),
        )
        .await
        .map_err(|_| format!("connecting to {url} timed out"))?
        .map_err(|e| format!("cannot connect to {url}: {e}"))?;
        let responses = timeout(
            DEADLINE,
            client.stream_aggregated_resources(ReceiverStream::new(rx)),
        )
        .await
        .map_err(|_| "StreamAggregatedResources did not start in time".to_string())?
        .map_err(|status| format!("StreamAggregatedResources failed: {status}"))?
        .into_inner();
        Ok(AdsStream {
            node,
            requests,
            responses,
        })
    }

    /// Sends a request for `type_url` (empty `names` = wildcard). `ack` is the response being
    /// acknowledged (its version and nonce are echoed), if any.
    pub async fn request(
        &self,
        type_url: &str,
        names: &[&str],
        ack: Option<&DiscoveryResponse>,
    ) -> Result<(), String> {
        self.requests
            .send(request(&self.node, type_url, names, ack))
            .await
            .map_err(|_| "the ADS request stream is closed".to_string())
    }

    /// Rejects `nacked` (a NACK of `type_url`, wildcard) with `message`.
    pub async fn nack(
        &self,
        type_url: &str,
        nacked: &DiscoveryResponse,
        message: &str,
    ) -> Result<(), String> {
        let mut request = request(&self.node, type_url, &[], None);
        request.response_nonce = nacked.nonce.clone();
        request.error_detail = Some(envoy_types::pb::google::rpc::Status {
            code: 3,
            message: message.to_string(),
            ..Default::default()
        });
        self.requests
            .send(request)
            .await
            .map_err(|_| "the ADS request stream is closed".to_string())
    }

    /// Waits up to `within` for the next response.
    pub async fn recv_within(&mut self, within: Duration) -> Result<DiscoveryResponse, String> {
        match timeout(within, self.responses.message()).await {
            Ok(Ok(Some(resp))) => Ok(resp),
            Ok(Ok(None)) => Err("the server closed the ADS stream".to_string()),
            Ok(Err(status)) => Err(format!("ADS stream failed: {status}")),
            Err(_) => Err(format!("no response within {within:?}")),
        }
    }

    /// Waits up to [`DEADLINE`] for the next response.
    pub async fn recv(&mut self) -> Result<DiscoveryResponse, String> {
        self.recv_within(DEADLINE).await
    }
}

/// Opens a new ADS stream, requests `type_url` with `names` (empty = wildcard) and returns the
/// first response.
pub async fn fetch(
    url: &str,
    node_id: &str,
    type_url: &str,
    names: &[&str],
) -> Result<DiscoveryResponse, String> {
    AdsStream::open(url, node_id, type_url, names)
        .await?
        .recv()
        .await
}

/// A request for `type_url` from `node`, acknowledging `ack` if given.
pub fn request(
    node: &Node,
    type_url: &str,
    names: &[&str],
    ack: Option<&DiscoveryResponse>,
) -> DiscoveryRequest {
    DiscoveryRequest {
        node: Some(node.clone()),
        type_url: type_url.to_string(),
        resource_names: names.iter().map(|n| n.to_string()).collect(),
        version_info: ack.map(|r| r.version_info.clone()).unwrap_or_default(),
        response_nonce: ack.map(|r| r.nonce.clone()).unwrap_or_default(),
        ..Default::default()
    }
}

/// The name of one resource in a response (`cluster_name` for endpoints).
pub fn resource_name(any: &Any) -> Result<String, String> {
    let bad = |e: prost::DecodeError| format!("cannot decode {}: {e}", any.type_url);
    Ok(match any.type_url.as_str() {
        LISTENER => Listener::decode(any.value.as_slice()).map_err(bad)?.name,
        ROUTE => {
            RouteConfiguration::decode(any.value.as_slice())
                .map_err(bad)?
                .name
        }
        CLUSTER => Cluster::decode(any.value.as_slice()).map_err(bad)?.name,
        ENDPOINTS => {
            ClusterLoadAssignment::decode(any.value.as_slice())
                .map_err(bad)?
                .cluster_name
        }
        other => return Err(format!("unexpected resource type {other}")),
    })
}

/// The sorted names of the resources of a response; panics (test assertion) on undecodable ones.
pub fn names(resp: &DiscoveryResponse) -> Vec<String> {
    let mut names: Vec<String> = resp
        .resources
        .iter()
        .map(|any| resource_name(any).expect("a decodable resource"))
        .collect();
    names.sort();
    names
}

/// Decodes the clusters of a CDS response (test assertion on failure).
pub fn clusters(resp: &DiscoveryResponse) -> Vec<Cluster> {
    resp.resources
        .iter()
        .map(|any| {
            assert_eq!(any.type_url, CLUSTER, "resource type in a CDS response");
            Cluster::decode(any.value.as_slice()).expect("a decodable Cluster")
        })
        .collect()
}
