//! The resource store: resources by type URL and name, each encoded once; immutable snapshots
//! swapped atomically; change notifications indexed by name.

mod error;
mod pending;
mod refs;
mod resource;
mod revision;
mod snapshot;
mod table;
mod update;
mod vhds;
mod view;
mod warming;
mod watch;
mod wire;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;

pub use error::{StoreError, VariantRule};
pub use pending::{PendingError, PendingName, PendingNames, DEFAULT_MAX_PENDING, WHOLE_TYPE};
pub(crate) use pending::{PendingTable, TypePending};
pub use refs::{
    nearest, references, Dangling, Reference, ReferenceMode, ReferencePolicy, MAX_LISTED,
};
pub use resource::{resource_name, Encoding, Resource, RESOURCE_WRAPPER};
pub(crate) use snapshot::{intern, intern_with_variants};
pub use snapshot::{Interner, Snapshot, TypeSnapshot};
pub use view::View;
use watch::{lock_index, merge_names, ChangedNames, TypeChange, Wake, WatchIndex};
pub use wire::read_string_field;
pub(crate) use wire::{
    bytes_field, bytes_len, field_len, put_length_delimited, string_field, string_len,
};

use crate::params::{self, Constraints, VariantError};
use crate::types::{ROUTE_CONFIGURATION, VIRTUAL_HOST};
use crate::xdstp;
pub use update::{Change, ChangeKind, NameChange, ResourceInput, UpdateSummary};
pub use watch::{Changes, Watcher};

/// The store handle: cheap to clone, shared by the sources that write and the streams that read.
#[derive(Clone, Default)]
pub struct Store {
    inner: Arc<Inner>,
}

/// A store handle that does not keep the store alive ([`Store::downgrade`]): a registry of
/// stores made on the fly keeps these, and finds a store again while anything still reads it.
#[derive(Clone, Default)]
pub struct WeakStore {
    inner: std::sync::Weak<Inner>,
}

impl WeakStore {
    /// The store, while a [`Store`] handle of it is held anywhere.
    pub fn upgrade(&self) -> Option<Store> {
        self.inner.upgrade().map(|inner| Store { inner })
    }
}

#[derive(Default)]
struct Inner {
    current: RwLock<Arc<Snapshot>>,
    index: Arc<Mutex<WatchIndex>>,
    next_watcher: AtomicU64,
    /// Serialises writers, so that each builds on the state the previous one left.
    writer: Mutex<()>,
    /// How references between resources are checked at commit.
    policy: ReferencePolicy,
    /// The source revision of the state served (see `revision.rs`).
    source_revision: Mutex<Option<i64>>,
    /// The names pending (`pending`): a commit keeps them as they are.
    pending: Mutex<pending::PendingState>,
}

/// The variants of each name of one type, while an update is built (none: the name is removed).
type TypeMap = BTreeMap<Arc<str>, Vec<Arc<Resource>>>;
/// A resource with its type URL.
type Typed = (Arc<str>, Arc<Resource>);

/// One type of the next state while an update is built: the whole type (`full`), or the names
/// changed so far over the current state's type, so that an update costs what it changes.
struct TypeEdit {
    base: Option<Arc<TypeSnapshot>>,
    full: bool,
    map: TypeMap,
}

impl TypeEdit {
    /// A type built whole: names absent from `map` are gone.
    fn full() -> TypeEdit {
        TypeEdit {
            base: None,
            full: true,
            map: TypeMap::new(),
        }
    }

    /// The variants of a name in the next state.
    fn get(&self, name: &str) -> &[Arc<Resource>] {
        match self.map.get(name) {
            Some(variants) => variants,
            None if self.full => &[],
            None => self.base.as_ref().map(|b| b.variants(name)).unwrap_or(&[]),
        }
    }

