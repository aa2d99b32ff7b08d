//! What a delta response owes, gathered: the resources, removals, heartbeats and unresolved
//! aliases of the keys forced, changed, to recheck or to renew, put in the order they go out.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use super::holdings::PendingBase;
use super::DeltaMachine;
use crate::hash::HashSet;
use crate::protocol::subscription::reset;
use crate::protocol::{Key, KeyLookup, ParamSetId, Views};
use crate::store::{Resource, View};

/// A variant in a response: (name, version).
type VariantId = (Arc<str>, Arc<str>);

/// The keys a resource is sent for: nearly always one, held without an allocation (a first
/// response of 10,000 resources made 10,000 one-key vectors).
#[derive(Debug)]
pub(super) enum Keys {
    One(Key),
    /// The one key of the resource's own name with this parameter set, made only when needed:
    /// a resource sent in a view's order and recorded as the view needs none (making it takes a
    /// count on the name, shared with every stream).
    Own(ParamSetId),
    Many(Vec<Key>),
}

impl Keys {
    /// Adds `other`'s keys that it does not have; both are keys of `r`. Each key once: one
    /// resource reached by two ways of one key (the wildcard and a glob of its parameter set)
    /// is held, and counted, once.
    fn append(&mut self, r: &Arc<Resource>, other: Keys) {
        let mut all: Vec<Key> = match std::mem::replace(self, Keys::Many(Vec::new())) {
            Keys::Many(keys) => keys,
            one => one.into_keys(r).collect(),
        };
        for key in other.into_keys(r) {
            if !all.contains(&key) {
                all.push(key);
            }
        }
        *self = Keys::Many(all);
    }

    /// The keys, of `r`.
    pub(super) fn iter<'a>(&'a self, r: &Arc<Resource>) -> impl Iterator<Item = Cow<'a, Key>> {
        let (one, many): (Option<Cow<'a, Key>>, &'a [Key]) = match self {
            Keys::One(key) => (Some(Cow::Borrowed(key)), &[]),
            Keys::Own(pid) => (Some(Cow::Owned((r.name().clone(), *pid))), &[]),
            Keys::Many(keys) => (None, &keys[..]),
        };
        one.into_iter().chain(many.iter().map(Cow::Borrowed))
    }

    /// The keys, of `r`, by value.
    pub(super) fn into_keys(self, r: &Arc<Resource>) -> impl Iterator<Item = Key> {
        let (one, many) = match self {
            Keys::One(key) => (Some(key), Vec::new()),
            Keys::Own(pid) => (Some((r.name().clone(), pid)), Vec::new()),
            Keys::Many(keys) => (None, keys),
        };
        one.into_iter().chain(many)
    }
}

/// One thing a response owes: a resource (for the keys that resolve to it), a removal, a
/// heartbeat.
#[derive(Debug)]
pub(super) enum Owed {
    Send(Arc<Resource>, Keys),
    Remove(Key),
    Beat(Arc<Resource>),
    /// VHDS: an alias subscribed on demand that names no virtual host.
    Unresolved(Key),
}

/// What a response owes, as [`DeltaMachine::collect`] gathers it. Keys are what the client
/// subscribed by (a name or an alias, and a parameter set); the response holds each variant
/// once, whatever the number of keys that lead to it.
#[derive(Debug, Default)]
struct Gathered {
    /// Only [`Owed::Send`]s, (resource, keys) pairs put in (name, version) order: the rest of
    /// what is owed is added to them at the end, so that the response is put together in one
    /// vector (10,000 resources were copied through three).
    sends: Vec<Owed>,
    removed: BTreeSet<Key>,
    /// VHDS aliases that name no virtual host.
    unresolved: BTreeSet<Key>,
    beats: BTreeMap<VariantId, Arc<Resource>>,
    /// Keys not answered: their name is pending (see `Core::waiting`).
    waiting: Vec<(Key, bool)>,
}

impl Gathered {
    /// Owes `r` to `keys`. Takes the keys: the loops over a view make one each, moved here
    /// rather than cloned (every clone of a name is an atomic count shared with every other
    /// stream).
    fn send(&mut self, keys: Keys, r: &Arc<Resource>) {
        self.sends.push(Owed::Send(r.clone(), keys));
    }

