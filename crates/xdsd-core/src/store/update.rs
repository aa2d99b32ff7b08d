//! What an update hands the store (resources, changes) and what it reports back (a summary of
//! the names it changed).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::refs::Dangling;
use crate::params::Constraints;

/// One resource handed to the store: its type URL, its name and its encoded message; for a
/// variant (xRFC TP2), its dynamic parameter constraints; where it came from, for errors.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ResourceInput {
    /// Its type URL (`type.googleapis.com/envoy.config.cluster.v3.Cluster`).
    pub type_url: String,
    /// Its name, unique within its type (per variant).
    pub name: String,
    /// Its message, encoded (protobuf).
    pub value: Bytes,
    /// `None`: the name's single, unconstrained variant.
    pub constraints: Option<Constraints>,
    /// Where it came from (`file (resource #N)`): named in errors about it.
    pub origin: Option<String>,
    /// How long a client may keep it without hearing from xdsd (spec "TTL"); `None`: forever.
    pub ttl: Option<Duration>,
    /// Other names delta clients may ask for it by (VHDS: a virtual host's
    /// `ROUTE_CONFIG/DOMAIN`), sent with it in `aliases`: what a relay's upstream said.
    pub aliases: Vec<String>,
}

impl ResourceInput {
    /// The unconstrained resource `name` of `type_url` holding the encoded message `value`.
    pub fn new(type_url: impl Into<String>, name: impl Into<String>, value: Bytes) -> Self {
        ResourceInput {
            type_url: type_url.into(),
            name: name.into(),
            value,
            constraints: None,
            origin: None,
            ttl: None,
            aliases: Vec::new(),
        }
    }

    /// This input is the variant of its name selected by `constraints`.
    pub fn with_constraints(mut self, constraints: Option<Constraints>) -> Self {
        self.constraints = constraints;
        self
    }

    /// Names where it came from (a file and position, a key), for errors about it.
    pub fn with_origin(mut self, origin: impl Into<String>) -> Self {
        self.origin = Some(origin.into());
        self
    }

    /// Clients that support TTLs drop this resource when they have not heard from xdsd for
    /// `ttl`; xdsd sends heartbeats while it runs.
    pub fn with_ttl(mut self, ttl: Option<Duration>) -> Self {
        self.ttl = ttl;
        self
    }

    /// Delta clients may also ask for it by `aliases` (VHDS's `ROUTE_CONFIG/DOMAIN` of a virtual
    /// host taken from an upstream that derived it).
    pub fn with_aliases(mut self, aliases: Vec<String>) -> Self {
        self.aliases = aliases;
        self
    }
}

/// What an update did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct UpdateSummary {
    /// The store's generation after the update (one more than before when anything changed).
    pub generation: u64,
    /// Resources (variants) added, changed or removed.
    pub changed: usize,
    /// Resources (variants) the store holds after the update.
    pub total: usize,
    /// In [`ReferenceMode::Warn`](super::ReferenceMode::Warn): the references of the new state to resources that do not
    /// exist (the update was applied anyway). Empty in the other modes, and when nothing changed.
    pub dangling: Vec<Dangling>,
    /// The names the update added, changed or removed (a name with variants once), in type and
    /// name order: the first [`MAX_LISTED`](super::MAX_LISTED) of them, for logs; `changed` counts them all.
    pub names: Vec<NameChange>,
}

/// How an update changed one name of one type.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NameChange {
    /// The name's type URL.
    pub type_url: Arc<str>,
    /// The name.
    pub name: Arc<str>,
    /// Whether it was added, changed or removed.
    pub kind: ChangeKind,
}

/// How an update changed a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChangeKind {
    /// The name is new.
    Added,
    /// One of its variants is new, changed or gone, and it still has some.
    Changed,
    /// The name is gone (no variant left).
    Removed,
}

impl std::fmt::Display for NameChange {
    /// `+Cluster "c"`, `~RouteConfiguration "r1"`, `-ClusterLoadAssignment "x"`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sign = match self.kind {
            ChangeKind::Added => '+',
            ChangeKind::Changed => '~',
            ChangeKind::Removed => '-',
        };
        let short = self.type_url.rsplit('.').next().unwrap_or(&self.type_url);
        write!(f, "{sign}{short} {:?}", &*self.name)
    }
}

/// A change to one resource, for [`Store::apply`](super::Store::apply).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Change {
    /// Adds the resource, or replaces the variant of its name with the same constraints.
    Set(ResourceInput),
    /// Removes every variant of a name.
    Remove {
        /// The name's type URL.
        type_url: String,
        /// The name.
        name: String,
    },
    /// Removes the variant of a name with these constraints (`None`: the unconstrained one).
    RemoveVariant {
        /// The name's type URL.
        type_url: String,
        /// The name.
        name: String,
        /// The variant's constraints.
        constraints: Option<Constraints>,
    },
}
