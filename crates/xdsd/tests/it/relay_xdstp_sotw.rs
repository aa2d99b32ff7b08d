//! Glob collections (xRFC TP1) through `xdsd relay` where SotW is spoken on one side or both: a
//! SotW downstream client holding a glob, and a relay whose upstream is spoken in SotW
//! (`--upstream-protocol sotw`). Every process on 127.0.0.1; the downstream client is
//! `xdsd-client` over tonic. Members added, changed and removed upstream reach the client; a
//! member below the glob's path or with other context parameters does not; an empty collection
//! is answered once the upstream said so (over a delta upstream at once, never by
//! `--upstream-wait` running out; over a SotW upstream as SotW allows, see below).

use std::collections::BTreeSet;

use envoy_types::pb::envoy::config::core::v3::Node;
use xdsd_client::{types::CLUSTER, Config, Event, Events, Flavor, Options, XdsClient};

use crate::relay_xdstp::relayed;
use crate::support::DEADLINE;

const IN: &str = "xdstp://xdsd.test/envoy.config.cluster.v3.Cluster/in";

fn member(id: &str) -> String {
    format!("{IN}/{id}")
}

fn cluster(id: &str, timeout: &str) -> String {
    format!(
        "\"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\nname: {}\nconnect_timeout: {timeout}\n",
        member(id)
    )
}

/// The next event for which `pick` gives something, the others skipped.
async fn wait_for<T>(
    events: &mut Events,
    what: &str,
    mut pick: impl FnMut(Event) -> Option<T>,
) -> T {
    let found = tokio::time::timeout(DEADLINE, async {
        while let Some(event) = events.next().await {
            if let Some(found) = pick(event) {
                return Some(found);
            }
        }
        None
    })
    .await;
    match found {
        Ok(Some(found)) => found,
        Ok(None) => panic!("the client stopped before {what}"),
        Err(_) => panic!("no {what} within {DEADLINE:?}"),
    }
}

/// The names an update adds (`changed` false) or changes (`changed` true), if any.
fn updated(event: Event, changed: bool) -> Option<BTreeSet<String>> {
    let Event::Update(u) = event else {
        return None;
    };
    let list = if changed { u.changed } else { u.added };
    let names: BTreeSet<String> = list.into_iter().map(|r| r.name).collect();
    (!names.is_empty()).then_some(names)
}

