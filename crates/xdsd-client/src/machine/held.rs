//! What a type's state holds: each resource as held (`Held`: the resource, its key, its body's
//! digest when the body is not kept), in a set hashed by name, with the two indexes a name's
//! look-ups need beside it: the constraints of each name's constrained variants (TP2),
//! and the xdstp names in order (a glob collection's members are a range of them).
//!
//! Every resource a response brings is looked up by its key and then held: hashed, that costs a
//! hash of its name and a comparison or two, where a B-tree of 100,000 held resources compared
//! names some 25 times per look-up and again per insertion (a relay's parameter set takes in
//! every name its shared stream holds, BENCHMARKS.md stop 73). The indexes cost only the names
//! that have constrained variants, or are xdstp names.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;

use envoy_types::pb::google::protobuf::Any;
use foldhash::fast::RandomState;
use prost::Message;

use super::lookup::{Variant, VariantKey};
use super::{Instant, Resource};

/// A held resource. Its key is its name and its encoded constraints, which it holds itself:
/// held resources are a set ([`HeldSet`]), hashed by their names and told apart by their keys
/// (see [`VariantKey`]), so that no copy of a name is made for a key; their order (by key) is
/// what [`HeldSet::sorted`] gives.
#[derive(Debug, Clone)]
pub(super) struct Held {
    pub(super) resource: Resource,
    /// A digest of its body when the body itself is not kept (`Config::keep_bodies` off):
    /// `resource.body` is then empty (no bytes, no type URL), and `bytes` its size.
    pub(super) digest: Option<u64>,
    /// Its constraints, encoded (empty for none).
    pub(super) constraints: Vec<u8>,
    pub(super) expires: Option<Instant>,
    pub(super) bytes: usize,
}

impl Held {
    /// `resource` as held from `now`: its key's constraints encoded, its expiry from its TTL.
    pub(super) fn new(resource: Resource, now: Instant) -> Held {
        let constraints = resource
            .constraints
            .as_ref()
            .map(Message::encode_to_vec)
            .unwrap_or_default();
        // A TTL past what the clock can count never expires.
        let expires = resource.ttl.and_then(|t| now.checked_add(t));
        Held {
            bytes: resource.body.value.len(),
            resource,
            digest: None,
            constraints,
            expires,
        }
    }

    /// A digest of `body` (see [`Held::digest`]).
    pub(super) fn digest_of(body: &[u8]) -> u64 {
        use std::hash::BuildHasher;
        foldhash::fast::FixedState::with_seed(0).hash_one(body)
    }

    /// Whether it holds `other`'s body: the same bytes, or, when its own are not kept, the same
    /// size and digest (the type URLs are the type's: both were checked when taken in); with
    /// the digest of `other`'s body when it was worked out for that.
    pub(super) fn same_body(&self, other: &Held) -> (bool, Option<u64>) {
        match self.digest {
            None => (self.resource.body == other.resource.body, None),
            Some(d) => {
                if self.bytes != other.bytes {
                    return (false, None);
                }
                let theirs = Held::digest_of(&other.resource.body.value);
                (d == theirs, Some(theirs))
            }
        }
    }

    /// Its body, taken out whole (the `Any`: its type URL is the resource's type, checked
    /// when it was taken in): it keeps the body's digest instead (`known`, if already worked
    /// out, so that a body is hashed once).
    pub(super) fn shed_body(&mut self, known: Option<u64>) -> Any {
        let body = std::mem::take(&mut self.resource.body);
        self.digest = Some(known.unwrap_or_else(|| Held::digest_of(&body.value)));
        body
    }

    /// A copy of it for an event, with its body; when `keep` is off the body moves to the copy
    /// and it keeps the body's digest instead (`known`, as for [`Held::shed_body`]).
    pub(super) fn for_event(&mut self, keep: bool, known: Option<u64>) -> Resource {
        if keep {
            return self.resource.clone();
        }
        let body = self.shed_body(known);
        let mut resource = self.resource.clone();
        resource.body = body;
        resource
    }

    /// Its key, copied (for the indexes that name held resources).
    pub(super) fn key(&self) -> HeldKey {
        (self.resource.name.clone(), self.constraints.clone())
    }
}

#[cfg(test)]
impl Held {
    /// A held resource of `name` under `constraints` (encoded), with nothing else to it: what
    /// the tests of the held set and of the state hold.
    pub(super) fn bare(name: &str, constraints: &[u8]) -> Held {
        Held {
            resource: Resource {
                type_url: "t".to_owned(),
                name: name.to_owned(),
                aliases: Vec::new(),
                version: "1".to_owned(),
                body: Any::default(),
                constraints: None,
                ttl: None,
            },
            digest: None,
            constraints: constraints.to_vec(),
            expires: None,
            bytes: 0,
        }
    }
}

impl VariantKey for Held {
    fn parts(&self) -> (&str, &[u8]) {
        (&self.resource.name, &self.constraints)
    }
}

impl<'a> Borrow<dyn VariantKey + 'a> for Held {
    fn borrow(&self) -> &(dyn VariantKey + 'a) {
        self
    }
}

