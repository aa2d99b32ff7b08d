//! What `serve` does with its source's changes and at start: one log line per outcome, the
//! resources counted once, a change that empties the source refused unless `--allow-empty`, and
//! a port already in use named by its flag before anything is served.

use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use crate::support::ads::{self, AdsStream};
use crate::support::{log_field, unique_name, Log, ResourceDir, Xdsd, CLUSTER, DEADLINE};

fn cluster(name: &str, timeout: &str) -> String {
    format!("\"@type\": {CLUSTER}\nname: {name}\ntype: STATIC\nconnect_timeout: {timeout}\n")
}

/// Runs `xdsd serve` to its exit (it is expected to fail at start) and returns its log.
async fn serve_until_exit(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_xdsd"))
        .arg("serve")
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("xdsd starts");
    let log = Log::drain(child.stderr.take().expect("stderr is piped"));
    let status = tokio::time::timeout(DEADLINE, child.wait())
        .await
        .expect("xdsd exits at start")
        .expect("its status");
    // The log is drained by a task: wait for its end.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !log.is_closed() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (status.code(), log.text())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_in_use_is_named_by_its_flag_and_nothing_is_served() {
    let dir = ResourceDir::new();
    dir.write("c.yaml", &cluster("c", "1s"));
    let first = Xdsd::start(&dir.path()).await;
    let admin = first.admin_port().await;
    let resources = dir.path();
    let resources = resources.to_str().expect("a UTF-8 path");

    let taken = format!("127.0.0.1:{}", first.port);
    let (code, log) = serve_until_exit(&[
        "--resources",
        resources,
        "--listen",
        &taken,
        "--admin-listen",
        "127.0.0.1:0",
    ])
    .await;
    assert_eq!(code, Some(1), "{log}");
    assert!(
        log.contains(&format!("cannot listen on {taken} (--listen)")),
        "{log}"
    );
    assert!(log.contains("already in use"), "{log}");

    let taken = format!("127.0.0.1:{admin}");
    let (code, log) = serve_until_exit(&[
        "--resources",
        resources,
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        &taken,
    ])
    .await;
    assert_eq!(code, Some(1), "{log}");
    assert!(
        log.contains(&format!("cannot listen on {taken} (--admin-listen)")),
        "{log}"
    );
    // Both ports are bound before anything else: it never loaded nor served xDS.
    assert!(!log.contains("xDS gRPC server listening"), "{log}");
    assert!(!log.contains("resources loaded"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_change_is_one_log_line_and_a_resource_edited_counts_once() {
    let dir = ResourceDir::new();
    dir.write("c.yaml", &cluster("c", "1s"));
    dir.write("d.yaml", &cluster("d", "1s"));
    let xdsd = Xdsd::start_with_args(&dir.path(), &["--log-level", "info"]).await;
    xdsd.expect_loaded_since(0).await;
    // The admin API logs its address after the first load: wait for it, so that it is not
    // counted among the lines of the changes below.
    xdsd.log
        .expect_line_since(0, &["admin API listening"], "the admin API")
        .await;

    let mark = xdsd.log.mark();
    dir.write("c.yaml", &cluster("c", "2s"));
    let line = xdsd.expect_loaded_since(mark).await;
    assert_eq!(log_field(&line, "changed"), Some("1"), "{line}");
    assert_eq!(log_field(&line, "resources"), Some("2"), "{line}");

    // A rejected change: one ERROR line, and no line before it that reads as success.
    let mark = xdsd.log.mark();
    dir.write("bad.yaml", "\"@type\": nonsense\n");
    let rejected = xdsd
        .log
        .expect_line_since(mark, &["change rejected", "bad.yaml"], "the rejection")
        .await;
    assert!(rejected.contains("ERROR"), "{rejected}");
    // A later change marks the end of what the rejection may have logged.
    let after = xdsd.log.mark();
    dir.remove("bad.yaml");
    xdsd.log
        .expect_line_since(after, &["resources unchanged"], "the file removed")
        .await;
    let lines: Vec<String> = xdsd.log.lines()[mark..after].to_vec();
    assert_eq!(
        lines.len(),
        1,
        "one line for the rejected change: {lines:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_that_empties_the_source_is_refused_unless_allow_empty() {
    for allow in [false, true] {
        let dir = ResourceDir::new();
        dir.write("c.yaml", &cluster("c", "1s"));
        let extra: &[&str] = if allow {
            &["--allow-empty"]
        } else {
            &["--log-level", "info"]
        };
        let xdsd = Xdsd::start_with_args(&dir.path(), extra).await;
        xdsd.expect_loaded_since(0).await;
        let mut stream = AdsStream::open(&xdsd.url(), &unique_name("empty-node"), CLUSTER, &[])
            .await
            .expect("an ADS stream");
        let first = stream.recv().await.expect("a CDS response");
        assert_eq!(ads::names(&first), ["c"]);
        stream
            .request(CLUSTER, &[], Some(&first))
            .await
            .expect("ACK");

        let mark = xdsd.log.mark();
        dir.remove("c.yaml");
        if allow {
            xdsd.expect_loaded_since(mark).await;
            let next = stream.recv().await.expect("the empty state");
            assert!(ads::names(&next).is_empty(), "{next:?}");
        } else {
            let line = xdsd
                .log
                .expect_line_since(mark, &["change rejected"], "the emptying refused")
                .await;
            assert!(line.contains("--allow-empty"), "{line}");
            // The client keeps the last good state: the next response it gets is the next good
            // state, not an empty one.
            let mark = xdsd.log.mark();
            dir.write("c2.yaml", &cluster("c2", "1s"));
            xdsd.expect_loaded_since(mark).await;
            let next = stream.recv().await.expect("the new state");
            assert_eq!(ads::names(&next), ["c2"]);
        }
    }
}

/// `rm -rf` of the resource directory and its re-creation a second later: a client watching the
/// type sees the last full state, then the re-created one, never one in between (the removals
/// are settled into one change, and the empty state it leads to is refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_deleted_and_recreated_is_never_served_in_between() {
    let dir = ResourceDir::new();
    let names: Vec<String> = (0..20).map(|i| format!("c{i:02}")).collect();
    for name in &names {
        dir.write(&format!("{name}.yaml"), &cluster(name, "1s"));
    }
    let xdsd = Xdsd::start_with_args(&dir.path(), &["--log-level", "info"]).await;
    xdsd.expect_loaded_since(0).await;
    let mut stream = AdsStream::open(&xdsd.url(), &unique_name("rmrf-node"), CLUSTER, &[])
        .await
        .expect("an ADS stream");
    let first = stream.recv().await.expect("a CDS response");
    assert_eq!(ads::names(&first), names);
    stream
        .request(CLUSTER, &[], Some(&first))
        .await
        .expect("ACK");

    let mark = xdsd.log.mark();
    std::fs::remove_dir_all(dir.path()).expect("rm -rf");
    xdsd.log
        .expect_line_since(mark, &["change rejected"], "the emptied directory refused")
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    std::fs::create_dir_all(dir.path()).expect("mkdir");
    for name in &names {
        dir.write(&format!("{name}.yaml"), &cluster(name, "2s"));
    }
    // The next response is the re-created state, whole.
    let next = stream.recv().await.expect("the re-created state");
    assert_eq!(ads::names(&next), names, "{next:?}");
    assert_ne!(next.version_info, first.version_info);
}
