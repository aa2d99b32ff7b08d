use std::cell::Cell;
use std::collections::HashMap;
use std::path::Path;

use bytes::Bytes;
use prost::Message as _;
use prost_reflect::{DeserializeOptions, DynamicMessage, FieldDescriptor, Kind, MessageDescriptor};
use serde::de::{Deserialize, DeserializeSeed};
use serde_json::{Map, Value};

use crate::canonical::canonical;
use crate::de::DocSeed;
use crate::descriptors::type_url_of;
use crate::error::{Problem, ResourceRef};
use crate::plan::{DocPlan, Layout, ResourcePlan, CONSTRAINTS_KEY, MATCH_KEY, NAME_KEY, TTL_KEY};
use crate::{Descriptors, ParsedResource, SourceError};
use xdsd_core::xdstp::{self, XdstpName};

/// File formats, chosen by extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Yaml,
    Json,
}

impl Format {
    /// `.yaml`, `.yml` and `.json`, in any letter case; anything else is not a resource file.
    pub fn of(path: &Path) -> Option<Format> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "yaml" | "yml" => Some(Format::Yaml),
            "json" => Some(Format::Json),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Format::Yaml => "YAML",
            Format::Json => "JSON",
        }
    }
}

/// Parses one file's text (format chosen by the extension of `path`, which is also what
/// errors and origins name). Duplicates within the file are an error.
pub fn parse_file(
    descriptors: &Descriptors,
    path: &Path,
    text: &str,
) -> Result<Vec<ParsedResource>, SourceError> {
    let format = Format::of(path).ok_or_else(|| SourceError::File {
        file: path.to_path_buf(),
        message: "not a resource file: expected a .yaml, .yml or .json extension".into(),
    })?;
    parse_text(descriptors, path, format, text)
}

/// Parses what a resource file holds, in `format`, from elsewhere than a file (an etcd key):
/// `path` is only what errors and origins name. Duplicates within the text are an error.
pub fn parse_text(
    descriptors: &Descriptors,
    path: &Path,
    format: Format,
    text: &str,
) -> Result<Vec<ParsedResource>, SourceError> {
    // Some Windows editors start UTF-8 files with a byte-order mark, which neither parser skips.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let malformed = |error: &dyn std::fmt::Display| SourceError::File {
        file: path.to_path_buf(),
        message: format!("malformed {}: {error}", format.name()),
    };
    let mut planner = Planner {
        descriptors,
        path,
        next_index: 1,
    };
    let options = DeserializeOptions::new();

    // First pass: the layout and each resource's type, from a plain value tree; what the file
    // expands to is bounded here, before anything else expands it again.
    let mut plans = Vec::new();
    let budget = Cell::new(crate::budget::MAX_NODES);
    match format {
        Format::Yaml => {
            for (position, document) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
                let mut value = crate::budget::Budgeted { left: &budget }
                    .deserialize(document)
                    .map_err(|e| malformed(&e))?;
                // Merge keys (`<<: *defaults`) are not applied by the streaming parser; such a
                // document is decoded from its merged value tree instead, without positions.
                let merged = if has_merge_key(&value) {
                    let mut yaml = match serde_yaml_ng::Deserializer::from_str(text).nth(position) {
                        Some(document) => serde_yaml_ng::Value::deserialize(document)
                            .map_err(|e| malformed(&e))?,
                        None => serde_yaml_ng::Value::Null,
                    };
                    yaml.apply_merge().map_err(|e| malformed(&e))?;
                    value = Value::deserialize(yaml.clone()).map_err(|e| malformed(&e))?;
                    Some(yaml)
                } else {
                    None
                };
                let mut plan = planner.document(value)?;
                plan.merged = merged;
                plans.push(plan);
            }
        }
        Format::Json if text.trim().is_empty() => {}
        Format::Json => {
            let value: Value = serde_json::from_str(text).map_err(|e| malformed(&e))?;
            plans.push(planner.document(value)?);
        }
    }

    // Second pass: decode the messages from the text, so errors carry positions.
    let mut decoded = Vec::new();
    match format {
        Format::Yaml => {
            // The same documents, in the same order, as the first pass.
            let documents = serde_yaml_ng::Deserializer::from_str(text);
            for (position, (document, plan)) in documents.zip(&plans).enumerate() {
                // On an error only: the document again as a value, for "did you mean".
                let value = || match &plan.merged {
                    None => serde_yaml_ng::Deserializer::from_str(text)
                        .nth(position)
                        .and_then(|document| {
                            crate::budget::Budgeted {
                                left: &Cell::new(crate::budget::MAX_NODES),
                            }
                            .deserialize(document)
                            .ok()
                        }),
                    Some(merged) => Value::deserialize(merged.clone()).ok(),
                };
                decode_document(plan, &options, &mut decoded, value, |seed| {
                    match &plan.merged {
                        None => seed
                            .deserialize(document)
                            .map_err(|e| at_the_key(text, e.to_string())),
                        Some(merged) => {
                            with_path(|tracked| seed.deserialize(tracked), merged.clone())
                        }
                    }
                })?;
            }
        }
        Format::Json => {
            for plan in &plans {
                let value = || serde_json::from_str::<Value>(text).ok();
                decode_document(plan, &options, &mut decoded, value, |seed| {
                    let mut de = serde_json::Deserializer::from_str(text);
                    with_path(|tracked| seed.deserialize(tracked), &mut de)?;
                    de.end().map_err(|e| e.to_string())
                })?;
            }
        }
    }

    let mut resources = Vec::with_capacity(decoded.len());
    for (plan, message) in decoded {
        resources.push(finish(plan, &message)?);
    }
    check_duplicates(&resources)?;
    Ok(resources)
}

