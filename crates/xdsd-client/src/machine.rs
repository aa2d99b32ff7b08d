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

mod held;
mod lookup;
mod response;
mod state;
mod wire;

use held::{Held, HeldKey};
use state::{drop_unwanted, TypeState, Wildcard, WildcardWait};
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
    /// Whether the client keeps each resource's body once its event has handed it out (`true`,
    /// the default). Off, it keeps the rest (name, version, constraints, size) and a digest of
    /// the body, by which it tells a resend from a change as before; its events carry every
    /// body as before, but [`Client::resources`] and [`Client::resource`] hand out resources
    /// whose bodies are empty. For a user that keeps what the events bring (`xdsd relay`'s
    /// cache): one copy of each body fewer, in memory and in copying.
    pub keep_bodies: bool,
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
            keep_bodies: true,
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
    /// The stream is up: requests go out. From [`XdsClient`](crate::XdsClient): the server
    /// accepted the connection's first stream (its response headers came with an OK status;
    /// some servers send them only with their first response). It says nothing of what the
    /// server holds: a type's first response is its [`Event::Update`], reported even when
    /// empty. From a [`Client`] driven by hand: [`Client::connected`] was called.
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
    /// What the client holds of a type is its server's answer to the type's wildcard
    /// subscription, as far as the client can tell (see [`WildcardAnswer`]): once per stream,
    /// after the events of the response that answers it (or at its timeout). Until then, a
    /// response may answer names asked before the wildcard only — in SotW a full state of
    /// listeners or clusters without the rest of the type.
    WildcardAnswered {
        /// The type.
        type_url: String,
        /// How the client knows.
        by: WildcardAnswer,
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

/// How the client knows that what it holds of a type answers the type's wildcard
/// subscription on its stream ([`Event::WildcardAnswered`]). A response names no request: a
/// response the server sent before it read the request that added the wildcard (in SotW that
/// request is then stale, and the server answers the ACK that carries the wildcard again)
/// answers only the names asked before. So a response counts as the wildcard's answer only when
/// it must follow the server's reading of the wildcard; otherwise the wait is bounded by
/// [`Config::does_not_exist_timeout`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WildcardAnswer {
    /// The wildcard was in the stream's first request of its type, which every response of the
    /// type follows: the first response accepted answers it.
    FirstRequest,
    /// The response carries a resource no subscription of the stream asks for by name (nor by
    /// alias, glob collection or resource locator): the server sent it for the wildcard, so it
    /// had read it.
    Unasked,
    /// No response was shown to answer it within [`Config::does_not_exist_timeout`] of the
    /// request that asked for it (e.g. every resource the server has of the type is asked by
    /// name too, so its answer looks like the answer to those names): what is held is taken as
    /// its answer.
    TimedOut,
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

/// `name` as the client keeps it: an `xdstp://` name canonical (xRFC TP1 "Normalization":
/// context parameters sorted, percent-encoding normalized, through [`xdsd_xdstp`]), so that
/// `?b=2&a=1` is the subscription, the resource and the glob member `?a=1&b=2`; every other
/// name (and a malformed xdstp one) as it is. Only names that start with `xdstp:` are looked at.
pub(crate) fn canonical(name: &str) -> String {
    match xdsd_xdstp::canonical(name) {
        Some(c) => c.to_string(),
        None => name.to_owned(),
    }
}

/// [`canonical`] of an owned name, which is moved when it is canonical already.
pub(crate) fn canonical_owned(name: String) -> String {
    match xdsd_xdstp::canonical(&name) {
        Some(c) => c.to_string(),
        None => name,
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

    /// Subscribes to `names` of `type_url` (plain names; `*` is the explicit wildcard). An
    /// `xdstp://` name is subscribed, asked for and reported canonically (see docs/client.md).
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
                self.subscribe_key(type_url, Key::plain(&canonical(name)))?;
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
                name: canonical(name),
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
        state.add_sub(key.clone());
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
            self.unsubscribe_key(type_url, Key::plain(&canonical(name)));
        }
    }

    /// Ends the subscription to a resource locator.
    pub fn unsubscribe_locator(&mut self, type_url: &str, name: &str, params: Params) {
        self.unsubscribe_key(
            type_url,
            Key {
                name: canonical(name),
                params,
            },
        );
    }

    fn unsubscribe_key(&mut self, type_url: &str, key: Key) {
        let Some(state) = self.types.get_mut(type_url) else {
            return;
        };
        if !state.remove_sub(&key) {
            return;
        }
        state.added.remove(&key);
        let candidates = state.held_for(&key.name);
        state.removed.insert(key);
        state.owed = true;
        drop_unwanted(state, candidates);
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
        // Asked again, it waits for its answer again.
        state.wildcard_wait = None;
        state.wildcard_answered = false;
        // What the wildcard held may be anything held.
        let candidates = state.held.iter().map(Held::key).collect();
        drop_unwanted(state, candidates);
    }

    /// Bytes of resource bodies held, all types.
    fn bytes(&self) -> usize {
        self.types.values().map(|s| s.held_bytes).sum()
    }

    /// The resources of `type_url` held, in name order (variants of a name together).
    pub fn resources(&self, type_url: &str) -> impl Iterator<Item = &Resource> + '_ {
        self.types
            .get(type_url)
            .into_iter()
            .flat_map(|s| s.held.sorted().into_iter().map(|h| &h.resource))
    }

    /// The variant of `name` of `type_url` held for `params` (TP2 variants are matched by their
    /// constraints; a resource without constraints is every client's).
    pub fn resource(&self, type_url: &str, name: &str, params: &Params) -> Option<&Resource> {
        let state = self.types.get(type_url)?;
        state
            .variants_of(name)
            .map(|h| &h.resource)
            .find(|r| r.matches(params))
    }

    /// The version last accepted of `type_url`.
    pub fn version(&self, type_url: &str) -> Option<&str> {
        self.types.get(type_url).map(|s| s.version.as_str())
    }

    /// The stream (or streams) are up: requests for every subscription go out, resuming what
    /// is held (SotW `version_info`, delta `initial_resource_versions`) so nothing is resent.
    pub fn connected(&mut self) {
        self.stream_up();
        self.events.push_back(Event::Connected);
    }

    /// As [`Client::connected`], without the event: the driver reports [`Event::Connected`]
    /// itself, once the server accepts a stream.
    pub(crate) fn stream_up(&mut self) {
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
            state.wildcard_wait = None;
            state.wildcard_answered = false;
            for sub in state.subs.values_mut() {
                sub.asked_at = None;
            }
        }
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
            for (_, key) in std::mem::take(&mut state.deadlines) {
                if let Some(sub) = state.subs.get_mut(&key) {
                    sub.deadline = None;
                }
            }
            // The wildcard's wait too: the next stream's first request asks for it again.
            state.wildcard_wait = None;
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
        // The wildcard, asked for the first time on this stream, waits for its answer: any
        // response if this is the stream's first request of the type, else one shown to follow
        // the server's reading of it, or its timeout (see `WildcardAnswer`).
        if state.wildcard() != Wildcard::Off
            && !state.wildcard_answered
            && state.wildcard_wait.is_none()
        {
            state.wildcard_wait = Some(WildcardWait {
                first: state.initial,
                deadline: now.checked_add(timeout),
            });
        }
        // The timers of what it asks for start: every subscription on the stream's first
        // request of the type, else those added since the last one.
        let asked =
            (!state.initial).then(|| std::mem::take(&mut state.added).into_iter().collect());
        state.owed = false;
        state.initial = false;
        state.nack = None;
        state.added.clear();
        state.removed.clear();
        state.wildcard_changed = false;
        state.asked(asked, now.checked_add(timeout), asked_at);
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
        self.types.values().filter_map(TypeState::next_due).min()
    }

    /// Time passed: names not received by their deadline are reported as not existing,
    /// resources whose TTL passed are dropped.
    pub fn handle_timeout(&mut self, now: Instant) {
        for (type_url, state) in self.types.iter_mut() {
            if state
                .wildcard_wait
                .is_some_and(|w| w.deadline.is_some_and(|d| d <= now))
            {
                state.wildcard_wait = None;
                state.wildcard_answered = true;
                self.events.push_back(Event::WildcardAnswered {
                    type_url: type_url.clone(),
                    by: WildcardAnswer::TimedOut,
                });
            }
            let mut due = Vec::new();
            while let Some((d, _)) = state.deadlines.first() {
                if *d > now {
                    break;
                }
                if let Some((_, key)) = state.deadlines.pop_first() {
                    due.push(key);
                }
            }
            // In the order of the subscriptions.
            due.sort();
            for key in due {
                if let Some(sub) = state.subs.get_mut(&key) {
                    sub.deadline = None;
                    sub.missing = true;
                    self.events.push_back(Event::DoesNotExist {
                        type_url: type_url.clone(),
                        name: key.name,
                    });
                }
            }
            let mut expired = Vec::new();
            while let Some((e, key)) = state.expiries.first() {
                if *e > now {
                    break;
                }
                expired.push(key.clone());
                state.expiries.pop_first();
            }
            if expired.is_empty() {
                continue;
            }
            // In the order of what is held: a name's variants together.
            expired.sort();
            let mut names = Vec::new();
            let mut variants = Vec::new();
            for key in expired {
                if let Some(h) = state.take_held(&key) {
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

#[cfg(test)]
impl Client {
    /// Whether the machine keeps state for `type_url`.
    pub(crate) fn knows_type(&self, type_url: &str) -> bool {
        self.types.contains_key(type_url)
    }

    /// The machine's invariants, for the tests and the fuzz targets: every index agrees with
    /// what it indexes, what is held is wanted and keyed by itself, and the bounds hold.
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        let limits = self.config.limits;
        if self.types.len() > limits.max_types {
            return Err(format!("{} types held", self.types.len()));
        }
        if self.bytes() > limits.max_bytes {
            return Err(format!("{} bytes held", self.bytes()));
        }
        for (type_url, state) in &self.types {
            let names: BTreeSet<&str> = state
                .held
                .iter()
                .map(|h| h.resource.name.as_str())
                .collect();
            if names.len() != state.held_names {
                return Err(format!(
                    "{type_url}: {} names held, counted {}",
                    names.len(),
                    state.held_names
                ));
            }
            if names.len() > limits.max_names {
                return Err(format!("{type_url}: {} names held", names.len()));
            }
            if state.subs.len() > limits.max_names {
                return Err(format!("{type_url}: {} subscriptions", state.subs.len()));
            }
            let located = state.subs.keys().filter(|k| !k.params.is_empty()).count();
            if located != state.located {
                return Err(format!(
                    "{type_url}: {located} locators subscribed, counted {}",
                    state.located
                ));
            }
            let constrained = state
                .held
                .iter()
                .filter(|h| !h.constraints.is_empty())
                .count();
            if constrained != state.held.constrained_keys() {
                return Err(format!(
                    "{type_url}: {constrained} constrained keys held, indexed {}",
                    state.held.constrained_keys()
                ));
            }
            let bytes: usize = state.held.iter().map(|h| h.bytes).sum();
            if bytes != state.held_bytes {
                return Err(format!(
                    "{type_url}: {bytes} bytes held, counted {}",
                    state.held_bytes
                ));
            }
            let mut aliased: BTreeMap<String, BTreeSet<HeldKey>> = BTreeMap::new();
            let mut expiries = BTreeSet::new();
            state.held.check().map_err(|e| format!("{type_url}: {e}"))?;
            for held in state.held.iter() {
                let (key, r) = (held.key(), &held.resource);
                let constraints = r.constraints.as_ref().map(prost::Message::encode_to_vec);
                if held.constraints != constraints.unwrap_or_default() {
                    return Err(format!("{type_url}: {key:?} holds {:?}", r.name));
                }
                // A body not kept is held as none: no type URL either.
                let body_type = if held.digest.is_some() { "" } else { type_url };
                if r.type_url != *type_url || r.body.type_url != body_type {
                    return Err(format!(
                        "{type_url}: {:?} is of {}",
                        r.name, r.body.type_url
                    ));
                }
                let counted = match held.digest {
                    None => held.bytes == r.body.value.len(),
                    // Its body not kept: none held.
                    Some(_) => r.body.value.is_empty(),
                };
                if !counted {
                    return Err(format!("{type_url}: {:?}'s bytes miscounted", r.name));
                }
                if !state.wants(r) {
                    return Err(format!("{type_url}: {:?} held, not wanted", r.name));
                }
                for alias in &r.aliases {
                    aliased
                        .entry(alias.clone())
                        .or_default()
                        .insert(key.clone());
                }
                if let Some(e) = held.expires {
                    expiries.insert((e, key.clone()));
                }
            }
            if aliased != state.aliased {
                return Err(format!("{type_url}: the alias index is out of step"));
            }
            if expiries != state.expiries {
                return Err(format!("{type_url}: the expiry index is out of step"));
            }
            let deadlines: BTreeSet<(Instant, Key)> = state
                .subs
                .iter()
                .filter_map(|(k, s)| s.deadline.map(|d| (d, k.clone())))
                .collect();
            if deadlines != state.deadlines {
                return Err(format!("{type_url}: the timer index is out of step"));
            }
            for (key, sub) in &state.subs {
                if sub.deadline.is_some() && (sub.missing || !self.connected) {
                    return Err(format!(
                        "{type_url}: {:?} has a timer while missing or disconnected",
                        key.name
                    ));
                }
                if sub.deadline.is_some() && state.provides(&key.name) {
                    return Err(format!("{type_url}: {:?} has a timer while held", key.name));
                }
            }
            if state.wildcard_wait.is_some()
                && (state.wildcard() == Wildcard::Off || !self.connected || state.wildcard_answered)
            {
                return Err(format!(
                    "{type_url}: the wildcard waits for an answer while off, answered or \
                     disconnected"
                ));
            }
            if !self.connected && !self.requests.is_empty() {
                return Err("requests queued while disconnected".to_owned());
            }
        }
        Ok(())
    }
}
