//! xdstp names (xRFC TP1) through `xdsd relay`, every process on 127.0.0.1: a real delta gRPC
//! client's glob collection is subscribed upstream as a glob and cached per member, its members
//! added and removed upstream reach the client, an empty collection is answered as TP1 says,
//! and the relay's table says when a glob is answered (nothing waits out `--upstream-wait`).

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse,
};
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_stream::wrappers::ReceiverStream;

use crate::get::{
    authorities_with_variants, b_endpoint, expect_each_authoritys_variant, lb_endpoint, serving,
    two_authorities, A_CLUSTER, LB, LB_C1,
};
use crate::support::relay::Relay;
use crate::support::{ResourceDir, Xdsd, DEADLINE};

/// A delta ADS stream of one type, as a client writes it by hand.
struct DeltaStream {
    tx: mpsc::Sender<DeltaDiscoveryRequest>,
    responses: tonic::Streaming<DeltaDiscoveryResponse>,
    type_url: String,
}

impl DeltaStream {
    /// A stream to `url` that subscribes to `names` of `type_url` in its first request.
    async fn open(url: &str, node_id: &str, type_url: &str, names: &[&str]) -> DeltaStream {
        let (tx, rx) = mpsc::channel(8);
        tx.send(DeltaDiscoveryRequest {
            node: Some(Node {
                id: node_id.into(),
                ..Default::default()
            }),
            type_url: type_url.into(),
            resource_names_subscribe: names.iter().map(|n| n.to_string()).collect(),
            ..Default::default()
        })
        .await
        .expect("queue the first request");
        let mut client = AggregatedDiscoveryServiceClient::connect(url.to_owned())
            .await
            .expect("connect");
        let responses = client
            .delta_aggregated_resources(ReceiverStream::new(rx))
            .await
            .expect("DeltaAggregatedResources")
            .into_inner();
        DeltaStream {
            tx,
            responses,
            type_url: type_url.into(),
        }
    }

    /// The next response, ACKed.
    async fn recv(&mut self) -> DeltaDiscoveryResponse {
        let response = match timeout(DEADLINE, self.responses.message()).await {
            Ok(Ok(Some(r))) => r,
            Ok(Ok(None)) => panic!("the stream ended"),
            Ok(Err(s)) => panic!("the stream failed: {s}"),
            Err(_) => panic!("no response within {DEADLINE:?}"),
        };
        self.tx
            .send(DeltaDiscoveryRequest {
                type_url: self.type_url.clone(),
                response_nonce: response.nonce.clone(),
                ..Default::default()
            })
            .await
            .expect("ACK");
        response
    }

    /// Subscribes to `names` more.
    async fn subscribe(&self, names: &[&str]) {
        self.tx
            .send(DeltaDiscoveryRequest {
                type_url: self.type_url.clone(),
                resource_names_subscribe: names.iter().map(|n| n.to_string()).collect(),
                ..Default::default()
            })
            .await
            .expect("a subscription");
    }
}

/// The names a delta response sends, sorted, and those it removes.
fn sent(response: &DeltaDiscoveryResponse) -> (Vec<String>, Vec<String>) {
    let mut names: Vec<String> = response.resources.iter().map(|r| r.name.clone()).collect();
    names.sort();
    (names, response.removed_resources.clone())
}

/// The port of an `LbEndpoint` a delta response sends.
fn port(resource: &envoy_types::pb::envoy::service::discovery::v3::Resource) -> u32 {
    use envoy_types::pb::envoy::config::core::v3::address::Address;
    use envoy_types::pb::envoy::config::core::v3::socket_address::PortSpecifier;
    use envoy_types::pb::envoy::config::endpoint::v3::{lb_endpoint::HostIdentifier, LbEndpoint};
    let body = resource.resource.as_ref().expect("a body");
    let endpoint =
        <LbEndpoint as prost::Message>::decode(body.value.as_slice()).expect("an LbEndpoint");
    let Some(HostIdentifier::Endpoint(endpoint)) = endpoint.host_identifier else {
        panic!("an endpoint");
    };
    match endpoint.address.and_then(|a| a.address) {
        Some(Address::SocketAddress(s)) => match s.port_specifier {
            Some(PortSpecifier::PortValue(p)) => p,
            other => panic!("a port value, not {other:?}"),
        },
        other => panic!("a socket address, not {other:?}"),
    }
}

