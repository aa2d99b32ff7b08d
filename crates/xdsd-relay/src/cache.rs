//! The relay's cache, sans-I/O: what each upstream stream holds, merged into the store's
//! change sets.
//!
//! A resource is kept per upstream stream (group) by type and name, with its body, its xRFC TP2
//! dynamic parameter constraints and its TTL as the upstream sent them. The store holds, for each
//! name, every distinct variant (by constraints) that some group holds: the server then matches
//! downstream subscriptions against the constraints as it does for its own resources, and sends
//! the constraints along (TP2's MUSTs for a caching proxy). Versions are the store's, derived from
//! content, so two relays in front of the same upstream answer the same versions.
//!
//! A group holds each variant it was sent by its constraints (the cache's key is the type, the
//! name and the constraints, per group): its wildcard and plain names follow the group's one
//! parameter set, but its resource locators each bring the variant of their own parameters, so
//! one stream may hold several variants of a name. A variant leaves when the upstream removes
//! that variant ([`Cache::remove_variants`]), when its name leaves the group
//! ([`Cache::remove`]), or when no subscription of the group still wants it
//! ([`Cache::retain`]).
//!
//! Each partition's cache is a part of the relay's one table ([`crate::table`]): when a name or
//! a wildcard leaves a group is the table's rows' decision, not the cache's.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use envoy_types::pb::envoy::service::discovery::v3::DynamicParameterConstraints;
use prost::Message;
use xdsd_core::params::Constraints;
use xdsd_core::{ChangeSet, ResourceInput};

use crate::group::GroupKey;
use crate::want::TypeKey;
use xdsd_core::hash::HashMap;

/// One variant as received.
#[derive(Debug, Clone, PartialEq)]
struct Cached {
    value: Bytes,
    constraints: Option<DynamicParameterConstraints>,
    ttl: Option<Duration>,
    /// Its aliases (VHDS: the `ROUTE_CONFIG/DOMAIN`s of a virtual host), stored with it.
    aliases: Vec<String>,
}

/// A name of a type: the type by its key (compared as a number for the well-known types, not
/// as 68 bytes of URL at each step of a look-up), then the name.
type Name = (TypeKey, String);

/// A variant held by a group: the group, and the variant's encoded constraints (empty: none).
type Held = (GroupKey, Vec<u8>);

/// `group` no longer holds `key` under `aliases`, in the index of the names held by alias.
fn unindex(
    aliased: &mut BTreeMap<(GroupKey, TypeKey, String), BTreeSet<String>>,
    group: &GroupKey,
    key: &Name,
    aliases: &[String],
) {
    for alias in aliases {
        let at = (group.clone(), key.0.clone(), alias.clone());
        if let Some(names) = aliased.get_mut(&at) {
            names.remove(&key.1);
            if names.is_empty() {
                aliased.remove(&at);
            }
        }
    }
}

/// The variants held of one name, by group and constraints, in that order: a sorted vector,
/// sized to what it holds. Most names have one variant held by one group, and a `BTreeMap`
/// allocates a whole node for its first entry (about 1.7 KB here: the relay's largest
/// allocation, a third of its heap at 20,000 names, BENCHMARKS.md stop 71). A variant is
/// shared: a group sent what another holds (a parameter set's wildcard is sent every
/// unconstrained variant the shared stream has) holds the same one, not a copy, and a second
/// holder grows the vector by a pointer, not by a whole variant.
#[derive(Debug, Default)]
struct Variants(Vec<(Held, Arc<Cached>)>);

impl Variants {
    fn find(&self, key: &Held) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.cmp(key))
    }

    #[cfg(test)]
    fn get(&self, key: &Held) -> Option<&Cached> {
        self.find(key).ok().map(|i| &*self.0[i].1)
    }

    /// Puts `value` under `key`: the value it replaces, if any.
    #[cfg(test)]
    fn insert(&mut self, key: Held, value: Cached) -> Option<Cached> {
        let at = self.find(&key);
        self.insert_at(at, key, Arc::new(value))
            .map(Arc::unwrap_or_clone)
    }

    /// Puts `value` under `key`, found at `at` ([`Variants::find`] of `key`, nothing changed
    /// since): the value it replaces, if any.
    fn insert_at(
        &mut self,
        at: Result<usize, usize>,
        key: Held,
        value: Arc<Cached>,
    ) -> Option<Arc<Cached>> {
        match at {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, value)),
            Err(i) => {
                // Room for one more, not the four a vector's first growth makes.
                self.0.reserve_exact(1);
                self.0.insert(i, (key, value));
                None
            }
        }
    }

    fn remove(&mut self, key: &Held) -> Option<Arc<Cached>> {
        let i = self.find(key).ok()?;
        let (_, value) = self.0.remove(i);
        self.0.shrink_to_fit();
        Some(value)
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// In key order.
    fn iter(&self) -> impl Iterator<Item = (&Held, &Cached)> {
        self.0.iter().map(|(k, v)| (k, &**v))
    }

    fn values(&self) -> impl Iterator<Item = &Cached> {
        self.0.iter().map(|(_, v)| &**v)
    }
}

