//! A gated rollout at the gRPC level: a cohort's stream reads the canary store, every other
//! stream the stable one; a change reaches the canary at once and the others once promoted;
//! a canary's NACK rolls the canary back.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;
use xdsd_core::rollout::{Cohort, GateConfig, Record, Rollout, Selector, SharedState, HOLD_BOUND};
use xdsd_core::store::{ResourceInput, Store, UpdateSummary};
use xdsd_core::types::CLUSTER;
use xdsd_core::{JsonCodec, XdsServer};

use crate::support::{cds_answer, connect, input, node, Server, WAIT};
use xdsd_testsupport::rollout::RolloutState;

struct Client {
    tx: mpsc::Sender<DiscoveryRequest>,
    responses: Streaming<DiscoveryResponse>,
    node: Node,
}

impl Client {
    async fn open(addr: std::net::SocketAddr, id: &str, cluster: &str) -> Client {
        let (tx, rx) = mpsc::channel(16);
        let node = Node {
            id: id.into(),
            cluster: cluster.into(),
            ..Default::default()
        };
        let responses = AggregatedDiscoveryServiceClient::new(connect(addr).await)
            .stream_aggregated_resources(ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        let c = Client {
            tx,
            responses,
            node,
        };
        c.send(None, None).await;
        c
    }

    /// A CDS wildcard request answering `last` (ACK, or NACK with `error`).
    async fn send(&self, last: Option<&DiscoveryResponse>, error: Option<&str>) {
        self.tx
            .send(cds_answer(Some(self.node.clone()), last, error))
            .await
            .unwrap();
    }

    async fn recv(&mut self) -> DiscoveryResponse {
        tokio::time::timeout(WAIT, self.responses.message())
            .await
            .expect("a response in time")
            .expect("no error")
            .expect("a response")
    }
}

fn contents(r: &DiscoveryResponse) -> Vec<Vec<u8>> {
    r.resources.iter().map(|a| a.value.clone()).collect()
}

async fn wait_state(rollout: &Rollout, state: RolloutState) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while RolloutState::of(&rollout.status_json()) != state {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never {state:?}: {:#}",
            rollout.status_json()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A server gated by a rollout (cohort `cluster=canary`, a soak of an hour) whose first load
/// is `first`, served on a loopback port.
async fn gated(first: Vec<ResourceInput>) -> (Arc<Rollout>, Server) {
    let stable = Store::new();
    let selector = Selector::parse("cluster=canary").unwrap();
    let config = GateConfig::default().soak(Duration::from_secs(3600));
    let rollout = Rollout::new(Cohort::new(vec![selector]), config, stable.clone());
    rollout.canary_store().replace_all(first).unwrap();
    rollout.start().unwrap();
    let server = XdsServer::builder(stable.clone())
        .rollout(rollout.clone())
        .build()
        .expect("a server without TLS builds");
    (rollout, Server::serve(stable, server).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_reaches_the_canary_at_once_the_others_once_promoted_and_a_nack_rolls_back() {
    let (rollout, server) = gated(vec![input(CLUSTER, "c", b"1")]).await;
    let addr = server.addr;

    let mut canary = Client::open(addr, "edge-1", "canary").await;
    let mut prod = Client::open(addr, "core-1", "prod").await;
    let first = canary.recv().await;
    canary.send(Some(&first), None).await;
    let p1 = prod.recv().await;
    prod.send(Some(&p1), None).await;
    assert_eq!(contents(&first), [b"1".to_vec()]);
    assert_eq!(contents(&p1), [b"1".to_vec()]);

    // A change: the canary at once.
    let commit = |content: &'static [u8]| {
        rollout
            .commit(
                |s: &Store| -> Result<UpdateSummary, xdsd_core::store::StoreError> {
                    s.replace_all([input(CLUSTER, "c", content)])
                },
            )
            .unwrap()
    };
    commit(b"2");
    let c2 = canary.recv().await;
    assert_eq!(contents(&c2), [b"2".to_vec()]);
    canary.send(Some(&c2), None).await;
    wait_state(&rollout, RolloutState::Soaking).await;
    // Promoted: prod gets it.
    assert!(rollout.promote());
    let p2 = prod.recv().await;
    assert_eq!(contents(&p2), [b"2".to_vec()], "prod after the promotion");
    prod.send(Some(&p2), None).await;

    // A change the canary NACKs: halted, the canary rolled back, prod never sees it.
    commit(b"3");
    let c3 = canary.recv().await;
    assert_eq!(contents(&c3), [b"3".to_vec()]);
    canary.send(Some(&c3), Some("bad cluster")).await;
    wait_state(&rollout, RolloutState::Halted).await;
    let back = canary.recv().await;
    assert_eq!(contents(&back), [b"2".to_vec()], "the canary rolled back");
    let halt = rollout.status_json()["halt"].clone();
    assert_eq!(halt["node"], "edge-1", "{halt:#}");
    assert_eq!(halt["message"], "bad cluster", "{halt:#}");
    assert!(
        tokio::time::timeout(Duration::from_millis(300), prod.responses.message())
            .await
            .is_err(),
        "prod is sent nothing"
    );
    server.stop().await;
    let _: Arc<Rollout> = rollout;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_empty_start_the_first_resources_reach_every_client_at_once() {
    let (rollout, server) = gated(Vec::new()).await;
    let addr = server.addr;

    // No canary is connected: a gated change would wait for one.
    let mut prod = Client::open(addr, "core-1", "prod").await;
    let empty = prod.recv().await;
    assert!(contents(&empty).is_empty(), "nothing to serve yet");
    prod.send(Some(&empty), None).await;
    rollout
        .commit(
            |s: &Store| -> Result<UpdateSummary, xdsd_core::store::StoreError> {
                s.replace_all([input(CLUSTER, "c", b"1")])
            },
        )
        .unwrap();
    let first = prod.recv().await;
    assert_eq!(contents(&first), [b"1".to_vec()], "prod at once");
    assert_eq!(RolloutState::of(&rollout.status_json()), RolloutState::Idle);

    // The next change is gated: prod keeps the first resources.
    rollout
        .commit(
            |s: &Store| -> Result<UpdateSummary, xdsd_core::store::StoreError> {
                s.replace_all([input(CLUSTER, "c", b"2")])
            },
        )
        .unwrap();
    wait_state(&rollout, RolloutState::Soaking).await;
    assert_eq!(rollout.status_json()["stable"]["generation"], 1);
    server.stop().await;
}

/// The rollout record two replicas share, kept by the test: replica A's decisions are on it at
/// once; replica B hears of them only when it reads it again (`SharedState::refresh`), as a
/// replica whose watch of the record is late.
#[derive(Default)]
struct Board {
    latest: Mutex<Option<Record>>,
    late: Mutex<Weak<Rollout>>,
    refreshes: AtomicUsize,
}

struct OnBoard {
    board: Arc<Board>,
    /// B: reads the board when asked to refresh.
    reads: bool,
}

impl SharedState for OnBoard {
    fn publish(&self, record: Record) {
        let mut latest = self.board.latest.lock().unwrap();
        if latest.as_ref().is_none_or(|now| record.supersedes(now)) {
            *latest = Some(record);
        }
    }

    fn refresh(&self) {
        if !self.reads {
            return;
        }
        self.board.refreshes.fetch_add(1, Ordering::SeqCst);
        let record = self.board.latest.lock().unwrap().clone();
        let late = self.board.late.lock().unwrap().upgrade();
        if let (Some(record), Some(late)) = (record, late) {
            late.adopt(record);
        }
    }
}

/// A replica of a source at revision 10 holding `first`, gated like `gated`, sharing its
/// rollout through `board` (`late`: it hears of the others' decisions only when it reads the
/// board again).
async fn replica(first: &[u8], board: &Arc<Board>, late: bool) -> (Arc<Rollout>, Server) {
    replica_of(vec![input(CLUSTER, "c", first)], board, late).await
}

/// [`replica`] holding `first` (and serving REST polls, their bodies protobuf: [`Passthrough`]).
async fn replica_of(
    first: Vec<ResourceInput>,
    board: &Arc<Board>,
    late: bool,
) -> (Arc<Rollout>, Server) {
    let stable = Store::new();
    let selector = Selector::parse("cluster=canary").unwrap();
    let config = GateConfig::default().soak(Duration::from_secs(3600));
    let rollout = Rollout::new(Cohort::new(vec![selector]), config, stable.clone());
    rollout.canary_store().replace_all(first).unwrap();
    rollout.start_at(Some(10)).unwrap();
    rollout.share(Arc::new(OnBoard {
        board: board.clone(),
        reads: late,
    }));
    if late {
        *board.late.lock().unwrap() = Arc::downgrade(&rollout);
    }
    let server = XdsServer::builder(stable.clone())
        .rollout(rollout.clone())
        .rest_json(Arc::new(Passthrough))
        .build()
        .expect("a server without TLS builds");
    (rollout, Server::serve(stable, server).await)
}

/// A "JSON" codec that passes the protobuf encoding through: REST polls in tests send and
/// read protobuf bodies.
struct Passthrough;

impl JsonCodec for Passthrough {
    fn request_from_json(&self, json: &[u8]) -> Result<Vec<u8>, String> {
        Ok(json.to_vec())
    }
    fn response_to_json(&self, encoded: &[u8]) -> Result<Vec<u8>, String> {
        Ok(encoded.to_vec())
    }
}

/// The source's change of `revision` to `content`, on a replica.
fn change(rollout: &Rollout, revision: i64, content: &'static [u8]) {
    change_to(rollout, revision, vec![input(CLUSTER, "c", content)]);
}

/// The source's change of `revision` to `inputs`, on a replica.
fn change_to(rollout: &Rollout, revision: i64, inputs: Vec<ResourceInput>) {
    rollout
        .commit_at(
            Some(revision),
            |s: &Store| -> Result<UpdateSummary, xdsd_core::store::StoreError> {
                s.replace_all(inputs)
            },
        )
        .unwrap();
}

async fn promotions(rollout: &Rollout, n: u64) {
    while rollout.status_json()["promotions"] != n {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// What a client moved to B holding A's promoted candidate is sent first, if anything before B
/// hears of the promotion, is never B's `stable` content; and B read the record again, once.
async fn expect_no_going_back(
    first: impl std::future::Future<Output = DiscoveryResponse>,
    b: &Rollout,
    board: &Board,
    stable: &[u8],
) {
    let first = tokio::select! {
        r = first => Some(r),
        () = promotions(b, 1) => None,
    };
    if let Some(r) = first {
        assert_ne!(
            contents(&r),
            [stable.to_vec()],
            "went back: B sent its stable state to a client holding the promoted candidate"
        );
    }
    assert_eq!(
        board.refreshes.load(Ordering::SeqCst),
        1,
        "B read the record again, once"
    );
}

/// A SotW client outside the cohort opening a CDS stream on `addr` holding `version`.
async fn reconnect_holding(addr: std::net::SocketAddr, version: &str) -> Client {
    let client = Client::open_quiet(addr, "core-1", "prod").await;
    client
        .tx
        .send(DiscoveryRequest {
            node: Some(client.node.clone()),
            type_url: CLUSTER.into(),
            version_info: version.into(),
            ..Default::default()
        })
        .await
        .unwrap();
    client
}

impl Client {
    /// A stream opened, no request sent yet.
    async fn open_quiet(addr: std::net::SocketAddr, id: &str, cluster: &str) -> Client {
        let (tx, rx) = mpsc::channel(16);
        let node = Node {
            id: id.into(),
            cluster: cluster.into(),
            ..Default::default()
        };
        let responses = AggregatedDiscoveryServiceClient::new(connect(addr).await)
            .stream_aggregated_resources(ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        Client {
            tx,
            responses,
            node,
        }
    }
}

/// Replica A promotes a candidate and its client outside the cohort gets it; the client moves
/// to replica B, which has the candidate but has not heard of the promotion yet. B must not send
/// it its stable state (it would go back): B reads the shared record again at once, promotes
/// as the record says, and the client, which holds the promoted state, is sent nothing but the
/// next change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_holding_a_candidate_promoted_on_another_replica_does_not_go_back_on_a_replica_that_hears_of_it_late(
) {
    let board = Arc::new(Board::default());
    let (a, server_a) = replica(b"1", &board, false).await;
    let (b, server_b) = replica(b"1", &board, true).await;
    let mut prod_a = Client::open(server_a.addr, "core-1", "prod").await;
    let p1 = prod_a.recv().await;
    prod_a.send(Some(&p1), None).await;

    // The change (revision 11) reaches both; A's operator promotes it; B is not told.
    change(&a, 11, b"2");
    change(&b, 11, b"2");
    assert!(a.promote());
    let p2 = prod_a.recv().await;
    assert_eq!(
        contents(&p2),
        [b"2".to_vec()],
        "A's client has the promotion"
    );
    prod_a.send(Some(&p2), None).await;
    assert_eq!(RolloutState::of(&b.status_json()), RolloutState::Soaking);

    // It comes to B holding it.
    let mut moved = reconnect_holding(server_b.addr, &p2.version_info).await;
    expect_no_going_back(moved.recv(), &b, &board, b"1").await;
    // The next change, promoted on B: the moved client's next response (its first) is it.
    change(&b, 12, b"3");
    assert!(b.promote());
    let next = moved.recv().await;
    assert_eq!(
        contents(&next),
        [b"3".to_vec()],
        "nothing before the next change: the client held the promoted state"
    );
    moved.send(Some(&next), None).await;

    // A client that guesses the candidate's version (13, promoted nowhere) does not promote it:
    // its answer waits for the record (which says nothing of 13), then it gets the stable state.
    change(&b, 13, b"4");
    let guessed = b.status_json()["candidate"]["versions"][CLUSTER]
        .as_str()
        .expect("the candidate's version")
        .to_owned();
    let asked = std::time::Instant::now();
    let mut liar = reconnect_holding(server_b.addr, &guessed).await;
    let answer = liar.recv().await;
    assert_eq!(contents(&answer), [b"3".to_vec()], "the stable state");
    assert!(
        asked.elapsed() >= HOLD_BOUND - Duration::from_millis(100),
        "held for the bound: {:?}",
        asked.elapsed()
    );
    assert_eq!(b.status_json()["promotions"], 2, "13 is not promoted");
    assert_eq!(RolloutState::of(&b.status_json()), RolloutState::Soaking);
    assert_eq!(board.refreshes.load(Ordering::SeqCst), 2);
    server_a.stop().await;
    server_b.stop().await;
}

/// The same over delta: the moved client says it holds the promoted resource
/// (`initial_resource_versions`); B reads the record again and sends it nothing but the next
/// change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delta_client_holding_a_candidate_promoted_on_another_replica_does_not_go_back() {
    let board = Arc::new(Board::default());
    let (a, server_a) = replica(b"1", &board, false).await;
    let (b, server_b) = replica(b"1", &board, true).await;
    change(&a, 11, b"2");
    change(&b, 11, b"2");
    assert!(a.promote());
    let promoted = a.stable_store().snapshot();
    let version = promoted
        .get(CLUSTER)
        .and_then(|t| t.get("c"))
        .expect("c")
        .version()
        .to_string();

    let (tx, rx) = mpsc::channel(16);
    let mut responses = AggregatedDiscoveryServiceClient::new(connect(server_b.addr).await)
        .delta_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(DeltaDiscoveryRequest {
        node: node("core-1", "prod"),
        type_url: CLUSTER.into(),
        initial_resource_versions: [("c".to_string(), version)].into_iter().collect(),
        ..Default::default()
    })
    .await
    .unwrap();
    // An answer to the subscription, if any, says the client has everything (nothing sent,
    // nothing removed); the first resource it is sent is the next change.
    let nothing =
        |r: &DeltaDiscoveryResponse| r.resources.is_empty() && r.removed_resources.is_empty();
    let first = tokio::select! {
        r = delta_recv(&mut responses) => Some(r),
        () = promotions(&b, 1) => None,
    };
    if let Some(r) = &first {
        let got: Vec<_> = r.resources.iter().map(|r| r.resource.clone()).collect();
        assert!(
            nothing(r),
            "went back: B sent {got:?} (removed {:?}) to a client holding the promoted candidate",
            r.removed_resources
        );
    }
    promotions(&b, 1).await;
    change(&b, 12, b"3");
    assert!(b.promote());
    let mut next = delta_recv(&mut responses).await;
    if first.is_none() && nothing(&next) {
        next = delta_recv(&mut responses).await;
    }
    let got: Vec<_> = next
        .resources
        .iter()
        .map(|r| r.resource.as_ref().map(|a| a.value.clone()))
        .collect();
    assert_eq!(got, [Some(b"3".to_vec())], "only the next change");
    assert_eq!(board.refreshes.load(Ordering::SeqCst), 1);
    server_a.stop().await;
    server_b.stop().await;
}

async fn delta_recv(responses: &mut Streaming<DeltaDiscoveryResponse>) -> DeltaDiscoveryResponse {
    tokio::time::timeout(WAIT, responses.message())
        .await
        .expect("a response in time")
        .expect("no error")
        .expect("a response")
}

/// A's client outside the cohort, after A promoted revision 11 ("2") over "1" (B has it, not
/// told): the promoted CDS response it holds. B reads the board when asked.
async fn promoted_on_a(
    board: &Arc<Board>,
) -> (
    Arc<Rollout>,
    Server,
    Arc<Rollout>,
    Server,
    DiscoveryResponse,
) {
    let (a, server_a) = replica(b"1", board, false).await;
    let (b, server_b) = replica(b"1", board, true).await;
    let mut prod_a = Client::open(server_a.addr, "core-1", "prod").await;
    let p1 = prod_a.recv().await;
    prod_a.send(Some(&p1), None).await;
    change(&a, 11, b"2");
    change(&b, 11, b"2");
    assert!(a.promote());
    let p2 = prod_a.recv().await;
    assert_eq!(
        contents(&p2),
        [b"2".to_vec()],
        "A's client has the promotion"
    );
    assert_eq!(RolloutState::of(&b.status_json()), RolloutState::Soaking);
    (a, server_a, b, server_b, p2)
}

/// A per-type service's request may leave its `type_url` empty (the service's type): a client
/// that moves to B on the CDS service holding the promoted candidate that way is held as on
/// ADS, not sent B's stable state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_type_stream_holding_a_promoted_candidate_with_no_type_url_does_not_go_back() {
    use envoy_types::pb::envoy::service::cluster::v3::cluster_discovery_service_client::ClusterDiscoveryServiceClient;
    let board = Arc::new(Board::default());
    let (_a, server_a, b, server_b, p2) = promoted_on_a(&board).await;
    let (tx, rx) = mpsc::channel(16);
    let mut responses = ClusterDiscoveryServiceClient::new(connect(server_b.addr).await)
        .stream_clusters(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(DiscoveryRequest {
        node: node("core-1", "prod"),
        version_info: p2.version_info.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    let recv = async {
        tokio::time::timeout(WAIT, responses.message())
            .await
            .expect("a response in time")
            .expect("no error")
            .expect("a response")
    };
    expect_no_going_back(recv, &b, &board, b"1").await;
    server_a.stop().await;
    server_b.stop().await;
}

/// On a type with variants a SotW client's `version_info` is its view's version (the variants
/// its parameters pick), not the type's: a client whose variant the promoted change touched,
/// moving to B holding that view, is held, not sent B's stable variant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sotw_client_holding_a_promoted_variant_does_not_go_back() {
    use xdsd_core::params::Constraints;
    let variants = |prod: &'static [u8]| {
        [("prod", prod), ("test", &b"t"[..])]
            .map(|(env, content)| {
                input(CLUSTER, "c", content).with_constraints(Some(
                    Constraints::new(crate::support::env_constraint(env)).unwrap(),
                ))
            })
            .to_vec()
    };
    let board = Arc::new(Board::default());
    let (a, server_a) = replica_of(variants(b"1"), &board, false).await;
    let (b, server_b) = replica_of(variants(b"1"), &board, true).await;
    let prod_node = crate::support::node_with_metadata("core-1", "prod", &[("env", "prod")]);
    let mut prod_a = Client::open_quiet(server_a.addr, "core-1", "prod").await;
    prod_a.node = prod_node.clone().unwrap();
    prod_a.send(None, None).await;
    let p1 = prod_a.recv().await;
    assert_eq!(contents(&p1), [b"1".to_vec()], "the prod variant");
    prod_a.send(Some(&p1), None).await;
    change_to(&a, 11, variants(b"2"));
    change_to(&b, 11, variants(b"2"));
    assert!(a.promote());
    let p2 = prod_a.recv().await;
    assert_eq!(
        contents(&p2),
        [b"2".to_vec()],
        "A's client has the promotion"
    );
    let type_version = a
        .stable_store()
        .snapshot()
        .get(CLUSTER)
        .unwrap()
        .version()
        .to_string();
    assert_ne!(
        p2.version_info, type_version,
        "its view's version, not the type's"
    );

    let mut moved = Client::open_quiet(server_b.addr, "core-1", "prod").await;
    moved.node = prod_node.unwrap();
    moved
        .tx
        .send(DiscoveryRequest {
            node: Some(moved.node.clone()),
            type_url: CLUSTER.into(),
            version_info: p2.version_info.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    expect_no_going_back(moved.recv(), &b, &board, b"1").await;
    server_a.stop().await;
    server_b.stop().await;
}

/// A `FetchClusters` call on B saying it holds the promoted candidate (its `version_info`) is
/// answered once B heard of the promotion, with it, not with B's stable state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_holding_a_promoted_candidate_does_not_go_back() {
    use envoy_types::pb::envoy::service::cluster::v3::cluster_discovery_service_client::ClusterDiscoveryServiceClient;
    let board = Arc::new(Board::default());
    let (_a, server_a, b, server_b, p2) = promoted_on_a(&board).await;
    let fetched = ClusterDiscoveryServiceClient::new(connect(server_b.addr).await)
        .fetch_clusters(DiscoveryRequest {
            node: node("core-1", "prod"),
            version_info: p2.version_info.clone(),
            ..Default::default()
        })
        .await
        .expect("an answer")
        .into_inner();
    assert_eq!(
        contents(&fetched),
        [b"2".to_vec()],
        "went back: B answered its stable state to a fetch holding the promoted candidate"
    );
    assert_eq!(fetched.version_info, p2.version_info);
    assert_eq!(
        b.status_json()["promotions"],
        1,
        "B promoted as the record says"
    );
    assert_eq!(
        board.refreshes.load(Ordering::SeqCst),
        1,
        "B read the record again"
    );
    server_a.stop().await;
    server_b.stop().await;
}

/// A REST poll to B holding what A answered after the promotion (a REST answer's version) is
/// not answered with B's stable state: it waits for B to hear of the promotion, then is held as
/// unchanged, and is answered by the next change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rest_poll_holding_a_promoted_candidate_does_not_go_back() {
    let board = Arc::new(Board::default());
    let (_a, server_a, b, server_b, _) = promoted_on_a(&board).await;
    let poll = |version: String| DiscoveryRequest {
        node: node("core-1", "prod"),
        version_info: version,
        ..Default::default()
    };
    let (status, on_a) = rest_poll(server_a.addr, poll(String::new())).await;
    assert!(status.contains("200"), "{status}");
    assert_eq!(contents(&on_a), [b"2".to_vec()], "A answers the promotion");

    let mut held = tokio::spawn(rest_poll(server_b.addr, poll(on_a.version_info.clone())));
    let early = tokio::select! {
        r = &mut held => Some(r.unwrap()),
        () = promotions(&b, 1) => None,
    };
    if let Some((status, r)) = early {
        panic!(
            "went back: B answered {status} with {:?} before it heard of the promotion",
            contents(&r)
        );
    }
    change(&b, 12, b"3");
    assert!(b.promote());
    let (status, on_b) = held.await.unwrap();
    assert!(status.contains("200"), "{status}");
    assert_eq!(
        contents(&on_b),
        [b"3".to_vec()],
        "went back, or not held: B's first answer to a poll holding the promoted candidate"
    );
    assert_eq!(
        board.refreshes.load(Ordering::SeqCst),
        1,
        "B read the record again"
    );
    server_a.stop().await;
    server_b.stop().await;
}

/// One REST poll (`POST /v3/discovery:clusters`, protobuf bodies: [`Passthrough`]) over
/// HTTP/1.1: the status line and the answer.
async fn rest_poll(
    addr: std::net::SocketAddr,
    request: DiscoveryRequest,
) -> (String, DiscoveryResponse) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connected");
    let body = prost::Message::encode_to_vec(&request);
    let head = format!(
        "POST /v3/discovery:clusters HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.expect("sent");
    tcp.write_all(&body).await.expect("sent");
    let mut answer = Vec::new();
    tokio::time::timeout(WAIT, tcp.read_to_end(&mut answer))
        .await
        .expect("an answer in time")
        .expect("read");
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP answer");
    let status = String::from_utf8_lossy(&answer[..split])
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    let response = prost::Message::decode(&answer[split + 4..]).unwrap_or_default();
    (status, response)
}
