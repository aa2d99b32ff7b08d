//! The keys a delta subscription holds, shared by the streams whose first request subscribed
//! to the same names (see `protocol::shared`): a client of a fleet subscribes to the names
//! every other one does, and one set of 10,000 keys was 400 KiB per stream, each built by
//! hashing every name again. A stream that changes its subscription gets its own copy.

use std::hash::BuildHasher as _;
use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::hash::HashSet;
use crate::protocol::shared::Shelf;
use crate::protocol::{Key, KeyLookup, Names, Pid};
use crate::store::View;

#[derive(Debug, Default)]
struct KeySet {
    keys: HashSet<Key>,
    /// What it was built from, if shared: the first request's names as encoded, and their
    /// parameter set.
    source: Option<(Box<[u8]>, Pid)>,
    /// Whether the keys cover every name of a view with a parameter set, as last asked: the
    /// streams sharing the keys ask it of the same view (see [`SubscribedKeys::covers`]).
    covers: Mutex<Option<Covers>>,
}

#[derive(Debug)]
struct Covers {
    /// The view asked about: held weakly, its address stays its own while this is kept.
    view: Weak<View>,
    pid: Pid,
    all: bool,
}

/// A copy is a stream's own: it was not built from a request alone.
impl Clone for KeySet {
    fn clone(&self) -> KeySet {
        KeySet {
            keys: self.keys.clone(),
            source: None,
            covers: Mutex::default(),
        }
    }
}

/// The sets of subscriptions alive.
static SETS: Shelf<KeySet> = Shelf::new();

/// A subscription's keys: read as a set, changed with [`SubscribedKeys::keys_mut`].
#[derive(Debug, Default)]
pub(super) struct SubscribedKeys {
    set: Arc<KeySet>,
}

fn digest(names: &Names, pid: Pid) -> u64 {
    foldhash::fast::FixedState::default().hash_one((names.encoded(), pid))
}

impl SubscribedKeys {
    /// The keys of a stream that subscribed to `names` with parameter set `pid` (and nothing
    /// else), if another stream's are alive.
    pub(super) fn shared(names: &Names, pid: Pid) -> Option<SubscribedKeys> {
        let set = SETS.find(digest(names, pid), |s| {
            s.source
                .as_ref()
                .is_some_and(|(bytes, p)| *p == pid && **bytes == *names.encoded())
        })?;
        Some(SubscribedKeys { set })
    }

    /// Offers these keys to the streams that subscribe to `names` with `pid` next: they must be
    /// exactly what a first request of `names` with `pid` subscribed to, and nothing since.
    pub(super) fn share(&mut self, names: &Names, pid: Pid) {
        let Some(set) = Arc::get_mut(&mut self.set) else {
            return;
        };
        set.source = Some((names.encoded().into(), pid));
        SETS.shelve(digest(names, pid), &self.set);
    }

    /// The keys, to change: the stream's own copy from now on if they are shared.
    pub(super) fn keys_mut(&mut self) -> &mut HashSet<Key> {
        let set = Arc::make_mut(&mut self.set);
        // Changed: no longer what its source subscribed to, nor what was found of a view.
        set.source = None;
        *set.covers.get_mut().unwrap_or_else(|e| e.into_inner()) = None;
        &mut set.keys
    }
}

impl SubscribedKeys {
    /// Whether every name of `view` is a key with parameter set `pid`: found once per view for
    /// every stream sharing these keys (10,000 lookups per stream for a first response of
    /// 10,000 names, each a name compared out of the cache).
    pub(super) fn covers(&self, view: &Arc<View>, pid: Pid) -> bool {
        fn memo(set: &KeySet) -> MutexGuard<'_, Option<Covers>> {
            set.covers.lock().unwrap_or_else(|e| e.into_inner())
        }
        if let Some(c) = memo(&self.set).as_ref() {
            if c.pid == pid && Weak::as_ptr(&c.view) == Arc::as_ptr(view) {
                return c.all;
            }
        }
        let keys = &self.set.keys;
        let all = view.len() <= keys.len()
            && view
                .iter()
                .all(|r| keys.contains(&(&**r.name(), pid) as &dyn KeyLookup));
        *memo(&self.set) = Some(Covers {
            view: Arc::downgrade(view),
            pid,
            all,
        });
        all
    }
}

#[cfg(test)]
impl SubscribedKeys {
    /// Whether both hold one set.
    pub(super) fn is_shared_with(&self, other: &SubscribedKeys) -> bool {
        Arc::ptr_eq(&self.set, &other.set)
    }
}

impl Deref for SubscribedKeys {
    type Target = HashSet<Key>;

    fn deref(&self) -> &HashSet<Key> {
        &self.set.keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Names {
        list.iter().collect()
    }

    #[test]
    fn streams_subscribing_to_the_same_names_share_their_keys_until_one_changes() {
        let list = names(&["keys-a", "keys-b"]);
        assert!(SubscribedKeys::shared(&list, 0).is_none(), "none yet");
        let mut first = SubscribedKeys::default();
        first.keys_mut().insert((Arc::from("keys-a"), 0));
        first.keys_mut().insert((Arc::from("keys-b"), 0));
        first.share(&list, 0);
        let second = SubscribedKeys::shared(&list, 0).expect("shared");
        assert!(Arc::ptr_eq(&first.set, &second.set));
        assert!(
            SubscribedKeys::shared(&list, 1).is_none(),
            "another parameter set"
        );
        assert!(
            SubscribedKeys::shared(&names(&["keys-b", "keys-a"]), 0).is_none(),
            "another list"
        );
        first.keys_mut().insert((Arc::from("keys-c"), 0));
        assert_eq!(first.len(), 3);
        assert_eq!(second.len(), 2, "the other stream's keys are unchanged");
        let third = SubscribedKeys::shared(&list, 0).expect("still shared by the second");
        assert!(Arc::ptr_eq(&second.set, &third.set));
    }
}
