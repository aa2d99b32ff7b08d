//! Reference checks at commit: each edge kind dangling in strict mode (the error names both
//! ends), warn and off modes, external names, removals, variants.

use super::*;
use crate::types::{
    CLUSTER_LOAD_ASSIGNMENT, ROUTE_CONFIGURATION, SCOPED_ROUTE_CONFIGURATION, SECRET,
};
use envoy_types::pb::envoy::config::cluster::v3::cluster::{
    ClusterDiscoveryType, DiscoveryType, EdsClusterConfig,
};
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::config_source::ConfigSourceSpecifier;
use envoy_types::pb::envoy::config::core::v3::{
    transport_socket, AggregatedConfigSource, ConfigSource, TransportSocket,
};
use envoy_types::pb::envoy::config::listener::v3::{filter, Filter, FilterChain, Listener};
use envoy_types::pb::envoy::config::route::v3::route::Action;
use envoy_types::pb::envoy::config::route::v3::route_action::ClusterSpecifier;
use envoy_types::pb::envoy::config::route::v3::{
    Route, RouteAction, RouteConfiguration, ScopedRouteConfiguration, Vhds, VirtualHost,
};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager::RouteSpecifier, HttpConnectionManager, Rds,
};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    CommonTlsContext, DownstreamTlsContext, SdsSecretConfig, UpstreamTlsContext,
};
use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::{
    single_constraint::ConstraintType, SingleConstraint, Type,
};
use envoy_types::pb::envoy::service::discovery::v3::DynamicParameterConstraints;
use envoy_types::pb::google::protobuf::Any;
use prost::Message;

// ---------------------------------------------------------------------------------------------
// Resources, as a directory would give them (with an origin).

