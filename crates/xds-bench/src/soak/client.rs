//! The soak's clients: ADS streams (SotW or delta) that subscribe like Envoy (wildcard CDS, EDS
//! for the clusters), ACK what they take, NACK a canary's poison, and keep what they hold across
//! reconnects (SotW's `version_info`, delta's `initial_resource_versions`), so that a failover
//! resends nothing. What they see goes to the checker as events.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::google::protobuf::{value::Kind as PbKind, Struct, Value as PbValue};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use xdsd_core::types::{CLUSTER, CLUSTER_LOAD_ASSIGNMENT};

use super::{Marker, MARKER_CLUSTER};

/// The node metadata key the canary selector reads (`--canary metadata.soak-cohort=canary`).
pub const COHORT_KEY: &str = "soak-cohort";

/// Where a client connects: directly to a replica, or through a relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Replica,
    Relay,
}

pub struct ClientSpec {
    /// Unique over the run.
    pub id: usize,
    pub node: String,
    /// Whether the replicas should treat it as a canary (NACKs the poison; may hold a candidate).
    pub canary: bool,
    /// Whether its node says it is one (`soak-cohort: canary`).
    pub canary_metadata: bool,
    pub delta: bool,
    pub via: Via,
    /// Process indexes (replica or relay), home first.
    pub targets: Vec<usize>,
    /// Their addresses, in the same order.
    pub addrs: Vec<String>,
    /// The EDS names it subscribes to.
    pub clusters: Vec<String>,
}

/// What the checker reads of a client while it runs.
pub struct ClientState {
    pub spec: ClientSpec,
    /// The marker it holds (0: nothing yet).
    pub marker: AtomicU32,
    /// Index into `targets` of the stream open now (usize::MAX: none).
    pub on: AtomicUsize,
    /// Leave (churn) when set.
    pub leave: AtomicBool,
    /// Close the stream and reconnect to the home target when set (a rebalance).
    pub go_home: AtomicBool,
    pub joined: Instant,
}

/// What a client reports.
#[derive(Debug)]
pub enum Event {
    /// A stream that had answered ended, not by the client's doing.
    Ended {
        client: usize,
        via: Via,
        target: usize,
        at: Instant,
        error: String,
    },
    /// A resource (delta) or a type's state (SotW) sent again at the version the client said it
    /// held when it reconnected.
    Resent {
        client: usize,
        via: Via,
        target: usize,
        at: Instant,
        what: String,
    },
    /// It was sent a marker in the range of the changes the replicas must refuse, or (not a
    /// canary) a canary's poison.
    Forbidden {
        client: usize,
        via: Via,
        target: usize,
        at: Instant,
        marker: u32,
    },
    /// Now holds this marker.
    Holds {
        client: usize,
        marker: u32,
        at: Instant,
    },
    /// A canary NACKed a poison marker.
    Nacked,
    /// It connected to a target (at the start, after a stream ended, or a rebalance).
    Connected { via: Via, target: usize },
}

/// What the client holds, kept across its streams.
#[derive(Default)]
struct Held {
    /// SotW: per type, the accepted `version_info`.
    sotw: HashMap<&'static str, String>,
    /// Delta: per type, each resource's version.
    delta: HashMap<&'static str, HashMap<String, String>>,
}

fn node(spec: &ClientSpec) -> Node {
    let cohort = if spec.canary_metadata {
        "canary"
    } else {
        "stable"
    };
    Node {
        id: spec.node.clone(),
        cluster: "soak".into(),
        metadata: Some(Struct {
            fields: [(
                COHORT_KEY.to_owned(),
                PbValue {
                    kind: Some(PbKind::StringValue(cohort.into())),
                },
            )]
            .into(),
        }),
        user_agent_name: "xds-bench-soak".into(),
        ..Default::default()
    }
}

/// The marker of the marker cluster's ClusterLoadAssignment (its overprovisioning factor).
fn marker_of(cla: &[u8]) -> Option<(String, u32)> {
    let cla = ClusterLoadAssignment::decode(cla).ok()?;
    let m = cla
        .policy
        .as_ref()
        .and_then(|p| p.overprovisioning_factor)
        .map(|v| v.value)
        .unwrap_or(0);
    Some((cla.cluster_name, m))
}

enum Outcome {
    /// The client left or rebalanced: not an end.
    Closed,
    /// The stream ended (after answering, if `answered`).
    Ended { answered: bool, error: String },
}

