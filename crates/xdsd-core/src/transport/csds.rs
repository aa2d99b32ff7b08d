//! CSDS (`envoy.service.status.v3.ClientStatusDiscoveryService`): what each connected client was
//! sent and whether it ACKed or NACKed it, from the streams' records (see `clients`).
//!
//! One `ClientConfig` per client: streams of one node id (an Envoy on the per-type services has
//! one per type) are one client. Each type the client requested gives one `GenericXdsConfig` per
//! resource of the last response of that type (up to [`MAX_TRACKED_RESOURCES`]), or one with no
//! name when that response had none (or nothing was sent yet).

use std::sync::Arc;
use std::time::SystemTime;

use envoy_types::pb::envoy::admin::v3::{ClientResourceStatus, UpdateFailureState};
use envoy_types::pb::envoy::config::core::v3::node::UserAgentVersionType;
use envoy_types::pb::envoy::config::core::v3::{Locality, Node};
use envoy_types::pb::envoy::r#type::matcher::v3::string_matcher::MatchPattern;
use envoy_types::pb::envoy::r#type::matcher::v3::{NodeMatcher, StringMatcher};
use envoy_types::pb::envoy::service::status::v3::client_config::GenericXdsConfig;
use envoy_types::pb::envoy::service::status::v3::client_status_discovery_service_server::{
    ClientStatusDiscoveryService, ClientStatusDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::status::v3::{
    ClientConfig, ClientStatusRequest, ClientStatusResponse, ConfigStatus,
};
use envoy_types::pb::google::protobuf::{Any, Timestamp};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::MetadataValue;
use tonic::{Request, Response, Status, Streaming};

use super::clients::{ClientStatus, TypeStatus};
use super::context::ServerContext;
use crate::protocol::session::ClientNode;

#[cfg(doc)]
use super::clients::MAX_TRACKED_RESOURCES;

/// The response metadata of a `FetchClientStatus` answer that carries a gated rollout's state
/// (`GET /rollout`'s JSON, the canaries listed up to 100): CSDS has no field for it, and
/// `xdsd status` shows it. Only with a rollout.
pub const ROLLOUT_METADATA: &str = "xdsd-rollout-bin";

/// The response metadata of every `FetchClientStatus` answer that says what the server serves:
/// [`Served`] as JSON (its source revision, so that `xdsd status` and the status page show which
/// revision each replica serves). CSDS has no field for it.
pub const SERVED_METADATA: &str = "xdsd-served-bin";

/// What a server serves, as its CSDS answers carry it ([`SERVED_METADATA`]) and
/// [`crate::ServerHandle::served`] gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Served {
    /// The source revision (etcd's) of the state served to every client (a gated rollout's
    /// stable state): see [`crate::Store::source_revision`]. `None` for a source without
    /// revisions (a directory), or before the first load.
    pub revision: Option<i64>,
    /// With a gated rollout, the source revision of the candidate its canaries are served.
    pub candidate_revision: Option<i64>,
    /// The generation of the state served (this server's own count of commits: not comparable
    /// between servers).
    pub generation: u64,
    /// A digest of the state served (of each type's version, which is a hash of its content):
    /// the same on every server that serves the same resources, whatever their revisions.
    pub digest: String,
    /// This server process, as its answers name it (random at start): one replica reached at
    /// two addresses is told by it.
    pub server: String,
}

impl Served {
    /// It as JSON: `{"revision":42,"candidate_revision":null,"generation":7,"digest":"…",
    /// "server":"…"}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "revision": self.revision,
            "candidate_revision": self.candidate_revision,
            "generation": self.generation,
            "digest": self.digest,
            "server": self.server,
        })
    }

    /// Reads [`Served::to_json`]'s JSON (from another server's answer); `None` when it is not
    /// an object.
    pub fn from_json(json: &serde_json::Value) -> Option<Served> {
        json.as_object()?;
        let text = |key: &str| json[key].as_str().unwrap_or_default().to_owned();
        Some(Served {
            revision: json["revision"].as_i64(),
            candidate_revision: json["candidate_revision"].as_i64(),
            generation: json["generation"].as_u64().unwrap_or(0),
            digest: text("digest"),
            server: text("server"),
        })
    }
}

