//! Incremental (delta) xDS: the state machine of one resource type on one stream.
//!
//! It tracks what the client has, what it subscribes to and what is owed, so that each response
//! carries only the resources that changed for this client and the names it must drop.
//! Subscriptions are keys: a name (or alias) and the parameter set its variant is chosen by
//! (xRFC TP2). A client that subscribes with dynamic parameters holds variants by
//! `resource_name` (name and constraints): when a key moves to another variant, the new one
//! and the removal of the old one go out in the same response.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use envoy_types::pb::envoy::service::discovery::v3::ResourceLocator;

use super::machine::Machine;
use super::node::ClientNode;
use super::subscription::{Core, OlderNonce};
use super::{
    part_len, request_keys, Key, KeyLookup, Nonce, NonceGen, ParamSetId, RequestKind, Subscribe,
    SubscriptionChange, Views, PART_OVERHEAD,
};
use crate::hash::{HashMap, HashSet};
use crate::params::Constraints;
use crate::store::{Encoding, Resource, TypeSnapshot};
use gather::Owed;
use holdings::{Holdings, PendingBase};
use keys::SubscribedKeys;

/// A variant removed from a client that holds variants by `resource_name`.
pub type RemovedVariant = (Arc<str>, Option<Arc<Constraints>>);

/// The resources of a delta response, read as a slice: nearly every push sends one (a changed
/// cluster, then its endpoints), held without a vector's allocation and free per stream and
/// response (#59).
#[derive(Debug, Clone, Default)]
pub struct Resources(Slots);

#[derive(Debug, Clone)]
enum Slots {
    One(Arc<Resource>),
    Many(Vec<Arc<Resource>>),
}

impl Default for Slots {
    fn default() -> Slots {
        Slots::Many(Vec::new())
    }
}

impl std::ops::Deref for Resources {
    type Target = [Arc<Resource>];

    fn deref(&self) -> &[Arc<Resource>] {
        match &self.0 {
            Slots::One(r) => std::slice::from_ref(r),
            Slots::Many(v) => v,
        }
    }
}

impl std::ops::DerefMut for Resources {
    fn deref_mut(&mut self) -> &mut [Arc<Resource>] {
        match &mut self.0 {
            Slots::One(r) => std::slice::from_mut(r),
            Slots::Many(v) => v,
        }
    }
}

impl From<Vec<Arc<Resource>>> for Resources {
    fn from(v: Vec<Arc<Resource>>) -> Resources {
        Resources(Slots::Many(v))
    }
}

impl From<Arc<Resource>> for Resources {
    fn from(r: Arc<Resource>) -> Resources {
        Resources(Slots::One(r))
    }
}

