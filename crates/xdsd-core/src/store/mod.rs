//! The resource store: resources by type URL and name, each encoded once; immutable snapshots
//! swapped atomically; change notifications indexed by name.

mod resource;
mod snapshot;
mod vhds;
mod warming;
mod watch;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;

pub use resource::Resource;
pub(crate) use snapshot::{field_len, put_length_delimited};
pub use snapshot::{Snapshot, TypeSnapshot};
use watch::{lock_index, WatchIndex};

use crate::types::{ROUTE_CONFIGURATION, VIRTUAL_HOST};
pub use watch::{Changes, Watcher};

/// One resource handed to the store: its type URL, its name and its encoded message.
#[derive(Debug, Clone)]
pub struct ResourceInput {
    pub type_url: String,
    pub name: String,
    pub value: Bytes,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StoreError {
    #[error("two resources of type {type_url} are named {name:?}")]
    Duplicate { type_url: String, name: String },
    #[error("a resource of type {type_url} has an empty name")]
    EmptyName { type_url: String },
    #[error("{type_url:?} is not a type URL (expected type.googleapis.com/<package>.<Message>)")]
    BadTypeUrl { type_url: String },
}

/// What an update did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateSummary {
    pub generation: u64,
    /// Resources added, changed or removed.
    pub changed: usize,
    /// Resources the store holds after the update.
    pub total: usize,
}

/// A change to one resource, for [`Store::apply`].
#[derive(Debug, Clone)]
pub enum Change {
    Set(ResourceInput),
    Remove { type_url: String, name: String },
}

/// The store handle: cheap to clone, shared by the sources that write and the streams that read.
#[derive(Clone, Default)]
pub struct Store {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    current: RwLock<Arc<Snapshot>>,
    index: Arc<Mutex<WatchIndex>>,
    next_watcher: AtomicU64,
    /// Serialises writers, so that each builds on the state the previous one left.
    writer: Mutex<()>,
}

type TypeMap = BTreeMap<Arc<str>, Arc<Resource>>;
/// A resource with its type URL.
type Typed = (Arc<str>, Arc<Resource>);

impl Store {
    pub fn new() -> Store {
        Store::default()
    }

    /// The current state. Holding it never blocks a writer.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.inner
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A registration for one stream's change notifications.
    pub fn watcher(&self) -> Watcher {
        let id = self.inner.next_watcher.fetch_add(1, Ordering::Relaxed);
        Watcher::new(id, self.inner.index.clone())
    }

    /// Replaces the whole content of the store with `resources`, atomically. Types absent from
    /// `resources` are emptied. Rejected whole (nothing changes) on any invalid input.
    pub fn replace_all(
        &self,
        resources: impl IntoIterator<Item = ResourceInput>,
    ) -> Result<UpdateSummary, StoreError> {
        let _writer = self.inner.writer.lock().unwrap_or_else(|e| e.into_inner());
        let current = self.snapshot();
        let mut next: HashMap<Arc<str>, TypeMap> = HashMap::new();
        let mut add = |type_url: &Arc<str>, resource: Arc<Resource>| {
            let name = resource.name().clone();
            match next
                .entry(type_url.clone())
                .or_default()
                .insert(name.clone(), resource)
            {
                Some(_) => Err(StoreError::Duplicate {
                    type_url: type_url.to_string(),
                    name: name.to_string(),
                }),
                None => Ok(()),
            }
        };
        let hosts_type: Arc<str> = intern_type(&current, VIRTUAL_HOST)?;
        for input in resources {
            let type_url = intern_type(&current, &input.type_url)?;
            for (type_url, resource) in build_all(&current, &type_url, &hosts_type, input)? {
                add(&type_url, resource)?;
            }
        }
        for type_url in current.type_map().keys() {
            next.entry(type_url.clone()).or_default();
        }
        Ok(self.commit(&current, next))
    }

