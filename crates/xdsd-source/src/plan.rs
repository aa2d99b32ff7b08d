//! What the first pass over a file learns (its layout, each resource's type, name field and
//! constraints), which drives the second pass (`de`). Its own module, so that `parse` (which
//! makes plans) and `de` (which follows them) do not depend on each other.

use bytes::Bytes;
use prost_reflect::{FieldDescriptor, MessageDescriptor};

use crate::error::ResourceRef;

/// Document keys that are not fields of the message: its type, its xdstp name, a variant's
/// constraints, its TTL.
pub(crate) const META_KEYS: [&str; 5] = ["@type", NAME_KEY, CONSTRAINTS_KEY, MATCH_KEY, TTL_KEY];
/// `"@name": xdstp://...`: the name of a resource whose type has no name field (`LbEndpoint`), or
/// the xdstp name of one that has (then equal to it).
pub(crate) const NAME_KEY: &str = "@name";
pub(crate) const CONSTRAINTS_KEY: &str = "@constraints";
pub(crate) const MATCH_KEY: &str = "@match";
pub(crate) const TTL_KEY: &str = "@ttl";

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
    /// The field the resource is named by (`name`, `cluster_name`); `None`: named by `@name`.
    pub name_field: Option<FieldDescriptor>,
    /// `@name`, canonical (checked in the first pass).
    pub at_name: Option<String>,
    /// The encoded `DynamicParameterConstraints` of a variant (`@constraints` or `@match`).
    pub constraints: Option<Bytes>,
    /// `@ttl`: how long a client may keep the resource without hearing from xdsd.
    pub ttl: Option<std::time::Duration>,
}
