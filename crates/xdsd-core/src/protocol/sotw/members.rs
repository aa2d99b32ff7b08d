//! What a SotW client was last sent of each member of its glob collections (xRFC TP1), kept by
//! glob: a glob dropped takes its own members (and looks at them alone, for those subscribed by
//! name too), never the members of the stream's other globs.

use std::sync::Arc;

use super::SentMark;
use crate::hash::HashMap;
use crate::protocol::{Key, KeyLookup, ParamSetId};

/// What was sent of each member of one glob, by member name.
type Sent = HashMap<Arc<str>, SentMark>;

/// What was sent of each glob member, by glob (its key: canonical name and parameter set).
#[derive(Debug, Default)]
pub(super) struct MembersSent {
    by_glob: HashMap<Key, Sent>,
    len: usize,
}

#[cfg(test)]
thread_local! {
    /// How many members a glob dropped looked at (this thread's machines; tests).
    pub(super) static LOOKED_AT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl MembersSent {
    /// How many members are recorded.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The glob of the member `name` with `pid`, if recorded: `f` on its members.
    fn with_glob<R>(&self, name: &str, pid: ParamSetId, f: impl FnOnce(&Sent) -> R) -> Option<R> {
        if self.by_glob.is_empty() || !crate::xdstp::is_xdstp(name) {
            return None;
        }
        crate::xdstp::with_collection_of(name, |glob| {
            self.by_glob.get(&(glob, pid) as &dyn KeyLookup).map(f)
        })
        .flatten()
    }

    /// What the client was last sent of the member `key`.
    pub(super) fn get(&self, key: &Key) -> Option<SentMark> {
        self.with_glob(&key.0, key.1, |sent| sent.get(&key.0).copied())
            .flatten()
    }

    pub(super) fn contains_key(&self, key: &Key) -> bool {
        self.get(key).is_some()
    }

    /// Records that the client was sent `mark` of the member `key`; what it was sent before.
    pub(super) fn insert(&mut self, key: Key, mark: SentMark) -> Option<SentMark> {
        // (`None`: a name with no collection, not recorded.)
        crate::xdstp::with_collection_of(&key.0.clone(), |glob| self.insert_in(glob, key, mark))
            .flatten()
    }

    /// [`Self::insert`] for a member of `glob` (its resource says which): nothing of its name
    /// worked out.
    pub(super) fn insert_in(&mut self, glob: &str, key: Key, mark: SentMark) -> Option<SentMark> {
        let (name, pid) = key;
        let sent = match self.by_glob.get_mut(&(glob, pid) as &dyn KeyLookup) {
            Some(sent) => sent,
            None => self.by_glob.entry((Arc::from(glob), pid)).or_default(),
        };
        let before = sent.insert(name, mark);
        self.len += usize::from(before.is_none());
        before
    }

    /// Forgets the member `key`; what the client was sent of it.
    pub(super) fn remove(&mut self, key: &Key) -> Option<SentMark> {
        if self.by_glob.is_empty() {
            return None;
        }
        let by_glob = &mut self.by_glob;
        let removed = crate::xdstp::with_collection_of(&key.0, |glob| {
            let lookup = &(glob, key.1) as &dyn KeyLookup;
            let sent = by_glob.get_mut(lookup)?;
            let removed = sent.remove(&*key.0);
            if sent.is_empty() {
                by_glob.remove(lookup);
            }
            removed
        })
        .flatten();
        self.len -= usize::from(removed.is_some());
        removed
    }

    /// Forgets every member of the glob `glob`: how many of them `named` says (the glob's own
    /// members looked at, no other).
    pub(super) fn take_glob(&mut self, glob: &Key, named: impl Fn(&Arc<str>) -> bool) -> usize {
        let Some(sent) = self.by_glob.remove(glob) else {
            return 0;
        };
        self.len -= sent.len();
        #[cfg(test)]
        LOOKED_AT.with(|l| l.set(l.get() + sent.len()));
        sent.keys().filter(|n| named(n)).count()
    }

    /// Keeps the members of the globs `keep` says.
    pub(super) fn retain_globs(&mut self, mut keep: impl FnMut(&Key) -> bool) {
        let mut len = self.len;
        self.by_glob.retain(|glob, sent| {
            let kept = keep(glob);
            if !kept {
                len -= sent.len();
            }
            kept
        });
        self.len = len;
    }

    /// Whether a member with `pid` is recorded.
    pub(super) fn has_param_set(&self, pid: ParamSetId) -> bool {
        self.by_glob.keys().any(|k| k.1 == pid)
    }

    /// Every member recorded.
    pub(super) fn keys(&self) -> impl Iterator<Item = Key> + '_ {
        self.by_glob
            .iter()
            .flat_map(|(glob, sent)| sent.keys().map(move |n| (n.clone(), glob.1)))
    }

    pub(super) fn clear(&mut self) {
        self.by_glob.clear();
        self.len = 0;
    }
}
