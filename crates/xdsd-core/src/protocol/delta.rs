//! Incremental (delta) xDS: the state machine of one resource type on one stream.
//!
//! It tracks what the client has, what it subscribes to and what is owed, so that each response
//! carries only the resources that changed for this client and the names it must drop.
//! Subscriptions are keys: a name (or alias) and the parameter set its variant is chosen by
//! (xRFC TP2). A client that subscribes with dynamic parameters holds variants by
//! `resource_name` (name and constraints): when a key moves to another variant, the new one
//! and the removal of the old one go out in the same response.

use std::collections::{BTreeMap, BTreeSet};

use crate::hash::{HashMap, HashSet};
use std::sync::Arc;

use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;

use super::sotw::WILDCARD;
use super::{intern, Key, NonceGen, Pid, RequestKind, Subscribe, SubscriptionChange, Views};
use crate::params::Constraints;
use crate::store::{Encoding, Resource, TypeSnapshot};

/// A variant removed from a client that holds variants by `resource_name`.
pub type RemovedVariant = (Arc<str>, Option<Arc<Constraints>>);

/// One response to send.
#[derive(Debug, Clone)]
pub struct DeltaResponse {
    pub type_url: Arc<str>,
    /// The type's version, for debugging only: clients track versions per resource.
    pub system_version_info: Arc<str>,
    pub nonce: String,
    pub resources: Vec<Arc<Resource>>,
    /// Names to drop (`removed_resources`), for clients that hold resources by name.
    pub removed: Vec<Arc<str>>,
    /// Variants to drop (`removed_resource_names`), for clients that hold them by
    /// `resource_name`; resources then go out named by `resource_name` too.
    pub removed_variants: Vec<RemovedVariant>,
    /// Resources the client holds at their current version whose TTL this response renews:
    /// they go out without a body (spec "TTL": heartbeats).
    pub heartbeats: Vec<Arc<Resource>>,
    /// Named by `resource_name` or `name`; with TTLs or without.
    pub encoding: Encoding,
}

/// What the client holds for a key: the version, and which variant (TP2 clients).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Held {
    version: Arc<str>,
    constraints: Option<Arc<Constraints>>,
}

impl Held {
    fn of(r: &Resource) -> Held {
        Held {
            version: r.version().clone(),
            constraints: r.constraints().cloned(),
        }
    }
}

/// One type's subscription on an incremental stream.
#[derive(Debug)]
pub struct DeltaSubscription {
    type_url: Arc<str>,
    /// Resources named by `resource_name`, removals by `removed_resource_names` (TP2 clients);
    /// with their TTLs (clients that take them).
    encoding: Encoding,
    wildcard: Option<Pid>,
    /// Set once a request subscribed to any name (`*` included): the legacy wildcard is gone.
    explicit: bool,
    requested: bool,
    names: HashSet<Key>,
    /// The distinct parameter sets `names` use (nearly always one).
    pids: Vec<Pid>,
    /// What the client has, as far as the server knows. Filled from
    /// `initial_resource_versions` on reconnect, then by every response.
    has: HashMap<Key, Held>,
    last_nonce: Option<String>,
    last_version: Option<Arc<str>>,
    /// Owed: compare every resource of the type with what the client has (first request, wildcard
    /// turned on); an answer even if empty (first request).
    check_all: bool,
    answer: bool,
    /// Newly (re)subscribed keys: sent even if the client has them, or reported removed.
    forced: HashSet<Key>,
    /// Keys unsubscribed while the wildcard is on: the client cannot tell whether the wildcard
    /// still covers them, so each is owed as a resource (still covered) or a removal.
    unsubscribed: HashSet<Key>,
    dirty: HashSet<Arc<str>>,
    /// Keys owed a heartbeat (their TTL renewed without a body).
    heartbeat: HashSet<Key>,
}

impl DeltaSubscription {
    pub fn new(type_url: Arc<str>) -> DeltaSubscription {
        DeltaSubscription {
            type_url,
            encoding: Encoding::default(),
            wildcard: None,
            explicit: false,
            requested: false,
            names: HashSet::default(),
            pids: Vec::new(),
            has: HashMap::default(),
            last_nonce: None,
            last_version: None,
            check_all: false,
            answer: false,
            forced: HashSet::default(),
            unsubscribed: HashSet::default(),
            dirty: HashSet::default(),
            heartbeat: HashSet::default(),
        }
    }

    /// Resources and removals name variants by `resource_name` from now on (a TP2 client).
    pub fn set_named(&mut self, named: bool) {
        self.encoding.named = named;
    }

