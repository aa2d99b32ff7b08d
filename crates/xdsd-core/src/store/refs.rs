//! The resource graph: which resources a resource names, and in which field. Found once at
//! ingest by decoding the message with the Envoy protos; a part that does not decode contributes
//! nothing. The edges are the ones a client follows to fetch what it needs:
//!
//! - Listener → RouteConfiguration: an HttpConnectionManager (a network filter of a filter
//!   chain, of the default filter chain, or the `api_listener` of proxyless gRPC) with
//!   `rds.route_config_name`, or with inline scoped routes naming route configurations; the
//!   clusters an inline `route_config` routes to (Listener → Cluster).
//! - ScopedRouteConfiguration → RouteConfiguration (`route_configuration_name`).
//! - RouteConfiguration, VirtualHost → Cluster: a route action's `cluster`, its weighted
//!   clusters, and request mirror policies (of the route configuration, the virtual host, the
//!   route). A cluster chosen per request (`cluster_header`, cluster specifier plugins) cannot be
//!   checked and is not an edge.
//! - Cluster (type EDS, with an `eds_config`) → ClusterLoadAssignment:
//!   `eds_cluster_config.service_name`, else the cluster's name.
//! - ClusterLoadAssignment → LbEndpoint: a locality's `leds_cluster_locality_config`, a
//!   reference to a glob collection (xRFC TP1), which a collection with no members satisfies;
//!   a `leds_collection_name` that is not an xdstp glob of LbEndpoint is an error.
//! - Listener (filter chain TLS) and Cluster (`transport_socket`, `transport_socket_matches`) →
//!   Secret: the SDS secret configs of the TLS context.
//!
//! A reference the client fetches from a file (a `path` or `path_config_source` config source)
//! is not served by xdsd and is left out, and so is an SDS secret config without `sds_config`:
//! Envoy takes it from the static secrets of its bootstrap.
//!
//! At commit, every reference of the next state must name a resource of that state (by name or
//! alias) unless the [`ReferencePolicy`] declares it external; what to do otherwise is the
//! policy's [`ReferenceMode`].

use std::collections::{HashMap, HashSet};
use std::fmt::{self, Write as _};
use std::sync::Arc;

use envoy_types::pb::envoy::config::cluster::v3::cluster::{ClusterDiscoveryType, DiscoveryType};
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::config_source::ConfigSourceSpecifier;
use envoy_types::pb::envoy::config::core::v3::{transport_socket, ConfigSource, TransportSocket};
use envoy_types::pb::envoy::config::endpoint::v3::locality_lb_endpoints::LbConfig;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::listener::v3::{filter, FilterChain, Listener};
use envoy_types::pb::envoy::config::route::v3::route::Action;
use envoy_types::pb::envoy::config::route::v3::route_action::{
    ClusterSpecifier, RequestMirrorPolicy,
};
use envoy_types::pb::envoy::config::route::v3::{
    RouteConfiguration, ScopedRouteConfiguration, VirtualHost,
};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager::RouteSpecifier, scoped_routes::ConfigSpecifier, HttpConnectionManager,
};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    common_tls_context::ValidationContextType, downstream_tls_context::SessionTicketKeysType,
    CommonTlsContext, DownstreamTlsContext, SdsSecretConfig, UpstreamTlsContext,
};
use envoy_types::pb::google::protobuf::Any;
use prost::Message;

use super::TypeSnapshot;
use crate::hash::HashMap as FastMap;
use crate::params::Constraints;
use crate::types::{
    CLUSTER, CLUSTER_LOAD_ASSIGNMENT, LB_ENDPOINT, LISTENER, ROUTE_CONFIGURATION,
    SCOPED_ROUTE_CONFIGURATION, SECRET, VIRTUAL_HOST,
};

const HTTP_CONNECTION_MANAGER: &str =
    "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
const DOWNSTREAM_TLS_CONTEXT: &str =
    "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext";
const UPSTREAM_TLS_CONTEXT: &str = "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext";

/// A reference from one resource to another (by type URL and name), and the field that holds it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Reference {
    /// The referenced resource's type: one of the consts in [`crate::types`].
    pub type_url: &'static str,
    /// The referenced resource's name.
    pub name: Arc<str>,
    /// Where in the referring resource, e.g.
    /// `filter_chains[0].filters[0].typed_config.rds.route_config_name`.
    pub field: Box<str>,
    /// A glob collection (LEDS), not one resource: any well-formed glob of the type resolves,
    /// members or none.
    pub collection: bool,
}

