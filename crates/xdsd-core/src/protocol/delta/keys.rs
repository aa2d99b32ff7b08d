//! The keys a delta subscription holds, shared by the streams that subscribed with the same
//! requests (see `protocol::shared`): a client of a fleet subscribes to the names every other
//! one does, in the same lists, and one set of 10,000 keys was 400 KiB per stream, each built by
//! hashing every name again. A stream that changes its subscription otherwise (an unsubscription,
//! a wildcard, names with their own parameters) gets its own copy.

use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::hash::HashSet;
use crate::protocol::shared::{self, Shelf};
use crate::protocol::{Key, KeyLookup, Names, ParamSetId};
use crate::store::View;

#[derive(Debug, Default)]
struct KeySet {
    keys: HashSet<Key>,
    /// How it was built, if it is shared: the keys of a chain of requests from none.
    source: Option<Source>,
    /// Which names of a view with a parameter set are keys, as last asked: the streams sharing
    /// the keys ask it of the same view (see [`SubscribedKeys::in_view`]).
    in_view: Mutex<Option<ViewMemo>>,
}

/// A set's keys are its parent's and a request's plain names (`bytes` as encoded) with
/// parameter set `pid`: a client subscribes to the names of clusters as the parts of a cluster
/// response come in, and every client of a fleet does it with the same lists.
#[derive(Debug)]
struct Source {
    /// The parent set's digest (0 for none: the first request).
    parent: u64,
    bytes: Box<[u8]>,
    pid: ParamSetId,
    /// This set's digest: of the parent's, the bytes and the parameter set.
    digest: u64,
}

#[derive(Debug)]
struct ViewMemo {
    /// The view asked about: held weakly, its address stays its own while this is kept.
    view: Weak<View>,
    pid: ParamSetId,
    in_view: Arc<InView>,
}

/// Which names of a view, by place in it, are keys with a parameter set.
#[derive(Debug)]
pub(super) struct InView {
    bits: Box<[u64]>,
}

impl InView {
    pub(super) fn has(&self, place: usize) -> bool {
        self.bits
            .get(place / 64)
            .is_some_and(|w| w & (1 << (place % 64)) != 0)
    }
}

impl KeySet {
    /// Whether it was built of the keys with digest `parent` and `names` with `pid`.
    fn made_of(&self, parent: u64, names: &Names, pid: ParamSetId) -> bool {
        self.source.as_ref().is_some_and(|src| {
            src.parent == parent && src.pid == pid && *src.bytes == *names.encoded()
        })
    }
}

