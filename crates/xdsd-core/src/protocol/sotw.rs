//! State of the World: the state machine of one resource type on one stream.
//!
//! It keeps what the client asked for, what it was last sent and what is owed to it; the store
//! state is passed in whenever a response may be due, never kept.

use crate::hash::{HashMap, HashSet};
use std::sync::Arc;

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use envoy_types::pb::google::rpc::Status;

use super::{intern, NonceGen, RequestKind, SubscriptionChange};
use crate::store::{Resource, TypeSnapshot};

/// The special resource name that subscribes to every resource of a type.
pub const WILDCARD: &str = "*";

/// A `DiscoveryRequest` as the server reads it. An ACK repeats the client's whole list of names
/// (hundreds, on every response), so the names are copied into one buffer, not one allocation
/// each, and compared by digest; of the node only the identity is decoded. Same wire format as
/// `envoy.service.discovery.v3.DiscoveryRequest`; fields xdsd does not use are skipped.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SotwRequest {
    pub version_info: String,
    pub node: Option<NodeId>,
    pub resource_names: Names,
    pub type_url: String,
    pub response_nonce: String,
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

/// A list of names in one buffer: `bytes` holds them back to back, `ends` where each ends.
#[derive(Debug, Default, Clone, PartialEq, Eq, Hash)]
pub struct Names {
    bytes: Vec<u8>,
    ends: Vec<u32>,
}

impl Names {
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The names, as received (not checked to be UTF-8).
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter().copied())
            .map(|(start, end)| &self.bytes[start as usize..end as usize])
    }

    pub fn push(&mut self, name: &[u8]) {
        self.bytes.extend_from_slice(name);
        self.ends.push(self.bytes.len() as u32);
    }
}

impl<S: AsRef<[u8]>> FromIterator<S> for Names {
    fn from_iter<I: IntoIterator<Item = S>>(names: I) -> Names {
        let mut out = Names::default();
        for name in names {
            out.push(name.as_ref());
        }
        out
    }
}

// DiscoveryRequest field numbers.
const REQ_VERSION_INFO: u32 = 1;
const REQ_NODE: u32 = 2;
const REQ_RESOURCE_NAMES: u32 = 3;
const REQ_TYPE_URL: u32 = 4;
const REQ_RESPONSE_NONCE: u32 = 5;
const REQ_ERROR_DETAIL: u32 = 6;

impl prost::Message for SotwRequest {
    fn encode_raw(&self, buf: &mut impl bytes::BufMut) {
        use prost::encoding::{bytes as pb_bytes, message, string};
        if !self.version_info.is_empty() {
            string::encode(REQ_VERSION_INFO, &self.version_info, buf);
        }
        if let Some(node) = &self.node {
            message::encode(REQ_NODE, node, buf);
        }
        for name in self.resource_names.iter() {
            pb_bytes::encode(REQ_RESOURCE_NAMES, &name.to_vec(), buf);
        }
        if !self.type_url.is_empty() {
            string::encode(REQ_TYPE_URL, &self.type_url, buf);
        }
        if !self.response_nonce.is_empty() {
            string::encode(REQ_RESPONSE_NONCE, &self.response_nonce, buf);
        }
        if let Some(status) = &self.error_detail {
            message::encode(REQ_ERROR_DETAIL, status, buf);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: prost::encoding::WireType,
        buf: &mut impl bytes::Buf,
        ctx: prost::encoding::DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        use prost::encoding::{
            check_wire_type, decode_varint, message, skip_field, string, WireType,
        };
        match tag {
            REQ_VERSION_INFO => string::merge(wire_type, &mut self.version_info, buf, ctx),
            REQ_NODE => message::merge(
                wire_type,
                self.node.get_or_insert_with(NodeId::default),
                buf,
                ctx,
            ),
            REQ_RESOURCE_NAMES => {
                check_wire_type(WireType::LengthDelimited, wire_type)?;
                let len = decode_varint(buf)?;
                let len = usize::try_from(len)
                    .ok()
                    .filter(|l| *l <= buf.remaining())
                    .ok_or_else(|| decode_error("resource name longer than the message"))?;
                let names = &mut self.resource_names;
                let start = names.bytes.len();
                names.bytes.resize(start + len, 0);
                buf.copy_to_slice(&mut names.bytes[start..]);
                let end = u32::try_from(names.bytes.len())
                    .map_err(|_| decode_error("resource names over 4 GiB"))?;
                names.ends.push(end);
                Ok(())
            }
            REQ_TYPE_URL => string::merge(wire_type, &mut self.type_url, buf, ctx),
            REQ_RESPONSE_NONCE => string::merge(wire_type, &mut self.response_nonce, buf, ctx),
            REQ_ERROR_DETAIL => message::merge(
                wire_type,
                self.error_detail.get_or_insert_with(Status::default),
                buf,
                ctx,
            ),
            _ => skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        use prost::encoding::{bytes as pb_bytes, message, string};
        let mut len = 0;
        if !self.version_info.is_empty() {
            len += string::encoded_len(REQ_VERSION_INFO, &self.version_info);
        }
        if let Some(node) = &self.node {
            len += message::encoded_len(REQ_NODE, node);
        }
        len += self
            .resource_names
            .iter()
            .map(|n| pb_bytes::encoded_len(REQ_RESOURCE_NAMES, &n.to_vec()))
            .sum::<usize>();
        if !self.type_url.is_empty() {
            len += string::encoded_len(REQ_TYPE_URL, &self.type_url);
        }
        if !self.response_nonce.is_empty() {
            len += string::encoded_len(REQ_RESPONSE_NONCE, &self.response_nonce);
        }
        if let Some(status) = &self.error_detail {
            len += message::encoded_len(REQ_ERROR_DETAIL, status);
        }
        len
    }

    fn clear(&mut self) {
        *self = SotwRequest::default();
    }
}

/// prost offers no other way to make a decode error of one's own (the constructor is deprecated
/// for outside use, not yet replaced).
#[allow(deprecated)]
fn decode_error(message: &'static str) -> prost::DecodeError {
    prost::DecodeError::new(message)
}

impl From<&DiscoveryRequest> for SotwRequest {
    fn from(r: &DiscoveryRequest) -> SotwRequest {
        SotwRequest {
            version_info: r.version_info.clone(),
            node: r.node.as_ref().map(|n| NodeId {
                id: n.id.clone(),
                cluster: n.cluster.clone(),
            }),
            resource_names: r.resource_names.iter().collect(),
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
        requested: &Names,
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
fn names_digest(names: &Names) -> (usize, u64) {
    use std::hash::BuildHasher;
    (
        names.len(),
        foldhash::fast::FixedState::default().hash_one(names),
    )
}

#[cfg(test)]
mod tests;
