//! An in-memory harness for the protocol's tests (in the style of quinn's test pairs): a small
//! client state machine connected to a [`Session`], a [`Store`] and the session's [`Watcher`],
//! driven the way the stream driver (`transport::stream`) drives them, through the watcher
//! contract of `protocol::watching`, with time as an input. No sockets, no tasks, no clocks:
//! every step is the test's.
//!
//! Built for the crate's own unit tests, and with the `testing` feature for its integration
//! tests (the fuzz targets); not part of the library's API.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DiscoveryRequest, ResourceLocator,
};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use futures::FutureExt as _;

use crate::protocol::delta::DeltaMachine;
use crate::protocol::session::{Handled, Machine, Session, SessionError};
use crate::protocol::sotw::SotwMachine;
use crate::store::{Store, Watcher};

/// One request, flavor-neutral: what a client asks.
#[derive(Debug, Clone, Default)]
pub struct Ask {
    /// The type asked for.
    pub type_url: String,
    /// SotW: the whole list of names; delta: the names subscribed.
    pub subscribe: Vec<String>,
    /// Delta: the names unsubscribed (SotW ignores them).
    pub unsubscribe: Vec<String>,
    /// Resource locators (names with parameters) subscribed.
    pub locators: Vec<ResourceLocator>,
    /// SotW: the version the client has; delta: the version it says it has of `r0`.
    pub version: Option<String>,
    /// The nonce answered ("" for none).
    pub nonce: String,
    /// The node, if the request carries one.
    pub node: Option<Node>,
    /// A NACK, with this message.
    pub nack: Option<String>,
}

/// What the client reads of a response.
#[derive(Debug, Clone, Default)]
pub struct Received {
    /// The response's nonce.
    pub nonce: String,
    /// Its version (SotW) or system version (delta).
    pub version: String,
    /// The resources it carries: (name, version).
    pub resources: Vec<(String, String)>,
    /// The names it removes (delta).
    pub removed: Vec<String>,
}

/// A protocol flavor as the harness's client speaks it.
pub trait Flavor: Machine {
    /// Whether responses are deltas (SotW: a response is the state of its names).
    const DELTA: bool;
    /// `ask` as this flavor's request.
    fn request(ask: &Ask) -> Self::Request;
    /// What the client reads of `response`.
    fn received(response: &Self::Response) -> Received;
}

fn error_detail(nack: &Option<String>) -> Option<RpcStatus> {
    nack.as_ref().map(|message| RpcStatus {
        code: 3,
        message: message.clone(),
        details: Vec::new(),
    })
}

impl Flavor for SotwMachine {
    const DELTA: bool = false;

    fn request(ask: &Ask) -> Self::Request {
        (&DiscoveryRequest {
            version_info: ask.version.clone().unwrap_or_default(),
            node: ask.node.clone(),
            resource_names: ask.subscribe.clone(),
            resource_locators: ask.locators.clone(),
            type_url: ask.type_url.clone(),
            response_nonce: ask.nonce.clone(),
            error_detail: error_detail(&ask.nack),
        })
            .into()
    }

    fn received(response: &Self::Response) -> Received {
        let resources = match &response.resources {
            crate::protocol::sotw::SotwResources::All(view) => view
                .iter()
                .map(|r| (r.name().to_string(), r.version().to_string()))
                .collect(),
            crate::protocol::sotw::SotwResources::Some(list) => list
                .iter()
                .map(|r| (r.name().to_string(), r.version().to_string()))
                .collect(),
        };
        Received {
            nonce: response.nonce.to_string(),
            version: response.version_info.to_string(),
            resources,
            removed: Vec::new(),
        }
    }
}

impl Flavor for DeltaMachine {
    const DELTA: bool = true;

