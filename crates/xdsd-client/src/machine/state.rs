//! A type's state in the client machine: its subscriptions, what it holds (with the indexes
//! kept in step with it: aliases, names, bytes, deadlines, expiries) and what the next request
//! owes.

use super::held::{Held, HeldKey, HeldSet};
use super::lookup::{from_name, stop_timer, Plain, SubKey, Variant};
use super::*;

/// The wildcard subscription of a type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wildcard {
    Off,
    /// Subscribed by naming nothing (the legacy form).
    Legacy,
    /// Subscribed as `*`.
    Explicit,
}

/// The wildcard asked on this stream and not answered yet (see `WildcardAnswer`).
#[derive(Debug, Clone, Copy)]
pub(super) struct WildcardWait {
    /// It was in the stream's first request of its type: every response follows it.
    pub(super) first: bool,
    /// What is held is taken as its answer at this time, unless a response answers it before.
    pub(super) deadline: Option<Instant>,
}

/// What is known of one subscribed name.
#[derive(Debug, Clone, Default)]
pub(super) struct Sub {
    /// When it is reported as not existing unless received.
    pub(super) deadline: Option<Instant>,
    /// Reported as not existing since last received.
    pub(super) missing: bool,
    /// On this stream, how many responses of its type had arrived when a request first asked
    /// for it; `Some(None)`: it was in the stream's first request, which every response follows.
    pub(super) asked_at: Option<Option<u64>>,
}

/// `key` as a probe of the held resources.
fn probe(key: &HeldKey) -> Variant<'_> {
    Variant(&key.0, &key.1)
}

/// One type's state on the stream: its subscriptions, what it holds with the indexes kept in
/// step with it, and what the next request owes.
#[derive(Default)]
pub(super) struct TypeState {
    pub(super) wildcard: Option<Wildcard>,
    /// The subscriptions. Added and ended only through [`TypeState::add_sub`] and
    /// [`TypeState::remove_sub`], which keep `located` in step with them.
    pub(super) subs: BTreeMap<Key, Sub>,
    /// Subscriptions with parameters (resource locators): while none is, a name's only
    /// subscription is its plain one (see [`TypeState::subs_of`]).
    pub(super) located: usize,
    /// What is held. Changed only through [`TypeState::put_held`], [`TypeState::hold_new`],
    /// [`TypeState::take_held`] and [`TypeState::set_expiry`], which keep the indexes below in
    /// step with it.
    pub(super) held: HeldSet,
    /// The held resources that carry each alias (only resources with aliases are here).
    pub(super) aliased: BTreeMap<String, BTreeSet<HeldKey>>,
    /// Distinct names held.
    pub(super) held_names: usize,
    /// Bytes of the bodies held.
    pub(super) held_bytes: usize,
    /// The subscriptions whose does-not-exist timer runs, by deadline (each `Sub::deadline`).
    pub(super) deadlines: BTreeSet<(Instant, Key)>,
    /// The held resources with a TTL, by expiry (each `Held::expires`).
    pub(super) expiries: BTreeSet<(Instant, HeldKey)>,
    /// The last accepted version.
    pub(super) version: String,
    /// The nonce of the last response on this stream.
    pub(super) nonce: String,
    /// The reason to NACK with in the next request.
    pub(super) nack: Option<String>,
    /// A request is owed.
    pub(super) owed: bool,
    /// The next request is the stream's first for this type.
    pub(super) initial: bool,
    /// Delta: subscriptions added and removed since the last request. (Both flavors: the
    /// subscriptions added since the last request, whose does-not-exist timers it starts.)
    pub(super) added: BTreeSet<Key>,
    pub(super) removed: BTreeSet<Key>,
    /// Delta: the wildcard changed since the last request.
    pub(super) wildcard_changed: bool,
    /// A response was accepted (the first is reported even when it holds nothing).
    pub(super) answered: bool,
    /// Responses received on this stream.
    pub(super) responses: u64,
    /// The wildcard was asked on this stream and is not answered yet.
    pub(super) wildcard_wait: Option<WildcardWait>,
    /// The wildcard's answer on this stream was reported ([`Event::WildcardAnswered`]).
    pub(super) wildcard_answered: bool,
}

