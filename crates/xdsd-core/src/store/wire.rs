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
