use std::sync::OnceLock;

use prost_reflect::{DescriptorPool, MessageDescriptor};

use crate::SourceError;

// include_bytes! needs a literal path, so the version lives in a macro that descriptors/update.sh rewrites.
macro_rules! envoy_types_version {
    () => {
        "0.7.7"
    };
}

/// The envoy-types version whose descriptor set is embedded (see `descriptors/update.sh`).
pub const ENVOY_TYPES_VERSION: &str = envoy_types_version!();

/// The `FileDescriptorSet` that envoy-types was generated from, as committed in `descriptors/`.
pub static ENVOY_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(
    "../descriptors/envoy-types-",
    envoy_types_version!(),
    ".bin"
));

/// Prefix used for the type URLs this crate produces, as Envoy and the xDS protocol write them.
pub const TYPE_URL_PREFIX: &str = "type.googleapis.com/";

/// The proto descriptors used to decode resource files.
///
/// Cloning is cheap: the pool is reference counted.
#[derive(Clone, Debug)]
pub struct Descriptors {
    pool: DescriptorPool,
}

impl Descriptors {
    /// Every message that envoy-types knows (all Envoy v3 APIs plus their xds/udpa/google deps).
    ///
    /// The embedded set is decoded once per process; later calls clone the cached pool.
    pub fn envoy() -> Result<Descriptors, SourceError> {
        static POOL: OnceLock<DescriptorPool> = OnceLock::new();
        if let Some(pool) = POOL.get() {
            return Ok(Descriptors { pool: pool.clone() });
        }
        let pool =
            DescriptorPool::decode(ENVOY_DESCRIPTOR_SET).map_err(SourceError::Descriptors)?;
        // Losing a race to another thread only costs a redundant decode.
        let pool = POOL.get_or_init(|| pool).clone();
        Ok(Descriptors { pool })
    }

    /// Wraps any pool, e.g. one extended with a deployment's own extension protos.
    pub fn from_pool(pool: DescriptorPool) -> Descriptors {
        Descriptors { pool }
    }

    pub fn pool(&self) -> &DescriptorPool {
        &self.pool
    }

    /// Resolves a type URL (`<anything>/<full message name>`, as for `Any`) to its message.
    pub fn message_for_type_url(&self, type_url: &str) -> Option<MessageDescriptor> {
        let full_name = type_url.rsplit_once('/').map_or(type_url, |(_, name)| name);
        self.pool.get_message_by_name(full_name)
    }
}

/// The canonical type URL of a message, the form the store and the xDS wire use.
pub fn type_url_of(desc: &MessageDescriptor) -> String {
    format!("{TYPE_URL_PREFIX}{}", desc.full_name())
}
