//! A gated rollout with replicas on etcd (`--canary cluster=canary --canary-soak 600m`): the
//! rollout's state is shared through `<prefix>.rollout`, so a canary's NACK on one replica halts
//! the others (their canaries rolled back, their `/rollout` naming the same node and message), a
//! promotion on one promotes everywhere, and a replica started while a change soaks, or is
//! halted, serves the stable state to everyone outside the cohort (and, when halted, to the
//! canaries too); when etcd compacted that state away, it serves the current one and says so.
//! Real etcd, real `xdsd serve` processes, gRPC ADS clients.

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse;
use serde_json::Value;

use crate::envoy_rollout::{post, wait_rollout};
use crate::etcd::{etcdctl_put, PREFIX};
use crate::support::ads::{self, AdsStream};
use crate::support::scenario::static_cluster_yaml;
use crate::support::{unique_name, Xdsd, CLUSTER, DEADLINE};
use xdsd_testsupport::etcd::Etcd;
use xdsd_testsupport::rollout::{is, RolloutState};

const GATED: &[&str] = &["--canary", "cluster=canary", "--canary-soak", "600m"];

/// A CDS client that ACKs everything it gets, except what the test NACKs.
struct Client {
    id: String,
    stream: AdsStream,
    last: DiscoveryResponse,
}

impl Client {
    /// Opens a wildcard CDS stream on `xdsd` for a node of `cluster`; takes (and ACKs) the first
    /// response.
    async fn open(xdsd: &Xdsd, prefix: &str, cluster: &str) -> Client {
        let id = unique_name(prefix);
        let stream = AdsStream::open_in(&xdsd.url(), &id, cluster, CLUSTER, &[])
            .await
            .expect("an ADS stream");
        let mut client = Client {
            id,
            stream,
            last: DiscoveryResponse::default(),
        };
        client.take().await;
        client
    }

    /// The next response, ACKed: its cluster names.
    async fn take(&mut self) -> Vec<String> {
        self.last = self.stream.recv().await.expect("a CDS response in time");
        self.stream
            .request(CLUSTER, &[], Some(&self.last))
            .await
            .expect("ACK sent");
        ads::names(&self.last)
    }

    /// The next response holds exactly cluster `name`.
    async fn next_is(&mut self, name: &str, what: &str) {
        let got = self.take().await;
        assert_eq!(got, [name], "{} ({what})", self.id);
    }

    /// What it has now.
    fn has(&self) -> Vec<String> {
        ads::names(&self.last)
    }
}

/// The shared record in etcd, as JSON (`Null` when there is none).
async fn record(etcd: &Etcd) -> Value {
    let mut client = etcd.client().await;
    let response = client
        .get(format!("{PREFIX}.rollout"), None)
        .await
        .expect("etcd get");
    match response.kvs().first() {
        Some(kv) => serde_json::from_slice(kv.value()).expect("the record is JSON"),
        None => Value::Null,
    }
}

