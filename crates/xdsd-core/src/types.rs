//! The xDS resource types xdsd knows by name, and the per-type rules the protocol attaches to them.

/// Prefix of every type URL.
pub const TYPE_URL_PREFIX: &str = "type.googleapis.com/";

/// Listeners (LDS).
pub const LISTENER: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
/// Route configurations (RDS).
pub const ROUTE_CONFIGURATION: &str =
    "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";
/// Scoped route configurations (SRDS).
pub const SCOPED_ROUTE_CONFIGURATION: &str =
    "type.googleapis.com/envoy.config.route.v3.ScopedRouteConfiguration";
/// Virtual hosts (VHDS).
pub const VIRTUAL_HOST: &str = "type.googleapis.com/envoy.config.route.v3.VirtualHost";
/// Clusters (CDS).
pub const CLUSTER: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
/// Cluster load assignments: endpoints (EDS).
pub const CLUSTER_LOAD_ASSIGNMENT: &str =
    "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
/// Endpoints one by one, the members of a LEDS collection (xRFC TP1 glob collections).
pub const LB_ENDPOINT: &str = "type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint";
/// Secrets (SDS).
pub const SECRET: &str = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret";
/// Runtime layers (RTDS).
pub const RUNTIME: &str = "type.googleapis.com/envoy.service.runtime.v3.Runtime";
/// Typed extension configurations (ECDS).
pub const TYPED_EXTENSION_CONFIG: &str =
    "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig";

/// Whether resources of `type_url` carry their name in a field of their own (`name`,
/// `cluster_name`): every type xdsd knows but `LbEndpoint` (LEDS's members, named only by their
/// xdstp name), and every type it does not know (whose name it cannot read, and so takes as
/// given). A SotW client learns the name of a resource without one only from a `Resource`
/// wrapper.
pub fn has_name_field(type_url: &str) -> bool {
    type_url != LB_ENDPOINT
}

/// The well-known xDS types, in the order people read them (listeners, routes, virtual hosts,
/// clusters, endpoints, secrets, runtime, extension configs): the order the admin API lists a
/// client's types in, and the types a relay presents its dynamic parameters for.
pub const WELL_KNOWN: [&str; 9] = [
    LISTENER,
    ROUTE_CONFIGURATION,
    SCOPED_ROUTE_CONFIGURATION,
    VIRTUAL_HOST,
    CLUSTER,
    CLUSTER_LOAD_ASSIGNMENT,
    SECRET,
    RUNTIME,
    TYPED_EXTENSION_CONFIG,
];

/// SotW responses for these types carry the complete state of the world: a resource left out of a
/// response is deleted by the client. The spec names Listener and Cluster; Envoy also applies a
/// SotW ScopedRouteConfiguration response as the complete set of scopes (it removes scopes missing
/// from it), so sending only changed scopes would delete the others.
pub fn is_full_state(type_url: &str) -> bool {
    matches!(type_url, LISTENER | CLUSTER | SCOPED_ROUTE_CONFIGURATION)
}

/// Order in which an aggregated stream pushes pending updates of several types, so that what a
/// resource refers to arrives before the resource itself (make-before-break, as the spec's
/// "Eventual consistency considerations" lists it): clusters, then their endpoints, then
/// listeners, then routes. Types not listed come last, ordered by name.
pub fn push_rank(type_url: &str) -> u8 {
    match type_url {
        SECRET => 0,
        CLUSTER => 1,
        CLUSTER_LOAD_ASSIGNMENT => 2,
        LISTENER => 3,
        ROUTE_CONFIGURATION => 4,
        SCOPED_ROUTE_CONFIGURATION => 5,
        VIRTUAL_HOST => 6,
        _ => 7,
    }
}

