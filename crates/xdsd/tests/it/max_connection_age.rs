//! `xdsd serve --max-connection-age`: a real Envoy on ADS is moved to a new connection again and
//! again (GOAWAY at the age, its stream ended with UNAVAILABLE after the grace) while traffic
//! flows through its listener: no request fails, and on each reconnect it is resent nothing
//! (its `version_info` is current, so xdsd does not answer until something changes). The same
//! through `xdsd relay --max-connection-age` (`relay::`): the relay's downstream option.

use std::time::{Duration, Instant};

use crate::support::relay::{direct_and_relayed, Mode, Served};
use crate::support::scenario::{basic_resources, dynamic_bootstrap, move_endpoints_to, Transport};
use crate::support::{http_get, unique_name, wait_for_body, Envoy, Upstream, DEADLINE};

/// The sum of the samples of `metric` (every label set) in xdsd's `/metrics`.
async fn metric(admin: u16, metric: &str) -> u64 {
    let response = http_get(("127.0.0.1", admin), "/metrics", "localhost")
        .await
        .expect("xdsd's /metrics");
    assert_eq!(response.status, 200);
    response
        .body
        .lines()
        .filter(|l| {
            l.strip_prefix(metric)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Envoy's update counters of each xDS type: (attempts, successes).
async fn updates(envoy: &Envoy) -> Vec<(String, u64)> {
    let mut all = Vec::new();
    for stat in [
        "listener_manager.lds.update_success",
        "cluster_manager.cds.update_success",
        "listener_manager.lds.update_attempt",
        "cluster_manager.cds.update_attempt",
    ] {
        all.push((stat.to_owned(), envoy.stat(stat).await.unwrap_or(0)));
    }
    for (name, value) in envoy
        .text_stats("(rds|eds).*update_(success|attempt)$")
        .await
    {
        all.push((name, value.parse().unwrap_or(0)));
    }
    all
}

async fn envoy_moved_to_new_connections_by_max_connection_age_loses_no_request_and_is_resent_nothing(
    mode: Mode,
) {
    let upstream = Upstream::start("upstream-a").await;
    let dir = basic_resources(Transport::Ads, upstream.port);
    let served = Served::start(
        &dir.path(),
        &[
            "--max-connection-age",
            "2s",
            "--max-connection-age-grace",
            "1s",
        ],
        mode,
    )
    .await;
    let xdsd = &served.xdsd;
    xdsd.expect_loaded_since(0).await;
    // The server Envoy talks to: xdsd, or the relay.
    let admin = served.admin_port().await;
    let envoy = Envoy::start(&dynamic_bootstrap(
        &unique_name("aged-envoy"),
        served.port(),
        Transport::Ads,
    ))
    .await;
    let port = envoy.listener_port("listener_0").await;
    wait_for_body(port, "upstream-a", || {
        format!("log:\n{}", served.log().text())
    })
    .await;

    let opened = metric(admin, "xdsd_streams_opened_total").await;
    let sent = metric(admin, "xdsd_resources_sent_total").await;
    let responses = metric(admin, "xdsd_responses_total").await;
    let envoy_before = updates(&envoy).await;

    // Traffic through Envoy's listener until Envoy has been moved to a new stream (and
    // connection) three times.
    const MOVES: u64 = 3;
    let started = Instant::now();
    let (mut ok, mut failed) = (0u32, Vec::new());
    loop {
        match http_get(("127.0.0.1", port), "/", "example.test").await {
            Ok(r) if r.status == 200 && r.body == "upstream-a" => ok += 1,
            Ok(r) => failed.push(format!("{} {:?}", r.status, r.body)),
            Err(e) => failed.push(e.to_string()),
        }
        if ok % 20 == 0 && metric(admin, "xdsd_streams_opened_total").await >= opened + MOVES {
            break;
        }
        assert!(
            started.elapsed() < DEADLINE + Duration::from_secs(20),
            "Envoy was not moved {MOVES} times in time. Log:\n{}",
            served.log().text()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = started.elapsed();
    let connections = envoy.stat("cluster.xds_cluster.upstream_cx_total").await;
    let envoy_after = updates(&envoy).await;
    let resent = metric(admin, "xdsd_resources_sent_total").await - sent;
    let pushes = metric(admin, "xdsd_responses_total").await - responses;
    eprintln!(
        "{ok} requests in {took:?}, {} failed; Envoy's xDS connections: {connections:?}; \
         resources resent {resent}, responses {pushes}; Envoy before {envoy_before:?} after {envoy_after:?}",
        failed.len()
    );
    assert!(failed.is_empty(), "failed requests: {failed:?}");
    assert!(
        connections.is_some_and(|c| c > MOVES),
        "Envoy reconnected over new connections: {connections:?}"
    );
    // On each new stream Envoy asks with the versions it holds, which are current: nothing is
    // resent, and Envoy applies no update.
    assert_eq!(resent, 0, "resources resent on reconnects");
    assert_eq!(pushes, 0, "responses sent on reconnects");
    let changed: Vec<_> = envoy_before
        .iter()
        .zip(&envoy_after)
        .filter(|(b, a)| b.0.ends_with("update_success") && b != a)
        .collect();
    assert!(changed.is_empty(), "Envoy applied updates: {changed:?}");

    // A change still reaches it, on whichever connection it is now.
    let upstream_b = Upstream::start("upstream-b").await;
    move_endpoints_to(&dir, xdsd, port, &upstream_b).await;
}

direct_and_relayed!(
    envoy_moved_to_new_connections_by_max_connection_age_loses_no_request_and_is_resent_nothing,
);
