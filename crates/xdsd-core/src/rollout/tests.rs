//! One test per rule of the rollout gate, time passed in.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;

const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
const LDS: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";

fn gate(min: usize, soak_secs: u64) -> Gate {
    Gate::new(
        GateConfig::default()
            .min_canaries(min)
            .soak(Duration::from_secs(soak_secs)),
    )
}

fn secs(t0: Instant, s: u64) -> Instant {
    t0 + Duration::from_secs(s)
}

fn touched(types: &[&str]) -> Vec<String> {
    types.iter().map(|t| t.to_string()).collect()
}

#[test]
fn a_change_is_promoted_once_the_soak_passed_and_a_canary_acked_every_touched_type() {
    let t0 = Instant::now();
    let mut g = gate(1, 60);
    g.connected(1, "canary-1");
    assert!(g.propose(t0, 5, touched(&[CDS, LDS])).is_empty());
    assert_eq!(g.state(t0).name(), "soaking");
    assert!(g.ack(secs(t0, 1), 1, CDS, 5).is_empty());
    assert!(g.ack(secs(t0, 1), 1, LDS, 5).is_empty(), "soak not over");
    assert!(g.tick(secs(t0, 59)).is_empty());
    assert_eq!(g.tick(secs(t0, 60)), [Action::Promote { generation: 5 }]);
    assert_eq!(g.state(secs(t0, 60)), State::Idle);
    assert_eq!(g.promoted(), 5);
}

#[test]
fn a_soak_over_without_enough_acks_waits_for_canaries() {
    let t0 = Instant::now();
    let mut g = gate(1, 10);
    g.connected(1, "canary-1");
    g.propose(t0, 2, touched(&[CDS, LDS]));
    g.ack(secs(t0, 1), 1, CDS, 2);
    assert!(g.tick(secs(t0, 11)).is_empty(), "LDS not ACKed");
    assert_eq!(g.state(secs(t0, 11)).name(), "waiting for canaries");
    assert_eq!(
        g.ack(secs(t0, 12), 1, LDS, 2),
        [Action::Promote { generation: 2 }],
        "promoted by the ACK that completes it"
    );
}

#[test]
fn an_ack_of_an_older_generation_does_not_count() {
    let t0 = Instant::now();
    let mut g = gate(1, 0);
    g.connected(1, "canary-1");
    g.propose(t0, 7, touched(&[CDS]));
    assert!(g.ack(t0, 1, CDS, 6).is_empty());
    assert_eq!(g.ack(t0, 1, CDS, 8), [Action::Promote { generation: 7 }]);
}

#[test]
fn canary_min_counts_distinct_canaries_that_acked_everything() {
    let t0 = Instant::now();
    let mut g = gate(2, 0);
    g.connected(1, "canary-1");
    g.connected(2, "canary-2");
    g.propose(t0, 3, touched(&[CDS]));
    assert!(g.ack(t0, 1, CDS, 3).is_empty());
    assert!(
        g.ack(t0, 1, CDS, 3).is_empty(),
        "the same canary twice is one"
    );
    assert_eq!(g.ack(t0, 2, CDS, 3), [Action::Promote { generation: 3 }]);
}

#[test]
fn a_nack_of_the_candidate_halts_and_rolls_back_the_canaries() {
    let t0 = Instant::now();
    let mut g = gate(1, 60);
    g.connected(1, "canary-1");
    g.propose(t0, 4, touched(&[CDS]));
    let detail = NackDetail::new(CDS, "abc", "port 70000 out of range")
        .with_origins(vec!["clusters.yaml".into()]);
    assert_eq!(g.nack(1, 4, detail), [Action::RollBack]);
    let State::Halted(halt) = g.state(secs(t0, 1)) else {
        panic!("halted");
    };
    assert_eq!(halt.node, "canary-1");
    assert_eq!(halt.type_url, CDS);
    assert_eq!(halt.version, "abc");
    assert_eq!(halt.message, "port 70000 out of range");
    assert_eq!(halt.origins, ["clusters.yaml"]);
    // Never promoted, whatever time passes or ACKs come.
    assert!(g.tick(secs(t0, 3600)).is_empty());
    assert!(g.ack(secs(t0, 3600), 1, CDS, 4).is_empty());
    assert_eq!(g.promoted(), 0);
}

