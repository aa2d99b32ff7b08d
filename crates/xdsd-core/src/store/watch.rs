//! Change notification, indexed by name: an update touches only the streams that watch one of the
//! changed names (or the wildcard of its type), never a scan of all clients. When only
//! constrained variants of a name changed (xRFC TP2), a stream that told its parameter sets
//! ([`Watcher::set_params`]) is woken only if one of them matches a changed variant: the others
//! resolve the name to the same variant as before.

use crate::hash::{HashMap, HashSet};
use crate::params::{Constraints, ParamSet};
use crate::types::TypeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

/// Which watchers of a changed name to wake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Wake {
    /// Every watcher: an unconstrained variant was added, changed or removed.
    All,
    /// Watchers with a parameter set that matches one of these constraints (the variants
    /// added, changed or removed), and watchers that did not say their parameter sets.
    Matching(Vec<Arc<Constraints>>),
}

impl Wake {
    /// Whom to wake for a change of these variants (old and new).
    pub(crate) fn of<'a>(changed: impl IntoIterator<Item = Option<&'a Arc<Constraints>>>) -> Wake {
        let mut constraints: Vec<Arc<Constraints>> = Vec::new();
        for c in changed {
            let Some(c) = c else {
                return Wake::All;
            };
            if !constraints.contains(c) {
                constraints.push(c.clone());
            }
        }
        Wake::Matching(constraints)
    }

    /// Both: the watchers either wakes.
    pub(crate) fn merge(&mut self, other: Wake) {
        match (&mut *self, other) {
            (Wake::All, _) => {}
            (_, Wake::All) => *self = Wake::All,
            (Wake::Matching(a), Wake::Matching(b)) => {
                for c in b {
                    if !a.contains(&c) {
                        a.push(c);
                    }
                }
            }
        }
    }

    /// Whether a watcher resolving names with `params` (`None`: unknown) may see a change.
    fn wakes(&self, params: Option<&[ParamSet]>) -> bool {
        match (self, params) {
            (Wake::All, _) | (_, None) => true,
            (Wake::Matching(constraints), Some(params)) => params
                .iter()
                .any(|p| constraints.iter().any(|c| c.matches(p))),
        }
    }
}

/// The changed names of one type, each with whom to wake.
pub(crate) type ChangedNames = Vec<(Arc<str>, Wake)>;

/// The names of one type one commit changed. Shared by every stream that watches the whole type
/// and is woken by all of them: the commit hands each such stream a count on it, not its names
/// one by one (at 2,000 changes a second, marking every name on each of 1,000 streams was a
/// quarter of the server's work, all of it on the committing thread while the streams waited).
#[derive(Debug)]
pub(crate) struct TypeChange {
    type_url: Arc<str>,
    names: ChangedNames,
    /// Whether every name wakes every watcher (no constrained variant alone changed).
    wakes_all: bool,
    /// Whether a name may have gone: one of them has no variant left, or one had aliases.
    removes: bool,
}

impl TypeChange {
    pub(crate) fn new(type_url: Arc<str>, names: ChangedNames, removes: bool) -> TypeChange {
        let wakes_all = names.iter().all(|(_, wake)| *wake == Wake::All);
        TypeChange {
            type_url,
            names,
            wakes_all,
            removes,
        }
    }
}

/// Changed names per type URL.
pub(crate) type Changed = [Arc<TypeChange>];

/// Commits' changes a stream holds shared before they are folded into its own set of names:
/// bounded whatever the number of commits while the stream is busy or its client slow. A stream
/// takes its changes once per response: at 2,000 commits a second and a response every 50 ms,
/// about a hundred commits wait, and folding them on the committing thread took about 7 % of
/// the server's CPU (perf, S5 at 2,000 changes/s, 16 commits held).
pub(crate) const MAX_SHARED: usize = 128;

