use xdsd_source::{Problem, SourceError};

use crate::support::{assert_mentions, parse_err};

fn err_text(path: &str, input: &str) -> String {
    let err = parse_err(path, input);
    let text = err.to_string();
    println!("{text}");
    text
}

#[test]
fn malformed_yaml_names_file_and_line() {
    let yaml = "\"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\nname: a\nconnect_timeout: [1s\n";
    let err = parse_err("dir/bad.yaml", yaml);
    assert!(matches!(err, SourceError::File { .. }), "{err:?}");
    assert_mentions(
        &err.to_string(),
        &["dir/bad.yaml", "malformed YAML", "line 4"],
    );
}

#[test]
fn malformed_json_names_file_and_line() {
    let json = "[\n  {\"@type\": \"type.googleapis.com/envoy.config.cluster.v3.Cluster\",\n   \"name\": \"a\",,}\n]";
    let text = err_text("bad.json", json);
    assert_mentions(&text, &["bad.json", "malformed JSON", "line 3"]);
}

#[test]
fn missing_type() {
    let yaml = "- \"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\n  name: a\n- name: b\n  connect_timeout: 1s\n";
    let err = parse_err("c.yaml", yaml);
    let SourceError::Resource { resource, problem } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(resource.index, 2);
    assert_eq!(resource.name.as_deref(), Some("b"));
    assert_eq!(problem, &Problem::MissingType);
    assert_mentions(
        &err.to_string(),
        &["c.yaml (resource #2", "\"b\"", "missing \"@type\""],
    );
}

#[test]
fn unknown_type() {
    let text = err_text(
        "c.yaml",
        "\"@type\": type.googleapis.com/envoy.config.cluster.v3.Clutser\nname: a\n",
    );
    assert_mentions(
        &text,
        &[
            "c.yaml (resource #1",
            "unknown \"@type\"",
            "envoy.config.cluster.v3.Clutser",
        ],
    );

    let text = err_text(
        "c.json",
        r#"{"@type": "envoy.config.cluster.v3.Cluster", "name": "a"}"#,
    );
    assert_mentions(
        &text,
        &[
            "c.json",
            "not a type URL",
            "type.googleapis.com/envoy.config.cluster.v3.Cluster",
        ],
    );
}

#[test]
fn type_without_a_name_field() {
    let text = err_text(
        "d.yaml",
        "\"@type\": type.googleapis.com/google.protobuf.Duration\n",
    );
    assert_mentions(
        &text,
        &["d.yaml (resource #1", "google.protobuf.Duration", "`name`"],
    );
}

#[test]
fn unknown_field_yaml_names_field_path_and_line() {
    let yaml = r#"
"@type": type.googleapis.com/envoy.config.listener.v3.Listener
name: ingress
filter_chains:
- filters:
  - name: hcm
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
      stat_prefix: x
      no_such_field: 1
"#;
    let text = err_text("l.yaml", yaml);
    assert_mentions(
        &text,
        &[
            "l.yaml (resource #1",
            "envoy.config.listener.v3.Listener",
            "\"ingress\"",
            "no_such_field",
            "line ",
        ],
    );
}

#[test]
fn unknown_top_level_field() {
    let text = err_text(
        "c.yaml",
        "\"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\nname: a\nconect_timeout: 1s\n",
    );
    assert_mentions(&text, &["c.yaml (resource #1", "conect_timeout", "line 3"]);
}

#[test]
fn unknown_field_json_names_field_and_line() {
    let json = "{\n  \"@type\": \"type.googleapis.com/envoy.config.cluster.v3.Cluster\",\n  \"name\": \"a\",\n  \"bogus\": true\n}\n";
    let text = err_text("c.json", json);
    assert_mentions(&text, &["c.json (resource #1", "\"a\"", "bogus", "line 4"]);
}

#[test]
fn wrong_value_type() {
    let yaml = "\"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\nname: a\nconnect_timeout: [1]\n";
    let text = err_text("c.yaml", yaml);
    assert_mentions(&text, &["c.yaml (resource #1", "connect_timeout", "line 3"]);

    let yaml = "\"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\nname: a\nper_connection_buffer_limit_bytes: lots\n";
    let text = err_text("c.yaml", yaml);
    assert_mentions(
        &text,
        &[
            "c.yaml (resource #1",
            "per_connection_buffer_limit_bytes",
            "line 3",
        ],
    );

    let json = r#"[{"@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster", "name": "a",
    "lb_policy": "SIDEWAYS"}]"#;
    let text = err_text("c.json", json);
    assert_mentions(&text, &["c.json (resource #1", "SIDEWAYS", "line 2"]);
}

#[test]
fn bad_nested_any_type() {
    let yaml = r#"
"@type": type.googleapis.com/envoy.config.listener.v3.Listener
name: l
filter_chains:
- filters:
  - name: hcm
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.filters.network.NoSuchThing
"#;
    let text = err_text("l.yaml", yaml);
    assert_mentions(&text, &["l.yaml (resource #1", "NoSuchThing"]);
}

