//! State of the World: the state machine of one resource type on one stream.
//!
//! It keeps what the client asked for, what it was last sent and what is owed to it; the store
//! state is passed in whenever a response may be due, never kept.

use std::sync::Arc;

use envoy_types::pb::envoy::service::discovery::v3::ResourceLocator;

use super::machine::Machine;
use super::node::ClientNode;
use super::subscription::{reset, Core, OlderNonce};
use super::{Key, Nonce, NonceGen, ParamSetId, RequestKind, Subscribe, SubscriptionChange, Views};
use crate::hash::HashSet;
use crate::store::{Encoding, Resource, TypeSnapshot, View};

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

impl SotwResources {
    /// The resources, in the response's order.
    pub fn iter(&self) -> Box<dyn Iterator<Item = &Arc<Resource>> + '_> {
        match self {
            SotwResources::All(view) => Box::new(view.iter()),
            SotwResources::Some(list) => Box::new(list.iter()),
        }
    }
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
/// keys, counted as at least this many (`SotwMachine::skips_changes`).
const SCAN_MIN_KEYS: usize = 32;

/// The SotW flavor's machine of one type on one stream (see [`Machine`]). Subscriptions are keys:
/// a name and the parameter set its variant is chosen by (see [`Views`]).
#[derive(Debug)]
pub struct SotwMachine {
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
    /// Owed: compare every subscribed key with the store. Every key may have changed: more names
    /// changed than are worth recording one by one, and the next response compares what each key
    /// was sent with the store.
    check_all: bool,
    /// The view version of the last wildcard response: a wildcard keeps no per-name state beyond
    /// the explicit names (whose sent resource is in `names`).
    sent_view_version: Option<Arc<str>>,
    /// The version a reconnecting client said it has, until the first response is decided.
    client_version: Option<Box<str>>,
    /// The rest of a response that goes out in parts (boxed: rare, and every stream has a
    /// machine per type). Responses of types but the full-state ones are split to stay under
    /// the core's size limit.
    split: Option<Box<Split>>,
    /// The subscribed keys that are glob collections (xRFC TP1), found when the subscription
    /// changes; and what the client was last sent of each of their members.
    globs: Vec<Key>,
    members: members::MembersSent,
    /// How many of `members` are subscribed by name too (counted once against the names
    /// budget).
    named_members: usize,
    /// The names the client listed for each xdstp name it spelled non-canonically
    /// (`?b=2&a=1`), by canonical name: subscribed canonically, sent under each of the client's
    /// spellings (and the canonical one when the list or the wildcard has it too). Empty for
    /// every other client: opaque and canonical names never look here.
    spelled: crate::hash::HashMap<Arc<str>, Box<[Arc<str>]>>,
}

impl SotwMachine {
    /// Subscribed names (each once, whatever the number of parameter sets).
    pub fn names(&self) -> impl Iterator<Item = &Arc<str>> {
        let mut seen = HashSet::default();
        self.names
            .keys()
            .map(|(n, _)| n)
            .filter(move |n| seen.insert(*n))
    }

    /// The keys of a name: one per parameter set it is subscribed with (by name, or by a glob
    /// collection it is a member of).
    fn keys_of<'a>(&'a self, name: &'a Arc<str>) -> impl Iterator<Item = Key> + 'a {
        self.core
            .pids
            .iter()
            .filter(|pid| self.names.contains(name, **pid) || self.in_glob(name, **pid))
            .map(move |pid| (name.clone(), *pid))
    }

    /// Whether `name` is a member of a glob collection subscribed with `pid`.
    fn in_glob(&self, name: &str, pid: ParamSetId) -> bool {
        in_glob(&self.globs, name, pid)
    }

    /// The glob collections among the subscribed keys, all counted again: for a first request
    /// whose keys added are not listed (a subscription to most of the type), which lists every
    /// name anyway.
    fn find_all_globs(&mut self) {
        self.globs = self
            .names
            .keys()
            .filter(|(n, _)| crate::xdstp::is_glob(n))
            .map(|(n, p)| (n.clone(), p))
            .collect();
        let globs = &self.globs;
        self.members.retain_globs(|glob| globs.contains(glob));
        let names = &self.names;
        self.named_members = self
            .members
            .keys()
            .filter(|(n, p)| names.contains(n, *p))
            .count();
    }

