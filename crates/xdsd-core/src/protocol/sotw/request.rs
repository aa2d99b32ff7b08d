//! [`SotwRequest`]: a `DiscoveryRequest` as the server reads it.

use bytes::{Buf, BufMut, Bytes};
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, ResourceLocator};
use envoy_types::pb::google::rpc::Status;
use prost::encoding::{check_wire_type, decode_varint, encode_varint};
use prost::encoding::{message, skip_field, DecodeContext, WireType};
use prost::{DecodeError, Message as _};

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
    pub version_info: Text,
    /// The node's encoding as received (a slice of the request's bytes when it was read from
    /// `Bytes`): the session decodes the whole `Node` only when it differs from the one it
    /// already has (Envoy repeats its node on every request).
    pub node_raw: Bytes,
    pub resource_names: Names,
    /// xRFC TP2: names with their own dynamic parameters.
    pub resource_locators: Vec<ResourceLocator>,
    pub type_url: Text,
    pub response_nonce: Text,
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

/// A list of names as a request encodes them: the `resource_names` fields back to back, less
/// the first one's key (`len name`, then `key len name` for each further name). Read from a
/// frame, it is one slice of the frame's bytes.
#[derive(Debug, Default, Clone, PartialEq, Eq, Hash)]
pub struct Names {
    encoded: Bytes,
    count: u32,
}

/// The key of a `resource_names` field (field 3, length-delimited).
const NAME_KEY: u8 = (REQ_RESOURCE_NAMES as u8) << 3 | WireType::LengthDelimited as u8;

impl Names {
    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The names, as received (not checked to be UTF-8).
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        let mut rest: &[u8] = &self.encoded;
        let mut first = true;
        std::iter::from_fn(move || {
            if !std::mem::take(&mut first) {
                rest = rest.strip_prefix(&[NAME_KEY])?;
            }
            // Every entry was checked whole when it was read or pushed.
            let len = usize::try_from(decode_varint(&mut rest).ok()?).ok()?;
            let (name, after) = rest.split_at_checked(len)?;
            rest = after;
            Some(name)
        })
    }

    pub fn push(&mut self, name: &[u8]) {
        let mut encoded = Vec::from(std::mem::take(&mut self.encoded));
        put_entry(&mut encoded, self.count == 0, name);
        self.encoded = encoded.into();
        self.count += 1;
    }

    /// Takes in `count` entries read as they are encoded (see [`names_run`]).
    fn append(&mut self, run: Bytes, count: u32) -> Result<(), DecodeError> {
        if self.count == 0 {
            self.encoded = run;
        } else {
            // Names not next to each other in the message (no client sends them so): copied.
            let mut encoded = Vec::from(std::mem::take(&mut self.encoded));
            encoded.push(NAME_KEY);
            encoded.extend_from_slice(&run);
            self.encoded = encoded.into();
        }
        self.count = self
            .count
            .checked_add(count)
            .ok_or_else(|| decode_error("too many resource names"))?;
        Ok(())
    }
}

/// Writes `name` as an entry of [`Names`]' encoding.
fn put_entry(encoded: &mut Vec<u8>, first: bool, name: &[u8]) {
    if !first {
        encoded.push(NAME_KEY);
    }
    encode_varint(name.len() as u64, encoded);
    encoded.extend_from_slice(name);
}

/// The length of the run of whole `resource_names` entries at the start of `chunk` (which
/// starts after the first one's key), and how many there are.
fn names_run(chunk: &[u8]) -> (usize, u32) {
    let mut rest = chunk;
    let mut count = 0u32;
    let mut end = 0;
    loop {
        let mut entry = rest;
        if count > 0 {
            match entry.split_first() {
                Some((&NAME_KEY, after)) => entry = after,
                _ => break,
            }
        }
        let Ok(len) = decode_varint(&mut entry) else {
            break;
        };
        let Some(after) = usize::try_from(len).ok().and_then(|l| entry.get(l..)) else {
            break;
        };
        let Some(more) = count.checked_add(1) else {
            break;
        };
        count = more;
        rest = after;
        end = chunk.len() - rest.len();
    }
    (end, count)
}