/// What the server of `ctx` serves; `rollout` is its picker's status JSON when already read.
pub(crate) fn served(ctx: &ServerContext, rollout: Option<&serde_json::Value>) -> Served {
    let read;
    let rollout = match (rollout, &ctx.picker) {
        (Some(json), _) => Some(json),
        (None, Some(picker)) => {
            read = picker.status_json();
            (!read.is_null()).then_some(&read)
        }
        (None, None) => None,
    };
    let snapshot = ctx.store.snapshot();
    let revision = rollout
        .and_then(|r| r["stable"]["revision"].as_i64())
        .or_else(|| ctx.store.source_revision());
    Served {
        revision,
        candidate_revision: rollout.and_then(|r| r["candidate"]["revision"].as_i64()),
        generation: snapshot.generation(),
        digest: state_digest(&snapshot),
        server: server_id().to_owned(),
    }
}

/// A digest of each non-empty type's URL and version, in URL order (16 hex digits).
fn state_digest(snapshot: &crate::store::Snapshot) -> String {
    use sha2::{Digest, Sha256};
    let mut types: Vec<(&str, &str)> = snapshot
        .types()
        .filter(|t| !t.is_empty())
        .map(|t| (&**t.type_url(), &**t.version()))
        .collect();
    types.sort_unstable();
    let mut hash = Sha256::new();
    for (type_url, version) in types {
        hash.update(type_url.as_bytes());
        hash.update([0]);
        hash.update(version.as_bytes());
        hash.update([b'\n']);
    }
    hash.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// This process, for [`Served::server`]: its id and start time, fixed at the first call.
fn server_id() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        format!("{:x}-{:x}", std::process::id(), nanos)
    })
}

/// The canaries the rollout metadata lists, at most (their count is `canaries_connected`).
const MAX_ROLLOUT_CANARIES: usize = 100;

/// The rollout's JSON with its list of canaries cut to [`MAX_ROLLOUT_CANARIES`]: a header is
/// bounded where a message is not.
fn rollout_metadata(mut status: serde_json::Value) -> serde_json::Value {
    if let Some(list) = status
        .get_mut("canaries")
        .and_then(serde_json::Value::as_array_mut)
    {
        list.truncate(MAX_ROLLOUT_CANARIES);
    }
    status
}

/// The largest CSDS request accepted: node matchers are short.
const MAX_CSDS_REQUEST_BYTES: usize = 64 * 1024;

/// The CSDS service of a server, to mount beside the discovery services.
pub(crate) fn service(ctx: Arc<ServerContext>) -> ClientStatusDiscoveryServiceServer<Csds> {
    ClientStatusDiscoveryServiceServer::new(Csds { ctx })
        .max_decoding_message_size(MAX_CSDS_REQUEST_BYTES)
}

pub(crate) struct Csds {
    ctx: Arc<ServerContext>,
}

#[tonic::async_trait]
impl ClientStatusDiscoveryService for Csds {
    type StreamClientStatusStream = ReceiverStream<Result<ClientStatusResponse, Status>>;

