//! `xdsd relay` between a real xdsd and real clients, every process on 127.0.0.1: a gRPC client
//! of a relay gets the upstream's resources at the upstream's versions and follows its changes;
//! a real Envoy through one relay and through two chained (SotW and delta ADS); the upstream
//! killed -9 ends no downstream stream, a fresh client gets the cache, and the upstream back with
//! a change reaches every client (a delta client is sent only the change); 40 downstream clients
//! make one upstream stream; two relays answer the same versions; a TP2 variant reaches its
//! client with its constraints and TTL; `--aggregate-by cluster` makes a stream per cluster; a
//! downstream NACK is in the relay's `/clients`; a type first asked is answered with what the
//! upstream sends; the last client leaving unsubscribes upstream after the linger; a Fetch and a
//! REST poll are answered from the cache; Envoy over per-type gRPC through a relay; a relay is
//! ready while it holds a cache and not while its upstream never answered (unreachable, or
//! accepting the stream and silent); a relay of two upstreams says which it is on and moves to
//! the second when the first dies, its clients' streams kept.

use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse,
};
use envoy_types::pb::xds::core::v3::ContextParams;
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_stream::wrappers::ReceiverStream;

use crate::support::ads::{fetch, names, AdsStream};
use crate::support::relay::Relay;
use crate::support::scenario::{
    basic_resources, dynamic_bootstrap, endpoints_yaml, static_cluster_yaml, Transport,
};
use crate::support::{
    http_get, unique_name, wait_for_body, Envoy, Upstream, Xdsd, CLUSTER, DEADLINE, ENDPOINTS,
};

/// The value of the metric line `series` (name and labels) of `xdsd`'s /metrics.
async fn metric(xdsd: &Xdsd, series: &str) -> Option<f64> {
    let admin = xdsd.admin_port().await;
    let resp = http_get(("127.0.0.1", admin), "/metrics", "localhost")
        .await
        .expect("GET /metrics");
    resp.body.lines().find_map(|l| {
        l.strip_prefix(series)
            .and_then(|rest| rest.trim().parse().ok())
    })
}

/// Waits until `xdsd`'s metric `series` reads `value`.
async fn wait_metric(xdsd: &Xdsd, series: &str, value: f64) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let now = metric(xdsd, series).await;
        if now == Some(value) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{series} stayed {now:?}, not {value}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_sotw_client_of_a_relay_gets_the_upstreams_resources_at_the_upstreams_version() {
    let dir = basic_resources(Transport::Ads, 9);
    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    let relay = Relay::start(&xdsd.authority(), &[]).await;

    let direct = fetch(&xdsd.url(), "direct", CLUSTER, &[])
        .await
        .expect("CDS from xdsd");
    let mut client = AdsStream::open(&relay.url(), "through", CLUSTER, &[])
        .await
        .expect("an ADS stream to the relay");
    let first = client.recv().await.expect("CDS from the relay");
    assert_eq!(names(&first), vec!["service"]);
    assert_eq!(
        first.version_info, direct.version_info,
        "the relay's version is derived from content, as the upstream's"
    );

    // A change upstream reaches the client through the relay.
    client
        .request(CLUSTER, &[], Some(&first))
        .await
        .expect("ACK");
    let mark = xdsd.log.mark();
    dir.write("extra.yaml", &static_cluster_yaml("extra", 9));
    xdsd.expect_loaded_since(mark).await;
    let next = client.recv().await.expect("the change through the relay");
    assert_eq!(names(&next), vec!["extra", "service"]);
    let direct = fetch(&xdsd.url(), "direct-2", CLUSTER, &[])
        .await
        .expect("CDS from xdsd");
    assert_eq!(next.version_info, direct.version_info);
}

/// Opens a delta ADS stream to `url` for `type_url`'s wildcard, resuming with
/// `initial_resource_versions`, and returns the first response (or `Err` if none comes within
/// `within`) with the stream's request sender kept alive in the result.
async fn delta_first(
    url: &str,
    node_id: &str,
    type_url: &str,
    initial: &[(String, String)],
    within: Duration,
) -> (
    Result<DeltaDiscoveryResponse, String>,
    mpsc::Sender<DeltaDiscoveryRequest>,
) {
    let node = Node {
        id: node_id.into(),
        ..Default::default()
    };
    delta_first_as(url, node, type_url, initial, within).await
}

