//! What a delta client holds, per key: [`Holdings`], and the view a response being sent records
//! as its base ([`PendingBase`]); whether it holds a resource at its version.

use std::collections::VecDeque;
use std::sync::Arc;

use super::DeltaMachine;
use crate::hash::HashMap;
use crate::params::Constraints;
use crate::protocol::{Key, ParamSetId, Text};
use crate::store::{Resource, View};

/// What the client holds for a key: the variant sent, or what a reconnecting client said it has
/// (a version of no variant the store holds). One pointer: a stream may hold 100,000 keys.
#[derive(Debug, Clone)]
pub(super) enum Held {
    Sent(Arc<Resource>),
    /// (name, version), unconstrained.
    Claimed(Box<(Arc<str>, Arc<str>)>),
}

impl Held {
    pub(super) fn of(r: &Arc<Resource>) -> Held {
        Held::Sent(r.clone())
    }

    /// The name the client holds it under: the resource's, also when subscribed by an alias.
    pub(super) fn name(&self) -> &Arc<str> {
        match self {
            Held::Sent(r) => r.name(),
            Held::Claimed(c) => &c.0,
        }
    }

    pub(super) fn constraints(&self) -> Option<&Arc<Constraints>> {
        match self {
            Held::Sent(r) => r.constraints(),
            Held::Claimed(_) => None,
        }
    }
}

/// What the client holds for a key, borrowed: from [`Holdings::over`] or from a view.
#[derive(Debug, Clone, Copy)]
pub(super) enum HeldRef<'a> {
    Sent(&'a Arc<Resource>),
    Claimed(&'a (Arc<str>, Arc<str>)),
}

impl<'a> HeldRef<'a> {
    fn of(held: &'a Held) -> HeldRef<'a> {
        match held {
            Held::Sent(r) => HeldRef::Sent(r),
            Held::Claimed(c) => HeldRef::Claimed(c),
        }
    }

    pub(super) fn name(self) -> &'a Arc<str> {
        match self {
            HeldRef::Sent(r) => r.name(),
            HeldRef::Claimed(c) => &c.0,
        }
    }

    pub(super) fn version(self) -> &'a Arc<str> {
        match self {
            HeldRef::Sent(r) => r.version(),
            HeldRef::Claimed(c) => &c.1,
        }
    }

    pub(super) fn constraints(self) -> Option<&'a Arc<Constraints>> {
        match self {
            HeldRef::Sent(r) => r.constraints(),
            HeldRef::Claimed(_) => None,
        }
    }

    fn to_held(self) -> Held {
        match self {
            HeldRef::Sent(r) => Held::Sent(r.clone()),
            HeldRef::Claimed(c) => Held::Claimed(Box::new(c.clone())),
        }
    }
}

/// A view a wildcard client was sent whole, in its order: it holds the view's resource of every
/// name up to `last` (all of them once every part of the response went out).
#[derive(Debug)]
pub(super) struct Base {
    pub(super) pid: ParamSetId,
    pub(super) view: Arc<View>,
    pub(super) last: Arc<str>,
}

/// The keys [`Holdings::over`] has room for when it first holds one: a hash table's smallest
/// but one (8 buckets, some 350 bytes per stream and type that was sent a change).
const OVER_ROOM: usize = 7;

/// What the client holds, per key. A wildcard client's first response sends a whole view: that is
/// recorded as the view itself (one pointer for 10,000 keys, no per-key entry, no count taken on
/// each resource), and what the client holds otherwise since (a key sent again, removed) in
/// `over`, which always wins. A first response to most names of a view (every cluster by name)
/// is recorded the same way, the view's names it did not send held as `None` in `over`.
#[derive(Debug, Default)]
pub(super) struct Holdings {
    /// Keys held otherwise than `base` says: `Some` the variant held, `None` nothing.
    pub(super) over: HashMap<Key, Option<Held>>,
    pub(super) base: Option<Base>,
}

impl Holdings {
    pub(super) fn is_empty(&self) -> bool {
        self.base.is_none() && self.over.is_empty()
    }

    /// What `base` says the client holds for `key`.
    fn in_base(&self, key: &Key) -> Option<&Arc<Resource>> {
        let base = self.base.as_ref()?;
        if key.1 != base.pid || *key.0 > *base.last {
            return None;
        }
        base.view.get(&key.0)
    }