    fn request(ask: &Ask) -> Self::Request {
        (&DeltaDiscoveryRequest {
            node: ask.node.clone(),
            type_url: ask.type_url.clone(),
            resource_names_subscribe: ask.subscribe.clone(),
            resource_names_unsubscribe: ask.unsubscribe.clone(),
            resource_locators_subscribe: ask.locators.clone(),
            initial_resource_versions: ask
                .version
                .iter()
                .map(|v| ("r0".to_owned(), v.clone()))
                .collect(),
            response_nonce: ask.nonce.clone(),
            error_detail: error_detail(&ask.nack),
            ..Default::default()
        })
            .into()
    }

    fn received(response: &Self::Response) -> Received {
        Received {
            nonce: response.nonce.to_string(),
            version: response.system_version_info.to_string(),
            resources: response
                .resources
                .iter()
                .map(|r| (r.name().to_string(), r.version().to_string()))
                .collect(),
            removed: response.removed.iter().map(|n| n.to_string()).collect(),
        }
    }
}

/// What the client knows of one type.
#[derive(Debug, Clone, Default)]
pub struct TypeHeld {
    /// The names it subscribes to (SotW sends them all in each request).
    pub subscribed: BTreeSet<String>,
    /// The nonce and version of the last response.
    pub nonce: String,
    /// The version of the last response.
    pub version: String,
    /// The resources it holds: name, version.
    pub resources: BTreeMap<String, String>,
    /// Whether the last response is not answered yet.
    pub unanswered: bool,
}

/// A client following the spec: it asks, reads responses (holding what they carry) and answers
/// them (ACK or NACK).
#[derive(Debug, Clone, Default)]
pub struct Client {
    node: Option<Node>,
    /// Whether its node was sent (it goes in the first request).
    introduced: bool,
    types: BTreeMap<String, TypeHeld>,
    nonces: Vec<String>,
    delta: bool,
}

impl Client {
    /// A client with `node`, speaking delta or SotW.
    pub fn new(node: Option<Node>, delta: bool) -> Client {
        Client {
            node,
            delta,
            ..Client::default()
        }
    }

    /// The node, in the first request only.
    fn node_once(&mut self) -> Option<Node> {
        if self.introduced {
            None
        } else {
            self.introduced = true;
            self.node.clone()
        }
    }

    /// Subscribes to `names` of `type_url` as well (none at first: the wildcard).
    pub fn subscribe(&mut self, type_url: &str, names: &[&str]) -> Ask {
        let node = self.node_once();
        let held = self.types.entry(type_url.to_owned()).or_default();
        held.subscribed.extend(names.iter().map(|n| n.to_string()));
        let subscribe = if self.delta {
            names.iter().map(|n| n.to_string()).collect()
        } else {
            held.subscribed.iter().cloned().collect()
        };
        Ask {
            type_url: type_url.to_owned(),
            subscribe,
            version: (!self.delta && !held.version.is_empty()).then(|| held.version.clone()),
            nonce: held.nonce.clone(),
            node,
            ..Ask::default()
        }
    }

    /// Accepts the last response of `type_url`.
    pub fn ack(&mut self, type_url: &str) -> Ask {
        self.answer(type_url, None)
    }

    /// Rejects the last response of `type_url` with `message`.
    pub fn nack(&mut self, type_url: &str, message: &str) -> Ask {
        self.answer(type_url, Some(message.to_owned()))
    }

    fn answer(&mut self, type_url: &str, nack: Option<String>) -> Ask {
        let node = self.node_once();
        let held = self.types.entry(type_url.to_owned()).or_default();
        held.unanswered = false;
        Ask {
            type_url: type_url.to_owned(),
            subscribe: if self.delta {
                Vec::new()
            } else {
                held.subscribed.iter().cloned().collect()
            },
            version: (!self.delta).then(|| held.version.clone()),
            nonce: held.nonce.clone(),
            node,
            nack,
            ..Ask::default()
        }
    }