    /// Puts the resources in (name, version) order, each variant once for every key that
    /// leads to it, unless they were all read in a view's order (`only_dense`: then each comes
    /// once, sorted); drops the heartbeats of the variants sent.
    fn put_in_order(&mut self, only_dense: bool) {
        let sends = &mut self.sends;
        // Whether no two resources have one name, as the sort found.
        let mut distinct = false;
        if !only_dense && !sends.is_sorted_by(|a, b| by_variant(a, b).is_le()) {
            distinct = sort_by_variant(sends);
        }
        if !only_dense && !distinct {
            sends.dedup_by(|later, kept| match (later, kept) {
                (Owed::Send(r, keys), Owed::Send(first, held))
                    if first.name() == r.name() && first.version() == r.version() =>
                {
                    let keys = std::mem::replace(keys, Keys::Many(Vec::new()));
                    held.append(r, keys);
                    true
                }
                _ => false,
            });
        }
        self.beats.retain(|(name, version), _| {
            sends
                .binary_search_by(|o| match o {
                    Owed::Send(r, _) => (r.name(), r.version()).cmp(&(name, version)),
                    _ => std::cmp::Ordering::Less,
                })
                .is_err()
        });
    }

    /// Everything owed, in the order it goes out: resources by name, removals, heartbeats,
    /// unresolved aliases.
    fn into_owed(self) -> Vec<Owed> {
        // Most responses owe resources and nothing else (a changed name): no other list to walk.
        if self.removed.is_empty() && self.beats.is_empty() && self.unresolved.is_empty() {
            return self.sends;
        }
        let mut owed = self.sends;
        owed.reserve(self.removed.len() + self.beats.len() + self.unresolved.len());
        owed.extend(self.removed.into_iter().map(Owed::Remove));
        owed.extend(self.beats.into_values().map(Owed::Beat));
        owed.extend(self.unresolved.into_iter().map(Owed::Unresolved));
        owed
    }
}

/// How [`DeltaMachine::in_view_order`] read the forced keys of one view in its order.
#[derive(Debug, Default)]
struct ViewOrder {
    /// The parameter set of that view (`None`: not read in a view's order).
    pid: Option<ParamSetId>,
    /// How many resources it owes.
    covered: usize,
    /// The view recorded as [`Holdings::base`], if the response sends nothing else.
    base: Option<PendingBase>,
}

impl DeltaMachine {
    /// Everything owed, in the order it goes out: resources by name, removals, heartbeats.
    pub(super) fn collect(&mut self, views: &Views) -> Vec<Owed> {
        self.pending_base = self.wildcard_base(views);
        let (mut gathered, named_base) = self.gather(views);
        if named_base.is_some() {
            self.pending_base = named_base;
        }
        if !gathered.waiting.is_empty() {
            self.core
                .waiting
                .extend(std::mem::take(&mut gathered.waiting));
        }
        // Nearly always one or two of these held anything: an empty set is left as it is,
        // unless it keeps the room of a large one (which `reset` lets go of).
        fn done<T>(set: &mut HashSet<T>) {
            if !set.is_empty() || set.capacity() > 64 {
                reset(set);
            }
        }
        done(&mut self.heartbeat);
        done(&mut self.core.forced);
        done(&mut self.recheck);
        done(&mut self.core.dirty);
        self.check_all = false;
        self.forced_all = false;
        gathered.into_owed()
    }

    /// A wildcard client that holds nothing is sent the whole view, in its order: recorded as
    /// the view (see [`Holdings`]). Not for clients that hold variants by `resource_name` (they
    /// are few), nor for a view with aliases (a key may be an alias).
    fn wildcard_base(&self, views: &Views) -> Option<PendingBase> {
        let w = self.core.wildcard.pid().filter(|_| self.check_all)?;
        let view = views.view(w);
        (self.has.is_empty() && !self.core.encoding.named && !view.has_aliases()).then(|| {
            PendingBase {
                pid: w,
                view: view.clone(),
                gaps: VecDeque::new(),
                run: Some(0),
            }
        })
    }

