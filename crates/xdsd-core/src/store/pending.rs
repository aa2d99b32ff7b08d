//! Pending names: names a source asked for elsewhere (a relay's upstream) and has no answer of
//! yet. The protocol treats a pending name as *not known yet* rather than as missing: a delta
//! stream is not told it is removed, a SotW stream is not sent a full-state response without it
//! (nor a wildcard's first response while its whole type is pending), a one-shot answer waits
//! for it. When the source resolves it — its resource committed, or the source learned that it
//! does not exist — or when it expires, the streams that watch it are woken through the normal
//! watch path and answered by the normal rules.
//!
//! A pending name is a type, a name ([`WHOLE_TYPE`] for the type's wildcard answer) and a
//! parameter set: it is pending for the clients whose parameter set holds every one of its
//! parameters (the empty set: every client). The set is bounded ([`PendingNames::set_limit`],
//! [`DEFAULT_MAX_PENDING`]): past it, a name is refused ([`PendingError::Full`]) and answered as
//! any missing name. Each name carries the time it is given up at; the source that declares
//! names expires them ([`PendingNames::expire`] when [`PendingNames::next_expiry`] passes), and
//! a one-shot answer waits at most until then.
//!
//! The set is the store's, beside its snapshots: declaring or resolving swaps in the current
//! snapshot with the new set (same resources, same generation), so that a stream reads a state
//! and its pending names at once. A commit keeps the set as it is.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, MutexGuard};
use std::time::Instant;

use super::watch::{lock_index, ChangedNames, TypeChange, Wake};
use super::Store;
use crate::hash::HashMap as FastMap;
use crate::params::ParamSet;

/// The name that stands for a whole type: pending, a subscription to the type's wildcard is
/// not answered yet.
pub const WHOLE_TYPE: &str = "*";

/// How many names may be pending at once by default (see [`PendingNames::set_limit`]).
pub const DEFAULT_MAX_PENDING: usize = 10_000;

/// One pending name: a name of a type (or [`WHOLE_TYPE`]), for the clients whose parameter set
/// holds every parameter of `params` (empty: every client).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PendingName {
    /// The type URL.
    pub type_url: String,
    /// The resource name, or [`WHOLE_TYPE`].
    pub name: String,
    /// The parameters a client must have for the name to be pending for it.
    pub params: ParamSet,
}

impl PendingName {
    /// `name` of `type_url`, pending for every client.
    pub fn new(type_url: impl Into<String>, name: impl Into<String>) -> PendingName {
        PendingName {
            type_url: type_url.into(),
            name: name.into(),
            params: ParamSet::new(),
        }
    }

    /// Pending only for the clients whose parameter set holds every parameter of `params`.
    pub fn with_params(mut self, params: ParamSet) -> PendingName {
        self.params = params;
        self
    }
}

/// Why a name cannot be declared pending.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PendingError {
    /// The set is full: the name is answered as any name the store does not have.
    #[error("{limit} names are pending already (the limit): answered as missing")]
    Full {
        /// The limit.
        limit: usize,
    },
}

/// How many shards a type's pending names are split in: a declaration copies the one shard it
/// changes (and the list of shards), not the type's whole table, when a snapshot shares it.
const SHARDS: usize = 32;

/// One shard of a type's pending names: each name with its parameter sets and the time each is
/// given up at.
type Shard = FastMap<Arc<str>, Vec<(ParamSet, Instant)>>;

/// The pending names of one type, as a snapshot holds them (see the module documentation).
/// Kept up to date name by name (copy on write, shard by shard): a declaration or a resolution
/// costs what it changes, not what is pending.
#[derive(Debug, Clone)]
pub(crate) struct TypePending {
    shards: Box<[Arc<Shard>]>,
    /// How many (name, parameter set) entries it holds.
    len: usize,
}

impl Default for TypePending {
    fn default() -> TypePending {
        TypePending {
            shards: (0..SHARDS).map(|_| Arc::new(Shard::default())).collect(),
            len: 0,
        }
    }
}

