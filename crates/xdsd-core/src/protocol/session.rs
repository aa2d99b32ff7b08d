//! The per-client session: everything xdsd knows and owes one client on one stream, without I/O.
//!
//! Requests, store changes and time go in (`handle_request`, `handle_changes`,
//! `handle_timeout`); responses come out, one at a time in make-before-break order
//! (`poll_response`), and so does the next moment the session needs to be woken (`poll_timeout`).
//! The session never reads a clock: the transport passes `now` in. The session owns the client's node
//! (identity, metadata, features, dynamic parameters), resolves each request's type, turns its
//! names and resource locators into subscription keys with parameter sets (xRFC TP2), drives one
//! state machine per type, and resends what a client needs to finish warming a resource. The gRPC
//! stream driver is a loop around it; other transports drive the same session.
//!
//! Errors are [`SessionError`]s; each transport maps them to its own status in one place.

use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::ResourceLocator;
use prost::Message as _;

pub use super::error::{ErrorKind, SessionError};
use super::identity::IdentityBinding;
pub use super::machine::Machine;
pub(crate) use super::node::check_params;
pub use super::node::{
    ClientNode, FEATURE_RESOURCE_IN_SOTW, FEATURE_RESOURCE_IN_SOTW_ALT, FEATURE_RESOURCE_TTL,
    MAX_PARAMS, MAX_PARAM_LEN, MAX_TYPES, NODE_CLUSTER_PARAM,
};
use super::{Nonce, NonceGen, ParamSetId, RequestKind, Subscribe, SubscriptionChange, Views};
use crate::hash::{HashMap, HashSet};
use crate::params::ParamSet;
use crate::store::{Changes, Resource, Snapshot, TypeSnapshot};
use crate::types::{self, TypeMap};

/// The parameter key under which a client's verified certificate identity (mutual TLS) is
/// available to constraints: a resource with the constraint `xds.identity == <identity>` exists
/// only for clients that presented that identity. No client can set it: a value sent under this
/// key (node metadata, dynamic parameters, resource locators) is dropped.
pub const IDENTITY_PARAM: &str = "xds.identity";

/// Distinct parameter sets one session may use (a caching proxy uses one per client group).
pub const MAX_PARAM_SETS: usize = 64;
// A request's parameter sets are pinned a bit each (`Session::params_pinned`).
const _: () = assert!(MAX_PARAM_SETS <= 64);
/// Resource names one session may subscribe to, all types together, by default: twice an Envoy
/// with 100,000 EDS clusters (each subscribed by name to its endpoints). Each takes about 100
/// bytes of the session's memory.
pub const DEFAULT_MAX_NAMES: usize = 200_000;

/// A resource with a TTL is renewed every third of its TTL: two heartbeats may be lost or late
/// before the client drops it.
pub const HEARTBEATS_PER_TTL: u32 = 3;
/// Heartbeats of one type are never closer together than this, whatever the TTL.
pub const MIN_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(100);

/// How long make-before-break holds a route back for the cluster it points at, or a removal for
/// the ACK of what stopped referring to it. A client that never asks for the cluster's endpoints
/// (it rejected the cluster, or takes endpoints elsewhere) gets the route after this.
pub const HOLD_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a type's next response waits by default for the client's ACK or NACK of the last
/// one ([`SessionOptions::ack_wait`]).
pub const DEFAULT_ACK_WAIT: Duration = Duration::from_secs(5);

/// The largest response a session sends by default (1 MiB): gRPC clients refuse messages over
/// 4 MiB unless configured otherwise, and smaller parts start applying sooner.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 1024 * 1024;

