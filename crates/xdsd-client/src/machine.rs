//! The client, sans-I/O: subscriptions in, requests out; responses and time in, events out.
//!
//! The machine owns no socket, task or clock. Its driver (`crate::driver`, or a test) tells it
//! when the stream is up ([`Client::connected`]) or down ([`Client::disconnected`]), hands it each
//! response ([`Client::handle_sotw`], [`Client::handle_delta`]) and the time
//! ([`Client::handle_timeout`] at [`Client::poll_timeout`]), sends what
//! [`Client::poll_request`] returns and reads what [`Client::poll_event`] returns.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
    DynamicParameterConstraints, Resource as WireResource, ResourceLocator, ResourceName,
};
use envoy_types::pb::google::protobuf::Any;
use envoy_types::pb::google::rpc::Status;
use prost::Message;

use crate::constraints::{matches, Params};
use crate::types;

/// Type URL of `envoy.service.discovery.v3.Resource`, the wrapper a SotW response uses for a
/// resource that carries more than its body (a TTL, TP2 constraints), or for a heartbeat.
pub const RESOURCE_WRAPPER: &str = "type.googleapis.com/envoy.service.discovery.v3.Resource";

/// The client feature that tells a server the client takes per-resource TTLs.
pub const FEATURE_RESOURCE_TTL: &str = "xds.config.supports-resource-ttl";

/// The client feature that tells a server the client takes `Resource` wrappers in SotW.
pub const FEATURE_RESOURCE_IN_SOTW: &str = "xds.config.resource-in-sotw";

/// How long a subscribed name may go unanswered before it is reported as not existing (the
/// spec's recommended 15 seconds).
pub const DEFAULT_DOES_NOT_EXIST_TIMEOUT: Duration = Duration::from_secs(15);

/// The subscription name that stands for every resource of a type (explicit wildcard).
pub const WILDCARD: &str = "*";

/// Which variant of the protocol the client speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Flavor {
    /// State of the World: each response is the state of the names it carries.
    #[default]
    Sotw,
    /// Incremental: responses carry changes and removals.
    Delta,
}

/// What a server can make the client hold, at most. A response that would take the client past
/// a bound is NACKed with the bound in its message and not applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Type URLs subscribed at once.
    pub max_types: usize,
    /// Names (resources held, or subscriptions) per type.
    pub max_names: usize,
    /// Bytes of resource bodies held, all types together.
    pub max_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_types: 256,
            max_names: 1_000_000,
            max_bytes: 1 << 30,
        }
    }
}

/// How the client is set up.
#[derive(Debug, Clone)]
pub struct Config {
    /// The node sent on the first request of each stream. Its `dynamic_parameters` (per type
    /// URL) are the TP2 parameters of plain subscriptions. The TTL and SotW `Resource` features
    /// are added to its `client_features` when missing.
    pub node: Node,
    /// SotW or delta.
    pub flavor: Flavor,
    /// Every type on one aggregated stream (ADS), or one stream per type.
    pub ads: bool,
    /// How long a subscribed name may go unanswered before it is reported as not existing.
    pub does_not_exist_timeout: Duration,
    /// What a server can make the client hold.
    pub limits: Limits,
}

impl Config {
    /// A SotW ADS client as `node`, with the default timeout and limits.
    pub fn new(node: Node) -> Config {
        Config {
            node,
            flavor: Flavor::Sotw,
            ads: true,
            does_not_exist_timeout: DEFAULT_DOES_NOT_EXIST_TIMEOUT,
            limits: Limits::default(),
        }
    }
}

/// One resource as received.
#[derive(Debug, Clone, PartialEq)]
pub struct Resource {
    /// Its type URL.
    pub type_url: String,
    /// Its name.
    pub name: String,
    /// Its version: the resource's own (delta, or a SotW `Resource` wrapper), else the
    /// response's.
    pub version: String,
    /// Its body, as sent (an `Any` of `type_url`).
    pub body: Any,
    /// For a variant (xRFC TP2), its dynamic parameter constraints.
    pub constraints: Option<DynamicParameterConstraints>,
    /// How long it may be kept without hearing from the server, when the server set a TTL.
    pub ttl: Option<Duration>,
}

impl Resource {
    /// Whether this variant is the one for `params`: unconstrained, or its constraints match.
    pub fn matches(&self, params: &Params) -> bool {
        self.constraints.as_ref().is_none_or(|c| matches(c, params))
    }
}

/// Resources of one type that a response added or changed.
#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    /// The type.
    pub type_url: String,
    /// The response's version (SotW `version_info`, delta `system_version_info`).
    pub version: String,
    /// Resources the client did not hold.
    pub added: Vec<Resource>,
    /// Resources the client held with another body or version.
    pub changed: Vec<Resource>,
}

