//! Change notification, indexed by name: an update touches only the streams that watch one of the
//! changed names (or the wildcard of its type), never a scan of all clients. When only
//! constrained variants of a name changed (xRFC TP2), a stream that told its parameter sets
//! ([`Watcher::set_params`]) is woken only if one of them matches a changed variant: the others
//! resolve the name to the same variant as before.

use crate::hash::{HashMap, HashSet};
use crate::params::{Constraints, ParamSet};
use crate::types::TypeMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use futures::task::AtomicWaker;

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
/// and is woken by all of them: kept once in the type's log ([`WholeType`]), and each such stream
/// takes a count on it, not its names one by one (at 2,000 changes a second, marking every name
/// on each of 1,000 streams was a quarter of the server's work, all of it on the committing
/// thread while the streams waited).
#[derive(Debug)]
pub(crate) struct TypeChange {
    type_url: Arc<str>,
    names: ChangedNames,
    /// Whether every name wakes every watcher (no constrained variant alone changed).
    wakes_all: bool,
    /// Whether a name may have gone: one of them has no variant left, or one had aliases.
    removes: bool,
    /// The glob collection (xRFC TP1) of each changed xdstp name the commit built or dropped a
    /// resource of, as the resource carries it, by name: what `notify` reads, not the name.
    collections: Box<[(Arc<str>, Arc<str>)]>,
}

impl TypeChange {
    pub(crate) fn new(type_url: Arc<str>, names: ChangedNames, removes: bool) -> TypeChange {
        let wakes_all = names.iter().all(|(_, wake)| *wake == Wake::All);
        TypeChange {
            type_url,
            names,
            wakes_all,
            removes,
            collections: Box::default(),
        }
    }

    /// This change with the glob collections of its xdstp names (name, collection), as their
    /// resources carry them.
    pub(crate) fn with_collections(mut self, mut collections: Vec<(Arc<str>, Arc<str>)>) -> Self {
        collections.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        collections.dedup_by(|a, b| a.0 == b.0);
        self.collections = collections.into();
        self
    }

    /// The glob collection of the changed name `name`, if its resource said it.
    fn collection(&self, name: &str) -> Option<&Arc<str>> {
        let i = self
            .collections
            .binary_search_by(|(n, _)| (**n).cmp(name))
            .ok()?;
        Some(&self.collections[i].1)
    }

    /// The type URL.
    pub(crate) fn type_url(&self) -> &Arc<str> {
        &self.type_url
    }

    /// This change with `more` names, waking all (sorted, one entry per name, as `new` takes
    /// them).
    pub(crate) fn with_names(&self, more: ChangedNames) -> TypeChange {
        let mut names = self.names.clone();
        names.extend(more);
        merge_names(&mut names);
        let mut change = TypeChange::new(self.type_url.clone(), names, self.removes);
        change.collections = self.collections.clone();
        change
    }
}

/// Sorts `names` by name and keeps one entry per name, waking whom any of its entries wakes (as
/// [`TypeChange::new`] takes them).
pub(crate) fn merge_names(names: &mut ChangedNames) {
    names.sort_by(|a, b| a.0.cmp(&b.0));
    names.dedup_by(|later, first| {
        let same = later.0 == first.0;
        if same {
            first.1.merge(std::mem::replace(&mut later.1, Wake::All));
        }
        same
    });
}

/// Changed names per type URL.
pub(crate) type Changed = [Arc<TypeChange>];

/// The most commits a type's log keeps for the streams that watch the whole type and have not
/// taken them (see [`WholeType`]): past it, the older half is folded into the sets of names of
/// the streams that lag, so what a slow or stalled stream makes the store hold stays bounded
/// whatever the number of commits.
pub(crate) const MAX_LOG: usize = 256;