fn shard_of(name: &str) -> usize {
    use std::hash::{BuildHasher, Hasher};
    // A fixed seed: the shard of a name must not change between calls.
    let mut h = foldhash::fast::FixedState::with_seed(0x5eed).build_hasher();
    h.write(name.as_bytes());
    (h.finish() % SHARDS as u64) as usize
}

impl TypePending {
    /// Whether `name` is pending for a client that resolves names with `params`.
    pub fn is_pending(&self, name: &str, params: &ParamSet) -> bool {
        self.until(name, params).is_some()
    }

    /// When `name` stops being pending for a client with `params` at the latest (`None`: it is
    /// not pending for it).
    pub fn until(&self, name: &str, params: &ParamSet) -> Option<Instant> {
        self.shards[shard_of(name)]
            .get(name)?
            .iter()
            .filter(|(p, _)| p.iter().all(|(k, v)| params.get(k) == Some(v)))
            .map(|(_, until)| *until)
            .max()
    }

    /// The names pending for some client ([`WHOLE_TYPE`] among them, if the type is).
    pub fn names(&self) -> impl Iterator<Item = &Arc<str>> {
        self.shards.iter().flat_map(|s| s.keys())
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn insert(&mut self, name: &PendingName, until: Instant) {
        let shard = Arc::make_mut(&mut self.shards[shard_of(&name.name)]);
        shard
            .entry(Arc::from(name.name.as_str()))
            .or_default()
            .push((name.params.clone(), until));
        self.len += 1;
    }

    fn remove(&mut self, name: &PendingName) {
        let i = shard_of(&name.name);
        if !self.shards[i].contains_key(name.name.as_str()) {
            return;
        }
        let shard = Arc::make_mut(&mut self.shards[i]);
        if let Some(sets) = shard.get_mut(name.name.as_str()) {
            let before = sets.len();
            sets.retain(|(p, _)| *p != name.params);
            self.len -= before - sets.len();
            if sets.is_empty() {
                shard.remove(name.name.as_str());
            }
        }
    }
}

/// The pending names of every type, as a snapshot holds them.
pub(crate) type PendingTable = FastMap<Arc<str>, Arc<TypePending>>;

/// The store's pending names with the time each is given up at, and the limit.
#[derive(Debug)]
pub(crate) struct PendingState {
    entries: BTreeMap<PendingName, Instant>,
    /// The entries by the time each is given up at: what expires next, found without a scan.
    by_time: BTreeSet<(Instant, PendingName)>,
    /// Each type's table as the snapshots get it, kept up to date with the entries.
    tables: FastMap<String, Arc<TypePending>>,
    limit: usize,
    /// Names to resolve with the next commit that changes something
    /// ([`PendingNames::resolve_with_next_commit`]).
    staged: BTreeSet<PendingName>,
}

impl Default for PendingState {
    fn default() -> PendingState {
        PendingState {
            entries: BTreeMap::new(),
            by_time: BTreeSet::new(),
            tables: FastMap::default(),
            limit: DEFAULT_MAX_PENDING,
            staged: BTreeSet::new(),
        }
    }
}

impl PendingState {
    /// Adds `name`, pending until `until` (not pending yet).
    fn insert(&mut self, name: PendingName, until: Instant) {
        Arc::make_mut(self.tables.entry(name.type_url.clone()).or_default()).insert(&name, until);
        self.by_time.insert((until, name.clone()));
        self.entries.insert(name, until);
    }

    /// Takes `name` out; whether it was pending.
    fn remove(&mut self, name: &PendingName) -> bool {
        let Some(until) = self.entries.remove(name) else {
            return false;
        };
        self.by_time.remove(&(until, name.clone()));
        if let Some(table) = self.tables.get_mut(&name.type_url) {
            Arc::make_mut(table).remove(name);
            if table.is_empty() {
                self.tables.remove(&name.type_url);
            }
        }
        self.staged.remove(name);
        true
    }

    /// Takes the names staged to resolve with this commit out of the set: those of them still
    /// pending.
    pub(super) fn take_staged(&mut self) -> Vec<PendingName> {
        let staged = std::mem::take(&mut self.staged);
        staged.into_iter().filter(|n| self.remove(n)).collect()
    }

