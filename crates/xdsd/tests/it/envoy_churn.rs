//! Envoy under churn, over ADS: the endpoints of its cluster are rewritten a hundred times in a
//! row. xdsd has one response of a type in flight at a time (the next waits for Envoy's ACK of
//! the last; `--ack-wait`), so what changed while Envoy applied one response goes out together in
//! the next. Run with a wait of a minute: were Envoy's ACKs not matched to the response in
//! flight, the last endpoints would not arrive within the test's deadline.

use std::time::Duration;

use crate::support::scenario::{basic_resources, dynamic_bootstrap, endpoints_yaml, Transport};
use crate::support::{unique_name, wait_for_body, Envoy, Upstream, Xdsd};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_under_endpoint_churn_ends_with_the_last_endpoints_and_never_nacks() {
    let upstream_a = Upstream::start("upstream-a").await;
    let upstream_b = Upstream::start("upstream-b").await;
    let dir = basic_resources(Transport::Ads, upstream_a.port);
    let xdsd = Xdsd::start_with_args(&dir.path(), &["--ack-wait", "60s"]).await;
    xdsd.expect_loaded_since(0).await;
    let node_id = unique_name("envoy-churn");
    let envoy = Envoy::start(&dynamic_bootstrap(&node_id, xdsd.port, Transport::Ads)).await;
    let port = envoy.listener_port("listener_0").await;
    let context = || format!("xdsd log:\n{}", xdsd.log.text());
    wait_for_body(port, "upstream-a", context).await;

    let mark = xdsd.log.mark();
    // Each rewrite a real change (a port nobody is asked to reach), the last one to B.
    for i in 0..100u16 {
        let port = if i == 99 { upstream_b.port } else { 40_000 + i };
        dir.write("endpoints.yaml", &endpoints_yaml("service", port));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    wait_for_body(port, "upstream-b", context).await;
    let nacks = xdsd.log.matching_since(mark, |l| l.contains("NACK"));
    assert!(nacks.is_empty(), "Envoy NACKed under churn: {nacks:?}");
    assert_eq!(
        envoy
            .stat("cluster.service.update_rejected")
            .await
            .unwrap_or(0),
        0,
        "Envoy rejected none of the endpoint updates"
    );
}
