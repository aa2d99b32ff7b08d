//! One test per edge kind: messages built with the Envoy protos, encoded, and their references
//! read back with the fields that hold them.

use super::*;
use crate::store::Resource;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{
    EdsClusterConfig, TransportSocketMatch,
};
use envoy_types::pb::envoy::config::core::v3::{AggregatedConfigSource, PathConfigSource};
use envoy_types::pb::envoy::config::listener::v3::{ApiListener, Filter};
use envoy_types::pb::envoy::config::route::v3::route_action::RequestMirrorPolicy;
use envoy_types::pb::envoy::config::route::v3::weighted_cluster::ClusterWeight;
use envoy_types::pb::envoy::config::route::v3::{Route, RouteAction, WeightedCluster};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    Rds, ScopedRouteConfigurationsList, ScopedRoutes,
};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::common_tls_context::CombinedCertificateValidationContext;

/// (type, name, field) of each reference, for comparisons.
fn refs(type_url: &str, value: Vec<u8>) -> Vec<(&'static str, String, String)> {
    references(type_url, &value)
        .into_iter()
        .map(|r| (r.type_url, r.name.to_string(), r.field.to_string()))
        .collect()
}

fn r(type_url: &'static str, name: &str, field: &str) -> (&'static str, String, String) {
    (type_url, name.to_owned(), field.to_owned())
}

fn any<M: Message + prost::Name>(message: &M) -> Any {
    Any {
        type_url: M::type_url(),
        value: message.encode_to_vec(),
    }
}

fn ads() -> Option<ConfigSource> {
    Some(ConfigSource {
        config_source_specifier: Some(ConfigSourceSpecifier::Ads(AggregatedConfigSource {})),
        ..Default::default()
    })
}

fn file_source() -> Option<ConfigSource> {
    Some(ConfigSource {
        config_source_specifier: Some(ConfigSourceSpecifier::PathConfigSource(PathConfigSource {
            path: "/etc/envoy/routes.yaml".into(),
            ..Default::default()
        })),
        ..Default::default()
    })
}

fn hcm(route_specifier: RouteSpecifier) -> HttpConnectionManager {
    HttpConnectionManager {
        stat_prefix: "http".into(),
        route_specifier: Some(route_specifier),
        ..Default::default()
    }
}

fn rds(name: &str) -> RouteSpecifier {
    RouteSpecifier::Rds(Rds {
        config_source: ads(),
        route_config_name: name.into(),
    })
}

fn network_filter(config: Any) -> Filter {
    Filter {
        name: "f".into(),
        config_type: Some(filter::ConfigType::TypedConfig(config)),
    }
}

fn chain(filters: Vec<Filter>) -> FilterChain {
    FilterChain {
        filters,
        ..Default::default()
    }
}