/// How a session serves its client.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionOptions {
    /// Responses larger than this are split into parts where the protocol allows it (delta, and
    /// SotW types but the full-state ones: listeners, clusters, scoped routes); see [`DEFAULT_MAX_RESPONSE_BYTES`].
    pub max_response_bytes: usize,
    /// Make-before-break ordering on aggregated streams (on by default): routes wait for the
    /// clusters and endpoints they point at, removals for the ACK of what stopped referring to
    /// them.
    pub make_before_break: bool,
    /// Resource names the session may subscribe to, all types together (see
    /// [`DEFAULT_MAX_NAMES`]); more ends the stream with RESOURCE_EXHAUSTED.
    pub max_names: usize,
    /// One response in flight per type: a type's next response waits until the client ACKed
    /// or NACKed the last one, for at most this long (zero: it does not wait). What changes
    /// meanwhile goes out together in the next response: a client that applies configuration
    /// slower than it changes gets the latest state when it is ready for it, instead of every
    /// state in between queued in the connection (see [`DEFAULT_ACK_WAIT`]). The rest of a
    /// response that goes out in parts does not wait.
    pub ack_wait: Duration,
    /// xRFC TP2 "Client Configuration" (one parameter set per authority), for a relay that
    /// presents each authority's set of its own upstream (`xdsd relay --param-for`): a plain
    /// name `xdstp://AUTHORITY/...` (or glob collection) of an authority here is matched with
    /// that authority's set, in place of the parameters the client's node gives the type, as
    /// the relay fetches it. A resource locator keeps its own parameters; other names, the
    /// node's. Empty by default (and for `xdsd serve`).
    pub authority_params: Arc<std::collections::BTreeMap<String, ParamSet>>,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            make_before_break: true,
            max_names: DEFAULT_MAX_NAMES,
            ack_wait: DEFAULT_ACK_WAIT,
            authority_params: Arc::default(),
        }
    }
}

/// What one request did, for the transport to act on (watch registrations) and to log.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Handled {
    /// The request's type URL.
    pub type_url: Arc<str>,
    /// How it relates to the responses sent.
    pub kind: RequestKind,
    /// Names and wildcard to (un)watch in the store for this type.
    pub change: SubscriptionChange,
    /// This request identified the node (the first that carried one).
    pub identified: bool,
    /// The first request for a type the store has nothing of.
    pub unknown_type: bool,
    /// How many resources a reconnecting delta client says it holds.
    pub initial_versions: usize,
}

/// One machine per type, and what it was told about its client.
struct TypeState<M> {
    machine: M,
    /// The type's place in push order (`types::push_rank`), taken once: every response orders
    /// the pending types by it, and make-before-break tells the types it orders by it.
    rank: u8,
    /// The parameter set plain names of this type are subscribed with, as of the session's
    /// `node_epoch` recorded with it.
    default: ParamSetId,
    node_epoch: u32,
    named: bool,
    /// Resources sent with a TTL, by name, and when their TTLs are next renewed: one deadline per
    /// type, never a timer per resource.
    ttls: HashMap<Arc<str>, Duration>,
    next_heartbeat: Option<Instant>,
    /// The nonce of the latest response, until the client ACKs or NACKs it.
    unacked: Option<Nonce>,
    /// Since when the type's next response waits for the client's answer to the latest one
    /// ([`SessionOptions::ack_wait`]); `None` once it came, or after the wait.
    waiting_since: Option<Instant>,
    /// Since when make-before-break holds this type's response back.
    held_since: Option<Instant>,
    /// How many keys the machine has subscribed, as of the last request.
    keys: usize,
}

impl<M: Machine> TypeState<M> {
    /// Whether the type's next response waits for the client's answer to the last one (the
    /// rest of a response in parts does not wait).
    fn waits(&self) -> bool {
        self.waiting_since.is_some() && !self.machine.in_parts()
    }
}

impl<M> TypeState<M> {
    /// How often this type's TTLs are renewed: a fraction of the shortest.
    fn heartbeat_interval(&self) -> Option<Duration> {
        let shortest = self.ttls.values().min()?;
        Some((*shortest / HEARTBEATS_PER_TTL).max(MIN_HEARTBEAT_INTERVAL))
    }
}

