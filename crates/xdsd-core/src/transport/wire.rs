//! Responses written from pre-encoded pieces. Protobuf lets a message's fields come in any order
//! and a repeated field is its elements one after another, so a `DiscoveryResponse` is the
//! resources' shared bytes (encoded once in the store) plus this stream's few fields: no resource
//! is encoded per stream. Decoding is never needed on this side: these types only encode.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::encoding::{skip_field, DecodeContext, WireType};
use prost::{DecodeError, Message};

use crate::protocol::delta::{unresolved_entry, DeltaResponse};
use crate::protocol::sotw::{SotwResources, SotwResponse};
use crate::store::{
    bytes_field, bytes_len, field_len, put_length_delimited, resource_name, string_field,
    string_len,
};

/// A response body that can write itself from pre-encoded pieces.
pub trait Body: std::fmt::Debug + Send + Sync {
    /// Writes the body (the message without its gRPC frame header).
    fn encode_body(&self, buf: &mut impl BufMut);
    /// The body's length in bytes.
    fn body_len(&self) -> usize;
}

/// A response on the wire: `Wire<SotwResponse>` is a `DiscoveryResponse`,
/// `Wire<DeltaResponse>` a `DeltaDiscoveryResponse`.
#[derive(Debug)]
pub struct Wire<R>(Option<R>);

/// A `DiscoveryResponse` on the wire.
pub type SotwWire = Wire<SotwResponse>;
/// A `DeltaDiscoveryResponse` on the wire.
pub type DeltaWire = Wire<DeltaResponse>;

impl<R> Default for Wire<R> {
    fn default() -> Self {
        Wire(None)
    }
}

impl<R> From<R> for Wire<R> {
    fn from(response: R) -> Self {
        Wire(Some(response))
    }
}

impl<R: Body> Message for Wire<R> {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        if let Some(r) = &self.0 {
            r.encode_body(buf)
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        self.0.as_ref().map_or(0, |r| r.body_len())
    }

    fn clear(&mut self) {
        self.0 = None;
    }
}

/// `control_plane` of every response: which xdsd sent it (`xdsd <version> on <host>`), the
/// `control_plane.identifier` Envoy shows in its config dump, so that an operator can tell the
/// replica a proxy took its config from.
static CONTROL_PLANE: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| {
    envoy_types::pb::envoy::config::core::v3::ControlPlane {
        identifier: control_plane_identifier(),
    }
    .encode_to_vec()
});

/// `xdsd <version> on <host>` (the host from the kernel, else `$HOSTNAME`).
pub fn control_plane_identifier() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown host".to_owned());
    format!("xdsd {} on {host}", env!("CARGO_PKG_VERSION"))
}

fn control_plane_len(named: bool) -> usize {
    if named {
        field_len(CONTROL_PLANE.len())
    } else {
        0
    }
}

// DiscoveryResponse field numbers.
const VERSION_INFO: u32 = 1;
const CONTROL_PLANE_FIELD: u32 = 6;
const RESOURCES: u32 = 2;
const TYPE_URL: u32 = 4;
const NONCE: u32 = 5;

impl Body for SotwResponse {
    fn encode_body(&self, buf: &mut impl BufMut) {
        string_field(VERSION_INFO, &self.version_info, buf);
        match &self.resources {
            SotwResources::All(t) => buf.put_slice(&t.sotw_body(self.encoding)),
            SotwResources::Some(list) => {
                for resource in list.iter() {
                    put_length_delimited(buf, RESOURCES, resource.sotw_entry(self.encoding));
                }
            }
        }
        string_field(TYPE_URL, &self.type_url, buf);
        string_field(NONCE, &self.nonce, buf);
        if self.control_plane {
            put_length_delimited(buf, CONTROL_PLANE_FIELD, &CONTROL_PLANE);
        }
    }

    fn body_len(&self) -> usize {
        let resources = match &self.resources {
            SotwResources::All(t) => t.sotw_body(self.encoding).len(),
            SotwResources::Some(list) => list
                .iter()
                .map(|x| field_len(x.sotw_entry(self.encoding).len()))
                .sum(),
        };
        string_len(&self.version_info)
            + resources
            + string_len(&self.type_url)
            + bytes_len(self.nonce.as_bytes())
            + control_plane_len(self.control_plane)
    }
}

