//! Sans-I/O protocol state machines. Input: a request, or "these names changed in the store".
//! Output: the response to send, if any. No sockets, clocks or tasks in here: the transports
//! drive these machines and tests drive them directly.

/// The `str`-like traits of a type with an `as_str`: `Deref<Target = str>`, `AsRef<str>`,
/// comparisons with `str`, `&str` and `String` both ways, and `Display`/`Debug` as the text.
macro_rules! str_like {
    ($t:ty) => {
        impl std::ops::Deref for $t {
            type Target = str;
            fn deref(&self) -> &str {
                self.as_str()
            }
        }

        impl AsRef<str> for $t {
            fn as_ref(&self) -> &str {
                self.as_str()
            }
        }

        impl PartialEq<str> for $t {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }

        impl PartialEq<&str> for $t {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl PartialEq<String> for $t {
            fn eq(&self, other: &String) -> bool {
                self.as_str() == other
            }
        }

        impl PartialEq<$t> for String {
            fn eq(&self, other: &$t) -> bool {
                self.as_str() == other.as_str()
            }
        }

        impl PartialEq<$t> for &str {
            fn eq(&self, other: &$t) -> bool {
                *self == other.as_str()
            }
        }

        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::fmt::Debug for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Debug::fmt(self.as_str(), f)
            }
        }
    };
}

// The machines themselves: public for the fuzz test and the bench, not an embedder's API.
#[doc(hidden)]
pub mod delta;
mod error;
mod fields;
pub mod identity;
mod machine;
#[cfg(test)]
mod model_tests;
mod node;
pub(crate) mod oneshot;
#[cfg(test)]
mod pending_tests;
pub mod session;
mod shared;
#[doc(hidden)]
pub mod sotw;
mod subscription;
#[cfg(test)]
mod test_support;
mod text;
mod watching;

use std::sync::Arc;

pub use fields::{names_key, Names};
pub use node::user_agent_version;
pub use text::Text;

pub(crate) use shared::digest;

use crate::hash::HashSet;
use crate::params::ParamSet;
use crate::store::{Interner, Resource, Snapshot, TypePending, TypeSnapshot, View};

/// The id of a parameter set of a session: its index in the session's table (see [`session`]).
/// Keys are small and cheap to hash, and streams that use one parameter set (every Envoy) use one
/// id.
pub type ParamSetId = u32;

/// What a client subscribes by: a name (or alias) and the parameter set its variant is chosen by.
pub type Key = (Arc<str>, ParamSetId);

/// A key borrowed, to look it up in a map or set of [`Key`]s without making one: making one
/// takes a count on the name, an atomic shared with every stream that holds that name (a response
/// of 10,000 names looked each up).
pub(crate) trait KeyLookup {
    fn parts(&self) -> (&str, ParamSetId);
}

impl KeyLookup for Key {
    #[inline]
    fn parts(&self) -> (&str, ParamSetId) {
        (&self.0, self.1)
    }
}

impl KeyLookup for (&str, ParamSetId) {
    #[inline]
    fn parts(&self) -> (&str, ParamSetId) {
        *self
    }
}

impl<'a> std::borrow::Borrow<dyn KeyLookup + 'a> for Key {
    fn borrow(&self) -> &(dyn KeyLookup + 'a) {
        self
    }
}

/// Hashed as a [`Key`] is (a tuple hashes its fields in order; an `Arc<str>` as its `str`).
impl std::hash::Hash for dyn KeyLookup + '_ {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let (name, pid) = self.parts();
        name.hash(state);
        pid.hash(state);
    }
}

/// Names are nearly always one allocation (interned): compared by address first.
impl PartialEq for dyn KeyLookup + '_ {
    fn eq(&self, other: &Self) -> bool {
        let ((a, p), (b, q)) = (self.parts(), other.parts());
        p == q && (std::ptr::eq(a, b) || a == b)
    }
}

impl Eq for dyn KeyLookup + '_ {}

/// What a machine reads the store through: for one type, the view of each of the session's
/// parameter sets, indexed by [`ParamSetId`].
#[derive(Debug, Clone)]
pub struct Views {
    /// Parameter sets 0 and 1 (a session has set 0, and set 1 when its node has metadata: no
    /// list is made for every response of most sessions).
    first: Arc<View>,
    second: Option<Arc<View>>,
    rest: Vec<Arc<View>>,
    /// The type's pending names and the parameter sets they are read with, when the type has
    /// any (see [`Views::with_pending`]).
    pending: Option<Box<(Arc<TypePending>, Vec<ParamSet>)>>,
}

