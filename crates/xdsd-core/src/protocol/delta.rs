//! Incremental (delta) xDS: the state machine of one resource type on one stream.
//!
//! It tracks what the client has, what it subscribes to and what is owed, so that each response
//! carries only the resources that changed for this client and the names it must drop.
//! Subscriptions are keys: a name (or alias) and the parameter set its variant is chosen by
//! (xRFC TP2). A client that subscribes with dynamic parameters holds variants by
//! `resource_name` (name and constraints): when a key moves to another variant, the new one
//! and the removal of the old one go out in the same response.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::hash::{HashMap, HashSet};
use std::sync::Arc;

use bytes::Bytes;

use super::subscription::{reset, Core, OlderNonce, Wildcard, WILDCARD};
use super::{
    intern_key, part_len, request_keys, Key, KeyLookup, Nonce, NonceGen, Pid, RequestKind,
    Subscribe, SubscriptionChange, Views, PART_OVERHEAD,
};
use crate::params::Constraints;
use crate::store::{
    field_len, intern, resource_name, Encoding, Interner, Resource, TypeSnapshot, View,
};
use keys::SubscribedKeys;
use prost::Message as _;

/// A variant removed from a client that holds variants by `resource_name`.
pub type RemovedVariant = (Arc<str>, Option<Arc<Constraints>>);

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
    pub resources: Vec<Arc<Resource>>,
    /// `resources` already encoded as `resources` entries, one run shared by every stream that
    /// sends it: set when they are the next run of a view in its order, in a first response
    /// that sends the view from its first name (a wildcard, or a client subscribed to every name
    /// up to the last it gets), whole or in parts; a slice of [`View::delta_run`].
    pub(crate) whole: Option<Bytes>,
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

/// What the client holds for a key: the variant sent, or what a reconnecting client said it has
/// (a version of no variant the store holds). One pointer: a stream may hold 100,000 keys.
#[derive(Debug, Clone)]
enum Held {
    Sent(Arc<Resource>),
    /// (name, version), unconstrained.
    Claimed(Box<(Arc<str>, Arc<str>)>),
}

impl Held {
    fn of(r: &Arc<Resource>) -> Held {
        Held::Sent(r.clone())
    }

    /// The name the client holds it under: the resource's, also when subscribed by an alias.
    fn name(&self) -> &Arc<str> {
        match self {
            Held::Sent(r) => r.name(),
            Held::Claimed(c) => &c.0,
        }
    }

    fn constraints(&self) -> Option<&Arc<Constraints>> {
        match self {
            Held::Sent(r) => r.constraints(),
            Held::Claimed(_) => None,
        }
    }
}

/// What the client holds for a key, borrowed: from [`Holdings::over`] or from a view.
#[derive(Debug, Clone, Copy)]
enum HeldRef<'a> {
    Sent(&'a Arc<Resource>),
    Claimed(&'a (Arc<str>, Arc<str>)),
}

impl<'a> HeldRef<'a> {
    fn of(held: &'a Held) -> HeldRef<'a> {
        match held {
            Held::Sent(r) => HeldRef::Sent(r),
            Held::Claimed(c) => HeldRef::Claimed(c),
        }
    }

    fn name(self) -> &'a Arc<str> {
        match self {
            HeldRef::Sent(r) => r.name(),
            HeldRef::Claimed(c) => &c.0,
        }
    }

    fn version(self) -> &'a Arc<str> {
        match self {
            HeldRef::Sent(r) => r.version(),
            HeldRef::Claimed(c) => &c.1,
        }
    }

    fn constraints(self) -> Option<&'a Arc<Constraints>> {
        match self {
            HeldRef::Sent(r) => r.constraints(),
            HeldRef::Claimed(_) => None,
        }
    }

    fn to_held(self) -> Held {
        match self {
            HeldRef::Sent(r) => Held::Sent(r.clone()),
            HeldRef::Claimed(c) => Held::Claimed(Box::new(c.clone())),
        }
    }
}

/// A view a wildcard client was sent whole, in its order: it holds the view's resource of every
/// name up to `last` (all of them once every part of the response went out).
#[derive(Debug)]
struct Base {
    pid: Pid,
    view: Arc<View>,
    last: Arc<str>,
}

/// What the client holds, per key. A wildcard client's first response sends a whole view: that is
/// recorded as the view itself (one pointer for 10,000 keys, no per-key entry, no count taken on
/// each resource), and what the client holds otherwise since (a key sent again, removed) in
/// `over`, which always wins. A first response to most names of a view (every cluster by name)
/// is recorded the same way, the view's names it did not send held as `None` in `over`.
#[derive(Debug, Default)]
struct Holdings {
    /// Keys held otherwise than `base` says: `Some` the variant held, `None` nothing.
    over: HashMap<Key, Option<Held>>,
    base: Option<Base>,
}

impl Holdings {
    fn is_empty(&self) -> bool {
        self.base.is_none() && self.over.is_empty()
    }

    /// What `base` says the client holds for `key`.
    fn in_base(&self, key: &Key) -> Option<&Arc<Resource>> {
        let base = self.base.as_ref()?;
        if key.1 != base.pid || *key.0 > *base.last {
            return None;
        }
        base.view.get(&key.0)
    }

    fn get(&self, key: &Key) -> Option<HeldRef<'_>> {
        if !self.over.is_empty() {
            if let Some(held) = self.over.get(key) {
                return held.as_ref().map(HeldRef::of);
            }
        }
        self.in_base(key).map(HeldRef::Sent)
    }

    fn contains_key(&self, key: &Key) -> bool {
        self.get(key).is_some()
    }

    /// Records that the client holds `held` for `key`; what it held before.
    fn insert(&mut self, key: Key, held: Held) -> Option<Held> {
        let before = self.get(&key).map(HeldRef::to_held);
        self.over.insert(key, Some(held));
        before
    }

    /// Records that the client holds nothing for `key`; what it held before.
    fn remove(&mut self, key: &Key) -> Option<Held> {
        let before = self.get(key).map(HeldRef::to_held);
        if self.in_base(key).is_some() {
            self.over.insert(key.clone(), None);
        } else {
            self.over.remove(key);
        }
        before
    }

    fn reserve(&mut self, additional: usize) {
        self.over.reserve(additional);
    }

    /// Every key held, with what it holds.
    fn iter(&self) -> impl Iterator<Item = (Key, HeldRef<'_>)> {
        let over = self
            .over
            .iter()
            .filter_map(|(k, h)| h.as_ref().map(|h| (k.clone(), HeldRef::of(h))));
        let base = self.base.iter().flat_map(move |b| {
            b.view
                .iter()
                .take_while(move |r| **r.name() <= *b.last)
                .map(move |r| ((r.name().clone(), b.pid), r))
                .filter(move |(k, _)| !self.over.contains_key(k))
                .map(|(k, r)| (k, HeldRef::Sent(r)))
        });
        over.chain(base)
    }

    /// Keeps only the keys `keep` says, each held as an entry of its own.
    fn retain(&mut self, mut keep: impl FnMut(&Key) -> bool) {
        if let Some(base) = self.base.take() {
            for r in base.view.iter().take_while(|r| **r.name() <= *base.last) {
                let key = (r.name().clone(), base.pid);
                if keep(&key) && !self.over.contains_key(&key) {
                    self.over.insert(key, Some(Held::of(r)));
                }
            }
        }
        self.over.retain(|k, h| h.is_some() && keep(k));
    }
}