/// Runs a client until it is told to leave.
pub async fn run(state: Arc<ClientState>, events: mpsc::UnboundedSender<Event>) {
    let spec = &state.spec;
    let mut held = Held::default();
    let mut at = 0usize;
    let mut backoff = Duration::from_millis(100);
    while !state.leave.load(Ordering::Relaxed) {
        if state.go_home.swap(false, Ordering::Relaxed) {
            at = 0;
        }
        let addr = &spec.addrs[at];
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).map(|e| {
            e.connect_timeout(Duration::from_secs(2))
                .tcp_nodelay(true)
                .http2_keep_alive_interval(Duration::from_secs(10))
        });
        let channel = match channel {
            Ok(e) => e.connect().await,
            Err(e) => {
                eprintln!("[soak] client {}: bad address {addr}: {e}", spec.id);
                return;
            }
        };
        let channel = match channel {
            Ok(c) => c,
            Err(_) => {
                // Down (killed, restarting): the next target, after a pause.
                at = (at + 1) % spec.addrs.len();
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        let _ = events.send(Event::Connected {
            via: spec.via,
            target: spec.targets[at],
        });
        state.on.store(at, Ordering::Relaxed);
        let mut client =
            AggregatedDiscoveryServiceClient::new(channel).max_decoding_message_size(64 << 20);
        let outcome = if spec.delta {
            let flavor = Delta {
                node: node(spec),
                clusters: &spec.clusters,
                said: held.delta.clone(),
                held: &mut held.delta,
            };
            stream(&state, &mut client, flavor, at, &events).await
        } else {
            let flavor = Sotw {
                node: node(spec),
                clusters: &spec.clusters,
                said: held.sotw.clone(),
                held: &mut held.sotw,
            };
            stream(&state, &mut client, flavor, at, &events).await
        };
        state.on.store(usize::MAX, Ordering::Relaxed);
        match outcome {
            Outcome::Closed => backoff = Duration::from_millis(100),
            Outcome::Ended { answered, error } => {
                if answered {
                    let _ = events.send(Event::Ended {
                        client: spec.id,
                        via: spec.via,
                        target: spec.targets[at],
                        at: Instant::now(),
                        error,
                    });
                    backoff = Duration::from_millis(100);
                } else {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
                at = (at + 1) % spec.addrs.len();
            }
        }
    }
}

/// The poll interval for `leave` and `go_home`.
const POLL: Duration = Duration::from_millis(250);

fn told_to_close(state: &ClientState) -> bool {
    state.leave.load(Ordering::Relaxed) || state.go_home.load(Ordering::Relaxed)
}

/// Checks a marker: forbidden (reported), poison for a canary (to NACK), or fine.
fn judge(
    state: &ClientState,
    marker: u32,
    at: usize,
    events: &mpsc::UnboundedSender<Event>,
) -> bool {
    let spec = &state.spec;
    match Marker::of(marker) {
        Marker::Refused => {
            let _ = events.send(Event::Forbidden {
                client: spec.id,
                via: spec.via,
                target: spec.targets[at],
                at: Instant::now(),
                marker,
            });
            false
        }
        Marker::Poison if spec.canary => {
            let _ = events.send(Event::Nacked);
            true
        }
        Marker::Poison => {
            let _ = events.send(Event::Forbidden {
                client: spec.id,
                via: spec.via,
                target: spec.targets[at],
                at: Instant::now(),
                marker,
            });
            false
        }
        Marker::Good => false,
    }
}

fn holds(state: &ClientState, marker: u32, events: &mpsc::UnboundedSender<Event>) {
    if state.marker.swap(marker, Ordering::Relaxed) != marker {
        let _ = events.send(Event::Holds {
            client: state.spec.id,
            marker,
            at: Instant::now(),
        });
    }
}

/// What differs between SotW and delta on one stream: the requests, the call that opens it, the
/// resources a response carries and what the client keeps of it. The loop ([`stream`]) is one.
trait Flavor {
    type Request: Send + 'static;
    type Response: Send + 'static;

    /// The first requests of a stream: each type subscribed, saying what the client holds.
    fn subscribe(&self) -> Vec<Self::Request>;

    /// Opens the stream.
    fn open(
        client: &mut AggregatedDiscoveryServiceClient<tonic::transport::Channel>,
        requests: ReceiverStream<Self::Request>,
    ) -> impl std::future::Future<
        Output = Result<tonic::Response<tonic::Streaming<Self::Response>>, tonic::Status>,
    > + Send;

    fn type_url(response: &Self::Response) -> &str;

    /// What of `response` (of type `t`) was sent again at a version the client said it held
    /// when it subscribed on this stream, each said once.
    fn resent(&mut self, t: &'static str, response: &Self::Response) -> Vec<String>;

    /// The ClusterLoadAssignments' bytes `response` carries.
    fn bodies(response: &Self::Response) -> Vec<&[u8]>;

    /// The reply to `response`: an ACK, which keeps what it carries, or (`nack`) a NACK, which
    /// keeps what the client held and ends the resend checks.
    fn reply(&mut self, t: &'static str, response: Self::Response, nack: bool) -> Self::Request;
}

struct Sotw<'a> {
    node: Node,
    clusters: &'a [String],
    /// Per type, the accepted `version_info`, kept across streams.
    held: &'a mut HashMap<&'static str, String>,
    /// What it said it holds: a response at the same version is a resend.
    said: HashMap<&'static str, String>,
}

impl Sotw<'_> {
    fn request(
        &self,
        type_url: &'static str,
        version: String,
        nonce: String,
        error: Option<String>,
    ) -> DiscoveryRequest {
        DiscoveryRequest {
            node: Some(self.node.clone()),
            type_url: type_url.into(),
            version_info: version,
            response_nonce: nonce,
            resource_names: if type_url == CLUSTER {
                Vec::new()
            } else {
                self.clusters.to_vec()
            },
            error_detail: error.map(|m| RpcStatus {
                code: 3,
                message: m,
                details: Vec::new(),
            }),
            ..Default::default()
        }
    }
}

impl Flavor for Sotw<'_> {
    type Request = DiscoveryRequest;
    type Response = DiscoveryResponse;

    fn subscribe(&self) -> Vec<DiscoveryRequest> {
        [CLUSTER, CLUSTER_LOAD_ASSIGNMENT]
            .into_iter()
            .map(|t| {
                let v = self.held.get(t).cloned().unwrap_or_default();
                self.request(t, v, String::new(), None)
            })
            .collect()
    }

    fn open(
        client: &mut AggregatedDiscoveryServiceClient<tonic::transport::Channel>,
        requests: ReceiverStream<DiscoveryRequest>,
    ) -> impl std::future::Future<
        Output = Result<tonic::Response<tonic::Streaming<DiscoveryResponse>>, tonic::Status>,
    > + Send {
        client.stream_aggregated_resources(requests)
    }

    fn type_url(response: &DiscoveryResponse) -> &str {
        &response.type_url
    }

    fn resent(&mut self, t: &'static str, response: &DiscoveryResponse) -> Vec<String> {
        match self.said.remove(t) {
            Some(v) if !v.is_empty() && v == response.version_info => {
                vec![format!("{t} version {v} (SotW)")]
            }
            _ => Vec::new(),
        }
    }

    fn bodies(response: &DiscoveryResponse) -> Vec<&[u8]> {
        response.resources.iter().map(|r| &r.value[..]).collect()
    }

    fn reply(
        &mut self,
        t: &'static str,
        response: DiscoveryResponse,
        nack: bool,
    ) -> DiscoveryRequest {
        if nack {
            self.said.clear();
            let old = self.held.get(t).cloned().unwrap_or_default();
            self.request(
                t,
                old,
                response.nonce,
                Some("soak: a canary rejects the poison".into()),
            )
        } else {
            self.held.insert(t, response.version_info.clone());
            self.request(t, response.version_info, response.nonce, None)
        }
    }
}

struct Delta<'a> {
    node: Node,
    clusters: &'a [String],
    /// Per type, each resource's version, kept across streams.
    held: &'a mut HashMap<&'static str, HashMap<String, String>>,
    /// What it said it holds when it subscribed: checked for resends until it NACKs.
    said: HashMap<&'static str, HashMap<String, String>>,
}

