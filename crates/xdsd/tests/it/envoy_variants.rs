//! Two Envoy 1.40 instances, one xdsd, one resources directory with xRFC TP2 variants. The
//! Envoys differ only by `node.metadata` (`env: prod`, `env: staging`), which xdsd turns into the
//! parameter `env` of every subscription (neither Envoy sends dynamic parameters).
//!
//! The listener `listener_0` and the EDS clusters `blue` and `green` are shared (unconstrained).
//! Two types have variants:
//!
//! - RouteConfiguration `route_0`, with the `@match` shorthand: prod routes to `blue`, staging to
//!   `green`;
//! - ClusterLoadAssignment `blue` and `green`, with the `@constraints` proto3 JSON form: prod's
//!   `blue` is upstream A, staging's `green` is upstream B. Both Envoys load both clusters (CDS
//!   is a wildcard), so each also subscribes to the endpoints of the cluster its route does not
//!   use; those variants point at decoy upstreams whose bodies say which variant was wrongly
//!   used.
//!
//! 1. Prod's traffic reaches A and staging's reaches B: each Envoy got its own route *and* its own
//!    endpoints (the wrong route variant or the wrong endpoints variant would each show a decoy).
//! 2. Only staging's `green` endpoints variant changes (to upstream C): staging's traffic moves to
//!    C; prod's stays on A, and prod's Envoy receives nothing at all — although it subscribes to
//!    `green` too — by its own stats and by xdsd's push log.
//!
//! Over SotW ADS and over delta ADS.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::scenario::{
    dynamic_bootstrap_with_metadata, eds_cluster_yaml, endpoints_yaml, listener_yaml, route_yaml,
    Transport,
};
use crate::support::{
    http_get, log_field, unique_name, wait_for_body, Envoy, ResourceDir, Upstream, Xdsd, ENDPOINTS,
};

/// Route variants use the `@match` shorthand.
const PROD_MATCH: &str = "\"@match\": { env: prod }";
const STAGING_MATCH: &str = "\"@match\": { env: staging }";
/// Endpoints variants use the full `@constraints` form (proto3 JSON of
/// `DynamicParameterConstraints`, written as YAML).
const PROD_CONSTRAINTS: &str = "\"@constraints\": { constraint: { key: env, value: prod } }";
const STAGING_CONSTRAINTS: &str = "\"@constraints\": { constraint: { key: env, value: staging } }";

/// One variant: `constraints` (a document-level line) followed by `document`.
fn variant(constraints: &str, document: &str) -> String {
    format!("{constraints}\n{document}")
}

/// One environment's endpoints variants: `blue` at `blue_port`, `green` at `green_port`.
fn endpoints_variants(constraints: &str, blue_port: u16, green_port: u16) -> String {
    format!(
        "{}---\n{}",
        variant(constraints, &endpoints_yaml("blue", blue_port)),
        variant(constraints, &endpoints_yaml("green", green_port))
    )
}

/// Whether a stat counts deliveries of xDS responses to a subscription of Envoy. Every xDS
/// subscription (`listener_manager.lds.`, `cluster_manager.cds.`, `http.<prefix>.rds.<route>.`,
/// and each EDS cluster's `cluster.<name>.`) has these counters.
fn is_subscription_counter(name: &str) -> bool {
    [
        ".update_attempt",
        ".update_success",
        ".update_rejected",
        ".update_failure",
        ".update_empty",
    ]
    .iter()
    .any(|suffix| name.ends_with(suffix))
}

/// Every xDS subscription counter of `envoy` (see [`is_subscription_counter`]), by name.
async fn subscription_counters(envoy: &Envoy) -> BTreeMap<String, u64> {
    let resp = envoy
        .admin_get("/stats?filter=update_")
        .await
        .expect("GET /stats on Envoy's admin");
    assert_eq!(resp.status, 200, "/stats: {}", resp.body);
    resp.body
        .lines()
        .filter_map(|line| {
            let (name, value) = line.split_once(": ")?;
            let name = name.trim();
            is_subscription_counter(name)
                .then(|| Some((name.to_string(), value.trim().parse().ok()?)))?
        })
        .collect()
}

