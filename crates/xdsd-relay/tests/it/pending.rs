//! A name first asked through a relay that its upstream answers late: the downstream client is
//! answered once, with the resource, and never told first that it does not exist (delta: no
//! `removed_resources`; SotW: no full-state response without it). The upstream is an
//! in-process xdsd that holds the name pending itself (the same core feature) until the test
//! gives it the resource.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};
use prost::Message;
use tokio::time::timeout;
use tokio_stream::wrappers::ReceiverStream;
use xdsd_client::types::CLUSTER;
use xdsd_core::store::PendingName;
use xdsd_relay::{relay, RelayMetrics, RelayOptions};

use xdsd_testsupport::server::{cluster, Server, WAIT};

/// How long the upstream keeps the relay waiting: a pause that is the thing tested (nothing
/// reaches the downstream client meanwhile).
const LATE: Duration = Duration::from_millis(500);

/// A relay of `upstream` (nothing prefetched) serving on 127.0.0.1, holding a name pending for
/// `first_wait` at most: its address and metrics.
async fn start_relay_waiting(
    upstream: SocketAddr,
    first_wait: Duration,
) -> (SocketAddr, RelayMetrics) {
    let node = Node {
        id: "relay-test".into(),
        ..Default::default()
    };
    let mut options = RelayOptions::new(xdsd_client::Options::new(upstream.to_string()), node);
    options.first_wait = first_wait;
    let (source, observer, metrics) = relay(options);
    let (_, addr) = crate::serve_relay(source, observer).await;
    (addr, metrics)
}

/// An upstream that holds cluster `late` pending, and a relay in front of it.
async fn late_upstream() -> (Server, SocketAddr, RelayMetrics) {
    late_upstream_waiting(WAIT).await
}

/// The same, the upstream and the relay holding `late` pending for `wait`.
async fn late_upstream_waiting(wait: Duration) -> (Server, SocketAddr, RelayMetrics) {
    let upstream = Server::start().await;
    upstream
        .store
        .pending_names()
        .declare(PendingName::new(CLUSTER, "late"), Instant::now() + wait)
        .expect("room");
    let (relay, metrics) = start_relay_waiting(upstream.addr, wait).await;
    (upstream, relay, metrics)
}

/// Waits until the relay subscribed upstream (its observer saw the request), then the pause,
/// then gives the upstream the resource.
async fn answer_late(upstream: &Server, metrics: &RelayMetrics) {
    answer_after(upstream, metrics, LATE).await
}

/// The same after `pause`.
async fn answer_after(upstream: &Server, metrics: &RelayMetrics, pause: Duration) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while metrics.upstream_subscriptions() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the relay never subscribed upstream"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(pause).await;
    upstream.set(cluster("late", "1"));
    upstream
        .store
        .pending_names()
        .resolve([&PendingName::new(CLUSTER, "late")]);
}

