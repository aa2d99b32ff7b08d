//! A delta request taken in: the keys it subscribes to and unsubscribes from (shared with the
//! streams that subscribed with the same requests), the wildcard, what a reconnecting client
//! says it holds, and what the stream watches after it.

use std::borrow::Cow;
use std::sync::Arc;

use super::holdings::held;
use super::{DeltaMachine, DeltaRequest};
use crate::protocol::machine::Machine;
use crate::protocol::subscription::{Wildcard, WILDCARD};
use crate::protocol::{
    intern_key, request_keys, Key, KeyLookup, ParamSetId, RequestKind, Subscribe,
    SubscriptionChange,
};
use crate::store::{intern_with_variants, Interner, TypeSnapshot};

/// The name each key a request names was held under before it (`None`: not held), in the
/// request's order — its subscriptions' keys, then its unsubscriptions', the wildcard left
/// out — or `None` for a stream that held nothing: [`DeltaMachine::held_before`].
pub(super) type HeldBefore = Option<Vec<Option<Arc<str>>>>;

impl DeltaMachine {
    /// Takes in a request for this type, subscribed by plain names with parameter set 0.
    pub fn handle_request(
        &mut self,
        request: &DeltaRequest,
        current: Option<&Arc<TypeSnapshot>>,
    ) -> (RequestKind, SubscriptionChange) {
        self.handle(request, &Subscribe::PLAIN, &[], current)
    }

    /// Takes in the keys a request subscribes to (`*` turns the wildcard on): owed their
    /// resource even if the client seems to have it, unless a reconnecting client says which
    /// version it has. The parameter sets of the keys added.
    pub(super) fn subscribe(
        &mut self,
        request: &DeltaRequest,
        subscribe: &Subscribe<'_>,
        reconnecting: bool,
        current: Option<&Arc<TypeSnapshot>>,
    ) -> Vec<ParamSetId> {
        let subscribe_len = request.resource_names_subscribe.len() + subscribe.locators.len();
        if subscribe_len == 0 {
            // (A request that subscribes to nothing, an ACK: shared keys stay shared.)
            return Vec::new();
        }
        // No key subscribed yet, and none the client says it holds: every key subscribed is new,
        // owed through `forced_all` rather than one by one.
        if self.names.is_empty() && !reconnecting {
            self.forced_all = true;
        }
        if !self.forced_all {
            self.core.forced.reserve(subscribe_len);
        }
        // A subscription of plain names only, to keys made by such subscriptions alone: the
        // keys it makes are those of any other stream that subscribed with the same requests
        // (`SubscribedKeys`).
        let plain = !reconnecting
            && self.recheck.is_empty()
            && subscribe.locators.is_empty()
            && subscribe.authorities.is_empty();
        let parent = plain.then(|| self.names.digest()).flatten();
        let shared = parent.and_then(|_| {
            self.names
                .with(&request.resource_names_subscribe, subscribe.default)
        });
        // Either keys another stream made of the same requests, which hold every key subscribed,
        // or every key subscribed already held (a client asking again for what it may have
        // forgotten): the keys are taken as they are (still shared, if they are).
        let mut pids_added = Vec::new();
        if let Some(keys) = shared {
            self.names = keys;
            pids_added.push(subscribe.default);
        } else if reconnecting || self.adds_keys(&request.resource_names_subscribe, subscribe) {
            return self.add_keys(request, subscribe, reconnecting, parent, current);
        }
        self.force_held_keys(request, subscribe, current);
        pids_added
    }

