//! VHDS with a real Envoy 1.40 over delta ADS: a route configuration with `vhds` has its virtual
//! hosts served one by one. Envoy's on-demand filter asks for the virtual host of a domain it
//! has not seen by alias (`<route config>/<domain>`): a known domain is routed, a domain that
//! names no virtual host is answered with a 404 at once (xdsd answers the alias with a body-less
//! resource carrying it, which is what Envoy waits for), and a domain added later is routed once
//! the resources directory says so. The same through an `xdsd relay` (the relay asks its
//! upstream for the alias and caches the virtual host with its aliases).

use std::time::{Duration, Instant};

use crate::support::relay::Relay;
use crate::support::scenario::{dynamic_bootstrap, Transport};
use crate::support::{
    http_get, unique_name, Envoy, ResourceDir, Upstream, Xdsd, CLUSTER, LISTENER, ROUTE,
};

const ADS: &str = "{ ads: {}, resource_api_version: V3 }";

fn listener() -> String {
    format!(
        "\"@type\": {LISTENER}
name: vhds_listener
address:
  socket_address: {{ address: 127.0.0.1, port_value: 0 }}
filter_chains:
- filters:
  - name: envoy.filters.network.http_connection_manager
    typed_config:
      \"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
      stat_prefix: vhds
      rds:
        route_config_name: rc
        config_source: {ADS}
      http_filters:
      - name: envoy.filters.http.on_demand
        typed_config:
          \"@type\": type.googleapis.com/envoy.extensions.filters.http.on_demand.v3.OnDemand
      - name: envoy.filters.http.router
        typed_config:
          \"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
"
    )
}

fn backend(port: u16) -> String {
    format!(
        "\"@type\": {CLUSTER}
name: backend
type: STATIC
connect_timeout: 1s
load_assignment:
  cluster_name: backend
  endpoints:
  - lb_endpoints:
    - endpoint:
        address:
          socket_address: {{ address: 127.0.0.1, port_value: {port} }}
"
    )
}

/// Route configuration `rc`, its virtual hosts served by VHDS: `web` for `domains`.
fn route(domains: &[&str]) -> String {
    let domains = domains
        .iter()
        .map(|d| format!("\"{d}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "\"@type\": {ROUTE}
name: rc
vhds:
  config_source: {{ ads: {{}}, resource_api_version: V3 }}
virtual_hosts:
- name: web
  domains: [{domains}]
  routes:
  - match: {{ prefix: / }}
    route: {{ cluster: backend }}
"
    )
}

/// `GET /` with `host` through Envoy's listener; (status, body, how long it took).
async fn get(port: u16, host: &str) -> (u16, String, Duration) {
    let start = Instant::now();
    match http_get(("127.0.0.1", port), "/", host).await {
        Ok(r) => (r.status, r.body, start.elapsed()),
        Err(e) => (0, e.to_string(), start.elapsed()),
    }
}

/// Polls `host` until it answers 200 with `body`; panics after 30 s.
async fn wait_routed(port: u16, host: &str, body: &str, xdsd: &Xdsd) {
    let start = Instant::now();
    loop {
        let (status, got, _) = get(port, host).await;
        if status == 200 && got == body {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{host} is not routed to {body}: last {status} {got:?}\nxdsd log:\n{}",
            xdsd.log.text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn on_demand_vhds_routes_known_domains_and_answers_an_unknown_domain_with_404_at_once() {
    on_demand_vhds(false).await;
}

#[tokio::test]
async fn on_demand_vhds_through_a_relay_routes_known_domains_and_answers_an_unknown_domain_with_404_at_once(
) {
    on_demand_vhds(true).await;
}

/// Envoy connected to xdsd, or (`relayed`) to a relay of it.
async fn on_demand_vhds(relayed: bool) {
    let upstream = Upstream::start("vhds-backend").await;
    let dir = ResourceDir::new();
    dir.write("listener.yaml", &listener());
    dir.write("cluster.yaml", &backend(upstream.port));
    dir.write("route.yaml", &route(&["known.example"]));
    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    let relay = match relayed {
        true => Some(Relay::start(&xdsd.authority(), &[]).await),
        false => None,
    };
    let xds_port = relay.as_ref().map_or(xdsd.port, |r| r.port);
    let envoy = Envoy::start(&dynamic_bootstrap(
        &unique_name("vhds"),
        xds_port,
        Transport::DeltaAds,
    ))
    .await;
    let port = envoy.listener_port("vhds_listener").await;

    wait_routed(port, "known.example", "vhds-backend", &xdsd).await;

    // A domain no virtual host has: Envoy asks for it by alias, xdsd says it resolves to
    // nothing, Envoy answers 404. Without that answer Envoy would hold the request until its
    // stream times out.
    let (status, body, took) = get(port, "unknown.example").await;
    assert_eq!(
        status,
        404,
        "an unknown domain is a 404: got {status} {body:?} after {took:?}\nxdsd log:\n{}",
        xdsd.log.text()
    );
    assert!(
        took < Duration::from_secs(5),
        "the 404 comes at once, not after a timeout: {took:?}"
    );
    eprintln!("on-demand VHDS 404 for an unknown domain in {took:?}");

    // The virtual host is named as Envoy keys it, `<route config>/<virtual host>`.
    let dump = envoy.config_dump().await;
    assert!(
        dump.contains("\"rc/web\""),
        "Envoy holds the virtual host as rc/web:\n{dump}"
    );

    // The domain appears in the directory: Envoy routes it.
    let mark = xdsd.log.mark();
    dir.write("route.yaml", &route(&["known.example", "later.example"]));
    xdsd.expect_loaded_since(mark).await;
    wait_routed(port, "later.example", "vhds-backend", &xdsd).await;
    wait_routed(port, "known.example", "vhds-backend", &xdsd).await;
}
