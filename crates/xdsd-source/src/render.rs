//! `DiscoveryResponse` files for Envoy's filesystem subscriptions (`path_config_source`): the
//! binary protobuf encoding, or its proto3 JSON or YAML form produced through the descriptor
//! pool (every `Any` written with its `"@type"`). Envoy chooses the parser by the file's
//! extension: `.pb` binary, `.yaml`/`.yml` YAML, anything else JSON.

use prost::encoding::{encode_key, encode_varint, WireType};
use prost::Message as _;
use prost_reflect::{DeserializeOptions, DynamicMessage, MessageDescriptor, SerializeOptions};

use crate::canonical::canonical;
use crate::Descriptors;

/// Full name of the message every file holds.
pub const DISCOVERY_RESPONSE: &str = "envoy.service.discovery.v3.DiscoveryResponse";

/// How a `DiscoveryResponse` file is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FileFormat {
    /// Binary protobuf, `.pb`.
    Pb,
    /// Proto3 JSON, `.json`.
    Json,
    /// The proto3 JSON mapping written as YAML, `.yaml`.
    Yaml,
}

impl FileFormat {
    pub const ALL: [FileFormat; 3] = [FileFormat::Pb, FileFormat::Json, FileFormat::Yaml];

    /// The file extension (without the dot) by which Envoy picks the matching parser.
    pub fn extension(self) -> &'static str {
        match self {
            FileFormat::Pb => "pb",
            FileFormat::Json => "json",
            FileFormat::Yaml => "yaml",
        }
    }
}

impl std::fmt::Display for FileFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.extension())
    }
}

/// Why a file could not be rendered or read back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RenderError {
    #[error("the descriptor pool has no {0}")]
    MissingDescriptor(&'static str),
    #[error("decoding the {what}: {source}")]
    Decode {
        what: &'static str,
        #[source]
        source: prost::DecodeError,
    },
    /// The proto3 JSON mapping failed: typically an `Any` whose type the pool does not know.
    #[error("writing {format}: {message}")]
    Serialize { format: FileFormat, message: String },
    #[error("reading {format}: {message}")]
    Parse { format: FileFormat, message: String },
}

fn discovery_response(descriptors: &Descriptors) -> Result<MessageDescriptor, RenderError> {
    descriptors
        .pool()
        .get_message_by_name(DISCOVERY_RESPONSE)
        .ok_or(RenderError::MissingDescriptor(DISCOVERY_RESPONSE))
}

/// The binary encoding of a `DiscoveryResponse` with `version_info`, `type_url` and
/// `resources`, each an encoded `google.protobuf.Any` (what the store keeps per resource).
pub fn discovery_response_bytes<'a>(
    version: &str,
    type_url: &str,
    resources: impl IntoIterator<Item = &'a [u8]>,
) -> Vec<u8> {
    let mut buf = Vec::new();
    let field = |number: u32, bytes: &[u8], buf: &mut Vec<u8>| {
        encode_key(number, WireType::LengthDelimited, buf);
        encode_varint(bytes.len() as u64, buf);
        buf.extend_from_slice(bytes);
    };
    // Field numbers of envoy.service.discovery.v3.DiscoveryResponse, in order.
    if !version.is_empty() {
        field(1, version.as_bytes(), &mut buf);
    }
    for any in resources {
        field(2, any, &mut buf);
    }
    if !type_url.is_empty() {
        field(4, type_url.as_bytes(), &mut buf);
    }
    buf
}

/// How the JSON and YAML forms are written: field names as in the protos (`port_value`, as
/// Envoy's docs and the resource files write them; Envoy reads both spellings) and default
/// values left out.
fn serialize_options() -> SerializeOptions {
    SerializeOptions::new()
        .use_proto_field_name(true)
        .skip_default_fields(true)
}

/// A `DiscoveryResponse` file in `format`: the binary encoding `response` (see
/// [`discovery_response_bytes`]) as is, or decoded with the descriptors and written in the
/// proto3 JSON mapping, `Any`s resolved through the pool.
pub fn render_discovery_response(
    descriptors: &Descriptors,
    format: FileFormat,
    response: &[u8],
) -> Result<Vec<u8>, RenderError> {
    if format == FileFormat::Pb {
        return Ok(response.to_vec());
    }
    let desc = discovery_response(descriptors)?;
    let message = DynamicMessage::decode(desc, response).map_err(|source| RenderError::Decode {
        what: "DiscoveryResponse",
        source,
    })?;
    let failed = |e: &dyn std::fmt::Display| RenderError::Serialize {
        format,
        message: e.to_string(),
    };
    match format {
        FileFormat::Pb => Ok(response.to_vec()),
        FileFormat::Json => {
            let mut out = Vec::new();
            let mut serializer = serde_json::Serializer::pretty(&mut out);
            message
                .serialize_with_options(&mut serializer, &serialize_options())
                .map_err(|e| failed(&e))?;
            out.push(b'\n');
            Ok(out)
        }
        FileFormat::Yaml => {
            let value = message
                .serialize_with_options(serde_yaml_ng::value::Serializer, &serialize_options())
                .map_err(|e| failed(&e))?;
            let mut out = String::new();
            yaml::document(&mut out, &value);
            Ok(out.into_bytes())
        }
    }
}