#[test]
fn a_nack_of_an_older_generation_does_not_halt() {
    let t0 = Instant::now();
    let mut g = gate(1, 0);
    g.connected(1, "canary-1");
    g.propose(t0, 4, touched(&[CDS]));
    assert!(g
        .nack(1, 3, NackDetail::new(CDS, "old", "stale"))
        .is_empty());
    assert_eq!(g.state(t0).name(), "waiting for canaries");
}

#[test]
fn the_next_change_after_a_halt_starts_a_new_rollout() {
    let t0 = Instant::now();
    let mut g = gate(1, 5);
    g.connected(1, "canary-1");
    g.propose(t0, 4, touched(&[CDS]));
    g.nack(1, 4, NackDetail::new(CDS, "bad", "no"));
    // The rollback itself is the canary state's generation 5; the fix is 6.
    assert!(g.propose(secs(t0, 10), 6, touched(&[CDS])).is_empty());
    assert_eq!(g.state(secs(t0, 10)).name(), "soaking");
    g.ack(secs(t0, 11), 1, CDS, 6);
    assert_eq!(g.tick(secs(t0, 15)), [Action::Promote { generation: 6 }]);
}

#[test]
fn a_change_during_a_rollout_replaces_the_candidate_and_restarts_the_soak() {
    let t0 = Instant::now();
    let mut g = gate(1, 10);
    g.connected(1, "canary-1");
    g.propose(t0, 2, touched(&[CDS]));
    g.ack(secs(t0, 1), 1, CDS, 2);
    g.propose(secs(t0, 8), 3, touched(&[LDS]));
    assert!(g.tick(secs(t0, 10)).is_empty(), "the soak restarted at 8 s");
    // Both types must be ACKed at the new generation: what the first touched is still new.
    g.ack(secs(t0, 9), 1, LDS, 3);
    assert!(g.tick(secs(t0, 18)).is_empty(), "CDS not ACKed at 3");
    assert_eq!(
        g.ack(secs(t0, 19), 1, CDS, 3),
        [Action::Promote { generation: 3 }]
    );
}

#[test]
fn a_canary_that_disconnects_no_longer_counts() {
    let t0 = Instant::now();
    let mut g = gate(1, 10);
    g.connected(1, "canary-1");
    g.propose(t0, 2, touched(&[CDS]));
    g.ack(secs(t0, 1), 1, CDS, 2);
    assert!(g.disconnected(secs(t0, 2), 1).is_empty());
    assert!(g.tick(secs(t0, 11)).is_empty());
    assert_eq!(g.state(secs(t0, 11)).name(), "waiting for canaries");
    // Another canary comes and ACKs.
    g.connected(2, "canary-2");
    assert_eq!(
        g.ack(secs(t0, 12), 2, CDS, 2),
        [Action::Promote { generation: 2 }]
    );
}

#[test]
fn promote_promotes_now_and_abort_rolls_back_and_forgets_a_halt() {
    let t0 = Instant::now();
    let mut g = gate(1, 60);
    g.propose(t0, 2, touched(&[CDS]));
    assert_eq!(g.promote(), [Action::Promote { generation: 2 }]);
    assert_eq!(g.state(t0), State::Idle);
    assert!(g.promote().is_empty(), "nothing to promote");

    g.propose(t0, 3, touched(&[CDS]));
    assert_eq!(g.abort(), [Action::RollBack]);
    assert_eq!(g.state(t0), State::Idle);

    g.connected(1, "canary-1");
    g.propose(t0, 5, touched(&[CDS]));
    g.nack(1, 5, NackDetail::new(CDS, "v", "no"));
    assert_eq!(g.state(t0).name(), "halted");
    assert!(g.abort().is_empty(), "already rolled back");
    assert_eq!(g.state(t0), State::Idle);
}

#[test]
fn an_ack_of_a_type_the_change_did_not_touch_does_not_count() {
    let t0 = Instant::now();
    let mut g = gate(1, 0);
    g.connected(1, "canary-1");
    g.propose(t0, 2, touched(&[CDS]));
    assert!(g.ack(t0, 1, LDS, 2).is_empty());
    assert_eq!(g.state(t0).name(), "waiting for canaries");
}