    /// Owes the keys a request subscribes to again, which are all held: even those the client
    /// seems to have; with `forced_all` every key is owed anyway, and none is looked up unless
    /// one waits for a recheck.
    fn force_held_keys(
        &mut self,
        request: &DeltaRequest,
        subscribe: &Subscribe<'_>,
        current: Option<&Arc<TypeSnapshot>>,
    ) {
        if self.forced_all && self.recheck.is_empty() {
            return;
        }
        let mut interner = Interner::new(current.map(|t| &**t));
        let keys = request_keys(
            &request.resource_names_subscribe,
            *subscribe,
            subscribe.locators,
            true,
        );
        for (name, pid) in keys {
            let key: Key = (intern_key(&mut interner, &*self.names, &name, pid), pid);
            if !self.recheck.is_empty() {
                self.recheck.remove(&key);
            }
            if !self.forced_all {
                self.core.forced.insert(key);
            }
        }
    }

    /// Adds the keys a request subscribes to (some are new, or the client is reconnecting),
    /// and shares them with the streams that subscribed with the same requests (`parent`: the
    /// digest of the keys before, when they were made by plain requests alone). The parameter
    /// sets of the keys added.
    fn add_keys(
        &mut self,
        request: &DeltaRequest,
        subscribe: &Subscribe<'_>,
        reconnecting: bool,
        parent: Option<u64>,
        current: Option<&Arc<TypeSnapshot>>,
    ) -> Vec<ParamSetId> {
        let lookup = |name: &str| current.map(|t| t.variants(name)).unwrap_or(&[]);
        let mut interner = Interner::new(current.map(|t| &**t));
        // Not collected: a first request names 10,000.
        let keys = request_keys(
            &request.resource_names_subscribe,
            *subscribe,
            subscribe.locators,
            true,
        );
        let mut pids_added: Vec<ParamSetId> = Vec::new();
        let names = self.names.keys_mut();
        names.reserve(request.resource_names_subscribe.len() + subscribe.locators.len());
        let mut wildcard = None;
        for (name, pid) in keys {
            if name == WILDCARD {
                wildcard = Some(pid);
                continue;
            }
            if !pids_added.contains(&pid) {
                pids_added.push(pid);
            }
            let key: Key = (intern_key(&mut interner, &*names, &name, pid), pid);
            if !self.recheck.is_empty() {
                self.recheck.remove(&key);
            }
            if reconnecting {
                if let Some(version) = request.initial_resource_versions.get(name.as_bytes()) {
                    names.insert(key.clone());
                    self.has
                        .insert(key.clone(), held(&key.0, lookup(&name), version));
                    // Compared with the store at the next response, like a change.
                    self.core.dirty.insert(key.0);
                    continue;
                }
            }
            // Sent even if the client seems to have it: it may have forgotten it. Moved, not
            // cloned, when every key is owed anyway (a count shared with every stream).
            if self.forced_all {
                names.insert(key);
            } else {
                names.insert(key.clone());
                self.core.forced.insert(key);
            }
        }
        if let Some(pid) = wildcard {
            self.set_wildcard(Wildcard::Explicit(pid));
        }
        if let (Some(parent), None) = (parent, wildcard) {
            if pids_added == [subscribe.default] {
                self.names
                    .share(parent, &request.resource_names_subscribe, subscribe.default);
            }
        }
        pids_added
    }

    /// What a reconnecting wildcard client says it holds (`initial_resource_versions`) of the
    /// names it did not subscribe to by name: held as the wildcard's keys.
    pub(super) fn claim_wildcard_keys(
        &mut self,
        request: &DeltaRequest,
        current: Option<&Arc<TypeSnapshot>>,
    ) {
        let Some(w) = self.core.wildcard.pid() else {
            return;
        };
        // Room for them at once: a client reconnecting with 100,000 grew the set 17 times.
        self.has.reserve(request.initial_resource_versions.len());
        for (name, version) in &request.initial_resource_versions {
            // Its name read as text once (a check of its bytes at each call) and looked up in
            // the store once, for its interned name and its variants.
            let name = name.as_str();
            let (name_of, variants) = intern_with_variants(current.map(|t| &**t), name);
            let key = (name_of.clone(), w);
            if !self.has.contains_key(&key) {
                if super::glob_only(&self.names, &key) {
                    self.glob_members.add(&key);
                }
                self.has.insert(key, held(&name_of, variants, version));
            }
        }
    }