/// What the client tells its user.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The stream is up: requests go out.
    Connected,
    /// The stream is down, and why. What the client holds is kept.
    Disconnected {
        /// Why it ended.
        reason: String,
    },
    /// A response added or changed resources; the first response accepted for a type is
    /// reported even when it holds nothing (the type's state is then known).
    Update(Update),
    /// Resources the client held are gone: removed by the server, left out of a full-state SotW
    /// response, or expired (their TTL passed without a word from the server).
    Removed {
        /// The type.
        type_url: String,
        /// The version of the response that removed them; for expired ones, the type's last
        /// accepted version.
        version: String,
        /// The names (a name stands for each of its variants removed).
        names: Vec<String>,
        /// Whether they expired rather than were removed by the server.
        expired: bool,
    },
    /// A name subscribed to does not exist: the server said so (delta `removed_resources`, a
    /// full-state SotW response without it) or did not send it within the timeout.
    DoesNotExist {
        /// The type.
        type_url: String,
        /// The name.
        name: String,
    },
    /// A response was rejected (NACKed): the resources held before it are kept.
    Rejected {
        /// The type.
        type_url: String,
        /// The response's version.
        version: String,
        /// The reason sent to the server.
        reason: String,
    },
}

/// A request for the driver to send: on the aggregated stream, or on the stream of its type.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// A SotW request.
    Sotw(DiscoveryRequest),
    /// A delta request.
    Delta(DeltaDiscoveryRequest),
}

impl Request {
    /// The type it is about.
    pub fn type_url(&self) -> &str {
        match self {
            Request::Sotw(r) => &r.type_url,
            Request::Delta(r) => &r.type_url,
        }
    }
}

/// Why a subscription was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubscribeError {
    /// A bound of [`Limits`] would be passed.
    #[error("{what}: at most {limit}")]
    Limit {
        /// What would pass its bound.
        what: &'static str,
        /// The bound.
        limit: usize,
    },
}

/// A validation callback: `Err(reason)` NACKs the response that carries the resource.
pub type Validator = Box<dyn FnMut(&Resource) -> Result<(), String> + Send>;

/// A subscription: a name, with the dynamic parameters of its resource locator (none for a
/// plain name).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// The name.
    pub name: String,
    /// The locator's dynamic parameters; empty for a plain name.
    pub params: Params,
}

impl Key {
    fn plain(name: &str) -> Key {
        Key {
            name: name.to_owned(),
            params: Params::new(),
        }
    }

    fn locator(&self) -> ResourceLocator {
        ResourceLocator {
            name: self.name.clone(),
            dynamic_parameters: self.params.clone().into_iter().collect(),
        }
    }
}

/// The wildcard subscription of a type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wildcard {
    Off,
    /// Subscribed by naming nothing (the legacy form).
    Legacy,
    /// Subscribed as `*`.
    Explicit,
}

/// What is known of one subscribed name.
#[derive(Debug, Clone, Default)]
struct Sub {
    /// When it is reported as not existing unless received.
    deadline: Option<Instant>,
    /// Reported as not existing since last received.
    missing: bool,
    /// On this stream, how many responses of its type had arrived when a request first asked
    /// for it; `Some(None)`: it was in the stream's first request, which every response follows.
    asked_at: Option<Option<u64>>,
}

/// A held resource: its key is the name and its encoded constraints.
#[derive(Debug, Clone)]
struct Held {
    resource: Resource,
    expires: Option<Instant>,
    bytes: usize,
}

type HeldKey = (String, Vec<u8>);

#[derive(Default)]
struct TypeState {
    wildcard: Option<Wildcard>,
    subs: BTreeMap<Key, Sub>,
    held: BTreeMap<HeldKey, Held>,
    /// The last accepted version.
    version: String,
    /// The nonce of the last response on this stream.
    nonce: String,
    /// The reason to NACK with in the next request.
    nack: Option<String>,
    /// A request is owed.
    owed: bool,
    /// The next request is the stream's first for this type.
    initial: bool,
    /// Delta: subscriptions added and removed since the last request.
    added: BTreeSet<Key>,
    removed: BTreeSet<Key>,
    /// Delta: the wildcard changed since the last request.
    wildcard_changed: bool,
    /// A response was accepted (the first is reported even when it holds nothing).
    answered: bool,
    /// Responses received on this stream.
    responses: u64,
}

impl TypeState {
    fn wildcard(&self) -> Wildcard {
        self.wildcard.unwrap_or(Wildcard::Off)
    }

    fn interested(&self) -> bool {
        self.wildcard() != Wildcard::Off || !self.subs.is_empty()
    }

    /// Whether a received resource is one the client asked for.
    fn wants(&self, name: &str, constraints: Option<&DynamicParameterConstraints>) -> bool {
        if self.wildcard() != Wildcard::Off {
            return true;
        }
        self.subs_of(name)
            .any(|key| key.params.is_empty() || constraints.is_none_or(|c| matches(c, &key.params)))
    }

