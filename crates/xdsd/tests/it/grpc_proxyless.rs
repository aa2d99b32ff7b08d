//! Proxyless gRPC: grpcio's own xDS resolver (target `xds:///echo.test`, bootstrap file in
//! `GRPC_XDS_BOOTSTRAP`) gets listener → route → cluster → endpoints from xdsd over ADS and calls
//! a Python gRPC server; when the endpoints file changes, new clients reach the other server.

use crate::support::{
    run_python_client, unique_name, PyClientOutput, PyGrpcServer, ResourceDir, Xdsd, CLUSTER,
    ENDPOINTS, LISTENER, ROUTE,
};

const TARGET_NAME: &str = "echo.test";

/// The `api_listener` Listener grpcio asks for: an HTTP connection manager with the router
/// filter, taking its routes by RDS over ADS.
fn api_listener_yaml() -> String {
    format!(
        "\"@type\": {LISTENER}
name: {TARGET_NAME}
api_listener:
  api_listener:
    \"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
    stat_prefix: grpc
    rds:
      route_config_name: echo-route
      config_source: {{ ads: {{}}, resource_api_version: V3 }}
    http_filters:
    - name: envoy.filters.http.router
      typed_config:
        \"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
"
    )
}

fn resources(dir: &ResourceDir, server_port: u16) {
    dir.write("listener.yaml", &api_listener_yaml());
    dir.write(
        "route.yaml",
        &format!(
            "\"@type\": {ROUTE}
name: echo-route
virtual_hosts:
- name: echo
  domains: [\"{TARGET_NAME}\"]
  routes:
  - match: {{ prefix: \"\" }}
    route: {{ cluster: echo-cluster }}
"
        ),
    );
    dir.write(
        "cluster.yaml",
        &format!(
            "\"@type\": {CLUSTER}
name: echo-cluster
type: EDS
lb_policy: ROUND_ROBIN
eds_cluster_config:
  eds_config: {{ ads: {{}}, resource_api_version: V3 }}
"
        ),
    );
    write_endpoints(dir, server_port);
}

/// grpcio ignores endpoints outside a locality with a `load_balancing_weight`.
fn write_endpoints(dir: &ResourceDir, server_port: u16) {
    dir.write(
        "endpoints.yaml",
        &format!(
            "\"@type\": {ENDPOINTS}
cluster_name: echo-cluster
endpoints:
- locality: {{ region: local, zone: a }}
  load_balancing_weight: 1
  lb_endpoints:
  - endpoint:
      address:
        socket_address: {{ address: 127.0.0.1, port_value: {server_port} }}
"
        ),
    );
}

/// Writes a gRPC xDS bootstrap pointing at xdsd and returns its path.
fn write_bootstrap(dir: &tempfile::TempDir, xdsd: &Xdsd, node_id: &str) -> String {
    let bootstrap = serde_json::json!({
        "xds_servers": [{
            "server_uri": xdsd.authority(),
            "channel_creds": [{ "type": "insecure" }],
            "server_features": ["xds_v3"],
        }],
        "node": { "id": node_id, "cluster": "xdsd-tests", "locality": { "region": "local" } },
    });
    let path = dir.path().join("grpc-bootstrap.json");
    std::fs::write(&path, bootstrap.to_string()).expect("cannot write the gRPC bootstrap");
    path.to_string_lossy().into_owned()
}

async fn call_through_xds(bootstrap: &str, expect: &str) -> PyClientOutput {
    run_python_client(
        &[
            "--target",
            &format!("xds:///{TARGET_NAME}"),
            "--calls",
            "2",
            "--expect",
            expect,
        ],
        &[("GRPC_XDS_BOOTSTRAP", bootstrap)],
    )
    .await
}

fn assert_client_ok(out: &PyClientOutput, xdsd: &Xdsd, expect: &str) {
    assert!(
        out.status.success(),
        "grpc_client.py through xDS failed ({}):\nstdout:\n{}\nstderr:\n{}\nxdsd log:\n{}",
        out.status,
        out.stdout,
        out.stderr,
        xdsd.log.text()
    );
    assert!(
        out.stdout.contains(&format!("response: {expect}")),
        "the client got {expect:?}: {}",
        out.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_xds_resolver_reaches_the_server_named_by_xdsd() {
    let server_a = PyGrpcServer::start("server-a").await;
    let server_b = PyGrpcServer::start("server-b").await;
    let dir = ResourceDir::new();
    resources(&dir, server_a.port);
    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;

    let scratch = tempfile::tempdir().expect("cannot create a temporary directory");
    let node_id = unique_name("grpc-node");
    let bootstrap = write_bootstrap(&scratch, &xdsd, &node_id);

    let out = call_through_xds(&bootstrap, "server-a").await;
    assert_client_ok(&out, &xdsd, "server-a");
    assert_eq!(server_a.calls().len(), 2, "server A served both calls");
    assert!(server_b.calls().is_empty(), "server B served nothing yet");

    // grpcio acknowledged what it got (ACKs are logged at debug level).
    let acks = xdsd
        .log
        .matching_since(0, |l| l.contains("ACK") && !l.contains("NACK"));
    assert!(
        !acks.is_empty(),
        "xdsd logged grpcio's ACKs. Log:\n{}",
        xdsd.log.text()
    );
    let nacks = xdsd.log.matching_since(0, |l| l.contains("NACK"));
    assert!(nacks.is_empty(), "grpcio NACKed: {nacks:#?}");

    // Move the endpoints to server B: a new client follows.
    let mark = xdsd.log.mark();
    write_endpoints(&dir, server_b.port);
    xdsd.expect_loaded_since(mark).await;
    let out = call_through_xds(&bootstrap, "server-b").await;
    assert_client_ok(&out, &xdsd, "server-b");
    assert_eq!(server_b.calls().len(), 2, "server B served both calls");
}
