//! The gate at work: two stores (the stable state, and the canary state the source's changes go
//! to), the [`Gate`] fed with the canary streams' answers and with time, and its actions carried
//! out on the stores.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use envoy_types::pb::envoy::config::core::v3::Node;
use prost::Message as _;
use serde_json::{json, Value};
use tokio::sync::{watch, Notify};
use tracing::{error, info, warn};

use super::observer::Canaries;
use super::HOLD_BOUND;
use super::{holds_candidate, Action, ClientId, Cohort, Gate, GateConfig, NackDetail, State};
use super::{Record, RecordState, SharedState};
use crate::metrics::Metrics;
use crate::protocol::session::ClientNode;
use crate::source::{CommitTarget, Update};
use crate::store::{ResourceInput, Snapshot, Store, StoreError, UpdateSummary};
use crate::transport::grpc::{ServerHandle, XdsServerBuilder};
use crate::transport::picker::Hold;

/// A gated rollout: see the module [`crate::rollout`]. Shared by the feed of the source (which
/// commits to [`Rollout::canary_store`] through [`Rollout::commit`]), the streams (which read
/// the store [`Rollout::store_for_raw`] their node and report their canaries' answers) and the admin
/// API.
pub struct Rollout {
    cohort: Cohort,
    stable: Store,
    canary: Store,
    inner: Mutex<Inner>,
    wake: Notify,
    metrics: Mutex<Option<Metrics>>,
    shared: Mutex<Option<Arc<dyn SharedState>>>,
    /// The candidate's generation (if any) and the generation last promoted, for the answers
    /// held until the candidate is decided ([`Rollout::hold`]).
    decided: watch::Sender<(Option<u64>, u64)>,
}

/// Who decided what the gate's actions carry out.
#[derive(Clone, Copy)]
enum By {
    /// This replica: the decision is shared, about the candidate of this revision.
    Here(Option<i64>),
    /// Another replica (a record adopted): not shared again.
    Elsewhere,
}

struct Inner {
    gate: Gate,
    /// When the candidate was proposed (wall clock, for the admin API).
    proposed_at: Option<SystemTime>,
    promotions: u64,
    halts: u64,
    /// The source revision of the stable state, when the source has revisions.
    stable_revision: Option<i64>,
    /// The source revision of the last change committed to the canary store.
    canary_revision: Option<i64>,
    /// The shared record found at start ([`Rollout::resume_from`]), applied by
    /// [`Rollout::start_at`].
    resume: Option<Record>,
    /// A change an operator aborted: the source holds it, no client is served it, until the
    /// source changes again.
    aborted: Option<Aborted>,
}

/// The change of an aborted rollout, which the source still holds.
struct Aborted {
    at: SystemTime,
    generation: Option<u64>,
    revision: Option<i64>,
}

impl Rollout {
    /// A rollout of the changes committed to its canary store, to the clients `cohort` picks
    /// first, then to `stable`'s clients, running: the task that keeps the gate's time
    /// (promotes once a soak is over) is started here and runs as long as the program does.
    /// Feed it with [`Feed::new`](crate::Feed::new) (the feed's first load goes to both stores)
    /// and serve it with [`XdsServerBuilder::rollout`]. The canary store starts empty.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (its task is spawned on it).
    pub fn new(cohort: Cohort, config: GateConfig, stable: Store) -> Arc<Rollout> {
        let rollout = Rollout::unstarted(cohort, config, stable);
        tokio::spawn(rollout.clone().run());
        rollout
    }

    /// [`Rollout::new`] without the task that keeps time: the gate soaks until
    /// [`Rollout::promote`] (for the tests of what does not depend on time).
    pub(crate) fn unstarted(cohort: Cohort, config: GateConfig, stable: Store) -> Arc<Rollout> {
        let canary = Store::with_reference_policy(stable.reference_policy().clone());
        Arc::new(Rollout {
            cohort,
            canary,
            stable,
            inner: Mutex::new(Inner {
                gate: Gate::new(config),
                proposed_at: None,
                promotions: 0,
                halts: 0,
                stable_revision: None,
                canary_revision: None,
                resume: None,
                aborted: None,
            }),
            wake: Notify::new(),
            metrics: Mutex::new(None),
            shared: Mutex::new(None),
            decided: watch::Sender::new((None, 0)),
        })
    }

