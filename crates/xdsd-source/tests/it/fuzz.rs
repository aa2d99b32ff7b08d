//! The resource-file parser as a fuzz target, run as a property test for a fixed budget in every
//! test run: arbitrary text and mutated valid files (YAML and JSON, anchors and aliases, deep
//! nesting, odd numbers, `@type`/`@ttl`/`@constraints`) never panic, and an error names the
//! file. `XDSD_FUZZ_CASES` sets the cases (default 256); see docs/fuzzing.md.

use std::path::Path;
use std::sync::OnceLock;

use proptest::prelude::*;
use xdsd_source::{parse_file, Descriptors};

fn descriptors() -> &'static Descriptors {
    static D: OnceLock<Descriptors> = OnceLock::new();
    D.get_or_init(crate::support::descriptors)
}

/// Valid files to mutate.
const SEEDS: [&str; 4] = [
    "\"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\nname: c\ntype: STATIC\nconnect_timeout: 1s\nload_assignment:\n  cluster_name: c\n  endpoints:\n  - lb_endpoints:\n    - endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 8080 } } }\n",
    "\"@type\": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment\n\"@constraints\": { constraint: { key: env, value: prod } }\n\"@ttl\": 30s\ncluster_name: e\n---\n\"@type\": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment\n\"@constraints\": { constraint: { key: env, value: test } }\ncluster_name: e\n",
    "base: &base { connect_timeout: 1s, type: STATIC }\nresources:\n- \"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\n  name: a\n  <<: *base\n- \"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\n  name: b\n  <<: *base\n",
    "{\"@type\": \"type.googleapis.com/envoy.config.route.v3.RouteConfiguration\", \"name\": \"r\", \"virtual_hosts\": [{\"name\": \"v\", \"domains\": [\"*\"], \"routes\": [{\"match\": {\"prefix\": \"/\"}, \"route\": {\"cluster\": \"c\", \"timeout\": \"1.5s\"}}]}]}",
];

/// Pieces that tend to reach the parser's corners.
const TOKENS: [&str; 16] = [
    "&a ",
    "*a",
    "<<: ",
    "[",
    "]",
    "{",
    "}",
    ": ",
    "\n- ",
    "\n  ",
    "---\n",
    "\"@type\"",
    "\"@ttl\": ",
    "1e999",
    "-0x1f",
    "\u{feff}",
];

fn path() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just("f.yaml"), Just("f.yml"), Just("f.json")]
}

proptest! {
    #![proptest_config(xdsd_testsupport::fuzz::config())]

    /// Any text: parsed or an error naming the file, never a panic.
    #[test]
    fn arbitrary_text_never_panics_the_resource_file_parser(text in "\\PC{0,400}", path in path()) {
        if let Err(e) = parse_file(descriptors(), Path::new(path), &text) {
            prop_assert!(e.to_string().contains(path), "{e}");
        }
    }

    /// Valid files with tokens inserted, bytes replaced or cut: parsed or an error naming the
    /// file, never a panic.
    #[test]
    fn mutated_resource_files_never_panic_the_parser(
        seed in 0..SEEDS.len(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0..TOKENS.len(), 0..3u8), 1..8),
        path in path(),
    ) {
        let mut text = SEEDS[seed].to_owned();
        for (at, token, op) in edits {
            // A char boundary at or before the chosen index.
            let mut i = at.index(text.len() + 1).min(text.len());
            while !text.is_char_boundary(i) {
                i -= 1;
            }
            match op {
                0 => text.insert_str(i, TOKENS[token]),
                1 => text.truncate(i),
                _ => {
                    let end = (i + TOKENS[token].len()).min(text.len());
                    let mut end = end;
                    while !text.is_char_boundary(end) {
                        end -= 1;
                    }
                    text.replace_range(i..end, TOKENS[token]);
                }
            }
        }
        if let Err(e) = parse_file(descriptors(), Path::new(path), &text) {
            prop_assert!(e.to_string().contains(path), "{e}");
        }
    }

    /// Deep nesting (lists and maps, YAML and JSON): an error or a parse, never a stack overflow.
    #[test]
    fn deeply_nested_files_never_overflow_the_parser(depth in 1usize..3000, json in any::<bool>()) {
        let (open, close, path) = if json { ("[", "]", "f.json") } else { ("[", "]", "f.yaml") };
        let text = format!(
            "{{\"@type\": \"type.googleapis.com/envoy.config.cluster.v3.Cluster\", \"name\": \"c\", \"metadata\": {{\"filter_metadata\": {{\"x\": {{\"a\": {}{}}}}}}}}}",
            open.repeat(depth),
            close.repeat(depth)
        );
        if let Err(e) = parse_file(descriptors(), Path::new(path), &text) {
            prop_assert!(e.to_string().contains(path), "{e}");
        }
    }
}
