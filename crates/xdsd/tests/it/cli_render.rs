//! `xdsd render --resources DIR --out DIR --format ...`: one `DiscoveryResponse` file per type
//! and format, which read back through the descriptors to the same message whatever the format,
//! and which hold exactly what `xdsd serve` serves (same resources, same version). An invalid
//! directory writes nothing (exit 1); an output directory inside the resources is refused
//! (exit 2).

use std::path::Path;
use std::process::Output;

use crate::support::ads;
use crate::support::scenario::{basic_resources, Transport};
use crate::support::{unique_name, ResourceDir, Xdsd, CLUSTER, ENDPOINTS, LISTENER, ROUTE};
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse;
use prost::Message;
use xdsd_source::{read_discovery_response, Descriptors, FileFormat};

const SECRET: &str = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret";
const RUNTIME: &str = "type.googleapis.com/envoy.service.runtime.v3.Runtime";
const EXTENSION_CONFIG: &str = "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig";
/// A type without a short name of its own: its file is named by the message.
const ROUTE_ENTRY: &str = "type.googleapis.com/envoy.config.route.v3.Route";

fn render(resources: &Path, out: &Path, extra: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_xdsd"))
        .arg("render")
        .arg("--resources")
        .arg(resources)
        .arg("--out")
        .arg(out)
        .args(extra)
        .env_remove("XDSD_REFERENCES")
        .env_remove("XDSD_EXTERNAL_NAMES")
        .output()
        .expect("xdsd render runs")
}

