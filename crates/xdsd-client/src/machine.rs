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
    DeltaDiscoveryRequest, DiscoveryRequest, DynamicParameterConstraints, ResourceLocator,
};
use envoy_types::pb::google::protobuf::Any;

use crate::constraints::{matches, Params};
use crate::types;

mod response;
mod wire;

use wire::{delta_request, sotw_request};

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
    /// Other names it is known by (delta `aliases`: VHDS answers a virtual host asked by
    /// `ROUTE_CONFIG/DOMAIN` under its own name, with that alias); a subscription to an alias
    /// is a subscription to the resource.
    pub aliases: Vec<String>,
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
    /// Its name, then its aliases: each name a subscription to it may use.
    pub fn names(&self) -> impl Iterator<Item = &str> + '_ {
        std::iter::once(self.name.as_str()).chain(self.aliases.iter().map(String::as_str))
    }

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
        /// Each variant removed, by name and constraints (`None`: a plain resource): what a
        /// cache of several variants of a name (a caching proxy) drops, and no other.
        variants: Vec<(String, Option<DynamicParameterConstraints>)>,
        /// Whether they expired rather than were removed by the server.
        expired: bool,
    },
    /// A name subscribed to does not exist: the server said so (delta `removed_resources`, a
    /// full-state SotW response without it, a resource without a body that names it among its
    /// aliases) or did not send it within the timeout.
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

    /// Whether a received resource is one the client asked for: by its name or by one of its
    /// aliases.
    fn wants(&self, resource: &Resource) -> bool {
        if self.wildcard() != Wildcard::Off {
            return true;
        }
        let constraints = resource.constraints.as_ref();
        resource.names().any(|name| {
            self.subs_of(name).any(|key| {
                key.params.is_empty() || constraints.is_none_or(|c| matches(c, &key.params))
            })
        })
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

    /// The names and aliases of what is held: the subscriptions it answers.
    fn held_names_and_aliases(&self) -> BTreeSet<&str> {
        self.held
            .values()
            .flat_map(|h| h.resource.names())
            .collect()
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
            .filter(|(_, h)| !state.wants(&h.resource))
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
        let held: BTreeSet<String> = state
            .held_names_and_aliases()
            .into_iter()
            .map(str::to_owned)
            .collect();
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
            let mut variants = Vec::new();
            for key in expired {
                if let Some(h) = state.held.remove(&key) {
                    self.bytes -= h.bytes;
                    variants.push((key.0.clone(), h.resource.constraints));
                    names.push(key.0);
                }
            }
            names.dedup();
            self.events.push_back(Event::Removed {
                type_url: type_url.clone(),
                version: state.version.clone(),
                names,
                variants,
                expired: true,
            });
        }
    }
}
