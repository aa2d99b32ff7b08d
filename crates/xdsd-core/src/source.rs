//! Where resources come from: a [`Source`] (a watched directory, etcd, or an embedder's own)
//! is loaded once, then hands out its changes; a [`Feed`] commits them to a [`Store`] and keeps
//! what a server reports of its source (readiness, metrics, one log line per outcome) up to date.
//!
//! The same rules hold for every source: a change is committed whole or not at all (the last
//! good state keeps being served), a change that would leave the store with no resources at all
//! where some were served is refused unless [`Feed::allow_empty`] says it is intended, and the
//! server is ready while the source can be read.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tracing::{error, info, warn};

use crate::metrics::{Metrics, Reload};
use crate::ready::Readiness;
use crate::store::{PendingNames, ResourceInput, Store, StoreError, UpdateSummary, MAX_LISTED};

/// What a change makes the store hold.
#[derive(Debug)]
#[non_exhaustive]
pub enum Update {
    /// Everything the source holds: the store's content is replaced by these
    /// ([`Store::replace_all`]).
    All(Vec<ResourceInput>),
    /// Only these `(type URL, name)` changed; `resources` are every resource those names have now
    /// (a name without any is removed), the other names are kept ([`Store::replace_names`]).
    Names {
        /// The `(type URL, name)` pairs that changed.
        names: Vec<(String, String)>,
        /// Every resource (variant) those names have now.
        resources: Vec<ResourceInput>,
    },
}

impl Update {
    /// Commits it to `store`.
    pub fn apply(self, store: &Store) -> Result<UpdateSummary, StoreError> {
        match self {
            Update::All(resources) => store.replace_all(resources),
            Update::Names { names, resources } => store.replace_names(names, resources),
        }
    }
}

/// Where a [`Feed`] commits: a [`Store`], or a gated rollout ([`crate::Rollout`]: its canary
/// store first, the others once promoted).
pub trait CommitTarget: Send + Sync {
    /// The store the changes go to (a rollout's canary store).
    fn store(&self) -> &Store;

    /// Commits a change of the source, at the source's `revision` when it has one.
    fn commit(&self, update: Update, revision: Option<i64>) -> Result<UpdateSummary, StoreError>;

    /// Commits the source's first load, at `revision` (a rollout's stable store starts with it).
    fn first_load(
        &self,
        update: Update,
        revision: Option<i64>,
    ) -> Result<UpdateSummary, StoreError> {
        self.commit(update, revision)
    }
}

impl CommitTarget for Store {
    fn store(&self) -> &Store {
        self
    }

    /// Commits `update`; once committed, the store serves the source's `revision`
    /// ([`Store::source_revision`]).
    fn commit(&self, update: Update, revision: Option<i64>) -> Result<UpdateSummary, StoreError> {
        commit_at_revision(self, update, revision)
    }
}

/// Commits `update` to `store`, which then serves the source's `revision` (kept as it was when
/// the change is refused, or when the source has no revisions).
fn commit_at_revision(
    store: &Store,
    update: Update,
    revision: Option<i64>,
) -> Result<UpdateSummary, StoreError> {
    let summary = update.apply(store)?;
    if revision.is_some() {
        store.set_source_revision(revision);
    }
    Ok(summary)
}

impl<T: CommitTarget + ?Sized> CommitTarget for Arc<T> {
    fn store(&self) -> &Store {
        (**self).store()
    }

    fn commit(&self, update: Update, revision: Option<i64>) -> Result<UpdateSummary, StoreError> {
        (**self).commit(update, revision)
    }

    fn first_load(
        &self,
        update: Update,
        revision: Option<i64>,
    ) -> Result<UpdateSummary, StoreError> {
        (**self).first_load(update, revision)
    }
}

/// One change of a source, committed whole or not at all.
#[derive(Debug)]
#[non_exhaustive]
pub struct ChangeSet {
    /// What the store holds after it.
    pub update: Update,
    /// How many resources the source holds after it: a change that leaves none is refused unless
    /// [`Feed::allow_empty`].
    pub resources: usize,
    /// The files or keys the change came from, for its log line (a few; may be empty).
    pub origins: Vec<String>,
    /// The source's position after the change (an etcd revision), when it has one.
    pub revision: Option<i64>,
}

