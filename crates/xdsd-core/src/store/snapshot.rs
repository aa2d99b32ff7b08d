//! Immutable store states. An update builds the next state and swaps it in whole, so a reader
//! never waits for a writer and never sees half an update.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use super::table::{version_of, Entry, Table};
use super::view::View;
use super::{PendingTable, Resource, TypePending};
use crate::hash::HashMap as FastMap;
use crate::params::ParamSet;

/// Distinct parameter sets whose views one type snapshot caches. Parameter sets are projected on
/// the keys the type's constraints use before the lookup, so this is the number of client groups
/// the configuration tells apart, not of clients; past it, views are built and not kept.
const MAX_CACHED_VIEWS: usize = 4096;

/// All resources of one type at one moment: every variant of every name, and the type's version.
///
/// Clients read it through a [`View`]: for a parameter set, each name resolved to the variant
/// whose constraints match it. A type whose names all have one unconstrained variant has a single
/// view that every client shares.
///
/// A commit that changes k names of n costs O(k log n) and O(n / 64) pointer copies: the
/// names are held in chunks and shards that successive snapshots share, the version
/// is a sum of per-resource digests, and views are built on first use (the plain one reads the
/// table).
#[derive(Debug)]
pub struct TypeSnapshot {
    type_url: Arc<str>,
    version: Arc<str>,
    table: Arc<Table>,
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
            resources.into_iter().map(|(name, r)| (name, vec![r])),
        )
    }

    /// This type with the variants `old` held of `names` that this one no longer has: what a
    /// client is served while the removal of those names waits (make-before-break).
    pub(crate) fn with_lingering(&self, old: &TypeSnapshot, names: &[Arc<str>]) -> TypeSnapshot {
        let changes: BTreeMap<Arc<str>, Vec<Arc<Resource>>> = names
            .iter()
            .filter(|name| self.table.get(name).is_none())
            .filter_map(|name| {
                let (held, variants) = old.table.get(name)?;
                Some((held.clone(), variants.to_vec()))
            })
            .collect();
        self.with_changes(&changes)
    }

    /// A type snapshot of `entries` (names in order, or not: they are sorted; a name without
    /// variants is left out).
    pub(crate) fn with_variants<V: Into<Vec<Arc<Resource>>>>(
        type_url: Arc<str>,
        entries: impl IntoIterator<Item = (Arc<str>, V)>,
    ) -> TypeSnapshot {
        let mut entries: Vec<Entry> = entries
            .into_iter()
            .map(|(name, v)| (name, v.into()))
            .filter(|(_, v)| !v.is_empty())
            .map(|(name, v)| Entry {
                name,
                variants: v.into(),
            })
            .collect();
        if !entries.is_sorted_by(|a, b| a.name < b.name) {
            entries.sort_by(|a, b| a.name.cmp(&b.name));
            entries.dedup_by(|later, first| later.name == first.name);
        }
        let table = Table::build(entries, None);
        let keys = keys_of(&table);
        TypeSnapshot::of(type_url, Arc::new(table), keys)
    }

    /// This type with each name of `changes` given its variants (none: removed): the same
    /// snapshot as [`TypeSnapshot::with_variants`] of the result gives, at the cost of the
    /// changes.
    pub(crate) fn with_changes(
        &self,
        changes: &BTreeMap<Arc<str>, Vec<Arc<Resource>>>,
    ) -> TypeSnapshot {
        if changes.is_empty() {
            return TypeSnapshot::of(self.type_url.clone(), self.table.clone(), self.keys.clone());
        }
        let table = self.table.with_changes(changes);
        let constraints_changed = changes.iter().any(|(name, new)| {
            new.iter()
                .chain(self.table.variants(name))
                .any(|r| r.constraints().is_some())
        });
        let keys = if constraints_changed {
            keys_of(&table)
        } else {
            self.keys.clone()
        };
        TypeSnapshot::of(self.type_url.clone(), Arc::new(table), keys)
    }

    fn of(type_url: Arc<str>, table: Arc<Table>, keys: BTreeSet<String>) -> TypeSnapshot {
        // The type version is derived from the variants' names and versions: it changes when
        // any of them changes, is added or is removed, and it is the same after a restart on the
        // same content, whatever the history that led to it.
        let version = version_of(table.digest, table.resources);
        let plain = (table.constrained == 0).then(|| {
            Arc::new(View::plain(
                type_url.clone(),
                version.clone(),
                table.clone(),
            ))
        });
        TypeSnapshot {
            type_url,
            version,
            table,
            keys,
            plain,
            views: Mutex::new(HashMap::new()),
        }
    }

    /// The type URL.
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
        let resources = self.table.entries().filter_map(|e| {
            e.variants
                .iter()
                .find(|r| r.constraints().is_none_or(|c| c.matches(params)))
                .cloned()
        });
        View::resolved(self.type_url.clone(), resources.collect())
    }

    /// The variants of a name (not an alias); empty if the name is unknown.
    pub fn variants(&self, name: &str) -> &[Arc<Resource>] {
        self.table.variants(name)
    }

    /// The resource of that name or alias when it has a single, unconstrained variant: what
    /// every client sees.
    pub fn get(&self, name: &str) -> Option<&Arc<Resource>> {
        let name = self.table.aliases.get(name).map(|n| &**n).unwrap_or(name);
        match self.variants(name) {
            [only] if only.constraints().is_none() => Some(only),
            _ => None,
        }
    }

    /// Number of names.
    pub fn len(&self) -> usize {
        self.table.names
    }

    /// Whether it holds no resources.
    pub fn is_empty(&self) -> bool {
        self.table.names == 0
    }

    /// Number of resources (variants).
    pub fn resource_count(&self) -> usize {
        self.table.resources
    }

    /// Every variant of every name, names in order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Resource>> {
        self.table.entries().flat_map(|e| e.variants.iter())
    }

    /// Names in order, with their variants.
    pub fn entries(&self) -> impl Iterator<Item = (&Arc<str>, &[Arc<Resource>])> {
        self.table.entries().map(|e| (&e.name, &*e.variants))
    }

    /// Names from `from` on, in order, with their variants.
    pub(crate) fn entries_from<'a>(
        &'a self,
        from: &str,
    ) -> impl Iterator<Item = (&'a Arc<str>, &'a [Arc<Resource>])> {
        self.table
            .entries_from(from)
            .map(|e| (&e.name, &*e.variants))
    }

    /// The resource name as the store holds it, so streams share one allocation per name.
    pub fn intern(&self, name: &str) -> Option<Arc<str>> {
        self.table.get(name).map(|(k, _)| k.clone()).or_else(|| {
            self.table
                .aliases
                .get_key_value(name)
                .map(|(k, _)| k.clone())
        })
    }

    /// Interns a list of names, faster when they come in order (a client's list of every
    /// cluster's endpoints, in the order of the clusters).
    pub fn interner(&self) -> Interner<'_> {
        Interner::new(Some(self))
    }
}

