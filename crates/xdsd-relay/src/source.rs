//! The relay as a [`Source`]: the downstream demand (from [`RelayObserver`]) drives upstream
//! subscriptions over the xDS client, and what the upstream sends is cached and committed to the
//! store that the relay's own server serves.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::Node;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};
use xdsd_client::{Config, Event, Flavor, WildcardAnswer, XdsClient};
use xdsd_core::ClientNode;
use xdsd_core::{ChangeSet, Rejection, Source, SourceEvent, Store};

use crate::group::{upstream_node, AggregateBy, GroupKey, Params, Partition};
use crate::metrics::RelayMetrics;
use crate::observer::{Demanded, RelayObserver};
use crate::stores::Stores;
use crate::table::{Action, Table, TypeKey, Want, DEFAULT_LINGER};
use crate::validate;

/// How many names may be pending at once by default: a client subscribing 100,000 names by
/// name at once is answered from the upstream.
pub const DEFAULT_MAX_PENDING: usize = 200_000;

/// How the relay talks to its upstream and follows its downstream.
#[derive(Debug, Clone)]
pub struct RelayOptions {
    /// The upstream server and how to reach it.
    pub upstream: xdsd_client::Options,
    /// The node the relay presents upstream (its own).
    pub node: Node,
    /// Delta (the default) or SotW, always over ADS.
    pub flavor: Flavor,
    /// How downstream clients are grouped into upstream streams.
    pub aggregate_by: AggregateBy,
    /// How long an upstream subscription outlives its last downstream client.
    pub linger: Duration,
    /// Types subscribed upstream (wildcard, on the shared stream) from the start and for good,
    /// so that the first downstream client is answered from the cache.
    pub prefetch: Vec<String>,
    /// How long the first load waits for the upstream to answer the prefetched types; and how
    /// long a name (or type) a downstream client asks for stays pending in the store, its
    /// clients not told it does not exist, while the upstream has not answered it.
    pub first_wait: Duration,
    /// How many names may be pending at once (past it, a name is answered as if the relay had
    /// asked nothing; see [`xdsd_core::store::PendingNames`]); [`DEFAULT_MAX_PENDING`] by
    /// default.
    pub max_pending: usize,
    /// xRFC TP2 "Client Configuration": the parameter set of each authority that has one of
    /// its own (`xdsd relay --param-for`). A client's plain name `xdstp://AUTHORITY/...` of
    /// such an authority is fetched on the upstream stream presenting that set (in place of
    /// the client's parameters), and the relay's server must match it with the same set
    /// ([`xdsd_core::ServerOptions::authority_params`]). Empty by default.
    pub authority_params: std::collections::BTreeMap<String, xdsd_client::Params>,
    /// Every key the upstream's xRFC TP2 constraints read, for every type, when the operator
    /// knows them (`xdsd relay --upstream-keys`; `None`, the default: not known). In the
    /// default grouping a client's wildcard, glob collection and names not received yet are
    /// then fetched with its parameters of these keys only, so clients that differ in other
    /// parameters (every Envoy's node cluster) share one upstream stream; a key received
    /// outside them is logged. A key left out makes the relay fetch without it: its clients
    /// may be sent a variant that is not theirs.
    pub upstream_keys: Option<std::collections::BTreeSet<String>>,
}

impl RelayOptions {
    /// A delta ADS relay of `upstream`, presenting `node`, with the default linger, nothing
    /// prefetched.
    pub fn new(upstream: xdsd_client::Options, node: Node) -> RelayOptions {
        RelayOptions {
            upstream,
            node,
            flavor: Flavor::Delta,
            aggregate_by: AggregateBy::None,
            linger: DEFAULT_LINGER,
            prefetch: Vec::new(),
            first_wait: Duration::from_secs(10),
            max_pending: DEFAULT_MAX_PENDING,
            authority_params: Default::default(),
            upstream_keys: None,
        }
    }
}

