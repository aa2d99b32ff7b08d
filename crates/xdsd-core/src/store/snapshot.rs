//! Immutable store states. An update builds the next state and swaps it in whole, so a reader
//! never waits for a writer and never sees half an update.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use bytes::BufMut;
use sha2::{Digest, Sha256};

use super::resource::hex8;
use super::view::View;
use super::{PendingTable, Resource, TypePending};
use crate::hash::HashMap as FastMap;
use crate::params::ParamSet;

/// Distinct parameter sets whose views one type snapshot caches. Parameter sets are projected on
/// the keys the type's constraints use before the lookup, so this is the number of client groups
/// the configuration tells apart, not of clients; past it, views are built and not kept.
const MAX_CACHED_VIEWS: usize = 4096;

/// The variants of one name, shared by the type's ordered list and its index.
type Variants = Arc<[Arc<Resource>]>;

/// About how many names one chunk of a type's ordered list and one shard of its index hold: a
/// commit copies the chunks and shards of the names it changes (and the lists of chunks and
/// shards, one pointer per this many names), never the whole type.
const CHUNK: usize = 64;

/// One name with its variants.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) name: Arc<str>,
    pub(super) variants: Variants,
}

/// The names of one type and what is derived from them, in parts that successive snapshots
/// share: a commit that changes k names of n copies O(k) chunks and shards and O(n / CHUNK)
/// pointers.
#[derive(Debug)]
pub(super) struct Table {
    /// The names in order, in chunks of about [`CHUNK`] (at most `2 * CHUNK`), none empty.
    chunks: Vec<Arc<Vec<Entry>>>,
    /// The same names hashed (a stream subscribing to 10,000 names interns each: a tree walk
    /// compares a dozen strings per name), in `1 << shard_bits` shards by the high bits of the
    /// name's hash under `hasher`.
    shards: Vec<Arc<FastMap<Arc<str>, Variants>>>,
    hasher: foldhash::fast::RandomState,
    shard_bits: u32,
    /// Alias → name, over all variants.
    pub(super) aliases: Arc<FastMap<Arc<str>, Arc<str>>>,
    pub(super) names: usize,
    resources: usize,
    /// Resources with a TTL.
    pub(super) with_ttl: usize,
    /// Names with several variants or a constrained one.
    constrained: usize,
    /// The sum of the digests of the resources: the type version is a function of it.
    digest: u128,
}

/// The number of shard bits for `names` names: about [`CHUNK`] names per shard.
fn shard_bits(names: usize) -> u32 {
    (names / CHUNK).max(1).next_power_of_two().trailing_zeros()
}

fn is_constrained(variants: &[Arc<Resource>]) -> bool {
    variants.len() > 1 || variants.iter().any(|r| r.constraints().is_some())
}

impl Table {
    /// A table of `entries` (in name order, each with at least one variant).
    fn build(entries: Vec<Entry>, hasher: Option<&foldhash::fast::RandomState>) -> Table {
        let hasher = hasher.cloned().unwrap_or_default();
        let shard_bits = shard_bits(entries.len());
        let mut shards: Vec<FastMap<Arc<str>, Variants>> = (0..1usize << shard_bits)
            .map(|_| FastMap::default())
            .collect();
        let (mut resources, mut with_ttl, mut constrained, mut digest) = (0, 0, 0, 0u128);
        for e in &entries {
            resources += e.variants.len();
            with_ttl += e.variants.iter().filter(|r| r.ttl().is_some()).count();
            constrained += usize::from(is_constrained(&e.variants));
            for r in e.variants.iter() {
                digest = digest.wrapping_add(r.digest());
            }
            let shard = shard_of(&hasher, shard_bits, &e.name);
            shards[shard].insert(e.name.clone(), e.variants.clone());
        }
        let names = entries.len();
        let aliases = Arc::new(aliases_of(&entries));
        let mut chunks = Vec::with_capacity(names.div_ceil(CHUNK));
        let mut entries = entries.into_iter().peekable();
        while entries.peek().is_some() {
            chunks.push(Arc::new(entries.by_ref().take(CHUNK).collect::<Vec<_>>()));
        }
        Table {
            chunks,
            shards: shards.into_iter().map(Arc::new).collect(),
            hasher,
            shard_bits,
            aliases,
            names,
            resources,
            with_ttl,
            constrained,
            digest,
        }
    }

    pub(super) fn get(&self, name: &str) -> Option<(&Arc<str>, &Variants)> {
        self.shards[shard_of(&self.hasher, self.shard_bits, name)].get_key_value(name)
    }

    fn variants(&self, name: &str) -> &[Arc<Resource>] {
        self.get(name).map(|(_, v)| &**v).unwrap_or(&[])
    }

