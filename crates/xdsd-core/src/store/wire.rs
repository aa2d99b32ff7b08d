//! Protobuf fields written by hand where the store and the machines encode responses once.

use bytes::BufMut;

/// Encoded length of a length-delimited field with a one-byte key.
pub(crate) fn field_len(len: usize) -> usize {
    1 + prost::encoding::encoded_len_varint(len as u64) + len
}

/// Writes a length-delimited field.
pub(crate) fn put_length_delimited(buf: &mut impl BufMut, tag: u32, bytes: &[u8]) {
    // The key and the length gathered first and written at once: byte by byte, they cost as
    // much as copying the small resource after them (S5, a response of 70 endpoint sets).
    // A key takes 5 bytes at most, a length 10.
    const HEAD: usize = 15;
    let mut head = [0u8; HEAD];
    let mut rest = &mut head[..];
    prost::encoding::encode_key(tag, prost::encoding::WireType::LengthDelimited, &mut rest);
    prost::encoding::encode_varint(bytes.len() as u64, &mut rest);
    let at = HEAD - rest.len();
    buf.put_slice(&head[..at]);
    buf.put_slice(bytes);
}

/// Writes a string field (`tag` < 16), left out when empty (proto3).
pub(crate) fn string_field(tag: u32, value: &str, buf: &mut impl BufMut) {
    bytes_field(tag, value.as_bytes(), buf)
}

/// A string field given as its bytes (a nonce's digits: no UTF-8 check), as [`string_field`].
pub(crate) fn bytes_field(tag: u32, value: &[u8], buf: &mut impl BufMut) {
    if !value.is_empty() {
        put_length_delimited(buf, tag, value);
    }
}

/// Encoded length of a string field written by [`string_field`].
pub(crate) fn string_len(value: &str) -> usize {
    bytes_len(value.as_bytes())
}

/// Encoded length of a field written by [`bytes_field`].
pub(crate) fn bytes_len(value: &[u8]) -> usize {
    if value.is_empty() {
        0
    } else {
        field_len(value.len())
    }
}

/// Reads the top level of the encoded message `value` without decoding it: every field's key,
/// length and bounds are checked (the fields of nested messages are not looked into), and the
/// length-delimited field `tag` is returned as a string (its last occurrence, as protobuf
/// merges; `None` when absent). What a relay reads of a resource it serves as it came: its name
/// field, where the full decode would cost more than everything else it does with it.
///
/// `Err` says why the bytes are not a message: a key or a length that does not decode, a field
/// that runs past the end, field `tag` not length-delimited or not UTF-8.
pub fn read_string_field(value: &[u8], tag: u32) -> Result<Option<&str>, String> {
    use prost::encoding::{decode_key, decode_varint, skip_field, DecodeContext, WireType};
    let mut buf = value;
    let mut found = None;
    while !buf.is_empty() {
        let at = value.len() - buf.len();
        let (field, wire_type) =
            decode_key(&mut buf).map_err(|e| format!("at byte {at}: a field's key: {e}"))?;
        if field != tag {
            skip_field(wire_type, field, &mut buf, DecodeContext::default())
                .map_err(|e| format!("at byte {at}: field {field}: {e}"))?;
            continue;
        }
        if wire_type != WireType::LengthDelimited {
            return Err(format!(
                "at byte {at}: field {tag} is {wire_type:?}, not a string"
            ));
        }
        let len = decode_varint(&mut buf)
            .map_err(|e| format!("at byte {at}: field {tag}'s length: {e}"))?;
        let len = usize::try_from(len)
            .ok()
            .filter(|len| *len <= buf.len())
            .ok_or_else(|| {
                format!(
                    "at byte {at}: field {tag} is {len} bytes long, {} remain",
                    buf.len()
                )
            })?;
        let (text, rest) = buf.split_at(len);
        found = Some(
            std::str::from_utf8(text)
                .map_err(|e| format!("at byte {at}: field {tag} is not UTF-8: {e}"))?,
        );
        buf = rest;
    }
    Ok(found)
}