/// Whether a held resource answers a subscription to `name`: by its name or an alias, or a
/// member of the glob collection `name`.
pub(super) fn provided(
    held: &HeldSet,
    aliased: &BTreeMap<String, BTreeSet<HeldKey>>,
    name: &str,
) -> bool {
    held.holds_name(name) || aliased.contains_key(name) || members_held(held, name).next().is_some()
}

/// The held members of the glob collection `name` (none when `name` is not a glob): a walk of
/// the names under its path, not of everything held.
pub(super) fn members_held<'a>(
    held: &'a HeldSet,
    name: &str,
) -> impl Iterator<Item = &'a Held> + 'a {
    let parts = xdsd_xdstp::glob_parts(name).map(|(p, q)| (p.to_owned(), q.to_owned()));
    parts.into_iter().flat_map(move |(prefix, query)| {
        let members: Vec<&'a str> = held
            .xdstp_names_from(&prefix)
            .take_while(|n| n.starts_with(&prefix))
            .filter(|n| xdsd_xdstp::is_member(&prefix, &query, n))
            .collect();
        members.into_iter().flat_map(|n| held.variants_of(n))
    })
}

impl TypeState {
    pub(super) fn wildcard(&self) -> Wildcard {
        self.wildcard.unwrap_or(Wildcard::Off)
    }

    pub(super) fn interested(&self) -> bool {
        self.wildcard() != Wildcard::Off || !self.subs.is_empty()
    }

    /// Whether a received resource is one the client asked for: by its name or by one of its
    /// aliases.
    pub(super) fn wants(&self, resource: &Resource) -> bool {
        self.wildcard() != Wildcard::Off || self.asks_by_name(resource)
    }

    /// Whether a subscription other than the wildcard asks for a received resource: by its
    /// name or one of its aliases (a locator's parameters matching its constraints), or as a
    /// member of its glob collection.
    pub(super) fn asks_by_name(&self, resource: &Resource) -> bool {
        let constraints = resource.constraints.as_ref();
        let takes = |key: &Key| {
            key.params.is_empty() || constraints.is_none_or(|c| matches(c, &key.params))
        };
        resource.names().any(|name| self.subs_of(name).any(&takes))
            || collection_of(&resource.name).is_some_and(|c| self.subs_of(&c).any(takes))
    }

