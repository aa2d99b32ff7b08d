//! Resource sources for xdsd: a directory of Envoy resources written in Envoy's own proto3
//! JSON/YAML form, decoded through the real Envoy proto descriptors into validated, encoded
//! resources, and watched for changes.
//!
//! Each resource is a mapping whose `"@type"` names its message type as a type URL, the rest
//! being the message in proto3 JSON; see `docs/resource-files.md` for the file format.
//!
//! The other way, [`render_discovery_response`] writes resources as the `DiscoveryResponse`
//! files that Envoy's filesystem subscriptions read (binary, JSON or YAML).
//!
//! [`DirectorySource`] is the directory as an [`xdsd_core::source::Source`]: loaded, then
//! followed, each change handed out as the names it changed, for [`xdsd_core::source::Feed`] to
//! commit. The parsing itself ([`parse_file`], [`load_directory`]) knows nothing of the store.

mod budget;
mod canonical;
mod de;
mod descriptors;
mod dir;
mod error;
mod parse;
mod plan;
mod render;
mod source;
mod suggest;
mod watch;

pub use budget::MAX_NODES;
pub use descriptors::{
    type_url_of, Descriptors, ENVOY_DESCRIPTOR_SET, ENVOY_TYPES_VERSION, TYPE_URL_PREFIX,
};
pub use dir::{
    is_ignored_name, load_directory, load_directory_with, resource_files, Changes, DirectoryCache,
    Limits, DEFAULT_MAX_FILE_BYTES, DEFAULT_RACY_WINDOW,
};
pub use error::{Problem, ResourceRef, SourceError};
pub use parse::{check_duplicates, declared_names, name_field, parse_file, parse_text, Format};
pub use render::{
    discovery_response_bytes, read_discovery_response, render_discovery_response,
    render_resource_document, FileFormat, RenderError, DISCOVERY_RESPONSE,
};
pub use source::{rejection, resource_inputs, DirectorySource};
pub use watch::{
    watch_directory, watch_directory_updates, watch_directory_with, DirectoryWatch, Reloaded,
    WatchOptions, DEBOUNCE, MAX_DELAY, OPEN_WRITE_BOUND,
};

/// The shortest `"@ttl"` a resource may have: shorter would have every client renewed several
/// times a second.
pub const MIN_TTL: std::time::Duration = std::time::Duration::from_secs(1);

/// One validated resource, ready for the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedResource {
    /// Canonical type URL, e.g. `type.googleapis.com/envoy.config.cluster.v3.Cluster`.
    pub type_url: String,
    /// The `name` field, or `cluster_name` for a ClusterLoadAssignment; never empty.
    pub name: String,
    /// The protobuf encoding of the message itself (what goes in `Any.value`).
    pub value: bytes::Bytes,
    /// For a variant (xRFC TP2): the encoded `DynamicParameterConstraints` of its
    /// `"@constraints"` (or `"@match"`); `None` for the name's only, unconstrained resource.
    pub constraints: Option<bytes::Bytes>,
    /// `"@ttl"`: how long a client that takes TTLs may keep the resource without hearing from the
    /// server (at least [`MIN_TTL`]); `None`: for as long as it likes.
    pub ttl: Option<std::time::Duration>,
    /// Where it came from: `path/to/file.yaml (resource #2)`, counting from 1.
    pub origin: String,
}