/// A client's session on one stream. `M` is the per-type machine of its flavor (SotW or delta,
/// see [`Machine`]).
pub struct Session<M> {
    options: SessionOptions,
    /// The one type of a per-type service; `None` on ADS.
    fixed: Option<Arc<str>>,
    /// Shared with the stream's CSDS record.
    node: Option<Arc<ClientNode>>,
    /// Counts the nodes taken: a type's default parameter set is resolved again only when the
    /// node changed since (an ACK would otherwise hash the node's parameters every time).
    node_epoch: u32,
    /// The client's certificate identity, when its node must match it.
    binding: Option<IdentityBinding>,
    /// Secrets are refused: the client is on a plaintext connection from another host.
    refuse_secrets: bool,
    /// Digest of the node's encoding as last decoded (SotW), to decode it only when it changes.
    node_digest: Option<u64>,
    nonces: NonceGen,
    /// Boxed: a machine is several hundred bytes, and the list keeps room for more than it
    /// holds, per stream.
    types: TypeMap<Box<TypeState<M>>>,
    /// The parameter sets this session uses, by [`ParamSetId`].
    params: Vec<ParamSet>,
    /// The parameter set of each authority of [`SessionOptions::authority_params`] (made at the
    /// first request; never reclaimed).
    authority_pids: Vec<(Box<str>, ParamSetId)>,
    pids: HashMap<ParamSet, ParamSetId>,
    /// How many times a parameter set no machine used was reclaimed for another (its id given
    /// to the new set): the list changed without growing.
    params_reused: u64,
    /// The parameter sets the request being handled resolved (a bit per id): not reclaimed for
    /// another of its sets before its machine holds them.
    params_pinned: u64,
    /// Make-before-break on aggregated streams: for clusters and endpoints, the names the store
    /// may have removed since they were last served, the state last served, and removals held
    /// back.
    changed: TypeMap<HashSet<Arc<str>>>,
    served: TypeMap<Arc<TypeSnapshot>>,
    lingering: TypeMap<Lingering>,
    /// Something happened since `update_lingering` last ran that it must look at (a request, a
    /// change of clusters or endpoints): it runs at the next response only then, or while
    /// anything lingers or waits in `changed`.
    lingering_due: bool,
    /// A limit the stream broke outside a request (a glob collection's member added past
    /// `max_names`), for the transport to end the stream with ([`Session::take_breach`]).
    breach: Option<SessionError>,
}

impl<M: Machine> Session<M> {
    /// A session for an aggregated stream (`fixed` None) or a per-type service.
    pub fn new(fixed: Option<Arc<str>>) -> Session<M> {
        Session::with_options(fixed, SessionOptions::default())
    }

    /// A session with `options`; `fixed`: the type of a per-type service (`None`: ADS).
    pub fn with_options(fixed: Option<Arc<str>>, options: SessionOptions) -> Session<M> {
        Session {
            options,
            fixed,
            node: None,
            node_epoch: 0,
            binding: None,
            refuse_secrets: false,
            node_digest: None,
            nonces: NonceGen::default(),
            types: TypeMap::default(),
            // Parameter set 0: the empty set, until the node says otherwise.
            params: vec![ParamSet::new()],
            authority_pids: Vec::new(),
            pids: [(ParamSet::new(), 0)].into_iter().collect(),
            params_reused: 0,
            params_pinned: 0,
            changed: TypeMap::default(),
            served: TypeMap::default(),
            lingering: TypeMap::default(),
            lingering_due: false,
            breach: None,
        }
    }

    /// The client's node, once a request carried one.
    pub fn node(&self) -> Option<&ClientNode> {
        self.node.as_deref()
    }

    /// The type of its per-type service (what a request with an empty `type_url` is about);
    /// None on an aggregated stream.
    pub fn fixed_type(&self) -> Option<&Arc<str>> {
        self.fixed.as_ref()
    }

    /// The client's node as the session holds it, to be shared rather than copied.
    pub fn shared_node(&self) -> Option<&Arc<ClientNode>> {
        self.node.as_ref()
    }

    /// Binds the session to a client certificate's identity: the node of the first request that
    /// carries one must be one `binding` allows, and until then every request must carry a node.
    /// Else the request fails with [`SessionError::NodeNotAllowed`] or
    /// [`SessionError::NodeRequired`] (PERMISSION_DENIED).
    pub fn bind_identity(&mut self, binding: IdentityBinding) {
        // Every parameter set carries the identity from now on, parameter set 0 too (a session is
        // bound before its first request: nothing resolved names with it yet).
        let mut first = ParamSet::new();
        first.insert(IDENTITY_PARAM, &*binding.identity);
        if let Some(pid0) = self.params.first_mut() {
            self.pids.remove(pid0);
            *pid0 = first.clone();
            self.pids.insert(first, 0);
        }
        self.binding = Some(binding);
    }

    /// Refuses secrets: a request for the secret type (SDS) fails with
    /// [`SessionError::SecretsOverPlaintext`] (PERMISSION_DENIED). For a client whose connection
    /// would carry private keys in the clear across the network.
    pub fn refuse_secrets(&mut self) {
        self.refuse_secrets = true;
    }