/// The names a group holds of a type, with how many variants of each: hashed (a response of N
/// new names costs N hashed insertions, not N descents of a B-tree of names), and the xdstp
/// ones also in order, what a glob collection's members are found in ([`Cache::members`]).
#[derive(Debug, Default)]
struct GroupNames {
    counts: HashMap<String, usize>,
    xdstp: BTreeSet<String>,
}

impl GroupNames {
    /// One more variant of `name`.
    fn add(&mut self, name: &str) {
        match self.counts.get_mut(name) {
            Some(count) => *count += 1,
            None => {
                self.counts.insert(name.to_owned(), 1);
                if xdsd_core::xdstp::is_xdstp(name) {
                    self.xdstp.insert(name.to_owned());
                }
            }
        }
    }

    /// `n` fewer variants of `name`.
    fn sub(&mut self, name: &str, n: usize) {
        if let Some(count) = self.counts.get_mut(name) {
            *count = count.saturating_sub(n);
            if *count == 0 {
                self.counts.remove(name);
                self.xdstp.remove(name);
            }
        }
    }
}

/// The cache. See the module documentation.
#[derive(Debug, Default)]
pub struct Cache {
    /// By type, then name (hashed: a response of N resources costs N look-ups of a name, not
    /// N descents of a B-tree comparing names).
    entries: BTreeMap<TypeKey, HashMap<String, Variants>>,
    /// Names changed since the last [`Cache::take_change`].
    dirty: BTreeSet<Name>,
    /// Variants in the store after the last change taken.
    variants: usize,
    /// The distinct variants of each name in the store after the last change taken (what
    /// `variants` sums), so that a change recounts only the names it changes.
    counted: BTreeMap<Name, usize>,
    /// The names each group holds under each alias of a type (VHDS): found without a scan.
    aliased: BTreeMap<(GroupKey, TypeKey, String), BTreeSet<String>>,
    /// The names each group holds of each type, with how many variants of each: a group's
    /// wildcard leaving costs the names it held, not a scan of the cache.
    by_group: BTreeMap<(GroupKey, TypeKey), GroupNames>,
    /// Names whose last variant left since [`Cache::take_emptied`] was called.
    emptied: Vec<Name>,
    /// Names looked at by [`Cache::drop_type`] (what its cost is measured by in the tests).
    #[cfg(test)]
    looked_at: usize,
}

impl Cache {
    /// An empty cache.
    pub fn new() -> Cache {
        Cache::default()
    }

    /// `group` was sent `resource` (added or changed): [`Cache::put_all`] of one.
    pub fn put(&mut self, group: &GroupKey, resource: &mut xdsd_client::Resource) {
        let type_key = TypeKey::of(&resource.type_url);
        self.put_all(group, &type_key, &mut [resource]);
    }