impl<S: AsRef<[u8]>> FromIterator<S> for Names {
    fn from_iter<I: IntoIterator<Item = S>>(names: I) -> Names {
        let mut encoded = Vec::new();
        let mut count = 0u32;
        for name in names {
            put_entry(&mut encoded, count == 0, name.as_ref());
            count += 1;
        }
        Names {
            encoded: encoded.into(),
            count,
        }
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

/// The bytes of a length-delimited field (a slice of the buffer when it is `Bytes`).
fn length_delimited(
    wire_type: WireType,
    buf: &mut impl Buf,
    what: &'static str,
) -> Result<Bytes, DecodeError> {
    check_wire_type(WireType::LengthDelimited, wire_type)?;
    let len = decode_varint(buf)?;
    let len = usize::try_from(len)
        .ok()
        .filter(|l| *l <= buf.remaining())
        .ok_or_else(|| decode_error(what))?;
    Ok(buf.copy_to_bytes(len))
}

fn merge_text(wire_type: WireType, text: &mut Text, buf: &mut impl Buf) -> Result<(), DecodeError> {
    let bytes = length_delimited(wire_type, buf, "string longer than the message")?;
    *text = Text::from_utf8(bytes)
        .map_err(|_| decode_error("invalid string value: data is not UTF-8 encoded"))?;
    Ok(())
}

impl prost::Message for SotwRequest {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        string_field(REQ_VERSION_INFO, &self.version_info, buf);
        if !self.node_raw.is_empty() {
            prost::encoding::bytes::encode(REQ_NODE, &self.node_raw, buf);
        }
        if !self.resource_names.is_empty() {
            buf.put_u8(NAME_KEY);
            buf.put_slice(&self.resource_names.encoded);
        }
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
            REQ_NODE => {
                let node = length_delimited(wire_type, buf, "node longer than the message")?;
                if self.node_raw.is_empty() {
                    self.node_raw = node;
                } else {
                    // Occurrences of a message field merge: their encodings concatenated.
                    let mut both = bytes::BytesMut::from(self.node_raw.as_ref());
                    both.extend_from_slice(&node);
                    self.node_raw = both.freeze();
                }
                Ok(())
            }
            REQ_RESOURCE_LOCATORS => {
                message::merge_repeated(wire_type, &mut self.resource_locators, buf, ctx)
            }
            REQ_RESOURCE_NAMES => {
                check_wire_type(WireType::LengthDelimited, wire_type)?;
                // An ACK repeats every name: the run of them that follows is taken at once.
                let chunk = buf.chunk();
                match names_run(&chunk[..chunk.len().min(buf.remaining())]) {
                    (_, 0) => {
                        // Not whole in this chunk of the buffer: read on its own.
                        let name = length_delimited(
                            wire_type,
                            buf,
                            "resource name longer than the message",
                        )?;
                        self.resource_names.push(&name);
                        Ok(())
                    }
                    (len, count) => {
                        let run = buf.copy_to_bytes(len);
                        self.resource_names.append(run, count)
                    }
                }
            }
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
        let names = if self.resource_names.is_empty() {
            0
        } else {
            1 + self.resource_names.encoded.len()
        };
        let node = if self.node_raw.is_empty() {
            0
        } else {
            prost::encoding::bytes::encoded_len(REQ_NODE, &self.node_raw)
        };
        string_len(&self.version_info)
            + node
            + names
            + string_len(&self.type_url)
            + string_len(&self.response_nonce)
            + self
                .error_detail
                .as_ref()
                .map_or(0, |s| message::encoded_len(REQ_ERROR_DETAIL, s))
            + message::encoded_len_repeated(REQ_RESOURCE_LOCATORS, &self.resource_locators)
    }

    fn clear(&mut self) {
        *self = SotwRequest::default();
    }
}

/// prost offers no other way to make a decode error of one's own (the constructor is deprecated
/// for outside use, not yet replaced).
#[allow(deprecated)]
fn decode_error(message: &'static str) -> DecodeError {
    DecodeError::new(message)
}

impl From<&DiscoveryRequest> for SotwRequest {
    fn from(r: &DiscoveryRequest) -> SotwRequest {
        SotwRequest {
            version_info: (&r.version_info).into(),
            node_raw: r
                .node
                .as_ref()
                .map(|n| Bytes::from(n.encode_to_vec()))
                .unwrap_or_default(),
            resource_names: r.resource_names.iter().collect(),
            resource_locators: r.resource_locators.clone(),
            type_url: (&r.type_url).into(),
            response_nonce: (&r.response_nonce).into(),
            error_detail: r.error_detail.clone(),
        }
    }
}
