//! A SotW request taken in: the wildcard and the keys its list says (shared with the streams
//! that sent the same list), what is owed of the keys added, and the names the transport
//! (un)watches.

use std::sync::Arc;

use super::{Names, SotwMachine, SotwRequest, Subscribed, WILDCARD};
use crate::protocol::machine::Machine;
use crate::protocol::subscription::Wildcard;
use crate::protocol::{
    intern_key, request_keys, Key, ParamSetId, RequestKind, Subscribe, SubscriptionChange,
};
use crate::store::{Interner, TypeSnapshot};

impl SotwMachine {
    /// Takes in a request for this type, subscribed by plain names only, with parameter set 0.
    /// `current` (the store's resources of the type) only serves to share name allocations.
    pub fn handle_request(
        &mut self,
        request: &SotwRequest,
        current: Option<&Arc<TypeSnapshot>>,
    ) -> (RequestKind, SubscriptionChange) {
        self.handle(request, &Subscribe::PLAIN, &[], current)
    }

    /// Takes in a request's list of names (and locators): the wildcard and the keys it
    /// subscribes to from now on. A list the last request repeated changes nothing.
    pub(super) fn subscribe(
        &mut self,
        requested: &Names,
        subscribe: &Subscribe<'_>,
        current: Option<&Arc<TypeSnapshot>>,
    ) -> SubscriptionChange {
        let digest = names_digest(requested, subscribe);
        if self.last_names == Some(digest) {
            return SubscriptionChange {
                repeated: true,
                ..SubscriptionChange::default()
            };
        }
        self.last_names = Some(digest);
        let (wildcard, names) = self.listed(requested, subscribe, current);
        self.respell(requested, wildcard.pid().is_some());
        let mut change = SubscriptionChange::default();
        self.set_wildcard(wildcard, &mut change);
        self.set_keys(names, current, &mut change);
        change
    }

    /// The wildcard and the keys a request's list says (`*` is the wildcard, never a key).
    fn listed(
        &self,
        requested: &Names,
        subscribe: &Subscribe<'_>,
        current: Option<&Arc<TypeSnapshot>>,
    ) -> (Wildcard, Subscribed) {
        let names_something = !requested.is_empty() || !subscribe.locators.is_empty();
        let rule = self
            .core
            .wildcard
            .legacy_rule(names_something, subscribe.default);
        if let Wildcard::Legacy(_) = rule {
            // Legacy wildcard: no name ever sent means `*`.
            return (rule, Subscribed::default());
        }
        if subscribe.locators.is_empty()
            && subscribe.authorities.is_empty()
            && !requested.is_empty()
        {
            if let Some(names) = Subscribed::of_request(requested, subscribe.default, &self.names) {
                // Names another stream subscribed to with the same list: no name looked up.
                return (Wildcard::Off, names);
            }
        }
        let mut wildcard = None;
        let mut names = Subscribed::builder(subscribe.default, requested.len());
        let mut interner = Interner::new(current.map(|t| &**t));
        for (name, pid) in request_keys(requested, *subscribe, subscribe.locators, true) {
            if name == WILDCARD {
                wildcard = Some(pid);
                continue;
            }
            let key = (intern_key(&mut interner, &self.names, &name, pid), pid);
            // What was sent of a key still subscribed is kept.
            let sent = self.names.get(&key.0, pid).copied().flatten();
            names.insert(key, sent);
        }
        let from = (subscribe.locators.is_empty() && subscribe.authorities.is_empty())
            .then_some(requested);
        (Wildcard::listed(wildcard), names.finish(from))
    }

    /// Records the client's spellings of the xdstp names its list spells non-canonically (the
    /// list is the whole subscription: what it no longer spells is forgotten). Names that are not
    /// xdstp cost a comparison of six bytes; a list that spells nothing leaves no entry.
    fn respell(&mut self, requested: &Names, wildcard: bool) {
        let mut spelled: crate::hash::HashMap<Arc<str>, Vec<Arc<str>>> = Default::default();
        for name in requested.strs() {
            if let Some(c) = crate::xdstp::canonical(name) {
                let spellings = spelled.entry(c).or_default();
                if !spellings.iter().any(|s| **s == *name) {
                    spellings.push(Arc::from(name));
                }
            }
        }
        if !spelled.is_empty() {
            // A name also listed as it is (or covered by the wildcard) goes out under its
            // canonical name too.
            for name in requested.iter() {
                if let Some(spellings) = std::str::from_utf8(name)
                    .ok()
                    .and_then(|n| spelled.get_mut(n))
                {
                    if !spellings.iter().any(|s| s.as_bytes() == name) {
                        spellings.push(Arc::from(String::from_utf8_lossy(name)));
                    }
                }
            }
            if wildcard {
                for (c, spellings) in spelled.iter_mut() {
                    if !spellings.contains(c) {
                        spellings.push(c.clone());
                    }
                }
            }
        }
        self.spelled = spelled
            .into_iter()
            .map(|(c, s)| (c, s.into_boxed_slice()))
            .collect();
    }