impl Views {
    /// The views of `current` (None: the store has nothing of this type) for each parameter set.
    pub fn new<'a>(
        type_url: &Arc<str>,
        current: Option<&Arc<TypeSnapshot>>,
        params: impl IntoIterator<Item = &'a ParamSet>,
    ) -> Views {
        let empty = std::cell::OnceCell::new();
        let mut views = params.into_iter().map(|p| match current {
            Some(t) => t.view(p),
            None => empty
                .get_or_init(|| Arc::new(View::empty(type_url.clone())))
                .clone(),
        });
        let first = views.next().unwrap_or_else(|| match current {
            Some(t) => t.view(&ParamSet::new()),
            None => Arc::new(View::empty(type_url.clone())),
        });
        Views {
            first,
            second: views.next(),
            rest: views.collect(),
            pending: None,
        }
    }

    /// These views with the names of their type that `snapshot` has pending (asked for
    /// elsewhere by the source, not answered yet), read with `params` (the parameter sets, by
    /// [`ParamSetId`]): the machines then hold back what would tell a client such a name does
    /// not exist. Nothing is kept when the type has none pending.
    pub(crate) fn with_pending(mut self, snapshot: &Snapshot, params: &[ParamSet]) -> Views {
        self.pending = snapshot
            .pending(self.first.type_url())
            .map(|p| Box::new((p.clone(), params.to_vec())));
        self
    }

    /// Whether `name` is pending for the parameter set `pid` (whether the store has it or not).
    pub(crate) fn pending(&self, name: &str, pid: ParamSetId) -> bool {
        self.pending.as_ref().is_some_and(|p| {
            let empty = ParamSet::new();
            let params = p.1.get(pid as usize).unwrap_or(&empty);
            p.0.is_pending(name, params)
        })
    }

    /// Whether `name` is pending for `pid` and the store has nothing of it for `pid`: not known
    /// yet, rather than missing.
    pub(crate) fn unknown_yet(&self, name: &str, pid: ParamSetId) -> bool {
        self.pending.is_some() && self.get(name, pid).is_none() && self.pending(name, pid)
    }

    /// Whether the whole type is pending for `pid` (its wildcard is not answered yet).
    pub(crate) fn type_pending(&self, pid: ParamSetId) -> bool {
        self.pending(crate::store::WHOLE_TYPE, pid)
    }

    /// The names pending for some parameter set ([`crate::store::WHOLE_TYPE`] among them, if
    /// the whole type is); none when the type has none.
    pub(crate) fn pending_names(&self) -> impl Iterator<Item = &Arc<str>> {
        self.pending.iter().flat_map(|p| p.0.names())
    }

    /// The view of one parameter set (out-of-range: the first; sessions never pass one).
    pub fn view(&self, pid: ParamSetId) -> &Arc<View> {
        let found = match pid {
            0 => None,
            1 => self.second.as_ref(),
            _ => self.rest.get(pid as usize - 2),
        };
        found.unwrap_or(&self.first)
    }

    /// The resource a key resolves to: the matching variant of that name or alias.
    pub fn get(&self, name: &str, pid: ParamSetId) -> Option<&Arc<Resource>> {
        self.view(pid).get(name)
    }
}

/// A requested name as an `Arc`: the store's allocation when it holds the name (streams
/// subscribed to the same names share it), else the one a stream's keys `held` already have
/// under `pid`, else a new one.
pub(crate) fn intern_key(
    interner: &mut Interner<'_>,
    held: &impl HeldKeys,
    name: &str,
    pid: ParamSetId,
) -> Arc<str> {
    interner.intern(name).unwrap_or_else(|| {
        let name: Arc<str> = Arc::from(name);
        match held.held(&(name.clone(), pid)) {
            Some(n) => n.clone(),
            None => name,
        }
    })
}

/// The keys a machine holds, however it holds them, for [`intern_key`].
pub(crate) trait HeldKeys {
    /// The name of `key` as held, if it is.
    fn held(&self, key: &Key) -> Option<&Arc<str>>;
}

impl HeldKeys for HashSet<Key> {
    fn held(&self, key: &Key) -> Option<&Arc<str>> {
        self.get(key).map(|(n, _)| n)
    }
}

/// Bytes a response takes beyond its resources and removals, at most, besides its type URL and
/// version: the nonce, the field headers, the part suffix of a SotW version.
pub(crate) const PART_OVERHEAD: usize = 64;

