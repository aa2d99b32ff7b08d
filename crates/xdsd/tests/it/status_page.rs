//! The admin status page in a real browser (headless Chromium, `XDSD_CHROMIUM`, default
//! /usr/bin/chromium): a real Envoy that NACKed a cluster, a gRPC client whose node id is
//! markup, and a route nothing uses that names a cluster that does not exist. The rendered DOM
//! shows the clients with the NACK's message and file, the configuration graph's nodes with the
//! missing and unused ones marked, each client's page, and the markup node id as text. A
//! screenshot is saved (to `XDSD_STATUS_SCREENSHOT` too when set: how docs/status-page.png is
//! made).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::ads::AdsStream;
use crate::support::scenario::{
    basic_resources, dynamic_bootstrap, envoy_rejected_cluster_yaml, route_yaml, Transport,
};
use crate::support::{
    http_get, unique_name, wait_for_body, Envoy, Upstream, Xdsd, CLUSTER, DEADLINE,
};
use tokio::time::{sleep, timeout, Instant};

/// Chromium from `XDSD_CHROMIUM` (scripts/test sets it), else /usr/bin/chromium; panics with
/// what to do when it is missing.
fn chromium() -> PathBuf {
    let path = std::env::var_os("XDSD_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    assert!(
        path.is_file(),
        "Chromium not found at {}: install the Debian package chromium (scripts/install-deps \
         does) or set XDSD_CHROMIUM to a Chromium binary",
        path.display()
    );
    path
}

