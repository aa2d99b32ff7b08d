//! [`SotwRequest`]: a `DiscoveryRequest` as the server reads it.

use bytes::{Buf, BufMut, Bytes};
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, ResourceLocator};
use envoy_types::pb::google::rpc::Status;
use prost::encoding::{message, skip_field, DecodeContext, WireType};
use prost::{DecodeError, Message as _};

use crate::protocol::fields::{encode_node, merge_node, merge_text, node_bytes, node_len, Names};
use crate::protocol::Text;
use crate::store::{string_field, string_len};

/// A `DiscoveryRequest` as the server reads it. An ACK repeats the client's whole list of names
/// (hundreds, on every response): read from a frame's bytes, the names, the version, the type
/// URL and the nonce are slices of those bytes (no allocation), and the names are compared by
/// digest; the node is kept as received and decoded only when asked for. Same wire format as
/// `envoy.service.discovery.v3.DiscoveryRequest`; fields xdsd does not use are skipped.
///
/// Decoded as a message of its own (not as a field of another: a run of names is read up to
/// the end of the buffer's chunk).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SotwRequest {
    /// The version the client has (empty at first).
    pub version_info: Text,
    /// The node's encoding as received (a slice of the request's bytes when it was read from
    /// `Bytes`): the session decodes the whole `Node` only when it differs from the one it
    /// already has (Envoy repeats its node on every request).
    pub node_raw: Bytes,
    /// The names asked for (none: wildcard, at first).
    pub resource_names: Names,
    /// xRFC TP2: names with their own dynamic parameters.
    pub resource_locators: Vec<ResourceLocator>,
    /// The type URL asked for.
    pub type_url: Text,
    /// The nonce of the response this answers (empty: none).
    pub response_nonce: Text,
    /// Set on a NACK: why the client rejected the response.
    pub error_detail: Option<Status>,
}

/// The identity fields of `envoy.config.core.v3.Node`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeId {
    /// The node's id.
    #[prost(string, tag = "1")]
    pub id: String,
    /// The node's cluster.
    #[prost(string, tag = "2")]
    pub cluster: String,
}

impl SotwRequest {
    /// The node's identity, decoded from [`SotwRequest::node_raw`]; `None` without a node or
    /// when it does not decode.
    pub fn node(&self) -> Option<NodeId> {
        if self.node_raw.is_empty() {
            return None;
        }
        NodeId::decode(self.node_raw.as_ref()).ok()
    }
}

// DiscoveryRequest field numbers.
const REQ_VERSION_INFO: u32 = 1;
const REQ_NODE: u32 = 2;
const REQ_RESOURCE_NAMES: u32 = 3;
const REQ_TYPE_URL: u32 = 4;
const REQ_RESPONSE_NONCE: u32 = 5;
const REQ_ERROR_DETAIL: u32 = 6;
const REQ_RESOURCE_LOCATORS: u32 = 7;

impl prost::Message for SotwRequest {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        string_field(REQ_VERSION_INFO, &self.version_info, buf);
        encode_node(REQ_NODE, &self.node_raw, buf);
        self.resource_names.encode(buf);
        string_field(REQ_TYPE_URL, &self.type_url, buf);
        string_field(REQ_RESPONSE_NONCE, &self.response_nonce, buf);
        if let Some(status) = &self.error_detail {
            message::encode(REQ_ERROR_DETAIL, status, buf);
        }
        message::encode_repeated(REQ_RESOURCE_LOCATORS, &self.resource_locators, buf);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            REQ_VERSION_INFO => merge_text(wire_type, &mut self.version_info, buf),
            REQ_NODE => merge_node(wire_type, &mut self.node_raw, buf),
            REQ_RESOURCE_LOCATORS => {
                message::merge_repeated(wire_type, &mut self.resource_locators, buf, ctx)
            }
            REQ_RESOURCE_NAMES => self.resource_names.merge(wire_type, buf),
            REQ_TYPE_URL => merge_text(wire_type, &mut self.type_url, buf),
            REQ_RESPONSE_NONCE => merge_text(wire_type, &mut self.response_nonce, buf),
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
        string_len(&self.version_info)
            + node_len(REQ_NODE, &self.node_raw)
            + self.resource_names.encoded_len()
            + string_len(&self.type_url)
            + string_len(&self.response_nonce)
            + self
                .error_detail
                .as_ref()
                .map_or(0, |s| message::encoded_len(REQ_ERROR_DETAIL, s))
            + message::encoded_len_repeated(REQ_RESOURCE_LOCATORS, &self.resource_locators)
    }

    /// Empties the request field by field (see `DeltaRequest`'s `clear`): equal to a default
    /// one afterwards, holding nothing of the frame it was read from.
    fn clear(&mut self) {
        self.version_info = Text::default();
        self.node_raw = Bytes::new();
        self.resource_names = Names::default();
        if self.resource_locators.capacity() > 0 {
            self.resource_locators = Vec::new();
        }
        self.type_url = Text::default();
        self.response_nonce = Text::default();
        self.error_detail = None;
    }
}

impl From<&DiscoveryRequest> for SotwRequest {
    fn from(r: &DiscoveryRequest) -> SotwRequest {
        SotwRequest {
            version_info: (&r.version_info).into(),
            node_raw: node_bytes(r.node.as_ref()),
            resource_names: r.resource_names.iter().collect(),
            resource_locators: r.resource_locators.clone(),
            type_url: (&r.type_url).into(),
            response_nonce: (&r.response_nonce).into(),
            error_detail: r.error_detail.clone(),
        }
    }
}