impl ChangeSet {
    /// A change that replaces everything with `resources`.
    pub fn all(resources: Vec<ResourceInput>) -> ChangeSet {
        ChangeSet {
            resources: resources.len(),
            update: Update::All(resources),
            origins: Vec::new(),
            revision: None,
        }
    }

    /// A change of only `names` (see [`Update::Names`]), after which the source holds `total`
    /// resources.
    pub fn names(
        names: Vec<(String, String)>,
        resources: Vec<ResourceInput>,
        total: usize,
    ) -> ChangeSet {
        ChangeSet {
            update: Update::Names { names, resources },
            resources: total,
            origins: Vec::new(),
            revision: None,
        }
    }

    /// Names the files or keys it came from.
    pub fn with_origins(mut self, origins: Vec<String>) -> ChangeSet {
        self.origins = origins;
        self
    }

    /// Records the source's position after it.
    pub fn with_revision(mut self, revision: i64) -> ChangeSet {
        self.revision = Some(revision);
        self
    }
}

/// A change the source itself refused (a file or key that does not parse, a duplicate name):
/// every problem, each naming its file or key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    messages: Vec<String>,
}

impl Rejection {
    /// A rejection with these problems (at least one is expected).
    pub fn new(messages: Vec<String>) -> Rejection {
        Rejection { messages }
    }

    /// Each problem on its own.
    pub fn messages(&self) -> &[String] {
        &self.messages
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.messages.join("; "))
    }
}

impl std::error::Error for Rejection {}

/// What a source hands out after its first load.
#[derive(Debug)]
#[non_exhaustive]
pub enum SourceEvent {
    /// A change to commit; the source is told whether it was ([`Source::committed`]).
    Change(ChangeSet),
    /// A change the source refused: the last good state stays.
    Rejected(Rejection),
    /// The source can be read (true) or not (false, with the reason): a server is ready only
    /// while it can.
    Health {
        /// Whether the source can be read.
        healthy: bool,
        /// Why not, when it cannot (empty when it can).
        reason: String,
    },
}

/// A source of resources: loaded once, then followed.
pub trait Source: Send {
    /// What it reads, for logs: `directory examples/basic/resources`.
    fn describe(&self) -> String;

    /// What kind of source it is, one word for logs: `directory`, `etcd`.
    fn kind(&self) -> &'static str {
        "source"
    }

    /// Everything the source holds now, or every problem with it. Called once, before
    /// [`Source::next`]; changes made while it loads are handed out by `next`.
    fn load(&mut self) -> impl Future<Output = Result<ChangeSet, Rejection>> + Send;

    /// The next event, or `None` when the source has ended.
    fn next(&mut self) -> impl Future<Output = Option<SourceEvent>> + Send;

    /// Whether the last [`SourceEvent::Change`] (or the first load) was committed; a source that
    /// hands out only what changed sends a rejected change's names again with its next change.
    fn committed(&mut self, ok: bool) {
        let _ = ok;
    }

    /// The server's metrics, given once before the first load by a [`Feed`] that counts in
    /// them ([`Feed::metrics`]): a source with metrics of its own adds them here
    /// ([`Metrics::add_series`]) so that `/metrics` shows them.
    fn metrics(&mut self, metrics: &Metrics) {
        let _ = metrics;
    }

    /// The store's pending names, given once before the first load by a [`Feed`]: a source that
    /// asks for names elsewhere (a relay's upstream) declares there the names asked for and not
    /// answered yet, so that clients are not told they do not exist, and resolves them once
    /// answered (see [`PendingNames`]).
    fn pending(&mut self, pending: PendingNames) {
        let _ = pending;
    }

    /// Whether it is healthy now, after its first load and before its first event: a server
    /// that starts serving it reports not ready from the start when it is not (a relay whose
    /// upstream has not answered), rather than until its first [`SourceEvent::Health`] arrives.
    fn healthy(&self) -> bool {
        true
    }
}