/// Names that changed since a stream last looked, per type URL. A name changed by several
/// commits may be listed more than once: the changes of whole types are the commits' own lists,
/// shared by every stream that watches the whole type (see [`Changes::names`]).
#[derive(Debug, Default)]
pub struct Changes {
    /// Names marked one by one (streams watching them by name).
    names: HashMap<Arc<str>, HashSet<Arc<str>>>,
    /// Whole types' changes of commits (see [`TypeChange`]), in commit order.
    shared: Commits,
}

/// Whole types' changes of commits, in commit order: nearly always one (a stream takes its
/// changes at each commit), held then without a list (which the committing thread allocated and
/// the stream's freed, per stream and change).
#[derive(Debug, Default)]
enum Commits {
    #[default]
    None,
    One(Arc<TypeChange>),
    Many(Vec<Arc<TypeChange>>),
}

impl Commits {
    fn as_slice(&self) -> &[Arc<TypeChange>] {
        match self {
            Commits::None => &[],
            Commits::One(change) => std::slice::from_ref(change),
            Commits::Many(changes) => changes,
        }
    }

    fn iter(&self) -> std::slice::Iter<'_, Arc<TypeChange>> {
        self.as_slice().iter()
    }

    fn is_empty(&self) -> bool {
        self.as_slice().is_empty()
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.as_slice().len()
    }

    fn push(&mut self, change: Arc<TypeChange>) {
        *self = match std::mem::take(self) {
            Commits::None => Commits::One(change),
            Commits::One(first) => Commits::Many(vec![first, change]),
            Commits::Many(mut changes) => {
                changes.push(change);
                Commits::Many(changes)
            }
        };
    }
}

