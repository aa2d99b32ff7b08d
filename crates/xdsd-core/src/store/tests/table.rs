//! The representation of a type snapshot: a commit changes it in place of a rebuild, and what it
//! gives must be what a fresh build of the same resources gives. One test per rule.

use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::single_constraint::ConstraintType;
use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::{
    SingleConstraint, Type,
};
use envoy_types::pb::envoy::service::discovery::v3::DynamicParameterConstraints;

use super::*;
use crate::params::ParamSet;
use crate::test_rng::Rng;

fn env(value: &str) -> Arc<Constraints> {
    Arc::new(
        Constraints::new(DynamicParameterConstraints {
            r#type: Some(Type::Constraint(SingleConstraint {
                key: "env".into(),
                constraint_type: Some(ConstraintType::Value(value.into())),
            })),
        })
        .unwrap(),
    )
}

type Changes = BTreeMap<Arc<str>, Vec<Arc<Resource>>>;

/// The variants a name gets in a random change: none (removed), one plain, one with an alias, or
/// two constrained ones.
fn random_variants(rng: &mut Rng, name: &Arc<str>, shapes: u64) -> Vec<Arc<Resource>> {
    let value = Bytes::from(rng.below(4).to_le_bytes().to_vec());
    match rng.below(shapes) {
        0 => Vec::new(),
        1 | 2 => vec![Arc::new(Resource::new(CLUSTER, name.clone(), value))],
        3 => vec![Arc::new(Resource::with_aliases(
            CLUSTER,
            name.clone(),
            vec![format!("alias-of-{name}").into()],
            value,
        ))],
        _ => ["a", "b"]
            .into_iter()
            .map(|group| {
                Arc::new(Resource::variant(
                    CLUSTER,
                    name.clone(),
                    Vec::new(),
                    Some(env(group)),
                    value.clone(),
                ))
            })
            .collect(),
    }
}

/// Everything a reader can see of a type snapshot, compared with what a fresh build of the same
/// resources gives.
fn assert_same_as_fresh(t: &TypeSnapshot, held: &Changes) {
    let fresh = TypeSnapshot::with_variants(
        t.type_url().clone(),
        held.iter().map(|(n, v)| (n.clone(), v.clone())),
    );
    assert_eq!(t.version(), fresh.version());
    assert_eq!(t.len(), fresh.len());
    assert_eq!(t.resource_count(), fresh.resource_count());
    assert_eq!(t.has_variants(), fresh.has_variants());
    assert_eq!(t.keys(), fresh.keys());
    let names = |t: &TypeSnapshot| -> Vec<(Arc<str>, Vec<Arc<str>>)> {
        t.entries()
            .map(|(n, vs)| (n.clone(), vs.iter().map(|r| r.version().clone()).collect()))
            .collect()
    };
    assert_eq!(names(t), names(&fresh));
    for (name, variants) in held {
        assert_eq!(t.variants(name).len(), variants.len(), "{name}");
        assert_eq!(t.intern(name).as_deref(), Some(&**name));
        for alias in variants.iter().flat_map(|r| r.aliases()) {
            assert_eq!(t.intern(alias), fresh.intern(alias));
            assert_eq!(
                t.get(alias).map(|r| r.name().clone()),
                fresh.get(alias).map(|r| r.name().clone())
            );
        }
    }
    for params in [ParamSet::new(), [("env", "a")].into_iter().collect()] {
        let (v, f) = (t.view(&params), fresh.view(&params));
        assert_eq!(v.version(), f.version());
        assert_eq!(v.len(), f.len());
        assert_eq!(v.has_aliases(), f.has_aliases());
        assert_eq!(
            v.sotw_body(Encoding::default()),
            f.sotw_body(Encoding::default())
        );
        let versions = |v: &View| v.iter().map(|r| r.version().clone()).collect::<Vec<_>>();
        assert_eq!(versions(&v), versions(&f));
        for name in held.keys() {
            assert_eq!(
                v.get(name).map(|r| r.version().clone()),
                f.get(name).map(|r| r.version().clone())
            );
        }
    }
}

#[test]
fn a_type_changed_in_place_is_what_a_fresh_build_of_its_resources_gives() {
    let mut rng = Rng(0x5eed_0001);
    let pool: Vec<Arc<str>> = (0..3000)
        .map(|i| format!("c{:05}", i * 7 % 3000).into())
        .collect();
    // Plain names only first (one shared view), then every shape (variants, aliases).
    for shapes in [3, 5] {
        let mut held = Changes::new();
        let mut t =
            TypeSnapshot::with_variants(arc(CLUSTER), Vec::<(Arc<str>, Vec<Arc<Resource>>)>::new());
        for round in 0..40 {
            // Small changes, and now and then a large one (the table grows and shrinks past
            // its shards' size).
            let size = if round % 10 == 9 {
                1500
            } else {
                1 + rng.below(40) as usize
            };
            let mut changes = Changes::new();
            for _ in 0..size {
                let name = pool[rng.below(pool.len() as u64) as usize].clone();
                let variants = random_variants(&mut rng, &name, shapes);
                changes.insert(name, variants);
            }
            for (name, variants) in &changes {
                if variants.is_empty() {
                    held.remove(name);
                } else {
                    held.insert(name.clone(), variants.clone());
                }
            }
            t = t.with_changes(&changes);
            assert_same_as_fresh(&t, &held);
        }
    }
}