impl<'a> IntoIterator for &'a Resources {
    type Item = &'a Arc<Resource>;
    type IntoIter = std::slice::Iter<'a, Arc<Resource>>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// One response to send.
#[derive(Debug, Clone)]
pub struct DeltaResponse {
    /// The type URL.
    pub type_url: Arc<str>,
    /// The type's version, for debugging only: clients track versions per resource.
    pub system_version_info: Arc<str>,
    /// The nonce the client answers with.
    pub nonce: Nonce,
    /// The resources new or changed for the client.
    pub resources: Resources,
    /// `resources` already encoded as `resources` entries, one run shared by every stream that
    /// sends it: set when they are the next run of a view in its order, in a first response
    /// that sends the view from its first name (a wildcard, or a client subscribed to every name
    /// up to the last it gets), whole or in parts; a slice of [`View::delta_run`].
    pub(crate) whole: Option<Bytes>,
    /// Every field but the nonce and `control_plane` (the version, the resources, the type
    /// URL), encoded once for every stream that sends the same push ([`crate::store::View::delta_push`]):
    /// set only on a push of resources alone (no removals, heartbeats, aliases).
    pub(crate) shared: Option<Bytes>,
    /// Names to drop (`removed_resources`), for clients that hold resources by name.
    pub removed: Vec<Arc<str>>,
    /// Variants to drop (`removed_resource_names`), for clients that hold them by
    /// `resource_name`; resources then go out named by `resource_name` too.
    pub removed_variants: Vec<RemovedVariant>,
    /// Resources the client holds at their current version whose TTL this response renews:
    /// they go out without a body (spec "TTL": heartbeats).
    pub heartbeats: Vec<Arc<Resource>>,
    /// VHDS aliases subscribed on demand that name no virtual host: each goes out as a resource
    /// named by the alias, with the alias in `aliases` and no body (see [`unresolved_entry`]).
    pub unresolved: Vec<Arc<str>>,
    /// Named by `resource_name` or `name`; with TTLs or without.
    pub encoding: Encoding,
    /// Set (to its size in bytes) on the first response of the stream and type that is over the
    /// size limit because one resource alone is.
    pub oversized: Option<usize>,
    /// Whether the response names the control plane that sent it (`control_plane`): only the
    /// first of its type on the stream does. Envoy keeps the identifier per type until a
    /// response names another, so repeating it (some 30 bytes) on every push, a tenth of a
    /// one-endpoint response, told it nothing.
    pub control_plane: bool,
}

/// The delta (incremental) flavor's machine of one type on one stream (see [`Machine`]).
#[derive(Debug)]
pub struct DeltaMachine {
    /// The type, the wildcard, the parameter sets of `names`, the latest response (see
    /// [`Core`]). Its encoding names resources by `resource_name` and removals by
    /// `removed_resource_names` for TP2 clients.
    core: Core,
    names: SubscribedKeys,
    /// What the client has, as far as the server knows. Filled from
    /// `initial_resource_versions` on reconnect, then by every response.
    has: Holdings,
    /// The view the response being sent records as [`Holdings::base`] (a wildcard client's
    /// first response, which sends the whole view in its order; or a first response to most
    /// names of a view, sent in its order), until every part went out or the rest is computed
    /// again.
    pending_base: Option<PendingBase>,
    /// Owed: compare every resource of the type with what the client has (first request, wildcard
    /// turned on). The same flag as SotW's: there, every subscribed key.
    check_all: bool,
    /// Owed: a response even if empty (first request). The same flag as SotW's.
    respond: bool,
    /// Every key of `names` is owed as if in the core's `forced` (sent even if the client has
    /// it, or reported removed) (a first subscription: 10,000 names would
    /// otherwise be put in a second set, hashed and dropped again for one response).
    forced_all: bool,
    /// Keys owed their resource if still subscribed, else a removal: keys unsubscribed while
    /// the wildcard is on (the client cannot tell whether the wildcard still covers them), and
    /// removals of a split response computed again.
    recheck: HashSet<Key>,
    /// Keys owed a heartbeat (their TTL renewed without a body).
    heartbeat: HashSet<Key>,
    /// The rest of a response that went out in parts (to stay under the core's size limit),
    /// in order.
    split: VecDeque<Owed>,
    /// The members of glob collections (xRFC TP1) the client holds that no name of `names`
    /// subscribes to, by glob, counted as they are sent and removed (a look only at xdstp
    /// names): they count against the stream's names budget ([`Machine::key_count`]) from the
    /// response that sends them, which the session does not send past the budget. A glob
    /// subscribed is walked once, by the response that gathers its members, not a second time
    /// to count them; a request that (un)subscribes an xdstp name changes the count by what it
    /// changes ([`members`]).
    glob_members: members::GlobMembers,
    /// The client's spelling of the xdstp names it subscribed to non-canonically (`?b=2&a=1`),
    /// by canonical name: they are subscribed canonically and answered under the client's
    /// spelling. Empty for every other client: opaque and canonical names never look here.
    spelled: HashMap<Arc<str>, Arc<str>>,
}

impl DeltaMachine {
    /// Subscribed names (each once, whatever the number of parameter sets).
    pub fn names(&self) -> impl Iterator<Item = &Arc<str>> {
        let mut seen = HashSet::default();
        self.names
            .iter()
            .map(|(n, _)| n)
            .filter(move |n| seen.insert(*n))
    }

    /// The version the server believes the client has of `name` (parameter set 0).
    pub fn client_version(&self, name: &str) -> Option<&Arc<str>> {
        self.has.get(&(Arc::from(name), 0)).map(|h| h.version())
    }

    fn subscribed(&self, key: &Key) -> bool {
        self.core.wildcard.pid() == Some(key.1)
            || self.names.contains(key)
            || self.in_glob(&key.0, key.1)
    }

    /// Whether `name` is a member of a glob collection (xRFC TP1) subscribed with `pid`. Only
    /// xdstp names pay for the look.
    fn in_glob(&self, name: &str, pid: ParamSetId) -> bool {
        in_glob(&self.names, name, pid)
    }

