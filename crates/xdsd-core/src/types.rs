//! The xDS resource types xdsd knows by name, and the per-type rules the protocol attaches to them.

/// Prefix of every type URL.
pub const TYPE_URL_PREFIX: &str = "type.googleapis.com/";

pub const LISTENER: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
pub const ROUTE_CONFIGURATION: &str =
    "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";
pub const SCOPED_ROUTE_CONFIGURATION: &str =
    "type.googleapis.com/envoy.config.route.v3.ScopedRouteConfiguration";
pub const VIRTUAL_HOST: &str = "type.googleapis.com/envoy.config.route.v3.VirtualHost";
pub const CLUSTER: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
pub const CLUSTER_LOAD_ASSIGNMENT: &str =
    "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
pub const SECRET: &str = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret";
pub const RUNTIME: &str = "type.googleapis.com/envoy.service.runtime.v3.Runtime";
pub const TYPED_EXTENSION_CONFIG: &str =
    "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig";

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

/// Where `type_url` is in a short per-stream list keyed by type URL: found by the caller's own
/// `Arc` (the session's, shared by everything of the stream; or the text of one) before any text
/// is compared.
pub(crate) fn position<T>(list: &[(std::sync::Arc<str>, T)], type_url: &str) -> Option<usize> {
    list.iter()
        .position(|(t, _)| std::ptr::eq(&**t, type_url))
        .or_else(|| list.iter().position(|(t, _)| **t == *type_url))
}
