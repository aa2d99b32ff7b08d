//! Envoy bootstraps and xdsd resource files for the Envoy scenarios, and the scenario itself
//! (shared by `envoy_ads.rs` and `envoy_per_type.rs`): listener → route → cluster → endpoints
//! served by xdsd; traffic reaches upstream A, moves to B when the endpoints file changes, and
//! keeps flowing to B when Envoy NACKs a bad cluster.

use super::{
    names_node, unique_name, wait_for_body, Envoy, ResourceDir, Upstream, Xdsd, CLUSTER, ENDPOINTS,
    LISTENER, ROUTE,
};

/// The admin block every test bootstrap uses: 127.0.0.1, port chosen by the OS.
pub const ADMIN: &str = "admin:
  address:
    socket_address: { address: 127.0.0.1, port_value: 0 }
";

/// How Envoy reaches xdsd.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// One aggregated stream (`ads_config`, config sources `ads: {}`).
    Ads,
    /// One aggregated incremental stream (`ads_config` with `api_type: DELTA_GRPC`, config
    /// sources `ads: {}`).
    DeltaAds,
    /// A separate SotW stream per type (`api_config_source` with `api_type: GRPC`).
    PerType,
}

/// The xDS cluster of the bootstrap: xdsd on 127.0.0.1:`port` over HTTP/2.
fn xds_cluster(port: u16) -> String {
    format!(
        "  - name: xds_cluster
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: xds_cluster
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: {{ address: 127.0.0.1, port_value: {port} }}
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config:
          http2_protocol_options: {{}}
"
    )
}

/// A config source (YAML flow mapping) for `transport`, as used in the bootstrap's
/// `lds_config`/`cds_config` and in the resources' `rds.config_source`/`eds_config`.
pub fn config_source(transport: Transport) -> &'static str {
    match transport {
        Transport::Ads | Transport::DeltaAds => "{ ads: {}, resource_api_version: V3 }",
        Transport::PerType => {
            "{ resource_api_version: V3, api_config_source: { api_type: GRPC, \
             transport_api_version: V3, grpc_services: [ { envoy_grpc: { cluster_name: \
             xds_cluster } } ] } }"
        }
    }
}

/// A dynamic bootstrap: LDS and CDS from xdsd at 127.0.0.1:`xds_port`.
pub fn dynamic_bootstrap(node_id: &str, xds_port: u16, transport: Transport) -> String {
    bootstrap_for_node(node_id, None, xds_port, transport)
}

/// Like [`dynamic_bootstrap`], with the node's `metadata` set to `metadata` (a YAML flow
/// mapping, e.g. `{ env: prod }`): xdsd derives a client's variant parameters from it.
pub fn dynamic_bootstrap_with_metadata(
    node_id: &str,
    metadata: &str,
    xds_port: u16,
    transport: Transport,
) -> String {
    bootstrap_for_node(node_id, Some(metadata), xds_port, transport)
}

fn bootstrap_for_node(
    node_id: &str,
    metadata: Option<&str>,
    xds_port: u16,
    transport: Transport,
) -> String {
    let ads_config = match transport {
        Transport::Ads => {
            "  ads_config:
    api_type: GRPC
    transport_api_version: V3
    grpc_services:
    - envoy_grpc: { cluster_name: xds_cluster }
"
        }
        Transport::DeltaAds => {
            "  ads_config:
    api_type: DELTA_GRPC
    transport_api_version: V3
    grpc_services:
    - envoy_grpc: { cluster_name: xds_cluster }
"
        }
        Transport::PerType => "",
    };
    let source = config_source(transport);
    let metadata = metadata
        .map(|m| format!("  metadata: {m}\n"))
        .unwrap_or_default();
    format!(
        "node:
  id: {node_id}
  cluster: xdsd-tests
{metadata}{ADMIN}dynamic_resources:
{ads_config}  lds_config: {source}
  cds_config: {source}
static_resources:
  clusters:
{cluster}",
        cluster = xds_cluster(xds_port)
    )
}

