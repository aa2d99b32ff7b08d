//! One type's names and their variants as the snapshots hold them: in chunks (ordered) and
//! shards (hashed) that successive snapshots share, so that a commit copies what it changes.

use std::collections::BTreeMap;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::resource::hex8;
use super::Resource;
use crate::hash::HashMap as FastMap;

/// The variants of one name, shared by the type's ordered list and its index.
pub(super) type Variants = Arc<[Arc<Resource>]>;

/// About how many names one chunk of a type's ordered list and one shard of its index hold: a
/// commit copies the chunks and shards of the names it changes (and the lists of chunks and
/// shards, one pointer per this many names), never the whole type.
pub(super) const CHUNK: usize = 64;

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
    pub(super) chunks: Vec<Arc<Vec<Entry>>>,
    /// The same names hashed (a stream subscribing to 10,000 names interns each: a tree walk
    /// compares a dozen strings per name), in `1 << shard_bits` shards by the high bits of the
    /// name's hash under `hasher`.
    pub(super) shards: Vec<Arc<FastMap<Arc<str>, Variants>>>,
    pub(super) hasher: foldhash::fast::RandomState,
    pub(super) shard_bits: u32,
    /// Alias → name, over all variants.
    pub(super) aliases: Arc<FastMap<Arc<str>, Arc<str>>>,
    pub(super) names: usize,
    pub(super) resources: usize,
    /// Resources with a TTL.
    pub(super) with_ttl: usize,
    /// Names with several variants or a constrained one.
    pub(super) constrained: usize,
    /// The sum of the digests of the resources: the type version is a function of it.
    pub(super) digest: u128,
}

/// The number of shard bits for `names` names: about [`CHUNK`] names per shard.
pub(super) fn shard_bits(names: usize) -> u32 {
    (names / CHUNK).max(1).next_power_of_two().trailing_zeros()
}

pub(super) fn is_constrained(variants: &[Arc<Resource>]) -> bool {
    variants.len() > 1 || variants.iter().any(|r| r.constraints().is_some())
}

impl Table {
    /// A table of `entries` (in name order, each with at least one variant).
    pub(super) fn build(
        entries: Vec<Entry>,
        hasher: Option<&foldhash::fast::RandomState>,
    ) -> Table {
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

    pub(super) fn variants(&self, name: &str) -> &[Arc<Resource>] {
        self.get(name).map(|(_, v)| &**v).unwrap_or(&[])
    }

    pub(super) fn entries(&self) -> Entries<'_> {
        Entries {
            chunks: self.chunks.iter(),
            chunk: [].iter(),
        }
    }

    /// Where `name` is or would be in the order: (chunk, place in it).
    pub(super) fn position(&self, name: &str) -> (usize, usize) {
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
    pub(super) fn with_changes(&self, changes: &BTreeMap<Arc<str>, Vec<Arc<Resource>>>) -> Table {
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
    pub(super) fn merged(&self, changes: &[(&Arc<str>, Option<Variants>)]) -> Vec<Entry> {
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

pub(super) fn shard_of(hasher: &foldhash::fast::RandomState, bits: u32, name: &str) -> usize {
    use std::hash::BuildHasher;
    if bits == 0 {
        0
    } else {
        (hasher.hash_one(name) >> (64 - bits)) as usize
    }
}

/// Alias → name over every variant, in name order (a later name's alias wins).
pub(super) fn aliases_of<'a>(
    entries: impl IntoIterator<Item = &'a Entry>,
) -> FastMap<Arc<str>, Arc<str>> {
    entries
        .into_iter()
        .flat_map(|e| e.variants.iter())
        .flat_map(|r| r.aliases().iter().map(|a| (a.clone(), r.name().clone())))
        .collect()
}

/// A table's entries in order.
pub(super) struct Entries<'a> {
    pub(super) chunks: std::slice::Iter<'a, Arc<Vec<Entry>>>,
    pub(super) chunk: std::slice::Iter<'a, Entry>,
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

/// The version of a set of resources, from the sum of their digests (each of a name and a
/// version, `Resource::digest`) and their number: the same resources give the same version
/// in any order and after any history. Never empty, also for no resources.
pub(super) fn version_of(digest: u128, count: usize) -> Arc<str> {
    let mut hash = Sha256::new();
    hash.update(digest.to_le_bytes());
    hash.update((count as u64).to_le_bytes());
    hex8(&hash.finalize()).into()
}