/// One upstream stream.
struct Group {
    /// Tells its events apart from those of an earlier stream of the same group.
    id: u64,
    client: XdsClient,
    forward: JoinHandle<()>,
    connected: bool,
    ever_connected: bool,
    /// Its loss was logged (once per loss, not per failed attempt).
    loss_logged: bool,
}

impl Drop for Group {
    fn drop(&mut self) {
        // Its events dropped with the handle stop the driver.
        self.forward.abort();
    }
}

/// The relay's source. See the module documentation.
pub struct RelaySource {
    options: RelayOptions,
    /// Who wants what upstream, whether the upstream answered it, and what each partition's
    /// groups were sent (shared with the observer, which declares in it).
    table: Arc<Table>,
    /// The store of each partition (not the shared one, whose is the server's, committed to
    /// through the feed) whose cache in the table holds something: held while it does.
    part_stores: HashMap<Partition, Store>,
    /// The partitions' stores, shared with the observer (the server's store picker).
    stores: Arc<Stores>,
    metrics: RelayMetrics,
    demanded: mpsc::UnboundedReceiver<Demanded>,
    events_tx: mpsc::Sender<(u64, Vec<Event>)>,
    events: mpsc::Receiver<(u64, Vec<Event>)>,
    groups: HashMap<GroupKey, Group>,
    /// How many of `groups` are not connected: the gauge is read without a scan of the groups.
    disconnected: usize,
    /// Each open group by the id its events carry.
    ids: HashMap<u64, GroupKey>,
    /// The first downstream node seen of each group (the node a `cluster` or `node` group
    /// presents).
    first_nodes: HashMap<GroupKey, Arc<ClientNode>>,
    next_id: u64,
    /// The upstream answered every prefetched type (with nothing prefetched, it answered
    /// something): a cache is held, the relay is ready from then on.
    held: bool,
    /// The prefetched types' wildcards.
    prefetch: Vec<Want>,
    /// The health last reported.
    healthy: bool,
    /// Problems to report as a rejection.
    problems: Vec<String>,
}

/// The server a name is subscribed upstream of, for the logs: its authority's first
/// (`--upstream-for`, xRFC TP1), else the default's.
fn upstream_of<'a>(upstream: &'a xdsd_client::Options, name: &str) -> &'a str {
    upstream.server_for(name)
}

/// A relay: its source (give it to a [`xdsd_core::Feed`]), the observer its server needs
/// (give it to [`xdsd_core::XdsServerBuilder::observer`]) and its metrics.
pub fn relay(options: RelayOptions) -> (RelaySource, RelayObserver, RelayMetrics) {
    let (tx, demanded) = mpsc::unbounded_channel();
    let (events_tx, events) = mpsc::channel(1024);
    let metrics = RelayMetrics::new();
    let stores = Arc::new(Stores::new(options.aggregate_by, options.max_pending));
    let table = Arc::new(Table::new(
        options.linger,
        options.first_wait,
        metrics.clone(),
        stores.clone(),
    ));
    table.declare_upstream_keys(options.upstream_keys.clone());
    let observer = RelayObserver::new(
        options.aggregate_by,
        tx,
        table.clone(),
        stores.clone(),
        Arc::new(options.authority_params.clone()),
    );
    let source = RelaySource {
        table,
        options,
        part_stores: HashMap::new(),
        stores,
        metrics: metrics.clone(),
        demanded,
        events_tx,
        events,
        groups: HashMap::new(),
        disconnected: 0,
        ids: HashMap::new(),
        first_nodes: HashMap::new(),
        next_id: 0,
        held: false,
        prefetch: Vec::new(),
        healthy: true,
        problems: Vec::new(),
    };
    (source, observer, metrics)
}