    /// Counts `key`, just sent `r`, as a glob member held apart if it is one and the client did
    /// not hold it: its glob as the resource says it (worked out once, when the store built
    /// it), unless `r` was sent for an alias.
    fn count_sent_member(&mut self, r: &Resource, key: &Key) {
        if !(Arc::ptr_eq(r.name(), &key.0) || **r.name() == *key.0) {
            if glob_only(&self.names, key) && !self.has.contains_key(key) {
                self.glob_members.add(key);
            }
            return;
        }
        if let Some(glob) = r.collection() {
            self.count_member_of(glob, key);
        }
    }

    /// [`DeltaMachine::count_sent_member`] of `r` sent under its own name with parameter set
    /// `pid`: the key is made only for a member of a collection (a name's count, shared with
    /// every stream sending it, taken and given back per resource of a wildcard's first answer).
    fn count_sent_own(&mut self, r: &Resource, pid: ParamSetId) {
        if let Some(glob) = r.collection() {
            let key = (r.name().clone(), pid);
            self.count_member_of(glob, &key);
        }
    }

    /// `key`, sent under its own name, a member of collection `glob` held now: counted apart
    /// when only a glob of it subscribes to it and it was not held before.
    fn count_member_of(&mut self, glob: &str, key: &Key) {
        if !self.names.contains(key)
            && in_glob_of(&self.names, glob, &key.0, key.1)
            && !self.has.contains_key(key)
        {
            self.glob_members.add_to(glob, key.1);
        }
    }

    /// The members of glob collections held that no name subscribes to, counted again from
    /// everything the client holds: what [`DeltaMachine::glob_members`] must equal (tests).
    #[cfg(test)]
    pub(crate) fn recount_members(&self) -> usize {
        let names = &self.names;
        self.has.iter().filter(|(k, _)| glob_only(names, k)).count()
    }

