//! "did you mean `port_value`?" for an unknown field: the field path of the error is followed
//! through the resource's descriptor (and the `@type` of each `Any` on the way, read from the
//! resource's value) to the message the field was written in, whose field closest to the
//! unknown name, if close enough, is suggested.

use prost_reflect::{Kind, MessageDescriptor};
use serde_json::Value;

const UNKNOWN_FIELD: &str = "unrecognized field name '";

/// The suggestion to append to a decoding error, `error` being its text (`path: message`):
/// `Some("did you mean `port_value`?")` when the error is an unknown field of a message that has
/// a field named closely (proto or JSON name, whichever the closer).
///
/// `within` is where the resource sits in its document (`[1]` in a list, `resources[1]` in a
/// `resources:` wrapper, empty for a document of its own): the start of the error's path.
pub(crate) fn did_you_mean(
    root: &MessageDescriptor,
    resource: &Value,
    within: &str,
    error: &str,
) -> Option<String> {
    let start = error.find(UNKNOWN_FIELD)?;
    let unknown = error[start + UNKNOWN_FIELD.len()..].split('\'').next()?;
    // The path runs to the unknown key's value (or to its mapping); the message is its parent.
    let path = error[..start].trim_end().trim_end_matches(':');
    let path = path.trim_start_matches('.');
    let path = path.strip_prefix(within)?.trim_start_matches('.');
    let path = path
        .strip_suffix(unknown)
        .map(|p| p.trim_end_matches('.'))
        .unwrap_or(path);
    let message = resolve(root, resource, path)?;
    closest(&message, unknown).map(|name| format!("did you mean `{name}`?"))
}

/// The known name nearest to `unknown`, within a third of its length (at least one edit, at most
/// three); transpositions count as one edit.
fn closest(message: &MessageDescriptor, unknown: &str) -> Option<String> {
    let limit = (unknown.chars().count() / 3).clamp(1, 3);
    message
        .fields()
        .flat_map(|f| [f.name().to_owned(), f.json_name().to_owned()])
        .map(|name| (strsim::osa_distance(unknown, &name), name))
        .filter(|(distance, _)| *distance <= limit)
        .min()
        .map(|(_, name)| name)
}

/// The message that the value at `path` (`a.b[0].c`, as serde_yaml_ng and serde_path_to_error
/// write it) is decoded as, starting from `root` for `value`.
fn resolve(root: &MessageDescriptor, value: &Value, path: &str) -> Option<MessageDescriptor> {
    let mut message = root.clone();
    let mut value = value;
    let mut rest = path;
    loop {
        if message.full_name() == "google.protobuf.Any" {
            let type_url = value.get("@type")?.as_str()?;
            let name = type_url.rsplit('/').next()?;
            message = message.parent_pool().get_message_by_name(name)?;
            continue;
        }
        if rest.is_empty() {
            return Some(message);
        }
        let object = value.as_object()?;
        let key = key_at(object, rest)?;
        let field = message
            .get_field_by_name(key)
            .or_else(|| message.get_field_by_json_name(key))?;
        value = object.get(key)?;
        rest = &rest[key.len()..];
        while let Some(after) = rest.strip_prefix('[') {
            let (index, after) = after.split_once(']')?;
            value = value.get(index.parse::<usize>().ok()?)?;
            rest = after;
        }
        rest = rest.strip_prefix('.').unwrap_or(rest);
        let Kind::Message(mut next) = field.kind() else {
            return None;
        };
        if field.is_map() {
            // The next segment is the map's key; the value is the entry's value message.
            let Kind::Message(entry_value) = next.map_entry_value_field().kind() else {
                return None;
            };
            let object = value.as_object()?;
            let key = key_at(object, rest)?;
            value = object.get(key)?;
            rest = rest[key.len()..]
                .strip_prefix('.')
                .unwrap_or(&rest[key.len()..]);
            next = entry_value;
        }
        message = next;
    }
}

/// The longest key of `object` that `path` starts with, as a whole segment.
fn key_at<'a>(object: &'a serde_json::Map<String, Value>, path: &str) -> Option<&'a str> {
    object
        .keys()
        .filter(|key| {
            path.strip_prefix(key.as_str())
                .is_some_and(|after| after.is_empty() || after.starts_with(['.', '[']))
        })
        .max_by_key(|key| key.len())
        .map(String::as_str)
}