/// Boxed in the set (see [`HeldSet`]), looked up by its key as unboxed.
impl<'a> Borrow<dyn VariantKey + 'a> for Box<Held> {
    fn borrow(&self) -> &(dyn VariantKey + 'a) {
        &**self
    }
}

/// By key: what tells held resources apart, and their order.
impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for Held {}

impl PartialOrd for Held {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Held {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.parts().cmp(&other.parts())
    }
}

/// By name only, as its key borrowed hashes (see [`HeldSet`]).
impl std::hash::Hash for Held {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.resource.name.hash(state);
    }
}

/// A held resource's key, owned: what the indexes beside the held resources name them by.
pub(super) type HeldKey = (String, Vec<u8>);

/// The resources held of a type. See the module documentation.
#[derive(Default)]
pub(super) struct HeldSet {
    /// Each held resource, hashed by its name, told apart by its name and constraints. Boxed:
    /// a held resource is some 300 bytes, which the set's growth moved and copied whole (a
    /// relay's parameter set taking in 40,000 clusters: 470,000 of the relay's 8.6 million
    /// last-level misses over S12's sync, BENCHMARKS.md stop 75); a pointer moves instead.
    set: HashSet<Box<Held>, RandomState>,
    /// For each name with a constrained variant held, the encoded constraints of each of them,
    /// sorted: a name's variants are its unconstrained one, if held, then these.
    constrained: HashMap<String, Vec<Vec<u8>>, RandomState>,
    /// The xdstp names held, in order, with how many variants of each.
    xdstp: BTreeMap<String, usize>,
}