    /// The variants of a name, to change.
    fn variants_mut(&mut self, name: &Arc<str>) -> &mut Vec<Arc<Resource>> {
        let (base, full) = (&self.base, self.full);
        self.map.entry(name.clone()).or_insert_with(|| match base {
            Some(b) if !full => b.variants(name).to_vec(),
            _ => Vec::new(),
        })
    }

    /// The names of the next state that start with `prefix`, in order.
    fn names_with_prefix(&self, prefix: &str) -> Vec<Arc<str>> {
        let mut names: Vec<Arc<str>> = self
            .map
            .range::<str, _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(|(name, _)| name.starts_with(prefix))
            .map(|(name, _)| name.clone())
            .collect();
        if let (Some(base), false) = (&self.base, self.full) {
            names.extend(
                base.entries_from(prefix)
                    .take_while(|(name, _)| name.starts_with(prefix))
                    .map(|(name, _)| name.clone()),
            );
            names.sort();
            names.dedup();
        }
        names.retain(|name| !self.get(name).is_empty());
        names
    }
}

/// A type's edit in the next state, started over the current state the first time the type is
/// touched.
fn map_of<'a>(
    next: &'a mut HashMap<Arc<str>, TypeEdit>,
    current: &Snapshot,
    type_url: &Arc<str>,
) -> &'a mut TypeEdit {
    next.entry(type_url.clone()).or_insert_with(|| TypeEdit {
        base: current.get(type_url).cloned(),
        full: false,
        map: TypeMap::new(),
    })
}

/// How [`put_built`] edits a type.
#[derive(Clone, Copy)]
enum Edit {
    /// The type is built whole from what is put (`replace_all`); a variant put twice is an error.
    Full,
    /// The type is the current one with what is put; a variant put twice, or kept by the store,
    /// is an error.
    Add,
    /// The type is the current one with what is put; a variant put replaces the one the store has.
    Replace,
}

/// Puts what `input` (of `type_url`) builds — the resource, and a VHDS route configuration's
/// virtual hosts — into the edits of their types.
fn put_built(
    next: &mut HashMap<Arc<str>, TypeEdit>,
    current: &Snapshot,
    type_url: &Arc<str>,
    hosts_type: &Arc<str>,
    input: ResourceInput,
    edit: Edit,
) -> Result<(), StoreError> {
    for (type_url, resource) in build_all(current, type_url, hosts_type, input)? {
        let type_edit = match edit {
            Edit::Full => next.entry(type_url.clone()).or_insert_with(TypeEdit::full),
            Edit::Add | Edit::Replace => map_of(next, current, &type_url),
        };
        put(
            type_edit,
            &type_url,
            resource,
            matches!(edit, Edit::Replace),
        )?;
    }
    Ok(())
}

/// Puts what each of `inputs` builds into the edits of its type ([`put_built`]).
fn put_inputs(
    next: &mut HashMap<Arc<str>, TypeEdit>,
    current: &Snapshot,
    hosts_type: &Arc<str>,
    inputs: impl IntoIterator<Item = ResourceInput>,
    edit: Edit,
) -> Result<(), StoreError> {
    for input in inputs {
        let type_url = intern_type(current, &input.type_url)?;
        put_built(next, current, &type_url, hosts_type, input, edit)?;
    }
    Ok(())
}

/// Takes out of the virtual hosts the ones the route configuration `name` made (VHDS): all of
/// them, or (`variant`) those of one variant's constraints.
fn take_out_hosts(
    next: &mut HashMap<Arc<str>, TypeEdit>,
    current: &Snapshot,
    hosts_type: &Arc<str>,
    name: &str,
    variant: Option<Option<&Constraints>>,
) {
    let taken_out = |host: &Resource| {
        host.parent().is_some_and(|p| **p == *name)
            && variant.is_none_or(|c| same_constraints(host, c))
    };
    let hosts = map_of(next, current, hosts_type);
    for host in hosts.names_with_prefix(&vhds::host_prefix(name)) {
        if hosts.get(&host).iter().any(|v| taken_out(v)) {
            hosts.variants_mut(&host).retain(|v| !taken_out(v));
        }
    }
}