/// One type's subscription on an incremental stream.
#[derive(Debug)]
pub struct DeltaSubscription {
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
    /// turned on); an answer even if empty (first request).
    check_all: bool,
    answer: bool,
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
    rest: VecDeque<Owed>,
}

/// A response being sent that records what it sends as [`Holdings::base`].
#[derive(Debug)]
struct PendingBase {
    pid: Pid,
    view: Arc<View>,
    /// The view's names it does not send (not subscribed), in the view's order: each is
    /// recorded as not held (an entry of `over`) once the base reaches past it, so that the
    /// base holds what was sent and nothing else. Empty for a wildcard client.
    gaps: VecDeque<Arc<str>>,
    /// Where in the view the next part starts, while the parts sent so far were every resource
    /// of the view from its first, each as the view's own and nothing else: such a part is a run
    /// of the view's encoding, shared by every stream that sends it (see [`DeltaResponse`]'s
    /// `whole`). `None` once a part was not, or when the response skips a name of the view
    /// before one it sends (names after the last it sends may be skipped: a client subscribed
    /// to the first names of a view, as Envoy is after the first part of a split CDS response).
    run: Option<usize>,
}

/// A variant in a response: (name, version).
type VariantId = (Arc<str>, Arc<str>);

/// The keys a resource is sent for: nearly always one, held without an allocation (a first
/// response of 10,000 resources made 10,000 one-key vectors).
#[derive(Debug)]
enum Keys {
    One(Key),
    /// The one key of the resource's own name with this parameter set, made only when needed:
    /// a resource sent in a view's order and recorded as the view needs none (making it takes a
    /// count on the name, shared with every stream).
    Own(Pid),
    Many(Vec<Key>),
}

impl Keys {
    /// Adds `other`'s keys; both are keys of `r`.
    fn append(&mut self, r: &Arc<Resource>, other: Keys) {
        if let Keys::Many(keys) = self {
            keys.extend(other.into_keys(r));
            return;
        }
        let all: Vec<Key> = std::mem::replace(self, Keys::Many(Vec::new()))
            .into_keys(r)
            .chain(other.into_keys(r))
            .collect();
        *self = Keys::Many(all);
    }

    /// The keys, of `r`.
    fn iter<'a>(&'a self, r: &Arc<Resource>) -> impl Iterator<Item = Cow<'a, Key>> {
        let (one, many): (Option<Cow<'a, Key>>, &'a [Key]) = match self {
            Keys::One(key) => (Some(Cow::Borrowed(key)), &[]),
            Keys::Own(pid) => (Some(Cow::Owned((r.name().clone(), *pid))), &[]),
            Keys::Many(keys) => (None, &keys[..]),
        };
        one.into_iter().chain(many.iter().map(Cow::Borrowed))
    }

    /// The keys, of `r`, by value.
    fn into_keys(self, r: &Arc<Resource>) -> impl Iterator<Item = Key> {
        let (one, many) = match self {
            Keys::One(key) => (Some(key), Vec::new()),
            Keys::Own(pid) => (Some((r.name().clone(), pid)), Vec::new()),
            Keys::Many(keys) => (None, keys),
        };
        one.into_iter().chain(many)
    }
}

/// One thing a response owes: a resource (for the keys that resolve to it), a removal, a
/// heartbeat.
#[derive(Debug)]
enum Owed {
    Send(Arc<Resource>, Keys),
    Remove(Key),
    Beat(Arc<Resource>),
    /// VHDS: an alias subscribed on demand that names no virtual host.
    Unresolved(Key),
}

/// What a response owes, as [`DeltaSubscription::collect`] gathers it. Keys are what the client
/// subscribed by (a name or an alias, and a parameter set); the response holds each variant
/// once, whatever the number of keys that lead to it.
#[derive(Debug, Default)]
struct Gathered {
    /// Only [`Owed::Send`]s, (resource, keys) pairs put in (name, version) order: the rest of
    /// what is owed is added to them at the end, so that the response is put together in one
    /// vector (10,000 resources were copied through three).
    sends: Vec<Owed>,
    removed: BTreeSet<Key>,
    /// VHDS aliases that name no virtual host.
    unresolved: BTreeSet<Key>,
    beats: BTreeMap<VariantId, Arc<Resource>>,
}

impl Gathered {
    /// Owes `r` to `keys`. Takes the keys: the loops over a view make one each, moved here
    /// rather than cloned (every clone of a name is an atomic count shared with every other
    /// stream).
    fn send(&mut self, keys: Keys, r: &Arc<Resource>) {
        self.sends.push(Owed::Send(r.clone(), keys));
    }

    /// Puts the resources in (name, version) order, each variant once for every key that
    /// leads to it, unless they were all read in a view's order (`only_dense`: then each comes
    /// once, sorted); drops the heartbeats of the variants sent.
    fn put_in_order(&mut self, only_dense: bool) {
        let by_variant = |a: &Owed, b: &Owed| owed_variant(a).cmp(&owed_variant(b));
        let sends = &mut self.sends;
        if !only_dense && !sends.is_sorted_by(|a, b| by_variant(a, b).is_le()) {
            // Stable: of two variants with one name and version, the first found is sent.
            sends.sort_by(by_variant);
        }
        if !only_dense {
            sends.dedup_by(|later, kept| match (later, kept) {
                (Owed::Send(r, keys), Owed::Send(first, held))
                    if first.name() == r.name() && first.version() == r.version() =>
                {
                    let keys = std::mem::replace(keys, Keys::Many(Vec::new()));
                    held.append(r, keys);
                    true
                }
                _ => false,
            });
        }
        self.beats.retain(|(name, version), _| {
            sends
                .binary_search_by(|o| match o {
                    Owed::Send(r, _) => (r.name(), r.version()).cmp(&(name, version)),
                    _ => std::cmp::Ordering::Less,
                })
                .is_err()
        });
    }

