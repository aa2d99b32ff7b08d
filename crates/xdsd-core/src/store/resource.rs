//! One resource as the store keeps it: encoded once at ingest, shared by every stream.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use envoy_types::pb::envoy::service::discovery::v3::{Resource as DeltaResource, ResourceName};
use envoy_types::pb::google::protobuf::{Any, Duration as ProtoDuration};
use prost::Message;
use sha2::{Digest, Sha256};

use super::refs::Reference;
use super::wire::{
    bytes_field, bytes_len, field_len, put_length_delimited, string_field, string_len,
};
use crate::params::Constraints;

/// Type URL of `envoy.service.discovery.v3.Resource`, the wrapper SotW uses for resources that
/// carry more than their body (TP2 constraints).
pub const RESOURCE_WRAPPER: &str = "type.googleapis.com/envoy.service.discovery.v3.Resource";

/// How a client takes a resource's wire form: named by `resource_name` (xRFC TP2 clients) or by
/// `name`, and with its TTL (clients that support TTLs) or without.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Encoding {
    /// Named by `resource_name` (xRFC TP2 clients), not `name`.
    pub named: bool,
    /// With its TTL.
    pub ttl: bool,
}

impl Encoding {
    fn index(self, resource: &Resource) -> usize {
        usize::from(self.named) | usize::from(self.ttl && resource.ttl.is_some()) << 1
    }
}

/// One variant of a named resource of one type, with its content version and its wire forms.
///
/// Streams never see a message object: they copy these bytes into responses. The plain forms
/// are built at ingest; the forms that name the variant's constraints (for clients that speak
/// xRFC TP2) on first use. Either way once, whatever the number of streams that send them.
pub struct Resource {
    name: Arc<str>,
    /// Other names clients may subscribe by (VHDS: `<route config>/<domain>`).
    aliases: Vec<Arc<str>>,
    /// The dynamic parameter constraints of this variant; `None`: unconstrained.
    constraints: Option<Arc<Constraints>>,
    /// Where it came from (`file (resource #N)`), for errors and operators.
    origin: Option<Arc<str>>,
    /// The resource this one was taken out of (VHDS: a virtual host's route configuration).
    parent: Option<Arc<str>>,
    /// How long a client may keep it without hearing from xdsd (spec "TTL").
    ttl: Option<Duration>,
    /// Resources to send again to a client that receives a change of this one (see `warming`).
    dependents: Vec<(Arc<str>, Arc<str>)>,
    /// The resources this one names (see `refs`), read from its message on first use (a
    /// make-before-break ordering, a reference check, the status page): most resources a
    /// relay takes in are never asked.
    references: OnceLock<Box<[Reference]>>,
    version: Arc<str>,
    /// A digest of the name and the version: what this variant adds to its type's version
    /// (see `snapshot::version_of`).
    digest: u128,
    /// `google.protobuf.Any` encoding: an element of `DiscoveryResponse.resources`.
    any: Bytes,
    /// `envoy.service.discovery.v3.Resource` encoding, named by `name`: an element of
    /// `DeltaDiscoveryResponse.resources`.
    delta: Bytes,
    /// The other forms, by [`Encoding::index`], built on first use: the SotW `Resource`
    /// wrappers (`Any`), the delta resources, and the delta heartbeats (no body).
    sotw_forms: [OnceLock<Bytes>; 4],
    delta_forms: [OnceLock<Bytes>; 4],
    heartbeat_forms: [OnceLock<Bytes>; 4],
    /// Its type has no name field ([`crate::types::has_name_field`]): a SotW client learns its
    /// name only from a `Resource` wrapper.
    nameless: bool,
    /// The glob collection (xRFC TP1) its xdstp name is a member of ([`crate::xdstp::collection_of`]),
    /// worked out once when it is built (its commit), not by every stream that looks at it.
    collection: Option<Arc<str>>,
}

impl Resource {
    /// Wraps the encoded message `value` of type `type_url`. The version is a hash of the type and
    /// the bytes, so the same content keeps the same version across reloads and restarts, which is
    /// what lets a reconnecting delta client skip resources it already has.
    pub fn new(type_url: &str, name: impl Into<Arc<str>>, value: Bytes) -> Resource {
        Resource::build(type_url, name.into(), Vec::new(), None, None, value)
    }

    /// A resource that VHDS clients may also ask for by `aliases`.
    pub fn with_aliases(
        type_url: &str,
        name: impl Into<Arc<str>>,
        aliases: Vec<Arc<str>>,
        value: Bytes,
    ) -> Resource {
        Resource::build(type_url, name.into(), aliases, None, None, value)
    }