    /// The xdstp keys a request subscribes to that may change the count of held glob members
    /// once added: globs not subscribed before, and members not subscribed by name before whose
    /// glob was (each marked `true`). What [`Self::count_subscribed_members`] reads once the
    /// keys are added. Only a request that names an xdstp name makes one, of those keys alone.
    fn xdstp_keys_before(
        &self,
        request: &DeltaRequest,
        subscribe: &Subscribe<'_>,
    ) -> Vec<(Key, bool)> {
        let keys = request_keys(
            &request.resource_names_subscribe,
            *subscribe,
            subscribe.locators,
            true,
        );
        let mut keys: Vec<(Key, bool)> = keys
            .filter(|(name, pid)| {
                crate::xdstp::is_xdstp(name)
                    && !self.names.contains(&(&**name, *pid) as &dyn KeyLookup)
                    && (crate::xdstp::is_glob(name) || self.in_glob(name, *pid))
            })
            .map(|(name, pid)| {
                let member = !crate::xdstp::is_glob(&name);
                ((Arc::from(&*name), pid), member)
            })
            .collect();
        // A name listed twice changes the count once.
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    /// The count of held glob members after a request subscribed the xdstp keys `before`
    /// ([`Self::xdstp_keys_before`]): a held member now subscribed by name whose glob was
    /// subscribed counted apart and no longer does (one lookup); a glob now subscribed counts
    /// its members held and not named ([`Self::held_members_of`]), set once whatever else the
    /// request subscribed with it (a member named beside it, the wildcard). Runs before
    /// anything else the request changes is held (a reconnecting client's claims), which counts
    /// as it is held.
    fn count_subscribed_members(
        &mut self,
        before: Vec<(Key, bool)>,
        current: Option<&Arc<TypeSnapshot>>,
    ) {
        for (key, member) in &before {
            if !self.names.contains(key) {
                continue;
            }
            if !*member {
                // Held through the wildcard of the glob's parameter set, a member may be gone
                // from the store and the stream not told yet: looked for in what it holds.
                let untold = self.core.wildcard.pid() == Some(key.1);
                let held = self.held_members_of(key, current, untold).len();
                self.glob_members.set(key, held);
            } else if self.has.contains_key(key) {
                self.glob_members.sub(key);
            }
        }
    }

    /// The keys of the glob `glob`'s members the client holds and no name subscribes to: its
    /// members in the store, and those it holds whose removal is still owed (changed, to
    /// recheck, waiting, or in the rest of a split response). Costs the glob's members, not
    /// what the client holds, but with a check of everything owed (the wildcard just turned
    /// on, a first request), which walks everything held anyway. With `untold`, also those
    /// held that the store no longer has and whose removal the stream was not told yet (the
    /// request reads the store's newest snapshot, the stream learns of a removal after), found
    /// in what the client holds ([`Holdings::members_of`]): asked when the wildcard of the
    /// glob's parameter set may hold such a member as the glob is subscribed, or when a glob
    /// dropped found fewer members than it counted.
    fn held_members_of(
        &self,
        glob: &Key,
        current: Option<&Arc<TypeSnapshot>>,
        untold: bool,
    ) -> Vec<Key> {
        let mut held = Vec::new();
        let Some((prefix, query)) = crate::xdstp::glob_parts(&glob.0) else {
            return held;
        };
        if self.has.is_empty() {
            return held;
        }
        let pid = glob.1;
        let names = &self.names;
        let apart = |key: &Key| key.1 == pid && !names.contains(key);
        let member = |name: &str| crate::xdstp::is_member(prefix, query, name);
        if self.check_all {
            for (key, _) in self.has.iter() {
                if apart(&key) && member(&key.0) {
                    held.push(key);
                }
            }
            return held;
        }
        let in_store = |name: &str| current.is_some_and(|t| t.get(name).is_some());
        if let Some(current) = current {
            for (name, _) in current
                .entries_from(prefix)
                .map_while(|e| e.0.strip_prefix(prefix).map(|rest| (e.0, rest)))
                .filter(|(_, rest)| crate::xdstp::is_member_rest(query, rest))
            {
                let key = (name.clone(), pid);
                if apart(&key) && self.has.contains_key(&key) {
                    held.push(key);
                }
            }
        }
        // Held, gone from the store, the removal owed: found where it is owed (few).
        let owed = self
            .core
            .dirty
            .iter()
            .chain(self.recheck.iter().map(|k| &k.0))
            .chain(self.core.waiting.keys().map(|k| &k.0))
            .chain(self.split.iter().filter_map(|o| match o {
                Owed::Remove(k) => Some(&k.0),
                _ => None,
            }));
        let mut gone: HashSet<&Arc<str>> = HashSet::default();
        for name in owed {
            if member(name) && !in_store(name) && gone.insert(name) {
                let key = (name.clone(), pid);
                if apart(&key) && self.has.contains_key(&key) {
                    held.push(key);
                }
            }
        }
        if untold {
            for key in self.has.members_of(&glob.0, pid) {
                if !in_store(&key.0) && !gone.contains(&key.0) && apart(&key) {
                    held.push(key);
                }
            }
        }
        held
    }

    /// The keys of a name: one per parameter set it is subscribed with (by name, or by a glob
    /// collection it is a member of), and the wildcard's. Made as they are taken, no list:
    /// every changed name of every stream goes through here, nearly always with one key.
    fn keys_of<'a>(&'a self, name: &'a Arc<str>) -> impl Iterator<Item = Key> + 'a {
        let subscribed = move |pid: ParamSetId| {
            self.names.contains(&(&**name, pid) as &dyn KeyLookup) || self.in_glob(name, pid)
        };
        let wildcard = self
            .core
            .wildcard
            .pid()
            .filter(move |w| !(self.core.pids.contains(w) && subscribed(*w)));
        self.core
            .pids
            .iter()
            .copied()
            .filter(move |pid| subscribed(*pid))
            .chain(wildcard)
            .map(move |pid| (name.clone(), pid))
    }

    /// Whether something was owed since the last response (a request, a store change, a
    /// heartbeat), beyond the rest of a split response.
    fn has_news(&self) -> bool {
        self.respond
            || self.check_all
            || !self.core.forced.is_empty()
            || (self.forced_all && !self.names.is_empty())
            || !self.recheck.is_empty()
            || !self.core.dirty.is_empty()
            || !self.heartbeat.is_empty()
    }

    /// Gives the rest of a split response back to what is owed, to be computed again with what
    /// changed (in the store or the subscription): resources to send are owed to the keys still
    /// subscribed, removals to the keys still subscribed or held, heartbeats to the resources
    /// still held.
    fn fold_rest(&mut self) {
        self.pending_base = None;
        for owed in std::mem::take(&mut self.split) {
            match owed {
                // A key subscribed by name is owed its resource or a removal, as when it was
                // subscribed; one the wildcard covers, its resource if it still exists.
                Owed::Send(r, keys) => {
                    for key in keys.into_keys(&r) {
                        if self.names.contains(&key) {
                            self.core.forced.insert(key);
                        } else if self.core.wildcard.pid() == Some(key.1)
                            || self.in_glob(&key.0, key.1)
                        {
                            self.core.dirty.insert(key.0);
                        }
                    }
                }
                Owed::Remove(key) => {
                    if self.subscribed(&key) || self.has.contains_key(&key) {
                        self.recheck.insert(key);
                    }
                }
                Owed::Beat(r) => self.heartbeat(r.name()),
                Owed::Unresolved(key) => {
                    if self.names.contains(&key) {
                        self.core.forced.insert(key);
                    }
                }
            }
        }
    }
}

impl DeltaMachine {
    /// Records the spellings of the xdstp names a request subscribes to non-canonically, and
    /// forgets those it unsubscribes from. Only names that start with `xdstp:` are looked at
    /// past six bytes; a request names only what it changes.
    fn respell(&mut self, request: &DeltaRequest) {
        for name in request.resource_names_unsubscribe.strs() {
            if let Some(c) = crate::xdstp::canonical(name) {
                self.spelled.remove(&c);
            }
        }
        for name in request.resource_names_subscribe.strs() {
            if let Some(c) = crate::xdstp::canonical(name) {
                self.spelled.insert(c, Arc::from(name));
            } else if !self.spelled.is_empty() && crate::xdstp::is_xdstp(name) {
                // Subscribed by its canonical name now: answered under it.
                self.spelled.remove(name);
            }
        }
    }