    pub(super) fn entries(&self) -> Entries<'_> {
        Entries {
            chunks: self.chunks.iter(),
            chunk: [].iter(),
        }
    }

    /// Where `name` is or would be in the order: (chunk, place in it).
    fn position(&self, name: &str) -> (usize, usize) {
        let chunk = self
            .chunks
            .partition_point(|c| c.last().is_some_and(|e| *e.name < *name));
        let place = self
            .chunks
            .get(chunk)
            .map(|c| c.partition_point(|e| *e.name < *name))
            .unwrap_or(0);
        (chunk, place)
    }

    /// Names from `from` on, in order.
    pub(super) fn entries_from(&self, from: &str) -> impl Iterator<Item = &Entry> {
        let (chunk, place) = self.position(from);
        let first = self.chunks.get(chunk).map(|c| &c[place..]).unwrap_or(&[]);
        first
            .iter()
            .chain(self.chunks.iter().skip(chunk + 1).flat_map(|c| c.iter()))
    }

    /// This table with each name of `changes` given its variants (none: removed).
    fn with_changes(&self, changes: &BTreeMap<Arc<str>, Vec<Arc<Resource>>>) -> Table {
        // Each changed name's variants, shared by its chunk and its shard; `None`: removed.
        let changes: Vec<(&Arc<str>, Option<Variants>)> = changes
            .iter()
            .map(|(name, new)| (name, (!new.is_empty()).then(|| Variants::from(&new[..]))))
            .collect();
        let mut names = self.names;
        let (mut resources, mut with_ttl, mut constrained, mut digest) =
            (self.resources, self.with_ttl, self.constrained, self.digest);
        let mut aliases_changed = false;
        for (name, new) in &changes {
            let new: &[Arc<Resource>] = new.as_deref().unwrap_or(&[]);
            let old = self.variants(name);
            names = names + usize::from(!new.is_empty()) - usize::from(!old.is_empty());
            resources = resources + new.len() - old.len();
            let ttl = |vs: &[Arc<Resource>]| vs.iter().filter(|r| r.ttl().is_some()).count();
            with_ttl = with_ttl + ttl(new) - ttl(old);
            constrained =
                constrained + usize::from(is_constrained(new)) - usize::from(is_constrained(old));
            for r in old {
                digest = digest.wrapping_sub(r.digest());
            }
            for r in new {
                digest = digest.wrapping_add(r.digest());
            }
            aliases_changed |= old.iter().chain(new).any(|r| !r.aliases().is_empty());
        }
        if self.chunks.is_empty() || shard_bits(names).abs_diff(self.shard_bits) > 1 {
            // Grown or shrunk by more than half the shards' capacity: built again, evenly
            // (at most once every n / 2 names changed).
            return Table::build(self.merged(&changes), Some(&self.hasher));
        }
        // The chunks: those no change falls in are shared.
        let mut chunks = Vec::with_capacity(self.chunks.len() + changes.len().min(8));
        let mut pending = changes.iter().peekable();
        let last = self.chunks.len() - 1;
        for (i, chunk) in self.chunks.iter().enumerate() {
            let ends = chunk.last().map(|e| e.name.clone());
            let mut mine = Vec::new();
            while let Some((name, _)) = pending.peek() {
                if i == last
                    || ends
                        .as_ref()
                        .is_some_and(|end| name.as_ref() <= end.as_ref())
                {
                    mine.extend(pending.next());
                } else {
                    break;
                }
            }
            if mine.is_empty() {
                chunks.push(chunk.clone());
                continue;
            }
            let mut entries: Vec<Entry> = Vec::with_capacity(chunk.len() + mine.len());
            let mut old = chunk.iter().peekable();
            for (name, new) in mine {
                let name: &Arc<str> = name;
                while let Some(e) = old.next_if(|e| e.name < *name) {
                    entries.push(e.clone());
                }
                old.next_if(|e| e.name == *name);
                if let Some(variants) = new {
                    entries.push(Entry {
                        name: (*name).clone(),
                        variants: variants.clone(),
                    });
                }
            }
            entries.extend(old.cloned());
            if entries.len() > 2 * CHUNK {
                let mut rest = entries.into_iter().peekable();
                while rest.peek().is_some() {
                    chunks.push(Arc::new(rest.by_ref().take(CHUNK).collect()));
                }
            } else if !entries.is_empty() {
                chunks.push(Arc::new(entries));
            }
        }
        if chunks.len() > 2 * names.div_ceil(CHUNK) + 8 {
            // Many chunks emptied by removals: built again.
            return Table::build(self.merged(&changes), Some(&self.hasher));
        }
        // The shards: a changed name's shard is copied (once), the others shared.
        let mut shards = self.shards.clone();
        for (name, new) in &changes {
            let shard = Arc::make_mut(&mut shards[shard_of(&self.hasher, self.shard_bits, name)]);
            match new {
                Some(variants) => shard.insert((*name).clone(), variants.clone()),
                None => shard.remove(&***name),
            };
        }
        let mut table = Table {
            chunks,
            shards,
            hasher: self.hasher.clone(),
            shard_bits: self.shard_bits,
            aliases: self.aliases.clone(),
            names,
            resources,
            with_ttl,
            constrained,
            digest,
        };
        if aliases_changed {
            table.aliases = Arc::new(aliases_of(table.entries()));
        }
        table
    }

    /// Every entry of this table with `changes` applied, in order.
    fn merged(&self, changes: &[(&Arc<str>, Option<Variants>)]) -> Vec<Entry> {
        let mut out = Vec::with_capacity(self.names + changes.len());
        let mut old = self.entries().peekable();
        for (name, new) in changes {
            while let Some(e) = old.next_if(|e| *e.name < ***name) {
                out.push(e.clone());
            }
            old.next_if(|e| *e.name == ***name);
            if let Some(variants) = new {
                out.push(Entry {
                    name: (*name).clone(),
                    variants: variants.clone(),
                });
            }
        }
        out.extend(old.cloned());
        out
    }
}