/// The resources of `basic_resources` (listener with an HTTP connection manager, route,
/// cluster, endpoints) and one of each other kind.
fn resources() -> ResourceDir {
    let dir = basic_resources(Transport::Ads, 8080);
    dir.write(
        "more.yaml",
        &format!(
            "\"@type\": {SECRET}
name: ca
validation_context:
  trusted_ca: {{ inline_string: \"-----BEGIN CERTIFICATE-----\\nMIIB\\n-----END CERTIFICATE-----\\n\" }}
---
\"@type\": {RUNTIME}
name: layer
layer: {{ feature: {{ enabled: \"on\", ratio: 0.25 }}, big: 12345678901 }}
---
\"@type\": {EXTENSION_CONFIG}
name: router
typed_config:
  \"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
---
\"@type\": {ROUTE_ENTRY}
name: entry
match: {{ prefix: /x }}
direct_response: {{ status: 204 }}
"
        ),
    );
    dir
}

fn descriptors() -> Descriptors {
    Descriptors::envoy().expect("the embedded descriptors")
}

/// The files of `type_url` (its stem) in the three formats, read back to canonical bytes.
fn read_all(out: &Path, stem: &str) -> Vec<(FileFormat, Vec<u8>)> {
    FileFormat::ALL
        .iter()
        .map(|&format| {
            let path = out.join(format!("{stem}.{}", format.extension()));
            let bytes = std::fs::read(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            let read = read_discovery_response(&descriptors(), format, &bytes)
                .unwrap_or_else(|e| panic!("{} does not read back: {e}", path.display()));
            (format, read)
        })
        .collect()
}

#[test]
fn every_type_in_every_format_reads_back_to_the_same_response() {
    let dir = resources();
    let out = tempfile::tempdir().expect("a temporary directory");
    let run = render(
        &dir.path(),
        out.path(),
        &["--format", "pb", "--format", "json,yaml"],
    );
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "stderr:\n{stderr}");
    let stdout = String::from_utf8_lossy(&run.stdout);

    for (stem, type_url, count) in [
        ("listeners", LISTENER, 1),
        ("routes", ROUTE, 1),
        ("clusters", CLUSTER, 1),
        ("endpoints", ENDPOINTS, 1),
        ("secrets", SECRET, 1),
        ("runtime", RUNTIME, 1),
        ("extension_configs", EXTENSION_CONFIG, 1),
        ("envoy.config.route.v3.Route", ROUTE_ENTRY, 1),
    ] {
        let files = read_all(out.path(), stem);
        let (_, pb) = &files[0];
        for (format, read) in &files[1..] {
            assert_eq!(read, pb, "{stem}.{format} holds what {stem}.pb holds");
        }
        let response = DiscoveryResponse::decode(pb.as_slice()).expect("a DiscoveryResponse");
        assert_eq!(response.type_url, type_url, "{stem}");
        assert_eq!(response.version_info.len(), 16, "{stem}: a version");
        assert_eq!(response.resources.len(), count, "{stem}");
        assert!(
            response.resources.iter().all(|r| r.type_url == type_url),
            "{stem}: resources are Anys of the type"
        );
        assert!(
            stdout.contains(&format!("{stem}.yaml")),
            "{stem}.yaml is listed:\n{stdout}"
        );
    }

    // The listener's HTTP connection manager is written as an Any with its @type and fields.
    let json = std::fs::read_to_string(out.path().join("listeners.json")).expect("listeners.json");
    let value: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    let hcm = &value["resources"][0]["filter_chains"][0]["filters"][0]["typed_config"];
    assert_eq!(
        hcm["@type"],
        "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
    );
    assert_eq!(hcm["rds"]["route_config_name"], "route_0");
    // No temporary file is left.
    let hidden: Vec<String> = std::fs::read_dir(out.path())
        .expect("the output")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(hidden.is_empty(), "{hidden:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_files_hold_what_serve_serves() {
    let dir = resources();
    let out = tempfile::tempdir().expect("a temporary directory");
    let run = render(&dir.path(), out.path(), &["--format", "pb"]);
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    for (stem, type_url) in [("clusters", CLUSTER), ("listeners", LISTENER)] {
        let file = std::fs::read(out.path().join(format!("{stem}.pb"))).expect("the file");
        let file = DiscoveryResponse::decode(file.as_slice()).expect("a DiscoveryResponse");
        let served = ads::fetch(&xdsd.url(), &unique_name("render-node"), type_url, &[])
            .await
            .unwrap_or_else(|e| panic!("{type_url} over ADS: {e}"));
        assert_eq!(
            file.version_info, served.version_info,
            "{stem}: the version"
        );
        assert_eq!(file.resources, served.resources, "{stem}: the resources");
    }
}

#[test]
fn an_invalid_directory_writes_nothing() {
    let dir = ResourceDir::new();
    dir.write(
        "bad.yaml",
        &format!("\"@type\": {CLUSTER}\nname: c\nno_such_field: 1\n"),
    );
    let out = tempfile::tempdir().expect("a temporary directory");
    let run = render(&dir.path(), out.path(), &[]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("bad.yaml") && stderr.contains("no_such_field"),
        "{stderr}"
    );
    let written = std::fs::read_dir(out.path()).expect("the output").count();
    assert_eq!(written, 0, "nothing is written");
}

#[test]
fn an_output_inside_the_resources_is_refused() {
    let dir = resources();
    let out = dir.path().join("out");
    let run = render(&dir.path(), &out, &[]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("inside the resources directory"),
        "{stderr}"
    );
    assert!(!out.exists(), "the output directory is not created");

    let run = render(&dir.path(), &dir.path(), &[]);
    assert_eq!(run.status.code(), Some(2));

    let bad_format = render(&dir.path(), &dir.path().join("../o"), &["--format", "xml"]);
    assert_eq!(bad_format.status.code(), Some(2));
}

/// A type without a name field (LEDS's LbEndpoint, named by `"@name": xdstp://...`): each
/// resource is written in the `Resource` wrapper, which carries its xdstp name (#57).
#[test]
fn render_names_lb_endpoints_by_their_xdstp_names() {
    let out = tempfile::tempdir().expect("a temporary directory");
    let leds = crate::support::repo_root().join("examples/leds/resources");
    let run = render(&leds, out.path(), &["--format", "yaml"]);
    assert!(run.status.success(), "{run:?}");
    let file = out.path().join("envoy.config.endpoint.v3.LbEndpoint.yaml");
    let text = std::fs::read_to_string(&file).expect("the LbEndpoint file");
    for id in ["backend-1", "backend-2"] {
        assert!(
            text.contains(&format!(
                "name: \"xdstp://xdsd.example/envoy.config.endpoint.v3.LbEndpoint/backend/{id}\""
            )),
            "{text}"
        );
    }
    assert!(
        text.contains("envoy.service.discovery.v3.Resource"),
        "{text}"
    );
}
