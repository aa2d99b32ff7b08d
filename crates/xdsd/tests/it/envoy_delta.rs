//! Envoy 1.40 configured by xdsd over one aggregated *incremental* stream (`ads_config` with
//! `api_type: DELTA_GRPC`): listener → route (RDS over ADS) → cluster → endpoints (EDS over ADS).
//!
//! 1. Traffic through Envoy reaches upstream A.
//! 2. The endpoints file moves to upstream B: traffic follows.
//! 3. A second cluster `two` (with its endpoints at A) and a route `/two` to it are added: `/two`
//!    reaches A, and xdsd's CDS push carries only the new cluster. Then the route, the cluster and
//!    its endpoints are removed: Envoy drops the cluster, and xdsd's CDS push carries it in
//!    `removed_resources`.
//! 4. xdsd is restarted under Envoy on the same port (SIGTERM, exit 0, a new process on the same
//!    directory). Envoy keeps serving from its last config meanwhile, reconnects with
//!    `initial_resource_versions`, and the new xdsd does not resend the unchanged listener and
//!    cluster (versions are content hashes, equal across restarts). An endpoint change after the
//!    restart moves traffic back to A.

use std::time::Duration;

use crate::support::scenario::{
    basic_resources, dynamic_bootstrap, eds_cluster_yaml, endpoints_yaml, move_endpoints_to,
    route_yaml, Transport,
};
use crate::support::{
    http_get, log_field, names_node, unique_name, wait_for_body, wait_for_body_at, Envoy, Log,
    ResourceDir, Upstream, Xdsd, CLUSTER, DEADLINE, ENDPOINTS, LISTENER, ROUTE,
};
use tokio::time::{sleep, Instant};

const TRANSPORT: Transport = Transport::DeltaAds;

/// How long Envoy may take to reconnect to the restarted xdsd: its ADS retry backoff grows
/// (with jitter) on every failed attempt while xdsd is down, so this is more than [`DEADLINE`].
const RECONNECT_DEADLINE: Duration = Duration::from_secs(90);

