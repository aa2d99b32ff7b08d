//! The rollout gate, sans-I/O: which generation of the configuration each client gets while a
//! change rolls out to a canary cohort first.
//!
//! Two states of the configuration are served side by side: the *stable* one, which every client
//! outside the cohort gets, and the *canary* one, which the cohort's clients get. A change from
//! the source goes to the canary state at once (the caller commits it there and tells the gate,
//! [`Gate::propose`]); the gate then watches the canary clients' answers:
//!
//! - once at least [`GateConfig::min_canaries`] canary clients have ACKed every type the change
//!   touched, and [`GateConfig::soak`] has passed since the change with no NACK, the change is
//!   promoted ([`Action::Promote`]: the caller makes the canary state the stable one);
//! - a NACK of the change by a canary client halts the rollout ([`Action::RollBack`]: the caller
//!   serves the stable state to the canaries again); the next change starts a new rollout;
//! - a change arriving during a rollout replaces the candidate and restarts the soak.
//!
//! The canary state counts its own generations (each commit to it is one); an answer counts for
//! the candidate when it is about a response built from the candidate's generation or a later
//! one. Time is an input ([`Instant`]s passed in), so every rule is tested without waiting.
//!
//! With several replicas sharing a source that has revisions (etcd), a candidate also carries
//! the source's revision, and a decision taken elsewhere about a revision
//! ([`Gate::decided_elsewhere`]) is adopted here: promoted, halted or aborted the same way, at
//! once when it is about the candidate, or once that revision's change arrives when it is about
//! one not seen yet.
//!
//! A client outside the cohort that comes (back) holding, of a type the candidate changed, the
//! candidate's versions ([`holds_candidate`]) was served the candidate by a replica that promoted
//! it, before this one heard of the promotion. It is not promoted on that client's word (a client
//! that knows or guesses the candidate's version would otherwise push an unvetted change to
//! everyone): its answer waits, at most [`HOLD_BOUND`], while the shared record is read again;
//! it is answered from the stable state then, which is the candidate if the record promoted it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::params::ParamSet;
use crate::protocol::identity::Glob;
use crate::protocol::session::ClientNode;
use crate::store::Snapshot;
use crate::transport::picker::Held;

/// A client of the gate: one stream (the caller's id for it).
pub type ClientId = u64;

/// How the gate decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct GateConfig {
    /// Canary clients that must have ACKed every type a change touched before it is promoted.
    pub min_canaries: usize,
    /// How long a change stays with the canaries, with no NACK, before it is promoted.
    pub soak: Duration,
}

impl Default for GateConfig {
    fn default() -> Self {
        GateConfig {
            min_canaries: 1,
            soak: Duration::from_secs(60),
        }
    }
}

impl GateConfig {
    /// Sets [`GateConfig::min_canaries`] (at least 1).
    pub fn min_canaries(mut self, n: usize) -> Self {
        self.min_canaries = n.max(1);
        self
    }

    /// Sets [`GateConfig::soak`].
    pub fn soak(mut self, soak: Duration) -> Self {
        self.soak = soak;
        self
    }
}

/// What the caller must do after an input.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Action {
    /// Make the canary state (at `generation`) the stable one: every client gets it.
    Promote {
        /// The canary store's generation to promote.
        generation: u64,
    },
    /// Serve the stable state to the canary clients again: the candidate was halted or aborted.
    RollBack,
}

/// Why a rollout halted: the NACK that stopped it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Halt {
    /// The canary generation that was NACKed.
    pub generation: u64,
    /// The client's node id.
    pub node: String,
    /// The type of the NACKed response.
    pub type_url: String,
    /// The version the client NACKed.
    pub version: String,
    /// The client's error message.
    pub message: String,
    /// The files or keys of the resources the message names (as CSDS shows them).
    pub origins: Vec<String>,
}

