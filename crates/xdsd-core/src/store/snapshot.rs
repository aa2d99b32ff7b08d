//! Immutable store states. An update builds the next state and swaps it in whole, so a reader
//! never waits for a writer and never sees half an update.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::{BufMut, Bytes, BytesMut};
use sha2::{Digest, Sha256};

use super::resource::hex8;
use super::{Encoding, Resource};
use crate::hash::HashMap as FastMap;
use crate::params::ParamSet;

/// Distinct parameter sets whose views one type snapshot caches. Parameter sets are projected on
/// the keys the type's constraints use before the lookup, so this is the number of client groups
/// the configuration tells apart, not of clients; past it, views are built and not kept.
const MAX_CACHED_VIEWS: usize = 4096;

/// The variants of one name.
type Variants = Box<[Arc<Resource>]>;

/// All resources of one type at one moment: every variant of every name, and the type's version.
///
/// Clients read it through a [`View`]: for a parameter set, each name resolved to the variant
/// whose constraints match it. A type whose names all have one unconstrained variant has a single
/// view that every client shares.
#[derive(Debug)]
pub struct TypeSnapshot {
    type_url: Arc<str>,
    version: Arc<str>,
    /// Every variant of each name, in the order they were given.
    entries: BTreeMap<Arc<str>, Box<[Arc<Resource>]>>,
    /// The same names hashed, for lookups (a stream subscribing to 10,000 names interns each:
    /// a tree walk compares a dozen strings per name), with their place in `order`.
    index: FastMap<Arc<str>, (u32, Variants)>,
    /// The names in order: a list of names in the same order is interned by walking it
    /// ([`Interner`]).
    order: Vec<Arc<str>>,
    /// Alias → name, over all variants.
    aliases: FastMap<Arc<str>, Arc<str>>,
    /// Every key a constraint of this type mentions: only these parameters choose a variant.
    keys: BTreeSet<String>,
    /// The one view of a type without constraints.
    plain: Option<Arc<View>>,
    /// Views built so far, by parameter set projected on `keys`.
    views: Mutex<HashMap<ParamSet, Arc<View>>>,
}

impl TypeSnapshot {
    /// A type snapshot of resources without variants (one unconstrained resource per name).
    #[cfg(test)]
    pub(crate) fn new(
        type_url: Arc<str>,
        resources: BTreeMap<Arc<str>, Arc<Resource>>,
    ) -> TypeSnapshot {
        TypeSnapshot::with_variants(
            type_url,
            resources
                .into_iter()
                .map(|(name, r)| (name, vec![r].into_boxed_slice()))
                .collect(),
        )
    }

    /// This type with the variants `old` held of `names` that this one no longer has: what a
    /// client is served while the removal of those names waits (make-before-break).
    pub(crate) fn with_lingering(&self, old: &TypeSnapshot, names: &[Arc<str>]) -> TypeSnapshot {
        let mut entries = self.entries.clone();
        for name in names {
            if !entries.contains_key(name) {
                if let Some(variants) = old.entries.get(name) {
                    entries.insert(name.clone(), variants.clone());
                }
            }
        }
        TypeSnapshot::with_variants(self.type_url.clone(), entries)
    }

    pub(crate) fn with_variants(
        type_url: Arc<str>,
        entries: BTreeMap<Arc<str>, Box<[Arc<Resource>]>>,
    ) -> TypeSnapshot {
        // The type version is derived from the variants' names and versions: it changes when
        // any of them changes, is added or is removed, and it is the same after a restart on the
        // same content.
        let version = version_of(
            entries
                .iter()
                .flat_map(|(name, vs)| vs.iter().map(move |r| (name, r))),
        );
        let aliases = entries
            .values()
            .flat_map(|vs| vs.iter())
            .flat_map(|r| r.aliases().iter().map(|a| (a.clone(), r.name().clone())))
            .collect();
        let keys: BTreeSet<String> = entries
            .values()
            .flat_map(|vs| vs.iter())
            .filter_map(|r| r.constraints())
            .flat_map(|c| c.keys().iter().cloned())
            .collect();
        let constrained = entries
            .values()
            .any(|vs| vs.len() != 1 || vs[0].constraints().is_some());
        let index = entries
            .iter()
            .enumerate()
            .map(|(i, (name, vs))| (name.clone(), (i as u32, vs.clone())))
            .collect();
        let order = entries.keys().cloned().collect();
        let mut snapshot = TypeSnapshot {
            type_url,
            version: version.clone(),
            index,
            order,
            entries,
            aliases,
            keys,
            plain: None,
            views: Mutex::new(HashMap::new()),
        };
        if !constrained {
            let resources: BTreeMap<Arc<str>, Arc<Resource>> = snapshot
                .entries
                .iter()
                .map(|(name, vs)| (name.clone(), vs[0].clone()))
                .collect();
            snapshot.plain = Some(Arc::new(View::new(
                snapshot.type_url.clone(),
                Some(version),
                resources,
            )));
        }
        snapshot
    }

    pub fn type_url(&self) -> &Arc<str> {
        &self.type_url
    }

