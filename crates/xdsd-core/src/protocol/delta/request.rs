//! [`DeltaRequest`]: a `DeltaDiscoveryRequest` as the server reads it.

use bytes::{Buf, BufMut, Bytes};
use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, ResourceLocator};
use envoy_types::pb::google::rpc::Status;
use prost::encoding::{
    decode_key, encode_key, encode_varint, message, skip_field, DecodeContext, WireType,
};
use prost::DecodeError;

use crate::hash::HashMap;
use crate::protocol::fields::{
    encode_node, length_delimited, merge_node, merge_text, names_key, node_bytes, node_len, Names,
};
use crate::protocol::Text;
use crate::store::{field_len, string_field, string_len};

/// What a reconnecting delta client holds, name to version (`initial_resource_versions`): each
/// name and version a slice of the request it came in, looked up by a name's bytes. A client
/// resuming 100,000 resources sends a map of 100,000 entries; read as `String`s into a map of
/// std's hasher, they were 200,000 allocations and copies and 45 % of the server's instructions
/// for that request (BENCHMARKS.md, stop 76).
pub type InitialVersions = HashMap<Text, Text>;

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
    pub initial_resource_versions: InitialVersions,
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
        for (name, version) in &self.initial_resource_versions {
            encode_key(INITIAL_VERSIONS, WireType::LengthDelimited, buf);
            encode_varint(entry_len(name, version) as u64, buf);
            string_field(1, name, buf);
            string_field(2, version, buf);
        }
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
            INITIAL_VERSIONS => merge_version(wire_type, &mut self.initial_resource_versions, buf),
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
            + self
                .initial_resource_versions
                .iter()
                .map(|(name, version)| field_len(entry_len(name, version)))
                .sum::<usize>()
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
            self.initial_resource_versions = InitialVersions::default();
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

/// The encoded length of a map entry of `name` and `version` (an empty one is left out, as
/// protobuf's maps leave out a default key or value).
fn entry_len(name: &str, version: &str) -> usize {
    string_len(name) + string_len(version)
}

/// Reads one entry of `initial_resource_versions` into `versions`: its name (field 1) and
/// version (field 2) slices of the request's bytes, either missing read as empty; a name given
/// again keeps its last version (protobuf's rule for maps).
fn merge_version(
    wire_type: WireType,
    versions: &mut InitialVersions,
    buf: &mut impl Buf,
) -> Result<(), DecodeError> {
    let mut entry = length_delimited(wire_type, buf, "map entry longer than the message")?;
    let (mut name, mut version) = (Text::default(), Text::default());
    while entry.has_remaining() {
        let (tag, wire_type) = decode_key(&mut entry)?;
        match tag {
            1 => merge_text(wire_type, &mut name, &mut entry)?,
            2 => merge_text(wire_type, &mut version, &mut entry)?,
            _ => skip_field(wire_type, tag, &mut entry, DecodeContext::default())?,
        }
    }
    versions.insert(name, version);
    Ok(())
}

impl From<&DeltaDiscoveryRequest> for DeltaRequest {
    fn from(r: &DeltaDiscoveryRequest) -> DeltaRequest {
        DeltaRequest {
            node_raw: node_bytes(r.node.as_ref()),
            type_url: (&r.type_url).into(),
            resource_names_subscribe: r.resource_names_subscribe.iter().collect(),
            resource_names_unsubscribe: r.resource_names_unsubscribe.iter().collect(),
            initial_resource_versions: r
                .initial_resource_versions
                .iter()
                .map(|(name, version)| (Text::from(name), Text::from(version)))
                .collect(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    fn envoy(versions: &[(&str, &str)]) -> DeltaDiscoveryRequest {
        DeltaDiscoveryRequest {
            type_url: "t".into(),
            initial_resource_versions: versions
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        }
    }

    /// An entry's bytes: `name` as field 1, `version` as field 2, as given.
    fn entry(name: &[u8], version: &[u8]) -> Vec<u8> {
        let mut e = Vec::new();
        for (tag, value) in [(1u32, name), (2, version)] {
            prost::encoding::encode_key(tag, WireType::LengthDelimited, &mut e);
            prost::encoding::encode_varint(value.len() as u64, &mut e);
            e.extend_from_slice(value);
        }
        let mut field = Vec::new();
        prost::encoding::encode_key(INITIAL_VERSIONS, WireType::LengthDelimited, &mut field);
        prost::encoding::encode_varint(e.len() as u64, &mut field);
        field.extend_from_slice(&e);
        field
    }

    #[test]
    fn initial_resource_versions_read_as_protobuf_writes_them_and_are_written_back_alike() {
        let sent = envoy(&[("a", "1"), ("b", ""), ("", "3"), ("é", "v2")]);
        let read = DeltaRequest::decode(sent.encode_to_vec().as_slice()).expect("decodes");
        assert_eq!(read, DeltaRequest::from(&sent));
        assert_eq!(read.initial_resource_versions.len(), 4);
        let get = |name: &str| {
            let found = read.initial_resource_versions.get(name.as_bytes());
            found.map(Text::as_str)
        };
        assert_eq!(get("a"), Some("1"));
        assert_eq!(get("b"), Some(""));
        assert_eq!(get("é"), Some("v2"));
        let again =
            DeltaDiscoveryRequest::decode(read.encode_to_vec().as_slice()).expect("decodes");
        assert_eq!(
            again.initial_resource_versions,
            sent.initial_resource_versions
        );
        assert_eq!(read.encoded_len(), read.encode_to_vec().len());
    }

    #[test]
    fn an_initial_resource_version_named_twice_keeps_the_last() {
        let bytes = [entry(b"a", b"1"), entry(b"a", b"2")].concat();
        let read = DeltaRequest::decode(bytes.as_slice()).expect("decodes");
        assert_eq!(read.initial_resource_versions.len(), 1);
        let found = read.initial_resource_versions.get(&b"a"[..]);
        assert_eq!(found.map(Text::as_str), Some("2"));
    }

    #[test]
    fn an_initial_resource_version_not_utf8_is_refused() {
        for bytes in [entry(b"\xff", b"1"), entry(b"a", b"\xc3")] {
            assert!(DeltaRequest::decode(bytes.as_slice()).is_err(), "{bytes:?}");
        }
    }
}
