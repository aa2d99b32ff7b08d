//! xdsd on etcd, end to end: a real etcd (on OS-picked ports, its own data directory), real
//! `xdsd serve --etcd-...` replicas, `xdsd push`, `etcdctl`, and a real Envoy whose xds_cluster
//! has both replicas. A change written to etcd reaches Envoy; a replica killed under traffic fails
//! no request and Envoy moves to the other; etcd down for 10 s under traffic keeps every config and
//! makes the replicas not ready until it is back; a bad key is rejected by name; a push is checked
//! before anything lands and is atomic against a concurrent push; replicas at one revision give a
//! client the same versions.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::GetOptions;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout, Instant};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::HealthCheckRequest;

use crate::support::ads::{self, AdsStream};
use crate::support::scenario::{
    basic_resources, dynamic_bootstrap, endpoints_yaml, route_yaml, static_cluster_yaml, Transport,
};
use crate::support::{
    http_get, names_node, unique_name, wait_for_body, Envoy, ResourceDir, Upstream, Xdsd, CLUSTER,
    DEADLINE,
};
use xdsd_testsupport::etcd::Etcd;

pub(crate) const PREFIX: &str = "/xdsd/";

/// `etcdctl` (`XDSD_ETCDCTL`, else `/usr/bin/etcdctl`).
fn etcdctl_binary() -> PathBuf {
    match std::env::var_os("XDSD_ETCDCTL") {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => PathBuf::from("/usr/bin/etcdctl"),
    }
}

/// `etcdctl put KEY VALUE` against `etcd`; panics unless it succeeds.
pub(crate) async fn etcdctl_put(etcd: &Etcd, key: &str, value: &str) {
    let out = Command::new(etcdctl_binary())
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", &etcd.endpoint(), "put", key, value])
        .stdin(Stdio::null())
        .output()
        .await
        .expect("etcdctl runs");
    assert!(
        out.status.success(),
        "etcdctl put {key}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `etcdctl del KEY`.
async fn etcdctl_del(etcd: &Etcd, key: &str) {
    let out = Command::new(etcdctl_binary())
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", &etcd.endpoint(), "del", key])
        .stdin(Stdio::null())
        .output()
        .await
        .expect("etcdctl runs");
    assert!(out.status.success(), "etcdctl del {key}");
}

fn push_command(dir: &Path, etcd: &Etcd, extra: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_xdsd"));
    command
        .arg("push")
        .arg("--resources")
        .arg(dir)
        .args([
            "--etcd-endpoints",
            &etcd.endpoint(),
            "--etcd-prefix",
            PREFIX,
        ])
        .args(extra)
        .env_remove("XDSD_RESOURCES")
        .kill_on_drop(true);
    command
}

/// `xdsd push --resources DIR --etcd-endpoints ... --etcd-prefix /xdsd/ EXTRA...`, run to the end.
async fn push(dir: &Path, etcd: &Etcd, extra: &[&str]) -> Output {
    let run = push_command(dir, etcd, extra).stdin(Stdio::null()).output();
    timeout(DEADLINE, run)
        .await
        .expect("xdsd push ends in time")
        .expect("xdsd push runs")
}

fn text(output: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Pushes `dir`; panics unless it exits 0.
async fn push_ok(dir: &Path, etcd: &Etcd) -> String {
    let output = push(dir, etcd, &[]).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The keys under the prefix with their values, and etcd's revision.
async fn contents(etcd: &Etcd) -> (i64, Vec<(String, String)>) {
    let mut client = etcd.client().await;
    let response = client
        .get(PREFIX, Some(GetOptions::new().with_prefix()))
        .await
        .expect("a read of the prefix");
    let revision = response.header().expect("a header").revision();
    let kvs = response
        .kvs()
        .iter()
        .map(|kv| {
            (
                String::from_utf8_lossy(kv.key()).into_owned(),
                String::from_utf8_lossy(kv.value()).into_owned(),
            )
        })
        .collect();
    (revision, kvs)
}

/// Two endpoints in the bootstrap's xds_cluster: both replicas.
fn two_replica_bootstrap(node_id: &str, one: u16, two: u16) -> String {
    let bootstrap = dynamic_bootstrap(node_id, one, Transport::Ads);
    let first =
        format!("              socket_address: {{ address: 127.0.0.1, port_value: {one} }}\n");
    let both = format!(
        "{first}        - endpoint:\n            address:\n              socket_address: {{ \
         address: 127.0.0.1, port_value: {two} }}\n"
    );
    assert!(
        bootstrap.contains(&first),
        "the bootstrap's xds_cluster: {bootstrap}"
    );
    bootstrap.replacen(&first, &both, 1)
}

/// Requests through Envoy's listener, one after the other, until stopped: every answer that is
/// not a 200 is a failure.
struct Traffic {
    stop: Arc<AtomicBool>,
    task: JoinHandle<(usize, Vec<String>)>,
}

impl Traffic {
    fn start(port: u16) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let mut ok = 0;
            let mut failures = Vec::new();
            while !stopped.load(Ordering::SeqCst) {
                match http_get(("127.0.0.1", port), "/", "example.test").await {
                    Ok(r) if r.status == 200 => ok += 1,
                    Ok(r) => failures.push(format!("{} {}", r.status, r.body)),
                    Err(e) => failures.push(e.to_string()),
                }
                sleep(Duration::from_millis(20)).await;
            }
            (ok, failures)
        });
        Traffic { stop, task }
    }

    async fn finish(self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.expect("the traffic task")
    }
}

async fn health_status(xdsd: &Xdsd) -> ServingStatus {
    crate::support::health_client(xdsd)
        .await
        .check(HealthCheckRequest::default())
        .await
        .expect("a health answer")
        .into_inner()
        .status()
}

/// GET `path` on the admin port until `want` answers, or panics with the last answer.
async fn wait_for_admin(port: u16, path: &str, want: impl Fn(u16, &str) -> bool) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let last = match http_get(("127.0.0.1", port), path, "localhost").await {
            Ok(r) if want(r.status, &r.body) => return,
            Ok(r) => format!("{} {}", r.status, r.body),
            Err(e) => e.to_string(),
        };
        assert!(Instant::now() < deadline, "GET {path}: still {last}");
        sleep(Duration::from_millis(50)).await;
    }
}

