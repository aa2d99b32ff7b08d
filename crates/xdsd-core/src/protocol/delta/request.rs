//! [`DeltaRequest`]: a `DeltaDiscoveryRequest` as the server reads it.

use std::collections::HashMap;

use bytes::{Buf, BufMut, Bytes};
use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, ResourceLocator};
use envoy_types::pb::google::rpc::Status;
use prost::encoding::{hash_map, message, skip_field, string, DecodeContext, WireType};
use prost::DecodeError;

use crate::protocol::fields::{
    encode_node, merge_node, merge_text, names_key, node_bytes, node_len, Names,
};
use crate::protocol::Text;
use crate::store::{string_field, string_len};

/// A `DeltaDiscoveryRequest` as the server reads it. A first request may subscribe to 10,000
/// names: read from a frame's bytes, the names to subscribe and to unsubscribe are each one slice
/// of those bytes (not a `String` each), and so are the type URL and the nonce; the node is
/// kept as received and decoded only when it differs from the one the session has. Same wire
/// format as `envoy.service.discovery.v3.DeltaDiscoveryRequest`.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct DeltaRequest {
    /// The node's encoding as received (see [`SotwRequest::node_raw`](super::super::sotw::SotwRequest)).
    pub node_raw: Bytes,
    /// The type URL asked for.
    pub type_url: Text,
    /// Names to subscribe to.
    pub resource_names_subscribe: Names,
    /// Names to unsubscribe from.
    pub resource_names_unsubscribe: Names<UNSUBSCRIBE_KEY>,
    /// What a reconnecting client holds: name → version.
    pub initial_resource_versions: HashMap<String, String>,
    /// The nonce of the response this answers (empty: none).
    pub response_nonce: Text,
    /// Set on a NACK: why the client rejected the response.
    pub error_detail: Option<Status>,
    /// xRFC TP2: names with their own dynamic parameters.
    pub resource_locators_subscribe: Vec<ResourceLocator>,
    /// xRFC TP2: locators to unsubscribe from.
    pub resource_locators_unsubscribe: Vec<ResourceLocator>,
}

// DeltaDiscoveryRequest field numbers.
const NODE: u32 = 1;
const TYPE_URL: u32 = 2;
const NAMES_SUBSCRIBE: u32 = 3;
const NAMES_UNSUBSCRIBE: u32 = 4;
const INITIAL_VERSIONS: u32 = 5;
const RESPONSE_NONCE: u32 = 6;
const ERROR_DETAIL: u32 = 7;
const LOCATORS_SUBSCRIBE: u32 = 8;
const LOCATORS_UNSUBSCRIBE: u32 = 9;

/// The key of `resource_names_unsubscribe`.
pub const UNSUBSCRIBE_KEY: u8 = names_key(NAMES_UNSUBSCRIBE);

impl prost::Message for DeltaRequest {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        encode_node(NODE, &self.node_raw, buf);
        string_field(TYPE_URL, &self.type_url, buf);
        self.resource_names_subscribe.encode(buf);
        self.resource_names_unsubscribe.encode(buf);
        hash_map::encode(
            string::encode,
            string::encoded_len,
            string::encode,
            string::encoded_len,
            INITIAL_VERSIONS,
            &self.initial_resource_versions,
            buf,
        );
        string_field(RESPONSE_NONCE, &self.response_nonce, buf);
        if let Some(status) = &self.error_detail {
            message::encode(ERROR_DETAIL, status, buf);
        }
        message::encode_repeated(LOCATORS_SUBSCRIBE, &self.resource_locators_subscribe, buf);
        message::encode_repeated(
            LOCATORS_UNSUBSCRIBE,
            &self.resource_locators_unsubscribe,
            buf,
        );
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            NODE => merge_node(wire_type, &mut self.node_raw, buf),
            TYPE_URL => merge_text(wire_type, &mut self.type_url, buf),
            NAMES_SUBSCRIBE => self.resource_names_subscribe.merge(wire_type, buf),
            NAMES_UNSUBSCRIBE => self.resource_names_unsubscribe.merge(wire_type, buf),
            INITIAL_VERSIONS => hash_map::merge(
                string::merge,
                string::merge,
                &mut self.initial_resource_versions,
                buf,
                ctx,
            ),
            RESPONSE_NONCE => merge_text(wire_type, &mut self.response_nonce, buf),
            ERROR_DETAIL => message::merge(
                wire_type,
                self.error_detail.get_or_insert_with(Status::default),
                buf,
                ctx,
            ),
            LOCATORS_SUBSCRIBE => {
                message::merge_repeated(wire_type, &mut self.resource_locators_subscribe, buf, ctx)
            }
            LOCATORS_UNSUBSCRIBE => message::merge_repeated(
                wire_type,
                &mut self.resource_locators_unsubscribe,
                buf,
                ctx,
            ),
            _ => skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        node_len(NODE, &self.node_raw)
            + string_len(&self.type_url)
            + self.resource_names_subscribe.encoded_len()
            + self.resource_names_unsubscribe.encoded_len()
            + hash_map::encoded_len(
                string::encoded_len,
                string::encoded_len,
                INITIAL_VERSIONS,
                &self.initial_resource_versions,
            )
            + string_len(&self.response_nonce)
            + self
                .error_detail
                .as_ref()
                .map_or(0, |s| message::encoded_len(ERROR_DETAIL, s))
            + message::encoded_len_repeated(LOCATORS_SUBSCRIBE, &self.resource_locators_subscribe)
            + message::encoded_len_repeated(
                LOCATORS_UNSUBSCRIBE,
                &self.resource_locators_unsubscribe,
            )
    }

    /// Empties the request field by field, as a stream's loop does with every request it
    /// handled (`Requests::recycle`: the next is decoded in its box): equal to a default one
    /// afterwards, holding nothing of the frame it was read from and no room for what a first
    /// request held (a reconnecting client's versions, its locators). An ACK's empty map and
    /// lists are left as they are: a default request made and the old one dropped cost some 180
    /// instructions per request, a new map's hasher among them.
    fn clear(&mut self) {
        self.node_raw = Bytes::new();
        self.type_url = Text::default();
        self.resource_names_subscribe = Names::default();
        self.resource_names_unsubscribe = Names::default();
        if self.initial_resource_versions.capacity() > 0 {
            self.initial_resource_versions = HashMap::new();
        }
        self.response_nonce = Text::default();
        self.error_detail = None;
        if self.resource_locators_subscribe.capacity() > 0 {
            self.resource_locators_subscribe = Vec::new();
        }
        if self.resource_locators_unsubscribe.capacity() > 0 {
            self.resource_locators_unsubscribe = Vec::new();
        }
    }
}

impl From<&DeltaDiscoveryRequest> for DeltaRequest {
    fn from(r: &DeltaDiscoveryRequest) -> DeltaRequest {
        DeltaRequest {
            node_raw: node_bytes(r.node.as_ref()),
            type_url: (&r.type_url).into(),
            resource_names_subscribe: r.resource_names_subscribe.iter().collect(),
            resource_names_unsubscribe: r.resource_names_unsubscribe.iter().collect(),
            initial_resource_versions: r.initial_resource_versions.clone(),
            response_nonce: (&r.response_nonce).into(),
            error_detail: r.error_detail.clone(),
            resource_locators_subscribe: r.resource_locators_subscribe.clone(),
            resource_locators_unsubscribe: r.resource_locators_unsubscribe.clone(),
        }
    }
}

impl From<DeltaDiscoveryRequest> for DeltaRequest {
    fn from(r: DeltaDiscoveryRequest) -> DeltaRequest {
        DeltaRequest::from(&r)
    }
}