fn route_to(action: ClusterSpecifier, mirrors: &[&str]) -> Route {
    Route {
        action: Some(Action::Route(RouteAction {
            cluster_specifier: Some(action),
            request_mirror_policies: mirrors.iter().map(|m| mirror(m)).collect(),
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn mirror(cluster: &str) -> RequestMirrorPolicy {
    RequestMirrorPolicy {
        cluster: cluster.into(),
        ..Default::default()
    }
}

fn sds(name: &str) -> SdsSecretConfig {
    SdsSecretConfig {
        name: name.into(),
        sds_config: ads(),
    }
}

fn tls_socket(config: Any) -> TransportSocket {
    TransportSocket {
        name: "envoy.transport_sockets.tls".into(),
        config_type: Some(transport_socket::ConfigType::TypedConfig(config)),
    }
}

#[test]
fn listener_refers_to_the_rds_route_configuration_of_each_http_connection_manager() {
    // Another network filter first: only the HTTP connection manager is read.
    let other = Any {
        type_url: "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy"
            .into(),
        value: hcm(rds("not-an-hcm")).encode_to_vec(),
    };
    let listener = Listener {
        name: "l".into(),
        filter_chains: vec![
            chain(vec![
                network_filter(other),
                network_filter(any(&hcm(rds("r1")))),
            ]),
            chain(vec![network_filter(any(&hcm(rds("r2"))))]),
        ],
        default_filter_chain: Some(chain(vec![network_filter(any(&hcm(rds("r3"))))])),
        ..Default::default()
    };
    assert_eq!(
        refs(LISTENER, listener.encode_to_vec()),
        [
            r(
                ROUTE_CONFIGURATION,
                "r1",
                "filter_chains[0].filters[1].typed_config.rds.route_config_name"
            ),
            r(
                ROUTE_CONFIGURATION,
                "r2",
                "filter_chains[1].filters[0].typed_config.rds.route_config_name"
            ),
            r(
                ROUTE_CONFIGURATION,
                "r3",
                "default_filter_chain.filters[0].typed_config.rds.route_config_name"
            ),
        ]
    );
}

#[test]
fn api_listener_of_proxyless_grpc_refers_to_its_rds_route_configuration() {
    let listener = Listener {
        name: "svc".into(),
        api_listener: Some(ApiListener {
            api_listener: Some(any(&hcm(rds("svc-route")))),
        }),
        ..Default::default()
    };
    assert_eq!(
        refs(LISTENER, listener.encode_to_vec()),
        [r(
            ROUTE_CONFIGURATION,
            "svc-route",
            "api_listener.api_listener.rds.route_config_name"
        )]
    );
}

#[test]
fn listener_with_an_inline_route_config_refers_to_its_clusters() {
    let route = RouteConfiguration {
        name: "inline".into(),
        virtual_hosts: vec![VirtualHost {
            name: "vh".into(),
            domains: vec!["*".into()],
            routes: vec![route_to(ClusterSpecifier::Cluster("c1".into()), &[])],
            ..Default::default()
        }],
        ..Default::default()
    };
    let listener = Listener {
        name: "l".into(),
        filter_chains: vec![chain(vec![network_filter(any(&hcm(
            RouteSpecifier::RouteConfig(route),
        )))])],
        ..Default::default()
    };
    assert_eq!(
        refs(LISTENER, listener.encode_to_vec()),
        [r(
            CLUSTER,
            "c1",
            "filter_chains[0].filters[0].typed_config.route_config.virtual_hosts[0].routes[0].route.cluster"
        )]
    );
}

#[test]
fn listener_with_inline_scoped_routes_refers_to_their_route_configurations() {
    let scoped = |source: Option<ConfigSource>| {
        RouteSpecifier::ScopedRoutes(ScopedRoutes {
            name: "scopes".into(),
            rds_config_source: source,
            config_specifier: Some(ConfigSpecifier::ScopedRouteConfigurationsList(
                ScopedRouteConfigurationsList {
                    scoped_route_configurations: vec![ScopedRouteConfiguration {
                        name: "s1".into(),
                        route_configuration_name: "r1".into(),
                        ..Default::default()
                    }],
                },
            )),
            ..Default::default()
        })
    };
    let listener = |source| Listener {
        name: "l".into(),
        filter_chains: vec![chain(vec![network_filter(any(&hcm(scoped(source))))])],
        ..Default::default()
    };
    assert_eq!(
        refs(LISTENER, listener(ads()).encode_to_vec()),
        [r(
            ROUTE_CONFIGURATION,
            "r1",
            "filter_chains[0].filters[0].typed_config.scoped_routes.scoped_route_configurations_list.scoped_route_configurations[0].route_configuration_name"
        )]
    );
    assert!(
        refs(LISTENER, listener(file_source()).encode_to_vec()).is_empty(),
        "route configurations read from a file are not xdsd's"
    );
}

#[test]
fn rds_from_a_file_is_not_a_reference() {
    let listener = Listener {
        name: "l".into(),
        filter_chains: vec![chain(vec![network_filter(any(&hcm(RouteSpecifier::Rds(
            Rds {
                config_source: file_source(),
                route_config_name: "r1".into(),
            },
        ))))])],
        ..Default::default()
    };
    assert!(refs(LISTENER, listener.encode_to_vec()).is_empty());
}

#[test]
fn scoped_route_configuration_refers_to_its_route_configuration() {
    let scope = ScopedRouteConfiguration {
        name: "s".into(),
        route_configuration_name: "r1".into(),
        ..Default::default()
    };
    assert_eq!(
        refs(SCOPED_ROUTE_CONFIGURATION, scope.encode_to_vec()),
        [r(ROUTE_CONFIGURATION, "r1", "route_configuration_name")]
    );
}

#[test]
fn route_configuration_refers_to_route_weighted_and_mirror_clusters_once_each() {
    let weighted = ClusterSpecifier::WeightedClusters(WeightedCluster {
        clusters: vec![
            ClusterWeight {
                name: "w1".into(),
                ..Default::default()
            },
            ClusterWeight {
                name: "w2".into(),
                ..Default::default()
            },
        ],
        ..Default::default()
    });
    let route = RouteConfiguration {
        name: "rc".into(),
        request_mirror_policies: vec![mirror("m-rc")],
        virtual_hosts: vec![
            VirtualHost {
                name: "a".into(),
                request_mirror_policies: vec![mirror("m-vh")],
                routes: vec![
                    route_to(ClusterSpecifier::Cluster("c1".into()), &["m-route"]),
                    // Chosen per request: nothing to check.
                    route_to(ClusterSpecifier::ClusterHeader("x-cluster".into()), &[]),
                    route_to(ClusterSpecifier::ClusterSpecifierPlugin("p".into()), &[]),
                ],
                ..Default::default()
            },
            VirtualHost {
                name: "b".into(),
                routes: vec![
                    route_to(weighted, &[]),
                    // Named before: reported once, at its first field.
                    route_to(ClusterSpecifier::Cluster("c1".into()), &[]),
                ],
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    assert_eq!(
        refs(ROUTE_CONFIGURATION, route.encode_to_vec()),
        [
            r(CLUSTER, "m-rc", "request_mirror_policies[0].cluster"),
            r(
                CLUSTER,
                "m-vh",
                "virtual_hosts[0].request_mirror_policies[0].cluster"
            ),
            r(CLUSTER, "c1", "virtual_hosts[0].routes[0].route.cluster"),
            r(
                CLUSTER,
                "m-route",
                "virtual_hosts[0].routes[0].route.request_mirror_policies[0].cluster"
            ),
            r(
                CLUSTER,
                "w1",
                "virtual_hosts[1].routes[0].route.weighted_clusters.clusters[0].name"
            ),
            r(
                CLUSTER,
                "w2",
                "virtual_hosts[1].routes[0].route.weighted_clusters.clusters[1].name"
            ),
        ]
    );
}

#[test]
fn vhds_virtual_host_refers_to_its_clusters() {
    let host = VirtualHost {
        name: "rc/web".into(),
        domains: vec!["web.example".into()],
        routes: vec![route_to(ClusterSpecifier::Cluster("web".into()), &[])],
        ..Default::default()
    };
    assert_eq!(
        refs(VIRTUAL_HOST, host.encode_to_vec()),
        [r(CLUSTER, "web", "routes[0].route.cluster")]
    );
}

#[test]
fn eds_cluster_refers_to_its_cluster_load_assignment_by_service_name_else_its_name() {
    let cluster = |kind: DiscoveryType, service: &str, source: Option<ConfigSource>| {
        Cluster {
            name: "c".into(),
            cluster_discovery_type: Some(ClusterDiscoveryType::Type(kind as i32)),
            eds_cluster_config: Some(EdsClusterConfig {
                service_name: service.into(),
                eds_config: source,
            }),
            ..Default::default()
        }
        .encode_to_vec()
    };
    assert_eq!(
        refs(CLUSTER, cluster(DiscoveryType::Eds, "", ads())),
        [r(CLUSTER_LOAD_ASSIGNMENT, "c", "name")]
    );
    assert_eq!(
        refs(CLUSTER, cluster(DiscoveryType::Eds, "svc", ads())),
        [r(
            CLUSTER_LOAD_ASSIGNMENT,
            "svc",
            "eds_cluster_config.service_name"
        )]
    );
    assert!(
        refs(CLUSTER, cluster(DiscoveryType::Static, "", ads())).is_empty(),
        "only EDS clusters fetch endpoints"
    );
    assert!(
        refs(CLUSTER, cluster(DiscoveryType::Eds, "svc", file_source())).is_empty(),
        "endpoints read from a file are not xdsd's"
    );
    assert!(
        refs(CLUSTER, cluster(DiscoveryType::Eds, "svc", None)).is_empty(),
        "no eds_config: nowhere to fetch endpoints from (Envoy refuses the cluster)"
    );
}

#[test]
fn listener_tls_refers_to_its_sds_secrets() {
    let tls = DownstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            tls_certificate_sds_secret_configs: vec![
                sds("cert"),
                // No sds_config: a static secret of Envoy's bootstrap, not served by xdsd.
                SdsSecretConfig {
                    name: "static-cert".into(),
                    sds_config: None,
                },
            ],
            validation_context_type: Some(ValidationContextType::ValidationContextSdsSecretConfig(
                sds("ca"),
            )),
            ..Default::default()
        }),
        session_ticket_keys_type: Some(SessionTicketKeysType::SessionTicketKeysSdsSecretConfig(
            sds("tickets"),
        )),
        ..Default::default()
    };
    let listener = Listener {
        name: "l".into(),
        filter_chains: vec![FilterChain {
            transport_socket: Some(tls_socket(any(&tls))),
            ..Default::default()
        }],
        ..Default::default()
    };
    let prefix = "filter_chains[0].transport_socket.typed_config.";
    assert_eq!(
        refs(LISTENER, listener.encode_to_vec()),
        [
            r(
                SECRET,
                "cert",
                &format!("{prefix}common_tls_context.tls_certificate_sds_secret_configs[0].name")
            ),
            r(
                SECRET,
                "ca",
                &format!("{prefix}common_tls_context.validation_context_sds_secret_config.name")
            ),
            r(
                SECRET,
                "tickets",
                &format!("{prefix}session_ticket_keys_sds_secret_config.name")
            ),
        ]
    );
}

#[test]
fn cluster_tls_refers_to_its_sds_secrets_in_transport_socket_and_matches() {
    let upstream = |validation: &str| UpstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            validation_context_type: Some(ValidationContextType::CombinedValidationContext(
                CombinedCertificateValidationContext {
                    validation_context_sds_secret_config: Some(sds(validation)),
                    ..Default::default()
                },
            )),
            ..Default::default()
        }),
        ..Default::default()
    };
    let cluster = Cluster {
        name: "c".into(),
        transport_socket: Some(tls_socket(any(&upstream("ca")))),
        transport_socket_matches: vec![TransportSocketMatch {
            name: "mtls".into(),
            transport_socket: Some(tls_socket(any(&upstream("mesh-ca")))),
            ..Default::default()
        }],
        ..Default::default()
    };
    let field =
        "common_tls_context.combined_validation_context.validation_context_sds_secret_config.name";
    assert_eq!(
        refs(CLUSTER, cluster.encode_to_vec()),
        [
            r(
                SECRET,
                "ca",
                &format!("transport_socket.typed_config.{field}")
            ),
            r(
                SECRET,
                "mesh-ca",
                &format!("transport_socket_matches[0].transport_socket.typed_config.{field}")
            ),
        ]
    );
}

#[test]
fn what_does_not_decode_contributes_nothing() {
    assert!(references(LISTENER, b"\xff\xff\xff").is_empty());
    assert!(references(CLUSTER, b"\x0a\x05ab").is_empty());
    // A filter whose typed config claims to be an HCM but holds garbage.
    let listener = Listener {
        name: "l".into(),
        filter_chains: vec![chain(vec![network_filter(Any {
            type_url: format!("type.googleapis.com/{HTTP_CONNECTION_MANAGER}"),
            value: b"\xff\xff".to_vec(),
        })])],
        ..Default::default()
    };
    assert!(refs(LISTENER, listener.encode_to_vec()).is_empty());
    // Types without edges.
    assert!(references(SECRET, &sds("x").encode_to_vec()).is_empty());
}

#[test]
fn a_resource_knows_its_references_from_ingest() {
    let route = RouteConfiguration {
        name: "rc".into(),
        virtual_hosts: vec![VirtualHost {
            name: "vh".into(),
            routes: vec![route_to(ClusterSpecifier::Cluster("c".into()), &[])],
            ..Default::default()
        }],
        ..Default::default()
    };
    let resource = Resource::new(ROUTE_CONFIGURATION, "rc", route.encode_to_vec().into());
    assert_eq!(resource.references().len(), 1);
    let reference = &resource.references()[0];
    assert_eq!(
        (reference.type_url, &*reference.name, &*reference.field),
        (CLUSTER, "c", "virtual_hosts[0].routes[0].route.cluster")
    );
}