fn node() -> Option<Node> {
    Some(Node {
        id: "downstream".into(),
        ..Default::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delta_client_of_a_name_the_upstream_answers_late_gets_it_once_and_no_removal() {
    let (upstream, relay, metrics) = late_upstream().await;
    delta_client_gets_late_once(upstream, relay, metrics, LATE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
// The relay's upstream stream is an xDS client with a does-not-exist timer of its own (15 s by
// default): it must not give a name up before the relay's pending window (`--upstream-wait`)
// does, or a name the upstream is still sending (the tail of 100,000 names) is told missing.
async fn a_name_the_upstream_answers_after_the_clients_default_timer_is_not_told_missing() {
    let wait = xdsd_client::DEFAULT_DOES_NOT_EXIST_TIMEOUT * 3;
    let (upstream, relay, metrics) = late_upstream_waiting(wait).await;
    let pause = xdsd_client::DEFAULT_DOES_NOT_EXIST_TIMEOUT + Duration::from_secs(1);
    delta_client_gets_late_once(upstream, relay, metrics, pause).await;
}

/// A delta client of `late`, which the upstream answers after `pause`, gets it first, and is
/// not told before that it does not exist.
async fn delta_client_gets_late_once(
    upstream: Server,
    relay: SocketAddr,
    metrics: RelayMetrics,
    pause: Duration,
) {
    let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://{relay}"))
        .await
        .expect("connect to the relay");
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(DeltaDiscoveryRequest {
        node: node(),
        type_url: CLUSTER.into(),
        resource_names_subscribe: vec!["late".into()],
        ..Default::default()
    })
    .await
    .expect("queue the request");
    let mut responses = client
        .delta_aggregated_resources(ReceiverStream::new(rx))
        .await
        .expect("a delta ADS stream")
        .into_inner();
    let first = tokio::join!(
        answer_after(&upstream, &metrics, pause),
        timeout(pause + WAIT, responses.message())
    )
    .1
    .expect("an answer in time")
    .expect("a response")
    .expect("not the end of the stream");
    assert!(
        first.removed_resources.is_empty(),
        "told it is missing: {first:?}"
    );
    let names: Vec<&str> = first.resources.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        ["late"],
        "the first response is the upstream's answer"
    );
    drop(tx);
    upstream.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sotw_client_of_a_cluster_the_upstream_answers_late_gets_no_response_without_it() {
    let (upstream, relay, metrics) = late_upstream().await;
    let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://{relay}"))
        .await
        .expect("connect to the relay");
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(DiscoveryRequest {
        node: node(),
        type_url: CLUSTER.into(),
        resource_names: vec!["late".into()],
        ..Default::default()
    })
    .await
    .expect("queue the request");
    let mut responses = client
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .expect("a SotW ADS stream")
        .into_inner();
    let first = tokio::join!(
        answer_late(&upstream, &metrics),
        timeout(WAIT, responses.message())
    )
    .1
    .expect("an answer in time")
    .expect("a response")
    .expect("not the end of the stream");
    let names: Vec<String> = first
        .resources
        .iter()
        .map(|any| Cluster::decode(&*any.value).expect("a cluster").name)
        .collect();
    assert_eq!(
        names,
        ["late"],
        "the first full-state response holds the name"
    );
    drop(tx);
    upstream.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
// 10,000 was the cap on names pending at once: past it, names were answered as missing. Now the
// cap is `--max-pending` (200,000), a declaration costs what it declares, and the xDS client's
// first load of N names by name is O(N): CI runs twice the old cap, in a debug build.
async fn a_client_subscribing_20000_names_at_once_is_answered_from_the_upstream() {
    subscribing_at_once_is_answered_from_the_upstream(20_000, WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
// The figure. It passes, and takes what it holds linearly (measured in a debug build on
// a shared 2-core machine: 20,000 names in 9 s, 40,000 in 19 s, 100,000 in about 50 s, about
// 0.2 ms of CPU per name end to end, upstream xdsd included), too long for CI in a debug build:
// run it with --ignored (the pending window is stretched to let a slow machine through).
#[ignore = "about 50 s in a debug build: CI runs 20,000 names (run with --ignored)"]
async fn a_client_subscribing_100000_names_at_once_is_answered_from_the_upstream() {
    subscribing_at_once_is_answered_from_the_upstream(100_000, WAIT * 9).await;
}

/// A delta client subscribing `n` names by name in one request through a relay is sent every
/// one of them and told of none that it does not exist.
async fn subscribing_at_once_is_answered_from_the_upstream(n: usize, first_wait: Duration) {
    let upstream = Server::start().await;
    let names: Vec<String> = (0..n).map(|i| format!("c-{i:06}")).collect();
    upstream
        .store
        .replace_all(names.iter().map(|n| cluster(n, "1")))
        .expect("the upstream's clusters");
    let (relay, _metrics) = start_relay_waiting(upstream.addr, first_wait).await;
    let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://{relay}"))
        .await
        .expect("connect to the relay")
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20);
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(DeltaDiscoveryRequest {
        node: node(),
        type_url: CLUSTER.into(),
        resource_names_subscribe: names.clone(),
        ..Default::default()
    })
    .await
    .expect("queue the request");
    let mut responses = client
        .delta_aggregated_resources(ReceiverStream::new(rx))
        .await
        .expect("a delta ADS stream")
        .into_inner();
    // The answer may come in several responses (each within the size cap), each ACKed; none
    // may say that a name does not exist.
    let mut got = std::collections::HashSet::new();
    while got.len() < n {
        let r = timeout(WAIT * 3, responses.message())
            .await
            .expect("an answer in time")
            .expect("a response")
            .expect("not the end of the stream");
        assert!(
            r.removed_resources.is_empty(),
            "told {} names do not exist (first {:?}) with {} received",
            r.removed_resources.len(),
            r.removed_resources.first(),
            got.len()
        );
        got.extend(r.resources.into_iter().map(|r| r.name));
        tx.send(DeltaDiscoveryRequest {
            type_url: CLUSTER.into(),
            response_nonce: r.nonce,
            ..Default::default()
        })
        .await
        .expect("queue the ACK");
    }
    assert_eq!(got.len(), n);
    drop(tx);
    upstream.stop().await;
}