/// The resources a resource of `type_url` encoded as `value` refers to: each referenced
/// (type, name) once, with the first field that names it, in field order. The one walk of the
/// resource graph: the store's reference check, the status page's graph and `xdsd get`'s
/// fetch of what the wildcards reference all follow it.
pub fn references(type_url: &str, value: &[u8]) -> Vec<Reference> {
    let mut out = Refs::default();
    match type_url {
        LISTENER => {
            if let Ok(listener) = Listener::decode(value) {
                listener_refs(&listener, &mut out);
            }
        }
        ROUTE_CONFIGURATION => {
            if let Ok(route) = RouteConfiguration::decode(value) {
                route_configuration_refs(&route, "", &mut out);
            }
        }
        VIRTUAL_HOST => {
            if let Ok(host) = VirtualHost::decode(value) {
                virtual_host_refs(&host, "", &mut out);
            }
        }
        SCOPED_ROUTE_CONFIGURATION => {
            if let Ok(scope) = ScopedRouteConfiguration::decode(value) {
                scoped_route_refs(&scope, "", &mut out);
            }
        }
        CLUSTER => {
            if let Ok(cluster) = Cluster::decode(value) {
                cluster_refs(&cluster, &mut out);
            }
        }
        CLUSTER_LOAD_ASSIGNMENT => {
            if let Ok(cla) = ClusterLoadAssignment::decode(value) {
                for (i, locality) in cla.endpoints.iter().enumerate() {
                    let Some(LbConfig::LedsClusterLocalityConfig(leds)) = &locality.lb_config
                    else {
                        continue;
                    };
                    if from_server(leds.leds_config.as_ref()) {
                        out.add_collection(
                            LB_ENDPOINT,
                            &leds.leds_collection_name,
                            &format!(
                                "endpoints[{i}].leds_cluster_locality_config.leds_collection_name"
                            ),
                        );
                    }
                }
            }
        }
        _ => {}
    }
    out.list
}

/// References found so far, each (type, name) once.
#[derive(Default)]
struct Refs {
    list: Vec<Reference>,
    seen: HashSet<(&'static str, Arc<str>)>,
}

impl Refs {
    /// Adds a reference to `name` held by the field `prefix` + `field`; an empty name (a field
    /// left unset) is none.
    fn add(&mut self, type_url: &'static str, name: &str, prefix: &str, field: &str) {
        if name.is_empty() {
            return;
        }
        // An xdstp name refers to its resource whatever its spelling (the store keeps the
        // canonical one).
        let name: Arc<str> = crate::xdstp::canonical(name).unwrap_or_else(|| name.into());
        if self.seen.insert((type_url, name.clone())) {
            self.list.push(Reference {
                type_url,
                name,
                field: format!("{prefix}{field}").into(),
                collection: false,
            });
        }
    }