    /// A response with the resources and removals of names the client spelled
    /// non-canonically under its spelling. Nothing to do (no lookup) for every other client.
    fn spell(&self, mut response: DeltaResponse) -> DeltaResponse {
        if self.spelled.is_empty() {
            return response;
        }
        let mut renamed = false;
        for r in response
            .resources
            .iter_mut()
            .chain(&mut response.heartbeats)
        {
            if let Some(spelling) = self.spelled.get(r.name()) {
                *r = Arc::new(r.renamed(spelling.clone()));
                renamed = true;
            }
        }
        for name in response
            .removed
            .iter_mut()
            .chain(response.removed_variants.iter_mut().map(|(n, _)| n))
        {
            if let Some(spelling) = self.spelled.get(name) {
                *name = spelling.clone();
            }
        }
        if renamed {
            // The run shared by other streams names the resources canonically.
            response.whole = None;
            response.shared = None;
        }
        response
    }
}

/// Whether `name` is a member of a glob collection (xRFC TP1) `names` subscribes to with `pid`.
/// Only xdstp names pay for the look.
fn in_glob(names: &SubscribedKeys, name: &str, pid: ParamSetId) -> bool {
    crate::xdstp::is_xdstp(name)
        && crate::xdstp::with_collection_of(name, |c| {
            c != name && names.contains(&(c, pid) as &dyn KeyLookup)
        })
        .unwrap_or(false)
}

/// Whether `name`, a member of the glob collection `collection`, is subscribed by that glob
/// with `pid`: one lookup.
fn in_glob_of(names: &SubscribedKeys, collection: &str, name: &str, pid: ParamSetId) -> bool {
    collection != name && names.contains(&(collection, pid) as &dyn KeyLookup)
}

/// Whether `r`, found for `name`, is a member of a glob collection `names` subscribes to with
/// `pid` ([`in_glob`]): the collection as the resource says it (`Resource::collection`, worked
/// out once when the store built it, not by each stream), unless `r` was found by an alias.
fn in_glob_by(names: &SubscribedKeys, r: &Resource, name: &Arc<str>, pid: ParamSetId) -> bool {
    if Arc::ptr_eq(r.name(), name) || **r.name() == **name {
        r.collection()
            .is_some_and(|c| in_glob_of(names, c, name, pid))
    } else {
        in_glob(names, name, pid)
    }
}

/// Whether `key` is subscribed by a glob collection of `names` and not by its own name: a
/// member that counts apart against the names budget. Only xdstp names pay for the look.
fn glob_only(names: &SubscribedKeys, key: &Key) -> bool {
    crate::xdstp::is_xdstp(&key.0) && !names.contains(key) && in_glob(names, &key.0, key.1)
}

/// Whether `names` subscribes to `name` with `pid`, by name or by a glob collection.
fn covers(names: &SubscribedKeys, name: &str, pid: ParamSetId) -> bool {
    names.contains(&(name, pid) as &dyn KeyLookup) || in_glob(names, name, pid)
}

/// The delta flavor's machine, as the session drives it; what the client holds (`has_sent`,
/// `unsent`) is for the session's make-before-break rules.
impl Machine for DeltaMachine {
    type Request = DeltaRequest;
    type Response = DeltaResponse;
    const NAME: &'static str = "delta";

