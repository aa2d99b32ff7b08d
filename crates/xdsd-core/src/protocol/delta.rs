//! Incremental (delta) xDS: the state machine of one resource type on one stream.
//!
//! It tracks what the client has (name → version), what it subscribes to and what is owed, so
//! that each response carries only the resources that changed for this client and the names it
//! must drop.

use std::collections::{BTreeMap, BTreeSet};

use crate::hash::{HashMap, HashSet};
use std::sync::Arc;

use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;

use super::sotw::WILDCARD;
use super::{intern, NonceGen, RequestKind, SubscriptionChange};
use crate::store::{Resource, TypeSnapshot};

/// One response to send.
#[derive(Debug, Clone)]
pub struct DeltaResponse {
    pub type_url: Arc<str>,
    /// The type's version, for debugging only: clients track versions per resource.
    pub system_version_info: Arc<str>,
    pub nonce: String,
    pub resources: Vec<Arc<Resource>>,
    pub removed: Vec<Arc<str>>,
}

/// One type's subscription on an incremental stream.
#[derive(Debug)]
pub struct DeltaSubscription {
    type_url: Arc<str>,
    wildcard: bool,
    /// Set once a request subscribed to any name (`*` included): the legacy wildcard is gone.
    explicit: bool,
    requested: bool,
    names: HashSet<Arc<str>>,
    /// What the client has, as far as the server knows: name → version. Filled from
    /// `initial_resource_versions` on reconnect, then by every response.
    has: HashMap<Arc<str>, Arc<str>>,
    last_nonce: Option<String>,
    last_version: Option<Arc<str>>,
    /// Owed: compare every resource of the type with what the client has (first request, wildcard
    /// turned on); an answer even if empty (first request).
    check_all: bool,
    answer: bool,
    /// Newly (re)subscribed names: sent even if the client has them, or reported removed.
    forced: HashSet<Arc<str>>,
    /// Names unsubscribed while the wildcard is on: the client cannot tell whether the wildcard
    /// still covers them, so each is owed as a resource (still covered) or a removal.
    unsubscribed: HashSet<Arc<str>>,
    dirty: HashSet<Arc<str>>,
}

impl DeltaSubscription {
    pub fn new(type_url: Arc<str>) -> DeltaSubscription {
        DeltaSubscription {
            type_url,
            wildcard: false,
            explicit: false,
            requested: false,
            names: HashSet::default(),
            has: HashMap::default(),
            last_nonce: None,
            last_version: None,
            check_all: false,
            answer: false,
            forced: HashSet::default(),
            unsubscribed: HashSet::default(),
            dirty: HashSet::default(),
        }
    }

    pub fn type_url(&self) -> &Arc<str> {
        &self.type_url
    }

    pub fn is_wildcard(&self) -> bool {
        self.wildcard
    }

    pub fn names(&self) -> impl Iterator<Item = &Arc<str>> {
        self.names.iter()
    }

    /// The version the server believes the client has of `name`.
    pub fn client_version(&self, name: &str) -> Option<&Arc<str>> {
        self.has.get(name)
    }

    fn subscribed(&self, name: &str) -> bool {
        self.wildcard || self.names.contains(name)
    }

    /// Takes in a request for this type. Subscription changes are honoured whatever the nonce:
    /// the nonce only pairs an ACK or NACK with a response.
    pub fn handle_request(
        &mut self,
        request: &DeltaDiscoveryRequest,
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
        if !self.requested {
            self.requested = true;
            self.answer = true;
            // A reconnecting client tells what it already has; only differences will be sent.
            for (name, version) in &request.initial_resource_versions {
                let name = intern(current, name);
                let version = match current.and_then(|t| t.get(&name)) {
                    Some(r) if **r.version() == **version => r.version().clone(),
                    _ => Arc::from(version.as_str()),
                };
                self.has.insert(name, version);
            }
        }
        let (subscribe, unsubscribe) = (
            &request.resource_names_subscribe,
            &request.resource_names_unsubscribe,
        );
        let names_something = !subscribe.is_empty() || !unsubscribe.is_empty();
        if !self.explicit && !self.wildcard && !names_something {
            // Legacy wildcard: no name ever subscribed means `*`.
            self.set_wildcard(true, &mut change);
        }
        // Any name in either list ends the legacy rule: after an unsubscription from `*`, the
        // empty requests that follow (ACKs) must not bring the wildcard back.
        self.explicit |= names_something;
        for name in subscribe {
            if name == WILDCARD {
                self.set_wildcard(true, &mut change);
                continue;
            }
            let name = self
                .names
                .get(name.as_str())
                .cloned()
                .unwrap_or_else(|| intern(current, name));
            self.unsubscribed.remove(&name);
            if self.names.insert(name.clone()) {
                change.added.push(name.clone());
            }
            // Sent even if the client seems to have it: it may have forgotten it. On the first
            // request, `initial_resource_versions` is the client's word that it has it.
            let known = kind == RequestKind::Initial
                && self.has.contains_key(&name)
                && self.has.get(&name) == current.and_then(|t| t.get(&name)).map(|r| r.version());
            if !known {
                self.forced.insert(name);
            }
        }
        for name in unsubscribe {
            if name == WILDCARD {
                self.set_wildcard(false, &mut change);
                continue;
            }
            // Phantom unsubscriptions (names not subscribed) are ignored.
            let Some(name) = self.names.take(name.as_str()) else {
                continue;
            };
            self.forced.remove(&name);
            if self.wildcard {
                self.unsubscribed.insert(name.clone());
            } else {
                self.has.remove(&name);
            }
            change.removed.push(name);
        }
        if kind == RequestKind::Initial {
            // What the client claims but no longer subscribes to is not its business any more.
            let (wildcard, names) = (self.wildcard, &self.names);
            self.has.retain(|n, _| wildcard || names.contains(n));
        }
        change.added.sort();
        change.removed.sort();
        (kind, change)
    }

