//! The client against an in-process xdsd: SotW and delta, ADS and per-type, TP2 variants, a
//! change seen, a missing name, a reconnect that resends nothing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::Node;
use xdsd_client::types::{CLUSTER, CLUSTER_LOAD_ASSIGNMENT, RUNTIME};
use xdsd_client::{Config, Event, Events, Flavor, Options, Params, XdsClient};

use xdsd_testsupport::server::*;

fn config(flavor: Flavor, ads: bool) -> Config {
    let mut config = Config::new(Node {
        id: "client-test".into(),
        cluster: "edge".into(),
        ..Default::default()
    });
    config.flavor = flavor;
    config.ads = ads;
    config
}

fn start(server: &Server, config: Config) -> (XdsClient, Events) {
    XdsClient::start(Options::new(server.addr.to_string()), config, None).expect("started")
}

async fn gets_a_wildcard_and_sees_a_change(flavor: Flavor, ads: bool) {
    let server = Server::start().await;
    server.set(cluster("a", "1"));
    server.set(cluster("b", "1"));
    let (client, mut events) = start(&server, config(flavor, ads));
    client.subscribe(CLUSTER, vec!["*".into()]);
    let first = next_news(&mut events).await;
    assert_eq!(update_names(&first), (vec!["a".into(), "b".into()], vec![]));
    server.set(cluster("b", "2"));
    let second = next_news(&mut events).await;
    assert_eq!(update_names(&second), (vec![], vec!["b".into()]));
    if let Event::Update(u) = &second {
        assert_eq!(u.changed[0].body.value, cluster_bytes("b", "2").to_vec());
    }
    server.remove(CLUSTER, "a");
    match next_news(&mut events).await {
        Event::Removed { names, expired, .. } => {
            assert_eq!(names, vec!["a"]);
            assert!(!expired);
        }
        other => panic!("a removal: {other:?}"),
    }
    drop(client);
    server.stop().await;
}

#[tokio::test]
async fn sotw_ads_gets_a_wildcard_and_sees_a_change() {
    gets_a_wildcard_and_sees_a_change(Flavor::Sotw, true).await;
}

#[tokio::test]
async fn delta_ads_gets_a_wildcard_and_sees_a_change() {
    gets_a_wildcard_and_sees_a_change(Flavor::Delta, true).await;
}

#[tokio::test]
async fn sotw_per_type_gets_a_wildcard_and_sees_a_change() {
    gets_a_wildcard_and_sees_a_change(Flavor::Sotw, false).await;
}

#[tokio::test]
async fn delta_per_type_gets_a_wildcard_and_sees_a_change() {
    gets_a_wildcard_and_sees_a_change(Flavor::Delta, false).await;
}

async fn variant_is_chosen_by_the_locators_parameters(flavor: Flavor) {
    let server = Server::start().await;
    server.set(variant(cluster("a", "prod"), env_is("prod")));
    server.set(variant(cluster("a", "test"), env_is("test")));
    let (client, mut events) = start(&server, config(flavor, true));
    let prod: Params = [("env".to_string(), "prod".to_string())].into();
    client.subscribe_locator(CLUSTER, "a", prod.clone());
    match next_news(&mut events).await {
        Event::Update(u) => {
            assert_eq!(u.added.len(), 1, "{u:?}");
            let got = &u.added[0];
            assert_eq!(got.body.value, cluster_bytes("a", "prod").to_vec());
            assert_eq!(
                got.constraints,
                Some(env_is("prod")),
                "kept with its constraints"
            );
            assert!(got.matches(&prod));
        }
        other => panic!("an update: {other:?}"),
    }
    server.stop().await;
}

#[tokio::test]
async fn sotw_variant_is_chosen_by_the_locators_parameters() {
    variant_is_chosen_by_the_locators_parameters(Flavor::Sotw).await;
}

#[tokio::test]
async fn delta_variant_is_chosen_by_the_locators_parameters() {
    variant_is_chosen_by_the_locators_parameters(Flavor::Delta).await;
}

