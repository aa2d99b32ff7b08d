//! TTLs and heartbeats with a real Envoy 1.40 (spec "TTL"). xdsd serves two clusters, one with
//! `"@ttl": 2s`. While xdsd runs, the cluster outlives its TTL many times over (xdsd renews it);
//! once xdsd is gone, Envoy drops that cluster when the TTL passes and keeps the other.
//!
//! Over SotW ADS (Envoy takes `Resource` wrappers there: `xds.config.resource-in-sotw`) and over
//! delta ADS (body-less heartbeats).

use std::time::{Duration, Instant};

use crate::support::scenario::{dynamic_bootstrap, static_cluster_yaml, Transport};
use crate::support::{unique_name, Envoy, ResourceDir, Xdsd};

const TTL: Duration = Duration::from_secs(2);

fn static_cluster(name: &str, ttl: Option<Duration>) -> String {
    let ttl = ttl
        .map(|t| format!("\"@ttl\": {}s\n", t.as_secs()))
        .unwrap_or_default();
    format!("{}{ttl}", static_cluster_yaml(name, 9))
}

/// The dynamic clusters Envoy holds, by its config dump.
async fn dynamic_clusters(envoy: &Envoy) -> Vec<String> {
    let dump = envoy.config_dump().await;
    let Ok(json) = serde_json::from_str::<serde_json::Value>(&dump) else {
        return Vec::new();
    };
    let mut names = Vec::new();
    for config in json["configs"].as_array().into_iter().flatten() {
        for c in config["dynamic_active_clusters"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if let Some(n) = c["cluster"]["name"].as_str() {
                names.push(n.to_owned());
            }
        }
    }
    names.sort();
    names
}

/// Polls until `pred` holds of Envoy's dynamic clusters; panics with them after `within`.
async fn wait_clusters(
    envoy: &Envoy,
    within: Duration,
    what: &str,
    pred: impl Fn(&[String]) -> bool,
) {
    let start = Instant::now();
    loop {
        let names = dynamic_clusters(envoy).await;
        if pred(&names) {
            return;
        }
        if start.elapsed() > within {
            panic!("{what}: Envoy's dynamic clusters after {within:?}: {names:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn ttl_scenario(transport: Transport) {
    let dir = ResourceDir::new();
    dir.write(
        "clusters.yaml",
        &format!(
            "{}---\n{}",
            static_cluster("expiring", Some(TTL)),
            static_cluster("kept", None)
        ),
    );
    let mut xdsd = Xdsd::start(&dir.path()).await;
    let envoy = Envoy::start(&dynamic_bootstrap(
        &unique_name("ttl"),
        xdsd.port,
        transport,
    ))
    .await;
    let both = |n: &[String]| n == ["expiring", "kept"];
    wait_clusters(
        &envoy,
        Duration::from_secs(20),
        "both clusters arrive",
        both,
    )
    .await;

    // Five TTLs later the cluster is still there: xdsd renewed it.
    let held_since = Instant::now();
    while held_since.elapsed() < TTL * 5 {
        let names = dynamic_clusters(&envoy).await;
        assert!(
            both(&names),
            "{transport:?}: the cluster with a TTL expired while xdsd runs, after {:?}: {names:?}\nxdsd log:\n{}",
            held_since.elapsed(),
            xdsd.log.text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // xdsd goes away: the cluster with a TTL goes within its TTL (plus polling slack), the other
    // stays.
    xdsd.terminate().await;
    let stopped = Instant::now();
    wait_clusters(
        &envoy,
        TTL + Duration::from_secs(3),
        "the cluster with a TTL expires once xdsd is gone",
        |n| n == ["kept"],
    )
    .await;
    eprintln!(
        "{transport:?}: expired {:?} after xdsd stopped (TTL {TTL:?})",
        stopped.elapsed()
    );
}

#[tokio::test]
async fn a_resource_with_a_ttl_lives_while_xdsd_heartbeats_and_expires_after_it_stops_sotw() {
    ttl_scenario(Transport::Ads).await;
}

#[tokio::test]
async fn a_resource_with_a_ttl_lives_while_xdsd_heartbeats_and_expires_after_it_stops_delta() {
    ttl_scenario(Transport::DeltaAds).await;
}