/// [`delta_first`] as `node`.
async fn delta_first_as(
    url: &str,
    node: Node,
    type_url: &str,
    initial: &[(String, String)],
    within: Duration,
) -> (
    Result<DeltaDiscoveryResponse, String>,
    mpsc::Sender<DeltaDiscoveryRequest>,
) {
    let (tx, rx) = mpsc::channel(4);
    let request = DeltaDiscoveryRequest {
        node: Some(node),
        type_url: type_url.into(),
        resource_names_subscribe: vec!["*".into()],
        initial_resource_versions: initial.iter().cloned().collect(),
        ..Default::default()
    };
    tx.send(request).await.expect("queue the first request");
    let mut client = AggregatedDiscoveryServiceClient::connect(url.to_owned())
        .await
        .expect("connect");
    let mut responses = client
        .delta_aggregated_resources(ReceiverStream::new(rx))
        .await
        .expect("DeltaAggregatedResources")
        .into_inner();
    let first = match timeout(within, responses.message()).await {
        Ok(Ok(Some(r))) => Ok(r),
        Ok(Ok(None)) => Err("the stream ended".to_owned()),
        Ok(Err(s)) => Err(format!("the stream failed: {s}")),
        Err(_) => Err(format!("no response within {within:?}")),
    };
    (first, tx)
}

#[tokio::test]
async fn two_relays_answer_the_same_versions_and_a_delta_client_moving_between_them_is_resent_nothing(
) {
    let dir = basic_resources(Transport::DeltaAds, 9);
    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    let one = Relay::start(&xdsd.authority(), &[]).await;
    let two = Relay::start(&xdsd.authority(), &["--upstream-protocol", "sotw"]).await;

    let (first, _keep) = delta_first(&one.url(), "mover", CLUSTER, &[], DEADLINE).await;
    let first = first.expect("delta CDS from relay one");
    assert_eq!(first.resources.len(), 1);
    let held: Vec<(String, String)> = first
        .resources
        .iter()
        .map(|r| (r.name.clone(), r.version.clone()))
        .collect();
    let (direct, _keep2) = delta_first(&xdsd.url(), "direct", CLUSTER, &[], DEADLINE).await;
    let direct = direct.expect("delta CDS from xdsd");
    assert_eq!(direct.resources[0].version, first.resources[0].version);

    // The client moves to relay two, telling it what it holds: nothing is resent.
    let (moved, _keep3) =
        delta_first(&two.url(), "mover", CLUSTER, &held, Duration::from_secs(2)).await;
    if let Ok(response) = moved {
        assert!(
            response.resources.is_empty() && response.removed_resources.is_empty(),
            "relay two resent {:?} / removed {:?}",
            response.resources,
            response.removed_resources
        );
    }
}

/// A node that subscribes to clusters with the dynamic parameter `env`, and takes TTLs.
fn node_of_env(id: &str, env: &str) -> Node {
    let params = ContextParams {
        params: [("env".to_owned(), env.to_owned())].into(),
    };
    Node {
        id: id.into(),
        dynamic_parameters: [(CLUSTER.to_owned(), params)].into(),
        client_features: vec!["xds.config.supports-resource-ttl".into()],
        ..Default::default()
    }
}