    /// The glob collections among the subscribed keys, after the subscription changed by
    /// `added` and `removed` keys; the members sent of the globs removed are forgotten, and a
    /// member added or removed by name counts once or apart again. Costs the keys changed (and,
    /// when a glob is removed, a look at its own members sent), not the subscription.
    fn find_globs(&mut self, added: &[Key], removed: &[Key]) {
        let glob = |k: &&Key| crate::xdstp::is_glob(&k.0);
        let globs_removed: Vec<&Key> = removed.iter().filter(glob).collect();
        self.globs.retain(|k| !globs_removed.contains(&k));
        for key in added.iter().filter(glob) {
            if !self.globs.contains(key) {
                self.globs.push(key.clone());
            }
        }
        if !self.members.is_empty() {
            for key in added.iter().chain(removed) {
                if crate::xdstp::is_xdstp(&key.0) && self.members.contains_key(key) {
                    if self.names.contains(&key.0, key.1) {
                        self.named_members += 1;
                    } else {
                        self.named_members = self.named_members.saturating_sub(1);
                    }
                }
            }
            let names = &self.names;
            let mut named_gone = 0;
            for glob in globs_removed {
                if !self.globs.contains(glob) {
                    named_gone += self.members.take_glob(glob, |n| names.contains(n, glob.1));
                }
            }
            self.named_members = self.named_members.saturating_sub(named_gone);
        }
        #[cfg(test)]
        {
            let names = &self.names;
            let named = self
                .members
                .keys()
                .filter(|(n, p)| names.contains(n, *p))
                .count();
            debug_assert_eq!(
                self.named_members, named,
                "named members counted and recounted"
            );
        }
    }

    /// Records that the client was sent `mark` of the member `key` of a glob (`glob`, when its
    /// resource says which; else worked out from the name); what it was sent before, if
    /// anything.
    fn member_sent(&mut self, key: Key, mark: SentMark, glob: Option<&str>) -> Option<SentMark> {
        let named = self.names.contains(&key.0, key.1);
        let before = match glob {
            Some(glob) => self.members.insert_in(glob, key, mark),
            None => self.members.insert(key, mark),
        };
        if before.is_none() && named {
            self.named_members += 1;
        }
        before
    }

    /// Forgets the member `key` of a glob (gone from the store).
    fn member_gone(&mut self, key: &Key) {
        if self.members.remove(key).is_some() && self.names.contains(&key.0, key.1) {
            self.named_members = self.named_members.saturating_sub(1);
        }
    }

    /// The members of the glob keys forced or first owed, recorded as sent, into `out`.
    fn owe_members<'k>(
        &mut self,
        views: &Views,
        keys: impl Iterator<Item = &'k Key>,
        out: &mut Vec<Arc<Resource>>,
    ) {
        for (glob, pid) in keys {
            for r in views.view(*pid).members(glob) {
                self.member_sent((r.name().clone(), *pid), SentMark::of(r), r.collection());
                out.push(r.clone());
            }
        }
    }

    /// A changed member of a subscribed glob, found as `found` (`None`: gone from the store):
    /// into `out` unless the client was sent it as it is.
    fn owe_member(&mut self, key: Key, found: Option<Arc<Resource>>, out: &mut Vec<Arc<Resource>>) {
        match found {
            Some(r) => {
                let mark = SentMark::of(&r);
                let glob = is_own(&r, &key.0).then(|| r.collection()).flatten();
                if self.member_sent(key, mark, glob) != Some(mark) {
                    out.push(r);
                }
            }
            None => self.member_gone(&key),
        }
    }

    /// Whether the client was last sent `resource` (this version of it) for the key (`name`,
    /// `pid`).
    fn was_sent(&self, name: &Arc<str>, pid: ParamSetId, resource: &Resource) -> bool {
        matches!(self.names.get(name, pid), Some(Some(sent)) if *sent == SentMark::of(resource))
    }

    /// Records what the client is sent for each subscribed key: its resource in `views`, or
    /// nothing.
    fn record_all_sent(&mut self, views: &Views) {
        for ((name, pid), sent) in self.names.iter_mut() {
            *sent = views.get(name, pid).map(|r| SentMark::of(r));
        }
    }

    /// Forgets what was owed of the store's changes (after a response).
    fn clear_dirty(&mut self) {
        reset(&mut self.core.dirty);
        self.offered = 0;
        self.check_all = false;
    }

    /// Turns "every key may have changed" into the names that did (for the responses that read
    /// `dirty` name by name).
    fn list_dirty(&mut self, views: &Views) {
        if !std::mem::take(&mut self.check_all) {
            return;
        }
        for (name, pid) in self.names.keys() {
            let now = views.get(name, pid).map(|r| SentMark::of(r));
            if self.names.get(name, pid).copied().flatten() != now {
                self.core.dirty.insert(name.clone());
            }
        }
    }

    /// Whether the response owed waits for a name pending in the store (not known yet, see
    /// `store::pending`): a wildcard's first answer while its whole type is pending; a
    /// full-state type's (listeners, clusters) while a name it subscribes to is pending and
    /// absent, since a response without it would tell the client it does not exist. Other
    /// types send what there is: a missing name of theirs tells a client nothing.
    fn waits_for_pending(&self, views: &Views) -> bool {
        let mut pending = views.pending_names().peekable();
        if pending.peek().is_none() {
            return false;
        }
        if let Some(w) = self.core.wildcard.pid() {
            if self.respond && views.type_pending(w) {
                return true;
            }
        }
        self.full_state
            && pending.any(|name| {
                self.core
                    .pids
                    .iter()
                    .any(|pid| self.names.contains(name, *pid) && views.unknown_yet(name, *pid))
            })
    }

    /// Whether something was owed since the last response, beyond the rest of a split response.
    fn has_news(&self) -> bool {
        self.respond
            || !self.core.forced.is_empty()
            || !self.core.dirty.is_empty()
            || self.check_all
    }
}