    /// Everything owed, in the order it goes out: resources by name, removals, heartbeats,
    /// unresolved aliases.
    fn into_owed(self) -> Vec<Owed> {
        let mut owed = self.sends;
        owed.reserve(self.removed.len() + self.beats.len() + self.unresolved.len());
        owed.extend(self.removed.into_iter().map(Owed::Remove));
        owed.extend(self.beats.into_values().map(Owed::Beat));
        owed.extend(self.unresolved.into_iter().map(Owed::Unresolved));
        owed
    }
}

/// One response as [`DeltaSubscription::emit`] puts it together.
#[derive(Debug, Default)]
struct Part {
    resources: Vec<Arc<Resource>>,
    /// Keys removed (by name, or by the variant they held).
    removed: BTreeSet<Key>,
    heartbeats: Vec<Arc<Resource>>,
    unresolved: Vec<Arc<str>>,
    /// Variants re-sent keys held before, which the client may stop holding.
    moved: Vec<RemovedVariant>,
    /// Where in `resources` the last resource that extends the base is (see `extends_base`).
    base_last: Option<usize>,
    /// How many resources were sent as the view's own.
    of_base: usize,
}

/// How [`DeltaSubscription::in_view_order`] read the forced keys of one view in its order.
#[derive(Debug, Default)]
struct ViewOrder {
    /// The parameter set of that view (`None`: not read in a view's order).
    pid: Option<Pid>,
    /// How many resources it owes.
    covered: usize,
    /// The view recorded as [`Holdings::base`], if the response sends nothing else.
    base: Option<PendingBase>,
}

impl DeltaSubscription {
    /// A subscription to `type_url` with nothing subscribed yet.
    pub fn new(type_url: Arc<str>) -> DeltaSubscription {
        DeltaSubscription {
            core: Core::new(type_url),
            names: SubscribedKeys::default(),
            has: Holdings::default(),
            pending_base: None,
            check_all: false,
            answer: false,
            forced_all: false,
            recheck: HashSet::default(),
            heartbeat: HashSet::default(),
            rest: VecDeque::new(),
        }
    }

    /// Responses larger than this are split into parts (see `part_len`).
    pub fn set_max_response_bytes(&mut self, bytes: usize) {
        self.core.max_response_bytes = bytes;
    }

    /// Resources and removals name variants by `resource_name` from now on (a TP2 client).
    pub fn set_named(&mut self, named: bool) {
        self.core.encoding.named = named;
    }