#[tokio::test]
async fn each_client_gets_its_tp2_variant_through_a_relay_with_its_constraints() {
    let dir = basic_resources(Transport::DeltaAds, 9);
    // The staging variant has a TTL: it is relayed too.
    dir.write(
        "variants.yaml",
        &format!(
            "\"@match\": {{ env: prod }}\n{}---\n\"@match\": {{ env: staging }}\n\"@ttl\": 300s\n{}",
            static_cluster_yaml("svc", 1001),
            static_cluster_yaml("svc", 1002)
        ),
    );
    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    let relay = Relay::start(&xdsd.authority(), &[]).await;
    for env in ["prod", "staging"] {
        let id = format!("tp2-{env}");
        let (direct, _k1) =
            delta_first_as(&xdsd.url(), node_of_env(&id, env), CLUSTER, &[], DEADLINE).await;
        let (relayed, _k2) =
            delta_first_as(&relay.url(), node_of_env(&id, env), CLUSTER, &[], DEADLINE).await;
        let (direct, relayed) = (direct.expect("from xdsd"), relayed.expect("from the relay"));
        let svc = |r: &DeltaDiscoveryResponse| {
            r.resources
                .iter()
                .find(|r| {
                    r.name == "svc" || r.resource_name.as_ref().is_some_and(|n| n.name == "svc")
                })
                .cloned()
                .unwrap_or_else(|| panic!("{env}: no svc in {r:?}"))
        };
        let (d, r) = (svc(&direct), svc(&relayed));
        let constraints = r
            .resource_name
            .as_ref()
            .and_then(|n| n.dynamic_parameter_constraints.as_ref());
        assert!(
            constraints.is_some(),
            "{env}: the relay sends the variant's constraints"
        );
        assert_eq!(
            d, r,
            "{env}: the relay sends the variant xdsd sends, constraints, TTL and version alike"
        );
        assert_eq!(
            r.ttl.is_some(),
            env == "staging",
            "{env}: the TTL is relayed"
        );
    }
}

#[tokio::test]
async fn the_upstream_killed_ends_no_downstream_stream_and_its_return_reaches_every_client() {
    let dir = basic_resources(Transport::Ads, 9);
    let mut xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    let upstream = xdsd.authority();
    let relay = Relay::start(&upstream, &[]).await;

    let mut clients = Vec::new();
    for i in 0..3 {
        let mut client = AdsStream::open(&relay.url(), &format!("kept-{i}"), CLUSTER, &[])
            .await
            .expect("an ADS stream to the relay");
        let first = client.recv().await.expect("CDS from the relay");
        assert_eq!(names(&first), vec!["service"]);
        client
            .request(CLUSTER, &[], Some(&first))
            .await
            .expect("ACK");
        clients.push(client);
    }

    let mark = relay.log.mark();
    xdsd.kill9().await;
    relay
        .log
        .expect_line_since(
            mark,
            &["upstream unreachable"],
            "the relay to see the upstream gone",
        )
        .await;
    // No downstream stream ends, and a fresh client is served the cache.
    for client in &mut clients {
        match client.recv_within(Duration::from_secs(1)).await {
            Err(e) if e.starts_with("no response within") => {}
            other => panic!("a downstream stream saw the upstream die: {other:?}"),
        }
    }
    let fresh = fetch(&relay.url(), "fresh", CLUSTER, &[])
        .await
        .expect("CDS from the relay while the upstream is down");
    assert_eq!(names(&fresh), vec!["service"]);
    assert_eq!(relay.readyz().await, 200, "ready while it holds a cache");

    // The upstream comes back (same address) with a change made meanwhile.
    dir.write("extra.yaml", &static_cluster_yaml("extra", 9));
    let back = Xdsd::start_on(&dir.path(), &upstream, &["--log-level", "debug"]).await;
    back.expect_loaded_since(0).await;
    for client in &mut clients {
        let next = client
            .recv()
            .await
            .expect("the change after the upstream came back");
        assert_eq!(names(&next), vec!["extra", "service"]);
    }
}

/// The names of `type_url` the upstream `xdsd` last sent each of its clients, from its
/// `/clients`.
async fn upstream_sent(xdsd: &Xdsd, type_url: &str) -> Vec<Vec<String>> {
    let admin = xdsd.admin_port().await;
    let resp = http_get(("127.0.0.1", admin), "/clients", "localhost")
        .await
        .expect("GET /clients");
    let clients: serde_json::Value = serde_json::from_str(&resp.body).expect("JSON");
    let mut sent = Vec::new();
    for client in clients.as_array().into_iter().flatten() {
        for t in client["types"].as_array().into_iter().flatten() {
            if t["type_url"] != type_url {
                continue;
            }
            let names = t["last_sent"]["resources"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r["name"].as_str().map(str::to_owned))
                .collect();
            sent.push(names);
        }
    }
    sent
}

