//! History, diff and rollback on etcd, end to end: real etcd, `xdsd push` with messages, a real
//! `xdsd serve --etcd-...` replica and a real Envoy. Two pushes are listed with author, message
//! and counts; `diff` shows the changed field; `rollback` to the first brings Envoy's traffic
//! back and is itself in the history; an `etcdctl put` is a direct write; a rollback to a state
//! that fails the reference check is refused and writes nothing; a compacted revision is refused
//! naming the oldest one left; a directory has no history (exit 2). With a gated rollout on the
//! replica, a rollback soaks with the canaries like any change, and `--skip-canary` promotes it at
//! once.

use std::path::Path;
use std::process::{Output, Stdio};

use etcd_client::GetOptions;
use serde_json::Value;
use tokio::process::Command;
use tokio::time::timeout;

use crate::envoy_rollout::{post, wait_rollout};
use crate::etcd::{etcdctl_put, PREFIX};
use crate::support::ads::{self, AdsStream};
use crate::support::scenario::{
    basic_resources, dynamic_bootstrap, endpoints_yaml, route_yaml, static_cluster_yaml, Transport,
};
use crate::support::{
    unique_name, wait_for_body, Envoy, ResourceDir, Upstream, Xdsd, CLUSTER, DEADLINE,
};
use xdsd_testsupport::etcd::Etcd;
use xdsd_testsupport::rollout::{is, RolloutState};

/// `xdsd COMMAND ARGS... --etcd-endpoints ... --etcd-prefix /xdsd/`, run to the end.
async fn xdsd(etcd: &Etcd, command: &str, args: &[&str]) -> Output {
    let run = Command::new(env!("CARGO_BIN_EXE_xdsd"))
        .arg(command)
        .args(args)
        .args([
            "--etcd-endpoints",
            &etcd.endpoint(),
            "--etcd-prefix",
            PREFIX,
        ])
        .env_remove("XDSD_RESOURCES")
        .env_remove("XDSD_PUSH_MESSAGE")
        .env_remove("XDSD_PUSH_AUTHOR")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    timeout(DEADLINE, run)
        .await
        .unwrap_or_else(|_| panic!("xdsd {command} ends in time"))
        .expect("xdsd runs")
}

