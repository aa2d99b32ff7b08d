use envoy_types::pb::envoy::config::cluster::v3::{cluster, Cluster};
use envoy_types::pb::envoy::config::core::v3::{address, socket_address};
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager, HttpConnectionManager,
};
use prost::Message;

use crate::{parse, ParsedResource};

const LISTENER: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
const CLUSTER: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
const CLA: &str = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
const ROUTE: &str = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";
const HCM: &str = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";

fn decode<M: Message + Default>(resource: &ParsedResource) -> M {
    M::decode(resource.value.clone()).expect("value decodes with envoy-types")
}

#[test]
fn listener_with_nested_hcm_and_rds() {
    let yaml = r#"
"@type": type.googleapis.com/envoy.config.listener.v3.Listener
name: ingress
address:
  socket_address: { address: 0.0.0.0, port_value: 10000 }
filter_chains:
- filters:
  - name: envoy.filters.network.http_connection_manager
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
      stat_prefix: ingress_http
      rds:
        route_config_name: local_route
        config_source: { ads: {}, resource_api_version: V3 }
      http_filters:
      - name: envoy.filters.http.router
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
"#;
    let resources = parse("listeners/ingress.yaml", yaml);
    assert_eq!(resources.len(), 1);
    let r = &resources[0];
    assert_eq!(r.type_url, LISTENER);
    assert_eq!(r.name, "ingress");
    assert_eq!(r.origin, "listeners/ingress.yaml (resource #1)");

    let listener: Listener = decode(r);
    assert_eq!(listener.name, "ingress");
    let Some(address::Address::SocketAddress(sa)) = listener.address.unwrap().address else {
        panic!("socket address expected");
    };
    assert_eq!(sa.address, "0.0.0.0");
    assert_eq!(
        sa.port_specifier,
        Some(socket_address::PortSpecifier::PortValue(10000))
    );

    let filter = &listener.filter_chains[0].filters[0];
    assert_eq!(filter.name, "envoy.filters.network.http_connection_manager");
    let Some(envoy_types::pb::envoy::config::listener::v3::filter::ConfigType::TypedConfig(any)) =
        &filter.config_type
    else {
        panic!("typed_config expected");
    };
    assert_eq!(any.type_url, HCM);
    let hcm = HttpConnectionManager::decode(any.value.as_slice()).unwrap();
    assert_eq!(hcm.stat_prefix, "ingress_http");
    let Some(http_connection_manager::RouteSpecifier::Rds(rds)) = hcm.route_specifier else {
        panic!("rds expected");
    };
    assert_eq!(rds.route_config_name, "local_route");
    assert_eq!(rds.config_source.unwrap().resource_api_version, 2); // V3
    assert_eq!(hcm.http_filters[0].name, "envoy.filters.http.router");
}

#[test]
fn cluster_with_duration_and_camel_case_names() {
    let yaml = r#"
"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
name: backend
connectTimeout: 0.25s
type: EDS
eds_cluster_config: { eds_config: { ads: {} } }
lb_policy: LEAST_REQUEST
"#;
    let resources = parse("clusters.yml", yaml);
    assert_eq!(resources[0].type_url, CLUSTER);
    assert_eq!(resources[0].name, "backend");
    let cluster: Cluster = decode(&resources[0]);
    let timeout = cluster.connect_timeout.unwrap();
    assert_eq!((timeout.seconds, timeout.nanos), (0, 250_000_000));
    assert_eq!(
        cluster.cluster_discovery_type,
        Some(cluster::ClusterDiscoveryType::Type(
            cluster::DiscoveryType::Eds as i32
        ))
    );
    assert_eq!(cluster.lb_policy, cluster::LbPolicy::LeastRequest as i32);
}

#[test]
fn cluster_load_assignment_is_named_by_cluster_name() {
    let yaml = r#"
"@type": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment
cluster_name: backend
endpoints:
- locality: { region: r1 }
  load_balancing_weight: 1
  lb_endpoints:
  - endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 8080 } } }
"#;
    let resources = parse("eds.yaml", yaml);
    assert_eq!(resources[0].type_url, CLA);
    assert_eq!(resources[0].name, "backend");
    let cla: ClusterLoadAssignment = decode(&resources[0]);
    assert_eq!(cla.cluster_name, "backend");
    assert_eq!(
        cla.endpoints[0].load_balancing_weight.map(|w| w.value),
        Some(1)
    );
    assert_eq!(cla.endpoints[0].lb_endpoints.len(), 1);
}