    /// A variant with constraints (`None`: unconstrained).
    pub fn variant(
        type_url: &str,
        name: impl Into<Arc<str>>,
        aliases: Vec<Arc<str>>,
        constraints: Option<Arc<Constraints>>,
        value: Bytes,
    ) -> Resource {
        Resource::build(type_url, name.into(), aliases, constraints, None, value)
    }

    /// A variant with constraints and a TTL (`None`: none).
    pub fn variant_with_ttl(
        type_url: &str,
        name: impl Into<Arc<str>>,
        aliases: Vec<Arc<str>>,
        constraints: Option<Arc<Constraints>>,
        ttl: Option<Duration>,
        value: Bytes,
    ) -> Resource {
        Resource::build(type_url, name.into(), aliases, constraints, ttl, value)
    }

    fn build(
        type_url: &str,
        name: Arc<str>,
        aliases: Vec<Arc<str>>,
        constraints: Option<Arc<Constraints>>,
        ttl: Option<Duration>,
        value: Bytes,
    ) -> Resource {
        let version = Resource::version_of(type_url, &aliases, constraints.as_deref(), ttl, &value);
        Resource::versioned(type_url, name, aliases, constraints, ttl, value, version)
    }

    /// A variant with constraints and a TTL whose `version` ([`Resource::version_of`]) its
    /// store computed already (to find it unchanged): not hashed twice.
    pub(crate) fn versioned(
        type_url: &str,
        name: Arc<str>,
        aliases: Vec<Arc<str>>,
        constraints: Option<Arc<Constraints>>,
        ttl: Option<Duration>,
        value: Bytes,
        version: String,
    ) -> Resource {
        // The wire forms written from the bytes as they came (a relay's are the upstream's),
        // field by field as prost would (fields by number, proto3's empty strings left out):
        // the message is never decoded, nor copied more than once into each form.
        let any = any_form(type_url, &value);
        let delta = delta_form(&name, &aliases, &version, &any);
        let dependents = super::warming::dependents(type_url, &name, &value);
        let digest = pair_digest(&name, &version);
        let collection = crate::xdstp::is_xdstp(&name)
            .then(|| crate::xdstp::collection_of(&name))
            .flatten()
            .map(Arc::from);
        Resource {
            collection,
            digest,
            name,
            aliases,
            constraints,
            origin: None,
            parent: None,
            ttl,
            dependents,
            references: OnceLock::new(),
            version: version.into(),
            any,
            delta,
            nameless: !crate::types::has_name_field(type_url),
            sotw_forms: Default::default(),
            delta_forms: Default::default(),
            heartbeat_forms: Default::default(),
        }
    }

    /// The version a resource of this content has: the same content, the same version. The
    /// constraints count: two variants of one name never share a version; so does the TTL, so that
    /// a changed TTL reaches the clients.
    pub fn version_of(
        type_url: &str,
        aliases: &[Arc<str>],
        constraints: Option<&Constraints>,
        ttl: Option<Duration>,
        value: &[u8],
    ) -> String {
        let mut hash = Sha256::new();
        hash.update(type_url.as_bytes());
        hash.update([0]);
        hash.update(value);
        for alias in aliases {
            hash.update([0]);
            hash.update(alias.as_bytes());
        }
        if let Some(c) = constraints {
            hash.update([1]);
            hash.update(c.encoded());
        }
        if let Some(ttl) = ttl {
            hash.update([2]);
            hash.update(ttl.as_nanos().to_le_bytes());
        }
        hex8(&hash.finalize())
    }

    /// Its name.
    pub fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// Where the resource came from, when its source said so.
    pub fn origin(&self) -> Option<&Arc<str>> {
        self.origin.as_ref()
    }

    pub(crate) fn with_origin(mut self, origin: Option<Arc<str>>) -> Resource {
        self.origin = origin;
        self
    }

    /// The resource this one was taken out of: for a VHDS virtual host, the name of its route
    /// configuration.
    pub fn parent(&self) -> Option<&Arc<str>> {
        self.parent.as_ref()
    }

    pub(crate) fn with_parent(mut self, parent: Option<Arc<str>>) -> Resource {
        self.parent = parent;
        self
    }

    /// This variant's constraints; `None`: unconstrained (matches every parameter set).
    pub fn constraints(&self) -> Option<&Arc<Constraints>> {
        self.constraints.as_ref()
    }

    /// (type URL, name) of the resources a client must be sent again after a change of this one,
    /// to finish warming it.
    pub fn dependents(&self) -> &[(Arc<str>, Arc<str>)] {
        &self.dependents
    }

    /// The resources this one refers to by name (type URL, name, field), each once: what must
    /// exist for a client to use it.
    pub fn references(&self) -> &[Reference] {
        self.references
            .get_or_init(|| match Any::decode(self.any.clone()) {
                Ok(any) => super::refs::references(&any.type_url, &any.value).into_boxed_slice(),
                Err(_) => Box::default(),
            })
    }