/// The constraint keys of a table's variants.
fn keys_of(table: &Table) -> BTreeSet<String> {
    if table.constrained == 0 {
        return BTreeSet::new();
    }
    table
        .entries()
        .flat_map(|e| e.variants.iter())
        .filter_map(|r| r.constraints())
        .flat_map(|c| c.keys().iter().cloned())
        .collect()
}

/// `name` as the store's allocation when `snapshot` holds that name or alias (streams and states
/// that name the same resources share it), else a new one.
pub(crate) fn intern(snapshot: Option<&TypeSnapshot>, name: &str) -> Arc<str> {
    snapshot
        .and_then(|t| t.intern(name))
        .unwrap_or_else(|| name.into())
}

/// [`intern`] and [`TypeSnapshot::variants`] of `name` in one look-up: the type's own copy of
/// the name (or of the alias; `name` copied if it is neither) and its variants (none for an
/// alias or an unknown name).
pub(crate) fn intern_with_variants<'a>(
    snapshot: Option<&'a TypeSnapshot>,
    name: &str,
) -> (Arc<str>, &'a [Arc<Resource>]) {
    match snapshot.and_then(|t| t.table.get(name)) {
        Some((key, variants)) => (key.clone(), &**variants),
        None => (intern(snapshot, name), &[]),
    }
}

/// Interns names one after the other: a name that follows the one before in the type's order is
/// found without hashing, any other by hash.
pub struct Interner<'a> {
    snapshot: Option<&'a TypeSnapshot>,
    /// Where the next name is expected in the type's order: (chunk, place in it).
    next: (usize, usize),
    /// Names found by hash to skip before the place of one is looked up again (in O(log n)
    /// string comparisons): doubled each time a lookup is not followed by the next name, so a
    /// list in another order costs one hashed lookup per name, and one in order a walk.
    skip: u32,
    penalty: u32,
    /// Whether the last name was found by looking its place up.
    placed: bool,
}

