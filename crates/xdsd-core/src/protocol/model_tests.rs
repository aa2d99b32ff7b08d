//! Model-based tests: random sequences of subscription changes and store updates, driven through
//! a state machine and applied to a model of a client that follows the spec. After every step
//! the server is drained and the client acknowledges; then the client must hold exactly what the
//! spec says it should, and no response may carry a name twice. Deterministic: fixed seeds.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};

use super::delta::DeltaMachine;
use super::session::{Machine, Session};
use super::sotw::{SotwMachine, SotwRequest};
use super::test_support::{remove, set, views};
use super::NonceGen;
use crate::store::Store;
use crate::testing::{Flavor, Pair};
use crate::types::{CLUSTER, CLUSTER_LOAD_ASSIGNMENT};

use crate::test_rng::Rng;

/// A resource name of the small set the model tests draw from.
fn random_name(rng: &mut Rng) -> String {
    format!("r{}", rng.below(6))
}

const SEEDS: u64 = 300;
const STEPS: usize = 60;

/// A random store change: set one resource to a random content, or remove it.
fn change_store(rng: &mut Rng, store: &Store, type_url: &str) -> Vec<Arc<str>> {
    let name = random_name(rng);
    if rng.below(4) == 0 {
        remove(store, type_url, &name);
    } else {
        set(store, type_url, &name, &format!("content-{}", rng.below(3)));
    }
    vec![Arc::from(name)]
}