impl Flavor for Delta<'_> {
    type Request = DeltaDiscoveryRequest;
    type Response = DeltaDiscoveryResponse;

    fn subscribe(&self) -> Vec<DeltaDiscoveryRequest> {
        [CLUSTER, CLUSTER_LOAD_ASSIGNMENT]
            .into_iter()
            .map(|t| DeltaDiscoveryRequest {
                node: Some(self.node.clone()),
                type_url: t.into(),
                resource_names_subscribe: if t == CLUSTER {
                    vec!["*".to_owned()]
                } else {
                    self.clusters.to_vec()
                },
                initial_resource_versions: self.held.get(t).cloned().unwrap_or_default(),
                ..Default::default()
            })
            .collect()
    }

    fn open(
        client: &mut AggregatedDiscoveryServiceClient<tonic::transport::Channel>,
        requests: ReceiverStream<DeltaDiscoveryRequest>,
    ) -> impl std::future::Future<
        Output = Result<tonic::Response<tonic::Streaming<DeltaDiscoveryResponse>>, tonic::Status>,
    > + Send {
        client.delta_aggregated_resources(requests)
    }

    fn type_url(response: &DeltaDiscoveryResponse) -> &str {
        &response.type_url
    }

    fn resent(&mut self, t: &'static str, response: &DeltaDiscoveryResponse) -> Vec<String> {
        let Some(said) = self.said.get_mut(t) else {
            return Vec::new();
        };
        response
            .resources
            .iter()
            .filter(|r| said.remove(&r.name).is_some_and(|v| v == r.version))
            .map(|r| format!("{t} {} version {} (delta)", r.name, r.version))
            .collect()
    }

    fn bodies(response: &DeltaDiscoveryResponse) -> Vec<&[u8]> {
        response
            .resources
            .iter()
            .filter_map(|r| r.resource.as_ref().map(|a| &a.value[..]))
            .collect()
    }

    fn reply(
        &mut self,
        t: &'static str,
        response: DeltaDiscoveryResponse,
        nack: bool,
    ) -> DeltaDiscoveryRequest {
        let error_detail = if nack {
            self.said.clear();
            Some(RpcStatus {
                code: 3,
                message: "soak: a canary rejects the poison".into(),
                details: Vec::new(),
            })
        } else {
            let versions = self.held.entry(t).or_default();
            for r in &response.resources {
                versions.insert(r.name.clone(), r.version.clone());
            }
            for n in &response.removed_resources {
                versions.remove(n);
            }
            None
        };
        DeltaDiscoveryRequest {
            node: Some(self.node.clone()),
            type_url: t.into(),
            response_nonce: response.nonce,
            error_detail,
            ..Default::default()
        }
    }
}