/// Whether two variants are for the same constraints (both unconstrained included).
fn same_constraints(a: &Resource, b: Option<&Constraints>) -> bool {
    a.constraints().map(|c| &**c) == b
}

/// Adds `resource` to a name's variants; the one with the same constraints is replaced when
/// `replace`, else it is a duplicate.
fn put(
    edit: &mut TypeEdit,
    type_url: &Arc<str>,
    resource: Arc<Resource>,
    replace: bool,
) -> Result<(), StoreError> {
    let variants = edit.variants_mut(resource.name());
    let constraints = resource.constraints().map(|c| &**c);
    match variants
        .iter_mut()
        .find(|v| same_constraints(v, constraints))
    {
        Some(slot) if replace => *slot = resource,
        Some(slot) => {
            return Err(StoreError::Duplicate {
                type_url: type_url.to_string(),
                name: resource.name().to_string(),
                first: slot.origin().map(|o| o.to_string()),
                second: resource.origin().map(|o| o.to_string()),
            })
        }
        None => variants.push(resource),
    }
    Ok(())
}

impl Store {
    /// An empty store that checks references in [`ReferenceMode::Strict`], with no external
    /// names.
    pub fn new() -> Store {
        Store::default()
    }

    /// An empty store that checks references between resources by `policy`.
    pub fn with_reference_policy(policy: ReferencePolicy) -> Store {
        Store {
            inner: Arc::new(Inner {
                policy,
                ..Inner::default()
            }),
        }
    }

    /// How the store checks references between resources (see [`Store::with_reference_policy`]).
    pub fn reference_policy(&self) -> &ReferencePolicy {
        &self.inner.policy
    }

    /// A handle that does not keep the store alive (see [`WeakStore`]).
    pub fn downgrade(&self) -> WeakStore {
        WeakStore {
            inner: Arc::downgrade(&self.inner),
        }
    }

