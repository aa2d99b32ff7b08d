use std::path::Path;

use envoy_types::pb::envoy::config::listener::v3::Listener;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse;
use envoy_types::pb::google::protobuf::Any;
use prost::Message;

use super::*;
use crate::parse_file;

const LISTENER: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
const HCM: &str = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";

/// One resource of each core type, with nested `Any`s (an HttpConnectionManager in the
/// listener's filter chain, the router in it, protocol options in the cluster), maps (the
/// cluster's protocol options, the runtime layer's `Struct`), 64-bit integers, durations, and
/// strings YAML 1.1 would read as booleans.
const RESOURCES: &str = r#"
"@type": type.googleapis.com/envoy.config.listener.v3.Listener
name: listener_0
address:
  socket_address: { address: 127.0.0.1, port_value: 10000 }
filter_chains:
- filters:
  - name: envoy.filters.network.http_connection_manager
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
      stat_prefix: "on"
      route_config:
        name: local
        virtual_hosts:
        - name: all
          domains: ["*"]
          routes:
          - match: { prefix: / }
            route: { cluster: "yes", timeout: 2.5s }
            request_headers_to_add:
            - header: { key: x-flag, value: "off" }
      http_filters:
      - name: envoy.filters.http.router
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
---
"@type": type.googleapis.com/envoy.config.route.v3.RouteConfiguration
name: route_0
virtual_hosts:
- name: "no"
  domains: ["*", "y"]
  routes:
  - match: { prefix: "/" }
    route: { cluster: "yes" }
---
"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
name: "yes"
type: STRICT_DNS
connect_timeout: 0.25s
per_connection_buffer_limit_bytes: 32768
max_requests_per_connection: 7
circuit_breakers:
  thresholds:
  - max_connections: 4294967295
lb_policy: LEAST_REQUEST
typed_extension_protocol_options:
  envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
    "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
    explicit_http_config: { http2_protocol_options: {} }
---
"@type": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment
cluster_name: "yes"
endpoints:
- locality: { region: "on" }
  load_balancing_weight: 1
  lb_endpoints:
  - endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 8080 } } }
