//! Gated rollouts with real Envoys (`--canary cluster=canary --canary-soak 5s`): a valid change
//! reaches the canary Envoy at once and the prod Envoy only once promoted; a change Envoy NACKs
//! reaches only the canary, halts the rollout (the canary rolled back, `/rollout` names the node
//! and Envoy's message) and never reaches prod; a corrected change then rolls out normally. Over
//! SotW and delta ADS.

use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::scenario::{
    basic_resources, dynamic_bootstrap, static_cluster_yaml, Transport,
};
use crate::support::{
    http_get, parse_http_response, unique_name, wait_for_body, Envoy, Upstream, Xdsd, CLUSTER,
    DEADLINE,
};
use xdsd_testsupport::rollout::{is, RolloutState};

/// `GET /rollout` on xdsd's admin port, as JSON.
pub(crate) async fn rollout(admin: u16) -> Value {
    let r = http_get(("127.0.0.1", admin), "/rollout", "localhost")
        .await
        .expect("GET /rollout");
    assert_eq!(r.status, 200, "{}", r.body);
    serde_json::from_str(&r.body).expect("JSON")
}

/// `POST path` on the admin port: (status, body).
pub(crate) async fn post(admin: u16, path: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", admin))
        .await
        .expect("connect");
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: localhost\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    );
    s.write_all(request.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.expect("read");
    let r = parse_http_response(&raw).expect("an HTTP response");
    (r.status, r.body)
}