fn from(file: &str, type_url: &str, name: &str, message: impl Message) -> ResourceInput {
    ResourceInput::new(type_url, name, message.encode_to_vec().into())
        .with_origin(format!("{file} (resource #1)"))
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

/// Listener `name` whose HTTP connection manager takes route configuration `route` from RDS.
fn listener(name: &str, route: &str) -> ResourceInput {
    let hcm = HttpConnectionManager {
        stat_prefix: "http".into(),
        route_specifier: Some(RouteSpecifier::Rds(Rds {
            config_source: ads(),
            route_config_name: route.into(),
        })),
        ..Default::default()
    };
    let l = Listener {
        name: name.into(),
        filter_chains: vec![FilterChain {
            filters: vec![Filter {
                name: "envoy.filters.network.http_connection_manager".into(),
                config_type: Some(filter::ConfigType::TypedConfig(any(&hcm))),
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    from("listeners.yaml", LISTENER, name, l)
}

fn virtual_host(name: &str, cluster: &str) -> VirtualHost {
    VirtualHost {
        name: name.into(),
        domains: vec![format!("{name}.example")],
        routes: vec![Route {
            action: Some(Action::Route(RouteAction {
                cluster_specifier: Some(ClusterSpecifier::Cluster(cluster.into())),
                ..Default::default()
            })),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// Route configuration `name` routing everything to `cluster`.
fn route(name: &str, cluster: &str) -> ResourceInput {
    let rc = RouteConfiguration {
        name: name.into(),
        virtual_hosts: vec![virtual_host("web", cluster)],
        ..Default::default()
    };
    from("routes.yaml", ROUTE_CONFIGURATION, name, rc)
}

/// A VHDS route configuration: its virtual hosts are served as VirtualHost resources.
fn vhds_route(name: &str, cluster: &str) -> ResourceInput {
    let rc = RouteConfiguration {
        name: name.into(),
        virtual_hosts: vec![virtual_host("web", cluster)],
        vhds: Some(Vhds {
            config_source: ads(),
        }),
        ..Default::default()
    };
    from("routes.yaml", ROUTE_CONFIGURATION, name, rc)
}

fn scoped_route(name: &str, route: &str) -> ResourceInput {
    let s = ScopedRouteConfiguration {
        name: name.into(),
        route_configuration_name: route.into(),
        ..Default::default()
    };
    from("scopes.yaml", SCOPED_ROUTE_CONFIGURATION, name, s)
}

fn static_cluster(name: &str) -> ResourceInput {
    let c = Cluster {
        name: name.into(),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Static as i32)),
        ..Default::default()
    };
    from("clusters.yaml", CLUSTER, name, c)
}

fn eds_cluster(name: &str, service: &str) -> ResourceInput {
    let c = Cluster {
        name: name.into(),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32)),
        eds_cluster_config: Some(EdsClusterConfig {
            eds_config: ads(),
            service_name: service.into(),
        }),
        ..Default::default()
    };
    from("clusters.yaml", CLUSTER, name, c)
}

fn endpoints(name: &str) -> ResourceInput {
    let cla = envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment {
        cluster_name: name.into(),
        ..Default::default()
    };
    from("endpoints.yaml", CLUSTER_LOAD_ASSIGNMENT, name, cla)
}

fn secret(name: &str) -> ResourceInput {
    let s = envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::Secret {
        name: name.into(),
        ..Default::default()
    };
    from("secrets.yaml", SECRET, name, s)
}

fn tls_certificate(name: &str) -> CommonTlsContext {
    CommonTlsContext {
        tls_certificate_sds_secret_configs: vec![SdsSecretConfig {
            name: name.into(),
            sds_config: ads(),
        }],
        ..Default::default()
    }
}

fn tls_socket(config: Any) -> Option<TransportSocket> {
    Some(TransportSocket {
        name: "envoy.transport_sockets.tls".into(),
        config_type: Some(transport_socket::ConfigType::TypedConfig(config)),
    })
}

/// A TCP listener terminating TLS with the certificate of SDS secret `cert`.
fn tls_listener(name: &str, cert: &str) -> ResourceInput {
    let tls = DownstreamTlsContext {
        common_tls_context: Some(tls_certificate(cert)),
        ..Default::default()
    };
    let l = Listener {
        name: name.into(),
        filter_chains: vec![FilterChain {
            transport_socket: tls_socket(any(&tls)),
            ..Default::default()
        }],
        ..Default::default()
    };
    from("listeners.yaml", LISTENER, name, l)
}

/// A static cluster talking TLS with the client certificate of SDS secret `cert`.
fn tls_cluster(name: &str, cert: &str) -> ResourceInput {
    let tls = UpstreamTlsContext {
        common_tls_context: Some(tls_certificate(cert)),
        ..Default::default()
    };
    let c = Cluster {
        name: name.into(),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Static as i32)),
        transport_socket: tls_socket(any(&tls)),
        ..Default::default()
    };
    from("clusters.yaml", CLUSTER, name, c)
}

fn env(value: &str) -> Constraints {
    Constraints::new(DynamicParameterConstraints {
        r#type: Some(Type::Constraint(SingleConstraint {
            key: "env".into(),
            constraint_type: Some(ConstraintType::Value(value.into())),
        })),
    })
    .unwrap()
}

// ---------------------------------------------------------------------------------------------
// Assertions

/// `inputs` are rejected by a strict store with exactly this message, and nothing is applied;
/// a store in warn mode applies them and reports the same dangling reference.
fn assert_rejected(inputs: Vec<ResourceInput>, message: &str) {
    let warn = Store::with_reference_policy(ReferencePolicy::warn());
    let summary = warn.replace_all(inputs.clone()).unwrap();
    let [d] = &summary.dangling[..] else {
        panic!("warn mode reports one reference: {:?}", summary.dangling);
    };
    assert_eq!(
        format!("a reference to a resource that does not exist: {d}"),
        message,
        "warn mode names the same reference"
    );
    assert!(
        summary.total >= inputs.len() && summary.changed == summary.total,
        "warn mode applies the whole update: {summary:?}"
    );

    let store = Store::new();
    store.replace_all([static_cluster("kept")]).unwrap();
    let before = store.snapshot();
    let err = store.replace_all(inputs.clone()).unwrap_err();
    assert!(
        matches!(err, StoreError::DanglingReferences(ref d) if d.len() == 1),
        "{err:?}"
    );
    assert_eq!(err.to_string(), message);
    let after = store.snapshot();
    assert_eq!(
        after.generation(),
        before.generation(),
        "the last good state stays"
    );
    assert!(after.resource(CLUSTER, "kept").is_some());

    // The same inputs as individual changes (`apply` checks only what they touch).
    let err = store
        .apply(inputs.into_iter().map(Change::Set))
        .unwrap_err();
    assert_eq!(err.to_string(), message, "apply rejects it too");
    assert_eq!(store.snapshot().generation(), before.generation());
}

// ---------------------------------------------------------------------------------------------
// Each edge kind, strict (the default) and warn

#[test]
fn strict_rejects_a_route_to_a_missing_cluster() {
    assert_rejected(
        vec![route("r1", "c9")],
        "a reference to a resource that does not exist: routes.yaml (resource #1): \
         RouteConfiguration \"r1\" field virtual_hosts[0].routes[0].route.cluster refers to \
         Cluster \"c9\", which does not exist",
    );
}

/// A missing name one typo away from an existing one of its type is suggested; one further off
/// is not.
#[test]
fn a_dangling_reference_near_an_existing_name_suggests_it() {
    assert_rejected(
        vec![route("r1", "backnd"), static_cluster("backend")],
        "a reference to a resource that does not exist: routes.yaml (resource #1): \
         RouteConfiguration \"r1\" field virtual_hosts[0].routes[0].route.cluster refers to \
         Cluster \"backnd\", which does not exist (did you mean \"backend\"?)",
    );
    assert_rejected(
        vec![route("r1", "frontend"), static_cluster("backend")],
        "a reference to a resource that does not exist: routes.yaml (resource #1): \
         RouteConfiguration \"r1\" field virtual_hosts[0].routes[0].route.cluster refers to \
         Cluster \"frontend\", which does not exist",
    );
}

#[test]
fn strict_rejects_a_listener_whose_rds_route_configuration_is_missing() {
    assert_rejected(
        vec![listener("l1", "r9")],
        "a reference to a resource that does not exist: listeners.yaml (resource #1): \
         Listener \"l1\" field filter_chains[0].filters[0].typed_config.rds.route_config_name \
         refers to RouteConfiguration \"r9\", which does not exist",
    );
}

#[test]
fn strict_rejects_a_scoped_route_whose_route_configuration_is_missing() {
    assert_rejected(
        vec![scoped_route("s1", "r9")],
        "a reference to a resource that does not exist: scopes.yaml (resource #1): \
         ScopedRouteConfiguration \"s1\" field route_configuration_name refers to \
         RouteConfiguration \"r9\", which does not exist",
    );
}

#[test]
fn strict_rejects_a_vhds_virtual_host_routing_to_a_missing_cluster() {
    assert_rejected(
        vec![vhds_route("r1", "c9")],
        "a reference to a resource that does not exist: routes.yaml (resource #1): \
         VirtualHost \"r1/web\" field routes[0].route.cluster refers to Cluster \"c9\", which \
         does not exist",
    );
}

#[test]
fn strict_rejects_an_eds_cluster_without_its_endpoints() {
    assert_rejected(
        vec![eds_cluster("c1", "")],
        "a reference to a resource that does not exist: clusters.yaml (resource #1): Cluster \
         \"c1\" field name refers to ClusterLoadAssignment \"c1\", which does not exist",
    );
    assert_rejected(
        vec![eds_cluster("c1", "svc"), endpoints("c1")],
        "a reference to a resource that does not exist: clusters.yaml (resource #1): Cluster \
         \"c1\" field eds_cluster_config.service_name refers to ClusterLoadAssignment \"svc\", \
         which does not exist",
    );
}

#[test]
fn strict_rejects_a_listener_whose_sds_certificate_is_missing() {
    assert_rejected(
        vec![tls_listener("l1", "cert")],
        "a reference to a resource that does not exist: listeners.yaml (resource #1): \
         Listener \"l1\" field filter_chains[0].transport_socket.typed_config.common_tls_context\
         .tls_certificate_sds_secret_configs[0].name refers to Secret \"cert\", which does not \
         exist",
    );
}

#[test]
fn strict_rejects_a_cluster_whose_sds_certificate_is_missing() {
    assert_rejected(
        vec![tls_cluster("c1", "client-cert")],
        "a reference to a resource that does not exist: clusters.yaml (resource #1): Cluster \
         \"c1\" field transport_socket.typed_config.common_tls_context\
         .tls_certificate_sds_secret_configs[0].name refers to Secret \"client-cert\", which \
         does not exist",
    );
}

#[test]
fn a_complete_graph_is_accepted_in_one_update_whatever_the_order() {
    let store = Store::new();
    let summary = store
        .replace_all([
            listener("l1", "r1"),
            tls_listener("l2", "cert"),
            route("r1", "c1"),
            vhds_route("r2", "c2"),
            scoped_route("s1", "r1"),
            eds_cluster("c1", ""),
            eds_cluster("c2", "svc"),
            tls_cluster("c3", "cert"),
            endpoints("c1"),
            endpoints("svc"),
            secret("cert"),
        ])
        .unwrap();
    assert!(summary.dangling.is_empty());
    assert_eq!(
        summary.total, 12,
        "11 inputs, one of them split into a virtual host"
    );
}

// ---------------------------------------------------------------------------------------------
// Removals, several at once, modes, external names, variants

#[test]
fn removing_a_cluster_still_routed_to_is_rejected() {
    let store = Store::new();
    store
        .replace_all([route("r1", "c1"), static_cluster("c1")])
        .unwrap();
    let err = store
        .apply([Change::Remove {
            type_url: CLUSTER.into(),
            name: "c1".into(),
        }])
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "a reference to a resource that does not exist: routes.yaml (resource #1): \
         RouteConfiguration \"r1\" field virtual_hosts[0].routes[0].route.cluster refers to \
         Cluster \"c1\", which does not exist"
    );
    assert!(store.snapshot().resource(CLUSTER, "c1").is_some());
    // The same removal by a whole new state.
    assert!(matches!(
        store.replace_all([route("r1", "c1")]),
        Err(StoreError::DanglingReferences(_))
    ));
    // Repointing the route first makes the removal safe.
    store
        .apply([
            Change::Set(route("r1", "c2")),
            Change::Set(static_cluster("c2")),
        ])
        .unwrap();
    store
        .apply([Change::Remove {
            type_url: CLUSTER.into(),
            name: "c1".into(),
        }])
        .unwrap();
}

