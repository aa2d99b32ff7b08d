//! `xdsd status` after a reconnect (issue #45): xdsd is restarted under a real Envoy 1.40 with
//! the same resources; Envoy reconnects saying which versions it holds (SotW `version_info`,
//! delta `initial_resource_versions`), nothing is resent, and the client is recorded as holding
//! them: `xdsd status --wait` exits 0 with every type SYNCED, not `NOT SENT`.

use std::time::Duration;

use crate::status_cli::{describe, stdout, xdsd_status};
use crate::support::scenario::{basic_resources, dynamic_bootstrap, Transport};
use crate::support::{unique_name, wait_for_body, Envoy, ResourceDir, Upstream, Xdsd, DEADLINE};
use tokio::time::{sleep, Instant};

/// How long Envoy may take to reconnect to the restarted xdsd: its retry backoff grows (with
/// jitter) on every failed attempt while xdsd is down.
const RECONNECT_DEADLINE: Duration = Duration::from_secs(90);

/// Starts xdsd on `listen`, the port the previous one held (retried until [`DEADLINE`] in case
/// the port is not free at once).
async fn start_again_on(dir: &ResourceDir, listen: &str) -> Xdsd {
    let deadline = Instant::now() + DEADLINE;
    loop {
        match Xdsd::try_start_on(&dir.path(), listen, &[]).await {
            Ok(xdsd) => return xdsd,
            Err(why) if Instant::now() >= deadline => {
                panic!("cannot start xdsd again on {listen} within {DEADLINE:?}: {why}")
            }
            Err(_) => sleep(Duration::from_millis(250)).await,
        }
    }
}

async fn status_wait_holds_after_a_restart(transport: Transport) {
    let upstream = Upstream::start("upstream-a").await;
    let dir = basic_resources(transport, upstream.port);
    let mut xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    let node_id = unique_name("envoy-reconnect");
    let envoy = Envoy::start(&dynamic_bootstrap(&node_id, xdsd.port, transport)).await;
    let port = envoy.listener_port("listener_0").await;
    wait_for_body(port, "upstream-a", || {
        format!("xdsd log:\n{}", xdsd.log.text())
    })
    .await;
    let before = xdsd_status(&xdsd, &["--wait", "--timeout", "30s"]).await;
    assert_eq!(before.status.code(), Some(0), "{}", describe(&before));

    let listen = xdsd.authority();
    let exit = xdsd.terminate().await;
    assert_eq!(exit.code(), Some(0), "xdsd's exit after SIGTERM");
    let xdsd = start_again_on(&dir, &listen).await;
    xdsd.expect_loaded_since(0).await;

    // Envoy reconnects: its row is back (with every type it had) once it subscribed again.
    let deadline = Instant::now() + RECONNECT_DEADLINE;
    loop {
        let output = xdsd_status(&xdsd, &["--output", "json"]).await;
        let rows: serde_json::Value =
            serde_json::from_slice(&output.stdout).unwrap_or(serde_json::Value::Null);
        let types = rows["clients"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["id"] == node_id.as_str())
            .map(|r| r["types"].as_array().map_or(0, Vec::len))
            .unwrap_or(0);
        if types >= 4 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Envoy did not reconnect within {RECONNECT_DEADLINE:?}: {}\nxdsd log:\n{}",
            describe(&output),
            xdsd.log.text()
        );
        sleep(Duration::from_millis(200)).await;
    }
    let after = xdsd_status(&xdsd, &["--wait", "--timeout", "20s"]).await;
    let text = stdout(&after);
    assert_eq!(
        after.status.code(),
        Some(0),
        "a client holding the current versions is synced: {}\nxdsd log:\n{}",
        describe(&after),
        xdsd.log.text()
    );
    assert!(text.contains("1 client: 1 synced"), "{text}");
    assert!(!text.contains("NOT SENT"), "{text}");
    // The versions it holds are shown, as before the restart.
    let row = text
        .lines()
        .find(|l| l.starts_with(&node_id))
        .unwrap_or_else(|| panic!("a row for {node_id}: {text}"));
    assert_eq!(
        row.matches("SYNCED ").count(),
        4,
        "LDS, RDS, CDS and EDS each synced with a version: {row}"
    );
    // Traffic still flows on what Envoy held.
    wait_for_body(port, "upstream-a", || {
        format!("xdsd log:\n{}", xdsd.log.text())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_wait_succeeds_after_envoy_reconnects_over_sotw_holding_the_current_versions() {
    status_wait_holds_after_a_restart(Transport::Ads).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_wait_succeeds_after_envoy_reconnects_over_delta_holding_the_current_resources() {
    status_wait_holds_after_a_restart(Transport::DeltaAds).await;
}
