//! The prefix as a source, through a real etcd and a real store behind a Feed: a key is a file,
//! one revision is one commit, a bad key is rejected by name until it is fixed or deleted (the last
//! good state kept), duplicates across keys are refused, etcd's health passes through.

use etcd_client::{Txn, TxnOp};
use tokio::time::timeout;
use xdsd_core::source::{Feed, Source, SourceEvent};
use xdsd_core::store::Store;
use xdsd_etcd::EtcdSource;
use xdsd_source::Descriptors;

use xdsd_testsupport::etcd::{options, put, Etcd, DEADLINE};

const CLUSTER: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";

fn cluster_yaml(name: &str, timeout: &str) -> String {
    format!("\"@type\": {CLUSTER}\nname: {name}\nconnect_timeout: {timeout}\n")
}

fn source(etcd: &Etcd, prefix: &str) -> EtcdSource {
    EtcdSource::new(
        Descriptors::envoy().expect("descriptors"),
        options(&etcd.endpoint(), prefix),
    )
}

async fn next(source: &mut EtcdSource) -> SourceEvent {
    match timeout(DEADLINE, source.next()).await {
        Ok(Some(event)) => event,
        Ok(None) => panic!("the source ended"),
        Err(_) => panic!("no event within {DEADLINE:?}"),
    }
}

/// The cluster `name`'s origin in the store, if it is there.
fn origin(feed: &Feed, name: &str) -> Option<String> {
    let snapshot = feed.store().snapshot();
    let resource = snapshot.get(CLUSTER)?.get(name)?.clone();
    Some(resource.origin()?.to_string())
}

fn names(feed: &Feed) -> Vec<String> {
    let snapshot = feed.store().snapshot();
    match snapshot.get(CLUSTER) {
        Some(clusters) => clusters.iter().map(|r| r.name().to_string()).collect(),
        None => Vec::new(),
    }
}

/// Commits a change event, failing the test on anything else.
fn commit(feed: &Feed, source: &mut EtcdSource, event: SourceEvent) -> (Option<i64>, Vec<String>) {
    let SourceEvent::Change(change) = event else {
        panic!("expected a change, got {event:?}");
    };
    let seen = (change.revision, change.origins.clone());
    let result = feed.commit(change);
    source.committed(result.is_ok());
    result.expect("committed");
    seen
}

fn rejected(event: SourceEvent) -> String {
    match event {
        SourceEvent::Rejected(rejection) => rejection.to_string(),
        other => panic!("expected a rejection, got {other:?}"),
    }
}