#[test]
fn every_dangling_reference_is_returned_and_the_message_lists_the_first_twenty() {
    let store = Store::new();
    let routes: Vec<ResourceInput> = (0..25)
        .map(|i| route(&format!("r{i:02}"), &format!("c{i:02}")))
        .collect();
    let err = store.replace_all(routes).unwrap_err();
    let StoreError::DanglingReferences(all) = &err else {
        panic!("{err:?}");
    };
    assert_eq!(all.len(), 25);
    assert_eq!(&*all[0].name, "r00", "in name order");
    assert_eq!(&*all[24].reference.name, "c24");
    let message = err.to_string();
    assert!(
        message.starts_with("25 references to resources that do not exist: routes.yaml"),
        "{message}"
    );
    assert!(message.contains("Cluster \"c19\""), "{message}");
    assert!(!message.contains("Cluster \"c20\""), "{message}");
    assert!(message.ends_with("; and 5 more"), "{message}");
}

#[test]
fn warn_mode_applies_and_reports_the_dangling_references() {
    let store = Store::with_reference_policy(ReferencePolicy::warn());
    let summary = store
        .replace_all([listener("l1", "r1"), route("r1", "c9")])
        .unwrap();
    assert_eq!(summary.changed, 2);
    assert!(store
        .snapshot()
        .resource(ROUTE_CONFIGURATION, "r1")
        .is_some());
    let [d] = &summary.dangling[..] else {
        panic!("{:?}", summary.dangling);
    };
    assert_eq!((&*d.type_url, &*d.name), (ROUTE_CONFIGURATION, "r1"));
    assert_eq!(d.origin.as_deref(), Some("routes.yaml (resource #1)"));
    assert_eq!((d.reference.type_url, &*d.reference.name), (CLUSTER, "c9"));
    assert_eq!(
        d.to_string(),
        "routes.yaml (resource #1): RouteConfiguration \"r1\" field \
         virtual_hosts[0].routes[0].route.cluster refers to Cluster \"c9\", which does not exist"
    );
    // Still dangling at the next change: reported again.
    let summary = store.apply([Change::Set(static_cluster("other"))]).unwrap();
    assert_eq!(summary.dangling.len(), 1);
    // Resolved.
    let summary = store.apply([Change::Set(static_cluster("c9"))]).unwrap();
    assert!(summary.dangling.is_empty());
}

