//! One resource as the store keeps it: encoded once at ingest, shared by every stream.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use envoy_types::pb::envoy::service::discovery::v3::Resource as DeltaResource;
use prost::Message;
use sha2::{Digest, Sha256};

/// A named resource of one type, with its content version and its wire forms.
///
/// Streams never see a message object: they copy these bytes into responses. Both forms are
/// built here, once, whatever the number of streams that will send them.
pub struct Resource {
    name: Arc<str>,
    /// Other names clients may subscribe by (VHDS: `<route config>/<domain>`).
    aliases: Vec<Arc<str>>,
    /// Resources to send again to a client that receives a change of this one (see `warming`).
    dependents: Vec<(Arc<str>, Arc<str>)>,
    version: Arc<str>,
    /// `google.protobuf.Any` encoding: an element of `DiscoveryResponse.resources`.
    any: Bytes,
    /// `envoy.service.discovery.v3.Resource` encoding: an element of `DeltaDiscoveryResponse.resources`.
    delta: Bytes,
}

impl Resource {
    /// Wraps the encoded message `value` of type `type_url`. The version is a hash of the type and
    /// the bytes, so the same content keeps the same version across reloads and restarts, which is
    /// what lets a reconnecting delta client skip resources it already has.
    pub fn new(type_url: &str, name: impl Into<Arc<str>>, value: Bytes) -> Resource {
        Resource::with_aliases(type_url, name, Vec::new(), value)
    }

    pub fn with_aliases(
        type_url: &str,
        name: impl Into<Arc<str>>,
        aliases: Vec<Arc<str>>,
        value: Bytes,
    ) -> Resource {
        let name = name.into();
        let version = Resource::version_of(type_url, &aliases, &value);
        let any = envoy_types::pb::google::protobuf::Any {
            type_url: type_url.to_owned(),
            value: value.to_vec(),
        };
        let delta = DeltaResource {
            name: name.to_string(),
            aliases: aliases.iter().map(|a| a.to_string()).collect(),
            version: version.clone(),
            resource: Some(any.clone()),
            ..Default::default()
        };
        let dependents = super::warming::dependents(type_url, &name, &value);
        Resource {
            name,
            aliases,
            dependents,
            version: version.into(),
            any: any.encode_to_vec().into(),
            delta: delta.encode_to_vec().into(),
        }
    }

    /// The version a resource of this content has: the same content, the same version.
    pub fn version_of(type_url: &str, aliases: &[Arc<str>], value: &[u8]) -> String {
        let mut hash = Sha256::new();
        hash.update(type_url.as_bytes());
        hash.update([0]);
        hash.update(value);
        for alias in aliases {
            hash.update([0]);
            hash.update(alias.as_bytes());
        }
        let digest = hash.finalize();
        digest[..8].iter().map(|b| format!("{b:02x}")).collect()
    }

    pub fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// (type URL, name) of the resources a client must be sent again after a change of this one,
    /// to finish warming it.
    pub fn dependents(&self) -> &[(Arc<str>, Arc<str>)] {
        &self.dependents
    }

    pub fn aliases(&self) -> &[Arc<str>] {
        &self.aliases
    }

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

    /// The encoded message itself (the `value` of the Any), decoded back from the Any on demand:
    /// only tools and tests need it, so it is not kept twice.
    pub fn value(&self) -> Bytes {
        match envoy_types::pb::google::protobuf::Any::decode(self.any.clone()) {
            Ok(any) => any.value.into(),
            Err(_) => Bytes::new(),
        }
    }
}

impl fmt::Debug for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resource")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("bytes", &self.any.len())
            .finish()
    }
}
