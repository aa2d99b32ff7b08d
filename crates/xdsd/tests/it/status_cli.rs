//! `xdsd status` against a real xdsd and a real Envoy 1.40: every client SYNCED, then Envoy
//! NACKs a cluster it refuses and the table shows the NACKED row with Envoy's message and the
//! file of the cluster; `--wait` exits 1 while the NACK stands, and 0 once the file is removed.

use std::process::Output;
use std::time::Duration;

use crate::support::scenario::{
    basic_resources, dynamic_bootstrap, envoy_rejected_cluster_yaml, Transport,
};
use crate::support::{unique_name, wait_for_body, Envoy, Upstream, Xdsd, DEADLINE};
use tokio::time::{sleep, Instant};

/// Runs `xdsd status --server <xdsd> ARGS` with no colours.
pub async fn xdsd_status(xdsd: &Xdsd, args: &[&str]) -> Output {
    status_command(xdsd, args)
        .output()
        .await
        .expect("xdsd status runs")
}

/// Runs `xdsd status --server SERVER ARGS` with no colours.
pub async fn status_at(server: &str, args: &[&str]) -> Output {
    status_command_at(server, args)
        .output()
        .await
        .expect("xdsd status runs")
}

fn status_command(xdsd: &Xdsd, args: &[&str]) -> tokio::process::Command {
    status_command_at(&format!("127.0.0.1:{}", xdsd.port), args)
}