impl Changes {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty() && self.shared.is_empty()
    }

    /// The types with changed names, each once.
    pub fn types(&self) -> impl Iterator<Item = &Arc<str>> {
        let commits = self.shared.as_slice();
        let shared = commits.iter().enumerate().filter_map(|(i, c)| {
            let seen = self.names.contains_key(&c.type_url)
                || commits[..i].iter().any(|e| e.type_url == c.type_url);
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
        let commits = std::mem::take(&mut self.shared);
        for change in commits.iter() {
            self.insert_all(change);
        }
    }

    /// Records every name a commit changed of one type in the set of its type.
    fn insert_all(&mut self, change: &TypeChange) {
        let names = self.names.entry(change.type_url.clone()).or_default();
        names.extend(change.names.iter().map(|(n, _)| n.clone()));
    }
}

impl FromIterator<(Arc<str>, HashSet<Arc<str>>)> for Changes {
    fn from_iter<I: IntoIterator<Item = (Arc<str>, HashSet<Arc<str>>)>>(iter: I) -> Changes {
        Changes {
            names: iter.into_iter().collect(),
            shared: Commits::None,
        }
    }
}

/// What the store holds for one stream: a wake-up and the names that changed since it last took
/// them. Many updates while the stream is busy or slow coalesce here; the set is bounded by what
/// the stream watches, whatever the update rate.
#[derive(Default)]
pub(crate) struct Signal {
    /// A change came that wakes the stream, since it last looked ([`Watcher::poll_changed`]).
    fired: AtomicBool,
    /// The stream's task, woken when it fires. A flag and a waker rather than a `Notify`: the
    /// stream polls it at every turn of its loop, without a future made (and dropped) each time
    /// or a lock taken, and a commit wakes it without one either.
    task: AtomicWaker,
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
    /// A commit of a type the stream watches whole was handed over in `changes` (the first
    /// after the stream's last take, see `WatchIndex::notify`) and not taken yet.
    told: bool,
    /// A later commit of such a type waits in the type's log (`WholeType`): `take_changes`
    /// must look there.
    logged: bool,
    /// A change of a muted type came since the last take: a type let go wakes the stream.
    held: bool,
}

impl Signal {
    fn dirty(&self) -> MutexGuard<'_, Pending> {
        // A poisoned lock only means another thread panicked while holding it; the map itself is
        // still a valid set of names.
        self.dirty.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wakes the stream (a wake with no one waiting is kept for its next look).
    fn fire(&self) {
        self.fired.store(true, Ordering::Release);
        self.task.wake();
    }
}

type Watchers = HashMap<u64, Arc<Signal>>;

/// The streams that watch every name of a type (a wildcard, or a subscription to most of it),
/// and the type's commits they have not all taken. The first commit after a stream's take is
/// handed to it (a count on the commit's list, put in its pending changes, and a wake); the
/// next one looks once whether it was taken, and if not waits in the type's log, as do the
/// later ones, which pass the stream by: a stream busy with the last changes, or waiting for its
/// client's ACK, is not touched again until it takes the commits after its cursor with its
/// next changes. Before, every commit handed each such stream a count on its list, under the
/// stream's lock: at a thousand commits a second to a thousand streams (S5), about a sixth of
/// the server's time, nearly all of it memory misses on the streams' state.
#[derive(Default)]
struct WholeType {
    /// The position of `log[0]` among the type's commits since it was first watched whole.
    first: u64,
    log: VecDeque<Arc<TypeChange>>,
    /// Each watcher at the slot it was given (`Registered::slot`): a commit walks one array,
    /// and a stream finds its own without a lookup.
    slots: Vec<Option<Whole>>,
    free: Vec<usize>,
}

impl WholeType {
    fn end(&self) -> u64 {
        self.first + self.log.len() as u64
    }

    fn is_empty(&self) -> bool {
        self.free.len() == self.slots.len()
    }

    /// Records the commits `w` has not taken (from `w.cursor` to `to`) in its own set of names,
    /// and moves its cursor there. `own`: whether the watcher said its parameter sets (a commit
    /// of constrained variants alone then reached it as names, see `notify`).
    fn fold(log: &VecDeque<Arc<TypeChange>>, first: u64, w: &mut Whole, to: u64, own: bool) {
        if w.cursor >= to {
            return;
        }
        let range = (w.cursor - first) as usize..(to - first) as usize;
        let mut pending = w.signal.dirty();
        for change in log.range(range) {
            if change.wakes_all || !own {
                pending.changes.insert_all(change);
            }
        }
        w.cursor = to;
    }
}

/// One stream among a type's whole watchers.
struct Whole {
    id: u64,
    signal: Arc<Signal>,
    /// The stream's group (`Signal::group`), here so that a commit need not read the signal.
    group: u64,
    /// The type's commits before this position were taken.
    cursor: u64,
    /// Handed a commit since its last take from the log (woken, or held while the type is
    /// muted).
    woken: bool,
}

#[derive(Default)]
pub(crate) struct WatchIndex {
    names: HashMap<Arc<str>, HashMap<Arc<str>, Watchers>>,
    wholes: HashMap<Arc<str>, WholeType>,
    /// The parameter sets of the watchers that said them (`Watcher::set_params`).
    params: HashMap<u64, Arc<[ParamSet]>>,
}

impl WatchIndex {
    /// Records `changed` for every stream that watches one of the names and may see the change,
    /// and wakes those streams.
    pub(crate) fn notify(&mut self, changed: &Changed) {
        // Per stream: the (type, name) pairs to mark, and the types whose log it is told of,
        // put in under one lock: a commit's changes of several types reach a stream together.
        // Marked one by one, a stream woken by the first took part of a commit, and
        // make-before-break saw clusters removed before the routes that stopped naming them had
        // changed (Envoy then had no cluster for the old route for a few milliseconds).
        enum Mark<'a> {
            Name(&'a Arc<str>, &'a Arc<str>),
            Told(&'a Arc<TypeChange>),
        }
        // Every mark with its stream's (group, id), in one list sorted once: no map of streams,
        // and no list per stream.
        let mut marks: Vec<((u64, u64), Arc<Signal>, Mark<'_>)> = Vec::new();
        let WatchIndex {
            names: by_type,
            wholes,
            params,
        } = self;
        for change in changed {
            let (type_url, names) = (&change.type_url, &change.names);
            let Some(whole) = wholes.get_mut(type_url) else {
                continue;
            };
            let before = whole.end();
            whole.log.push_back(change.clone());
            let mut oldest = whole.end();
            for w in whole.slots.iter_mut().flatten() {
                let key = (w.group, w.id);
                match params.get(&w.id) {
                    // Only constrained variants changed: the names whose change it may see
                    // (it never takes this commit from the log: one that took everything is
                    // past it).
                    Some(p) if !change.wakes_all => {
                        marks.extend(
                            names
                                .iter()
                                .filter(|(_, wake)| wake.wakes(Some(p)))
                                .map(|(n, _)| (key, w.signal.clone(), Mark::Name(type_url, n))),
                        );
                        if w.cursor == before {
                            w.cursor = before + 1;
                        }
                    }
                    // Told of every commit before this one: if it took them, it is told of
                    // this one too; if not, this one waits in the log (and its take will look
                    // there). One look per stream between two takes: later commits pass it by.
                    _ if w.woken && w.cursor == before => {
                        let mut pending = w.signal.dirty();
                        if pending.told {
                            pending.logged = true;
                        } else {
                            drop(pending);
                            w.cursor = before + 1;
                            marks.push((key, w.signal.clone(), Mark::Told(change)));
                        }
                    }
                    _ if w.woken => {}
                    _ => {
                        w.woken = true;
                        w.cursor = before + 1;
                        marks.push((key, w.signal.clone(), Mark::Told(change)));
                    }
                }
                oldest = oldest.min(w.cursor);
            }
            // What every watcher took goes; past the bound, the laggards' share is folded.
            let taken = (oldest - whole.first) as usize;
            whole.log.drain(..taken);
            whole.first = oldest;
            if whole.log.len() > MAX_LOG {
                let cut = whole.first + (MAX_LOG / 2) as u64;
                for w in whole.slots.iter_mut().flatten() {
                    let own = params.contains_key(&w.id);
                    WholeType::fold(&whole.log, whole.first, w, cut, own);
                }
                whole.log.drain(..MAX_LOG / 2);
                whole.first = cut;
            }
        }
        for change in changed {
            let (type_url, names) = (&change.type_url, &change.names);
            if let Some(by_name) = by_type.get(type_url) {
                for (name, wake) in names {
                    // A member of a glob collection (xRFC TP1) also wakes the watchers of its
                    // collection, told the member's name: one lookup more per changed xdstp
                    // name, no scan. Its collection as its resource carries it (worked out when
                    // the store built it); a name no resource of the commit gave (a pending
                    // name resolved, an alias), from the name.
                    let collection = if !crate::xdstp::is_xdstp(name) {
                        None
                    } else if let Some(c) = change.collection(name) {
                        by_name.get(&**c)
                    } else {
                        crate::xdstp::with_collection_of(name, |c| by_name.get(c)).flatten()
                    };
                    let watchers = by_name.get(name).into_iter().chain(collection);
                    for (id, signal) in watchers.flatten() {
                        if wake.wakes(params.get(id).map(|p| &**p)) {
                            marks.push((
                                (signal.group, *id),
                                signal.clone(),
                                Mark::Name(type_url, name),
                            ));
                        }
                    }
                }
            }
        }
        // A connection's streams woken one after another: each hands its response to HTTP/2
        // while the connection's task waits its turn, and the connection then writes them
        // together (`transport::coalesce`). S1 at 10,000 streams on 100 connections, in a hash
        // map's order and in this one: 6,000 and 2,900 writes per change, 290-400 and 250 ms
        // of CPU.
        marks.sort_by_key(|(key, _, _)| *key);
        for run in marks.chunk_by(|a, b| a.0 == b.0) {
            let signal = &run[0].1;
            let mut pending = signal.dirty();
            let Pending {
                changes,
                muted,
                told,
                held,
                ..
            } = &mut *pending;
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
                    Mark::Told(change) => {
                        changes.shared.push((*change).clone());
                        *told = true;
                        &change.type_url
                    }
                };
                if muted.iter().any(|m| m == type_url) {
                    *held = true;
                } else {
                    wake = true;
                }
            }
            drop(pending);
            if wake {
                signal.fire();
            }
        }
    }
}

