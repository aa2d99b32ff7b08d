//! The load generator: N simulated ADS clients over K HTTP/2 connections (one tonic `Channel`
//! per connection, many streams on each), SotW or delta. Each client subscribes like Envoy does
//! (wildcard CDS and LDS, then EDS for the clusters and RDS for the route configurations the
//! listeners name), ACKs every response and records when each version (marker) of each tracked
//! resource arrived.
//!
//! Clients send the node on every request (as Envoy does by default; rust-control-plane's cache
//! needs it) and never decode a resource beyond its name and marker, except listeners (to find
//! their route configuration names, as Envoy must).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::config::listener::v3::{filter, Listener};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager, HttpConnectionManager,
};
use envoy_types::pb::google::protobuf::{value::Kind as PbKind, Struct, Value as PbValue};
use http::uri::PathAndQuery;
use prost::Message;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};
use xdsd_core::types::{CLUSTER, CLUSTER_LOAD_ASSIGNMENT, LISTENER, ROUTE_CONFIGURATION};

use crate::config::{group_value, GROUP_KEY, INITIAL_MARKER, MARKER_PATH_CLA, MARKER_PATH_CLUSTER};
use crate::now_ns;
use crate::wire::{self, bytes_field, fields, marker, RawCodec, Value};

pub const SOTW_PATH: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources";
pub const DELTA_PATH: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources";
/// Client `i`'s node id is `NODE_PREFIX` + `i` (bench-peer sets a snapshot for each).
pub const NODE_PREFIX: &str = "xds-bench-";

/// Resource kinds the clients know, in subscription order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Kind {
    Cds = 0,
    Eds = 1,
    Lds = 2,
    Rds = 3,
}

impl Kind {
    pub fn type_url(self) -> &'static str {
        match self {
            Kind::Cds => CLUSTER,
            Kind::Eds => CLUSTER_LOAD_ASSIGNMENT,
            Kind::Lds => LISTENER,
            Kind::Rds => ROUTE_CONFIGURATION,
        }
    }
    pub fn from_type_url(t: &[u8]) -> Option<Kind> {
        [Kind::Cds, Kind::Eds, Kind::Lds, Kind::Rds]
            .into_iter()
            .find(|k| k.type_url().as_bytes() == t)
    }
    fn marker_path(self) -> &'static [u32] {
        match self {
            Kind::Cds => MARKER_PATH_CLUSTER,
            _ => MARKER_PATH_CLA,
        }
    }
}

/// What the fleet does and expects.
#[derive(Debug, Clone)]
pub struct FleetSpec {
    pub streams: usize,
    pub connections: usize,
    pub delta: bool,
    /// Initial sync is complete when the client has CDS, LDS, this many EDS resources and this
    /// many RDS resources.
    pub expect_clusters: usize,
    pub expect_routes: usize,
    /// The resources whose versions are recorded: their kind and names (index = tracked id).
    pub tracked_kind: Kind,
    pub tracked: Vec<String>,
    /// S6: clients are in this many groups (client `i` in group `i % groups`, by its node
    /// metadata `GROUP_KEY: group_value(g)`); 0: no groups, no metadata.
    pub groups: usize,
    /// S9 (SotW): a client whose stream ends reconnects once to the next address of the list
    /// (the other replica), asking for what it holds with the versions it has, as Envoy does;
    /// the resources it receives after that are counted ([`Shared::resent`]).
    pub failover: bool,
}

impl FleetSpec {
    /// The group of client `i`, if the fleet has groups.
    pub fn group_of(&self, i: usize) -> Option<usize> {
        (self.groups > 0).then(|| i % self.groups)
    }
}

/// Names as small ids, shared by every client (so that 1,000 clients subscribed to the same
/// 10,000 names do not hold 10,000,000 strings).
#[derive(Default)]
struct Interner {
    ids: HashMap<Arc<str>, u32>,
    names: Vec<Arc<str>>,
}

/// One version of a tracked resource arriving at one client.
#[derive(Debug, Clone, Copy)]
pub struct Delivery {
    pub tracked: u32,
    pub marker: u32,
    pub at_ns: u64,
}