    /// The version of everything the type holds, all variants included.
    pub fn version(&self) -> &Arc<str> {
        &self.version
    }

    /// Whether any name of this type has constraints: clients then see different views.
    pub fn has_variants(&self) -> bool {
        self.plain.is_none()
    }

    /// The parameter keys the constraints of this type mention.
    pub fn keys(&self) -> &BTreeSet<String> {
        &self.keys
    }

    /// What a client with `params` sees: each name resolved to its matching variant (names
    /// without one are absent). Built once per distinct parameter set, then shared.
    pub fn view(&self, params: &ParamSet) -> Arc<View> {
        if let Some(plain) = &self.plain {
            return plain.clone();
        }
        let key: ParamSet = params
            .iter()
            .filter(|(k, _)| self.keys.contains(*k))
            .collect();
        let mut views = self.views.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(view) = views.get(&key) {
            return view.clone();
        }
        let view = Arc::new(self.resolve(&key));
        if views.len() < MAX_CACHED_VIEWS {
            views.insert(key, view.clone());
        }
        view
    }

    fn resolve(&self, params: &ParamSet) -> View {
        let resources = self
            .entries
            .iter()
            .filter_map(|(name, variants)| {
                variants
                    .iter()
                    .find(|r| r.constraints().is_none_or(|c| c.matches(params)))
                    .map(|r| (name.clone(), r.clone()))
            })
            .collect();
        View::new(self.type_url.clone(), None, resources)
    }

    /// The variants of a name (not an alias); empty if the name is unknown.
    pub fn variants(&self, name: &str) -> &[Arc<Resource>] {
        self.index.get(name).map(|(_, v)| &**v).unwrap_or(&[])
    }

    /// The resource of that name or alias when it has a single, unconstrained variant: what
    /// every client sees.
    pub fn get(&self, name: &str) -> Option<&Arc<Resource>> {
        let name = self.aliases.get(name).map(|n| &**n).unwrap_or(name);
        match self.variants(name) {
            [only] if only.constraints().is_none() => Some(only),
            _ => None,
        }
    }

    /// Number of names.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every variant of every name, names in order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Resource>> {
        self.entries.values().flat_map(|v| v.iter())
    }

    /// Names in order, with their variants.
    pub fn entries(&self) -> impl Iterator<Item = (&Arc<str>, &[Arc<Resource>])> {
        self.entries.iter().map(|(n, v)| (n, &**v))
    }

    /// The resource name as the store holds it, so streams share one allocation per name.
    pub fn intern(&self, name: &str) -> Option<Arc<str>> {
        self.interner().intern(name)
    }

    /// Interns a list of names, faster when they come in order (a client's list of every
    /// cluster's endpoints, in the order of the clusters).
    pub fn interner(&self) -> Interner<'_> {
        Interner {
            snapshot: Some(self),
            next: 0,
        }
    }
}

/// `name` as the store's allocation when `snapshot` holds that name or alias (streams and states
/// that name the same resources share it), else a new one.
pub(crate) fn intern(snapshot: Option<&TypeSnapshot>, name: &str) -> Arc<str> {
    snapshot
        .and_then(|t| t.intern(name))
        .unwrap_or_else(|| name.into())
}

/// Interns names one after the other: a name that follows the one before in the type's order is
/// found without hashing, any other by hash.
pub struct Interner<'a> {
    snapshot: Option<&'a TypeSnapshot>,
    /// Where the next name is expected in the type's order.
    next: usize,
}

impl<'a> Interner<'a> {
    /// An interner of `snapshot`'s names; of none when the store has nothing of the type.
    pub fn new(snapshot: Option<&'a TypeSnapshot>) -> Interner<'a> {
        Interner { snapshot, next: 0 }
    }

    /// The name (or alias) as the store holds it, if it does.
    pub fn intern(&mut self, name: &str) -> Option<Arc<str>> {
        let t = self.snapshot?;
        if let Some(expected) = t.order.get(self.next) {
            if **expected == *name {
                self.next += 1;
                return Some(expected.clone());
            }
        }
        match t.index.get_key_value(name) {
            Some((k, (at, _))) => {
                self.next = *at as usize + 1;
                Some(k.clone())
            }
            None => t.aliases.get_key_value(name).map(|(k, _)| k.clone()),
        }
    }
}

/// The version of a set of (name, resource) pairs; never empty, also for no resources.
fn version_of<'a>(resources: impl Iterator<Item = (&'a Arc<str>, &'a Arc<Resource>)>) -> Arc<str> {
    let mut hash = Sha256::new();
    for (name, resource) in resources {
        hash.update(name.as_bytes());
        hash.update([0]);
        hash.update(resource.version().as_bytes());
        hash.update([0]);
    }
    hex8(&hash.finalize()).into()
}

/// One type as a client with given parameters sees it: at most one variant per name.
#[derive(Debug)]
pub struct View {
    type_url: Arc<str>,
    version: Arc<str>,
    /// In name order.
    resources: Vec<Arc<Resource>>,
    /// Name → position in `resources`.
    index: FastMap<Arc<str>, u32>,
    aliases: FastMap<Arc<str>, Arc<str>>,
    /// Every resource as an encoded `DiscoveryResponse.resources` entry, one after the other: the
    /// body of a SotW wildcard response, built on first use and then shared by every stream that
    /// sends this view. Plain, and named by `resource_name` (TP2 clients).
    sotw_bodies: [OnceLock<Bytes>; 4],
    /// Whether a resource has a TTL: when none has, the TTL encodings are the plain ones.
    has_ttl: bool,
}