    /// The keys owed their resource whatever the client holds: `forced`, or with `forced_all`
    /// every subscribed key and those of `forced` that are not (wildcard keys).
    fn forced_keys(&self) -> (&HashSet<Key>, Vec<&Key>) {
        if self.forced_all {
            let extra = self.core.forced.iter().filter(|k| !self.names.contains(*k));
            (&self.names, extra.collect())
        } else {
            (&self.core.forced, Vec::new())
        }
    }

    /// What is owed, gathered in the order it is found, then put in order; and the view a first
    /// response to most names of a view records (see [`Self::in_view_order`]).
    fn gather(&self, views: &Views) -> (Gathered, Option<PendingBase>) {
        let (main, extra) = self.forced_keys();
        let forced_len = main.len() + extra.len();
        // With the wildcard's view read whole (its first answer, or the wildcard turned on),
        // room for all of it: grown push by push, the vector of a 100,000-name view was copied
        // some 17 times over per stream (in a relay's heap, where a large block is copied rather
        // than remapped, 5 % of its last-level write misses over S12's sync, BENCHMARKS.md stop
        // 75).
        let whole = self
            .core
            .wildcard
            .pid()
            .filter(|_| self.check_all)
            .map_or(0, |w| views.view(w).len());
        let mut g = Gathered {
            // Room for the changed names too: a change alone is the response of most pushes.
            sends: Vec::with_capacity(forced_len + self.core.dirty.len() + whole),
            ..Gathered::default()
        };
        if self.check_all {
            self.gather_check_all(views, &mut g);
        }
        let order = self.in_view_order(views, main, &extra, &mut g);
        // The keys the view's order did not cover: those of other parameter sets, and names
        // the view does not have.
        let rest = main.iter().chain(extra).filter(|key| {
            order.covered < forced_len
                && (order.pid != Some(key.1) || views.get(&key.0, key.1).is_none())
        });
        self.gather_forced(views, rest, &mut g);
        self.gather_dirty(views, &mut g);
        self.gather_recheck(views, &mut g);
        self.gather_heartbeats(views, &mut g);
        let only_dense = order.pid.is_some() && g.sends.len() == order.covered;
        g.put_in_order(only_dense);
        (g, order.base.filter(|_| only_dense))
    }

    /// Owed with the wildcard turned on (or a first request): every resource of its view the
    /// client does not hold (all of them when recorded as the view, as it holds nothing), and
    /// the removal of every subscribed key it holds that the store does not have.
    fn gather_check_all(&self, views: &Views, g: &mut Gathered) {
        if let Some(w) = self.core.wildcard.pid() {
            let whole = self.pending_base.is_some();
            for r in views.view(w).iter() {
                if whole {
                    g.send(Keys::Own(w), r);
                    continue;
                }
                let key = (r.name().clone(), w);
                if !self.holds(&key, r) {
                    g.send(Keys::One(key), r);
                }
            }
        }
        for (key, _) in self.has.iter() {
            if self.subscribed(&key) && views.get(&key.0, key.1).is_none() {
                if views.pending(&key.0, key.1) {
                    // Not known yet: what the client holds stands until the name resolves.
                    g.waiting.push((key, false));
                    continue;
                }
                g.removed.insert(key);
            }
        }
    }