    /// Whether `other` is this store (a clone of it), not another with the same content.
    pub fn same_as(&self, other: &Store) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
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
        self.watcher_in(0)
    }

    /// A watcher in `group` (a connection): a change wakes the watchers of one group one after
    /// another, in the order they were made, and the groups in turn.
    pub(crate) fn watcher_in(&self, group: u64) -> Watcher {
        let id = self.inner.next_watcher.fetch_add(1, Ordering::Relaxed);
        Watcher::new(id, group, self.inner.index.clone())
    }

    /// Replaces the whole content of the store with `resources`, atomically. Types absent from
    /// `resources` are emptied. Rejected whole (nothing changes) on any invalid input, the
    /// variant rules of xRFC TP2 included.
    pub fn replace_all(
        &self,
        resources: impl IntoIterator<Item = ResourceInput>,
    ) -> Result<UpdateSummary, StoreError> {
        let _writer = self.inner.writer.lock().unwrap_or_else(|e| e.into_inner());
        let current = self.snapshot();
        let mut next: HashMap<Arc<str>, TypeEdit> = HashMap::new();
        let hosts_type: Arc<str> = intern_type(&current, VIRTUAL_HOST)?;
        put_inputs(&mut next, &current, &hosts_type, resources, Edit::Full)?;
        for type_url in current.type_map().keys() {
            next.entry(type_url.clone()).or_insert_with(TypeEdit::full);
        }
        self.commit(&current, next, false)
    }

    /// Makes the store hold exactly what `other` (another store's snapshot) holds, atomically:
    /// its resources are shared, not encoded again, and the versions are the same (they are
    /// content hashes), so a client moved from one store's state to the other's is resent only
    /// what differs. What a rollout does to its two states (promote, roll back).
    pub fn replace_with(&self, other: &Snapshot) -> Result<UpdateSummary, StoreError> {
        let _writer = self.inner.writer.lock().unwrap_or_else(|e| e.into_inner());
        let current = self.snapshot();
        let mut next: HashMap<Arc<str>, TypeEdit> = HashMap::new();
        for t in other.types() {
            let mut edit = TypeEdit::full();
            edit.map = t
                .entries()
                .map(|(name, variants)| (name.clone(), variants.to_vec()))
                .collect();
            next.insert(t.type_url().clone(), edit);
        }
        for type_url in current.type_map().keys() {
            next.entry(type_url.clone()).or_insert_with(TypeEdit::full);
        }
        self.commit(&current, next, false)
    }

    /// Replaces the resources of some names, atomically: what [`Store::replace_all`] gives when
    /// the inputs of the current state for `names` (type URL, name) are replaced by `resources`
    /// (whose names must each be in `names`; a name without any is removed). A route
    /// configuration's virtual hosts (VHDS) go with it. Two resources with the same name and
    /// constraints, among `resources` or with a resource the store keeps, are an error as in
    /// `replace_all`; so are the variant rules and references, checked for what changed.
    ///
    /// What a source that knows what changed commits: its cost is that of the names it
    /// changes, not of the whole state.
    pub fn replace_names(
        &self,
        names: impl IntoIterator<Item = (String, String)>,
        resources: impl IntoIterator<Item = ResourceInput>,
    ) -> Result<UpdateSummary, StoreError> {
        let _writer = self.inner.writer.lock().unwrap_or_else(|e| e.into_inner());
        let current = self.snapshot();
        let mut next: HashMap<Arc<str>, TypeEdit> = HashMap::new();
        let hosts_type: Arc<str> = intern_type(&current, VIRTUAL_HOST)?;
        for (type_url, name) in names {
            let type_url = intern_type(&current, &type_url)?;
            let name = lookup_name(name);
            let name = intern(current.get(&type_url).map(|t| &**t), &name);
            // What the inputs of the name made: its own variants (not the virtual hosts of a
            // route configuration, which are its route configuration's). Every name touched is
            // compared at commit.
            map_of(&mut next, &current, &type_url)
                .variants_mut(&name)
                .retain(|v| v.parent().is_some());
            if *type_url == *ROUTE_CONFIGURATION {
                take_out_hosts(&mut next, &current, &hosts_type, &name, None);
            }
        }
        put_inputs(&mut next, &current, &hosts_type, resources, Edit::Add)?;
        self.commit(&current, next, true)
    }

    /// Applies individual changes atomically: the embedding API for programs that own their
    /// resources. Removing a resource that does not exist is not an error.
    pub fn apply(
        &self,
        changes: impl IntoIterator<Item = Change>,
    ) -> Result<UpdateSummary, StoreError> {
        let _writer = self.inner.writer.lock().unwrap_or_else(|e| e.into_inner());
        let current = self.snapshot();
        let mut next: HashMap<Arc<str>, TypeEdit> = HashMap::new();
        let hosts_type: Arc<str> = intern_type(&current, VIRTUAL_HOST)?;
        for change in changes {
            let (type_url, name) = match &change {
                Change::Set(input) => (
                    intern_type(&current, &input.type_url)?,
                    lookup_name(input.name.clone()),
                ),
                Change::Remove { type_url, name }
                | Change::RemoveVariant { type_url, name, .. } => {
                    (intern_type(&current, type_url)?, lookup_name(name.clone()))
                }
            };
            if *type_url == *ROUTE_CONFIGURATION {
                // The virtual hosts of a VHDS route configuration come and go with it (with the
                // variant changed, or all of them).
                let variant: Option<Option<&Constraints>> = match &change {
                    Change::Set(input) => Some(input.constraints.as_ref()),
                    Change::RemoveVariant { constraints, .. } => Some(constraints.as_ref()),
                    Change::Remove { .. } => None,
                };
                take_out_hosts(&mut next, &current, &hosts_type, &name, variant);
            }
            match change {
                Change::Set(input) => {
                    put_built(
                        &mut next,
                        &current,
                        &type_url,
                        &hosts_type,
                        input,
                        Edit::Replace,
                    )?;
                }
                Change::Remove { .. } => {
                    let name = intern(current.get(&type_url).map(|t| &**t), &name);
                    map_of(&mut next, &current, &type_url)
                        .variants_mut(&name)
                        .clear();
                }
                Change::RemoveVariant { constraints, .. } => {
                    let name = intern(current.get(&type_url).map(|t| &**t), &name);
                    map_of(&mut next, &current, &type_url)
                        .variants_mut(&name)
                        .retain(|v| !same_constraints(v, constraints.as_ref()));
                }
            }
        }
        // Only what the changes touch is checked for references (every reference when a name
        // or alias went away), as for `replace_names`: a commit costs what it changes, where
        // every call checked the whole state (S5 makes a thousand calls a second).
        self.commit(&current, next, true)
    }

    /// Builds the next snapshot from `current` with the types in `next` replaced, checks the
    /// variant rules of every changed name and the references of the next state (see
    /// [`ReferencePolicy`]), swaps it in and notifies the streams that watch a changed name.
    ///
    /// Of a type edited over the current state, only the names edited are compared with the
    /// current state (the others are as they were), and the next type is the current one with
    /// them changed. With `incremental`, in [`ReferenceMode::Strict`] only what can have changed
    /// is checked: the references of the changed resources, and every reference when a name or
    /// alias went away.
    fn commit(
        &self,
        current: &Snapshot,
        next: HashMap<Arc<str>, TypeEdit>,
        incremental: bool,
    ) -> Result<UpdateSummary, StoreError> {
        let mut types = current.type_map().clone();
        let mut changed: Vec<Arc<TypeChange>> = Vec::new();
        let mut count = 0;
        let mut listed: Vec<NameChange> = Vec::new();
        // The resources of changed names, and whether a name or alias went away: what the
        // reference check of a `touched` update looks at.
        let mut changed_resources: Vec<Typed> = Vec::new();
        let mut lost = false;
        // Resources kept with the same content but another origin or order: the state is
        // swapped in for them too (errors name the right files), with the same versions.
        let mut refreshed = false;
        for (type_url, edit) in next {
            let map = &edit.map;
            let mut refresh = false;
            let old = current.get(&type_url);
            // Changed resources are known by their names and aliases, old and new: a stream may
            // watch any of them. Each with whom to wake: the streams whose parameters match a
            // variant that was added, changed or removed (all of them if one is unconstrained).
            let mut names: ChangedNames = Vec::new();
            // The glob collections of the changed xdstp names, as their resources carry them.
            let mut collections: Vec<(Arc<str>, Arc<str>)> = Vec::new();
            // Whether a name (or an alias) may have gone with this commit.
            let mut removes = false;
            // (An alias leads to the name, whose variant is resolved by the stream's parameters:
            // the aliases of every variant, old and new, are marked.)
            let mut mark = |all: &mut dyn Iterator<Item = &Arc<Resource>>, wake: Wake| {
                for r in all {
                    names.push((r.name().clone(), wake.clone()));
                    if let Some(c) = r.collection_shared() {
                        collections.push((r.name().clone(), c.clone()));
                    }
                    names.extend(r.aliases().iter().map(|a| (a.clone(), wake.clone())));
                }
            };
            let all: Vec<&Arc<str>>;
            let names_to_compare: Box<dyn Iterator<Item = &Arc<str>>> = if edit.full {
                all = map
                    .keys()
                    .chain(
                        old.into_iter()
                            .flat_map(|o| o.entries())
                            .map(|(n, _)| n)
                            .filter(|n| !map.contains_key(*n)),
                    )
                    .collect();
                Box::new(all.iter().copied())
            } else {
                Box::new(map.keys())
            };
            for name in names_to_compare {
                let variants: &[Arc<Resource>] = map.get(name).map(|v| &v[..]).unwrap_or(&[]);
                let before = old.map(|o| o.variants(name)).unwrap_or(&[]);
                let in_before =
                    |r: &Arc<Resource>| before.iter().any(|b| b.version() == r.version());
                let in_new =
                    |r: &Arc<Resource>| variants.iter().any(|v| v.version() == r.version());
                let kept = variants.iter().filter(|r| in_before(r)).count();
                if kept == variants.len() && kept == before.len() {
                    // The same content; from elsewhere (another origin), or in another order,
                    // it is kept as given, without a new version or anyone woken.
                    refresh |= variants.iter().zip(before).any(|(a, b)| !Arc::ptr_eq(a, b));
                    continue;
                }
                if incremental {
                    changed_resources
                        .extend(variants.iter().map(|r| (type_url.clone(), r.clone())));
                    let after = |n: &str| {
                        variants
                            .iter()
                            .any(|v| **v.name() == *n || v.aliases().iter().any(|a| **a == *n))
                    };
                    lost |= before
                        .iter()
                        .any(|b| !after(b.name()) || b.aliases().iter().any(|a| !after(a)));
                }
                // The resources that changed: each new variant replaces an old one, or is added, or
                // an old one is removed.
                count += variants.len().max(before.len()) - kept;
                check_variants(&type_url, name, variants)?;
                let kind = match (before.is_empty(), variants.is_empty()) {
                    (true, _) => ChangeKind::Added,
                    (false, true) => ChangeKind::Removed,
                    (false, false) => ChangeKind::Changed,
                };
                listed.push(NameChange {
                    type_url: type_url.clone(),
                    name: name.clone(),
                    kind,
                });
                let differ = variants
                    .iter()
                    .filter(|r| !in_before(r))
                    .chain(before.iter().filter(|r| !in_new(r)));
                removes |= variants.is_empty() || before.iter().any(|b| !b.aliases().is_empty());
                let wake = Wake::of(differ.map(|r| r.constraints()));
                mark(&mut variants.iter().chain(before), wake);
            }
            // One entry per name, waking whom any of its entries wakes.
            merge_names(&mut names);
            if names.is_empty() && !refresh {
                continue;
            }
            refreshed |= refresh;
            let snapshot = match (&edit.base, edit.full) {
                (Some(base), false) => base.with_changes(&edit.map),
                _ => TypeSnapshot::with_variants(type_url.clone(), edit.map),
            };
            if snapshot.is_empty() {
                types.remove(&type_url);
            } else {
                types.insert(type_url.clone(), Arc::new(snapshot));
            }
            if !names.is_empty() {
                let change = TypeChange::new(type_url, names, removes);
                changed.push(Arc::new(change.with_collections(collections)));
            }
        }
        let total = types.values().map(|t| t.resource_count()).sum();
        // Only a change can create a dangling reference (the current state passed the check),
        // but in warn mode every dangling reference of the new state is reported, old ones too.
        let policy = &self.inner.policy;
        let dangling = if count == 0 {
            Vec::new()
        } else if incremental && !lost && policy.mode == ReferenceMode::Strict {
            // The current state has none: only a changed resource can have one.
            changed_resources.sort_by(|a, b| (&a.0, a.1.name()).cmp(&(&b.0, b.1.name())));
            refs::dangling_of(
                &types,
                changed_resources.iter().map(|(t, r)| (t, r)),
                policy,
            )
        } else {
            refs::dangling(&types, policy)
        };
        if !dangling.is_empty() && self.inner.policy.mode == ReferenceMode::Strict {
            return Err(StoreError::DanglingReferences(dangling));
        }
        let generation = current.generation() + u64::from(count > 0);
        if count > 0 || refreshed {
            let (resolved, swapped) = self.swap_in(Snapshot::new(generation, types));
            if !resolved.is_empty() {
                pending::wake_with(&mut changed, &resolved, |type_url| {
                    swapped.type_key(type_url)
                });
            }
            // Notify after the swap: a stream woken by this sees the new state.
            lock_index(&self.inner.index).notify(&changed);
        }
        listed.sort_by(|a, b| (&a.type_url, &a.name).cmp(&(&b.type_url, &b.name)));
        listed.truncate(MAX_LISTED);
        Ok(UpdateSummary {
            generation,
            changed: count,
            total,
            dangling,
            names: listed,
        })
    }
}