/// What one client saw, returned when the fleet stops.
#[derive(Debug, Default)]
pub struct ClientResult {
    pub synced_ns: Option<u64>,
    pub deliveries: Vec<Delivery>,
    pub responses: u64,
    pub error: Option<String>,
}

/// State the harness reads while the clients run.
pub struct Shared {
    spec: FleetSpec,
    interner: RwLock<Interner>,
    /// Tracked names (as bytes: looked up as they arrive, no UTF-8 check) and their ids; a
    /// lookup per resource received, so a fast hash.
    tracked: xdsd_core::hash::HashMap<Box<[u8]>, u32>,
    /// Last marker seen, per (client, tracked id): the harness polls these for convergence.
    last: Vec<AtomicU32>,
    pub synced: AtomicUsize,
    pub errors: AtomicUsize,
    /// S9: clients that reconnected to another replica, and the resources they received after.
    pub reconnected: AtomicUsize,
    pub resent: AtomicU64,
    error_samples: Mutex<Vec<String>>,
    pub responses: AtomicU64,
    pub bytes: AtomicU64,
    pub requests: AtomicU64,
    /// Responses received, per group (S6; empty without groups).
    pub group_responses: Vec<AtomicU64>,
    /// Pre-encoded `resource_names` blocks of SotW requests, shared by clients with equal lists.
    name_blocks: Mutex<HashMap<Kind, NamesBlock>>,
    /// The clients' `node.cluster` ([`NODE_CLUSTER_VAR`]).
    node_cluster: String,
}

/// The clients' `node.cluster`, `xds-bench` unless this is set (an empty value presents none:
/// through a relay, no parameter set then, every want answered from the shared stream's
/// prefetch; BENCHMARKS.md stop 72).
pub const NODE_CLUSTER_VAR: &str = "XDS_BENCH_NODE_CLUSTER";

impl Shared {
    pub fn new(spec: FleetSpec) -> Arc<Shared> {
        let tracked = spec
            .tracked
            .iter()
            .enumerate()
            .map(|(i, n)| (Box::from(n.as_bytes()), i as u32))
            .collect();
        let last = (0..spec.streams * spec.tracked.len())
            .map(|_| AtomicU32::new(0))
            .collect();
        Arc::new(Shared {
            interner: RwLock::default(),
            tracked,
            last,
            synced: AtomicUsize::new(0),
            errors: AtomicUsize::new(0),
            reconnected: AtomicUsize::new(0),
            resent: AtomicU64::new(0),
            error_samples: Mutex::default(),
            responses: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            group_responses: (0..spec.groups).map(|_| AtomicU64::new(0)).collect(),
            name_blocks: Mutex::default(),
            node_cluster: std::env::var(NODE_CLUSTER_VAR).unwrap_or_else(|_| "xds-bench".into()),
            spec,
        })
    }

    pub fn spec(&self) -> &FleetSpec {
        &self.spec
    }

    /// Clients whose last seen marker of `tracked` is at least `marker`.
    pub fn count_at_least(&self, tracked: u32, marker: u32) -> usize {
        let t = self.spec.tracked.len();
        (0..self.spec.streams)
            .filter(|c| self.last[c * t + tracked as usize].load(Ordering::Relaxed) >= marker)
            .count()
    }

    /// Of `clients`, those whose last seen marker of `tracked` is at least `marker`.
    pub fn clients_at_least(&self, clients: &[usize], tracked: u32, marker: u32) -> usize {
        let t = self.spec.tracked.len();
        clients
            .iter()
            .filter(|c| self.last[*c * t + tracked as usize].load(Ordering::Relaxed) >= marker)
            .count()
    }

    /// Clients of group `group` whose last seen marker of `tracked` is at least `marker`, and
    /// the group's size.
    pub fn group_at_least(&self, group: usize, tracked: u32, marker: u32) -> (usize, usize) {
        let t = self.spec.tracked.len();
        let members = (0..self.spec.streams).filter(|c| self.spec.group_of(*c) == Some(group));
        let (mut n, mut of) = (0, 0);
        for c in members {
            of += 1;
            if self.last[c * t + tracked as usize].load(Ordering::Relaxed) >= marker {
                n += 1;
            }
        }
        (n, of)
    }