    /// Reads a response of `type_url`: SotW LDS/CDS responses replace what it holds, other
    /// SotW responses add to it; delta responses add and remove.
    pub fn receive(&mut self, type_url: &str, received: Received) {
        let held = self.types.entry(type_url.to_owned()).or_default();
        if !self.delta && crate::types::is_full_state(type_url) {
            held.resources.clear();
        }
        for name in &received.removed {
            held.resources.remove(name);
        }
        held.resources.extend(received.resources);
        held.version = received.version;
        held.nonce = received.nonce.clone();
        held.unanswered = true;
        self.nonces.push(received.nonce);
    }

    /// Every nonce received, in order.
    pub fn nonces(&self) -> &[String] {
        &self.nonces
    }

    /// What it knows of `type_url`.
    pub fn held(&self, type_url: &str) -> Option<&TypeHeld> {
        self.types.get(type_url)
    }

    /// The types whose last response it has not answered.
    pub fn unanswered(&self) -> Vec<String> {
        self.types
            .iter()
            .filter(|(_, h)| h.unanswered)
            .map(|(t, _)| t.clone())
            .collect()
    }
}

/// A client connected to a session, its store and its watcher, in memory.
pub struct Pair<M: Flavor> {
    /// The store the session reads.
    pub store: Store,
    /// The server's side.
    pub session: Session<M>,
    /// What the session watches of the store.
    pub watcher: Watcher,
    /// The client's side.
    pub client: Client,
    /// The time, as the test moves it.
    pub now: Instant,
}

impl<M: Flavor> Pair<M> {
    /// `session` over `store`, with a client of `node`.
    pub fn new(store: Store, session: Session<M>, node: Option<Node>) -> Pair<M> {
        Pair {
            watcher: store.watcher(),
            store,
            session,
            client: Client::new(node, M::DELTA),
            now: Instant::now(),
        }
    }

    /// Sends `ask` to the session, which tells the watcher what it now watches.
    pub fn send(&mut self, ask: &Ask) -> Result<Handled, SessionError> {
        let request = M::request(ask);
        self.session
            .handle_request_watched(&request, &self.store.snapshot(), &mut self.watcher)
    }

    /// Hands the session the store's changes if they woke the watcher (changes of muted types
    /// do not); whether they did.
    pub fn wake(&mut self) -> bool {
        let woken = self.watcher.changed().now_or_never().is_some();
        if woken {
            self.session.take_changes_from(&self.watcher);
        }
        woken
    }

    /// Moves the time on by `by`, handing it to the session when something was due.
    pub fn advance(&mut self, by: Duration) {
        self.now += by;
        if self.session.poll_timeout().is_some_and(|at| at <= self.now) {
            self.session.handle_timeout_watched(self.now, &self.watcher);
        }
    }

    /// Sends every response owed to the client (it reads them all), then mutes the types that
    /// wait for its answer: what the stream driver does after each event.
    pub fn flush(&mut self) -> Vec<(Arc<str>, M::Response)> {
        let snapshot = self.store.snapshot();
        let mut sent = Vec::new();
        while let Some((type_url, response)) = self.session.poll_response(&snapshot, self.now) {
            self.client.receive(&type_url, M::received(&response));
            sent.push((type_url, response));
            assert!(
                sent.len() < 10_000,
                "the session never stops owing responses"
            );
        }
        self.session.mute_waiting(&mut self.watcher);
        sent
    }

    /// Until nothing more is owed: takes the store's changes, flushes, and lets the client ACK
    /// every response; how many responses went out.
    pub fn settle(&mut self) -> Result<usize, SessionError> {
        let mut count = 0;
        for _ in 0..1_000 {
            self.wake();
            let sent = self.flush().len();
            count += sent;
            let unanswered = self.client.unanswered();
            if sent == 0 && unanswered.is_empty() {
                return Ok(count);
            }
            for type_url in unanswered {
                let ack = self.client.ack(&type_url);
                self.send(&ack)?;
            }
        }
        panic!("the pair never settles");
    }
}