    /// The subscriptions to `name`: plain, then its locators. While no locator is subscribed,
    /// its plain one is its only one: found by one look-up, cheaper than a range's walk down
    /// to both of its ends (every resource taken in asks, by its name and aliases).
    pub(super) fn subs_of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Key> + 'a {
        let (plain, named) = if self.located == 0 {
            let plain = self.subs.get_key_value(&Plain(name) as &dyn SubKey);
            (plain.map(|(k, _)| k), None)
        } else {
            let named = self
                .subs
                .range::<dyn SubKey, _>(from_name(&Plain(name)))
                .map(|(k, _)| k)
                .take_while(move |k| k.name == name);
            (None, Some(named))
        };
        plain.into_iter().chain(named.into_iter().flatten())
    }

    /// The held variants of `name`, under its own name.
    pub(super) fn variants_of<'a: 'b, 'b>(
        &'a self,
        name: &'b str,
    ) -> impl Iterator<Item = &'a Held> + 'b {
        self.held.variants_of(name)
    }

    /// What is held under `key`.
    pub(super) fn held_at(&self, key: &HeldKey) -> Option<&Held> {
        self.held.get(&probe(key))
    }

    /// Whether a variant of `name` is held under its own name.
    pub(super) fn holds(&self, name: &str) -> bool {
        self.held.holds_name(name)
    }

    /// Whether a held resource answers a subscription to `name`: by its name or an alias, or a
    /// member of the glob collection `name`.
    #[cfg(test)]
    pub(super) fn provides(&self, name: &str) -> bool {
        provided(&self.held, &self.aliased, name)
    }

    /// The held resources a subscription to `name` may hold: of that name, or with that alias.
    pub(super) fn held_for(&self, name: &str) -> Vec<HeldKey> {
        let mut keys: Vec<HeldKey> = self.variants_of(name).map(Held::key).collect();
        if let Some(aliased) = self.aliased.get(name) {
            keys.extend(aliased.iter().cloned());
        }
        keys.extend(members_held(&self.held, name).map(Held::key));
        keys
    }

    /// What is held under the key of `taken` (a resource taken in, not held itself), and
    /// whether a variant of its name is held (under its own name): a resource taken in needs
    /// both, for the bounds and to be put. One look-up of its key tells both when it is held;
    /// else its name is held if a constrained variant of it is (nothing to look up while none
    /// is held), or, for a constrained key, its unconstrained one.
    pub(super) fn find(&self, taken: &Held) -> (Option<&Held>, bool) {
        if let Some(held) = self.held.get(taken) {
            return (Some(held), true);
        }
        let name = taken.resource.name.as_str();
        let name_held = self.held.has_constrained(name)
            || (!taken.constraints.is_empty() && self.held.get(&Variant(name, &[])).is_some());
        (None, name_held)
    }

    /// Holds `held` in place of what is held under its key (returned). `name_held`: whether a
    /// variant of its name is held, which counts for a key not held (see
    /// [`TypeState::find`]). Its key is copied only for the indexes that name it (an expiry,
    /// aliases), when they change.
    pub(super) fn put_held(&mut self, held: Held, name_held: bool) -> Option<Held> {
        let indexed = held.expires.is_some() || !held.resource.aliases.is_empty();
        let key = indexed.then(|| held.key());
        let (bytes, expires) = (held.bytes, held.expires);
        let aliases = held.resource.aliases.clone();
        let old = self.held.replace(held);
        match &old {
            Some(old) => self.held_bytes = self.held_bytes - old.bytes + bytes,
            None => {
                self.held_names += usize::from(!name_held);
                self.held_bytes += bytes;
            }
        }
        let old_expires = old.as_ref().and_then(|o| o.expires);
        let old_aliases: &[String] = old.as_ref().map_or(&[], |o| &o.resource.aliases);
        if old_expires == expires && old_aliases == aliases.as_slice() {
            return old;
        }
        // Either has an expiry or aliases: the new one's key is copied, or the old one's.
        let Some(key) = key.or_else(|| old.as_ref().map(Held::key)) else {
            return old;
        };
        if old_expires != expires {
            if let Some(e) = old_expires {
                self.expiries.remove(&(e, key.clone()));
            }
            if let Some(e) = expires {
                self.expiries.insert((e, key.clone()));
            }
        }
        if old_aliases != aliases.as_slice() {
            for alias in old_aliases {
                if let Some(keys) = self.aliased.get_mut(alias) {
                    keys.remove(&key);
                    if keys.is_empty() {
                        self.aliased.remove(alias);
                    }
                }
            }
            for alias in aliases {
                self.aliased.entry(alias).or_default().insert(key.clone());
            }
        }
        old
    }

    /// Holds `fresh`, resources under keys not held, in key order, each key once; `names` of
    /// their names were not held before (the caller knows it from its look-up of each, see
    /// [`TypeState::find`]).
    pub(super) fn hold_new(&mut self, fresh: Vec<Held>, names: usize) {
        self.held_names += names;
        for held in &fresh {
            self.held_bytes += held.bytes;
            if held.expires.is_none() && held.resource.aliases.is_empty() {
                continue;
            }
            let key = held.key();
            if let Some(e) = held.expires {
                self.expiries.insert((e, key.clone()));
            }
            for alias in &held.resource.aliases {
                self.aliased
                    .entry(alias.clone())
                    .or_default()
                    .insert(key.clone());
            }
        }
        self.held.extend(fresh);
    }

    /// Drops what is held under `key`.
    pub(super) fn take_held(&mut self, key: &HeldKey) -> Option<Held> {
        let held = self.held.take(&probe(key))?;
        self.held_bytes -= held.bytes;
        if let Some(e) = held.expires {
            self.expiries.remove(&(e, key.clone()));
        }
        for alias in &held.resource.aliases {
            if let Some(keys) = self.aliased.get_mut(alias) {
                keys.remove(key);
                if keys.is_empty() {
                    self.aliased.remove(alias);
                }
            }
        }
        if !self.holds(&key.0) {
            self.held_names -= 1;
        }
        Some(held)
    }

    /// Sets when the resource held under `key` expires.
    pub(super) fn set_expiry(&mut self, key: &HeldKey, expires: Option<Instant>) {
        // A set's members are not changed in place: taken out, and put back.
        let Some(mut held) = self.held.take(&probe(key)) else {
            return;
        };
        if let Some(e) = held.expires {
            self.expiries.remove(&(e, key.clone()));
        }
        held.expires = expires;
        if let Some(e) = expires {
            self.expiries.insert((e, key.clone()));
        }
        self.held.replace(held);
    }

    /// Every subscription to `name` is settled: received (`missing` false) or known not to
    /// exist (`missing` true), its timer stopped. Returns whether `name` is subscribed, and
    /// whether a subscription to it was newly found missing.
    pub(super) fn settle(&mut self, name: &str, missing: bool) -> (bool, bool) {
        let deadlines = &mut self.deadlines;
        let mut settle = |key: &dyn SubKey, sub: &mut Sub| {
            let newly = missing && !sub.missing;
            if let Some(d) = sub.deadline.take() {
                stop_timer(deadlines, d, key);
            }
            sub.missing = missing;
            newly
        };
        // As in `subs_of`: without locators, one look-up.
        let plain = Plain(name);
        if self.located == 0 {
            let Some(sub) = self.subs.get_mut(&plain as &dyn SubKey) else {
                return (false, false);
            };
            return (true, settle(&plain, sub));
        }
        let (mut subscribed, mut newly) = (false, false);
        for (key, sub) in self
            .subs
            .range_mut::<dyn SubKey, _>(from_name(&plain))
            .take_while(|(k, _)| k.name == name)
        {
            subscribed = true;
            newly |= settle(key, sub);
        }
        (subscribed, newly)
    }

    /// Adds subscription `key` (not subscribed yet).
    pub(super) fn add_sub(&mut self, key: Key) {
        self.located += usize::from(!key.params.is_empty());
        self.subs.insert(key, Sub::default());
    }

    /// Ends subscription `key`: its timer too.
    pub(super) fn remove_sub(&mut self, key: &Key) -> bool {
        let Some(sub) = self.subs.remove(key) else {
            return false;
        };
        self.located -= usize::from(!key.params.is_empty());
        if let Some(d) = sub.deadline {
            stop_timer(&mut self.deadlines, d, key);
        }
        true
    }

    /// A request asked for the subscriptions `keys` (every one when `None`): each one neither
    /// held nor known missing gets its does-not-exist timer, and the count of responses before
    /// it is noted.
    pub(super) fn asked(
        &mut self,
        keys: Option<Vec<Key>>,
        deadline: Option<Instant>,
        at: Option<u64>,
    ) {
        let TypeState {
            subs,
            deadlines,
            held,
            aliased,
            ..
        } = self;
        let mut ask = |key: &Key, sub: &mut Sub| {
            let provided = provided(held, aliased, &key.name);
            if sub.deadline.is_none() && !sub.missing && !provided {
                if let Some(d) = deadline {
                    sub.deadline = Some(d);
                    deadlines.insert((d, key.clone()));
                }
            }
            sub.asked_at.get_or_insert(at);
        };
        match keys {
            None => subs.iter_mut().for_each(|(k, s)| ask(k, s)),
            Some(keys) => {
                for key in keys {
                    if let Some(sub) = subs.get_mut(&key) {
                        ask(&key, sub);
                    }
                }
            }
        }
    }

    /// The next instant something is due: a timer, the wildcard's or an expiry.
    pub(super) fn next_due(&self) -> Option<Instant> {
        let deadline = self.deadlines.first().map(|(d, _)| *d);
        let expiry = self.expiries.first().map(|(e, _)| *e);
        let wildcard = self.wildcard_wait.and_then(|w| w.deadline);
        deadline.into_iter().chain(expiry).chain(wildcard).min()
    }
}