#[test]
fn off_mode_applies_without_checking() {
    let store = Store::with_reference_policy(ReferencePolicy::off());
    let summary = store
        .replace_all([listener("l1", "r9"), eds_cluster("c1", "")])
        .unwrap();
    assert_eq!(summary.changed, 2);
    assert!(summary.dangling.is_empty());
}

#[test]
fn external_names_are_not_dangling() {
    let policy = ReferencePolicy::strict()
        .with_external(CLUSTER, "xds_cluster")
        .with_external(SECRET, "cert");
    assert!(policy.is_external(CLUSTER, "xds_cluster"));
    assert!(!policy.is_external(ROUTE_CONFIGURATION, "xds_cluster"));
    let store = Store::with_reference_policy(policy);
    store
        .replace_all([route("r1", "xds_cluster"), tls_listener("l1", "cert")])
        .unwrap();
    // Only that type and name.
    let err = store
        .replace_all([route("r1", "xds_cluster"), route("r2", "cert")])
        .unwrap_err();
    assert!(err.to_string().contains("Cluster \"cert\""), "{err}");

    let store =
        Store::with_reference_policy(ReferencePolicy::warn().with_external(CLUSTER, "xds_cluster"));
    let summary = store.replace_all([route("r1", "xds_cluster")]).unwrap();
    assert!(
        summary.dangling.is_empty(),
        "not reported in warn mode either"
    );
}