fn text(output: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Runs it and returns its stdout; panics unless it exits 0.
async fn ok(etcd: &Etcd, command: &str, args: &[&str]) -> String {
    let output = xdsd(etcd, command, args).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `xdsd push --resources DIR EXTRA...`; returns the revision it wrote.
async fn push(etcd: &Etcd, dir: &Path, extra: &[&str]) -> i64 {
    let dir = dir.to_string_lossy().into_owned();
    let mut args = vec!["--resources", &dir];
    args.extend_from_slice(extra);
    let out = ok(etcd, "push", &args).await;
    revision_in(&out)
}

/// The revision of `... at etcd revision N ...`.
fn revision_in(out: &str) -> i64 {
    out.split("at etcd revision ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no revision written in {out:?}"))
}

/// The rows of `history --output json`.
async fn rows(etcd: &Etcd) -> Vec<Value> {
    let out = ok(etcd, "history", &["--output", "json"]).await;
    match serde_json::from_str(&out) {
        Ok(Value::Array(rows)) => rows,
        _ => panic!("not a JSON array: {out}"),
    }
}

/// Polls `history --output json` until its rows satisfy `want` (the rollout record is written by
/// the replicas in the background).
async fn wait_rows(etcd: &Etcd, what: &str, want: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let now = rows(etcd).await;
        if want(&now) {
            return now;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the history never showed {what}: {now:#?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The keys under the prefix with their values.
async fn contents(etcd: &Etcd) -> Vec<(String, String)> {
    let mut client = etcd.client().await;
    let response = client
        .get(PREFIX, Some(GetOptions::new().with_prefix()))
        .await
        .expect("a read of the prefix");
    response
        .kvs()
        .iter()
        .map(|kv| {
            (
                String::from_utf8_lossy(kv.key()).into_owned(),
                String::from_utf8_lossy(kv.value()).into_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pushes_are_listed_diffed_and_a_rollback_brings_envoy_back() {
    let etcd = Etcd::start().await;
    let upstream_a = Upstream::start("upstream-a").await;
    let upstream_b = Upstream::start("upstream-b").await;
    let dir = basic_resources(Transport::Ads, upstream_a.port);
    let first = push(
        &etcd,
        &dir.path(),
        &["--message", "first: to a", "--author", "ana"],
    )
    .await;

    let xdsd_replica = Xdsd::start_etcd(&etcd.endpoint(), PREFIX, &[]).await;
    let node_id = unique_name("history-envoy");
    let envoy = Envoy::start(&dynamic_bootstrap(
        &node_id,
        xdsd_replica.port,
        Transport::Ads,
    ))
    .await;
    let port = envoy.listener_port("listener_0").await;
    let log = || xdsd_replica.log.text();
    wait_for_body(port, "upstream-a", log).await;

    dir.write(
        "endpoints.yaml",
        &endpoints_yaml("service", upstream_b.port),
    );
    let second = push(&etcd, &dir.path(), &["--message", "move to b"]).await;
    wait_for_body(port, "upstream-b", log).await;

    // The history lists both, newest first, with author, message and counts.
    let history = ok(&etcd, "history", &[]).await;
    let lines: Vec<&str> = history.lines().collect();
    assert!(
        lines.len() >= 3
            && lines[0].trim_start().starts_with("REVISION  TIME (UTC)")
            && lines[1].trim_start().starts_with(&second.to_string())
            && lines[1].ends_with("+0 ~1 -0  move to b")
            && lines[2].trim_start().starts_with(&first.to_string())
            && lines[2].contains("  ana ")
            && lines[2].ends_with("+4 ~0 -0  first: to a"),
        "{history}"
    );
    // The columns line up under the header.
    for column in ["AUTHOR", "CHANGES", "MESSAGE"] {
        let at = lines[0].find(column).expect("a header column");
        assert!(
            lines[1..3]
                .iter()
                .all(|l| l.chars().nth(at - 2) == Some(' ') && l.chars().nth(at) != Some(' ')),
            "{column} is not aligned:\n{history}"
        );
    }
    let json = rows(&etcd).await;
    assert_eq!(json[0]["revision"], second, "{json:#?}");
    assert_eq!(json[0]["kind"], "push");
    assert_eq!(json[0]["message"], "move to b");
    assert!(
        json[0]["author"].as_str().is_some_and(|a| !a.is_empty()),
        "a default author: {json:#?}"
    );
    assert_eq!(
        json[0]["changed"]["first"][0], "ClusterLoadAssignment/service",
        "{json:#?}"
    );
    assert_eq!(json[1]["author"], "ana");
    assert_eq!(json[1]["added"]["count"], 4);

    // The diff (the change before the latest, to now) shows the changed field.
    let diff = ok(&etcd, "diff", &[]).await;
    let shows = |mark: &str, port: u16| {
        diff.lines().any(|l| {
            l.trim_start().starts_with(mark) && l.ends_with(&format!("port_value: {port}"))
        })
    };
    assert!(
        diff.contains("changed  ClusterLoadAssignment/service")
            && shows("-", upstream_a.port)
            && shows("+", upstream_b.port)
            && !diff.contains("Cluster/service\n"),
        "{diff}"
    );
    assert_eq!(
        ok(&etcd, "diff", &[&first.to_string(), &second.to_string()]).await,
        diff
    );

    // Rollback to the first: Envoy's traffic follows it back, and it is in the history.
    let out = ok(
        &etcd,
        "rollback",
        &[&first.to_string(), "--message", "b is broken"],
    )
    .await;
    let rolled = revision_in(&out);
    wait_for_body(port, "upstream-a", log).await;
    let json = rows(&etcd).await;
    assert_eq!(json[0]["revision"], rolled, "{json:#?}");
    assert_eq!(json[0]["kind"], "rollback");
    assert_eq!(json[0]["rollback_to"], first);
    assert_eq!(json[0]["changed"]["count"], 1);
    let history = ok(&etcd, "history", &["--limit", "1"]).await;
    assert!(
        history.contains(&format!("rollback to {first}: b is broken")),
        "{history}"
    );

    // A direct write is listed as one, with its key.
    etcdctl_put(
        &etcd,
        &format!("{PREFIX}extra.yaml"),
        &static_cluster_yaml("extra", 1234),
    )
    .await;
    let history = ok(&etcd, "history", &["--limit", "1"]).await;
    assert!(
        history.contains("+1 ~0 -0  direct write: extra.yaml"),
        "{history}"
    );
    assert_eq!(rows(&etcd).await[0]["kind"], "direct write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_to_a_state_that_fails_the_checks_or_was_compacted_is_refused() {
    let etcd = Etcd::start().await;
    let dir = ResourceDir::new();
    dir.write("a.yaml", &static_cluster_yaml("a", 1001));
    let first = push(&etcd, &dir.path(), &[]).await;
    // Written around `push`'s checks: a route to a cluster that does not exist.
    etcdctl_put(
        &etcd,
        &format!("{PREFIX}route.yaml"),
        &route_yaml("r", "missing"),
    )
    .await;
    let dangling = rows(&etcd).await[0]["revision"]
        .as_i64()
        .expect("a revision");
    let last = push(&etcd, &dir.path(), &["--message", "drop the route"]).await;
    let before = contents(&etcd).await;

    let output = xdsd(&etcd, "rollback", &[&dangling.to_string()]).await;
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("missing") && stderr.contains("nothing was written"),
        "{}",
        text(&output)
    );
    assert_eq!(contents(&etcd).await, before, "etcd untouched");

    // Compacted: refused, naming the oldest revision left.
    let mut client = etcd.client().await;
    client.compact(last, None).await.expect("compact");
    for command in ["rollback", "diff"] {
        let output = xdsd(&etcd, command, &[&first.to_string()]).await;
        assert_eq!(output.status.code(), Some(1), "{}", text(&output));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(&format!("revision {first} is no longer in etcd's history"))
                && stderr.contains(&format!("the oldest revision available is {last}")),
            "{}",
            text(&output)
        );
    }
    assert_eq!(contents(&etcd).await, before, "etcd untouched");
    let history = ok(&etcd, "history", &[]).await;
    assert!(
        history.contains("drop the route")
            && history.contains(&format!("compacted the history before revision {last}")),
        "{history}"
    );

    // A directory has no history: use git.
    let dir_arg = dir.path().to_string_lossy().into_owned();
    let output = Command::new(env!("CARGO_BIN_EXE_xdsd"))
        .args(["history", "--resources", &dir_arg])
        .env_remove("XDSD_ETCD_ENDPOINTS")
        .stdin(Stdio::null())
        .output()
        .await
        .expect("xdsd runs");
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("git log"),
        "{}",
        text(&output)
    );
}

/// A CDS client of `xdsd` for a node of `cluster` that ACKs what it gets: the clusters it holds
/// after its first response.
async fn cds_client(xdsd: &Xdsd, cluster: &str) -> (AdsStream, Vec<String>) {
    let mut stream = AdsStream::open_in(&xdsd.url(), &unique_name(cluster), cluster, CLUSTER, &[])
        .await
        .expect("an ADS stream");
    let names = take(&mut stream).await;
    (stream, names)
}

/// The next CDS response, ACKed: its cluster names.
async fn take(stream: &mut AdsStream) -> Vec<String> {
    let response = stream.recv().await.expect("a CDS response in time");
    stream
        .request(CLUSTER, &[], Some(&response))
        .await
        .expect("ACK sent");
    ads::names(&response)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_gated_rollout_a_rollback_soaks_unless_it_skips_the_canaries() {
    let etcd = Etcd::start().await;
    let dir = ResourceDir::new();
    dir.write("c.yaml", &static_cluster_yaml("v1", 1001));
    let v1 = push(&etcd, &dir.path(), &["--message", "v1"]).await;
    let gated = ["--canary", "cluster=canary", "--canary-soak", "600m"];
    let replica = Xdsd::start_etcd(&etcd.endpoint(), PREFIX, &gated).await;
    let admin = replica.admin_port().await;
    let (mut canary, has) = cds_client(&replica, "canary").await;
    assert_eq!(has, ["v1"]);
    let (mut prod, has) = cds_client(&replica, "prod").await;
    assert_eq!(has, ["v1"]);

    // v2 soaks with the canary; an operator promotes it.
    dir.write("c.yaml", &static_cluster_yaml("v2", 1002));
    let v2 = push(&etcd, &dir.path(), &["--message", "v2"]).await;
    assert_eq!(take(&mut canary).await, ["v2"]);
    wait_rollout(admin, "soaking", |r| is(r, RolloutState::Soaking)).await;
    let (status, body) = post(admin, "/rollout/promote").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(take(&mut prod).await, ["v2"], "promoted");

    // A rollback to v1 with --skip-canary: prod gets it at once (the soak is 600 minutes).
    let out = ok(&etcd, "rollback", &[&v1.to_string(), "--skip-canary"]).await;
    let skipped = revision_in(&out);
    assert!(out.contains("promoted at once"), "{out}");
    assert_eq!(take(&mut prod).await, ["v1"], "promoted without a soak");
    assert_eq!(take(&mut canary).await, ["v1"]);
    wait_rollout(admin, "promoted", |r| {
        is(r, RolloutState::Idle) && r["stable"]["revision"] == skipped
    })
    .await;

    // A rollback to v2 without it is a change like any other: the canary gets it, prod stays on
    // v1 while it soaks.
    let out = ok(&etcd, "rollback", &[&v2.to_string()]).await;
    let soaking = revision_in(&out);
    assert_eq!(take(&mut canary).await, ["v2"]);
    wait_rollout(admin, "the rollback soaking", |r| {
        is(r, RolloutState::Soaking) && r["candidate"]["revision"] == soaking
    })
    .await;
    // The replica writes the rollout record as it decides, in the background.
    let json = wait_rows(&etcd, "the rollbacks' rollout states", |rows| {
        rows.len() >= 4
            && rows[0]["rollout"] == "soaking"
            && rows[1]["rollout"] == "promoted"
            && rows[2]["rollout"] == "promoted"
    })
    .await;
    let revisions: Vec<&Value> = json.iter().map(|r| &r["revision"]).take(3).collect();
    assert_eq!(
        revisions,
        [&soaking.into(), &skipped.into(), &v2.into()] as [&Value; 3],
        "{json:#?}"
    );
    let history = ok(&etcd, "history", &[]).await;
    let lines: Vec<&str> = history.lines().collect();
    assert!(
        lines[0].ends_with("ROLLOUT")
            && lines[1].contains(&format!("rollback to {v2}"))
            && lines[1].ends_with("soaking")
            && lines[2].contains(&format!("rollback to {v1}"))
            && lines[2].ends_with("promoted"),
        "{history}"
    );
}

/// GET `path` on a replica's admin API: status and body.
async fn admin_get(xdsd: &Xdsd, path: &str) -> (u16, String) {
    let port = xdsd.admin_port().await;
    let response = crate::support::http_get(("127.0.0.1", port), path, "localhost")
        .await
        .expect("the admin API answers");
    (response.status, response.body)
}

/// The admin API's `GET /history` answers the rows `xdsd history --output json` prints, and the
/// status page shows the last changes (revision, author, message, counts); serving a directory,
/// `/history` is 404 saying there is no history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_and_status_page_show_the_history_of_the_prefix() {
    let etcd = Etcd::start().await;
    let dir = basic_resources(Transport::Ads, 9);
    let first = push(
        &etcd,
        &dir.path(),
        &["--message", "first <one>", "--author", "ana"],
    )
    .await;
    dir.write("endpoints.yaml", &endpoints_yaml("service", 10));
    let second = push(&etcd, &dir.path(), &["--message", "move", "--author", "bo"]).await;
    let xdsd_replica = Xdsd::start_etcd(&etcd.endpoint(), PREFIX, &[]).await;

    let (status, body) = admin_get(&xdsd_replica, "/history").await;
    assert_eq!(status, 200, "{body}");
    let mut served: Value = serde_json::from_str(&body).expect("JSON");
    // Each row says which replicas serve it: this one serves the latest.
    assert_eq!(
        served[0]["served"],
        serde_json::json!(["this replica"]),
        "{served:#}"
    );
    assert_eq!(served[1]["served"], serde_json::json!([]), "{served:#}");
    for row in served.as_array_mut().expect("an array") {
        row.as_object_mut().expect("an object").remove("served");
    }
    let printed = rows(&etcd).await;
    assert_eq!(served, Value::Array(printed), "the same rows as the CLI");
    assert_eq!(served[0]["revision"], second, "{served:#}");
    assert_eq!(served[0]["author"], "bo", "{served:#}");
    assert_eq!(served[1]["revision"], first, "{served:#}");
    assert_eq!(served[1]["message"], "first <one>", "{served:#}");
    let (status, one) = admin_get(&xdsd_replica, "/history?limit=1").await;
    assert_eq!(status, 200, "{one}");
    let one: Value = serde_json::from_str(&one).expect("JSON");
    assert_eq!(one.as_array().map(Vec::len), Some(1), "{one}");
    assert_eq!(admin_get(&xdsd_replica, "/history?limit=0").await.0, 400);

    let (status, page) = admin_get(&xdsd_replica, "/?refresh=0").await;
    assert_eq!(status, 200);
    assert!(page.contains("<table id=\"history\">"), "{page}");
    assert!(
        page.contains(&format!("<td class=\"mono\">{second}</td>")),
        "{page}"
    );
    assert!(page.contains("first &lt;one&gt;"), "escaped: {page}");
    assert!(page.contains("<td>ana</td>"), "{page}");
    assert!(
        page.contains("+0 ~1 -0"),
        "the second push's counts: {page}"
    );

    let directory = Xdsd::start(&dir.path()).await;
    let (status, body) = admin_get(&directory, "/history").await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("directory"), "{body}");
}

/// `xdsd status --output json --server A,B`: its exit status and its JSON.
async fn status_json(servers: &[&Xdsd]) -> (Option<i32>, Value) {
    let servers: Vec<String> = servers.iter().map(|x| x.authority()).collect();
    let run = Command::new(env!("CARGO_BIN_EXE_xdsd"))
        .args(["status", "--output", "json", "--server", &servers.join(",")])
        .env_remove("XDSD_STATUS_SERVER")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = timeout(DEADLINE, run)
        .await
        .expect("xdsd status ends in time")
        .expect("xdsd status runs");
    let json = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|_| panic!("not JSON: {}", text(&output)));
    (output.status.code(), json)
}

/// `xdsd status --server A --server B` as text.
async fn status_text(servers: &[&Xdsd]) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_xdsd"));
    command.arg("status");
    for x in servers {
        command.args(["--server", &x.authority()]);
    }
    let run = command
        .env_remove("XDSD_STATUS_SERVER")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = timeout(DEADLINE, run)
        .await
        .expect("xdsd status ends in time")
        .expect("xdsd status runs");
    text(&output)
}

/// Waits for `replica`'s log line of a change applied at `revision` (after `mark`).
async fn applied(replica: &Xdsd, mark: usize, revision: i64) {
    replica
        .log
        .expect_line_since(
            mark,
            &["resources loaded", &format!("revision={revision}")],
            "the replica to apply the change",
        )
        .await;
}

/// The row of the page's last changes for `revision` (its `<tr>` ... `</tr>`).
fn change_row(page: &str, revision: i64) -> &str {
    let cell = format!("<td class=\"mono\">{revision}</td>");
    let at = page
        .find(&cell)
        .unwrap_or_else(|| panic!("no change {revision} on the page: {page}"));
    let start = page[..at].rfind("<tr").expect("its row");
    let end = at + page[at..].find("</tr>").expect("its row's end");
    &page[start..end]
}

/// Two replicas on one prefix, one checking references strictly and the other warning: after a
/// push both serve its revision, as `xdsd status` over both, `GET /history`'s `served` and the
/// status page in Chromium (its change marked with both) show; a direct write of a dangling
/// reference, which only the warning one applies, leaves the strict one behind, shown so by all
/// three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_replica_reports_the_revision_it_serves_and_one_behind_shows_as_such() {
    let etcd = Etcd::start().await;
    let dir = ResourceDir::new();
    dir.write("a.yaml", &static_cluster_yaml("a", 1001));
    push(&etcd, &dir.path(), &["--message", "first"]).await;
    let strict = Xdsd::start_etcd(&etcd.endpoint(), PREFIX, &["--references", "strict"]).await;
    let peers = strict.authority();
    let lenient = Xdsd::start_etcd(
        &etcd.endpoint(),
        PREFIX,
        &["--references", "warn", "--peers", &peers],
    )
    .await;
    let admin = lenient.admin_port().await;

    // A push: both replicas apply it, and say so.
    let (mark_strict, mark_lenient) = (strict.log.mark(), lenient.log.mark());
    dir.write("a.yaml", &static_cluster_yaml("a", 1002));
    let second = push(
        &etcd,
        &dir.path(),
        &["--message", "second", "--author", "ana"],
    )
    .await;
    applied(&strict, mark_strict, second).await;
    applied(&lenient, mark_lenient, second).await;
    let (code, json) = status_json(&[&strict, &lenient]).await;
    assert_eq!(code, Some(0), "{json:#}");
    let replicas = json["replicas"].as_array().expect("the replicas");
    assert_eq!(replicas.len(), 2, "{json:#}");
    for (replica, x) in replicas.iter().zip([&strict, &lenient]) {
        assert_eq!(replica["address"], x.authority(), "{json:#}");
        assert_eq!(replica["revision"], second, "{json:#}");
        assert_eq!(replica["behind"], false, "{json:#}");
    }
    let out = status_text(&[&strict, &lenient]).await;
    for x in [&strict, &lenient] {
        assert!(
            out.contains(&format!(
                "replica {} serves etcd revision {second}\n",
                x.authority()
            )),
            "{out}"
        );
    }
    let (status, metrics) = admin_get(&lenient, "/metrics").await;
    assert_eq!(status, 200, "{metrics}");
    assert!(
        metrics.contains(&format!("\nxdsd_source_revision {second}\n")),
        "the served revision is a metric too:\n{metrics}"
    );
    let (status, body) = admin_get(&lenient, "/history").await;
    assert_eq!(status, 200, "{body}");
    let rows: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(rows[0]["revision"], second, "{rows:#}");
    assert_eq!(
        rows[0]["served"],
        serde_json::json!(["this replica", peers]),
        "{rows:#}"
    );
    let url = format!("http://127.0.0.1:{admin}/?refresh=0");
    let page = crate::status_page::dump_dom(&url).await;
    let row = change_row(&page, second);
    assert!(
        row.contains("ana")
            && row.contains("<span class=\"served\">this replica</span>")
            && row.contains(&format!("<span class=\"served\">{peers}</span>")),
        "both replicas beside the change: {row}"
    );

    // A dangling reference written directly: the strict replica refuses it and stays behind.
    let (mark_strict, mark_lenient) = (strict.log.mark(), lenient.log.mark());
    etcdctl_put(
        &etcd,
        &format!("{PREFIX}route.yaml"),
        &route_yaml("r", "missing"),
    )
    .await;
    strict
        .log
        .expect_line_since(
            mark_strict,
            &["change rejected"],
            "the strict replica to refuse it",
        )
        .await;
    let third = rows_now(&etcd).await;
    applied(&lenient, mark_lenient, third).await;
    let (code, json) = status_json(&[&strict, &lenient]).await;
    assert_eq!(code, Some(1), "a replica behind: {json:#}");
    assert_eq!(json["replicas"][0]["revision"], second, "{json:#}");
    assert_eq!(json["replicas"][0]["behind"], true, "{json:#}");
    assert_eq!(json["replicas"][1]["revision"], third, "{json:#}");
    assert_eq!(json["replicas"][1]["behind"], false, "{json:#}");
    let out = status_text(&[&strict, &lenient]).await;
    assert!(
        out.contains(&format!(
            "replica {peers} serves etcd revision {second}: BEHIND"
        )),
        "{out}"
    );
    let page = crate::status_page::dump_dom(&url).await;
    assert!(
        change_row(&page, third).contains("<span class=\"served\">this replica</span>"),
        "{page}"
    );
    assert!(
        change_row(&page, second).contains(&format!(
            "<span class=\"served STALE\">{peers} (behind)</span>"
        )),
        "{page}"
    );
    assert!(
        page.contains(&format!(
            "change {second}: behind, the latest change is {third}"
        )),
        "{page}"
    );
}

/// The revision of the latest change in the history.
async fn rows_now(etcd: &Etcd) -> i64 {
    rows(etcd).await[0]["revision"]
        .as_i64()
        .expect("a revision")
}

/// A push run without `USER` and `LOGNAME` (a container, CI, a systemd unit) is by the system's
/// name of the user; a rollback (and a diff) to a revision etcd has not reached says so, with the
/// prefix's last change and etcd's current revision, and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_without_user_is_by_the_system_user_and_a_future_revision_is_said_to_not_exist() {
    let etcd = Etcd::start().await;
    let dir = ResourceDir::new();
    dir.write("a.yaml", &static_cluster_yaml("a", 1001));
    let path = dir.path().to_string_lossy().into_owned();
    let run = Command::new(env!("CARGO_BIN_EXE_xdsd"))
        .args(["push", "--resources", &path])
        .args([
            "--etcd-endpoints",
            &etcd.endpoint(),
            "--etcd-prefix",
            PREFIX,
        ])
        .env_remove("USER")
        .env_remove("LOGNAME")
        .env_remove("XDSD_PUSH_AUTHOR")
        .env_remove("XDSD_PUSH_MESSAGE")
        .stdin(Stdio::null())
        .output();
    let output = timeout(DEADLINE, run)
        .await
        .expect("xdsd push ends in time")
        .expect("xdsd push runs");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let pushed = revision_in(&String::from_utf8_lossy(&output.stdout));
    let id = std::process::Command::new("id")
        .arg("-un")
        .output()
        .expect("id runs");
    let user = String::from_utf8_lossy(&id.stdout).trim().to_owned();
    assert!(!user.is_empty(), "id -un names the user");
    let json = rows(&etcd).await;
    let author = json[0]["author"].as_str().unwrap_or_default();
    assert!(
        author.starts_with(&format!("{user}@")) && author.len() > user.len() + 1,
        "the author is {user}@hostname: {json:#?}"
    );

    let before = contents(&etcd).await;
    let future = pushed + 1000;
    for command in ["rollback", "diff"] {
        let output = xdsd(&etcd, command, &[&future.to_string()]).await;
        assert_eq!(output.status.code(), Some(1), "{}", text(&output));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(&format!("revision {future} does not exist yet"))
                && stderr.contains(&format!(
                    "the prefix {PREFIX} last changed at revision {pushed}"
                ))
                && stderr.contains(&format!("etcd's current revision is {pushed}"))
                && !stderr.contains("mvcc"),
            "{}",
            text(&output)
        );
    }
    assert_eq!(contents(&etcd).await, before, "etcd untouched");
}