impl WatchIndex {
    /// Registers (or not) a stream among the watchers of every name of a type, from `before` to
    /// `after`; the stream's slot among them is kept in `slot`.
    fn set_all(
        &mut self,
        type_url: &Arc<str>,
        (id, signal): (u64, &Arc<Signal>),
        (before, after): (bool, bool),
        slot: &mut usize,
    ) {
        if before == after {
            return;
        }
        if after {
            let whole = self.wholes.entry(type_url.clone()).or_default();
            let w = Whole {
                id,
                signal: signal.clone(),
                group: signal.group,
                cursor: whole.end(),
                woken: false,
            };
            *slot = match whole.free.pop() {
                Some(free) => free,
                None => {
                    whole.slots.push(None);
                    whole.slots.len() - 1
                }
            };
            whole.slots[*slot] = Some(w);
        } else if let Some(whole) = self.wholes.get_mut(type_url) {
            // What it had not taken stays its own, as names.
            if let Some(mut w) = whole.slots.get_mut(*slot).and_then(Option::take) {
                let (end, own) = (whole.end(), self.params.contains_key(&id));
                WholeType::fold(&whole.log, whole.first, &mut w, end, own);
                whole.free.push(*slot);
            }
            if whole.is_empty() {
                self.wholes.remove(type_url);
            }
        }
    }