    fn set_wildcard(&mut self, on: bool, change: &mut SubscriptionChange) {
        if self.wildcard == on {
            return;
        }
        self.wildcard = on;
        change.wildcard = Some(on);
        if on {
            self.check_all = true;
        } else {
            // The client drops what only the wildcard gave it.
            let names = &self.names;
            self.has.retain(|n, _| names.contains(n));
            self.unsubscribed.clear();
        }
    }

    /// Sends `name` again with the next response, changed or not, if it is subscribed.
    pub fn resend(&mut self, name: &Arc<str>) {
        if self.subscribed(name) {
            self.forced.insert(name.clone());
        }
    }

    /// Records names the store changed (added, modified or removed).
    pub fn mark_changed<'a>(&mut self, names: impl IntoIterator<Item = &'a Arc<str>>) {
        for name in names {
            if self.subscribed(name) {
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
    }

    /// The response owed to the client, if any, given the current resources of this type.
    pub fn poll_response(
        &mut self,
        current: Option<&Arc<TypeSnapshot>>,
        nonces: &mut NonceGen,
    ) -> Option<DeltaResponse> {
        if !self.has_pending() {
            return None;
        }
        // Keys are what the client subscribed by (a name or an alias); the response holds each
        // resource once, under its name, whatever the number of keys that lead to it.
        let get = |key: &str| current.and_then(|t| t.get(key));
        let mut resources: BTreeMap<Arc<str>, Arc<Resource>> = BTreeMap::new();
        let mut sent: Vec<(Arc<str>, Arc<str>)> = Vec::new();
        let mut removed: BTreeSet<Arc<str>> = BTreeSet::new();
        let mut send = |key: &Arc<str>, r: &Arc<Resource>| {
            sent.push((key.clone(), r.version().clone()));
            resources.insert(r.name().clone(), r.clone());
        };
        let differs = |key: &str, r: &Resource| self.has.get(key) != Some(r.version());

        if self.check_all {
            for r in current.into_iter().flat_map(|t| t.iter()) {
                if self.subscribed(r.name()) && differs(r.name(), r) {
                    send(r.name(), r);
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
        for key in &self.dirty {
            if !self.subscribed(key) {
                continue;
            }
            match get(key) {
                Some(r) if differs(key, r) => send(key, r),
                Some(_) => {}
                None if self.has.contains_key(key) => {
                    removed.insert(key.clone());
                }
                None => {}
            }
        }
        for key in &self.unsubscribed {
            match get(key) {
                Some(r) if self.wildcard => send(key, r),
                _ => {
                    removed.insert(key.clone());
                }
            }
        }
        let answer = self.answer;
        self.answer = false;
        self.check_all = false;
        self.forced.clear();
        self.unsubscribed.clear();
        self.dirty.clear();
        for (key, version) in sent {
            self.has.insert(key, version);
        }
        for key in &removed {
            self.has.remove(key);
        }
        if resources.is_empty() && removed.is_empty() && !answer {
            return None;
        }
        let system_version_info = current
            .map(|t| t.version().clone())
            .unwrap_or_else(|| Arc::from(""));
        let nonce = nonces.next_nonce();
        self.last_nonce = Some(nonce.clone());
        self.last_version = Some(system_version_info.clone());
        Some(DeltaResponse {
            type_url: self.type_url.clone(),
            system_version_info,
            nonce,
            resources: resources.into_values().collect(),
            removed: removed.into_iter().collect(),
        })
    }
}

#[cfg(test)]
mod tests;