impl Store {
    /// Makes `snapshot` the current state, with the pending names of the state it replaces
    /// (they are the source's, not the commit's: see `pending`) but those staged to resolve
    /// with this commit, which are taken out in the same swap; those names, and the snapshot
    /// swapped in.
    fn swap_in(&self, mut snapshot: Snapshot) -> (Vec<PendingName>, Arc<Snapshot>) {
        let mut pending = self.inner.pending.lock().unwrap_or_else(|e| e.into_inner());
        let resolved = pending.take_staged();
        let mut current = self
            .inner
            .current
            .write()
            .unwrap_or_else(|e| e.into_inner());
        snapshot.pending = if resolved.is_empty() {
            current.pending.clone()
        } else {
            let types = resolved.iter().map(|n| n.type_url.as_str());
            pending.table_with(current.pending.as_deref(), types, |type_url| {
                snapshot.type_key(type_url)
            })
        };
        *current = Arc::new(snapshot);
        (resolved, current.clone())
    }
}

/// The rules of xRFC TP2 for the variants of one name: the same constrained keys, and no
/// parameter set that matches two of them.
fn check_variants(
    type_url: &str,
    name: &str,
    variants: &[Arc<Resource>],
) -> Result<(), StoreError> {
    if variants.len() < 2 {
        return Ok(());
    }
    let constraints: Vec<Option<&Constraints>> = variants
        .iter()
        .map(|v| v.constraints().map(|c| &**c))
        .collect();
    let Err(error) = params::check_variants(&constraints) else {
        return Ok(());
    };
    let describe = |i: usize| -> String {
        let v = &variants[i];
        match (v.origin(), v.constraints()) {
            (Some(origin), _) => origin.to_string(),
            (None, Some(c)) => format!("the variant for {c}"),
            (None, None) => "the unconstrained variant".to_owned(),
        }
    };
    let constraints_of = |i: usize| match variants[i].constraints() {
        Some(c) => c.to_string(),
        None => "unconstrained".to_owned(),
    };
    let (first, second, rule) = match error {
        VariantError::DifferentKeys {
            first,
            second,
            first_keys,
            second_keys,
        } => (
            first,
            second,
            VariantRule::DifferentKeys {
                first_keys: first_keys.into_iter().collect(),
                second_keys: second_keys.into_iter().collect(),
            },
        ),
        VariantError::Overlap {
            first,
            second,
            witness,
        } => (
            first,
            second,
            VariantRule::Overlap {
                witness: witness.to_string(),
                first_constraints: constraints_of(first),
                second_constraints: constraints_of(second),
            },
        ),
    };
    Err(StoreError::Variants {
        type_url: type_url.to_owned(),
        name: name.to_owned(),
        first: describe(first),
        second: describe(second),
        rule: Box::new(rule),
    })
}