    /// A client that subscribes to most of a view with one parameter set (every cluster's
    /// endpoints): the forced keys of that view read in its order, so that they come sorted.
    /// A first response to most names of a view, to a client that holds nothing, sent in the
    /// view's order, is recorded as the view, with the names it skips (see [`PendingBase`]), if
    /// it sends nothing else (no key out of the view's order). Not for clients that hold
    /// variants by `resource_name`, nor with the wildcard on (that one is recorded as the
    /// wildcard's view).
    fn in_view_order(
        &self,
        views: &Views,
        main: &HashSet<Key>,
        extra: &[&Key],
        g: &mut Gathered,
    ) -> ViewOrder {
        let mut order = ViewOrder::default();
        let [pid] = self.core.pids[..] else {
            return order;
        };
        let view = views.view(pid);
        if !crate::protocol::in_view_order(view, main.len() + extra.len()) {
            return order;
        }
        order.pid = Some(pid);
        order.base = self.named_base(view, pid, extra);
        let extra: HashSet<&Key> = extra.iter().copied().collect();
        // Which names of the view are subscribed, when every key is owed: found once for the
        // streams that share the subscription, no name looked up per stream.
        let in_view = self.forced_all.then(|| self.names.in_view(view, pid));
        for (i, r) in view.iter().enumerate() {
            let subscribed = match &in_view {
                Some(in_view) => in_view.has(i),
                None => main.contains(&(&**r.name(), pid) as &dyn KeyLookup),
            };
            if subscribed {
                g.send(Keys::Own(pid), r);
                order.covered += 1;
                if let Some(base) = order.base.as_mut().filter(|b| !b.gaps.is_empty()) {
                    // Sent past a name it skips: the parts are not runs of the view.
                    base.run = None;
                }
                continue;
            }
            if !extra.is_empty() {
                let key = (r.name().clone(), pid);
                if extra.contains(&key) {
                    g.send(Keys::One(key), r);
                    order.covered += 1;
                    continue;
                }
            }
            if let Some(base) = &mut order.base {
                base.gaps.push_back(r.name().clone());
            }
        }
        order
    }

    /// The view a first response to most names of `view` records, when every key is owed, none
    /// out of the view (`extra`), to a client that holds nothing by name (see
    /// [`Self::in_view_order`]).
    fn named_base(&self, view: &Arc<View>, pid: ParamSetId, extra: &[&Key]) -> Option<PendingBase> {
        let first = self.forced_all && extra.is_empty() && self.has.is_empty();
        (first && self.core.wildcard.pid().is_none() && !self.core.encoding.named).then(|| {
            PendingBase {
                pid,
                view: view.clone(),
                gaps: VecDeque::new(),
                run: Some(0),
            }
        })
    }

    /// The forced `keys`: each owed its resource, or, when the store has none, a removal (a
    /// subscribed name that does not exist is reported at once). VHDS: Envoy asks for the
    /// virtual host of a domain by alias, and waits for a resource with that alias (and no
    /// body) when there is none; a removal would leave the request hanging until its stream
    /// times out.
    fn gather_forced<'k>(
        &self,
        views: &Views,
        keys: impl Iterator<Item = &'k Key>,
        g: &mut Gathered,
    ) {
        let on_demand = *self.core.type_url == *crate::types::VIRTUAL_HOST;
        for key in keys {
            if crate::xdstp::is_glob(&key.0) {
                // A glob collection (xRFC TP1): its members, each under its own name; with
                // none, the glob's own name in `removed_resources` (TP1, "Glob"), unless the
                // glob is pending (a relay's upstream has not answered it): not known yet.
                let mut members = views.view(key.1).members(&key.0).peekable();
                if members.peek().is_none() {
                    if views.pending(&key.0, key.1) {
                        g.waiting.push((key.clone(), true));
                    } else {
                        g.removed.insert(key.clone());
                    }
                }
                for r in members {
                    g.send(Keys::One((r.name().clone(), key.1)), r);
                }
                continue;
            }
            match views.get(&key.0, key.1) {
                Some(r) => g.send(Keys::One(key.clone()), r),
                // Not known yet (pending): answered once the name resolves.
                None if views.pending(&key.0, key.1) => g.waiting.push((key.clone(), true)),
                None if on_demand && !self.has.contains_key(key) => {
                    g.unresolved.insert(key.clone());
                }
                None => {
                    g.removed.insert(key.clone());
                }
            }
        }
    }

    /// The keys of the names the store changed: their resource if the client does not hold it,
    /// a removal if the store no longer has what it holds.
    fn gather_dirty(&self, views: &Views, g: &mut Gathered) {
        for name in &self.core.dirty {
            for key in self.keys_of(name) {
                match views.get(&key.0, key.1) {
                    Some(r) if !self.holds(&key, r) => g.send(Keys::One(key), r),
                    Some(_) => {}
                    // Not known yet: what the client holds stands until the name resolves.
                    None if self.has.contains_key(&key) && views.pending(&key.0, key.1) => {
                        g.waiting.push((key, false));
                    }
                    None if self.has.contains_key(&key) => {
                        g.removed.insert(key);
                    }
                    None => {}
                }
            }
        }
    }

    /// The keys to recheck: their resource if still subscribed, else a removal.
    fn gather_recheck(&self, views: &Views, g: &mut Gathered) {
        for key in &self.recheck {
            match views.get(&key.0, key.1) {
                Some(r) if self.subscribed(key) => g.send(Keys::One(key.clone()), r),
                _ => {
                    g.removed.insert(key.clone());
                }
            }
        }
    }

    /// Heartbeats: the keys whose variant the client holds at its current version (those the
    /// response sends anyway are dropped later, see [`Gathered::put_in_order`]); a key the
    /// client holds at another version gets its resource (what it holds is stale), a key now
    /// gone is removed as any.
    fn gather_heartbeats(&self, views: &Views, g: &mut Gathered) {
        for key in &self.heartbeat {
            match views.get(&key.0, key.1) {
                Some(r) if self.holds(key, r) => {
                    g.beats
                        .insert((r.name().clone(), r.version().clone()), r.clone());
                }
                Some(r) => g.send(Keys::One(key.clone()), r),
                None => {
                    g.removed.insert(key.clone());
                }
            }
        }
    }
}