fn current_versions(store: &Store, type_url: &str) -> BTreeMap<String, String> {
    store
        .snapshot()
        .get(type_url)
        .map(|t| {
            t.iter()
                .map(|r| (r.name().to_string(), r.version().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// SotW: the client sends its whole list each time; LDS/CDS responses replace its state, other
/// types add to it.
fn sotw_run(type_url: &str, seed: u64) {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(1));
    let store = Store::new();
    let mut sub = SotwMachine::new(type_url.into());
    let mut nonces = NonceGen::default();
    let full_state = crate::types::is_full_state(type_url);
    // The client: what it subscribes to (None = legacy wildcard, never named) and what it holds.
    let mut names: Option<BTreeSet<String>> = None;
    let mut star = false;
    let mut held: BTreeMap<String, String> = BTreeMap::new();
    let mut nonce = String::new();
    let mut old_nonce = String::new();
    // Whether a request ever named anything: from then on an empty list is not the wildcard.
    let mut named = false;
    for _ in 0..STEPS {
        match rng.below(4) {
            0 => {
                let changed = change_store(&mut rng, &store, type_url);
                sub.mark_changed(&changed);
            }
            1 if !old_nonce.is_empty() && old_nonce != nonce => {
                // A request answering an older response, with some other list: stale, so it
                // must change nothing (the client's next request carries its real list).
                let request = DiscoveryRequest {
                    type_url: type_url.into(),
                    resource_names: vec![random_name(&mut rng)],
                    response_nonce: old_nonce.clone(),
                    ..Default::default()
                };
                let snap = store.snapshot();
                sub.handle_request(&SotwRequest::from(&request), snap.get(type_url));
            }
            _ => {
                let set = names.get_or_insert_with(BTreeSet::new);
                match rng.below(4) {
                    0 => star = !star,
                    1 => {
                        let n = random_name(&mut rng);
                        set.remove(&n);
                    }
                    _ => {
                        set.insert(random_name(&mut rng));
                    }
                }
                let mut list: Vec<String> = set.iter().cloned().collect();
                if star {
                    list.push("*".into());
                }
                named |= !list.is_empty();
                // Sometimes a NACK: it changes the subscription like any other request.
                let error_detail = (rng.below(4) == 0 && !nonce.is_empty()).then(|| {
                    envoy_types::pb::google::rpc::Status {
                        code: 3,
                        message: "rejected".into(),
                        details: vec![],
                    }
                });
                let request = DiscoveryRequest {
                    type_url: type_url.into(),
                    resource_names: list,
                    response_nonce: nonce.clone(),
                    error_detail,
                    ..Default::default()
                };
                let snap = store.snapshot();
                sub.handle_request(&SotwRequest::from(&request), snap.get(type_url));
            }
        }
        let snap = store.snapshot();
        while let Some(response) = sub.poll_response(&views(&snap, type_url), &mut nonces) {
            let got: Vec<Arc<str>> = response.names();
            let unique: BTreeSet<&Arc<str>> = got.iter().collect();
            assert_eq!(
                unique.len(),
                got.len(),
                "seed {seed}: a name twice in one response"
            );
            let versions: Vec<(String, String)> = got
                .iter()
                .map(|n| {
                    let r = snap
                        .resource(type_url, n)
                        .expect("responses carry existing resources");
                    (n.to_string(), r.version().to_string())
                })
                .collect();
            if full_state {
                held.clear();
            }
            held.extend(versions);
            old_nonce = std::mem::replace(&mut nonce, response.nonce.to_string());
        }
        // What the client must hold now (nothing before it asked for anything).
        if names.is_none() {
            assert!(held.is_empty());
            continue;
        }
        let wildcard = star || !named;
        let wanted = |n: &String| wildcard || names.as_ref().is_some_and(|s| s.contains(n));
        let expected: BTreeMap<String, String> = current_versions(&store, type_url)
            .into_iter()
            .filter(|(n, _)| wanted(n))
            .collect();
        if full_state {
            // LDS/CDS: exactly the subscribed resources that exist, once something was sent.
            if nonce.is_empty() {
                assert!(
                    expected.is_empty(),
                    "seed {seed}: nothing sent although {expected:?} exist"
                );
            } else {
                let held_wanted: BTreeMap<String, String> = held
                    .iter()
                    .filter(|(n, _)| wanted(n))
                    .map(|(n, v)| (n.clone(), v.clone()))
                    .collect();
                assert_eq!(held_wanted, expected, "seed {seed}: full state differs");
            }
        } else {
            // Other types: every subscribed resource that exists, at its current version
            // (SotW cannot delete these, so the client may also hold stale extras).
            for (name, version) in &expected {
                assert_eq!(
                    held.get(name),
                    Some(version),
                    "seed {seed}: {name} not current"
                );
            }
        }
    }
}

#[test]
fn sotw_full_state_client_converges_to_the_subscribed_state() {
    for seed in 0..SEEDS {
        sotw_run(CLUSTER, seed);
    }
}

#[test]
fn sotw_incremental_type_client_converges_to_the_subscribed_state() {
    for seed in 0..SEEDS {
        sotw_run(CLUSTER_LOAD_ASSIGNMENT, seed);
    }
}

/// Delta: the client sends subscription changes; responses upsert and remove.
fn delta_run(seed: u64) {
    let type_url = CLUSTER;
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(7));
    let store = Store::new();
    let mut sub = DeltaMachine::new(type_url.into());
    let mut nonces = NonceGen::default();
    let mut names: BTreeSet<String> = BTreeSet::new();
    let mut star = false;
    let mut held: BTreeMap<String, String> = BTreeMap::new();
    let mut first = true;
    for _ in 0..STEPS {
        let mut request = DeltaDiscoveryRequest {
            type_url: type_url.into(),
            ..Default::default()
        };
        let opening = first;
        if first {
            first = false;
            // Legacy wildcard or named start, and sometimes a reconnect that claims versions.
            if rng.below(2) == 0 {
                star = true;
            } else {
                let n = random_name(&mut rng);
                names.insert(n.clone());
                request.resource_names_subscribe.push(n);
            }
        } else {
            match rng.below(6) {
                0 => {
                    let changed = change_store(&mut rng, &store, type_url);
                    sub.mark_changed(&changed);
                }
                5 => {
                    // Reconnect: a new stream, told everything the client holds and wants. The
                    // store may change while the client is away.
                    sub = DeltaMachine::new(type_url.into());
                    let _ = change_store(&mut rng, &store, type_url);
                    if star {
                        request.resource_names_subscribe.push("*".into());
                    }
                    request
                        .resource_names_subscribe
                        .extend(names.iter().cloned());
                    if !star && names.is_empty() {
                        // Nothing to ask for: an explicit empty subscription is not expressible
                        // on a new stream (it would be the legacy wildcard), so stay subscribed
                        // to one name.
                        let n = random_name(&mut rng);
                        names.insert(n.clone());
                        request.resource_names_subscribe.push(n);
                    }
                    // What it holds but no longer wants, it drops itself.
                    held.retain(|n, _| star || names.contains(n));
                    request.initial_resource_versions =
                        held.iter().map(|(n, v)| (n.clone(), v.clone())).collect();
                }
                1 => {
                    if star {
                        star = false;
                        request.resource_names_unsubscribe.push("*".into());
                        // The client drops what only the wildcard gave it.
                        held.retain(|n, _| names.contains(n));
                    } else {
                        star = true;
                        request.resource_names_subscribe.push("*".into());
                    }
                }
                2 => {
                    let n = random_name(&mut rng);
                    request.resource_names_unsubscribe.push(n.clone());
                    if names.remove(&n) && !star {
                        held.remove(&n);
                    }
                }
                _ => {
                    let n = random_name(&mut rng);
                    names.insert(n.clone());
                    request.resource_names_subscribe.push(n);
                }
            }
        }
        // Changes, and sometimes an empty request as every ACK is.
        if opening
            || !request.resource_names_subscribe.is_empty()
            || !request.resource_names_unsubscribe.is_empty()
            || rng.below(2) == 0
        {
            let snap = store.snapshot();
            sub.handle_request(&(&request).into(), snap.get(type_url));
        }
        let snap = store.snapshot();
        while let Some(response) = sub.poll_response(&views(&snap, type_url), &mut nonces) {
            let mut seen = BTreeSet::new();
            for r in &response.resources {
                assert!(
                    seen.insert(r.name().to_string()),
                    "seed {seed}: a name twice"
                );
                held.insert(r.name().to_string(), r.version().to_string());
            }
            for n in &response.removed {
                assert!(
                    seen.insert(n.to_string()),
                    "seed {seed}: a name both sent and removed"
                );
                held.remove(&**n);
            }
        }
        let expected: BTreeMap<String, String> = current_versions(&store, type_url)
            .into_iter()
            .filter(|(n, _)| star || names.contains(n))
            .collect();
        assert_eq!(
            held, expected,
            "seed {seed}: the client holds something else"
        );
    }
}

#[test]
fn delta_client_converges_to_exactly_the_subscribed_state() {
    for seed in 0..SEEDS {
        delta_run(seed);
    }
}

/// The whole session, watcher contract included, in the in-memory harness: a wildcard client
/// of clusters that answers late or not at all (NACKs too) while the store churns and time
/// passes. Changes made while a response waits for its ACK are muted in the watcher; once the
/// client answered everything (or the wait ran out), it must hold exactly the store's clusters.
fn session_run<M: Flavor>(seed: u64) {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(11));
    let node = envoy_types::pb::envoy::config::core::v3::Node {
        id: "n".into(),
        ..Default::default()
    };
    let mut pair: Pair<M> = Pair::new(Store::new(), Session::new(None), Some(node));
    let ask = pair.client.subscribe(CLUSTER, &[]);
    pair.send(&ask).expect("a wildcard subscription");
    pair.flush();
    for _ in 0..STEPS {
        match rng.below(5) {
            0 | 1 => {
                change_store(&mut rng, &pair.store, CLUSTER);
                pair.wake();
            }
            2 => pair.advance(Duration::from_millis(rng.below(8_000))),
            3 if !pair.client.unanswered().is_empty() => {
                let answer = if rng.below(3) == 0 {
                    pair.client.nack(CLUSTER, "rejected")
                } else {
                    pair.client.ack(CLUSTER)
                };
                pair.send(&answer).expect("an answer");
            }
            _ => {}
        }
        pair.flush();
        if rng.below(3) == 0 {
            pair.settle().expect("ACKs");
            let held = pair
                .client
                .held(CLUSTER)
                .map(|h| h.resources.clone())
                .unwrap_or_default();
            assert_eq!(
                held,
                current_versions(&pair.store, CLUSTER),
                "seed {seed}: the client does not hold the store's clusters"
            );
        }
    }
}

#[test]
fn sotw_session_client_converges_through_the_watcher_contract() {
    for seed in 0..SEEDS {
        session_run::<SotwMachine>(seed);
    }
}

#[test]
fn delta_session_client_converges_through_the_watcher_contract() {
    for seed in 0..SEEDS {
        session_run::<DeltaMachine>(seed);
    }
}
