//! The Envoy scenario of `envoy_ads.rs` over separate per-type SotW streams: LDS and CDS from the
//! bootstrap's `api_config_source` (gRPC, not ADS), RDS and EDS from `api_config_source` in the
//! served listener and cluster.

use crate::support::scenario::{run_envoy_scenario, Transport};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_over_per_type_streams_follows_changes_and_survives_a_nack() {
    run_envoy_scenario(Transport::PerType).await;
}
