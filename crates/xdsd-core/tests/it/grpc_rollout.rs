//! A gated rollout at the gRPC level: a cohort's stream reads the canary store, every other
//! stream the stable one; a change reaches the canary at once and the others once promoted;
//! a canary's NACK rolls the canary back.

use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;
use xdsd_core::rollout::{Cohort, GateConfig, Rollout, Selector};
use xdsd_core::store::{ResourceInput, Store, UpdateSummary};
use xdsd_core::types::CLUSTER;
use xdsd_core::XdsServer;

use crate::support::{cds_answer, connect, input, Server, WAIT};
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
