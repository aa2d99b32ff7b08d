//! The client against rust-control-plane 0.1.2 (bench-peer/), over SotW ADS: a wildcard, a
//! change seen, a missing name.

use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use xdsd_client::types::CLUSTER;
use xdsd_client::{Config, Event, Options, XdsClient};

use xdsd_testsupport::peer::{Peer, PEER_NODE};
use xdsd_testsupport::server::{cluster_bytes, next_news, update_names, wait_for};

#[tokio::test]
async fn rust_control_plane_sotw_serves_the_client() {
    let Some(mut peer) = Peer::start().await else {
        return;
    };
    peer.set(CLUSTER, "a", &cluster_bytes("a", "1")).await;
    peer.set(CLUSTER, "b", &cluster_bytes("b", "1")).await;
    let mut config = Config::new(Node {
        id: PEER_NODE.into(),
        ..Default::default()
    });
    config.does_not_exist_timeout = Duration::from_secs(2);
    let (client, mut events) =
        XdsClient::start(Options::new(peer.addr.clone()), config, None).expect("started");
    // rust-control-plane 0.1.2 knows only the legacy wildcard (it takes `*` for a name).
    client.subscribe_legacy_wildcard(CLUSTER);
    let first = next_news(&mut events).await;
    assert_eq!(update_names(&first), (vec!["a".into(), "b".into()], vec![]));
    peer.set(CLUSTER, "a", &cluster_bytes("a", "2")).await;
    let second = next_news(&mut events).await;
    assert_eq!(update_names(&second), (vec![], vec!["a".into()]));
    if let Event::Update(u) = &second {
        assert_eq!(u.changed[0].body.value, cluster_bytes("a", "2").to_vec());
    }
    drop((client, events));

    // A name it does not have: left out of its full-state cluster responses.
    let mut config = Config::new(Node {
        id: PEER_NODE.into(),
        ..Default::default()
    });
    config.does_not_exist_timeout = Duration::from_secs(2);
    let (client, mut events) =
        XdsClient::start(Options::new(peer.addr.clone()), config, None).expect("started");
    client.subscribe(CLUSTER, vec!["a".into(), "nope".into()]);
    let missing = wait_for(&mut events, |e| match e {
        Event::DoesNotExist { name, .. } => Some(name.clone()),
        _ => None,
    })
    .await;
    assert_eq!(missing, "nope");
}
