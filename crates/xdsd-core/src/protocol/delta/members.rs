//! The members of glob collections (xRFC TP1) a delta client holds that no name of its
//! subscription names: each counts apart against the stream's names budget
//! ([`Machine::key_count`](crate::protocol::machine::Machine::key_count)). A number per glob,
//! not a name per member: a stream that holds a glob of 10,000 members holds one count, and
//! what the client holds (the machine's `has`) says which members they are.
//!
//! The count follows what changes it, each time a held key becomes or stops being a member held
//! apart (held, an xdstp name, not subscribed by name, its glob subscribed): a key the client
//! comes to hold or stops holding, a member subscribed or unsubscribed by name (one lookup), a
//! glob subscribed (its members in the store counted once, with those held whose removal is
//! still owed) or unsubscribed (its count dropped). Never a look at everything the client holds.

use crate::hash::HashMap;
use crate::protocol::{Key, ParamSetId};

/// The count of one glob, by parameter set (nearly always one).
type BySet = Vec<(ParamSetId, usize)>;

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

    /// How many counts are kept (one per glob and parameter set with members held apart):
    /// what the count costs the stream, whatever the number of members (tests).
    #[cfg(test)]
    pub(super) fn counts(&self) -> usize {
        self.by_glob.values().map(Vec::len).sum()
    }

    /// Counts the member `key` of its glob (read from its name), which was not counted: the
    /// caller knows it just became a member held apart.
    pub(super) fn add(&mut self, key: &Key) {
        crate::xdstp::with_collection_of(&key.0, |glob| self.add_to(glob, key.1));
    }

    /// [`Self::add`] for a member of `glob` (its resource says which) with `pid`.
    pub(super) fn add_to(&mut self, glob: &str, pid: ParamSetId) {
        let sets = match self.by_glob.get_mut(glob) {
            Some(sets) => sets,
            None => self.by_glob.entry(Box::from(glob)).or_default(),
        };
        match sets.iter_mut().find(|(p, _)| *p == pid) {
            Some((_, n)) => *n += 1,
            None => sets.push((pid, 1)),
        }
        self.len += 1;
    }

    /// Stops counting the member `key`, which was counted: the caller knows it was a member
    /// held apart and no longer is. (A glob's count stops at nothing.)
    pub(super) fn sub(&mut self, key: &Key) {
        let taken = crate::xdstp::with_collection_of(&key.0, |glob| {
            let Some(sets) = self.by_glob.get_mut(glob) else {
                return false;
            };
            let Some(i) = sets.iter().position(|(pid, _)| *pid == key.1) else {
                return false;
            };
            sets[i].1 -= 1;
            if sets[i].1 == 0 {
                sets.swap_remove(i);
                if sets.is_empty() {
                    self.by_glob.remove(glob);
                }
            }
            true
        })
        .unwrap_or(false);
        self.len -= usize::from(taken);
    }

    /// Sets the count of the glob `glob` (its key), just subscribed, to `n`: its members held
    /// apart, counted once.
    pub(super) fn set(&mut self, glob: &Key, n: usize) {
        self.take(glob);
        if n == 0 {
            return;
        }
        self.by_glob
            .entry(Box::from(&*glob.0))
            .or_default()
            .push((glob.1, n));
        self.len += n;
    }

    /// Drops the count of the glob `glob` (its key), no longer subscribed; how many members it
    /// counted.
    pub(super) fn take(&mut self, glob: &Key) -> usize {
        let Some(sets) = self.by_glob.get_mut(&*glob.0) else {
            return 0;
        };
        let Some(i) = sets.iter().position(|(pid, _)| *pid == glob.1) else {
            return 0;
        };
        let (_, n) = sets.swap_remove(i);
        if sets.is_empty() {
            self.by_glob.remove(&*glob.0);
        }
        self.len -= n;
        n
    }
}