    /// What the client holds and the keys to check again (read only when the session is at its
    /// limit of parameter sets).
    fn holds_param_set(&self, pid: ParamSetId) -> bool {
        self.has.iter().any(|(k, _)| k.1 == pid) || self.recheck.iter().any(|k| k.1 == pid)
    }

    /// A machine for `type_url`, nothing subscribed yet.
    fn new(type_url: Arc<str>) -> DeltaMachine {
        DeltaMachine {
            core: Core::new(type_url),
            names: SubscribedKeys::default(),
            has: Holdings::default(),
            pending_base: None,
            check_all: false,
            respond: false,
            forced_all: false,
            recheck: HashSet::default(),
            heartbeat: HashSet::default(),
            split: VecDeque::new(),
            glob_members: members::GlobMembers::default(),
            spelled: HashMap::default(),
        }
    }

    fn core(&self) -> &Core {
        &self.core
    }

    fn core_mut(&mut self) -> &mut Core {
        &mut self.core
    }

    fn oversized(r: &DeltaResponse) -> Option<usize> {
        r.oversized
    }

    fn takes_ttl(node: &ClientNode) -> bool {
        node.takes_ttl()
    }

    fn node(request: &DeltaRequest) -> &[u8] {
        &request.node_raw
    }

    fn request_type_url(request: &DeltaRequest) -> &super::Text {
        &request.type_url
    }

    fn locators(request: &DeltaRequest) -> (&[ResourceLocator], &[ResourceLocator]) {
        (
            &request.resource_locators_subscribe,
            &request.resource_locators_unsubscribe,
        )
    }

    fn initial_versions(request: &DeltaRequest) -> usize {
        request.initial_resource_versions.len()
    }

    fn describe(r: &DeltaResponse) -> (&str, usize, usize, Nonce) {
        (
            &r.system_version_info,
            r.resources.len(),
            r.removed.len() + r.removed_variants.len(),
            r.nonce,
        )
    }

    fn updated(r: &DeltaResponse) -> &[Arc<Resource>] {
        &r.resources
    }

    fn with_ttl(r: &DeltaResponse) -> Vec<Arc<Resource>> {
        r.resources.iter().chain(&r.heartbeats).cloned().collect()
    }