/// A glob collection of clusters through a relay, the downstream client speaking `downstream`,
/// the relay's upstream `upstream` (`delta` or `sotw`).
async fn a_glob_collection_through_a_relay(downstream: Flavor, upstream: &str) {
    // Over a SotW upstream, the relay's own client learns that an empty collection of a
    // full-state type does not exist as any SotW client does (the protocol's "Knowing When a
    // Requested Resource Does Not Exist"): from a response that surely follows its request, or
    // at its does-not-exist timeout, which is --upstream-wait. Over delta, at once.
    let upstream_wait = if upstream == "sotw" { "3s" } else { "60s" };
    let (dir, xdsd, relay) = relayed(
        &[
            ("c1.yaml", &cluster("c1", "1s")),
            ("c2.yaml", &cluster("c2", "1s")),
            // Not members: below the path, other context parameters.
            ("c3.yaml", &cluster("sub/c3", "1s")),
            ("c5.yaml", &cluster("c5?k=v", "1s")),
        ],
        &[
            "--upstream-wait",
            upstream_wait,
            "--upstream-protocol",
            upstream,
            "--prefetch",
            "none",
        ],
    )
    .await;
    let mut config = Config::new(Node {
        id: "through".into(),
        ..Default::default()
    });
    config.flavor = downstream;
    // Only a server's answer says a name does not exist here, never the client's own timer.
    config.does_not_exist_timeout = std::time::Duration::from_secs(600);
    let (client, mut events) =
        XdsClient::start(Options::new(relay.url()), config, None).expect("started");
    let glob = member("*");
    client.subscribe(CLUSTER, vec![glob.clone()]);
    let case = format!("{downstream:?} downstream, {upstream} upstream");

    // The members, from the upstream's answer.
    let first = wait_for(&mut events, "the members", |e| updated(e, false)).await;
    assert_eq!(
        first,
        [member("c1"), member("c2")].into(),
        "{case}: exactly the glob's members"
    );
    assert!(
        relay
            .log
            .lines()
            .iter()
            .any(|l| l.contains("subscribing upstream") && l.contains(&glob)),
        "{case}: the glob is subscribed upstream as a glob"
    );

    // A member added upstream; one changed; one removed.
    let mark = xdsd.log.mark();
    dir.write("c4.yaml", &cluster("c4", "1s"));
    xdsd.expect_loaded_since(mark).await;
    let added = wait_for(&mut events, "the member added", |e| updated(e, false)).await;
    assert_eq!(added, [member("c4")].into(), "{case}");
    let mark = xdsd.log.mark();
    dir.write("c2.yaml", &cluster("c2", "7s"));
    xdsd.expect_loaded_since(mark).await;
    let changed = wait_for(&mut events, "the member changed", |e| updated(e, true)).await;
    assert_eq!(changed, [member("c2")].into(), "{case}");
    let mark = xdsd.log.mark();
    dir.remove("c1.yaml");
    xdsd.expect_loaded_since(mark).await;
    let removed = wait_for(&mut events, "the member removed", |e| match e {
        Event::Removed { names, .. } => Some(names),
        _ => None,
    })
    .await;
    assert_eq!(removed, [member("c1")], "{case}");

    // An empty collection: the client is told it does not exist once the upstream said so. A
    // delta client is told by the glob's name in `removed_resources`; a SotW client by a
    // full-state response without a member that surely follows its request, that is one that
    // comes after a response that came after the request (the protocol: a response may answer
    // an earlier request). Members added to the first collection, one at a time, make them.
    let empty = member("none/*");
    client.subscribe(CLUSTER, vec![empty.clone()]);
    let none = member("none/");
    let mut added = vec![member("c2"), member("c4")];
    let missing = loop {
        assert!(
            added.len() < 8,
            "{case}: the empty collection is never answered"
        );
        let id = format!("c{}", added.len() + 5);
        let mark = xdsd.log.mark();
        dir.write(&format!("{id}.yaml"), &cluster(&id, "1s"));
        xdsd.expect_loaded_since(mark).await;
        added.push(member(&id));
        let answer = wait_for(&mut events, "the empty collection's answer", |e| match e {
            Event::DoesNotExist { name, .. } => Some(Some(name)),
            Event::Update(u) if u.added.iter().any(|r| r.name.starts_with(&none)) => {
                panic!("{case}: an empty collection has no member: {u:?}")
            }
            Event::Update(u) if u.added.iter().any(|r| r.name == member(&id)) => Some(None),
            _ => None,
        })
        .await;
        if let Some(name) = answer {
            break name;
        }
    };
    assert_eq!(missing, empty, "{case}");
    if upstream == "delta" {
        assert_eq!(
            relay.metric("xdsd_relay_pending_expired_total").await,
            Some(0.0),
            "{case}: nothing waited out --upstream-wait"
        );
    }

    // A second client of the relay is answered from its cache, members as they are now.
    let mut config = Config::new(Node {
        id: "second".into(),
        ..Default::default()
    });
    config.flavor = downstream;
    let (second, mut second_events) =
        XdsClient::start(Options::new(relay.url()), config, None).expect("started");
    second.subscribe(CLUSTER, vec![glob]);
    // (The last member added may reach the relay after the first client's answer: it comes in
    // the first response or the next.)
    let want: BTreeSet<String> = added.into_iter().collect();
    let mut now = BTreeSet::new();
    while now != want {
        let more = wait_for(&mut second_events, "the members", |e| updated(e, false)).await;
        assert!(more.is_subset(&want), "{case}: {more:?} not of {want:?}");
        now.extend(more);
    }
    drop((client, second));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sotw_client_of_a_relay_follows_a_glob_collections_members_added_changed_and_removed() {
    a_glob_collection_through_a_relay(Flavor::Sotw, "delta").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_whose_upstream_speaks_sotw_serves_a_delta_client_a_glob_collection() {
    a_glob_collection_through_a_relay(Flavor::Delta, "sotw").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sotw_client_of_a_relay_whose_upstream_speaks_sotw_follows_a_glob_collection() {
    a_glob_collection_through_a_relay(Flavor::Sotw, "sotw").await;
}