    /// `table` (a snapshot's pending names) with those of `types` as the set holds them now;
    /// `intern` gives a type URL's shared key.
    pub(super) fn table_with<'a>(
        &self,
        table: Option<&PendingTable>,
        types: impl IntoIterator<Item = &'a str>,
        intern: impl Fn(&str) -> Arc<str>,
    ) -> Option<Arc<PendingTable>> {
        let mut table: PendingTable = table.cloned().unwrap_or_default();
        for type_url in types {
            match self.tables.get(type_url) {
                Some(pending) => {
                    table.insert(intern(type_url), pending.clone());
                }
                None => {
                    table.remove(type_url);
                }
            }
        }
        (!table.is_empty()).then(|| Arc::new(table))
    }
}

/// A handle on a store's pending names, for the source that asks for names elsewhere: a
/// [`crate::Feed`] hands it to its source ([`crate::Source::pending`]). Cheap to clone.
#[derive(Clone)]
pub struct PendingNames {
    store: Store,
}

impl std::fmt::Debug for PendingNames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingNames")
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

impl Store {
    /// The store's pending names (see [`PendingNames`]).
    pub fn pending_names(&self) -> PendingNames {
        PendingNames {
            store: self.clone(),
        }
    }
}

impl PendingNames {
    fn state(&self) -> MutexGuard<'_, PendingState> {
        self.store
            .inner
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Declares `name` pending until `until` at the latest: `Ok(true)` when it is new, `Ok(false)`
    /// when it was pending already (its time is kept: a name is given up a bound after it was
    /// first asked for). Wakes no one: a pending name only holds answers back.
    pub fn declare(&self, name: PendingName, until: Instant) -> Result<bool, PendingError> {
        let mut state = self.state();
        if state.entries.contains_key(&name) {
            return Ok(false);
        }
        if state.entries.len() >= state.limit {
            return Err(PendingError::Full { limit: state.limit });
        }
        let type_url = name.type_url.clone();
        state.insert(name, until);
        self.publish(&state, [type_url.as_str()]);
        Ok(true)
    }

    /// Declares each of `names` pending until `until` at the latest, as [`PendingNames::declare`]
    /// does one, in one swap of the snapshot: for each name, `Ok(true)` when it is new,
    /// `Ok(false)` when it was pending already, `Err` past the limit. Costs what it declares.
    pub fn declare_all(
        &self,
        names: impl IntoIterator<Item = PendingName>,
        until: Instant,
    ) -> Vec<Result<bool, PendingError>> {
        let mut state = self.state();
        let mut types: Vec<String> = Vec::new();
        let out = names
            .into_iter()
            .map(|name| {
                if state.entries.contains_key(&name) {
                    return Ok(false);
                }
                if state.entries.len() >= state.limit {
                    return Err(PendingError::Full { limit: state.limit });
                }
                if !types.contains(&name.type_url) {
                    types.push(name.type_url.clone());
                }
                state.insert(name, until);
                Ok(true)
            })
            .collect();
        if !types.is_empty() {
            self.publish(&state, types.iter().map(String::as_str));
        }
        out
    }