/// A future a [`DynSource`] hands out.
pub type SourceFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A [`Source`] as a trait object: every `Source` is a `DynSource`, and a `Box<dyn DynSource>`
/// is a `Source` again, so a program that picks its source at run time holds one type
/// (`let source: Box<dyn xdsd_core::DynSource> = Box::new(...)`) and feeds it like any other.
/// Name it by its path rather than importing it beside [`Source`], so that a call such as
/// `source.describe()` is `Source`'s, not ambiguous.
pub trait DynSource: Send {
    /// [`Source::describe`].
    fn describe(&self) -> String;
    /// [`Source::kind`].
    fn kind(&self) -> &'static str;
    /// [`Source::load`].
    fn load(&mut self) -> SourceFuture<'_, Result<ChangeSet, Rejection>>;
    /// [`Source::next`].
    fn next(&mut self) -> SourceFuture<'_, Option<SourceEvent>>;
    /// [`Source::committed`].
    fn committed(&mut self, ok: bool);
    /// [`Source::metrics`].
    fn metrics(&mut self, metrics: &Metrics);
    /// [`Source::pending`].
    fn pending(&mut self, pending: PendingNames);
    /// [`Source::healthy`].
    fn healthy(&self) -> bool;
}

impl<S: Source> DynSource for S {
    fn describe(&self) -> String {
        Source::describe(self)
    }

    fn kind(&self) -> &'static str {
        Source::kind(self)
    }

    fn load(&mut self) -> SourceFuture<'_, Result<ChangeSet, Rejection>> {
        Box::pin(Source::load(self))
    }

    fn next(&mut self) -> SourceFuture<'_, Option<SourceEvent>> {
        Box::pin(Source::next(self))
    }

    fn committed(&mut self, ok: bool) {
        Source::committed(self, ok)
    }

    fn metrics(&mut self, metrics: &Metrics) {
        Source::metrics(self, metrics)
    }

    fn pending(&mut self, pending: PendingNames) {
        Source::pending(self, pending)
    }

    fn healthy(&self) -> bool {
        Source::healthy(self)
    }
}

impl Source for Box<dyn DynSource> {
    fn describe(&self) -> String {
        (**self).describe()
    }

    fn kind(&self) -> &'static str {
        (**self).kind()
    }

    fn load(&mut self) -> impl Future<Output = Result<ChangeSet, Rejection>> + Send {
        (**self).load()
    }

    fn next(&mut self) -> impl Future<Output = Option<SourceEvent>> + Send {
        (**self).next()
    }

    fn committed(&mut self, ok: bool) {
        (**self).committed(ok)
    }

    fn metrics(&mut self, metrics: &Metrics) {
        (**self).metrics(metrics)
    }

    fn pending(&mut self, pending: PendingNames) {
        (**self).pending(pending)
    }

    fn healthy(&self) -> bool {
        (**self).healthy()
    }
}

/// Why a change was not committed.
#[derive(Debug)]
#[non_exhaustive]
pub enum CommitError {
    /// The source refused it (files or keys that do not parse, duplicates).
    Source(Rejection),
    /// The store's rules refused it: TP2's variant rules, references.
    Store(StoreError),
    /// It would leave no resources where `had` were served, and [`Feed::allow_empty`] is off.
    Empty {
        /// The resources the store held.
        had: usize,
    },
}

impl CommitError {
    /// Each problem on its own, for a list.
    pub fn messages(&self) -> Vec<String> {
        match self {
            CommitError::Source(r) => r.messages().to_vec(),
            CommitError::Store(e) => store_messages(e),
            CommitError::Empty { .. } => vec![self.to_string()],
        }
    }

    /// What to do about it, when the errors alone do not say.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            CommitError::Store(e) => store_hint(e),
            _ => None,
        }
    }
}

/// Each problem of a change the store refused on its own, for a list: one per dangling
/// reference (for every command that commits: `serve`, `check`, `render`, `push`).
pub fn store_messages(e: &StoreError) -> Vec<String> {
    match e {
        StoreError::DanglingReferences(list) => list
            .iter()
            .map(|d| format!("a reference to a resource that does not exist: {d}"))
            .collect(),
        e => vec![e.to_string()],
    }
}

/// What to do about a change the store refused, when the error alone does not say (for every
/// command that commits: `serve`, `check`, `render`, `push`).
pub fn store_hint(e: &StoreError) -> Option<&'static str> {
    match e {
        StoreError::DanglingReferences(_) => Some(
            "a resource the clients get elsewhere, such as a cluster of Envoy's bootstrap, can be \
             declared with --external-name TYPE:NAME; --references warn applies such changes",
        ),
        _ => None,
    }
}

