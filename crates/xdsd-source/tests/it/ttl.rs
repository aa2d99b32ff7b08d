//! `"@ttl"`: a resource's TTL (spec "TTL"), a proto3 JSON duration beside `"@type"`.

use std::time::Duration;

use crate::support::{assert_mentions, parse, parse_err};

fn runtime(ttl: &str) -> String {
    format!(
        "\"@type\": type.googleapis.com/envoy.service.runtime.v3.Runtime\n\
         name: faults\n{ttl}layer: {{fault.abort: 50}}\n"
    )
}

#[test]
fn ttl_is_a_proto3_json_duration() {
    for (text, want) in [
        ("\"@ttl\": 30s\n", Duration::from_secs(30)),
        ("\"@ttl\": \"1.5s\"\n", Duration::from_millis(1500)),
        ("\"@ttl\": 3600s\n", Duration::from_secs(3600)),
    ] {
        let parsed = parse("r.yaml", &runtime(text));
        assert_eq!(parsed[0].ttl, Some(want), "{text}");
    }
}

#[test]
fn a_resource_without_ttl_has_none_and_the_key_is_not_part_of_the_message() {
    let with = parse("r.yaml", &runtime("\"@ttl\": 30s\n"));
    let without = parse("r.yaml", &runtime(""));
    assert_eq!(without[0].ttl, None);
    assert_eq!(with[0].value, without[0].value);
}

#[test]
fn a_bad_ttl_names_the_resource_and_what_is_wrong() {
    for (ttl, needle) in [
        ("\"@ttl\": soon\n", "expected a duration such as \"30s\""),
        ("\"@ttl\": 30\n", "expected a duration such as \"30s\""),
        ("\"@ttl\": 0.5s\n", "too short: a TTL is at least 1s"),
        ("\"@ttl\": -5s\n", "too short"),
        ("\"@ttl\": 0s\n", "too short"),
    ] {
        let err = parse_err("r.yaml", &runtime(ttl)).to_string();
        assert_mentions(&err, &["r.yaml", "resource #1", "\"@ttl\"", needle]);
    }
}