async fn missing_name_does_not_exist(flavor: Flavor) {
    let server = Server::start().await;
    server.set(cluster("a", "1"));
    let (client, mut events) = start(&server, config(flavor, true));
    client.subscribe(CLUSTER, vec!["a".into(), "nope".into()]);
    let name = wait_for(&mut events, |e| match e {
        Event::DoesNotExist { name, .. } => Some(name.clone()),
        _ => None,
    })
    .await;
    assert_eq!(name, "nope");
    server.stop().await;
}

#[tokio::test]
async fn sotw_missing_name_does_not_exist() {
    missing_name_does_not_exist(Flavor::Sotw).await;
}

#[tokio::test]
async fn delta_missing_name_does_not_exist() {
    missing_name_does_not_exist(Flavor::Delta).await;
}

/// After a reconnect, the server resends nothing the client has (SotW `version_info`, delta
/// `initial_resource_versions`): the validator sees every resource received.
async fn reconnect_resends_nothing(flavor: Flavor) {
    let mut server = Server::start().await;
    server.set(endpoints("a", "1"));
    server.set(endpoints("b", "1"));
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let (client, mut events) = XdsClient::start(
        Options::new(server.addr.to_string()),
        config(flavor, true),
        Some(Box::new(move |_: &xdsd_client::Resource| {
            counter.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })),
    )
    .expect("started");
    client.subscribe(CLUSTER_LOAD_ASSIGNMENT, vec!["a".into(), "b".into()]);
    let first = next_news(&mut events).await;
    assert_eq!(update_names(&first).0.len(), 2);
    assert_eq!(seen.load(Ordering::SeqCst), 2);
    server.set(runtime("rt"));
    server = server.restart().await;
    wait_for(&mut events, |e| {
        matches!(e, Event::Disconnected { .. }).then_some(())
    })
    .await;
    wait_for(&mut events, |e| matches!(e, Event::Connected).then_some(())).await;
    // A barrier: a new type asked for after the resumed one, on the same stream, is answered
    // after whatever the server sends for the resumed one.
    client.subscribe(RUNTIME, vec!["rt".into()]);
    let barrier = next_news(&mut events).await;
    assert_eq!(update_names(&barrier), (vec!["rt".into()], vec![]));
    assert_eq!(
        seen.load(Ordering::SeqCst),
        3,
        "nothing resent on reconnect"
    );
    // And the stream works on: a change is seen as one.
    server.set(endpoints("b", "2"));
    let next = next_news(&mut events).await;
    assert_eq!(update_names(&next), (vec![], vec!["b".into()]));
    drop(client);
    server.stop().await;
}

#[tokio::test]
async fn sotw_reconnect_resends_nothing() {
    reconnect_resends_nothing(Flavor::Sotw).await;
}

#[tokio::test]
async fn delta_reconnect_resends_nothing() {
    reconnect_resends_nothing(Flavor::Delta).await;
}

/// `Connected` means the server accepted a stream: a server that answers every call with
/// UNIMPLEMENTED is never reported connected, only lost, with the status.
#[tokio::test]
async fn connected_is_not_reported_for_a_server_that_refuses_the_stream() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_routes(tonic::service::Routes::default())
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    let (client, mut events) = XdsClient::start(
        Options::new(addr.to_string()),
        config(Flavor::Delta, true),
        None,
    )
    .expect("started");
    client.subscribe(CLUSTER, vec!["*".into()]);
    let first = tokio::time::timeout(WAIT, events.next())
        .await
        .expect("an event in time");
    match first {
        Some(Event::Disconnected { reason }) => {
            assert!(reason.contains("Unimplemented"), "{reason}")
        }
        other => panic!("lost, not connected: {other:?}"),
    }
    drop(client);
    server.abort();
}

