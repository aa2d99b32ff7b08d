//! State of the World: the state machine of one resource type on one stream.
//!
//! It keeps what the client asked for, what it was last sent and what is owed to it; the store
//! state is passed in whenever a response may be due, never kept.

use crate::hash::HashSet;
use std::collections::VecDeque;
use std::sync::Arc;

use super::subscription::{reset, Core, OlderNonce, Wildcard};
use super::{
    intern_key, part_len, request_keys, Key, Nonce, NonceGen, Pid, RequestKind, Subscribe,
    SubscriptionChange, Views, PART_OVERHEAD,
};
use crate::store::{field_len, Encoding, Interner, Resource, TypeSnapshot, View};

pub use super::subscription::WILDCARD;

/// One response to send.
#[derive(Debug, Clone)]
pub struct SotwResponse {
    /// The type URL.
    pub type_url: Arc<str>,
    /// The version of the client's view of the type.
    pub version_info: Arc<str>,
    /// The nonce the client answers with.
    pub nonce: Nonce,
    /// The resources it carries.
    pub resources: SotwResources,
    /// How resources go out: wrapped in `Resource` with their `resource_name` (name and dynamic
    /// parameter constraints) for clients that subscribe with dynamic parameters (xRFC TP2), and
    /// wrapped with their TTL for clients that take TTLs.
    pub encoding: Encoding,
    /// The resources of this response that are new or changed for this client (empty for the
    /// first response of the type): what a client has to act upon. When that is all of them
    /// (every push of store changes), the same list as `resources`, not a copy.
    pub updated: ResourceList,
    /// Set (to its size in bytes) on the first response of the stream and type that is over the
    /// size limit and could not be split: a full-state type (listeners, clusters, scoped routes), or one resource alone.
    pub oversized: Option<usize>,
    /// Whether the response names the control plane that sent it (`control_plane`): only the
    /// first of its type on the stream does. Envoy keeps the identifier per type until a
    /// response names another, so repeating it (some 30 bytes) on every push, a tenth of a
    /// one-endpoint response, told it nothing.
    pub control_plane: bool,
}

/// The resources of a response: a whole view (its shared encoded body) or a selection.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum SotwResources {
    /// Every resource of a view, its encoded body shared.
    All(Arc<View>),
    /// Some resources.
    Some(ResourceList),
}

/// A list of resources a response, its `updated` and the stream's record of its client share
/// (one count per resource per stream, not one for each of them: every stream takes counts on
/// the same resources, and both cores took turns at them).
pub type ResourceList = Arc<[Arc<Resource>]>;

/// A list made into a [`ResourceList`]; no allocation when it is empty.
fn shared(list: Vec<Arc<Resource>>) -> ResourceList {
    if list.is_empty() {
        ResourceList::default()
    } else {
        list.into()
    }
}

impl SotwResponse {
    /// Names of the resources in this response, in order.
    pub fn names(&self) -> Vec<Arc<str>> {
        match &self.resources {
            SotwResources::All(t) => t.iter().map(|r| r.name().clone()).collect(),
            SotwResources::Some(list) => list.iter().map(|r| r.name().clone()).collect(),
        }
    }