    /// Every parameter set this session resolved or resolves names with, of every type (at most
    /// 64). The list grows, and at its limit a set no subscription uses any more is replaced by
    /// a new one: its length and [`Session::param_sets_reused`] together tell whether it changed.
    pub fn param_sets(&self) -> &[ParamSet] {
        &self.params
    }

    /// How many times a parameter set of [`Session::param_sets`] was replaced by another.
    pub fn param_sets_reused(&self) -> u64 {
        self.params_reused
    }

    /// The resource names this session is subscribed to, all types together.
    pub fn subscribed_names(&self) -> usize {
        self.types.values().map(|s| s.keys).sum()
    }

    /// The node id for logs ("" until a request carried one).
    pub fn node_id(&self) -> &str {
        self.node.as_ref().map(|n| n.id.as_str()).unwrap_or("")
    }

    /// Takes in a request. `snapshot` is the store's current state.
    pub(crate) fn handle_request(
        &mut self,
        request: &M::Request,
        snapshot: &Snapshot,
    ) -> Result<Handled, SessionError> {
        // What the client is subscribed to, and so what it is served, may change.
        self.lingering_due = true;
        self.params_pinned = 0;
        let identified = self.take_node(M::node(request))?;
        if let (Some(binding), None) = (&self.binding, &self.node) {
            return Err(SessionError::NodeRequired {
                identity: binding.identity.to_string(),
            });
        }
        // The type URL is matched as bytes (every ACK names it): its text is read, with its
        // UTF-8 check, only for a type the session does not have yet.
        let requested = M::request_type_url(request);
        let bytes = &requested.as_bytes()[..];
        let type_url: Arc<str> = match &self.fixed {
            Some(t) if bytes.is_empty() || bytes == t.as_bytes() => t.clone(),
            Some(t) => {
                return Err(SessionError::WrongType {
                    serves: t.to_string(),
                    requested: requested.to_string(),
                })
            }
            None if bytes.is_empty() => return Err(SessionError::MissingTypeUrl),
            None => match self.types.iter().find(|(t, _)| t.as_bytes() == bytes) {
                Some((t, _)) => t.clone(),
                None => snapshot.type_key(requested.as_str()),
            },
        };
        if self.refuse_secrets && *type_url == *types::SECRET {
            return Err(SessionError::SecretsOverPlaintext);
        }
        let current = snapshot.get(&type_url);
        let new_type = !self.types.contains_key(&type_url);
        if new_type && self.types.len() >= MAX_TYPES {
            return Err(SessionError::Limit {
                what: "type URLs",
                limit: MAX_TYPES,
            });
        }
        if self.authority_pids.len() != self.options.authority_params.len() {
            self.resolve_authorities()?;
        }
        let (subscribe_locators, unsubscribe_locators) = M::locators(request);
        let subscribe = self.locate(subscribe_locators)?;
        let unsubscribe = self.locate(unsubscribe_locators)?;
        let default = match self.types.get(&type_url) {
            Some(state) if state.node_epoch == self.node_epoch => state.default,
            _ => self.default_pid(&type_url)?,
        };
        let node_named = self
            .node
            .as_ref()
            .is_some_and(|n| !n.dynamic_parameters.is_empty());
        let max_response_bytes = self.options.max_response_bytes;
        let state = self.types.get_or_insert_with(&type_url, || {
            Box::new(TypeState {
                machine: {
                    let mut m = M::new(type_url.clone());
                    m.set_max_response_bytes(max_response_bytes);
                    m
                },
                rank: types::push_rank(&type_url),
                default,
                node_epoch: self.node_epoch,
                named: false,
                ttls: HashMap::default(),
                next_heartbeat: None,
                unacked: None,
                waiting_since: None,
                held_since: None,
                keys: 0,
            })
        });
        state.default = default;
        state.node_epoch = self.node_epoch;
        state
            .machine
            .set_ttl(self.node.as_deref().is_some_and(M::takes_ttl));
        // A client that subscribes with dynamic parameters gets every resource of the type named
        // by `resource_name`, with its constraints (TP2: constraints are never omitted).
        let named = state.named || node_named || !subscribe.is_empty() || !unsubscribe.is_empty();
        if named != state.named {
            state.named = named;
            state.machine.set_named(named);
        }
        let (kind, change) = state.machine.handle(
            request,
            &Subscribe {
                default,
                locators: &subscribe,
                authorities: &self.authority_pids,
            },
            &unsubscribe,
            current,
        );
        if let RequestKind::Ack { nonce } | RequestKind::Nack { nonce, .. } = &kind {
            if state.unacked.is_some_and(|n| n == *nonce) {
                state.unacked = None;
                state.waiting_since = None;
            }
        }
        state.keys = state.machine.key_count();
        let names = self.subscribed_names();
        if names > self.options.max_names {
            return Err(SessionError::Limit {
                what: "subscribed resource names",
                limit: self.options.max_names,
            });
        }
        Ok(Handled {
            type_url,
            kind,
            change,
            identified,
            unknown_type: new_type && current.is_none(),
            initial_versions: M::initial_versions(request),
        })
    }