fn status_command_at(server: &str, args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_xdsd"));
    command
        .arg("status")
        .arg("--server")
        .arg(server)
        .args(args)
        .env_remove("XDSD_STATUS_SERVER")
        .env_remove("XDSD_STATUS_OUTPUT")
        .env_remove("XDSD_STATUS_WAIT")
        .env_remove("XDSD_STATUS_TIMEOUT")
        .env_remove("XDSD_STATUS_ADMIN")
        .kill_on_drop(true);
    command
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn describe(output: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        stdout(output),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// `xdsd status` until its output contains `needle`; panics after DEADLINE with the last one.
async fn status_until(xdsd: &Xdsd, needle: &str) -> Output {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let output = xdsd_status(xdsd, &[]).await;
        if stdout(&output).contains(needle) {
            return output;
        }
        assert!(
            Instant::now() < deadline,
            "xdsd status never showed {needle:?}: {}\nxdsd log:\n{}",
            describe(&output),
            xdsd.log.text()
        );
        sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xdsd_status_shows_envoys_nack_with_its_message_and_file_and_wait_exits_1_then_0() {
    let upstream = Upstream::start("upstream-a").await;
    let dir = basic_resources(Transport::Ads, upstream.port);
    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    let node_id = unique_name("envoy-status");
    let envoy = Envoy::start(&dynamic_bootstrap(&node_id, xdsd.port, Transport::Ads)).await;
    let port = envoy.listener_port("listener_0").await;
    wait_for_body(port, "upstream-a", || {
        format!("xdsd log:\n{}", xdsd.log.text())
    })
    .await;

    // Synced: --wait returns 0 at once.
    let synced = xdsd_status(&xdsd, &["--wait", "--timeout", "30s"]).await;
    assert_eq!(synced.status.code(), Some(0), "{}", describe(&synced));
    let text = stdout(&synced);
    assert!(text.contains(&node_id), "{text}");
    assert!(text.contains("CDS") && text.contains("SYNCED"), "{text}");
    assert!(text.contains("1 client: 1 synced"), "{text}");
    assert!(
        !text.contains('\x1b'),
        "no colours off a terminal: {text:?}"
    );

    // A cluster Envoy refuses.
    let mark = xdsd.log.mark();
    dir.write("broken.yaml", &envoy_rejected_cluster_yaml("broken"));
    xdsd.expect_loaded_since(mark).await;
    let nacked = status_until(&xdsd, "NACKED").await;
    assert_eq!(nacked.status.code(), Some(1), "{}", describe(&nacked));
    let text = stdout(&nacked);
    let row = text
        .lines()
        .find(|l| l.starts_with(&node_id))
        .unwrap_or_else(|| panic!("a row for {node_id}: {text}"));
    assert!(row.contains("NACKED"), "the CDS cell: {row}");
    assert!(
        text.contains(&format!("{node_id} CDS NACKED: ")) && text.contains("broken"),
        "Envoy's message: {text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("  from ") && l.ends_with("/broken.yaml (resource #1)")),
        "the file: {text}"
    );
    assert!(text.contains("1 client: 0 synced, 1 NACKED"), "{text}");

    // One client: its resources, the NACK's version, message and file.
    let one = xdsd_status(&xdsd, &[&node_id]).await;
    assert!(
        !stdout(&one).contains("cluster.yaml"),
        "CSDS alone has no resource's file: {}",
        describe(&one)
    );
    // With the admin address, each resource's own version and file.
    let admin = format!("127.0.0.1:{}", xdsd.admin_port().await);
    let with_files = xdsd_status(&xdsd, &[&node_id, "--admin", &admin]).await;
    let files = stdout(&with_files);
    for (name, file) in [
        ("service", "/cluster.yaml (resource #1)"),
        ("broken", "/broken.yaml (resource #1)"),
        ("listener_0", "/listener.yaml (resource #1)"),
    ] {
        assert!(
            files
                .lines()
                .any(|l| l.trim_start().starts_with(name) && l.ends_with(file)),
            "{name} from {file}: {files}"
        );
    }
    assert_eq!(one.status.code(), Some(1), "{}", describe(&one));
    let text = stdout(&one);
    let text_one = text.clone();
    assert!(text.contains("CDS NACKED"), "{text}");
    assert!(text.contains("NACK of version "), "{text}");
    assert!(text.contains("broken.yaml (resource #1)"), "{text}");
    for name in ["service", "broken", "listener_0", "route_0"] {
        assert!(
            text.lines().any(|l| l.trim_start().starts_with(name)),
            "resource {name}: {text}"
        );
    }

    // For machines.
    let json = xdsd_status(&xdsd, &["--output", "json"]).await;
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(value["summary"]["nacked"], 1, "{value}");
    let client = &value["clients"][0];
    assert_eq!(client["id"], node_id.as_str());
    assert_eq!(client["state"], "NACKED");
    let cds = client["types"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["type"] == "CDS"))
        .unwrap_or_else(|| panic!("CDS: {client}"));
    assert!(
        cds["nack"]["origins"].to_string().contains("broken.yaml"),
        "{cds}"
    );
    // The version rejected and the one still run, labelled, in the table and for the client.
    let rejected = cds["nack"]["version"].as_str().unwrap_or_default();
    let accepted = cds["version"].as_str().unwrap_or_default();
    assert!(
        !rejected.is_empty() && !accepted.is_empty() && rejected != accepted,
        "{cds}"
    );
    assert!(
        row.contains(&format!(
            "NACKED rejected {}, accepted {}",
            &rejected[..8.min(rejected.len())],
            &accepted[..8.min(accepted.len())]
        )),
        "the CDS cell: {row}"
    );
    assert!(
        text_one.contains(&format!(
            "CDS NACKED  rejected {rejected}, accepted {accepted}"
        )),
        "{text_one}"
    );
    // Each resource's version says whose it is: the response's (CSDS), its own (--admin).
    let service = |text: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with("service "))
            .map(str::to_owned)
            .unwrap_or_else(|| panic!("service: {text}"))
    };
    assert!(service(&text_one).contains(" in response "), "{text_one}");
    assert!(
        service(&files).contains(" version ") && !service(&files).contains("in response"),
        "{files}"
    );

    // --wait gives up while the NACK stands, listing who is not synced.
    let waited = xdsd_status(&xdsd, &["--wait", "--timeout", "1s"]).await;
    assert_eq!(waited.status.code(), Some(1), "{}", describe(&waited));
    assert!(stdout(&waited).contains(&node_id), "{}", describe(&waited));
    assert!(
        String::from_utf8_lossy(&waited.stderr).contains("not every client synced"),
        "{}",
        describe(&waited)
    );

    // A pipeline waits; the fix lands; it exits 0.
    let waiting = status_command(&xdsd, &["--wait", "--timeout", "60s"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("xdsd status --wait starts");
    let mark = xdsd.log.mark();
    dir.remove("broken.yaml");
    xdsd.expect_loaded_since(mark).await;
    let fixed = waiting.wait_with_output().await.expect("xdsd status ends");
    assert_eq!(fixed.status.code(), Some(0), "{}", describe(&fixed));
    assert!(
        stdout(&fixed).contains("1 client: 1 synced"),
        "{}",
        describe(&fixed)
    );

    drop(envoy);
}

#[tokio::test]
async fn xdsd_status_exits_2_with_a_clear_error_when_no_server_answers() {
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_xdsd"))
        .args([
            "status",
            "--server",
            &format!("127.0.0.1:{port}"),
            "--timeout",
            "5s",
        ])
        .output()
        .await
        .expect("xdsd status runs");
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("cannot connect to the CSDS server"),
        "{}",
        describe(&output)
    );
    let usage = tokio::process::Command::new(env!("CARGO_BIN_EXE_xdsd"))
        .args(["status", "--output", "yaml"])
        .output()
        .await
        .expect("xdsd status runs");
    assert_eq!(usage.status.code(), Some(2), "{}", describe(&usage));
}

#[tokio::test]
async fn xdsd_status_speaks_mutual_tls_with_the_ca_and_a_client_certificate() {
    use xdsd_testsupport::pki::{Id, Pki};
    let pki = Pki::new();
    let server = pki.server("server", 1);
    let operator = pki.client("operator", Id::Uri("spiffe://xdsd.test/operator"));
    let upstream = Upstream::start("upstream-a").await;
    let dir = basic_resources(Transport::Ads, upstream.port);
    let tls_args = [
        "--tls-cert",
        server.cert.to_str().expect("a UTF-8 path"),
        "--tls-key",
        server.key.to_str().expect("a UTF-8 path"),
        "--client-ca",
        pki.ca.to_str().expect("a UTF-8 path"),
    ];
    let xdsd = Xdsd::start_with_args(&dir.path(), &tls_args).await;
    xdsd.expect_loaded_since(0).await;
    let ca = pki.ca.to_str().expect("a UTF-8 path");
    let cert = operator.cert.to_str().expect("a UTF-8 path");
    let key = operator.key.to_str().expect("a UTF-8 path");

    let ok = xdsd_status(
        &xdsd,
        &["--tls-ca", ca, "--tls-cert", cert, "--tls-key", key],
    )
    .await;
    assert_eq!(ok.status.code(), Some(0), "{}", describe(&ok));
    assert!(
        stdout(&ok).contains("0 clients: 0 synced"),
        "{}",
        describe(&ok)
    );

    // Without a client certificate the server refuses the handshake; in plaintext, too.
    let no_cert = xdsd_status(&xdsd, &["--tls-ca", ca, "--timeout", "5s"]).await;
    assert_eq!(no_cert.status.code(), Some(2), "{}", describe(&no_cert));
    let plaintext = xdsd_status(&xdsd, &["--timeout", "5s"]).await;
    assert_eq!(plaintext.status.code(), Some(2), "{}", describe(&plaintext));
    // A certificate without its key is a usage error.
    let half = xdsd_status(&xdsd, &["--tls-ca", ca, "--tls-cert", cert]).await;
    assert_eq!(half.status.code(), Some(2), "{}", describe(&half));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_admin_at_the_xds_port_says_so_and_admin_without_node_is_an_error() {
    let dir = basic_resources(Transport::Ads, 9);
    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    // The ports swapped: --admin at the xDS port.
    let xds = format!("127.0.0.1:{}", xdsd.port);
    let swapped = xdsd_status(&xdsd, &["some-node", "--admin", &xds]).await;
    let err = String::from_utf8_lossy(&swapped.stderr);
    assert_eq!(swapped.status.code(), Some(1), "{}", describe(&swapped));
    assert!(
        err.contains("not answered by xdsd's admin API") && err.contains("--admin-listen"),
        "{}",
        describe(&swapped)
    );
    assert!(!err.contains("EOF while parsing"), "{}", describe(&swapped));
    // --admin without NODE would be ignored: it is an error.
    let admin = format!("127.0.0.1:{}", xdsd.admin_port().await);
    let alone = xdsd_status(&xdsd, &["--admin", &admin]).await;
    assert_eq!(alone.status.code(), Some(2), "{}", describe(&alone));
    assert!(
        String::from_utf8_lossy(&alone.stderr).contains("--admin is read only with NODE"),
        "{}",
        describe(&alone)
    );
}

/// `--server LIVE,DEAD`: what the live replica reports is printed, the dead one is listed
/// UNREACHABLE with why, and the exit status is 1 (2 only when none answers); the same in JSON.
#[tokio::test]
async fn status_of_several_servers_with_one_down_shows_the_others_and_marks_it_unreachable() {
    let dir = basic_resources(Transport::Ads, 9);
    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let dead = format!("127.0.0.1:{port}");
    let servers = format!("{dead},{}", xdsd.authority());
    let output = status_at(&servers, &["--timeout", "5s"]).await;
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let text = stdout(&output);
    assert!(
        text.contains("0 clients: 0 synced"),
        "{}",
        describe(&output)
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with(&format!("replica {dead} UNREACHABLE: "))
                && l.contains("cannot connect")),
        "{}",
        describe(&output)
    );
    assert!(
        String::from_utf8_lossy(&output.stderr).contains(&format!("{dead} is unreachable")),
        "{}",
        describe(&output)
    );

    let json = status_at(&servers, &["--timeout", "5s", "--output", "json"]).await;
    assert_eq!(json.status.code(), Some(1), "{}", describe(&json));
    let value: serde_json::Value = serde_json::from_str(&stdout(&json)).expect("JSON");
    let down: Vec<&serde_json::Value> = value["replicas"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["unreachable"].is_string())
        .collect();
    assert_eq!(down.len(), 1, "{value:#}");
    assert_eq!(down[0]["address"], dead.as_str(), "{value:#}");

    // Both down: nothing to show, exit 2.
    let both = status_at(&format!("{dead},{dead}"), &["--timeout", "5s"]).await;
    assert_eq!(both.status.code(), Some(2), "{}", describe(&both));
}
