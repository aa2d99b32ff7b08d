//! `xdsd check --resources DIR`: the directory as `serve` would load it (files, store rules,
//! references), every error on stderr naming the file and the reason, exit 1; a summary per
//! type and exit 0 when valid; exit 2 for a usage error.

use std::path::Path;
use std::process::Output;

use crate::support::{repo_root, ResourceDir, CLUSTER, ROUTE};

fn check(dir: &Path, extra: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_xdsd"))
        .arg("check")
        .arg("--resources")
        .arg(dir)
        .args(extra)
        .env_remove("XDSD_REFERENCES")
        .env_remove("XDSD_EXTERNAL_NAMES")
        .output()
        .expect("xdsd check runs")
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn run(dir: &Path, extra: &[&str]) -> Run {
    let out = check(dir, extra);
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[track_caller]
fn assert_mentions(text: &str, needles: &[&str], what: &str) {
    for needle in needles {
        assert!(
            text.contains(needle),
            "{what}: expected {needle:?} in:\n{text}"
        );
    }
}

fn cluster_yaml(name: &str) -> String {
    format!("\"@type\": {CLUSTER}\nname: {name}\ntype: STATIC\nconnect_timeout: 1s\n")
}

fn route_yaml(name: &str, cluster: &str) -> String {
    format!(
        "\"@type\": {ROUTE}
name: {name}
virtual_hosts:
- name: all
  domains: [\"*\"]
  routes:
  - match: {{ prefix: / }}
    route: {{ cluster: {cluster} }}
"
    )
}

#[test]
fn a_valid_directory_exits_zero_with_counts_per_type() {
    let dir = repo_root().join("examples/basic/resources");
    let run = run(&dir, &[]);
    assert_eq!(run.code, Some(0), "stderr:\n{}", run.stderr);
    assert!(run.stderr.is_empty(), "nothing on stderr: {}", run.stderr);
    assert_mentions(&run.stdout, &["valid, 4 resources"], "the summary");
    for (stem, type_url) in [
        ("clusters", CLUSTER),
        ("endpoints", crate::support::ENDPOINTS),
        ("listeners", crate::support::LISTENER),
        ("routes", ROUTE),
    ] {
        let line = run
            .stdout
            .lines()
            .find(|l| l.contains(type_url))
            .unwrap_or_else(|| panic!("a line for {type_url} in:\n{}", run.stdout));
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words, [stem, "1", type_url], "the line of {type_url}");
    }
}

#[test]
fn lb_endpoints_are_labelled_and_counted_by_collection() {
    // examples/leds: two LbEndpoint members of one LEDS collection.
    let dir = repo_root().join("examples/leds/resources");
    let run = run(&dir, &[]);
    assert_eq!(run.code, Some(0), "stderr:\n{}", run.stderr);
    let lb = "type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint";
    let line = run
        .stdout
        .lines()
        .find(|l| l.contains(lb))
        .unwrap_or_else(|| panic!("a line for {lb} in:\n{}", run.stdout));
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        words,
        ["lb_endpoints", "2", "in", "1", "collection", lb],
        "{line}"
    );
}

/// One invalid directory: its files, and what stderr must name.
struct BadCase {
    what: &'static str,
    files: Vec<(&'static str, String)>,
    needles: Vec<&'static str>,
}

fn bad_cases() -> Vec<BadCase> {
    vec![
        BadCase {
            what: "malformed YAML",
            files: vec![("bad.yaml", "\"@type\": [unclosed\nname: : x\n".into())],
            needles: vec!["bad.yaml", "malformed YAML", "line 2"],
        },
        BadCase {
            what: "unknown field",
            files: vec![(
                "unknown.yaml",
                format!("{}no_such_field: 1\n", cluster_yaml("c")),
            )],
            needles: vec!["unknown.yaml", "no_such_field", "line 5"],
        },
        BadCase {
            what: "unknown @type",
            files: vec![(
                "type.yaml",
                "\"@type\": type.googleapis.com/envoy.config.cluster.v3.NoSuchMessage\nname: y\n"
                    .into(),
            )],
            needles: vec!["type.yaml", "NoSuchMessage"],
        },
        BadCase {
            what: "duplicate name",
            files: vec![
                ("one.yaml", cluster_yaml("same")),
                ("two.yaml", cluster_yaml("same")),
            ],
            needles: vec!["one.yaml", "two.yaml", "duplicate", "\"same\""],
        },
        BadCase {
            what: "dangling reference",
            files: vec![
                ("route.yaml", route_yaml("r", "missing")),
                ("cluster.yaml", cluster_yaml("other")),
            ],
            needles: vec![
                "route.yaml",
                "Cluster \"missing\"",
                "does not exist",
                "--external-name",
            ],
        },
        BadCase {
            // Checked when the store's inputs are made, as by `serve`; every one listed.
            what: "constraints with an empty key",
            files: vec![
                (
                    "empty-a.yaml",
                    format!("\"@match\": {{ \"\": prod }}\n{}", cluster_yaml("a")),
                ),
                (
                    "empty-b.yaml",
                    format!("\"@match\": {{ \"\": prod }}\n{}", cluster_yaml("b")),
                ),
            ],
            needles: vec!["empty-a.yaml", "empty-b.yaml", "@constraints", "empty key"],
        },
        BadCase {
            // A store rule (xRFC TP2), checked at commit as by `serve`.
            what: "variants constraining different keys",
            files: vec![
                (
                    "prod.yaml",
                    format!("\"@match\": {{ env: prod }}\n{}", cluster_yaml("v")),
                ),
                (
                    "eu.yaml",
                    format!("\"@match\": {{ region: eu }}\n{}", cluster_yaml("v")),
                ),
            ],
            needles: vec!["prod.yaml", "eu.yaml", "different keys"],
        },
    ]
}

#[test]
fn each_invalid_directory_exits_one_naming_the_file_and_the_reason() {
    for case in bad_cases() {
        let dir = ResourceDir::new();
        for (name, contents) in &case.files {
            dir.write(name, contents);
        }
        let run = run(&dir.path(), &[]);
        assert_eq!(run.code, Some(1), "{}: stderr:\n{}", case.what, run.stderr);
        assert_mentions(&run.stderr, &case.needles, case.what);
        assert_mentions(&run.stderr, &["error: ", "xdsd check: "], case.what);
        assert!(
            run.stdout.is_empty(),
            "{}: no summary: {}",
            case.what,
            run.stdout
        );
    }
}

#[test]
fn every_bad_file_is_listed_at_once() {
    let dir = ResourceDir::new();
    dir.write("bad.yaml", "\"@type\": [unclosed\n");
    dir.write(
        "unknown.yaml",
        &format!("{}no_such_field: 1\n", cluster_yaml("c")),
    );
    dir.write("good.yaml", &cluster_yaml("g"));
    let run = run(&dir.path(), &[]);
    assert_eq!(run.code, Some(1), "stderr:\n{}", run.stderr);
    let errors = error_lines(&run.stderr);
    assert_eq!(errors.len(), 2, "one line per bad file:\n{}", run.stderr);
    assert_mentions(errors[0], &["bad.yaml"], "first error");
    assert_mentions(
        errors[1],
        &["unknown.yaml", "no_such_field"],
        "second error",
    );
    assert_mentions(&run.stderr, &["2 errors"], "the count");
}

#[test]
fn references_are_checked_among_the_files_that_parse_while_others_fail() {
    let dir = ResourceDir::new();
    dir.write("broken.yaml", "\"@type\": [unclosed\n");
    dir.write("route.yaml", &route_yaml("r", "no_such_cluster"));
    dir.write("cluster.yaml", &cluster_yaml("c"));
    // The same name twice: one error, and the first is checked.
    dir.write("twice.yaml", &cluster_yaml("c"));
    let run = run(&dir.path(), &[]);
    assert_eq!(run.code, Some(1), "stderr:\n{}", run.stderr);
    let errors = error_lines(&run.stderr);
    assert_eq!(
        errors.len(),
        3,
        "file, duplicate, reference:\n{}",
        run.stderr
    );
    assert_mentions(
        errors[0],
        &["broken.yaml", "malformed YAML"],
        "the file error",
    );
    assert_mentions(errors[1], &["duplicate", "twice.yaml"], "the duplicate");
    assert_mentions(
        errors[2],
        &["Cluster \"no_such_cluster\"", "does not exist"],
        "the reference among the files that parsed",
    );
    let note: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.starts_with("note: "))
        .collect();
    assert_eq!(note.len(), 1, "{}", run.stderr);
    assert_mentions(
        note[0],
        &["2 resources", "broken.yaml", "could not be checked"],
        "which resources could not be checked",
    );
    assert!(!note[0].contains("twice.yaml"), "{}", note[0]);
    assert_mentions(&run.stderr, &["3 errors"], "the count");

    // The same directory with the route's cluster defined: nothing but the file errors.
    dir.write("route.yaml", &route_yaml("r", "c"));
    let run = crate::cli_check::run(&dir.path(), &[]);
    assert_eq!(run.code, Some(1), "stderr:\n{}", run.stderr);
    assert!(!run.stderr.contains("does not exist"), "{}", run.stderr);
    assert_mentions(&run.stderr, &["2 errors"], "the count");
}

/// A misspelt field fails its file; the reference to the resource that file holds is not a
/// second error but a note naming the file. A reference one typo away from an existing name is
/// an error that suggests it.
#[test]
fn one_typo_is_one_error_and_a_near_name_is_suggested() {
    let dir = ResourceDir::new();
    dir.write(
        "cluster.yaml",
        &format!("\"@type\": {CLUSTER}\nname: backend\ntype: STATIC\nconect_timeout: 1s\n"),
    );
    dir.write("route.yaml", &route_yaml("r", "backend"));
    let run = run(&dir.path(), &[]);
    assert_eq!(run.code, Some(1), "stderr:\n{}", run.stderr);
    let errors = error_lines(&run.stderr);
    assert_eq!(errors.len(), 1, "the typo, once:\n{}", run.stderr);
    // At the key's column, not its value's.
    assert_mentions(
        errors[0],
        &["cluster.yaml", "conect_timeout", "at line 4 column 1;"],
        "the typo",
    );
    assert_mentions(
        &run.stderr,
        &[
            "note: Cluster \"backend\", which ",
            "route.yaml (resource #1): RouteConfiguration \"r\"",
            "cluster.yaml, which failed above: not a second error",
        ],
        "the reference to the cluster of the failed file",
    );
    assert_mentions(&run.stderr, &["1 error"], "the count");
    assert!(!run.stderr.contains("2 errors"), "{}", run.stderr);

    dir.write("cluster.yaml", &cluster_yaml("backend"));
    dir.write("route.yaml", &route_yaml("r", "backnd"));
    let run = crate::cli_check::run(&dir.path(), &[]);
    assert_eq!(run.code, Some(1), "stderr:\n{}", run.stderr);
    let errors = error_lines(&run.stderr);
    assert_eq!(errors.len(), 1, "{}", run.stderr);
    assert_mentions(
        errors[0],
        &[
            "Cluster \"backnd\"",
            "does not exist",
            "did you mean \"backend\"?",
        ],
        "the dangling name",
    );
}

#[test]
fn references_and_external_names_are_the_flags_of_serve() {
    let dir = ResourceDir::new();
    dir.write("route.yaml", &route_yaml("r", "xds_cluster"));

    let strict = run(&dir.path(), &[]);
    assert_eq!(strict.code, Some(1), "strict by default: {}", strict.stderr);

    let warn = run(&dir.path(), &["--references", "warn"]);
    assert_eq!(warn.code, Some(0), "warn applies: {}", warn.stderr);
    assert_mentions(
        &warn.stderr,
        &["warning: ", "Cluster \"xds_cluster\"", "does not exist"],
        "--references warn",
    );

    let external = run(&dir.path(), &["--external-name", "cluster:xds_cluster"]);
    assert_eq!(external.code, Some(0), "external: {}", external.stderr);
    assert!(external.stderr.is_empty(), "{}", external.stderr);

    let off = run(&dir.path(), &["--references", "off"]);
    assert_eq!(off.code, Some(0), "off: {}", off.stderr);
}

#[test]
fn usage_errors_exit_two() {
    let dir = ResourceDir::new();
    let missing = dir.path().join("no-such-dir");
    let run_missing = run(&missing, &[]);
    assert_eq!(run_missing.code, Some(2), "{}", run_missing.stderr);
    assert_mentions(
        &run_missing.stderr,
        &["no-such-dir", "the directory does not exist"],
        "a missing directory",
    );

    dir.write("c.yaml", &cluster_yaml("c"));
    let file = run(&dir.file("c.yaml"), &[]);
    assert_eq!(file.code, Some(2), "{}", file.stderr);
    assert_mentions(&file.stderr, &["not a directory"], "a file");

    let bad_flag = run(&dir.path(), &["--references", "sometimes"]);
    assert_eq!(bad_flag.code, Some(2), "{}", bad_flag.stderr);

    let no_dir = std::process::Command::new(env!("CARGO_BIN_EXE_xdsd"))
        .arg("check")
        .env_remove("XDSD_RESOURCES")
        .output()
        .expect("xdsd check runs");
    assert_eq!(no_dir.status.code(), Some(2));
}

/// The `error: ` lines of `check`'s standard error, in order.
fn error_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("error: "))
        .collect()
}