/// The non-aggregated gRPC services and the one type each of them serves.
pub const PER_TYPE_SERVICES: &[(&str, &str)] = &[
    (
        "envoy.service.listener.v3.ListenerDiscoveryService",
        LISTENER,
    ),
    (
        "envoy.service.route.v3.RouteDiscoveryService",
        ROUTE_CONFIGURATION,
    ),
    (
        "envoy.service.route.v3.ScopedRoutesDiscoveryService",
        SCOPED_ROUTE_CONFIGURATION,
    ),
    (
        "envoy.service.route.v3.VirtualHostDiscoveryService",
        VIRTUAL_HOST,
    ),
    ("envoy.service.cluster.v3.ClusterDiscoveryService", CLUSTER),
    (
        "envoy.service.endpoint.v3.EndpointDiscoveryService",
        CLUSTER_LOAD_ASSIGNMENT,
    ),
    ("envoy.service.secret.v3.SecretDiscoveryService", SECRET),
    ("envoy.service.runtime.v3.RuntimeDiscoveryService", RUNTIME),
];

/// The aggregated discovery service (ADS).
pub const ADS_SERVICE: &str = "envoy.service.discovery.v3.AggregatedDiscoveryService";

/// A type URL must at least name a message: `type.googleapis.com/<package>.<Message>`.
pub fn is_well_formed(type_url: &str) -> bool {
    match type_url.rsplit_once('/') {
        Some((host, message)) => {
            !host.is_empty() && message.contains('.') && !message.ends_with('.')
        }
        None => false,
    }
}

/// Per-stream values by type URL (a session's types, a stream's watch registrations, its CSDS
/// record): a short list (a stream has a few types; a session at most
/// `protocol::session::MAX_TYPES`), searched by the caller's own `Arc` of the type URL (the
/// session's, interned by the store and shared by everything of the stream) before any text is
/// compared: no lookup hashes a type URL, and the list keeps no room for twice what it holds.
pub(crate) struct TypeMap<V> {
    list: Vec<(std::sync::Arc<str>, V)>,
}

impl<V> Default for TypeMap<V> {
    fn default() -> Self {
        TypeMap { list: Vec::new() }
    }
}

impl<V> TypeMap<V> {
    fn position(&self, type_url: &str) -> Option<usize> {
        self.list
            .iter()
            .position(|(t, _)| std::ptr::eq(&**t, type_url))
            .or_else(|| self.list.iter().position(|(t, _)| **t == *type_url))
    }

    pub(crate) fn get(&self, type_url: &str) -> Option<&V> {
        self.get_key_value(type_url).map(|(_, v)| v)
    }

    pub(crate) fn get_key_value(&self, type_url: &str) -> Option<(&std::sync::Arc<str>, &V)> {
        self.position(type_url)
            .map(|i| (&self.list[i].0, &self.list[i].1))
    }

    pub(crate) fn get_mut(&mut self, type_url: &str) -> Option<&mut V> {
        let i = self.position(type_url)?;
        Some(&mut self.list[i].1)
    }

    pub(crate) fn contains_key(&self, type_url: &str) -> bool {
        self.position(type_url).is_some()
    }

    /// Sets the value of `type_url`.
    pub(crate) fn insert(&mut self, type_url: std::sync::Arc<str>, value: V) {
        match self.position(&type_url) {
            Some(i) => self.list[i].1 = value,
            None => self.list.push((type_url, value)),
        }
    }

    pub(crate) fn remove(&mut self, type_url: &str) -> Option<V> {
        let i = self.position(type_url)?;
        Some(self.list.swap_remove(i).1)
    }

    /// The value of `type_url`, made by `make` if there is none.
    pub(crate) fn get_or_insert_with(
        &mut self,
        type_url: &std::sync::Arc<str>,
        make: impl FnOnce() -> V,
    ) -> &mut V {
        let i = self.position(type_url).unwrap_or_else(|| {
            self.list.push((type_url.clone(), make()));
            self.list.len() - 1
        });
        &mut self.list[i].1
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    /// Lets go of the room kept for values no longer held.
    pub(crate) fn shrink_to_fit(&mut self) {
        self.list.shrink_to_fit();
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&std::sync::Arc<str>, &V)> + Clone {
        self.list.iter().map(|(t, v)| (t, v))
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.list.iter().map(|(_, v)| v)
    }

    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.list.iter_mut().map(|(_, v)| v)
    }
}