/// The (type URL, name) of each resource the text of a resource file declares, read leniently:
/// what a file that fails to parse (a misspelt field, a bad value) meant to define, as far as its
/// documents can be read at all. Each resource's `"@type"` (a known one, its canonical URL) and
/// `name` (`cluster_name` for a ClusterLoadAssignment) are all that is read; a resource without
/// either is skipped, and so is the rest of a file from a document that is not YAML or JSON.
pub fn declared_names(descriptors: &Descriptors, path: &Path, text: &str) -> Vec<(String, String)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let budget = Cell::new(crate::budget::MAX_NODES);
    let mut documents: Vec<Value> = Vec::new();
    let mut malformed = false;
    match Format::of(path) {
        Some(Format::Yaml) => {
            for document in serde_yaml_ng::Deserializer::from_str(text) {
                match (crate::budget::Budgeted { left: &budget }).deserialize(document) {
                    Ok(value) => documents.push(value),
                    Err(_) => {
                        malformed = true;
                        break;
                    }
                }
            }
        }
        Some(Format::Json) => {
            if let Ok(value) = serde_json::from_str(text) {
                documents.push(value);
            }
        }
        None => {}
    }
    let mut out = Vec::new();
    let mut resource = |value: &Value| {
        let Value::Object(map) = value else {
            return;
        };
        let name = [NAME_KEY, "name", "cluster_name", "clusterName"]
            .iter()
            .find_map(|key| map.get(*key).and_then(Value::as_str));
        let desc = map
            .get("@type")
            .and_then(Value::as_str)
            .and_then(|t| descriptors.message_for_type_url(t));
        if let (Some(name), Some(desc)) = (name, desc) {
            let type_url = type_url_of(&desc);
            let name = canonical_name(name, &type_url).unwrap_or_else(|_| name.to_owned());
            out.push((type_url, name));
        }
    };
    for document in &documents {
        match document {
            Value::Array(items) => items.iter().for_each(&mut resource),
            Value::Object(map) if !map.contains_key("@type") => {
                if let Some(Value::Array(items)) = map.get("resources") {
                    items.iter().for_each(&mut resource);
                }
            }
            other => resource(other),
        }
    }
    if malformed {
        // Malformed YAML (a bracket left open): the keys each resource starts with are often
        // still readable line by line.
        for (type_url, name) in scan_names(text) {
            let Some(desc) = descriptors.message_for_type_url(&type_url) else {
                continue;
            };
            let key = (type_url_of(&desc), name);
            if !out.contains(&key) {
                out.push(key);
            }
        }
    }
    out
}

