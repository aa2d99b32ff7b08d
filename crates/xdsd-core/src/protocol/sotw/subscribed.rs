//! The keys a SotW subscription holds, each with what its client was last sent of it.
//!
//! The names of the parameter set that plain request names use (every key of a client without
//! resource locators) are a [`NameSet`]: the names and an index of their places, shared by every
//! subscription to the same names, and the stream keeps only one [`LastSent`] per place. A fleet of
//! clients subscribes to the same names (every Envoy of a deployment asks for the endpoints of
//! the same clusters): with a map per stream, a subscription of a hundred names was a fifth of an
//! idle stream's memory, and each of a thousand streams looked a pushed name up in a table of its
//! own, out of the cache.

use std::sync::Arc;

use super::LastSent;
use crate::hash::HashMap;
use crate::protocol::shared::{self, Shelf};
use crate::protocol::{HeldKeys, Key, Names, ParamSetId};
use crate::store::Resource;

/// Names in a fixed order, with the place of each: shared by the subscriptions to these names.
#[derive(Debug)]
pub(super) struct NameSet {
    names: Box<[Arc<str>]>,
    places: HashMap<Arc<str>, u32>,
    /// The places in the names' order: a scan of a view (in name order) walks them beside it.
    by_name: Box<[u32]>,
    /// The request's list of names it was built from, when they were all plain names, each
    /// once: a request with the same list (the same bytes) subscribes to this set, no name
    /// looked up.
    source: Option<Box<[u8]>>,
}

impl NameSet {
    fn len(&self) -> usize {
        self.names.len()
    }

    fn place(&self, name: &str) -> Option<usize> {
        self.places.get(name).map(|p| *p as usize)
    }

    /// Whether this set holds exactly `names` (each once), in any order.
    fn is(&self, names: &[(Arc<str>, LastSent)]) -> bool {
        if names.len() != self.len() {
            return false;
        }
        let mut seen = vec![false; self.len()];
        names.iter().all(|(n, _)| match self.place(n) {
            Some(p) => !std::mem::replace(&mut seen[p], true),
            None => false,
        })
    }
}

/// The digest of a request's list of names, as encoded (for [`NameSet::source`]).
fn request_digest(names: &Names) -> u64 {
    // Set apart from `digest`'s by the tag: the two are shelved together.
    shared::digest((1u8, names.encoded()))
}

/// A digest of a list of names that does not depend on their order (the same names subscribed
/// in another order share the set).
fn digest<'a>(names: impl Iterator<Item = &'a Arc<str>>) -> u64 {
    names.fold(0u64, |sum, n| sum.wrapping_add(shared::digest(&**n)))
}

/// The sets of subscriptions alive.
static SETS: Shelf<NameSet> = Shelf::new();

/// The keys of a subscription, each with what the client was last sent of it.
#[derive(Debug, Default)]
pub(super) struct Subscribed {
    /// The parameter set of `set`.
    pid: ParamSetId,
    set: Option<Arc<NameSet>>,
    /// What was sent of each name of `set`, by place.
    sent: Box<[LastSent]>,
    /// Keys of other parameter sets (resource locators with parameters of their own).
    other: HashMap<Key, LastSent>,
}

/// A subscription being built from a request: [`Subscribed::builder`].
pub(super) struct Builder {
    pid: ParamSetId,
    plain: Vec<(Arc<str>, LastSent)>,
    other: HashMap<Key, LastSent>,
}

impl Builder {
    /// Adds `key`, sent `sent`. A key added twice is held once, with the last `sent`.
    pub(super) fn insert(&mut self, key: Key, sent: LastSent) {
        if key.1 == self.pid {
            self.plain.push((key.0, sent));
        } else {
            self.other.insert(key, sent);
        }
    }

    /// The subscription, its plain names in the set shared by subscriptions to the same names.
    /// `request`: the list the keys were added from, in order, if nothing else was added (no
    /// resource locators).
    pub(super) fn finish(self, request: Option<&Names>) -> Subscribed {
        let Builder { pid, plain, other } = self;
        if plain.is_empty() {
            return Subscribed {
                pid,
                other,
                ..Subscribed::default()
            };
        }
        let digest = digest(plain.iter().map(|(n, _)| n));
        if let Some(set) = SETS.find(digest, |s| s.is(&plain)) {
            let mut sent = vec![None; set.len()].into_boxed_slice();
            for (name, s) in &plain {
                if let Some(p) = set.place(name) {
                    sent[p] = *s;
                }
            }
            return Subscribed {
                pid,
                set: Some(set),
                sent,
                other,
            };
        }
        let mut names = Vec::with_capacity(plain.len());
        let mut places = HashMap::with_capacity_and_hasher(plain.len(), Default::default());
        let mut sent = Vec::with_capacity(plain.len());
        let listed = plain.len();
        for (name, s) in plain {
            match places.get(&name) {
                Some(&p) => sent[p as usize] = s,
                None => {
                    // A set's places fit in u32: a request holds fewer names than that.
                    let Ok(p) = u32::try_from(names.len()) else {
                        break;
                    };
                    places.insert(name.clone(), p);
                    names.push(name);
                    sent.push(s);
                }
            }
        }
        // A list of plain names only (no `*`, no other parameter set), each once.
        let source = request
            .filter(|r| r.len() == listed && names.len() == listed && other.is_empty())
            .map(|r| Box::<[u8]>::from(r.encoded()));
        let mut by_name: Vec<u32> = (0..names.len() as u32).collect();
        by_name.sort_unstable_by(|a, b| names[*a as usize].cmp(&names[*b as usize]));
        let set = Arc::new(NameSet {
            names: names.into_boxed_slice(),
            places,
            by_name: by_name.into_boxed_slice(),
            source,
        });
        if let Some(request) = request.filter(|_| set.source.is_some()) {
            SETS.shelve(request_digest(request), &set);
        }
        // A list that repeats names has another digest than its set: not shared.
        if set.len() == listed {
            SETS.shelve(digest, &set);
        }
        Subscribed {
            pid,
            set: Some(set),
            sent: sent.into_boxed_slice(),
            other,
        }
    }
}