    /// `group` was sent `resources` of the type `type_key` (added or changed). The type's maps
    /// are looked up once for all of them; each costs a look-up of its name and of its group's
    /// variants of it: a group sent a variant another group holds already (a parameter set's
    /// wildcard sent the unconstrained variants the shared stream has) neither copies nor
    /// compares what the other group holds, unless it becomes the variant's first holder, and
    /// its name is copied only for the indexes that do not have it yet. Each body is taken out
    /// of its resource (its bytes become the cache's, not copied).
    pub fn put_all(
        &mut self,
        group: &GroupKey,
        type_key: &TypeKey,
        resources: &mut [&mut xdsd_client::Resource],
    ) {
        let names = self.entries.entry(type_key.clone()).or_default();
        let by_group = (group.clone(), type_key.clone());
        let group_names = self.by_group.entry(by_group.clone()).or_default();
        for resource in resources.iter_mut() {
            let cached = Cached {
                value: Bytes::from(std::mem::take(&mut resource.body.value)),
                // A TP2 server names an unconstrained variant with empty constraints: none.
                constraints: resource.constraints.clone().filter(|c| c.r#type.is_some()),
                ttl: resource.ttl,
                aliases: resource.aliases.clone(),
            };
            let name = resource.name.as_str();
            let held = match names.get_mut(name) {
                Some(held) => held,
                None => names.entry(name.to_owned()).or_default(),
            };
            let variant = (group.clone(), encoded(&cached));
            let at = held.find(&variant);
            if let Ok(i) = at {
                if *held.0[i].1 == cached {
                    continue;
                }
            }
            // The store is given each distinct variant from the first group holding it: the
            // store's variant changes when this group holds it first (a group before it in
            // order holds none), and holds another body than the group that was first.
            let first = held
                .0
                .iter()
                .find(|((_, c), _)| *c == variant.1)
                .map(|((g, _), c)| (g, c));
            let same = first.is_some_and(|(_, c)| **c == cached);
            let changed = match first {
                None => true,
                Some((g, _)) => match group.cmp(g) {
                    std::cmp::Ordering::Less => !same,
                    std::cmp::Ordering::Equal => true,
                    std::cmp::Ordering::Greater => false,
                },
            };
            // A variant equal to the first holder's is that one, shared, and a body equal to
            // the first holder's is kept once: a parameter set's stream, sent what the shared
            // stream holds (its wildcard: every unconstrained variant), holds no second copy
            // of either, and the copy decoded is given back at once.
            let cached = match first {
                Some((_, c)) if same => Arc::clone(c),
                Some((_, c)) if c.value == cached.value => Arc::new(Cached {
                    value: c.value.clone(),
                    ..cached
                }),
                _ => Arc::new(cached),
            };
            let aliases = (!cached.aliases.is_empty()).then(|| cached.aliases.clone());
            let old = held.insert_at(at, variant, cached);
            match old {
                Some(old) => {
                    if !old.aliases.is_empty() {
                        let key = (type_key.clone(), name.to_owned());
                        unindex(&mut self.aliased, group, &key, &old.aliases);
                    }
                }
                None => group_names.add(name),
            }
            for alias in aliases.into_iter().flatten() {
                self.aliased
                    .entry((group.clone(), type_key.clone(), alias))
                    .or_default()
                    .insert(name.to_owned());
            }
            if changed {
                self.dirty.insert((type_key.clone(), name.to_owned()));
            }
        }
        // Looked up before knowing whether anything would be new: not kept empty.
        if group_names.counts.is_empty() {
            self.by_group.remove(&by_group);
        }
    }

    /// `group` no longer holds `key` under `aliases`.
    fn unindex(&mut self, group: &GroupKey, key: &Name, aliases: &[String]) {
        unindex(&mut self.aliased, group, key, aliases);
    }

    /// `group` no longer holds `names` of `type_url`, any variant (removed upstream, expired, or
    /// not there).
    pub fn remove(&mut self, group: &GroupKey, type_url: &str, names: &[String]) {
        let type_key = TypeKey::of(type_url);
        for name in names {
            self.retain_of(group, &type_key, name, |_| false);
        }
    }

    /// `group` no longer holds these variants of `type_url`, each a name and its constraints
    /// (`None`: the plain resource).
    pub fn remove_variants(
        &mut self,
        group: &GroupKey,
        type_url: &str,
        variants: &[(String, Option<DynamicParameterConstraints>)],
    ) {
        let type_key = TypeKey::of(type_url);
        for (name, constraints) in variants {
            let gone = constraints
                .as_ref()
                .map(|c| c.encode_to_vec())
                .unwrap_or_default();
            self.retain_of(group, &type_key, name, |c| {
                c.map(|c| c.encode_to_vec()).unwrap_or_default() != gone
            });
        }
    }

    /// `group` keeps of resource `name` of `type_url` the variants for whose constraints
    /// (`None`: unconstrained) `keep` says so, and no others.
    pub fn retain(
        &mut self,
        group: &GroupKey,
        type_url: &str,
        name: &str,
        keep: impl Fn(Option<&DynamicParameterConstraints>) -> bool,
    ) {
        self.retain_of(group, &TypeKey::of(type_url), name, keep)
    }

    /// [`Cache::retain`] of a type by its key.
    fn retain_of(
        &mut self,
        group: &GroupKey,
        type_key: &TypeKey,
        name: &str,
        keep: impl Fn(Option<&DynamicParameterConstraints>) -> bool,
    ) {
        let Some(names) = self.entries.get_mut(type_key) else {
            return;
        };
        let Some(held) = names.get_mut(name) else {
            return;
        };
        let gone: Vec<Held> = held
            .iter()
            .filter(|((g, _), cached)| g == group && !keep(cached.constraints.as_ref()))
            .map(|(variant, _)| variant.clone())
            .collect();
        if gone.is_empty() {
            return;
        }
        let mut aliases = Vec::new();
        for variant in &gone {
            if let Some(cached) = held.remove(variant) {
                aliases.extend(cached.aliases.iter().cloned());
            }
        }
        let key = (type_key.clone(), name.to_owned());
        if held.is_empty() {
            names.remove(name);
            if names.is_empty() {
                self.entries.remove(type_key);
            }
            self.emptied.push(key.clone());
        }
        let at = (group.clone(), key.0.clone());
        if let Some(names) = self.by_group.get_mut(&at) {
            names.sub(&key.1, gone.len());
            if names.counts.is_empty() {
                self.by_group.remove(&at);
            }
        }
        self.unindex(group, &key, &aliases);
        self.dirty.insert(key);
    }

    /// The names of the resources of `type_url` that `group` holds under the alias `alias`.
    pub fn aliased(&self, group: &GroupKey, type_url: &str, alias: &str) -> Vec<String> {
        self.aliased
            .get(&(group.clone(), TypeKey::of(type_url), alias.to_owned()))
            .map(|names| names.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The aliases `group` holds resource `name` of `type_url` under.
    pub fn aliases_of(&self, group: &GroupKey, type_url: &str, name: &str) -> Vec<String> {
        let mut out: Vec<String> = self
            .entries
            .get(&TypeKey::of(type_url))
            .and_then(|names| names.get(name))
            .into_iter()
            .flat_map(|held| held.iter().filter(|((g, _), _)| g == group))
            .flat_map(|(_, c)| c.aliases.iter().cloned())
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// `group` no longer holds anything of `type_url` but the names `keep` keeps (its wildcard
    /// subscription ended; those names are still subscribed).
    /// Costs the names the group holds of the type (an index), not a scan of the cache.
    pub fn drop_type(&mut self, group: &GroupKey, type_url: &str, keep: impl Fn(&str) -> bool) {
        let Some(held) = self.by_group.get(&(group.clone(), TypeKey::of(type_url))) else {
            return;
        };
        #[cfg(test)]
        {
            self.looked_at += held.counts.len();
        }
        let mut names: Vec<String> = held.counts.keys().filter(|n| !keep(n)).cloned().collect();
        // In order, as the names leave the store.
        names.sort_unstable();
        self.remove(group, type_url, &names);
    }

    /// The names of the members of the glob collection `glob` (xRFC TP1, canonical) of
    /// `type_url` that `group` holds: a walk of the names under the glob's path (an index kept
    /// sorted), not of the cache.
    pub fn members(&self, group: &GroupKey, type_url: &str, glob: &str) -> Vec<String> {
        let Some((prefix, query)) = xdsd_core::xdstp::glob_parts(glob) else {
            return Vec::new();
        };
        let Some(held) = self.by_group.get(&(group.clone(), TypeKey::of(type_url))) else {
            return Vec::new();
        };
        held.xdstp
            .range::<str, _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(|name| name.starts_with(prefix))
            .filter(|name| xdsd_core::xdstp::is_member(prefix, query, name))
            .cloned()
            .collect()
    }

    /// Whether any group holds a variant of `name` of `type_url`.
    pub fn holds_name(&self, type_url: &str, name: &str) -> bool {
        self.entries
            .get(&TypeKey::of(type_url))
            .is_some_and(|names| names.contains_key(name))
    }

    /// The names whose last variant left since asked last.
    pub fn take_emptied(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.emptied)
            .into_iter()
            .map(|(t, n)| (t.as_str().to_owned(), n))
            .collect()
    }

    /// Whether the cache holds any resource.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The variants in the store after the last change taken.
    pub fn variants(&self) -> usize {
        self.variants
    }

    /// The change for the store since the last one taken: every variant of each changed name
    /// (distinct by constraints, whichever groups hold it), `None` when nothing changed. A
    /// variant whose constraints the store cannot take is left out with the reason.
    pub fn take_change(&mut self) -> Option<(ChangeSet, Vec<String>)> {
        if self.dirty.is_empty() {
            return None;
        }
        let dirty = std::mem::take(&mut self.dirty);
        let mut resources = Vec::new();
        let mut problems = Vec::new();
        for key in &dirty {
            for input in self.variants_of(key, &mut problems) {
                resources.push(input);
            }
            // Recounted for the names changed only.
            let now = self.held(key).map_or(0, |held| {
                held.values().map(encoded).collect::<BTreeSet<_>>().len()
            });
            let before = if now == 0 {
                self.counted.remove(key).unwrap_or(0)
            } else {
                self.counted.insert(key.clone(), now).unwrap_or(0)
            };
            self.variants = self.variants + now - before;
        }
        let names = dirty
            .into_iter()
            .map(|(t, n)| (t.as_str().to_owned(), n))
            .collect();
        let change = ChangeSet::names(names, resources, self.variants);
        Some((change, problems))
    }

    /// The variants held of `key`.
    fn held(&self, (type_key, name): &Name) -> Option<&Variants> {
        self.entries.get(type_key)?.get(name)
    }

    fn variants_of(&self, key: &Name, problems: &mut Vec<String>) -> Vec<ResourceInput> {
        let Some(held) = self.held(key) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        for ((group, _), cached) in held.iter() {
            // Each distinct variant once, from the first group holding it.
            if !seen.insert(encoded(cached)) {
                continue;
            }
            let constraints = match &cached.constraints {
                None => None,
                Some(proto) => match Constraints::new(proto.clone()) {
                    Ok(c) => Some(c),
                    Err(e) => {
                        problems.push(format!("{} {:?}: constraints: {e}", key.0, key.1));
                        continue;
                    }
                },
            };
            out.push(
                ResourceInput::new(key.0.as_str(), key.1.clone(), cached.value.clone())
                    .with_constraints(constraints)
                    .with_ttl(cached.ttl)
                    .with_aliases(cached.aliases.clone())
                    .with_origin(format!("upstream ({group})")),
            );
        }
        out
    }
}

/// A variant's identity among a name's: its encoded constraints.
fn encoded(cached: &Cached) -> Vec<u8> {
    cached
        .constraints
        .as_ref()
        .map(|p| p.encode_to_vec())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::{
        single_constraint::ConstraintType, SingleConstraint, Type,
    };
    use envoy_types::pb::google::protobuf::Any;
    use xdsd_core::source::Update;

    const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";

    fn resource(name: &str, body: &[u8], env: Option<&str>) -> xdsd_client::Resource {
        xdsd_client::Resource {
            type_url: CDS.into(),
            name: name.into(),
            version: "1".into(),
            body: Any {
                type_url: CDS.into(),
                value: body.to_vec(),
            },
            aliases: Vec::new(),
            constraints: env.map(|v| DynamicParameterConstraints {
                r#type: Some(Type::Constraint(SingleConstraint {
                    key: "env".into(),
                    constraint_type: Some(ConstraintType::Value(v.into())),
                })),
            }),
            ttl: None,
        }
    }

