//! `examples/basic` stays correct: xdsd loads its resources and serves all four over ADS, Envoy
//! accepts its bootstraps, and the gated-rollout walk-through's `--canary` selector picks the
//! shipped canary bootstrap's Envoy, and only it.

use std::process::Stdio;

use crate::support::ads::{self, AdsStream};
use crate::support::{
    envoy_binary, repo_root, unique_name, Envoy, Xdsd, CLUSTER, DEADLINE, ENDPOINTS, LISTENER,
    ROUTE,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xdsd_serves_the_four_resources_of_examples_basic() {
    let resources = repo_root().join("examples/basic/resources");
    let xdsd = Xdsd::start(&resources).await;
    xdsd.expect_loaded_since(0).await;

    // Like Envoy: LDS and CDS wildcard, then the route and endpoints they name, on one stream.
    let node = unique_name("example-node");
    let mut stream = AdsStream::open(&xdsd.url(), &node, LISTENER, &[])
        .await
        .expect("an ADS stream to xdsd");
    let mut got = Vec::new();
    for (type_url, names) in [
        (LISTENER, vec![]),
        (CLUSTER, vec![]),
        (ROUTE, vec!["local_route"]),
        (ENDPOINTS, vec!["backend"]),
    ] {
        if type_url != LISTENER {
            stream
                .request(type_url, &names, None)
                .await
                .expect("send a request");
        }
        let resp = stream
            .recv()
            .await
            .unwrap_or_else(|e| panic!("a response for {type_url}: {e}"));
        assert_eq!(resp.type_url, type_url, "responses come in request order");
        stream
            .request(type_url, &names, Some(&resp))
            .await
            .expect("ACK");
        got.push((type_url, ads::names(&resp)));
    }
    assert_eq!(
        got,
        [
            (LISTENER, vec!["listener_0".to_string()]),
            (CLUSTER, vec!["backend".to_string()]),
            (ROUTE, vec!["local_route".to_string()]),
            (ENDPOINTS, vec!["backend".to_string()]),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_accepts_the_bootstrap_of_examples_basic() {
    // And the README's two-replica one (both replicas in its xds_cluster), and the canary of the
    // gated-rollout walk-through.
    for file in BOOTSTRAPS {
        validate(&repo_root().join("examples/basic").join(file)).await;
    }
}

/// The shipped Envoy bootstraps: the basic one, the two-replica one, the canary of the
/// gated-rollout walk-through, and the relay walk-through's.
const BOOTSTRAPS: [&str; 4] = [
    "envoy.yaml",
    "envoy-replicas.yaml",
    "envoy-canary.yaml",
    "envoy-relay.yaml",
];

/// Every `port_value: N` of a file, in order.
fn port_values(text: &str) -> Vec<u32> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("port_value: "))
        .map(|n| n.parse().expect("a port number"))
        .collect()
}

/// `examples/basic/shift-ports OFFSET DIR` writes the example with every port moved by OFFSET:
/// each bootstrap and resource file's ports (and no old one left), a directory `xdsd check`
/// passes, bootstraps Envoy accepts; and it prints the etcd flags for the moved port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shift_ports_moves_every_port_of_the_example() {
    let basic = repo_root().join("examples/basic");
    let out = tempfile::tempdir().expect("a directory");
    let run = std::process::Command::new(basic.join("shift-ports"))
        .arg("1000")
        .arg(out.path())
        .output()
        .expect("shift-ports runs");
    let printed = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        printed.contains("--listen 127.0.0.1:19000")
            && printed.contains("--listen-client-urls http://127.0.0.1:3379"),
        "{printed}"
    );
    let resources: Vec<String> = ["cluster", "endpoints", "listener", "route"]
        .iter()
        .map(|r| format!("resources/{r}.yaml"))
        .collect();
    let files = BOOTSTRAPS
        .iter()
        .map(|f| f.to_string())
        .chain(resources.iter().cloned());
    for file in files {
        let before = std::fs::read_to_string(basic.join(&file)).expect("read");
        let after = std::fs::read_to_string(out.path().join(&file)).expect("written");
        let moved: Vec<u32> = port_values(&before).iter().map(|p| p + 1000).collect();
        assert_eq!(port_values(&after), moved, "{file}:\n{after}");
        for port in port_values(&before) {
            assert!(
                !after.contains(&format!("127.0.0.1:{port}")),
                "{file} still names port {port}:\n{after}"
            );
        }
    }
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_xdsd"))
        .args(["check", "--resources"])
        .arg(out.path().join("resources"))
        .output()
        .expect("xdsd check runs");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    for file in BOOTSTRAPS {
        validate(&out.path().join(file)).await;
    }
    let usage = std::process::Command::new(basic.join("shift-ports"))
        .arg("60000")
        .arg(out.path())
        .output()
        .expect("shift-ports runs");
    assert_eq!(usage.status.code(), Some(2), "a port over 65535");
}