/// Waits until `/rollout` satisfies `want`; returns it.
pub(crate) async fn wait_rollout(admin: u16, what: &str, want: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + DEADLINE + Duration::from_secs(10);
    loop {
        let now = rollout(admin).await;
        if want(&now) {
            return now;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "/rollout never showed {what}: {now:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits out the soak of a change made at `since`: the thing tested is that nothing happens
/// within it (a halted or aborted change is never promoted), so the wait is the soak the rollout
/// itself reports (`soak_seconds`), from the change, and a second more.
async fn past_the_soak(admin: u16, since: tokio::time::Instant) {
    let r = rollout(admin).await;
    let soak = r["soak_seconds"]
        .as_f64()
        .unwrap_or_else(|| panic!("no soak_seconds: {r:#}"));
    tokio::time::sleep_until(since + Duration::from_secs_f64(soak) + Duration::from_secs(1)).await;
}

/// The body of one request through Envoy's listener.
pub(crate) async fn through(port: u16) -> String {
    let r = http_get(("127.0.0.1", port), "/", "example.test")
        .await
        .expect("a request through Envoy");
    r.body
}

/// Envoy's count of CDS updates it rejected.
async fn rejected(envoy: &Envoy) -> u64 {
    envoy
        .stat("cluster_manager.cds.update_rejected")
        .await
        .unwrap_or(0)
}

/// A bootstrap of `transport` whose node is in `cluster`.
pub(crate) fn bootstrap_in(node: &str, cluster: &str, xds: u16, transport: Transport) -> String {
    dynamic_bootstrap(node, xds, transport).replacen(
        "  cluster: xdsd-tests\n",
        &format!("  cluster: {cluster}\n"),
        1,
    )
}

async fn gated_rollout(transport: Transport) {
    let a = Upstream::start("upstream-a").await;
    let b = Upstream::start("upstream-b").await;
    let dir = basic_resources(transport, a.port);
    let xdsd = Xdsd::start_with_args(
        &dir.path(),
        &[
            "--log-level",
            "info",
            "--canary",
            "cluster=canary",
            "--canary-soak",
            "5s",
        ],
    )
    .await;
    xdsd.expect_loaded_since(0).await;
    let admin = xdsd.admin_port().await;
    let canary_id = unique_name("canary-envoy");
    let canary = Envoy::start(&bootstrap_in(&canary_id, "canary", xdsd.port, transport)).await;
    let prod = Envoy::start(&bootstrap_in(
        &unique_name("prod-envoy"),
        "prod",
        xdsd.port,
        transport,
    ))
    .await;
    let (cport, pport) = (
        canary.listener_port("listener_0").await,
        prod.listener_port("listener_0").await,
    );
    let log = || format!("xdsd log:\n{}", xdsd.log.text());
    wait_for_body(cport, "upstream-a", log).await;
    wait_for_body(pport, "upstream-a", log).await;
    assert_eq!(RolloutState::of(&rollout(admin).await), RolloutState::Idle);

    // 1. A valid change: the canary at once, prod once promoted.
    let mark = xdsd.log.mark();
    dir.write(
        "endpoints.yaml",
        &crate::support::scenario::endpoints_yaml("service", b.port),
    );
    xdsd.expect_loaded_since(mark).await;
    wait_for_body(cport, "upstream-b", log).await;
    let soaking = rollout(admin).await;
    assert_eq!(
        RolloutState::of(&soaking),
        RolloutState::Soaking,
        "{soaking:#}"
    );
    assert_eq!(
        through(pport).await,
        "upstream-a",
        "prod stays on the stable state while the change soaks: {soaking:#}"
    );
    let canaries = soaking["canaries"].as_array().expect("canaries");
    assert!(
        canaries.iter().any(|c| c["node"] == canary_id.as_str()),
        "{soaking:#}"
    );
    assert!(
        canaries.iter().all(|c| c["node"] != "prod"),
        "only canaries are listed: {soaking:#}"
    );
    let promoted = wait_rollout(admin, "the promotion", |r| r["promotions"] == 1).await;
    assert_eq!(
        RolloutState::of(&promoted),
        RolloutState::Idle,
        "{promoted:#}"
    );
    wait_for_body(pport, "upstream-b", log).await;

    // 2. A change Envoy NACKs: only the canary gets it; the rollout halts, the canary is rolled
    // back, prod never sees it.
    let prod_rejected = rejected(&prod).await;
    let bad_written = tokio::time::Instant::now();
    dir.write("bad.yaml", &static_cluster_yaml("bad", 70000));
    let halted = wait_rollout(admin, "the halt", |r| is(r, RolloutState::Halted)).await;
    let halt = &halted["halt"];
    assert_eq!(halt["node"], canary_id.as_str(), "{halted:#}");
    assert_eq!(halt["type_url"], CLUSTER, "{halted:#}");
    let message = halt["message"].as_str().unwrap_or("");
    assert!(
        message.contains("70000") || message.contains("port"),
        "{halted:#}"
    );
    assert!(
        halt["origins"].to_string().contains("bad.yaml"),
        "the halt names the file: {halted:#}"
    );
    xdsd.log
        .expect_line_since(0, &["rollout halted", &canary_id], "the halt at ERROR")
        .await;
    assert!(rejected(&canary).await > 0, "the canary NACKed it");
    // The canary is back on the stable state and still serves traffic.
    assert_eq!(through(cport).await, "upstream-b");
    // Past the soak, nothing is promoted and prod never got it.
    past_the_soak(admin, bad_written).await;
    let still = rollout(admin).await;
    assert_eq!(RolloutState::of(&still), RolloutState::Halted, "{still:#}");
    assert_eq!(still["promotions"], 1, "{still:#}");
    assert_eq!(rejected(&prod).await, prod_rejected, "prod never NACKed");
    assert!(
        !prod.config_dump().await.contains("\"bad\""),
        "prod never got it"
    );
    assert_eq!(through(pport).await, "upstream-b");

    // 3. The fix rolls out normally: the canary, then prod.
    dir.write("bad.yaml", &static_cluster_yaml("bad", b.port.into()));
    wait_rollout(admin, "a new rollout", |r| is(r, RolloutState::Soaking)).await;
    wait_rollout(admin, "the fix promoted", |r| r["promotions"] == 2).await;
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !prod.config_dump().await.contains("\"bad\"") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "prod never got the fixed cluster"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // 4. The operator's levers: promote now, abort.
    dir.write("extra.yaml", &static_cluster_yaml("extra", b.port.into()));
    wait_rollout(admin, "soaking", |r| is(r, RolloutState::Soaking)).await;
    let (status, body) = post(admin, "/rollout/promote").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"promotions\":3"), "{body}");
    let (status, body) = post(admin, "/rollout/promote").await;
    assert_eq!(status, 409, "nothing left to promote: {body}");
    let extra2_written = tokio::time::Instant::now();
    dir.write("extra2.yaml", &static_cluster_yaml("extra2", b.port.into()));
    wait_rollout(admin, "soaking", |r| is(r, RolloutState::Soaking)).await;
    let (status, body) = post(admin, "/rollout/abort").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"state\":\"idle\""), "{body}");
    past_the_soak(admin, extra2_written).await;
    assert!(
        !prod.config_dump().await.contains("\"extra2\""),
        "an aborted change never reaches prod"
    );
    let metrics = http_get(("127.0.0.1", admin), "/metrics", "localhost")
        .await
        .expect("metrics")
        .body;
    assert!(
        metrics.contains("xdsd_rollout_promotions_total 3"),
        "{metrics}"
    );
    assert!(metrics.contains("xdsd_rollout_halts_total 1"), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_rollout_over_sotw_ads_promotes_halts_and_rolls_out_the_fix() {
    gated_rollout(Transport::Ads).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_rollout_over_delta_ads_promotes_halts_and_rolls_out_the_fix() {
    gated_rollout(Transport::DeltaAds).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_answers_404_without_a_cohort() {
    let dir = basic_resources(Transport::Ads, 9);
    let xdsd = Xdsd::start(&dir.path()).await;
    let admin = xdsd.admin_port().await;
    let r = http_get(("127.0.0.1", admin), "/rollout", "localhost")
        .await
        .expect("GET /rollout");
    assert_eq!(r.status, 404, "{}", r.body);
    assert!(r.body.contains("--canary"), "{}", r.body);
}