/// How many of a response's items (their encoded sizes, in order) fit in `budget` bytes, at least
/// one; and, when even that one does not fit, its size (a response over the limit).
pub(crate) fn part_len(
    sizes: impl IntoIterator<Item = usize>,
    budget: usize,
) -> (usize, Option<usize>) {
    let mut total = 0usize;
    let mut count = 0usize;
    for size in sizes {
        if count > 0 && total.saturating_add(size) > budget {
            return (count, None);
        }
        total = total.saturating_add(size);
        count += 1;
        if count == 1 && size > budget {
            return (1, Some(size));
        }
    }
    (count, None)
}

/// Makes the nonces of one stream: each response gets a fresh one, never reused on the stream.
#[derive(Debug, Default)]
pub struct NonceGen {
    next: u64,
}

impl NonceGen {
    /// The next nonce: "1", "2", ...
    pub fn next_nonce(&mut self) -> Nonce {
        self.next += 1;
        Nonce::from(self.next)
    }
}

/// A nonce xdsd made: a counter's decimal digits, kept inline. A response, the machine that
/// sent it, its session and the stream's record of its client each hold the nonce of the last
/// response of every type; as a `String` that was four allocations per response.
/// The default is the empty nonce of responses that are not answered (REST, `Fetch`).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Nonce {
    digits: [u8; 20],
    len: u8,
}

impl From<u64> for Nonce {
    fn from(n: u64) -> Nonce {
        // The digits written from the last (one per response: `fmt`'s machinery cost more than
        // the rest of the nonce's uses together). u64::MAX has 20 digits: they always fit.
        // Counted first, then written in place from the last (no copy of a run of digits).
        let mut len = 1;
        let mut rest = n / 10;
        while rest > 0 {
            len += 1;
            rest /= 10;
        }
        let mut digits = [0u8; 20];
        let mut rest = n;
        for at in (0..len).rev() {
            digits[at] = b'0' + (rest % 10) as u8;
            rest /= 10;
        }
        Nonce {
            digits,
            len: len as u8,
        }
    }
}

impl Nonce {
    /// The nonce as text.
    pub fn as_str(&self) -> &str {
        // Only ASCII digits are ever written (`From<u64>`).
        std::str::from_utf8(self.as_bytes()).unwrap_or_default()
    }

    /// The nonce's digits.
    pub fn as_bytes(&self) -> &[u8] {
        &self.digits[..usize::from(self.len)]
    }
}

str_like!(Nonce);

/// Compared as bytes: a request's nonce is matched against the last one sent at every ACK, and
/// neither needs its UTF-8 checked for it (a nonce that is not UTF-8 is no nonce xdsd sent).
impl PartialEq<Text> for Nonce {
    fn eq(&self, other: &Text) -> bool {
        self.as_bytes() == &other.as_bytes()[..]
    }
}

/// How a request relates to the responses already sent for its type.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestKind {
    /// The first request for this type on the stream.
    Initial,
    /// Accepts the response with this nonce.
    Ack {
        /// The nonce of the response accepted.
        nonce: Text,
    },
    /// Rejects the response with this nonce (`error_detail` is set).
    Nack {
        /// The nonce of the response rejected.
        nonce: Text,
        /// The version that response carried, when the session still knows it.
        rejected_version: Option<Arc<str>>,
        /// The client's `error_detail` message.
        message: String,
    },
    /// Changes the subscription without answering a response (no nonce).
    Update,
    /// Names a nonce older than the latest one sent for this type: superseded, not answered.
    Stale {
        /// The superseded nonce.
        nonce: Text,
    },
}

/// The subscription part of a request, as the session resolved it: plain names (subscribed with
/// the type's default parameter set) and resource locators with their own parameter sets.
#[derive(Debug, Clone, Copy)]
pub struct Subscribe<'a> {
    /// The parameter set of plain names.
    pub default: ParamSetId,
    /// Resource locators (a name with its own parameter set).
    pub locators: &'a [(String, ParamSetId)],
    /// The parameter set of the plain `xdstp://AUTHORITY/...` names of each authority that has
    /// one of its own (xRFC TP2 "Client Configuration", [`SessionOptions::authority_params`](
    /// crate::protocol::session::SessionOptions::authority_params)): such a name is subscribed
    /// with its authority's set, not `default`. Empty but for a relay given `--param-for`.
    pub authorities: &'a [(Box<str>, ParamSetId)],
}

