//! The relay's source over a real upstream stream: its metrics while the upstream is gone and
//! back, and a resource it cannot decode NACKed upstream with the last good one kept.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::Node;
use xdsd_client::types::CLUSTER;
use xdsd_core::store::ReferencePolicy;
use xdsd_core::{Feed, ResourceInput, Store, XdsServer};
use xdsd_relay::{relay, RelayMetrics, RelayOptions};

use xdsd_testsupport::server::{cluster, cluster_bytes, Server, WAIT};

/// The bytes the relay's store holds for cluster `name`, if any.
fn held(store: &Store, name: &str) -> Option<Bytes> {
    let snapshot = store.snapshot();
    let types = snapshot.types().find(|t| &**t.type_url() == CLUSTER)?;
    let found = types.variants(name).first().map(|r| r.value());
    found
}

/// Polls `check` until it holds (the metrics and the store have no event to wait on from
/// outside), failing after [`WAIT`].
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

/// A relay of `upstream` prefetching clusters, its first load done and followed; its store and
/// metrics (the observer is returned: the source follows while it lives).
async fn start_relay(upstream: SocketAddr) -> (Store, RelayMetrics, xdsd_relay::RelayObserver) {
    let node = Node {
        id: "relay-test".into(),
        ..Default::default()
    };
    let mut options = RelayOptions::new(xdsd_client::Options::new(upstream.to_string()), node);
    options.prefetch = vec![CLUSTER.to_owned()];
    options.first_wait = WAIT;
    options.upstream.initial_backoff = Duration::from_millis(50);
    options.upstream.max_backoff = Duration::from_millis(200);
    let (mut source, observer, metrics) = relay(options);
    let store = Store::with_reference_policy(ReferencePolicy::off());
    let feed = Feed::new(store.clone()).allow_empty(true);
    feed.first_load(&mut source).await.expect("first load");
    tokio::spawn(feed.follow(source));
    (store, metrics, observer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_gone_reads_0_on_the_connected_metric_the_cache_is_kept_and_its_return_is_followed(
) {
    let server = Server::start().await;
    server.set(cluster("a", "1"));
    let (addr, upstream_store) = (server.addr, server.store.clone());
    let (store, metrics, _observer) = start_relay(addr).await;
    assert_eq!(held(&store, "a"), Some(cluster_bytes("a", "1")));
    until("connected", || metrics.upstream_connected()).await;
    assert_eq!(metrics.cache_entries(), 1);
    assert_eq!(metrics.upstream_subscriptions(), 1);

    server.stop().await;
    until("the connected metric reads 0", || {
        !metrics.upstream_connected()
    })
    .await;
    assert_eq!(
        held(&store, "a"),
        Some(cluster_bytes("a", "1")),
        "the cache is kept"
    );

    // Back on the same address, with a change made meanwhile.
    upstream_store
        .apply([xdsd_core::Change::Set(cluster("a", "2"))])
        .expect("store change");
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .expect("bind again");
    let server = XdsServer::builder(upstream_store)
        .build()
        .expect("a server without TLS builds");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server.serve(listener, async move {
        let _ = stopped.await;
    }));
    until("the change after the upstream came back", || {
        held(&store, "a") == Some(cluster_bytes("a", "2"))
    })
    .await;
    until("connected again", || metrics.upstream_connected()).await;
    assert!(metrics.upstream_reconnects() >= 1);
    let _ = stop.send(());
    let _ = task.await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_the_relay_cannot_decode_is_nacked_upstream_and_the_last_good_one_kept() {
    let server = Server::start().await;
    server.set(cluster("a", "1"));
    let (store, metrics, _observer) = start_relay(server.addr).await;
    assert_eq!(held(&store, "a"), Some(cluster_bytes("a", "1")));
    // A length-delimited field that runs past the end: not a Cluster.
    server.set(ResourceInput::new(
        CLUSTER,
        "a",
        Bytes::from_static(&[0x0a, 0x05, b'a']),
    ));
    until("the NACK", || metrics.upstream_rejected() == 1).await;
    assert_eq!(
        held(&store, "a"),
        Some(cluster_bytes("a", "1")),
        "the last good one is kept"
    );
    server.stop().await;
}