/// The (name, version) of a resource owed, to put them in order (only resources are compared).
fn owed_variant(owed: &Owed) -> Option<(&Arc<str>, &Arc<str>)> {
    match owed {
        Owed::Send(r, _) => Some((r.name(), r.version())),
        _ => None,
    }
}

/// Two things owed by (name, version) (see [`owed_variant`]).
fn by_variant(a: &Owed, b: &Owed) -> std::cmp::Ordering {
    owed_variant(a).cmp(&owed_variant(b))
}

/// The bytes of the name of a resource owed (empty for anything else, which sorts first).
fn owed_name(owed: &Owed) -> &[u8] {
    owed_variant(owed).map_or(&[], |(name, _)| name.as_bytes())
}

/// Below this many, a gather is sorted as it is (a key per resource would cost more).
const SORT_BY_KEY: usize = 64;

/// Sorts `owed` by (name, version), stably (of two variants with one name and version, the
/// first found is sent). A large gather (the keys of a changed part of a view, found in a
/// hashed set's order) is sorted by an integer per resource: the eight bytes of its name past
/// the prefix every name of the gather shares, then its place in the gather (so that the sort
/// needs not be stable, and compares integers only, rather than two pointers followed and the
/// bytes compared: half the sync's sorting was that); a run of names equal in those bytes is
/// then put in order by comparing them whole. The resources are then moved to their places in
/// the vector, each swapped once. Whether the sort found no two names alike in those bytes
/// (then no two resources have one name: nothing to merge).
fn sort_by_variant(owed: &mut [Owed]) -> bool {
    if owed.len() < SORT_BY_KEY || owed.len() > u32::MAX as usize {
        owed.sort_by(by_variant);
        return false;
    }
    let first = owed_name(&owed[0]);
    let shared = owed.iter().fold(first.len(), |shared, o| {
        let n = owed_name(o);
        first[..shared]
            .iter()
            .zip(n)
            .position(|(a, b)| a != b)
            .unwrap_or(shared.min(n.len()))
    });
    let mut keys: Vec<u128> = (0u32..)
        .zip(owed.iter())
        .map(|(i, o)| (u128::from(name_key(owed_name(o), shared)) << 64) | u128::from(i))
        .collect();
    keys.sort_unstable();
    // Runs of one key: names alike in their eight bytes, in the order found (by place), put in
    // order whole (stably: a variant found twice keeps the first first).
    let (mut at, mut distinct) = (0, true);
    while at < keys.len() {
        let key = keys[at] >> 64;
        let run = keys[at..].iter().take_while(|k| *k >> 64 == key).count();
        if run > 1 {
            keys[at..at + run].sort_by(|a, b| by_variant(&owed[place(*a)], &owed[place(*b)]));
            distinct = false;
        }
        at += run;
    }
    // Each place gets the resource the sort put there: the one at `keys[i]`'s place, or, if
    // that one moved already (a place before `i`), where it moved to.
    let mut from: Vec<usize> = keys.iter().map(|k| place(*k)).collect();
    for i in 0..from.len() {
        let mut j = from[i];
        while j < i {
            j = from[j];
        }
        from[i] = j;
        owed.swap(i, j);
    }
    distinct
}