/// The glob collection `name` is a member of, if any: only an xdstp name can be one (the look
/// at any other name allocates nothing).
pub(super) fn collection_of(name: &str) -> Option<String> {
    xdsd_xdstp::is_xdstp(name)
        .then(|| xdsd_xdstp::collection_of(name))
        .flatten()
}

/// Drops the resources of `candidates` no subscription wants any more.
pub(super) fn drop_unwanted(state: &mut TypeState, candidates: Vec<HeldKey>) {
    for key in candidates {
        if state
            .held_at(&key)
            .is_some_and(|h| !state.wants(&h.resource))
        {
            state.take_held(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held((name, constraints): &HeldKey) -> Held {
        Held::bare(name, constraints)
    }

    /// `find` against a scan of everything held: the key's entry, and whether a key of its
    /// name is held, for every key of a few names, with and without constrained keys held
    /// (its shortcut, and its look at the name's constrained variants), whatever `hold_new`
    /// held in one batch or several; and what it finds, given to `put_held`, counts each key and name once.
    #[test]
    fn find_tells_the_key_and_its_name_as_a_scan_does() {
        let names = ["a", "b", "c"];
        let constraints: [&[u8]; 3] = [b"", b"\x01", b"\x02"];
        let keys: Vec<HeldKey> = names
            .iter()
            .flat_map(|n| constraints.iter().map(|c| (n.to_string(), c.to_vec())))
            .collect();
        // Every subset of the keys, held in three batches.
        for set in 0u32..1 << keys.len() {
            let chosen: Vec<&HeldKey> = keys
                .iter()
                .enumerate()
                .filter(|(i, _)| set & (1 << i) != 0)
                .map(|(_, k)| k)
                .collect();
            let mut state = TypeState::default();
            let (one, two) = (chosen.len() / 4, chosen.len() * 3 / 4);
            for batch in [&chosen[..one], &chosen[one..two], &chosen[two..]] {
                let fresh: Vec<Held> = batch.iter().map(|&k| held(k)).collect();
                let new_names: BTreeSet<&str> = batch
                    .iter()
                    .map(|k| k.0.as_str())
                    .filter(|n| !state.holds(n))
                    .collect();
                state.hold_new(fresh, new_names.len());
            }
            let held_names: BTreeSet<&str> = chosen.iter().map(|k| k.0.as_str()).collect();
            assert_eq!(state.held.len(), chosen.len(), "{chosen:?}");
            assert_eq!(state.held_names, held_names.len(), "{chosen:?}");
            let constrained = chosen.iter().filter(|k| !k.1.is_empty()).count();
            assert_eq!(state.held.constrained_keys(), constrained, "{chosen:?}");
            for key in &keys {
                let (found, name_held) = state.find(&held(key));
                assert_eq!(
                    found.is_some(),
                    chosen.contains(&key),
                    "{key:?} in {chosen:?}"
                );
                assert_eq!(
                    name_held,
                    held_names.contains(key.0.as_str()),
                    "{key:?} in {chosen:?}"
                );
            }
            // Each key put, held or not: every key and name held once.
            for key in &keys {
                let (found, name_held) = state.find(&held(key));
                let found = found.is_some();
                let old = state.put_held(held(key), name_held);
                assert_eq!(old.is_some(), found, "{key:?} in {chosen:?}");
            }
            assert_eq!(state.held.len(), keys.len(), "{chosen:?}");
            assert_eq!(state.held_names, names.len(), "{chosen:?}");
            assert_eq!(state.held.constrained_keys(), 2 * names.len(), "{chosen:?}");
        }
    }

    /// `subs_of` and `settle` against a scan of the subscriptions, for every name of a few,
    /// without locators subscribed (their one look-up) and with (their range): the same keys,
    /// each settled with its timer stopped.
    #[test]
    fn subs_of_and_settle_find_a_names_subscriptions_as_a_scan_does() {
        let now = Instant::now();
        let params = Params::from([("k".to_owned(), "v".to_owned())]);
        let plain = |n: &str| Key::plain(n);
        let locator = |n: &str| Key {
            name: n.to_owned(),
            params: params.clone(),
        };
        let sets = [
            vec![plain("a"), plain("c")],
            vec![plain("a"), locator("a"), locator("b"), plain("c")],
            vec![locator("b")],
        ];
        for set in sets {
            let mut state = TypeState::default();
            for key in &set {
                state.add_sub(key.clone());
                state.asked(Some(vec![key.clone()]), Some(now), None);
            }
            assert_eq!(state.deadlines.len(), set.len(), "{set:?}");
            for name in ["a", "aa", "b", "c", ""] {
                let scan: Vec<&Key> = set.iter().filter(|k| k.name == name).collect();
                let found: Vec<&Key> = state.subs_of(name).collect();
                assert_eq!(found, scan, "{name:?} in {set:?}");
                let timers = state.deadlines.len();
                assert_eq!(
                    state.settle(name, true),
                    (!scan.is_empty(), !scan.is_empty()),
                    "{name:?} in {set:?}"
                );
                assert_eq!(state.deadlines.len(), timers - scan.len(), "{name:?}");
                assert!(scan.iter().all(|k| state.subs[*k].missing), "{name:?}");
            }
            assert!(state.deadlines.is_empty(), "{set:?}");
            for key in &set {
                assert!(state.remove_sub(key), "{key:?}");
            }
            assert_eq!(state.located, 0, "{set:?}");
        }
    }
}