/// A static bootstrap: listener `static_listener` on 127.0.0.1:0 proxying everything to
/// 127.0.0.1:`upstream_port`. Proves the Envoy harness without xdsd.
pub fn static_bootstrap(node_id: &str, upstream_port: u16) -> String {
    format!(
        "node:
  id: {node_id}
  cluster: xdsd-tests
{ADMIN}static_resources:
  listeners:
  - name: static_listener
    address:
      socket_address: {{ address: 127.0.0.1, port_value: 0 }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          \"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config:
            name: local
            virtual_hosts:
            - name: all
              domains: [\"*\"]
              routes:
              - match: {{ prefix: / }}
                route: {{ cluster: upstream }}
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              \"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: upstream
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: upstream
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: {{ address: 127.0.0.1, port_value: {upstream_port} }}
"
    )
}

/// Listener `name` on 127.0.0.1:0 whose HTTP connection manager takes route `route` by RDS.
pub fn listener_yaml(name: &str, route: &str, transport: Transport) -> String {
    listener_yaml_from(name, route, config_source(transport))
}

/// [`listener_yaml`] with RDS from `source` (a config source as a YAML flow mapping).
pub fn listener_yaml_from(name: &str, route: &str, source: &str) -> String {
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
      stat_prefix: ingress_{name}
      rds:
        route_config_name: {route}
        config_source: {source}
      http_filters:
      - name: envoy.filters.http.router
        typed_config:
          \"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
"
    )
}

/// Route configuration `name`: every path to cluster `cluster`.
pub fn route_yaml(name: &str, cluster: &str) -> String {
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

/// EDS cluster `name` whose endpoints come from xdsd.
pub fn eds_cluster_yaml(name: &str, transport: Transport) -> String {
    eds_cluster_yaml_from(name, config_source(transport))
}

/// [`eds_cluster_yaml`] with endpoints from `source` (a config source as a YAML flow mapping).
pub fn eds_cluster_yaml_from(name: &str, source: &str) -> String {
    format!(
        "\"@type\": {CLUSTER}
name: {name}
type: EDS
connect_timeout: 1s
eds_cluster_config:
  eds_config: {source}
"
    )
}

/// A STATIC cluster `name` with one endpoint at 127.0.0.1:`port` (a `u32`: a port above 65535
/// is a valid proto that Envoy refuses).
pub fn static_cluster_yaml(name: &str, port: u32) -> String {
    format!(
        "\"@type\": {CLUSTER}
name: {name}
type: STATIC
connect_timeout: 1s
load_assignment:
  cluster_name: {name}
  endpoints:
  - lb_endpoints:
    - endpoint:
        address:
          socket_address: {{ address: 127.0.0.1, port_value: {port} }}
"
    )
}

/// A Cluster that is a valid proto but that Envoy refuses: an EDS cluster without
/// `eds_cluster_config` ("cannot create an EDS cluster without an EDS config").
pub fn envoy_rejected_cluster_yaml(name: &str) -> String {
    format!(
        "\"@type\": {CLUSTER}
name: {name}
type: EDS
connect_timeout: 1s
"
    )
}

/// ClusterLoadAssignment for `cluster`: one endpoint 127.0.0.1:`port` in a weighted locality.
pub fn endpoints_yaml(cluster: &str, port: u16) -> String {
    format!(
        "\"@type\": {ENDPOINTS}
cluster_name: {cluster}
endpoints:
- locality: {{ region: local }}
  load_balancing_weight: 1
  lb_endpoints:
  - endpoint:
      address:
        socket_address: {{ address: 127.0.0.1, port_value: {port} }}
"
    )
}

/// A resource directory with listener `listener_0` → route `route_0` → EDS cluster `service` →
/// endpoints at 127.0.0.1:`upstream_port`, their config sources for `transport`.
pub fn basic_resources(transport: Transport, upstream_port: u16) -> ResourceDir {
    let dir = ResourceDir::new();
    dir.write(
        "listener.yaml",
        &listener_yaml("listener_0", "route_0", transport),
    );
    dir.write("route.yaml", &route_yaml("route_0", "service"));
    dir.write("cluster.yaml", &eds_cluster_yaml("service", transport));
    dir.write("endpoints.yaml", &endpoints_yaml("service", upstream_port));
    dir
}

/// Points the `service` endpoints of [`basic_resources`] at `upstream` and waits until xdsd
/// loaded the change and traffic through Envoy's listener `port` reaches `upstream`. Returns the
/// log mark taken before the change.
pub async fn move_endpoints_to(
    dir: &ResourceDir,
    xdsd: &Xdsd,
    port: u16,
    upstream: &Upstream,
) -> usize {
    let mark = xdsd.log.mark();
    dir.write("endpoints.yaml", &endpoints_yaml("service", upstream.port));
    xdsd.expect_loaded_since(mark).await;
    wait_for_body(port, &upstream.name, || {
        format!("xdsd log:\n{}", xdsd.log.text())
    })
    .await;
    mark
}

/// The whole Envoy scenario for `transport`; see the module documentation.
pub async fn run_envoy_scenario(transport: Transport) {
    let upstream_a = Upstream::start("upstream-a").await;
    let upstream_b = Upstream::start("upstream-b").await;

    let dir = basic_resources(transport, upstream_a.port);

    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;

    let node_id = unique_name("envoy-node");
    let envoy = Envoy::start(&dynamic_bootstrap(&node_id, xdsd.port, transport)).await;
    let port = envoy.listener_port("listener_0").await;

    // 1. Through Envoy to upstream A.
    wait_for_body(port, "upstream-a", || {
        format!("xdsd log:\n{}", xdsd.log.text())
    })
    .await;
    assert!(upstream_a.hits() > 0, "upstream A saw the request");

    // 2. Rewrite the endpoints: traffic moves to B.
    move_endpoints_to(&dir, &xdsd, port, &upstream_b).await;
    // Only the first response of a type names the control plane: Envoy still shows it after
    // a push that did not (one readout per stream: per type, or the ADS stream's).
    let identifiers = envoy.text_stats("control_plane.identifier$").await;
    assert!(
        !identifiers.is_empty() && identifiers.iter().all(|(_, i)| i.starts_with("xdsd ")),
        "Envoy's control_plane.identifier after a push: {identifiers:?}"
    );

    // 3. A cluster Envoy refuses: xdsd serves it (valid proto), Envoy NACKs, xdsd logs the NACK
    // with Envoy's node id, and traffic keeps flowing to B.
    let mark = xdsd.log.mark();
    dir.write("broken.yaml", &envoy_rejected_cluster_yaml("broken"));
    xdsd.expect_loaded_since(mark).await;
    let nack = xdsd
        .log
        .wait_for_since(
            mark,
            |l| l.contains("NACK") && l.contains(CLUSTER) && names_node(l, &node_id),
            super::DEADLINE,
        )
        .await
        .unwrap_or_else(|why| {
            panic!(
                "expected xdsd to log Envoy's NACK of the broken cluster with node={node_id} \
                 ({why}). Log:\n{}",
                xdsd.log.text()
            )
        });
    assert!(nack.contains("WARN"), "a NACK is logged at WARN: {nack}");
    assert!(
        nack.contains("nonce="),
        "the NACK line names the nonce: {nack}"
    );
    assert!(
        nack.contains("error="),
        "the NACK line has the error: {nack}"
    );
    for _ in 0..5 {
        let resp = super::http_get(("127.0.0.1", port), "/", "example.test")
            .await
            .expect("a request through Envoy after the NACK");
        assert_eq!(
            (resp.status, resp.body.as_str()),
            (200, "upstream-b"),
            "traffic keeps flowing to B after the NACK"
        );
    }
    // Envoy counted the rejection, and kept its config: the broken cluster was never added.
    let rejected_stat = "cluster_manager.cds.update_rejected";
    let deadline = tokio::time::Instant::now() + super::DEADLINE;
    while envoy.stat(rejected_stat).await.unwrap_or(0) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "Envoy's {rejected_stat} stayed 0 after the NACK"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let dump = envoy.config_dump().await;
    assert!(
        !dump.contains("\"name\": \"broken\""),
        "Envoy did not accept the broken cluster"
    );
}