    fn inputs(change: &ChangeSet) -> (Vec<(String, String)>, Vec<ResourceInput>) {
        match &change.update {
            Update::Names { names, resources } => (names.clone(), resources.clone()),
            other => panic!("a change of names, not {other:?}"),
        }
    }

    fn params(env: &str) -> GroupKey {
        GroupKey::shared().with_params([("env".to_owned(), env.to_owned())].into())
    }

    fn cached(value: &'static [u8]) -> Cached {
        Cached {
            value: Bytes::from_static(value),
            constraints: None,
            ttl: None,
            aliases: Vec::new(),
        }
    }

    #[test]
    fn a_names_variants_are_kept_in_group_and_constraint_order_whatever_order_they_came_in() {
        let mut v = Variants::default();
        let keys = [
            (params("prod"), b"x".to_vec()),
            (GroupKey::shared(), Vec::new()),
            (params("dev"), Vec::new()),
            (params("prod"), Vec::new()),
        ];
        const BODIES: &[u8] = b"0000";
        for (i, key) in keys.iter().enumerate() {
            assert!(v.insert(key.clone(), cached(&BODIES[..=i])).is_none());
        }
        let order: Vec<&Held> = v.iter().map(|(k, _)| k).collect();
        let mut sorted: Vec<&Held> = keys.iter().collect();
        sorted.sort();
        assert_eq!(order, sorted);
        assert_eq!(v.get(&keys[0]).map(|c| c.value.len()), Some(1));
        assert_eq!(v.get(&(params("test"), Vec::new())), None);
    }