#[test]
fn a_client_outside_the_cohort_neither_promotes_nor_halts() {
    let t0 = Instant::now();
    let mut g = gate(1, 0);
    g.propose(t0, 2, touched(&[CDS]));
    assert!(g.ack(t0, 9, CDS, 2).is_empty());
    assert!(g.nack(9, 2, NackDetail::new(CDS, "v", "no")).is_empty());
    assert_eq!(g.state(t0).name(), "waiting for canaries");
}

fn node(id: &str, cluster: &str, metadata: &[(&str, &str)]) -> ClientNode {
    use envoy_types::pb::envoy::config::core::v3::Node;
    use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
    let fields = metadata
        .iter()
        .map(|(k, v)| {
            let value = Value {
                kind: Some(Kind::StringValue(v.to_string())),
            };
            (k.to_string(), value)
        })
        .collect();
    let node = Node {
        id: id.into(),
        cluster: cluster.into(),
        metadata: Some(Struct { fields }),
        ..Default::default()
    };
    ClientNode::from_node(&node).expect("a node")
}

#[test]
fn selectors_pick_by_cluster_node_glob_metadata_or_a_stable_percentage() {
    let parse = |t: &str| Selector::parse(t).expect(t);
    let canary = node("edge-7", "canary", &[("zone", "a")]);
    let prod = node("core-1", "prod", &[("zone", "b")]);
    assert!(parse("cluster=canary").matches(&canary));
    assert!(!parse("cluster=canary").matches(&prod));
    assert!(parse("node=edge-*").matches(&canary));
    assert!(!parse("node=edge-*").matches(&prod));
    assert!(parse("metadata.zone=a").matches(&canary));
    assert!(!parse("metadata.zone=a").matches(&prod));
    assert!(parse("100%").matches(&prod));
    assert!(!parse("0%").matches(&prod));
    // Stable and roughly proportional: the same answer every time, ~10 % of 1,000 ids.
    let ten = parse("10%");
    let picked = (0..1000)
        .filter(|i| ten.matches(&node(&format!("n{i}"), "c", &[])))
        .count();
    assert!((50..150).contains(&picked), "{picked} of 1000");
    for i in 0..50 {
        let n = node(&format!("n{i}"), "c", &[]);
        assert_eq!(ten.matches(&n), ten.matches(&n.clone()));
    }
    for bad in ["", "cluster=", "zone=a", "metadata.=a", "101%", "x%"] {
        assert!(Selector::parse(bad).is_err(), "{bad:?}");
    }
    assert_eq!(parse("metadata.zone=a").to_string(), "metadata.zone=a");
    let cohort = Cohort::new(vec![parse("cluster=canary"), parse("node=core-*")]);
    assert!(cohort.contains(&canary) && cohort.contains(&prod));
    assert!(!Cohort::default().contains(&canary));
}

#[test]
fn what_a_client_sends_is_kept_bounded() {
    let t0 = Instant::now();
    let mut g = gate(1, 60);
    g.connected(1, "n".repeat(100_000));
    g.propose(t0, 2, touched(&[CDS]));
    g.nack(
        1,
        2,
        NackDetail::new(CDS, "v".repeat(100_000), "é".repeat(100_000)),
    );
    let State::Halted(halt) = g.state(t0) else {
        panic!("halted");
    };
    assert!(halt.node.len() <= MAX_NODE_BYTES + 3, "{}", halt.node.len());
    assert!(halt.version.len() <= MAX_NODE_BYTES + 3);
    assert!(halt.message.len() <= MAX_MESSAGE_BYTES + 3);
    assert!(halt.message.ends_with('…'));
}

#[test]
fn the_first_resources_after_an_empty_start_are_promoted_at_once() {
    let t0 = Instant::now();
    // No canary connected, a soak of an hour: a proposal would wait; the first resources do not.
    let mut g = gate(1, 3600);
    assert_eq!(g.propose_first(1), [Action::Promote { generation: 1 }]);
    assert_eq!(g.state(t0), State::Idle);
    assert_eq!(g.promoted(), 1);
    assert!(g.tick(secs(t0, 7200)).is_empty(), "nothing left to promote");
}

fn halt_from(node: &str, message: &str) -> Box<Halt> {
    Box::new(Halt {
        generation: 0,
        node: node.into(),
        type_url: CDS.into(),
        version: "v9".into(),
        message: message.into(),
        origins: vec!["/xdsd/c.yaml".into()],
    })
}