#[test]
fn a_type_version_depends_only_on_the_resources_not_on_their_history() {
    let r = |name: &str, value: &'static [u8]| {
        Arc::new(Resource::new(CLUSTER, name, Bytes::from_static(value)))
    };
    let (a1, a2, b1) = (r("a", b"1"), r("a", b"2"), r("b", b"1"));
    let one = TypeSnapshot::with_variants(arc(CLUSTER), [(arc("a"), vec![a1.clone()])]);
    let both = TypeSnapshot::with_variants(
        arc(CLUSTER),
        [(arc("a"), vec![a1.clone()]), (arc("b"), vec![b1.clone()])],
    );
    // Added, changed, changed back, removed, added again: the version follows the content.
    let mut t = one.with_changes(&[(arc("b"), vec![b1.clone()])].into_iter().collect());
    assert_eq!(t.version(), both.version());
    t = t.with_changes(&[(arc("a"), vec![a2.clone()])].into_iter().collect());
    assert_ne!(t.version(), both.version());
    t = t.with_changes(&[(arc("a"), vec![a1.clone()])].into_iter().collect());
    assert_eq!(t.version(), both.version());
    t = t.with_changes(&[(arc("b"), vec![])].into_iter().collect());
    assert_eq!(t.version(), one.version());
    // A resource moved to another name is another type version.
    let moved = TypeSnapshot::with_variants(arc(CLUSTER), [(arc("b"), vec![r("b", b"1")])]);
    let at_a = TypeSnapshot::with_variants(arc(CLUSTER), [(arc("a"), vec![r("a", b"1")])]);
    assert_ne!(moved.version(), at_a.version());
    // Nothing has a version too, never empty.
    let empty =
        TypeSnapshot::with_variants(arc(CLUSTER), Vec::<(Arc<str>, Vec<Arc<Resource>>)>::new());
    assert!(!empty.version().is_empty());
    assert_eq!(empty.version(), View::empty(arc(CLUSTER)).version());
}

/// A cluster named `name` without constraints.
fn plain(name: &str) -> Arc<Resource> {
    Arc::new(Resource::new(CLUSTER, name, Bytes::from_static(b"x")))
}

/// `count` names in order (`n0000`, `n0001`, …) and a type of one plain cluster each.
fn plain_type(count: usize) -> (Vec<Arc<str>>, TypeSnapshot) {
    let names: Vec<Arc<str>> = (0..count).map(|i| format!("n{i:04}").into()).collect();
    let t = TypeSnapshot::with_variants(
        arc(CLUSTER),
        names.iter().map(|n| (n.clone(), vec![plain(n)])),
    );
    (names, t)
}

#[test]
fn lingering_names_are_served_with_the_variants_the_old_type_held() {
    let (names, old) = plain_type(300);
    // The new type lost every third name and gained one.
    let mut changes: Changes = names
        .iter()
        .step_by(3)
        .map(|n| (n.clone(), vec![]))
        .collect();
    changes.insert(arc("new"), vec![plain("new")]);
    let new = old.with_changes(&changes);
    let gone: Vec<Arc<str>> = names.iter().step_by(3).cloned().collect();
    let merged = new.with_lingering(&old, &gone);
    let mut held: Changes = names
        .iter()
        .map(|n| (n.clone(), old.variants(n).to_vec()))
        .collect();
    held.insert(arc("new"), new.variants("new").to_vec());
    assert_same_as_fresh(&merged, &held);
    assert!(Arc::ptr_eq(
        &merged.variants("n0000")[0],
        &old.variants("n0000")[0]
    ));
}

#[test]
fn names_are_interned_by_walking_the_order_across_chunks_and_by_hash_out_of_it() {
    let (names, t) = plain_type(1000);
    let held = |n: &str| t.entries().find(|(k, _)| &***k == n).unwrap().0.clone();
    // In order, a subset in order, in reverse, and unknown names in between.
    let orders: Vec<Vec<&str>> = vec![
        names.iter().map(|n| &**n).collect(),
        names.iter().skip(500).step_by(2).map(|n| &**n).collect(),
        names.iter().rev().map(|n| &**n).collect(),
        names.iter().flat_map(|n| [&**n, "unknown"]).collect(),
    ];
    for order in orders {
        let mut interner = t.interner();
        for name in order {
            let got = interner.intern(name);
            if name == "unknown" {
                assert!(got.is_none());
            } else {
                let got = got.unwrap();
                assert!(Arc::ptr_eq(&got, &held(name)), "{name}");
            }
        }
    }
}