    pub fn error_samples(&self) -> Vec<String> {
        self.error_samples
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn error(&self, message: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut samples = self.error_samples.lock().unwrap_or_else(|e| e.into_inner());
        if samples.len() < 5 {
            samples.push(message);
        }
    }

    fn intern(&self, name: &[u8]) -> Option<u32> {
        let name = std::str::from_utf8(name).ok()?;
        if let Some(id) = self
            .interner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .ids
            .get(name)
        {
            return Some(*id);
        }
        let mut i = self.interner.write().unwrap_or_else(|e| e.into_inner());
        if let Some(id) = i.ids.get(name) {
            return Some(*id);
        }
        let id = i.names.len() as u32;
        let name: Arc<str> = name.into();
        i.names.push(name.clone());
        i.ids.insert(name, id);
        Some(id)
    }

    /// The encoded `resource_names` fields for `ids`, shared with other clients that have the
    /// same list.
    fn names_block(&self, kind: Kind, ids: &Arc<Vec<u32>>) -> NamesBlock {
        let mut blocks = self.name_blocks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((cached, block)) = blocks.get(&kind) {
            if cached == ids {
                return (cached.clone(), block.clone());
            }
        }
        let interner = self.interner.read().unwrap_or_else(|e| e.into_inner());
        let mut buf = Vec::new();
        for id in ids.iter() {
            wire::put_bytes(&mut buf, 3, interner.names[*id as usize].as_bytes());
        }
        let entry = (ids.clone(), Bytes::from(buf));
        blocks.insert(kind, entry.clone());
        entry
    }
}

/// A list of name ids and its encoded `resource_names` fields.
type NamesBlock = (Arc<Vec<u32>>, Bytes);

/// The running fleet.
pub struct Fleet {
    pub shared: Arc<Shared>,
    handles: Vec<JoinHandle<ClientResult>>,
    stop: watch::Sender<bool>,
    pub started_ns: u64,
}

/// Opens `connections` HTTP/2 connections to `addr`, all at once. `addr` may list several
/// addresses separated by commas (replicas): the connections go to each in turn.
pub async fn connect(addr: &str, connections: usize) -> anyhow::Result<Vec<Channel>> {
    let endpoints = addr
        .split(',')
        .map(|a| {
            Ok(Endpoint::from_shared(format!("http://{a}"))?
                .tcp_nodelay(true)
                .connect_timeout(Duration::from_secs(10))
                // Envoy's defaults are 256 MiB windows: a client never throttles the server.
                .initial_stream_window_size(Some(16 << 20))
                .initial_connection_window_size(Some(256 << 20)))
        })
        .collect::<anyhow::Result<Vec<Endpoint>>>()?;
    let conns = futures::future::join_all(
        (0..connections.max(1)).map(|i| endpoints[i % endpoints.len()].connect()),
    )
    .await;
    conns
        .into_iter()
        .map(|c| c.map_err(|e| anyhow::anyhow!("connect to {addr}: {e}")))
        .collect()
}

impl Fleet {
    /// Connects and starts every client at once.
    pub async fn start(addr: &str, shared: Arc<Shared>) -> anyhow::Result<Fleet> {
        let started_ns = now_ns();
        let spec = shared.spec.clone();
        let channels = connect(addr, spec.connections).await?;
        // S9: connection i's fallback is the next address of the list, connected when needed.
        let addrs: Vec<&str> = addr.split(',').collect();
        let fallbacks: Vec<Option<Channel>> = (0..channels.len())
            .map(|i| {
                let next = addrs[(i + 1) % addrs.len()];
                (spec.failover && addrs.len() > 1)
                    .then(|| Endpoint::from_shared(format!("http://{next}")).ok())
                    .flatten()
                    .map(|e| e.tcp_nodelay(true).connect_lazy())
            })
            .collect();
        let (stop, stop_rx) = watch::channel(false);
        let handles = (0..spec.streams)
            .map(|i| {
                let ch = channels[i % channels.len()].clone();
                let fallback = fallbacks[i % channels.len()].clone();
                let client = Client::new(i, shared.clone());
                tokio::spawn(client.run(ch, fallback, stop_rx.clone()))
            })
            .collect();
        Ok(Fleet {
            shared,
            handles,
            stop,
            started_ns,
        })
    }