    /// The whole-type watcher at `slot` of `type_url`, if it is `id`.
    fn whole(&mut self, type_url: &str, slot: usize, id: u64) -> Option<(&mut WholeType, usize)> {
        let whole = self.wholes.get_mut(type_url)?;
        let w = whole.slots.get(slot)?.as_ref()?;
        (w.id == id).then_some((whole, slot))
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
    /// The stream's slot among the type's whole watchers, while `all()`.
    slot: usize,
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
    /// Its stream's parameter sets replaced by others as of the last `set_params`.
    params_reused: u64,
    /// Some types are muted (`mute`): the list is the signal's alone (`Pending::muted`).
    muting: bool,
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
            params_reused: 0,
            muting: false,
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

    /// Records how many of its stream's parameter sets had been replaced by others when
    /// `set_params` was last called (`Session::param_sets_reused`).
    pub fn set_params_reused(&mut self, reused: u64) {
        self.params_reused = reused;
    }

    /// What [`Watcher::set_params_reused`] last recorded (0 before).
    pub fn params_reused(&self) -> u64 {
        self.params_reused
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
        let stream = (self.id, &self.signal);
        index.set_all(type_url, stream, (before, after), &mut reg.slot);
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
        let stream = (self.id, &self.signal);
        index.set_all(type_url, stream, (before, after), &mut reg.slot);
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
        std::future::poll_fn(|cx| self.poll_changed(cx)).await
    }

    /// Ready once a watched resource changed since the last time it was ready (or a muted type
    /// was let go while its changes waited); else pending, and `cx` is woken when one does.
    /// What [`Watcher::changed`] awaits, for a driver that polls it at every turn of its loop.
    pub fn poll_changed(&self, cx: &mut Context<'_>) -> Poll<()> {
        // Registered before the flag is read: a wake in between is not lost.
        self.signal.task.register(cx.waker());
        if self.signal.fired.swap(false, Ordering::AcqRel) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// The names that changed since the last call, per type; empty if none.
    pub fn take_changes(&self) -> Changes {
        {
            let mut pending = self.signal.dirty();
            if !pending.logged {
                pending.held = false;
                pending.told = false;
                return std::mem::take(&mut pending.changes);
            }
        }
        // Its types' logs and its own names under the index's lock, as commits record them:
        // never part of a commit.
        let mut index = lock_index(&self.index);
        let own_params = index.params.contains_key(&self.id);
        let mut shared = Vec::new();
        for (type_url, reg) in self.registered.iter() {
            let Some((whole, slot)) = reg
                .all()
                .then(|| index.whole(type_url, reg.slot, self.id))
                .flatten()
            else {
                continue;
            };
            let (first, end) = (whole.first, whole.end());
            let Some(w) = whole.slots[slot].as_mut() else {
                continue;
            };
            let from = w.cursor.saturating_sub(first) as usize;
            shared.extend(
                whole
                    .log
                    .range(from..)
                    .filter(|c| c.wakes_all || !own_params)
                    .cloned(),
            );
            w.cursor = end;
            w.woken = false;
        }
        let mut pending = self.signal.dirty();
        pending.logged = false;
        pending.held = false;
        pending.told = false;
        let mut changes = std::mem::take(&mut pending.changes);
        for change in shared {
            changes.shared.push(change);
        }
        changes
    }

    /// From now on changes of these types (only) do not wake the stream ([`Watcher::changed`]):
    /// they are recorded all the same, and `take_changes` takes them with the others. For a
    /// stream that cannot answer them before something else happens (its response of the type
    /// waits for the client's ACK): under churn a change a millisecond would otherwise wake
    /// each such stream for nothing. Takes no lock when none was muted and none is. A type let
    /// go while a change of a muted type waits wakes the stream.
    pub fn mute<'a>(&mut self, types: impl Iterator<Item = &'a Arc<str>> + Clone) {
        let none = types.clone().next().is_none();
        if none && !self.muting {
            return;
        }
        // One list, the signal's (the store reads it as it records a change): a stream mutes
        // and lets go of a type or two at every change, and a second list kept beside it was
        // refilled as often, with its counts on the type URLs taken and given back.
        let mut pending = self.signal.dirty();
        if types.clone().eq(pending.muted.iter()) {
            return;
        }
        let let_go = pending.muted.iter().any(|t| !types.clone().any(|n| n == t));
        // Refilled in place: its room is kept from one change to the next.
        pending.muted.clear();
        pending.muted.extend(types.cloned());
        self.muting = !none;
        // (Taken with the others, held changes end the hold.)
        let wake = let_go && pending.held;
        drop(pending);
        if wake {
            self.signal.fire();
        }
    }

    /// Whether some types are muted (`mute`).
    pub fn is_muting(&self) -> bool {
        self.muting
    }

    /// Whether [`Watcher::take_changes`] would take anything: changes handed over, or a commit
    /// waiting in a whole type's log. Without one, a take would hand back nothing and leave
    /// every flag as it is (`told` and `held` are only set with a change handed over, `logged`
    /// only after `told`): nearly every ACK of a stream that mutes a type finds nothing.
    pub fn has_changes(&self) -> bool {
        let pending = self.signal.dirty();
        pending.logged || !pending.changes.is_empty()
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
                if let Some((whole, slot)) = index.whole(type_url, reg.slot, self.id) {
                    whole.slots[slot] = None;
                    whole.free.push(slot);
                    if whole.is_empty() {
                        index.wholes.remove(type_url);
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
    /// How many commits' changes the store keeps for the watcher, not taken yet.
    pub(crate) fn debug_shared(&self) -> usize {
        let mut index = lock_index(&self.index);
        let mut logs = 0;
        for (type_url, reg) in self.registered.iter().filter(|(_, reg)| reg.all()) {
            if let Some((whole, slot)) = index.whole(type_url, reg.slot, self.id) {
                let cursor = whole.slots[slot].as_ref().map_or(0, |w| w.cursor);
                logs += (whole.end() - cursor) as usize;
            }
        }
        logs + self.signal.dirty().changes.shared.len()
    }
}

#[cfg(test)]
impl WatchIndex {
    /// (types with named watchers, types with wildcard watchers)
    pub(crate) fn debug_counts(&self) -> (usize, usize) {
        (self.names.len(), self.wholes.len())
    }

    /// How many commits of `type_url` the index keeps for its whole-type watchers.
    pub(crate) fn debug_log_len(&self, type_url: &str) -> usize {
        self.wholes.get(type_url).map_or(0, |w| w.log.len())
    }
}
