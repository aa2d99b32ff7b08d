//! Subscriptions shared by the streams that subscribe to the same names. A fleet of clients
//! subscribes to the same names (every Envoy of a deployment asks for the endpoints of the same
//! clusters): one set of them, and its index, serves every such stream, instead of a table per
//! stream that each push looks a name up in, out of the cache.
//!
//! A [`Shelf`] finds the set alive for a digest; the sets themselves belong to the subscriptions
//! holding them, and go when the last one does.

use std::hash::{BuildHasher as _, Hash};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use foldhash::fast::FixedState;

/// The digest sets are shelved by: seeded at random once per process, so that a client cannot
/// make its list take the digest of another's (that list's streams would then not share).
pub(crate) fn digest(value: impl Hash) -> u64 {
    static STATE: OnceLock<foldhash::fast::RandomState> = OnceLock::new();
    STATE.get_or_init(Default::default).hash_one(value)
}

/// Keyed by digests already: hashed with a fixed seed (a `static` needs a constant hasher).
type HashMap<K, V> = std::collections::HashMap<K, V, FixedState>;

/// The sets alive of one kind, by digest. An entry whose set is gone is swept out once the map
/// holds twice what it held after the last sweep: it stays within twice the sets alive, plus a
/// few.
pub(crate) struct Shelf<T> {
    sets: Mutex<Sets<T>>,
}

struct Sets<T> {
    by_digest: HashMap<u64, Weak<T>>,
    after_sweep: usize,
}

impl<T> Shelf<T> {
    pub(crate) const fn new() -> Shelf<T> {
        Shelf {
            sets: Mutex::new(Sets {
                by_digest: HashMap::with_hasher(FixedState::with_seed(0)),
                after_sweep: 0,
            }),
        }
    }

    fn sets(&self) -> MutexGuard<'_, Sets<T>> {
        self.sets.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The set alive under `digest`, if `is` says it is the one wanted (digests may collide).
    pub(crate) fn find(&self, digest: u64, is: impl FnOnce(&T) -> bool) -> Option<Arc<T>> {
        let set = self.sets().by_digest.get(&digest)?.upgrade();
        // Dropped, if it must be, outside the lock (this may be the set's last reference).
        set.filter(|s| is(s))
    }

    /// Shelves `set` under `digest`, unless another set alive holds that digest.
    pub(crate) fn shelve(&self, digest: u64, set: &Arc<T>) {
        let mut sets = self.sets();
        let taken = sets
            .by_digest
            .get(&digest)
            .is_some_and(|w| w.strong_count() > 0);
        if taken {
            return;
        }
        sets.by_digest.insert(digest, Arc::downgrade(set));
        if sets.by_digest.len() > 2 * sets.after_sweep + 64 {
            sets.by_digest.retain(|_, w| w.strong_count() > 0);
            sets.after_sweep = sets.by_digest.len();
        }
    }

    /// (entries, entries after the last sweep), for tests.
    #[cfg(test)]
    pub(crate) fn len(&self) -> (usize, usize) {
        let sets = self.sets();
        (sets.by_digest.len(), sets.after_sweep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shelf_finds_a_set_alive_and_sweeps_the_gone_ones() {
        let shelf: Shelf<String> = Shelf::new();
        let kept = Arc::new("kept".to_owned());
        shelf.shelve(1, &kept);
        assert!(shelf.find(1, |s| s == "kept").is_some());
        assert!(
            shelf.find(1, |s| s == "other").is_none(),
            "a collision is no match"
        );
        for d in 2..200 {
            shelf.shelve(d, &Arc::new(format!("gone {d}")));
        }
        let (len, after_sweep) = shelf.len();
        assert!(len <= 2 * after_sweep + 64, "swept as it grows: {len}");
        assert!(len < 100, "the gone sets are swept out: {len}");
        assert!(shelf.find(1, |s| s == "kept").is_some());
        let other = Arc::new("other".to_owned());
        shelf.shelve(1, &other);
        assert!(
            shelf.find(1, |s| s == "kept").is_some(),
            "a set alive keeps its digest"
        );
    }
}
