//! A parameter set's wildcard lent what the shared stream holds: the relay's stream of the
//! clients of a node cluster (every Envoy presents one) subscribes to the clusters' wildcard
//! naming, in its first request, the unconstrained clusters the shared stream (`--prefetch`)
//! holds, so that the upstream sends that stream only what differs, not every cluster again;
//! the clients get every cluster, and a change of one reaches them through either stream.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use xdsd_client::types::CLUSTER;
use xdsd_client::{Config, Event, Events, Flavor, XdsClient};
use xdsd_relay::{relay, RelayMetrics, RelayOptions};
use xdsd_testsupport::server::{cluster, cluster_bytes, wait_for, Server, WAIT};

/// A relay of `upstream` prefetching clusters (delta upstream), serving on 127.0.0.1: its
/// metrics and address (the relay serves until the test ends).
async fn start_relay(upstream: SocketAddr) -> (RelayMetrics, SocketAddr) {
    let node = Node {
        id: "relay-lend".into(),
        ..Default::default()
    };
    let mut options = RelayOptions::new(xdsd_client::Options::new(upstream.to_string()), node);
    options.prefetch = vec![CLUSTER.to_owned()];
    options.first_wait = WAIT;
    let (source, observer, metrics) = relay(options);
    let (_store, addr) = crate::serve_relay(source, observer).await;
    (metrics, addr)
}

/// A delta client of `relay` in node cluster `edge` (its parameter set: `xds.node.cluster`),
/// subscribed to the clusters' wildcard.
fn edge_client(relay: SocketAddr) -> (XdsClient, Events) {
    let mut config = Config::new(Node {
        id: "edge-1".into(),
        cluster: "edge".into(),
        ..Default::default()
    });
    config.flavor = Flavor::Delta;
    config.ads = true;
    let (client, events) =
        XdsClient::start(xdsd_client::Options::new(relay.to_string()), config, None)
            .expect("the client starts");
    client.subscribe(CLUSTER, vec![xdsd_client::WILDCARD.to_owned()]);
    (client, events)
}

/// Polls `check` (the metrics have no event to wait on) for up to [`WAIT`].
async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parameter_sets_wildcard_is_lent_the_shared_streams_clusters_and_sent_only_what_differs()
{
    let server = Server::start().await;
    for i in 0..10 {
        server.set(cluster(&format!("c{i}"), "1"));
    }
    let (metrics, relay) = start_relay(server.addr).await;
    assert_eq!(
        metrics.upstream_resources(),
        10,
        "the prefetch: every cluster"
    );

    let (_client, mut events) = edge_client(relay);
    let mut got: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    while got.len() < 10 {
        let update = wait_for(&mut events, |e| match e {
            Event::Update(u) => Some(u.clone()),
            _ => None,
        })
        .await;
        for r in update.added.iter().chain(&update.changed) {
            got.insert(r.name.clone(), r.body.value.clone());
        }
    }
    for i in 0..10 {
        let name = format!("c{i}");
        assert_eq!(got[&name], cluster_bytes(&name, "1").to_vec(), "{name}");
    }
    assert_eq!(
        metrics.upstream_lent(),
        10,
        "lent to the edge clients' stream"
    );
    assert_eq!(
        metrics.upstream_resources(),
        10,
        "the upstream sent the edge clients' stream nothing again"
    );

    // A change reaches the clients, and the edge stream holds the lent clusters: the upstream
    // sends the change to both streams.
    server.set(cluster("c3", "2"));
    let changed = wait_for(&mut events, |e| match e {
        Event::Update(u) => u
            .added
            .iter()
            .chain(&u.changed)
            .find(|r| r.name == "c3")
            .map(|r| r.body.value.clone()),
        _ => None,
    })
    .await;
    assert_eq!(changed, cluster_bytes("c3", "2").to_vec());
    until("the change on both upstream streams", || {
        metrics.upstream_resources() == 12
    })
    .await;
}