#[test]
fn any_variant_of_the_referenced_name_resolves_a_reference() {
    let store = Store::new();
    // Cluster c1 exists only for env=staging; a route for every client naming it passes (the
    // documented approximation).
    store
        .replace_all([
            static_cluster("c1").with_constraints(Some(env("staging"))),
            route("r1", "c1"),
        ])
        .unwrap();
}

#[test]
fn a_dangling_reference_of_a_variant_names_the_variant() {
    let store = Store::new();
    store.replace_all([static_cluster("c1")]).unwrap();
    let prod = ResourceInput::new(
        ROUTE_CONFIGURATION,
        "r1",
        RouteConfiguration {
            name: "r1".into(),
            virtual_hosts: vec![virtual_host("web", "c-prod")],
            ..Default::default()
        }
        .encode_to_vec()
        .into(),
    )
    .with_constraints(Some(env("prod")));
    let err = store
        .apply([
            Change::Set(route("r1", "c1").with_constraints(Some(env("staging")))),
            Change::Set(prod),
        ])
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "a reference to a resource that does not exist: RouteConfiguration \"r1\" (the variant \
         for {constraint:{key:\"env\" value:\"prod\"}}) field \
         virtual_hosts[0].routes[0].route.cluster refers to Cluster \"c-prod\", which does not \
         exist"
    );
}