#[test]
fn a_promotion_decided_elsewhere_promotes_here() {
    let t0 = Instant::now();
    let mut g = gate(1, 3600);
    g.connected(1, "canary-1");
    assert!(g.propose_at(t0, 4, Some(40), touched(&[CDS])).is_empty());
    assert_eq!(g.candidate_revision(), Some(40));
    assert_eq!(
        g.decided_elsewhere(40, Decision::Promoted),
        [Action::Promote { generation: 4 }],
        "no ACK here, soak not over: the other replica's promotion is enough"
    );
    assert_eq!(g.state(t0), State::Idle);
    assert_eq!(g.promoted(), 4);
}

#[test]
fn a_halt_decided_elsewhere_rolls_the_canaries_back_with_its_reason() {
    let t0 = Instant::now();
    let mut g = gate(1, 3600);
    g.connected(1, "canary-1");
    g.propose_at(t0, 4, Some(40), touched(&[CDS]));
    assert_eq!(
        g.decided_elsewhere(
            40,
            Decision::Halted(halt_from("edge-a", "port out of range"))
        ),
        [Action::RollBack]
    );
    let State::Halted(halt) = g.state(t0) else {
        panic!("halted: {:?}", g.state(t0))
    };
    assert_eq!(halt.node, "edge-a");
    assert_eq!(halt.message, "port out of range");
    assert_eq!(halt.origins, ["/xdsd/c.yaml"]);
    assert_eq!(halt.generation, 4, "the local candidate's generation");
    assert_eq!(g.halted_revision(), Some(40));
    assert_eq!(g.candidate(), None);
    // An abort elsewhere clears the halt here too.
    assert!(g.decided_elsewhere(40, Decision::Aborted).is_empty());
    assert_eq!(g.state(t0), State::Idle);
}

#[test]
fn a_decision_about_a_revision_not_seen_yet_applies_when_its_change_arrives() {
    let t0 = Instant::now();
    let mut g = gate(1, 3600);
    g.propose_at(t0, 2, Some(20), touched(&[CDS]));
    // The other replica already saw revisions 30 and 31 and promoted 31.
    assert!(g.decided_elsewhere(31, Decision::Promoted).is_empty());
    assert_eq!(g.state(t0).name(), "soaking", "20 is not 31");
    assert!(
        g.propose_at(t0, 3, Some(30), touched(&[CDS])).is_empty(),
        "30 is not 31 either"
    );
    assert_eq!(
        g.propose_at(t0, 4, Some(31), touched(&[CDS])),
        [Action::Promote { generation: 4 }],
        "promoted as soon as 31 arrives"
    );
    // Two decisions ahead, a halt then a promotion: each applies when its change arrives.
    g.decided_elsewhere(50, Decision::Halted(halt_from("edge-a", "bad")));
    g.decided_elsewhere(51, Decision::Promoted);
    assert_eq!(
        g.propose_at(t0, 5, Some(50), touched(&[CDS])),
        [Action::RollBack]
    );
    assert_eq!(g.state(t0).name(), "halted");
    assert_eq!(
        g.propose_at(t0, 6, Some(51), touched(&[CDS])),
        [Action::Promote { generation: 6 }]
    );
    // What is kept is bounded.
    for r in 100..100 + 2 * MAX_PENDING as i64 {
        g.decided_elsewhere(r, Decision::Promoted);
    }
    assert_eq!(g.pending.len(), MAX_PENDING);
}

#[test]
fn a_decision_about_a_revision_this_gate_is_past_is_ignored() {
    let t0 = Instant::now();
    let mut g = gate(1, 3600);
    g.propose_at(t0, 2, Some(20), touched(&[CDS]));
    g.propose_at(t0, 3, Some(30), touched(&[CDS]));
    assert!(
        g.decided_elsewhere(20, Decision::Promoted).is_empty(),
        "20 was replaced by 30 here"
    );
    assert_eq!(g.state(t0).name(), "soaking");
    // A pending decision passed over by a later change is dropped.
    g.decided_elsewhere(35, Decision::Promoted);
    g.propose_at(t0, 4, Some(40), touched(&[CDS]));
    assert!(g.propose_at(t0, 5, Some(45), touched(&[CDS])).is_empty());
    assert_eq!(g.state(t0).name(), "soaking");
    // A soak record is no decision.
    let soak = Record::new(10, 45, RecordState::Soaking);
    assert_eq!(soak.decision(), None);
}