    /// Takes in a request. Names use `subscribe.default`; `subscribe.locators` are the
    /// request's `resource_locators_subscribe` and `unsubscribe_locators` its
    /// `resource_locators_unsubscribe`, resolved to parameter sets by the session. Subscription
    /// changes are honoured whatever the nonce: the nonce only pairs an ACK or NACK with a
    /// response.
    fn handle(
        &mut self,
        request: &DeltaRequest,
        subscribe: &Subscribe<'_>,
        unsubscribe_locators: &[(String, ParamSetId)],
        current: Option<&Arc<TypeSnapshot>>,
    ) -> (RequestKind, SubscriptionChange) {
        let error = request.error_detail.as_ref().map(|s| s.message.as_str());
        let kind = self
            .core
            .classify(&request.response_nonce, error, OlderNonce::Answers);
        let initial = kind == RequestKind::Initial;
        if initial {
            self.respond = true;
        }
        let wildcard_before = self.core.wildcard.is_on();
        // (Most requests are ACKs, which unsubscribe from nothing: no list made.)
        let unsubscribe_keys: Vec<(Cow<'_, str>, ParamSetId)> =
            if request.resource_names_unsubscribe.is_empty() && unsubscribe_locators.is_empty() {
                Vec::new()
            } else {
                request_keys(
                    &request.resource_names_unsubscribe,
                    *subscribe,
                    unsubscribe_locators,
                    true,
                )
                .collect()
            };
        let names_something = request.resource_names_subscribe.len() + subscribe.locators.len() > 0
            || !unsubscribe_keys.is_empty();
        // The names the request (un)subscribes, each as it was held before, to tell what to
        // (un)watch: only for a request that names something (most are ACKs), and a look at
        // those names alone, not at the 100,000 a stream may hold. While the subscription is
        // most of the type (watched as a whole), no names are needed.
        let before = (names_something && !self.core.dense)
            .then(|| self.held_before(request, subscribe, &unsubscribe_keys));
        // The unsubscriptions' names, read again by `change` (the keys go to `unsubscribe`).
        let unsubscribe_names: Vec<Cow<'_, str>> = match &before {
            Some(_) => unsubscribe_keys.iter().map(|(n, _)| n.clone()).collect(),
            None => Vec::new(),
        };
        // Any name in either list ends the legacy rule: after an unsubscription from `*`, the
        // empty requests that follow (ACKs) must not bring the wildcard back. The legacy
        // wildcard follows the default parameter set (node parameters may change mid-stream).
        let wildcard = self
            .core
            .wildcard
            .legacy_rule(names_something, subscribe.default);
        self.set_wildcard(wildcard);
        // A reconnecting client tells what it already has: only differences are sent.
        let reconnecting = initial && !request.initial_resource_versions.is_empty();
        if names_something {
            self.respell(request);
        }
        // Only an xdstp name (a glob, or a member by name) changes which held keys are glob
        // members held apart: a request of other names leaves the count as it is, with no
        // look. (A name or glob unsubscribed is counted by `unsubscribe`, a key held or no
        // longer held where it is recorded.)
        let xdstp_before = (request
            .resource_names_subscribe
            .strs()
            .any(crate::xdstp::is_xdstp)
            || subscribe
                .locators
                .iter()
                .any(|(n, _)| crate::xdstp::is_xdstp(n)))
        .then(|| self.xdstp_keys_before(request, subscribe));
        let pids_added = self.subscribe(request, subscribe, reconnecting, current);
        if let Some(before) = xdstp_before {
            self.count_subscribed_members(before, current);
        }
        if initial {
            self.claim_wildcard_keys(request, current);
        }
        let unsubscribed = self.unsubscribe(unsubscribe_keys, current);
        self.update_pids(pids_added, unsubscribed);
        let named = request_keys(
            &request.resource_names_subscribe,
            *subscribe,
            subscribe.locators,
            true,
        )
        .map(|(name, _)| name)
        .chain(unsubscribe_names);
        let change = self.change(names_something, wildcard_before, before, named, current);
        (kind, change)
    }

    /// Records names the store changed (added, modified or removed).
    fn mark_changed<'a>(&mut self, names: impl IntoIterator<Item = &'a Arc<str>>) {
        let subscribed = &self.names;
        if !self.core.waiting.is_empty() {
            // (Keys that waited are owed again only if subscribed: looked at closely.)
            self.core
                .mark_changed(names, |name, pid| covers(subscribed, name, pid));
            return;
        }
        // A changed xdstp name is marked without working out its glob collection: the stream is
        // told of one it watches by name or by its collection (or of every name of a type it
        // watches whole), and the response tells which keys it has from the collection its
        // resource carries, worked out once for every stream when the store built it
        // (`poll_changed`). A name no key turns out to have is dropped there.
        self.core.mark_changed(names, |name, pid| {
            subscribed.contains(&(&**name, pid) as &dyn KeyLookup) || crate::xdstp::is_xdstp(name)
        });
    }

    /// Sends `name` again with the next response, changed or not, if it is subscribed.
    fn resend(&mut self, name: &Arc<str>) {
        let names = &self.names;
        self.core.resend(name, |name, pid| covers(names, name, pid));
    }

    /// Renews the TTL of `name` with the next response, if the client holds it: a heartbeat when
    /// it holds the current version, else the resource itself. Envoy takes no heartbeats on VHDS
    /// (it reads a body-less virtual host as an unresolved alias): virtual hosts are renewed by
    /// sending them again.
    fn heartbeat(&mut self, name: &Arc<str>) {
        let keys: Vec<Key> = self
            .keys_of(name)
            .filter(|k| self.has.contains_key(k))
            .collect();
        if *self.core.type_url == *crate::types::VIRTUAL_HOST {
            self.core.forced.extend(keys);
        } else {
            self.heartbeat.extend(keys);
        }
    }