    #[test]
    fn a_variant_put_again_replaces_its_value_and_hands_back_the_old() {
        let mut v = Variants::default();
        let key = (GroupKey::shared(), Vec::new());
        assert!(v.insert(key.clone(), cached(b"a")).is_none());
        let old = v.insert(key.clone(), cached(b"b")).expect("replaced");
        assert_eq!(&old.value[..], b"a");
        assert_eq!(v.values().count(), 1);
        assert_eq!(v.get(&key).map(|c| &c.value[..]), Some(&b"b"[..]));
    }

    #[test]
    fn a_names_variants_hold_no_room_beyond_what_they_hold() {
        let mut v = Variants::default();
        let a = (params("dev"), Vec::new());
        let b = (params("prod"), Vec::new());
        v.insert(a.clone(), cached(b"a"));
        assert_eq!(v.0.capacity(), 1, "one variant, room for one");
        v.insert(b.clone(), cached(b"b"));
        assert_eq!(v.0.capacity(), 2);
        assert_eq!(
            v.remove(&a).map(|c| c.value.clone()),
            Some(Bytes::from_static(b"a"))
        );
        assert_eq!(v.0.capacity(), 1, "room given back on removal");
        assert!(v.remove(&a).is_none(), "removed once");
        assert!(v.remove(&b).is_some());
        assert!(v.is_empty());
    }