/// Two servers of the same content: the first lost, the client goes on with the second,
/// resuming (SotW `version_info`, delta `initial_resource_versions`): the validator sees only
/// what is new.
async fn fails_over_to_the_next_server_and_resends_nothing(flavor: Flavor) {
    let first = Server::start().await;
    let second = Server::start_with(first.store.clone()).await;
    first.set(endpoints("a", "1"));
    first.set(endpoints("b", "1"));
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let mut options = Options::with_servers([first.addr.to_string(), second.addr.to_string()])
        .expect("two servers");
    options.initial_backoff = std::time::Duration::from_millis(20);
    let (client, mut events) = XdsClient::start(
        options,
        config(flavor, true),
        Some(Box::new(move |_: &xdsd_client::Resource| {
            counter.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })),
    )
    .expect("started");
    client.subscribe(CLUSTER_LOAD_ASSIGNMENT, vec!["a".into(), "b".into()]);
    let got = next_news(&mut events).await;
    assert_eq!(update_names(&got).0.len(), 2);
    first.set(runtime("rt"));
    first.stop().await;
    wait_for(&mut events, |e| {
        matches!(e, Event::Disconnected { .. }).then_some(())
    })
    .await;
    wait_for(&mut events, |e| matches!(e, Event::Connected).then_some(())).await;
    // A barrier, as in reconnect_resends_nothing: a type asked after the resumed one.
    client.subscribe(RUNTIME, vec!["rt".into()]);
    let barrier = next_news(&mut events).await;
    assert_eq!(update_names(&barrier), (vec!["rt".into()], vec![]));
    assert_eq!(
        seen.load(Ordering::SeqCst),
        3,
        "nothing resent by the second"
    );
    second.set(endpoints("b", "2"));
    let next = next_news(&mut events).await;
    assert_eq!(update_names(&next), (vec![], vec!["b".into()]));
    drop(client);
    second.stop().await;
}

#[tokio::test]
async fn sotw_fails_over_to_the_next_server_and_resends_nothing() {
    fails_over_to_the_next_server_and_resends_nothing(Flavor::Sotw).await;
}

#[tokio::test]
async fn delta_fails_over_to_the_next_server_and_resends_nothing() {
    fails_over_to_the_next_server_and_resends_nothing(Flavor::Delta).await;
}