    /// Its aliases (VHDS).
    pub fn aliases(&self) -> &[Arc<str>] {
        &self.aliases
    }

    /// A digest of the name and the version, the same for the same name and content on every
    /// xdsd: what this variant adds to its type's version.
    pub(crate) fn digest(&self) -> u128 {
        self.digest
    }

    /// Its version: a digest of its content.
    pub fn version(&self) -> &Arc<str> {
        &self.version
    }

    /// The `google.protobuf.Any` bytes (type URL + message).
    pub fn any_bytes(&self) -> &Bytes {
        &self.any
    }

    /// The `envoy.service.discovery.v3.Resource` bytes (name, version, Any).
    pub fn delta_bytes(&self) -> &Bytes {
        &self.delta
    }

    /// The `ResourceName` of this variant: its name and its constraints, never omitted (an
    /// unconstrained variant carries an empty constraints message, which matches everything).
    pub fn resource_name(&self) -> ResourceName {
        resource_name(&self.name, self.constraints.as_deref())
    }

    /// How long a client may keep this resource without hearing from xdsd; `None`: forever.
    pub fn ttl(&self) -> Option<Duration> {
        self.ttl
    }

    /// A `DiscoveryResponse.resources` element: the plain `Any` of the message, or an `Any`
    /// holding the `Resource` wrapper when the encoding needs one (named by `resource_name`, or
    /// carrying a TTL).
    pub fn sotw_entry(&self, encoding: Encoding) -> &Bytes {
        match encoding.index(self) {
            // A type without a name field (LEDS's `LbEndpoint`): wrapped with its name for a
            // client that takes wrappers (SotW's `ttl`: it takes TTLs and `Resource`
            // wrappers), which could not tell its name otherwise. (Form 0 is otherwise unused.)
            0 if encoding.ttl && self.nameless => self.sotw_forms[0].get_or_init(|| {
                Any {
                    type_url: RESOURCE_WRAPPER.to_owned(),
                    value: self.wrapper(encoding, true).encode_to_vec(),
                }
                .encode_to_vec()
                .into()
            }),
            0 => &self.any,
            i => self.sotw_forms[i].get_or_init(|| {
                Any {
                    type_url: RESOURCE_WRAPPER.to_owned(),
                    value: self.wrapper(encoding, true).encode_to_vec(),
                }
                .encode_to_vec()
                .into()
            }),
        }
    }

    /// Whether its type has no name field (see [`Resource::sotw_entry`]).
    pub fn is_nameless(&self) -> bool {
        self.nameless
    }

    /// A `DeltaDiscoveryResponse.resources` element.
    pub fn delta_entry(&self, encoding: Encoding) -> &Bytes {
        match encoding.index(self) {
            0 => &self.delta,
            i => self.delta_forms[i]
                .get_or_init(|| self.wrapper(encoding, true).encode_to_vec().into()),
        }
    }

    /// A heartbeat for this resource (spec "TTL"): a `DeltaDiscoveryResponse.resources` element
    /// with the name, the version and the TTL, and no body.
    pub fn heartbeat_entry(&self, encoding: Encoding) -> &Bytes {
        self.heartbeat_forms[encoding.index(self)]
            .get_or_init(|| self.wrapper(encoding, false).encode_to_vec().into())
    }

    /// The `Resource` wrapper of this variant in an encoding, with its body or without (a
    /// heartbeat).
    fn wrapper(&self, encoding: Encoding, body: bool) -> DeltaResource {
        let (name, resource_name) = if encoding.named {
            (String::new(), Some(self.resource_name()))
        } else {
            (self.name.to_string(), None)
        };
        let ttl = self.ttl.filter(|_| encoding.ttl).map(|ttl| ProtoDuration {
            seconds: i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX),
            nanos: i32::try_from(ttl.subsec_nanos()).unwrap_or(0),
        });
        DeltaResource {
            name,
            resource_name,
            aliases: self.aliases.iter().map(|a| a.to_string()).collect(),
            version: self.version.to_string(),
            resource: if body {
                Any::decode(self.any.clone()).ok()
            } else {
                None
            },
            ttl,
            ..Default::default()
        }
    }

    /// This variant under another name (the spelling a client subscribed to an xdstp name by),
    /// with the same content, constraints, TTL and version: built per stream that needs it,
    /// only for such names.
    pub(crate) fn renamed(&self, name: Arc<str>) -> Resource {
        let (type_url, value) = match Any::decode(self.any.clone()) {
            Ok(any) => (any.type_url, Bytes::from(any.value)),
            Err(_) => (String::new(), Bytes::new()),
        };
        Resource::build(
            &type_url,
            name,
            self.aliases.clone(),
            self.constraints.clone(),
            self.ttl,
            value,
        )
        .with_origin(self.origin.clone())
        .with_parent(self.parent.clone())
        .with_collection(self.collection.clone())
    }

    /// The glob collection its name is a member of, as its canonical name has it (a copy
    /// renamed to a client's spelling keeps it).
    fn with_collection(mut self, collection: Option<Arc<str>>) -> Resource {
        self.collection = collection;
        self
    }

    /// The glob collection (xRFC TP1) its name is a member of: `None` for a name that is not
    /// xdstp (or has no id). Worked out when the resource was built.
    pub(crate) fn collection(&self) -> Option<&str> {
        self.collection.as_deref()
    }

    /// [`Self::collection`], shared (the store's change list keeps it for the watch index).
    pub(crate) fn collection_shared(&self) -> Option<&Arc<str>> {
        self.collection.as_ref()
    }

    /// The encoded message itself (the `value` of the Any), decoded back from the Any on demand:
    /// only tools and tests need it, so it is not kept twice.
    pub fn value(&self) -> Bytes {
        match Any::decode(self.any.clone()) {
            Ok(any) => any.value.into(),
            Err(_) => Bytes::new(),
        }
    }
}