fn intern_type(current: &Snapshot, type_url: &str) -> Result<Arc<str>, StoreError> {
    if !crate::types::is_well_formed(type_url) {
        return Err(StoreError::BadTypeUrl {
            type_url: type_url.to_owned(),
        });
    }
    Ok(current.type_key(type_url))
}

/// What one resource is made of, before it is encoded.
struct Parts {
    name: String,
    aliases: Vec<String>,
    constraints: Option<Arc<Constraints>>,
    origin: Option<Arc<str>>,
    /// VHDS: the route configuration a virtual host was taken out of.
    parent: Option<Arc<str>>,
    ttl: Option<Duration>,
    value: Bytes,
}

/// Encodes a resource, reusing the current one (and its bytes) when the content is unchanged.
/// The name the store keeps for `name` of `type_url`: an `xdstp://` name checked (well formed,
/// of its type, not a glob) and canonical; any other name as it is (opaque bytes, no cost).
fn store_name(type_url: &str, name: String, origin: Option<&str>) -> Result<String, StoreError> {
    if !xdstp::is_xdstp(&name) {
        return Ok(name);
    }
    match xdstp::XdstpName::parse_resource(&name, type_url) {
        Ok(parsed) if parsed.as_str() == name => Ok(name),
        Ok(parsed) => Ok(parsed.to_string()),
        Err(error) => Err(StoreError::BadName {
            type_url: type_url.to_owned(),
            name,
            origin: origin.map(str::to_owned),
            error,
        }),
    }
}