/// Where a rollout is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum State {
    /// No candidate: every client has the stable state.
    Idle,
    /// A candidate is with the canaries, its soak not over.
    Soaking {
        /// The candidate's generation.
        generation: u64,
        /// When the soak ends.
        until: Instant,
    },
    /// The soak is over but fewer than [`GateConfig::min_canaries`] canaries ACKed it.
    WaitingForCanaries {
        /// The candidate's generation.
        generation: u64,
    },
    /// A canary NACKed the candidate: the canaries are back on the stable state.
    Halted(Box<Halt>),
}

impl State {
    /// One word for logs, metrics and the admin API: `idle`, `soaking`, `waiting for canaries`,
    /// `halted`.
    pub fn name(&self) -> &'static str {
        match self {
            State::Idle => "idle",
            State::Soaking { .. } => "soaking",
            State::WaitingForCanaries { .. } => "waiting for canaries",
            State::Halted(_) => "halted",
        }
    }
}

/// A canary client and what it answered of the candidate.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Canary {
    /// The canary's node id.
    pub node: String,
    /// The touched types it ACKed at the candidate's generation or later.
    pub acked: BTreeSet<String>,
    /// Its NACK of the candidate, if any: (type URL, message).
    pub nacked: Option<(String, String)>,
}

/// A decision about a candidate taken elsewhere (another replica, through shared state).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decision {
    /// The candidate was promoted.
    Promoted,
    /// The candidate was halted by this NACK (its `generation` is ignored: the local candidate's
    /// is used).
    Halted(Box<Halt>),
    /// The candidate was dropped by an operator (and a halt of it cleared).
    Aborted,
}

/// The candidate being rolled out.
#[derive(Debug, Clone)]
struct Candidate {
    generation: u64,
    /// The source's revision of the change (etcd), when it has one.
    revision: Option<i64>,
    touched: BTreeSet<String>,
    soak_until: Instant,
}

/// The gate: see the module's documentation.
#[derive(Debug, Clone)]
pub struct Gate {
    config: GateConfig,
    candidate: Option<Candidate>,
    halt: Option<Box<Halt>>,
    canaries: BTreeMap<ClientId, Canary>,
    /// The generation of the canary state that the stable one was last promoted from (0: none).
    promoted: u64,
    /// The latest source revision proposed.
    seen: Option<i64>,
    /// The revision of the candidate the current halt is about.
    halted_revision: Option<i64>,
    /// Decisions taken elsewhere about revisions not seen yet (at most [`MAX_PENDING`], the
    /// latest kept).
    pending: BTreeMap<i64, Decision>,
}

impl Gate {
    /// A gate with nothing to roll out.
    pub fn new(config: GateConfig) -> Gate {
        Gate {
            config,
            candidate: None,
            halt: None,
            canaries: BTreeMap::new(),
            promoted: 0,
            seen: None,
            halted_revision: None,
            pending: BTreeMap::new(),
        }
    }

    /// Its configuration.
    pub fn config(&self) -> GateConfig {
        self.config
    }

    /// Where the rollout is.
    pub fn state(&self, now: Instant) -> State {
        if let Some(halt) = &self.halt {
            return State::Halted(halt.clone());
        }
        match &self.candidate {
            None => State::Idle,
            Some(c) if now < c.soak_until => State::Soaking {
                generation: c.generation,
                until: c.soak_until,
            },
            Some(c) => State::WaitingForCanaries {
                generation: c.generation,
            },
        }
    }

    /// The canary clients connected, with their answers.
    pub fn canaries(&self) -> impl Iterator<Item = (ClientId, &Canary)> {
        self.canaries.iter().map(|(id, c)| (*id, c))
    }

    /// The canary generation being rolled out, if any.
    pub fn candidate(&self) -> Option<u64> {
        self.candidate.as_ref().map(|c| c.generation)
    }

    /// The source revision of the candidate, if any and if the source has revisions.
    pub fn candidate_revision(&self) -> Option<i64> {
        self.candidate.as_ref().and_then(|c| c.revision)
    }

    /// The source revision of the candidate the current halt is about.
    pub fn halted_revision(&self) -> Option<i64> {
        self.halt.as_ref().and(self.halted_revision)
    }

