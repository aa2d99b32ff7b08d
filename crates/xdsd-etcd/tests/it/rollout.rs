//! The rollout's shared record at `<prefix>.rollout`, through a real etcd: a record is written
//! only when it goes further than the one there (a stale replica never overwrites a newer
//! decision); a replica starting reads the stable state at the record's revision, and starts as
//! without a record when etcd compacted that revision away.

use xdsd_core::rollout::{Record, RecordState};
use xdsd_core::source::Update;
use xdsd_etcd::rollout::{resume, write};
use xdsd_etcd::{Etcd as Client, EtcdSource};
use xdsd_source::Descriptors;

use xdsd_testsupport::etcd::{options, put, Etcd};

const CLUSTER: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";

/// The record at `/p/.rollout` as etcd has it.
async fn stored(etcd: &Etcd) -> Option<Record> {
    let mut client = etcd.client().await;
    let response = client.get("/p/.rollout", None).await.expect("get");
    response
        .kvs()
        .first()
        .map(|kv| Record::parse(kv.value()).expect("a record"))
}

#[tokio::test]
async fn a_record_is_written_only_when_it_goes_further_than_the_one_in_etcd() {
    let etcd = Etcd::start().await;
    let client = Client::connect(&options(&etcd.endpoint(), "/p/"))
        .await
        .expect("connect");
    let promoted = Record::new(5, 5, RecordState::Promoted);
    assert!(write(&client, &promoted).await.expect("write"), "none yet");
    assert_eq!(stored(&etcd).await.as_ref(), Some(&promoted));

    // A stale replica's soak of 5, another replica's halt of 5: the first decision stays.
    for stale in [
        Record::new(3, 5, RecordState::Soaking),
        Record::new(3, 5, RecordState::Halted),
        Record::new(3, 4, RecordState::Aborted),
    ] {
        assert!(!write(&client, &stale).await.expect("write"), "{stale:?}");
        assert_eq!(stored(&etcd).await.as_ref(), Some(&promoted));
    }
    // A later candidate, then its abort, replace it.
    let next = Record::new(5, 9, RecordState::Soaking);
    assert!(write(&client, &next).await.expect("write"));
    let aborted = Record::new(5, 9, RecordState::Aborted);
    assert!(write(&client, &aborted).await.expect("write"));
    assert_eq!(stored(&etcd).await.as_ref(), Some(&aborted));

    // What does not read as a record is replaced by one.
    let mut raw = etcd.client().await;
    put(&mut raw, "/p/.rollout", "not a record").await;
    assert!(write(&client, &next).await.expect("write"));
    assert_eq!(stored(&etcd).await.as_ref(), Some(&next));
}

#[tokio::test]
async fn a_replica_starting_reads_the_stable_state_at_the_record_s_revision_unless_compacted() {
    let etcd = Etcd::start().await;
    let mut raw = etcd.client().await;
    let cluster =
        |timeout: &str| format!("\"@type\": {CLUSTER}\nname: c\nconnect_timeout: {timeout}\n");
    let stable = put(&mut raw, "/p/c.yaml", &cluster("1s")).await;
    let candidate = put(&mut raw, "/p/c.yaml", &cluster("2s")).await;
    let options = options(&etcd.endpoint(), "/p/");
    let client = Client::connect(&options).await.expect("connect");
    let source = EtcdSource::new(Descriptors::envoy().expect("descriptors"), options);

    let (none, _) = resume(&client, &source).await.expect("resume");
    assert!(none.is_none(), "no record: start as usual");

    let record = Record::new(stable, candidate, RecordState::Soaking);
    assert!(write(&client, &record).await.expect("write"));
    let (found, after) = resume(&client, &source).await.expect("resume");
    let found = found.expect("the record is taken up");
    assert_eq!(found.record, record);
    assert!(
        after > candidate,
        "records are followed from after the read"
    );
    assert_eq!(found.record.load_revision(), candidate);
    // The stable state is the prefix at `stable` (the first value), not the current one.
    let values = |update: Update| match update {
        Update::All(resources) => resources.into_iter().map(|r| r.value).collect::<Vec<_>>(),
        other => panic!("a whole state: {other:?}"),
    };
    let stable_values: Vec<_> = found.stable.iter().map(|r| r.value.clone()).collect();
    assert_eq!(stable_values.len(), 1);
    let at_stable = source.read_at(&client, stable).await.expect("read at");
    assert_eq!(values(at_stable.update), stable_values);
    let at_candidate = source.read_at(&client, candidate).await.expect("read at");
    assert_ne!(values(at_candidate.update), stable_values);

    // etcd compacted the stable revision away: start as without a record.
    raw.compact(candidate, None).await.expect("compact");
    let (gone, _) = resume(&client, &source).await.expect("resume");
    assert!(
        gone.is_none(),
        "compacted: the current state is the stable one"
    );
}

/// A replica asked to read the record again (a client holds a candidate another replica may have
/// promoted) reads it at once, not waiting for its watch: here the promotion was written before
/// the replica's watch starts, so only the read can bring it. Many asks at once make one read
/// (two at most: one may be under way when the others come).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_asked_to_read_the_record_again_adopts_it_at_once_one_read_for_many_asks() {
    use std::sync::Arc;
    use std::time::Duration;
    use xdsd_core::rollout::{Cohort, GateConfig, Rollout, Selector, SharedState};
    use xdsd_core::store::{ResourceInput, Store};
    use xdsd_etcd::rollout::SharedRollout;

    let etcd = Etcd::start().await;
    let client = Client::connect(&options(&etcd.endpoint(), "/p/"))
        .await
        .expect("connect");
    let cohort = Cohort::new(vec![Selector::parse("cluster=canary").unwrap()]);
    let config = GateConfig::default().soak(Duration::from_secs(3600));
    let rollout = Rollout::new(cohort, config, Store::new());
    let input = |c: &'static [u8]| ResourceInput::new(CLUSTER, "c", bytes::Bytes::from_static(c));
    rollout.canary_store().replace_all([input(b"1")]).unwrap();
    rollout.start_at(Some(10)).unwrap();
    rollout
        .commit_at(Some(11), |s| s.replace_all([input(b"2")]))
        .unwrap();
    // Another replica promoted 11; this one's watch starts after that.
    assert!(write(&client, &Record::new(10, 11, RecordState::Promoted))
        .await
        .expect("write"));
    let mut raw = etcd.client().await;
    let now = raw
        .get("/p/.rollout", None)
        .await
        .expect("get")
        .header()
        .expect("a header")
        .revision();
    let shared = Arc::new(SharedRollout::start(client, rollout.clone(), now));
    rollout.share(shared.clone());
    assert_eq!(rollout.status_json()["promotions"], 0, "not heard of yet");
    for _ in 0..50 {
        shared.refresh();
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while rollout.status_json()["promotions"] != 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never promoted: {:#}",
            rollout.status_json()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let reads = shared.reads_on_ask();
    assert!((1..=2).contains(&reads), "{reads} reads for 50 asks");
}