    #[test]
    fn a_group_sent_nothing_new_keeps_no_empty_index_of_its_names() {
        let mut cache = Cache::new();
        let set = params("prod");
        cache.put_all(&set, &TypeKey::of(CDS), &mut []);
        assert!(cache.by_group.is_empty(), "{:?}", cache.by_group);
        cache.put(&set, &mut resource("c", b"same", None));
        assert_eq!(cache.by_group.len(), 1);
    }

    #[test]
    fn a_body_equal_to_another_groups_variant_is_kept_once() {
        let mut cache = Cache::new();
        let set = params("prod");
        cache.put(&GroupKey::shared(), &mut resource("c", b"same", None));
        cache.put(&set, &mut resource("c", b"same", None));
        cache.put(&set, &mut resource("d", b"own", None));
        cache.put(&GroupKey::shared(), &mut resource("d", b"other", None));
        let variants = |name: &str| -> Vec<Bytes> {
            cache.entries[&TypeKey::of(CDS)][name]
                .values()
                .map(|c| c.value.clone())
                .collect()
        };
        let c = variants("c");
        assert_eq!(c.len(), 2, "both groups hold it");
        assert_eq!(c[0].as_ptr(), c[1].as_ptr(), "one body, shared");
        let held = &cache.entries[&TypeKey::of(CDS)]["c"];
        assert!(
            Arc::ptr_eq(&held.0[0].1, &held.0[1].1),
            "one variant, shared whole"
        );
        let d = variants("d");
        assert_eq!(d.len(), 2);
        assert_ne!(d[0], d[1], "another body is its own");
        // The store is given the shared group's variant once either way.
        let (change, _) = cache.take_change().expect("a change");
        assert_eq!(inputs(&change).1.len(), 2);
    }

    #[test]
    fn a_variant_is_stored_with_its_constraints_and_ttl() {
        let mut cache = Cache::new();
        let mut r = resource("c", b"\x0a\x01c", Some("prod"));
        r.ttl = Some(Duration::from_secs(5));
        cache.put(&params("prod"), &mut r);
        let (change, problems) = cache.take_change().expect("a change");
        assert!(problems.is_empty());
        let (names, resources) = inputs(&change);
        assert_eq!(names, vec![(CDS.to_owned(), "c".to_owned())]);
        assert_eq!(resources.len(), 1);
        let c = resources[0].constraints.as_ref().expect("constraints kept");
        assert_eq!(c.proto(), r.constraints.as_ref().expect("sent"));
        assert_eq!(resources[0].ttl, Some(Duration::from_secs(5)));
        assert_eq!(change.resources, 1);
    }

    #[test]
    fn the_variants_of_two_groups_are_both_stored() {
        let mut cache = Cache::new();
        cache.put(&params("prod"), &mut resource("c", b"p", Some("prod")));
        cache.put(&params("dev"), &mut resource("c", b"d", Some("dev")));
        let (change, _) = cache.take_change().expect("a change");
        assert_eq!(inputs(&change).1.len(), 2);
        assert_eq!(cache.variants(), 2);
    }