/// One stream of either flavor: subscribes, then ACKs (or, a canary's poison, NACKs) each
/// response, reporting resends, forbidden markers and the marker it holds, until it ends or the
/// client is told to close it.
async fn stream<F: Flavor>(
    state: &ClientState,
    client: &mut AggregatedDiscoveryServiceClient<tonic::transport::Channel>,
    mut flavor: F,
    at: usize,
    events: &mpsc::UnboundedSender<Event>,
) -> Outcome {
    let spec = &state.spec;
    let (tx, rx) = mpsc::channel::<F::Request>(16);
    for request in flavor.subscribe() {
        let _ = tx.try_send(request);
    }
    let mut stream = match F::open(client, ReceiverStream::new(rx)).await {
        Ok(s) => s.into_inner(),
        Err(e) => {
            return Outcome::Ended {
                answered: false,
                error: e.to_string(),
            }
        }
    };
    let mut answered = false;
    loop {
        let msg = tokio::select! {
            m = stream.message() => m,
            _ = tokio::time::sleep(POLL) => {
                if told_to_close(state) {
                    return Outcome::Closed;
                }
                continue;
            }
        };
        let resp = match msg {
            Ok(Some(r)) => r,
            Ok(None) => {
                return Outcome::Ended {
                    answered,
                    error: "the server ended the stream".into(),
                }
            }
            Err(e) => {
                return Outcome::Ended {
                    answered,
                    error: e.to_string(),
                }
            }
        };
        answered = true;
        let t: &'static str = match F::type_url(&resp) {
            u if u == CLUSTER => CLUSTER,
            u if u == CLUSTER_LOAD_ASSIGNMENT => CLUSTER_LOAD_ASSIGNMENT,
            _ => continue,
        };
        for what in flavor.resent(t, &resp) {
            let _ = events.send(Event::Resent {
                client: spec.id,
                via: spec.via,
                target: spec.targets[at],
                at: Instant::now(),
                what,
            });
        }
        let mut nack = false;
        let mut marker = None;
        if t == CLUSTER_LOAD_ASSIGNMENT {
            for (name, m) in F::bodies(&resp).into_iter().filter_map(marker_of) {
                if name == MARKER_CLUSTER {
                    nack |= judge(state, m, at, events);
                    marker = Some(m);
                }
            }
        }
        if !nack {
            if let Some(m) = marker {
                holds(state, m, events);
            }
        }
        if tx.send(flavor.reply(t, resp, nack)).await.is_err() {
            return Outcome::Ended {
                answered,
                error: "request channel closed".into(),
            };
        }
    }
}