    /// Shares every decision taken here through `shared` (replicas on etcd): see
    /// [`crate::rollout::Record`]. What the others decide comes back through
    /// [`Rollout::adopt`].
    pub fn share(&self, shared: Arc<dyn SharedState>) {
        *self.shared.lock().unwrap_or_else(|e| e.into_inner()) = Some(shared);
    }

    /// Before the first load: a replica starting while the shared `record` says where the
    /// rollout is. The stable store gets `stable` (the source as it was at the record's stable
    /// revision); the first load, which the caller reads at [`Record::load_revision`], then goes
    /// to the canary store, and [`Rollout::start_at`] takes up the record's candidate: soaking
    /// again, halted with the same reason (the canaries on the stable state), or dropped.
    pub fn resume_from(
        &self,
        record: Record,
        stable: Vec<ResourceInput>,
    ) -> Result<(), StoreError> {
        let mut inner = self.lock();
        self.stable.replace_all(stable)?;
        inner.stable_revision = Some(record.stable_revision);
        inner.resume = Some(record);
        Ok(())
    }

    /// Counts promotions and halts, and the state, in `metrics`.
    pub fn set_metrics(&self, metrics: Metrics) {
        let state = self.lock().gate.state(Instant::now());
        metrics.rollout_state(state.name());
        *self.metrics.lock().unwrap_or_else(|e| e.into_inner()) = Some(metrics);
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The store every client outside the cohort reads.
    pub fn stable_store(&self) -> &Store {
        &self.stable
    }

    /// The store the source's changes go to, which the cohort's clients read.
    pub fn canary_store(&self) -> &Store {
        &self.canary
    }

    /// The cohort.
    pub fn cohort(&self) -> &Cohort {
        &self.cohort
    }

    /// Whether `node` is in the cohort.
    pub fn is_canary(&self, node: &ClientNode) -> bool {
        self.cohort.contains(node)
    }

    /// The store a client with the encoded `node` reads (the stable one for a node that cannot
    /// be read: its session refuses it anyway; and for one with neither id nor cluster, which
    /// the session does not identify: the gate could not count its ACKs and NACKs).
    pub fn store_for_raw(&self, node: &[u8]) -> &Store {
        match Node::decode(node)
            .ok()
            .filter(|n| !(n.id.is_empty() && n.cluster.is_empty()))
            .and_then(|n| ClientNode::from_node(&n).ok())
        {
            Some(node) if self.is_canary(&node) => &self.canary,
            _ => &self.stable,
        }
    }

    /// Before the answer of a stream's request that says what its client holds (see
    /// [`crate::rollout`]): with replicas sharing the rollout, a client outside the cohort
    /// that holds, of a type the candidate changed, the candidate's versions waits (at most
    /// [`HOLD_BOUND`]) until the candidate is decided here, while the shared record is read
    /// again at once ([`SharedState::refresh`]). Nothing is promoted on the client's word: it is
    /// answered from the stable state when the wait ends, promoted or not.
    pub(crate) fn hold(&self, hold: Hold<'_>) -> Option<Pin<Box<dyn Future<Output = ()> + Send>>> {
        let shared = self
            .shared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()?;
        let store = match hold.node {
            Some(node) => self.store_for_raw(node),
            None => hold.store,
        };
        if !store.same_as(&self.stable) {
            return None;
        }
        let (generation, revision) = {
            let inner = self.lock();
            let generation = inner.gate.candidate()?;
            let revision = inner.gate.candidate_revision()?;
            if !inner.gate.touched().any(|t| t == hold.type_url) {
                return None;
            }
            (generation, revision)
        };
        // The client's parameters for the type (what its SotW view of a type with variants is).
        let decoded = match hold.client {
            Some(_) => None,
            None => hold
                .node
                .and_then(|n| Node::decode(n).ok())
                .and_then(|n| ClientNode::from_node(&n).ok()),
        };
        let params = hold
            .client
            .or(decoded.as_ref())
            .map(|c| c.params_for(hold.type_url).clone())
            .unwrap_or_default();
        let (candidate, stable) = (self.canary.snapshot(), self.stable.snapshot());
        if !holds_candidate(&candidate, &stable, hold.type_url, hold.held, &params) {
            return None;
        }
        let mut decided = self.decided.subscribe();
        let (stream, type_url) = (hold.stream, hold.type_url.to_owned());
        info!(
            stream,
            type_url = %type_url,
            candidate_revision = revision,
            "rollout: a client outside the cohort holds the candidate's versions (another replica \
             may have promoted it): its answer waits while the shared rollout record is read again \
             (at most {HOLD_BOUND:?})"
        );
        shared.refresh();
        Some(Box::pin(async move {
            let waited = tokio::time::timeout(
                HOLD_BOUND,
                decided.wait_for(|(c, _)| *c != Some(generation)),
            )
            .await
            .map(|now| now.is_ok_and(|now| now.1 >= generation));
            match waited {
                Ok(true) => info!(
                    stream,
                    type_url = %type_url,
                    candidate_revision = revision,
                    "rollout: the candidate the client holds is promoted here too: answered"
                ),
                Ok(false) => info!(
                    stream,
                    type_url = %type_url,
                    candidate_revision = revision,
                    "rollout: the candidate the client holds was not promoted (halted, aborted or \
                     replaced): answered from the stable state"
                ),
                Err(_) => warn!(
                    stream,
                    type_url = %type_url,
                    candidate_revision = revision,
                    "rollout: the shared rollout record did not promote the candidate the client \
                     holds within {HOLD_BOUND:?}: answered from the stable state (it may go back \
                     until the promotion arrives)"
                ),
            }
        }))
    }

    /// After the first load of the canary store: the stable store starts with the same state.
    pub fn start(&self) -> Result<UpdateSummary, StoreError> {
        let _inner = self.lock();
        self.stable.replace_with(&self.canary.snapshot())
    }

    /// [`Rollout::start`] after a first load that is the source's `revision`. After
    /// [`Rollout::resume_from`], the stable store keeps what it was given and the shared
    /// record's candidate is taken up instead.
    pub fn start_at(&self, revision: Option<i64>) -> Result<(), StoreError> {
        let mut inner = self.lock();
        inner.canary_revision = revision;
        let Some(record) = inner.resume.take() else {
            inner.stable_revision = revision;
            return self
                .stable
                .replace_with(&self.canary.snapshot())
                .map(|_| ());
        };
        let canary = self.canary.snapshot();
        let touched = differing_types(&canary, &self.stable.snapshot());
        info!(
            stable_revision = record.stable_revision,
            candidate_revision = record.candidate_revision,
            state = record.state.name(),
            "rollout: taking up the rollout the replicas share: the stable state is the source at \
             revision {}",
            record.stable_revision
        );
        if !touched.is_empty() {
            inner.proposed_at = Some(SystemTime::now());
            let actions =
                inner
                    .gate
                    .propose_at(Instant::now(), canary.generation(), revision, touched);
            self.apply(&mut inner, actions, By::Elsewhere);
            if let Some(decision) = record.decision() {
                let actions = inner
                    .gate
                    .decided_elsewhere(record.candidate_revision, decision);
                self.apply(&mut inner, actions, By::Elsewhere);
            }
        }
        self.after(&inner);
        Ok(())
    }

    /// Commits a change to the canary store with `commit`, and starts (or restarts) a rollout
    /// of it when it changed something the stable state does not have.
    pub fn commit<E>(
        &self,
        commit: impl FnOnce(&Store) -> Result<UpdateSummary, E>,
    ) -> Result<UpdateSummary, E> {
        self.commit_at(None, commit)
    }

    /// [`Rollout::commit`] of a change that is the source's `revision` (etcd's): the candidate
    /// is known to every replica by it.
    pub fn commit_at<E>(
        &self,
        revision: Option<i64>,
        commit: impl FnOnce(&Store) -> Result<UpdateSummary, E>,
    ) -> Result<UpdateSummary, E> {
        let mut inner = self.lock();
        let summary = commit(&self.canary)?;
        // The source changed again after an abort: what it holds is what it rolls out now.
        inner.aborted = None;
        if summary.changed == 0 {
            return Ok(summary);
        }
        if revision.is_some() {
            inner.canary_revision = revision;
        }
        let now = Instant::now();
        let touched = differing_types(&self.canary.snapshot(), &self.stable.snapshot());
        if touched.is_empty() {
            // Back to the stable state: nothing to roll out.
            if inner.gate.candidate().is_some() {
                info!("rollout: the candidate was changed back to the stable state; nothing to roll out");
                inner.gate.abort();
                if let Some(revision) = revision {
                    self.publish(&inner, revision, RecordState::Aborted);
                }
            }
        } else if self.stable.snapshot().types().all(|t| t.is_empty()) {
            info!(
                generation = summary.generation,
                "rollout: nothing was served yet, so the first resources go to every client at once, not through the canaries"
            );
            let actions = inner.gate.propose_first(summary.generation);
            // Not shared: each replica that starts empty does the same with its first change.
            self.apply(&mut inner, actions, By::Here(None));
        } else {
            info!(
                generation = summary.generation,
                types = %touched.join(","),
                soak = ?inner.gate.config().soak,
                min_canaries = inner.gate.config().min_canaries,
                "rollout: a change goes to the canary cohort first"
            );
            if inner.gate.canaries().next().is_none() {
                warn!(
                    cohort = %self.cohort_text(),
                    min_canaries = inner.gate.config().min_canaries,
                    "rollout: no connected client is in the canary cohort: the change waits until one connects and ACKs it (or POST /rollout/promote on the admin API)"
                );
            }
            inner.proposed_at = Some(SystemTime::now());
            let actions = inner
                .gate
                .propose_at(now, summary.generation, revision, touched);
            self.apply(&mut inner, actions, By::Here(revision));
            if let Some(revision) = revision.filter(|r| inner.gate.candidate_revision() == Some(*r))
            {
                self.publish(&inner, revision, RecordState::Soaking);
            }
        }
        self.after(&inner);
        Ok(summary)
    }

    /// A canary stream identified its node.
    pub fn connected(&self, client: ClientId, node: &str) {
        self.lock().gate.connected(client, node);
    }

    /// A canary stream ended.
    pub fn disconnected(&self, client: ClientId) {
        let mut inner = self.lock();
        let by = By::Here(inner.gate.candidate_revision());
        let actions = inner.gate.disconnected(Instant::now(), client);
        self.apply(&mut inner, actions, by);
        self.after(&inner);
    }

    /// A canary stream's client ACKed a response of `type_url` built from the canary store at
    /// `generation`.
    pub fn acked(&self, client: ClientId, type_url: &str, generation: u64) {
        let mut inner = self.lock();
        let by = By::Here(inner.gate.candidate_revision());
        let actions = inner.gate.ack(Instant::now(), client, type_url, generation);
        self.apply(&mut inner, actions, by);
        self.after(&inner);
    }

    /// A canary stream's client NACKed a response built from the canary store at `generation`.
    pub fn nacked(&self, client: ClientId, generation: u64, mut detail: NackDetail) {
        let mut inner = self.lock();
        if detail.origins.is_empty() {
            detail.origins = changed_origins(
                &self.canary.snapshot(),
                &self.stable.snapshot(),
                &detail.type_url,
            );
        }
        let by = By::Here(inner.gate.candidate_revision());
        let actions = inner.gate.nack(client, generation, detail);
        self.apply(&mut inner, actions, by);
        self.after(&inner);
    }

    /// Promotes the candidate now (the admin API's `POST /rollout/promote`); false when there
    /// is none.
    pub fn promote(&self) -> bool {
        let mut inner = self.lock();
        let by = By::Here(inner.gate.candidate_revision());
        let actions = inner.gate.promote();
        let any = !actions.is_empty();
        if any {
            info!("rollout: promoted by an operator");
        }
        self.apply(&mut inner, actions, by);
        self.after(&inner);
        any
    }

    /// Drops the candidate, the canaries back on the stable state, and forgets a halt (the
    /// admin API's `POST /rollout/abort`); false when there was nothing to drop.
    pub fn abort(&self) -> bool {
        let mut inner = self.lock();
        let was = inner.gate.state(Instant::now());
        let candidate = inner
            .gate
            .candidate_revision()
            .or(inner.gate.halted_revision());
        let generation = inner.gate.candidate();
        let actions = inner.gate.abort();
        if was != State::Idle {
            info!("rollout: aborted by an operator; the source holds a change no client is served: edit what it touched again (or restart xdsd) to roll it out");
            inner.aborted = Some(Aborted {
                at: SystemTime::now(),
                generation,
                revision: candidate,
            });
            if let Some(revision) = candidate {
                self.publish(&inner, revision, RecordState::Aborted);
            }
        }
        self.apply(&mut inner, actions, By::Elsewhere);
        self.after(&inner);
        was != State::Idle
    }

    /// Keeps time for the gate (promotes once a soak is over), for as long as the program runs.
    async fn run(self: Arc<Self>) {
        loop {
            let next = self.lock().gate.next_tick();
            let woken = self.wake.notified();
            match next {
                Some(at) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(at.into()) => {}
                        _ = woken => {}
                    }
                }
                None => woken.await,
            }
            let mut inner = self.lock();
            let by = By::Here(inner.gate.candidate_revision());
            let actions = inner.gate.tick(Instant::now());
            self.apply(&mut inner, actions, by);
            // (Not `after`: waking itself would spin.)
            self.tell_decided(&inner);
            let state = inner.gate.state(Instant::now());
            self.count(|m| m.rollout_state(state.name()));
        }
    }

    /// Adopts what the other replicas decided (a shared record, as it changes): done here too
    /// when it is about this replica's candidate, or once that change arrives when it is about
    /// one not seen yet (see [`Gate::decided_elsewhere`]).
    pub fn adopt(&self, record: Record) {
        let Some(decision) = record.decision() else {
            return;
        };
        let mut inner = self.lock();
        let actions = inner
            .gate
            .decided_elsewhere(record.candidate_revision, decision);
        if !actions.is_empty() {
            info!(
                candidate_revision = record.candidate_revision,
                "rollout: {} on another replica; the same here",
                record.state.name()
            );
        }
        self.apply(&mut inner, actions, By::Elsewhere);
        self.after(&inner);
    }

    /// Writes the shared record of a decision taken here about the candidate of `revision`.
    fn publish(&self, inner: &Inner, revision: i64, state: RecordState) {
        let shared = self
            .shared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let Some(shared) = shared else { return };
        let stable = inner.stable_revision.unwrap_or(0);
        let mut record = Record::new(stable, revision, state);
        if state == RecordState::Halted {
            if let State::Halted(halt) = inner.gate.state(Instant::now()) {
                record = record.with_halt(halt);
            }
        }
        shared.publish(record);
    }

    /// Carries out the gate's actions on the stores (under the lock: no change of the source
    /// falls between), sharing the decision when it was taken here.
    fn apply(&self, inner: &mut Inner, actions: Vec<Action>, by: By) {
        for action in actions {
            match action {
                Action::Promote { generation } => {
                    match self.stable.replace_with(&self.canary.snapshot()) {
                        Ok(summary) => {
                            inner.promotions += 1;
                            inner.proposed_at = None;
                            inner.aborted = None;
                            inner.stable_revision = inner.canary_revision;
                            self.count(|m| m.rollout_promoted());
                            info!(
                                canary_generation = generation,
                                generation = summary.generation,
                                changed = summary.changed,
                                "rollout: promoted, every client gets the change"
                            );
                            if let By::Here(Some(revision)) = by {
                                self.publish(inner, revision, RecordState::Promoted);
                            }
                        }
                        Err(e) => {
                            error!("rollout: the promotion could not be committed: {e}")
                        }
                    }
                }
                Action::RollBack => {
                    if let State::Halted(halt) = inner.gate.state(Instant::now()) {
                        inner.halts += 1;
                        self.count(|m| m.rollout_halted());
                        error!(
                            node = %crate::logsafe::shown(&halt.node),
                            type_url = %halt.type_url,
                            version = %crate::logsafe::shown(&halt.version),
                            message = %crate::logsafe::shown(&halt.message),
                            origins = %halt.origins.join(", "),
                            "rollout halted: a canary NACKed the change; the canaries are rolled back to the stable state, the change is not promoted"
                        );
                        if let By::Here(Some(revision)) = by {
                            self.publish(inner, revision, RecordState::Halted);
                        }
                    }
                    inner.proposed_at = None;
                    if let Err(e) = self.canary.replace_with(&self.stable.snapshot()) {
                        error!("rollout: the roll back could not be committed: {e}");
                    }
                }
            }
        }
    }

    /// After any input: the state in metrics, the timer woken.
    fn after(&self, inner: &Inner) {
        self.tell_decided(inner);
        let state = inner.gate.state(Instant::now());
        self.count(|m| m.rollout_state(state.name()));
        self.wake.notify_one();
    }

    /// Tells the held answers ([`Rollout::hold`]) where the candidate is.
    fn tell_decided(&self, inner: &Inner) {
        let now = (inner.gate.candidate(), inner.gate.promoted());
        self.decided.send_if_modified(|was| {
            let changed = *was != now;
            *was = now;
            changed
        });
    }

    fn count(&self, f: impl FnOnce(&Metrics)) {
        if let Some(m) = &*self.metrics.lock().unwrap_or_else(|e| e.into_inner()) {
            f(m);
        }
    }

    /// The cohort's selectors, as `--canary` takes them (comma-separated).
    fn cohort_text(&self) -> String {
        let selectors: Vec<String> = self
            .cohort
            .selectors()
            .iter()
            .map(|s| s.to_string())
            .collect();
        selectors.join(",")
    }

    /// The rollout as JSON, for the admin API's `GET /rollout`.
    pub fn status_json(&self) -> Value {
        let inner = self.lock();
        let now = Instant::now();
        let state = inner.gate.state(now);
        let versions = |s: &Snapshot| -> BTreeMap<String, String> {
            s.types()
                .map(|t| (t.type_url().to_string(), t.version().to_string()))
                .collect()
        };
        let (stable, canary) = (self.stable.snapshot(), self.canary.snapshot());
        let mut out = json!({
            "state": state.name(),
            "cohort": self.cohort.selectors().iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            "min_canaries": inner.gate.config().min_canaries,
            "soak_seconds": inner.gate.config().soak.as_secs_f64(),
            "stable": {
                "generation": stable.generation(),
                "versions": versions(&stable),
                "revision": inner.stable_revision,
            },
            "promotions": inner.promotions,
            "halts": inner.halts,
            "canaries": inner.gate.canaries().map(|(id, c)| json!({
                "stream": id,
                "node": c.node,
                "acked": c.acked,
                "nacked": c.nacked.as_ref().map(|(t, m)| json!({"type_url": t, "message": m})),
            })).collect::<Vec<_>>(),
        });
        if let Some(generation) = inner.gate.candidate() {
            out["candidate"] = json!({
                "generation": generation,
                "revision": inner.gate.candidate_revision(),
                "versions": versions(&canary),
                "touched": inner.gate.touched().collect::<Vec<_>>(),
                "proposed_at_unix_ms": inner.proposed_at
                    .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                    .map(|d| d.as_millis() as u64),
            });
        }
        if let State::Soaking { until, .. } = &state {
            out["soak_left_seconds"] = json!(until.saturating_duration_since(now).as_secs_f64());
        }
        let connected = inner.gate.canaries().count();
        out["canaries_connected"] = json!(connected);
        if connected == 0 {
            out["cohort_empty"] = json!(format!(
                "no connected client is in the cohort ({}): a change waits until one connects and ACKs it",
                self.cohort_text()
            ));
        }
        if let Some(aborted) = &inner.aborted {
            out["held_change"] = json!({
                "aborted_at_unix_ms": aborted.at.duration_since(UNIX_EPOCH).ok().map(|d| d.as_millis() as u64),
                "generation": aborted.generation,
                "revision": aborted.revision,
                "message": "aborted by an operator: the source holds a change no client is served; edit what it touched again (or restart xdsd) to roll it out",
            });
        }
        if let State::Halted(halt) = &state {
            let mut shown = halt.to_json();
            shown["generation"] = json!(halt.generation);
            shown["revision"] = json!(inner.gate.halted_revision());
            out["halt"] = shown;
        }
        out
    }
}