#[test]
fn a_record_replaces_another_only_about_a_later_candidate_or_a_further_state() {
    let soaking = Record::new(10, 20, RecordState::Soaking);
    let promoted = Record::new(20, 20, RecordState::Promoted);
    let halted = Record::new(10, 20, RecordState::Halted).with_halt(halt_from("n", "m"));
    let aborted = Record::new(10, 20, RecordState::Aborted);
    assert!(promoted.supersedes(&soaking));
    assert!(halted.supersedes(&soaking));
    assert!(!halted.supersedes(&promoted), "the first decision wins");
    assert!(!promoted.supersedes(&halted), "the first decision wins");
    assert!(aborted.supersedes(&halted), "an abort clears a halt");
    assert!(!soaking.supersedes(&promoted), "a stale replica's soak");
    assert!(!soaking.supersedes(&soaking));
    let next = Record::new(20, 30, RecordState::Soaking);
    assert!(next.supersedes(&promoted));
    assert!(
        Record::new(12, 20, RecordState::Halted).supersedes(&Record::new(
            14,
            20,
            RecordState::Soaking
        )),
        "a replica that started earlier knows the same stable state by an earlier revision"
    );
}

#[test]
fn a_record_reads_back_what_it_wrote_and_refuses_or_bounds_the_rest() {
    let halted = Record::new(10, 20, RecordState::Halted).with_halt(halt_from("edge-a", "bad"));
    let bytes = serde_json::to_vec(&halted.to_json()).unwrap();
    assert_eq!(Record::parse(&bytes), Ok(halted));
    assert_eq!(Record::new(3, 3, RecordState::Promoted).load_revision(), 3);
    assert!(Record::parse(b"not json").is_err());
    assert!(
        Record::parse(br#"{"stable_revision":1,"candidate_revision":2,"state":"odd"}"#).is_err()
    );
    assert!(Record::parse(br#"{"candidate_revision":2,"state":"soaking"}"#).is_err());
    let long = "x".repeat(100_000);
    let text = format!(
        r#"{{"stable_revision":1,"candidate_revision":2,"state":"halted","halt":{{"node":"{long}","message":"{long}","origins":[{}]}}}}"#,
        vec!["\"o\""; 1000].join(",")
    );
    let r = Record::parse(text.as_bytes()).unwrap();
    let halt = r.halt.unwrap();
    assert!(halt.node.len() <= MAX_NODE_BYTES + 3);
    assert!(halt.message.len() <= MAX_MESSAGE_BYTES + 3);
    assert!(halt.origins.len() <= crate::store::MAX_LISTED);
}

fn states(
    stable: &[u8],
    candidate: &[u8],
) -> (Arc<crate::store::Snapshot>, Arc<crate::store::Snapshot>) {
    let store = |content: &[u8]| {
        let s = crate::store::Store::new();
        s.replace_all([
            crate::store::ResourceInput::new(CDS, "c", bytes::Bytes::copy_from_slice(content)),
            crate::store::ResourceInput::new(LDS, "l", bytes::Bytes::from_static(b"same")),
        ])
        .unwrap();
        s.snapshot()
    };
    (store(stable), store(candidate))
}

#[test]
fn a_sotw_client_holding_the_candidates_version_of_a_type_it_changed_holds_the_candidate() {
    let (stable, candidate) = states(b"1", b"2");
    let version = |s: &crate::store::Snapshot, t: &str| s.get(t).unwrap().version().to_string();
    let holds = |t: &str, v: &str| {
        holds_candidate(
            &candidate,
            &stable,
            t,
            Held::Version(v),
            &ParamSet::default(),
        )
    };
    assert!(holds(CDS, &version(&candidate, CDS)));
    assert!(!holds(CDS, &version(&stable, CDS)), "the stable version");
    assert!(!holds(CDS, "guessed"), "a version neither state has");
    assert!(
        !holds(LDS, &version(&candidate, LDS)),
        "a type the candidate did not change: the same version in both"
    );
    assert!(
        !holds("type.googleapis.com/none", "x"),
        "a type neither has"
    );
}

#[test]
fn a_delta_client_holding_a_resource_at_a_version_only_the_candidate_has_holds_the_candidate() {
    use crate::protocol::delta::InitialVersions;
    use crate::protocol::Text;
    let (stable, candidate) = states(b"1", b"2");
    let version = |s: &crate::store::Snapshot, t: &str, n: &str| {
        s.get(t).unwrap().get(n).unwrap().version().to_string()
    };
    let held = |pairs: &[(&str, String)]| -> InitialVersions {
        pairs
            .iter()
            .map(|(n, v)| (Text::from(*n), Text::from(v)))
            .collect()
    };
    let holds = |t: &str, h: &InitialVersions| {
        holds_candidate(
            &candidate,
            &stable,
            t,
            Held::Resources(h),
            &ParamSet::default(),
        )
    };
    assert!(holds(CDS, &held(&[("c", version(&candidate, CDS, "c"))])));
    assert!(
        !holds(CDS, &held(&[("c", version(&stable, CDS, "c"))])),
        "stable"
    );
    assert!(!holds(CDS, &held(&[("c", "guessed".into())])));
    assert!(
        !holds(CDS, &held(&[("other", version(&candidate, CDS, "c"))])),
        "another name"
    );
    assert!(
        !holds(LDS, &held(&[("l", version(&candidate, LDS, "l"))])),
        "a resource the candidate did not change"
    );
}

/// A fake shared state counting what is asked of it.
#[derive(Default)]
struct Counting {
    refreshes: std::sync::atomic::AtomicUsize,
}

impl SharedState for Counting {
    fn publish(&self, _: Record) {}

    fn refresh(&self) {
        self.refreshes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_client_outside_the_cohort_holding_the_candidate_waits_for_the_record_and_never_promotes_it(
) {
    use crate::store::{ResourceInput, Store};
    use crate::transport::picker::Hold;
    let cohort = Cohort::new(vec![Selector::parse("cluster=canary").unwrap()]);
    let rollout = Rollout::unstarted(cohort, GateConfig::default(), Store::new());
    let input = |c: &'static [u8]| ResourceInput::new(CDS, "c", bytes::Bytes::from_static(c));
    rollout.canary_store().replace_all([input(b"1")]).unwrap();
    rollout.start_at(Some(10)).unwrap();
    rollout
        .commit_at(Some(11), |s| s.replace_all([input(b"2")]))
        .unwrap();
    let candidate = rollout
        .canary_store()
        .snapshot()
        .get(CDS)
        .unwrap()
        .version()
        .to_string();
    let encoded = |cluster: &str| {
        use envoy_types::pb::envoy::config::core::v3::Node;
        prost::Message::encode_to_vec(&Node {
            id: "n".into(),
            cluster: cluster.into(),
            ..Default::default()
        })
    };
    let (prod, canary) = (encoded("prod"), encoded("canary"));
    let hold = |node: &[u8], version: &str| {
        rollout.hold(Hold {
            stream: 1,
            store: rollout.stable_store(),
            node: Some(node),
            client: None,
            type_url: CDS,
            held: Held::Version(version),
        })
    };
    assert!(
        hold(&prod, &candidate).is_none(),
        "replicas not sharing: nothing to wait for"
    );

    let shared = Arc::new(Counting::default());
    rollout.share(shared.clone());
    assert!(
        hold(&canary, &candidate).is_none(),
        "a canary reads the candidate anyway"
    );
    let stable = rollout
        .stable_store()
        .snapshot()
        .get(CDS)
        .unwrap()
        .version()
        .to_string();
    assert!(hold(&prod, &stable).is_none(), "holds the stable state");
    let wait = hold(&prod, &candidate).expect("held");
    assert_eq!(
        shared.refreshes.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "read again"
    );
    let started = Instant::now();
    wait.await;
    assert!(
        started.elapsed() >= HOLD_BOUND - Duration::from_millis(50),
        "held for the bound"
    );
    assert_eq!(
        rollout.status_json()["promotions"],
        0,
        "not promoted on a client's word"
    );
    assert!(
        rollout.status_json()["candidate"].is_object(),
        "still the candidate"
    );

    // Once the record promotes it, a held answer is let go at once.
    let wait = hold(&prod, &candidate).expect("held");
    rollout.adopt(Record::new(10, 11, RecordState::Promoted));
    let started = Instant::now();
    wait.await;
    assert!(started.elapsed() < HOLD_BOUND, "let go when promoted");
    assert_eq!(rollout.status_json()["promotions"], 1);
}