/// Federation (xRFC TP1 authorities): two xdsd servers, each the control plane of one
/// authority; each holds a decoy of the other's name. Every `xdstp://` name is taken from its
/// authority's server, a glob collection's members too; other names from the default.
async fn each_authoritys_names_come_from_its_own_server(flavor: Flavor) {
    const T: &str = "envoy.config.cluster.v3.Cluster";
    let a1 = format!("xdstp://a.test/{T}/c1");
    let b2 = format!("xdstp://b.test/{T}/in/c2");
    let b3 = format!("xdstp://b.test/{T}/in/c3");
    let a = Server::start().await;
    let b = Server::start().await;
    a.set(cluster(&a1, "from-a"));
    a.set(cluster("plain", "from-a"));
    a.set(cluster(&b2, "decoy"));
    b.set(cluster(&b2, "from-b"));
    b.set(cluster(&b3, "from-b"));
    b.set(cluster(&a1, "decoy"));
    b.set(cluster("plain", "decoy"));
    let options = Options::new(a.addr.to_string()).with_authority("b.test", [b.addr.to_string()]);
    let (client, mut events) =
        XdsClient::start(options, config(flavor, true), None).expect("started");
    client.subscribe(
        CLUSTER,
        vec![
            a1.clone(),
            "plain".into(),
            format!("xdstp://b.test/{T}/in/*"),
        ],
    );
    let mut got = std::collections::BTreeMap::new();
    while got.len() < 4 {
        if let Event::Update(u) = next_news(&mut events).await {
            for r in u.added.into_iter().chain(u.changed) {
                got.insert(r.name.clone(), r.body.value.clone());
            }
        }
    }
    let want: std::collections::BTreeMap<String, Vec<u8>> = [
        (a1.clone(), cluster_bytes(&a1, "from-a").to_vec()),
        (
            "plain".to_string(),
            cluster_bytes("plain", "from-a").to_vec(),
        ),
        (b2.clone(), cluster_bytes(&b2, "from-b").to_vec()),
        (b3.clone(), cluster_bytes(&b3, "from-b").to_vec()),
    ]
    .into();
    assert_eq!(got, want, "{flavor:?}");
    // A change on the authority's server is seen; the decoy's is not.
    a.set(cluster(&b2, "decoy-2"));
    b.set(cluster(&b2, "from-b-2"));
    let changed = wait_for(&mut events, |e| match e {
        Event::Update(u) => u
            .changed
            .first()
            .map(|r| (r.name.clone(), r.body.value.clone())),
        _ => None,
    })
    .await;
    assert_eq!(
        changed,
        (b2.clone(), cluster_bytes(&b2, "from-b-2").to_vec())
    );
    drop(client);
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn sotw_each_authoritys_names_come_from_its_own_server() {
    each_authoritys_names_come_from_its_own_server(Flavor::Sotw).await;
}

#[tokio::test]
async fn delta_each_authoritys_names_come_from_its_own_server() {
    each_authoritys_names_come_from_its_own_server(Flavor::Delta).await;
}

/// xRFC TP2 "Client Configuration": a client sends one parameter set per authority,
/// configurable per authority. Two xdsd servers, each serving variants: the default connection
/// presents the node's set (`env=prod`), `b.test`'s connection its own (`env=test`), and
/// `c.test`, which has parameters but no server of its own, a connection of its own to the
/// default server presenting `env=canary`. Each name is the variant of its authority's set, a
/// glob's members too.
async fn each_authoritys_connection_presents_its_own_dynamic_parameters(flavor: Flavor) {
    const T: &str = "envoy.config.cluster.v3.Cluster";
    let a1 = format!("xdstp://a.test/{T}/c1");
    let b2 = format!("xdstp://b.test/{T}/c2");
    let b3 = format!("xdstp://b.test/{T}/in/c3");
    let c4 = format!("xdstp://c.test/{T}/c4");
    let a = Server::start().await;
    let b = Server::start().await;
    for name in [&a1, "plain", &c4] {
        for env in ["prod", "test", "canary"] {
            a.set(variant(cluster(name, &format!("a-{env}")), env_is(env)));
        }
    }
    for name in [&b2, &b3] {
        for env in ["prod", "test", "canary"] {
            b.set(variant(cluster(name, &format!("b-{env}")), env_is(env)));
        }
    }
    let params = |env: &str| Params::from([("env".to_owned(), env.to_owned())]);
    let options = Options::new(a.addr.to_string())
        .with_authority("b.test", [b.addr.to_string()])
        .with_authority_params("b.test", params("test"))
        .with_authority_params("c.test", params("canary"));
    assert_eq!(options.server_for(&c4), a.addr.to_string());
    assert_eq!(options.authority_for(&c4), Some("c.test"));
    let mut config = config(flavor, true);
    config
        .node
        .dynamic_parameters
        .insert(CLUSTER.to_owned(), xds_context_params(params("prod")));
    let (client, mut events) = XdsClient::start(options, config, None).expect("started");
    client.subscribe(
        CLUSTER,
        vec![
            a1.clone(),
            "plain".into(),
            b2.clone(),
            format!("xdstp://b.test/{T}/in/*"),
            c4.clone(),
        ],
    );
    let mut got = std::collections::BTreeMap::new();
    while got.len() < 5 {
        if let Event::Update(u) = next_news(&mut events).await {
            for r in u.added.into_iter().chain(u.changed) {
                got.insert(r.name.clone(), r.body.value.clone());
            }
        }
    }
    let want: std::collections::BTreeMap<String, Vec<u8>> = [
        (a1.clone(), cluster_bytes(&a1, "a-prod").to_vec()),
        (
            "plain".to_string(),
            cluster_bytes("plain", "a-prod").to_vec(),
        ),
        (b2.clone(), cluster_bytes(&b2, "b-test").to_vec()),
        (b3.clone(), cluster_bytes(&b3, "b-test").to_vec()),
        (c4.clone(), cluster_bytes(&c4, "a-canary").to_vec()),
    ]
    .into();
    assert_eq!(got, want, "{flavor:?}");
    drop(client);
    a.stop().await;
    b.stop().await;
}

fn xds_context_params(params: Params) -> envoy_types::pb::xds::core::v3::ContextParams {
    envoy_types::pb::xds::core::v3::ContextParams {
        params: params.into_iter().collect(),
    }
}

#[tokio::test]
async fn sotw_each_authoritys_connection_presents_its_own_dynamic_parameters() {
    each_authoritys_connection_presents_its_own_dynamic_parameters(Flavor::Sotw).await;
}

#[tokio::test]
async fn delta_each_authoritys_connection_presents_its_own_dynamic_parameters() {
    each_authoritys_connection_presents_its_own_dynamic_parameters(Flavor::Delta).await;
}
