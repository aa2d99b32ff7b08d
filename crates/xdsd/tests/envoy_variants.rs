//! Two Envoy 1.40 instances, one xdsd, one resources directory with xRFC TP2 variants: the
//! Envoys differ only by `node.metadata` (`env: prod`, `env: staging`), and each gets its own
//! variant of the listener (`@match` shorthand) and of the endpoints (`@constraints` form), so
//! each one's traffic reaches its own upstream. A change to the staging variant moves staging's
//! traffic and sends nothing to the prod Envoy. Over SotW ADS and over delta ADS.

mod support;

use support::scenario::{
    dynamic_bootstrap, eds_cluster_yaml, listener_yaml, route_yaml, Transport,
};
use support::{
    http_get, log_field, unique_name, wait_for_body, Envoy, ResourceDir, Upstream, Xdsd, ENDPOINTS,
};

/// The listener variant of one environment (its HTTP stats are prefixed `ingress_<env>`):
/// `constraints` is a document-level line.
fn listener_variant(transport: Transport, env: &str, constraints: &str) -> String {
    let listener = listener_yaml("listener_0", "route_0", transport);
    let variant = listener.replace(
        "stat_prefix: ingress_listener_0",
        &format!("stat_prefix: ingress_{env}"),
    );
    assert_ne!(
        listener, variant,
        "the listener's stat prefix changed shape"
    );
    format!("{constraints}\n{variant}")
}

/// The endpoints variant of one environment, at `port`.
fn endpoints_variant(constraints: &str, port: u16) -> String {
    format!(
        "\"@type\": {ENDPOINTS}
{constraints}
cluster_name: service
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

const PROD_MATCH: &str = "\"@match\": { env: prod }";
const STAGING_MATCH: &str = "\"@match\": { env: staging }";
const PROD_CONSTRAINTS: &str = "\"@constraints\": { constraint: { key: env, value: prod } }";
const STAGING_CONSTRAINTS: &str = "\"@constraints\": { constraint: { key: env, value: staging } }";

/// A bootstrap for `node_id` whose node carries `metadata: { env: <env> }`.
fn bootstrap(node_id: &str, env: &str, xds_port: u16, transport: Transport) -> String {
    let plain = dynamic_bootstrap(node_id, xds_port, transport);
    let with = plain.replacen(
        "  cluster: xdsd-tests\n",
        &format!("  cluster: xdsd-tests\n  metadata: {{ env: {env} }}\n"),
        1,
    );
    assert_ne!(plain, with, "the bootstrap's node block changed shape");
    with
}

async fn scenario(transport: Transport) {
    let prod_up = Upstream::start("upstream-prod").await;
    let staging_up = Upstream::start("upstream-staging").await;
    let staging_next = Upstream::start("upstream-staging-next").await;

    let dir = ResourceDir::new();
    dir.write(
        "listeners.yaml",
        &format!(
            "{}---\n{}",
            listener_variant(transport, "prod", PROD_MATCH),
            listener_variant(transport, "staging", STAGING_MATCH)
        ),
    );
    dir.write("route.yaml", &route_yaml("route_0", "service"));
    dir.write("cluster.yaml", &eds_cluster_yaml("service", transport));
    dir.write(
        "endpoints-prod.yaml",
        &endpoints_variant(PROD_CONSTRAINTS, prod_up.port),
    );
    dir.write(
        "endpoints-staging.yaml",
        &endpoints_variant(STAGING_CONSTRAINTS, staging_up.port),
    );

    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    let log = || format!("xdsd log:\n{}", xdsd.log.text());

    let prod_id = unique_name("prod");
    let staging_id = unique_name("staging");
    let prod = Envoy::start(&bootstrap(&prod_id, "prod", xdsd.port, transport)).await;
    let staging = Envoy::start(&bootstrap(&staging_id, "staging", xdsd.port, transport)).await;
    let prod_port = prod.listener_port("listener_0").await;
    let staging_port = staging.listener_port("listener_0").await;

    // 1. Each Envoy reaches its own upstream.
    wait_for_body(prod_port, "upstream-prod", log).await;
    wait_for_body(staging_port, "upstream-staging", log).await;
    // Each Envoy runs its own listener variant: its requests count under its own prefix.
    for (envoy, mine, other) in [(&prod, "prod", "staging"), (&staging, "staging", "prod")] {
        let stat = |env: &str| format!("http.ingress_{env}.downstream_rq_total");
        assert!(
            envoy.stat(&stat(mine)).await.unwrap_or(0) > 0,
            "{mine}: {}",
            log()
        );
        assert_eq!(
            envoy.stat(&stat(other)).await,
            None,
            "{mine} runs {other}'s listener"
        );
    }

    // 2. Only the staging variant changes: staging moves, prod neither moves nor is sent
    //    anything for it (xdsd logs every push with the node and type at debug).
    let mark = xdsd.log.mark();
    dir.write(
        "endpoints-staging.yaml",
        &endpoints_variant(STAGING_CONSTRAINTS, staging_next.port),
    );
    wait_for_body(staging_port, "upstream-staging-next", log).await;
    for _ in 0..5 {
        let response = http_get(("127.0.0.1", prod_port), "/", "localhost")
            .await
            .expect("prod Envoy answers");
        assert_eq!(response.body, "upstream-prod", "{}", log());
    }
    let pushed_to = |node: &str| {
        xdsd.log.matching_since(mark, |line| {
            line.split_whitespace().any(|t| t == "push")
                && log_field(line, "node") == Some(node)
                && log_field(line, "type_url") == Some(ENDPOINTS)
        })
    };
    assert!(
        !pushed_to(&staging_id).is_empty(),
        "staging was sent its new endpoints\n{}",
        log()
    );
    assert!(
        pushed_to(&prod_id).is_empty(),
        "prod must be sent nothing for staging's change: {:?}",
        pushed_to(&prod_id)
    );
    drop(prod);
    drop(staging);
}

#[tokio::test]
async fn two_envoys_get_their_own_variants_over_sotw_ads() {
    scenario(Transport::Ads).await;
}

#[tokio::test]
async fn two_envoys_get_their_own_variants_over_delta_ads() {
    scenario(Transport::DeltaAds).await;
}