    /// Resolves `names` (their resource was committed, or the source learned that they do not
    /// exist): the streams that watch them are woken and answered by the normal rules. How many
    /// were pending.
    pub fn resolve<'a>(&self, names: impl IntoIterator<Item = &'a PendingName>) -> usize {
        let mut state = self.state();
        let gone: Vec<PendingName> = names
            .into_iter()
            .filter(|n| state.remove(n))
            .cloned()
            .collect();
        self.settle(&state, &gone);
        gone.len()
    }

    /// Resolves `names` with the store's next commit that changes something, in the same swap as
    /// its resources, their streams woken with its changes: a stream reads the commit's
    /// resources and these names' resolution at once (a relay's upstream answers some names
    /// and says others do not exist: one response downstream, as from the upstream). Names not
    /// pending are left out. A source whose change is refused, or changes nothing, resolves them
    /// with [`PendingNames::resolve`].
    pub fn resolve_with_next_commit<'a>(&self, names: impl IntoIterator<Item = &'a PendingName>) {
        let mut state = self.state();
        for name in names {
            if state.entries.contains_key(name) && !state.staged.contains(name) {
                state.staged.insert(name.clone());
            }
        }
    }

    /// Gives up the names whose time passed as of `now` (answered as the store has them: the
    /// streams that watch them are woken); those names.
    pub fn expire(&self, now: Instant) -> Vec<PendingName> {
        let mut state = self.state();
        let gone: Vec<PendingName> = state
            .by_time
            .iter()
            .take_while(|(until, _)| *until <= now)
            .map(|(_, n)| n.clone())
            .collect();
        for name in &gone {
            state.remove(name);
        }
        self.settle(&state, &gone);
        gone
    }

    /// When [`PendingNames::expire`] is next due.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.state().by_time.first().map(|(until, _)| *until)
    }

    /// Whether `name` is pending.
    pub fn is_pending(&self, name: &PendingName) -> bool {
        self.state().entries.contains_key(name)
    }

    /// How many names are pending.
    pub fn len(&self) -> usize {
        self.state().entries.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many names may be pending at once (see [`DEFAULT_MAX_PENDING`]).
    pub fn limit(&self) -> usize {
        self.state().limit
    }

    /// Sets how many names may be pending at once; those pending stay.
    pub fn set_limit(&self, limit: usize) {
        self.state().limit = limit;
    }

    /// After `gone` left the set: the snapshot's table updated, then their watchers woken.
    fn settle(&self, state: &PendingState, gone: &[PendingName]) {
        if gone.is_empty() {
            return;
        }
        let mut types: Vec<&str> = gone.iter().map(|n| n.type_url.as_str()).collect();
        types.sort_unstable();
        types.dedup();
        self.publish(state, types.iter().copied());
        // Woken after the swap: a stream woken by this reads the set without them.
        let mut changed: Vec<Arc<TypeChange>> = Vec::new();
        let snapshot = self.store.snapshot();
        for type_url in types {
            let type_url = snapshot.type_key(type_url);
            let mut names: ChangedNames = gone
                .iter()
                .filter(|n| *n.type_url == *type_url)
                .map(|n| (Arc::from(n.name.as_str()), Wake::All))
                .collect();
            names.sort_by(|a, b| a.0.cmp(&b.0));
            names.dedup_by(|a, b| a.0 == b.0);
            changed.push(Arc::new(TypeChange::new(type_url, names, false)));
        }
        lock_index(&self.store.inner.index).notify(&changed);
    }

    /// Swaps in the current snapshot with the pending names of `types` as `state` has them.
    fn publish<'a>(&self, state: &PendingState, types: impl IntoIterator<Item = &'a str>) {
        let mut current = self
            .store
            .inner
            .current
            .write()
            .unwrap_or_else(|e| e.into_inner());
        let pending = state.table_with(current.pending.as_deref(), types, |type_url| {
            current.type_key(type_url)
        });
        let mut next = (**current).clone();
        next.pending = pending;
        *current = Arc::new(next);
    }
}

/// `resolved`'s names woken with `changed` (a commit's changes), each type's in its entry.
pub(super) fn wake_with(
    changed: &mut Vec<Arc<TypeChange>>,
    resolved: &[PendingName],
    intern: impl Fn(&str) -> Arc<str>,
) {
    let mut types: Vec<&str> = resolved.iter().map(|n| n.type_url.as_str()).collect();
    types.sort_unstable();
    types.dedup();
    for type_url in types {
        let names: ChangedNames = resolved
            .iter()
            .filter(|n| n.type_url == type_url)
            .map(|n| (Arc::from(n.name.as_str()), Wake::All))
            .collect();
        match changed.iter_mut().find(|c| &**c.type_url() == type_url) {
            Some(entry) => *entry = Arc::new(entry.with_names(names)),
            None => changed.push(Arc::new(TypeChange::new(intern(type_url), names, false))),
        }
    }
}

#[cfg(test)]
mod tests;