/// Full name of the message a variant's `"@constraints"` holds.
const CONSTRAINTS: &str = "envoy.service.discovery.v3.DynamicParameterConstraints";

/// One resource as a resource-file document (docs/resource-files.md), in JSON or YAML: its
/// `"@type"`, its `"@name"` when its type has no name field (an `LbEndpoint` of a LEDS
/// collection, named `xdstp://...`), for a variant its `"@constraints"` (the encoded
/// `DynamicParameterConstraints`), then the message's fields, all through the descriptors. What
/// `xdsd get` prints and writes; reading it back as a resource file gives the same resource.
pub fn render_resource_document(
    descriptors: &Descriptors,
    format: FileFormat,
    type_url: &str,
    name: &str,
    value: &[u8],
    constraints: Option<&[u8]>,
) -> Result<Vec<u8>, RenderError> {
    let failed = |e: &dyn std::fmt::Display| RenderError::Serialize {
        format,
        message: e.to_string(),
    };
    let pool = descriptors.pool();
    let any_desc = pool
        .get_message_by_name("google.protobuf.Any")
        .ok_or(RenderError::MissingDescriptor("google.protobuf.Any"))?;
    // google.protobuf.Any: type_url = 1, value = 2.
    let mut any = Vec::new();
    for (number, bytes) in [(1, type_url.as_bytes()), (2, value)] {
        encode_key(number, WireType::LengthDelimited, &mut any);
        encode_varint(bytes.len() as u64, &mut any);
        any.extend_from_slice(bytes);
    }
    let message =
        DynamicMessage::decode(any_desc, any.as_slice()).map_err(|source| RenderError::Decode {
            what: "resource",
            source,
        })?;
    // A type without a name field is named by "@name" (only an xdstp name can be one).
    let at_name = pool
        .get_message_by_name(type_url.rsplit('/').next().unwrap_or(type_url))
        .filter(|desc| crate::parse::name_field(desc).is_none())
        .and(Some(name).filter(|n| !n.is_empty()));
    let constraints = match constraints {
        None => None,
        Some(bytes) => {
            let desc = pool
                .get_message_by_name(CONSTRAINTS)
                .ok_or(RenderError::MissingDescriptor(CONSTRAINTS))?;
            Some(
                DynamicMessage::decode(desc, bytes).map_err(|source| RenderError::Decode {
                    what: "constraints",
                    source,
                })?,
            )
        }
    };
    match format {
        FileFormat::Json | FileFormat::Pb => {
            let mut value = message
                .serialize_with_options(serde_json::value::Serializer, &serialize_options())
                .map_err(|e| failed(&e))?;
            if let (Some(c), Some(map)) = (constraints, value.as_object_mut()) {
                let c = c
                    .serialize_with_options(serde_json::value::Serializer, &serialize_options())
                    .map_err(|e| failed(&e))?;
                map.insert("@constraints".to_owned(), c);
            }
            if let (Some(name), Some(map)) = (at_name, value.as_object_mut()) {
                map.insert("@name".to_owned(), name.into());
            }
            let mut out = serde_json::to_vec_pretty(&value).map_err(|e| failed(&e))?;
            out.push(b'\n');
            Ok(out)
        }
        FileFormat::Yaml => {
            let value = message
                .serialize_with_options(serde_yaml_ng::value::Serializer, &serialize_options())
                .map_err(|e| failed(&e))?;
            let value = match (constraints, value) {
                (c, serde_yaml_ng::Value::Mapping(fields)) if c.is_some() || at_name.is_some() => {
                    let c = c
                        .map(|c| {
                            c.serialize_with_options(
                                serde_yaml_ng::value::Serializer,
                                &serialize_options(),
                            )
                        })
                        .transpose()
                        .map_err(|e| failed(&e))?;
                    // "@type" first, then "@name", "@constraints", then the fields.
                    let mut map = serde_yaml_ng::Mapping::new();
                    let mut rest = Vec::new();
                    for (k, v) in fields {
                        if k.as_str() == Some("@type") {
                            map.insert(k, v);
                        } else {
                            rest.push((k, v));
                        }
                    }
                    if let Some(name) = at_name {
                        map.insert("@name".into(), name.into());
                    }
                    if let Some(c) = c {
                        map.insert("@constraints".into(), c);
                    }
                    map.extend(rest);
                    serde_yaml_ng::Value::Mapping(map)
                }
                (_, value) => value,
            };
            let mut out = String::new();
            yaml::document(&mut out, &value);
            Ok(out.into_bytes())
        }
    }
}