/// Route configuration `name`: prefix `/two` to cluster `two`, everything else to `default`.
fn route_with_two_yaml(name: &str, default: &str, two: &str) -> String {
    format!(
        "\"@type\": {ROUTE}
name: {name}
virtual_hosts:
- name: all
  domains: [\"*\"]
  routes:
  - match: {{ prefix: /two }}
    route: {{ cluster: {two} }}
  - match: {{ prefix: / }}
    route: {{ cluster: {default} }}
"
    )
}

/// A numeric field of a log line (`resources=3`); panics when it is missing or not a number.
fn count(line: &str, key: &str) -> usize {
    log_field(line, key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no numeric {key}= in xdsd's log line {line:?}"))
}

/// Whether `line` is xdsd's debug line `message` (e.g. `push`, `subscribe`) for `node` and
/// `type_url`.
fn is_event(line: &str, message: &str, node: &str, type_url: &str) -> bool {
    line.split_whitespace().any(|token| token == message)
        && log_field(line, "node") == Some(node)
        && log_field(line, "type_url") == Some(type_url)
}

/// xdsd's `push` lines for `node` and `type_url` after `mark`.
fn pushes(log: &Log, mark: usize, node: &str, type_url: &str) -> Vec<String> {
    log.matching_since(mark, |l| is_event(l, "push", node, type_url))
}

/// Waits up to `within` for a line after `mark` satisfying `pred`; panics naming `what`, with
/// the whole log.
async fn expect_line(
    log: &Log,
    mark: usize,
    pred: impl Fn(&str) -> bool,
    within: Duration,
    what: &str,
) -> String {
    match log.wait_for_since(mark, pred, within).await {
        Ok(line) => line,
        Err(why) => panic!("expected {what} ({why}). xdsd log:\n{}", log.text()),
    }
}

/// The names of the clusters in Envoy's admin `/clusters?format=json`, or why there are none.
async fn envoy_clusters(envoy: &Envoy) -> Result<Vec<String>, String> {
    let resp = envoy
        .admin_get("/clusters?format=json")
        .await
        .map_err(|e| format!("GET /clusters failed: {e}"))?;
    if resp.status != 200 {
        return Err(format!("/clusters: status {}: {}", resp.status, resp.body));
    }
    let json: serde_json::Value = serde_json::from_str(&resp.body)
        .map_err(|e| format!("/clusters is not JSON ({e}): {}", resp.body))?;
    Ok(json
        .get("cluster_statuses")
        .and_then(|c| c.as_array())
        .map(|clusters| {
            clusters
                .iter()
                .filter_map(|c| c.get("name")?.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default())
}

/// Polls Envoy's clusters until `pred` holds for them; panics with the last list after
/// [`DEADLINE`].
async fn wait_for_clusters(envoy: &Envoy, pred: impl Fn(&[String]) -> bool, what: &str) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let last = match envoy_clusters(envoy).await {
            Ok(names) if pred(&names) => return,
            Ok(names) => format!("{names:?}"),
            Err(why) => why,
        };
        if Instant::now() >= deadline {
            panic!(
                "Envoy's clusters: expected {what} within {DEADLINE:?}; last: {last}\nconfig_dump:\n{}",
                envoy.config_dump().await
            );
        }
        sleep(Duration::from_millis(100)).await;
    }
}

/// Starts xdsd on `listen` (a port a previous xdsd held): retried until [`DEADLINE`] in case the
/// port is not free at once.
async fn restart_xdsd_on(dir: &ResourceDir, listen: &str) -> Xdsd {
    let deadline = Instant::now() + DEADLINE;
    loop {
        match Xdsd::try_start_on(&dir.path(), listen, &["--log-level", "debug"]).await {
            Ok(xdsd) => return xdsd,
            Err(why) if Instant::now() >= deadline => {
                panic!("cannot start xdsd again on {listen} within {DEADLINE:?}: {why}")
            }
            Err(_) => sleep(Duration::from_millis(250)).await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_over_delta_ads_follows_changes_removals_and_a_server_restart() {
    let upstream_a = Upstream::start("upstream-a").await;
    let upstream_b = Upstream::start("upstream-b").await;

    let dir = basic_resources(TRANSPORT, upstream_a.port);

    let mut xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;

    let node = unique_name("envoy-delta-node");
    let envoy = Envoy::start(&dynamic_bootstrap(&node, xdsd.port, TRANSPORT)).await;
    let port = envoy.listener_port("listener_0").await;

    // 1. Through Envoy to upstream A, over a delta stream.
    wait_for_body(port, "upstream-a", || {
        format!("xdsd log:\n{}", xdsd.log.text())
    })
    .await;
    assert!(upstream_a.hits() > 0, "upstream A saw the request");
    let identified = expect_line(
        &xdsd.log,
        0,
        |l| l.contains("node identified") && names_node(l, &node),
        DEADLINE,
        "xdsd to identify Envoy's node",
    )
    .await;
    let stream = log_field(&identified, "stream")
        .unwrap_or_else(|| panic!("no stream= in {identified:?}"))
        .to_string();
    let opened = expect_line(
        &xdsd.log,
        0,
        |l| l.contains("stream opened") && log_field(l, "stream") == Some(stream.as_str()),
        DEADLINE,
        "the `stream opened` line of Envoy's stream",
    )
    .await;
    assert_eq!(
        (log_field(&opened, "service"), log_field(&opened, "flavor")),
        (Some("ADS"), Some("delta")),
        "Envoy's stream is incremental ADS: {opened}"
    );
    for type_url in [CLUSTER, ENDPOINTS, LISTENER, ROUTE] {
        let first = pushes(&xdsd.log, 0, &node, type_url);
        assert!(
            first.iter().any(|l| count(l, "resources") == 1),
            "xdsd pushed the one {type_url} to Envoy: {first:#?}"
        );
    }

    // 2. Rewrite the endpoints: traffic moves to B.
    move_endpoints_to(&dir, &xdsd, port, &upstream_b).await;

    // 3a. A second cluster with its endpoints (at A) and a route /two to it.
    let mark = xdsd.log.mark();
    dir.write(
        "two.yaml",
        &format!(
            "{}---\n{}",
            eds_cluster_yaml("two", TRANSPORT),
            endpoints_yaml("two", upstream_a.port)
        ),
    );
    dir.write(
        "route.yaml",
        &route_with_two_yaml("route_0", "service", "two"),
    );
    xdsd.expect_loaded_since(mark).await;
    wait_for_body_at(port, "/two", "upstream-a", || {
        format!("xdsd log:\n{}", xdsd.log.text())
    })
    .await;
    wait_for_body(port, "upstream-b", || {
        format!("xdsd log:\n{}", xdsd.log.text())
    })
    .await;
    let added = pushes(&xdsd.log, mark, &node, CLUSTER);
    let first_add = added
        .iter()
        .find(|l| count(l, "resources") > 0)
        .unwrap_or_else(|| {
            panic!("no CDS push with resources after adding cluster two: {added:#?}")
        });
    assert_eq!(
        (count(first_add, "resources"), count(first_add, "removed")),
        (1, 0),
        "adding cluster `two` sends that one cluster only, not `service` again: {first_add}"
    );

    // 3b. Remove the route to `two` (/two falls back to `service`, at B), then cluster `two`
    // and its endpoints.
    let mark = xdsd.log.mark();
    dir.write("route.yaml", &route_yaml("route_0", "service"));
    xdsd.expect_loaded_since(mark).await;
    wait_for_body_at(port, "/two", "upstream-b", || {
        format!("xdsd log:\n{}", xdsd.log.text())
    })
    .await;
    let mark = xdsd.log.mark();
    dir.remove("two.yaml");
    xdsd.expect_loaded_since(mark).await;
    wait_for_clusters(
        &envoy,
        |names| names.iter().any(|n| n == "service") && !names.iter().any(|n| n == "two"),
        "`service` and no `two`",
    )
    .await;
    let removal = expect_line(
        &xdsd.log,
        mark,
        |l| is_event(l, "push", &node, CLUSTER) && count(l, "removed") >= 1,
        DEADLINE,
        "a CDS push to Envoy with removed>=1 after cluster `two` was deleted",
    )
    .await;
    assert!(
        removal.contains("DEBUG"),
        "pushes are logged at DEBUG: {removal}"
    );
    assert_eq!(
        count(&removal, "resources"),
        0,
        "removing `two` resends no cluster: {removal}"
    );
    let dump = envoy.config_dump().await;
    assert!(
        !dump.contains("\"name\": \"two\""),
        "Envoy's config_dump has no cluster `two` left:\n{dump}"
    );
    wait_for_body(port, "upstream-b", || {
        format!("xdsd log:\n{}", xdsd.log.text())
    })
    .await;

    // 4. Restart xdsd under Envoy, on the same port and the same directory.
    let listen = xdsd.authority();
    let status = xdsd.terminate().await;
    assert_eq!(
        status.code(),
        Some(0),
        "xdsd's exit status after SIGTERM ({status}). Log:\n{}",
        xdsd.log.text()
    );
    let ending = xdsd
        .log
        .matching_since(0, |l| l.contains("ending stream") && names_node(l, &node));
    assert!(
        ending
            .iter()
            .any(|l| log_field(l, "code") == Some("Unavailable")),
        "xdsd ended Envoy's stream with UNAVAILABLE: {ending:#?}\nLog:\n{}",
        xdsd.log.text()
    );
    // Envoy keeps serving its last configuration while xdsd is away.
    let resp = http_get(("127.0.0.1", port), "/", "example.test")
        .await
        .expect("a request through Envoy while xdsd is down");
    assert_eq!(
        (resp.status, resp.body.as_str()),
        (200, "upstream-b"),
        "Envoy keeps routing to B while xdsd is down"
    );

    let xdsd2 = restart_xdsd_on(&dir, &listen).await;
    assert_eq!(
        xdsd2.authority(),
        listen,
        "the new xdsd listens where the old one did"
    );
    xdsd2.expect_loaded_since(0).await;
    for type_url in [CLUSTER, LISTENER] {
        let subscribe = expect_line(
            &xdsd2.log,
            0,
            |l| is_event(l, "subscribe", &node, type_url),
            RECONNECT_DEADLINE,
            &format!("Envoy to reconnect and subscribe to {type_url}"),
        )
        .await;
        assert!(
            count(&subscribe, "initial_versions") >= 1,
            "Envoy reconnects with initial_resource_versions for {type_url}: {subscribe}"
        );
        expect_line(
            &xdsd2.log,
            0,
            |l| is_event(l, "push", &node, type_url),
            DEADLINE,
            &format!("the new xdsd to answer Envoy's {type_url} subscription"),
        )
        .await;
    }
    // The endpoints change after the restart: traffic moves back to A.
    let mark = move_endpoints_to(&dir, &xdsd2, port, &upstream_a).await;
    let moved = pushes(&xdsd2.log, mark, &node, ENDPOINTS);
    assert!(
        moved.iter().any(|l| count(l, "resources") == 1),
        "the new xdsd pushed the changed endpoints: {moved:#?}"
    );
    // Nothing of the listener and cluster changed: every push of them on the new server, the
    // answers to the reconnect included, carries no resource.
    for type_url in [CLUSTER, LISTENER] {
        let after_restart = pushes(&xdsd2.log, 0, &node, type_url);
        assert!(
            !after_restart.is_empty()
                && after_restart
                    .iter()
                    .all(|l| count(l, "resources") == 0 && count(l, "removed") == 0),
            "the new xdsd resent no unchanged {type_url}: {after_restart:#?}\nLog:\n{}",
            xdsd2.log.text()
        );
    }
    // The route and the endpoints Envoy had were not resent either on reconnect (the endpoints
    // only once they changed, after `mark`).
    let answers = |type_url: &str, until: usize| {
        xdsd2
            .log
            .lines()
            .into_iter()
            .take(until)
            .filter(|l| is_event(l, "push", &node, type_url))
            .collect::<Vec<_>>()
    };
    for (type_url, until) in [(ROUTE, usize::MAX), (ENDPOINTS, mark)] {
        let resent = answers(type_url, until);
        assert!(
            !resent.is_empty() && resent.iter().all(|l| count(l, "resources") == 0),
            "the new xdsd resent no unchanged {type_url} on reconnect: {resent:#?}"
        );
    }

    drop(envoy);
    drop(xdsd2);
    drop(xdsd);
}

#[test]
fn log_lines_are_parsed_by_key_not_position() {
    let push = "2026-01-01T00:00:00.000000Z DEBUG xdsd_core::transport::stream: push stream=3 \
                node=n-1 type_url=type.googleapis.com/envoy.config.cluster.v3.Cluster \
                version=\"ab12\" resources=0 removed=2 nonce=\"5\"";
    assert!(is_event(push, "push", "n-1", CLUSTER));
    assert!(!is_event(push, "subscribe", "n-1", CLUSTER));
    assert!(!is_event(push, "push", "n-1", LISTENER));
    assert!(!is_event(push, "push", "n", CLUSTER));
    assert_eq!((count(push, "resources"), count(push, "removed")), (0, 2));
    assert_eq!(log_field(push, "version"), Some("ab12"));
    assert_eq!(log_field(push, "nonce"), Some("5"));
    let subscribe = "x DEBUG xdsd_core::transport::stream: subscribe stream=3 node=\"n-1\" \
                     initial_versions=2 type_url=type.googleapis.com/envoy.config.listener.v3.Listener";
    assert!(is_event(subscribe, "subscribe", "n-1", LISTENER));
    assert_eq!(count(subscribe, "initial_versions"), 2);
    assert_eq!(log_field(subscribe, "missing"), None);
}
