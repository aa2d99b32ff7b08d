//! Reference checks through the real binary: a directory with a route to a missing cluster
//! cannot start xdsd (the error names both ends); a reload that introduces a dangling reference,
//! or removes a cluster a route still sends to, is rejected and the old state stays served;
//! with `--references warn` the same changes are applied and each dangling reference logged;
//! `--external-name` lets a route send to a cluster the clients get elsewhere. And the premise
//! of the strict default, with a real Envoy: Envoy accepts a route to a missing cluster (no
//! NACK) and answers its requests with 503.

use std::process::Stdio;

use crate::support::ads;
use crate::support::scenario::{dynamic_bootstrap, listener_yaml, Transport};
use crate::support::{http_get, unique_name, Envoy, ResourceDir, Xdsd, CLUSTER, DEADLINE, ROUTE};
use envoy_types::pb::envoy::config::route::v3::route::Action;
use envoy_types::pb::envoy::config::route::v3::route_action::ClusterSpecifier;
use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse;
use prost::Message;

fn cluster_yaml(name: &str) -> String {
    format!("\"@type\": {CLUSTER}\nname: {name}\ntype: STATIC\nconnect_timeout: 1s\n")
}

fn route_yaml(name: &str, cluster: &str) -> String {
    format!(
        "\"@type\": {ROUTE}
name: {name}
virtual_hosts:
- name: all
  domains: [\"*\"]
  routes:
  - match: {{ prefix: / }}
    route: {{ cluster: {cluster} }}
"
    )
}

/// The message naming both ends of the dangling route `r1` → `cluster`.
fn dangling_route(cluster: &str) -> String {
    format!(
        "route.yaml (resource #1): RouteConfiguration \"r1\" field \
         virtual_hosts[0].routes[0].route.cluster refers to Cluster \"{cluster}\", which does \
         not exist"
    )
}

/// The cluster route `r1` sends to, as served to a new client.
async fn served_route_cluster(xdsd: &Xdsd) -> String {
    let resp = ads::fetch(&xdsd.url(), &unique_name("refs-node"), ROUTE, &["r1"])
        .await
        .expect("RDS r1 on a new stream");
    route_cluster(&resp)
}

fn route_cluster(resp: &DiscoveryResponse) -> String {
    assert_eq!(resp.resources.len(), 1, "one route configuration: {resp:?}");
    let rc = RouteConfiguration::decode(resp.resources[0].value.as_slice())
        .expect("a decodable RouteConfiguration");
    match &rc.virtual_hosts[0].routes[0].action {
        Some(Action::Route(action)) => match &action.cluster_specifier {
            Some(ClusterSpecifier::Cluster(c)) => c.clone(),
            other => panic!("unexpected cluster specifier {other:?}"),
        },
        other => panic!("unexpected action {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dangling_reference_at_startup_is_fatal_and_names_both_ends() {
    let dir = ResourceDir::new();
    dir.write("route.yaml", &route_yaml("r1", "missing"));
    dir.write("cluster.yaml", &cluster_yaml("other"));
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_xdsd"))
        .args(["serve", "--listen", "127.0.0.1:0", "--resources"])
        .arg(dir.path())
        .env("NO_COLOR", "1")
        .env("XDSD_ADMIN_LISTEN", "127.0.0.1:0")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(DEADLINE, run)
        .await
        .expect("xdsd exits by itself")
        .expect("xdsd runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "xdsd must not start: {stderr}");
    assert!(
        stderr.contains("cannot load resources from")
            && stderr.contains(&dangling_route("missing")),
        "the error names both ends: {stderr}"
    );
    assert!(
        stderr.contains("--external-name"),
        "the error says how to declare a name the clients get elsewhere: {stderr}"
    );
    assert!(
        !stderr.contains("listening on"),
        "nothing was served: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_reloads_with_a_dangling_reference_are_rejected_and_the_old_state_stays_served() {
    let dir = ResourceDir::new();
    dir.write("cluster.yaml", &cluster_yaml("c1"));
    dir.write("route.yaml", &route_yaml("r1", "c1"));
    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;

    // A stream that stays open through the rejected changes.
    let mut watcher = ads::AdsStream::open(&xdsd.url(), &unique_name("refs-watch"), ROUTE, &["r1"])
        .await
        .expect("an ADS stream");
    let first = watcher.recv().await.expect("the first RDS response");
    assert_eq!(route_cluster(&first), "c1");
    watcher
        .request(ROUTE, &["r1"], Some(&first))
        .await
        .expect("ACK");

    // The route now sends to a cluster that does not exist.
    let mark = xdsd.log.mark();
    dir.write("route.yaml", &route_yaml("r1", "c2"));
    let line = xdsd
        .log
        .expect_line_since(
            mark,
            &["change rejected", &dangling_route("c2")],
            "the rejection",
        )
        .await;
    assert!(line.contains("ERROR"), "{line}");
    assert_eq!(
        served_route_cluster(&xdsd).await,
        "c1",
        "the old route is served"
    );

    // Back to the good route, then remove the cluster it still sends to.
    let mark = xdsd.log.mark();
    dir.write("route.yaml", &route_yaml("r1", "c1"));
    xdsd.log
        .expect_line_since(
            mark,
            &["directory changed, resources unchanged"],
            "the good state",
        )
        .await;
    let mark = xdsd.log.mark();
    dir.remove("cluster.yaml");
    xdsd.log
        .expect_line_since(
            mark,
            &["change rejected", &dangling_route("c1")],
            "the rejection",
        )
        .await;
    let cds = ads::fetch(&xdsd.url(), &unique_name("refs-node"), CLUSTER, &[])
        .await
        .expect("CDS on a new stream");
    assert_eq!(ads::names(&cds), ["c1"], "the cluster in use stays served");

    // The safe order: the new cluster, then the route to it.
    let mark = xdsd.log.mark();
    dir.write("cluster.yaml", &cluster_yaml("c1"));
    dir.write("cluster2.yaml", &cluster_yaml("c2"));
    dir.write("route.yaml", &route_yaml("r1", "c2"));
    let pushed = loop {
        let resp = watcher
            .recv()
            .await
            .expect("an RDS push after the good change");
        watcher
            .request(ROUTE, &["r1"], Some(&resp))
            .await
            .expect("ACK");
        if route_cluster(&resp) == "c2" {
            break resp;
        }
    };
    assert_ne!(pushed.version_info, first.version_info);
    assert!(
        xdsd.log
            .matching_since(0, |l| l.contains("NACK"))
            .is_empty(),
        "no client NACKed"
    );
    let rejected_after = xdsd
        .log
        .matching_since(mark, |l| l.contains("change rejected"));
    // Each write is atomic and in a safe order: no intermediate state dangles.
    assert!(rejected_after.is_empty(), "{rejected_after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warn_mode_applies_dangling_references_and_logs_each() {
    let dir = ResourceDir::new();
    dir.write("route.yaml", &route_yaml("r1", "missing"));
    let xdsd = Xdsd::start_with_args(
        &dir.path(),
        &["--log-level", "debug", "--references", "warn"],
    )
    .await;
    let line = xdsd
        .log
        .expect_line_since(
            0,
            &[
                "applied with a dangling reference",
                &dangling_route("missing"),
            ],
            "a WARN line",
        )
        .await;
    assert!(line.contains("WARN"), "{line}");
    xdsd.expect_loaded_since(0).await;
    assert_eq!(served_route_cluster(&xdsd).await, "missing");

    let mark = xdsd.log.mark();
    dir.write("route.yaml", &route_yaml("r1", "also-missing"));
    xdsd.log
        .expect_line_since(
            mark,
            &[
                "applied with a dangling reference",
                &dangling_route("also-missing"),
            ],
            "a WARN line for the reload",
        )
        .await;
    xdsd.expect_loaded_since(mark).await;
    assert_eq!(served_route_cluster(&xdsd).await, "also-missing");
    assert!(
        xdsd.log
            .matching_since(0, |l| l.contains("rejected"))
            .is_empty(),
        "nothing rejected in warn mode"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_names_let_routes_send_to_clusters_of_the_bootstrap() {
    let dir = ResourceDir::new();
    dir.write("route.yaml", &route_yaml("r1", "xds_cluster"));
    let xdsd = Xdsd::start_with_args(
        &dir.path(),
        &[
            "--log-level",
            "debug",
            "--external-name",
            "cluster:xds_cluster",
        ],
    )
    .await;
    xdsd.expect_loaded_since(0).await;
    assert_eq!(served_route_cluster(&xdsd).await, "xds_cluster");
    assert!(
        xdsd.log
            .matching_since(0, |l| l.contains("dangling"))
            .is_empty(),
        "an external name is not dangling"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_accepts_a_route_to_a_missing_cluster_and_answers_503() {
    let dir = ResourceDir::new();
    dir.write(
        "listener.yaml",
        &listener_yaml("listener_0", "r1", Transport::Ads),
    );
    dir.write("route.yaml", &route_yaml("r1", "missing"));
    let xdsd = Xdsd::start_with_args(
        &dir.path(),
        &["--log-level", "debug", "--references", "off"],
    )
    .await;
    xdsd.expect_loaded_since(0).await;
    let node = unique_name("refs-envoy");
    let envoy = Envoy::start(&dynamic_bootstrap(&node, xdsd.port, Transport::Ads)).await;
    // The listener only binds once its route configuration arrived and was accepted.
    let port = envoy.listener_port("listener_0").await;
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let status = loop {
        match http_get(("127.0.0.1", port), "/", "example.test").await {
            Ok(resp) if resp.status == 503 => break resp.status,
            other if tokio::time::Instant::now() >= deadline => panic!(
                "no 503 from Envoy within {DEADLINE:?}; last: {other:?}\nEnvoy log:\n{}",
                envoy.log.text()
            ),
            _ => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
        }
    };
    assert_eq!(status, 503);
    xdsd.log
        .expect_line_since(0, &["ACK", ROUTE], "Envoy's ACK of the route configuration")
        .await;
    let nacks = xdsd.log.matching_since(0, |l| l.contains("NACK"));
    assert!(
        nacks.is_empty(),
        "Envoy did not reject the route: {nacks:?}"
    );
}