/// Reads a `DiscoveryResponse` file back through the descriptors (unknown fields and unknown
/// `@type`s are errors) and returns its binary encoding, map entries in canonical order, so that
/// files of the same content compare equal whatever their format.
pub fn read_discovery_response(
    descriptors: &Descriptors,
    format: FileFormat,
    file: &[u8],
) -> Result<Vec<u8>, RenderError> {
    let desc = discovery_response(descriptors)?;
    let failed = |e: &dyn std::fmt::Display| RenderError::Parse {
        format,
        message: e.to_string(),
    };
    let options = DeserializeOptions::new();
    let message = match format {
        FileFormat::Pb => {
            DynamicMessage::decode(desc.clone(), file).map_err(|source| RenderError::Decode {
                what: "DiscoveryResponse",
                source,
            })?
        }
        FileFormat::Json => {
            let mut de = serde_json::Deserializer::from_slice(file);
            let message = DynamicMessage::deserialize_with_options(desc.clone(), &mut de, &options)
                .map_err(|e| failed(&e))?;
            de.end().map_err(|e| failed(&e))?;
            message
        }
        FileFormat::Yaml => {
            let de = serde_yaml_ng::Deserializer::from_slice(file);
            DynamicMessage::deserialize_with_options(desc.clone(), de, &options)
                .map_err(|e| failed(&e))?
        }
    };
    Ok(canonical(
        descriptors.pool(),
        &desc,
        &message.encode_to_vec(),
    ))
}

/// A YAML writer for the value tree of the proto3 JSON mapping, in block style.
///
/// Not serde_yaml_ng's emitter: that one writes YAML 1.2, where `on`, `off`, `yes`, `no`, `y`
/// and `n` are plain strings, and Envoy reads YAML with YAML 1.1 booleans: a header value `on`
/// written plain would reach Envoy as `true` and the file would be rejected. Every string is
/// written double-quoted (JSON escapes are valid YAML), keys plain only when unambiguous.
mod yaml {
    use serde_yaml_ng::Value;

    pub(super) fn document(out: &mut String, value: &Value) {
        match value {
            Value::Mapping(map) if !map.is_empty() => mapping(out, map, 0, false),
            Value::Sequence(seq) if !seq.is_empty() => sequence(out, seq, 0),
            other => {
                scalar(out, other);
                out.push('\n');
            }
        }
    }

    fn indent(out: &mut String, n: usize) {
        out.extend(std::iter::repeat_n(' ', n));
    }

    /// The entries of a non-empty mapping at `level`; the first one's indentation is already
    /// written when `inline` (a mapping that is a sequence item, after its `- `).
    fn mapping(out: &mut String, map: &serde_yaml_ng::Mapping, level: usize, inline: bool) {
        for (i, (key, value)) in map.iter().enumerate() {
            if i > 0 || !inline {
                indent(out, level);
            }
            match key {
                Value::String(key) => self::key(out, key),
                other => scalar(out, other),
            }
            out.push(':');
            after_indicator(out, value, level);
        }
    }

    /// The items of a non-empty sequence at `level`.
    fn sequence(out: &mut String, seq: &[Value], level: usize) {
        for item in seq {
            indent(out, level);
            out.push('-');
            match item {
                Value::Mapping(map) if !map.is_empty() => {
                    out.push(' ');
                    mapping(out, map, level + 2, true);
                }
                other => after_indicator(out, other, level),
            }
        }
    }

    /// A value after `key:` or `-` at `level`.
    fn after_indicator(out: &mut String, value: &Value, level: usize) {
        match value {
            Value::Mapping(map) if !map.is_empty() => {
                out.push('\n');
                mapping(out, map, level + 2, false);
            }
            Value::Sequence(seq) if !seq.is_empty() => {
                out.push('\n');
                sequence(out, seq, level + 2);
            }
            Value::Tagged(tagged) => after_indicator(out, &tagged.value, level),
            other => {
                out.push(' ');
                scalar(out, other);
                out.push('\n');
            }
        }
    }

    fn scalar(out: &mut String, value: &Value) {
        match value {
            Value::Null => out.push_str("null"),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            // The JSON mapping writes 64-bit integers and non-finite floats as strings; what is
            // left prints the same in YAML.
            Value::Number(n) => out.push_str(&n.to_string()),
            Value::String(s) => quoted(out, s),
            Value::Sequence(_) => out.push_str("[]"),
            Value::Mapping(_) => out.push_str("{}"),
            Value::Tagged(tagged) => scalar(out, &tagged.value),
        }
    }

    fn quoted(out: &mut String, s: &str) {
        match serde_json::to_string(s) {
            Ok(json) => out.push_str(&json),
            // Serializing a string to JSON cannot fail; keep the output valid regardless.
            Err(_) => out.push_str("\"\""),
        }
    }

    /// A key is written plain when it is a word (letters, digits, `_`, `.`, `-`, `/`, starting
    /// with a letter or `_`) that no YAML version reads as anything but a string.
    fn key(out: &mut String, key: &str) {
        let word = key
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '/'));
        if word && !is_reserved(key) {
            out.push_str(key);
        } else {
            quoted(out, key);
        }
    }

    /// Words that YAML 1.1 or 1.2 read as a boolean or null.
    fn is_reserved(word: &str) -> bool {
        matches!(
            word.to_ascii_lowercase().as_str(),
            "y" | "n" | "yes" | "no" | "on" | "off" | "true" | "false" | "null"
        )
    }
}

#[cfg(test)]
mod tests;