/// A copy is a stream's own: it was not built from requests alone.
impl Clone for KeySet {
    fn clone(&self) -> KeySet {
        KeySet {
            keys: self.keys.clone(),
            source: None,
            in_view: Mutex::default(),
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

/// The digest of a set made of `parent`'s keys and `names` with `pid`.
fn digest(parent: u64, names: &Names, pid: ParamSetId) -> u64 {
    shared::digest((parent, names.encoded(), pid))
}

impl SubscribedKeys {
    /// The digest of these keys, if they were built by requests of plain names alone (0 for
    /// none).
    pub(super) fn digest(&self) -> Option<u64> {
        if self.set.keys.is_empty() {
            return Some(0);
        }
        self.set.source.as_ref().map(|s| s.digest)
    }

    /// The keys these and `names` with `pid` make, if another stream that subscribed the same
    /// way has them alive.
    pub(super) fn with(&self, names: &Names, pid: ParamSetId) -> Option<SubscribedKeys> {
        let parent = self.digest()?;
        let set = SETS.find(digest(parent, names, pid), |s| {
            s.made_of(parent, names, pid)
        })?;
        Some(SubscribedKeys { set })
    }

    /// Offers these keys to the streams whose keys had digest `parent` (see
    /// [`SubscribedKeys::digest`]) and that subscribe to `names` with `pid` next: these must be
    /// exactly the parent's keys and those of `names`. If another stream shelved the same keys
    /// while these were built (two streams handed the same request at once, on two threads:
    /// a relay's streams all answered by one upstream response), these are that stream's from
    /// now on, so that what is found of them once (which names of a view they hold) is found
    /// once for both.
    pub(super) fn share(&mut self, parent: u64, names: &Names, pid: ParamSetId) {
        let digest = digest(parent, names, pid);
        let same = SETS.find(digest, |s| s.made_of(parent, names, pid));
        if let Some(same) = same {
            // (Ours, built meanwhile, goes: the same keys.)
            self.set = same;
            return;
        }
        let Some(set) = Arc::get_mut(&mut self.set) else {
            return;
        };
        set.source = Some(Source {
            parent,
            bytes: names.encoded().into(),
            pid,
            digest,
        });
        SETS.shelve(digest, &self.set);
    }

    /// The keys, to change: the stream's own copy from now on if they are shared.
    pub(super) fn keys_mut(&mut self) -> &mut HashSet<Key> {
        let set = Arc::make_mut(&mut self.set);
        // Changed: no longer what its source subscribed to, nor what was found of a view.
        set.source = None;
        *set.in_view.get_mut().unwrap_or_else(|e| e.into_inner()) = None;
        &mut set.keys
    }

    /// Which names of `view` are keys with parameter set `pid`: found once per view for every
    /// stream sharing these keys (10,000 lookups per stream for a first response of 10,000
    /// names, each a name compared out of the cache).
    pub(super) fn in_view(&self, view: &Arc<View>, pid: ParamSetId) -> Arc<InView> {
        fn memo(set: &KeySet) -> MutexGuard<'_, Option<ViewMemo>> {
            set.in_view.lock().unwrap_or_else(|e| e.into_inner())
        }
        if let Some(c) = memo(&self.set).as_ref() {
            if c.pid == pid && Weak::as_ptr(&c.view) == Arc::as_ptr(view) {
                return c.in_view.clone();
            }
        }
        let keys = &self.set.keys;
        let mut bits = vec![0u64; view.len().div_ceil(64)].into_boxed_slice();
        for (i, r) in view.iter().enumerate() {
            if keys.contains(&(&**r.name(), pid) as &dyn KeyLookup) {
                if let Some(w) = bits.get_mut(i / 64) {
                    *w |= 1 << (i % 64);
                }
            }
        }
        let in_view = Arc::new(InView { bits });
        *memo(&self.set) = Some(ViewMemo {
            view: Arc::downgrade(view),
            pid,
            in_view: in_view.clone(),
        });
        in_view
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
    fn streams_subscribing_with_the_same_requests_share_their_keys_until_one_changes() {
        let first_list = names(&["keys-a", "keys-b"]);
        let empty = SubscribedKeys::default();
        assert!(empty.with(&first_list, 0).is_none(), "none yet");
        let build = |from: &SubscribedKeys, list: &Names, added: &[&str]| {
            let parent = from.digest().expect("built by requests");
            let mut keys = SubscribedKeys {
                set: Arc::new((*from.set).clone()),
            };
            for n in added {
                keys.keys_mut().insert((Arc::from(*n), 0));
            }
            keys.share(parent, list, 0);
            keys
        };
        let mut first = build(&empty, &first_list, &["keys-a", "keys-b"]);
        let second = empty.with(&first_list, 0).expect("shared");
        assert!(Arc::ptr_eq(&first.set, &second.set));
        assert!(
            empty.with(&first_list, 1).is_none(),
            "another parameter set"
        );
        let reordered = names(&["keys-b", "keys-a"]);
        assert!(empty.with(&reordered, 0).is_none(), "another list");
        // A second request adds to what the first made: shared the same way.
        let more = names(&["keys-c"]);
        assert!(second.with(&more, 0).is_none(), "none yet");
        let grown = build(&second, &more, &["keys-c"]);
        let grown_too = first.with(&more, 0).expect("shared");
        assert!(Arc::ptr_eq(&grown.set, &grown_too.set));
        assert_eq!(grown_too.len(), 3);
        assert!(empty.with(&more, 0).is_none(), "not from another parent");
        // A stream's own change is its own.
        first.keys_mut().insert((Arc::from("keys-d"), 0));
        assert_eq!(first.len(), 3);
        assert_eq!(second.len(), 2, "the other stream's keys are unchanged");
        assert_eq!(first.digest(), None, "changed by hand: no longer shared");
        let third = empty
            .with(&first_list, 0)
            .expect("still shared by the second");
        assert!(Arc::ptr_eq(&second.set, &third.set));
    }

    #[test]
    fn a_stream_that_built_the_keys_another_shelved_meanwhile_takes_that_streams_set() {
        let list = names(&["race-a", "race-b"]);
        let empty = SubscribedKeys::default();
        // Both streams find nothing shelved, and build their own.
        assert!(empty.with(&list, 0).is_none());
        let build = || {
            let mut keys = SubscribedKeys::default();
            keys.keys_mut().insert((Arc::from("race-a"), 0));
            keys.keys_mut().insert((Arc::from("race-b"), 0));
            keys
        };
        let (mut first, mut second) = (build(), build());
        first.share(0, &list, 0);
        second.share(0, &list, 0);
        assert!(
            second.is_shared_with(&first),
            "one set for both: what is found of it is found once"
        );
        assert_eq!(second.len(), 2);
        assert!(empty
            .with(&list, 0)
            .is_some_and(|k| k.is_shared_with(&first)));
        // Another list's keys are not taken.
        let other = names(&["race-a", "race-c"]);
        let mut third = build();
        third.share(0, &other, 0);
        assert!(!third.is_shared_with(&first));
    }
}