    /// The types the candidate touched.
    pub fn touched(&self) -> impl Iterator<Item = &str> {
        self.candidate
            .iter()
            .flat_map(|c| c.touched.iter().map(String::as_str))
    }

    /// The canary generation the stable state was last promoted from (0: none yet).
    pub fn promoted(&self) -> u64 {
        self.promoted
    }

    /// A change was committed to the canary state as `generation`, touching `types`: the canaries
    /// have it, the soak starts (again, when it replaces a candidate). After a halt, this starts
    /// a new rollout.
    pub fn propose(
        &mut self,
        now: Instant,
        generation: u64,
        types: impl IntoIterator<Item = String>,
    ) -> Vec<Action> {
        self.propose_at(now, generation, None, types)
    }

    /// [`Gate::propose`] of a change that is the source's `revision`: a decision about that
    /// revision taken elsewhere and already received ([`Gate::decided_elsewhere`]) applies to it
    /// at once.
    pub fn propose_at(
        &mut self,
        now: Instant,
        generation: u64,
        revision: Option<i64>,
        types: impl IntoIterator<Item = String>,
    ) -> Vec<Action> {
        self.halt = None;
        self.halted_revision = None;
        let mut touched: BTreeSet<String> = types.into_iter().collect();
        // A candidate replaced: what it touched still differs from the stable state.
        if let Some(old) = self.candidate.take() {
            touched.extend(old.touched);
        }
        for canary in self.canaries.values_mut() {
            canary.acked.clear();
            canary.nacked = None;
        }
        self.candidate = Some(Candidate {
            generation,
            revision,
            touched,
            soak_until: now + self.config.soak,
        });
        if let Some(revision) = revision {
            self.seen = Some(self.seen.map_or(revision, |s| s.max(revision)));
            // Decisions about revisions passed over are dropped, those still ahead kept.
            self.pending = self.pending.split_off(&revision);
            if let Some(decision) = self.pending.remove(&revision) {
                return self.decided_elsewhere(revision, decision);
            }
        }
        self.decide(now)
    }

    /// The first resources after an empty start, as `generation`: nothing was served that they
    /// could break and no client holds a config to keep, so they are promoted at once rather
    /// than waiting for canaries (with a cohort no connected node falls in, they would wait
    /// forever). A candidate in flight (or a halt) is dropped with them.
    pub fn propose_first(&mut self, generation: u64) -> Vec<Action> {
        self.halt = None;
        self.halted_revision = None;
        self.candidate = None;
        for canary in self.canaries.values_mut() {
            canary.acked.clear();
            canary.nacked = None;
        }
        self.promoted = generation;
        vec![Action::Promote { generation }]
    }

    /// Another replica decided about the candidate of the source's `revision`: the same is done
    /// here when it is this gate's candidate (promoted, or halted with the same reason, or
    /// dropped), remembered when this gate has not seen that revision yet (it applies once that
    /// change is proposed), ignored otherwise (a candidate this gate is past, or one it already
    /// decided about itself).
    pub fn decided_elsewhere(&mut self, revision: i64, decision: Decision) -> Vec<Action> {
        if self.candidate_revision() == Some(revision) {
            return match decision {
                Decision::Promoted => self.promote(),
                Decision::Aborted => self.abort(),
                Decision::Halted(mut halt) => {
                    let Some(candidate) = self.candidate.take() else {
                        return Vec::new();
                    };
                    halt.generation = candidate.generation;
                    halt.node = bounded(std::mem::take(&mut halt.node), MAX_NODE_BYTES);
                    halt.version = bounded(std::mem::take(&mut halt.version), MAX_NODE_BYTES);
                    halt.message = bounded(std::mem::take(&mut halt.message), MAX_MESSAGE_BYTES);
                    halt.origins.truncate(crate::store::MAX_LISTED);
                    self.halt = Some(halt);
                    self.halted_revision = Some(revision);
                    vec![Action::RollBack]
                }
            };
        }
        if decision == Decision::Aborted && self.halted_revision() == Some(revision) {
            // An operator elsewhere cleared the halt this gate has too.
            self.halt = None;
            self.halted_revision = None;
            return Vec::new();
        }
        if self.seen.is_none_or(|seen| revision > seen) {
            self.pending.insert(revision, decision);
            while self.pending.len() > MAX_PENDING {
                self.pending.pop_first();
            }
        }
        Vec::new()
    }

