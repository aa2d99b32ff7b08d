//! What the first pass over a file learns (its layout, each resource's type, name field and
//! constraints), which drives the second pass (`de`). Its own module, so that `parse` (which
//! makes plans) and `de` (which follows them) do not depend on each other.

use bytes::Bytes;
use prost_reflect::{FieldDescriptor, MessageDescriptor};

use crate::error::ResourceRef;

/// Document keys that are not fields of the message: its type, and a variant's constraints.
pub(crate) const META_KEYS: [&str; 3] = ["@type", CONSTRAINTS_KEY, MATCH_KEY];
pub(crate) const CONSTRAINTS_KEY: &str = "@constraints";
pub(crate) const MATCH_KEY: &str = "@match";

/// How one YAML document (or the JSON file) holds its resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Null, or `resources:` that is null or empty: nothing to decode.
    Empty,
    Single,
    List,
    Wrapper,
}

#[derive(Debug)]
pub(crate) struct DocPlan {
    pub layout: Layout,
    pub resources: Vec<ResourcePlan>,
    /// The document with YAML merge keys applied, when it used them.
    pub merged: Option<serde_yaml_ng::Value>,
}

/// What the first pass learned about a resource before its body is decoded.
#[derive(Debug)]
pub(crate) struct ResourcePlan {
    pub reference: ResourceRef,
    pub desc: MessageDescriptor,
    pub name_field: FieldDescriptor,
    /// The encoded `DynamicParameterConstraints` of a variant (`@constraints` or `@match`).
    pub constraints: Option<Bytes>,
}