// DeltaDiscoveryResponse field numbers.
const SYSTEM_VERSION_INFO: u32 = 1;
const DELTA_RESOURCES: u32 = 2;
const DELTA_TYPE_URL: u32 = 4;
const DELTA_NONCE: u32 = 5;
const DELTA_CONTROL_PLANE: u32 = 7;
const REMOVED_RESOURCES: u32 = 6;
const REMOVED_RESOURCE_NAMES: u32 = 8;

/// The `resources` entries of a delta response's resources, each apart (when they are not one
/// shared run, `whole`).
fn resource_entries(response: &DeltaResponse) -> impl Iterator<Item = &[u8]> + '_ {
    let encoding = response.encoding;
    let each = if response.whole.is_some() {
        &[][..]
    } else {
        &response.resources[..]
    };
    each.iter().map(move |r| &r.delta_entry(encoding)[..])
}

/// The `resources` entries of a delta response's heartbeats.
fn heartbeat_entries(response: &DeltaResponse) -> impl Iterator<Item = &[u8]> + '_ {
    let encoding = response.encoding;
    response
        .heartbeats
        .iter()
        .map(move |r| &r.heartbeat_entry(encoding)[..])
}

/// The entries of a delta response's unresolved VHDS aliases.
fn unresolved_entries(response: &DeltaResponse) -> impl Iterator<Item = Vec<u8>> + '_ {
    response
        .unresolved
        .iter()
        .map(|alias| unresolved_entry(alias, &response.system_version_info, response.encoding))
}

/// The encoded `ResourceName`s of removed variants.
fn removed_names(response: &DeltaResponse) -> impl Iterator<Item = Vec<u8>> + '_ {
    response
        .removed_variants
        .iter()
        .map(|(name, c)| resource_name(name, c.as_deref()).encode_to_vec())
}

impl Body for DeltaResponse {
    fn encode_body(&self, buf: &mut impl BufMut) {
        if let Some(shared) = &self.shared {
            // The version, the resources and the type URL, encoded once for every stream.
            buf.put_slice(shared);
            string_field(DELTA_NONCE, &self.nonce, buf);
            if self.control_plane {
                put_length_delimited(buf, DELTA_CONTROL_PLANE, &CONTROL_PLANE);
            }
            return;
        }
        string_field(SYSTEM_VERSION_INFO, &self.system_version_info, buf);
        if let Some(whole) = &self.whole {
            buf.put_slice(whole);
        }
        for entry in resource_entries(self).chain(heartbeat_entries(self)) {
            put_length_delimited(buf, DELTA_RESOURCES, entry);
        }
        for entry in unresolved_entries(self) {
            put_length_delimited(buf, DELTA_RESOURCES, &entry);
        }
        string_field(DELTA_TYPE_URL, &self.type_url, buf);
        string_field(DELTA_NONCE, &self.nonce, buf);
        for name in &self.removed {
            put_length_delimited(buf, REMOVED_RESOURCES, name.as_bytes());
        }
        for name in removed_names(self) {
            put_length_delimited(buf, REMOVED_RESOURCE_NAMES, &name);
        }
        if self.control_plane {
            put_length_delimited(buf, DELTA_CONTROL_PLANE, &CONTROL_PLANE);
        }
    }

    fn body_len(&self) -> usize {
        if let Some(shared) = &self.shared {
            return shared.len()
                + bytes_len(self.nonce.as_bytes())
                + control_plane_len(self.control_plane);
        }
        let fixed = string_len(&self.system_version_info)
            + string_len(&self.type_url)
            + bytes_len(self.nonce.as_bytes())
            + control_plane_len(self.control_plane);
        // Nearly every response: resources, nothing else (its length is taken twice, for the
        // observers and for the gRPC header).
        if self.heartbeats.is_empty()
            && self.unresolved.is_empty()
            && self.removed_variants.is_empty()
            && self.removed.is_empty()
        {
            let entries: usize = match &self.whole {
                Some(whole) => whole.len(),
                None => self
                    .resources
                    .iter()
                    .map(|r| field_len(r.delta_entry(self.encoding).len()))
                    .sum(),
            };
            return fixed + entries;
        }
        string_len(&self.system_version_info)
            + self.whole.as_ref().map_or(0, |w| w.len())
            + resource_entries(self)
                .chain(heartbeat_entries(self))
                .map(|x| field_len(x.len()))
                .sum::<usize>()
            + unresolved_entries(self)
                .map(|x| field_len(x.len()))
                .sum::<usize>()
            + removed_names(self)
                .map(|n| field_len(n.len()))
                .sum::<usize>()
            + string_len(&self.type_url)
            + bytes_len(self.nonce.as_bytes())
            + control_plane_len(self.control_plane)
            + self
                .removed
                .iter()
                .map(|n| field_len(n.len()))
                .sum::<usize>()
    }
}

