//! Envoy 1.40 configured from the files `xdsd serve --write-files` writes, in each format (pb,
//! json, yaml), with no gRPC between them: the bootstrap's `lds_config` and `cds_config` are
//! `path_config_source`s with `watched_directory` on xdsd's output directory. The listener's HTTP
//! connection manager carries its `route_config` inline; the EDS cluster takes its endpoints
//! from the endpoints file (`eds_config.path_config_source`).
//!
//! Traffic flows through Envoy to upstream A; then three changes to the resources directory
//! reach Envoy through the files: the endpoints move to B (endpoints file), a second listener
//! appears (listeners file), and the first listener's route moves to a new static cluster at C
//! in one change (clusters and listeners files, written with a pause between them: see
//! `files::SETTLE`). Envoy rejects none of the files.

use std::path::Path;

use crate::support::scenario::{static_cluster_yaml, ADMIN};
use crate::support::{
    unique_name, wait_for_body, Envoy, ResourceDir, Upstream, Xdsd, CLUSTER, ENDPOINTS, LISTENER,
};

/// The Envoys of the three formats share two cores with everything else: one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A `path_config_source` for `file` in `dir`, reloaded when a file is moved into `dir`.
fn path_source(dir: &Path, file: &str) -> String {
    format!(
        "{{ resource_api_version: V3, path_config_source: {{ path: \"{}\", watched_directory: \
         {{ path: \"{}\" }} }} }}",
        dir.join(file).display(),
        dir.display()
    )
}

/// Listener `name` on 127.0.0.1:0 with an inline route configuration sending everything to
/// `cluster`.
fn listener_yaml(name: &str, cluster: &str) -> String {
    format!(
        "\"@type\": {LISTENER}
name: {name}
address:
  socket_address: {{ address: 127.0.0.1, port_value: 0 }}
filter_chains:
- filters:
  - name: envoy.filters.network.http_connection_manager
    typed_config:
      \"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
      stat_prefix: {name}
      route_config:
        name: {name}_routes
        virtual_hosts:
        - name: all
          domains: [\"*\"]
          routes:
          - match: {{ prefix: / }}
            route: {{ cluster: {cluster} }}
      http_filters:
      - name: envoy.filters.http.router
        typed_config:
          \"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
"
    )
}

/// EDS cluster `name` whose endpoints Envoy reads from the endpoints file in `out`.
fn eds_cluster_yaml(name: &str, out: &Path, extension: &str) -> String {
    format!(
        "\"@type\": {CLUSTER}
name: {name}
type: EDS
connect_timeout: 1s
eds_cluster_config:
  eds_config: {source}
",
        source = path_source(out, &format!("endpoints.{extension}"))
    )
}

fn endpoints_yaml(cluster: &str, port: u16) -> String {
    format!(
        "\"@type\": {ENDPOINTS}
cluster_name: {cluster}
endpoints:
- lb_endpoints:
  - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}
"
    )
}

/// LDS and CDS from the files in `out`, nothing else.
fn file_bootstrap(node_id: &str, out: &Path, extension: &str) -> String {
    format!(
        "node:
  id: {node_id}
  cluster: xdsd-tests
{ADMIN}dynamic_resources:
  lds_config: {lds}
  cds_config: {cds}
",
        lds = path_source(out, &format!("listeners.{extension}")),
        cds = path_source(out, &format!("clusters.{extension}")),
    )
}

/// Waits until xdsd logs that it wrote the file `name` after `mark`; returns the line.
async fn expect_written(xdsd: &Xdsd, mark: usize, name: &str) -> String {
    xdsd.log
        .expect_line_since(
            mark,
            &["wrote discovery response files", name],
            &format!("xdsd to write {name}"),
        )
        .await
}