impl View {
    fn new(
        type_url: Arc<str>,
        version: Option<Arc<str>>,
        resources: BTreeMap<Arc<str>, Arc<Resource>>,
    ) -> View {
        let version = version.unwrap_or_else(|| version_of(resources.iter()));
        let aliases = resources
            .values()
            .flat_map(|r| r.aliases().iter().map(|a| (a.clone(), r.name().clone())))
            .collect();
        let has_ttl = resources.values().any(|r| r.ttl().is_some());
        let index = resources
            .keys()
            .enumerate()
            .map(|(i, name)| (name.clone(), i as u32))
            .collect();
        View {
            has_ttl,
            type_url,
            version,
            resources: resources.into_values().collect(),
            index,
            aliases,
            sotw_bodies: Default::default(),
        }
    }

    /// A view of nothing, for a type the store has no resources of.
    pub fn empty(type_url: Arc<str>) -> View {
        View::new(type_url, None, BTreeMap::new())
    }

    pub fn type_url(&self) -> &Arc<str> {
        &self.type_url
    }

    /// The version of what this view holds: what SotW sends as `version_info`. Never empty.
    pub fn version(&self) -> &Arc<str> {
        &self.version
    }

    /// The resource of that name, or else of that alias.
    pub fn get(&self, name: &str) -> Option<&Arc<Resource>> {
        let at = self
            .index
            .get(name)
            .or_else(|| self.aliases.get(name).and_then(|n| self.index.get(n)))?;
        self.resources.get(*at as usize)
    }

    pub fn len(&self) -> usize {
        self.resources.len()
    }

    pub fn is_empty(&self) -> bool {
        self.resources.is_empty()
    }

    /// Whether some resource of this view has an alias.
    pub fn has_aliases(&self) -> bool {
        !self.aliases.is_empty()
    }

    /// Whether a resource of this view has a TTL.
    pub fn has_ttl(&self) -> bool {
        self.has_ttl
    }

    /// Resources in name order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Resource>> {
        self.resources.iter()
    }

    /// All resources encoded as consecutive `DiscoveryResponse.resources` (field 2) entries, in
    /// an encoding (see [`Resource::sotw_entry`]).
    pub fn sotw_body(&self, mut encoding: Encoding) -> Bytes {
        encoding.ttl &= self.has_ttl;
        let index = usize::from(encoding.named) | usize::from(encoding.ttl) << 1;
        self.sotw_bodies[index]
            .get_or_init(|| {
                let len: usize = self
                    .resources
                    .iter()
                    .map(|r| field_len(r.sotw_entry(encoding).len()))
                    .sum();
                let mut buf = BytesMut::with_capacity(len);
                for resource in &self.resources {
                    put_length_delimited(&mut buf, 2, resource.sotw_entry(encoding));
                }
                buf.freeze()
            })
            .clone()
    }
}

/// Encoded length of a length-delimited field with a one-byte key.
pub(crate) fn field_len(len: usize) -> usize {
    1 + prost::encoding::encoded_len_varint(len as u64) + len
}

/// Writes a length-delimited field (`tag` < 16, so the key is one byte).
pub(crate) fn put_length_delimited(buf: &mut impl BufMut, tag: u32, bytes: &[u8]) {
    prost::encoding::encode_key(tag, prost::encoding::WireType::LengthDelimited, buf);
    prost::encoding::encode_varint(bytes.len() as u64, buf);
    buf.put_slice(bytes);
}

/// Everything the store holds at one moment.
#[derive(Debug, Default)]
pub struct Snapshot {
    generation: u64,
    types: HashMap<Arc<str>, Arc<TypeSnapshot>>,
}

impl Snapshot {
    pub(crate) fn new(generation: u64, types: HashMap<Arc<str>, Arc<TypeSnapshot>>) -> Snapshot {
        Snapshot { generation, types }
    }

    /// Counts the updates applied since the store was created; for logs.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn get(&self, type_url: &str) -> Option<&Arc<TypeSnapshot>> {
        self.types.get(type_url)
    }

    /// The resource of that type and name when it has a single, unconstrained variant.
    pub fn resource(&self, type_url: &str, name: &str) -> Option<&Arc<Resource>> {
        self.types.get(type_url).and_then(|t| t.get(name))
    }

    pub fn types(&self) -> impl Iterator<Item = &Arc<TypeSnapshot>> {
        self.types.values()
    }

    pub(crate) fn type_map(&self) -> &HashMap<Arc<str>, Arc<TypeSnapshot>> {
        &self.types
    }

    /// The type URL as the store holds it (shared allocation), if the store has that type.
    pub fn intern_type(&self, type_url: &str) -> Option<Arc<str>> {
        self.types.get_key_value(type_url).map(|(k, _)| k.clone())
    }
}