    /// Adds a reference to the glob collection `name` held by `field` (an empty one too: a
    /// LEDS locality must name its collection).
    fn add_collection(&mut self, type_url: &'static str, name: &str, field: &str) {
        self.list.push(Reference {
            type_url,
            name: name.into(),
            field: field.into(),
            collection: true,
        });
    }
}

/// `prefix` followed by `field` and a dot: the prefix of the fields inside `field`.
fn within(prefix: &str, field: impl std::fmt::Display) -> String {
    let mut s = String::with_capacity(prefix.len() + 32);
    s.push_str(prefix);
    let _ = write!(s, "{field}.");
    s
}

/// Whether the message type an `Any` holds is `message` (full name), whatever the URL prefix.
fn holds(any: &Any, message: &str) -> bool {
    any.type_url.rsplit('/').next() == Some(message)
}

/// Whether a client fetches what a config source names from an xDS server: not from a file.
// `path` is deprecated in favour of `path_config_source`, but Envoy still reads it.
#[allow(deprecated)]
fn from_server(source: Option<&ConfigSource>) -> bool {
    !matches!(
        source.and_then(|s| s.config_source_specifier.as_ref()),
        Some(ConfigSourceSpecifier::Path(_) | ConfigSourceSpecifier::PathConfigSource(_))
    )
}

fn listener_refs(listener: &Listener, out: &mut Refs) {
    for (i, chain) in listener.filter_chains.iter().enumerate() {
        filter_chain_refs(chain, &format!("filter_chains[{i}]."), out);
    }
    if let Some(chain) = &listener.default_filter_chain {
        filter_chain_refs(chain, "default_filter_chain.", out);
    }
    if let Some(any) = listener
        .api_listener
        .as_ref()
        .and_then(|a| a.api_listener.as_ref())
    {
        any_hcm_refs(any, "api_listener.api_listener.", out);
    }
}

fn filter_chain_refs(chain: &FilterChain, prefix: &str, out: &mut Refs) {
    for (i, f) in chain.filters.iter().enumerate() {
        if let Some(filter::ConfigType::TypedConfig(any)) = &f.config_type {
            any_hcm_refs(
                any,
                &within(prefix, format_args!("filters[{i}].typed_config")),
                out,
            );
        }
    }
    if let Some(socket) = &chain.transport_socket {
        transport_socket_refs(socket, &within(prefix, "transport_socket"), out);
    }
}

/// An `Any` that may hold an HttpConnectionManager.
fn any_hcm_refs(any: &Any, prefix: &str, out: &mut Refs) {
    if !holds(any, HTTP_CONNECTION_MANAGER) {
        return;
    }
    let Ok(hcm) = HttpConnectionManager::decode(any.value.as_slice()) else {
        return;
    };
    match &hcm.route_specifier {
        Some(RouteSpecifier::Rds(rds)) if from_server(rds.config_source.as_ref()) => {
            out.add(
                ROUTE_CONFIGURATION,
                &rds.route_config_name,
                prefix,
                "rds.route_config_name",
            );
        }
        Some(RouteSpecifier::RouteConfig(route)) => {
            route_configuration_refs(route, &within(prefix, "route_config"), out);
        }
        Some(RouteSpecifier::ScopedRoutes(scoped)) => {
            if let Some(ConfigSpecifier::ScopedRouteConfigurationsList(list)) =
                &scoped.config_specifier
            {
                let from_server = from_server(scoped.rds_config_source.as_ref());
                for (i, scope) in list.scoped_route_configurations.iter().enumerate() {
                    let prefix = within(
                        prefix,
                        format_args!(
                            "scoped_routes.scoped_route_configurations_list.scoped_route_configurations[{i}]"
                        ),
                    );
                    if from_server {
                        scoped_route_refs(scope, &prefix, out);
                    } else if let Some(route) = &scope.route_configuration {
                        route_configuration_refs(
                            route,
                            &within(&prefix, "route_configuration"),
                            out,
                        );
                    }
                }
            }
        }
        _ => {}
    }
}

fn scoped_route_refs(scope: &ScopedRouteConfiguration, prefix: &str, out: &mut Refs) {
    out.add(
        ROUTE_CONFIGURATION,
        &scope.route_configuration_name,
        prefix,
        "route_configuration_name",
    );
    if let Some(route) = &scope.route_configuration {
        route_configuration_refs(route, &within(prefix, "route_configuration"), out);
    }
}

fn route_configuration_refs(route: &RouteConfiguration, prefix: &str, out: &mut Refs) {
    mirror_refs(&route.request_mirror_policies, prefix, out);
    for (i, host) in route.virtual_hosts.iter().enumerate() {
        virtual_host_refs(
            host,
            &within(prefix, format_args!("virtual_hosts[{i}]")),
            out,
        );
    }
}

fn virtual_host_refs(host: &VirtualHost, prefix: &str, out: &mut Refs) {
    mirror_refs(&host.request_mirror_policies, prefix, out);
    for (i, route) in host.routes.iter().enumerate() {
        let Some(Action::Route(action)) = &route.action else {
            continue;
        };
        let prefix = within(prefix, format_args!("routes[{i}].route"));
        match &action.cluster_specifier {
            Some(ClusterSpecifier::Cluster(name)) => out.add(CLUSTER, name, &prefix, "cluster"),
            Some(ClusterSpecifier::WeightedClusters(weighted)) => {
                for (j, c) in weighted.clusters.iter().enumerate() {
                    out.add(
                        CLUSTER,
                        &c.name,
                        &prefix,
                        &format!("weighted_clusters.clusters[{j}].name"),
                    );
                }
            }
            _ => {}
        }
        mirror_refs(&action.request_mirror_policies, &prefix, out);
    }
}

fn mirror_refs(policies: &[RequestMirrorPolicy], prefix: &str, out: &mut Refs) {
    for (i, policy) in policies.iter().enumerate() {
        out.add(
            CLUSTER,
            &policy.cluster,
            prefix,
            &format!("request_mirror_policies[{i}].cluster"),
        );
    }
}

fn cluster_refs(cluster: &Cluster, out: &mut Refs) {
    let eds = matches!(
        cluster.cluster_discovery_type,
        Some(ClusterDiscoveryType::Type(t)) if t == DiscoveryType::Eds as i32
    );
    // Without an `eds_config` there is nowhere to fetch endpoints from (Envoy refuses such a
    // cluster): no reference.
    let config = cluster
        .eds_cluster_config
        .as_ref()
        .filter(|c| eds && c.eds_config.is_some() && from_server(c.eds_config.as_ref()));
    if let Some(config) = config {
        if config.service_name.is_empty() {
            out.add(CLUSTER_LOAD_ASSIGNMENT, &cluster.name, "", "name");
        } else {
            out.add(
                CLUSTER_LOAD_ASSIGNMENT,
                &config.service_name,
                "",
                "eds_cluster_config.service_name",
            );
        }
    }
    if let Some(socket) = &cluster.transport_socket {
        transport_socket_refs(socket, "transport_socket.", out);
    }
    for (i, m) in cluster.transport_socket_matches.iter().enumerate() {
        if let Some(socket) = &m.transport_socket {
            transport_socket_refs(
                socket,
                &format!("transport_socket_matches[{i}].transport_socket."),
                out,
            );
        }
    }
}

/// A transport socket that may be TLS (downstream or upstream) with SDS secrets.
fn transport_socket_refs(socket: &TransportSocket, prefix: &str, out: &mut Refs) {
    let Some(transport_socket::ConfigType::TypedConfig(any)) = &socket.config_type else {
        return;
    };
    let prefix = within(prefix, "typed_config");
    if holds(any, DOWNSTREAM_TLS_CONTEXT) {
        let Ok(tls) = DownstreamTlsContext::decode(any.value.as_slice()) else {
            return;
        };
        if let Some(common) = &tls.common_tls_context {
            common_tls_refs(common, &within(&prefix, "common_tls_context"), out);
        }
        if let Some(SessionTicketKeysType::SessionTicketKeysSdsSecretConfig(sds)) =
            &tls.session_ticket_keys_type
        {
            sds_refs(sds, &prefix, "session_ticket_keys_sds_secret_config", out);
        }
    } else if holds(any, UPSTREAM_TLS_CONTEXT) {
        let Ok(tls) = UpstreamTlsContext::decode(any.value.as_slice()) else {
            return;
        };
        if let Some(common) = &tls.common_tls_context {
            common_tls_refs(common, &within(&prefix, "common_tls_context"), out);
        }
    }
}

fn common_tls_refs(common: &CommonTlsContext, prefix: &str, out: &mut Refs) {
    for (i, sds) in common.tls_certificate_sds_secret_configs.iter().enumerate() {
        sds_refs(
            sds,
            prefix,
            &format!("tls_certificate_sds_secret_configs[{i}]"),
            out,
        );
    }
    match &common.validation_context_type {
        Some(ValidationContextType::ValidationContextSdsSecretConfig(sds)) => {
            sds_refs(sds, prefix, "validation_context_sds_secret_config", out);
        }
        Some(ValidationContextType::CombinedValidationContext(combined)) => {
            if let Some(sds) = &combined.validation_context_sds_secret_config {
                sds_refs(
                    sds,
                    prefix,
                    "combined_validation_context.validation_context_sds_secret_config",
                    out,
                );
            }
        }
        _ => {}
    }
}

/// An SDS secret config: a reference when the secret comes from an xDS server (with no
/// `sds_config`, Envoy uses a static secret of its bootstrap).
fn sds_refs(sds: &SdsSecretConfig, prefix: &str, field: &str, out: &mut Refs) {
    if sds.sds_config.is_some() && from_server(sds.sds_config.as_ref()) {
        out.add(SECRET, &sds.name, prefix, &format!("{field}.name"));
    }
}

/// What the store does when an update leaves a reference to a resource that does not exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ReferenceMode {
    /// Reject the update whole ([`StoreError::DanglingReferences`](super::StoreError)); the
    /// last good state stays served. The default: Envoy accepts a route to a missing cluster and
    /// answers every request on it with 503, and a listener whose route configuration never
    /// comes stays warming; refusing the change keeps what works working.
    #[default]
    Strict,
    /// Apply the update, and list the dangling references in
    /// [`UpdateSummary::dangling`](super::UpdateSummary) for the caller to log.
    Warn,
    /// No check.
    Off,
}

