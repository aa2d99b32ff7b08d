//! The size flags of `xdsd serve`: `--max-request-bytes` is the largest request a stream takes
//! (and a relay's, `relay::`); `--release-memory` returns what bursts freed.

use crate::support::ads::AdsStream;
use crate::support::relay::{direct_and_relayed, Mode, Served};
use crate::support::{log_field, unique_name, ResourceDir, Xdsd, CLUSTER, ENDPOINTS};

async fn max_request_bytes_ends_a_larger_request_with_resource_exhausted(mode: Mode) {
    let dir = ResourceDir::new();
    dir.write(
        "c.yaml",
        &format!("\"@type\": {CLUSTER}\nname: c\ntype: STATIC\nconnect_timeout: 1s\n"),
    );
    let served = Served::start(&dir.path(), &["--max-request-bytes", "64KiB"], mode).await;
    served.xdsd.expect_loaded_since(0).await;

    // 2,000 names of 40 bytes: about 84 KB.
    let names: Vec<String> = (0..2000).map(|i| format!("endpoints-{i:030}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let node = unique_name("big-request");
    let mut big = AdsStream::open(&served.url(), &node, ENDPOINTS, &names)
        .await
        .expect("an ADS stream to xdsd");
    let error = big.recv().await.expect_err("the stream ends");
    assert!(
        error.contains("Some resource has been exhausted") && error.contains("65536 bytes"),
        "RESOURCE_EXHAUSTED naming the limit: {error}"
    );
    let ending = served
        .log()
        .expect_line_since(0, &["ending stream"], "xdsd to log why it ended the stream")
        .await;
    assert_eq!(
        log_field(&ending, "code"),
        Some("ResourceExhausted"),
        "{ending}"
    );

    // A request under the limit is served.
    let mut small = AdsStream::open(&served.url(), &node, CLUSTER, &[])
        .await
        .expect("an ADS stream to xdsd");
    small.recv().await.expect("a CDS response");
}

direct_and_relayed!(max_request_bytes_ends_a_larger_request_with_resource_exhausted);

/// Client-supplied text in logs: a newline in a node id cannot forge a log line, and a 100 KB node
/// id is cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_node_id_cannot_forge_log_lines_nor_flood_them() {
    let dir = ResourceDir::new();
    dir.write(
        "c.yaml",
        &format!("\"@type\": {CLUSTER}\nname: c\ntype: STATIC\nconnect_timeout: 1s\n"),
    );
    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    let forged = "evil\n2026-01-01T00:00:00.000000Z  INFO xdsd: FORGED LINE";
    let mut stream = AdsStream::open(&xdsd.url(), forged, CLUSTER, &[])
        .await
        .expect("an ADS stream");
    stream.recv().await.expect("served");
    let long = format!("long-{}", "x".repeat(100_000));
    let mut stream = AdsStream::open(&xdsd.url(), &long, CLUSTER, &[])
        .await
        .expect("an ADS stream");
    stream.recv().await.expect("served");
    xdsd.log
        .expect_line_since(
            0,
            &["node identified", "long-xxx"],
            "the long node identified",
        )
        .await;
    let lines = xdsd.log.lines();
    assert!(
        !lines.iter().any(|l| l.starts_with("2026-01-01T00:00:00")),
        "a forged line: {lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("evil\\n2026-01-01")),
        "the node id shown escaped"
    );
    assert!(
        lines.iter().all(|l| l.len() < 4096),
        "no line carries the 100 KB node id"
    );
}

/// `--release-memory`: what start-up left free is returned before serving, and what a burst
/// freed without the resident size growing (here 20,000 clusters removed) once it is over; off,
/// nothing is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_a_burst_freed_is_returned_once_it_is_over_unless_release_memory_is_off() {
    let released = |line: &str| {
        let kib = |key| log_field(line, key).and_then(|v| v.parse::<u64>().ok());
        (kib("before_kib"), kib("after_kib"))
    };
    let dir = ResourceDir::new();
    dir.write(
        "c.yaml",
        &format!("\"@type\": {CLUSTER}\nname: c\ntype: STATIC\nconnect_timeout: 1s\n"),
    );
    let xdsd = Xdsd::start(&dir.path()).await;
    let at_start = xdsd
        .log
        .expect_line_since(0, &["released free memory"], "a release at start")
        .await;
    assert!(
        matches!(released(&at_start), (Some(b), Some(a)) if a <= b),
        "{at_start}"
    );

    // 20,000 clusters read, parsed and committed, then removed.
    let many: String = (0..20_000)
        .map(|i| {
            format!(
                "- \"@type\": {CLUSTER}\n  name: burst-{i:05}\n  type: STATIC\n  \
                 connect_timeout: 1s\n"
            )
        })
        .collect();
    let mark = xdsd.log.mark();
    dir.write("many.yaml", &many);
    xdsd.expect_loaded_since(mark).await;
    let mark = xdsd.log.mark();
    dir.remove("many.yaml");
    xdsd.expect_loaded_since(mark).await;
    // The removed clusters are freed as the commit ends; a release while the load or the
    // removal ran (what a parse left free) comes before that.
    let mark = xdsd.log.mark();
    let after_removal = xdsd
        .log
        .expect_line_since(
            mark,
            &["released free memory"],
            "a release after the removal",
        )
        .await;
    match released(&after_removal) {
        (Some(before), Some(after)) => assert!(
            after + 4 * 1024 <= before,
            "the release returned 4 MiB at least: {after_removal}"
        ),
        _ => panic!("sizes in the release's line: {after_removal}"),
    }
    drop(xdsd);

    let off = Xdsd::start_with_args(
        &dir.path(),
        &["--log-level", "debug", "--release-memory", "off"],
    )
    .await;
    off.expect_loaded_since(0).await;
    assert!(
        off.log
            .matching_since(0, |l| l.contains("released free memory"))
            .is_empty(),
        "{}",
        off.log.text()
    );
}