/// `name` as the store keeps it when it is well formed (a removal of a name the store cannot
/// hold removes nothing).
fn lookup_name(name: String) -> String {
    match xdstp::canonical(&name) {
        Some(canonical) => canonical.to_string(),
        None => name,
    }
}

fn build(
    current: &Snapshot,
    type_url: &Arc<str>,
    parts: Parts,
) -> Result<Arc<Resource>, StoreError> {
    if parts.name.is_empty() {
        return Err(StoreError::EmptyName {
            type_url: type_url.to_string(),
        });
    }
    let mut parts = parts;
    if parts.parent.is_none() {
        parts.name = store_name(type_url, parts.name, parts.origin.as_deref())?;
    }
    let aliases: Vec<Arc<str>> = parts.aliases.into_iter().map(Arc::from).collect();
    let version = Resource::version_of(
        type_url,
        &aliases,
        parts.constraints.as_deref(),
        parts.ttl,
        &parts.value,
    );
    let variants = current
        .get(type_url)
        .map(|t| t.variants(&parts.name))
        .unwrap_or(&[]);
    // Unchanged content keeps its resource, and its bytes: nothing is encoded again.
    if let Some(old) = variants.iter().find(|v| **v.version() == *version) {
        if old.origin() == parts.origin.as_ref() && old.parent() == parts.parent.as_ref() {
            return Ok(old.clone());
        }
    }
    let name = variants
        .first()
        .map(|r| r.name().clone())
        .unwrap_or_else(|| parts.name.into());
    Ok(Arc::new(
        Resource::versioned(
            type_url,
            name,
            aliases,
            parts.constraints,
            parts.ttl,
            parts.value,
            version,
        )
        .with_origin(parts.origin)
        .with_parent(parts.parent),
    ))
}