/// The README's relay walk-through runs the shipped relay bootstrap, which points at the relay's
/// `--listen` port, with the same `$XDSD` and `$ENVOY` as the sections before it.
#[test]
fn the_relay_walk_through_runs_the_shipped_relay_bootstrap() {
    let root = repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("read");
    let section = readme
        .split("### A relay tier")
        .nth(1)
        .and_then(|s| s.split("```sh\n").nth(1))
        .and_then(|s| s.split("```").next())
        .expect("the relay walk-through's commands");
    let commands: Vec<&str> = section.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(
        commands
            .iter()
            .all(|l| l.starts_with("$XDSD ") || l.starts_with("$ENVOY ")),
        "{section}"
    );
    let relay = commands
        .iter()
        .find(|l| l.starts_with("$XDSD relay"))
        .expect("the relay's command");
    let listen = relay
        .split("--listen 127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|p| p.parse::<u32>().ok())
        .expect("the relay's --listen port");
    assert!(
        commands
            .iter()
            .any(|l| l.starts_with("$ENVOY -c examples/basic/envoy-relay.yaml")),
        "{section}"
    );
    let bootstrap =
        std::fs::read_to_string(root.join("examples/basic/envoy-relay.yaml")).expect("read");
    assert!(
        port_values(&bootstrap).contains(&listen),
        "envoy-relay.yaml points at the relay's {listen}:\n{bootstrap}"
    );
}

async fn validate(config: &std::path::Path) {
    let run = tokio::process::Command::new(envoy_binary())
        .args(["--mode", "validate", "--concurrency", "1"])
        .arg("--use-dynamic-base-id")
        .arg("-c")
        .arg(config)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(DEADLINE, run)
        .await
        .expect("envoy --mode validate finishes")
        .expect("envoy runs");
    assert!(
        out.status.success(),
        "envoy --mode validate -c {} failed ({}):\n{}{}",
        config.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The `node.cluster` of a shipped bootstrap (`  cluster: NAME` under `node:`).
fn node_cluster(bootstrap: &str) -> String {
    let node = bootstrap
        .split("\nnode:\n")
        .nth(1)
        .expect("the bootstrap has a node");
    node.lines()
        .take_while(|l| l.starts_with("  "))
        .find_map(|l| l.trim().strip_prefix("cluster: "))
        .expect("the node has a cluster")
        .to_owned()
}

/// A shipped bootstrap as a test runs it: xDS at `port`, admin on port 0.
fn on_port(bootstrap: &str, port: u16) -> String {
    bootstrap
        .replace("port_value: 18000", &format!("port_value: {port}"))
        .replace("port_value: 9901", "port_value: 0")
        .replace("port_value: 9902", "port_value: 0")
}

/// The gated-rollout walk-through (README, docs/rollouts.md) runs `--canary cluster=canary`
/// with `examples/basic/envoy.yaml` as the stable proxy and `envoy-canary.yaml` as the canary:
/// every selector the walk-through gives is the canary bootstrap's node cluster and not the
/// stable one's, and with real Envoys (both on the example's listener port) xdsd's `/rollout`
/// lists the canary's node as a canary and not the stable one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_canary_walk_through_selects_the_shipped_canary_bootstrap() {
    let root = repo_root();
    let stable = std::fs::read_to_string(root.join("examples/basic/envoy.yaml")).expect("read");
    let canary =
        std::fs::read_to_string(root.join("examples/basic/envoy-canary.yaml")).expect("read");
    let want = format!("cluster={}", node_cluster(&canary));
    assert_ne!(
        node_cluster(&stable),
        node_cluster(&canary),
        "the stable proxy is not a canary"
    );
    let mut selectors = Vec::new();
    for doc in ["README.md", "docs/rollouts.md"] {
        let text = std::fs::read_to_string(root.join(doc)).expect("read");
        let walk_through = text
            .lines()
            .filter(|l| l.contains("--canary cluster="))
            .filter(|l| l.contains("xdsd") || l.trim_start().starts_with("--canary"));
        for line in walk_through {
            let selector = line
                .split("--canary ")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .expect("a selector");
            selectors.push((doc, selector.to_owned()));
        }
    }
    assert!(selectors.len() >= 2, "{selectors:?}");
    for (doc, selector) in &selectors {
        assert_eq!(selector, &want, "{doc}'s walk-through selector");
    }

    let resources = root.join("examples/basic/resources");
    let xdsd = Xdsd::start_with_args(&resources, &["--canary", &want]).await;
    xdsd.expect_loaded_since(0).await;
    let admin = xdsd.admin_port().await;
    let canary_envoy = Envoy::start(&on_port(&canary, xdsd.port)).await;
    let stable_envoy = Envoy::start(&on_port(&stable, xdsd.port)).await;
    // Both took the example's listener (the same port: the walk-through runs them side by side).
    let (cport, sport) = (
        canary_envoy.listener_port("listener_0").await,
        stable_envoy.listener_port("listener_0").await,
    );
    assert_eq!((cport, sport), (10000, 10000));
    let rollout = crate::envoy_rollout::rollout(admin).await;
    let canaries: Vec<&str> = rollout["canaries"]
        .as_array()
        .expect("canaries")
        .iter()
        .filter_map(|c| c["node"].as_str())
        .collect();
    assert_eq!(canaries, ["canary-envoy"], "{rollout:#}");
}
