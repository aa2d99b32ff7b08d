//! Envoy 1.40 configured by xdsd over one aggregated (ADS) stream: listener → route (RDS over
//! ADS) → cluster → endpoints (EDS over ADS). Traffic reaches upstream A, moves to upstream B
//! when the endpoints file changes, and keeps flowing to B when Envoy NACKs a cluster it refuses
//! (xdsd logs the NACK with Envoy's node id).

use crate::support::scenario::{run_envoy_scenario, Transport};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_over_ads_follows_changes_and_survives_a_nack() {
    run_envoy_scenario(Transport::Ads).await;
}