/// The resources one input becomes: itself, and for a VHDS route configuration its virtual
/// hosts too (the route configuration then without them). Virtual hosts are variants of the
/// same constraints as their route configuration.
fn build_all(
    current: &Snapshot,
    type_url: &Arc<str>,
    hosts_type: &Arc<str>,
    input: ResourceInput,
) -> Result<Vec<Typed>, StoreError> {
    let constraints = input.constraints.map(Arc::new);
    let origin: Option<Arc<str>> = input.origin.map(Arc::from);
    let ttl = input.ttl;
    let parts = |name: String, aliases: Vec<String>, parent: Option<&str>, value: Bytes| Parts {
        name,
        aliases,
        constraints: constraints.clone(),
        origin: origin.clone(),
        parent: parent.map(Arc::from),
        ttl,
        value,
    };
    if **type_url == *ROUTE_CONFIGURATION {
        if let Some((route, hosts)) = vhds::split(&input.value) {
            let mut out = vec![(
                type_url.clone(),
                build(
                    current,
                    type_url,
                    parts(input.name.clone(), Vec::new(), None, route),
                )?,
            )];
            for host in hosts {
                let resource = build(
                    current,
                    hosts_type,
                    parts(host.name, host.aliases, Some(&input.name), host.value),
                )?;
                out.push((hosts_type.clone(), resource));
            }
            return Ok(out);
        }
    }
    Ok(vec![(
        type_url.clone(),
        build(
            current,
            type_url,
            parts(input.name, input.aliases, None, input.value),
        )?,
    )])
}

#[cfg(test)]
mod tests;
