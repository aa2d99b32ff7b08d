//! Proxyless gRPC: grpcio's own xDS resolver (target `xds:///echo.test`, bootstrap file in
//! `GRPC_XDS_BOOTSTRAP`) gets listener → route → cluster → endpoints from xdsd over ADS and calls
//! a Python gRPC server; when the endpoints file changes, new clients reach the other server.

use crate::support::relay::Relay;
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

/// xRFC TP1 / gRFC A47 (#57): grpcio with an authority in its bootstrap whose listener name
/// template is an `xdstp://` name, target `xds://xdsd.test/echo.test`: it asks xdsd for the
/// listener `xdstp://xdsd.test/envoy.config.listener.v3.Listener/echo.test`, whose route, cluster
/// and endpoints are xdstp names too (a file writes the route's with its parameters out of
/// order: xdsd serves it under the canonical name), and reaches the server they name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_with_an_authority_takes_xdstp_names_from_xdsd() {
    with_an_authority(false).await
}

/// The same through `xdsd relay --upstream-for xdsd.test=XDSD` whose `--upstream` is another
/// xdsd (with a decoy listener of the same name, plain): grpcio's bootstrap names the relay
/// only, and the relay federates, the authority's names from their own control plane.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_with_an_authority_takes_xdstp_names_through_a_relay_that_federates() {
    with_an_authority(true).await
}

async fn with_an_authority(through_relay: bool) {
    const AUTHORITY: &str = "xdsd.test";
    let listener = format!("xdstp://{AUTHORITY}/envoy.config.listener.v3.Listener/{TARGET_NAME}");
    let route =
        format!("xdstp://{AUTHORITY}/envoy.config.route.v3.RouteConfiguration/echo?b=2&a=1");
    let cluster = format!("xdstp://{AUTHORITY}/envoy.config.cluster.v3.Cluster/echo");
    let endpoints =
        format!("xdstp://{AUTHORITY}/envoy.config.endpoint.v3.ClusterLoadAssignment/echo");
    let server = PyGrpcServer::start("server-x").await;
    let dir = ResourceDir::new();
    dir.write(
        "resources.yaml",
        &format!(
            "\"@type\": {LISTENER}
name: {listener}
api_listener:
  api_listener:
    \"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
    stat_prefix: grpc
    rds:
      route_config_name: \"{route}\"
      config_source: {{ ads: {{}}, resource_api_version: V3 }}
    http_filters:
    - name: envoy.filters.http.router
      typed_config:
        \"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
---
\"@type\": {ROUTE}
name: \"{route}\"
virtual_hosts:
- name: echo
  domains: [\"{TARGET_NAME}\"]
  routes:
  - match: {{ prefix: \"\" }}
    route: {{ cluster: \"{cluster}\" }}
---
\"@type\": {CLUSTER}
name: \"{cluster}\"
type: EDS
lb_policy: ROUND_ROBIN
eds_cluster_config:
  service_name: \"{endpoints}\"
  eds_config: {{ ads: {{}}, resource_api_version: V3 }}
---
\"@type\": {ENDPOINTS}
cluster_name: \"{endpoints}\"
endpoints:
- locality: {{ region: local, zone: a }}
  load_balancing_weight: 1
  lb_endpoints:
  - endpoint:
      address:
        socket_address: {{ address: 127.0.0.1, port_value: {port} }}
",
            port = server.port
        ),
    );
    let xdsd = Xdsd::start_with_args(&dir.path(), &["--log-level", "debug"]).await;
    xdsd.expect_loaded_since(0).await;
    // Through a relay: the default upstream is another control plane, with a plain listener
    // of the target's name (what a client without the authority would get).
    let other_dir = ResourceDir::new();
    resources(&other_dir, 9);
    let (_other, relay) = if through_relay {
        let other = Xdsd::start(&other_dir.path()).await;
        other.expect_loaded_since(0).await;
        let upstream_for = format!("{AUTHORITY}={}", xdsd.authority());
        let relay = Relay::start(&other.authority(), &["--upstream-for", &upstream_for]).await;
        (Some(other), Some(relay))
    } else {
        (None, None)
    };
    let (server_uri, log) = match &relay {
        Some(relay) => (relay.authority(), &relay.log),
        None => (xdsd.authority(), &xdsd.log),
    };

    let scratch = tempfile::tempdir().expect("cannot create a temporary directory");
    let servers = serde_json::json!([{
        "server_uri": server_uri,
        "channel_creds": [{ "type": "insecure" }],
        "server_features": ["xds_v3"],
    }]);
    let bootstrap = serde_json::json!({
        "xds_servers": servers,
        "node": { "id": unique_name("grpc-xdstp"), "cluster": "xdsd-tests", "locality": { "region": "local" } },
        "authorities": {
            AUTHORITY: {
                "xds_servers": servers,
                "client_listener_resource_name_template":
                    format!("xdstp://{AUTHORITY}/envoy.config.listener.v3.Listener/%s"),
            }
        },
    });
    let path = scratch.path().join("grpc-bootstrap.json");
    std::fs::write(&path, bootstrap.to_string()).expect("cannot write the gRPC bootstrap");
    let path = path.to_string_lossy().into_owned();
    let out = run_python_client(
        &[
            "--target",
            &format!("xds://{AUTHORITY}/{TARGET_NAME}"),
            "--calls",
            "2",
            "--expect",
            "server-x",
        ],
        &[
            ("GRPC_XDS_BOOTSTRAP", &path),
            ("GRPC_EXPERIMENTAL_XDS_FEDERATION", "true"),
        ],
    )
    .await;
    assert_client_ok(&out, &xdsd, "server-x");
    assert_eq!(
        server.calls().len(),
        2,
        "the server named by xdsd served both calls"
    );
    // grpcio asks for the listener by its xdstp name only (the template's), and for the route
    // by the canonical name: xdsd pushed one resource of each of the four types.
    for type_url in [LISTENER, ROUTE, CLUSTER, ENDPOINTS] {
        let pushed = log.matching_since(0, |l| {
            l.contains(" push ") && l.contains(type_url) && l.contains("resources=1")
        });
        assert!(
            !pushed.is_empty(),
            "xdsd pushed grpcio its {type_url}:\n{}",
            log.text()
        );
    }
    let nacks = log.matching_since(0, |l| l.contains("NACK"));
    assert!(nacks.is_empty(), "grpcio NACKed: {nacks:#?}");
    if let Some(relay) = &relay {
        // Each xdstp name was subscribed upstream of the authority's server: the default
        // upstream was asked for none of them.
        relay
            .wait_metric(
                &format!("xdsd_relay_upstream{{address=\"{}\"}}", xdsd.authority()),
                1.0,
            )
            .await;
        let subscribed = relay.log.matching_since(0, |l| {
            // The one line per request and upstream (the per-name one is at debug).
            l.contains("subscribing upstream:") && l.contains("xdstp://")
        });
        assert_eq!(subscribed.len(), 4, "{subscribed:#?}");
        let theirs = format!("upstream={}", xdsd.authority());
        assert!(
            subscribed.iter().all(|l| l.contains(&theirs)),
            "each of the authority's own server: {subscribed:#?}"
        );
        // (The default upstream has none of these names: grpcio reached its server through
        // them, so none was answered by it.)
    }
}