#[tokio::test]
async fn a_name_asked_downstream_is_subscribed_upstream_by_name_not_as_the_type_s_wildcard() {
    let dir = basic_resources(Transport::DeltaAds, 9);
    dir.write("other.yaml", &endpoints_yaml("other", 9));
    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    let relay = Relay::start(&xdsd.authority(), &["--prefetch", "none"]).await;
    let mut client = AdsStream::open(&relay.url(), "one-name", ENDPOINTS, &["service"])
        .await
        .expect("an ADS stream to the relay");
    let first = client.recv().await.expect("EDS from the relay");
    assert_eq!(names(&first), vec!["service"]);
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let sent = upstream_sent(&xdsd, ENDPOINTS).await;
        if !sent.is_empty() && sent.iter().all(|n| !n.is_empty()) {
            assert_eq!(
                sent,
                vec![vec!["service".to_owned()]],
                "the upstream sent the relay the name asked for, not the type"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the upstream never sent the relay EDS: {sent:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A second name asked on the same stream is subscribed too.
    client
        .request(ENDPOINTS, &["service", "other"], Some(&first))
        .await
        .expect("ask for a second name");
    let next = client.recv().await.expect("the second name");
    assert!(
        names(&next).iter().any(|n| n == "other"),
        "the second name is sent: {:?}",
        names(&next)
    );
}

#[tokio::test]
async fn the_relay_s_metrics_say_the_upstream_is_down_then_back() {
    let dir = basic_resources(Transport::Ads, 9);
    let mut xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    let upstream = xdsd.authority();
    let relay = Relay::start(&upstream, &["--prefetch", "none"]).await;
    let mut client = AdsStream::open(&relay.url(), "kept", CLUSTER, &[])
        .await
        .expect("an ADS stream to the relay");
    let first = client.recv().await.expect("CDS from the relay");
    assert_eq!(names(&first), vec!["service"]);
    relay
        .wait_metric("xdsd_relay_upstream_connected", 1.0)
        .await;
    relay.wait_metric("xdsd_relay_cache_entries", 1.0).await;
    relay
        .wait_metric("xdsd_relay_upstream_subscriptions", 1.0)
        .await;
    assert_eq!(
        relay.metric("xdsd_relay_upstream_reconnects_total").await,
        Some(0.0)
    );

    xdsd.kill9().await;
    relay
        .wait_metric("xdsd_relay_upstream_connected", 0.0)
        .await;
    assert_eq!(
        relay.metric("xdsd_relay_cache_entries").await,
        Some(1.0),
        "the cache is kept"
    );

    let back = Xdsd::start_on(&dir.path(), &upstream, &[]).await;
    back.expect_loaded_since(0).await;
    relay
        .wait_metric("xdsd_relay_upstream_connected", 1.0)
        .await;
    relay
        .wait_metric("xdsd_relay_upstream_reconnects_total", 1.0)
        .await;
}

#[tokio::test]
async fn aggregate_by_cluster_makes_one_upstream_stream_per_node_cluster() {
    let dir = basic_resources(Transport::DeltaAds, 9);
    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    let relay = Relay::start(
        &xdsd.authority(),
        &["--prefetch", "none", "--aggregate-by", "cluster"],
    )
    .await;
    let mut clients = Vec::new();
    for (id, cluster) in [("e1", "edge"), ("e2", "edge"), ("c1", "core")] {
        let mut client = AdsStream::open_in(&relay.url(), id, cluster, CLUSTER, &[])
            .await
            .expect("an ADS stream to the relay");
        let first = client.recv().await.expect("CDS from the relay");
        assert_eq!(names(&first), vec!["service"]);
        clients.push(client);
    }
    wait_metric(
        &xdsd,
        r#"xdsd_connected_streams{flavor="delta",service="ads"}"#,
        2.0,
    )
    .await;
}

#[tokio::test]
async fn a_downstream_nack_is_recorded_by_the_relay_with_the_client_and_its_message() {
    let dir = basic_resources(Transport::Ads, 9);
    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    let relay = Relay::start(&xdsd.authority(), &[]).await;
    let mut client = AdsStream::open(&relay.url(), "nacker", CLUSTER, &[])
        .await
        .expect("an ADS stream to the relay");
    let first = client.recv().await.expect("CDS from the relay");
    client
        .nack(CLUSTER, &first, "refused by the test")
        .await
        .expect("NACK");
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let (status, body) = relay.admin("/clients").await;
        assert_eq!(status, 200);
        if body.contains("nacker") && body.contains("refused by the test") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the relay's /clients never showed the NACK: {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_upstream_back_with_a_change_sends_a_delta_client_only_the_change() {
    let dir = basic_resources(Transport::DeltaAds, 9);
    let mut xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    let upstream = xdsd.authority();
    let relay = Relay::start(&upstream, &[]).await;
    let (tx, rx) = mpsc::channel(4);
    tx.send(DeltaDiscoveryRequest {
        node: Some(Node {
            id: "delta-kept".into(),
            ..Default::default()
        }),
        type_url: CLUSTER.into(),
        resource_names_subscribe: vec!["*".into()],
        ..Default::default()
    })
    .await
    .expect("queue the first request");
    let mut client = AggregatedDiscoveryServiceClient::connect(relay.url())
        .await
        .expect("connect");
    let mut responses = client
        .delta_aggregated_resources(ReceiverStream::new(rx))
        .await
        .expect("DeltaAggregatedResources")
        .into_inner();
    let mut next = async || match timeout(DEADLINE, responses.message()).await {
        Ok(Ok(Some(r))) => r,
        other => panic!("no delta response: {other:?}"),
    };
    let first = next().await;
    assert_eq!(first.resources.len(), 1);
    let ack = |r: &DeltaDiscoveryResponse| DeltaDiscoveryRequest {
        type_url: CLUSTER.into(),
        response_nonce: r.nonce.clone(),
        ..Default::default()
    };
    tx.send(ack(&first)).await.expect("ACK");

    xdsd.kill9().await;
    dir.write("extra.yaml", &static_cluster_yaml("extra", 9));
    let back = Xdsd::start_on(&dir.path(), &upstream, &["--log-level", "debug"]).await;
    back.expect_loaded_since(0).await;
    let change = next().await;
    let sent: Vec<String> = change
        .resources
        .iter()
        .map(|r| {
            r.resource_name
                .as_ref()
                .map_or(r.name.clone(), |n| n.name.clone())
        })
        .collect();
    assert_eq!(sent, vec!["extra"], "only the change, nothing resent");
    assert!(change.removed_resources.is_empty());
}

#[tokio::test]
async fn forty_downstream_clients_make_one_upstream_stream() {
    let dir = basic_resources(Transport::DeltaAds, 9);
    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    // Nothing prefetched: the prefetched types are subscribed on the stream of clients without
    // parameters, and these clients have a cluster (`xds.node.cluster`): one parameter set, one
    // stream of their own.
    let relay = Relay::start(&xdsd.authority(), &["--prefetch", "none"]).await;
    let mut clients = Vec::new();
    for i in 0..40 {
        let mut client = AdsStream::open(&relay.url(), &format!("fan-{i}"), CLUSTER, &[])
            .await
            .expect("an ADS stream to the relay");
        let first = client.recv().await.expect("CDS from the relay");
        assert_eq!(names(&first), vec!["service"]);
        clients.push(client);
    }
    wait_metric(
        &xdsd,
        r#"xdsd_connected_streams{flavor="delta",service="ads"}"#,
        1.0,
    )
    .await;
    assert_eq!(
        metric(
            &xdsd,
            r#"xdsd_connected_streams{flavor="sotw",service="ads"}"#
        )
        .await,
        Some(0.0)
    );
}

/// Envoy reaches upstream A, then B after the endpoints change upstream, through `relay`.
async fn envoy_through(xds_port: u16, transport: Transport, dir_upstream_b: impl AsyncFnOnce()) {
    let node_id = unique_name("relayed-envoy");
    let envoy = Envoy::start(&dynamic_bootstrap(&node_id, xds_port, transport)).await;
    let port = envoy.listener_port("listener_0").await;
    wait_for_body(port, "upstream-a", String::new).await;
    dir_upstream_b().await;
    wait_for_body(port, "upstream-b", String::new).await;
}

async fn envoy_through_relays(transport: Transport, chained: bool) {
    let a = Upstream::start("upstream-a").await;
    let b = Upstream::start("upstream-b").await;
    let dir = basic_resources(transport, a.port);
    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    let first = Relay::start(&xdsd.authority(), &[]).await;
    let second = if chained {
        Some(Relay::start(&first.authority(), &[]).await)
    } else {
        None
    };
    let port = second.as_ref().unwrap_or(&first).port;
    envoy_through(port, transport, async || {
        let mark = xdsd.log.mark();
        dir.write("endpoints.yaml", &endpoints_yaml("service", b.port));
        xdsd.expect_loaded_since(mark).await;
    })
    .await;
}

#[tokio::test]
async fn envoy_over_sotw_ads_through_a_relay() {
    envoy_through_relays(Transport::Ads, false).await;
}

#[tokio::test]
async fn envoy_over_delta_ads_through_a_relay() {
    envoy_through_relays(Transport::DeltaAds, false).await;
}

#[tokio::test]
async fn envoy_over_sotw_ads_through_two_chained_relays() {
    envoy_through_relays(Transport::Ads, true).await;
}

#[tokio::test]
async fn envoy_over_delta_ads_through_two_chained_relays() {
    envoy_through_relays(Transport::DeltaAds, true).await;
}

#[tokio::test]
async fn a_relay_whose_upstream_never_answered_is_not_ready() {
    // Nothing listens on port 1 of loopback.
    let relay = Relay::start("127.0.0.1:1", &["--upstream-wait", "100ms"]).await;
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let status = relay.readyz().await;
        if status == 503 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "/readyz stayed {status} with no cache and no upstream"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An ADS server that accepts every stream, reads its requests and never answers; the
/// requests it read are counted.
struct Silent(std::sync::Arc<std::sync::atomic::AtomicUsize>);

type Never<T> =
    std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<T, tonic::Status>> + Send>>;

impl Silent {
    fn keep_reading<T: Send + 'static>(&self, mut requests: tonic::Streaming<T>) {
        let seen = self.0.clone();
        tokio::spawn(async move {
            while let Ok(Some(_)) = requests.message().await {
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        });
    }
}

#[tonic::async_trait]
impl envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::AggregatedDiscoveryService for Silent {
    type StreamAggregatedResourcesStream =
        Never<envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse>;
    type DeltaAggregatedResourcesStream = Never<DeltaDiscoveryResponse>;

    async fn stream_aggregated_resources(
        &self,
        request: tonic::Request<
            tonic::Streaming<envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest>,
        >,
    ) -> Result<tonic::Response<Self::StreamAggregatedResourcesStream>, tonic::Status> {
        self.keep_reading(request.into_inner());
        Ok(tonic::Response::new(Box::pin(tokio_stream::pending())))
    }

    async fn delta_aggregated_resources(
        &self,
        request: tonic::Request<tonic::Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<tonic::Response<Self::DeltaAggregatedResourcesStream>, tonic::Status> {
        self.keep_reading(request.into_inner());
        Ok(tonic::Response::new(Box::pin(tokio_stream::pending())))
    }
}

/// An upstream on 127.0.0.1 that accepts ADS streams and never answers ([`Silent`]): its
/// address, how many requests it read, and its task (abort it to stop it).
async fn silent_upstream() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
) {
    use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::AggregatedDiscoveryServiceServer;
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("an address");
    let server = tonic::transport::Server::builder()
        .add_service(AggregatedDiscoveryServiceServer::new(Silent(seen.clone())))
        .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener));
    let upstream = tokio::spawn(server);
    (addr, seen, upstream)
}

#[tokio::test]
async fn a_relay_whose_upstream_accepts_the_stream_and_never_answers_is_not_ready() {
    let (addr, seen, upstream) = silent_upstream().await;
    let relay = Relay::start(&addr.to_string(), &["--upstream-wait", "100ms"]).await;
    // The relay's stream is up and asked for the prefetched types: connected, not answered.
    relay
        .wait_metric("xdsd_relay_upstream_connected", 1.0)
        .await;
    assert!(seen.load(std::sync::atomic::Ordering::SeqCst) > 0);
    for _ in 0..3 {
        assert_eq!(
            relay.readyz().await,
            503,
            "ready with nothing answered: the upstream only accepted the stream"
        );
    }
    upstream.abort();
}

/// A Fetch held for the upstream's answer past the relay's linger (1 s, `Relay::start`) keeps
/// what it asks subscribed upstream while it is held, and lets it go a linger after it is over:
/// a one-shot request holds its wants under its id until it is answered, as a REST poll held for
/// a change does (`rest::*::a_poll_held_past_the_relays_linger_keeps_what_it_asks_subscribed`).
#[tokio::test]
async fn a_fetch_held_for_the_upstream_past_the_linger_keeps_what_it_asks_subscribed() {
    use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
    use envoy_types::pb::envoy::service::endpoint::v3::endpoint_discovery_service_client::EndpointDiscoveryServiceClient;
    // An upstream that never answers: the Fetch waits the whole `--upstream-wait`.
    let (addr, _seen, upstream) = silent_upstream().await;
    let relay = Relay::start(
        &addr.to_string(),
        &["--prefetch", "none", "--upstream-wait", "3s"],
    )
    .await;
    let mark = relay.log.mark();
    let mut client = EndpointDiscoveryServiceClient::connect(relay.url())
        .await
        .expect("connect");
    let started = std::time::Instant::now();
    client
        .fetch_endpoints(DiscoveryRequest {
            node: Some(Node {
                id: "fetcher".into(),
                ..Default::default()
            }),
            type_url: ENDPOINTS.into(),
            resource_names: vec!["a".into()],
            ..Default::default()
        })
        .await
        .expect("FetchEndpoints, answered once the wait is given up");
    let held = started.elapsed();
    assert!(
        held >= Duration::from_secs(2),
        "held for the upstream past the linger: {held:?}"
    );
    let gone = relay.log.matching_since(mark, |l| {
        l.contains("no downstream client left") && l.contains("name=a")
    });
    assert!(
        gone.is_empty(),
        "the held Fetch's name stays subscribed while it is held: {gone:#?}\n{}",
        relay.log.text()
    );
    relay
        .log
        .expect_line_since(
            mark,
            &[
                "no downstream client left: unsubscribing upstream",
                "name=a",
            ],
            "the relay to unsubscribe the Fetch's name a linger after it was answered",
        )
        .await;
    upstream.abort();
}

#[tokio::test]
async fn a_type_first_asked_is_answered_with_what_the_upstream_sends_not_first_as_empty() {
    let dir = basic_resources(Transport::Ads, 9);
    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    let relay = Relay::start(&xdsd.authority(), &["--prefetch", "none"]).await;
    let first = fetch(&relay.url(), "first", CLUSTER, &[])
        .await
        .expect("CDS from the relay");
    assert_eq!(
        names(&first),
        vec!["service"],
        "the first response is the upstream's answer"
    );
}

#[tokio::test]
async fn the_last_client_leaving_unsubscribes_upstream_after_the_linger() {
    let dir = basic_resources(Transport::DeltaAds, 9);
    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    // --linger 1s (Relay::start).
    let relay = Relay::start(&xdsd.authority(), &["--prefetch", "none"]).await;
    let series = r#"xdsd_connected_streams{flavor="delta",service="ads"}"#;
    assert_eq!(metric(&xdsd, series).await, Some(0.0), "nothing asked yet");
    let mut client = AdsStream::open(&relay.url(), "leaving", CLUSTER, &[])
        .await
        .expect("an ADS stream to the relay");
    client.recv().await.expect("CDS from the relay");
    wait_metric(&xdsd, series, 1.0).await;
    let mark = relay.log.mark();
    drop(client);
    relay
        .log
        .expect_line_since(
            mark,
            &["no downstream client left: unsubscribing upstream"],
            "the relay to unsubscribe after the linger",
        )
        .await;
    // Its only subscription gone, the upstream stream is closed.
    wait_metric(&xdsd, series, 0.0).await;
}

#[tokio::test]
async fn a_fetch_through_a_relay_is_answered_from_its_cache() {
    use envoy_types::pb::envoy::service::cluster::v3::cluster_discovery_service_client::ClusterDiscoveryServiceClient;
    use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
    let dir = basic_resources(Transport::Ads, 9);
    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    let relay = Relay::start(&xdsd.authority(), &[]).await;
    let mut client = ClusterDiscoveryServiceClient::connect(relay.url())
        .await
        .expect("connect");
    let response = client
        .fetch_clusters(DiscoveryRequest {
            node: Some(Node {
                id: "fetcher".into(),
                ..Default::default()
            }),
            type_url: CLUSTER.into(),
            ..Default::default()
        })
        .await
        .expect("FetchClusters")
        .into_inner();
    assert_eq!(names(&response), vec!["service"]);
}

#[tokio::test]
async fn envoy_over_per_type_grpc_through_a_relay() {
    envoy_through_relays(Transport::PerType, false).await;
}

#[tokio::test]
async fn a_rest_poll_through_a_relay_is_answered_from_its_cache() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = basic_resources(Transport::Ads, 9);
    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    let relay = Relay::start(&xdsd.authority(), &[]).await;
    let body = r#"{"node":{"id":"poller"}}"#;
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(relay.authority()).await?;
        let head = format!(
            "POST /v3/discovery:clusters HTTP/1.1\r\nhost: relay\r\n\
             content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        crate::support::parse_http_response(&raw)
    };
    let response = timeout(DEADLINE, exchange)
        .await
        .expect("the relay answers in time")
        .expect("an HTTP answer");
    assert_eq!(response.status, 200, "{}", response.body);
    assert!(
        response.body.contains("\"name\":\"service\""),
        "{}",
        response.body
    );
}

#[tokio::test]
async fn a_relay_of_two_upstreams_says_which_it_is_on_and_moves_when_the_first_dies() {
    let dir = basic_resources(Transport::Ads, 9);
    let mut first = Xdsd::start(&dir.path()).await;
    first.expect_loaded_since(0).await;
    let second = Xdsd::start(&dir.path()).await;
    second.expect_loaded_since(0).await;
    let (a, b) = (first.authority(), second.authority());
    let relay = Relay::start(&format!("{a},{b}"), &["--prefetch", "none"]).await;
    let on = |addr: &str| format!(r#"xdsd_relay_upstream{{address="{addr}"}}"#);
    let mut client = AdsStream::open(&relay.url(), "kept", CLUSTER, &[])
        .await
        .expect("an ADS stream to the relay");
    let got = client.recv().await.expect("CDS from the relay");
    assert_eq!(names(&got), vec!["service"]);
    client.request(CLUSTER, &[], Some(&got)).await.expect("ACK");
    relay.wait_metric(&on(&a), 1.0).await;
    assert_eq!(relay.metric(&on(&b)).await, Some(0.0), "on the first only");

    first.kill9().await;
    relay.wait_metric(&on(&b), 1.0).await;
    assert_eq!(relay.metric(&on(&a)).await, Some(0.0), "off the dead one");
    relay
        .wait_metric("xdsd_relay_upstream_connected", 1.0)
        .await;
    // The downstream stream did not end, and nothing was resent to it.
    match client.recv_within(Duration::from_secs(1)).await {
        Err(e) if e.starts_with("no response within") => {}
        other => panic!("the downstream stream saw the failover: {other:?}"),
    }
}