impl HeldSet {
    /// How many resources are held (variants counted apart).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.set.len()
    }

    /// What is held under `key`.
    pub(super) fn get(&self, key: &dyn VariantKey) -> Option<&Held> {
        self.set.get(key).map(|h| &**h)
    }

    /// Whether a variant of `name` is held (under its own name).
    pub(super) fn holds_name(&self, name: &str) -> bool {
        self.has_constrained(name) || self.get(&Variant(name, &[])).is_some()
    }

    /// Whether a constrained variant of `name` is held (no look-up while none is).
    pub(super) fn has_constrained(&self, name: &str) -> bool {
        !self.constrained.is_empty() && self.constrained.contains_key(name)
    }

    /// How many constrained variants are held.
    #[cfg(test)]
    pub(super) fn constrained_keys(&self) -> usize {
        self.constrained.values().map(Vec::len).sum()
    }

    /// The variants of `name` held: the unconstrained one first, then in the order of their
    /// encoded constraints (the order of their keys).
    pub(super) fn variants_of<'a: 'b, 'b>(
        &'a self,
        name: &'b str,
    ) -> impl Iterator<Item = &'a Held> + 'b {
        let plain = self.get(&Variant(name, &[]));
        let others = self
            .constrained
            .get(name)
            .into_iter()
            .flatten()
            .filter_map(move |c| self.set.get(&Variant(name, c) as &dyn VariantKey))
            .map(|h| &**h);
        plain.into_iter().chain(others)
    }

    /// The xdstp names held from `from` on, in order.
    pub(super) fn xdstp_names_from<'a>(&'a self, from: &str) -> impl Iterator<Item = &'a str> {
        self.xdstp
            .range::<str, _>((Bound::Included(from), Bound::Unbounded))
            .map(|(name, _)| name.as_str())
    }

    /// Everything held, in no order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Held> {
        self.set.iter().map(|h| &**h)
    }

    /// Everything held, in key order (a name's variants together, its unconstrained one first).
    pub(super) fn sorted(&self) -> Vec<&Held> {
        let mut all: Vec<&Held> = self.iter().collect();
        all.sort_unstable();
        all
    }

    /// Holds `held` in place of what is held under its key (returned).
    pub(super) fn replace(&mut self, held: Held) -> Option<Held> {
        let indexed = !held.constraints.is_empty() || xdsd_xdstp::is_xdstp(&held.resource.name);
        let key = indexed.then(|| held.key());
        let old = self.set.replace(Box::new(held)).map(|h| *h);
        if let (None, Some((name, constraints))) = (&old, key) {
            self.index(name, constraints);
        }
        old
    }

    /// Holds `fresh`, none of whose keys is held.
    pub(super) fn extend(&mut self, fresh: Vec<Held>) {
        self.set.reserve(fresh.len());
        for held in fresh {
            let old = self.replace(held);
            debug_assert!(old.is_none(), "a fresh key held already");
        }
    }

    /// Drops what is held under `key`.
    pub(super) fn take(&mut self, key: &dyn VariantKey) -> Option<Held> {
        let held = *self.set.take(key)?;
        let (name, constraints) = key.parts();
        if !constraints.is_empty() {
            if let Some(list) = self.constrained.get_mut(name) {
                if let Ok(i) = list.binary_search_by(|c| c.as_slice().cmp(constraints)) {
                    list.remove(i);
                }
                if list.is_empty() {
                    self.constrained.remove(name);
                }
            }
        }
        if let Some(count) = self.xdstp.get_mut(name) {
            *count -= 1;
            if *count == 0 {
                self.xdstp.remove(name);
            }
        }
        Some(held)
    }

    /// A key newly held, in the indexes that name it.
    fn index(&mut self, name: String, constraints: Vec<u8>) {
        if xdsd_xdstp::is_xdstp(&name) {
            *self.xdstp.entry(name.clone()).or_default() += 1;
        }
        if !constraints.is_empty() {
            let list = self.constrained.entry(name).or_default();
            if let Err(i) = list.binary_search(&constraints) {
                list.insert(i, constraints);
            }
        }
    }

    /// The indexes agree with the set (for the machine's invariants).
    #[cfg(test)]
    pub(super) fn check(&self) -> Result<(), String> {
        let mut constrained: BTreeMap<&str, Vec<&[u8]>> = BTreeMap::new();
        let mut xdstp: BTreeMap<&str, usize> = BTreeMap::new();
        for held in self.sorted() {
            let (name, constraints) = held.parts();
            if !constraints.is_empty() {
                constrained.entry(name).or_default().push(constraints);
            }
            if xdsd_xdstp::is_xdstp(name) {
                *xdstp.entry(name).or_default() += 1;
            }
        }
        let indexed: BTreeMap<&str, Vec<&[u8]>> = self
            .constrained
            .iter()
            .map(|(n, cs)| (n.as_str(), cs.iter().map(Vec::as_slice).collect()))
            .collect();
        if indexed != constrained {
            return Err(format!(
                "constrained variants indexed {indexed:?}, held {constrained:?}"
            ));
        }
        let indexed: BTreeMap<&str, usize> =
            self.xdstp.iter().map(|(n, c)| (n.as_str(), *c)).collect();
        if indexed != xdstp {
            return Err(format!("xdstp names indexed {indexed:?}, held {xdstp:?}"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(name: &str, constraints: &[u8]) -> Held {
        Held::bare(name, constraints)
    }

    fn keys<'a>(it: impl Iterator<Item = &'a Held>) -> Vec<(&'a str, &'a [u8])> {
        it.map(|h| h.parts()).collect()
    }

    #[test]
    fn a_names_variants_are_found_unconstrained_first_then_by_constraints() {
        let mut set = HeldSet::default();
        set.extend(vec![held("a", b"\x02"), held("b", b""), held("a", b"\x01")]);
        assert_eq!(
            keys(set.variants_of("a")),
            [("a", &b"\x01"[..]), ("a", b"\x02")]
        );
        assert!(set.holds_name("a"), "held only constrained, still held");
        set.replace(held("a", b""));
        assert_eq!(
            keys(set.variants_of("a")),
            [("a", &b""[..]), ("a", b"\x01"), ("a", b"\x02")]
        );
        assert_eq!(keys(set.variants_of("b")), [("b", &b""[..])]);
        assert!(set.variants_of("c").next().is_none());
        assert!(!set.holds_name("c"));
        set.check().unwrap();
    }

    #[test]
    fn a_key_taken_leaves_the_indexes_with_its_last_variant() {
        let mut set = HeldSet::default();
        let x = "xdstp://auth/t/a";
        set.extend(vec![held(x, b""), held(x, b"\x01"), held("a", b"\x01")]);
        assert_eq!(set.xdstp_names_from("xdstp:").collect::<Vec<_>>(), [x]);
        assert!(set.take(&Variant(x, b"\x01")).is_some());
        assert_eq!(
            set.xdstp_names_from("xdstp:").count(),
            1,
            "one variant left"
        );
        assert!(set.take(&Variant(x, b"")).is_some());
        assert_eq!(set.xdstp_names_from("").count(), 0);
        assert!(set.take(&Variant("a", b"\x01")).is_some());
        assert!(!set.holds_name("a"));
        assert!(set.take(&Variant("a", b"\x01")).is_none(), "taken once");
        assert_eq!(set.len(), 0);
        set.check().unwrap();
    }

    #[test]
    fn a_key_replaced_is_held_once_and_indexed_once() {
        let mut set = HeldSet::default();
        assert!(set.replace(held("a", b"\x01")).is_none());
        let mut again = held("a", b"\x01");
        again.resource.version = "2".to_owned();
        let old = set.replace(again).expect("held");
        assert_eq!(old.resource.version, "1");
        assert_eq!(set.len(), 1);
        assert_eq!(
            set.get(&Variant("a", b"\x01"))
                .map(|h| h.resource.version.as_str()),
            Some("2")
        );
        set.check().unwrap();
    }

    #[test]
    fn everything_held_sorts_in_key_order() {
        let mut set = HeldSet::default();
        set.extend(vec![
            held("b", b""),
            held("a", b"\x01"),
            held("a", b""),
            held("c", b""),
        ]);
        assert_eq!(
            keys(set.sorted().into_iter()),
            [("a", &b""[..]), ("a", b"\x01"), ("b", b""), ("c", b"")]
        );
    }
}