impl Subscribe<'_> {
    /// A subscription by plain names only, with parameter set 0.
    pub const PLAIN: Subscribe<'static> = Subscribe {
        default: 0,
        locators: &[],
        authorities: &[],
    };

    /// The parameter set a plain name is subscribed with: its authority's
    /// ([`Subscribe::authorities`]), else `default`. Only xdstp names are looked at, and only
    /// when some authority has a set of its own.
    pub fn pid_of(&self, name: &str) -> ParamSetId {
        if self.authorities.is_empty() || !crate::xdstp::is_xdstp(name) {
            return self.default;
        }
        let Ok(parsed) = crate::xdstp::XdstpName::parse(name) else {
            return self.default;
        };
        self.authorities
            .iter()
            .find(|(a, _)| **a == *parsed.authority())
            .map_or(self.default, |(_, pid)| *pid)
    }
}

/// The keys a request names: its plain `names` with the parameter set `plain` gives them
/// ([`Subscribe::pid_of`]: `default`, or their authority's), then `locators` with their own. A name that is not UTF-8 cannot name any resource; it is kept (lossily) only
/// so that the subscription is what the client sent.
///
/// With `singletons`, a plain name that is an xdstp name spelled non-canonically (`?b=2&a=1`)
/// is its canonical key too (delta: the machine answers it under the client's spelling, see
/// `DeltaMachine::spelled`); without, only globs are.
pub(crate) fn request_keys<'a, const KEY: u8>(
    names: &'a Names<KEY>,
    plain: Subscribe<'a>,
    locators: &'a [(String, ParamSetId)],
    singletons: bool,
) -> impl Iterator<Item = (std::borrow::Cow<'a, str>, ParamSetId)> {
    let plain = names.iter().map(move |n| {
        let name = String::from_utf8_lossy(n);
        let key = if singletons {
            canonical_key(name)
        } else {
            glob_key(name)
        };
        let pid = plain.pid_of(&key);
        (key, pid)
    });
    let located = locators
        .iter()
        .map(|(n, pid)| (glob_key(std::borrow::Cow::Borrowed(n.as_str())), *pid));
    plain.chain(located)
}

/// A requested name as a key: a glob collection (xRFC TP1) canonical, so that its members are
/// matched whatever the order of its context parameters; any other name as it is (no cost but
/// a comparison of six bytes for names that are not xdstp).
fn glob_key(name: std::borrow::Cow<'_, str>) -> std::borrow::Cow<'_, str> {
    if !crate::xdstp::is_xdstp(&name) {
        return name;
    }
    match crate::xdstp::XdstpName::parse(&name) {
        Ok(parsed) if parsed.is_glob() && parsed.as_str() != name => {
            std::borrow::Cow::Owned(parsed.to_string())
        }
        _ => name,
    }
}

/// A requested name as a key: any xdstp name canonical (a glob, or one resource); any other
/// name as it is (a comparison of six bytes).
fn canonical_key(name: std::borrow::Cow<'_, str>) -> std::borrow::Cow<'_, str> {
    match crate::xdstp::canonical(&name) {
        Some(c) => std::borrow::Cow::Owned(c.to_string()),
        None => name,
    }
}

/// How a request changed what the stream watches, for the transport to pass on to the store.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SubscriptionChange {
    /// `Some(on)` when the wildcard subscription was turned on or off.
    pub wildcard: Option<bool>,
    /// Names newly subscribed to (subscription keys: a locator's carries its parameters).
    pub added: Vec<Arc<str>>,
    /// Names no longer subscribed to.
    pub removed: Vec<Arc<str>>,
    /// `Some(on)` when the subscription became (or stopped being) one to most names of the type:
    /// the transport then watches the type as a whole (`Watcher::set_dense`), and the machine
    /// tells apart the names it watches. While it is dense, `added` and `removed` may be left
    /// empty (nothing is watched by name); when it stops, `added` holds every subscribed name, to
    /// be watched by name again.
    pub dense: Option<bool>,
    /// The request stated the same list as the type's last one (a SotW ACK that repeats its
    /// subscription): nothing changed, and an observer of the streams need not read it again.
    pub repeated: bool,
}

/// Whether a subscription to `names` names (keys) of a type the store holds `total` names of is
/// dense: watched as a whole rather than name by name. It becomes dense from 64 names and half
/// of the type, and stops below 32 names or a quarter of it (so that a stream near the line does
/// not go back and forth).
pub(crate) fn dense(was: bool, names: usize, total: usize) -> bool {
    if was {
        names >= 32 && names.saturating_mul(4) >= total
    } else {
        names >= 64 && names.saturating_mul(2) >= total
    }
}

/// Whether a response owing `keys` keys of one parameter set whose view is `view` reads the view
/// in its order, looking each of its resources up among the keys, rather than each key up in
/// the view: from 64 keys and half the view, when no resource has an alias (a key may be one).
/// The resources then come out sorted, and each is looked up once (a client that names every
/// cluster's endpoints). SotW's full list and delta's first response share it.
pub(crate) fn in_view_order(view: &View, keys: usize) -> bool {
    keys > 64 && !view.has_aliases() && keys >= view.len() / 2
}

/// Puts into `dirty` the changed `names` a subscription `watches`. A name several commits changed
/// comes once per commit (the store's changes are the commits' own lists): it is looked up once.
/// SotW's and delta's `mark_changed`.
pub(crate) fn mark_dirty<'a>(
    dirty: &mut HashSet<Arc<str>>,
    names: impl IntoIterator<Item = &'a Arc<str>>,
    watches: impl Fn(&Arc<str>) -> bool,
) {
    for name in names {
        if !dirty.contains(name) && watches(name) {
            dirty.insert(name.clone());
        }
    }
}