    /// A canary client connected (clients outside the cohort are not the gate's business).
    pub fn connected(&mut self, client: ClientId, node: impl Into<String>) {
        self.canaries.insert(
            client,
            Canary {
                node: bounded(node.into(), MAX_NODE_BYTES),
                acked: BTreeSet::new(),
                nacked: None,
            },
        );
    }

    /// A canary client went away: its ACKs no longer count (it is not there to show the
    /// candidate works).
    pub fn disconnected(&mut self, now: Instant, client: ClientId) -> Vec<Action> {
        self.canaries.remove(&client);
        self.decide(now)
    }

    /// A canary client ACKed a response of `type_url` built from the canary state at
    /// `generation`.
    pub fn ack(
        &mut self,
        now: Instant,
        client: ClientId,
        type_url: &str,
        generation: u64,
    ) -> Vec<Action> {
        let Some(candidate) = &self.candidate else {
            return Vec::new();
        };
        if generation < candidate.generation || !candidate.touched.contains(type_url) {
            return Vec::new();
        }
        if let Some(canary) = self.canaries.get_mut(&client) {
            canary.acked.insert(type_url.to_owned());
        }
        self.decide(now)
    }

    /// A canary client NACKed a response built from the canary state at `generation`: when it is
    /// the candidate's, the rollout halts and the canaries go back to the stable state.
    pub fn nack(&mut self, client: ClientId, generation: u64, halt: NackDetail) -> Vec<Action> {
        let Some(candidate) = &self.candidate else {
            return Vec::new();
        };
        if generation < candidate.generation {
            return Vec::new();
        }
        let Some(canary) = self.canaries.get_mut(&client) else {
            return Vec::new();
        };
        let message = bounded(halt.message, MAX_MESSAGE_BYTES);
        let version = bounded(halt.version, MAX_NODE_BYTES);
        canary.nacked = Some((halt.type_url.clone(), message.clone()));
        self.halted_revision = candidate.revision;
        self.halt = Some(Box::new(Halt {
            generation: candidate.generation,
            node: canary.node.clone(),
            type_url: halt.type_url,
            version,
            message,
            origins: halt.origins,
        }));
        self.candidate = None;
        vec![Action::RollBack]
    }

    /// Time passed: promotes a candidate whose soak is over and that enough canaries ACKed.
    pub fn tick(&mut self, now: Instant) -> Vec<Action> {
        self.decide(now)
    }

    /// When [`Gate::tick`] should be called next, if anything waits for time.
    pub fn next_tick(&self) -> Option<Instant> {
        self.candidate.as_ref().map(|c| c.soak_until)
    }

    /// Promotes the candidate now, whatever the soak and the canaries (an operator's decision).
    pub fn promote(&mut self) -> Vec<Action> {
        match self.candidate.take() {
            Some(c) => self.promoted_to(c.generation),
            None => Vec::new(),
        }
    }

    /// Drops the candidate (the canaries go back to the stable state) and forgets a halt: the
    /// gate is idle until the next change.
    pub fn abort(&mut self) -> Vec<Action> {
        self.halt = None;
        self.halted_revision = None;
        match self.candidate.take() {
            Some(_) => vec![Action::RollBack],
            None => Vec::new(),
        }
    }

    fn promoted_to(&mut self, generation: u64) -> Vec<Action> {
        self.promoted = generation;
        for canary in self.canaries.values_mut() {
            canary.acked.clear();
        }
        vec![Action::Promote { generation }]
    }