impl Subscribed {
    /// A subscription built from about `names` keys, most of parameter set `pid`.
    pub(super) fn builder(pid: ParamSetId, names: usize) -> Builder {
        Builder {
            pid,
            plain: Vec::with_capacity(names),
            other: HashMap::default(),
        }
    }

    /// The subscription of a request listing `names` (plain names, parameter set `pid`), if
    /// another stream subscribed with the same list; what was sent is taken from `before`.
    pub(super) fn of_request(
        names: &Names,
        pid: ParamSetId,
        before: &Subscribed,
    ) -> Option<Subscribed> {
        let set = SETS.find(request_digest(names), |s| {
            s.source.as_deref() == Some(names.encoded())
        })?;
        let sent: Box<[LastSent]> =
            if before.set.as_ref().is_some_and(|b| Arc::ptr_eq(b, &set)) && before.pid == pid {
                before.sent.clone()
            } else if before.len() == 0 {
                vec![None; set.len()].into_boxed_slice()
            } else {
                set.names
                    .iter()
                    .map(|n| before.get(n, pid).copied().flatten())
                    .collect()
            };
        Some(Subscribed {
            pid,
            set: Some(set),
            sent,
            other: HashMap::default(),
        })
    }

    /// The parameter set of the plain names.
    pub(super) fn pid(&self) -> ParamSetId {
        self.pid
    }

    pub(super) fn len(&self) -> usize {
        self.set.as_ref().map_or(0, |s| s.len()) + self.other.len()
    }

    /// Whether `self` and `other` hold the same plain names (the same shared set, or none).
    pub(super) fn same_plain(&self, other: &Subscribed) -> bool {
        self.pid == other.pid
            && match (&self.set, &other.set) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            }
    }

    fn place(&self, name: &str, pid: ParamSetId) -> Option<usize> {
        if pid == self.pid {
            self.set.as_ref()?.place(name)
        } else {
            None
        }
    }

    pub(super) fn get(&self, name: &Arc<str>, pid: ParamSetId) -> Option<&LastSent> {
        if pid == self.pid {
            self.sent.get(self.place(name, pid)?)
        } else {
            self.other.get(&(name.clone(), pid))
        }
    }

    pub(super) fn get_mut(&mut self, name: &Arc<str>, pid: ParamSetId) -> Option<&mut LastSent> {
        if pid == self.pid {
            let p = self.place(name, pid)?;
            self.sent.get_mut(p)
        } else {
            self.other.get_mut(&(name.clone(), pid))
        }
    }

    /// Calls `f` with each resource of `view` (resources in name order, one per name) whose
    /// name is subscribed with parameter set `pid`, and what was sent of it; returns how many
    /// there were. The plain names are walked in their order beside the view's: no lookup per
    /// name.
    pub(super) fn join_view<'v>(
        &mut self,
        pid: ParamSetId,
        view: impl IntoIterator<Item = &'v Arc<Resource>>,
        mut f: impl FnMut(&mut LastSent, &'v Arc<Resource>),
    ) -> usize {
        let mut found = 0;
        if pid != self.pid {
            for r in view {
                if let Some(sent) = self.other.get_mut(&(r.name().clone(), pid)) {
                    found += 1;
                    f(sent, r);
                }
            }
            return found;
        }
        let Subscribed { set, sent, .. } = self;
        let Some(set) = set else {
            return 0;
        };
        let mut order = set.by_name.iter().map(|p| *p as usize).peekable();
        for r in view {
            let name = r.name();
            while let Some(&p) = order.peek() {
                let ours = &set.names[p];
                if Arc::ptr_eq(ours, name) || **ours == **name {
                    order.next();
                    found += 1;
                    if let Some(s) = sent.get_mut(p) {
                        f(s, r);
                    }
                    break;
                }
                if **ours > **name {
                    break;
                }
                order.next();
            }
            if order.peek().is_none() {
                break;
            }
        }
        found
    }

    pub(super) fn contains(&self, name: &Arc<str>, pid: ParamSetId) -> bool {
        if pid == self.pid {
            self.place(name, pid).is_some()
        } else {
            self.other.contains_key(&(name.clone(), pid))
        }
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = (&Arc<str>, ParamSetId)> {
        let plain = self.set.iter().flat_map(|s| s.names.iter());
        let plain = plain.map(|n| (n, self.pid));
        plain.chain(self.other.keys().map(|(n, p)| (n, *p)))
    }

    pub(super) fn iter_mut(
        &mut self,
    ) -> impl Iterator<Item = ((&Arc<str>, ParamSetId), &mut LastSent)> {
        let pid = self.pid;
        let names = self.set.iter().flat_map(|s| s.names.iter());
        let plain = names
            .zip(self.sent.iter_mut())
            .map(move |(n, s)| ((n, pid), s));
        plain.chain(self.other.iter_mut().map(|((n, p), s)| ((n, *p), s)))
    }
}