/// The place in the gather a sort key ([`sort_by_variant`]) names.
fn place(key: u128) -> usize {
    (key as u32) as usize
}

/// The eight bytes of `name` from `from` on, padded with zeros, as a big-endian integer: of two
/// names that share their first `from` bytes, the one with the smaller integer comes first (a
/// shorter name's padding is below any byte, as the name is below its extensions).
fn name_key(name: &[u8], from: usize) -> u64 {
    let mut bytes = [0u8; 8];
    let rest = name.get(from..).unwrap_or_default();
    let n = rest.len().min(8);
    bytes[..n].copy_from_slice(&rest[..n]);
    u64::from_be_bytes(bytes)
}

/// What the common response owes: the resources of names the store changed, nothing else
/// (see [`DeltaMachine::poll_changed`]). Held without an allocation while it is one (nearly
/// every push: a changed cluster, or the endpoints that warm it).
#[derive(Default)]
struct Changed {
    /// The only one, while there is only one.
    one: Option<(Key, Arc<Resource>)>,
    /// Every one, once there are two or more.
    more: Vec<(Key, Arc<Resource>)>,
}

impl Changed {
    fn push(&mut self, owed: (Key, Arc<Resource>)) {
        if self.more.is_empty() {
            match self.one.take() {
                None => {
                    self.one = Some(owed);
                    return;
                }
                Some(first) => self.more.push(first),
            }
        }
        self.more.push(owed);
    }

    fn as_slice(&self) -> &[(Key, Arc<Resource>)] {
        match &self.one {
            Some(one) => std::slice::from_ref(one),
            None => &self.more,
        }
    }

    fn into_iter(self) -> impl Iterator<Item = (Key, Arc<Resource>)> {
        self.one.into_iter().chain(self.more)
    }
}