/// Waits until the record satisfies `want` (the shared record's `state` is its decision,
/// `soaking`, `promoted` or `halted`: not a `RolloutState`).
async fn wait_record(etcd: &Etcd, what: &str, want: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let now = record(etcd).await;
        if want(&now) {
            return now;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the record never showed {what}: {now:#}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_on_etcd_halt_promote_and_start_as_the_shared_rollout_says() {
    let etcd = Etcd::start().await;
    let key = format!("{PREFIX}c.yaml");
    etcdctl_put(&etcd, &key, &static_cluster_yaml("v1", 1001)).await;
    let a = Xdsd::start_etcd(&etcd.endpoint(), PREFIX, GATED).await;
    let b = Xdsd::start_etcd(&etcd.endpoint(), PREFIX, GATED).await;
    let (admin_a, admin_b) = (a.admin_port().await, b.admin_port().await);
    let mut canary_a = Client::open(&a, "canary-a", "canary").await;
    let mut canary_b = Client::open(&b, "canary-b", "canary").await;
    let mut prod_b = Client::open(&b, "prod-b", "prod").await;
    for client in [&canary_a, &canary_b, &prod_b] {
        assert_eq!(client.has(), ["v1"]);
    }

    // 1. A change the canary on A NACKs: halted on A, and on B with A's reason; B's canary is
    //    rolled back to the stable state.
    etcdctl_put(&etcd, &key, &static_cluster_yaml("v2", 1002)).await;
    canary_a
        .next_is("v2", "the change reaches A's canary")
        .await;
    canary_b
        .next_is("v2", "the change reaches B's canary")
        .await;
    let nacked = canary_a.last.clone();
    canary_a
        .stream
        .nack(CLUSTER, &nacked, "v2 is refused by canary-a")
        .await
        .expect("NACK sent");
    let on_b = wait_rollout(admin_b, "halted", |r| is(r, RolloutState::Halted)).await;
    assert_eq!(on_b["halt"]["node"], canary_a.id.as_str(), "{on_b:#}");
    assert_eq!(
        on_b["halt"]["message"], "v2 is refused by canary-a",
        "{on_b:#}"
    );
    assert_eq!(on_b["halt"]["type_url"], CLUSTER, "{on_b:#}");
    canary_b
        .next_is("v1", "B's canary is rolled back to the stable state")
        .await;
    canary_a
        .next_is("v1", "A's canary is rolled back to the stable state")
        .await;
    let halted = record(&etcd).await;
    assert_eq!(
        RolloutState::of(&halted),
        RolloutState::Halted,
        "{halted:#}"
    );
    assert_eq!(halted["halt"]["node"], canary_a.id.as_str(), "{halted:#}");

    // 2. A good change, promoted on A by an operator: B promotes it too; its prod client's first
    //    response since v1 is v3 (it never got v2).
    etcdctl_put(&etcd, &key, &static_cluster_yaml("v3", 1003)).await;
    canary_a
        .next_is("v3", "the next change starts a new rollout")
        .await;
    canary_b.next_is("v3", "on B too").await;
    wait_rollout(admin_b, "soaking", |r| is(r, RolloutState::Soaking)).await;
    let (status, body) = post(admin_a, "/rollout/promote").await;
    assert_eq!(status, 200, "{body}");
    prod_b
        .next_is(
            "v3",
            "promoted on A, so on B: prod gets it (and never got v2)",
        )
        .await;
    let on_b = wait_rollout(admin_b, "promoted", |r| {
        is(r, RolloutState::Idle) && r["promotions"] == 1
    })
    .await;
    let promoted = wait_record(&etcd, "promoted", |r| r["state"] == "promoted").await;
    assert_eq!(
        on_b["stable"]["revision"], promoted["stable_revision"],
        "B's stable state is the promoted revision: {on_b:#} {promoted:#}"
    );

    // 3. A replica started while a change soaks: its prod client gets the stable state, its
    //    canary the change; a promotion on B then promotes it there too.
    etcdctl_put(&etcd, &key, &static_cluster_yaml("v4", 1004)).await;
    canary_a.next_is("v4", "a new rollout").await;
    canary_b.next_is("v4", "on B too").await;
    let soaking = wait_record(&etcd, "soaking", |r| {
        r["state"] == "soaking" && r["candidate_revision"] != promoted["candidate_revision"]
    })
    .await;
    let c = Xdsd::start_etcd(&etcd.endpoint(), PREFIX, GATED).await;
    let admin_c = c.admin_port().await;
    let mut prod_c = Client::open(&c, "prod-c", "prod").await;
    assert_eq!(
        prod_c.has(),
        ["v3"],
        "a replica starting serves the stable state"
    );
    let canary_c = Client::open(&c, "canary-c", "canary").await;
    assert_eq!(canary_c.has(), ["v4"], "and the candidate to its canaries");
    let on_c = wait_rollout(admin_c, "soaking", |r| is(r, RolloutState::Soaking)).await;
    assert_eq!(
        on_c["candidate"]["revision"], soaking["candidate_revision"],
        "{on_c:#}"
    );
    assert_eq!(
        on_c["stable"]["revision"], soaking["stable_revision"],
        "{on_c:#}"
    );
    let (status, body) = post(admin_b, "/rollout/promote").await;
    assert_eq!(status, 200, "{body}");
    prod_c.next_is("v4", "promoted on B, so on C").await;
    prod_b.next_is("v4", "and on B").await;

    // 4. A replica started while a change is halted: its canaries get the stable state, and its
    //    /rollout says halted with the canary's reason.
    etcdctl_put(&etcd, &key, &static_cluster_yaml("v5", 1005)).await;
    canary_a.next_is("v5", "a new rollout").await;
    let nacked = canary_a.last.clone();
    canary_a
        .stream
        .nack(CLUSTER, &nacked, "v5 is refused too")
        .await
        .expect("NACK sent");
    let halted = wait_record(&etcd, "halted", |r| {
        r["state"] == "halted" && r["halt"]["message"] == "v5 is refused too"
    })
    .await;
    canary_a.next_is("v4", "rolled back").await;
    let d = Xdsd::start_etcd(&etcd.endpoint(), PREFIX, GATED).await;
    let canary_d = Client::open(&d, "canary-d", "canary").await;
    assert_eq!(
        canary_d.has(),
        ["v4"],
        "a replica starting while halted serves the stable state to its canaries"
    );
    let on_d = wait_rollout(d.admin_port().await, "halted", |r| {
        is(r, RolloutState::Halted)
    })
    .await;
    assert_eq!(on_d["halt"]["node"], canary_a.id.as_str(), "{on_d:#}");
    assert_eq!(on_d["halt"]["message"], "v5 is refused too", "{on_d:#}");

    // 5. etcd compacted the stable revision away: a replica starting says so at WARN and serves
    //    the current state as the stable one.
    etcdctl_put(&etcd, &key, &static_cluster_yaml("v6", 1006)).await;
    canary_a.next_is("v6", "a new rollout").await;
    wait_record(&etcd, "soaking v6", |r| {
        r["state"] == "soaking" && r["candidate_revision"] != halted["candidate_revision"]
    })
    .await;
    let mut client = etcd.client().await;
    let now = client
        .get(key.as_str(), None)
        .await
        .expect("etcd get")
        .header()
        .expect("a header")
        .revision();
    client.compact(now, None).await.expect("etcd compact");
    let e = Xdsd::start_etcd(&etcd.endpoint(), PREFIX, GATED).await;
    e.log
        .expect_line_since(
            0,
            &["WARN", "etcd compacted the rollout's stable revision away"],
            "the replica to say why it does not take up the rollout",
        )
        .await;
    let prod_e = Client::open(&e, "prod-e", "prod").await;
    assert_eq!(prod_e.has(), ["v6"], "the current state is the stable one");
}

/// The went-back defect the soak found, with real processes: replica A promotes a change and its
/// client outside the cohort gets it; the client moves to replica B, which has the change as its
/// candidate but hears of A's promotion late (its watch of the record is held back 10 minutes,
/// a test-only switch). B must not send it the older stable state: it reads the record again at
/// once, promotes as the record says, and the client's next response is the next change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_moving_to_a_replica_that_hears_of_a_promotion_late_does_not_go_back() {
    use envoy_types::pb::envoy::config::core::v3::Node;
    use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
    use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
    use tokio_stream::wrappers::ReceiverStream;

    let etcd = Etcd::start().await;
    let key = format!("{PREFIX}c.yaml");
    etcdctl_put(&etcd, &key, &static_cluster_yaml("v1", 1001)).await;
    let a = Xdsd::start_etcd(&etcd.endpoint(), PREFIX, GATED).await;
    let late = [(xdsd_etcd::rollout::WATCH_DELAY_VAR, "600000")];
    let b = Xdsd::start_etcd_with_env(&etcd.endpoint(), PREFIX, GATED, &late).await;
    let (admin_a, admin_b) = (a.admin_port().await, b.admin_port().await);
    let mut prod_a = Client::open(&a, "prod-a", "prod").await;

    etcdctl_put(&etcd, &key, &static_cluster_yaml("v2", 1002)).await;
    wait_rollout(admin_a, "soaking", |r| is(r, RolloutState::Soaking)).await;
    wait_rollout(admin_b, "soaking", |r| is(r, RolloutState::Soaking)).await;
    let (status, body) = post(admin_a, "/rollout/promote").await;
    assert_eq!(status, 200, "{body}");
    prod_a.next_is("v2", "promoted on A").await;
    wait_record(&etcd, "promoted", |r| r["state"] == "promoted").await;

    // The client comes to B holding v2, which B has not heard is promoted.
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(DiscoveryRequest {
        node: Some(Node {
            id: prod_a.id.clone(),
            cluster: "prod".into(),
            ..Default::default()
        }),
        type_url: CLUSTER.into(),
        version_info: prod_a.last.version_info.clone(),
        ..Default::default()
    })
    .await
    .expect("queued");
    let mut responses = AggregatedDiscoveryServiceClient::connect(b.url())
        .await
        .expect("connect to B")
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .expect("a stream on B")
        .into_inner();
    let mut recv = async || {
        tokio::time::timeout(DEADLINE, responses.message())
            .await
            .expect("a response in time")
            .expect("no error")
            .expect("a response")
    };
    let promoted_on_b = wait_rollout(admin_b, "promoted", |r| r["promotions"] == 1);
    let first = tokio::select! {
        r = recv() => Some(r),
        _ = promoted_on_b => None,
    };
    if let Some(r) = &first {
        assert_ne!(
            ads::names(r),
            ["v1"],
            "went back: B sent its stable state to a client holding the promoted change"
        );
    }
    b.log
        .expect_line_since(
            0,
            &["INFO", "holds the candidate's versions"],
            "B to hold the client's answer while it reads the record again",
        )
        .await;
    // The next change, promoted on B: the moved client's first response is it.
    etcdctl_put(&etcd, &key, &static_cluster_yaml("v3", 1003)).await;
    wait_rollout(admin_b, "soaking v3", |r| {
        is(r, RolloutState::Soaking) && r["promotions"] == 1
    })
    .await;
    let (status, body) = post(admin_b, "/rollout/promote").await;
    assert_eq!(status, 200, "{body}");
    let next = recv().await;
    assert_eq!(ads::names(&next), ["v3"], "nothing before the next change");
}