/// How the store checks references at commit: the mode, and the names clients get from
/// elsewhere than this store (Envoy's bootstrap: static clusters such as the xDS cluster itself,
/// static secrets, ...), which are never dangling.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReferencePolicy {
    /// How dangling references are treated.
    pub mode: ReferenceMode,
    /// Type URL → names.
    external: HashMap<Box<str>, HashSet<Box<str>>>,
}

impl ReferencePolicy {
    /// A policy in `mode`, with no external resources.
    pub fn new(mode: ReferenceMode) -> ReferencePolicy {
        ReferencePolicy {
            mode,
            external: HashMap::new(),
        }
    }

    /// Strict: an update with a dangling reference is refused (the default).
    pub fn strict() -> ReferencePolicy {
        ReferencePolicy::new(ReferenceMode::Strict)
    }

    /// Warn: applied, and the dangling references reported.
    pub fn warn() -> ReferencePolicy {
        ReferencePolicy::new(ReferenceMode::Warn)
    }

    /// Off: references are not checked.
    pub fn off() -> ReferencePolicy {
        ReferencePolicy::new(ReferenceMode::Off)
    }

    /// Declares the resource `name` of `type_url` (e.g. [`crate::types::CLUSTER`]) external: the
    /// clients get it elsewhere, a reference to it is fine.
    pub fn with_external(mut self, type_url: &str, name: &str) -> ReferencePolicy {
        self.external
            .entry(type_url.into())
            .or_default()
            .insert(name.into());
        self
    }