/// The types whose versions differ between two states (present in one only included).
fn differing_types(a: &Snapshot, b: &Snapshot) -> Vec<String> {
    let versions = |s: &Snapshot| -> BTreeMap<String, String> {
        s.types()
            .map(|t| (t.type_url().to_string(), t.version().to_string()))
            .collect()
    };
    let (a, b) = (versions(a), versions(b));
    let mut out: Vec<String> = a
        .iter()
        .filter(|(t, v)| b.get(*t) != Some(v))
        .map(|(t, _)| t.clone())
        .collect();
    out.extend(b.keys().filter(|t| !a.contains_key(*t)).cloned());
    out
}

/// The origins of the resources of `type_url` that the canary state has and the stable one has
/// not (what a NACK of the candidate is about), at most a few.
fn changed_origins(canary: &Snapshot, stable: &Snapshot, type_url: &str) -> Vec<String> {
    let Some(t) = canary.get(type_url) else {
        return Vec::new();
    };
    let old = stable.get(type_url);
    let mut out = Vec::new();
    for (name, variants) in t.entries() {
        let before = old.map(|o| o.variants(name)).unwrap_or(&[]);
        for v in variants {
            if !before.iter().any(|b| b.version() == v.version()) {
                if let Some(origin) = v.origin() {
                    out.push(origin.to_string());
                }
            }
        }
        if out.len() >= crate::store::MAX_LISTED {
            break;
        }
    }
    out
}