impl RelaySource {
    /// Does what the demand says upstream.
    fn act(&mut self) -> Result<(), String> {
        // Plain names by group and type: subscribed upstream in one request each.
        let mut names: BTreeMap<(GroupKey, TypeKey), Vec<String>> = BTreeMap::new();
        let mut subscribed = Vec::new();
        for action in self.table.take_actions() {
            match action {
                Action::Subscribe(want) => {
                    self.start_group(&want.group)?;
                    if self.groups.contains_key(&want.group) {
                        debug!(upstream = %upstream_of(&self.options.upstream, &want.name), stream = %want.group, type_url = %want.type_url, name = %want, "subscribing upstream");
                        names
                            .entry((want.group.clone(), want.type_url.clone()))
                            .or_default()
                            .push(want.name.to_string());
                    }
                    subscribed.push(want);
                }
                Action::Unsubscribe(want) => self.unsubscribe(want),
                Action::Forget(want) => {
                    info!(stream = %want.group, type_url = %want.type_url, name = %want, "no downstream client left: no longer held (its stream's pinned wildcard brings it: nothing to unsubscribe upstream)");
                }
            }
        }
        // A name of a type whose wildcard (or of a glob collection the group holds), answered
        // and committed, is answered already: there or not, the upstream said so (it may send
        // nothing again for it). Nothing answers while the actions are taken.
        if !subscribed.is_empty() {
            let answered = self.table.answered_names(subscribed);
            if !answered.is_empty() {
                self.table.announce(answered);
            }
        }
        for ((key, type_url), names) in names {
            if let Some(group) = self.groups.get(&key) {
                // One line per request and upstream, not per name (a client may subscribe
                // 100,000); an authority's names go to its own server.
                let mut by_upstream: BTreeMap<&str, (&str, usize)> = BTreeMap::new();
                for name in &names {
                    by_upstream
                        .entry(upstream_of(&self.options.upstream, name))
                        .or_insert((name, 0))
                        .1 += 1;
                }
                for (upstream, (first, n)) in by_upstream {
                    let more = match n {
                        1 => String::new(),
                        n => format!(" and {} more", n - 1),
                    };
                    info!(upstream = %upstream, stream = %key, type_url = %type_url, "subscribing upstream: {first}{more}");
                }
                group.client.subscribe(&type_url, names);
            }
        }
        self.sizes();
        Ok(())
    }

    fn unsubscribe(&mut self, want: Want) {
        info!(upstream = %upstream_of(&self.options.upstream, &want.name), stream = %want.group, type_url = %want.type_url, name = %want, "no downstream client left: unsubscribing upstream");
        if let Some(group) = self.groups.get(&want.group) {
            group.client.unsubscribe(&want.type_url, &want.name);
        }
        // (What its group held only through it left the table's cache with it.)
        if !self.table.group_used(&want.group) {
            if let Some(group) = self.groups.remove(&want.group) {
                self.ids.remove(&group.id);
                if !group.connected {
                    self.disconnected -= 1;
                }
            }
            self.first_nodes.remove(&want.group);
            self.connected_gauge();
        }
    }

    fn start_group(&mut self, key: &GroupKey) -> Result<(), String> {
        if self.groups.contains_key(key) {
            return Ok(());
        }
        let node = upstream_node(
            key,
            &self.options.node,
            self.first_nodes.get(key).map(|n| &**n),
        );
        let mut config = Config::new(node);
        config.flavor = self.options.flavor;
        config.ads = true;
        // A name the upstream has not answered is given up in one place, after one time: the
        // relay's pending window (`--upstream-wait`). The client's own does-not-exist timer
        // (15 s by default) would otherwise tell the relay's clients that a name does not exist
        // while the upstream is still sending a large answer (100,000 names by name).
        config.does_not_exist_timeout = self.options.first_wait;
        // The cache keeps what the events bring; the client keeps each body's digest, not a
        // second copy of it.
        config.keep_bodies = false;
        let (client, mut events) = XdsClient::start(
            self.options.upstream.clone(),
            config,
            Some(validate::validator()),
        )
        .map_err(|e| e.to_string())?;
        self.next_id += 1;
        let id = self.next_id;
        let tx = self.events_tx.clone();
        let forward = tokio::spawn(async move {
            // A response's events together: applied at once, never half.
            while let Some(batch) = events.next_batch().await {
                if tx.send((id, batch)).await.is_err() {
                    return;
                }
            }
        });
        self.ids.insert(id, key.clone());
        self.groups.insert(
            key.clone(),
            Group {
                id,
                client,
                forward,
                connected: false,
                ever_connected: false,
                loss_logged: false,
            },
        );
        self.disconnected += 1;
        self.connected_gauge();
        Ok(())
    }

