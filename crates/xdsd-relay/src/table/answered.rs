//! Whether it was answered: the store each partition's pending names are declared in, and
//! what resolves them — an answer taken in (resolved in its commit's swap, then announced), or
//! a wait given up (`--upstream-wait`). See the table's module documentation.

use std::collections::BTreeMap;
use std::time::Instant;

use tracing::info;
use xdsd_core::store::{PendingName, PendingNames};

use super::{Partition, State, Table, Want};

impl Table {
    /// The store's pending names, where wants are declared from now on; at most `limit` at once.
    pub(crate) fn attach(&self, pending: PendingNames, limit: usize) {
        pending.set_limit(limit);
        let _ = self.store.set(pending);
    }

    /// The pending names of the store `partition`'s clients read; with `make`, that store made
    /// if nothing holds it (a client asking holds it already: the same store).
    pub(super) fn pending_of(&self, partition: &Partition, make: bool) -> Option<PendingNames> {
        match partition {
            Partition::All => self.store.get().cloned(),
            _ if make => self.stores.store(partition).map(|s| s.pending_names()),
            _ => self.stores.pending_if_held(partition),
        }
    }

    /// Resolves `names`, each in its partition's store, now (`staged`: with that store's next
    /// commit).
    pub(super) fn resolve(&self, names: Vec<(&Partition, &PendingName)>, staged: bool) {
        let mut by: BTreeMap<&Partition, Vec<&PendingName>> = BTreeMap::new();
        for (partition, name) in names {
            by.entry(partition).or_default().push(name);
        }
        for (partition, names) in by {
            if let Some(pending) = self.pending_of(partition, false) {
                if staged {
                    pending.resolve_with_next_commit(names);
                } else {
                    pending.resolve(names);
                }
            }
        }
    }

    /// `wants` are answered by the change about to be committed: what they answer is resolved
    /// in the commit's own swap, so that a downstream stream reads the upstream's answer whole
    /// (its resources and the names it says do not exist) in one response. [`Table::announce`]
    /// once committed (or refused) settles the rest.
    pub(super) fn stage_in(&self, state: &State, wants: &[Want]) {
        let answered: Vec<Want> = wants
            .iter()
            .flat_map(|want| state.answered_by(want))
            .collect();
        let resolved: Vec<(&Partition, &PendingName)> = answered
            .iter()
            .filter_map(|w| {
                let name = state.wants.get(w)?.pending.as_ref()?;
                Some((&w.group.partition, name))
            })
            .collect();
        self.resolve(resolved, true);
    }

    /// `wants` are answered and their answer is in the store: no longer pending (a wildcard's
    /// answer answers the names of its type in its group too), and answered while they are in
    /// the table (an answer nobody asked for is nothing to remember).
    pub(crate) fn announce(&self, wants: impl IntoIterator<Item = Want>) {
        self.announce_in(&mut self.state(), wants);
    }

    pub(super) fn announce_in(&self, state: &mut State, wants: impl IntoIterator<Item = Want>) {
        let mut resolved: Vec<(Partition, PendingName)> = Vec::new();
        for want in wants {
            for w in state.answered_by(&want) {
                if let Some(name) = state.undeclare(&w) {
                    resolved.push((w.group.partition.clone(), name));
                }
            }
            if let Some(entry) = state.wants.get_mut(&want) {
                entry.answered = true;
            }
        }
        if !resolved.is_empty() {
            self.resolve(resolved.iter().map(|(p, n)| (p, n)).collect(), false);
            self.metrics.set_pending(state.declared.len());
        }
    }

    /// Whether the wildcard `want`'s group was sent a response of its type since it was
    /// subscribed (taken in, maybe not committed yet).
    pub(crate) fn responded(&self, want: &Want) -> bool {
        self.state().wants.get(want).is_some_and(|e| e.responded)
    }

    /// Whether `want` is answered.
    #[cfg(test)]
    pub(crate) fn is_answered(&self, want: &Want) -> bool {
        self.state().answered(want, &mut None)
    }

    /// The names of `wants` (subscribed upstream together) that are answered already: by their
    /// own answer, their type's wildcard's or their glob collection's ([`State::answered`]),
    /// under one lock.
    pub(crate) fn answered_names(&self, wants: Vec<Want>) -> Vec<Want> {
        let state = self.state();
        let mut memo = None;
        let answered: Vec<bool> = wants
            .iter()
            .map(|w| !w.is_wildcard() && state.answered(w, &mut memo))
            .collect();
        drop(state);
        wants
            .into_iter()
            .zip(answered)
            .filter_map(|(w, a)| a.then_some(w))
            .collect()
    }

    /// When [`Table::expire`] is next due.
    /// (The stores with declarations are looked at, not every partition's.)
    pub(crate) fn next_expiry(&self) -> Option<Instant> {
        let state = self.state();
        state
            .partitions
            .keys()
            .filter_map(|p| self.pending_of(p, false)?.next_expiry())
            .min()
    }

    /// Gives up, as of `now`, the wants whose wait passed: the clients are served what the
    /// relay has, and they count as answered (the next clients do not wait again: an upstream
    /// that is down, or that sends nothing of a type); those wants.
    pub(crate) fn expire(&self, now: Instant) -> Vec<Want> {
        let mut state = self.state();
        let partitions: Vec<Partition> = state.partitions.keys().cloned().collect();
        let mut gone: Vec<Want> = Vec::new();
        for partition in partitions {
            let Some(store) = self.pending_of(&partition, false) else {
                continue;
            };
            for name in store.expire(now) {
                let want = state.by_pending.get(&(partition.clone(), name)).cloned();
                if let Some(want) = want {
                    state.undeclare(&want);
                    gone.push(want);
                }
            }
        }
        if gone.is_empty() {
            return Vec::new();
        }
        for want in &gone {
            if let Some(entry) = state.wants.get_mut(want) {
                entry.answered = true;
            }
            info!(stream = %want.group, type_url = %want.type_url, name = %want.name, "the upstream did not answer within {:?}: answered with what the relay has", self.wait);
        }
        self.metrics.expired(gone.len());
        self.metrics.set_pending(state.declared.len());
        gone
    }
}