    #[test]
    fn a_groups_wildcard_leaving_costs_the_names_that_group_holds_of_the_type() {
        let mut cache = Cache::new();
        for i in 0..100 {
            cache.put(
                &GroupKey::shared(),
                &mut resource(&format!("c{i}"), b"x", None),
            );
        }
        cache.put(&params("prod"), &mut resource("p1", b"x", Some("prod")));
        cache.put(&params("prod"), &mut resource("p2", b"y", Some("prod")));
        cache.put(&params("prod"), &mut resource("c0", b"x", Some("prod")));
        cache.take_change();
        cache.drop_type(&params("prod"), CDS, |n| n == "p2");
        assert_eq!(
            cache.looked_at, 3,
            "the group's three names, not the cache's 103"
        );
        let (change, _) = cache.take_change().expect("a change");
        let (names, _) = inputs(&change);
        assert_eq!(names.len(), 2, "p1 and c0's prod variant: {names:?}");
        assert_eq!(cache.variants(), 101, "c0..c99 and p2");
        cache.drop_type(&params("prod"), CDS, |_| false);
        assert!(!cache
            .by_group
            .contains_key(&(params("prod"), TypeKey::of(CDS))));
    }

    #[test]
    fn a_variant_held_by_two_groups_is_stored_once_and_stays_until_both_drop_it() {
        let mut cache = Cache::new();
        cache.put(&GroupKey::shared(), &mut resource("c", b"x", None));
        cache.put(&params("prod"), &mut resource("c", b"x", None));
        let (change, _) = cache.take_change().expect("a change");
        assert_eq!(inputs(&change).1.len(), 1);
        cache.remove(&GroupKey::shared(), CDS, &["c".into()]);
        let (change, _) = cache.take_change().expect("a change");
        assert_eq!(inputs(&change).1.len(), 1, "still held by the other group");
        cache.drop_type(&params("prod"), CDS, |_| false);
        let (change, _) = cache.take_change().expect("a change");
        let (names, resources) = inputs(&change);
        assert_eq!(
            (names.len(), resources.len()),
            (1, 0),
            "the name is removed"
        );
        assert!(cache.is_empty());
    }

    #[test]
    fn one_group_holds_a_variant_per_constraints_and_loses_only_the_one_removed() {
        let mut cache = Cache::new();
        cache.put(&GroupKey::shared(), &mut resource("c", b"p", Some("prod")));
        cache.put(&GroupKey::shared(), &mut resource("c", b"t", Some("test")));
        let (change, _) = cache.take_change().expect("a change");
        assert_eq!(inputs(&change).1.len(), 2, "both locators' variants");
        let test = resource("c", b"t", Some("test")).constraints;
        cache.remove_variants(&GroupKey::shared(), CDS, &[("c".to_owned(), test)]);
        let (change, _) = cache.take_change().expect("a change");
        let (_, resources) = inputs(&change);
        assert_eq!(resources.len(), 1);
        assert_eq!(&resources[0].value[..], b"p");
    }

    #[test]
    fn the_variants_counted_follow_each_change() {
        let mut cache = Cache::new();
        cache.put(&params("prod"), &mut resource("c", b"p", Some("prod")));
        cache.put(&params("dev"), &mut resource("c", b"d", Some("dev")));
        cache.put(&GroupKey::shared(), &mut resource("d", b"x", None));
        cache.take_change();
        assert_eq!(cache.variants(), 3);
        cache.remove(&params("dev"), CDS, &["c".into()]);
        cache.take_change();
        assert_eq!(cache.variants(), 2);
        cache.remove(&GroupKey::shared(), CDS, &["d".into()]);
        cache.put(&params("prod"), &mut resource("c", b"p2", Some("prod")));
        cache.take_change();
        assert_eq!(cache.variants(), 1);
    }

    #[test]
    fn a_variant_named_with_empty_constraints_is_unconstrained() {
        let mut cache = Cache::new();
        let mut r = resource("c", b"x", None);
        r.constraints = Some(DynamicParameterConstraints::default());
        cache.put(&GroupKey::shared(), &mut r);
        let (change, _) = cache.take_change().expect("a change");
        assert!(inputs(&change).1[0].constraints.is_none());
    }

    #[test]
    fn a_resource_sent_again_unchanged_is_no_change() {
        let mut cache = Cache::new();
        cache.put(&GroupKey::shared(), &mut resource("c", b"x", None));
        cache.take_change();
        cache.put(&GroupKey::shared(), &mut resource("c", b"x", None));
        assert!(cache.take_change().is_none());
    }

