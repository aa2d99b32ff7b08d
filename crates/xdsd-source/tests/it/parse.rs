use envoy_types::pb::envoy::config::cluster::v3::{cluster, Cluster};
use envoy_types::pb::envoy::config::core::v3::{address, socket_address};
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager, HttpConnectionManager,
};
use prost::Message;

use crate::support::parse;
use xdsd_source::ParsedResource;

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

#[test]
fn yaml_anchors_aliases_and_merge_keys() {
    let yaml = r#"
- &base
  "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: a
  connect_timeout: 3s
  lb_policy: RING_HASH
- <<: *base
  name: b
  connect_timeout: 7s
"#;
    let resources = parse("anchors.yaml", yaml);
    assert_eq!(names(&resources), ["a", "b"]);
    let b: Cluster = decode(&resources[1]);
    assert_eq!(b.connect_timeout.unwrap().seconds, 7);
    assert_eq!(b.lb_policy, cluster::LbPolicy::RingHash as i32);

    // Errors in merged documents still name the field.
    let bad = format!("{yaml}  bogus_field: 1\n");
    let err = crate::support::parse_err("anchors.yaml", &bad).to_string();
    crate::support::assert_mentions(&err, &["anchors.yaml (resource #2", "\"b\"", "bogus_field"]);
}

#[test]
fn byte_order_mark_is_skipped() {
    let json = "\u{feff}{\"@type\": \"type.googleapis.com/envoy.config.cluster.v3.Cluster\", \"name\": \"a\"}";
    assert_eq!(names(&parse("bom.json", json)), ["a"]);
    let yaml = format!("\u{feff}{CLUSTER_A}");
    assert_eq!(names(&parse("bom.yaml", &yaml)), ["a"]);
}

/// Hostile or odd content is an error (or fine), never a panic.
#[test]
fn odd_inputs_do_not_panic() {
    let deep_json = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    let deep_yaml = format!("{}{}", "- ".repeat(2000), "x");
    let deep_any = format!(
        "\"@type\": type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig\nname: x\ntyped_config: {}\n",
        "{\"@type\": type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig, name: y, typed_config: ".repeat(200)
            + &"}".repeat(200)
    );
    // As deep as the parsers allow (their recursion limit is 128), decoded on a small stack
    // like the watcher thread's.
    let deep_valid_any = format!(
        "\"@type\": type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig\nname: x\ntyped_config: {}\n",
        "{\"@type\": type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig, name: y, typed_config: ".repeat(120)
            + "{\"@type\": type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig, name: z}"
            + &"}".repeat(120)
    );
    let laughs = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n\
                  c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n\
                  e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n\
                  g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]\nh: [*g, *g, *g, *g, *g, *g, *g, *g, *g]\n";
    let cluster = "\"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\nname: a\n";
    let cases: Vec<(&str, String)> = vec![
        ("a.yaml", "\t\"@type\": x".into()),
        ("a.yaml", "!!binary aGVsbG8=".into()),
        ("a.yaml", format!("{cluster}connect_timeout: !custom 1s\n")),
        ("a.yaml", format!("{cluster}connect_timeout: 99999999999999999999999s\n")),
        ("a.yaml", format!("{cluster}connect_timeout: -1s\n")),
        ("a.yaml", format!("{cluster}per_connection_buffer_limit_bytes: 99999999999999999999\n")),
        ("a.yaml", format!("{cluster}per_connection_buffer_limit_bytes: .nan\n")),
        ("a.yaml", format!("{cluster}metadata: {{filter_metadata: {{x: {{y: .inf}}}}}}\n")),
        ("a.yaml", format!("{cluster}1: 2\n")),
        ("a.yaml", format!("{cluster}? [a, b]\n: c\n")),
        ("a.yaml", "*undefined".into()),
        ("a.yaml", "<<: 5\n".into()),
        ("a.yaml", "- <<: [1, 2]\n".into()),
        ("a.yaml", "---\n...\n---\n{\n".into()),
        ("a.yaml", "resources: [null]\n".into()),
        ("a.yaml", "resources: [[]]\n".into()),
        ("a.yaml", "\"@type\": type.googleapis.com/\nname: a\n".into()),
        ("a.yaml", "\"@type\": /\nname: a\n".into()),
        ("a.yaml", "\"@type\": \"\"\n".into()),
        ("a.yaml", "\"@type\": type.googleapis.com/google.protobuf.Any\nname: a\n".into()),
        ("a.yaml", "\"@type\": type.googleapis.com/google.protobuf.Struct\nname: a\n".into()),
        ("a.yaml", "\"@type\": type.googleapis.com/google.protobuf.Value\nname: a\n".into()),
        ("a.yaml", "\"@type\": type.googleapis.com/google.protobuf.Api\nname: a\n".into()),
        ("a.yaml", deep_yaml.clone()),
        ("a.yaml", deep_any.clone()),
        ("a.yaml", laughs.into()),
        ("a.yaml", deep_valid_any.clone()),
        ("a.json", format!("[{}]", "{\"a\": ".repeat(126) + "1" + &"}".repeat(126))),
        ("a.yaml", "\u{0}\u{1}\u{2}".into()),
        ("a.json", deep_json.clone()),
        ("a.json", "{\"@type\": \"type.googleapis.com/envoy.config.cluster.v3.Cluster\", \"name\": \"a\"} trailing".into()),
        ("a.json", "{\"@type\": \"type.googleapis.com/envoy.config.cluster.v3.Cluster\", \"name\": \"\\ud800\"}".into()),
        ("a.json", "NaN".into()),
        ("a.json", "{\"resources\": 1}".into()),
    ];
    for (path, text) in cases {
        let descriptors = crate::support::descriptors();
        let result = std::thread::scope(|scope| {
            std::thread::Builder::new()
                .stack_size(2 << 20)
                .spawn_scoped(scope, || {
                    xdsd_source::parse_file(&descriptors, std::path::Path::new(path), &text)
                })
                .unwrap()
                .join()
        });
        match result {
            Ok(Ok(resources)) => println!("{path}: ok, {} resources", resources.len()),
            Ok(Err(e)) => {
                let e = e.to_string();
                assert!(e.contains(path), "error does not name the file: {e}");
                println!("{}", &e[..e.len().min(300)]);
            }
            Err(_) => panic!("panicked on {path}: {:?}", &text[..text.len().min(200)]),
        }
    }
}
