//! Protobuf on the wire without message objects: a field scanner for the few fields the load
//! generator reads, hand encoders for the requests it writes, and a tonic codec that moves whole
//! messages as `Bytes`. The clients share the machine's two cores with the server under test, so
//! they must stay cheap: they never decode a resource beyond its name and marker.

use bytes::{Buf, BufMut, Bytes};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Status;

/// A field's value: varints and fixed numbers as `u64`, length-delimited fields as a slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    Int(u64),
    Bytes(&'a [u8]),
}

/// Iterates over the top-level fields of an encoded message; stops at the first malformed field.
pub struct Fields<'a> {
    buf: &'a [u8],
}

pub fn fields(buf: &[u8]) -> Fields<'_> {
    Fields { buf }
}

fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = buf.split_first()?;
        *buf = rest;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}

impl<'a> Iterator for Fields<'a> {
    type Item = (u32, Value<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.buf.is_empty() {
            return None;
        }
        let key = varint(&mut self.buf)?;
        let tag = (key >> 3) as u32;
        let value = match key & 7 {
            0 => Value::Int(varint(&mut self.buf)?),
            1 => {
                let (v, rest) = self.buf.split_at_checked(8)?;
                self.buf = rest;
                Value::Int(u64::from_le_bytes(v.try_into().ok()?))
            }
            2 => {
                let len = varint(&mut self.buf)? as usize;
                let (v, rest) = self.buf.split_at_checked(len)?;
                self.buf = rest;
                Value::Bytes(v)
            }
            5 => {
                let (v, rest) = self.buf.split_at_checked(4)?;
                self.buf = rest;
                Value::Int(u64::from(u32::from_le_bytes(v.try_into().ok()?)))
            }
            _ => {
                self.buf = &[];
                return None;
            }
        };
        Some((tag, value))
    }
}

/// The first length-delimited field `tag` of `buf`.
pub fn bytes_field(buf: &[u8], tag: u32) -> Option<&[u8]> {
    fields(buf).find_map(|(t, v)| match v {
        Value::Bytes(b) if t == tag => Some(b),
        _ => None,
    })
}

/// The integer at `path` (nested messages by field number, the last one a varint). A missing
/// wrapper value (the encoding of 0) reads as `Some(0)` when its parent is present.
pub fn marker(buf: &[u8], path: &[u32]) -> Option<u32> {
    let (last, parents) = path.split_last()?;
    let mut cur = buf;
    for &tag in parents {
        cur = bytes_field(cur, tag)?;
    }
    Some(
        fields(cur)
            .find_map(|(t, v)| match v {
                Value::Int(n) if t == *last => Some(n as u32),
                _ => None,
            })
            .unwrap_or(0),
    )
}

fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

pub fn put_bytes(buf: &mut Vec<u8>, tag: u32, bytes: &[u8]) {
    put_varint(buf, u64::from(tag << 3 | 2));
    put_varint(buf, bytes.len() as u64);
    buf.extend_from_slice(bytes);
}

fn put_str(buf: &mut Vec<u8>, tag: u32, s: &str) {
    if !s.is_empty() {
        put_bytes(buf, tag, s.as_bytes());
    }
}

/// A `DiscoveryRequest` (SotW), encoded by hand from borrowed parts.
pub fn sotw_request<'a>(
    node: &[u8],
    type_url: &str,
    version_info: &str,
    nonce: &str,
    names: impl Iterator<Item = &'a str>,
) -> Bytes {
    let mut buf = Vec::with_capacity(64 + node.len());
    put_str(&mut buf, 1, version_info);
    put_bytes(&mut buf, 2, node);
    for n in names {
        put_bytes(&mut buf, 3, n.as_bytes());
    }
    put_str(&mut buf, 4, type_url);
    put_str(&mut buf, 5, nonce);
    buf.into()
}

/// A `DeltaDiscoveryRequest`, encoded by hand from borrowed parts.
pub fn delta_request<'a>(
    node: &[u8],
    type_url: &str,
    nonce: &str,
    subscribe: impl Iterator<Item = &'a str>,
    unsubscribe: impl Iterator<Item = &'a str>,
) -> Bytes {
    let mut buf = Vec::with_capacity(64 + node.len());
    put_bytes(&mut buf, 1, node);
    put_str(&mut buf, 2, type_url);
    for n in subscribe {
        put_bytes(&mut buf, 3, n.as_bytes());
    }
    for n in unsubscribe {
        put_bytes(&mut buf, 4, n.as_bytes());
    }
    put_str(&mut buf, 6, nonce);
    buf.into()
}

/// Whole gRPC messages as `Bytes`, both ways: the clients encode and scan by hand, and the
/// transport-limit server writes pre-encoded responses.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawCodec;

#[derive(Debug, Clone, Copy, Default)]
pub struct RawEncoder;

#[derive(Debug, Clone, Copy, Default)]
pub struct RawDecoder;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;

    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

impl Encoder for RawEncoder {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawDecoder {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        let n = src.remaining();
        Ok(Some(src.copy_to_bytes(n)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::core::v3::Node;
    use envoy_types::pb::envoy::service::discovery::v3::{
        DeltaDiscoveryRequest, DiscoveryRequest, DiscoveryResponse,
    };
    use envoy_types::pb::google::protobuf::Any;
    use prost::Message;

    fn node() -> Vec<u8> {
        Node {
            id: "n".into(),
            cluster: "c".into(),
            ..Default::default()
        }
        .encode_to_vec()
    }

    #[test]
    fn requests_decode_as_envoy_messages() {
        let r = sotw_request(&node(), "t", "v1", "n1", ["a", "b"].into_iter());
        let d = DiscoveryRequest::decode(r).unwrap();
        assert_eq!(d.version_info, "v1");
        assert_eq!(d.node.unwrap().id, "n");
        assert_eq!(d.resource_names, ["a", "b"]);
        assert_eq!(d.type_url, "t");
        assert_eq!(d.response_nonce, "n1");

        let r = delta_request(&node(), "t", "", ["a"].into_iter(), ["b"].into_iter());
        let d = DeltaDiscoveryRequest::decode(r).unwrap();
        assert_eq!(d.node.unwrap().cluster, "c");
        assert_eq!(d.resource_names_subscribe, ["a"]);
        assert_eq!(d.resource_names_unsubscribe, ["b"]);
        assert_eq!(d.response_nonce, "");
    }

    #[test]
    fn scanner_reads_responses() {
        let resp = DiscoveryResponse {
            version_info: "7".into(),
            resources: vec![
                Any {
                    type_url: "x".into(),
                    value: vec![10, 1, b'q'],
                },
                Any::default(),
            ],
            type_url: "t".into(),
            nonce: "5".into(),
            ..Default::default()
        }
        .encode_to_vec();
        let f: Vec<_> = fields(&resp).collect();
        assert_eq!(f[0], (1, Value::Bytes(b"7")));
        assert_eq!(f.iter().filter(|(t, _)| *t == 2).count(), 2);
        let any = bytes_field(&resp, 2).unwrap();
        let value = bytes_field(any, 2).unwrap();
        assert_eq!(bytes_field(value, 1), Some(&b"q"[..]));
        assert_eq!(bytes_field(&resp, 5), Some(&b"5"[..]));
        // Truncated input ends the iteration instead of panicking.
        assert!(fields(&resp[..resp.len() - 1]).count() < f.len());
    }
}