    /// How many resources.
    pub fn len(&self) -> usize {
        match &self.resources {
            SotwResources::All(t) => t.len(),
            SotwResources::Some(list) => list.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A subscription of named keys looks at every key for its next response, rather than at each
/// changed name, once it was offered more changed names since its last one than a quarter of its
/// keys, counted as at least this many (`SotwSubscription::skips_changes`).
const SCAN_MIN_KEYS: usize = 32;

/// One type's subscription on a SotW stream. Subscriptions are keys: a name and the parameter
/// set its variant is chosen by (see [`Views`]).
#[derive(Debug)]
pub struct SotwSubscription {
    /// The type, the wildcard, the parameter sets of `names`, the latest response (see
    /// [`Core`]).
    core: Core,
    /// LDS/CDS semantics: every response carries all subscribed resources.
    full_state: bool,
    /// Explicitly subscribed keys (without `*`), each with what the client was last sent of it.
    names: Subscribed,
    /// Digest of the last request's subscription, in order: an ACK repeats the list it
    /// subscribed with, and recognising it spares rebuilding the subscription (the most frequent
    /// request by far).
    last_names: Option<(usize, u64)>,
    /// What is owed besides the core's forced keys and dirty names: a response even if nothing
    /// changed (first request, wildcard turned on).
    respond: bool,
    /// Changed names offered since the last response, repeats included (see `mark_changed`).
    offered: usize,
    /// Every subscribed key may have changed: more names changed than are worth recording one
    /// by one, and the next response compares what each key was sent with the store.
    all_dirty: bool,
    /// The view version of the last wildcard response: a wildcard keeps no per-name state beyond
    /// the explicit names (whose sent resource is in `names`).
    sent_view_version: Option<Arc<str>>,
    /// The version a reconnecting client said it has, until the first response is decided.
    client_version: Option<Box<str>>,
    /// The rest of a response that goes out in parts (boxed: rare, and every stream has a
    /// machine per type). Responses of types but the full-state ones are split to stay under
    /// the core's size limit.
    split: Option<Box<Split>>,
}

impl SotwSubscription {
    /// A subscription to `type_url` with nothing subscribed yet.
    pub fn new(type_url: Arc<str>) -> SotwSubscription {
        let full_state = crate::types::is_full_state(&type_url);
        SotwSubscription {
            core: Core::new(type_url),
            full_state,
            names: Subscribed::default(),
            last_names: None,
            respond: false,
            offered: 0,
            all_dirty: false,
            sent_view_version: None,
            client_version: None,
            split: None,
        }
    }

    /// Responses larger than this are split into parts, except for full-state types (listeners,
    /// clusters, scoped routes), whose every response must hold every resource.
    pub fn set_max_response_bytes(&mut self, bytes: usize) {
        self.core.max_response_bytes = bytes;
    }

    /// Responses name resources by `resource_name` from now on (a TP2 client).
    pub fn set_named(&mut self, named: bool) {
        self.core.encoding.named = named;
    }

    /// Resources with a TTL go out wrapped in `Resource` with it (clients that take TTLs in SotW).
    pub fn set_ttl(&mut self, ttl: bool) {
        self.core.encoding.ttl = ttl;
    }

    /// Whether responses carry TTLs (`set_ttl`).
    pub fn ttl(&self) -> bool {
        self.core.encoding.ttl
    }

    /// Its type URL.
    pub fn type_url(&self) -> &Arc<str> {
        &self.core.type_url
    }

    /// Whether the client is subscribed to every resource of the type.
    pub fn is_wildcard(&self) -> bool {
        self.core.wildcard.pid().is_some()
    }

    /// How many keys (name and parameter set) are subscribed.
    pub fn key_count(&self) -> usize {
        self.names.len()
    }

    /// Subscribed names (each once, whatever the number of parameter sets).
    pub fn names(&self) -> impl Iterator<Item = &Arc<str>> {
        let mut seen = HashSet::default();
        self.names
            .keys()
            .map(|(n, _)| n)
            .filter(move |n| seen.insert(*n))
    }

    /// The version of the latest response sent, if any.
    pub fn last_version(&self) -> Option<&Arc<str>> {
        self.core.last_version.as_ref()
    }

    /// Takes in a request for this type, subscribed by plain names only, with parameter set 0.
    /// `current` (the store's resources of the type) only serves to share name allocations.
    pub fn handle_request(
        &mut self,
        request: &SotwRequest,
        current: Option<&Arc<TypeSnapshot>>,
    ) -> (RequestKind, SubscriptionChange) {
        self.handle(request, &Subscribe::PLAIN, current)
    }

    /// Takes in a request whose names use `subscribe.default` and whose resource locators the
    /// session resolved to parameter sets.
    pub fn handle(
        &mut self,
        request: &SotwRequest,
        subscribe: &Subscribe<'_>,
        current: Option<&Arc<TypeSnapshot>>,
    ) -> (RequestKind, SubscriptionChange) {
        let error = request.error_detail.as_ref().map(|s| s.message.as_str());
        let kind = self
            .core
            .classify(&request.response_nonce, error, OlderNonce::Stale);
        match kind {
            // Superseded by a response the client has not seen yet: the client will answer
            // that one with its full, current list of names, so this one is dropped whole.
            RequestKind::Stale { .. } => return (kind, SubscriptionChange::default()),
            RequestKind::Initial => {
                self.respond = true;
                // A client reconnecting says which version it has (perhaps from another
                // replica: versions are content hashes, the same on every xdsd serving the same
                // resources).
                let version = request.version_info.as_str();
                self.client_version = (!version.is_empty()).then(|| version.into());
            }
            _ => {}
        }
        let change = self.subscribe(&request.resource_names, subscribe, current);
        (kind, change)
    }

    /// Takes in a request's list of names (and locators): the wildcard and the keys it
    /// subscribes to from now on. A list the last request repeated changes nothing.
    fn subscribe(
        &mut self,
        requested: &Names,
        subscribe: &Subscribe<'_>,
        current: Option<&Arc<TypeSnapshot>>,
    ) -> SubscriptionChange {
        let digest = names_digest(requested, subscribe);
        if self.last_names == Some(digest) {
            return SubscriptionChange::default();
        }
        self.last_names = Some(digest);
        let (wildcard, names) = self.listed(requested, subscribe, current);
        let mut change = SubscriptionChange::default();
        self.set_wildcard(wildcard, &mut change);
        self.set_keys(names, current, &mut change);
        change
    }

    /// The wildcard and the keys a request's list says (`*` is the wildcard, never a key).
    fn listed(
        &self,
        requested: &Names,
        subscribe: &Subscribe<'_>,
        current: Option<&Arc<TypeSnapshot>>,
    ) -> (Wildcard, Subscribed) {
        let names_something = !requested.is_empty() || !subscribe.locators.is_empty();
        let rule = self
            .core
            .wildcard
            .legacy_rule(names_something, subscribe.default);
        if let Wildcard::Legacy(_) = rule {
            // Legacy wildcard: no name ever sent means `*`.
            return (rule, Subscribed::default());
        }
        if subscribe.locators.is_empty() && !requested.is_empty() {
            if let Some(names) = Subscribed::of_request(requested, subscribe.default, &self.names) {
                // Names another stream subscribed to with the same list: no name looked up.
                return (Wildcard::Off, names);
            }
        }
        let mut wildcard = None;
        let mut names = Subscribed::builder(subscribe.default, requested.len());
        let mut interner = Interner::new(current.map(|t| &**t));
        for (name, pid) in request_keys(requested, subscribe.default, subscribe.locators) {
            if name == WILDCARD {
                wildcard = Some(pid);
                continue;
            }
            let key = (intern_key(&mut interner, &self.names, &name, pid), pid);
            // What was sent of a key still subscribed is kept.
            let sent = self.names.get(&key.0, pid).copied().flatten();
            names.insert(key, sent);
        }
        let from = subscribe.locators.is_empty().then_some(requested);
        (Wildcard::listed(wildcard), names.finish(from))
    }

    /// Takes the wildcard a request says: a wildcard turned on (or onto another parameter set)
    /// is owed a response with everything there is.
    fn set_wildcard(&mut self, wildcard: Wildcard, change: &mut SubscriptionChange) {
        let (before, now) = (self.core.wildcard.pid(), wildcard.pid());
        self.core.wildcard = wildcard;
        if now == before {
            return;
        }
        if now.is_some() != before.is_some() {
            change.wildcard = Some(now.is_some());
        }
        if now.is_some() {
            self.respond = true;
            self.sent_view_version = None;
        }
    }

    /// Takes the keys a request says: the keys added are owed (unless everything is), the
    /// names added and removed go to the transport, what is left of a split response is
    /// computed again.
    fn set_keys(
        &mut self,
        names: Subscribed,
        current: Option<&Arc<TypeSnapshot>>,
        change: &mut SubscriptionChange,
    ) {
        let mut pids: Vec<Pid> = names.keys().map(|(_, p)| p).collect();
        pids.sort_unstable();
        pids.dedup();
        let total = current.map_or(0, |t| t.len());
        // A subscription to most of the type is watched as a whole: the transport needs no
        // names added or removed (a first request of 10,000 names would sort 10,000).
        let dense = super::dense(self.core.dense, names.len(), total);
        // Before the first response, everything subscribed is owed anyway (and nothing counts
        // as updated).
        let first_owed = self.respond && self.core.last_nonce.is_none();
        let added: Vec<Key> = if first_owed && dense {
            Vec::new()
        } else {
            new_keys(&names, &self.names)
        };
        let removed: Vec<Key> = new_keys(&self.names, &names);
        for key in &removed {
            self.core.forced.remove(key);
        }
        if !first_owed {
            self.core.forced.extend(added.iter().cloned());
        }
        if !dense {
            self.names_changed(&added, &removed, (&names, &pids), change);
        }
        self.core.pids = pids;
        self.names = names;
        if !added.is_empty() || !removed.is_empty() || change.wildcard.is_some() {
            // What is left of a split response is owed to the new subscription.
            self.fold_rest();
        }
        change.set_dense(
            &mut self.core.dense,
            dense,
            self.names.keys().map(|(n, _)| n),
        );
    }

    /// The names (not keys) `added` and `removed` when the keys become `after` (with its
    /// parameter sets), sorted, for the transport to watch by name: a name stays watched while
    /// any parameter set still subscribes to it.
    fn names_changed(
        &self,
        added: &[Key],
        removed: &[Key],
        after: (&Subscribed, &[Pid]),
        change: &mut SubscriptionChange,
    ) {
        let has_name = |set: &Subscribed, pids: &[Pid], name: &Arc<str>| {
            pids.iter().any(|p| set.contains(name, *p))
        };
        change.added = added
            .iter()
            .filter(|(n, _)| !has_name(&self.names, &self.core.pids, n))
            .map(|(n, _)| n.clone())
            .collect();
        change.removed = removed
            .iter()
            .filter(|(n, _)| !has_name(after.0, after.1, n))
            .map(|(n, _)| n.clone())
            .collect();
        change.added.sort_unstable();
        change.added.dedup();
        change.removed.sort_unstable();
        change.removed.dedup();
    }

    /// The keys of a name: one per parameter set it is subscribed with.
    fn keys_of<'a>(&'a self, name: &'a Arc<str>) -> impl Iterator<Item = Key> + 'a {
        self.core
            .pids
            .iter()
            .filter(|pid| self.names.contains(name, **pid))
            .map(move |pid| (name.clone(), *pid))
    }

    /// Whether the client was last sent `resource` (this version of it) for the key (`name`,
    /// `pid`).
    fn was_sent(&self, name: &Arc<str>, pid: Pid, resource: &Resource) -> bool {
        matches!(self.names.get(name, pid), Some(Some(sent)) if *sent == SentMark::of(resource))
    }

    /// Records what the client is sent for each subscribed key: its resource in `views`, or
    /// nothing.
    fn record_all_sent(&mut self, views: &Views) {
        for ((name, pid), sent) in self.names.iter_mut() {
            *sent = views.get(name, pid).map(|r| SentMark::of(r));
        }
    }

    /// Records names the store changed (added, modified or removed), each counted as offered
    /// (see [`Self::skips_changes`], asked first).
    pub fn mark_changed<'a>(&mut self, names: impl IntoIterator<Item = &'a Arc<str>>) {
        if self.all_dirty {
            return;
        }
        let Self {
            core,
            names: subscribed,
            offered,
            ..
        } = self;
        let names = names.into_iter().inspect(|_| *offered += 1);
        core.mark_changed(names, |name, pid| subscribed.contains(name, pid));
    }

    /// Told that `count` changed names (repeats included) are coming, before
    /// [`Self::mark_changed`]: true when the names need not be looked at one by one. Once a
    /// subscription of named keys (no wildcard, not a full-state type) is offered more changed
    /// names since its last response than a quarter of its keys (`SCAN_MIN_KEYS` at least),
    /// it stops recording them and its next response looks at every key instead: under churn a
    /// stream takes the changes of many commits at once (S5 at 2,000 changes a second: some 170
    /// names per response for 100 keys), and looking each up was a quarter of the server's work.
    pub fn skips_changes(&mut self, count: usize) -> bool {
        if self.all_dirty {
            return true;
        }
        let scan = self.core.wildcard.pid().is_none() && !self.full_state;
        let scan_at = self.names.len().max(SCAN_MIN_KEYS).div_ceil(4);
        if scan && self.offered.saturating_add(count) > scan_at {
            self.all_dirty = true;
            reset(&mut self.core.dirty);
            return true;
        }
        false
    }

    /// Forgets what was owed of the store's changes (after a response).
    fn clear_dirty(&mut self) {
        reset(&mut self.core.dirty);
        self.offered = 0;
        self.all_dirty = false;
    }

    /// Turns "every key may have changed" into the names that did (for the responses that read
    /// `dirty` name by name).
    fn list_dirty(&mut self, views: &Views) {
        if !std::mem::take(&mut self.all_dirty) {
            return;
        }
        for (name, pid) in self.names.keys() {
            let now = views.get(name, pid).map(|r| SentMark::of(r));
            if self.names.get(name, pid).copied().flatten() != now {
                self.core.dirty.insert(name.clone());
            }
        }
    }

    /// Whether `poll_response` may have something to send.
    pub fn has_pending(&self) -> bool {
        self.has_news() || self.split.is_some()
    }

    /// Whether the next response is the rest of one that goes out in parts.
    pub fn in_parts(&self) -> bool {
        self.split.is_some()
    }

    /// Whether something was owed since the last response, beyond the rest of a split response.
    fn has_news(&self) -> bool {
        self.respond
            || !self.core.forced.is_empty()
            || !self.core.dirty.is_empty()
            || self.all_dirty
    }

    /// The response owed to the client, if any, given the store as this client sees it.
    ///
    /// A response of a type other than the full-state ones (listeners, clusters, scoped routes)
    /// that is larger than the size limit goes out in parts, one per call; every part but the last has the version
    /// `<version>-part-<n>`, so that a client reports the version only once it has all of it.
    /// The rest is sent as computed unless something changes in between (then it is computed
    /// again with the change).
    pub fn poll_response(&mut self, views: &Views, nonces: &mut NonceGen) -> Option<SotwResponse> {
        if !self.has_pending() {
            return None;
        }
        if let Some(split) = self.split.take() {
            if !self.has_news() {
                return Some(self.next_part(split, nonces, ResourceList::default()));
            }
            self.split = Some(split);
            self.fold_rest();
        }
        let first = self.core.last_nonce.is_none();
        if !first && !self.full_state && !self.respond && self.core.forced.is_empty() {
            // Only changes of the store are owed (every push after the first response).
            return self.push_changes(views, nonces);
        }
        self.list_dirty(views);
        // Before the first response nothing counts as updated.
        let updated = if first {
            Vec::new()
        } else {
            self.updated(views)
        };
        let resources = if self.full_state {
            self.full_state_resources(views)
        } else {
            self.changed_resources(views)
        };
        self.respond = false;
        reset(&mut self.core.forced);
        self.clear_dirty();
        let resources = resources?;
        self.finish(views, nonces, resources, shared(updated), first)
    }

    /// The response of the store's changes alone (nothing else owed, not a full-state type,
    /// after the first response): the resources the client was not sent as they are now.
    fn push_changes(&mut self, views: &Views, nonces: &mut NonceGen) -> Option<SotwResponse> {
        let resources = if self.all_dirty {
            self.scan_owed(views)
        } else {
            self.owed_keys(views)
        };
        self.respond = false;
        self.clear_dirty();
        let resources = shared(resources?);
        // Each resource is new or changed for the client: `updated` is all of them.
        let updated = resources.clone();
        let resources = SotwResources::Some(resources);
        self.finish(views, nonces, resources, updated, false)
    }

    /// The resources of the dirty and forced names the client was not sent as the store holds
    /// them now (what is new or changed for it), in name order, each once.
    fn updated(&self, views: &Views) -> Vec<Arc<Resource>> {
        let mut updated: Vec<Arc<Resource>> = Vec::new();
        let mut names: Vec<&Arc<str>> = self
            .core
            .dirty
            .iter()
            .chain(self.core.forced.iter().map(|(n, _)| n))
            .collect();
        names.sort();
        names.dedup();
        for name in names {
            let keys = self.keys_of(name).collect::<Vec<_>>();
            let wildcard = self.core.wildcard.pid().map(|w| (name.clone(), w));
            for key in keys.iter().chain(wildcard.iter()) {
                if let Some(r) = views.get(&key.0, key.1) {
                    if !self.was_sent(&key.0, key.1, r)
                        && !updated.iter().any(|u| Arc::ptr_eq(u, r))
                    {
                        updated.push(r.clone());
                    }
                }
            }
        }
        updated
    }

    /// The response of `resources`, owed; or its first part, when it is too large.
    fn finish(
        &mut self,
        views: &Views,
        nonces: &mut NonceGen,
        resources: SotwResources,
        updated: ResourceList,
        first: bool,
    ) -> Option<SotwResponse> {
        let version_info = self.version(views);
        if first
            && self
                .client_version
                .take()
                .is_some_and(|v| *v == *version_info)
        {
            // The client has exactly this already: nothing is resent (what it was sent is
            // recorded, so later changes go out as they would have).
            return None;
        }
        let size = self.resources_len(&resources);
        let budget = self.budget(&version_info);
        let mut oversized = None;
        if size > budget {
            if !self.full_state {
                let split = Box::new(Split {
                    rest: match resources {
                        SotwResources::All(view) => view.iter().cloned().collect(),
                        SotwResources::Some(list) => list.iter().cloned().collect(),
                    },
                    version: version_info,
                    parts: 0,
                });
                return Some(self.next_part(split, nonces, updated));
            }
            // Full-state types: a response holds them all, whatever its size.
            oversized = self.core.warn_once(Some(size));
        }
        Some(self.response(version_info, nonces, resources, updated, oversized))
    }

    fn response(
        &mut self,
        version_info: Arc<str>,
        nonces: &mut NonceGen,
        resources: SotwResources,
        updated: ResourceList,
        oversized: Option<usize>,
    ) -> SotwResponse {
        let nonce = nonces.next_nonce();
        let control_plane = self.core.sent(nonce, &version_info);
        SotwResponse {
            type_url: self.core.type_url.clone(),
            version_info,
            nonce,
            resources,
            encoding: self.core.encoding,
            updated,
            oversized,
            control_plane,
        }
    }

    /// The bytes a response may give its resources.
    fn budget(&self, version: &str) -> usize {
        self.core
            .max_response_bytes
            .saturating_sub(self.core.type_url.len() + version.len() + PART_OVERHEAD)
    }

    fn resources_len(&self, resources: &SotwResources) -> usize {
        match resources {
            SotwResources::All(view) => view.sotw_body(self.core.encoding).len(),
            SotwResources::Some(list) => list
                .iter()
                .map(|r| field_len(r.sotw_entry(self.core.encoding).len()))
                .sum(),
        }
    }

    /// The next part of a split response; what is left of it is kept for the next call.
    fn next_part(
        &mut self,
        mut split: Box<Split>,
        nonces: &mut NonceGen,
        updated: ResourceList,
    ) -> SotwResponse {
        let (count, oversized) = part_len(
            split
                .rest
                .iter()
                .map(|r| field_len(r.sotw_entry(self.core.encoding).len())),
            self.budget(&split.version),
        );
        let part: Vec<Arc<Resource>> = split.rest.drain(..count).collect();
        split.parts += 1;
        let version = if split.rest.is_empty() {
            // The last part: the split (and a large response's buffer) is not kept.
            split.version.clone()
        } else {
            let version = Arc::from(format!("{}-part-{}", split.version, split.parts));
            self.split = Some(split);
            version
        };
        let oversized = self.core.warn_once(oversized);
        self.response(
            version,
            nonces,
            SotwResources::Some(shared(part)),
            updated,
            oversized,
        )
    }

    /// Gives the rest of a split response back to what is owed, to be computed again with what
    /// changed.
    fn fold_rest(&mut self) {
        if let Some(split) = self.split.take() {
            for r in split.rest {
                self.resend(r.name());
            }
        }
    }

    /// The version of what this client is sent: the version of the view it reads, or of the
    /// whole type when it reads several.
    fn version(&self, views: &Views) -> Arc<str> {
        let mut pids = self
            .core
            .pids
            .iter()
            .copied()
            .chain(self.core.wildcard.pid());
        let first = pids.next().unwrap_or(0);
        if pids.all(|p| views.view(p).version() == views.view(first).version()) {
            views.view(first).version().clone()
        } else {
            let mut all: Vec<&str> = self
                .core
                .pids
                .iter()
                .copied()
                .chain(self.core.wildcard.pid())
                .map(|p| &**views.view(p).version())
                .collect();
            all.sort_unstable();
            all.dedup();
            all.join(".").into()
        }
    }

    /// Sends `name` again with the next response, changed or not, if it is subscribed.
    pub fn resend(&mut self, name: &Arc<str>) {
        let names = &self.names;
        self.core
            .resend(name, |name, pid| names.contains(name, pid));
    }

    /// LDS/CDS: all subscribed resources, sent when that set differs from what the client has,
    /// or when owed a response anyway.
    fn full_state_resources(&mut self, views: &Views) -> Option<SotwResources> {
        let changed = match self.core.wildcard.pid() {
            Some(w) if self.sent_view_version.as_ref() != Some(views.view(w).version()) => true,
            _ => self
                .core
                .dirty
                .iter()
                .flat_map(|n| self.keys_of(n))
                .any(|k| {
                    let now = views.get(&k.0, k.1).map(|r| SentMark::of(r));
                    let sent = self.names.get(&k.0, k.1).copied().flatten();
                    now != sent
                }),
        };
        if !(self.respond || !self.core.forced.is_empty() || changed) {
            return None;
        }
        self.record_all_sent(views);
        self.sent_view_version = self
            .core
            .wildcard
            .pid()
            .map(|w| views.view(w).version().clone());
        if let Some(w) = self.core.wildcard.pid() {
            if self.core.pids.iter().all(|p| *p == w) {
                return Some(SotwResources::All(views.view(w).clone()));
            }
        }
        let mut out: Vec<Arc<Resource>> = self
            .core
            .wildcard
            .pid()
            .into_iter()
            .flat_map(|w| views.view(w).iter().cloned())
            .collect();
        for (name, pid) in self.names.keys() {
            if let Some(r) = views.get(name, pid) {
                out.push(r.clone());
            }
        }
        Some(SotwResources::Some(shared(dedup(out))))
    }

    /// Other types: only the subscribed resources that changed or were newly subscribed.
    /// The resources owed for the keys forced (each, changed or not) and for the keys of the
    /// dirty names (those the client was not sent as they are now), in name order; records them
    /// as sent. `None` when none is owed.
    fn owed_keys(&mut self, views: &Views) -> Option<Vec<Arc<Resource>>> {
        let mut out: Vec<Arc<Resource>> =
            Vec::with_capacity(self.core.forced.len() + self.core.dirty.len());
        let (names, pids, wildcard) = (&mut self.names, &self.core.pids, self.core.wildcard.pid());
        for (name, pid) in &self.core.forced {
            // Still subscribed: a request may have dropped it since it was forced.
            if names.contains(name, *pid) || wildcard == Some(*pid) {
                owe(names, views, name, *pid, true, &mut out);
            }
        }
        for name in &self.core.dirty {
            // The name's keys: subscribed with one of the parameter sets, then the wildcard's
            // unless it is one of those; a key forced is done.
            for i in 0..=pids.len() {
                let pid = match (pids.get(i), wildcard) {
                    (Some(&pid), _) if names.contains(name, pid) => pid,
                    (None, Some(w)) if !(pids.contains(&w) && names.contains(name, w)) => w,
                    _ => continue,
                };
                if !self.core.forced.is_empty() && self.core.forced.contains(&(name.clone(), pid)) {
                    continue;
                }
                owe(names, views, name, pid, false, &mut out);
            }
        }
        (!out.is_empty()).then(|| dedup(out))
    }

    /// What [`Self::owed_keys`] gives when every key may have changed (`all_dirty`, no key
    /// forced): each key's resource the client was not sent as it is now, in name order,
    /// recorded as sent. One lookup per key, in the view's order when the keys are most of it.
    fn scan_owed(&mut self, views: &Views) -> Option<Vec<Arc<Resource>>> {
        let mut out: Vec<Arc<Resource>> = Vec::with_capacity(self.names.len());
        if let [pid] = self.core.pids[..] {
            let view = views.view(pid);
            if super::in_view_order(view, self.names.len()) {
                let found = self
                    .names
                    .join_view(pid, view.iter(), |sent, r| record_owed(sent, r, &mut out));
                if found < self.names.len() {
                    // Subscribed names the store does not have (any more): nothing sent of them.
                    for ((name, _), sent) in self.names.iter_mut() {
                        if sent.is_some() && view.get(name).is_none() {
                            *sent = None;
                        }
                    }
                }
                return (!out.is_empty()).then_some(out);
            }
        }
        for ((name, pid), sent) in self.names.iter_mut() {
            match views.get(name, pid) {
                Some(r) => record_owed(sent, r, &mut out),
                None => *sent = None,
            }
        }
        (!out.is_empty()).then(|| dedup(out))
    }

    fn changed_resources(&mut self, views: &Views) -> Option<SotwResources> {
        if let (true, Some(w)) = (self.respond, self.core.wildcard.pid()) {
            // A new wildcard gets everything there is, even nothing.
            self.record_all_sent(views);
            if self.core.pids.iter().all(|p| *p == w) {
                return Some(SotwResources::All(views.view(w).clone()));
            }
            let mut out: Vec<Arc<Resource>> = views.view(w).iter().cloned().collect();
            out.extend(
                self.names
                    .keys()
                    .filter_map(|(n, p)| views.get(n, p).cloned()),
            );
            return Some(SotwResources::Some(shared(dedup(out))));
        }
        if self.respond {
            // Every subscribed key is owed (a first response): no need to gather candidates.
            return self.all_subscribed(views);
        }
        self.owed_keys(views)
            .map(|list| SotwResources::Some(shared(list)))
    }
}

impl SotwSubscription {
    /// Every explicitly subscribed resource (no wildcard), recorded as sent. A subscription to
    /// most of a view with one parameter set and no aliases (a client that names every cluster's
    /// endpoints) is read in the view's order: each resource is looked up once, and comes out
    /// sorted.
    fn all_subscribed(&mut self, views: &Views) -> Option<SotwResources> {
        if let [pid] = self.core.pids[..] {
            let view = views.view(pid);
            if super::in_view_order(view, self.names.len()) {
                let mut out: Vec<Arc<Resource>> = Vec::with_capacity(self.names.len());
                self.names.join_view(pid, view.iter(), |sent, r| {
                    *sent = Some(SentMark::of(r));
                    out.push(r.clone());
                });
                if out.len() < self.names.len() {
                    // Subscribed names the store does not have: nothing sent of them.
                    for ((name, _), sent) in self.names.iter_mut() {
                        if view.get(name).is_none() {
                            *sent = None;
                        }
                    }
                }
                return (!out.is_empty()).then(|| SotwResources::Some(shared(out)));
            }
        }
        self.record_all_sent(views);
        let out: Vec<Arc<Resource>> = self
            .names
            .keys()
            .filter_map(|(name, pid)| views.get(name, pid).cloned())
            .collect();
        (!out.is_empty()).then(|| SotwResources::Some(shared(dedup(out))))
    }
}

/// The rest of a SotW response that goes out in parts: its resources in name order, its version,
/// the number of parts sent.
#[derive(Debug)]
struct Split {
    rest: VecDeque<Arc<Resource>>,
    version: Arc<str>,
    parts: usize,
}

/// What a client was last sent of a key: the mark of that resource's version ([`SentMark`]), or
/// nothing (not sent, or deleted).
type Sent = Option<SentMark>;

/// A resource's version as a subscription records it was sent: 64 bits of the digest of its
/// name and version. It holds no reference to the resource: a push of a hundred endpoint sets to
/// a thousand streams touched each resource's shared reference count twice per stream to record
/// it (the two cores taking turns at one cache line), and a stream kept the resources it was
/// last sent alive after the store let them go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SentMark(std::num::NonZeroU64);

impl SentMark {
    fn of(resource: &Resource) -> SentMark {
        // The low bit set: never zero (the digest's bits are otherwise as they are).
        let bits = (resource.digest() as u64) | 1;
        SentMark(std::num::NonZeroU64::new(bits).unwrap_or(std::num::NonZeroU64::MIN))
    }

    #[cfg(test)]
    fn test(bits: u64) -> SentMark {
        SentMark(std::num::NonZeroU64::new(bits | 1).unwrap_or(std::num::NonZeroU64::MIN))
    }
}

/// The keys of `a` that `b` does not have.
fn new_keys(a: &Subscribed, b: &Subscribed) -> Vec<Key> {
    let same_plain = a.same_plain(b);
    a.keys()
        // The plain names of one shared set are in both.
        .filter(|(_, p)| !(same_plain && *p == a.pid()))
        .filter(|(n, p)| !b.contains(n, *p))
        .map(|(n, p)| (n.clone(), p))
        .collect()
}

/// Adds the resource of the key (`name`, `pid`) to `out` if it is owed (`always`, or the client
/// was not sent it as it is now), and records it as sent. A key whose resource is gone is
/// forgotten as sent: SotW has no deletion for these types, and the resource goes out again if
/// it comes back with the same content.
fn owe(
    names: &mut Subscribed,
    views: &Views,
    name: &Arc<str>,
    pid: Pid,
    always: bool,
    out: &mut Vec<Arc<Resource>>,
) {
    match (views.get(name, pid), names.get_mut(name, pid)) {
        (Some(r), Some(sent)) if always => {
            *sent = Some(SentMark::of(r));
            out.push(r.clone());
        }
        (Some(r), Some(sent)) => record_owed(sent, r, out),
        // Only the wildcard has it: no record per name.
        (Some(r), None) => out.push(r.clone()),
        (None, Some(sent)) => *sent = None,
        (None, None) => {}
    }
}

/// Adds `r` to `out` if the client was not sent it as it is (`sent`), and records it as sent.
fn record_owed(sent: &mut Sent, r: &Arc<Resource>, out: &mut Vec<Arc<Resource>>) {
    let mark = Some(SentMark::of(r));
    if *sent != mark {
        *sent = mark;
        out.push(r.clone());
    }
}

/// Resources in name order, each variant once.
fn dedup(mut resources: Vec<Arc<Resource>>) -> Vec<Arc<Resource>> {
    // The address last: one resource listed twice ends up side by side whatever the order of
    // variants with the same name and version. (Unstable: no buffer to allocate.)
    resources.sort_unstable_by(|a, b| {
        (a.name(), a.version(), Arc::as_ptr(a)).cmp(&(b.name(), b.version(), Arc::as_ptr(b)))
    });
    resources.dedup_by(|a, b| Arc::ptr_eq(a, b));
    resources
}

/// (count, hash) of a request's subscription, order included.
fn names_digest(names: &Names, subscribe: &Subscribe<'_>) -> (usize, u64) {
    use std::hash::BuildHasher;
    (
        names.len() + subscribe.locators.len(),
        foldhash::fast::FixedState::default().hash_one((
            names,
            subscribe.default,
            subscribe.locators,
        )),
    )
}

/// What the client was sent, for the session's make-before-break rules.
impl SotwSubscription {
    /// Whether the client was sent `name` as the store holds it now.
    pub fn has_sent(&self, name: &Arc<str>, views: &Views) -> bool {
        // The rest is in name order (a view's, or sorted by `dedup`).
        if self.split.as_ref().is_some_and(|split| {
            split
                .rest
                .binary_search_by(|r| (**r.name()).cmp(&**name))
                .is_ok()
        }) {
            return false;
        }
        let explicit = self.keys_of(name).any(|key| {
            views
                .get(&key.0, key.1)
                .is_some_and(|r| self.was_sent(&key.0, key.1, r))
        });
        explicit
            || self.core.wildcard.pid().is_some_and(|w| {
                let view = views.view(w);
                self.sent_view_version.as_ref() == Some(view.version()) && view.get(name).is_some()
            })
    }

    /// The subscribed resources the client was not sent as the store holds them now (all of a
    /// wildcard's when its view changed).
    pub fn unsent(&self, views: &Views) -> Vec<Arc<Resource>> {
        let mut out: Vec<Arc<Resource>> = self
            .names
            .keys()
            .filter_map(|(name, pid)| {
                let r = views.get(name, pid)?;
                (!self.was_sent(name, pid, r)).then(|| r.clone())
            })
            .collect();
        if let Some(w) = self.core.wildcard.pid() {
            let view = views.view(w);
            if self.sent_view_version.as_ref() != Some(view.version()) {
                out.extend(view.iter().cloned());
            }
        }
        out.extend(
            self.split
                .iter()
                .flat_map(|split| split.rest.iter().cloned()),
        );
        out
    }
}

mod request;
mod subscribed;
#[cfg(test)]
mod tests;

use subscribed::Subscribed;

pub use super::Names;
pub use request::{NodeId, SotwRequest};