    /// Whether the resource `name` of `type_url` was declared external.
    pub fn is_external(&self, type_url: &str, name: &str) -> bool {
        self.external
            .get(type_url)
            .is_some_and(|names| names.contains(name))
    }

    /// The external names, as (type URL, name).
    pub fn external(&self) -> impl Iterator<Item = (&str, &str)> {
        self.external
            .iter()
            .flat_map(|(t, names)| names.iter().map(move |n| (&**t, &**n)))
    }
}

/// A reference to a resource that does not exist: both ends.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Dangling {
    /// The referring resource: its type URL, name, origin and, for a variant, constraints.
    pub type_url: Arc<str>,
    /// Its name.
    pub name: Arc<str>,
    /// Where it came from, when known.
    pub origin: Option<Arc<str>>,
    /// A variant's constraints.
    pub constraints: Option<Arc<Constraints>>,
    /// What it refers to, from which field.
    pub reference: Reference,
    /// The existing name of the referenced type nearest to the missing one, when close enough
    /// to be a typo: `backend` for `backnd`.
    pub suggestion: Option<Arc<str>>,
}

/// The message name of a type URL: `Listener` for `type.googleapis.com/envoy...v3.Listener`.
fn short_type(type_url: &str) -> &str {
    type_url.rsplit(['.', '/']).next().unwrap_or(type_url)
}

impl fmt::Display for Dangling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(origin) = &self.origin {
            write!(f, "{origin}: ")?;
        }
        write!(f, "{} {:?}", short_type(&self.type_url), &*self.name)?;
        if let (None, Some(c)) = (&self.origin, &self.constraints) {
            write!(f, " (the variant for {c})")?;
        }
        if self.reference.collection {
            let type_name = self
                .reference
                .type_url
                .strip_prefix(crate::types::TYPE_URL_PREFIX)
                .unwrap_or(self.reference.type_url);
            return write!(
                f,
                " field {} is {:?}, which is not a glob collection \
                 (xdstp://AUTHORITY/{type_name}/PATH/*): {}",
                self.reference.field,
                &*self.reference.name,
                collection_fault(&self.reference).unwrap_or_default()
            );
        }
        write!(
            f,
            " field {} refers to {} {:?}, which does not exist",
            self.reference.field,
            short_type(self.reference.type_url),
            &*self.reference.name
        )?;
        if let Some(name) = &self.suggestion {
            write!(f, " (did you mean {name:?}?)")?;
        }
        Ok(())
    }
}