    #[test]
    fn a_variant_a_group_before_it_holds_already_is_no_change_to_the_store() {
        let mut cache = Cache::new();
        cache.put(&GroupKey::shared(), &mut resource("c", b"x", None));
        cache.take_change();
        // A parameter set's wildcard is sent the unconstrained variant the shared stream has.
        cache.put(&params("prod"), &mut resource("c", b"x", None));
        assert!(
            cache.take_change().is_none(),
            "the store has it from the shared stream"
        );
        // The first group's own change is the store's.
        cache.put(&GroupKey::shared(), &mut resource("c", b"y", None));
        let (change, _) = cache.take_change().expect("a change");
        assert_eq!(&inputs(&change).1[0].value[..], b"y");
        // A variant no earlier group holds is.
        cache.put(&params("prod"), &mut resource("d", b"p", Some("prod")));
        let (change, _) = cache.take_change().expect("a change");
        assert_eq!(inputs(&change).0, [(CDS.to_owned(), "d".to_owned())]);
        // The first group letting go gives the store the next one's.
        cache.remove(&GroupKey::shared(), CDS, &["c".into()]);
        let (change, _) = cache.take_change().expect("a change");
        let (_, resources) = inputs(&change);
        let values: Vec<&[u8]> = resources.iter().map(|r| &r.value[..]).collect();
        assert_eq!(values, [&b"x"[..]]);
    }

    #[test]
    fn a_group_before_the_variants_first_holder_changes_the_store_only_with_another_body() {
        let (mut early, mut late) = (params("a"), params("b"));
        if late < early {
            std::mem::swap(&mut early, &mut late);
        }
        let mut cache = Cache::new();
        cache.put(&late, &mut resource("c", b"x", None));
        cache.take_change();
        // The same body from a group before it: the store's variant is the same.
        cache.put(&early, &mut resource("c", b"x", None));
        assert!(cache.take_change().is_none());
        // Another body from the group now first: the store's variant is that group's.
        cache.put(&early, &mut resource("c", b"y", None));
        let (change, _) = cache.take_change().expect("a change");
        assert_eq!(&inputs(&change).1[0].value[..], b"y");
        // Another body from the group after it: not the store's.
        cache.put(&late, &mut resource("c", b"z", None));
        assert!(cache.take_change().is_none());
        // The first letting go: the next one's body.
        cache.remove(&early, CDS, &["c".into()]);
        let (change, _) = cache.take_change().expect("a change");
        assert_eq!(&inputs(&change).1[0].value[..], b"z");
    }

    #[test]
    fn a_virtual_host_is_stored_with_its_aliases_and_found_by_them() {
        const VHDS: &str = "type.googleapis.com/envoy.config.route.v3.VirtualHost";
        let mut cache = Cache::new();
        let mut r = resource("rc/backend", b"\x0a\x0arc/backend", None);
        r.type_url = VHDS.into();
        r.aliases = vec!["rc/backend.example".into()];
        cache.put(&GroupKey::shared(), &mut r);
        let (change, _) = cache.take_change().expect("a change");
        let (_, resources) = inputs(&change);
        assert_eq!(resources[0].aliases, ["rc/backend.example"]);
        assert_eq!(
            cache.aliased(&GroupKey::shared(), VHDS, "rc/backend.example"),
            ["rc/backend"]
        );
        assert_eq!(
            cache.aliases_of(&GroupKey::shared(), VHDS, "rc/backend"),
            ["rc/backend.example"]
        );
        assert!(cache
            .aliased(&params("prod"), VHDS, "rc/backend.example")
            .is_empty());
        // Sent again without the alias, then removed: no longer found by it.
        r.aliases = vec!["rc/other.example".into()];
        cache.put(&GroupKey::shared(), &mut r);
        assert!(cache
            .aliased(&GroupKey::shared(), VHDS, "rc/backend.example")
            .is_empty());
        assert_eq!(
            cache.aliased(&GroupKey::shared(), VHDS, "rc/other.example"),
            ["rc/backend"]
        );
        cache.remove(&GroupKey::shared(), VHDS, &["rc/backend".into()]);
        assert!(cache
            .aliased(&GroupKey::shared(), VHDS, "rc/other.example")
            .is_empty());
        assert!(cache.aliased.is_empty(), "nothing kept of what left");
    }
}