const CLUSTER_A: &str = "\"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\nname: a\n";
const CLUSTER_B: &str = "\"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\nname: b\n";

fn names(resources: &[ParsedResource]) -> Vec<&str> {
    resources.iter().map(|r| r.name.as_str()).collect()
}

#[test]
fn multi_document_yaml() {
    let yaml = format!("---\n{CLUSTER_A}---\n# nothing here\n---\n{CLUSTER_B}");
    let resources = parse("multi.yaml", &yaml);
    assert_eq!(names(&resources), ["a", "b"]);
    assert_eq!(resources[1].origin, "multi.yaml (resource #2)");
}

#[test]
fn yaml_list_and_wrapper() {
    let list = r#"
- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: a
- "@type": type.googleapis.com/envoy.config.route.v3.RouteConfiguration
  name: routes
  virtual_hosts:
  - name: all
    domains: ["*"]
    routes:
    - match: { prefix: / }
      route: { cluster: a, timeout: 5s }
"#;
    let resources = parse("list.yaml", list);
    assert_eq!(names(&resources), ["a", "routes"]);
    assert_eq!(resources[1].type_url, ROUTE);
    let routes: RouteConfiguration = decode(&resources[1]);
    assert_eq!(routes.virtual_hosts[0].domains, ["*"]);

    let wrapper = r#"
version_info: "7"
resources:
- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: a
- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: b
"#;
    let resources = parse("wrapped.yaml", wrapper);
    assert_eq!(names(&resources), ["a", "b"]);
    assert_eq!(resources[1].origin, "wrapped.yaml (resource #2)");

    // Documents of each shape may be mixed in one stream; numbering runs across them.
    let cluster_c = CLUSTER_A.replace("name: a", "name: c");
    let mixed = format!("{wrapper}---\n{cluster_c}---\nresources: []\n");
    let resources = parse("mixed.yaml", &mixed);
    assert_eq!(names(&resources), ["a", "b", "c"]);
    assert_eq!(resources[2].origin, "mixed.yaml (resource #3)");
}

#[test]
fn json_forms() {
    let single = r#"{"@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster", "name": "a",
                     "connect_timeout": "1s"}"#;
    let resources = parse("a.json", single);
    assert_eq!(names(&resources), ["a"]);
    let cluster: Cluster = decode(&resources[0]);
    assert_eq!(cluster.connect_timeout.unwrap().seconds, 1);

    let list = r#"[{"@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster", "name": "a"},
                   {"name": "b", "@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster"}]"#;
    assert_eq!(names(&parse("list.json", list)), ["a", "b"]);

    let wrapper = format!(r#"{{"version_info": "1", "resources": {list}}}"#);
    let resources = parse("wrapped.JSON", &wrapper);
    assert_eq!(names(&resources), ["a", "b"]);
    assert_eq!(resources[1].origin, "wrapped.JSON (resource #2)");
}

#[test]
fn typed_extension_config_secret_and_runtime_are_resources() {
    let yaml = r#"
- "@type": type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig
  name: ecds-router
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
- "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret
  name: server-cert
  tls_certificate:
    certificate_chain: { inline_string: "-----BEGIN CERTIFICATE-----" }
- "@type": type.googleapis.com/envoy.service.runtime.v3.Runtime
  name: rtds
  layer: { health_check.min_interval: 5, feature: { enabled: true } }
- "@type": type.googleapis.com/envoy.config.route.v3.ScopedRouteConfiguration
  name: scope
  route_configuration_name: routes
  key: { fragments: [ { string_key: x } ] }
"#;
    let resources = parse("misc.yaml", yaml);
    assert_eq!(
        names(&resources),
        ["ecds-router", "server-cert", "rtds", "scope"]
    );
    assert_eq!(
        resources[2].type_url,
        "type.googleapis.com/envoy.service.runtime.v3.Runtime"
    );
}

#[test]
fn empty_files_hold_no_resources() {
    assert!(parse("empty.yaml", "").is_empty());
    assert!(parse("comments.yaml", "# nothing yet\n").is_empty());
    assert!(parse("docs.yaml", "---\n---\n").is_empty());
    assert!(parse("empty.json", "  \n").is_empty());
    assert!(parse("wrapper.json", r#"{"resources": []}"#).is_empty());
    assert!(parse("list.json", "[]").is_empty());
}

#[test]
fn type_url_is_canonicalised() {
    let yaml = "\"@type\": example.com/types/envoy.config.cluster.v3.Cluster\nname: a\n";
    assert_eq!(parse("a.yaml", yaml)[0].type_url, CLUSTER);
}