#[test]
fn empty_name() {
    let err = parse_err(
        "c.yaml",
        "\"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\nconnect_timeout: 1s\n",
    );
    assert!(matches!(
        &err,
        SourceError::Resource {
            problem: Problem::EmptyName("name"),
            ..
        }
    ));
    assert_mentions(
        &err.to_string(),
        &["c.yaml (resource #1", "Cluster", "empty name", "`name`"],
    );

    let text = err_text(
        "e.yaml",
        "\"@type\": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment\ncluster_name: \"\"\n",
    );
    assert_mentions(&text, &["e.yaml (resource #1", "`cluster_name`"]);
}

#[test]
fn duplicate_in_one_file_names_both_origins() {
    let yaml = "- \"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\n  name: a\n\
                - \"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\n  name: a\n";
    let text = err_text("c.yaml", yaml);
    assert_mentions(
        &text,
        &[
            "duplicate",
            "\"a\"",
            "envoy.config.cluster.v3.Cluster",
            "c.yaml (resource #1)",
            "c.yaml (resource #2)",
        ],
    );
}

#[test]
fn same_name_different_types_is_fine() {
    let yaml = "- \"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\n  name: a\n\
                - \"@type\": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment\n  cluster_name: a\n";
    assert_eq!(crate::support::parse("c.yaml", yaml).len(), 2);
}

#[test]
fn layout_errors() {
    let text = err_text("s.yaml", "just a string\n");
    assert_mentions(&text, &["s.yaml (resource #1", "found a string"]);

    let text = err_text("w.yaml", "resources: []\nnonce: x\n");
    assert_mentions(&text, &["w.yaml", "\"nonce\""]);

    let text = err_text("w.yaml", "resources: {name: a}\n");
    assert_mentions(&text, &["w.yaml", "`resources` must be a list"]);

    let text = err_text("n.yaml", "- [1, 2]\n");
    assert_mentions(&text, &["n.yaml (resource #1", "found a list"]);

    let text = err_text("t.yaml", "\"@type\": 5\nname: a\n");
    assert_mentions(
        &text,
        &["t.yaml (resource #1", "\"@type\" must be a string"],
    );
}

#[test]
fn other_extensions_are_rejected_by_parse_file() {
    let text = err_text("notes.txt", "hello");
    assert_mentions(&text, &["notes.txt", "extension"]);
}

#[test]
fn repeated_keys_do_not_confuse_the_decoder() {
    let json = r#"{"@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster",
                   "@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster", "name": "a"}"#;
    let text = err_text("c.json", json);
    assert_mentions(&text, &["c.json (resource #1", "duplicate key \"@type\""]);
}

#[test]
fn nested_errors_name_the_field_path_in_both_formats() {
    let json = r#"{
  "@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
  "name": "ingress",
  "filterChains": [{"filters": [{"name": "hcm", "typedConfig": {
    "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
    "statPrefix": "x",
    "commonHttpProtocolOptions": {"idleTimeout": "forever"}
  }}]}]
}"#;
    let text = err_text("l.json", json);
    assert_mentions(
        &text,
        &[
            "l.json (resource #1",
            "\"ingress\"",
            "filterChains[0].filters[0].typedConfig.commonHttpProtocolOptions.idleTimeout",
            "line 7",
        ],
    );

    let yaml = r#""@type": type.googleapis.com/envoy.config.listener.v3.Listener
name: ingress
filter_chains:
- filters:
  - name: hcm
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
      stat_prefix: x
      common_http_protocol_options: { idle_timeout: forever }
"#;
    let text = err_text("l.yaml", yaml);
    assert_mentions(&text, &["l.yaml (resource #1", "idle_timeout", "line 9"]);
}

#[test]
fn a_yaml_alias_bomb_is_refused_naming_the_file_without_expanding_it() {
    // 10,000 aliases of a 10,000-item list: 10^8 nodes from a 140 KB file.
    let items = vec!["xxxxxxxx"; 10_000].join(", ");
    let refs = vec!["*a"; 10_000].join(", ");
    let text = format!(
        "\"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\nname: c\nmetadata:\n  \
         filter_metadata:\n    x:\n      a: &a [{items}]\n      b: [{refs}]\n"
    );
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("bomb.yaml"), &text).unwrap();
    let error = xdsd_source::load_directory(&crate::support::descriptors(), tmp.path())
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("bomb.yaml") && error.contains("nodes"),
        "{error}"
    );
}

#[test]
fn a_file_over_the_size_limit_is_refused_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let cluster = "\"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\nname: c\n";
    std::fs::write(tmp.path().join("ok.yaml"), cluster).unwrap();
    std::fs::write(
        tmp.path().join("big.yaml"),
        format!("{cluster}# {}\n", "x".repeat(2000)),
    )
    .unwrap();
    let limits = xdsd_source::Limits::default().max_file_bytes(1024);
    let error =
        xdsd_source::load_directory_with(&crate::support::descriptors(), tmp.path(), &limits)
            .unwrap_err()
            .to_string();
    assert!(
        error.contains("big.yaml") && error.contains("larger than 1024 bytes"),
        "{error}"
    );
    assert!(!error.contains("ok.yaml"), "{error}");
}