/// Names that changed since a stream last looked, per type URL. A name changed by several
/// commits may be listed more than once: the changes of whole types are the commits' own lists,
/// shared by every stream that watches the whole type (see [`Changes::names`]).
#[derive(Debug, Default)]
pub struct Changes {
    /// Names marked one by one (streams watching them by name).
    names: HashMap<Arc<str>, HashSet<Arc<str>>>,
    /// Whole types' changes of commits (see [`TypeChange`]), in commit order.
    shared: Vec<Arc<TypeChange>>,
}

impl Changes {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty() && self.shared.is_empty()
    }

    /// The types with changed names, each once.
    pub fn types(&self) -> impl Iterator<Item = &Arc<str>> {
        let shared = self.shared.iter().enumerate().filter_map(|(i, c)| {
            let seen = self.names.contains_key(&c.type_url)
                || self.shared[..i].iter().any(|e| e.type_url == c.type_url);
            (!seen).then_some(&c.type_url)
        });
        self.names.keys().chain(shared)
    }

    /// The changed names of `type_url`; a name changed by several commits may come more than
    /// once.
    pub fn names<'a>(&'a self, type_url: &'a str) -> impl Iterator<Item = &'a Arc<str>> + 'a {
        self.listed(type_url, false)
    }

    /// How many names `names(type_url)` gives (repeats included), without listing them.
    pub fn count(&self, type_url: &str) -> usize {
        let own = self.names.get(type_url).map_or(0, |n| n.len());
        let shared = self.shared.iter().filter(|c| &*c.type_url == type_url);
        own + shared.map(|c| c.names.len()).sum::<usize>()
    }

    /// The changed names of `type_url` that may have gone from the store (a superset of them):
    /// the names marked one by one, and those of commits that removed a name.
    pub(crate) fn maybe_removed<'a>(
        &'a self,
        type_url: &'a str,
    ) -> impl Iterator<Item = &'a Arc<str>> + 'a {
        self.listed(type_url, true)
    }

    /// The names marked, then those of the commits' lists (`removals`: of the commits that may
    /// have removed a name).
    fn listed<'a>(
        &'a self,
        type_url: &'a str,
        removals: bool,
    ) -> impl Iterator<Item = &'a Arc<str>> + 'a {
        let own = self.names.get(type_url).into_iter().flatten();
        let shared = self
            .shared
            .iter()
            .filter(move |c| (c.removes || !removals) && &*c.type_url == type_url)
            .flat_map(|c| c.names.iter().map(|(n, _)| n));
        own.chain(shared)
    }

    /// Records that `name` of `type_url` changed.
    pub fn insert(&mut self, type_url: Arc<str>, name: Arc<str>) {
        self.names.entry(type_url).or_default().insert(name);
    }

    /// The changed names as one set per type.
    pub fn into_sets(mut self) -> HashMap<Arc<str>, HashSet<Arc<str>>> {
        self.fold();
        self.names
    }

    /// Folds the shared changes into the names.
    fn fold(&mut self) {
        for change in self.shared.drain(..) {
            let names = self.names.entry(change.type_url.clone()).or_default();
            names.extend(change.names.iter().map(|(n, _)| n.clone()));
        }
    }
}

impl FromIterator<(Arc<str>, HashSet<Arc<str>>)> for Changes {
    fn from_iter<I: IntoIterator<Item = (Arc<str>, HashSet<Arc<str>>)>>(iter: I) -> Changes {
        Changes {
            names: iter.into_iter().collect(),
            shared: Vec::new(),
        }
    }
}

/// What the store holds for one stream: a wake-up and the names that changed since it last took
/// them. Many updates while the stream is busy or slow coalesce here; the set is bounded by what
/// the stream watches, whatever the update rate.
#[derive(Default)]
pub(crate) struct Signal {
    notify: Notify,
    dirty: Mutex<Pending>,
    /// The watcher's group (`Store::watcher_in`).
    group: u64,
}

/// A stream's changes not taken yet, and the types whose changes do not wake it.
#[derive(Default)]
struct Pending {
    changes: Changes,
    /// Types the stream cannot answer a change of for now (a response of the type waits for
    /// the client's ACK): their changes are recorded without a wake, and taken with the next.
    muted: Vec<Arc<str>>,
}