    /// Records the node of a request (encoded, empty without one); later requests may omit it,
    /// but one that names a different node (id or cluster) is a client error. Its dynamic
    /// parameters may change.
    /// True when this request identified the node.
    fn take_node(&mut self, bytes: &[u8]) -> Result<bool, SessionError> {
        if bytes.is_empty() {
            return Ok(false);
        }
        let digest = foldhash::fast::FixedState::default().hash_one(bytes);
        if self.node_digest == Some(digest) {
            return Ok(false);
        }
        let node = Node::decode(bytes).map_err(|e| SessionError::BadNode(e.to_string()))?;
        self.node_digest = Some(digest);
        if node.id.is_empty() && node.cluster.is_empty() {
            return Ok(false);
        }
        let client = ClientNode::from_node(&node)?;
        match &self.node {
            None => {
                if let Some(binding) = &self.binding {
                    if !binding.allows(&client) {
                        // Decoded again if sent again: refused again.
                        self.node_digest = None;
                        return Err(SessionError::NodeNotAllowed {
                            identity: binding.identity.to_string(),
                            node: client.id,
                            cluster: client.cluster,
                        });
                    }
                }
                self.node = Some(Arc::new(client));
                self.node_epoch = self.node_epoch.wrapping_add(1);
                Ok(true)
            }
            Some(first) if first.id == client.id && first.cluster == client.cluster => {
                self.node = Some(Arc::new(client));
                self.node_epoch = self.node_epoch.wrapping_add(1);
                Ok(false)
            }
            Some(first) => Err(SessionError::NodeChanged {
                first: first.id.clone(),
                now: client.id,
            }),
        }
    }

    /// The parameter set plain names of `type_url` are subscribed with.
    fn default_pid(&mut self, type_url: &str) -> Result<ParamSetId, SessionError> {
        let params = match &self.node {
            Some(node) => node.params_for(type_url).clone(),
            None => ParamSet::new(),
        };
        self.pid(params)
    }

    fn pid(&mut self, mut params: ParamSet) -> Result<ParamSetId, SessionError> {
        // The verified identity, and never one a client claims.
        params.remove(IDENTITY_PARAM);
        if let Some(binding) = &self.binding {
            params.insert(IDENTITY_PARAM, &*binding.identity);
        }
        if let Some(pid) = self.pids.get(&params) {
            self.params_pinned |= 1 << *pid;
            return Ok(*pid);
        }
        if self.params.len() >= MAX_PARAM_SETS {
            // At the limit: a set no subscription uses any more (read only here) is reclaimed.
            let Some(pid) = self.unused_pid() else {
                return Err(SessionError::Limit {
                    what: "distinct dynamic parameter sets",
                    limit: MAX_PARAM_SETS,
                });
            };
            let old = std::mem::replace(&mut self.params[pid as usize], params.clone());
            self.pids.remove(&old);
            self.pids.insert(params, pid);
            self.params_reused += 1;
            self.params_pinned |= 1 << pid;
            return Ok(pid);
        }
        let pid = self.params.len() as ParamSetId;
        self.params_pinned |= 1 << pid;
        self.params.push(params.clone());
        self.pids.insert(params, pid);
        Ok(pid)
    }

    /// The parameter set of each authority with one of its own
    /// ([`SessionOptions::authority_params`]), once.
    fn resolve_authorities(&mut self) -> Result<(), SessionError> {
        let options = self.options.authority_params.clone();
        let mut pids = Vec::with_capacity(options.len());
        for (authority, params) in options.iter() {
            pids.push((Box::from(authority.as_str()), self.pid(params.clone())?));
        }
        self.authority_pids = pids;
        Ok(())
    }

