use std::fs;
use std::path::Path;

use xdsd_source::{load_directory, SourceError};

use crate::support::{assert_mentions, descriptors};

pub fn cluster_yaml(name: &str) -> String {
    format!("\"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\nname: {name}\nconnect_timeout: 1s\n")
}

pub fn write(dir: &Path, rel: &str, text: &str) {
    let path = dir.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

#[test]
fn loads_recursively_in_sorted_order() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(dir, "b.yaml", &cluster_yaml("b"));
    write(dir, "a/z.yml", &cluster_yaml("az"));
    write(
        dir,
        "a/deeper/x.json",
        r#"{"@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster", "name": "ax"}"#,
    );
    write(dir, "c.YAML", &cluster_yaml("c"));
    write(dir, "empty.yaml", "");

    let resources = load_directory(&descriptors(), dir).unwrap();
    let names: Vec<_> = resources.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["ax", "az", "b", "c"]);
    let origin = format!("{} (resource #1)", dir.join("a/deeper/x.json").display());
    assert_eq!(resources[0].origin, origin);
}

#[test]
fn skips_other_extensions_hidden_entries_and_editor_files() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(dir, "real.yaml", &cluster_yaml("real"));
    for ignored in [
        "README.md",
        "notes.txt",
        "config.yaml.bak",
        ".hidden.yaml",
        ".git/config.yaml",
        ".cache/nested/x.json",
        "real.yaml~",
        "backup.yaml~",
        ".real.yaml.swp",
        "#real.yaml#",
        "sub/.also-hidden.yml",
    ] {
        write(dir, ignored, "this is not: [valid");
    }
    let resources = load_directory(&descriptors(), dir).unwrap();
    assert_eq!(resources.len(), 1);
    assert_eq!(resources[0].name, "real");
}

#[cfg(unix)]
#[test]
fn follows_symlinks_like_a_configmap_volume() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // Kubernetes: ..2024_01/clusters.yaml, ..data -> ..2024_01, clusters.yaml -> ..data/clusters.yaml
    write(
        dir,
        "..2024_01/clusters.yaml",
        &cluster_yaml("from-configmap"),
    );
    std::os::unix::fs::symlink("..2024_01", dir.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/clusters.yaml", dir.join("clusters.yaml")).unwrap();
    // A loop must not hang the walk.
    std::os::unix::fs::symlink(".", dir.join("loop")).unwrap();
    std::os::unix::fs::symlink("missing.yaml", dir.join("dangling.yaml")).unwrap();

    let resources = load_directory(&descriptors(), dir).unwrap();
    let names: Vec<_> = resources.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["from-configmap"]);
}

#[test]
fn duplicates_across_files_name_both_origins() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(dir, "one.yaml", &cluster_yaml("same"));
    write(
        dir,
        "sub/two.yaml",
        &format!(
            "---\n{}---\n{}",
            cluster_yaml("other"),
            cluster_yaml("same")
        ),
    );
    let err = load_directory(&descriptors(), dir).unwrap_err();
    assert!(matches!(err, SourceError::Duplicate { .. }), "{err:?}");
    let first = format!("{} (resource #1)", dir.join("one.yaml").display());
    let second = format!("{} (resource #2)", dir.join("sub/two.yaml").display());
    assert_mentions(
        &err.to_string(),
        &["duplicate", "\"same\"", &first, &second],
    );
}

#[test]
fn every_bad_file_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(dir, "good.yaml", &cluster_yaml("good"));
    write(dir, "bad1.yaml", "key: [unclosed\n");
    write(
        dir,
        "bad2.json",
        r#"{"@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster", "name": "x", "nope": 1}"#,
    );
    let err = load_directory(&descriptors(), dir).unwrap_err();
    assert_eq!(err.errors().len(), 2, "{err}");
    assert_mentions(
        &err.to_string(),
        &["2 errors", "bad1.yaml", "bad2.json", "nope"],
    );
}

#[test]
fn missing_directory_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    let err = load_directory(&descriptors(), &missing).unwrap_err();
    assert!(matches!(err, SourceError::Io { .. }), "{err:?}");
    assert_mentions(&err.to_string(), &["nope"]);

    let file = tmp.path().join("file.yaml");
    fs::write(&file, "").unwrap();
    let err = load_directory(&descriptors(), &file).unwrap_err();
    assert_mentions(&err.to_string(), &["file.yaml", "not a directory"]);
}