impl HeldKeys for Subscribed {
    fn held(&self, key: &Key) -> Option<&Arc<str>> {
        if key.1 == self.pid {
            let set = self.set.as_ref()?;
            set.places.get_key_value(&key.0).map(|(n, _)| n)
        } else {
            self.other.get_key_value(key).map(|((n, _), _)| n)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(pid: ParamSetId, names: &[&str]) -> Subscribed {
        let mut b = Subscribed::builder(pid, names.len());
        for n in names {
            b.insert((Arc::from(*n), pid), None);
        }
        let request: Names = names.iter().collect();
        b.finish(Some(&request))
    }

    #[test]
    fn subscriptions_to_the_same_names_share_one_set_whatever_their_order() {
        let a = build(0, &["shared-a", "shared-b", "shared-c"]);
        let b = build(0, &["shared-c", "shared-a", "shared-b"]);
        assert!(a.same_plain(&b), "one set for both");
        let c = build(0, &["shared-a", "shared-b"]);
        assert!(!a.same_plain(&c), "other names, another set");
        let mut keys: Vec<&str> = b.keys().map(|(n, _)| &**n).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["shared-a", "shared-b", "shared-c"]);
    }

    #[test]
    fn a_request_listing_the_same_names_in_the_same_order_takes_the_set_without_lookups() {
        let mut a = build(0, &["req-a", "req-b", "req-c"]);
        let same: Names = ["req-a", "req-b", "req-c"].iter().collect();
        let b = Subscribed::of_request(&same, 0, &Subscribed::default()).expect("the same list");
        assert!(a.same_plain(&b));
        assert_eq!(b.get(&Arc::from("req-b"), 0), Some(&None));
        let reordered: Names = ["req-c", "req-a", "req-b"].iter().collect();
        assert!(Subscribed::of_request(&reordered, 0, &Subscribed::default()).is_none());
        // What the stream was sent is carried over from its subscription before.
        let mark = Some(super::super::SentMark::test(5));
        *a.get_mut(&Arc::from("req-b"), 0).expect("subscribed") = mark;
        let again = Subscribed::of_request(&same, 0, &a).expect("the same list");
        assert_eq!(again.get(&Arc::from("req-b"), 0), Some(&mark));
        let other = build(0, &["req-a"]);
        let grown = Subscribed::of_request(&same, 0, &other).expect("the same list");
        assert_eq!(grown.get(&Arc::from("req-c"), 0), Some(&None));
        // A list with `*` or a name twice is not a set's source.
        assert!(build(0, &["dup-a", "dup-a"])
            .set
            .as_ref()
            .is_some_and(|s| s.source.is_none()));
    }

    #[test]
    fn what_was_sent_is_the_stream_s_own_in_a_shared_set() {
        let mut a = build(0, &["own-a", "own-b"]);
        let b = build(0, &["own-b", "own-a"]);
        assert!(a.same_plain(&b));
        let name: Arc<str> = Arc::from("own-a");
        *a.get_mut(&name, 0).expect("subscribed") = Some(super::super::SentMark::test(7));
        assert!(a.get(&name, 0).expect("subscribed").is_some());
        assert_eq!(
            b.get(&name, 0),
            Some(&None),
            "the other stream's mark is its own"
        );
        assert_eq!(a.get(&name, 1), None, "another parameter set");
    }

    #[test]
    fn a_list_that_repeats_a_name_holds_it_once_with_the_last_mark() {
        let mut b = Subscribed::builder(0, 3);
        let mark = Some(super::super::SentMark::test(3));
        b.insert((Arc::from("rep-a"), 0), None);
        b.insert((Arc::from("rep-b"), 0), None);
        b.insert((Arc::from("rep-a"), 0), mark);
        b.insert((Arc::from("rep-a"), 2), None);
        let s = b.finish(None);
        assert_eq!(
            s.len(),
            3,
            "two plain names and one key of another parameter set"
        );
        assert_eq!(s.get(&Arc::from("rep-a"), 0), Some(&mark));
        assert!(s.contains(&Arc::from("rep-a"), 2));
    }
}