    /// A parameter set (not set 0, the node's first) that no type uses: not its plain names'
    /// set, nor an authority's, and nothing its machine keeps is keyed by it.
    fn unused_pid(&self) -> Option<ParamSetId> {
        (1..self.params.len() as ParamSetId).find(|pid| {
            self.params_pinned & (1 << *pid) == 0
                && !self.authority_pids.iter().any(|(_, p)| p == pid)
                && !self
                    .types
                    .values()
                    .any(|t| t.default == *pid || t.machine.uses_param_set(*pid))
        })
    }

    /// Resource locators as (name, parameter set).
    fn locate(
        &mut self,
        locators: &[ResourceLocator],
    ) -> Result<Vec<(String, ParamSetId)>, SessionError> {
        // (Nearly every request names none: no fallible collect for nothing.)
        if locators.is_empty() {
            return Ok(Vec::new());
        }
        locators
            .iter()
            .map(|l| {
                let params: ParamSet = l
                    .dynamic_parameters
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                check_params(&format!("the resource locator {:?}", l.name), &params)?;
                Ok((l.name.clone(), self.pid(params)?))
            })
            .collect()
    }

    /// Records names the store changed.
    pub(crate) fn handle_changes(&mut self, changes: Changes) {
        // Nearly every request of a stream that waits for an ACK takes the changes held back
        // for it: none, most of the time.
        if changes.is_empty() {
            return;
        }
        let ordered = self.ordered();
        for type_url in changes.types() {
            let Some(state) = self.types.get_mut(type_url) else {
                continue;
            };
            if !state.machine.skips_changes(changes.count(type_url)) {
                state.machine.mark_changed(changes.names(type_url));
            }
            if ordered && referenced(state.rank) {
                // What the client is served of it changes.
                self.lingering_due = true;
                // Kept to find the removals that must wait (`update_lingering`).
                let mut gone = changes.maybe_removed(type_url).peekable();
                if gone.peek().is_some() {
                    self.changed
                        .get_or_insert_with(type_url, HashSet::default)
                        .extend(gone.cloned());
                }
            }
        }
    }

    /// The next moment the session has something to do (`handle_timeout`), if any.
    pub fn poll_timeout(&self) -> Option<Instant> {
        // One pass over the types (the stream driver asks at every turn of its loop).
        let mut next: Option<Instant> = None;
        let mut at = |t: Instant| {
            if next.is_none_or(|n| t < n) {
                next = Some(t);
            }
        };
        for s in self.types.values() {
            if let Some(due) = s.next_heartbeat {
                at(due);
            }
            if let Some(since) = s.held_since {
                at(since + HOLD_TIMEOUT);
            }
            if let Some(since) = s.waiting_since {
                at(since + self.options.ack_wait);
            }
        }
        for l in self.lingering.values() {
            at(l.since + HOLD_TIMEOUT);
        }
        next
    }