    /// Takes the wildcard a request says: a wildcard turned on (or onto another parameter set)
    /// is owed a response with everything there is.
    fn set_wildcard(&mut self, wildcard: Wildcard, change: &mut SubscriptionChange) {
        let (before, now) = (self.core.wildcard.pid(), wildcard.pid());
        self.core.wildcard = wildcard;
        if now == before {
            return;
        }
        if now.is_some() != before.is_some() {
            change.wildcard = Some(now.is_some());
        }
        if now.is_some() {
            self.respond = true;
            self.sent_view_version = None;
        }
    }

    /// Takes the keys a request says: the keys added are owed (unless everything is), the
    /// names added and removed go to the transport, what is left of a split response is
    /// computed again.
    fn set_keys(
        &mut self,
        names: Subscribed,
        current: Option<&Arc<TypeSnapshot>>,
        change: &mut SubscriptionChange,
    ) {
        let mut pids: Vec<ParamSetId> = names.keys().map(|(_, p)| p).collect();
        pids.sort_unstable();
        pids.dedup();
        let total = current.map_or(0, |t| t.len());
        // A subscription to most of the type is watched as a whole: the transport needs no
        // names added or removed (a first request of 10,000 names would sort 10,000).
        let dense = crate::protocol::dense(self.core.dense, names.len(), total);
        // Before the first response, everything subscribed is owed anyway (and nothing counts
        // as updated).
        let first_owed = self.respond && self.core.last_nonce.is_none();
        let added: Vec<Key> = if first_owed && dense {
            Vec::new()
        } else {
            new_keys(&names, &self.names)
        };
        let removed: Vec<Key> = new_keys(&self.names, &names);
        for key in &removed {
            self.core.forced.remove(key);
        }
        if !first_owed {
            self.core.forced.extend(added.iter().cloned());
        }
        if !dense {
            self.names_changed(&added, &removed, (&names, &pids), change);
        }
        self.core.pids = pids;
        self.names = names;
        if first_owed && dense {
            self.find_all_globs();
        } else if !added.is_empty() || !removed.is_empty() {
            self.find_globs(&added, &removed);
        }
        if !added.is_empty() || !removed.is_empty() || change.wildcard.is_some() {
            // What is left of a split response is owed to the new subscription.
            self.fold_rest();
        }
        change.set_dense(
            &mut self.core.dense,
            dense,
            self.names.keys().map(|(n, _)| n),
        );
    }

    /// The names (not keys) `added` and `removed` when the keys become `after` (with its
    /// parameter sets), sorted, for the transport to watch by name: a name stays watched while
    /// any parameter set still subscribes to it.
    fn names_changed(
        &self,
        added: &[Key],
        removed: &[Key],
        after: (&Subscribed, &[ParamSetId]),
        change: &mut SubscriptionChange,
    ) {
        let has_name = |set: &Subscribed, pids: &[ParamSetId], name: &Arc<str>| {
            pids.iter().any(|p| set.contains(name, *p))
        };
        change.added = added
            .iter()
            .filter(|(n, _)| !has_name(&self.names, &self.core.pids, n))
            .map(|(n, _)| n.clone())
            .collect();
        change.removed = removed
            .iter()
            .filter(|(n, _)| !has_name(after.0, after.1, n))
            .map(|(n, _)| n.clone())
            .collect();
        change.added.sort_unstable();
        change.added.dedup();
        change.removed.sort_unstable();
        change.removed.dedup();
    }
}

/// The keys of `a` that `b` does not have.
fn new_keys(a: &Subscribed, b: &Subscribed) -> Vec<Key> {
    let same_plain = a.same_plain(b);
    a.keys()
        // The plain names of one shared set are in both.
        .filter(|(_, p)| !(same_plain && *p == a.pid()))
        .filter(|(n, p)| !b.contains(n, *p))
        .map(|(n, p)| (n.clone(), p))
        .collect()
}

/// (count, hash) of a request's subscription, order included.
fn names_digest(names: &Names, subscribe: &Subscribe<'_>) -> (usize, u64) {
    use std::hash::BuildHasher;
    (
        names.len() + subscribe.locators.len(),
        foldhash::fast::FixedState::default().hash_one((
            names,
            subscribe.default,
            subscribe.locators,
        )),
    )
}