    /// Applies individual changes atomically: the embedding API for programs that own their
    /// resources. Removing a resource that does not exist is not an error.
    pub fn apply(
        &self,
        changes: impl IntoIterator<Item = Change>,
    ) -> Result<UpdateSummary, StoreError> {
        let _writer = self.inner.writer.lock().unwrap_or_else(|e| e.into_inner());
        let current = self.snapshot();
        let mut next: HashMap<Arc<str>, TypeMap> = HashMap::new();
        let hosts_type: Arc<str> = intern_type(&current, VIRTUAL_HOST)?;
        // A type's map, started from the current state the first time the type is touched.
        fn map_of<'a>(
            next: &'a mut HashMap<Arc<str>, TypeMap>,
            current: &Snapshot,
            type_url: &Arc<str>,
        ) -> &'a mut TypeMap {
            next.entry(type_url.clone()).or_insert_with(|| {
                current
                    .get(type_url)
                    .map(|t| t.iter().map(|r| (r.name().clone(), r.clone())).collect())
                    .unwrap_or_default()
            })
        }
        for change in changes {
            let (type_url, name) = match &change {
                Change::Set(input) => (intern_type(&current, &input.type_url)?, input.name.clone()),
                Change::Remove { type_url, name } => {
                    (intern_type(&current, type_url)?, name.clone())
                }
            };
            if *type_url == *ROUTE_CONFIGURATION {
                // The virtual hosts of a VHDS route configuration come and go with it.
                let prefix = vhds::host_prefix(&name);
                map_of(&mut next, &current, &hosts_type)
                    .retain(|host, _| !host.starts_with(&prefix));
            }
            match change {
                Change::Set(input) => {
                    for (type_url, resource) in build_all(&current, &type_url, &hosts_type, input)?
                    {
                        map_of(&mut next, &current, &type_url)
                            .insert(resource.name().clone(), resource);
                    }
                }
                Change::Remove { .. } => {
                    map_of(&mut next, &current, &type_url).remove(name.as_str());
                }
            }
        }
        Ok(self.commit(&current, next))
    }

    /// Builds the next snapshot from `current` with the types in `next` replaced, swaps it in and
    /// notifies the streams that watch a changed name.
    fn commit(&self, current: &Snapshot, next: HashMap<Arc<str>, TypeMap>) -> UpdateSummary {
        let mut types = current.type_map().clone();
        let mut changed: Vec<(Arc<str>, Vec<Arc<str>>)> = Vec::new();
        for (type_url, map) in next {
            let old = current.get(&type_url);
            // Changed resources are known by their names and aliases, old and new: a stream may
            // watch any of them.
            let mut names: Vec<Arc<str>> = Vec::new();
            let mut mark = |r: &Resource| {
                names.push(r.name().clone());
                names.extend(r.aliases().iter().cloned());
            };
            for (name, r) in &map {
                let before = old.and_then(|o| o.get_exact(name));
                if before.map(|o| o.version()) != Some(r.version()) {
                    mark(r);
                    if let Some(before) = before {
                        mark(before);
                    }
                }
            }
            for r in old.into_iter().flat_map(|o| o.iter()) {
                if !map.contains_key(r.name()) {
                    mark(r);
                }
            }
            names.sort();
            names.dedup();
            if names.is_empty() {
                continue;
            }
            if map.is_empty() {
                types.remove(&type_url);
            } else {
                types.insert(
                    type_url.clone(),
                    Arc::new(TypeSnapshot::new(type_url.clone(), map)),
                );
            }
            changed.push((type_url, names));
        }
        let total = types.values().map(|t| t.len()).sum();
        let count = changed.iter().map(|(_, n)| n.len()).sum();
        let generation = current.generation() + u64::from(count > 0);
        if count > 0 {
            let snapshot = Arc::new(Snapshot::new(generation, types));
            *self
                .inner
                .current
                .write()
                .unwrap_or_else(|e| e.into_inner()) = snapshot;
            // Notify after the swap: a stream woken by this sees the new state.
            lock_index(&self.inner.index).notify(&changed);
        }
        UpdateSummary {
            generation,
            changed: count,
            total,
        }
    }
}

fn intern_type(current: &Snapshot, type_url: &str) -> Result<Arc<str>, StoreError> {
    if !crate::types::is_well_formed(type_url) {
        return Err(StoreError::BadTypeUrl {
            type_url: type_url.to_owned(),
        });
    }
    Ok(current
        .intern_type(type_url)
        .unwrap_or_else(|| type_url.into()))
}

/// Encodes a resource, reusing the current one (and its bytes) when the content is unchanged.
fn build(
    current: &Snapshot,
    type_url: &Arc<str>,
    name: String,
    value: Bytes,
) -> Result<Arc<Resource>, StoreError> {
    build_with_aliases(current, type_url, name, Vec::new(), value)
}

fn build_with_aliases(
    current: &Snapshot,
    type_url: &Arc<str>,
    name: String,
    aliases: Vec<String>,
    value: Bytes,
) -> Result<Arc<Resource>, StoreError> {
    if name.is_empty() {
        return Err(StoreError::EmptyName {
            type_url: type_url.to_string(),
        });
    }
    let aliases: Vec<Arc<str>> = aliases.into_iter().map(Arc::from).collect();
    let existing = current.get(type_url).and_then(|t| t.get_exact(&name));
    // Unchanged content keeps its resource, and its bytes: nothing is encoded again.
    if let Some(old) = existing {
        if **old.version() == *Resource::version_of(type_url, &aliases, &value) {
            return Ok(old.clone());
        }
    }
    let name = existing
        .map(|r| r.name().clone())
        .unwrap_or_else(|| name.into());
    Ok(Arc::new(Resource::with_aliases(
        type_url, name, aliases, value,
    )))
}

/// The resources one input becomes: itself, and for a VHDS route configuration its virtual
/// hosts too (the route configuration then without them).
fn build_all(
    current: &Snapshot,
    type_url: &Arc<str>,
    hosts_type: &Arc<str>,
    input: ResourceInput,
) -> Result<Vec<Typed>, StoreError> {
    if **type_url == *ROUTE_CONFIGURATION {
        if let Some((route, hosts)) = vhds::split(&input.value) {
            let mut out = vec![(
                type_url.clone(),
                build(current, type_url, input.name, route)?,
            )];
            for host in hosts {
                let resource =
                    build_with_aliases(current, hosts_type, host.name, host.aliases, host.value)?;
                out.push((hosts_type.clone(), resource));
            }
            return Ok(out);
        }
    }
    Ok(vec![(
        type_url.clone(),
        build(current, type_url, input.name, input.value)?,
    )])
}

#[cfg(test)]
mod tests;