    /// Resources go out with their TTLs (a client that takes them).
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
            .iter()
            .map(|(n, _)| n)
            .filter(move |n| seen.insert(*n))
    }

    /// The version the server believes the client has of `name` (parameter set 0).
    pub fn client_version(&self, name: &str) -> Option<&Arc<str>> {
        self.has.get(&(Arc::from(name), 0)).map(|h| h.version())
    }

    fn subscribed(&self, key: &Key) -> bool {
        self.core.wildcard.pid() == Some(key.1) || self.names.contains(key)
    }

    /// The keys of a name: one per parameter set it is subscribed with, and the wildcard's.
    fn keys_of(&self, name: &Arc<str>) -> Vec<Key> {
        let mut keys: Vec<Key> = self
            .core
            .pids
            .iter()
            .map(|pid| (name.clone(), *pid))
            .filter(|key| self.names.contains(key))
            .collect();
        if let Some(w) = self.core.wildcard.pid() {
            if !keys.iter().any(|(_, p)| *p == w) {
                keys.push((name.clone(), w));
            }
        }
        keys
    }

    /// Takes in a request for this type, subscribed by plain names with parameter set 0.
    pub fn handle_request(
        &mut self,
        request: &DeltaRequest,
        current: Option<&Arc<TypeSnapshot>>,
    ) -> (RequestKind, SubscriptionChange) {
        self.handle(request, &Subscribe::PLAIN, &[], current)
    }

    /// Takes in a request. Names use `subscribe.default`; `subscribe.locators` are the
    /// request's `resource_locators_subscribe` and `unsubscribe_locators` its
    /// `resource_locators_unsubscribe`, resolved to parameter sets by the session. Subscription
    /// changes are honoured whatever the nonce: the nonce only pairs an ACK or NACK with a
    /// response.
    pub fn handle(
        &mut self,
        request: &DeltaRequest,
        subscribe: &Subscribe<'_>,
        unsubscribe_locators: &[(String, Pid)],
        current: Option<&Arc<TypeSnapshot>>,
    ) -> (RequestKind, SubscriptionChange) {
        let error = request.error_detail.as_ref().map(|s| s.message.as_str());
        let kind = self
            .core
            .classify(&request.response_nonce, error, OlderNonce::Answers);
        let initial = kind == RequestKind::Initial;
        if initial {
            self.answer = true;
        }
        let wildcard_before = self.core.wildcard.is_on();
        let unsubscribe_keys: Vec<(Cow<'_, str>, Pid)> = request_keys(
            &request.resource_names_unsubscribe,
            subscribe.default,
            unsubscribe_locators,
        )
        .collect();
        let names_something = request.resource_names_subscribe.len() + subscribe.locators.len() > 0
            || !unsubscribe_keys.is_empty();
        // The names subscribed before, to tell what to (un)watch: only for a request that names
        // something. Most requests are ACKs, and a stream may hold 100,000 names.
        // While the subscription is most of the type (watched as a whole), no names are needed.
        let names_before: Option<HashSet<Arc<str>>> = (names_something && !self.core.dense)
            .then(|| self.names.iter().map(|(n, _)| n.clone()).collect());
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
        let pids_added = self.subscribe(request, subscribe, reconnecting, current);
        if initial {
            self.claim_wildcard_keys(request, current);
        }
        let unsubscribed = self.unsubscribe(unsubscribe_keys);
        self.update_pids(pids_added, unsubscribed);
        let change = self.change(names_something, wildcard_before, names_before, current);
        (kind, change)
    }

    /// Takes in the keys a request subscribes to (`*` turns the wildcard on): owed their
    /// resource even if the client seems to have it, unless a reconnecting client says which
    /// version it has. The parameter sets of the keys added.
    fn subscribe(
        &mut self,
        request: &DeltaRequest,
        subscribe: &Subscribe<'_>,
        reconnecting: bool,
        current: Option<&Arc<TypeSnapshot>>,
    ) -> Vec<Pid> {
        let subscribe_len = request.resource_names_subscribe.len() + subscribe.locators.len();
        if subscribe_len == 0 {
            // (A request that subscribes to nothing, an ACK: shared keys stay shared.)
            return Vec::new();
        }
        // No key subscribed yet, and none the client says it holds: every key subscribed is new,
        // owed through `forced_all` rather than one by one.
        if self.names.is_empty() && !reconnecting {
            self.forced_all = true;
        }
        if !self.forced_all {
            self.core.forced.reserve(subscribe_len);
        }
        // A subscription of plain names only, to keys made by such subscriptions alone: the
        // keys it makes are those of any other stream that subscribed with the same requests
        // (`SubscribedKeys`).
        let plain = !reconnecting && self.recheck.is_empty() && subscribe.locators.is_empty();
        let parent = plain.then(|| self.names.digest()).flatten();
        let shared = parent.and_then(|_| {
            self.names
                .with(&request.resource_names_subscribe, subscribe.default)
        });
        // Either keys another stream made of the same requests, which hold every key subscribed,
        // or every key subscribed already held (a client asking again for what it may have
        // forgotten): the keys are taken as they are (still shared, if they are).
        let mut pids_added = Vec::new();
        if let Some(keys) = shared {
            self.names = keys;
            pids_added.push(subscribe.default);
        } else if reconnecting || self.adds_keys(&request.resource_names_subscribe, subscribe) {
            return self.add_keys(request, subscribe, reconnecting, parent, current);
        }
        self.force_held_keys(request, subscribe, current);
        pids_added
    }

    /// Owes the keys a request subscribes to again, which are all held: even those the client
    /// seems to have; with `forced_all` every key is owed anyway, and none is looked up unless
    /// one waits for a recheck.
    fn force_held_keys(
        &mut self,
        request: &DeltaRequest,
        subscribe: &Subscribe<'_>,
        current: Option<&Arc<TypeSnapshot>>,
    ) {
        if self.forced_all && self.recheck.is_empty() {
            return;
        }
        let mut interner = Interner::new(current.map(|t| &**t));
        let keys = request_keys(
            &request.resource_names_subscribe,
            subscribe.default,
            subscribe.locators,
        );
        for (name, pid) in keys {
            let key: Key = (intern_key(&mut interner, &*self.names, &name, pid), pid);
            if !self.recheck.is_empty() {
                self.recheck.remove(&key);
            }
            if !self.forced_all {
                self.core.forced.insert(key);
            }
        }
    }

    /// Adds the keys a request subscribes to (some are new, or the client is reconnecting),
    /// and shares them with the streams that subscribed with the same requests (`parent`: the
    /// digest of the keys before, when they were made by plain requests alone). The parameter
    /// sets of the keys added.
    fn add_keys(
        &mut self,
        request: &DeltaRequest,
        subscribe: &Subscribe<'_>,
        reconnecting: bool,
        parent: Option<u64>,
        current: Option<&Arc<TypeSnapshot>>,
    ) -> Vec<Pid> {
        let lookup = |name: &str| current.map(|t| t.variants(name)).unwrap_or(&[]);
        let mut interner = Interner::new(current.map(|t| &**t));
        // Not collected: a first request names 10,000.
        let keys = request_keys(
            &request.resource_names_subscribe,
            subscribe.default,
            subscribe.locators,
        );
        let mut pids_added: Vec<Pid> = Vec::new();
        let names = self.names.keys_mut();
        names.reserve(request.resource_names_subscribe.len() + subscribe.locators.len());
        let mut wildcard = None;
        for (name, pid) in keys {
            if name == WILDCARD {
                wildcard = Some(pid);
                continue;
            }
            if !pids_added.contains(&pid) {
                pids_added.push(pid);
            }
            let key: Key = (intern_key(&mut interner, &*names, &name, pid), pid);
            if !self.recheck.is_empty() {
                self.recheck.remove(&key);
            }
            if reconnecting {
                if let Some(version) = request.initial_resource_versions.get(&*name) {
                    names.insert(key.clone());
                    self.has
                        .insert(key.clone(), held(&key.0, lookup(&name), version));
                    // Compared with the store at the next response, like a change.
                    self.core.dirty.insert(key.0);
                    continue;
                }
            }
            // Sent even if the client seems to have it: it may have forgotten it. Moved, not
            // cloned, when every key is owed anyway (a count shared with every stream).
            if self.forced_all {
                names.insert(key);
            } else {
                names.insert(key.clone());
                self.core.forced.insert(key);
            }
        }
        if let Some(pid) = wildcard {
            self.set_wildcard(Wildcard::Explicit(pid));
        }
        if let (Some(parent), None) = (parent, wildcard) {
            if pids_added == [subscribe.default] {
                self.names
                    .share(parent, &request.resource_names_subscribe, subscribe.default);
            }
        }
        pids_added
    }

    /// What a reconnecting wildcard client says it holds (`initial_resource_versions`) of the
    /// names it did not subscribe to by name: held as the wildcard's keys.
    fn claim_wildcard_keys(&mut self, request: &DeltaRequest, current: Option<&Arc<TypeSnapshot>>) {
        let Some(w) = self.core.wildcard.pid() else {
            return;
        };
        let lookup = |name: &str| current.map(|t| t.variants(name)).unwrap_or(&[]);
        for (name, version) in &request.initial_resource_versions {
            let key = (intern(current.map(|t| &**t), name), w);
            let name_of = key.0.clone();
            if !self.has.contains_key(&key) {
                self.has.insert(key, held(&name_of, lookup(name), version));
            }
        }
    }

    /// Takes in the keys a request unsubscribes from (`*` turns the wildcard off): whether any
    /// was subscribed.
    fn unsubscribe(&mut self, keys: Vec<(Cow<'_, str>, Pid)>) -> bool {
        let mut unsubscribed = false;
        for (name, pid) in keys {
            if name == WILDCARD {
                self.set_wildcard(Wildcard::Off);
                continue;
            }
            // Phantom unsubscriptions (names not subscribed) are ignored (and leave shared keys
            // shared).
            let lookup = &(&*name, pid) as &dyn KeyLookup;
            if !self.names.contains(lookup) {
                continue;
            }
            let Some(key) = self.names.keys_mut().take(lookup) else {
                continue;
            };
            unsubscribed = true;
            self.core.forced.remove(&key);
            if self.core.wildcard.is_on() {
                self.recheck.insert(key);
            } else {
                self.has.remove(&key);
            }
        }
        unsubscribed
    }

    /// The distinct parameter sets of the keys, after `added` were added, or counted again when
    /// some key was `unsubscribed`.
    fn update_pids(&mut self, added: Vec<Pid>, unsubscribed: bool) {
        if unsubscribed {
            let mut pids: Vec<Pid> = Vec::new();
            for (_, p) in self.names.iter() {
                if !pids.contains(p) {
                    pids.push(*p);
                }
            }
            pids.sort_unstable();
            self.core.pids = pids;
        } else if !added.is_empty() {
            for p in added {
                if !self.core.pids.contains(&p) {
                    self.core.pids.push(p);
                }
            }
            self.core.pids.sort_unstable();
        }
    }

    /// What a request changed of what the stream watches (`names_before`: the names subscribed
    /// before it, when it named something and the keys were not dense); what is left of a
    /// split response is computed again with the change.
    fn change(
        &mut self,
        names_something: bool,
        wildcard_before: bool,
        names_before: Option<HashSet<Arc<str>>>,
        current: Option<&Arc<TypeSnapshot>>,
    ) -> SubscriptionChange {
        let mut change = SubscriptionChange::default();
        if self.core.wildcard.is_on() != wildcard_before {
            change.wildcard = Some(self.core.wildcard.is_on());
        }
        if names_something || change.wildcard.is_some() {
            self.fold_rest();
        }
        if names_something {
            let total = current.map_or(0, |t| t.len());
            let dense = super::dense(self.core.dense, self.names.len(), total);
            if let (Some(names_before), false) = (names_before, dense) {
                let names_after: HashSet<Arc<str>> =
                    self.names.iter().map(|(n, _)| n.clone()).collect();
                change.added = names_after.difference(&names_before).cloned().collect();
                change.removed = names_before.difference(&names_after).cloned().collect();
                change.added.sort();
                change.removed.sort();
            }
            change.set_dense(
                &mut self.core.dense,
                dense,
                self.names.iter().map(|(n, _)| n),
            );
        }
        change
    }

    /// Whether subscribing to `names` (and `subscribe.locators`) adds a key or the wildcard.
    fn adds_keys(&self, names: &super::Names, subscribe: &Subscribe<'_>) -> bool {
        request_keys(names, subscribe.default, subscribe.locators).any(|(name, pid)| {
            name == WILDCARD || !self.names.contains(&(&*name, pid) as &dyn KeyLookup)
        })
    }

    /// Takes the wildcard state `to`: a wildcard turned on (or onto another parameter set) is
    /// owed every resource the client does not hold; one turned off drops what only it gave.
    fn set_wildcard(&mut self, to: Wildcard) {
        let before = self.core.wildcard.pid();
        self.core.wildcard = to;
        if to.pid() == before {
            return;
        }
        if to.is_on() {
            self.check_all = true;
        } else {
            // The client drops what only the wildcard gave it.
            let names = &self.names;
            self.has.retain(|k| names.contains(k));
            self.recheck.clear();
        }
    }

    /// Sends `name` again with the next response, changed or not, if it is subscribed.
    pub fn resend(&mut self, name: &Arc<str>) {
        let names = &self.names;
        self.core.resend(name, |name, pid| {
            names.contains(&(&**name, pid) as &dyn KeyLookup)
        });
    }

    /// Renews the TTL of `name` with the next response, if the client holds it: a heartbeat when
    /// it holds the current version, else the resource itself. Envoy takes no heartbeats on VHDS
    /// (it reads a body-less virtual host as an unresolved alias): virtual hosts are renewed by
    /// sending them again.
    pub fn heartbeat(&mut self, name: &Arc<str>) {
        let keys = self
            .keys_of(name)
            .into_iter()
            .filter(|k| self.has.contains_key(k));
        if *self.core.type_url == *crate::types::VIRTUAL_HOST {
            self.core.forced.extend(keys);
        } else {
            self.heartbeat.extend(keys);
        }
    }

    /// Records names the store changed (added, modified or removed).
    pub fn mark_changed<'a>(&mut self, names: impl IntoIterator<Item = &'a Arc<str>>) {
        let subscribed = &self.names;
        self.core.mark_changed(names, |name, pid| {
            subscribed.contains(&(&**name, pid) as &dyn KeyLookup)
        });
    }

    /// Whether the next response is the rest of one that goes out in parts.
    pub fn in_parts(&self) -> bool {
        !self.rest.is_empty()
    }

    /// Whether a response is owed.
    pub fn has_pending(&self) -> bool {
        self.answer
            || self.check_all
            || !self.core.forced.is_empty()
            || (self.forced_all && !self.names.is_empty())
            || !self.recheck.is_empty()
            || !self.core.dirty.is_empty()
            || !self.heartbeat.is_empty()
            || !self.rest.is_empty()
    }

    /// The response owed to the client, if any, given the store as this client sees it. A
    /// response larger than the size limit goes out in parts, one per call: the rest stays owed,
    /// in order, and is sent as it was computed unless something changes in between (then it is
    /// computed again with the change).
    pub fn poll_response(&mut self, views: &Views, nonces: &mut NonceGen) -> Option<DeltaResponse> {
        if !self.has_pending() {
            return None;
        }
        if !self.rest.is_empty() && self.has_news() {
            self.fold_rest();
        }
        let mut owed = if self.rest.is_empty() {
            let owed = self.collect(views);
            // Room for what every part of the response will record, taken at once: grown part
            // by part, the map of 10,000 keys was rehashed on each.
            if self.pending_base.is_none() {
                let sends = owed.iter().filter(|o| matches!(o, Owed::Send(..))).count();
                self.has.reserve(sends);
            }
            VecDeque::from(owed)
        } else {
            std::mem::take(&mut self.rest)
        };
        let answer = std::mem::take(&mut self.answer);
        let overhead = self.core.type_url.len() + self.version(views).len() + PART_OVERHEAD;
        let (count, oversized) = part_len(
            owed.iter().map(|o| self.owed_len(o)),
            self.core.max_response_bytes.saturating_sub(overhead),
        );
        let part: Vec<Owed> = owed.drain(..count).collect();
        self.rest = owed;
        let oversized = self.core.warn_once(oversized);
        self.emit(part, views, nonces, answer, oversized)
    }

    /// Whether something was owed since the last response (a request, a store change, a
    /// heartbeat), beyond the rest of a split response.
    fn has_news(&self) -> bool {
        self.answer
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
        for owed in std::mem::take(&mut self.rest) {
            match owed {
                // A key subscribed by name is owed its resource or a removal, as when it was
                // subscribed; one the wildcard covers, its resource if it still exists.
                Owed::Send(r, keys) => {
                    for key in keys.into_keys(&r) {
                        if self.names.contains(&key) {
                            self.core.forced.insert(key);
                        } else if self.core.wildcard.pid() == Some(key.1) {
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

    /// Whether sending `r` for `key` continues the view a response sends whole (see
    /// `pending_base`): recorded by moving the end of [`Holdings::base`] (see `emit`), not as an
    /// entry. Every resource of that response was read from that view (it has no aliases, so
    /// `r` is the view's resource of `key`'s name), and they come in its order, so what the base
    /// covers was sent.
    fn extends_base(&self, key_pid: Pid, r: &Arc<Resource>) -> bool {
        let Some(PendingBase { pid, view, .. }) = &self.pending_base else {
            return false;
        };
        if key_pid != *pid {
            return false;
        }
        debug_assert!(view.get(r.name()).is_some_and(|v| Arc::ptr_eq(v, r)));
        self.has
            .base
            .as_ref()
            .is_none_or(|base| Arc::ptr_eq(&base.view, view))
    }

    /// Everything owed, in the order it goes out: resources by name, removals, heartbeats.
    fn collect(&mut self, views: &Views) -> Vec<Owed> {
        self.pending_base = self.wildcard_base(views);
        let (gathered, named_base) = self.gather(views);
        if named_base.is_some() {
            self.pending_base = named_base;
        }
        reset(&mut self.heartbeat);
        self.check_all = false;
        reset(&mut self.core.forced);
        self.forced_all = false;
        reset(&mut self.recheck);
        reset(&mut self.core.dirty);
        gathered.into_owed()
    }

    /// A wildcard client that holds nothing is sent the whole view, in its order: recorded as
    /// the view (see [`Holdings`]). Not for clients that hold variants by `resource_name` (they
    /// are few), nor for a view with aliases (a key may be an alias).
    fn wildcard_base(&self, views: &Views) -> Option<PendingBase> {
        let w = self.core.wildcard.pid().filter(|_| self.check_all)?;
        let view = views.view(w);
        (self.has.is_empty() && !self.core.encoding.named && !view.has_aliases()).then(|| {
            PendingBase {
                pid: w,
                view: view.clone(),
                gaps: VecDeque::new(),
                run: Some(0),
            }
        })
    }

    /// The keys owed their resource whatever the client holds: `forced`, or with `forced_all`
    /// every subscribed key and those of `forced` that are not (wildcard keys).
    fn forced_keys(&self) -> (&HashSet<Key>, Vec<&Key>) {
        if self.forced_all {
            let extra = self.core.forced.iter().filter(|k| !self.names.contains(*k));
            (&self.names, extra.collect())
        } else {
            (&self.core.forced, Vec::new())
        }
    }

    /// What is owed, gathered in the order it is found, then put in order; and the view a first
    /// response to most names of a view records (see [`Self::in_view_order`]).
    fn gather(&self, views: &Views) -> (Gathered, Option<PendingBase>) {
        let (main, extra) = self.forced_keys();
        let forced_len = main.len() + extra.len();
        let mut g = Gathered {
            sends: Vec::with_capacity(forced_len),
            ..Gathered::default()
        };
        if self.check_all {
            self.gather_check_all(views, &mut g);
        }
        let order = self.in_view_order(views, main, &extra, &mut g);
        // The keys the view's order did not cover: those of other parameter sets, and names
        // the view does not have.
        let rest = main.iter().chain(extra).filter(|key| {
            order.covered < forced_len
                && (order.pid != Some(key.1) || views.get(&key.0, key.1).is_none())
        });
        self.gather_forced(views, rest, &mut g);
        self.gather_dirty(views, &mut g);
        self.gather_recheck(views, &mut g);
        self.gather_heartbeats(views, &mut g);
        let only_dense = order.pid.is_some() && g.sends.len() == order.covered;
        g.put_in_order(only_dense);
        (g, order.base.filter(|_| only_dense))
    }

    /// Owed with the wildcard turned on (or a first request): every resource of its view the
    /// client does not hold (all of them when recorded as the view, as it holds nothing), and
    /// the removal of every subscribed key it holds that the store does not have.
    fn gather_check_all(&self, views: &Views, g: &mut Gathered) {
        if let Some(w) = self.core.wildcard.pid() {
            let whole = self.pending_base.is_some();
            for r in views.view(w).iter() {
                if whole {
                    g.send(Keys::Own(w), r);
                    continue;
                }
                let key = (r.name().clone(), w);
                if !self.holds(&key, r) {
                    g.send(Keys::One(key), r);
                }
            }
        }
        for (key, _) in self.has.iter() {
            if self.subscribed(&key) && views.get(&key.0, key.1).is_none() {
                g.removed.insert(key);
            }
        }
    }

    /// A client that subscribes to most of a view with one parameter set (every cluster's
    /// endpoints): the forced keys of that view read in its order, so that they come sorted.
    /// A first response to most names of a view, to a client that holds nothing, sent in the
    /// view's order, is recorded as the view, with the names it skips (see [`PendingBase`]), if
    /// it sends nothing else (no key out of the view's order). Not for clients that hold
    /// variants by `resource_name`, nor with the wildcard on (that one is recorded as the
    /// wildcard's view).
    fn in_view_order(
        &self,
        views: &Views,
        main: &HashSet<Key>,
        extra: &[&Key],
        g: &mut Gathered,
    ) -> ViewOrder {
        let mut order = ViewOrder::default();
        let [pid] = self.core.pids[..] else {
            return order;
        };
        let view = views.view(pid);
        if !super::in_view_order(view, main.len() + extra.len()) {
            return order;
        }
        order.pid = Some(pid);
        order.base = self.named_base(view, pid, extra);
        let extra: HashSet<&Key> = extra.iter().copied().collect();
        // Which names of the view are subscribed, when every key is owed: found once for the
        // streams that share the subscription, no name looked up per stream.
        let in_view = self.forced_all.then(|| self.names.in_view(view, pid));
        for (i, r) in view.iter().enumerate() {
            let subscribed = match &in_view {
                Some(in_view) => in_view.has(i),
                None => main.contains(&(&**r.name(), pid) as &dyn KeyLookup),
            };
            if subscribed {
                g.send(Keys::Own(pid), r);
                order.covered += 1;
                if let Some(base) = order.base.as_mut().filter(|b| !b.gaps.is_empty()) {
                    // Sent past a name it skips: the parts are not runs of the view.
                    base.run = None;
                }
                continue;
            }
            if !extra.is_empty() {
                let key = (r.name().clone(), pid);
                if extra.contains(&key) {
                    g.send(Keys::One(key), r);
                    order.covered += 1;
                    continue;
                }
            }
            if let Some(base) = &mut order.base {
                base.gaps.push_back(r.name().clone());
            }
        }
        order
    }

    /// The view a first response to most names of `view` records, when every key is owed, none
    /// out of the view (`extra`), to a client that holds nothing by name (see
    /// [`Self::in_view_order`]).
    fn named_base(&self, view: &Arc<View>, pid: Pid, extra: &[&Key]) -> Option<PendingBase> {
        let first = self.forced_all && extra.is_empty() && self.has.is_empty();
        (first && self.core.wildcard.pid().is_none() && !self.core.encoding.named).then(|| {
            PendingBase {
                pid,
                view: view.clone(),
                gaps: VecDeque::new(),
                run: Some(0),
            }
        })
    }

    /// The forced `keys`: each owed its resource, or, when the store has none, a removal (a
    /// subscribed name that does not exist is reported at once). VHDS: Envoy asks for the
    /// virtual host of a domain by alias, and waits for a resource with that alias (and no
    /// body) when there is none; a removal would leave the request hanging until its stream
    /// times out.
    fn gather_forced<'k>(
        &self,
        views: &Views,
        keys: impl Iterator<Item = &'k Key>,
        g: &mut Gathered,
    ) {
        let on_demand = *self.core.type_url == *crate::types::VIRTUAL_HOST;
        for key in keys {
            match views.get(&key.0, key.1) {
                Some(r) => g.send(Keys::One(key.clone()), r),
                None if on_demand && !self.has.contains_key(key) => {
                    g.unresolved.insert(key.clone());
                }
                None => {
                    g.removed.insert(key.clone());
                }
            }
        }
    }

    /// The keys of the names the store changed: their resource if the client does not hold it,
    /// a removal if the store no longer has what it holds.
    fn gather_dirty(&self, views: &Views, g: &mut Gathered) {
        for name in &self.core.dirty {
            for key in self.keys_of(name) {
                match views.get(&key.0, key.1) {
                    Some(r) if !self.holds(&key, r) => g.send(Keys::One(key), r),
                    Some(_) => {}
                    None if self.has.contains_key(&key) => {
                        g.removed.insert(key);
                    }
                    None => {}
                }
            }
        }
    }

    /// The keys to recheck: their resource if still subscribed, else a removal.
    fn gather_recheck(&self, views: &Views, g: &mut Gathered) {
        for key in &self.recheck {
            match views.get(&key.0, key.1) {
                Some(r) if self.subscribed(key) => g.send(Keys::One(key.clone()), r),
                _ => {
                    g.removed.insert(key.clone());
                }
            }
        }
    }

    /// Heartbeats: the keys whose variant the client holds at its current version (those the
    /// response sends anyway are dropped later, see [`Gathered::put_in_order`]); a key the
    /// client holds at another version gets its resource (what it holds is stale), a key now
    /// gone is removed as any.
    fn gather_heartbeats(&self, views: &Views, g: &mut Gathered) {
        for key in &self.heartbeat {
            match views.get(&key.0, key.1) {
                Some(r) if self.holds(key, r) => {
                    g.beats
                        .insert((r.name().clone(), r.version().clone()), r.clone());
                }
                Some(r) => g.send(Keys::One(key.clone()), r),
                None => {
                    g.removed.insert(key.clone());
                }
            }
        }
    }

    /// The bytes `owed` takes in a response, about (a removal's exact size is known only once
    /// the part is put together).
    fn owed_len(&self, owed: &Owed) -> usize {
        let encoding = self.core.encoding;
        let removal = |key: &Key| match (encoding.named, self.has.get(key)) {
            (true, Some(held)) => {
                field_len(resource_name(&key.0, held.constraints().map(|c| &**c)).encoded_len())
            }
            (true, None) => field_len(resource_name(&key.0, None).encoded_len()),
            (false, _) => field_len(key.0.len()),
        };
        match owed {
            Owed::Send(r, keys) => {
                // A key moving to another variant also removes the one it held, for clients
                // that hold variants apart (see `emit`; the others hold one per name). Not looked
                // up for the others: 10,000 lookups per response.
                let moves = if encoding.named {
                    keys.iter(r)
                        .filter(|k| {
                            self.has
                                .get(k)
                                .is_some_and(|h| h.constraints() != r.constraints())
                        })
                        .map(|k| removal(&k))
                        .sum::<usize>()
                } else {
                    0
                };
                field_len(r.delta_entry(encoding).len()) + moves
            }
            Owed::Remove(key) => removal(key),
            Owed::Beat(r) => field_len(r.heartbeat_entry(encoding).len()),
            Owed::Unresolved(key) => field_len(unresolved_entry(&key.0, "", encoding).len()) + 64,
        }
    }

    /// Puts one response together from what it owes, and records what the client holds after it.
    fn emit(
        &mut self,
        owed: Vec<Owed>,
        views: &Views,
        nonces: &mut NonceGen,
        answer: bool,
        oversized: Option<usize>,
    ) -> Option<DeltaResponse> {
        let part = self.record_sends(owed);
        let whole = self.next_run(part.of_base, part.resources.len());
        let base_last = part
            .base_last
            .and_then(|i| part.resources.get(i))
            .map(|r| r.name().clone());
        if let Some(last) = base_last {
            self.extend_base(last);
        }
        let (removed, removed_variants) = self.removals(&part.removed, part.moved);
        if part.resources.is_empty()
            && part.unresolved.is_empty()
            && part.heartbeats.is_empty()
            && removed.is_empty()
            && removed_variants.is_empty()
            && !answer
        {
            return None;
        }
        let system_version_info = self.version(views);
        let nonce = nonces.next_nonce();
        let control_plane = self.core.sent(nonce, &system_version_info);
        Some(DeltaResponse {
            type_url: self.core.type_url.clone(),
            system_version_info,
            nonce,
            resources: part.resources,
            whole,
            removed,
            removed_variants,
            heartbeats: part.heartbeats,
            unresolved: part.unresolved,
            encoding: self.core.encoding,
            oversized,
            control_plane,
        })
    }

    /// Sorts out what one response owes, and records the resources it sends as held: as the
    /// end of the base when they extend it (see `extends_base`), else key by key, noting the
    /// variants a re-sent key held before (TP2 clients hold variants apart).
    fn record_sends(&mut self, owed: Vec<Owed>) -> Part {
        let sends = owed.iter().filter(|o| matches!(o, Owed::Send(..))).count();
        let mut part = Part {
            resources: Vec::with_capacity(sends),
            ..Part::default()
        };
        if self.pending_base.is_none() {
            self.has.reserve(sends);
        }
        for item in owed {
            match item {
                Owed::Send(r, keys) => {
                    if let Keys::Own(pid) = keys {
                        if self.extends_base(pid, &r) {
                            part.base_last = Some(part.resources.len());
                            part.resources.push(r);
                            part.of_base += 1;
                            continue;
                        }
                    }
                    for key in keys.into_keys(&r) {
                        if self.extends_base(key.1, &r) {
                            debug_assert!(key.0 == *r.name());
                            part.base_last = Some(part.resources.len());
                            continue;
                        }
                        if let Some(before) = self.has.insert(key, Held::of(&r)) {
                            if before.constraints() != r.constraints() {
                                part.moved
                                    .push((before.name().clone(), before.constraints().cloned()));
                            }
                        }
                    }
                    part.resources.push(r);
                }
                Owed::Remove(key) => {
                    part.removed.insert(key);
                }
                Owed::Beat(r) => part.heartbeats.push(r),
                Owed::Unresolved(key) => part.unresolved.push(key.0),
            }
        }
        part
    }

    /// The encoded run of the view a part sends, when its `sent` resources are all the view's
    /// own, in its order (`of_base` of them, see `extends_base`), right after what the parts
    /// before sent, which were the view from its first name: the next run of the view, whose
    /// entries are encoded once for every stream that sends them.
    fn next_run(&mut self, of_base: usize, sent: usize) -> Option<Bytes> {
        let pending = self.pending_base.as_mut()?;
        let mut whole = None;
        pending.run = match pending.run {
            Some(start) if of_base > 0 && of_base == sent => {
                whole = pending
                    .view
                    .delta_run(self.core.encoding, start, start + of_base);
                whole.as_ref().map(|_| start + of_base)
            }
            _ => None,
        };
        whole
    }

    /// Moves the end of the base the pending response records to `last`, the last name sent of
    /// it: the names the base now reaches past and that were not sent are not held.
    fn extend_base(&mut self, last: Arc<str>) {
        let Some(pending) = &mut self.pending_base else {
            return;
        };
        while pending.gaps.front().is_some_and(|gap| **gap < *last) {
            if let Some(gap) = pending.gaps.pop_front() {
                self.has.over.insert((gap, pending.pid), None);
            }
        }
        match &mut self.has.base {
            Some(base) => base.last = last,
            None => {
                self.has.base = Some(Base {
                    pid: pending.pid,
                    view: pending.view.clone(),
                    last,
                })
            }
        }
    }

    /// The names (or, for clients that hold variants by `resource_name`, the variants) the
    /// client stops holding: what a re-sent key held before (`moved`), what a `removed` key
    /// held, unless another key still holds it afterwards. Removed keys the client was never
    /// sent are removed by their own name: it may hold them from an earlier stream.
    fn removals(
        &mut self,
        removed: &BTreeSet<Key>,
        moved: Vec<RemovedVariant>,
    ) -> (Vec<Arc<str>>, Vec<RemovedVariant>) {
        let mut dropped: Vec<RemovedVariant> = Vec::new();
        let mut unknown: Vec<Arc<str>> = Vec::new();
        for key in removed {
            match self.has.remove(key) {
                Some(before) => {
                    dropped.push((before.name().clone(), before.constraints().cloned()))
                }
                None => unknown.push(key.0.clone()),
            }
        }
        if self.core.encoding.named {
            (Vec::new(), self.removed_variants(moved, dropped, unknown))
        } else {
            (self.removed_names(dropped, unknown), Vec::new())
        }
    }

    /// The variants to drop, of those `moved` and `dropped`, and the `unknown` names, for a
    /// client that holds variants by `resource_name`: those no key holds any more.
    fn removed_variants(
        &self,
        moved: Vec<RemovedVariant>,
        dropped: Vec<RemovedVariant>,
        unknown: Vec<Arc<str>>,
    ) -> Vec<RemovedVariant> {
        let held: HashSet<(&Arc<str>, Option<&Arc<Constraints>>)> = self
            .has
            .iter()
            .map(|(_, h)| (h.name(), h.constraints()))
            .collect();
        let held_name = |n: &Arc<str>| held.iter().any(|(h, _)| *h == n);
        let mut variants: Vec<RemovedVariant> = moved
            .into_iter()
            .chain(dropped)
            .filter(|(n, c)| !held.contains(&(n, c.as_ref())))
            .collect();
        for name in unknown {
            if !variants.iter().any(|(n, _)| *n == name) && !held_name(&name) {
                variants.push((name, None));
            }
        }
        variants.sort_by(|a, b| a.0.cmp(&b.0));
        variants.dedup();
        variants
    }

    /// The names to drop, of those `dropped` and `unknown`, for a client that holds one
    /// variant per name: those no key holds any more.
    fn removed_names(&self, dropped: Vec<RemovedVariant>, unknown: Vec<Arc<str>>) -> Vec<Arc<str>> {
        // Whether another key still holds a name: one subscribed by that name, or (VHDS only:
        // other types have no aliases) by an alias of it.
        let aliased: Option<HashSet<&Arc<str>>> = (*self.core.type_url
            == *crate::types::VIRTUAL_HOST)
            .then(|| self.has.iter().map(|(_, h)| h.name()).collect());
        let held_name = |n: &Arc<str>| match &aliased {
            Some(names) => names.contains(n),
            None => self
                .keys_of(n)
                .iter()
                .any(|k| self.has.get(k).is_some_and(|h| h.name() == n)),
        };
        let mut names: Vec<Arc<str>> = dropped
            .into_iter()
            .map(|(n, _)| n)
            .chain(unknown)
            .filter(|n| !held_name(n))
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// The version of the view this client reads (for debugging only, in delta).
    fn version(&self, views: &Views) -> Arc<str> {
        let pid = self
            .core
            .wildcard
            .pid()
            .or(self.core.pids.first().copied())
            .unwrap_or(0);
        views.view(pid).version().clone()
    }
}

/// The (name, version) of a resource owed, to put them in order (only resources are compared).
fn owed_variant(owed: &Owed) -> Option<(&Arc<str>, &Arc<str>)> {
    match owed {
        Owed::Send(r, _) => Some((r.name(), r.version())),
        _ => None,
    }
}

/// The `resources` entry that tells a VHDS client that `alias` names no virtual host: a
/// resource named by the alias, with the alias in `aliases`, a version and no body (what Envoy's
/// on-demand VHDS waits for to answer the request that asked for it with a 404).
pub fn unresolved_entry(alias: &str, version: &str, encoding: Encoding) -> Vec<u8> {
    let (name, resource_name) = if encoding.named {
        (String::new(), Some(resource_name(alias, None)))
    } else {
        (alias.to_owned(), None)
    };
    envoy_types::pb::envoy::service::discovery::v3::Resource {
        name,
        resource_name,
        aliases: vec![alias.to_owned()],
        version: version.to_owned(),
        ..Default::default()
    }
    .encode_to_vec()
}

/// What a reconnecting client says it has of a name: a version, and so the variant that has it.
fn held(name: &Arc<str>, variants: &[Arc<Resource>], version: &str) -> Held {
    match variants.iter().find(|v| &**v.version() == version) {
        Some(v) => Held::of(v),
        None => Held::Claimed(Box::new((name.clone(), Arc::from(version)))),
    }
}

/// What the client holds, for the session's make-before-break rules.
impl DeltaSubscription {
    /// Whether the client holds `r` for `key`, at its version.
    fn holds(&self, key: &Key, r: &Resource) -> bool {
        self.has.get(key).map(|h| h.version()) == Some(r.version())
    }

    /// Whether the client holds `name` as the store holds it now.
    pub fn has_sent(&self, name: &Arc<str>, views: &Views) -> bool {
        self.keys_of(name)
            .iter()
            .any(|key| views.get(&key.0, key.1).is_some_and(|r| self.holds(key, r)))
    }

    /// The subscribed resources the client does not hold as the store holds them now.
    pub fn unsent(&self, views: &Views) -> Vec<Arc<Resource>> {
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

mod keys;
mod request;
#[cfg(test)]
mod tests;

pub use request::{DeltaRequest, UNSUBSCRIBE_KEY};
