//! An error in a nested mapping points at the offending key's own line (not at the start of the
//! mapping that holds it), at every depth, in YAML and JSON; an unknown field close to a known
//! one gets "did you mean".

use crate::support::parse_err;

/// The error's text, printed for the test log.
fn error_text(path: &str, input: &str) -> String {
    let text = parse_err(path, input).to_string();
    println!("{text}");
    text
}

/// The line number the error gives (`at line N` in YAML, `line N` in JSON).
#[track_caller]
fn line_of(text: &str) -> usize {
    let at = text
        .rfind("line ")
        .unwrap_or_else(|| panic!("no line in: {text}"));
    text[at + 5..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("no line number in: {text}"))
}

const LISTENER_YAML: &str = r#""@type": type.googleapis.com/envoy.config.listener.v3.Listener
name: listener_0
address:
  socket_address:
    address: 127.0.0.1
    PORT
filter_chains:
- filters:
  - name: envoy.filters.network.http_connection_manager
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
      STAT
      rds:
        route_config_name: local_route
        config_source:
          ads: {}
          CONFIG
"#;

/// The listener with one of its three placeholders holding `bad` and the others their
/// valid fields.
fn listener_yaml(port: &str, stat: &str, config: &str) -> String {
    LISTENER_YAML
        .replace("PORT", port)
        .replace("STAT", stat)
        .replace("CONFIG", config)
}

#[test]
fn an_unknown_yaml_key_is_reported_on_its_own_line_at_every_depth() {
    let ok = (
        "port_value: 10000",
        "stat_prefix: ingress",
        "resource_api_version: V3",
    );
    // depth 2: address.socket_address, line 6
    let text = error_text("l.yaml", &listener_yaml("port_vaule: 10000", ok.1, ok.2));
    assert_eq!(line_of(&text), 6, "{text}");
    assert!(text.contains("port_vaule"), "{text}");
    // depth 4, inside an Any: filter_chains[0].filters[0].typed_config, line 12
    let text = error_text("l.yaml", &listener_yaml(ok.0, "stat_prefx: ingress", ok.2));
    assert_eq!(line_of(&text), 12, "{text}");
    // depth 6: ...typed_config.rds.config_source, line 17
    let text = error_text(
        "l.yaml",
        &listener_yaml(ok.0, ok.1, "resource_api_versoin: V3"),
    );
    assert_eq!(line_of(&text), 17, "{text}");
}

#[test]
fn an_unknown_key_in_a_flow_mapping_is_reported_on_its_own_line() {
    let yaml = r#""@type": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment
cluster_name: backend
endpoints:
- lb_endpoints:
  - endpoint: { address: { socket_address: {
      address: 127.0.0.1,
      port_vaule: 8080 } } }
"#;
    let text = error_text("e.yaml", yaml);
    assert_eq!(line_of(&text), 7, "{text}");
}

#[test]
fn an_unknown_json_key_is_reported_on_its_own_line_at_every_depth() {
    let json = |port: &str, stat: &str| {
        format!(
            r#"{{
  "@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
  "name": "listener_0",
  "address": {{
    "socketAddress": {{
      "address": "127.0.0.1",
      {port}
    }}
  }},
  "filterChains": [{{"filters": [{{
    "name": "hcm",
    "typedConfig": {{
      "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
      "routeConfig": {{}},
      {stat}
    }}
  }}]}}]
}}"#
        )
    };
    let text = error_text("l.json", &json(r#""portVaule": 1"#, r#""statPrefix": "x""#));
    assert_eq!(line_of(&text), 7, "{text}");
    let text = error_text("l.json", &json(r#""portValue": 1"#, r#""statPrefx": "x""#));
    assert_eq!(line_of(&text), 15, "{text}");
}

#[test]
fn an_unknown_field_close_to_a_known_one_gets_did_you_mean() {
    let ok = (
        "port_value: 10000",
        "stat_prefix: ingress",
        "resource_api_version: V3",
    );
    let text = error_text("l.yaml", &listener_yaml("port_vaule: 10000", ok.1, ok.2));
    assert!(text.contains("did you mean `port_value`?"), "{text}");
    let text = error_text("l.yaml", &listener_yaml(ok.0, "stat_prefx: ingress", ok.2));
    assert!(text.contains("did you mean `stat_prefix`?"), "{text}");
    let text = error_text(
        "l.yaml",
        &listener_yaml(ok.0, ok.1, "resource_api_versoin: V3"),
    );
    assert!(
        text.contains("did you mean `resource_api_version`?"),
        "{text}"
    );
    // top level, and JSON's camelCase names
    let top = "\"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\nname: c\nconect_timeout: 1s\n";
    let text = error_text("c.yaml", top);
    assert!(text.contains("did you mean `connect_timeout`?"), "{text}");
    let json = "{\"@type\": \"type.googleapis.com/envoy.config.cluster.v3.Cluster\",\n \"name\": \"c\",\n \"connectTimeot\": \"1s\"}";
    let text = error_text("c.json", json);
    assert!(text.contains("did you mean `connectTimeout`?"), "{text}");
    // nothing close: no guess
    let far =
        "\"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\nname: c\nzzzzzz: 1\n";
    let text = error_text("c.yaml", far);
    assert!(!text.contains("did you mean"), "{text}");
}

#[test]
fn lists_and_resources_wrappers_get_the_line_and_the_guess_too() {
    let list = "- \"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\n  name: a\n- \"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\n  name: b\n  load_assignment:\n    cluster_name: b\n    endpoints:\n    - lb_endpoints:\n      - endpoint:\n          address:\n            socket_address:\n              address: 127.0.0.1\n              port_vaule: 1\n";
    let text = error_text("l.yaml", list);
    assert_eq!(line_of(&text), 13, "{text}");
    assert!(text.contains("resource #2"), "{text}");
    assert!(text.contains("did you mean `port_value`?"), "{text}");
    let wrapper = format!(
        "version_info: \"1\"\nresources:\n{}",
        list.replace("\n", "\n  ").replacen("- ", "  - ", 1)
    );
    let text = error_text("w.yaml", wrapper.trim_end());
    assert_eq!(line_of(&text), 15, "{text}");
    assert!(text.contains("did you mean `port_value`?"), "{text}");
    let json = "[{\"@type\": \"type.googleapis.com/envoy.config.cluster.v3.Cluster\", \"name\": \"a\"},\n {\"@type\": \"type.googleapis.com/envoy.config.cluster.v3.Cluster\", \"name\": \"b\",\n  \"lbPolicy\": \"RANDOM\",\n  \"dnsLookupFamly\": \"V4_ONLY\"}]";
    let text = error_text("l.json", json);
    assert_eq!(line_of(&text), 4, "{text}");
    assert!(text.contains("did you mean `dnsLookupFamily`?"), "{text}");
}