/// A file the YAML parser gives up on (a bracket left open) still says what it meant to
/// define where its lines can be read: a cluster's reference to the endpoints of that file is a
/// note, not a second error; a route's near miss of a cluster in it is suggested.
#[test]
fn a_malformed_file_is_one_error_and_its_readable_names_still_count() {
    let eds_cluster = format!(
        "\"@type\": {CLUSTER}\nname: backend\ntype: EDS\nconnect_timeout: 1s\n\
         eds_cluster_config: {{ eds_config: {{ ads: {{}} }} }}\n"
    );
    let dir = ResourceDir::new();
    dir.write("cluster.yaml", &eds_cluster);
    dir.write(
        "endpoints.yaml",
        &format!(
            "\"@type\": {}\ncluster_name: backend\nendpoints:\n- lb_endpoints:\n  - endpoint: \
             {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: 80 }}\n",
            crate::support::ENDPOINTS
        ),
    );
    let run = run(&dir.path(), &[]);
    assert_eq!(run.code, Some(1), "stderr:\n{}", run.stderr);
    let errors = error_lines(&run.stderr);
    assert_eq!(errors.len(), 1, "the malformed file, once:\n{}", run.stderr);
    assert_mentions(errors[0], &["endpoints.yaml", "malformed YAML"], "the file");
    assert_mentions(
        &run.stderr,
        &[
            "note: ClusterLoadAssignment \"backend\", which ",
            "endpoints.yaml, which failed above: not a second error",
            "1 error",
        ],
        "the knock-on reference",
    );

    let dir = ResourceDir::new();
    dir.write(
        "cluster.yaml",
        &format!(
            "{}load_assignment: {{ cluster_name: backend\n",
            cluster_yaml("backend")
        ),
    );
    dir.write("route.yaml", &route_yaml("r", "backnd"));
    let run = crate::cli_check::run(&dir.path(), &[]);
    assert_eq!(run.code, Some(1), "stderr:\n{}", run.stderr);
    let errors = error_lines(&run.stderr);
    assert_eq!(errors.len(), 2, "{}", run.stderr);
    assert_mentions(
        errors[1],
        &["Cluster \"backnd\"", "did you mean \"backend\"?"],
        "the near miss of a name in the malformed file",
    );
}
