//! What the client knows of the xDS types: which are full-state in SotW, the order an aggregated
//! stream asks for them, their per-type services, and short names for people.

/// Listener.
pub const LISTENER: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
/// RouteConfiguration.
pub const ROUTE_CONFIGURATION: &str =
    "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";
/// ScopedRouteConfiguration.
pub const SCOPED_ROUTE_CONFIGURATION: &str =
    "type.googleapis.com/envoy.config.route.v3.ScopedRouteConfiguration";
/// VirtualHost (VHDS).
pub const VIRTUAL_HOST: &str = "type.googleapis.com/envoy.config.route.v3.VirtualHost";
/// Cluster.
pub const CLUSTER: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
/// ClusterLoadAssignment (endpoints).
pub const CLUSTER_LOAD_ASSIGNMENT: &str =
    "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
/// Secret (SDS).
pub const SECRET: &str = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret";
/// Runtime (RTDS).
pub const RUNTIME: &str = "type.googleapis.com/envoy.service.runtime.v3.Runtime";
/// TypedExtensionConfig (ECDS).
pub const TYPED_EXTENSION_CONFIG: &str =
    "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig";

/// LEDS's type (xRFC TP1 glob collections of endpoints), which has no short name.
pub const LB_ENDPOINT: &str = "type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint";

/// Short names people type, and the type URL each stands for.
pub const ALIASES: &[(&str, &str)] = &[
    ("listener", LISTENER),
    ("route", ROUTE_CONFIGURATION),
    ("scoped-route", SCOPED_ROUTE_CONFIGURATION),
    ("virtual-host", VIRTUAL_HOST),
    ("cluster", CLUSTER),
    ("endpoints", CLUSTER_LOAD_ASSIGNMENT),
    ("secret", SECRET),
    ("runtime", RUNTIME),
    ("extension-config", TYPED_EXTENSION_CONFIG),
];

/// The type URL of a short name (`cluster`, `listener`, `route`, `endpoints`, …, with a plural
/// `s` or the usual abbreviations `lds`, `rds`, `cds`, `eds`, `sds`, `rtds`, `ecds`), or a type
/// URL as it is. `None` for anything else.
pub fn resolve(name: &str) -> Option<String> {
    if name.contains('/') {
        return Some(name.to_owned());
    }
    let lower = name.to_ascii_lowercase();
    let short = match lower.as_str() {
        "lds" => "listener",
        "rds" => "route",
        "srds" => "scoped-route",
        "vhds" => "virtual-host",
        "cds" => "cluster",
        "eds" | "endpoint" => "endpoints",
        "sds" => "secret",
        "rtds" => "runtime",
        "ecds" => "extension-config",
        other => other
            .strip_suffix('s')
            .filter(|s| *s != "endpoint")
            .unwrap_or(other),
    };
    ALIASES
        .iter()
        .find(|(alias, _)| *alias == short)
        .map(|(_, url)| (*url).to_owned())
}

/// Whether a SotW response of this type carries the complete state: a resource left out of it
/// is gone. The spec names Listener and Cluster; Envoy applies ScopedRouteConfiguration so too.
pub fn is_full_state(type_url: &str) -> bool {
    matches!(type_url, LISTENER | CLUSTER | SCOPED_ROUTE_CONFIGURATION)
}

/// The order an aggregated stream asks for types in (make-before-break: what a resource names
/// comes first).
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

/// The gRPC service that serves one type on its own stream, and its SotW and delta methods
/// (`None` where the service has no such method).
pub fn per_type_service(
    type_url: &str,
) -> Option<(&'static str, Option<&'static str>, &'static str)> {
    Some(match type_url {
        LISTENER => (
            "envoy.service.listener.v3.ListenerDiscoveryService",
            Some("StreamListeners"),
            "DeltaListeners",
        ),
        ROUTE_CONFIGURATION => (
            "envoy.service.route.v3.RouteDiscoveryService",
            Some("StreamRoutes"),
            "DeltaRoutes",
        ),
        SCOPED_ROUTE_CONFIGURATION => (
            "envoy.service.route.v3.ScopedRoutesDiscoveryService",
            Some("StreamScopedRoutes"),
            "DeltaScopedRoutes",
        ),
        VIRTUAL_HOST => (
            "envoy.service.route.v3.VirtualHostDiscoveryService",
            None,
            "DeltaVirtualHosts",
        ),
        CLUSTER => (
            "envoy.service.cluster.v3.ClusterDiscoveryService",
            Some("StreamClusters"),
            "DeltaClusters",
        ),
        CLUSTER_LOAD_ASSIGNMENT => (
            "envoy.service.endpoint.v3.EndpointDiscoveryService",
            Some("StreamEndpoints"),
            "DeltaEndpoints",
        ),
        SECRET => (
            "envoy.service.secret.v3.SecretDiscoveryService",
            Some("StreamSecrets"),
            "DeltaSecrets",
        ),
        RUNTIME => (
            "envoy.service.runtime.v3.RuntimeDiscoveryService",
            Some("StreamRuntime"),
            "DeltaRuntime",
        ),
        TYPED_EXTENSION_CONFIG => (
            "envoy.service.extension.v3.ExtensionConfigDiscoveryService",
            Some("StreamExtensionConfigs"),
            "DeltaExtensionConfigs",
        ),
        _ => return None,
    })
}

/// The aggregated discovery service.
pub const ADS_SERVICE: &str = "envoy.service.discovery.v3.AggregatedDiscoveryService";