async fn envoy_follows_the_files(format: &str) {
    let _one = ONE_AT_A_TIME.lock().await;
    let upstream_a = Upstream::start("upstream-a").await;
    let upstream_b = Upstream::start("upstream-b").await;
    let upstream_c = Upstream::start("upstream-c").await;
    let out_root = tempfile::Builder::new()
        .prefix("xdsd-files-")
        .tempdir()
        .expect("a temporary directory");
    // Created by xdsd.
    let out = out_root.path().join("xds");

    let dir = ResourceDir::new();
    dir.write("listener.yaml", &listener_yaml("listener_0", "service"));
    dir.write("cluster.yaml", &eds_cluster_yaml("service", &out, format));
    dir.write(
        "endpoints.yaml",
        &endpoints_yaml("service", upstream_a.port),
    );

    let out_arg = out.to_string_lossy().into_owned();
    let xdsd = Xdsd::start_with_args(
        &dir.path(),
        &[
            "--log-level",
            "debug",
            "--write-files",
            &out_arg,
            "--write-format",
            format,
        ],
    )
    .await;
    xdsd.expect_loaded_since(0).await;
    for stem in ["listeners", "clusters", "endpoints", "routes", "secrets"] {
        let file = out.join(format!("{stem}.{format}"));
        assert!(
            file.is_file(),
            "{} is written before xdsd serves. Log:\n{}",
            file.display(),
            xdsd.log.text()
        );
    }

    let node_id = unique_name("envoy-files");
    let envoy = Envoy::start(&file_bootstrap(&node_id, &out, format)).await;
    let context = || format!("xdsd log:\n{}", xdsd.log.text());
    let port = envoy.listener_port("listener_0").await;

    // 1. Through Envoy to upstream A.
    wait_for_body(port, "upstream-a", context).await;

    // 2. The endpoints move to B: the endpoints file alone changes.
    let mark = xdsd.log.mark();
    dir.write(
        "endpoints.yaml",
        &endpoints_yaml("service", upstream_b.port),
    );
    expect_written(&xdsd, mark, &format!("endpoints.{format}")).await;
    wait_for_body(port, "upstream-b", context).await;
    let written = xdsd.log.matching_since(mark, |l| {
        l.contains("wrote discovery response files") && !l.contains("endpoints.")
    });
    assert!(
        written.is_empty(),
        "only the endpoints file is written again: {written:#?}"
    );

    // 3. A second listener appears (listeners file). Before any listener is replaced: Envoy
    // gives a new listener on port 0 the socket of a draining one with the same configured
    // address, when there is one.
    let mark = xdsd.log.mark();
    dir.write("listener-1.yaml", &listener_yaml("listener_1", "service"));
    expect_written(&xdsd, mark, &format!("listeners.{format}")).await;
    let port_1 = envoy.listener_port("listener_1").await;
    assert_ne!(port_1, port, "listener_1 has a port of its own");
    wait_for_body(port_1, "upstream-b", context).await;

    // 4. The route of listener_0 moves to a new static cluster at C, in one change (one file):
    // the clusters file, then the listeners file, which Envoy would reject if it read it before
    // the new clusters.
    let mark = xdsd.log.mark();
    dir.write(
        "listener.yaml",
        &[
            listener_yaml("listener_0", "static_c"),
            static_cluster_yaml("static_c", upstream_c.port.into()),
        ]
        .join("---\n"),
    );
    let listeners = expect_written(&xdsd, mark, &format!("listeners.{format}")).await;
    let clusters = expect_written(&xdsd, mark, &format!("clusters.{format}")).await;
    let generation = |line: &str| crate::support::log_field(line, "generation").map(str::to_owned);
    assert_eq!(
        generation(&listeners),
        generation(&clusters),
        "one change: {listeners}\n{clusters}"
    );
    wait_for_body(port, "upstream-c", context).await;
    wait_for_body(port_1, "upstream-b", context).await;

    // Envoy took every file it was given.
    for stat in [
        "listener_manager.lds.update_rejected",
        "cluster_manager.cds.update_rejected",
        "cluster.service.update_rejected",
    ] {
        assert_eq!(
            envoy.stat(stat).await.unwrap_or(0),
            0,
            "{stat}. Envoy log:\n{}",
            envoy.log.text()
        );
    }
    assert!(
        envoy
            .stat("listener_manager.lds.update_success")
            .await
            .unwrap_or(0)
            >= 3,
        "Envoy loaded the listeners file at least three times"
    );
    // No temporary file is left in the output directory.
    let leftovers: Vec<String> = std::fs::read_dir(&out)
        .expect("the output directory")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_follows_binary_files() {
    envoy_follows_the_files("pb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_follows_json_files() {
    envoy_follows_the_files("json").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_follows_yaml_files() {
    envoy_follows_the_files("yaml").await;
}
