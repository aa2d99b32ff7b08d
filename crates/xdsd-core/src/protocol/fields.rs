//! Fields of a request read in place: what [`SotwRequest`](super::sotw::SotwRequest) and
//! [`DeltaRequest`](super::delta::DeltaRequest) share. Read from a frame's bytes, strings and
//! runs of names are slices of those bytes, not allocations of their own.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use envoy_types::pb::envoy::config::core::v3::Node;
use prost::encoding::{check_wire_type, decode_varint, encode_varint, WireType};
use prost::{DecodeError, Message as _};

use super::Text;

/// The key of a length-delimited field `tag` (a one-byte key: tags up to 15).
pub const fn names_key(tag: u32) -> u8 {
    (tag as u8) << 3 | WireType::LengthDelimited as u8
}

/// The key of field 3: `DiscoveryRequest.resource_names` and
/// `DeltaDiscoveryRequest.resource_names_subscribe`.
pub const NAMES_FIELD_3: u8 = names_key(3);

/// A list of names as a request encodes them: the fields of key `KEY` back to back, less the
/// first one's key (`len name`, then `KEY len name` for each further name). Read from a frame,
/// it is one slice of the frame's bytes.
#[derive(Debug, Default, Clone, PartialEq, Eq, Hash)]
pub struct Names<const KEY: u8 = NAMES_FIELD_3> {
    encoded: Bytes,
    count: u32,
}

impl<const KEY: u8> Names<KEY> {
    /// How many names.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The names as a request encodes them (see [`Names`]): two lists of the same names in
    /// the same order have the same bytes.
    pub(crate) fn encoded(&self) -> &[u8] {
        &self.encoded
    }

    /// The names, as received (not checked to be UTF-8).
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        let mut rest: &[u8] = &self.encoded;
        let mut first = true;
        std::iter::from_fn(move || {
            if !std::mem::take(&mut first) {
                rest = rest.strip_prefix(&[KEY])?;
            }
            // No names (an ACK's list): done without a varint read of nothing, whose error is
            // an allocation (prost's `DecodeError`), made and dropped per request.
            if rest.is_empty() {
                return None;
            }
            // Every entry was checked whole when it was read or pushed. A length under 128 is
            // its one byte (every name a client sends, nearly), read without the varint's loop.
            let len = match rest.split_first() {
                Some((&len, after)) if len < 0x80 => {
                    rest = after;
                    usize::from(len)
                }
                _ => usize::try_from(decode_varint(&mut rest).ok()?).ok()?,
            };
            let (name, after) = rest.split_at_checked(len)?;
            rest = after;
            Some(name)
        })
    }

    /// The names that are UTF-8 (a name that is not is passed over), as text. The run is
    /// checked whole first, in one pass: when it is text (every run of names under 128 bytes
    /// each: a longer name's length is not), each name is a slice of it, not checked again on
    /// its own; checking 100,000 names one by one cost more than reading them (S12).
    pub fn strs(&self) -> impl Iterator<Item = &str> {
        let whole = std::str::from_utf8(&self.encoded).ok();
        let base = self.encoded.as_ptr() as usize;
        self.iter().filter_map(move |name| {
            let at = name.as_ptr() as usize - base;
            whole
                .and_then(|w| w.get(at..at + name.len()))
                .or_else(|| std::str::from_utf8(name).ok())
        })
    }

    /// Appends `name`.
    pub fn push(&mut self, name: &[u8]) {
        let mut encoded = Vec::from(std::mem::take(&mut self.encoded));
        put_entry::<KEY>(&mut encoded, self.count == 0, name);
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
            encoded.push(KEY);
            encoded.extend_from_slice(&run);
            self.encoded = encoded.into();
        }
        self.count = self
            .count
            .checked_add(count)
            .ok_or_else(|| decode_error("too many resource names"))?;
        Ok(())
    }

    /// Reads a field of key `KEY` (its key read already) and the run of them that follows:
    /// an ACK repeats every name, taken at once.
    pub(crate) fn merge(
        &mut self,
        wire_type: WireType,
        buf: &mut impl Buf,
    ) -> Result<(), DecodeError> {
        check_wire_type(WireType::LengthDelimited, wire_type)?;
        let chunk = buf.chunk();
        match names_run::<KEY>(&chunk[..chunk.len().min(buf.remaining())]) {
            (_, 0) => {
                // Not whole in this chunk of the buffer: read on its own.
                let name =
                    length_delimited(wire_type, buf, "resource name longer than the message")?;
                self.push(&name);
                Ok(())
            }
            (len, count) => {
                let run = buf.copy_to_bytes(len);
                self.append(run, count)
            }
        }
    }

    /// Writes the names as the fields they were read from.
    pub(crate) fn encode(&self, buf: &mut impl BufMut) {
        if !self.is_empty() {
            buf.put_u8(KEY);
            buf.put_slice(&self.encoded);
        }
    }

    /// The bytes [`Names::encode`] writes.
    pub(crate) fn encoded_len(&self) -> usize {
        if self.is_empty() {
            0
        } else {
            1 + self.encoded.len()
        }
    }
}