/// The `"@type"` and `name` (or `cluster_name`) of each resource of YAML text read line by line,
/// for text the parser gives up on: keys at the start of a line (a document's) or right after a
/// top-level `- ` and at its indentation (a list's items). Each `---` or `- ` starts a resource.
fn scan_names(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current: (Option<String>, Option<String>) = (None, None);
    let mut flush = |current: &mut (Option<String>, Option<String>)| {
        if let (Some(t), Some(n)) = std::mem::take(current) {
            out.push((t, n));
        }
    };
    let mut item_indent = None;
    for line in text.lines() {
        let line = line.trim_end();
        if line == "---" || line.starts_with("--- ") || line == "..." {
            flush(&mut current);
            item_indent = None;
            continue;
        }
        let key_line = if let Some(rest) = line.strip_prefix("- ") {
            flush(&mut current);
            item_indent = Some(2);
            Some(rest)
        } else if let Some(indent) = item_indent {
            let spaces = line.len() - line.trim_start().len();
            (spaces == indent).then(|| line.trim_start())
        } else {
            (!line.starts_with([' ', '\t', '#'])).then_some(line)
        };
        let Some((key, value)) = key_line.and_then(|l| l.split_once(':')) else {
            continue;
        };
        let unquote = |v: &str| {
            let v = v.trim();
            let v = v.split(" #").next().unwrap_or(v).trim();
            v.trim_matches(|c| c == '"' || c == '\'').to_owned()
        };
        let key = unquote(key);
        let value = unquote(value);
        if value.is_empty() {
            continue;
        }
        match key.as_str() {
            "@type" if current.0.is_none() => current.0 = Some(value),
            "name" | "cluster_name" | "clusterName" if current.1.is_none() => {
                current.1 = Some(value)
            }
            _ => {}
        }
    }
    flush(&mut current);
    out
}

/// An unknown field's error put at the key's column: the YAML parser gives the position of the
/// value it was about to read (`conect_timeout: 1s` at line 3 column 17), the key is where the
/// mistake is (column 1). Any other error is returned as it is.
fn at_the_key(text: &str, error: String) -> String {
    let Some(field) = error
        .split("unrecognized field name '")
        .nth(1)
        .and_then(|rest| rest.split('\'').next())
    else {
        return error;
    };
    let Some((head, tail)) = error.split_once(" at line ") else {
        return error;
    };
    let mut numbers = tail.splitn(2, " column ");
    let line: Option<usize> = numbers.next().and_then(|l| l.trim().parse().ok());
    let rest = numbers.next().unwrap_or("");
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    let column: Option<usize> = rest[..digits].parse().ok();
    let (Some(line), Some(column)) = (line, column) else {
        return error;
    };
    let Some(text_line) = text.lines().nth(line.saturating_sub(1)) else {
        return error;
    };
    // The last mention of the key before the value's column.
    let before: String = text_line.chars().take(column.saturating_sub(1)).collect();
    let Some(at) = before.rfind(field) else {
        return error;
    };
    let key_column = before[..at].chars().count() + 1;
    // A quoted key starts at its quote.
    let key_column = match before[..at].chars().last() {
        Some('"' | '\'') => key_column - 1,
        _ => key_column,
    };
    format!(
        "{head} at line {line} column {key_column}{}",
        &rest[digits..]
    )
}

/// Runs a decode through serde_path_to_error, prefixing any error with the field path (serde_json
/// reports only line and column; serde_yaml_ng errors already carry the path).
fn with_path<'de, D: serde::Deserializer<'de>>(
    run: impl FnOnce(serde_path_to_error::Deserializer<'_, '_, D>) -> Result<(), D::Error>,
    de: D,
) -> Result<(), String> {
    let mut track = serde_path_to_error::Track::new();
    let result = run(serde_path_to_error::Deserializer::new(de, &mut track));
    result.map_err(|e| {
        let path = track.path().to_string();
        if path.is_empty() || path == "." {
            e.to_string()
        } else {
            format!("{path}: {e}")
        }
    })
}