impl Signal {
    fn dirty(&self) -> MutexGuard<'_, Pending> {
        // A poisoned lock only means another thread panicked while holding it; the map itself is
        // still a valid set of names.
        self.dirty.lock().unwrap_or_else(|e| e.into_inner())
    }
}

type Watchers = HashMap<u64, Arc<Signal>>;

#[derive(Default)]
pub(crate) struct WatchIndex {
    names: HashMap<Arc<str>, HashMap<Arc<str>, Watchers>>,
    wildcards: HashMap<Arc<str>, Watchers>,
    /// The parameter sets of the watchers that said them (`Watcher::set_params`).
    params: HashMap<u64, Arc<[ParamSet]>>,
}

impl WatchIndex {
    /// Marks `changed` names on every stream that watches them and may see the change, and wakes
    /// those streams.
    pub(crate) fn notify(&self, changed: &Changed) {
        // Per stream: the (type, name) pairs to mark and the types' changes it takes whole, put
        // in under one lock: a commit's changes of several types reach a stream together.
        // Marked one by one, a stream woken by the first took part of a commit, and
        // make-before-break saw clusters removed before the routes that stopped naming them had
        // changed (Envoy then had no cluster for the old route for a few milliseconds).
        enum Mark<'a> {
            Name(&'a Arc<str>, &'a Arc<str>),
            Whole(&'a Arc<TypeChange>),
        }
        // Every mark with its stream's (group, id), in one list sorted once: no map of streams,
        // and no list per stream (at a thousand commits a second to a thousand streams, S5,
        // those were a quarter of the commit's cost).
        let mut marks: Vec<((u64, u64), &Arc<Signal>, Mark<'_>)> = Vec::new();
        let params = |id: &u64| self.params.get(id).map(|p| &**p);
        for change in changed {
            let (type_url, names) = (&change.type_url, &change.names);
            if let Some(watchers) = self.wildcards.get(type_url) {
                // Room for a mark each at once (grown one at a time, the list of a thousand
                // streams was reallocated ten times per commit).
                marks.reserve(watchers.len());
                for (id, signal) in watchers {
                    let key = (signal.group, *id);
                    let params = params(id);
                    if change.wakes_all || params.is_none() {
                        marks.push((key, signal, Mark::Whole(change)));
                        continue;
                    }
                    marks.extend(
                        names
                            .iter()
                            .filter(|(_, wake)| wake.wakes(params))
                            .map(|(n, _)| (key, signal, Mark::Name(type_url, n))),
                    );
                }
            }
            if let Some(by_name) = self.names.get(type_url) {
                for (name, wake) in names {
                    for (id, signal) in by_name.get(name).into_iter().flatten() {
                        if wake.wakes(params(id)) {
                            marks.push(((signal.group, *id), signal, Mark::Name(type_url, name)));
                        }
                    }
                }
            }
        }
        // A connection's streams woken one after another: each hands its response to HTTP/2
        // while the connection's task waits its turn, and the connection then writes them
        // together (`transport::coalesce`). S1 at 10,000 streams on 100 connections, in a hash
        // map's order and in this one: 6,000 and 2,900 writes per change, 290-400 and 250 ms
        // of CPU. Stable: a stream takes the commits' changes in their order.
        marks.sort_by_key(|(key, _, _)| *key);
        for run in marks.chunk_by(|a, b| a.0 == b.0) {
            let signal = run[0].1;
            let mut pending = signal.dirty();
            let Pending { changes, muted } = &mut *pending;
            let mut wake = false;
            for (_, _, mark) in run {
                let type_url = match mark {
                    Mark::Name(type_url, name) => {
                        changes
                            .names
                            .entry((*type_url).clone())
                            .or_default()
                            .insert((*name).clone());
                        *type_url
                    }
                    Mark::Whole(change) => {
                        changes.shared.push((*change).clone());
                        &change.type_url
                    }
                };
                wake = wake || !muted.iter().any(|m| m == type_url);
            }
            if changes.shared.len() > MAX_SHARED {
                changes.fold();
            }
            drop(pending);
            if wake {
                signal.notify.notify_one();
            }
        }
    }
}

impl WatchIndex {
    /// Registers (or not) a stream among the watchers of every name of a type, from `before` to
    /// `after`.
    fn set_all(
        &mut self,
        type_url: &Arc<str>,
        id: u64,
        signal: &Arc<Signal>,
        before: bool,
        after: bool,
    ) {
        if before == after {
            return;
        }
        if after {
            self.wildcards
                .entry(type_url.clone())
                .or_default()
                .insert(id, signal.clone());
        } else if let Some(w) = self.wildcards.get_mut(type_url) {
            w.remove(&id);
            if w.is_empty() {
                self.wildcards.remove(type_url);
            }
        }
    }
}

pub(crate) fn lock_index(index: &Mutex<WatchIndex>) -> MutexGuard<'_, WatchIndex> {
    index.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Default)]