    /// Takes in the events of group stream `id` that came together (one response's).
    fn upstream_batch(&mut self, id: u64, batch: Vec<Event>) {
        let answer = batch.iter().any(|e| matches!(e, Event::Update(_)));
        for event in batch {
            self.upstream(id, event);
        }
        if answer && !self.held {
            self.held = self.prefetch_answered();
        }
    }

    /// Whether the upstream answered every prefetched type.
    fn prefetch_answered(&self) -> bool {
        self.prefetch.iter().all(|want| self.table.responded(want))
    }

    fn demanded(&mut self, demanded: Demanded) {
        let now = Instant::now();
        match demanded {
            Demanded::Acquire {
                stream,
                wants,
                routed,
                node,
            } => {
                self.remember_nodes(&wants, node);
                self.table.acquire_all(stream, wants, Some(routed));
            }
            Demanded::AcquireList {
                stream,
                list,
                routed,
                node,
            } => {
                self.remember_nodes(&list, node);
                self.table.acquire_list(stream, list, Some(routed));
            }
            Demanded::Touch { want, node } => {
                self.remember_node(&want.group, node);
                self.table.touch(want, now);
            }
            Demanded::Drop { stream, want } => self.table.drop_want(stream, &want, now),
            Demanded::Release { stream } => self.table.release(stream, now),
        }
    }

    /// The node of the client that asked `wants`, for each of their groups (a request's share
    /// one: looked at once per run of a group).
    fn remember_nodes(&mut self, wants: &[Want], node: Option<Arc<ClientNode>>) {
        let mut last: Option<&GroupKey> = None;
        for want in wants {
            if last != Some(&want.group) {
                self.remember_node(&want.group, node.clone());
                last = Some(&want.group);
            }
        }
    }

    fn remember_node(&mut self, group: &GroupKey, node: Option<Arc<ClientNode>>) {
        if let Some(node) = node {
            self.first_nodes.entry(group.clone()).or_insert(node);
        }
    }