    /// The canaries that ACKed every touched type.
    fn ready_canaries(&self) -> usize {
        let Some(candidate) = &self.candidate else {
            return 0;
        };
        self.canaries
            .values()
            .filter(|c| c.nacked.is_none() && candidate.touched.is_subset(&c.acked))
            .count()
    }

    fn decide(&mut self, now: Instant) -> Vec<Action> {
        let Some(candidate) = &self.candidate else {
            return Vec::new();
        };
        if now < candidate.soak_until || self.ready_canaries() < self.config.min_canaries {
            return Vec::new();
        }
        let generation = candidate.generation;
        self.candidate = None;
        self.promoted_to(generation)
    }
}

/// The longest a client outside the cohort that holds the candidate's versions waits for its
/// answer while the shared record is read again (see the module): then it is answered from the
/// stable state as it is.
pub const HOLD_BOUND: Duration = Duration::from_secs(2);

/// Whether a client that says it holds `held` of `type_url` holds something of the candidate
/// state (`candidate`) that the stable state (`stable`) does not have: SotW, the candidate's
/// version of the type when it differs from the stable one's; delta, a resource at a version
/// the candidate has and the stable state has not. Versions are content hashes, the same on
/// every replica for the same content, so a client served the candidate by another replica
/// holds exactly these.
///
/// SotW on a type with variants (in either state): a client's `version_info` is the version of
/// its view of the type, the variants its parameters pick (`params`: its node's for the type),
/// or, when its subscriptions use several parameter sets, their views' versions joined by `.`.
/// It holds the candidate when one of them is the candidate's view for `params` and the stable
/// view for `params` differs (the change touched what this client sees).
pub(crate) fn holds_candidate(
    candidate: &Snapshot,
    stable: &Snapshot,
    type_url: &str,
    held: Held<'_>,
    params: &ParamSet,
) -> bool {
    let Some(new) = candidate.get(type_url) else {
        return false;
    };
    let old = stable.get(type_url);
    match held {
        Held::Version(version) if new.has_variants() || old.is_some_and(|o| o.has_variants()) => {
            let seen = new.view(params);
            let before = old.map(|o| o.view(params));
            version.split('.').any(|v| **seen.version() == *v)
                && before.is_none_or(|b| b.version() != seen.version())
        }
        Held::Version(version) => {
            **new.version() == *version && old.is_none_or(|o| **o.version() != *version)
        }
        Held::Answer { version, of } => {
            of(candidate).is_some_and(|v| v == version) && of(stable).is_none_or(|v| v != version)
        }
        Held::Resources(versions) => versions.iter().any(|(name, version)| {
            let (name, version) = (name.as_str(), version.as_str());
            let has = |variants: &[std::sync::Arc<crate::store::Resource>]| {
                variants.iter().any(|r| **r.version() == *version)
            };
            has(new.variants(name)) && !old.is_some_and(|o| has(o.variants(name)))
        }),
    }
}

/// The most of a client's node id the gate keeps (and of a NACKed version).
pub const MAX_NODE_BYTES: usize = 256;
/// The most decisions taken elsewhere, about revisions not seen yet, the gate keeps.
pub const MAX_PENDING: usize = 64;
/// The most of a NACK's message the gate keeps.
pub const MAX_MESSAGE_BYTES: usize = 4096;

/// `text` cut to at most `max` bytes, at a character boundary, marked when cut: what a client
/// sends is kept bounded.
fn bounded(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut at = max;
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        text.truncate(at);
        text.push('…');
    }
    text
}

/// What a NACK said, for [`Gate::nack`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct NackDetail {
    /// The type of the NACKed response.
    pub type_url: String,
    /// The version NACKed.
    pub version: String,
    /// The client's error message.
    pub message: String,
    /// The files or keys of the resources the message names.
    pub origins: Vec<String>,
}

impl NackDetail {
    /// A NACK of `version` of `type_url` with the client's `message`.
    pub fn new(
        type_url: impl Into<String>,
        version: impl Into<String>,
        message: impl Into<String>,
    ) -> NackDetail {
        NackDetail {
            type_url: type_url.into(),
            version: version.into(),
            message: message.into(),
            origins: Vec::new(),
        }
    }