#[tokio::test]
async fn a_key_is_a_file_and_one_revision_is_one_commit() {
    let etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    let two = format!(
        "{}---\n{}",
        cluster_yaml("a", "1s"),
        cluster_yaml("b", "1s")
    );
    put(&mut client, "/x/clusters.yaml", &two).await;
    let json = format!(r#"{{"@type": "{CLUSTER}", "name": "c", "connect_timeout": "2s"}}"#);
    put(&mut client, "/x/more/c.json", &json).await;
    // A key without an extension is YAML; a reserved key is not read.
    put(&mut client, "/x/d", &cluster_yaml("d", "1s")).await;
    put(&mut client, "/x/.push", "not a resource").await;

    let feed = Feed::new(Store::new());
    let mut source = source(&etcd, "/x/");
    feed.first_load(&mut source).await.expect("first load");
    assert_eq!(names(&feed), ["a", "b", "c", "d"]);
    assert_eq!(
        origin(&feed, "b").as_deref(),
        Some("/x/clusters.yaml (resource #2)")
    );
    assert_eq!(
        origin(&feed, "c").as_deref(),
        Some("/x/more/c.json (resource #1)")
    );
    let generation = feed.store().snapshot().generation();

    // One transaction of a change, an addition and a delete: one commit.
    let txn = Txn::new().and_then([
        TxnOp::put("/x/more/c.json", json.replace("2s", "3s"), None),
        TxnOp::put("/x/e.yml", cluster_yaml("e", "1s"), None),
        TxnOp::delete("/x/d", None),
    ]);
    let written = client.txn(txn).await.expect("txn");
    let revision = written.header().expect("a header").revision();
    let event = next(&mut source).await;
    let (at, origins) = commit(&feed, &mut source, event);
    assert_eq!(at, Some(revision));
    assert_eq!(origins, ["/x/more/c.json", "/x/e.yml", "/x/d"]);
    assert_eq!(names(&feed), ["a", "b", "c", "e"]);
    assert_eq!(feed.store().snapshot().generation(), generation + 1);
}

#[tokio::test]
async fn a_bad_key_is_rejected_by_name_until_fixed_and_the_last_good_state_is_kept() {
    let etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    put(&mut client, "/x/a.yaml", &cluster_yaml("a", "1s")).await;
    let feed = Feed::new(Store::new());
    let mut source = source(&etcd, "/x/");
    feed.first_load(&mut source).await.expect("first load");
    let good = feed.store().snapshot().generation();

    put(&mut client, "/x/bad.yaml", &cluster_yaml("bad", "soon")).await;
    let message = rejected(next(&mut source).await);
    assert!(message.contains("/x/bad.yaml (resource #1"), "{message}");
    assert!(message.contains("connect_timeout"), "{message}");

    // A good change elsewhere is still refused while the bad key is there.
    put(&mut client, "/x/b.yaml", &cluster_yaml("b", "1s")).await;
    let message = rejected(next(&mut source).await);
    assert!(message.contains("/x/bad.yaml"), "{message}");
    put(&mut client, "/x/worse.json", "{not json").await;
    let message = rejected(next(&mut source).await);
    assert!(message.contains("/x/bad.yaml"), "{message}");
    assert!(
        message.contains("/x/worse.json: malformed JSON"),
        "{message}"
    );
    assert_eq!(feed.store().snapshot().generation(), good);
    assert_eq!(names(&feed), ["a"]);

    // Fixed and deleted: everything the prefix holds is committed.
    put(&mut client, "/x/bad.yaml", &cluster_yaml("bad", "1s")).await;
    rejected(next(&mut source).await);
    client.delete("/x/worse.json", None).await.expect("delete");
    let event = next(&mut source).await;
    commit(&feed, &mut source, event);
    assert_eq!(names(&feed), ["a", "b", "bad"]);
}

#[tokio::test]
async fn a_key_that_is_not_a_resource_is_rejected_by_name() {
    let etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    put(&mut client, "/x/a.yaml", &cluster_yaml("a", "1s")).await;
    put(&mut client, "/x/notes.txt", "just some words").await;
    let feed = Feed::new(Store::new());
    let mut source = source(&etcd, "/x/");
    let error = feed
        .first_load(&mut source)
        .await
        .expect_err("a key that is not a resource");
    let message = error.to_string();
    assert!(message.contains("/x/notes.txt"), "{message}");
    assert!(names(&feed).is_empty());
}

#[tokio::test]
async fn the_same_name_in_two_keys_is_refused_naming_both() {
    let etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    put(&mut client, "/x/a.yaml", &cluster_yaml("a", "1s")).await;
    let feed = Feed::new(Store::new());
    let mut source = source(&etcd, "/x/");
    feed.first_load(&mut source).await.expect("first load");

    put(&mut client, "/x/copy.yaml", &cluster_yaml("a", "2s")).await;
    let message = rejected(next(&mut source).await);
    assert!(
        message.contains("duplicate resource")
            && message.contains("/x/a.yaml (resource #1)")
            && message.contains("/x/copy.yaml (resource #1)"),
        "{message}"
    );
    assert_eq!(
        origin(&feed, "a").as_deref(),
        Some("/x/a.yaml (resource #1)")
    );
}

#[tokio::test]
async fn etcd_lost_and_back_is_the_source_s_health_and_a_change_meanwhile_is_committed() {
    let mut etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    put(&mut client, "/x/a.yaml", &cluster_yaml("a", "1s")).await;
    let feed = Feed::new(Store::new());
    let mut source = source(&etcd, "/x/");
    feed.first_load(&mut source).await.expect("first load");

    etcd.kill().await;
    match next(&mut source).await {
        SourceEvent::Health { healthy, reason } => {
            assert!(!healthy);
            assert!(!reason.is_empty());
        }
        other => panic!("expected etcd lost, got {other:?}"),
    }
    etcd.restart().await;
    let mut client = etcd.client().await;
    put(&mut client, "/x/b.yaml", &cluster_yaml("b", "1s")).await;
    match next(&mut source).await {
        SourceEvent::Health { healthy, .. } => assert!(healthy),
        other => panic!("expected etcd back, got {other:?}"),
    }
    let event = next(&mut source).await;
    commit(&feed, &mut source, event);
    assert_eq!(names(&feed), ["a", "b"]);
}

#[tokio::test]
async fn a_compaction_while_etcd_was_out_of_reach_is_read_again_and_committed_as_one_change() {
    let mut etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    put(&mut client, "/x/a.yaml", &cluster_yaml("a", "1s")).await;
    put(&mut client, "/x/b.yaml", &cluster_yaml("b", "1s")).await;
    let feed = Feed::new(Store::new());
    let mut source = source(&etcd, "/x/");
    feed.first_load(&mut source).await.expect("first load");

    etcd.kill().await;
    assert!(matches!(
        next(&mut source).await,
        SourceEvent::Health { healthy: false, .. }
    ));
    // Changes and a compaction past them, where the source cannot see them.
    let elsewhere = etcd.restart_elsewhere().await;
    let mut other = xdsd_testsupport::etcd::client_of(&elsewhere).await;
    put(&mut other, "/x/a.yaml", &cluster_yaml("a", "2s")).await;
    other.delete("/x/b.yaml", None).await.expect("delete");
    let latest = put(&mut other, "/x/c.yaml", &cluster_yaml("c", "1s")).await;
    other
        .compact(
            latest,
            Some(etcd_client::CompactionOptions::new().with_physical()),
        )
        .await
        .expect("compact");
    drop(other);
    etcd.kill().await;
    etcd.restart().await;

    assert!(matches!(
        next(&mut source).await,
        SourceEvent::Health { healthy: true, .. }
    ));
    let generation = feed.store().snapshot().generation();
    let event = next(&mut source).await;
    let (at, origins) = commit(&feed, &mut source, event);
    assert_eq!(at, Some(latest));
    assert_eq!(origins, ["/x/ (read again)"]);
    assert_eq!(names(&feed), ["a", "c"]);
    assert_eq!(feed.store().snapshot().generation(), generation + 1);
}