impl DeltaMachine {
    /// The response owed when only names the store changed are owed, and each changed key
    /// resolves to a resource the client does not hold at its version: what `collect` and
    /// `emit` make of it, without their lists of what else a response may owe (removals,
    /// heartbeats, forced keys, a view's order, variants moved), which nearly every push to a
    /// subscribed stream lacks. `None` when the response owes anything else (a changed key
    /// the store no longer has, a resource several keys share, a response over the size
    /// limit, a client that holds variants apart): nothing is changed then, and the response
    /// is made the general way. `Some(None)`: nothing is owed (the client holds every change).
    pub(super) fn poll_changed(
        &mut self,
        views: &Views,
        nonces: &mut crate::protocol::NonceGen,
    ) -> Option<Option<super::DeltaResponse>> {
        let plain = !self.respond
            && !self.check_all
            && !self.forced_all
            && self.split.is_empty()
            && !self.core.encoding.named
            // (More forced keys may be sent in a view's order: `in_view_order`.)
            && self.core.forced.len() <= 64
            && self.recheck.is_empty()
            && self.heartbeat.is_empty()
            && !(self.core.dirty.is_empty() && self.core.forced.is_empty());
        if !plain {
            return None;
        }
        // The view the last response recorded as its base is kept only while its parts go out,
        // and none is left (`split` is empty): `collect` would set it again, to none for this
        // response (no wildcard turned on, no first subscription). The first push after a
        // wildcard's first response, or after one sent in a view's order, comes this way too.
        self.pending_base = None;
        let mut changed = Changed::default();
        // Keys sent again whether the client holds them or not (the endpoints that warm a
        // changed cluster).
        for key in &self.core.forced {
            if crate::xdstp::is_glob(&key.0) {
                return None;
            }
            match views.get(&key.0, key.1) {
                Some(r) => changed.push((key.clone(), r.clone())),
                None => return None,
            }
        }
        // The keys of each changed name (`keys_of`), each parameter set's variant looked up
        // first: the resource says the name's glob collection (worked out once, when the store
        // built it), so that a member's glob is one lookup, nothing of the name worked out per
        // stream.
        let w = self.core.wildcard.pid();
        let wildcard_apart = w.filter(|w| !self.core.pids.contains(w));
        for name in &self.core.dirty {
            for pid in self.core.pids.iter().copied().chain(wildcard_apart) {
                let key = (name.clone(), pid);
                match views.get(name, pid) {
                    Some(r) => {
                        let subscribed = w == Some(pid)
                            || self.names.contains(&key)
                            || super::in_glob_by(&self.names, r, name, pid);
                        if subscribed && !self.holds(&key, r) {
                            changed.push((key, r.clone()));
                        }
                    }
                    // Removed, or waiting for a pending name: the general way (which tells
                    // whether a key still has it).
                    None if self.has.contains_key(&key) => return None,
                    None => {}
                }
            }
        }
        // In the order `put_in_order` gives (by name and version); one resource for several
        // keys is one entry of the general way's.
        if changed.more.len() > 1 {
            let more = &mut changed.more;
            more.sort_by(|(_, a), (_, b)| (a.name(), a.version()).cmp(&(b.name(), b.version())));
            if more
                .windows(2)
                .any(|w| w[0].1.name() == w[1].1.name() && w[0].1.version() == w[1].1.version())
            {
                return None;
            }
        }
        let encoding = self.core.encoding;
        let version_view = self.version_view(views);
        let version = version_view.version().clone();
        let overhead = self.core.type_url.len() + version.len() + crate::protocol::PART_OVERHEAD;
        let owed = changed.as_slice();
        let (count, oversized) = crate::protocol::part_len(
            owed.iter()
                .map(|(_, r)| crate::store::field_len(r.delta_entry(encoding).len())),
            self.core.max_response_bytes.saturating_sub(overhead),
        );
        let len = owed.len();
        if count != len {
            // Goes out in parts.
            return None;
        }
        // What `collect` leaves behind (`recheck` and `heartbeat` are empty: see `plain`).
        #[inline]
        fn done<T>(set: &mut HashSet<T>) {
            if !set.is_empty() || set.capacity() > 64 {
                reset(set);
            }
        }
        done(&mut self.core.dirty);
        done(&mut self.core.forced);
        if len == 0 {
            return Some(None);
        }
        // What `emit` records: each resource held by its key.
        self.has.reserve(len);
        let mut record = |(key, r): (Key, Arc<Resource>)| {
            self.count_sent_member(&r, &key);
            self.has.put(key, super::holdings::Held::of(&r));
            r
        };
        // (One resource, nearly every push: no vector.)
        let resources = match changed {
            Changed { one: Some(one), .. } => super::Resources::from(record(one)),
            changed => super::Resources::from(changed.into_iter().map(record).collect::<Vec<_>>()),
        };
        let oversized = self.core.warn_once(oversized);
        // The fields every stream that gets this change sends alike, encoded once for them all.
        let shared = version_view.delta_push(&resources, encoding);
        let system_version_info = version;
        let nonce = nonces.next_nonce();
        let control_plane = self.core.sent(nonce, &system_version_info);
        let response = super::DeltaResponse {
            type_url: self.core.type_url.clone(),
            system_version_info,
            nonce,
            resources,
            whole: None,
            shared: Some(shared),
            removed: Vec::new(),
            removed_variants: Vec::new(),
            heartbeats: Vec::new(),
            unresolved: Vec::new(),
            encoding,
            oversized,
            control_plane,
        };
        // (Only clients that spelled an xdstp name their own way are answered under it.)
        if self.spelled.is_empty() {
            return Some(Some(response));
        }
        Some(Some(self.spell(response)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";

    /// A large gather, found in no order, comes out as a plain stable sort by (name, version)
    /// puts it: names that share a long prefix, that differ past the key's eight bytes, that
    /// are prefixes of one another or hold zero bytes, several versions of a name, and one
    /// variant found twice (the first found first).
    #[test]
    fn a_large_gather_is_put_in_name_and_version_order_as_a_plain_sort_puts_it() {
        let mut names: Vec<String> = (0..300)
            .map(|i: u64| format!("cluster-{:05}", (i * 7919) % 1000))
            .collect();
        names.extend([
            "cluster-0".into(),
            "cluster-".into(),
            "cluster-00000\0".into(),
            "cluster-00000".into(),
            "cluster-000000000000-b".into(),
            "cluster-000000000000-a".into(),
            "cluster-000000000000".into(),
            "cluster-00001-long-tail-past-the-key".into(),
            "cluster-00001-long-tail-past-the-kex".into(),
        ]);
        let mut owed: Vec<Owed> = Vec::new();
        for (i, name) in names.iter().enumerate() {
            // Three bodies, so three versions a name may have; a name met again with the same
            // body is the same variant found twice (another `Arc`).
            let body = bytes::Bytes::from(vec![u8::try_from(i % 3).unwrap_or(0)]);
            let r = Arc::new(Resource::new(T, name.as_str(), body));
            owed.push(Owed::Send(r, Keys::Own(0)));
        }
        assert!(owed.len() >= SORT_BY_KEY);
        let expected: Vec<*const Resource> = {
            let mut plain: Vec<&Owed> = owed.iter().collect();
            plain.sort_by(|a, b| by_variant(a, b));
            plain.iter().map(|o| sent(o)).collect()
        };
        assert!(!sort_by_variant(&mut owed), "names alike: not distinct");
        let got: Vec<*const Resource> = owed.iter().map(sent).collect();
        assert_eq!(got, expected);
    }

    fn sent(owed: &Owed) -> *const Resource {
        match owed {
            Owed::Send(r, _) => Arc::as_ptr(r),
            _ => std::ptr::null(),
        }
    }

    /// A large gather of names that differ within the key's bytes is said distinct, sorted;
    /// one where a resource is reached by two keys is sent once, for both (not distinct).
    #[test]
    fn a_large_gather_merges_a_resource_reached_twice_and_only_then_looks_for_it() {
        let resources: Vec<Arc<Resource>> = (0..200u32)
            .map(|i| {
                let name = format!("ep-{:04}", (i * 37) % 200);
                Arc::new(Resource::new(T, name, bytes::Bytes::from_static(b"x")))
            })
            .collect();
        let mut owed: Vec<Owed> = resources
            .iter()
            .map(|r| Owed::Send(r.clone(), Keys::Own(0)))
            .collect();
        assert!(sort_by_variant(&mut owed), "every name apart");
        assert!(owed.is_sorted_by(|a, b| by_variant(a, b).is_le()));
        // The same, one resource reached again by another key.
        let mut g = Gathered::default();
        for r in &resources {
            g.send(Keys::Own(0), r);
        }
        let again = resources[7].clone();
        g.send(Keys::One((again.name().clone(), 1)), &again);
        g.put_in_order(false);
        assert_eq!(g.sends.len(), resources.len(), "sent once");
        let keys: Vec<Key> = g
            .sends
            .iter()
            .find_map(|o| match o {
                Owed::Send(r, keys) if Arc::ptr_eq(r, &again) => {
                    Some(keys.iter(r).map(|k| k.into_owned()).collect())
                }
                _ => None,
            })
            .expect("sent");
        assert_eq!(keys.len(), 2, "for both keys: {keys:?}");
    }

    /// The key orders names as their bytes do, a shorter name below its extensions.
    #[test]
    fn a_names_key_orders_as_its_bytes_past_the_shared_prefix() {
        let from = "cluster-".len();
        let key = |n: &str| name_key(n.as_bytes(), from);
        assert!(key("cluster-") < key("cluster-\0\0x"));
        assert!(key("cluster-a") < key("cluster-b"));
        assert!(key("cluster-ab") < key("cluster-abc"));
        assert_eq!(key("cluster-12345678x"), key("cluster-12345678y"));
        assert!(key("cluster-12345677z") < key("cluster-12345678"));
    }
}