struct Registered {
    wildcard: bool,
    /// Woken by every change of the type, like a wildcard, without a registration per name: the
    /// stream subscribes to most of the type and its machine tells apart the names it watches.
    dense: bool,
    /// The names registered one by one (none while `dense`).
    names: HashSet<Arc<str>>,
}

impl Registered {
    /// Whether the stream is among the type's watchers of every name.
    fn all(&self) -> bool {
        self.wildcard || self.dense
    }
}

/// One stream's registration with the store. Dropping it removes every registration.
pub struct Watcher {
    id: u64,
    index: Arc<Mutex<WatchIndex>>,
    signal: Arc<Signal>,
    /// Per type.
    registered: TypeMap<Registered>,
    /// How many parameter sets were last registered (`set_params`).
    params: Option<usize>,
    /// The types last muted (`mute`).
    muted: Vec<Arc<str>>,
}

impl Watcher {
    pub(crate) fn new(id: u64, group: u64, index: Arc<Mutex<WatchIndex>>) -> Watcher {
        Watcher {
            id,
            index,
            signal: Arc::new(Signal {
                group,
                ..Signal::default()
            }),
            registered: TypeMap::default(),
            params: None,
            muted: Vec::new(),
        }
    }

    /// Every parameter set the stream resolves names with (all of them, for every type). From
    /// then on a change of constrained variants only wakes the stream if one of these sets
    /// matches a changed variant; before, every change of a watched name wakes it. Call it again
    /// when the stream uses a new set, before the state the set is used with is read (as for
    /// [`Watcher::watch`]).
    pub fn set_params(&mut self, params: &[ParamSet]) {
        self.params = Some(params.len());
        lock_index(&self.index)
            .params
            .insert(self.id, params.to_vec().into());
    }

    /// How many parameter sets `set_params` last registered; `None` before the first call.
    pub fn params_len(&self) -> Option<usize> {
        self.params
    }

    /// Watches (or stops watching) every resource of `type_url`, present and future.
    pub fn set_wildcard(&mut self, type_url: &Arc<str>, on: bool) {
        let reg = self
            .registered
            .get_or_insert_with(type_url, Registered::default);
        if reg.wildcard == on {
            return;
        }
        let before = reg.all();
        reg.wildcard = on;
        let after = reg.all();
        let mut index = lock_index(&self.index);
        index.set_all(type_url, self.id, &self.signal, before, after);
    }

    /// Watches a subscription to most names of `type_url` as a whole (`on`): woken by every
    /// change of the type, with no registration per name (a stream of 10,000 names would
    /// otherwise hold 10,000 entries here and in the index); names passed to [`Watcher::watch`]
    /// meanwhile are not recorded. Turned off, the stream watches nothing of the type by name
    /// until `watch` registers its names again.
    pub fn set_dense(&mut self, type_url: &Arc<str>, on: bool) {
        let reg = self
            .registered
            .get_or_insert_with(type_url, Registered::default);
        if reg.dense == on {
            return;
        }
        let before = reg.all();
        reg.dense = on;
        let after = reg.all();
        let mut index = lock_index(&self.index);
        // Registered as a watcher of the whole type before the names are let go.
        index.set_all(type_url, self.id, &self.signal, before, after);
        if on {
            for name in std::mem::take(&mut reg.names) {
                remove_name(&mut index, type_url, &name, self.id);
            }
        }
    }