// ---------------------------------------------------------------------------------------------
// Committing the names that changed (`replace_names`) against committing everything
// (`replace_all`): the same decisions (references, duplicates, variant rules) and the same state.

mod replace_names {
    use super::*;
    use proptest::prelude::*;

    /// One definition: kind (0 EDS cluster, 1 endpoints, 2 route, 3 VHDS route, 4 listener, 5 a
    /// cluster variant), its name number and what it refers to.
    type Def = (u8, u8, u8);

    fn input(def: Def, copy: usize) -> ResourceInput {
        let (kind, n, to) = def;
        let name = |prefix: &str, i: u8| format!("{prefix}{i}");
        let mut input = match kind {
            0 => eds_cluster(&name("c", n), ""),
            1 => endpoints(&name("c", n)),
            2 => route(&name("r", n), &name("c", to)),
            3 => vhds_route(&name("r", n), &name("c", to)),
            4 => listener(&name("l", n), &name("r", to)),
            _ => static_cluster(&name("c", n)).with_constraints(Some(env(&name("g", to)))),
        };
        // Where it comes from, as a file and position would say.
        input.origin = Some(format!("f{kind}-{n}-{to}.yaml (resource #{})", copy + 1));
        input
    }

    fn key(def: Def) -> (String, String) {
        let (kind, n, _) = def;
        let (type_url, prefix) = match kind {
            0 | 5 => (CLUSTER, "c"),
            1 => (CLUSTER_LOAD_ASSIGNMENT, "c"),
            2 | 3 => (ROUTE_CONFIGURATION, "r"),
            _ => (LISTENER, "l"),
        };
        (type_url.to_owned(), format!("{prefix}{n}"))
    }

    /// Each name with its variants' (version, origin).
    type Entries = Vec<(String, Vec<(String, String)>)>;

    /// What a store holds: per type, its version and each name's variants.
    fn content(store: &Store) -> Vec<(String, String, Entries)> {
        let snapshot = store.snapshot();
        let mut out: Vec<_> = snapshot
            .types()
            .filter(|t| !t.is_empty())
            .map(|t| {
                let entries = t
                    .entries()
                    .map(|(name, variants)| {
                        let vs = variants
                            .iter()
                            .map(|v| {
                                (
                                    v.version().to_string(),
                                    v.origin().map(|o| o.to_string()).unwrap_or_default(),
                                )
                            })
                            .collect();
                        (name.to_string(), vs)
                    })
                    .collect();
                (t.type_url().to_string(), t.version().to_string(), entries)
            })
            .collect();
        out.sort();
        out
    }

