//! The process contract: xdsd reports the port it listens on, and SIGTERM while a client stream
//! is open shuts it down gracefully with exit code 0; gRPC health and /readyz say SERVING once
//! loaded, NOT_SERVING while shutting down, and follow whether the resource directory can be
//! read.

use std::time::Duration;

use tokio_stream::StreamExt;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use crate::support::ads::{self, AdsStream};
use crate::support::{health_client, http_get, unique_name, ResourceDir, Xdsd, CLUSTER, DEADLINE};

fn cluster_file() -> String {
    format!("\"@type\": {CLUSTER}\nname: c\ntype: STATIC\nconnect_timeout: 1s\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_serving_once_loaded_and_not_serving_while_shutting_down() {
    let dir = ResourceDir::new();
    dir.write("c.yaml", &cluster_file());
    let mut xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    let mut health = health_client(&xdsd).await;
    let mut watch = health
        .watch(HealthCheckRequest::default())
        .await
        .expect("a health watch")
        .into_inner();
    let first = watch.next().await.expect("a status").expect("SERVING");
    assert_eq!(first.status(), ServingStatus::Serving);
    // An ADS stream keeps the server busy while it shuts down.
    let mut stream = AdsStream::open(&xdsd.url(), &unique_name("health-node"), CLUSTER, &[])
        .await
        .expect("an ADS stream to xdsd");
    stream.recv().await.expect("a CDS response");
    xdsd.sigterm();
    let next = tokio::time::timeout(DEADLINE, watch.next())
        .await
        .expect("a status in time")
        .expect("a status before the watch ends")
        .expect("NOT_SERVING");
    assert_eq!(next.status(), ServingStatus::NotServing);
    let status = xdsd.exit_status().await;
    assert_eq!(status.code(), Some(0), "{}", xdsd.log.text());
}

/// GET `path` on the admin port until `want` answers, or panics with the last answer.
async fn wait_for_admin(port: u16, path: &str, want: impl Fn(u16, &str) -> bool) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let last = match http_get(("127.0.0.1", port), path, "localhost").await {
            Ok(r) if want(r.status, &r.body) => return,
            Ok(r) => format!("{} {}", r.status, r.body),
            Err(e) => e.to_string(),
        };
        assert!(
            tokio::time::Instant::now() < deadline,
            "GET {path}: still {last}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Ready tracks the source: a change rejected for its content keeps xdsd ready (it serves the
/// last good state, as every replica on the same directory does); a resource directory that
/// cannot be read (deleted) makes it not ready, gRPC health and /readyz alike, until it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_whether_the_resource_directory_can_be_read() {
    let dir = ResourceDir::new();
    dir.write("c.yaml", &cluster_file());
    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    let admin = xdsd.admin_port().await;
    let mut health = health_client(&xdsd).await;
    let check = |health: &mut HealthClient<_>| {
        let mut health = health.clone();
        async move {
            health
                .check(HealthCheckRequest::default())
                .await
                .expect("a health answer")
                .into_inner()
                .status()
        }
    };
    assert_eq!(check(&mut health).await, ServingStatus::Serving);

    // Rejected content: still ready.
    let mark = xdsd.log.mark();
    dir.write("bad.yaml", "\"@type\": nonsense\n");
    xdsd.log
        .expect_line_since(mark, &["change rejected"], "the bad file to be rejected")
        .await;
    wait_for_admin(admin, "/readyz", |status, _| status == 200).await;
    assert_eq!(check(&mut health).await, ServingStatus::Serving);
    dir.remove("bad.yaml");

    // The directory gone: not ready.
    let aside = dir.path().with_file_name("aside");
    std::fs::rename(dir.path(), &aside).expect("the directory moved away");
    wait_for_admin(admin, "/readyz", |status, _| status == 503).await;
    assert_eq!(check(&mut health).await, ServingStatus::NotServing);
    wait_for_admin(admin, "/metrics", |_, body| {
        body.contains("xdsd_source_healthy 0")
    })
    .await;
    // Its streams are still served the last good state meanwhile.
    let mut stream = AdsStream::open(&xdsd.url(), &unique_name("ready-node"), CLUSTER, &[])
        .await
        .expect("an ADS stream to xdsd");
    let resp = stream.recv().await.expect("a CDS response");
    assert_eq!(ads::names(&resp), ["c"]);

    // Back: ready again.
    std::fs::rename(&aside, dir.path()).expect("the directory moved back");
    wait_for_admin(admin, "/readyz", |status, _| status == 200).await;
    assert_eq!(check(&mut health).await, ServingStatus::Serving);
    wait_for_admin(admin, "/metrics", |_, body| {
        body.contains("xdsd_source_healthy 1")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_an_open_stream_exits_zero() {
    let dir = ResourceDir::new();
    dir.write("c.yaml", &cluster_file());
    let mut xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;

    let mut stream = AdsStream::open(&xdsd.url(), &unique_name("term-node"), CLUSTER, &[])
        .await
        .expect("an ADS stream to xdsd");
    let resp = stream.recv().await.expect("a CDS response");
    assert_eq!(ads::names(&resp), ["c"]);

    let status = xdsd.terminate().await;
    assert_eq!(
        status.code(),
        Some(0),
        "exit status after SIGTERM ({status}). Log:\n{}",
        xdsd.log.text()
    );
}

/// `--log-format json`: every log line is one JSON object with the event's fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_one_object_per_line() {
    let dir = ResourceDir::new();
    dir.write("c.yaml", &cluster_file());
    let mut xdsd = Xdsd::start_with_args(&dir.path(), &["--log-format", "json"]).await;
    xdsd.log
        .expect_line_since(0, &["resources loaded"], "the load")
        .await;
    xdsd.terminate().await;
    let lines = xdsd.log.lines();
    assert!(lines.len() >= 3, "{lines:#?}");
    for line in &lines {
        let event: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON object ({e}): {line}"));
        assert!(
            event["level"].is_string() && event["fields"]["message"].is_string(),
            "{line}"
        );
    }
    assert!(lines.iter().any(|l| {
        serde_json::from_str::<serde_json::Value>(l).is_ok_and(|e| {
            e["fields"]["message"] == "resources loaded" && e["fields"]["resources"] == 1
        })
    }));
}

/// A fresh xdsd's /metrics already has every counter's known series, at 0: an alert on
/// `increase(xdsd_reloads_total{result="rejected"}[5m]) > 0` works from the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_xdsd_has_every_counter_at_zero() {
    let dir = ResourceDir::new();
    dir.write("c.yaml", &cluster_file());
    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    let admin = xdsd.admin_port().await;
    let metrics = http_get(("127.0.0.1", admin), "/metrics", "localhost")
        .await
        .expect("a /metrics answer");
    assert_eq!(metrics.status, 200);
    let mut want: Vec<String> = ["applied", "unchanged", "rejected"]
        .iter()
        .map(|r| format!(r#"xdsd_reloads_total{{result="{r}"}} 0"#))
        .collect();
    for variant in ["sotw", "delta"] {
        for service in ["ads", "per_type"] {
            want.push(format!(
                r#"xdsd_streams_opened_total{{flavor="{variant}",service="{service}"}} 0"#
            ));
        }
    }
    // The type the store holds.
    for family in ["responses", "acks", "nacks"] {
        want.push(format!(r#"xdsd_{family}_total{{type_url="{CLUSTER}"}} 0"#));
    }
    for line in want {
        assert!(
            metrics.body.lines().any(|l| l == line),
            "no `{line}` in:\n{}",
            metrics.body
        );
    }
}