async fn scenario(transport: Transport) {
    let upstream_a = Upstream::start("upstream-a").await;
    let upstream_b = Upstream::start("upstream-b").await;
    let upstream_c = Upstream::start("upstream-c").await;
    // The endpoints of the cluster an Envoy's route does not use: reached only if that Envoy got
    // the other environment's route variant.
    let unused_green = Upstream::start("prod-reached-green: staging's route variant").await;
    let unused_blue = Upstream::start("staging-reached-blue: prod's route variant").await;

    let dir = ResourceDir::new();
    dir.write(
        "listener.yaml",
        &listener_yaml("listener_0", "route_0", transport),
    );
    dir.write(
        "clusters.yaml",
        &format!(
            "{}---\n{}",
            eds_cluster_yaml("blue", transport),
            eds_cluster_yaml("green", transport)
        ),
    );
    dir.write(
        "route-prod.yaml",
        &variant(PROD_MATCH, &route_yaml("route_0", "blue")),
    );
    dir.write(
        "route-staging.yaml",
        &variant(STAGING_MATCH, &route_yaml("route_0", "green")),
    );
    dir.write(
        "endpoints-prod.yaml",
        &endpoints_variants(PROD_CONSTRAINTS, upstream_a.port, unused_green.port),
    );
    dir.write(
        "endpoints-staging.yaml",
        &endpoints_variants(STAGING_CONSTRAINTS, unused_blue.port, upstream_b.port),
    );

    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    let log = || format!("xdsd log:\n{}", xdsd.log.text());

    let prod_id = unique_name("envoy-prod");
    let staging_id = unique_name("envoy-staging");
    let prod = Envoy::start(&dynamic_bootstrap_with_metadata(
        &prod_id,
        "{ env: prod }",
        xdsd.port,
        transport,
    ))
    .await;
    let staging = Envoy::start(&dynamic_bootstrap_with_metadata(
        &staging_id,
        "{ env: staging }",
        xdsd.port,
        transport,
    ))
    .await;
    let prod_port = prod.listener_port("listener_0").await;
    let staging_port = staging.listener_port("listener_0").await;

    // 1. Each Envoy reaches its own upstream through its own route and endpoints variants.
    wait_for_body(prod_port, "upstream-a", log).await;
    wait_for_body(staging_port, "upstream-b", log).await;
    assert_eq!(
        (unused_green.hits(), unused_blue.hits()),
        (0, 0),
        "no Envoy ever used the other environment's route variant"
    );

    // 2. Only staging's `green` endpoints variant changes.
    //
    // Which signal shows that prod's Envoy received nothing: its xDS subscription counters.
    // Envoy's gRPC subscription increments `update_attempt` each time the mux hands it a
    // response (and `update_success` or `update_rejected` after), whatever the content; EDS
    // subscriptions are per cluster, and `cluster.green.` is prod's subscription to the very
    // name whose staging variant changes. Over SotW ADS Envoy hands an EDS response to each EDS
    // watch whose names it carries, over delta ADS to the watches of the names it adds or
    // removes: any EDS response about `green` reaching prod moves `cluster.green.update_attempt`
    // (checked by hand: changing prod's own `green` variant at this point fails the comparison
    // below on both transports). All of prod's subscription counters (LDS, CDS, RDS, both EDS
    // clusters) are compared, so a push of any type shows; the same counter moving on staging
    // shows the signal is live.
    let prod_before = subscription_counters(&prod).await;
    let staging_before = subscription_counters(&staging).await;
    let green_attempts = "cluster.green.update_attempt";
    assert!(
        prod_before.get(green_attempts).copied().unwrap_or(0) > 0,
        "prod's Envoy has an EDS subscription for green: {prod_before:#?}"
    );

    let mark = xdsd.log.mark();
    dir.write(
        "endpoints-staging.yaml",
        &endpoints_variants(STAGING_CONSTRAINTS, unused_blue.port, upstream_c.port),
    );
    xdsd.expect_loaded_since(mark).await;
    wait_for_body(staging_port, "upstream-c", log).await;
    let b_hits = upstream_b.hits();
    for _ in 0..3 {
        let resp = http_get(("127.0.0.1", staging_port), "/", "example.test")
            .await
            .expect("a request through staging's Envoy after it moved");
        assert_eq!((resp.status, resp.body.as_str()), (200, "upstream-c"));
    }
    assert_eq!(upstream_b.hits(), b_hits, "staging's traffic left B");
    let a_hits = upstream_a.hits();
    for _ in 0..10 {
        let resp = http_get(("127.0.0.1", prod_port), "/", "example.test")
            .await
            .expect("a request through prod's Envoy after staging moved");
        assert_eq!(
            (resp.status, resp.body.as_str()),
            (200, "upstream-a"),
            "prod's traffic stays on A after staging's variant changed\n{}",
            log()
        );
    }
    assert_eq!(upstream_a.hits(), a_hits + 10, "prod's requests reached A");
    // Staging's update was already applied (its traffic moved): a push to prod for the same
    // change would have been written in the same round. A short pause covers its delivery.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let staging_after = subscription_counters(&staging).await;
    assert!(
        staging_after.get(green_attempts) > staging_before.get(green_attempts),
        "staging's Envoy counted its endpoints update in {green_attempts}: before \
         {staging_before:#?}, after {staging_after:#?}"
    );
    let prod_after = subscription_counters(&prod).await;
    assert_eq!(
        prod_before,
        prod_after,
        "prod's Envoy must receive nothing for a change to staging's variant\n{}",
        log()
    );

    // xdsd's side: it pushed the endpoints to staging's Envoy and nothing of any type to prod's.
    let pushes_to = |node: &str| {
        xdsd.log.matching_since(mark, |line| {
            line.split_whitespace().any(|token| token == "push")
                && log_field(line, "node") == Some(node)
        })
    };
    let to_staging = pushes_to(&staging_id);
    assert!(
        to_staging
            .iter()
            .any(|l| log_field(l, "type_url") == Some(ENDPOINTS)),
        "xdsd pushed staging's new endpoints: {to_staging:#?}\n{}",
        log()
    );
    assert_eq!(
        pushes_to(&prod_id),
        Vec::<String>::new(),
        "xdsd must push nothing to prod for staging's change"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_envoys_get_their_own_variants_over_sotw_ads() {
    scenario(Transport::Ads).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_envoys_get_their_own_variants_over_delta_ads() {
    scenario(Transport::DeltaAds).await;
}
