//! Waking by parameter set: when only constrained variants of a name change, a watcher that said
//! its parameter sets is woken only if one of them matches a variant that was added, changed or
//! removed. One test per rule.

use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::single_constraint::ConstraintType;
use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::{
    SingleConstraint, Type,
};
use envoy_types::pb::envoy::service::discovery::v3::DynamicParameterConstraints;

use super::*;
use crate::params::ParamSet;

fn env(value: &str) -> Constraints {
    Constraints::new(DynamicParameterConstraints {
        r#type: Some(Type::Constraint(SingleConstraint {
            key: "env".into(),
            constraint_type: Some(ConstraintType::Value(value.into())),
        })),
    })
    .unwrap()
}

fn variant(name: &str, group: &str, value: &[u8]) -> ResourceInput {
    input(CLUSTER, name, value).with_constraints(Some(env(group)))
}

fn params(group: &str) -> ParamSet {
    [("env", group)].into_iter().collect()
}

/// A store with `c` in variants for env a and b (and `d` unconstrained), a watcher of `c` by
/// name for each parameter set given, and a wildcard watcher for each.
fn setup(groups: &[&str]) -> (Store, Vec<Watcher>, Vec<Watcher>) {
    let store = Store::new();
    store
        .replace_all([
            variant("c", "a", b"a1"),
            variant("c", "b", b"b1"),
            input(CLUSTER, "d", b"d1"),
        ])
        .unwrap();
    let cluster = arc(CLUSTER);
    let mut named = Vec::new();
    let mut wildcard = Vec::new();
    for g in groups {
        let mut w = store.watcher();
        w.set_params(&[ParamSet::new(), params(g)]);
        w.watch(&cluster, [&arc("c"), &arc("d")]);
        named.push(w);
        let mut w = store.watcher();
        w.set_params(&[params(g)]);
        w.set_wildcard(&cluster, true);
        wildcard.push(w);
    }
    (store, named, wildcard)
}

fn woken(w: &Watcher) -> bool {
    w.take_changes()
        .into_sets()
        .get(CLUSTER)
        .is_some_and(|names| names.contains("c") || names.contains("d"))
}

#[test]
fn a_watcher_whose_params_match_neither_the_old_nor_the_new_variant_is_not_woken() {
    let (store, named, wildcard) = setup(&["a", "b", "z"]);
    store
        .apply([Change::Set(variant("c", "a", b"a2"))])
        .unwrap();
    for ws in [&named, &wildcard] {
        assert!(woken(&ws[0]), "env=a: its variant changed");
        assert!(!woken(&ws[1]), "env=b: its variant is the same");
        assert!(!woken(&ws[2]), "env=z: no variant, before or after");
    }
}

#[test]
fn a_watcher_whose_params_match_only_the_old_variant_is_woken() {
    let (store, named, wildcard) = setup(&["a", "b"]);
    store
        .apply([Change::RemoveVariant {
            type_url: CLUSTER.into(),
            name: "c".into(),
            constraints: Some(env("a")),
        }])
        .unwrap();
    for ws in [&named, &wildcard] {
        assert!(woken(&ws[0]), "env=a: its variant is gone");
        assert!(!woken(&ws[1]), "env=b: unchanged");
    }
    // A whole name removed: its variants were the old ones.
    let (store, named, _) = setup(&["a", "b", "z"]);
    store
        .apply([Change::Remove {
            type_url: CLUSTER.into(),
            name: "c".into(),
        }])
        .unwrap();
    assert!(woken(&named[0]) && woken(&named[1]));
    assert!(!woken(&named[2]), "env=z never had a variant of c");
}

#[test]
fn a_watcher_whose_params_match_only_the_new_variant_is_woken() {
    let (store, named, wildcard) = setup(&["a", "b", "z"]);
    store
        .apply([Change::Set(variant("c", "z", b"z1"))])
        .unwrap();
    for ws in [&named, &wildcard] {
        assert!(woken(&ws[2]), "env=z: it has a variant now");
        assert!(!woken(&ws[0]) && !woken(&ws[1]), "env=a, env=b: unchanged");
    }
}

#[test]
fn unconstrained_changes_wake_every_watcher() {
    let (store, named, wildcard) = setup(&["a", "z"]);
    store
        .apply([Change::Set(input(CLUSTER, "d", b"d2"))])
        .unwrap();
    for w in named.iter().chain(&wildcard) {
        assert!(woken(w), "an unconstrained variant changed");
    }
    // A name going from constrained variants to one unconstrained one.
    let (store, named, _) = setup(&["a", "z"]);
    store
        .replace_all([input(CLUSTER, "c", b"c"), input(CLUSTER, "d", b"d1")])
        .unwrap();
    assert!(named.iter().all(woken));
}

#[test]
fn a_watcher_that_did_not_say_its_params_is_woken_by_every_change() {
    let (store, _, _) = setup(&[]);
    let mut w = store.watcher();
    w.watch(&arc(CLUSTER), [&arc("c")]);
    store
        .apply([Change::Set(variant("c", "a", b"a2"))])
        .unwrap();
    assert!(woken(&w));
}

#[test]
fn a_new_parameter_set_counts_from_when_it_is_set() {
    let (store, mut named, _) = setup(&["b"]);
    store
        .apply([Change::Set(variant("c", "a", b"a2"))])
        .unwrap();
    assert!(!woken(&named[0]));
    // The node now resolves with env=a too (its dynamic parameters changed).
    named[0].set_params(&[ParamSet::new(), params("b"), params("a")]);
    assert_eq!(named[0].params_len(), Some(3));
    store
        .apply([Change::Set(variant("c", "a", b"a3"))])
        .unwrap();
    assert!(woken(&named[0]));
}

#[test]
fn changes_of_variants_a_whole_type_watcher_never_sees_are_not_kept_for_it() {
    let (store, _named, wildcard) = setup(&["a", "b"]);
    for i in 0..10u8 {
        store
            .apply([Change::Set(variant("c", "a", &[b'x', i]))])
            .unwrap();
        // The env=a watcher takes what it is shown; env=b is never shown these commits.
        wildcard[0].take_changes();
    }
    assert_eq!(
        lock_index(&store.inner.index).debug_log_len(CLUSTER),
        0,
        "the log keeps no commit for a watcher that will never take it"
    );
    assert!(!woken(&wildcard[1]));
}
