//! xRFC TP2 resource locators through a relay: each downstream locator is subscribed upstream as
//! its plain name on the stream of its parameters (not as its type's wildcard), the variants of
//! two locators of one name are cached apart, and a locator no client asks for any more leaves
//! the cache while the other stays and follows the upstream.

use std::net::SocketAddr;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use xdsd_client::types::CLUSTER_LOAD_ASSIGNMENT;
use xdsd_client::{Config, Event, Events, Flavor, Params, XdsClient};
use xdsd_core::Store;
use xdsd_relay::{relay, RelayOptions};
use xdsd_testsupport::server::{endpoints, env_is, variant, wait_for, Server, WAIT};

/// The relay's store, and its server's address (both serve until the test ends).
async fn start_relay(upstream: SocketAddr) -> (Store, SocketAddr) {
    let node = Node {
        id: "relay-locators".into(),
        ..Default::default()
    };
    let mut options = RelayOptions::new(xdsd_client::Options::new(upstream.to_string()), node);
    options.linger = Duration::from_millis(100);
    options.first_wait = WAIT;
    let (source, observer, _metrics) = relay(options);
    crate::serve_relay(source, observer).await
}

fn env(value: &str) -> Params {
    [("env".to_owned(), value.to_owned())].into()
}

/// A delta client of `relay` subscribed to endpoints "e" with `env` as a locator.
fn client_of(relay: SocketAddr, env_value: &str) -> (XdsClient, Events) {
    let mut config = Config::new(Node {
        id: format!("locator-{env_value}"),
        ..Default::default()
    });
    config.flavor = Flavor::Delta;
    config.ads = true;
    let (client, events) =
        XdsClient::start(xdsd_client::Options::new(relay.to_string()), config, None)
            .expect("the client starts");
    client.subscribe_locator(CLUSTER_LOAD_ASSIGNMENT, "e", env(env_value));
    (client, events)
}

/// The next variant of "e" the client is sent: its encoded body.
async fn next_variant(events: &mut Events) -> Vec<u8> {
    wait_for(events, |e| match e {
        Event::Update(u) => u
            .added
            .iter()
            .chain(&u.changed)
            .find(|r| r.name == "e")
            .map(|r| r.body.value.clone()),
        _ => None,
    })
    .await
}

/// How many variants of endpoints "e" `store` holds.
fn variants(store: &Store) -> usize {
    let snapshot = store.snapshot();
    let count = snapshot
        .types()
        .find(|t| &**t.type_url() == CLUSTER_LOAD_ASSIGNMENT)
        .map_or(0, |t| t.variants("e").len());
    count
}

/// Polls `check` (the store has no change notice from outside a session) for up to [`WAIT`].
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
async fn two_locators_of_one_name_are_subscribed_upstream_apart_and_one_leaving_keeps_the_other() {
    let server = Server::start().await;
    let body = |tag: &str| endpoints("e", tag).value.to_vec();
    server
        .store
        .replace_all(["prod", "test"].map(|v| variant(endpoints("e", v), env_is(v))))
        .expect("two variants");
    let (relay_store, relay_addr) = start_relay(server.addr).await;

    let (_prod, mut prod_events) = client_of(relay_addr, "prod");
    assert_eq!(next_variant(&mut prod_events).await, body("prod"));
    let (test, mut test_events) = client_of(relay_addr, "test");
    assert_eq!(next_variant(&mut test_events).await, body("test"));
    // The relay's one upstream stream was sent both variants: each locator asked as such (the
    // relay's own node has no parameters, so a wildcard would have been sent neither).
    assert_eq!(variants(&relay_store), 2);

    // The test client leaves: its locator is unsubscribed after the linger, and its variant
    // leaves the cache; the other stays.
    drop((test, test_events));
    until("the left locator's variant dropped", || {
        variants(&relay_store) == 1
    })
    .await;
    server.set(variant(endpoints("e", "prod-2"), env_is("prod")));
    assert_eq!(
        next_variant(&mut prod_events).await,
        body("prod-2"),
        "the locator left follows the upstream"
    );
    assert_eq!(variants(&relay_store), 1);
    server.stop().await;
}