    /// How many keys (name and parameter set) are subscribed, each member of a glob collection
    /// the client was sent counted as one.
    fn key_count(&self) -> usize {
        #[cfg(test)]
        debug_assert_eq!(
            self.glob_members.len(),
            self.recount_members(),
            "the members counted as the requests and responses changed them, and a recount"
        );
        self.names.len() + self.glob_members.len()
    }

    /// Whether a response is owed.
    fn has_pending(&self) -> bool {
        self.has_news() || !self.split.is_empty()
    }

    /// Whether the next response is the rest of one that goes out in parts.
    fn in_parts(&self) -> bool {
        !self.split.is_empty()
    }

    /// The response owed to the client, if any, given the store as this client sees it. A
    /// response larger than the size limit goes out in parts, one per call: the rest stays owed,
    /// in order, and is sent as it was computed unless something changes in between (then it is
    /// computed again with the change).
    fn poll_response(&mut self, views: &Views, nonces: &mut NonceGen) -> Option<DeltaResponse> {
        if !self.has_pending() {
            return None;
        }
        if self.check_all
            && self
                .core
                .wildcard
                .pid()
                .is_some_and(|w| views.type_pending(w))
        {
            // The wildcard's first answer waits while its whole type is pending.
            return None;
        }
        // Nearly every push: only changed names owed, each sent whole.
        #[cfg(test)]
        let short = !changed_tests::GENERAL_ONLY.get();
        #[cfg(not(test))]
        let short = true;
        if let Some(response) = short.then(|| self.poll_changed(views, nonces)).flatten() {
            #[cfg(test)]
            changed_tests::SHORT_WAY.set(changed_tests::SHORT_WAY.get() + 1);
            return response;
        }
        if !self.split.is_empty() && self.has_news() {
            self.fold_rest();
        }
        let waited = self.core.waiting.len();
        let mut owed = if self.split.is_empty() {
            let owed = self.collect(views);
            // Room for what every part of the response will record, taken at once: grown part
            // by part, the map of 10,000 keys was rehashed on each.
            if self.pending_base.is_none() {
                let sends = owed.iter().filter(|o| matches!(o, Owed::Send(..))).count();
                self.has.reserve(sends);
            }
            VecDeque::from(owed)
        } else {
            std::mem::take(&mut self.split)
        };
        // A key that waits for a pending name is answered later: no empty response for it now.
        let respond = std::mem::take(&mut self.respond) && self.core.waiting.len() == waited;
        let overhead = self.core.type_url.len() + self.version(views).len() + PART_OVERHEAD;
        let (count, oversized) = part_len(
            owed.iter().map(|o| self.owed_len(o)),
            self.core.max_response_bytes.saturating_sub(overhead),
        );
        // Nearly every response goes out whole: it is what was gathered, taken as it is (no
        // copy), and the machine keeps no room for a rest (the room of a first response of
        // 10,000 resources, kept until the next response, was 400 KiB per stream and type).
        let part: Vec<Owed> = if count == owed.len() {
            Vec::from(owed)
        } else {
            let part = owed.drain(..count).collect();
            self.split = owed;
            part
        };
        let oversized = self.core.warn_once(oversized);
        let response = self.emit(part, views, nonces, respond, oversized)?;
        Some(self.spell(response))
    }

    /// Whether the client holds `name` as the store holds it now.
    fn has_sent(&self, name: &Arc<str>, views: &Views) -> bool {
        self.keys_of(name).any(|key| {
            views
                .get(&key.0, key.1)
                .is_some_and(|r| self.holds(&key, r))
        })
    }

    /// The subscribed resources the client does not hold as the store holds them now.
    fn unsent(&self, views: &Views) -> Vec<Arc<Resource>> {
        let mut out: Vec<Arc<Resource>> = self
            .names
            .iter()
            .filter_map(|key| {
                let r = views.get(&key.0, key.1)?;
                (!self.holds(key, r)).then(|| r.clone())
            })
            .collect();
        if let Some(w) = self.core.wildcard.pid() {
            out.extend(
                views
                    .view(w)
                    .iter()
                    .filter(|r| !self.holds(&(r.name().clone(), w), r))
                    .cloned(),
            );
        }
        out
    }
}

#[cfg(test)]
mod changed_tests;
mod emit;
mod gather;
mod holdings;
mod keys;
mod members;
mod request;
mod subscribe;
#[cfg(test)]
mod tests;

pub use emit::unresolved_entry;
pub use request::{DeltaRequest, InitialVersions, UNSUBSCRIBE_KEY};