    /// Watches the named resources of `type_url`, whether or not they exist yet. No names (every
    /// ACK) takes no lock.
    pub fn watch<'a>(
        &mut self,
        type_url: &Arc<str>,
        names: impl IntoIterator<Item = &'a Arc<str>>,
    ) {
        let mut names = names.into_iter().peekable();
        if names.peek().is_none() {
            return;
        }
        let reg = self
            .registered
            .get_or_insert_with(type_url, Registered::default);
        if reg.dense {
            return;
        }
        let mut index = lock_index(&self.index);
        let by_name = index.names.entry(type_url.clone()).or_default();
        for name in names {
            if reg.names.insert(name.clone()) {
                by_name
                    .entry(name.clone())
                    .or_default()
                    .insert(self.id, self.signal.clone());
            }
        }
    }

    /// Stops watching the named resources of `type_url`. No names takes no lock.
    pub fn unwatch<'a>(
        &mut self,
        type_url: &Arc<str>,
        names: impl IntoIterator<Item = &'a Arc<str>>,
    ) {
        let mut names = names.into_iter().peekable();
        if names.peek().is_none() {
            return;
        }
        let Some(reg) = self.registered.get_mut(type_url) else {
            return;
        };
        let mut index = lock_index(&self.index);
        for name in names {
            if reg.names.remove(name) {
                remove_name(&mut index, type_url, name, self.id);
            }
        }
    }

    /// Waits until a watched resource changed since the last `take_changes`.
    pub async fn changed(&self) {
        self.signal.notify.notified().await
    }

    /// The names that changed since the last call, per type; empty if none.
    pub fn take_changes(&self) -> Changes {
        std::mem::take(&mut self.signal.dirty().changes)
    }

    /// From now on changes of these types (only) do not wake the stream ([`Watcher::changed`]):
    /// they are recorded all the same, and `take_changes` takes them with the others. For a
    /// stream that cannot answer them before something else happens (its response of the type
    /// waits for the client's ACK): under churn a change a millisecond would otherwise wake
    /// each such stream for nothing. Takes a lock only when the list differs from the last.
    pub fn mute<'a>(&mut self, types: impl Iterator<Item = &'a Arc<str>> + Clone) {
        // The list is nearly always what it was: compared first, no allocation then.
        if types.clone().eq(self.muted.iter()) {
            return;
        }
        self.muted = types.cloned().collect();
        self.signal.dirty().muted = self.muted.clone();
    }

    /// Whether some types are muted (`mute`).
    pub fn is_muting(&self) -> bool {
        !self.muted.is_empty()
    }
}

fn remove_name(index: &mut WatchIndex, type_url: &Arc<str>, name: &Arc<str>, id: u64) {
    if let Some(by_name) = index.names.get_mut(type_url) {
        if let Some(watchers) = by_name.get_mut(name) {
            watchers.remove(&id);
            if watchers.is_empty() {
                by_name.remove(name);
            }
        }
        if by_name.is_empty() {
            index.names.remove(type_url);
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let mut index = lock_index(&self.index);
        index.params.remove(&self.id);
        for (type_url, reg) in self.registered.iter() {
            if reg.all() {
                if let Some(w) = index.wildcards.get_mut(type_url) {
                    w.remove(&self.id);
                    if w.is_empty() {
                        index.wildcards.remove(type_url);
                    }
                }
            }
            for name in &reg.names {
                remove_name(&mut index, type_url, name, self.id);
            }
        }
    }
}

#[cfg(test)]
impl Watcher {
    /// How many commits' changes the watcher holds shared.
    pub(crate) fn debug_shared(&self) -> usize {
        self.signal.dirty().changes.shared.len()
    }
}

#[cfg(test)]
impl WatchIndex {
    /// (types with named watchers, types with wildcard watchers)
    pub(crate) fn debug_counts(&self) -> (usize, usize) {
        (self.names.len(), self.wildcards.len())
    }
}
