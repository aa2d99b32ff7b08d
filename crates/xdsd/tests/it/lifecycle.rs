//! The process contract: xdsd reports the port it listens on, and SIGTERM while a client stream
//! is open shuts it down gracefully with exit code 0.

use crate::support::ads::{self, AdsStream};
use crate::support::{unique_name, ResourceDir, Xdsd, CLUSTER};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_an_open_stream_exits_zero() {
    let dir = ResourceDir::new();
    dir.write(
        "c.yaml",
        &format!("\"@type\": {CLUSTER}\nname: c\ntype: STATIC\nconnect_timeout: 1s\n"),
    );
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
    dir.write(
        "c.yaml",
        &format!("\"@type\": {CLUSTER}\nname: c\ntype: STATIC\nconnect_timeout: 1s\n"),
    );
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
