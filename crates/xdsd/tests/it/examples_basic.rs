//! `examples/basic` stays correct: xdsd loads its resources and serves all four over ADS, and
//! Envoy accepts its bootstrap.

use std::process::Stdio;

use crate::support::ads::{self, AdsStream};
use crate::support::{
    envoy_binary, repo_root, unique_name, Xdsd, CLUSTER, DEADLINE, ENDPOINTS, LISTENER, ROUTE,
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
    // And the README's two-replica one (both replicas in its xds_cluster).
    for file in ["envoy.yaml", "envoy-replicas.yaml"] {
        validate(&repo_root().join("examples/basic").join(file)).await;
    }
}

async fn validate(config: &std::path::Path) {
    let base_id = (std::process::id() % 4_000_000) * 64 + 63;
    let run = tokio::process::Command::new(envoy_binary())
        .args(["--mode", "validate", "--concurrency", "1"])
        .args(["--base-id", &base_id.to_string()])
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