/// Whether `r`, found for `name`, is the resource of that name (not found by an alias): its
/// glob collection, as the store worked it out when it built it (`Resource::collection`), is the
/// name's.
fn is_own(r: &Resource, name: &Arc<str>) -> bool {
    Arc::ptr_eq(r.name(), name) || **r.name() == **name
}

/// Whether `name`, a member of the glob collection `collection`, is subscribed by that glob
/// with `pid`: no look at the name.
fn in_glob_of(globs: &[Key], collection: &str, name: &str, pid: ParamSetId) -> bool {
    collection != name && globs.iter().any(|(g, p)| *p == pid && **g == *collection)
}

/// Whether `name` is a member of one of the glob collections `globs` with `pid`.
fn in_glob(globs: &[Key], name: &str, pid: ParamSetId) -> bool {
    !globs.is_empty()
        && crate::xdstp::is_xdstp(name)
        && crate::xdstp::with_collection_of(name, |c| {
            c != name && globs.iter().any(|(g, p)| *p == pid && **g == *c)
        })
        .unwrap_or(false)
}

/// What a client was last sent of a key: the mark of that resource's version ([`SentMark`]), or
/// nothing (not sent, or deleted).
type LastSent = Option<SentMark>;

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

/// The SotW flavor's machine, as the session drives it; what the client was sent
/// (`has_sent`, `unsent`) is for the session's make-before-break rules.
impl Machine for SotwMachine {
    type Request = SotwRequest;
    type Response = SotwResponse;
    const NAME: &'static str = "SotW";

    /// Its glob collections and their members sent (read only when the session is at its
    /// limit of parameter sets).
    fn holds_param_set(&self, pid: ParamSetId) -> bool {
        self.globs.iter().any(|k| k.1 == pid) || self.members.has_param_set(pid)
    }

    /// A machine for `type_url`, nothing subscribed yet.
    fn new(type_url: Arc<str>) -> SotwMachine {
        let full_state = crate::types::is_full_state(&type_url);
        SotwMachine {
            core: Core::new(type_url),
            full_state,
            names: Subscribed::default(),
            last_names: None,
            respond: false,
            offered: 0,
            check_all: false,
            sent_view_version: None,
            client_version: None,
            split: None,
            globs: Vec::new(),
            members: Default::default(),
            named_members: 0,
            spelled: Default::default(),
        }
    }

    fn core(&self) -> &Core {
        &self.core
    }

    fn core_mut(&mut self) -> &mut Core {
        &mut self.core
    }

    fn oversized(r: &SotwResponse) -> Option<usize> {
        r.oversized
    }

    fn takes_ttl(node: &ClientNode) -> bool {
        node.takes_ttl() && node.takes_sotw_wrappers()
    }

    fn node(request: &SotwRequest) -> &[u8] {
        &request.node_raw
    }

    fn request_type_url(request: &SotwRequest) -> &super::Text {
        &request.type_url
    }

    fn locators(request: &SotwRequest) -> (&[ResourceLocator], &[ResourceLocator]) {
        (&request.resource_locators, &[])
    }

    fn initial_versions(_: &SotwRequest) -> usize {
        0
    }

    fn describe(r: &SotwResponse) -> (&str, usize, usize, Nonce) {
        (&r.version_info, r.len(), 0, r.nonce)
    }

    fn updated(r: &SotwResponse) -> &[Arc<Resource>] {
        &r.updated
    }

    fn with_ttl(r: &SotwResponse) -> Vec<Arc<Resource>> {
        match &r.resources {
            SotwResources::All(view) if view.has_ttl() => view.iter().cloned().collect(),
            SotwResources::All(_) => Vec::new(),
            SotwResources::Some(list) => list.to_vec(),
        }
    }