    /// Resources go out with their TTLs (a client that takes them).
    pub fn set_ttl(&mut self, ttl: bool) {
        self.encoding.ttl = ttl;
    }

    pub fn type_url(&self) -> &Arc<str> {
        &self.type_url
    }

    pub fn is_wildcard(&self) -> bool {
        self.wildcard.is_some()
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
        self.has.get(&(Arc::from(name), 0)).map(|h| &h.version)
    }

    fn subscribed(&self, key: &Key) -> bool {
        self.wildcard == Some(key.1) || self.names.contains(key)
    }

    /// The keys of a name: one per parameter set it is subscribed with, and the wildcard's.
    fn keys_of(&self, name: &Arc<str>) -> Vec<Key> {
        let mut keys: Vec<Key> = self
            .pids
            .iter()
            .map(|pid| (name.clone(), *pid))
            .filter(|key| self.names.contains(key))
            .collect();
        if let Some(w) = self.wildcard {
            if !keys.iter().any(|(_, p)| *p == w) {
                keys.push((name.clone(), w));
            }
        }
        keys
    }

    /// Takes in a request for this type, subscribed by plain names with parameter set 0.
    pub fn handle_request(
        &mut self,
        request: &DeltaDiscoveryRequest,
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
        request: &DeltaDiscoveryRequest,
        subscribe: &Subscribe<'_>,
        unsubscribe_locators: &[(String, Pid)],
        current: Option<&Arc<TypeSnapshot>>,
    ) -> (RequestKind, SubscriptionChange) {
        let nonce = request.response_nonce.as_str();
        let kind = if !self.requested {
            RequestKind::Initial
        } else if nonce.is_empty() {
            RequestKind::Update
        } else {
            match &request.error_detail {
                Some(status) => RequestKind::Nack {
                    nonce: nonce.to_owned(),
                    rejected_version: (self.last_nonce.as_deref() == Some(nonce))
                        .then(|| self.last_version.clone())
                        .flatten(),
                    message: status.message.clone(),
                },
                None => RequestKind::Ack {
                    nonce: nonce.to_owned(),
                },
            }
        };
        let mut change = SubscriptionChange::default();
        let names_before: HashSet<Arc<str>> = self.names.iter().map(|(n, _)| n.clone()).collect();
        let mut wildcard_before = self.wildcard.is_some();
        let initial = !self.requested;
        if initial {
            self.requested = true;
            self.answer = true;
        }
        let subscribe_keys: Vec<(&str, Pid)> = request
            .resource_names_subscribe
            .iter()
            .map(|n| (n.as_str(), subscribe.default))
            .chain(subscribe.locators.iter().map(|(n, p)| (n.as_str(), *p)))
            .collect();
        let unsubscribe_keys: Vec<(&str, Pid)> = request
            .resource_names_unsubscribe
            .iter()
            .map(|n| (n.as_str(), subscribe.default))
            .chain(unsubscribe_locators.iter().map(|(n, p)| (n.as_str(), *p)))
            .collect();
        let names_something = !subscribe_keys.is_empty() || !unsubscribe_keys.is_empty();
        if !self.explicit && self.wildcard.is_none() && !names_something {
            // Legacy wildcard: no name ever subscribed means `*`.
            self.set_wildcard(Some(subscribe.default));
        } else if !self.explicit && self.wildcard.is_some() && !names_something {
            // The legacy wildcard follows the default parameter set (node parameters may
            // change mid-stream).
            if self.wildcard != Some(subscribe.default) {
                self.set_wildcard(Some(subscribe.default));
                wildcard_before = true;
            }
        }
        // Any name in either list ends the legacy rule: after an unsubscription from `*`, the
        // empty requests that follow (ACKs) must not bring the wildcard back.
        self.explicit |= names_something;
        let lookup = |name: &str| current.map(|t| t.variants(name)).unwrap_or(&[]);
        for (name, pid) in subscribe_keys {
            if name == WILDCARD {
                self.set_wildcard(Some(pid));
                continue;
            }
            let key: Key = (
                self.names
                    .get(&(Arc::from(name), pid))
                    .map(|(n, _)| n.clone())
                    .unwrap_or_else(|| intern(current, name)),
                pid,
            );
            self.unsubscribed.remove(&key);
            self.names.insert(key.clone());
            if initial {
                // A reconnecting client tells what it already has: only differences are sent.
                if let Some(version) = request.initial_resource_versions.get(name) {
                    self.has.insert(key.clone(), held(lookup(name), version));
                    // Compared with the store at the next response, like a change.
                    self.dirty.insert(key.0);
                    continue;
                }
            }
            // Sent even if the client seems to have it: it may have forgotten it.
            self.forced.insert(key);
        }
        if initial && self.wildcard.is_some() {
            if let Some(w) = self.wildcard {
                for (name, version) in &request.initial_resource_versions {
                    let key = (intern(current, name), w);
                    self.has
                        .entry(key)
                        .or_insert_with(|| held(lookup(name), version));
                }
            }
        }
        for (name, pid) in unsubscribe_keys {
            if name == WILDCARD {
                self.set_wildcard(None);
                continue;
            }
            // Phantom unsubscriptions (names not subscribed) are ignored.
            let Some(key) = self.names.take(&(Arc::from(name), pid)) else {
                continue;
            };
            self.forced.remove(&key);
            if self.wildcard.is_some() {
                self.unsubscribed.insert(key);
            } else {
                self.has.remove(&key);
            }
        }
        let mut pids: Vec<Pid> = self.names.iter().map(|(_, p)| *p).collect();
        pids.sort_unstable();
        pids.dedup();
        self.pids = pids;
        if self.wildcard.is_some() != wildcard_before {
            change.wildcard = Some(self.wildcard.is_some());
        }
        let names_after: HashSet<Arc<str>> = self.names.iter().map(|(n, _)| n.clone()).collect();
        change.added = names_after.difference(&names_before).cloned().collect();
        change.removed = names_before.difference(&names_after).cloned().collect();
        change.added.sort();
        change.removed.sort();
        (kind, change)
    }