    async fn stream_client_status(
        &self,
        request: Request<Streaming<ClientStatusRequest>>,
    ) -> Result<Response<Self::StreamClientStatusStream>, Status> {
        let mut requests = request.into_inner();
        // One answer at a time: a client that stops reading holds one.
        let (tx, rx) = mpsc::channel(1);
        let ctx = self.ctx.clone();
        tokio::spawn(async move {
            let mut shutdown = ctx.shutdown.clone();
            loop {
                let request = tokio::select! {
                    _ = shutdown.wait_for(|down| *down) => break,
                    request = requests.message() => request,
                };
                let answer = match request {
                    Ok(Some(request)) => client_status(&ctx, &request),
                    // The client ended its requests, or the stream broke.
                    Ok(None) | Err(_) => break,
                };
                let last = answer.is_err();
                tokio::select! {
                    _ = shutdown.wait_for(|down| *down) => break,
                    sent = tx.send(answer) => if sent.is_err() || last { break },
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn fetch_client_status(
        &self,
        request: Request<ClientStatusRequest>,
    ) -> Result<Response<ClientStatusResponse>, Status> {
        let mut response = client_status(&self.ctx, request.get_ref()).map(Response::new)?;
        // A store picker without a rollout shows nothing (null).
        let rollout = (self.ctx.picker.as_ref())
            .map(|p| p.status_json())
            .filter(|json| !json.is_null());
        let served = served(&self.ctx, rollout.as_ref());
        response.metadata_mut().insert_bin(
            SERVED_METADATA,
            MetadataValue::from_bytes(served.to_json().to_string().as_bytes()),
        );
        if let Some(json) = rollout {
            let json = rollout_metadata(json);
            response.metadata_mut().insert_bin(
                ROLLOUT_METADATA,
                MetadataValue::from_bytes(json.to_string().as_bytes()),
            );
        }
        Ok(response)
    }
}

/// The answer to one CSDS request: the clients its node matchers select (all without any).
pub(crate) fn client_status(
    ctx: &ServerContext,
    request: &ClientStatusRequest,
) -> Result<ClientStatusResponse, Status> {
    for m in &request.node_matchers {
        check_matcher(m)?;
    }
    let mut clients: Vec<(ClientNode, Vec<ClientStatus>)> = Vec::new();
    for client in ctx.streams.clients() {
        let node = client.node.clone().unwrap_or_default();
        if !request.node_matchers.is_empty()
            && !request.node_matchers.iter().any(|m| node_matches(m, &node))
        {
            continue;
        }
        // Streams of one node id are one client; streams with no node yet are each their own.
        match clients
            .iter_mut()
            .find(|(n, _)| !n.id.is_empty() && n.id == node.id)
        {
            Some((_, streams)) => streams.push(client),
            None => clients.push((node, vec![client])),
        }
    }
    let config = clients
        .into_iter()
        .map(|(node, streams)| ClientConfig {
            node: Some(to_node(&node)),
            generic_xds_configs: streams
                .iter()
                .flat_map(|s| &s.types)
                .flat_map(|t| generic_configs(t, !request.exclude_resource_contents))
                .collect(),
            ..Default::default()
        })
        .collect();
    Ok(ClientStatusResponse { config })
}

/// Refuses what xdsd cannot match on.
fn check_matcher(m: &NodeMatcher) -> Result<(), Status> {
    if !m.node_metadatas.is_empty() {
        return Err(Status::invalid_argument(
            "node_metadatas matchers are not supported: match on node_id",
        ));
    }
    match m.node_id.as_ref().map(|s| &s.match_pattern) {
        None => Ok(()),
        Some(Some(
            MatchPattern::Exact(_)
            | MatchPattern::Prefix(_)
            | MatchPattern::Suffix(_)
            | MatchPattern::Contains(_),
        )) => Ok(()),
        Some(Some(MatchPattern::SafeRegex(_))) => Err(Status::invalid_argument(
            "node_id safe_regex matchers are not supported: use exact, prefix, suffix or contains",
        )),
        Some(Some(MatchPattern::Custom(_))) => Err(Status::invalid_argument(
            "node_id custom matchers are not supported: use exact, prefix, suffix or contains",
        )),
        Some(None) => Err(Status::invalid_argument(
            "a node_id matcher needs a pattern: exact, prefix, suffix or contains",
        )),
    }
}

fn node_matches(m: &NodeMatcher, node: &ClientNode) -> bool {
    m.node_id
        .as_ref()
        .is_none_or(|s| string_matches(s, &node.id))
}

fn string_matches(m: &StringMatcher, value: &str) -> bool {
    let fold = |s: &str| {
        if m.ignore_case {
            s.to_lowercase()
        } else {
            s.to_owned()
        }
    };
    let value = fold(value);
    match &m.match_pattern {
        Some(MatchPattern::Exact(p)) => value == fold(p),
        Some(MatchPattern::Prefix(p)) => value.starts_with(&fold(p)),
        Some(MatchPattern::Suffix(p)) => value.ends_with(&fold(p)),
        Some(MatchPattern::Contains(p)) => value.contains(&fold(p)),
        // Refused by `check_matcher`.
        _ => false,
    }
}

fn to_node(node: &ClientNode) -> Node {
    Node {
        id: node.id.clone(),
        cluster: node.cluster.clone(),
        user_agent_name: node.user_agent_name.clone(),
        user_agent_version_type: (!node.user_agent_version.is_empty())
            .then(|| UserAgentVersionType::UserAgentVersion(node.user_agent_version.clone())),
        client_features: node.client_features.clone(),
        locality: node
            .locality
            .as_ref()
            .map(|(region, zone, sub_zone)| Locality {
                region: region.clone(),
                zone: zone.clone(),
                sub_zone: sub_zone.clone(),
            }),
        ..Default::default()
    }
}

fn timestamp(at: SystemTime) -> Timestamp {
    let since = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    Timestamp {
        seconds: i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(since.subsec_nanos()).unwrap_or(0),
    }
}

/// The client's status with a type, as CSDS says it: NACKED, ACKED (or holding what it is owed
/// after a reconnection), else REQUESTED.
pub fn resource_status(t: &TypeStatus) -> ClientResourceStatus {
    if t.nacked {
        ClientResourceStatus::Nacked
    } else if t.last_ack.is_some() || (t.last_sent.is_none() && t.held.is_some()) {
        ClientResourceStatus::Acked
    } else {
        ClientResourceStatus::Requested
    }
}

/// The server's side of it.
fn config_status(t: &TypeStatus) -> ConfigStatus {
    if t.last_sent.is_none() && t.held.is_some() && !t.nacked {
        // A reconnecting client that holds what it is owed: nothing was (re)sent.
        ConfigStatus::Synced
    } else if t.last_sent.is_none() {
        ConfigStatus::NotSent
    } else if t.pending {
        ConfigStatus::Stale
    } else if t.nacked {
        ConfigStatus::Error
    } else {
        ConfigStatus::Synced
    }
}

/// A NACK's details as CSDS carries them: its message, with the files of the resources it is
/// traced to (`message [from a.yaml, b.yaml]`).
pub fn nack_details(message: &str, origins: &[Arc<str>]) -> String {
    if origins.is_empty() {
        return message.to_owned();
    }
    let files: Vec<&str> = origins.iter().map(|o| &**o).collect();
    format!("{message} [from {}]", files.join(", "))
}

fn generic_configs(t: &TypeStatus, contents: bool) -> Vec<GenericXdsConfig> {
    let acked_version = t
        .running_version()
        .map(|v| v.to_string())
        .unwrap_or_default();
    let error_state = t
        .last_nack
        .as_ref()
        .filter(|_| t.nacked)
        .map(|n| UpdateFailureState {
            last_update_attempt: Some(timestamp(n.at)),
            details: nack_details(&n.message, &n.origins),
            version_info: n.version.as_deref().unwrap_or("").to_owned(),
            ..Default::default()
        });
    let last_updated = t
        .last_ack
        .as_ref()
        .map(|a| a.at)
        .or(t.last_sent.as_ref().map(|s| s.at))
        .map(timestamp);
    let base = GenericXdsConfig {
        type_url: t.type_url.to_string(),
        version_info: acked_version,
        last_updated,
        config_status: config_status(t) as i32,
        client_status: resource_status(t) as i32,
        error_state,
        ..Default::default()
    };
    let Some(sent) = t.last_sent.as_ref().filter(|s| !s.resources.is_empty()) else {
        return vec![base];
    };
    sent.resources
        .iter()
        .map(|r| GenericXdsConfig {
            name: r.name().to_string(),
            xds_config: contents.then(|| Any {
                type_url: t.type_url.to_string(),
                value: r.value().to_vec(),
            }),
            ..base.clone()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matcher(pattern: MatchPattern, ignore_case: bool) -> StringMatcher {
        StringMatcher {
            match_pattern: Some(pattern),
            ignore_case,
        }
    }

    #[test]
    fn string_matchers_match_as_envoy_says() {
        let id = "Envoy-Front-1";
        assert!(string_matches(
            &matcher(MatchPattern::Exact(id.into()), false),
            id
        ));
        assert!(!string_matches(
            &matcher(MatchPattern::Exact("envoy-front-1".into()), false),
            id
        ));
        assert!(string_matches(
            &matcher(MatchPattern::Exact("envoy-front-1".into()), true),
            id
        ));
        assert!(string_matches(
            &matcher(MatchPattern::Prefix("Envoy-".into()), false),
            id
        ));
        assert!(string_matches(
            &matcher(MatchPattern::Suffix("-1".into()), false),
            id
        ));
        assert!(string_matches(
            &matcher(MatchPattern::Contains("Front".into()), false),
            id
        ));
        assert!(!string_matches(
            &matcher(MatchPattern::Contains("back".into()), true),
            id
        ));
    }

    fn reconnected(held: &str) -> TypeStatus {
        let mut t = TypeStatus::new(Arc::from(crate::types::CLUSTER));
        t.held = Some(super::super::clients::Held {
            version: Arc::from(held),
            resources: 0,
        });
        t
    }

    #[test]
    fn a_reconnecting_client_that_holds_what_it_is_owed_is_synced_at_the_version_it_holds() {
        let t = reconnected("v1");
        assert_eq!(config_status(&t), ConfigStatus::Synced);
        assert_eq!(resource_status(&t), ClientResourceStatus::Acked);
        let configs = generic_configs(&t, false);
        assert_eq!(configs[0].version_info, "v1");
        let fresh = TypeStatus::new(Arc::from(crate::types::CLUSTER));
        assert_eq!(config_status(&fresh), ConfigStatus::NotSent);
    }

    #[test]
    fn a_reconnecting_client_sent_newer_versions_is_stale_until_it_acks() {
        let mut t = reconnected("v1");
        t.last_sent = Some(super::super::clients::Sent {
            version: Arc::from("v2"),
            nonce: crate::protocol::Nonce::from(1),
            at: SystemTime::now(),
            resource_count: 0,
            removed: 0,
            resources: super::super::clients::SentResources::list(std::iter::empty()),
        });
        t.pending = true;
        assert_eq!(config_status(&t), ConfigStatus::Stale);
        assert_eq!(
            generic_configs(&t, false)[0].version_info,
            "v1",
            "it runs v1 until it ACKs"
        );
    }

    #[test]
    fn the_state_digest_is_the_same_for_the_same_resources_whatever_the_generation_or_order() {
        use crate::store::{ResourceInput, Store};
        let cluster = |name: &str| {
            let mut value = vec![0x0a, name.len() as u8];
            value.extend_from_slice(name.as_bytes());
            ResourceInput::new(crate::types::CLUSTER, name, bytes::Bytes::from(value))
        };
        let one = Store::new();
        one.replace_all([cluster("a"), cluster("b")])
            .expect("committed");
        let two = Store::new();
        two.replace_all([cluster("b")]).expect("committed");
        two.replace_all([cluster("b"), cluster("a")])
            .expect("committed");
        assert_ne!(one.snapshot().generation(), two.snapshot().generation());
        let (a, b) = (state_digest(&one.snapshot()), state_digest(&two.snapshot()));
        assert_eq!(a, b);
        assert_eq!(a.len(), 16);
        two.replace_all([cluster("b")]).expect("committed");
        assert_ne!(state_digest(&two.snapshot()), a);
        let served = Served {
            revision: Some(42),
            candidate_revision: None,
            generation: 3,
            digest: a,
            server: server_id().to_owned(),
        };
        assert_eq!(Served::from_json(&served.to_json()), Some(served));
        assert_eq!(Served::from_json(&serde_json::json!("x")), None);
    }

    #[test]
    fn regex_and_metadata_matchers_are_refused() {
        let regex = NodeMatcher {
            node_id: Some(matcher(MatchPattern::SafeRegex(Default::default()), false)),
            node_metadatas: vec![],
        };
        assert_eq!(
            check_matcher(&regex).map_err(|s| s.code()),
            Err(tonic::Code::InvalidArgument)
        );
        let metadata = NodeMatcher {
            node_id: None,
            node_metadatas: vec![Default::default()],
        };
        assert_eq!(
            check_matcher(&metadata).map_err(|s| s.code()),
            Err(tonic::Code::InvalidArgument)
        );
    }
}