/// `google.protobuf.Any { type_url, value }` as prost encodes it.
fn any_form(type_url: &str, value: &[u8]) -> Bytes {
    let mut buf = Vec::with_capacity(string_len(type_url) + bytes_len(value));
    string_field(1, type_url, &mut buf);
    bytes_field(2, value, &mut buf);
    buf.into()
}

/// `envoy.service.discovery.v3.Resource { version, resource: any, name, aliases }` as prost
/// encodes it (by field number: version 1, resource 2, name 3, aliases 4, each alias even empty).
fn delta_form(name: &str, aliases: &[Arc<str>], version: &str, any: &[u8]) -> Bytes {
    let len = string_len(version)
        + field_len(any.len())
        + string_len(name)
        + aliases.iter().map(|a| field_len(a.len())).sum::<usize>();
    let mut buf = Vec::with_capacity(len);
    string_field(1, version, &mut buf);
    put_length_delimited(&mut buf, 2, any);
    string_field(3, name, &mut buf);
    for alias in aliases {
        put_length_delimited(&mut buf, 4, alias.as_bytes());
    }
    buf.into()
}

/// A `ResourceName` for `name` with `constraints` (an empty message when unconstrained).
pub fn resource_name(name: &str, constraints: Option<&Constraints>) -> ResourceName {
    ResourceName {
        name: name.to_owned(),
        dynamic_parameter_constraints: Some(
            constraints.map(|c| c.proto().clone()).unwrap_or_default(),
        ),
    }
}

/// The first 8 bytes of a digest in hex: xdsd's version strings.
/// The first 16 bytes of the SHA-256 of `name`, 0, `version`, 0.
fn pair_digest(name: &str, version: &str) -> u128 {
    let mut hash = Sha256::new();
    hash.update(name.as_bytes());
    hash.update([0]);
    hash.update(version.as_bytes());
    hash.update([0]);
    let digest = hash.finalize();
    let mut first = [0u8; 16];
    first.copy_from_slice(&digest[..16]);
    u128::from_le_bytes(first)
}

pub(crate) fn hex8(digest: &[u8]) -> String {
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

impl fmt::Debug for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Resource");
        d.field("name", &self.name)
            .field("version", &self.version)
            .field("bytes", &self.any.len());
        if let Some(c) = &self.constraints {
            d.field("constraints", &format_args!("{c}"));
        }
        d.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_forms_written_from_the_bytes_are_prosts_encoding_byte_for_byte() {
        let cases: [(&str, &[u8], &[&str]); 4] = [
            ("type.example/T", b"\x0a\x01c", &[]),
            ("type.example/T", b"", &[]),
            ("type.example/T", b"\x0a\x01c", &["r/a", ""]),
            ("", b"\x0a\x01c", &["x"]),
        ];
        for (type_url, value, aliases) in cases {
            let aliases: Vec<Arc<str>> = aliases.iter().map(|a| Arc::from(*a)).collect();
            let r = Resource::with_aliases(
                type_url,
                "n",
                aliases.clone(),
                Bytes::copy_from_slice(value),
            );
            let any = Any {
                type_url: type_url.to_owned(),
                value: value.to_vec(),
            };
            assert_eq!(&r.any_bytes()[..], &any.encode_to_vec()[..]);
            let delta = DeltaResource {
                name: "n".into(),
                aliases: aliases.iter().map(|a| a.to_string()).collect(),
                version: r.version().to_string(),
                resource: Some(any),
                ..Default::default()
            };
            assert_eq!(&r.delta_bytes()[..], &delta.encode_to_vec()[..]);
            assert_eq!(&r.value()[..], value, "the body served as it came");
        }
    }
}