    fn set_wildcard(&mut self, on: Option<Pid>) {
        if self.wildcard == on {
            return;
        }
        self.wildcard = on;
        if on.is_some() {
            self.check_all = true;
        } else {
            // The client drops what only the wildcard gave it.
            let names = &self.names;
            self.has.retain(|k, _| names.contains(k));
            self.unsubscribed.clear();
        }
    }

    /// Sends `name` again with the next response, changed or not, if it is subscribed.
    pub fn resend(&mut self, name: &Arc<str>) {
        let keys = self.keys_of(name);
        self.forced.extend(keys);
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
        if *self.type_url == *crate::types::VIRTUAL_HOST {
            self.forced.extend(keys);
        } else {
            self.heartbeat.extend(keys);
        }
    }

    /// Records names the store changed (added, modified or removed).
    pub fn mark_changed<'a>(&mut self, names: impl IntoIterator<Item = &'a Arc<str>>) {
        for name in names {
            if self.wildcard.is_some()
                || self
                    .pids
                    .iter()
                    .any(|p| self.names.contains(&(name.clone(), *p)))
            {
                self.dirty.insert(name.clone());
            }
        }
    }

    pub fn has_pending(&self) -> bool {
        self.answer
            || self.check_all
            || !self.forced.is_empty()
            || !self.unsubscribed.is_empty()
            || !self.dirty.is_empty()
            || !self.heartbeat.is_empty()
    }

    /// The response owed to the client, if any, given the store as this client sees it.
    pub fn poll_response(&mut self, views: &Views, nonces: &mut NonceGen) -> Option<DeltaResponse> {
        if !self.has_pending() {
            return None;
        }
        // Keys are what the client subscribed by (a name or an alias, and a parameter set); the
        // response holds each variant once, whatever the number of keys that lead to it.
        let get = |key: &Key| views.get(&key.0, key.1);
        let mut resources: BTreeMap<(Arc<str>, Arc<str>), Arc<Resource>> = BTreeMap::new();
        let mut sent: Vec<(Key, Held)> = Vec::new();
        let mut removed: BTreeSet<Key> = BTreeSet::new();
        let mut send = |key: &Key, r: &Arc<Resource>| {
            sent.push((key.clone(), Held::of(r)));
            resources.insert((r.name().clone(), r.version().clone()), r.clone());
        };
        let differs = |key: &Key, r: &Resource| !self.holds(key, r);

        if self.check_all {
            if let Some(w) = self.wildcard {
                for r in views.view(w).iter() {
                    let key = (r.name().clone(), w);
                    if differs(&key, r) {
                        send(&key, r);
                    }
                }
            }
            for key in self.has.keys() {
                if self.subscribed(key) && get(key).is_none() {
                    removed.insert(key.clone());
                }
            }
        }
        for key in &self.forced {
            match get(key) {
                Some(r) => send(key, r),
                // A subscribed name that does not exist is reported at once.
                None => {
                    removed.insert(key.clone());
                }
            }
        }
        for name in &self.dirty {
            for key in self.keys_of(name) {
                match get(&key) {
                    Some(r) if differs(&key, r) => send(&key, r),
                    Some(_) => {}
                    None if self.has.contains_key(&key) => {
                        removed.insert(key);
                    }
                    None => {}
                }
            }
        }
        for key in &self.unsubscribed {
            match get(key) {
                Some(r) if self.wildcard == Some(key.1) => send(key, r),
                _ => {
                    removed.insert(key.clone());
                }
            }
        }
        // Heartbeats: the keys whose variant the client holds at its current version and that this
        // response does not send anyway; a key the client holds at another version gets its
        // resource (what it holds is stale), a key now gone is removed as any.
        let mut beats: Vec<Arc<Resource>> = Vec::new();
        for key in &self.heartbeat {
            match get(key) {
                Some(r) if !differs(key, r) => beats.push(r.clone()),
                Some(r) => send(key, r),
                None => {
                    removed.insert(key.clone());
                }
            }
        }
        let heartbeats: BTreeMap<(Arc<str>, Arc<str>), Arc<Resource>> = beats
            .into_iter()
            .map(|r| ((r.name().clone(), r.version().clone()), r))
            .filter(|(id, _)| !resources.contains_key(id))
            .collect();
        self.heartbeat.clear();
        let answer = self.answer;
        self.answer = false;
        self.check_all = false;
        self.forced.clear();
        self.unsubscribed.clear();
        self.dirty.clear();
        // Variants the client stops holding: what a removed or re-sent key held before, unless
        // another key still holds it afterwards.
        let mut dropped: Vec<RemovedVariant> = Vec::new();
        for (key, held) in &sent {
            if let Some(before) = self.has.insert(key.clone(), held.clone()) {
                if before.constraints != held.constraints {
                    dropped.push((key.0.clone(), before.constraints));
                }
            }
        }
        for key in &removed {
            if let Some(before) = self.has.remove(key) {
                dropped.push((key.0.clone(), before.constraints));
            }
        }
        let (removed, removed_variants) = if self.encoding.named {
            let held: HashSet<(&Arc<str>, Option<&Arc<Constraints>>)> = self
                .has
                .iter()
                .map(|((n, _), h)| (n, h.constraints.as_ref()))
                .collect();
            let mut variants: Vec<RemovedVariant> = dropped
                .into_iter()
                .filter(|(n, c)| !held.contains(&(n, c.as_ref())))
                .collect();
            // Unknown variants (never sent) are removed too: the client may hold one from an
            // earlier stream.
            for key in &removed {
                if !variants.iter().any(|(n, _)| *n == key.0)
                    && !held.iter().any(|(n, _)| **n == key.0)
                {
                    variants.push((key.0.clone(), None));
                }
            }
            variants.sort_by(|a, b| a.0.cmp(&b.0));
            variants.dedup();
            (Vec::new(), variants)
        } else {
            let mut names: Vec<Arc<str>> = removed.into_iter().map(|(n, _)| n).collect();
            names.dedup();
            (names, Vec::new())
        };
        if resources.is_empty()
            && heartbeats.is_empty()
            && removed.is_empty()
            && removed_variants.is_empty()
            && !answer
        {
            return None;
        }
        let system_version_info = self.version(views);
        let nonce = nonces.next_nonce();
        self.last_nonce = Some(nonce.clone());
        self.last_version = Some(system_version_info.clone());
        Some(DeltaResponse {
            type_url: self.type_url.clone(),
            system_version_info,
            nonce,
            resources: resources.into_values().collect(),
            removed,
            removed_variants,
            heartbeats: heartbeats.into_values().collect(),
            encoding: self.encoding,
        })
    }

    /// The version of the view this client reads (for debugging only, in delta).
    fn version(&self, views: &Views) -> Arc<str> {
        let pid = self.wildcard.or(self.pids.first().copied()).unwrap_or(0);
        views.view(pid).version().clone()
    }
}

/// What a reconnecting client says it has of a name: a version, and so the variant that has it.
fn held(variants: &[Arc<Resource>], version: &str) -> Held {
    match variants.iter().find(|v| &**v.version() == version) {
        Some(v) => Held::of(v),
        None => Held {
            version: Arc::from(version),
            constraints: None,
        },
    }
}

/// What the client holds, for the session's make-before-break rules.
impl DeltaSubscription {
    /// Whether the client holds `r` for `key`, at its version.
    fn holds(&self, key: &Key, r: &Resource) -> bool {
        self.has.get(key).map(|h| &h.version) == Some(r.version())
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
        if let Some(w) = self.wildcard {
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
mod tests;