impl fmt::Display for CommitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CommitError::Source(r) => write!(f, "{r}"),
            CommitError::Store(e) => {
                write!(f, "{e}")?;
                if let Some(hint) = self.hint() {
                    write!(f, " ({hint})")?;
                }
                Ok(())
            }
            CommitError::Empty { had } => write!(
                f,
                "the source holds no resources at all, where {had} were served (a directory being \
                 deleted or replaced, an emptied prefix?); an empty configuration is applied only \
                 with --allow-empty"
            ),
        }
    }
}

impl std::error::Error for CommitError {}

impl From<Rejection> for CommitError {
    fn from(r: Rejection) -> CommitError {
        CommitError::Source(r)
    }
}

/// A hook called after each committed change that changed something.
type OnApplied = Box<dyn Fn(&UpdateSummary) + Send + Sync>;

/// Commits a source's changes to a store, and reports the source's state: readiness (gRPC health,
/// `/readyz`) follows the source's health, [`Metrics`] count each outcome, and each outcome is one
/// log line (`resources loaded` at INFO, `change rejected` at ERROR).
pub struct Feed {
    target: Box<dyn CommitTarget>,
    metrics: Option<Metrics>,
    ready: Option<Readiness>,
    allow_empty: bool,
    on_applied: Option<OnApplied>,
}

impl Feed {
    /// A feed of `target`: a [`Store`], or a gated rollout (an `Arc<Rollout>`: changes are
    /// committed to its canary store, and go to the other clients once promoted; see
    /// [`crate::rollout`]).
    pub fn new(target: impl CommitTarget + 'static) -> Feed {
        Feed {
            target: Box::new(target),
            metrics: None,
            ready: None,
            allow_empty: false,
            on_applied: None,
        }
    }

    /// Counts each outcome and the source's health in `metrics`.
    pub fn metrics(mut self, metrics: Metrics) -> Feed {
        self.metrics = Some(metrics);
        self
    }

    /// Reports `readiness` (a server's, [`crate::ServerHandle::readiness`]) ready while the
    /// source is healthy.
    pub fn ready(mut self, readiness: Readiness) -> Feed {
        self.ready = Some(readiness);
        self
    }

    /// Commits a change that leaves no resources at all where some were served (off by default:
    /// such a change is refused like any rejected change, since it is far more often a directory
    /// being deleted or replaced than an intended empty configuration).
    pub fn allow_empty(mut self, allow: bool) -> Feed {
        self.allow_empty = allow;
        self
    }

    /// Calls `hook` after each change that changed something.
    pub fn on_applied(mut self, hook: impl Fn(&UpdateSummary) + Send + Sync + 'static) -> Feed {
        self.on_applied = Some(Box::new(hook));
        self
    }

    /// The store it feeds.
    pub fn store(&self) -> &Store {
        self.target.store()
    }

    /// Commits `change` whole, or nothing (through the rollout's gate, when there is one).
    pub fn commit(&self, change: ChangeSet) -> Result<UpdateSummary, CommitError> {
        self.commit_with(change, false)
    }

    fn commit_with(&self, change: ChangeSet, first: bool) -> Result<UpdateSummary, CommitError> {
        let had: usize = self
            .store()
            .snapshot()
            .types()
            .map(|t| t.resource_count())
            .sum();
        if change.resources == 0 && had > 0 && !self.allow_empty {
            return Err(CommitError::Empty { had });
        }
        let result = if first {
            self.target.first_load(change.update, change.revision)
        } else {
            self.target.commit(change.update, change.revision)
        };
        result.map_err(CommitError::Store)
    }

    /// The first load of `source`, committed; an error (a source that cannot be loaded is
    /// fatal at start) lists every problem.
    pub async fn first_load<S: Source>(
        &self,
        source: &mut S,
    ) -> Result<UpdateSummary, CommitError> {
        if let Some(metrics) = &self.metrics {
            source.metrics(metrics);
        }
        source.pending(self.store().pending_names());
        let result = match source.load().await {
            Ok(change) => {
                let resources = change.resources;
                let revision = change.revision;
                let result = self.commit_with(change, true);
                if let Ok(summary) = &result {
                    log_dangling(summary);
                    info!(
                        source = %source.describe(),
                        resources,
                        generation = summary.generation,
                        revision,
                        "resources loaded"
                    );
                    if resources == 0 {
                        warn!(source = %source.describe(), "the source holds no resources: clients are served nothing until it does");
                    }
                }
                result
            }
            Err(e) => Err(CommitError::Source(e)),
        };
        source.committed(result.is_ok());
        result
    }