    fn steps() -> impl Strategy<Value = Vec<Vec<Def>>> {
        let def = (0..6u8, 0..3u8, 0..3u8);
        prop::collection::vec(prop::collection::vec(def, 1..5), 1..12)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn committing_the_changed_names_ends_in_the_state_committing_everything_gives(steps in steps()) {
            for mode in [ReferenceMode::Strict, ReferenceMode::Warn] {
                let whole = Store::with_reference_policy(ReferencePolicy::new(mode));
                let by_name = Store::with_reference_policy(ReferencePolicy::new(mode));
                // The inputs of each name, as a directory defines them now.
                let mut defs: std::collections::BTreeMap<(String, String), Vec<Def>> =
                    Default::default();
                // Names changed since the last commit that succeeded.
                let mut pending: std::collections::BTreeSet<(String, String)> = Default::default();
                for step in &steps {
                    // Each definition of the step replaces what defines its name: a name
                    // defined twice in one step is defined twice (a duplicate).
                    let mut fresh: std::collections::BTreeSet<(String, String)> = Default::default();
                    for def in step {
                        let k = key(*def);
                        if fresh.insert(k.clone()) {
                            defs.insert(k.clone(), Vec::new());
                        }
                        // A removal: kind 1 with `to` 2 removes the endpoints instead.
                        if def.0 == 1 && def.2 == 2 {
                            defs.insert(k.clone(), Vec::new());
                        } else if let Some(list) = defs.get_mut(&k) {
                            list.push(*def);
                        }
                        pending.insert(k);
                    }
                    let inputs_of = |k: &(String, String)| -> Vec<ResourceInput> {
                        defs.get(k)
                            .into_iter()
                            .flatten()
                            .enumerate()
                            .map(|(i, d)| input(*d, i))
                            .collect()
                    };
                    let all: Vec<ResourceInput> = defs.keys().flat_map(inputs_of).collect();
                    let changed: Vec<ResourceInput> = pending.iter().flat_map(inputs_of).collect();
                    let a = whole.replace_all(all);
                    let b = by_name.replace_names(pending.iter().cloned(), changed);
                    match (&a, &b) {
                        (Ok(a), Ok(b)) => {
                            prop_assert_eq!(a.changed, b.changed);
                            prop_assert_eq!(&a.dangling, &b.dangling);
                            pending.clear();
                        }
                        (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
                        _ => prop_assert!(false, "replace_all {:?}, replace_names {:?}", a, b),
                    }
                    prop_assert_eq!(content(&whole), content(&by_name));
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// LEDS collection references (xRFC TP1 glob collections).

mod leds {
    use super::*;
    use envoy_types::pb::envoy::config::endpoint::v3::locality_lb_endpoints::LbConfig;
    use envoy_types::pb::envoy::config::endpoint::v3::{
        ClusterLoadAssignment, LedsClusterLocalityConfig, LocalityLbEndpoints,
    };

    fn cla(collection: &str) -> ResourceInput {
        let cla = ClusterLoadAssignment {
            cluster_name: "backend".into(),
            endpoints: vec![LocalityLbEndpoints {
                lb_config: Some(LbConfig::LedsClusterLocalityConfig(
                    LedsClusterLocalityConfig {
                        leds_config: ads(),
                        leds_collection_name: collection.into(),
                    },
                )),
                ..Default::default()
            }],
            ..Default::default()
        };
        from("endpoints.yaml", CLUSTER_LOAD_ASSIGNMENT, "backend", cla)
    }

    #[test]
    fn a_leds_collection_with_no_members_is_not_dangling() {
        let store = Store::new();
        store
            .replace_all([cla(
                "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/backend/*",
            )])
            .unwrap();
    }

    #[test]
    fn a_leds_collection_name_that_is_not_a_glob_is_an_error() {
        for (name, fault) in [
            (
                "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/backend/ep1",
                "its last path segment is not *",
            ),
            ("backend-endpoints", "begins with"),
            (
                "xdstp://a/envoy.config.cluster.v3.Cluster/backend/*",
                "not the resource's type",
            ),
        ] {
            let err = Store::new().replace_all([cla(name)]).unwrap_err();
            let text = err.to_string();
            assert!(
                text.contains("endpoints.yaml (resource #1)")
                    && text.contains("leds_collection_name")
                    && text.contains("not a glob collection")
                    && text.contains(fault),
                "{name}: {text}"
            );
        }
    }
}

#[test]
fn an_xdstp_reference_resolves_whatever_the_order_of_its_parameters() {
    let route_name = "xdstp://a/envoy.config.route.v3.RouteConfiguration/r?b=2&a=1";
    Store::new()
        .replace_all([
            listener("l", route_name),
            route(
                "xdstp://a/envoy.config.route.v3.RouteConfiguration/r?a=1&b=2",
                "c",
            ),
            static_cluster("c"),
        ])
        .unwrap();
}
