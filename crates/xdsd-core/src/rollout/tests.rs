//! One test per rule of the rollout gate, time passed in.

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