/// Writes `name` as an entry of [`Names`]' encoding.
fn put_entry<const KEY: u8>(encoded: &mut Vec<u8>, first: bool, name: &[u8]) {
    if !first {
        encoded.push(KEY);
    }
    encode_varint(name.len() as u64, encoded);
    encoded.extend_from_slice(name);
}

/// The length of the run of whole entries of key `KEY` at the start of `chunk` (which starts
/// after the first one's key), and how many there are.
fn names_run<const KEY: u8>(chunk: &[u8]) -> (usize, u32) {
    let mut rest = chunk;
    let mut count = 0u32;
    let mut end = 0;
    loop {
        let mut entry = rest;
        if count > 0 {
            match entry.split_first() {
                Some((&k, after)) if k == KEY => entry = after,
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

impl<S: AsRef<[u8]>, const KEY: u8> FromIterator<S> for Names<KEY> {
    fn from_iter<I: IntoIterator<Item = S>>(names: I) -> Names<KEY> {
        let mut encoded = Vec::new();
        let mut count = 0u32;
        for name in names {
            put_entry::<KEY>(&mut encoded, count == 0, name.as_ref());
            count += 1;
        }
        Names {
            encoded: encoded.into(),
            count,
        }
    }
}

/// The bytes of a length-delimited field (a slice of the buffer when it is `Bytes`).
pub(crate) fn length_delimited(
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

/// Reads a string field into `text`.
pub(crate) fn merge_text(
    wire_type: WireType,
    text: &mut Text,
    buf: &mut impl Buf,
) -> Result<(), DecodeError> {
    let bytes = length_delimited(wire_type, buf, "string longer than the message")?;
    *text = Text::from_utf8(bytes)
        .map_err(|_| decode_error("invalid string value: data is not UTF-8 encoded"))?;
    Ok(())
}

/// Reads a `node` field into `raw`, kept encoded.
pub(crate) fn merge_node(
    wire_type: WireType,
    raw: &mut Bytes,
    buf: &mut impl Buf,
) -> Result<(), DecodeError> {
    let node = length_delimited(wire_type, buf, "node longer than the message")?;
    if raw.is_empty() {
        *raw = node;
    } else {
        // Occurrences of a message field merge: their encodings concatenated.
        let mut both = BytesMut::from(raw.as_ref());
        both.extend_from_slice(&node);
        *raw = both.freeze();
    }
    Ok(())
}

/// Writes a `node` field kept encoded (see [`merge_node`]); nothing when there is none.
pub(crate) fn encode_node(tag: u32, raw: &Bytes, buf: &mut impl BufMut) {
    if !raw.is_empty() {
        prost::encoding::bytes::encode(tag, raw, buf);
    }
}

/// The bytes [`encode_node`] writes.
pub(crate) fn node_len(tag: u32, raw: &Bytes) -> usize {
    if raw.is_empty() {
        0
    } else {
        prost::encoding::bytes::encoded_len(tag, raw)
    }
}

/// A decoded node, encoded as a request keeps it (empty when there is none).
pub(crate) fn node_bytes(node: Option<&Node>) -> Bytes {
    node.map(|n| Bytes::from(n.encode_to_vec()))
        .unwrap_or_default()
}

/// prost offers no other way to make a decode error of one's own (the constructor is deprecated
/// for outside use, not yet replaced).
#[allow(deprecated)]
pub(crate) fn decode_error(message: &'static str) -> DecodeError {
    DecodeError::new(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Names::strs`: the names that are UTF-8, each once and in order, whether the run is text
    /// as a whole (short names), or not (a name of 128 bytes or more, whose length takes two
    /// bytes; a name that is not UTF-8, passed over; text of several bytes per character).
    #[test]
    fn names_as_text_are_the_utf8_names_in_order_whether_or_not_the_run_is_text() {
        let long = "l".repeat(200);
        let cases: Vec<Vec<&[u8]>> = vec![
            vec![b"a", b"bb", "caf\u{e9}".as_bytes()],
            vec![b"a", long.as_bytes(), "\u{1f600}".as_bytes()],
            vec![b"a", b"\xff\xfe", b"c"],
            vec![],
        ];
        for case in cases {
            let mut names: Names = Names::default();
            for name in &case {
                names.push(name);
            }
            let expected: Vec<&str> = case
                .iter()
                .filter_map(|n| std::str::from_utf8(n).ok())
                .collect();
            assert_eq!(names.strs().collect::<Vec<_>>(), expected, "{case:?}");
        }
    }
}
