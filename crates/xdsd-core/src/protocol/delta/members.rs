//! The members of glob collections (xRFC TP1) a delta client holds that no name of its
//! subscription names: each counts apart against the stream's names budget
//! ([`Machine::key_count`](crate::protocol::machine::Machine::key_count)). Kept by glob, so
//! that what a request changes costs what it changes — a member subscribed or unsubscribed by
//! name is one lookup, a glob unsubscribed takes its own members — never a look at everything
//! the client holds.

use std::sync::Arc;

use crate::hash::{HashMap, HashSet};
use crate::protocol::{Key, ParamSetId};

/// The members of one glob counted, by parameter set (nearly always one).
type BySet = Vec<(ParamSetId, HashSet<Arc<str>>)>;

/// The held members counted apart, by glob collection (its canonical name, as the subscription
/// keys it) and parameter set.
#[derive(Debug, Default)]
pub(super) struct GlobMembers {
    by_glob: HashMap<Box<str>, BySet>,
    len: usize,
}

impl GlobMembers {
    /// How many members are counted.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Counts the member `key` of its glob (read from its name); whether it was not counted.
    pub(super) fn insert(&mut self, key: &Key) -> bool {
        let added = crate::xdstp::with_collection_of(&key.0, |glob| {
            let sets = match self.by_glob.get_mut(glob) {
                Some(sets) => sets,
                None => self.by_glob.entry(Box::from(glob)).or_default(),
            };
            let set = match sets.iter().position(|(pid, _)| *pid == key.1) {
                Some(i) => &mut sets[i].1,
                None => {
                    sets.push((key.1, HashSet::default()));
                    &mut sets.last_mut().expect("just pushed").1
                }
            };
            set.insert(key.0.clone())
        })
        .unwrap_or(false);
        self.len += usize::from(added);
        added
    }

    /// Stops counting the member `key`; whether it was counted. Names that are not xdstp (and
    /// every name, while nothing is counted) are not looked at.
    pub(super) fn remove(&mut self, key: &Key) -> bool {
        if self.len == 0 || !crate::xdstp::is_xdstp(&key.0) {
            return false;
        }
        let removed = crate::xdstp::with_collection_of(&key.0, |glob| {
            let Some(sets) = self.by_glob.get_mut(glob) else {
                return false;
            };
            let Some(i) = sets.iter().position(|(pid, _)| *pid == key.1) else {
                return false;
            };
            let removed = sets[i].1.remove(&*key.0);
            if sets[i].1.is_empty() {
                sets.swap_remove(i);
                if sets.is_empty() {
                    self.by_glob.remove(glob);
                }
            }
            removed
        })
        .unwrap_or(false);
        self.len -= usize::from(removed);
        removed
    }

    /// Whether the member `key` is counted.
    pub(super) fn contains(&self, key: &Key) -> bool {
        self.len > 0
            && crate::xdstp::is_xdstp(&key.0)
            && crate::xdstp::with_collection_of(&key.0, |glob| {
                self.by_glob.get(glob).is_some_and(|sets| {
                    sets.iter()
                        .any(|(pid, set)| *pid == key.1 && set.contains(&*key.0))
                })
            })
            .unwrap_or(false)
    }

    /// Takes the members counted of the glob `glob` (its key): no longer counted.
    pub(super) fn take_glob(&mut self, glob: &Key) -> HashSet<Arc<str>> {
        let Some(sets) = self.by_glob.get_mut(&*glob.0) else {
            return HashSet::default();
        };
        let Some(i) = sets.iter().position(|(pid, _)| *pid == glob.1) else {
            return HashSet::default();
        };
        let (_, members) = sets.swap_remove(i);
        if sets.is_empty() {
            self.by_glob.remove(&*glob.0);
        }
        self.len -= members.len();
        members
    }
}
