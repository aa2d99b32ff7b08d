//! Variants (xRFC TP2): `"@constraints"` and its shorthand `"@match"` on resource documents.

use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::single_constraint::{
    ConstraintType, Exists,
};
use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::{
    ConstraintList, SingleConstraint, Type,
};
use envoy_types::pb::envoy::service::discovery::v3::DynamicParameterConstraints as Dpc;
use prost::Message;
use xdsd_source::check_duplicates;

use crate::support::{assert_mentions, parse, parse_err};

const CLUSTER: &str = "\"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\n";

fn eq(key: &str, value: &str) -> Dpc {
    single(key, ConstraintType::Value(value.into()))
}
fn single(key: &str, t: ConstraintType) -> Dpc {
    Dpc {
        r#type: Some(Type::Constraint(SingleConstraint {
            key: key.into(),
            constraint_type: Some(t),
        })),
    }
}
fn list(cs: Vec<Dpc>, and: bool) -> Dpc {
    let l = ConstraintList { constraints: cs };
    Dpc {
        r#type: Some(if and {
            Type::AndConstraints(l)
        } else {
            Type::OrConstraints(l)
        }),
    }
}
fn not(c: Dpc) -> Dpc {
    Dpc {
        r#type: Some(Type::NotConstraints(Box::new(c))),
    }
}

/// The constraints of the one resource of `yaml`.
fn constraints(yaml: &str) -> Option<Dpc> {
    let parsed = parse("v.yaml", yaml);
    assert_eq!(parsed.len(), 1);
    parsed[0]
        .constraints
        .as_ref()
        .map(|b| Dpc::decode(b.as_ref()).unwrap())
}

#[test]
fn constraints_in_proto3_json_single_and_or_not_exists_nested() {
    assert_eq!(
        constraints(&format!(
            "{CLUSTER}name: a\n\"@constraints\": {{constraint: {{key: env, value: prod}}}}\n"
        )),
        Some(eq("env", "prod"))
    );
    let nested = "\"@constraints\":\n  andConstraints:\n    constraints:\n    - constraint: { key: env, value: prod }\n    - not_constraints: { constraint: { key: version, exists: {} } }\n    - or_constraints: { constraints: [ { constraint: { key: z, value: a } }, { constraint: { key: z, value: b } } ] }\n";
    assert_eq!(
        constraints(&format!("{CLUSTER}name: a\n{nested}")),
        Some(list(
            vec![
                eq("env", "prod"),
                not(single("version", ConstraintType::Exists(Exists {}))),
                list(vec![eq("z", "a"), eq("z", "b")], false),
            ],
            true
        ))
    );
}

#[test]
fn no_constraints_is_the_unconstrained_resource() {
    assert_eq!(constraints(&format!("{CLUSTER}name: a\n")), None);
}

#[test]
fn match_shorthand_one_key_several_keys_and_null() {
    assert_eq!(
        constraints(&format!("{CLUSTER}name: a\n\"@match\": {{env: prod}}\n")),
        Some(eq("env", "prod"))
    );
    assert_eq!(
        constraints(&format!(
            "{CLUSTER}name: a\n\"@match\": {{env: prod, version: null}}\n"
        )),
        Some(list(
            vec![
                eq("env", "prod"),
                not(single("version", ConstraintType::Exists(Exists {})))
            ],
            true
        ))
    );
}

#[test]
fn variants_of_one_name_load_but_unconstrained_duplicates_do_not() {
    let two = format!(
        "{CLUSTER}name: a\n\"@match\": {{env: prod}}\n---\n{CLUSTER}name: a\n\"@match\": {{env: test}}\n"
    );
    let parsed = parse("v.yaml", &two);
    assert_eq!(parsed.len(), 2);
    check_duplicates(&parsed).unwrap();
    let err = parse_err(
        "d.yaml",
        &format!("{CLUSTER}name: a\n---\n{CLUSTER}name: a\n"),
    );
    assert_mentions(&err.to_string(), &["duplicate resource", "\"a\""]);
}

#[test]
fn constraint_errors_name_the_file_the_resource_and_what_is_wrong() {
    let cases = [
        (
            "\"@constraints\": {constraint: {key: env, valeu: prod}}",
            "valeu",
        ),
        (
            "\"@constraints\": {constraint: {key: [env]}}",
            "\"@constraints\"",
        ),
        ("\"@match\": {version: 1}", "write it as a string: \"1\""),
        ("\"@match\": {}", "at least one key"),
        ("\"@match\": [env]", "must be a mapping"),
        (
            "\"@match\": {env: prod}\n\"@constraints\": {constraint: {key: env, value: prod}}",
            "not both",
        ),
    ];
    for (doc, needle) in cases {
        let err = parse_err("bad.yaml", &format!("{CLUSTER}name: a\n{doc}\n")).to_string();
        assert_mentions(&err, &["bad.yaml (resource #1", "\"a\"", needle]);
    }
}
