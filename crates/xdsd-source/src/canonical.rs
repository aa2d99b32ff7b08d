//! Deterministic encoding. prost-reflect keeps map fields in a `HashMap`, so encoding the same
//! message twice can order map entries differently, and the store's content hash (the resource's
//! version) would change on every load of an unchanged file: clients would be sent it again on
//! every unrelated change, and after a restart. Here the encoded bytes are rewritten with the
//! entries of every map sorted, descending into nested messages and into `Any` payloads whose
//! type the pool knows. Everything else keeps its bytes and order.

use prost::encoding::{decode_varint, encode_varint};
use prost_reflect::{DescriptorPool, Kind, MessageDescriptor};

/// `bytes` (an encoding of `desc`) with map entries in a canonical order. Input it cannot parse
/// is returned unchanged: canonical order is an optimisation, never a reason to reject.
pub(crate) fn canonical(pool: &DescriptorPool, desc: &MessageDescriptor, bytes: &[u8]) -> Vec<u8> {
    rewrite(pool, desc, bytes).unwrap_or_else(|| bytes.to_vec())
}

/// One field occurrence: its number and its bytes (key included), rewritten if it is a message.
struct Field {
    number: u32,
    bytes: Vec<u8>,
}

fn rewrite(pool: &DescriptorPool, desc: &MessageDescriptor, mut input: &[u8]) -> Option<Vec<u8>> {
    let any = desc.full_name() == "google.protobuf.Any";
    let mut fields: Vec<Field> = Vec::new();
    while !input.is_empty() {
        let start = input;
        let key = decode_varint(&mut input).ok()?;
        let number = u32::try_from(key >> 3).ok()?;
        let payload: &[u8] = match key & 7 {
            0 => {
                decode_varint(&mut input).ok()?;
                &[]
            }
            1 => take(&mut input, 8)?,
            2 => {
                let len = usize::try_from(decode_varint(&mut input).ok()?).ok()?;
                take(&mut input, len)?
            }
            5 => take(&mut input, 4)?,
            // Groups are not used by any Envoy message; leave such input alone.
            _ => return None,
        };
        let raw = &start[..start.len() - input.len()];
        let nested = match desc.get_field(number).map(|f| f.kind()) {
            Some(Kind::Message(m)) if key & 7 == 2 => Some(rewrite(pool, &m, payload)?),
            _ => None,
        };
        let bytes = match nested {
            Some(body) => {
                let mut out = Vec::with_capacity(body.len() + 10);
                encode_varint(key, &mut out);
                encode_varint(body.len() as u64, &mut out);
                out.extend_from_slice(&body);
                out
            }
            None => raw.to_vec(),
        };
        fields.push(Field { number, bytes });
    }
    if any {
        rewrite_any(pool, &mut fields)?;
    }
    // Entries of each map field, sorted, where the first of them stood.
    let mut out = Vec::with_capacity(fields.iter().map(|f| f.bytes.len()).sum());
    let mut done: Vec<u32> = Vec::new();
    for (i, field) in fields.iter().enumerate() {
        let is_map = desc.get_field(field.number).is_some_and(|f| f.is_map());
        if !is_map {
            out.extend_from_slice(&field.bytes);
            continue;
        }
        if done.contains(&field.number) {
            continue;
        }
        done.push(field.number);
        let mut entries: Vec<&Vec<u8>> = fields[i..]
            .iter()
            .filter(|f| f.number == field.number)
            .map(|f| &f.bytes)
            .collect();
        entries.sort();
        for entry in entries {
            out.extend_from_slice(entry);
        }
    }
    Some(out)
}

/// An `Any`'s value is a message of the type its URL names: rewrite it too.
fn rewrite_any(pool: &DescriptorPool, fields: &mut [Field]) -> Option<()> {
    let type_url = fields
        .iter()
        .find(|f| f.number == 1)
        .map(|f| payload(&f.bytes))??;
    let name = std::str::from_utf8(type_url).ok()?.rsplit('/').next()?;
    let Some(inner) = pool.get_message_by_name(name) else {
        return Some(());
    };
    for field in fields.iter_mut().filter(|f| f.number == 2) {
        let body = rewrite(pool, &inner, payload(&field.bytes)?)?;
        let mut out = Vec::with_capacity(body.len() + 6);
        encode_varint(2 << 3 | 2, &mut out);
        encode_varint(body.len() as u64, &mut out);
        out.extend_from_slice(&body);
        field.bytes = out;
    }
    Some(())
}

/// The payload of a length-delimited field's bytes (key included).
fn payload(mut bytes: &[u8]) -> Option<&[u8]> {
    decode_varint(&mut bytes).ok()?;
    let len = usize::try_from(decode_varint(&mut bytes).ok()?).ok()?;
    take(&mut bytes, len)
}

fn take<'a>(input: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if input.len() < n {
        return None;
    }
    let (head, rest) = input.split_at(n);
    *input = rest;
    Some(head)
}