fn shard_of(hasher: &foldhash::fast::RandomState, bits: u32, name: &str) -> usize {
    use std::hash::BuildHasher;
    if bits == 0 {
        0
    } else {
        (hasher.hash_one(name) >> (64 - bits)) as usize
    }
}

/// Alias → name over every variant, in name order (a later name's alias wins).
fn aliases_of<'a>(entries: impl IntoIterator<Item = &'a Entry>) -> FastMap<Arc<str>, Arc<str>> {
    entries
        .into_iter()
        .flat_map(|e| e.variants.iter())
        .flat_map(|r| r.aliases().iter().map(|a| (a.clone(), r.name().clone())))
        .collect()
}

/// A table's entries in order.
pub(super) struct Entries<'a> {
    chunks: std::slice::Iter<'a, Arc<Vec<Entry>>>,
    chunk: std::slice::Iter<'a, Entry>,
}

impl<'a> Iterator for Entries<'a> {
    type Item = &'a Entry;

    fn next(&mut self) -> Option<&'a Entry> {
        loop {
            if let Some(e) = self.chunk.next() {
                return Some(e);
            }
            self.chunk = self.chunks.next()?.iter();
        }
    }
}

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

/// The version of a set of resources, from the sum of their digests (each of a name and a
/// version, `Resource::digest`) and their number: the same resources give the same version
/// in any order and after any history. Never empty, also for no resources.
pub(super) fn version_of(digest: u128, count: usize) -> Arc<str> {
    let mut hash = Sha256::new();
    hash.update(digest.to_le_bytes());
    hash.update((count as u64).to_le_bytes());
    hex8(&hash.finalize()).into()
}

/// Encoded length of a length-delimited field with a one-byte key.
pub(crate) fn field_len(len: usize) -> usize {
    1 + prost::encoding::encoded_len_varint(len as u64) + len
}

/// Writes a length-delimited field.
pub(crate) fn put_length_delimited(buf: &mut impl BufMut, tag: u32, bytes: &[u8]) {
    // The key and the length gathered first and written at once: byte by byte, they cost as
    // much as copying the small resource after them (S5, a response of 70 endpoint sets).
    // A key takes 5 bytes at most, a length 10.
    const HEAD: usize = 15;
    let mut head = [0u8; HEAD];
    let mut rest = &mut head[..];
    prost::encoding::encode_key(tag, prost::encoding::WireType::LengthDelimited, &mut rest);
    prost::encoding::encode_varint(bytes.len() as u64, &mut rest);
    let at = HEAD - rest.len();
    buf.put_slice(&head[..at]);
    buf.put_slice(bytes);
}

/// Writes a string field (`tag` < 16), left out when empty (proto3).
pub(crate) fn string_field(tag: u32, value: &str, buf: &mut impl BufMut) {
    bytes_field(tag, value.as_bytes(), buf)
}

/// A string field given as its bytes (a nonce's digits: no UTF-8 check), as [`string_field`].
pub(crate) fn bytes_field(tag: u32, value: &[u8], buf: &mut impl BufMut) {
    if !value.is_empty() {
        put_length_delimited(buf, tag, value);
    }
}

/// Encoded length of a string field written by [`string_field`].
pub(crate) fn string_len(value: &str) -> usize {
    bytes_len(value.as_bytes())
}

/// Encoded length of a field written by [`bytes_field`].
pub(crate) fn bytes_len(value: &[u8]) -> usize {
    if value.is_empty() {
        0
    } else {
        field_len(value.len())
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