    pub(super) fn get(&self, key: &Key) -> Option<HeldRef<'_>> {
        if !self.over.is_empty() {
            if let Some(held) = self.over.get(key) {
                return held.as_ref().map(HeldRef::of);
            }
        }
        self.in_base(key).map(HeldRef::Sent)
    }

    pub(super) fn contains_key(&self, key: &Key) -> bool {
        self.get(key).is_some()
    }

    /// Records that the client holds `held` for `key`; what it held before.
    pub(super) fn insert(&mut self, key: Key, held: Held) -> Option<Held> {
        let before = self.get(&key).map(HeldRef::to_held);
        self.over.insert(key, Some(held));
        before
    }

    /// Records that the client holds `held` for `key`, whatever it held before.
    pub(super) fn put(&mut self, key: Key, held: Held) {
        self.over.insert(key, Some(held));
    }

    /// Records that the client holds nothing for `key`; what it held before.
    pub(super) fn remove(&mut self, key: &Key) -> Option<Held> {
        let before = self.get(key).map(HeldRef::to_held);
        if self.in_base(key).is_some() {
            self.over.insert(key.clone(), None);
        } else {
            self.over.remove(key);
        }
        before
    }

    /// Room for `additional` more keys in `over`. A map that starts to hold keys besides the
    /// base (the first change sent to a client that holds a whole view) starts with room for
    /// [`OVER_ROOM`]: grown one key at a time from empty, it was rehashed at its first and its
    /// fourth key (two of every five changes, some 800 instructions each).
    pub(super) fn reserve(&mut self, additional: usize) {
        if additional == 0 {
            return;
        }
        if self.over.capacity() == 0 {
            self.over.reserve(additional.max(OVER_ROOM));
        } else {
            self.over.reserve(additional);
        }
    }

    /// Every key held, with what it holds.
    pub(super) fn iter(&self) -> impl Iterator<Item = (Key, HeldRef<'_>)> {
        let over = self
            .over
            .iter()
            .filter_map(|(k, h)| h.as_ref().map(|h| (k.clone(), HeldRef::of(h))));
        let base = self.base.iter().flat_map(move |b| {
            b.view
                .iter()
                .take_while(move |r| **r.name() <= *b.last)
                .map(move |r| ((r.name().clone(), b.pid), r))
                .filter(move |(k, _)| !self.over.contains_key(k))
                .map(|(k, r)| (k, HeldRef::Sent(r)))
        });
        over.chain(base)
    }

    /// The keys held of the members of the glob collection `glob` with parameter set `pid`,
    /// whatever the store holds now: in the view the base recorded, a walk of the names under
    /// the glob's path; among the keys held since (`over`), a look at each. Only for what the
    /// store can no longer say (a member removed there whose removal the stream was not told
    /// yet): the base is nearly everything a wildcard client holds, `over` what changed since.
    pub(super) fn members_of(&self, glob: &str, pid: ParamSetId) -> Vec<Key> {
        let mut keys = Vec::new();
        let Some((prefix, query)) = crate::xdstp::glob_parts(glob) else {
            return keys;
        };
        for (key, held) in &self.over {
            if held.is_some() && key.1 == pid && crate::xdstp::is_member(prefix, query, &key.0) {
                keys.push(key.clone());
            }
        }
        if let Some(base) = self.base.as_ref().filter(|b| b.pid == pid) {
            for r in base.view.members(glob) {
                if **r.name() > *base.last {
                    break;
                }
                let key = (r.name().clone(), pid);
                if !self.over.contains_key(&key) {
                    keys.push(key);
                }
            }
        }
        keys
    }

    /// Keeps only the keys `keep` says, each held as an entry of its own.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&Key) -> bool) {
        if let Some(base) = self.base.take() {
            for r in base.view.iter().take_while(|r| **r.name() <= *base.last) {
                let key = (r.name().clone(), base.pid);
                if keep(&key) && !self.over.contains_key(&key) {
                    self.over.insert(key, Some(Held::of(r)));
                }
            }
        }
        self.over.retain(|k, h| h.is_some() && keep(k));
    }
}

/// A response being sent that records what it sends as [`Holdings::base`].
#[derive(Debug)]
pub(super) struct PendingBase {
    pub(super) pid: ParamSetId,
    pub(super) view: Arc<View>,
    /// The view's names it does not send (not subscribed), in the view's order: each is
    /// recorded as not held (an entry of `over`) once the base reaches past it, so that the
    /// base holds what was sent and nothing else. Empty for a wildcard client.
    pub(super) gaps: VecDeque<Arc<str>>,
    /// Where in the view the next part starts, while the parts sent so far were every resource
    /// of the view from its first, each as the view's own and nothing else: such a part is a run
    /// of the view's encoding, shared by every stream that sends it (see [`DeltaResponse`]'s
    /// `whole`). `None` once a part was not, or when the response skips a name of the view
    /// before one it sends (names after the last it sends may be skipped: a client subscribed
    /// to the first names of a view, as Envoy is after the first part of a split CDS response).
    pub(super) run: Option<usize>,
}

/// What a reconnecting client says it has of a name: a version, and so the variant that has it.
pub(super) fn held(name: &Arc<str>, variants: &[Arc<Resource>], version: &Text) -> Held {
    // Compared as bytes: the version is read as text only when it is kept (a client resuming
    // 100,000 resources had each checked as UTF-8 again here).
    let bytes: &[u8] = version.as_bytes();
    match variants.iter().find(|v| v.version().as_bytes() == bytes) {
        Some(v) => Held::of(v),
        None => Held::Claimed(Box::new((name.clone(), Arc::from(version.as_str())))),
    }
}

/// What the client holds.
impl DeltaMachine {
    /// Whether the client holds `r` for `key`, at its version.
    pub(super) fn holds(&self, key: &Key, r: &Resource) -> bool {
        self.has.get(key).map(|h| h.version()) == Some(r.version())
    }
}