/// The name of `names` nearest to `missing`, within a third of its length (at least one edit, at
/// most three; a transposition counts as one), as `did you mean` suggests an unknown field.
pub fn nearest<'a>(missing: &str, names: impl Iterator<Item = &'a Arc<str>>) -> Option<Arc<str>> {
    let length = missing.chars().count();
    let limit = (length / 3).clamp(1, 3);
    names
        // A length further off than the limit is further off in edits too.
        .filter(|name| name.chars().count().abs_diff(length) <= limit)
        .map(|name| (strsim::osa_distance(missing, name), name))
        .filter(|(distance, _)| *distance <= limit)
        .min()
        .map(|(_, name)| name.clone())
}

/// What is wrong with a collection reference: `None` when it is a well-formed glob collection of
/// its type (with members or none).
fn collection_fault(reference: &Reference) -> Option<String> {
    if reference.name.is_empty() {
        return Some("it is empty".into());
    }
    match crate::xdstp::XdstpName::parse(&reference.name) {
        Err(e) => Some(e.to_string()),
        Ok(name) => match name.check_type(reference.type_url) {
            Err(e) => Some(e.to_string()),
            Ok(()) if !name.is_glob() => Some("its last path segment is not *".into()),
            Ok(()) => None,
        },
    }
}

/// How many dangling references an error message lists; the rest are counted.
pub const MAX_LISTED: usize = 20;

/// `N reference(s) to ... : first; second; ...; and M more`.
pub(crate) fn describe(dangling: &[Dangling]) -> String {
    let mut out = if dangling.len() == 1 {
        "a reference to a resource that does not exist: ".to_owned()
    } else {
        format!(
            "{} references to resources that do not exist: ",
            dangling.len()
        )
    };
    for (i, d) in dangling.iter().take(MAX_LISTED).enumerate() {
        if i > 0 {
            out.push_str("; ");
        }
        let _ = write!(out, "{d}");
    }
    if dangling.len() > MAX_LISTED {
        let _ = write!(out, "; and {} more", dangling.len() - MAX_LISTED);
    }
    out
}

/// The references of every resource of `types` that name no resource of `types` (by name or
/// alias, any variant: see below) and are not external; none when the mode is `Off`. Types in
/// type URL order, resources in name order, references in field order.
///
/// Variants are approximated: a reference resolves when the name has any variant, whereas a
/// client sees only the variants that match its parameters. A listener variant for `env=prod`
/// naming a route configuration that only has an `env=staging` variant passes.
///
/// Cost: one lookup per reference of the whole state (a tree lookup in the names, then a hash
/// lookup in the aliases).
pub(crate) fn dangling(
    types: &FastMap<Arc<str>, Arc<TypeSnapshot>>,
    policy: &ReferencePolicy,
) -> Vec<Dangling> {
    if policy.mode == ReferenceMode::Off {
        return Vec::new();
    }
    let mut urls: Vec<&Arc<str>> = types.keys().collect();
    urls.sort();
    let all = urls
        .into_iter()
        .flat_map(|url| types[url].iter().map(move |r| (url, r)));
    dangling_of(types, all, policy)
}

/// The references of `resources` (each with its type URL, in the order given) to resources
/// that do not exist in `types`.
pub(crate) fn dangling_of<'a>(
    types: &FastMap<Arc<str>, Arc<TypeSnapshot>>,
    resources: impl Iterator<Item = (&'a Arc<str>, &'a Arc<super::Resource>)>,
    policy: &ReferencePolicy,
) -> Vec<Dangling> {
    if policy.mode == ReferenceMode::Off {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (url, resource) in resources {
        for reference in resource.references() {
            let exists = if reference.collection {
                collection_fault(reference).is_none()
            } else {
                types
                    .get(reference.type_url)
                    .is_some_and(|t| t.intern(&reference.name).is_some())
            };
            if exists || policy.is_external(reference.type_url, &reference.name) {
                continue;
            }
            out.push(Dangling {
                type_url: url.clone(),
                name: resource.name().clone(),
                origin: resource.origin().cloned(),
                constraints: resource.constraints().cloned(),
                reference: reference.clone(),
                suggestion: None,
            });
        }
    }
    // Only the listed ones are said: each costs a walk of its type's names.
    for d in out
        .iter_mut()
        .take(MAX_LISTED)
        .filter(|d| !d.reference.collection)
    {
        if let Some(t) = types.get(d.reference.type_url) {
            d.suggestion = nearest(&d.reference.name, t.iter().map(|r| r.name()));
        }
    }
    out
}

#[cfg(test)]
mod tests;