/// Which of `replicas` Envoy `node_id` streams from (waits until one logged it).
async fn streaming_replica(replicas: &[&Xdsd], node_id: &str, since: &[usize]) -> usize {
    let deadline = Instant::now() + DEADLINE;
    loop {
        for (i, replica) in replicas.iter().enumerate() {
            let identified = replica.log.matching_since(since[i], |l| {
                l.contains("node identified") && names_node(l, node_id)
            });
            if !identified.is_empty() {
                return i;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no replica saw Envoy {node_id} within {DEADLINE:?}"
        );
        sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_etcd_serve_envoy_through_changes_a_replica_killed_and_etcd_down() {
    let mut etcd = Etcd::start().await;
    let upstream_a = Upstream::start("upstream-a").await;
    let upstream_b = Upstream::start("upstream-b").await;
    let upstream_c = Upstream::start("upstream-c").await;
    let dir = basic_resources(Transport::Ads, upstream_a.port);
    let pushed = push_ok(&dir.path(), &etcd).await;
    assert!(pushed.contains("put /xdsd/endpoints.yaml"), "{pushed}");

    let mut one = Xdsd::start_etcd(&etcd.endpoint(), PREFIX, &[]).await;
    let mut two = Xdsd::start_etcd(&etcd.endpoint(), PREFIX, &[]).await;
    let node_id = unique_name("etcd-envoy");
    let envoy = Envoy::start(&two_replica_bootstrap(&node_id, one.port, two.port)).await;
    let port = envoy.listener_port("listener_0").await;
    let logs = |one: &Xdsd, two: &Xdsd| {
        format!(
            "replica one:\n{}\nreplica two:\n{}",
            one.log.text(),
            two.log.text()
        )
    };
    wait_for_body(port, "upstream-a", || logs(&one, &two)).await;

    // A change with etcdctl put reaches Envoy; so does one with xdsd push.
    let key = format!("{PREFIX}endpoints.yaml");
    etcdctl_put(&etcd, &key, &endpoints_yaml("service", upstream_b.port)).await;
    wait_for_body(port, "upstream-b", || logs(&one, &two)).await;
    dir.write(
        "endpoints.yaml",
        &endpoints_yaml("service", upstream_c.port),
    );
    let pushed = push_ok(&dir.path(), &etcd).await;
    assert!(
        pushed.contains("put /xdsd/endpoints.yaml") && pushed.contains("1 put, 0 deleted"),
        "{pushed}"
    );
    wait_for_body(port, "upstream-c", || logs(&one, &two)).await;

    // kill -9 of the replica Envoy streams from, under traffic.
    let traffic = Traffic::start(port);
    let streaming = streaming_replica(&[&one, &two], &node_id, &[0, 0]).await;
    let (killed, survivor) = if streaming == 0 {
        (&mut one, &mut two)
    } else {
        (&mut two, &mut one)
    };
    let mark = survivor.log.mark();
    killed.kill9().await;
    survivor
        .log
        .wait_for_since(
            mark,
            |l| l.contains("node identified") && names_node(l, &node_id),
            DEADLINE,
        )
        .await
        .unwrap_or_else(|why| {
            panic!(
                "Envoy did not reconnect to the other replica ({why}). Log:\n{}",
                survivor.log.text()
            )
        });
    etcdctl_put(&etcd, &key, &endpoints_yaml("service", upstream_a.port)).await;
    wait_for_body(port, "upstream-a", || survivor.log.text()).await;

    // etcd killed for 10 s under traffic: the survivor keeps serving, is not ready meanwhile.
    let admin = survivor.admin_port().await;
    etcd.kill().await;
    wait_for_admin(admin, "/readyz", |status, _| status == 503).await;
    assert_eq!(health_status(survivor).await, ServingStatus::NotServing);
    wait_for_admin(admin, "/metrics", |_, body| {
        body.contains("xdsd_source_healthy 0")
    })
    .await;
    // The outage itself lasts 10 s (the scenario, not a wait for an event).
    sleep(Duration::from_secs(10)).await;
    assert!(survivor.is_running(), "{}", survivor.log.text());
    let during = http_get(("127.0.0.1", port), "/", "example.test")
        .await
        .expect("a request through Envoy while etcd is down");
    assert_eq!(
        (during.status, during.body.as_str()),
        (200, "upstream-a"),
        "Envoy keeps its config"
    );
    assert_eq!(health_status(survivor).await, ServingStatus::NotServing);

    etcd.restart().await;
    wait_for_admin(admin, "/readyz", |status, _| status == 200).await;
    assert_eq!(health_status(survivor).await, ServingStatus::Serving);
    wait_for_admin(admin, "/metrics", |_, body| {
        body.contains("xdsd_source_healthy 1")
    })
    .await;
    etcdctl_put(&etcd, &key, &endpoints_yaml("service", upstream_b.port)).await;
    wait_for_body(port, "upstream-b", || survivor.log.text()).await;

    let (ok, failures) = traffic.finish().await;
    assert!(
        failures.is_empty(),
        "{} failed requests of {}: {:?}",
        failures.len(),
        ok + failures.len(),
        &failures[..failures.len().min(10)]
    );
    assert!(ok > 100, "traffic flowed throughout: {ok} requests");
    assert!(survivor.is_running());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_document_written_to_etcd_is_rejected_naming_the_key_and_the_last_good_state_kept() {
    let etcd = Etcd::start().await;
    let dir = ResourceDir::new();
    dir.write("a.yaml", &static_cluster_yaml("a", 1001));
    push_ok(&dir.path(), &etcd).await;
    let xdsd = Xdsd::start_etcd(&etcd.endpoint(), PREFIX, &[]).await;
    let mut first = AdsStream::open(&xdsd.url(), &unique_name("etcd-bad"), CLUSTER, &[])
        .await
        .expect("an ADS stream");
    let good = first.recv().await.expect("CDS");
    assert_eq!(ads::names(&good), ["a"]);

    let mark = xdsd.log.mark();
    etcdctl_put(&etcd, "/xdsd/bad.yaml", "\"@type\": nonsense\nname: x\n").await;
    let line = xdsd
        .log
        .expect_line_since(
            mark,
            &["change rejected", "/xdsd/bad.yaml"],
            "the bad key rejected",
        )
        .await;
    assert!(line.contains("ERROR"), "{line}");
    // A good change elsewhere is refused too while the bad key is there.
    let mark = xdsd.log.mark();
    etcdctl_put(&etcd, "/xdsd/a.yaml", &static_cluster_yaml("a", 2002)).await;
    xdsd.log
        .expect_line_since(
            mark,
            &["change rejected", "/xdsd/bad.yaml"],
            "still rejected",
        )
        .await;
    let mut later = AdsStream::open(&xdsd.url(), &unique_name("etcd-bad"), CLUSTER, &[])
        .await
        .expect("an ADS stream");
    let kept = later.recv().await.expect("CDS");
    assert_eq!(
        kept.version_info, good.version_info,
        "the last good state is served"
    );

    // The bad key deleted: the change to a.yaml lands.
    etcdctl_del(&etcd, "/xdsd/bad.yaml").await;
    let update = first.recv().await.expect("the change");
    assert_ne!(update.version_info, good.version_info);
    assert_eq!(ads::names(&update), ["a"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_with_a_dangling_reference_exits_1_and_changes_nothing_in_etcd() {
    let etcd = Etcd::start().await;
    let dir = ResourceDir::new();
    dir.write("a.yaml", &static_cluster_yaml("a", 1001));
    push_ok(&dir.path(), &etcd).await;
    let before = contents(&etcd).await;

    dir.write("route.yaml", &route_yaml("r", "missing"));
    dir.write("a.yaml", &static_cluster_yaml("a", 2002));
    let output = push(&dir.path(), &etcd, &[]).await;
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("does not exist") && stderr.contains("missing"),
        "{}",
        text(&output)
    );
    assert_eq!(contents(&etcd).await, before, "etcd untouched");
    // --dry-run of a valid change prints and writes nothing either.
    dir.remove("route.yaml");
    let output = push(&dir.path(), &etcd, &["--dry-run"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("would put /xdsd/a.yaml") && stdout.contains("nothing written"),
        "{stdout}"
    );
    assert_eq!(contents(&etcd).await, before, "etcd untouched by a dry run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_concurrent_pushes_one_wins_and_the_other_fails_clearly() {
    let etcd = Etcd::start().await;
    let first = ResourceDir::new();
    first.write("a.yaml", &static_cluster_yaml("a", 1001));
    let second = ResourceDir::new();
    second.write("b.yaml", &static_cluster_yaml("b", 1002));

    // The first push reads the prefix and waits for its confirmation...
    let mut slow = push_command(&first.path(), &etcd, &["--confirm"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("xdsd push runs");
    let mut stdout = slow.stdout.take().expect("stdout");
    let mut seen = Vec::new();
    let deadline = Instant::now() + DEADLINE;
    while !String::from_utf8_lossy(&seen).contains("[y/N]") {
        let mut chunk = [0u8; 1024];
        let n = timeout(deadline - Instant::now(), stdout.read(&mut chunk))
            .await
            .expect("the question in time")
            .expect("stdout read");
        assert!(
            n > 0,
            "push ended early: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&chunk[..n]);
    }
    assert!(String::from_utf8_lossy(&seen).contains("put /xdsd/a.yaml"));

    // ...while the second reads and writes.
    let won = push(&second.path(), &etcd, &[]).await;
    assert_eq!(won.status.code(), Some(0), "{}", text(&won));

    // Confirmed, the first finds the prefix changed since it read it and writes nothing.
    let mut stdin = slow.stdin.take().expect("stdin");
    stdin.write_all(b"y\n").await.expect("the answer");
    drop(stdin);
    let mut stderr = String::new();
    slow.stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .await
        .expect("stderr read");
    let status = timeout(DEADLINE, slow.wait())
        .await
        .expect("the push ends")
        .expect("its status");
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("changed since it was read at revision")
            && stderr.contains("nothing was written")
            && stderr.contains("run the push again"),
        "{stderr}"
    );
    let (_, keys) = contents(&etcd).await;
    let names: Vec<&str> = keys.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        ["/xdsd/.push", "/xdsd/b.yaml"],
        "the winner's keys only"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_at_one_revision_resend_nothing_to_a_client_that_moves() {
    let etcd = Etcd::start().await;
    let dir = ResourceDir::new();
    dir.write("a.yaml", &static_cluster_yaml("a", 1001));
    dir.write("b.yaml", &static_cluster_yaml("b", 1002));
    push_ok(&dir.path(), &etcd).await;
    let one = Xdsd::start_etcd(&etcd.endpoint(), PREFIX, &[]).await;
    let two = Xdsd::start_etcd(&etcd.endpoint(), PREFIX, &[]).await;

    let mut moved = crate::replicas::move_a_client(&one, &two, "etcd-replica-client", 2).await;
    // One change in etcd: the first thing the moved SotW client hears from the second replica is
    // that change, and the delta client gets only the changed resource.
    etcdctl_put(&etcd, "/xdsd/b.yaml", &static_cluster_yaml("b", 2002)).await;
    crate::replicas::expect_only_the_change(&mut moved, "b", 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_files_works_with_etcd_as_the_source() {
    let etcd = Etcd::start().await;
    let dir = ResourceDir::new();
    dir.write("a.yaml", &static_cluster_yaml("a", 1001));
    push_ok(&dir.path(), &etcd).await;
    let out = tempfile::tempdir().expect("a temporary directory");
    let out_arg = out.path().to_string_lossy().into_owned();
    let xdsd = Xdsd::start_etcd(&etcd.endpoint(), PREFIX, &["--write-files", &out_arg]).await;
    let clusters = out.path().join("clusters.yaml");
    let has = |port: u16| {
        std::fs::read_to_string(&clusters)
            .map(|text| text.contains(&format!("port_value: {port}")))
            .unwrap_or(false)
    };
    let deadline = Instant::now() + DEADLINE;
    while !has(1001) {
        assert!(
            Instant::now() < deadline,
            "no {clusters:?}: {}",
            xdsd.log.text()
        );
        sleep(Duration::from_millis(50)).await;
    }
    etcdctl_put(&etcd, "/xdsd/a.yaml", &static_cluster_yaml("a", 2002)).await;
    while !has(2002) {
        assert!(
            Instant::now() < deadline,
            "{clusters:?} not rewritten: {}",
            xdsd.log.text()
        );
        sleep(Duration::from_millis(50)).await;
    }
}

/// An `--etcd-prefix` with a typo (`/xds/` for `/xdsd/`) holds no keys: xdsd says so at start,
/// naming the prefix and the nearest one that does hold keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_holding_no_keys_is_named_with_the_nearest_that_does() {
    let etcd = Etcd::start().await;
    let dir = ResourceDir::new();
    dir.write("a.yaml", &static_cluster_yaml("a", 1001));
    push_ok(&dir.path(), &etcd).await;
    let xdsd = Xdsd::start_etcd(&etcd.endpoint(), "/xds/", &[]).await;
    let line = xdsd
        .log
        .expect_line_since(
            0,
            &[
                "the etcd prefix /xds/ holds no keys",
                "the nearest prefix that does is /xdsd/",
            ],
            "the empty prefix named with the nearest one",
        )
        .await;
    assert!(line.contains("WARN"), "{line}");
}

/// `xdsd push --etcd-endpoints DEAD,LIVE`: the etcd client may send the read or the transaction
/// to the endpoint that is down (`Unavailable: … Connection refused`); the push retries and lands.
#[tokio::test]
async fn a_push_lands_when_the_first_listed_etcd_endpoint_is_down() {
    let etcd = Etcd::start().await;
    let dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        format!("http://{}", listener.local_addr().expect("addr"))
    };
    let endpoints = format!("{dead},{}", etcd.endpoint());
    let dir = ResourceDir::new();
    for port in 1001..1007 {
        dir.write("a.yaml", &static_cluster_yaml("a", port));
        let output = Command::new(env!("CARGO_BIN_EXE_xdsd"))
            .arg("push")
            .arg("--resources")
            .arg(dir.path())
            .args(["--etcd-endpoints", &endpoints, "--etcd-prefix", PREFIX])
            .env_remove("XDSD_RESOURCES")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let output = timeout(DEADLINE, output)
            .await
            .expect("xdsd push ends in time")
            .expect("xdsd push runs");
        assert_eq!(output.status.code(), Some(0), "{}", text(&output));
        let (_, kvs) = contents(&etcd).await;
        let value = &kvs
            .iter()
            .find(|(k, _)| k == "/xdsd/a.yaml")
            .expect("a.yaml pushed")
            .1;
        assert_eq!(value, &static_cluster_yaml("a", port));
    }
}