impl<'a> Interner<'a> {
    /// An interner of `snapshot`'s names; of none when the store has nothing of the type.
    pub fn new(snapshot: Option<&'a TypeSnapshot>) -> Interner<'a> {
        Interner {
            snapshot,
            next: (0, 0),
            skip: 0,
            penalty: 0,
            placed: false,
        }
    }

    /// The name (or alias) as the store holds it, if it does.
    pub fn intern(&mut self, name: &str) -> Option<Arc<str>> {
        let t = &self.snapshot?.table;
        let (chunk, place) = self.next;
        if let Some(expected) = t.chunks.get(chunk).and_then(|c| c.get(place)) {
            if *expected.name == *name {
                self.next = if place + 1 < t.chunks[chunk].len() {
                    (chunk, place + 1)
                } else {
                    (chunk + 1, 0)
                };
                if self.placed {
                    self.penalty = 0;
                    self.placed = false;
                }
                return Some(expected.name.clone());
            }
        }
        if self.placed {
            self.penalty = (self.penalty * 2 + 1).min(1 << 12);
            self.skip = self.penalty;
            self.placed = false;
        }
        match t.get(name) {
            Some((k, _)) => {
                if self.skip == 0 {
                    let (chunk, place) = t.position(name);
                    self.next = if place + 1 < t.chunks.get(chunk).map_or(0, |c| c.len()) {
                        (chunk, place + 1)
                    } else {
                        (chunk + 1, 0)
                    };
                    self.placed = true;
                } else {
                    self.skip -= 1;
                }
                Some(k.clone())
            }
            None => t.aliases.get_key_value(name).map(|(k, _)| k.clone()),
        }
    }
}

/// A snapshot's types by type URL. foldhash: every response a stream builds looks its type up
/// here (a few times: make-before-break reads clusters and endpoints), and SipHash of a type URL
/// was 5 % of the instructions of a delta fan-out (BENCHMARKS.md, stop 37).
pub(crate) type TypeTable = FastMap<Arc<str>, Arc<TypeSnapshot>>;

/// Up to this many types, [`Snapshot::get`] looks for the caller's own `Arc` of a type URL by
/// its address, in a list, before it hashes the text.
const BY_ADDRESS: usize = 16;

/// Everything the store holds at one moment.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    generation: u64,
    types: TypeTable,
    /// The types again, as a list searched by the address of a type URL ([`Snapshot::get`]):
    /// for a store of up to [`BY_ADDRESS`] types, else empty.
    by_address: Vec<(Arc<str>, Arc<TypeSnapshot>)>,
    /// The names pending at that moment (see `store::pending`), by type URL.
    pub(super) pending: Option<Arc<PendingTable>>,
}

impl Snapshot {
    pub(crate) fn new(generation: u64, types: TypeTable) -> Snapshot {
        let by_address = if types.len() <= BY_ADDRESS {
            types.iter().map(|(k, t)| (k.clone(), t.clone())).collect()
        } else {
            Vec::new()
        };
        Snapshot {
            generation,
            types,
            by_address,
            pending: None,
        }
    }

    /// The names of `type_url` pending at that moment (asked for elsewhere by the source, not
    /// answered yet), if any.
    pub(crate) fn pending(&self, type_url: &str) -> Option<&Arc<TypePending>> {
        self.pending.as_ref()?.get(type_url)
    }

    /// Counts the updates applied since the store was created; for logs.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The resources of `type_url`, if the store holds any. A session asks with the store's own
    /// `Arc` of the type URL ([`Snapshot::intern_type`]): found in a short list by its address
    /// first, not hashed (some 50 bytes hashed and compared, 150 instructions, about three
    /// times per delta response and ACK).
    pub fn get(&self, type_url: &str) -> Option<&Arc<TypeSnapshot>> {
        let same = |(k, _): &&(Arc<str>, Arc<TypeSnapshot>)| std::ptr::eq(&**k, type_url);
        if let Some((_, t)) = self.by_address.iter().find(same) {
            return Some(t);
        }
        self.types.get(type_url)
    }

    /// The resource of that type and name when it has a single, unconstrained variant.
    pub fn resource(&self, type_url: &str, name: &str) -> Option<&Arc<Resource>> {
        self.types.get(type_url).and_then(|t| t.get(name))
    }

    /// Every type the store holds.
    pub fn types(&self) -> impl Iterator<Item = &Arc<TypeSnapshot>> {
        self.types.values()
    }

    pub(crate) fn type_map(&self) -> &TypeTable {
        &self.types
    }

    /// This state with no name pending: what the store holds, as a preview shows it.
    pub(crate) fn without_pending(&self) -> Snapshot {
        let mut snapshot = self.clone();
        snapshot.pending = None;
        snapshot
    }

    /// The type URL as the store holds it (shared allocation), if the store has that type.
    pub fn intern_type(&self, type_url: &str) -> Option<Arc<str>> {
        self.types.get_key_value(type_url).map(|(k, _)| k.clone())
    }

    /// The type URL as the store holds it (shared allocation), or a new one for a type the
    /// store does not have: the key of a change or of pending names of that type.
    pub(crate) fn type_key(&self, type_url: &str) -> Arc<str> {
        self.intern_type(type_url)
            .unwrap_or_else(|| Arc::from(type_url))
    }
}