    /// Follows `source` until it ends: each change committed or rejected, one log line each.
    pub async fn follow<S: Source>(self, mut source: S) {
        while let Some(event) = source.next().await {
            match event {
                SourceEvent::Health { healthy, reason } => self.health(&source, healthy, &reason),
                SourceEvent::Rejected(rejection) => {
                    self.outcome(
                        &source,
                        Err(CommitError::Source(rejection)),
                        &[],
                        None,
                        None,
                    );
                }
                SourceEvent::Change(mut change) => {
                    let resources = change.resources;
                    let revision = change.revision;
                    let origins = std::mem::take(&mut change.origins);
                    let result = self.commit(change);
                    source.committed(result.is_ok());
                    self.outcome(&source, result, &origins, Some(resources), revision);
                }
            }
        }
    }

    fn health<S: Source>(&self, source: &S, healthy: bool, reason: &str) {
        if let Some(metrics) = &self.metrics {
            metrics.set_source_healthy(healthy);
        }
        if let Some(readiness) = &self.ready {
            readiness.set(healthy);
        }
        if healthy {
            info!(source = %source.describe(), "the {} can be read again: ready", source.kind());
        } else {
            warn!(source = %source.describe(), "the {} cannot be read ({reason}): not ready (gRPC health NOT_SERVING, /readyz 503) until it can; still serving the last good state", source.kind());
        }
    }

    /// The one log line (and count) of a change's outcome; an applied change's line names the
    /// source `revision` it serves now, when the source has revisions.
    fn outcome<S: Source>(
        &self,
        source: &S,
        result: Result<UpdateSummary, CommitError>,
        origins: &[String],
        resources: Option<usize>,
        revision: Option<i64>,
    ) {
        let count = |reload| {
            if let Some(metrics) = &self.metrics {
                metrics.reload(reload);
            }
        };
        let from = origins_text(origins);
        let from = from.as_deref();
        if let (Ok(_), Some(revision), Some(metrics)) = (&result, revision, &self.metrics) {
            metrics.set_source_revision(revision);
        }
        match result {
            Ok(summary) if summary.changed == 0 => {
                count(Reload::Unchanged);
                info!(
                    resources = resources.unwrap_or(summary.total),
                    from,
                    revision,
                    "{} changed, resources unchanged",
                    source.kind()
                );
            }
            Ok(summary) => {
                count(Reload::Applied);
                log_dangling(&summary);
                info!(
                    resources = resources.unwrap_or(summary.total),
                    changed = summary.changed,
                    what = %what_changed(&summary),
                    from,
                    generation = summary.generation,
                    revision,
                    "resources loaded"
                );
                if let Some(hook) = &self.on_applied {
                    hook(&summary);
                }
            }
            Err(e) => {
                count(Reload::Rejected);
                let generation = self.store().snapshot().generation();
                error!(
                    from,
                    "change rejected: {e}; still serving generation {generation}"
                );
            }
        }
    }
}

/// The first few origins of a change, for its log line (none when the source names none).
fn origins_text(origins: &[String]) -> Option<String> {
    if origins.is_empty() {
        return None;
    }
    let mut text = origins
        .iter()
        .take(MAX_LISTED)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if origins.len() > MAX_LISTED {
        text.push_str(&format!(" and {} more", origins.len() - MAX_LISTED));
    }
    Some(text)
}

/// What a change changed, for its log line: `+Cluster "c", ~RouteConfiguration "r1"` (added,
/// changed, removed), the first few and how many more.
pub fn what_changed(summary: &UpdateSummary) -> String {
    let mut text = summary
        .names
        .iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let more = summary.changed.saturating_sub(summary.names.len());
    if more > 0 && summary.names.len() == MAX_LISTED {
        text.push_str(&format!(
            " and more ({} resources changed in all)",
            summary.changed
        ));
    }
    text
}

/// With references in warn mode: one WARN line per dangling reference of an applied change (the
/// first [`MAX_LISTED`], then a count).
pub fn log_dangling(summary: &UpdateSummary) {
    for d in summary.dangling.iter().take(MAX_LISTED) {
        warn!("applied with a dangling reference: {d}");
    }
    if summary.dangling.len() > MAX_LISTED {
        warn!(
            "applied with {} more dangling references",
            summary.dangling.len() - MAX_LISTED
        );
    }
}
