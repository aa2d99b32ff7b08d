//! Immutable store states. An update builds the next state and swaps it in whole, so a reader
//! never waits for a writer and never sees half an update.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use bytes::{BufMut, Bytes, BytesMut};
use sha2::{Digest, Sha256};

use super::Resource;

/// All resources of one type at one moment, with the type's version.
#[derive(Debug)]
pub struct TypeSnapshot {
    type_url: Arc<str>,
    version: Arc<str>,
    resources: BTreeMap<Arc<str>, Arc<Resource>>,
    /// Alias → name, for resources that have aliases.
    aliases: HashMap<Arc<str>, Arc<str>>,
    /// Every resource as an encoded `DiscoveryResponse.resources` entry, one after the other: the
    /// body of a SotW wildcard response, built on first use and then shared by every stream that
    /// sends this type at this version.
    sotw_body: OnceLock<Bytes>,
}

impl TypeSnapshot {
    pub(crate) fn new(
        type_url: Arc<str>,
        resources: BTreeMap<Arc<str>, Arc<Resource>>,
    ) -> TypeSnapshot {
        // The type version is derived from the resources' names and versions: it changes when
        // any resource of the type changes, is added or is removed, and it is the same after a
        // restart on the same content.
        let mut hash = Sha256::new();
        for (name, resource) in &resources {
            hash.update(name.as_bytes());
            hash.update([0]);
            hash.update(resource.version().as_bytes());
            hash.update([0]);
        }
        let digest = hash.finalize();
        let version: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        let aliases = resources
            .values()
            .flat_map(|r| r.aliases().iter().map(|a| (a.clone(), r.name().clone())))
            .collect();
        TypeSnapshot {
            type_url,
            version: version.into(),
            resources,
            aliases,
            sotw_body: OnceLock::new(),
        }
    }

    pub fn type_url(&self) -> &Arc<str> {
        &self.type_url
    }

    pub fn version(&self) -> &Arc<str> {
        &self.version
    }

    /// The resource of that name, or else of that alias.
    pub fn get(&self, name: &str) -> Option<&Arc<Resource>> {
        self.resources
            .get(name)
            .or_else(|| self.aliases.get(name).and_then(|n| self.resources.get(n)))
    }

    /// The resource of that name only (not an alias).
    pub(crate) fn get_exact(&self, name: &str) -> Option<&Arc<Resource>> {
        self.resources.get(name)
    }

    pub fn len(&self) -> usize {
        self.resources.len()
    }

    pub fn is_empty(&self) -> bool {
        self.resources.is_empty()
    }

    /// Resources in name order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Resource>> {
        self.resources.values()
    }

    /// The resource name as the store holds it, so streams share one allocation per name.
    pub fn intern(&self, name: &str) -> Option<Arc<str>> {
        match self.resources.get_key_value(name) {
            Some((k, _)) => Some(k.clone()),
            None => self.aliases.get_key_value(name).map(|(k, _)| k.clone()),
        }
    }

    /// All resources encoded as consecutive `DiscoveryResponse.resources` (field 2) entries.
    pub fn sotw_body(&self) -> Bytes {
        self.sotw_body
            .get_or_init(|| {
                let len: usize = self
                    .resources
                    .values()
                    .map(|r| field_len(r.any_bytes().len()))
                    .sum();
                let mut buf = BytesMut::with_capacity(len);
                for resource in self.resources.values() {
                    put_length_delimited(&mut buf, 2, resource.any_bytes());
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