    /// The files or keys of the resources the message names.
    pub fn with_origins(mut self, origins: Vec<String>) -> NackDetail {
        self.origins = origins;
        self
    }
}

/// Who is in the canary cohort: any of its selectors matches the client's node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cohort {
    selectors: Vec<Selector>,
}

/// One way of picking canary clients (`--canary`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Selector {
    /// `cluster=NAME`: the node's cluster.
    Cluster(String),
    /// `node=GLOB`: the node id, `*` for any run of characters.
    Node(Glob, String),
    /// `metadata.KEY=VALUE`: a top-level string field of the node's metadata.
    Metadata {
        /// The metadata key.
        key: String,
        /// Its value.
        value: String,
    },
    /// `N%`: a stable hash of the node id below N of 100 (the same node is in or out on every
    /// connection and every replica).
    Percent(u8),
}

impl Selector {
    /// Parses `cluster=NAME`, `node=GLOB`, `metadata.KEY=VALUE` or `N%`.
    pub fn parse(text: &str) -> Result<Selector, String> {
        let text = text.trim();
        if let Some(n) = text.strip_suffix('%') {
            return match n.trim().parse::<u8>() {
                Ok(n) if n <= 100 => Ok(Selector::Percent(n)),
                _ => Err(format!("{text:?}: a percentage is 0% to 100%")),
            };
        }
        let Some((key, value)) = text.split_once('=') else {
            return Err(format!(
                "{text:?}: expected cluster=NAME, node=GLOB, metadata.KEY=VALUE or N%"
            ));
        };
        if value.is_empty() {
            return Err(format!("{text:?}: the value after = is empty"));
        }
        match key {
            "cluster" => Ok(Selector::Cluster(value.to_owned())),
            "node" => Ok(Selector::Node(Glob::new(value), value.to_owned())),
            _ => match key.strip_prefix("metadata.") {
                Some(k) if !k.is_empty() => Ok(Selector::Metadata {
                    key: k.to_owned(),
                    value: value.to_owned(),
                }),
                _ => Err(format!(
                    "{text:?}: unknown selector {key:?}: expected cluster, node, metadata.KEY or N%"
                )),
            },
        }
    }

    /// Whether `node` is selected.
    pub fn matches(&self, node: &ClientNode) -> bool {
        match self {
            Selector::Cluster(c) => node.cluster == *c,
            Selector::Node(glob, _) => glob.matches(&node.id),
            Selector::Metadata { key, value } => node.derived.get(key) == Some(value.as_str()),
            Selector::Percent(n) => percentile(&node.id) < *n,
        }
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Selector::Cluster(c) => write!(f, "cluster={c}"),
            Selector::Node(_, pattern) => write!(f, "node={pattern}"),
            Selector::Metadata { key, value } => write!(f, "metadata.{key}={value}"),
            Selector::Percent(n) => write!(f, "{n}%"),
        }
    }
}

/// Where a node id falls in 0..100, the same on every replica and every run.
fn percentile(id: &str) -> u8 {
    let digest = Sha256::digest(id.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(first) % 100) as u8
}

impl Cohort {
    /// A cohort of the clients any of `selectors` picks.
    pub fn new(selectors: Vec<Selector>) -> Cohort {
        Cohort { selectors }
    }

    /// Whether it picks no one (no gate).
    pub fn is_empty(&self) -> bool {
        self.selectors.is_empty()
    }

    /// Its selectors.
    pub fn selectors(&self) -> &[Selector] {
        &self.selectors
    }

    /// Whether `node` is a canary.
    pub fn contains(&self, node: &ClientNode) -> bool {
        self.selectors.iter().any(|s| s.matches(node))
    }
}

pub(crate) mod observer;
mod run;
mod shared;
pub use run::Rollout;
pub use shared::{Record, RecordState, SharedState, RECORD_KEY};

#[cfg(test)]
mod tests;