    /// Takes in an event of upstream stream `id`.
    fn upstream(&mut self, id: u64, event: Event) {
        let Some(key) = self.ids.get(&id).cloned() else {
            // A stream since closed.
            return;
        };
        let Some(group) = self.groups.get_mut(&key) else {
            return;
        };
        let server = &self.options.upstream.server;
        match event {
            Event::Connected => {
                if group.ever_connected {
                    self.metrics.reconnected();
                    info!(upstream = %server, stream = %key, "upstream connected again");
                } else {
                    info!(upstream = %server, stream = %key, "upstream connected");
                }
                if !group.connected {
                    self.disconnected -= 1;
                }
                group.connected = true;
                group.ever_connected = true;
                group.loss_logged = false;
            }
            Event::Disconnected { reason } => {
                if !group.loss_logged {
                    warn!(upstream = %server, stream = %key, "upstream unreachable ({reason}): serving the cache, reconnecting");
                    group.loss_logged = true;
                }
                if group.connected {
                    self.disconnected += 1;
                }
                group.connected = false;
            }
            Event::Update(mut update) => {
                // Cached (the bodies taken, not copied); what it answers is the table's to say.
                let mut received: Vec<&mut xdsd_client::Resource> =
                    update.added.iter_mut().chain(&mut update.changed).collect();
                self.table.received(&key, &update.type_url, &mut received);
            }
            Event::Removed {
                type_url,
                names,
                variants,
                ..
            } => {
                self.table.removed(&key, &type_url, &names, &variants);
            }
            Event::DoesNotExist { type_url, name } => {
                self.table.does_not_exist(&key, &type_url, &name);
            }
            Event::WildcardAnswered { type_url, by } => {
                let first = self.table.wildcard_answered(&key, &type_url);
                if first && by == WildcardAnswer::TimedOut {
                    warn!(upstream = %server, stream = %key, type_url, "no upstream response could be told to answer the wildcard within {:?} (every resource it sent is asked by name too, or it sent nothing): what the stream holds is taken as the whole type", self.options.first_wait);
                } else {
                    debug!(upstream = %server, stream = %key, type_url, by = ?by, "the upstream answered the wildcard");
                }
            }
            Event::Rejected {
                type_url,
                version,
                reason,
            } => {
                self.metrics.rejected();
                warn!(upstream = %server, stream = %key, type_url, version, "NACKed an upstream response, keeping the last good resources: {reason}");
            }
        }
        self.connected_gauge();
    }

    fn connected_gauge(&self) {
        let up = !self.groups.is_empty() && self.disconnected == 0;
        self.metrics.set_connected(up);
    }

    fn sizes(&self) {
        self.metrics.set_sizes(
            self.table.subscriptions(),
            self.groups.len(),
            self.table.variants(),
        );
    }

    /// Ready once the upstream answered (every prefetched type; with nothing prefetched, its
    /// first response), then while that cache is held: connected is not answered.
    fn health_now(&self) -> bool {
        self.held
    }

    /// The change of `partition`'s cache since its last, if any.
    fn take_change(&mut self, partition: &Partition) -> Option<(ChangeSet, Vec<String>)> {
        self.table.take_change(partition)
    }

    /// Commits what changed in the partitions other than the shared one to their own stores,
    /// each with the answers it brings (the shared partition's go through the feed); a
    /// partition that holds nothing any more lets go of its store.
    fn commit_partitions(&mut self) {
        let partitions = self.table.take_touched();
        if partitions.is_empty() {
            return;
        }
        for partition in partitions {
            if let Some((change, problems)) = self.take_change(&partition) {
                self.problems.extend(problems);
                let store = match self.part_stores.get(&partition) {
                    Some(store) => Some(store.clone()),
                    None => self.stores.store(&partition),
                };
                if let Some(store) = store {
                    // Held while the partition's cache holds anything.
                    self.part_stores
                        .entry(partition.clone())
                        .or_insert(store.clone());
                    // Resolved in the commit's own swap, as the feed's commits are.
                    self.table.stage_answers(&partition);
                    match change.update.apply(&store) {
                        Ok(summary) => {
                            info!(upstream = %self.options.upstream.server, partition = ?partition, "{}", xdsd_core::source::what_changed(&summary));
                        }
                        Err(e) => {
                            warn!(upstream = %self.options.upstream.server, partition = ?partition, "change rejected: {e}");
                            self.problems.push(format!("{partition:?}: {e}"));
                        }
                    }
                }
            }
            self.table.announce_answers(&partition);
            if !self.table.holds_any(&partition) {
                self.part_stores.remove(&partition);
            }
        }
        self.sizes();
    }