/// A [`crate::Feed`] of a rollout commits to its canary store through the gate, and its first
/// load to both stores.
impl CommitTarget for Rollout {
    fn store(&self) -> &Store {
        &self.canary
    }

    fn commit(&self, update: Update, revision: Option<i64>) -> Result<UpdateSummary, StoreError> {
        self.commit_at(revision, |store| update.apply(store))
    }

    fn first_load(
        &self,
        update: Update,
        revision: Option<i64>,
    ) -> Result<UpdateSummary, StoreError> {
        // Not gated: the stable state starts as the first load (or as the shared record says,
        // see `Rollout::resume_from`).
        let summary = update.apply(&self.canary)?;
        self.start_at(revision)?;
        Ok(summary)
    }
}

impl XdsServerBuilder {
    /// Gates every change through `rollout` (see [`crate::rollout`]): the clients of its cohort
    /// read its canary store, every other client its stable store, which the server serves in
    /// place of the store it was built over.
    pub fn rollout(self, rollout: Arc<Rollout>) -> Self {
        self.picker(Arc::new(Canaries::new(rollout)))
    }
}

impl ServerHandle {
    /// The gated rollout the server serves, if any ([`XdsServerBuilder::rollout`]).
    pub fn rollout(&self) -> Option<Arc<Rollout>> {
        let picker = self.context().picker.as_ref()?;
        let canaries = picker.as_any().downcast_ref::<Canaries>()?;
        Some(canaries.rollout().clone())
    }
}