    /// Waits until every client completed its initial sync, or a client failed, or `timeout`.
    pub async fn wait_synced(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let s = &self.shared;
            if s.synced.load(Ordering::Relaxed) >= s.spec.streams {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Waits until every client has `marker` (or later) of `tracked`.
    pub async fn wait_marker(&self, tracked: u32, marker: u32, timeout: Duration) -> bool {
        self.wait_until(timeout, || {
            self.shared.count_at_least(tracked, marker) >= self.shared.spec.streams
        })
        .await
    }

    /// Waits until every client of `clients` has `marker` (or later) of `tracked`.
    pub async fn wait_clients_marker(
        &self,
        clients: &[usize],
        tracked: u32,
        marker: u32,
        timeout: Duration,
    ) -> bool {
        self.wait_until(timeout, || {
            self.shared.clients_at_least(clients, tracked, marker) >= clients.len()
        })
        .await
    }

    /// Waits until every client of `group` has `marker` (or later) of `tracked`.
    pub async fn wait_group_marker(
        &self,
        group: usize,
        tracked: u32,
        marker: u32,
        timeout: Duration,
    ) -> bool {
        self.wait_until(timeout, || {
            let (n, of) = self.shared.group_at_least(group, tracked, marker);
            n >= of
        })
        .await
    }

    /// Polls `done` every 2 ms until it holds (true) or `timeout` passed (false).
    async fn wait_until(&self, timeout: Duration, done: impl Fn() -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if done() {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Ends every stream and returns what each client saw.
    pub async fn stop(self) -> Vec<ClientResult> {
        let _ = self.stop.send(true);
        let mut out = Vec::with_capacity(self.handles.len());
        for h in self.handles {
            out.push(h.await.unwrap_or_else(|e| ClientResult {
                error: Some(format!("client task: {e}")),
                ..Default::default()
            }));
        }
        out
    }
}

#[derive(Default)]
struct TypeState {
    version: String,
    nonce: String,
    /// SotW: the names this client subscribes to (EDS, RDS), as ids, sorted.
    names: Arc<Vec<u32>>,
    /// Delta: subscribed ids as a bitset.
    subscribed: Vec<u64>,
    received: usize,
    responses: usize,
}

impl TypeState {
    fn has(&self, id: u32) -> bool {
        self.subscribed
            .get(id as usize / 64)
            .is_some_and(|w| w & (1 << (id % 64)) != 0)
    }
    fn set(&mut self, id: u32, on: bool) {
        let w = id as usize / 64;
        if self.subscribed.len() <= w {
            self.subscribed.resize(w + 1, 0);
        }
        if on {
            self.subscribed[w] |= 1 << (id % 64);
        } else {
            self.subscribed[w] &= !(1 << (id % 64));
        }
    }
}

struct Client {
    index: usize,
    /// The encoded `Node`, sent on every request as Envoy does.
    node: Bytes,
    shared: Arc<Shared>,
    types: [TypeState; 4],
    result: ClientResult,
    /// Requests to send once the current response is handled.
    outbox: Vec<Bytes>,
}

impl Client {
    fn new(index: usize, shared: Arc<Shared>) -> Client {
        // S6: the group is a string field of the node's metadata, as an Envoy bootstrap sets it.
        let metadata = shared.spec.group_of(index).map(|g| Struct {
            fields: [(
                GROUP_KEY.to_owned(),
                PbValue {
                    kind: Some(PbKind::StringValue(group_value(g))),
                },
            )]
            .into_iter()
            .collect(),
        });
        let node = Node {
            id: format!("{NODE_PREFIX}{index}"),
            cluster: shared.node_cluster.clone(),
            user_agent_name: "xds-bench".into(),
            metadata,
            ..Default::default()
        }
        .encode_to_vec()
        .into();
        Client {
            index,
            node,
            shared,
            types: Default::default(),
            result: ClientResult::default(),
            outbox: Vec::new(),
        }
    }

    async fn run(
        mut self,
        channel: Channel,
        mut fallback: Option<Channel>,
        mut stop: watch::Receiver<bool>,
    ) -> ClientResult {
        let delta = self.shared.spec.delta;
        // Envoy asks for clusters and listeners first.
        for kind in [Kind::Cds, Kind::Lds] {
            let req = if delta {
                wire::delta_request(
                    &self.node,
                    kind.type_url(),
                    "",
                    std::iter::empty(),
                    std::iter::empty(),
                )
            } else {
                wire::sotw_request(&self.node, kind.type_url(), "", "", std::iter::empty())
            };
            self.send(req);
        }
        let mut channel = channel;
        // Resources received before a failover (S9), to count what comes after it.
        let mut failed_over: Option<usize> = None;
        loop {
            let (tx, rx) = mpsc::channel::<Bytes>(16);
            for req in self.outbox.drain(..) {
                let _ = tx.try_send(req);
            }
            let mut grpc =
                tonic::client::Grpc::new(channel.clone()).max_decoding_message_size(usize::MAX);
            let path = PathAndQuery::from_static(if delta { DELTA_PATH } else { SOTW_PATH });
            let opened = async {
                grpc.ready().await.map_err(|e| format!("channel: {e}"))?;
                grpc.streaming(tonic::Request::new(ReceiverStream::new(rx)), path, RawCodec)
                    .await
                    .map_err(|s| format!("open stream: {s}"))
            };
            let mut inbound = tokio::select! {
                r = opened => match r {
                    Ok(r) => r.into_inner(),
                    Err(e) => return self.fail(e),
                },
                _ = async { let _ = stop.wait_for(|s| *s).await; } => return self.result,
            };
            let ended = loop {
                tokio::select! {
                    biased;
                    _ = async { let _ = stop.wait_for(|s| *s).await; } => return self.result,
                    msg = inbound.message() => match msg {
                        Ok(Some(msg)) => {
                            let at = now_ns();
                            if let Err(e) = self.on_response(&msg, at) {
                                return self.fail(e);
                            }
                            if let Some(before) = failed_over {
                                let now = self.received();
                                self.shared
                                    .resent
                                    .fetch_add((now - before) as u64, Ordering::Relaxed);
                                failed_over = Some(now);
                            }
                            for req in std::mem::take(&mut self.outbox) {
                                if tx.send(req).await.is_err() {
                                    return self.fail("request stream closed".into());
                                }
                            }
                        }
                        Ok(None) => break "the server ended the stream".to_owned(),
                        Err(status) => break format!("stream error: {status}"),
                    },
                }
            };
            // A replica gone (S9): once, to the other, with what the client holds.
            match fallback.take() {
                Some(other) if !delta => {
                    channel = other;
                    failed_over = Some(self.received());
                    self.shared.reconnected.fetch_add(1, Ordering::Relaxed);
                    for kind in [Kind::Cds, Kind::Lds, Kind::Eds, Kind::Rds] {
                        let st = &mut self.types[kind as usize];
                        st.nonce.clear();
                        let wanted = matches!(kind, Kind::Cds | Kind::Lds) || !st.names.is_empty();
                        if wanted {
                            let req = self.sotw_request(kind);
                            self.send(req);
                        }
                    }
                }
                _ => return self.fail(ended),
            }
        }
    }

    /// Resources received so far, all types.
    fn received(&self) -> usize {
        self.types.iter().map(|t| t.received).sum()
    }

    fn fail(mut self, e: String) -> ClientResult {
        self.shared.error(format!("client {}: {e}", self.index));
        self.result.error = Some(e);
        self.result
    }

    fn send(&mut self, req: Bytes) {
        self.shared.requests.fetch_add(1, Ordering::Relaxed);
        self.outbox.push(req);
    }

    fn track(&mut self, kind: Kind, name: &[u8], value: &[u8], at: u64) {
        if kind != self.shared.spec.tracked_kind || self.shared.tracked.is_empty() {
            return;
        }
        let Some(id) = self.shared.tracked.get(name) else {
            return;
        };
        let m = marker(value, kind.marker_path()).unwrap_or(0);
        let slot = &self.shared.last[self.index * self.shared.spec.tracked.len() + *id as usize];
        if m > slot.load(Ordering::Relaxed) {
            if m > INITIAL_MARKER {
                self.result.deliveries.push(Delivery {
                    tracked: *id,
                    marker: m,
                    at_ns: at,
                });
            }
            slot.store(m, Ordering::Relaxed);
        }
    }

    fn on_response(&mut self, msg: &Bytes, at: u64) -> Result<(), String> {
        self.result.responses += 1;
        self.shared.responses.fetch_add(1, Ordering::Relaxed);
        if let Some(g) = self.shared.spec.group_of(self.index) {
            self.shared.group_responses[g].fetch_add(1, Ordering::Relaxed);
        }
        self.shared
            .bytes
            .fetch_add(msg.len() as u64 + 5, Ordering::Relaxed);
        if self.shared.spec.delta {
            self.on_delta(msg, at)
        } else {
            self.on_sotw(msg, at)
        }?;
        self.check_synced(at);
        Ok(())
    }

    fn check_synced(&mut self, at: u64) {
        if self.result.synced_ns.is_some() {
            return;
        }
        let spec = &self.shared.spec;
        let t = &self.types;
        if t[Kind::Cds as usize].responses > 0
            && t[Kind::Lds as usize].responses > 0
            && t[Kind::Eds as usize].received >= spec.expect_clusters
            && t[Kind::Rds as usize].received >= spec.expect_routes
        {
            self.result.synced_ns = Some(at);
            self.shared.synced.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn on_sotw(&mut self, msg: &[u8], at: u64) -> Result<(), String> {
        let (mut version, mut type_url, mut nonce) = (&[][..], &[][..], &[][..]);
        for (tag, v) in fields(msg) {
            if let Value::Bytes(b) = v {
                match tag {
                    1 => version = b,
                    4 => type_url = b,
                    5 => nonce = b,
                    _ => {}
                }
            }
        }
        let kind = Kind::from_type_url(type_url)
            .ok_or_else(|| format!("response of type {:?}", String::from_utf8_lossy(type_url)))?;
        let mut referenced: Vec<u32> = Vec::new();
        let mut count = 0;
        for (tag, v) in fields(msg) {
            let (2, Value::Bytes(any)) = (tag, v) else {
                continue;
            };
            count += 1;
            let value = bytes_field(any, 2).unwrap_or_default();
            let name = bytes_field(value, 1).unwrap_or_default();
            self.track(kind, name, value, at);
            self.collect_references(kind, name, value, &mut referenced);
        }
        let st = &mut self.types[kind as usize];
        st.responses += 1;
        st.received += count;
        st.version = String::from_utf8_lossy(version).into_owned();
        st.nonce = String::from_utf8_lossy(nonce).into_owned();
        // ACK, with the same subscription.
        let ack = self.sotw_request(kind);
        self.send(ack);
        // Then follow the references of full-state types: EDS for clusters, RDS for listeners.
        if let Some(dep) = dependent(kind) {
            referenced.sort_unstable();
            referenced.dedup();
            if *self.types[dep as usize].names != referenced {
                let ids = Arc::new(referenced);
                self.types[dep as usize].names = ids;
                let req = self.sotw_request(dep);
                self.send(req);
            }
        }
        Ok(())
    }

    fn sotw_request(&mut self, kind: Kind) -> Bytes {
        let st = &self.types[kind as usize];
        let block = if st.names.is_empty() {
            Bytes::new()
        } else {
            let (ids, block) = self.shared.names_block(kind, &st.names);
            self.types[kind as usize].names = ids;
            block
        };
        let st = &self.types[kind as usize];
        let mut buf = Vec::with_capacity(block.len() + 200);
        if !st.version.is_empty() {
            wire::put_bytes(&mut buf, 1, st.version.as_bytes());
        }
        wire::put_bytes(&mut buf, 2, &self.node);
        buf.extend_from_slice(&block);
        wire::put_bytes(&mut buf, 4, kind.type_url().as_bytes());
        if !st.nonce.is_empty() {
            wire::put_bytes(&mut buf, 5, st.nonce.as_bytes());
        }
        buf.into()
    }

    /// Names of `kind`'s dependent type that this resource refers to.
    fn collect_references(&self, kind: Kind, name: &[u8], value: &[u8], out: &mut Vec<u32>) {
        match kind {
            // Every synthetic cluster is an EDS cluster without a service name.
            Kind::Cds => out.extend(self.shared.intern(name)),
            Kind::Lds => {
                if let Some(route) = listener_route(value) {
                    out.extend(self.shared.intern(route.as_bytes()));
                }
            }
            _ => {}
        }
    }

    fn on_delta(&mut self, msg: &[u8], at: u64) -> Result<(), String> {
        let (mut type_url, mut nonce) = (&[][..], &[][..]);
        for (tag, v) in fields(msg) {
            if let Value::Bytes(b) = v {
                match tag {
                    4 => type_url = b,
                    5 => nonce = b,
                    _ => {}
                }
            }
        }
        let kind = Kind::from_type_url(type_url)
            .ok_or_else(|| format!("response of type {:?}", String::from_utf8_lossy(type_url)))?;
        let mut added: Vec<u32> = Vec::new();
        let mut removed: Vec<u32> = Vec::new();
        let mut count = 0;
        for (tag, v) in fields(msg) {
            match (tag, v) {
                (2, Value::Bytes(resource)) => {
                    count += 1;
                    let name = bytes_field(resource, 3).unwrap_or_default();
                    let value = bytes_field(resource, 2)
                        .and_then(|any| bytes_field(any, 2))
                        .unwrap_or_default();
                    self.track(kind, name, value, at);
                    self.collect_references(kind, name, value, &mut added);
                }
                (6, Value::Bytes(name)) if kind == Kind::Cds => {
                    removed.extend(self.shared.intern(name));
                }
                _ => {}
            }
        }
        let st = &mut self.types[kind as usize];
        st.responses += 1;
        st.received += count;
        let ack = wire::delta_request(
            &self.node,
            kind.type_url(),
            std::str::from_utf8(nonce).unwrap_or_default(),
            std::iter::empty(),
            std::iter::empty(),
        );
        self.send(ack);
        if let Some(dep) = dependent(kind) {
            let st = &mut self.types[dep as usize];
            added.retain(|id| !st.has(*id));
            added.sort_unstable();
            added.dedup();
            removed.retain(|id| st.has(*id));
            for id in &added {
                st.set(*id, true);
            }
            for id in &removed {
                st.set(*id, false);
            }
            if !added.is_empty() || !removed.is_empty() {
                let req = {
                    let i = self
                        .shared
                        .interner
                        .read()
                        .unwrap_or_else(|e| e.into_inner());
                    wire::delta_request(
                        &self.node,
                        dep.type_url(),
                        "",
                        added.iter().map(|id| &*i.names[*id as usize]),
                        removed.iter().map(|id| &*i.names[*id as usize]),
                    )
                };
                self.send(req);
            }
        }
        Ok(())
    }
}

fn dependent(kind: Kind) -> Option<Kind> {
    match kind {
        Kind::Cds => Some(Kind::Eds),
        Kind::Lds => Some(Kind::Rds),
        _ => None,
    }
}

/// The RDS route configuration name of a listener's HTTP connection manager.
fn listener_route(value: &[u8]) -> Option<String> {
    let l = Listener::decode(value).ok()?;
    l.filter_chains
        .iter()
        .flat_map(|c| &c.filters)
        .find_map(|f| match &f.config_type {
            Some(filter::ConfigType::TypedConfig(any)) => {
                let hcm = HttpConnectionManager::decode(&any.value[..]).ok()?;
                match hcm.route_specifier? {
                    http_connection_manager::RouteSpecifier::Rds(rds) => {
                        Some(rds.route_config_name)
                    }
                    _ => None,
                }
            }
            _ => None,
        })
}