fn decode_document<'p>(
    plan: &'p DocPlan,
    options: &DeserializeOptions,
    decoded: &mut Vec<(&'p ResourcePlan, DynamicMessage)>,
    document: impl FnOnce() -> Option<Value>,
    run: impl FnOnce(DocSeed<'_>) -> Result<(), String>,
) -> Result<(), SourceError> {
    if plan.resources.is_empty() {
        return Ok(());
    }
    let current = Cell::new(0);
    let mut messages = Vec::with_capacity(plan.resources.len());
    let seed = DocSeed {
        plan,
        options,
        out: &mut messages,
        current: &current,
    };
    if let Err(mut error) = run(seed) {
        // Non-empty (checked above), so the clamped position is in range.
        let position = current.get().min(plan.resources.len() - 1);
        let failed = &plan.resources[position];
        if let Some(hint) = document().and_then(|document| {
            let (resource, within) = match plan.layout {
                Layout::Single => (Some(&document), String::new()),
                Layout::List => (document.get(position), format!("[{position}]")),
                Layout::Wrapper => (
                    document.get("resources")?.get(position),
                    format!("resources[{position}]"),
                ),
                Layout::Empty => (None, String::new()),
            };
            crate::suggest::did_you_mean(&failed.desc, resource?, &within, &error)
        }) {
            error = format!("{error}; {hint}");
        }
        return Err(SourceError::Resource {
            resource: failed.reference.clone(),
            problem: Problem::Invalid(error),
        });
    }
    decoded.extend(plan.resources.iter().zip(messages));
    Ok(())
}

fn finish(plan: &ResourcePlan, message: &DynamicMessage) -> Result<ParsedResource, SourceError> {
    let fail = |problem| SourceError::Resource {
        resource: plan.reference.clone(),
        problem,
    };
    let type_url = type_url_of(&plan.desc);
    let field_name = plan.name_field.as_ref().map(|field| {
        let name = message
            .get_field(field)
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let key = match field.name() {
            "name" => "name",
            _ => "cluster_name",
        };
        (key, name)
    });
    let name = match (field_name, &plan.at_name) {
        (None, Some(at_name)) => at_name.clone(),
        (Some((key, name)), Some(at_name)) => {
            // Both: the field may be left out (then `@name` fills it), else it is the same
            // resource's name.
            if !name.is_empty() && canonical_name(&name, &type_url).as_deref() != Ok(at_name) {
                return Err(fail(Problem::Name(format!(
                    "\"@name\" {at_name:?} is not the resource's `{key}` {name:?}"
                ))));
            }
            at_name.clone()
        }
        (Some((key, name)), None) => {
            if name.is_empty() {
                return Err(fail(Problem::EmptyName(key)));
            }
            canonical_name(&name, &type_url).map_err(|e| fail(Problem::Name(e)))?
        }
        (None, None) => {
            return Err(fail(Problem::Unnamed(plan.desc.full_name().to_owned())));
        }
    };
    let mut message = message.clone();
    if let (Some(field), Some(at_name)) = (&plan.name_field, &plan.at_name) {
        // The served message names itself as `@name` does.
        message.set_field(field, prost_reflect::Value::String(at_name.clone()));
    }
    Ok(ParsedResource {
        type_url,
        name,
        constraints: plan.constraints.clone(),
        ttl: plan.ttl,
        value: canonical(
            plan.desc.parent_pool(),
            &plan.desc,
            &message.encode_to_vec(),
        )
        .into(),
        origin: format!(
            "{} (resource #{})",
            plan.reference.file.display(),
            plan.reference.index
        ),
    })
}

/// `name` as the store keeps it: an `xdstp://` name checked (well formed, of `type_url`, not a
/// glob) and canonical; any other name as it is.
pub fn canonical_name(name: &str, type_url: &str) -> Result<String, String> {
    if !xdstp::is_xdstp(name) {
        return Ok(name.to_owned());
    }
    XdstpName::parse_resource(name, type_url)
        .map(|n| n.to_string())
        .map_err(|e| format!("malformed xdstp name {name:?}: {e}"))
}

/// Rejects two resources with the same type URL and name, naming both origins, unless they are
/// variants: resources with `@constraints` (or `@match`) may share a name. The rules across the
/// variants of a name (the same keys, no overlap) are the store's to check.
pub fn check_duplicates(resources: &[ParsedResource]) -> Result<(), SourceError> {
    let mut errors = Vec::new();
    let mut seen: HashMap<(&str, &str), &str> = HashMap::with_capacity(resources.len());
    for resource in resources.iter().filter(|r| r.constraints.is_none()) {
        let key = (resource.type_url.as_str(), resource.name.as_str());
        if let Some(first) = seen.insert(key, &resource.origin) {
            // Keep reporting against the first definition when there are three or more.
            seen.insert(key, first);
            errors.push(SourceError::Duplicate {
                type_url: resource.type_url.clone(),
                name: resource.name.clone(),
                first: first.to_owned(),
                second: resource.origin.clone(),
            });
        }
    }
    match SourceError::from_list(errors) {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

struct Planner<'a> {
    descriptors: &'a Descriptors,
    path: &'a Path,
    next_index: usize,
}

impl Planner<'_> {
    fn document(&mut self, value: Value) -> Result<DocPlan, SourceError> {
        match value {
            Value::Null => Ok(DocPlan {
                layout: Layout::Empty,
                resources: Vec::new(),
                merged: None,
            }),
            Value::Array(items) => Ok(DocPlan {
                layout: Layout::List,
                resources: self.list(&items)?,
                merged: None,
            }),
            Value::Object(map) if !map.contains_key("@type") && map.contains_key("resources") => {
                self.wrapper(map)
            }
            other => Ok(DocPlan {
                layout: Layout::Single,
                resources: vec![self.resource(&other)?],
                merged: None,
            }),
        }
    }

    fn wrapper(&mut self, map: Map<String, Value>) -> Result<DocPlan, SourceError> {
        // DiscoveryResponse dumps carry version_info; any other key is more likely a typo or a
        // misplaced resource than something safe to drop.
        if let Some(key) = map
            .keys()
            .find(|k| !matches!(k.as_str(), "resources" | "version_info"))
        {
            return Err(self.file_error(format!(
                "unexpected key {key:?} next to `resources` (only `version_info` may accompany it)"
            )));
        }
        match map.get("resources") {
            Some(Value::Array(items)) if !items.is_empty() => Ok(DocPlan {
                layout: Layout::Wrapper,
                resources: self.list(items)?,
                merged: None,
            }),
            Some(Value::Array(_)) | Some(Value::Null) | None => Ok(DocPlan {
                layout: Layout::Empty,
                resources: Vec::new(),
                merged: None,
            }),
            Some(other) => Err(self.file_error(format!(
                "`resources` must be a list of resources, found {}",
                kind_of(other)
            ))),
        }
    }

    fn list(&mut self, items: &[Value]) -> Result<Vec<ResourcePlan>, SourceError> {
        items.iter().map(|item| self.resource(item)).collect()
    }

    fn resource(&mut self, value: &Value) -> Result<ResourcePlan, SourceError> {
        let index = self.next_index;
        self.next_index += 1;
        let mut reference = ResourceRef {
            file: self.path.to_path_buf(),
            index,
            type_url: None,
            name: None,
        };
        let fail = |reference: ResourceRef, problem| SourceError::Resource {
            resource: reference,
            problem,
        };
        let Value::Object(map) = value else {
            let found = kind_of(value);
            return Err(fail(reference, Problem::NotAMapping { found }));
        };
        reference.name = ["name", "cluster_name", "clusterName"]
            .iter()
            .find_map(|key| map.get(*key).and_then(Value::as_str))
            .map(str::to_owned);
        let type_url = match map.get("@type") {
            None => return Err(fail(reference, Problem::MissingType)),
            Some(Value::String(t)) if t.is_empty() => {
                return Err(fail(reference, Problem::MissingType))
            }
            Some(Value::String(t)) => t.clone(),
            Some(_) => return Err(fail(reference, Problem::TypeNotAString)),
        };
        reference.type_url = Some(type_url.clone());
        if !type_url.contains('/') {
            return Err(fail(reference, Problem::NotATypeUrl(type_url)));
        }
        let Some(desc) = self.descriptors.message_for_type_url(&type_url) else {
            return Err(fail(reference, Problem::UnknownType(type_url)));
        };
        let at_name = match map.get(NAME_KEY) {
            None => None,
            Some(Value::String(n)) if xdstp::is_xdstp(n) => {
                match canonical_name(n, &type_url_of(&desc)) {
                    Ok(n) => Some(n),
                    Err(message) => return Err(fail(reference, Problem::Name(message))),
                }
            }
            Some(other) => {
                let message = format!(
                    "\"@name\" must be an xdstp:// name (xdstp://AUTHORITY/{}/ID), found {}",
                    desc.full_name(),
                    match other {
                        Value::String(s) => format!("{s:?}"),
                        other => kind_of(other).to_owned(),
                    }
                );
                return Err(fail(reference, Problem::Name(message)));
            }
        };
        if let Some(n) = &at_name {
            reference.name = Some(n.clone());
        }
        let name_field = name_field(&desc);
        if name_field.is_none() && at_name.is_none() {
            let full_name = desc.full_name().to_owned();
            return Err(fail(reference, Problem::Unnamed(full_name)));
        }
        let constraints = match constraints_of(self.descriptors, map) {
            Ok(c) => c,
            Err(message) => return Err(fail(reference, Problem::Constraints(message))),
        };
        let ttl = match ttl_of(self.descriptors, map) {
            Ok(ttl) => ttl,
            Err(message) => return Err(fail(reference, Problem::Ttl(message))),
        };
        Ok(ResourcePlan {
            reference,
            desc,
            name_field,
            at_name,
            constraints,
            ttl,
        })
    }

    fn file_error(&self, message: String) -> SourceError {
        SourceError::File {
            file: self.path.to_path_buf(),
            message,
        }
    }
}

/// The field a resource is served under: `name`, or `cluster_name` for ClusterLoadAssignment
/// (which has no `name`).
pub fn name_field(desc: &MessageDescriptor) -> Option<FieldDescriptor> {
    ["name", "cluster_name"].iter().find_map(|name| {
        desc.get_field_by_name(name)
            .filter(|f| f.kind() == Kind::String && !f.is_list() && !f.is_map())
    })
}

fn has_merge_key(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.contains_key("<<") || map.values().any(has_merge_key),
        Value::Array(items) => items.iter().any(has_merge_key),
        _ => false,
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing (null)",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

const CONSTRAINTS_MESSAGE: &str = "envoy.service.discovery.v3.DynamicParameterConstraints";

/// The encoded constraints of a variant: `@constraints` (the proto3 JSON of
/// `DynamicParameterConstraints`) or `@match` (keys that must equal these values, or be absent
/// where the value is null). `Err` is the message of a [`Problem::Constraints`].
fn constraints_of(
    descriptors: &Descriptors,
    map: &Map<String, Value>,
) -> Result<Option<Bytes>, String> {
    let json = match (map.get(CONSTRAINTS_KEY), map.get(MATCH_KEY)) {
        (None, None) => return Ok(None),
        (Some(_), Some(_)) => {
            return Err("use either \"@constraints\" or \"@match\", not both".into())
        }
        (Some(c), None) => c.clone(),
        (None, Some(m)) => match_to_constraints(m)?,
    };
    let desc = descriptors
        .pool()
        .get_message_by_name(CONSTRAINTS_MESSAGE)
        .ok_or_else(|| format!("the descriptors have no {CONSTRAINTS_MESSAGE}"))?;
    let mut track = serde_path_to_error::Track::new();
    let de = serde_path_to_error::Deserializer::new(json, &mut track);
    let message = DynamicMessage::deserialize_with_options(desc, de, &DeserializeOptions::new())
        .map_err(|e| {
            let path = track.path().to_string();
            match path.as_str() {
                "" | "." => format!("\"@constraints\": {e}"),
                _ => format!("\"@constraints\".{path}: {e}"),
            }
        })?;
    Ok(Some(message.encode_to_vec().into()))
}

/// `@ttl`: a proto3 JSON duration (`"30s"`, `"1.5s"`), read by the descriptors' own decoder.
/// `Err` is the message of a [`Problem::Ttl`].
fn ttl_of(
    descriptors: &Descriptors,
    map: &Map<String, Value>,
) -> Result<Option<std::time::Duration>, String> {
    let Some(json) = map.get(TTL_KEY) else {
        return Ok(None);
    };
    let desc = descriptors
        .pool()
        .get_message_by_name("google.protobuf.Duration")
        .ok_or("the descriptors have no google.protobuf.Duration")?;
    let message =
        DynamicMessage::deserialize_with_options(desc, json.clone(), &DeserializeOptions::new())
            .map_err(|e| format!("expected a duration such as \"30s\": {e}"))?;
    let field = |name: &str| {
        message
            .get_field_by_name(name)
            .and_then(|v| v.as_i64().or(v.as_i32().map(i64::from)))
            .unwrap_or(0)
    };
    let (seconds, nanos) = (field("seconds"), field("nanos"));
    let ttl = match (u64::try_from(seconds), u32::try_from(nanos)) {
        (Ok(s), Ok(n)) => std::time::Duration::new(s, n),
        _ => std::time::Duration::ZERO,
    };
    if ttl < crate::MIN_TTL {
        return Err(format!(
            "{json} is too short: a TTL is at least {:?} (heartbeats go out every third of it)",
            crate::MIN_TTL
        ));
    }
    Ok(Some(ttl))
}

/// `@match: {k: v, ...}` as the proto3 JSON of the constraints it stands for.
fn match_to_constraints(value: &Value) -> Result<Value, String> {
    let Value::Object(map) = value else {
        return Err(format!(
            "\"@match\" must be a mapping of parameter keys to values, found {}",
            kind_of(value)
        ));
    };
    if map.is_empty() {
        return Err("\"@match\" needs at least one key".into());
    }
    let mut all = Vec::with_capacity(map.len());
    for (key, value) in map {
        let constraint = match value {
            Value::String(v) => serde_json::json!({"constraint": {"key": key, "value": v}}),
            Value::Null => serde_json::json!({
                "not_constraints": {"constraint": {"key": key, "exists": {}}}
            }),
            Value::Number(n) => {
                return Err(format!(
                    "\"@match\" key {key:?}: parameter values are strings; write it as a string: \"{n}\""
                ))
            }
            Value::Bool(b) => {
                return Err(format!(
                    "\"@match\" key {key:?}: parameter values are strings; write it as a string: \"{b}\""
                ))
            }
            other => {
                return Err(format!(
                    "\"@match\" key {key:?}: expected a string (the value) or null (the key is absent), found {}",
                    kind_of(other)
                ))
            }
        };
        all.push(constraint);
    }
    Ok(match all.len() {
        1 => all.remove(0),
        _ => serde_json::json!({"and_constraints": {"constraints": all}}),
    })
}

#[cfg(test)]
mod key_tests {
    use super::{at_the_key, scan_names};

    #[test]
    fn an_unknown_field_is_reported_at_its_key() {
        let text = "name: a\n  \"conect_timeout\": 1s\n";
        assert_eq!(
            at_the_key(
                text,
                "conect_timeout: unrecognized field name 'conect_timeout' at line 2 column 21"
                    .into()
            ),
            "conect_timeout: unrecognized field name 'conect_timeout' at line 2 column 3"
        );
        let other = "name: invalid type at line 1 column 7".to_owned();
        assert_eq!(at_the_key(text, other.clone()), other);
    }

    #[test]
    fn names_are_read_line_by_line_from_text_the_parser_gives_up_on() {
        let text = "\"@type\": t/A\ncluster_name: one # a comment\nendpoints: [ {\n---\n\
                    - name: two\n  '@type': t/B\n  nested:\n    name: not-this\n";
        assert_eq!(
            scan_names(text),
            vec![
                ("t/A".to_owned(), "one".to_owned()),
                ("t/B".to_owned(), "two".to_owned())
            ]
        );
    }
}