    /// Takes in the keys a request unsubscribes from (`*` turns the wildcard off): whether any
    /// was subscribed.
    pub(super) fn unsubscribe(
        &mut self,
        keys: Vec<(Cow<'_, str>, ParamSetId)>,
        current: Option<&Arc<TypeSnapshot>>,
    ) -> bool {
        let mut unsubscribed = false;
        for (name, pid) in keys {
            if name == WILDCARD {
                self.set_wildcard(Wildcard::Off);
                continue;
            }
            // Phantom unsubscriptions (names not subscribed) are ignored (and leave shared keys
            // shared).
            let lookup = &(&*name, pid) as &dyn KeyLookup;
            if !self.names.contains(lookup) {
                continue;
            }
            let Some(key) = self.names.keys_mut().take(lookup) else {
                continue;
            };
            unsubscribed = true;
            self.core.forced.remove(&key);
            if crate::xdstp::is_glob(&key.0) {
                // The client drops the members only the glob gave it (as for the wildcard):
                // the glob's own members, not a look at everything it holds. Those the
                // wildcard of the same parameter set gives it too, it keeps. Either way they
                // no longer count apart.
                let counted = self.glob_members.take(&key);
                if counted > 0 && self.core.wildcard.pid() != Some(key.1) {
                    let mut members = self.held_members_of(&key, current, false);
                    if members.len() < counted {
                        // One it counted is gone from the store, the stream not told yet.
                        members = self.held_members_of(&key, current, true);
                    }
                    for member in members {
                        self.has.remove(&member);
                    }
                }
            } else if self.core.wildcard.is_on() || self.in_glob(&key.0, key.1) {
                // Still covered by the wildcard or a glob, or not: the client cannot tell,
                // so it is owed the resource or its removal (the spec's rule for `*` with a
                // name, "Unsubscribing", applied to a glob with one of its members). Held
                // through its glob, it counts apart again.
                if self.has.contains_key(&key) && self.in_glob(&key.0, key.1) {
                    self.glob_members.add(&key);
                }
                self.recheck.insert(key);
            } else {
                self.has.remove(&key);
            }
        }
        unsubscribed
    }

    /// The distinct parameter sets of the keys, after `added` were added, or counted again when
    /// some key was `unsubscribed`.
    pub(super) fn update_pids(&mut self, added: Vec<ParamSetId>, unsubscribed: bool) {
        let one = |pids: &[ParamSetId]| match pids {
            [pid] => Some(*pid),
            _ => None,
        };
        if let (true, Some(pid)) = (unsubscribed, one(&self.core.pids)) {
            if added.iter().all(|p| *p == pid) {
                // Every key held had the one parameter set, and every key added: the keys left
                // have it too, if any are left (no look at them all: a stream of 100,000 names
                // unsubscribing one).
                if self.names.is_empty() {
                    self.core.pids.clear();
                }
                return;
            }
        }
        if unsubscribed {
            let mut pids: Vec<ParamSetId> = Vec::new();
            for (_, p) in self.names.iter() {
                if !pids.contains(p) {
                    pids.push(*p);
                }
            }
            pids.sort_unstable();
            self.core.pids = pids;
        } else if !added.is_empty() {
            for p in added {
                if !self.core.pids.contains(&p) {
                    self.core.pids.push(p);
                }
            }
            self.core.pids.sort_unstable();
        }
    }

    /// The name a key of `name` is held under, with any parameter set the stream holds keys
    /// of (the same name under two parameter sets is one name to watch).
    fn held_name(&self, name: &str) -> Option<Arc<str>> {
        self.core
            .pids
            .iter()
            .find_map(|pid| self.names.get(&(name, *pid) as &dyn KeyLookup))
            .map(|key| key.0.clone())
    }

    /// What the keys a request names were held under before it ([`HeldBefore`]): what
    /// [`DeltaMachine::change`] compares with what they are after it. Only those can change:
    /// keys are added by a request's subscriptions and taken by its unsubscriptions alone (keys
    /// shared from a stream that made the same requests are these keys and the request's). A
    /// look at each name the request names, none for a stream that held nothing.
    pub(super) fn held_before(
        &self,
        request: &DeltaRequest,
        subscribe: &Subscribe<'_>,
        unsubscribe: &[(Cow<'_, str>, ParamSetId)],
    ) -> HeldBefore {
        if self.names.is_empty() {
            return None;
        }
        let subscribed = request_keys(
            &request.resource_names_subscribe,
            *subscribe,
            subscribe.locators,
            true,
        );
        let named = subscribed.map(|(name, _)| name);
        let named = named.chain(unsubscribe.iter().map(|(name, _)| name.clone()));
        Some(
            named
                .filter(|name| name != WILDCARD)
                .map(|name| self.held_name(&name))
                .collect(),
        )
    }

    /// What a request changed of what the stream watches (`before`: how the keys it named,
    /// `named` in the same order, were held before it, when the keys were not dense); what is
    /// left of a split response is computed again with the change. It costs the names the
    /// request named, and nothing of them when the stream now watches the type as a whole.
    pub(super) fn change<'n>(
        &mut self,
        names_something: bool,
        wildcard_before: bool,
        before: Option<HeldBefore>,
        named: impl Iterator<Item = Cow<'n, str>>,
        current: Option<&Arc<TypeSnapshot>>,
    ) -> SubscriptionChange {
        let mut change = SubscriptionChange::default();
        if self.core.wildcard.is_on() != wildcard_before {
            change.wildcard = Some(self.core.wildcard.is_on());
        }
        if names_something || change.wildcard.is_some() {
            self.fold_rest();
        }
        if names_something {
            let total = current.map_or(0, |t| t.len());
            let dense = crate::protocol::dense(self.core.dense, self.names.len(), total);
            if let (Some(before), false) = (before, dense) {
                let mut before = before.map(Vec::into_iter);
                for name in named.filter(|name| name != WILDCARD) {
                    let was = before.as_mut().and_then(Iterator::next).flatten();
                    match (was, self.held_name(&name)) {
                        (None, Some(now)) => change.added.push(now),
                        (Some(was), None) => change.removed.push(was),
                        _ => {}
                    }
                }
                // In the names' order, once each (a request may name one twice).
                for names in [&mut change.added, &mut change.removed] {
                    names.sort_unstable();
                    names.dedup();
                }
            }
            change.set_dense(
                &mut self.core.dense,
                dense,
                self.names.iter().map(|(n, _)| n),
            );
        }
        change
    }

    /// Whether subscribing to `names` (and `subscribe.locators`) adds a key or the wildcard.
    fn adds_keys(&self, names: &crate::protocol::Names, subscribe: &Subscribe<'_>) -> bool {
        request_keys(names, *subscribe, subscribe.locators, true).any(|(name, pid)| {
            name == WILDCARD || !self.names.contains(&(&*name, pid) as &dyn KeyLookup)
        })
    }

    /// Takes the wildcard state `to`: a wildcard turned on (or onto another parameter set) is
    /// owed every resource the client does not hold; one turned off drops what only it gave.
    pub(super) fn set_wildcard(&mut self, to: Wildcard) {
        let before = self.core.wildcard.pid();
        self.core.wildcard = to;
        if to.pid() == before {
            return;
        }
        if to.is_on() {
            self.check_all = true;
        } else {
            // The client drops what only the wildcard gave it (not a glob's members: what it
            // drops counted as no glob's member held apart).
            let names = &self.names;
            self.has.retain(|k| super::covers(names, &k.0, k.1));
            self.recheck.clear();
        }
    }
}