    /// SotW has no unsubscription: a request's list is the whole subscription.
    fn handle(
        &mut self,
        request: &SotwRequest,
        subscribe: &Subscribe<'_>,
        _: &[(String, ParamSetId)],
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

    /// Records names the store changed (added, modified or removed), each counted as offered
    /// (see [`Self::skips_changes`], asked first).
    fn mark_changed<'a>(&mut self, names: impl IntoIterator<Item = &'a Arc<str>>) {
        if self.check_all {
            return;
        }
        let Self {
            core,
            names: subscribed,
            offered,
            ..
        } = self;
        let names = names.into_iter().inspect(|_| *offered += 1);
        let globs = &self.globs;
        if !core.waiting.is_empty() || globs.is_empty() {
            // (Keys that waited are owed again only if subscribed: looked at closely.)
            core.mark_changed(names, |name, pid| {
                subscribed.contains(name, pid) || in_glob(globs, name, pid)
            });
            return;
        }
        // A changed xdstp name is marked without working out its glob collection: the stream is
        // told of one it watches by name or by its collection (or of every name of a type it
        // watches whole), and the response tells which keys it has from the collection its
        // resource carries, worked out once for every stream when the store built it
        // (`owe_glob_changes`). A name no key turns out to have is dropped there.
        core.mark_changed(names, |name, pid| {
            subscribed.contains(name, pid) || crate::xdstp::is_xdstp(name)
        });
    }

    /// Told that `count` changed names (repeats included) are coming, before
    /// [`Self::mark_changed`]: true when the names need not be looked at one by one. Once a
    /// subscription of named keys (no wildcard, not a full-state type) is offered more changed
    /// names since its last response than a quarter of its keys (`SCAN_MIN_KEYS` at least),
    /// it stops recording them and its next response looks at every key instead: under churn a
    /// stream takes the changes of many commits at once (S5 at 2,000 changes a second: some 170
    /// names per response for 100 keys), and looking each up was a quarter of the server's work.
    fn skips_changes(&mut self, count: usize) -> bool {
        if self.check_all {
            return true;
        }
        // (Not with glob collections: their members are not keys a scan reads.)
        let scan = self.core.wildcard.pid().is_none() && !self.full_state && self.globs.is_empty();
        let scan_at = self.names.len().max(SCAN_MIN_KEYS).div_ceil(4);
        if scan && self.offered.saturating_add(count) > scan_at {
            self.check_all = true;
            reset(&mut self.core.dirty);
            return true;
        }
        false
    }

    /// Sends `name` again with the next response, changed or not, if it is subscribed.
    fn resend(&mut self, name: &Arc<str>) {
        let names = &self.names;
        self.core
            .resend(name, |name, pid| names.contains(name, pid));
    }

    /// SotW renews a TTL by sending the resource again: Envoy's SotW subscription drops a
    /// resource without a body before it looks at its TTL, and in LDS/CDS a response without the
    /// resource's body would remove it (see docs/ttl.md).
    fn heartbeat(&mut self, name: &Arc<str>) {
        self.resend(name)
    }

    /// How many keys (name and parameter set) are subscribed, each member of a glob collection
    /// the client was sent counted as one (once, when it is subscribed by name too): a member
    /// added after the subscription counts when it is sent.
    fn key_count(&self) -> usize {
        self.names.len() + self.members.len() - self.named_members.min(self.members.len())
    }

    /// Whether `poll_response` may have something to send.
    fn has_pending(&self) -> bool {
        self.has_news() || self.split.is_some()
    }

    /// Whether the next response is the rest of one that goes out in parts.
    fn in_parts(&self) -> bool {
        self.split.is_some()
    }

    /// The response owed to the client, if any, given the store as this client sees it.
    ///
    /// A response of a type other than the full-state ones (listeners, clusters, scoped routes)
    /// that is larger than the size limit goes out in parts, one per call; every part but the last has the version
    /// `<version>-part-<n>`, so that a client reports the version only once it has all of it.
    /// The rest is sent as computed unless something changes in between (then it is computed
    /// again with the change).
    fn poll_response(&mut self, views: &Views, nonces: &mut NonceGen) -> Option<SotwResponse> {
        if !self.has_pending() || self.waits_for_pending(views) {
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

    /// Whether the client was sent `name` as the store holds it now.
    fn has_sent(&self, name: &Arc<str>, views: &Views) -> bool {
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
    fn unsent(&self, views: &Views) -> Vec<Arc<Resource>> {
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

mod members;
mod request;
mod respond;
mod subscribe;
mod subscribed;
#[cfg(test)]
mod tests;

use respond::Split;
use subscribed::Subscribed;

pub use super::Names;
pub use request::{NodeId, SotwRequest};