    /// Takes in the time: renews the TTLs due by `now` (heartbeats, spec "TTL"). Every resource
    /// with a TTL of a type is renewed in the same response.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        let wait = self.options.ack_wait;
        for state in self.types.values_mut() {
            if state.waiting_since.is_some_and(|since| since + wait <= now) {
                // The client did not answer in time: the next response goes without it.
                state.waiting_since = None;
            }
            if state.next_heartbeat.is_none_or(|due| due > now) {
                continue;
            }
            for name in state.ttls.keys() {
                state.machine.heartbeat(name);
            }
            state.next_heartbeat = state.heartbeat_interval().map(|i| now + i);
        }
    }

    /// The types whose next response waits for the client's answer to the last one
    /// ([`SessionOptions::ack_wait`]): nothing of them goes out before a request or a timeout.
    pub fn waiting_types(&self) -> impl Iterator<Item = &Arc<str>> + Clone {
        self.types.iter().filter(|(_, s)| s.waits()).map(|(t, _)| t)
    }

    /// Whether `poll_response` may have something to send.
    pub fn has_pending(&self) -> bool {
        !self.lingering.is_empty() || self.types.values().any(|s| s.machine.has_pending())
    }

    /// The next response owed, types in make-before-break order (what a resource refers to goes
    /// out before it), given the store's state `snapshot`, at `now`.
    pub fn poll_response(
        &mut self,
        snapshot: &Snapshot,
        now: Instant,
    ) -> Option<(Arc<str>, M::Response)> {
        let ads = self.ordered();
        if ads && (self.lingering_due || !self.changed.is_empty() || !self.lingering.is_empty()) {
            self.update_lingering(snapshot, now);
        }
        // The pending types in push order, the next one found after the last each time (a
        // stream has a few types; no list is made for every response).
        let mut last: Option<(u8, Arc<str>)> = None;
        loop {
            let after = last.as_ref().map(|(rank, t)| (*rank, t));
            let (rank, type_url) = self
                .types
                .iter()
                .filter(|(_, s)| s.machine.has_pending() && !s.waits())
                .map(|(t, s)| (s.rank, t))
                .filter(|k| after.is_none_or(|a| *k > a))
                .min()?;
            let type_url = type_url.clone();
            last = Some((rank, type_url.clone()));
            let views = Views::new(
                &type_url,
                self.type_snapshot(&type_url, snapshot).as_ref(),
                self.params.iter(),
            )
            .with_pending(snapshot, &self.params);
            if ads && refers(rank) && self.hold(&type_url, &views, snapshot, now) {
                continue;
            }
            let Some(state) = self.types.get_mut(&type_url) else {
                continue;
            };
            let Some(response) = state.machine.poll_response(&views, &mut self.nonces) else {
                continue;
            };
            if state.machine.ttl() {
                track_ttls(state, &M::with_ttl(&response), now);
            }
            state.unacked = Some(M::describe(&response).3);
            state.waiting_since = (!self.options.ack_wait.is_zero()).then_some(now);
            state.held_since = None;
            // A changed resource may need others sent again for the client to finish warming it
            // (an updated EDS cluster needs its endpoints): they come later in push order.
            // Looked up once per run of one type (a response of 10,000 clusters names 10,000
            // endpoints: one lookup, not 10,000).
            let mut dep: Option<(&Arc<str>, Option<&mut TypeState<M>>)> = None;
            for (dep_type, dep_name) in M::updated(&response).iter().flat_map(|r| r.dependents()) {
                if dep
                    .as_ref()
                    .is_none_or(|(t, _)| !Arc::ptr_eq(t, dep_type) && t != &dep_type)
                {
                    dep = Some((dep_type, self.types.get_mut(dep_type).map(|s| &mut **s)));
                }
                if let Some((_, Some(state))) = dep.as_mut() {
                    state.machine.resend(dep_name);
                }
            }
            // A glob collection's members may have grown past the names budget: the response
            // that would carry them is not sent, and the stream ends ([`Session::take_breach`]).
            if let Some(state) = self.types.get_mut(&type_url) {
                let keys = state.machine.key_count();
                let grew = keys > state.keys;
                state.keys = keys;
                if grew && self.subscribed_names() > self.options.max_names {
                    self.breach = Some(SessionError::Limit {
                        what: "subscribed resource names",
                        limit: self.options.max_names,
                    });
                    return None;
                }
            }
            return Some((type_url, response));
        }
    }

    /// The limit the stream broke outside a request, if any: the transport ends the stream
    /// with it (a client error, as when a request breaks it).
    pub fn take_breach(&mut self) -> Option<SessionError> {
        self.breach.take()
    }
}

/// Records the TTLs a response sent, and schedules their renewal. A resource sent under the
/// client's non-canonical spelling of an xdstp name is renewed by its canonical name, the one the
/// machine subscribed it by (and sends again under the client's spelling).
fn track_ttls<M>(state: &mut TypeState<M>, sent: &[Arc<Resource>], now: Instant) {
    for resource in sent {
        let name = crate::xdstp::canonical(resource.name());
        let name = name.as_ref().unwrap_or(resource.name());
        match resource.ttl() {
            Some(ttl) => state.ttls.insert(name.clone(), ttl),
            None => state.ttls.remove(name),
        };
    }
    let Some(interval) = state.heartbeat_interval() else {
        state.next_heartbeat = None;
        return;
    };
    let due = now + interval;
    if state.next_heartbeat.is_none_or(|d| d > due) {
        state.next_heartbeat = Some(due);
    }
}

mod make_before_break;
#[cfg(test)]
mod tests;

use make_before_break::{referenced, refers, Lingering};
