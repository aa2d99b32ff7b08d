//! State of the World: the state machine of one resource type on one stream.
//!
//! It keeps what the client asked for, what it was last sent and what is owed to it; the store
//! state is passed in whenever a response may be due, never kept.

use crate::hash::{HashMap, HashSet};
use std::sync::Arc;

use bytes::Bytes;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use envoy_types::pb::google::rpc::Status;

use super::{intern, NonceGen, RequestKind, SubscriptionChange};
use crate::store::{Resource, TypeSnapshot};

/// The special resource name that subscribes to every resource of a type.
pub const WILDCARD: &str = "*";

/// A `DiscoveryRequest` as the server reads it. An ACK repeats the client's whole list of names
/// (hundreds, on every response), so the names stay slices of the received bytes until they are
/// needed, and of the node only the identity is decoded. Same wire format as
/// `envoy.service.discovery.v3.DiscoveryRequest`; fields xdsd does not use are skipped.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SotwRequest {
    #[prost(string, tag = "1")]
    pub version_info: String,
    #[prost(message, optional, tag = "2")]
    pub node: Option<NodeId>,
    #[prost(bytes = "bytes", repeated, tag = "3")]
    pub resource_names: Vec<Bytes>,
    #[prost(string, tag = "4")]
    pub type_url: String,
    #[prost(string, tag = "5")]
    pub response_nonce: String,
    #[prost(message, optional, tag = "6")]
    pub error_detail: Option<Status>,
}

/// The identity fields of `envoy.config.core.v3.Node`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeId {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, tag = "2")]
    pub cluster: String,
}

impl From<&DiscoveryRequest> for SotwRequest {
    fn from(r: &DiscoveryRequest) -> SotwRequest {
        SotwRequest {
            version_info: r.version_info.clone(),
            node: r.node.as_ref().map(|n| NodeId {
                id: n.id.clone(),
                cluster: n.cluster.clone(),
            }),
            resource_names: r
                .resource_names
                .iter()
                .map(|n| Bytes::copy_from_slice(n.as_bytes()))
                .collect(),
            type_url: r.type_url.clone(),
            response_nonce: r.response_nonce.clone(),
            error_detail: r.error_detail.clone(),
        }
    }
}

/// One response to send.
#[derive(Debug, Clone)]
pub struct SotwResponse {
    pub type_url: Arc<str>,
    pub version_info: Arc<str>,
    pub nonce: String,
    pub resources: SotwResources,
    /// The resources of this response that are new or changed for this client (empty for the
    /// first response of the type): what a client has to act upon.
    pub updated: Vec<Arc<Resource>>,
}

/// The resources of a response: the whole type (its shared encoded body) or a selection.
#[derive(Debug, Clone)]
pub enum SotwResources {
    All(Arc<TypeSnapshot>),
    Some(Vec<Arc<Resource>>),
}

impl SotwResponse {
    /// Names of the resources in this response, in order.
    pub fn names(&self) -> Vec<Arc<str>> {
        match &self.resources {
            SotwResources::All(t) => t.iter().map(|r| r.name().clone()).collect(),
            SotwResources::Some(list) => list.iter().map(|r| r.name().clone()).collect(),
        }
    }