    /// What to hand the feed now, if anything.
    fn ready_event(&mut self) -> Option<SourceEvent> {
        if !self.problems.is_empty() {
            return Some(SourceEvent::Rejected(Rejection::new(std::mem::take(
                &mut self.problems,
            ))));
        }
        self.commit_partitions();
        if let Some((change, problems)) = self.take_change(&Partition::All) {
            // Reported with the next event, with any of the partitions' own.
            self.problems.extend(problems);
            self.sizes();
            self.table.stage_shared();
            return Some(SourceEvent::Change(change));
        }
        if !self.problems.is_empty() {
            // A partition's change the relay or its store refused.
            return Some(SourceEvent::Rejected(Rejection::new(std::mem::take(
                &mut self.problems,
            ))));
        }
        // Answers that changed nothing: the store has them already.
        self.table.announce_answers(&Partition::All);
        let healthy = self.health_now();
        if healthy != self.healthy {
            self.healthy = healthy;
            let reason = if healthy {
                String::new()
            } else {
                format!(
                    "the upstream {} has not answered yet",
                    self.options.upstream.server
                )
            };
            return Some(SourceEvent::Health { healthy, reason });
        }
        None
    }
}

impl Source for RelaySource {
    fn describe(&self) -> String {
        format!("upstream {}", self.options.upstream.server)
    }

    fn kind(&self) -> &'static str {
        "upstream"
    }

    async fn load(&mut self) -> Result<ChangeSet, Rejection> {
        self.prefetch = self
            .options
            .prefetch
            .iter()
            .map(|t| Want::wildcard(GroupKey::of(Partition::All, Params::new(), t), t))
            .collect();
        for want in &self.prefetch {
            self.table.pin(want.clone());
        }
        self.act().map_err(|e| Rejection::new(vec![e]))?;
        let deadline = tokio::time::Instant::now() + self.options.first_wait;
        loop {
            if self.prefetch.is_empty() || self.held {
                break;
            }
            tokio::select! {
                event = self.events.recv() => match event {
                    Some((id, batch)) => self.upstream_batch(id, batch),
                    None => break,
                },
                _ = tokio::time::sleep_until(deadline) => {
                    warn!(upstream = %self.options.upstream.server, "the upstream did not answer every prefetched type within {:?}: serving what it sent", self.options.first_wait);
                    break;
                }
            }
        }
        let change = match self.take_change(&Partition::All) {
            Some((change, problems)) => {
                self.problems = problems;
                change
            }
            None => ChangeSet::all(Vec::new()),
        };
        self.table.stage_shared();
        self.sizes();
        Ok(change)
    }

    fn metrics(&mut self, metrics: &xdsd_core::Metrics) {
        let relay = self.metrics.clone();
        metrics.add_series(move || relay.series());
    }

    fn pending(&mut self, pending: xdsd_core::store::PendingNames) {
        self.table.attach(pending, self.options.max_pending);
    }

    fn healthy(&self) -> bool {
        self.health_now()
    }

    fn committed(&mut self, _ok: bool) {
        // Committed or refused, the clients waiting for these answers are answered now.
        self.table.announce_committed();
    }

    async fn next(&mut self) -> Option<SourceEvent> {
        loop {
            if let Err(e) = self.act() {
                self.problems
                    .push(format!("cannot subscribe upstream: {e}"));
            }
            if let Some(event) = self.ready_event() {
                return Some(event);
            }
            // The demand's linger, and the time a pending want is given up at.
            let deadline = [self.table.poll_timeout(), self.table.next_expiry()]
                .into_iter()
                .flatten()
                .min()
                .map(tokio::time::Instant::from_std);
            let timer = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                demanded = self.demanded.recv() => match demanded {
                    Some(demanded) => {
                        self.demanded(demanded);
                        // What else the streams asked meanwhile, before acting: subscribed
                        // upstream together.
                        while let Ok(more) = self.demanded.try_recv() {
                            self.demanded(more);
                        }
                    }
                    // The observer is gone with its server.
                    None => return None,
                },
                event = self.events.recv() => {
                    if let Some((id, batch)) = event {
                        self.upstream_batch(id, batch);
                    }
                }
                _ = timer => {
                    let now = Instant::now();
                    self.table.handle_timeout(now);
                    self.table.expire(now);
                }
            }
        }
    }
}
