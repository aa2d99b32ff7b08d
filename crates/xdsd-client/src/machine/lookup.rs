//! Looking a subscription or a held resource up by borrowed parts: a name (and parameters or
//! constraints) as `&str`, never a key built, and so never a name copied, for a look-up.
//!
//! `BTreeMap::range` and `get` take any `Q` the key borrows as; each key here borrows as a
//! trait object whose order is the key's own (name first, then the rest), so a probe of
//! borrowed parts finds what the owned key would.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::hash::{Hash, Hasher};
use std::ops::Bound;
use std::time::Instant;

use super::{HeldKey, Key, Params};

/// No parameters: a plain name's.
static NO_PARAMS: Params = Params::new();

/// A subscription's key, by its parts.
pub(super) trait SubKey {
    fn parts(&self) -> (&str, &Params);
}

impl SubKey for Key {
    fn parts(&self) -> (&str, &Params) {
        (&self.name, &self.params)
    }
}

/// A plain name as a subscription's key: the first of its name's keys.
pub(super) struct Plain<'a>(pub(super) &'a str);

impl SubKey for Plain<'_> {
    fn parts(&self) -> (&str, &Params) {
        (self.0, &NO_PARAMS)
    }
}

impl<'a> Borrow<dyn SubKey + 'a> for Key {
    fn borrow(&self) -> &(dyn SubKey + 'a) {
        self
    }
}

impl PartialEq for dyn SubKey + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn SubKey + '_ {}

impl PartialOrd for dyn SubKey + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn SubKey + '_ {
    fn cmp(&self, other: &Self) -> Ordering {
        self.parts().cmp(&other.parts())
    }
}

/// The keys of `name`'s subscriptions and after, as a range's bounds.
pub(super) fn from_name<'a>(
    probe: &'a Plain<'a>,
) -> (Bound<&'a (dyn SubKey + 'a)>, Bound<&'a (dyn SubKey + 'a)>) {
    (Bound::Included(probe as &dyn SubKey), Bound::Unbounded)
}

/// A held resource's key, by its parts: its name and its encoded constraints.
pub(super) trait VariantKey {
    fn parts(&self) -> (&str, &[u8]);
}

impl VariantKey for HeldKey {
    fn parts(&self) -> (&str, &[u8]) {
        (&self.0, &self.1)
    }
}

/// A held resource's key, borrowed.
pub(super) struct Variant<'a>(pub(super) &'a str, pub(super) &'a [u8]);

impl VariantKey for Variant<'_> {
    fn parts(&self) -> (&str, &[u8]) {
        (self.0, self.1)
    }
}

impl<'a> Borrow<dyn VariantKey + 'a> for HeldKey {
    fn borrow(&self) -> &(dyn VariantKey + 'a) {
        self
    }
}

impl PartialEq for dyn VariantKey + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn VariantKey + '_ {}

/// By name only: a name's variants hash alike (and are told apart by their constraints), as a
/// held resource hashes ([`super::held::HeldSet`]).
impl Hash for dyn VariantKey + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.parts().0.hash(state);
    }
}

impl PartialOrd for dyn VariantKey + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn VariantKey + '_ {
    fn cmp(&self, other: &Self) -> Ordering {
        self.parts().cmp(&other.parts())
    }
}

/// A does-not-exist timer's entry, by its parts: its deadline and its subscription.
pub(super) trait TimerKey {
    fn parts(&self) -> (Instant, &str, &Params);
}

impl TimerKey for (Instant, Key) {
    fn parts(&self) -> (Instant, &str, &Params) {
        (self.0, &self.1.name, &self.1.params)
    }
}

/// A timer's entry, borrowed: its subscription's key may be borrowed too (a [`Plain`] name).
pub(super) struct Timer<'a>(pub(super) Instant, pub(super) &'a dyn SubKey);

impl TimerKey for Timer<'_> {
    fn parts(&self) -> (Instant, &str, &Params) {
        let (name, params) = self.1.parts();
        (self.0, name, params)
    }
}

impl<'a> Borrow<dyn TimerKey + 'a> for (Instant, Key) {
    fn borrow(&self) -> &(dyn TimerKey + 'a) {
        self
    }
}

impl PartialEq for dyn TimerKey + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn TimerKey + '_ {}

impl PartialOrd for dyn TimerKey + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn TimerKey + '_ {
    fn cmp(&self, other: &Self) -> Ordering {
        self.parts().cmp(&other.parts())
    }
}

/// Stops the timer of `key` due at `deadline`, without copying the key.
pub(super) fn stop_timer(
    deadlines: &mut std::collections::BTreeSet<(Instant, Key)>,
    deadline: Instant,
    key: &dyn SubKey,
) {
    deadlines.remove(&Timer(deadline, key) as &dyn TimerKey);
}