    pub fn len(&self) -> usize {
        match &self.resources {
            SotwResources::All(t) => t.len(),
            SotwResources::Some(list) => list.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One type's subscription on a SotW stream.
#[derive(Debug)]
pub struct SotwSubscription {
    type_url: Arc<str>,
    /// LDS/CDS semantics: every response carries all subscribed resources.
    full_state: bool,
    wildcard: bool,
    /// Explicitly subscribed names (without `*`).
    names: HashSet<Arc<str>>,
    /// Set once a request named any resource: from then on an empty list means "nothing", not
    /// the legacy wildcard.
    explicit: bool,
    /// Set by the first request for this type.
    requested: bool,
    /// Digest of the last request's `resource_names`, in order: an ACK repeats the list it
    /// subscribed with, and recognising it spares rebuilding the subscription (the most frequent
    /// request by far).
    last_names: Option<(usize, u64)>,
    /// Nonce and version of the latest response sent.
    last_nonce: Option<String>,
    last_version: Option<Arc<str>>,
    /// What is owed: a response even if nothing changed (first request, wildcard turned on), the
    /// newly subscribed names (sent even if sent before), names the store changed.
    respond: bool,
    forced: HashSet<Arc<str>>,
    dirty: HashSet<Arc<str>>,
    /// What the client was last sent: the type version of a wildcard response, and the version of
    /// each explicitly subscribed name (absent: not sent, or deleted). A wildcard keeps no
    /// per-name state beyond the explicit names.
    sent_type_version: Option<Arc<str>>,
    sent: HashMap<Arc<str>, Arc<str>>,
}

impl SotwSubscription {
    pub fn new(type_url: Arc<str>) -> SotwSubscription {
        let full_state = crate::types::is_full_state(&type_url);
        SotwSubscription {
            type_url,
            full_state,
            wildcard: false,
            names: HashSet::default(),
            explicit: false,
            requested: false,
            last_names: None,
            last_nonce: None,
            last_version: None,
            respond: false,
            forced: HashSet::default(),
            dirty: HashSet::default(),
            sent_type_version: None,
            sent: HashMap::default(),
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

    /// The version of the latest response sent, if any.
    pub fn last_version(&self) -> Option<&Arc<str>> {
        self.last_version.as_ref()
    }

    /// Takes in a request for this type. `current` (the store's resources of the type) only
    /// serves to share name allocations with the store.
    pub fn handle_request(
        &mut self,
        request: &SotwRequest,
        current: Option<&Arc<TypeSnapshot>>,
    ) -> (RequestKind, SubscriptionChange) {
        let intern = |n: &str| intern(current, n);
        let nonce = request.response_nonce.as_str();
        let kind = match &self.last_nonce {
            // Before any response there is no newer nonce, so nothing is stale yet.
            None if !self.requested => RequestKind::Initial,
            None => RequestKind::Update,
            Some(_) if nonce.is_empty() => RequestKind::Update,
            Some(last) if last != nonce => {
                // Superseded by a response the client has not seen yet: the client will answer
                // that one with its full, current list of names, so this one is dropped whole.
                return (
                    RequestKind::Stale {
                        nonce: nonce.to_owned(),
                    },
                    SubscriptionChange::default(),
                );
            }
            Some(_) => match &request.error_detail {
                Some(status) => RequestKind::Nack {
                    nonce: nonce.to_owned(),
                    rejected_version: self.last_version.clone(),
                    message: status.message.clone(),
                },
                None => RequestKind::Ack {
                    nonce: nonce.to_owned(),
                },
            },
        };
        if kind == RequestKind::Initial {
            self.requested = true;
            self.respond = true;
        }
        let change = self.subscribe(&request.resource_names, intern);
        (kind, change)
    }

    fn subscribe(
        &mut self,
        requested: &[Bytes],
        intern: impl Fn(&str) -> Arc<str>,
    ) -> SubscriptionChange {
        let digest = names_digest(requested);
        if self.last_names == Some(digest) {
            return SubscriptionChange::default();
        }
        self.last_names = Some(digest);
        let (wildcard, names): (bool, HashSet<Arc<str>>) = if requested.is_empty() && !self.explicit
        {
            // Legacy wildcard: no name ever sent means `*`.
            (true, HashSet::default())
        } else {
            self.explicit = true;
            let wildcard = requested.iter().any(|n| n == WILDCARD.as_bytes());
            // A name that is not UTF-8 cannot name any resource; it is kept (lossily) only so
            // that the subscription is what the client sent.
            let names = requested
                .iter()
                .filter(|n| *n != WILDCARD.as_bytes())
                .map(|n| String::from_utf8_lossy(n))
                .map(|n| self.names.get(&*n).cloned().unwrap_or_else(|| intern(&n)))
                .collect();
            (wildcard, names)
        };
        let mut change = SubscriptionChange::default();
        if wildcard != self.wildcard {
            change.wildcard = Some(wildcard);
            self.wildcard = wildcard;
            if wildcard {
                self.respond = true;
            }
        }
        change.added = names.difference(&self.names).cloned().collect();
        change.removed = self.names.difference(&names).cloned().collect();
        for name in &change.removed {
            self.sent.remove(name);
            self.forced.remove(name);
        }
        self.forced.extend(change.added.iter().cloned());
        self.names = names;
        change.added.sort();
        change.removed.sort();
        change
    }

    /// Records names the store changed (added, modified or removed).
    pub fn mark_changed<'a>(&mut self, names: impl IntoIterator<Item = &'a Arc<str>>) {
        for name in names {
            if self.wildcard || self.names.contains(name) {
                self.dirty.insert(name.clone());
            }
        }
    }

    /// Whether `poll_response` may have something to send.
    pub fn has_pending(&self) -> bool {
        self.respond || !self.forced.is_empty() || !self.dirty.is_empty()
    }

    /// The response owed to the client, if any, given the current resources of this type.
    pub fn poll_response(
        &mut self,
        current: Option<&Arc<TypeSnapshot>>,
        nonces: &mut NonceGen,
    ) -> Option<SotwResponse> {
        if !self.has_pending() {
            return None;
        }
        let first = self.last_nonce.is_none();
        let mut updated: Vec<Arc<Resource>> = Vec::new();
        if !first {
            let mut names: Vec<&Arc<str>> = self.dirty.union(&self.forced).collect();
            names.sort();
            for name in names {
                if let Some(r) = current.and_then(|t| t.get(name)) {
                    if self.sent.get(name) != Some(r.version())
                        && (self.wildcard || self.names.contains(name))
                    {
                        updated.push(r.clone());
                    }
                }
            }
        }
        let resources = if self.full_state {
            self.full_state_resources(current)
        } else {
            self.changed_resources(current)
        };
        self.respond = false;
        self.forced.clear();
        self.dirty.clear();
        let resources = resources?;
        let version_info = current
            .map(|t| t.version().clone())
            .unwrap_or_else(|| Arc::from(""));
        let nonce = nonces.next_nonce();
        self.last_nonce = Some(nonce.clone());
        self.last_version = Some(version_info.clone());
        Some(SotwResponse {
            type_url: self.type_url.clone(),
            version_info,
            nonce,
            resources,
            updated,
        })
    }

    /// Sends `name` again with the next response, changed or not, if it is subscribed.
    pub fn resend(&mut self, name: &Arc<str>) {
        if self.wildcard || self.names.contains(name) {
            self.forced.insert(name.clone());
        }
    }

    /// LDS/CDS: all subscribed resources, sent when that set differs from what the client has,
    /// or when owed a response anyway.
    fn full_state_resources(
        &mut self,
        current: Option<&Arc<TypeSnapshot>>,
    ) -> Option<SotwResources> {
        let version_of = |name: &str| {
            current
                .and_then(|t| t.get(name))
                .map(|r| r.version().clone())
        };
        let changed = if self.wildcard {
            self.sent_type_version.as_ref() != current.map(|t| t.version())
        } else {
            self.dirty
                .iter()
                .filter(|n| self.names.contains(*n))
                .any(|n| version_of(n) != self.sent.get(n).cloned())
        };
        if !(self.respond || !self.forced.is_empty() || changed) {
            return None;
        }
        for name in &self.names {
            match version_of(name) {
                Some(v) => self.sent.insert(name.clone(), v),
                None => self.sent.remove(name),
            };
        }
        if self.wildcard {
            self.sent_type_version = current.map(|t| t.version().clone());
            return Some(match current {
                Some(t) => SotwResources::All(t.clone()),
                None => SotwResources::Some(Vec::new()),
            });
        }
        self.sent_type_version = None;
        let mut names: Vec<&Arc<str>> = self.names.iter().collect();
        names.sort();
        Some(SotwResources::Some(
            names
                .into_iter()
                .filter_map(|n| current.and_then(|t| t.get(n)).cloned())
                .collect(),
        ))
    }

    /// Other types: only the subscribed resources that changed or were newly subscribed.
    fn changed_resources(&mut self, current: Option<&Arc<TypeSnapshot>>) -> Option<SotwResources> {
        if self.respond && self.wildcard {
            // A new wildcard gets everything there is, even nothing.
            for name in &self.names {
                match current.and_then(|t| t.get(name)) {
                    Some(r) => self.sent.insert(name.clone(), r.version().clone()),
                    None => self.sent.remove(name),
                };
            }
            return Some(match current {
                Some(t) => SotwResources::All(t.clone()),
                None => SotwResources::Some(Vec::new()),
            });
        }
        let mut candidates: HashSet<&Arc<str>> =
            self.dirty.iter().chain(self.forced.iter()).collect();
        if self.respond {
            candidates.extend(self.names.iter());
        }
        let mut out: Vec<Arc<Resource>> = Vec::new();
        for name in candidates {
            let explicit = self.names.contains(name);
            if !explicit && !self.wildcard {
                continue;
            }
            match current.and_then(|t| t.get(name)) {
                Some(resource) => {
                    let owed = self.respond
                        || self.forced.contains(name)
                        || !explicit
                        || self.sent.get(name) != Some(resource.version());
                    if owed {
                        out.push(resource.clone());
                        if explicit {
                            self.sent.insert(name.clone(), resource.version().clone());
                        }
                    }
                }
                // Nothing to send: SotW has no deletion for these types. Forget the sent version
                // so the resource is sent again if it comes back with the same content.
                None => {
                    self.sent.remove(name);
                }
            }
        }
        if out.is_empty() {
            return None;
        }
        out.sort_by(|a, b| a.name().cmp(b.name()));
        Some(SotwResources::Some(out))
    }
}

/// (count, hash) of a list of names, order included.
fn names_digest(names: &[Bytes]) -> (usize, u64) {
    use std::hash::BuildHasher;
    (
        names.len(),
        foldhash::fast::FixedState::default().hash_one(names),
    )
}

#[cfg(test)]
mod tests;