/// One piece of a response on the wire, in order (see [`Pieces`]).
pub(crate) enum Piece<'a> {
    /// A string field, left out when empty (proto3); its bytes (a nonce's are not checked as
    /// UTF-8 to be written).
    Str(u32, &'a [u8]),
    /// A length-delimited field of this stream's (copied).
    Field(u32, &'a [u8]),
    /// A length-delimited field computed for this response.
    Owned(u32, Vec<u8>),
    /// A length-delimited field whose value is the store's shared bytes: only its key and
    /// length are written per stream. Borrowed: a small value is copied, and only a large one,
    /// which goes out as a chunk of its own, is cloned (an atomic count every stream shares).
    Shared(u32, &'a Bytes),
    /// Whole fields, already encoded and shared (a view's SotW body).
    Raw(Bytes),
    /// Whole fields, already encoded and shared, borrowed (a delta push's fields): copied when
    /// small, cloned as a chunk of its own when large.
    Fields(&'a Bytes),
}

/// A response as the pieces of its encoding, by index: what [`Chunks`] writes from the shared
/// bytes without copying them. The pieces are those of [`Body::encode_body`], in its order.
pub(crate) trait Pieces: Body {
    /// The `i`th piece, `None` past the last.
    fn piece(&self, i: usize) -> Option<Piece<'_>>;
}

impl Pieces for SotwResponse {
    fn piece(&self, i: usize) -> Option<Piece<'_>> {
        let resources = match &self.resources {
            SotwResources::All(_) => 1,
            SotwResources::Some(list) => list.len(),
        };
        Some(match i {
            0 => Piece::Str(VERSION_INFO, self.version_info.as_bytes()),
            i if i <= resources => match &self.resources {
                SotwResources::All(t) => Piece::Raw(t.sotw_body(self.encoding)),
                SotwResources::Some(list) => {
                    Piece::Shared(RESOURCES, list[i - 1].sotw_entry(self.encoding))
                }
            },
            i => match i - resources {
                1 => Piece::Str(TYPE_URL, self.type_url.as_bytes()),
                2 => Piece::Str(NONCE, self.nonce.as_bytes()),
                3 if self.control_plane => Piece::Field(CONTROL_PLANE_FIELD, &CONTROL_PLANE),
                _ => return None,
            },
        })
    }
}

impl Pieces for DeltaResponse {
    fn piece(&self, i: usize) -> Option<Piece<'_>> {
        if let Some(shared) = &self.shared {
            // The order of `encode_body`'s.
            return match i {
                0 => Some(Piece::Fields(shared)),
                1 => Some(Piece::Str(DELTA_NONCE, self.nonce.as_bytes())),
                2 if self.control_plane => Some(Piece::Field(DELTA_CONTROL_PLANE, &CONTROL_PLANE)),
                _ => None,
            };
        }
        let encoding = self.encoding;
        let mut i = i;
        // Each part in turn: `i` is counted down past the parts before the one it falls in.
        let mut part = |len: usize| {
            if i < len {
                Some(std::mem::replace(&mut i, usize::MAX))
            } else {
                i -= len;
                None
            }
        };
        if part(1).is_some() {
            return Some(Piece::Str(
                SYSTEM_VERSION_INFO,
                self.system_version_info.as_bytes(),
            ));
        }
        if let Some(whole) = &self.whole {
            if part(1).is_some() {
                return Some(Piece::Raw(whole.clone()));
            }
        } else if let Some(k) = part(self.resources.len()) {
            let entry = self.resources[k].delta_entry(encoding);
            return Some(Piece::Shared(DELTA_RESOURCES, entry));
        }
        if let Some(k) = part(self.heartbeats.len()) {
            let entry = self.heartbeats[k].heartbeat_entry(encoding);
            return Some(Piece::Shared(DELTA_RESOURCES, entry));
        }
        if let Some(k) = part(self.unresolved.len()) {
            let entry = unresolved_entry(&self.unresolved[k], &self.system_version_info, encoding);
            return Some(Piece::Owned(DELTA_RESOURCES, entry));
        }
        if part(1).is_some() {
            return Some(Piece::Str(DELTA_TYPE_URL, self.type_url.as_bytes()));
        }
        if part(1).is_some() {
            return Some(Piece::Str(DELTA_NONCE, self.nonce.as_bytes()));
        }
        if let Some(k) = part(self.removed.len()) {
            return Some(Piece::Field(REMOVED_RESOURCES, self.removed[k].as_bytes()));
        }
        if let Some(k) = part(self.removed_variants.len()) {
            let (name, constraints) = &self.removed_variants[k];
            let encoded = resource_name(name, constraints.as_deref()).encode_to_vec();
            return Some(Piece::Owned(REMOVED_RESOURCE_NAMES, encoded));
        }
        if self.control_plane && part(1).is_some() {
            return Some(Piece::Field(DELTA_CONTROL_PLANE, &CONTROL_PLANE));
        }
        None
    }
}

/// Shared values shorter than this are copied into the chunk being written: a chunk of its own
/// costs an HTTP/2 DATA frame, a queue entry and a poll, more than copying a few KiB (at 256
/// bytes, S1's one-endpoint responses went out as three frames and took a third more CPU).
/// Longer ones go out as chunks of their own, shared with every other stream.
const COPY_BELOW: usize = 4 * 1024;

/// The most copied bytes one chunk holds.
pub(crate) const CHUNK_BYTES: usize = 16 * 1024;

/// A message shorter than this (a push of a changed resource or two, an ACK's empty answer) is
/// written whole into the chunk of the messages handed over with it, when they are small too:
/// a changed Cluster and the endpoints that warm it go out as one chunk, one HTTP/2 DATA frame
/// and one allocation, not one each (as tonic's encoder gathers the messages ready at once).
/// No piece of such a message goes out on its own (each is shorter than [`COPY_BELOW`]).
pub(crate) const MERGE_BELOW: usize = COPY_BELOW;

/// A response written as gRPC message chunks: the 5-byte message header, then its pieces, the
/// small ones copied into chunks of at most [`CHUNK_BYTES`], the store's shared bytes as chunks
/// of their own (no per-stream copy). Chunks are made one at a time, as the transport asks for
/// them: a client that does not read holds at most one.
pub(crate) struct Chunks<R> {
    response: R,
    next: usize,
    header: bool,
    /// A shared value that goes out after the chunk just returned.
    shared: Option<Bytes>,
    /// Bytes of the message handed out so far (header included).
    written: usize,
    /// The message's length (header excluded), computed once: a delta response's is a sum over
    /// its resources, and a response of 10,000 resources goes out in some 60 chunks.
    len: usize,
}

impl<R: Pieces> Chunks<R> {
    /// The chunks of `response`; an error if it is too large for a gRPC message.
    pub(crate) fn new(response: R) -> Result<Chunks<R>, usize> {
        let len = response.body_len();
        if u32::try_from(len).is_err() {
            return Err(len);
        }
        Ok(Chunks {
            response,
            next: 0,
            header: false,
            shared: None,
            written: 0,
            len,
        })
    }

    /// The next chunk, `None` once the response is written.
    pub(crate) fn next_chunk(&mut self) -> Option<Bytes> {
        if let Some(shared) = self.shared.take() {
            self.written += shared.len();
            return Some(shared);
        }
        // Room for what is left, up to a chunk (and the piece that may end it): one allocation,
        // not a buffer grown by doubling.
        let left = (self.len + 5).saturating_sub(self.written);
        let mut buf = BytesMut::with_capacity(left.min(CHUNK_BYTES + COPY_BELOW));
        self.fill(&mut buf);
        // An empty chunk: the shared piece that follows, if any.
        let chunk = if buf.is_empty() {
            self.shared.take()?
        } else {
            buf.freeze()
        };
        self.written += chunk.len();
        Some(chunk)
    }

    /// The message's length with its gRPC header.
    pub(crate) fn message_len(&self) -> usize {
        self.len + 5
    }

    /// Writes the whole message, not begun yet and shorter than [`MERGE_BELOW`] (so that no
    /// piece of it goes out on its own), at the end of `buf`: a chunk that carries it after
    /// other such messages.
    pub(crate) fn write_whole(mut self, buf: &mut BytesMut) {
        debug_assert!(self.written == 0 && self.message_len() < MERGE_BELOW);
        let start = buf.len();
        self.fill(buf);
        debug_assert!(self.shared.is_none() && buf.len() - start == self.message_len());
    }

    /// Writes into `buf` the message's header (first) and pieces, up to a chunk's bytes or a
    /// shared piece that goes out on its own.
    fn fill(&mut self, buf: &mut BytesMut) {
        let start = buf.len();
        if !self.header {
            self.header = true;
            // Not compressed; the length was checked in `new`.
            buf.put_u8(0);
            buf.put_u32(self.len as u32);
        }
        while buf.len() - start < CHUNK_BYTES {
            let Some(piece) = self.response.piece(self.next) else {
                break;
            };
            self.next += 1;
            match piece {
                Piece::Str(tag, value) => bytes_field(tag, value, buf),
                Piece::Field(tag, value) => put_length_delimited(buf, tag, value),
                Piece::Owned(tag, value) => put_length_delimited(buf, tag, &value),
                Piece::Shared(tag, value) if value.len() < COPY_BELOW => {
                    put_length_delimited(buf, tag, value)
                }
                Piece::Shared(tag, value) => {
                    prost::encoding::encode_key(tag, WireType::LengthDelimited, buf);
                    prost::encoding::encode_varint(value.len() as u64, buf);
                    self.shared = Some(value.clone());
                    break;
                }
                Piece::Raw(value) if value.len() < COPY_BELOW => buf.put_slice(&value),
                Piece::Raw(value) => {
                    self.shared = Some(value);
                    break;
                }
                Piece::Fields(value) if value.len() < COPY_BELOW => buf.put_slice(value),
                Piece::Fields(value) => {
                    self.shared = Some(value.clone());
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use envoy_types::pb::envoy::service::discovery::v3::{
        DeltaDiscoveryResponse, DiscoveryResponse,
    };

    use super::*;
    use crate::store::{Resource, TypeSnapshot};
    use crate::types::CLUSTER;

    fn resource(name: &str) -> Arc<Resource> {
        Arc::new(Resource::with_aliases(
            CLUSTER,
            name,
            vec![Arc::from(format!("alias-of-{name}"))],
            Bytes::from(format!("value-of-{name}")),
        ))
    }

    #[test]
    fn sotw_wire_decodes_as_a_discovery_response() {
        let list = vec![resource("a"), resource("b")];
        let all = TypeSnapshot::new(
            CLUSTER.into(),
            list.iter().map(|r| (r.name().clone(), r.clone())).collect(),
        )
        .view(&crate::params::ParamSet::new());
        for (resources, control_plane) in [
            (SotwResources::Some(list.clone().into()), true),
            (SotwResources::All(all), false),
        ] {
            let wire: SotwWire = SotwResponse {
                type_url: CLUSTER.into(),
                version_info: "v1".into(),
                nonce: crate::protocol::Nonce::from(7),
                resources,
                encoding: Default::default(),
                updated: Default::default(),
                oversized: None,
                control_plane,
            }
            .into();
            let bytes = wire.encode_to_vec();
            assert_eq!(bytes.len(), wire.encoded_len());
            let decoded = DiscoveryResponse::decode(bytes.as_slice()).unwrap();
            assert_eq!(decoded.version_info, "v1");
            match decoded.control_plane {
                Some(named) => assert!(named.identifier.starts_with("xdsd "), "{named:?}"),
                None => assert!(!control_plane, "the control plane left out"),
            }
            assert_eq!(decoded.nonce, "7");
            assert_eq!(decoded.type_url, CLUSTER);
            let values: Vec<&[u8]> = decoded
                .resources
                .iter()
                .map(|a| a.value.as_slice())
                .collect();
            assert_eq!(values, [b"value-of-a".as_slice(), b"value-of-b"]);
            assert!(decoded.resources.iter().all(|a| a.type_url == CLUSTER));
        }
    }

    #[test]
    fn delta_wire_decodes_as_a_delta_discovery_response() {
        let wire: DeltaWire = DeltaResponse {
            type_url: CLUSTER.into(),
            system_version_info: "v2".into(),
            nonce: crate::protocol::Nonce::from(9),
            resources: vec![resource("a")].into(),
            removed: vec![Arc::from("gone"), Arc::from("also-gone")],
            whole: None,
            shared: None,
            removed_variants: Vec::new(),
            heartbeats: Vec::new(),
            unresolved: Vec::new(),
            encoding: Default::default(),
            oversized: None,
            control_plane: true,
        }
        .into();
        let bytes = wire.encode_to_vec();
        assert_eq!(bytes.len(), wire.encoded_len());
        let decoded = DeltaDiscoveryResponse::decode(bytes.as_slice()).unwrap();
        assert_eq!(decoded.system_version_info, "v2");
        assert_eq!(
            decoded.control_plane.unwrap().identifier,
            control_plane_identifier()
        );
        assert_eq!(decoded.nonce, "9");
        assert_eq!(decoded.type_url, CLUSTER);
        assert_eq!(decoded.removed_resources, ["gone", "also-gone"]);
        let r = &decoded.resources[0];
        assert_eq!(r.name, "a");
        assert_eq!(r.aliases, ["alias-of-a"]);
        assert_eq!(r.version, &**resource("a").version());
        assert_eq!(r.resource.as_ref().unwrap().value, b"value-of-a");
    }

    #[test]
    fn a_delta_push_written_from_its_shared_fields_is_the_response_written_field_by_field() {
        let (a, b) = (resource("a"), resource("b"));
        let view = TypeSnapshot::new(
            CLUSTER.into(),
            [(a.name().clone(), a.clone()), (b.name().clone(), b.clone())]
                .into_iter()
                .collect(),
        )
        .view(&crate::params::ParamSet::new());
        let list = vec![a.clone(), b.clone()];
        let apart = DeltaResponse {
            type_url: CLUSTER.into(),
            system_version_info: view.version().clone(),
            nonce: crate::protocol::Nonce::from(9),
            resources: list.clone().into(),
            whole: None,
            shared: None,
            removed: Vec::new(),
            removed_variants: Vec::new(),
            heartbeats: Vec::new(),
            unresolved: Vec::new(),
            encoding: Default::default(),
            oversized: None,
            control_plane: true,
        };
        let fields = view.delta_push(&list, Default::default());
        assert_eq!(
            view.delta_push(&list, Default::default()).as_ptr(),
            fields.as_ptr(),
            "the same push again shares the bytes"
        );
        assert_ne!(
            view.delta_push(std::slice::from_ref(&b), Default::default()),
            fields,
            "another push has its own"
        );
        for control_plane in [true, false] {
            let apart = DeltaResponse {
                control_plane,
                ..apart.clone()
            };
            let shared = DeltaResponse {
                shared: Some(view.delta_push(&list, Default::default())),
                ..apart.clone()
            };
            let written = |r: DeltaResponse| {
                let mut chunks = Chunks::new(r).unwrap();
                let mut bytes = Vec::new();
                while let Some(chunk) = chunks.next_chunk() {
                    bytes.extend_from_slice(&chunk);
                }
                bytes
            };
            let (wire_apart, wire_shared): (DeltaWire, DeltaWire) =
                (apart.clone().into(), shared.clone().into());
            let (bytes_apart, bytes_shared) =
                (wire_apart.encode_to_vec(), wire_shared.encode_to_vec());
            assert_eq!(bytes_shared.len(), wire_shared.encoded_len());
            assert_eq!(
                DeltaDiscoveryResponse::decode(bytes_shared.as_slice()).unwrap(),
                DeltaDiscoveryResponse::decode(bytes_apart.as_slice()).unwrap()
            );
            let (chunks_apart, chunks_shared) = (written(apart), written(shared));
            assert_eq!(
                chunks_shared[5..],
                bytes_shared[..],
                "as the chunks write it"
            );
            assert_eq!(chunks_shared.len(), chunks_apart.len());
            assert_eq!(
                chunks_shared[..5],
                chunks_apart[..5],
                "the same gRPC header"
            );
        }
    }

    #[test]
    fn empty_wire_encodes_nothing() {
        let wire = SotwWire::default();
        assert_eq!(wire.encoded_len(), 0);
        assert!(wire.encode_to_vec().is_empty());
    }
}