fn member(id: &str) -> String {
    format!("{LB_C1}/{id}")
}

/// An upstream `xdsd serve` of a directory of `files`, loaded, and an `xdsd relay` of it with
/// `relay_args`: the set-up of this file's tests and of `relay_xdstp_sotw`'s.
pub(crate) async fn relayed(
    files: &[(&str, &str)],
    relay_args: &[&str],
) -> (ResourceDir, Xdsd, Relay) {
    let dir = serving(files);
    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    let relay = Relay::start(&xdsd.authority(), relay_args).await;
    (dir, xdsd, relay)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delta_client_of_a_relay_follows_a_glob_collections_members_added_and_removed() {
    // Two members of c1, one below it (no member: globs are not recursive).
    let (dir, xdsd, relay) = relayed(
        &[
            ("e1.yaml", &lb_endpoint("e1", 8001)),
            ("e2.yaml", &lb_endpoint("e2", 8002)),
            ("e3.yaml", &lb_endpoint("sub/e3", 8003)),
        ],
        &["--upstream-wait", "30s"],
    )
    .await;
    let glob = member("*");
    let mut client = DeltaStream::open(&relay.url(), "through", LB, &[&glob]).await;

    // The upstream's answer, not an empty collection first, and not after the wait.
    let first = client.recv().await;
    assert_eq!(sent(&first), (vec![member("e1"), member("e2")], vec![]));
    assert_eq!(
        relay.metric("xdsd_relay_pending_expired_total").await,
        Some(0.0),
        "the relay's table took the members as the glob's answer"
    );
    relay.wait_metric("xdsd_relay_pending", 0.0).await;
    assert!(
        relay
            .log
            .lines()
            .iter()
            .any(|l| l.contains("subscribing upstream") && l.contains(&glob)),
        "the glob is subscribed upstream as a glob"
    );

    // A member added upstream is sent alone; one removed, removed.
    let mark = xdsd.log.mark();
    dir.write("e4.yaml", &lb_endpoint("e4", 8004));
    xdsd.expect_loaded_since(mark).await;
    assert_eq!(sent(&client.recv().await), (vec![member("e4")], vec![]));
    let mark = xdsd.log.mark();
    dir.write("e2.yaml", &lb_endpoint("e2", 9002));
    xdsd.expect_loaded_since(mark).await;
    let changed = client.recv().await;
    assert_eq!(sent(&changed), (vec![member("e2")], vec![]));
    assert_eq!(port(&changed.resources[0]), 9002, "its new body");
    let mark = xdsd.log.mark();
    dir.remove("e1.yaml");
    xdsd.expect_loaded_since(mark).await;
    assert_eq!(sent(&client.recv().await), (vec![], vec![member("e1")]));

    // An empty collection: the glob's own name in removed_resources (TP1, "Glob"), once the
    // upstream said so.
    let empty = format!("{LB_C1}/none/*");
    client.subscribe(&[&empty]).await;
    assert_eq!(sent(&client.recv().await), (vec![], vec![empty.clone()]));
    assert_eq!(
        relay.metric("xdsd_relay_pending_expired_total").await,
        Some(0.0)
    );

    // A second client of the relay is answered from its cache, members as they are now.
    let mut second = DeltaStream::open(&relay.url(), "second", LB, &[&glob]).await;
    assert_eq!(
        sent(&second.recv().await),
        (vec![member("e2"), member("e4")], vec![])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_with_two_authorities_serves_each_name_from_its_authoritys_server() {
    // Two xdsd servers, each the control plane of one authority, each with a decoy of the
    // other's resources: through one relay, every name comes from its authority's server.
    let ([_dir_a, dir_b], a, b) = two_authorities().await;
    let a_cluster = A_CLUSTER;
    let b_for = format!("b.test={}", b.authority());
    let relay = Relay::start(
        &a.authority(),
        &["--upstream-for", &b_for, "--prefetch", "none"],
    )
    .await;

    // b.test's glob collection from b (not a's decoy), followed there.
    let glob = "xdstp://b.test/envoy.config.endpoint.v3.LbEndpoint/c1/*";
    let b_member = |id: &str| format!("xdstp://b.test/envoy.config.endpoint.v3.LbEndpoint/c1/{id}");
    let mut endpoints = DeltaStream::open(&relay.url(), "eds", LB, &[glob]).await;
    let first = endpoints.recv().await;
    assert_eq!(sent(&first), (vec![b_member("e1"), b_member("e2")], vec![]));
    let mut ports: Vec<u32> = first.resources.iter().map(port).collect();
    ports.sort();
    assert_eq!(ports, [8001, 8002], "b's members, not a's decoy");
    let mark = b.log.mark();
    dir_b.write("e3.yaml", &b_endpoint("e3", 8003));
    b.expect_loaded_since(mark).await;
    assert_eq!(
        sent(&endpoints.recv().await),
        (vec![b_member("e3")], vec![])
    );

    // a.test's cluster and a plain name from a (--upstream), not b's decoys.
    let mut clusters = DeltaStream::open(
        &relay.url(),
        "cds",
        crate::support::CLUSTER,
        &[a_cluster, "plain"],
    )
    .await;
    let answer = clusters.recv().await;
    assert_eq!(
        sent(&answer),
        (vec!["plain".to_owned(), a_cluster.to_owned()], vec![])
    );
    for r in &answer.resources {
        let cluster =
            <envoy_types::pb::envoy::config::cluster::v3::Cluster as prost::Message>::decode(
                r.resource.as_ref().expect("a body").value.as_slice(),
            )
            .expect("a cluster");
        assert_eq!(
            cluster.connect_timeout.map(|d| d.seconds),
            Some(1),
            "{} from a, not b's decoy",
            r.name
        );
    }

    // The relay's metrics name both upstreams, each with its stream on it.
    relay
        .wait_metric(
            &format!("xdsd_relay_upstream{{address=\"{}\"}}", a.authority()),
            1.0,
        )
        .await;
    relay
        .wait_metric(
            &format!("xdsd_relay_upstream{{address=\"{}\"}}", b.authority()),
            1.0,
        )
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_with_param_for_fetches_and_serves_each_authoritys_names_with_its_own_parameters() {
    // Two control planes whose variants are selected by `env`: through a relay given a set
    // per authority (xRFC TP2 "Client Configuration"), a client that presents `env=prod` gets
    // b.test's glob members of `env=test` and a.test's cluster of `env=canary`, as the relay's
    // sets select them, and its plain name of its own `env=prod` (SotW and delta).
    let ([_dir_a, _dir_b], a, b) = authorities_with_variants().await;
    let b_for = format!("b.test={}", b.authority());
    let relay = Relay::start(
        &a.authority(),
        &[
            "--upstream-for",
            &b_for,
            "--param-for",
            "b.test:env=test",
            "--param-for",
            "a.test:env=canary",
            "--prefetch",
            "none",
        ],
    )
    .await;
    // (By its metadata: a resource locator, as `--param` makes each name, keeps its own set.)
    expect_each_authoritys_variant(&relay.authority(), &["--node-metadata", "env=prod"]).await;
    // Each authority's names on the upstream stream of its own set.
    let lines = relay.log.lines();
    for set in ["env=test", "env=canary"] {
        assert!(
            lines
                .iter()
                .any(|l| l.contains("subscribing upstream") && l.contains(set)),
            "a stream presenting {set}: {lines:#?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_glob_spelled_non_canonically_is_subscribed_upstream_canonically_through_a_relay() {
    // A member with context parameters (a file may write them in any order: served canonical),
    // and a glob a client spells with them out of order.
    let (_dir, _xdsd, relay) = relayed(
        &[
            ("e1.yaml", &lb_endpoint("e1?zone=b&a=1", 8001)),
            ("e2.yaml", &lb_endpoint("e2", 8002)),
        ],
        &["--upstream-wait", "30s"],
    )
    .await;
    let spelled = member("*?zone=b&a=1");
    let mut client = DeltaStream::open(&relay.url(), "spelled", LB, &[&spelled]).await;
    assert_eq!(
        sent(&client.recv().await),
        (vec![member("e1?a=1&zone=b")], vec![]),
        "the member, under its own (canonical) name"
    );
    let canonical = member("*?a=1&zone=b");
    let subscribed = relay
        .log
        .matching_since(0, |l| l.contains("subscribing upstream"));
    assert!(
        subscribed.iter().any(|l| l.contains(&canonical))
            && !subscribed.iter().any(|l| l.contains(&spelled)),
        "subscribed upstream canonically: {subscribed:#?}"
    );
    assert_eq!(
        relay.metric("xdsd_relay_pending_expired_total").await,
        Some(0.0)
    );
}