/// Runs headless Chromium with `args` and a fresh profile; its stdout.
async fn headless(profile: &Path, args: &[String]) -> String {
    let output = timeout(
        Duration::from_secs(90),
        tokio::process::Command::new(chromium())
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .args(args)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("Chromium finishes within 90 s")
    .expect("Chromium runs");
    assert!(
        output.status.success(),
        "Chromium failed: {:?}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The DOM of `url` after its scripts ran.
pub(crate) async fn dump_dom(url: &str) -> String {
    let profile = tempfile::tempdir().expect("a profile directory");
    headless(profile.path(), &["--dump-dom".into(), url.into()]).await
}

fn query_value(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_in_chromium_shows_clients_nacks_the_graph_and_markup_as_text() {
    let chromium_path = chromium();
    let upstream = Upstream::start("upstream-a").await;
    let dir = basic_resources(Transport::Ads, upstream.port);
    // A route no listener uses, naming a cluster that does not exist.
    dir.write("orphan.yaml", &route_yaml("orphan_route", "ghost"));
    let xdsd = Xdsd::start_with_args(&dir.path(), &["--references", "warn"]).await;
    xdsd.expect_loaded_since(0).await;
    let admin = xdsd.admin_port().await;

    let node_id = unique_name("envoy-page");
    let envoy = Envoy::start(&dynamic_bootstrap(&node_id, xdsd.port, Transport::Ads)).await;
    let port = envoy.listener_port("listener_0").await;
    wait_for_body(port, "upstream-a", || {
        format!("xdsd log:\n{}", xdsd.log.text())
    })
    .await;
    let mark = xdsd.log.mark();
    dir.write("broken.yaml", &envoy_rejected_cluster_yaml("broken"));
    xdsd.expect_loaded_since(mark).await;

    // A client whose node id is markup (it never ACKs: STALE).
    let evil = "evil<script>document.title='pwned'</script>";
    let mut stream = AdsStream::open(&xdsd.url(), evil, CLUSTER, &[])
        .await
        .expect("an ADS stream");
    stream.recv().await.expect("a CDS response");

    // Both on the page, the NACK first.
    let deadline = Instant::now() + DEADLINE;
    loop {
        let page = http_get(("127.0.0.1", admin), "/?refresh=0", "xdsd")
            .await
            .expect("GET /");
        assert_eq!(page.status, 200);
        if page.body.contains("1 NACKED, 1 STALE") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the page never showed both: {}",
            page.body
        );
        sleep(Duration::from_millis(100)).await;
    }

    let base = format!("http://127.0.0.1:{admin}");
    let dom = dump_dom(&format!("{base}/?refresh=0")).await;
    assert!(
        dom.contains("<title>xdsd status</title>"),
        "a script from a node id ran (the title changed): {dom}"
    );
    assert!(!dom.contains("pwned</title>"), "{dom}");
    assert!(
        dom.contains("evil&lt;script&gt;document.title='pwned'&lt;/script&gt;"),
        "the markup node id as text: {dom}"
    );
    assert!(!dom.contains("<script>document.title"), "{dom}");
    assert!(dom.contains(&node_id), "{dom}");
    assert!(
        dom.contains("2 clients: 0 synced, 1 NACKED, 1 STALE"),
        "{dom}"
    );
    let nack_row = dom
        .split("<tr class=\"nack\">")
        .nth(1)
        .unwrap_or_else(|| panic!("a NACK row: {dom}"));
    assert!(nack_row.contains("CDS NACKED"), "{nack_row}");
    // The cell says the version rejected, as the NACK's row does, and the one still run.
    let rejected = nack_row
        .split("NACKED version ")
        .nth(1)
        .and_then(|r| r.split(':').next())
        .unwrap_or_else(|| panic!("the rejected version: {nack_row}"));
    assert!(
        dom.contains(&format!(
            "NACKED <span class=\"mono\">rejected {rejected}, accepted "
        )),
        "{dom}"
    );
    assert!(nack_row.contains("broken"), "Envoy's message: {nack_row}");
    assert!(nack_row.contains("broken.yaml"), "the file: {nack_row}");
    // NACKED first.
    let envoy_at = dom.find(&node_id).expect("the Envoy row");
    let evil_at = dom.find("evil&lt;script").expect("the evil row");
    assert!(envoy_at < evil_at, "the NACKED row first");

    // The graph, from the store's references.
    let svg = dom
        .split("<svg id=\"graph\"")
        .nth(1)
        .and_then(|s| s.split("</svg>").next())
        .unwrap_or_else(|| panic!("the graph: {dom}"));
    for name in [
        "listener_0",
        "route_0",
        "service",
        "orphan_route",
        "ghost",
        "broken",
    ] {
        assert!(
            svg.contains(&format!(">{name}")),
            "{name} in the graph: {svg}"
        );
    }
    assert!(svg.contains("<line class=\"edge\""), "{svg}");
    let missing = svg
        .split("<g class=\"resource missing\"")
        .nth(1)
        .unwrap_or_else(|| panic!("a missing node: {svg}"));
    assert!(missing.contains("ghost (missing)"), "{missing}");
    let unused = svg
        .split("<g class=\"resource unused\"")
        .find(|g| g.contains("<title>orphan_route (unused) from "))
        .unwrap_or_else(|| panic!("the unused route: {svg}"));
    assert!(unused.contains("orphan.yaml"), "its file: {unused}");

    // The Envoy's page: its resources with their files, the NACK.
    let client = dump_dom(&format!(
        "{base}/client?node={}&refresh=0",
        query_value(&node_id)
    ))
    .await;
    assert!(client.contains("NACK of version"), "{client}");
    assert!(client.contains("broken.yaml"), "{client}");
    assert!(
        client.contains("cluster.yaml"),
        "the origin of service: {client}"
    );
    assert!(
        client.contains("listener_0") && client.contains("route_0"),
        "{client}"
    );

    // The markup client's page shows its id as text.
    let evil_page = dump_dom(&format!(
        "{base}/client?node={}&refresh=0",
        query_value(evil)
    ))
    .await;
    assert!(
        evil_page.contains(
            "<span id=\"node\">evil&lt;script&gt;document.title='pwned'&lt;/script&gt;</span>"
        ),
        "{evil_page}"
    );
    assert!(!evil_page.contains("<script>document.title"), "{evil_page}");

    // A screenshot.
    let shots = tempfile::tempdir().expect("a directory");
    let png = shots.path().join("status-page.png");
    let profile = tempfile::tempdir().expect("a profile directory");
    headless(
        profile.path(),
        &[
            format!("--screenshot={}", png.display()),
            "--window-size=1280,640".into(),
            "--hide-scrollbars".into(),
            format!("{base}/?refresh=0"),
        ],
    )
    .await;
    let bytes = std::fs::read(&png).unwrap_or_else(|e| {
        panic!(
            "{} wrote no screenshot at {}: {e}",
            chromium_path.display(),
            png.display()
        )
    });
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 10_000,
        "a PNG"
    );
    if let Some(copy) = std::env::var_os("XDSD_STATUS_SCREENSHOT") {
        std::fs::copy(&png, &copy).expect("copying the screenshot");
    }

    drop(stream);
    drop(envoy);
}
