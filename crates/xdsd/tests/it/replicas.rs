//! Two xdsd replicas on the same directory give every resource the same version (versions are
//! content hashes): a client that moves from one to the other is resent nothing — delta with its
//! `initial_resource_versions`, SotW with its `version_info`. This is how a fleet outgrows one xdsd.
//! [`move_a_client`] is shared with the replicas on etcd (`etcd.rs`).

use std::collections::HashMap;

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

use crate::support::scenario::static_cluster_yaml;
use crate::support::{client_node, ResourceDir, Xdsd, CLUSTER, DEADLINE};

/// A client moved from replica `one` to replica `two`: its SotW and delta streams on `two`.
pub struct Moved {
    /// The CDS version it had from `one`.
    pub version: String,
    pub sotw: Streaming<DiscoveryResponse>,
    pub delta: Streaming<DeltaDiscoveryResponse>,
    /// (Kept open while the streams are used.)
    _requests: (
        mpsc::Sender<DiscoveryRequest>,
        mpsc::Sender<DeltaDiscoveryRequest>,
    ),
}

async fn message<T>(stream: &mut Streaming<T>) -> T {
    timeout(DEADLINE, stream.message())
        .await
        .expect("a response in time")
        .expect("no error")
        .expect("not the end of the stream")
}

/// Takes CDS (holding `count` clusters) from `one` over SotW and delta, then opens the same
/// streams on `two` with what it got: the SotW `version_info`, the delta
/// `initial_resource_versions`. Checks that the delta stream's first answer resends nothing; the
/// SotW stream stays silent while nothing changes, which the caller checks with a change: the
/// first response must then carry a new version (a resend would carry the old one).
pub async fn move_a_client(one: &Xdsd, two: &Xdsd, node: &str, count: usize) -> Moved {
    let connect = |url: String| async move {
        AggregatedDiscoveryServiceClient::connect(url)
            .await
            .expect("connected to a replica")
    };
    let request = |version: &str| DiscoveryRequest {
        node: client_node(node),
        type_url: CLUSTER.into(),
        version_info: version.into(),
        ..Default::default()
    };
    let (tx, rx) = mpsc::channel(4);
    tx.send(request("")).await.expect("queued");
    let mut first = connect(one.url())
        .await
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .expect("a SotW stream")
        .into_inner();
    let sent = message(&mut first).await;
    assert_eq!(sent.resources.len(), count);
    let (tx2, rx2) = mpsc::channel(4);
    tx2.send(request(&sent.version_info)).await.expect("queued");
    let sotw = connect(two.url())
        .await
        .stream_aggregated_resources(ReceiverStream::new(rx2))
        .await
        .expect("a SotW stream")
        .into_inner();

    let delta_request = |versions: HashMap<String, String>| DeltaDiscoveryRequest {
        node: client_node(node),
        type_url: CLUSTER.into(),
        initial_resource_versions: versions,
        ..Default::default()
    };
    let (dtx, drx) = mpsc::channel(4);
    dtx.send(delta_request(HashMap::new()))
        .await
        .expect("queued");
    let mut delta_one = connect(one.url())
        .await
        .delta_aggregated_resources(ReceiverStream::new(drx))
        .await
        .expect("a delta stream")
        .into_inner();
    let got = message(&mut delta_one).await;
    let versions: HashMap<String, String> = got
        .resources
        .iter()
        .map(|r| (r.name.clone(), r.version.clone()))
        .collect();
    assert_eq!(versions.len(), count);
    let (dtx2, drx2) = mpsc::channel(4);
    dtx2.send(delta_request(versions)).await.expect("queued");
    let mut delta = connect(two.url())
        .await
        .delta_aggregated_resources(ReceiverStream::new(drx2))
        .await
        .expect("a delta stream")
        .into_inner();
    // Its first answer holds nothing: it has every resource at its version.
    let answer = message(&mut delta).await;
    assert!(
        answer.resources.is_empty() && answer.removed_resources.is_empty(),
        "the second replica resends nothing to the delta client: {answer:?}"
    );
    Moved {
        version: sent.version_info,
        sotw,
        delta,
        _requests: (tx2, dtx2),
    }
}

/// After a change of cluster `changed` (of `count`): the moved SotW client's first response from
/// the second replica is the change (a new version), and the delta client gets only `changed`.
pub async fn expect_only_the_change(moved: &mut Moved, changed: &str, count: usize) {
    let update = message(&mut moved.sotw).await;
    assert_ne!(
        update.version_info, moved.version,
        "the second replica's first response is the change, not a resend"
    );
    assert_eq!(update.resources.len(), count, "CDS is sent whole");
    let answer = message(&mut moved.delta).await;
    let names: Vec<&str> = answer.resources.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        [changed],
        "the second replica sends the delta client only the change"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_moving_between_replicas_is_resent_nothing() {
    let dir = ResourceDir::new();
    dir.write("a.yaml", &static_cluster_yaml("a", 1001));
    dir.write("b.yaml", &static_cluster_yaml("b", 1002));
    let one = Xdsd::start(&dir.path()).await;
    let two = Xdsd::start(&dir.path()).await;
    let mut moved = move_a_client(&one, &two, "replica-client", 2).await;
    // A change reaches the moved clients from the second replica, and only the change.
    dir.write("b.yaml", &static_cluster_yaml("b", 2002));
    expect_only_the_change(&mut moved, "b", 2).await;
}
