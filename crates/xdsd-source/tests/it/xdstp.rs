//! `xdstp://` names in resource files (#57): `"@name"` for types without a name field, names
//! kept canonical, malformed names an error naming the file, the resource and what is wrong.

use xdsd_source::{Problem, SourceError};

use crate::support::{assert_mentions, parse, parse_err};

const LB_ENDPOINT: &str = "type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint";

#[test]
fn lb_endpoint_is_named_by_at_name_canonically() {
    let yaml = r#"
"@type": type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint
"@name": xdstp://xds.example/envoy.config.endpoint.v3.LbEndpoint/c1/ep1?zone=b&region=a
endpoint:
  address: {socket_address: {address: 127.0.0.1, port_value: 8080}}
"#;
    let resources = parse("ep1.yaml", yaml);
    assert_eq!(resources.len(), 1);
    assert_eq!(resources[0].type_url, LB_ENDPOINT);
    assert_eq!(
        resources[0].name,
        "xdstp://xds.example/envoy.config.endpoint.v3.LbEndpoint/c1/ep1?region=a&zone=b"
    );
}

#[test]
fn a_name_field_with_xdstp_is_kept_canonical() {
    let yaml = r#"
"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
name: xdstp://a/envoy.config.cluster.v3.Cluster/c%2fx?b=2&a=1
"#;
    let resources = parse("c.yaml", yaml);
    assert_eq!(
        resources[0].name,
        "xdstp://a/envoy.config.cluster.v3.Cluster/c%2Fx?a=1&b=2"
    );
}

#[test]
fn at_name_beside_a_name_field_must_be_the_same_name() {
    let same = r#"
"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
"@name": xdstp://a/envoy.config.cluster.v3.Cluster/c?a=1&b=2
name: xdstp://a/envoy.config.cluster.v3.Cluster/c?b=2&a=1
"#;
    assert_eq!(
        parse("c.yaml", same)[0].name,
        "xdstp://a/envoy.config.cluster.v3.Cluster/c?a=1&b=2"
    );
    let other = r#"
"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
"@name": xdstp://a/envoy.config.cluster.v3.Cluster/c
name: d
"#;
    let err = parse_err("c.yaml", other);
    assert_mentions(
        &err.to_string(),
        &["c.yaml (resource #1", "\"@name\"", "\"d\""],
    );
}

#[test]
fn at_name_fills_a_missing_name_field() {
    let yaml = r#"
"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
"@name": xdstp://a/envoy.config.cluster.v3.Cluster/c
"#;
    let resources = parse("c.yaml", yaml);
    assert_eq!(
        resources[0].name,
        "xdstp://a/envoy.config.cluster.v3.Cluster/c"
    );
}

fn name_problem(path: &str, yaml: &str) -> String {
    let err = parse_err(path, yaml);
    let SourceError::Resource { problem, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(matches!(problem, Problem::Name(_)), "{problem:?}");
    err.to_string()
}

#[test]
fn malformed_xdstp_names_are_errors_naming_file_resource_and_fault() {
    let dup = r#"
"@type": type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint
"@name": xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/e?k=1&k=2
"#;
    assert_mentions(
        &name_problem("e.yaml", dup),
        &["e.yaml (resource #1", "LbEndpoint", "\"k\" appears twice"],
    );
    let wrong_type = r#"
"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
name: xdstp://a/envoy.config.listener.v3.Listener/c
"#;
    assert_mentions(
        &name_problem("c.yaml", wrong_type),
        &[
            "c.yaml (resource #1",
            "envoy.config.listener.v3.Listener",
            "not the resource's type",
        ],
    );
    let glob = r#"
"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
name: xdstp://a/envoy.config.cluster.v3.Cluster/c/*
"#;
    assert_mentions(&name_problem("g.yaml", glob), &["glob"]);
    let percent = r#"
"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
name: xdstp://a/envoy.config.cluster.v3.Cluster/c%4
"#;
    assert_mentions(&name_problem("p.yaml", percent), &["hexadecimal"]);
    let not_xdstp = r#"
"@type": type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint
"@name": ep1
"#;
    assert_mentions(
        &name_problem("n.yaml", not_xdstp),
        &["must be an xdstp:// name"],
    );
}

#[test]
fn a_type_without_name_field_or_at_name_says_how_to_name_it() {
    let yaml = r#"
"@type": type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint
endpoint:
  address: {socket_address: {address: 127.0.0.1, port_value: 8080}}
"#;
    let err = parse_err("e.yaml", yaml);
    assert_mentions(
        &err.to_string(),
        &["e.yaml (resource #1", "\"@name\": xdstp://"],
    );
}

#[test]
fn same_resource_in_two_parameter_orders_is_a_duplicate() {
    let yaml = r#"
- "@type": type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint
  "@name": xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/e?x=1&y=2
- "@type": type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint
  "@name": xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/e?y=2&x=1
"#;
    let err = parse_err("d.yaml", yaml);
    assert!(matches!(err, SourceError::Duplicate { .. }), "{err:?}");
}