impl SubscriptionChange {
    /// Records that the subscription is dense `now` (`*state`: whether it was, see [`dense`]),
    /// given its names.
    pub(crate) fn set_dense<'a>(
        &mut self,
        state: &mut bool,
        now: bool,
        names: impl Iterator<Item = &'a Arc<str>>,
    ) {
        if now == *state {
            return;
        }
        *state = now;
        self.dense = Some(now);
        if !now {
            let mut all: Vec<Arc<str>> = names.cloned().collect();
            all.sort_unstable();
            all.dedup();
            self.added = all;
            self.removed.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subscription_is_dense_from_half_the_type_and_stops_below_a_quarter() {
        assert!(!dense(false, 63, 63), "too few names to matter");
        assert!(dense(false, 64, 128));
        assert!(!dense(false, 64, 129));
        assert!(dense(true, 40, 160), "still over a quarter");
        assert!(!dense(true, 39, 160));
        assert!(!dense(true, 31, 32));
    }

    #[test]
    fn a_subscription_that_stops_being_dense_names_every_name_to_watch_again() {
        let names: Vec<Arc<str>> = (0..100).map(|i| Arc::from(format!("n{i:03}"))).collect();
        let mut state = false;
        let mut change = SubscriptionChange::default();
        let now = dense(state, names.len(), 150);
        change.set_dense(&mut state, now, names.iter());
        assert_eq!((state, change.dense), (true, Some(true)));
        let mut change = SubscriptionChange {
            added: vec![names[0].clone()],
            removed: vec![Arc::from("gone")],
            ..Default::default()
        };
        let now = dense(state, 50, 1000);
        change.set_dense(&mut state, now, names[..50].iter());
        assert_eq!((state, change.dense), (false, Some(false)));
        assert_eq!(change.added, names[..50]);
        assert!(change.removed.is_empty(), "none was watched by name");
        let mut change = SubscriptionChange::default();
        let now = dense(state, 50, 1000);
        change.set_dense(&mut state, now, names[..50].iter());
        assert_eq!(change.dense, None, "no change, nothing to do");
    }

    #[test]
    fn a_key_is_found_by_its_borrowed_parts() {
        let mut keys: HashSet<Key> = HashSet::default();
        keys.insert((Arc::from("a"), 0));
        keys.insert((Arc::from("b"), 1));
        assert!(keys.contains(&("a", 0_u32) as &dyn KeyLookup));
        assert!(keys.contains(&("b", 1_u32) as &dyn KeyLookup));
        assert!(!keys.contains(&("a", 1_u32) as &dyn KeyLookup));
        assert!(!keys.contains(&("c", 0_u32) as &dyn KeyLookup));
    }

    #[test]
    fn nonces_are_never_reused_on_a_stream() {
        let mut nonces = NonceGen::default();
        let all: std::collections::HashSet<String> =
            (0..1000).map(|_| nonces.next_nonce().to_string()).collect();
        assert_eq!(all.len(), 1000);
    }

    #[test]
    fn a_nonce_is_its_counter_in_decimal() {
        for n in [0, 1, 9, 10, 1234567890, u64::MAX] {
            assert_eq!(Nonce::from(n).as_str(), n.to_string());
        }
    }
}