---
"@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret
name: validation
validation_context:
  trusted_ca: { inline_string: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n" }
---
"@type": type.googleapis.com/envoy.service.runtime.v3.Runtime
name: rtds
layer:
  feature: { enabled: "on", ratio: 0.5, big: 12345678901, nothing: null, list: [1, "n", true] }
  "yes": "no"
"#;

fn descriptors() -> Descriptors {
    Descriptors::envoy().expect("embedded descriptors decode")
}

/// The `DiscoveryResponse` of each type in [`RESOURCES`], in binary.
fn responses() -> Vec<(String, Vec<u8>)> {
    let resources = parse_file(&descriptors(), Path::new("all.yaml"), RESOURCES)
        .unwrap_or_else(|e| panic!("the test resources parse: {e}"));
    assert_eq!(resources.len(), 6);
    resources
        .iter()
        .map(|r| {
            let any = Any {
                type_url: r.type_url.clone(),
                value: r.value.to_vec(),
            }
            .encode_to_vec();
            let response = discovery_response_bytes("v1", &r.type_url, [any.as_slice()]);
            (r.type_url.clone(), response)
        })
        .collect()
}

fn text(format: FileFormat, response: &[u8]) -> String {
    let bytes = render_discovery_response(&descriptors(), format, response)
        .unwrap_or_else(|e| panic!("rendering {format}: {e}"));
    String::from_utf8(bytes).unwrap_or_else(|e| panic!("{format} is UTF-8: {e}"))
}

#[test]
fn binary_is_a_discovery_response_with_version_type_and_anys() {
    for (type_url, response) in responses() {
        let decoded =
            DiscoveryResponse::decode(response.as_slice()).expect("envoy-types decodes it");
        assert_eq!(decoded.version_info, "v1");
        assert_eq!(decoded.type_url, type_url);
        assert_eq!(decoded.resources.len(), 1);
        assert_eq!(decoded.resources[0].type_url, type_url);
        let rendered = render_discovery_response(&descriptors(), FileFormat::Pb, &response)
            .expect("binary renders");
        assert_eq!(rendered, response, "the binary file is the encoding itself");
    }
}

#[test]
fn json_and_yaml_read_back_to_the_same_bytes() {
    let descriptors = descriptors();
    for (type_url, response) in responses() {
        let expected = canonical(
            descriptors.pool(),
            &discovery_response(&descriptors).expect("descriptor"),
            &response,
        );
        for format in FileFormat::ALL {
            let file = render_discovery_response(&descriptors, format, &response)
                .unwrap_or_else(|e| panic!("{type_url} as {format}: {e}"));
            let read = read_discovery_response(&descriptors, format, &file).unwrap_or_else(|e| {
                panic!(
                    "{type_url} as {format} reads back: {e}\n{}",
                    String::from_utf8_lossy(&file)
                )
            });
            assert_eq!(
                read,
                expected,
                "{type_url} as {format} reads back to the same bytes:\n{}",
                String::from_utf8_lossy(&file)
            );
        }
    }
}

#[test]
fn nested_any_is_written_with_its_type_and_fields() {
    let (_, listener) = responses()
        .into_iter()
        .find(|(t, _)| t == LISTENER)
        .expect("a listener");
    let json = text(FileFormat::Json, &listener);
    let value: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    assert_eq!(value["version_info"], "v1");
    assert_eq!(value["type_url"], LISTENER);
    let resource = &value["resources"][0];
    assert_eq!(resource["@type"], LISTENER);
    assert_eq!(resource["name"], "listener_0");
    let hcm = &resource["filter_chains"][0]["filters"][0]["typed_config"];
    assert_eq!(hcm["@type"], HCM);
    assert_eq!(hcm["stat_prefix"], "on");
    assert_eq!(
        hcm["route_config"]["virtual_hosts"][0]["routes"][0]["route"]["timeout"],
        "2.500s"
    );

    // Read back, the listener decodes with the generated types and its HCM is intact.
    let descriptors = descriptors();
    let read = read_discovery_response(&descriptors, FileFormat::Json, json.as_bytes())
        .expect("reads back");
    let response = DiscoveryResponse::decode(read.as_slice()).expect("decodes");
    let listener = Listener::decode(response.resources[0].value.as_slice()).expect("a Listener");
    let typed_config = listener.filter_chains[0].filters[0]
        .config_type
        .as_ref()
        .expect("a typed_config");
    let envoy_types::pb::envoy::config::listener::v3::filter::ConfigType::TypedConfig(any) =
        typed_config
    else {
        panic!("typed_config expected, got {typed_config:?}");
    };
    assert_eq!(any.type_url, HCM);
}

#[test]
fn yaml_quotes_every_string_so_envoy_reads_no_boolean() {
    for (type_url, response) in responses() {
        let yaml = text(FileFormat::Yaml, &response);
        for word in ["on", "off", "yes", "no", "y", "n"] {
            for line in yaml.lines() {
                let value = line.trim_start().trim_start_matches("- ");
                let value = value.rsplit_once(": ").map_or(value, |(_, v)| v);
                assert_ne!(
                    value, word,
                    "{type_url}: {word} is written plain in {line:?}:\n{yaml}"
                );
            }
        }
        assert!(yaml.starts_with("version_info: \"v1\"\n"), "{yaml}");
    }
}

#[test]
fn yaml_layout() {
    let (_, listener) = responses()
        .into_iter()
        .find(|(t, _)| t == LISTENER)
        .expect("a listener");
    let yaml = text(FileFormat::Yaml, &listener);
    let expected_start = format!(
        "version_info: \"v1\"
resources:
  - \"@type\": \"{LISTENER}\"
    name: \"listener_0\"
    address:
      socket_address:
        address: \"127.0.0.1\"
        port_value: 10000
    filter_chains:
      - filters:
          - name: \"envoy.filters.network.http_connection_manager\"
            typed_config:
              \"@type\": \"{HCM}\"
              stat_prefix: \"on\"
"
    );
    assert!(
        yaml.starts_with(&expected_start),
        "expected the YAML to start with\n{expected_start}\ngot\n{yaml}"
    );
}

#[test]
fn keys_are_plain_unless_ambiguous() {
    let mut out = String::new();
    yaml::document(
        &mut out,
        &serde_yaml_ng::from_str("{a: 1, \"on\": 2, \"@type\": 3, x.y/z-1: {}, \"\": []}")
            .expect("YAML"),
    );
    assert_eq!(
        out,
        "a: 1\n\"on\": 2\n\"@type\": 3\nx.y/z-1: {}\n\"\": []\n"
    );
}

#[test]
fn an_any_of_an_unknown_type_is_an_error_not_a_file() {
    let any = Any {
        type_url: "type.googleapis.com/no.such.Message".into(),
        value: vec![8, 1],
    }
    .encode_to_vec();
    let response = discovery_response_bytes(
        "v1",
        "type.googleapis.com/no.such.Message",
        [any.as_slice()],
    );
    for format in [FileFormat::Json, FileFormat::Yaml] {
        let error = render_discovery_response(&descriptors(), format, &response)
            .expect_err("an unknown Any type cannot be written as JSON");
        assert!(error.to_string().contains("no.such.Message"), "{error}");
    }
}

/// A resource rendered as a resource-file document (`xdsd get`) and parsed back as a resource
/// file is the same resource, its constraints too, in YAML and JSON.
#[test]
fn resource_document_reads_back_as_the_same_resource() {
    let d = descriptors();
    let text = format!(
        "{RESOURCES}\n---\n\"@type\": {LISTENER}\n\"@match\": {{ env: prod }}\nname: variant\n\
         ---\n\"@type\": type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint\n\
         \"@name\": xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/e1\n\
         endpoint: {{ address: {{ socket_address: {{ address: 10.0.0.1, port_value: 80 }} }} }}\n"
    );
    let resources = parse_file(&d, Path::new("in.yaml"), &text).expect("the resources parse");
    assert!(resources.iter().any(|r| r.constraints.is_some()));
    for format in [FileFormat::Yaml, FileFormat::Json] {
        for r in &resources {
            let doc = render_resource_document(
                &d,
                format,
                &r.type_url,
                &r.name,
                &r.value,
                r.constraints.as_deref(),
            )
            .expect("renders");
            let doc = String::from_utf8(doc).expect("UTF-8");
            let path = format!("out.{}", format.extension());
            let back = parse_file(&d, Path::new(&path), &doc)
                .unwrap_or_else(|e| panic!("{format}: {e}\n{doc}"));
            assert_eq!(back.len(), 1, "{doc}");
            assert_eq!(
                (&back[0].name, &back[0].value, &back[0].constraints),
                (&r.name, &r.value, &r.constraints),
                "{format}: {doc}"
            );
        }
    }
}