    fn subs_of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Key> + 'a {
        self.subs
            .range(Key::plain(name)..)
            .map(|(k, _)| k)
            .take_while(move |k| k.name == name)
    }

    fn held_names(&self) -> BTreeSet<&str> {
        self.held.keys().map(|(n, _)| n.as_str()).collect()
    }

    fn holds(&self, name: &str) -> bool {
        self.held
            .range((name.to_owned(), Vec::new())..)
            .next()
            .is_some_and(|((n, _), _)| n == name)
    }

    fn bytes(&self) -> usize {
        self.held.values().map(|h| h.bytes).sum()
    }
}

/// The xDS client state machine. See the module documentation.
pub struct Client {
    config: Config,
    types: BTreeMap<String, TypeState>,
    validator: Option<Validator>,
    connected: bool,
    /// Streams that have sent the node since the connection: "" for ADS, else the type URL.
    node_sent: BTreeSet<String>,
    requests: VecDeque<Request>,
    events: VecDeque<Event>,
    /// Bytes of resource bodies held, all types.
    bytes: usize,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("flavor", &self.config.flavor)
            .field("ads", &self.config.ads)
            .field("connected", &self.connected)
            .field("types", &self.types.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Client {
    /// A client set up by `config`, not connected, subscribed to nothing.
    pub fn new(mut config: Config) -> Client {
        for feature in [FEATURE_RESOURCE_TTL, FEATURE_RESOURCE_IN_SOTW] {
            if !config.node.client_features.iter().any(|f| f == feature) {
                config.node.client_features.push(feature.to_owned());
            }
        }
        Client {
            config,
            types: BTreeMap::new(),
            validator: None,
            connected: false,
            node_sent: BTreeSet::new(),
            requests: VecDeque::new(),
            events: VecDeque::new(),
            bytes: 0,
        }
    }

    /// Checks each received resource with `validator`: a resource it refuses NACKs its response
    /// with the reason, and the client keeps what it held before.
    pub fn set_validator(&mut self, validator: Validator) {
        self.validator = Some(validator);
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Whether the stream is up.
    pub fn is_connected(&self) -> bool {
        self.connected
    }

    fn state(&mut self, type_url: &str) -> Result<&mut TypeState, SubscribeError> {
        if !self.types.contains_key(type_url) {
            if self.types.len() >= self.config.limits.max_types {
                return Err(SubscribeError::Limit {
                    what: "type URLs subscribed",
                    limit: self.config.limits.max_types,
                });
            }
            self.types.insert(
                type_url.to_owned(),
                TypeState {
                    initial: true,
                    ..TypeState::default()
                },
            );
        }
        Ok(self.types.get_mut(type_url).expect("inserted above"))
    }

    /// Subscribes to `names` of `type_url` (plain names; `*` is the explicit wildcard).
    pub fn subscribe<S: AsRef<str>>(
        &mut self,
        type_url: &str,
        names: impl IntoIterator<Item = S>,
    ) -> Result<(), SubscribeError> {
        for name in names {
            let name = name.as_ref();
            if name == WILDCARD {
                self.subscribe_wildcard(type_url)?;
            } else {
                self.subscribe_key(type_url, Key::plain(name))?;
            }
        }
        Ok(())
    }

    /// Subscribes to `name` with dynamic parameters (a TP2 resource locator).
    pub fn subscribe_locator(
        &mut self,
        type_url: &str,
        name: &str,
        params: Params,
    ) -> Result<(), SubscribeError> {
        self.subscribe_key(
            type_url,
            Key {
                name: name.to_owned(),
                params,
            },
        )
    }

    fn subscribe_key(&mut self, type_url: &str, key: Key) -> Result<(), SubscribeError> {
        let max = self.config.limits.max_names;
        let state = self.state(type_url)?;
        if state.subs.contains_key(&key) {
            return Ok(());
        }
        if state.subs.len() >= max {
            return Err(SubscribeError::Limit {
                what: "names subscribed per type",
                limit: max,
            });
        }
        state.subs.insert(key.clone(), Sub::default());
        state.removed.remove(&key);
        state.added.insert(key);
        state.owed = true;
        Ok(())
    }

    /// Subscribes to every resource of `type_url` with the explicit wildcard `*`.
    pub fn subscribe_wildcard(&mut self, type_url: &str) -> Result<(), SubscribeError> {
        let state = self.state(type_url)?;
        if state.wildcard() != Wildcard::Explicit {
            state.wildcard = Some(Wildcard::Explicit);
            state.wildcard_changed = true;
            state.owed = true;
        }
        Ok(())
    }

    /// Subscribes to every resource of `type_url` the legacy way: by naming nothing. Once a
    /// name is subscribed as well, the wildcard is sent as `*`.
    pub fn subscribe_legacy_wildcard(&mut self, type_url: &str) -> Result<(), SubscribeError> {
        let state = self.state(type_url)?;
        if state.wildcard() == Wildcard::Off {
            state.wildcard = Some(Wildcard::Legacy);
            state.wildcard_changed = true;
            state.owed = true;
        }
        Ok(())
    }

    /// Ends the subscription to `name` of `type_url` (plain, or `*` for the wildcard); what is
    /// held of it and no longer wanted is dropped.
    pub fn unsubscribe(&mut self, type_url: &str, name: &str) {
        if name == WILDCARD {
            self.unsubscribe_wildcard(type_url);
        } else {
            self.unsubscribe_key(type_url, Key::plain(name));
        }
    }

    /// Ends the subscription to a resource locator.
    pub fn unsubscribe_locator(&mut self, type_url: &str, name: &str, params: Params) {
        self.unsubscribe_key(
            type_url,
            Key {
                name: name.to_owned(),
                params,
            },
        );
    }

    fn unsubscribe_key(&mut self, type_url: &str, key: Key) {
        let Some(state) = self.types.get_mut(type_url) else {
            return;
        };
        if state.subs.remove(&key).is_none() {
            return;
        }
        state.added.remove(&key);
        state.removed.insert(key);
        state.owed = true;
        self.drop_unwanted(type_url);
    }

    /// Ends the wildcard subscription of `type_url`.
    pub fn unsubscribe_wildcard(&mut self, type_url: &str) {
        let Some(state) = self.types.get_mut(type_url) else {
            return;
        };
        if state.wildcard() == Wildcard::Off {
            return;
        }
        state.wildcard = Some(Wildcard::Off);
        state.wildcard_changed = true;
        state.owed = true;
        self.drop_unwanted(type_url);
    }

    fn drop_unwanted(&mut self, type_url: &str) {
        let Some(state) = self.types.get_mut(type_url) else {
            return;
        };
        let unwanted: Vec<HeldKey> = state
            .held
            .iter()
            .filter(|(_, h)| !state.wants(&h.resource.name, h.resource.constraints.as_ref()))
            .map(|(k, _)| k.clone())
            .collect();
        for key in unwanted {
            if let Some(h) = state.held.remove(&key) {
                self.bytes -= h.bytes;
            }
        }
    }

    /// The resources of `type_url` held, in name order (variants of a name together).
    pub fn resources(&self, type_url: &str) -> impl Iterator<Item = &Resource> + '_ {
        self.types
            .get(type_url)
            .into_iter()
            .flat_map(|s| s.held.values().map(|h| &h.resource))
    }

    /// The variant of `name` of `type_url` held for `params` (TP2 variants are matched by their
    /// constraints; a resource without constraints is every client's).
    pub fn resource(&self, type_url: &str, name: &str, params: &Params) -> Option<&Resource> {
        self.resources(type_url)
            .filter(|r| r.name == name)
            .find(|r| r.matches(params))
    }

    /// The version last accepted of `type_url`.
    pub fn version(&self, type_url: &str) -> Option<&str> {
        self.types.get(type_url).map(|s| s.version.as_str())
    }

    /// The stream (or streams) are up: requests for every subscription go out, resuming what
    /// is held (SotW `version_info`, delta `initial_resource_versions`) so nothing is resent.
    pub fn connected(&mut self) {
        self.connected = true;
        self.node_sent.clear();
        for state in self.types.values_mut() {
            state.initial = true;
            state.nonce.clear();
            state.nack = None;
            state.added.clear();
            state.removed.clear();
            state.wildcard_changed = false;
            state.owed = state.interested();
            state.responses = 0;
            for sub in state.subs.values_mut() {
                sub.asked_at = None;
            }
        }
        self.events.push_back(Event::Connected);
    }

    /// The stream is down: what is held is kept; the does-not-exist timers of names not received
    /// stop, to start again when the requests go out on the next stream.
    pub fn disconnected(&mut self, reason: impl Into<String>) {
        if !self.connected {
            return;
        }
        self.connected = false;
        self.requests.clear();
        for state in self.types.values_mut() {
            for sub in state.subs.values_mut() {
                sub.deadline = None;
            }
        }
        self.events.push_back(Event::Disconnected {
            reason: reason.into(),
        });
    }

    /// The next request to send, if any. `now` starts the does-not-exist timers of the names it
    /// asks for.
    pub fn poll_request(&mut self, now: Instant) -> Option<Request> {
        if let Some(request) = self.requests.pop_front() {
            return Some(request);
        }
        if !self.connected {
            return None;
        }
        let type_url = self
            .types
            .iter()
            .filter(|(_, s)| s.owed)
            .min_by_key(|(t, _)| (types::push_rank(t), t.as_str()))
            .map(|(t, _)| t.clone())?;
        let stream = if self.config.ads {
            String::new()
        } else {
            type_url.clone()
        };
        let node = (!self.node_sent.contains(&stream)).then(|| self.config.node.clone());
        self.node_sent.insert(stream);
        let timeout = self.config.does_not_exist_timeout;
        let flavor = self.config.flavor;
        let state = self.types.get_mut(&type_url).expect("found above");
        let asked_at = if state.initial {
            None
        } else {
            Some(state.responses)
        };
        let request = match flavor {
            Flavor::Sotw => Request::Sotw(sotw_request(&type_url, state, node)),
            Flavor::Delta => Request::Delta(delta_request(&type_url, state, node)),
        };
        state.owed = false;
        state.initial = false;
        state.nack = None;
        state.added.clear();
        state.removed.clear();
        state.wildcard_changed = false;
        let held: BTreeSet<String> = state.held_names().into_iter().map(str::to_owned).collect();
        for (key, sub) in state.subs.iter_mut() {
            if sub.deadline.is_none() && !sub.missing && !held.contains(&key.name) {
                sub.deadline = now.checked_add(timeout);
            }
            sub.asked_at.get_or_insert(asked_at);
        }
        Some(request)
    }

    /// Queues an event of the driver's own (a refused subscription).
    pub(crate) fn push_event(&mut self, event: Event) {
        self.events.push_back(event);
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Client::handle_timeout`] is next due: a does-not-exist timer or a TTL.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.types
            .values()
            .flat_map(|s| {
                let deadlines = s.subs.values().filter_map(|sub| sub.deadline);
                let expiries = s.held.values().filter_map(|h| h.expires);
                deadlines.chain(expiries)
            })
            .min()
    }

    /// Time passed: names not received by their deadline are reported as not existing,
    /// resources whose TTL passed are dropped.
    pub fn handle_timeout(&mut self, now: Instant) {
        for (type_url, state) in self.types.iter_mut() {
            for (key, sub) in state.subs.iter_mut() {
                if sub.deadline.is_some_and(|d| d <= now) {
                    sub.deadline = None;
                    sub.missing = true;
                    self.events.push_back(Event::DoesNotExist {
                        type_url: type_url.clone(),
                        name: key.name.clone(),
                    });
                }
            }
            let expired: Vec<HeldKey> = state
                .held
                .iter()
                .filter(|(_, h)| h.expires.is_some_and(|e| e <= now))
                .map(|(k, _)| k.clone())
                .collect();
            if expired.is_empty() {
                continue;
            }
            let mut names = Vec::new();
            for key in expired {
                if let Some(h) = state.held.remove(&key) {
                    self.bytes -= h.bytes;
                    names.push(key.0);
                }
            }
            names.dedup();
            self.events.push_back(Event::Removed {
                type_url: type_url.clone(),
                version: state.version.clone(),
                names,
                expired: true,
            });
        }
    }

    /// Takes in a SotW response.
    pub fn handle_sotw(&mut self, now: Instant, response: DiscoveryResponse) {
        let type_url = response.type_url.clone();
        let Some(state) = self.types.get(&type_url) else {
            return;
        };
        if !state.interested() {
            return;
        }
        let mut received = Vec::with_capacity(response.resources.len());
        let mut problem = None;
        for any in &response.resources {
            match decode_sotw(&type_url, &response.version_info, any) {
                Ok(r) => received.push(r),
                Err(e) => {
                    problem = Some(e);
                    break;
                }
            }
        }
        let full_state = types::is_full_state(&type_url);
        let outcome = match problem {
            Some(reason) => Err(reason),
            None => self.apply(
                now,
                (&type_url, &response.version_info),
                received,
                Vec::new(),
                full_state,
            ),
        };
        self.answer(&type_url, &response.version_info, &response.nonce, outcome);
    }

    /// Takes in a delta response.
    pub fn handle_delta(&mut self, now: Instant, response: DeltaDiscoveryResponse) {
        let type_url = response.type_url.clone();
        if !self.types.contains_key(&type_url) {
            return;
        }
        let mut received = Vec::with_capacity(response.resources.len());
        let mut problem = None;
        for wire in &response.resources {
            match decode_wrapper(&type_url, "", wire.clone()) {
                Ok(r) => received.push(r),
                Err(e) => {
                    problem = Some(e);
                    break;
                }
            }
        }
        let mut removed: Vec<(String, Option<Vec<u8>>)> = response
            .removed_resources
            .iter()
            .map(|n| (n.clone(), None))
            .collect();
        removed.extend(response.removed_resource_names.iter().map(|n| {
            (
                n.name.clone(),
                Some(
                    n.dynamic_parameter_constraints
                        .as_ref()
                        .map(Message::encode_to_vec)
                        .unwrap_or_default(),
                ),
            )
        }));
        let outcome = match problem {
            Some(reason) => Err(reason),
            None => self.apply(
                now,
                (&type_url, &response.system_version_info),
                received,
                removed,
                false,
            ),
        };
        self.answer(
            &type_url,
            &response.system_version_info,
            &response.nonce,
            outcome,
        );
    }

    /// ACKs or NACKs a response.
    fn answer(&mut self, type_url: &str, version: &str, nonce: &str, outcome: Result<(), String>) {
        let Some(state) = self.types.get_mut(type_url) else {
            return;
        };
        state.nonce = nonce.to_owned();
        state.owed = true;
        state.responses += 1;
        match outcome {
            Ok(()) => state.version = version.to_owned(),
            Err(reason) => {
                state.nack = Some(reason.clone());
                self.events.push_back(Event::Rejected {
                    type_url: type_url.to_owned(),
                    version: version.to_owned(),
                    reason,
                });
            }
        }
    }

    /// Applies a response's resources and removals, or says why it is rejected (then nothing of
    /// it is applied).
    fn apply(
        &mut self,
        now: Instant,
        (type_url, version): (&str, &str),
        received: Vec<Received>,
        removed: Vec<(String, Option<Vec<u8>>)>,
        full_state: bool,
    ) -> Result<(), String> {
        let limits = self.config.limits;
        let state = self.types.get(type_url).expect("checked by the caller");
        // What the response holds: updates and heartbeats, by key.
        let mut updates: BTreeMap<HeldKey, Resource> = BTreeMap::new();
        let mut heartbeats: Vec<(HeldKey, String, Option<Duration>)> = Vec::new();
        for r in received {
            match r {
                Received::Resource(resource) => {
                    if !state.wants(&resource.name, resource.constraints.as_ref()) {
                        continue;
                    }
                    let key = held_key(&resource);
                    if updates.contains_key(&key) {
                        return Err(format!(
                            "resource {:?} is in the response twice",
                            resource.name
                        ));
                    }
                    updates.insert(key, resource);
                }
                Received::Heartbeat { key, version, ttl } => heartbeats.push((key, version, ttl)),
            }
        }
        if let Some(validator) = self.validator.as_mut() {
            for resource in updates.values() {
                validator(resource).map_err(|e| format!("resource {:?}: {e}", resource.name))?;
            }
        }
        // The bounds, before anything changes.
        let mut names: BTreeSet<&str> = if full_state {
            BTreeSet::new()
        } else {
            state.held_names()
        };
        names.extend(updates.values().map(|r| r.name.as_str()));
        if names.len() > limits.max_names {
            return Err(format!(
                "the response would have the client hold {} names of {type_url}, more than its \
                 limit of {}",
                names.len(),
                limits.max_names
            ));
        }
        let replaced: usize = updates
            .keys()
            .filter_map(|k| state.held.get(k))
            .map(|h| h.bytes)
            .sum();
        let dropped: usize = if full_state {
            state.bytes() - replaced
        } else {
            0
        };
        let new_bytes: usize = updates.values().map(|r| r.body.value.len()).sum();
        let total = self.bytes - replaced - dropped + new_bytes;
        if total > limits.max_bytes {
            return Err(format!(
                "the response would have the client hold {total} bytes of resources, more than \
                 its limit of {}",
                limits.max_bytes
            ));
        }

        // Accepted: apply.
        let state = self.types.get_mut(type_url).expect("checked by the caller");
        let mut update = Update {
            type_url: type_url.to_owned(),
            version: version.to_owned(),
            added: Vec::new(),
            changed: Vec::new(),
        };
        let mut gone: Vec<String> = Vec::new();
        let mut missing: Vec<String> = Vec::new();
        if full_state {
            // A heartbeat keeps its resource, as the resource itself would.
            let beating: BTreeSet<&HeldKey> = heartbeats.iter().map(|(k, _, _)| k).collect();
            let leaving: Vec<HeldKey> = state
                .held
                .keys()
                .filter(|k| !updates.contains_key(*k) && !beating.contains(k))
                .cloned()
                .collect();
            for key in leaving {
                if let Some(h) = state.held.remove(&key) {
                    self.bytes -= h.bytes;
                    gone.push(key.0);
                }
            }
            let present: BTreeSet<&str> = updates
                .values()
                .map(|r| r.name.as_str())
                .chain(beating.iter().map(|(n, _)| n.as_str()))
                .collect();
            // A name never received is concluded missing only when this response surely
            // follows the request that asked for it (spec, "Knowing When a Requested Resource
            // Does Not Exist": a response may answer an earlier request): the stream's first
            // request, or one sent before an earlier response of this stream. Otherwise its
            // timer decides.
            let before = state.responses;
            for (key, sub) in state.subs.iter_mut() {
                if present.contains(key.name.as_str()) || sub.missing {
                    continue;
                }
                let was_held = gone.contains(&key.name);
                let follows = match sub.asked_at {
                    Some(None) => true,
                    Some(Some(at)) => before > at,
                    None => false,
                };
                if was_held || follows {
                    sub.missing = true;
                    sub.deadline = None;
                    if !was_held {
                        missing.push(key.name.clone());
                    }
                }
            }
        }
        for (name, constraints) in removed {
            let keys: Vec<HeldKey> = match constraints {
                Some(c) => vec![(name.clone(), c)],
                None => state
                    .held
                    .range((name.clone(), Vec::new())..)
                    .take_while(|((n, _), _)| *n == name)
                    .map(|(k, _)| k.clone())
                    .collect(),
            };
            let mut was_held = false;
            for key in keys {
                if let Some(h) = state.held.remove(&key) {
                    self.bytes -= h.bytes;
                    was_held = true;
                }
            }
            if was_held {
                gone.push(name.clone());
            }
            let mut subscribed = false;
            for (_, sub) in state.subs.iter_mut().filter(|(k, _)| k.name == name) {
                subscribed = true;
                sub.deadline = None;
                sub.missing = true;
            }
            if subscribed && !was_held && !state.holds(&name) {
                missing.push(name);
            }
        }
        for (key, hb_version, ttl) in heartbeats {
            if let Some(h) = state.held.get_mut(&key) {
                if h.resource.version == hb_version {
                    h.expires = ttl.and_then(|t| now.checked_add(t));
                }
            }
        }
        for (key, resource) in updates {
            for (_, sub) in state
                .subs
                .iter_mut()
                .filter(|(k, _)| k.name == resource.name)
            {
                sub.deadline = None;
                sub.missing = false;
            }
            let bytes = resource.body.value.len();
            // A TTL past what the clock can count never expires.
            let expires = resource.ttl.and_then(|t| now.checked_add(t));
            match state.held.get_mut(&key) {
                Some(h) => {
                    h.expires = expires;
                    // A SotW resource's version is its response's: only a new body is a change.
                    let changed = h.resource.body != resource.body;
                    self.bytes = self.bytes - h.bytes + bytes;
                    h.bytes = bytes;
                    h.resource = resource.clone();
                    if changed {
                        update.changed.push(resource);
                    }
                }
                None => {
                    self.bytes += bytes;
                    state.held.insert(
                        key,
                        Held {
                            resource: resource.clone(),
                            expires,
                            bytes,
                        },
                    );
                    update.added.push(resource);
                }
            }
        }
        if !update.added.is_empty() || !update.changed.is_empty() || !state.answered {
            self.events.push_back(Event::Update(update));
        }
        state.answered = true;
        gone.dedup();
        if !gone.is_empty() {
            self.events.push_back(Event::Removed {
                type_url: type_url.to_owned(),
                version: version.to_owned(),
                names: gone,
                expired: false,
            });
        }
        for name in missing {
            self.events.push_back(Event::DoesNotExist {
                type_url: type_url.to_owned(),
                name,
            });
        }
        Ok(())
    }
}

fn held_key(resource: &Resource) -> HeldKey {
    (
        resource.name.clone(),
        resource
            .constraints
            .as_ref()
            .map(Message::encode_to_vec)
            .unwrap_or_default(),
    )
}

/// A resource, or a heartbeat of one (no body: renews the TTL of the version named).
enum Received {
    Resource(Resource),
    Heartbeat {
        key: HeldKey,
        version: String,
        ttl: Option<Duration>,
    },
}

/// The `name` field (number 1) of an xDS resource message: `name` of Listener, Cluster,
/// RouteConfiguration, Secret, Runtime…, `cluster_name` of ClusterLoadAssignment.
#[derive(Clone, PartialEq, Message)]
struct Named {
    #[prost(string, tag = "1")]
    name: String,
}

fn decode_sotw(type_url: &str, version: &str, any: &Any) -> Result<Received, String> {
    if any.type_url == RESOURCE_WRAPPER {
        let wire = WireResource::decode(any.value.as_slice())
            .map_err(|e| format!("a Resource wrapper does not decode: {e}"))?;
        return decode_wrapper(type_url, version, wire);
    }
    if any.type_url != type_url {
        return Err(format!(
            "a resource of type {} in a response of type {type_url}",
            any.type_url
        ));
    }
    let name = Named::decode(any.value.as_slice())
        .map_err(|e| format!("a resource's name does not decode: {e}"))?
        .name;
    if name.is_empty() {
        return Err("a resource has no name".to_owned());
    }
    Ok(Received::Resource(Resource {
        type_url: type_url.to_owned(),
        name,
        version: version.to_owned(),
        body: any.clone(),
        constraints: None,
        ttl: None,
    }))
}

/// A `Resource` wrapper (delta's resources, SotW's wrapped ones); `version` is the response's,
/// for a wrapper without its own.
fn decode_wrapper(type_url: &str, version: &str, wire: WireResource) -> Result<Received, String> {
    let (name, constraints) = match wire.resource_name {
        Some(ResourceName {
            name,
            dynamic_parameter_constraints,
        }) if !name.is_empty() => (name, dynamic_parameter_constraints),
        _ => (wire.name, None),
    };
    let ttl = wire
        .ttl
        .map(|d| Duration::new(d.seconds.max(0) as u64, d.nanos.max(0) as u32));
    let resource_version = if wire.version.is_empty() {
        version.to_owned()
    } else {
        wire.version
    };
    let Some(body) = wire.resource else {
        if name.is_empty() {
            return Err("a heartbeat names no resource".to_owned());
        }
        let key = (
            name,
            constraints
                .as_ref()
                .map(Message::encode_to_vec)
                .unwrap_or_default(),
        );
        return Ok(Received::Heartbeat {
            key,
            version: resource_version,
            ttl,
        });
    };
    if body.type_url != type_url {
        return Err(format!(
            "a resource of type {} in a response of type {type_url}",
            body.type_url
        ));
    }
    let name = if name.is_empty() {
        Named::decode(body.value.as_slice())
            .map_err(|e| format!("a resource's name does not decode: {e}"))?
            .name
    } else {
        name
    };
    if name.is_empty() {
        return Err("a resource has no name".to_owned());
    }
    Ok(Received::Resource(Resource {
        type_url: type_url.to_owned(),
        name,
        version: resource_version,
        body,
        constraints,
        ttl,
    }))
}

fn error_detail(nack: &Option<String>) -> Option<Status> {
    nack.as_ref().map(|message| Status {
        // INVALID_ARGUMENT, as Envoy sends.
        code: 3,
        message: message.clone(),
        details: Vec::new(),
    })
}

fn sotw_request(type_url: &str, state: &TypeState, node: Option<Node>) -> DiscoveryRequest {
    let mut names: Vec<String> = state
        .subs
        .keys()
        .filter(|k| k.params.is_empty())
        .map(|k| k.name.clone())
        .collect();
    let locators: Vec<ResourceLocator> = state
        .subs
        .keys()
        .filter(|k| !k.params.is_empty())
        .map(Key::locator)
        .collect();
    let named = !names.is_empty() || !locators.is_empty();
    match state.wildcard() {
        Wildcard::Explicit => names.push(WILDCARD.to_owned()),
        Wildcard::Legacy if named => names.push(WILDCARD.to_owned()),
        _ => {}
    }
    DiscoveryRequest {
        version_info: state.version.clone(),
        node,
        resource_names: names,
        resource_locators: locators,
        type_url: type_url.to_owned(),
        response_nonce: state.nonce.clone(),
        error_detail: error_detail(&state.nack),
    }
}

fn delta_request(type_url: &str, state: &TypeState, node: Option<Node>) -> DeltaDiscoveryRequest {
    let split = |keys: &mut dyn Iterator<Item = &Key>| {
        let mut names = Vec::new();
        let mut locators = Vec::new();
        for key in keys {
            if key.params.is_empty() {
                names.push(key.name.clone());
            } else {
                locators.push(key.locator());
            }
        }
        (names, locators)
    };
    let mut request = DeltaDiscoveryRequest {
        node,
        type_url: type_url.to_owned(),
        response_nonce: state.nonce.clone(),
        error_detail: error_detail(&state.nack),
        ..Default::default()
    };
    let wildcard = state.wildcard();
    if state.initial {
        let (mut names, locators) = split(&mut state.subs.keys());
        let named = !names.is_empty() || !locators.is_empty();
        if wildcard == Wildcard::Explicit || (wildcard == Wildcard::Legacy && named) {
            names.push(WILDCARD.to_owned());
        }
        request.resource_names_subscribe = names;
        request.resource_locators_subscribe = locators;
        request.initial_resource_versions = state
            .held
            .values()
            .map(|h| (h.resource.name.clone(), h.resource.version.clone()))
            .collect();
    } else {
        let (mut names, locators) = split(&mut state.added.iter());
        let (mut gone, gone_locators) = split(&mut state.removed.iter());
        if state.wildcard_changed {
            match wildcard {
                Wildcard::Off => gone.push(WILDCARD.to_owned()),
                Wildcard::Explicit => names.push(WILDCARD.to_owned()),
                // The legacy wildcard can only be the first request's: later, it is `*`.
                Wildcard::Legacy => names.push(WILDCARD.to_owned()),
            }
        } else if wildcard == Wildcard::Legacy
            && !names.is_empty()
            && state.subs.len() == names.len()
        {
            // The first names of a legacy wildcard subscription: keep the wildcard explicitly.
            names.push(WILDCARD.to_owned());
        }
        request.resource_names_subscribe = names;
        request.resource_locators_subscribe = locators;
        request.resource_names_unsubscribe = gone;
        request.resource_locators_unsubscribe = gone_locators;
    }
    request
}
