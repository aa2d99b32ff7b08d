//! One test per rule of TP2's matching and variant rules, TP2's own examples, and a randomized
//! comparison of `overlap` with brute force.

use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};
use std::time::Instant;

use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::single_constraint::{
    ConstraintType, Exists,
};
use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::{
    ConstraintList, SingleConstraint, Type,
};
use envoy_types::pb::envoy::service::discovery::v3::DynamicParameterConstraints as Proto;
use prost::Message;

use super::*;

// ---------------------------------------------------------------------------------------------
// Builders

fn unset() -> Proto {
    Proto { r#type: None }
}

fn single(key: &str, constraint_type: Option<ConstraintType>) -> Proto {
    Proto {
        r#type: Some(Type::Constraint(SingleConstraint {
            key: key.to_string(),
            constraint_type,
        })),
    }
}

fn eq(key: &str, value: &str) -> Proto {
    single(key, Some(ConstraintType::Value(value.to_string())))
}

fn exists(key: &str) -> Proto {
    single(key, Some(ConstraintType::Exists(Exists {})))
}

fn and(constraints: Vec<Proto>) -> Proto {
    Proto {
        r#type: Some(Type::AndConstraints(ConstraintList { constraints })),
    }
}

fn or(constraints: Vec<Proto>) -> Proto {
    Proto {
        r#type: Some(Type::OrConstraints(ConstraintList { constraints })),
    }
}

fn not(inner: Proto) -> Proto {
    Proto {
        r#type: Some(Type::NotConstraints(Box::new(inner))),
    }
}

fn c(proto: Proto) -> Constraints {
    Constraints::new(proto).expect("valid constraints")
}

fn ps(pairs: &[(&str, &str)]) -> ParamSet {
    pairs.iter().copied().collect()
}

/// `overlap(a, b)`, checking that a witness really matches both sides.
fn checked_overlap(a: Option<&Constraints>, b: Option<&Constraints>) -> Option<ParamSet> {
    let witness = overlap(a, b);
    if let Some(w) = &witness {
        for side in [a, b].into_iter().flatten() {
            assert!(side.matches(w), "witness {w} does not match {side}");
        }
    }
    witness
}

fn hash_of<T: Hash>(t: &T) -> u64 {
    let mut h = DefaultHasher::new();
    t.hash(&mut h);
    h.finish()
}

// ---------------------------------------------------------------------------------------------
// ParamSet

#[test]
fn param_set_is_a_sorted_map_of_keys_to_values() {
    let mut p = ParamSet::new();
    assert!(p.is_empty());
    p.insert("version", "v1");
    p.insert("env", "test");
    p.insert("env", "prod");
    assert_eq!(p.len(), 2);
    assert_eq!(p.get("env"), Some("prod"));
    assert_eq!(p.get("zone"), None);
    assert_eq!(
        p.iter().collect::<Vec<_>>(),
        vec![("env", "prod"), ("version", "v1")]
    );
    assert_eq!(p, ps(&[("version", "v1"), ("env", "prod")]));
    let from_strings: ParamSet = vec![("env".to_string(), "prod".to_string())]
        .into_iter()
        .collect();
    assert_eq!(from_strings, ps(&[("env", "prod")]));
}

#[test]
fn param_set_display_quotes_what_would_be_ambiguous() {
    assert_eq!(ParamSet::new().to_string(), "{}");
    assert_eq!(
        ps(&[("version", "v1"), ("env", "prod")]).to_string(),
        "{env=prod, version=v1}"
    );
    assert_eq!(
        ps(&[
            ("a=b", "x,y"),
            ("c", "}"),
            ("d", "two words"),
            ("e", "say \"hi\"")
        ])
        .to_string(),
        r#"{"a=b"="x,y", c="}", d="two words", e="say \"hi\""}"#
    );
    assert_eq!(ps(&[("k", "tab\there")]).to_string(), r#"{k="tab\there"}"#);
    assert_eq!(ps(&[("k", "bell\u{7}")]).to_string(), r#"{k="bell\u{7}"}"#);
    assert_eq!(ps(&[("k", "")]).to_string(), r#"{k=""}"#);
    assert_eq!(ps(&[("k", "it's")]).to_string(), r#"{k="it's"}"#);
    assert_eq!(
        ps(&[("zone", "eu-west_1.a/b")]).to_string(),
        "{zone=eu-west_1.a/b}"
    );
}

// ---------------------------------------------------------------------------------------------
// Matching rules

#[test]
fn unset_type_matches_everything() {
    let any = c(unset());
    assert!(any.matches(&ParamSet::new()));
    assert!(any.matches(&ps(&[("env", "prod")])));
    assert!(any.keys().is_empty());
}

#[test]
fn value_matches_only_that_exact_value() {
    let prod = c(eq("env", "prod"));
    assert!(prod.matches(&ps(&[("env", "prod")])));
    assert!(!prod.matches(&ps(&[("env", "test")])));
    assert!(!prod.matches(&ps(&[("env", "prod ")])));
    assert!(!prod.matches(&ps(&[("env", "PROD")])));
    assert!(!prod.matches(&ParamSet::new()));
    assert!(!prod.matches(&ps(&[("environment", "prod")])));
    let empty = c(eq("env", ""));
    assert!(empty.matches(&ps(&[("env", "")])));
    assert!(!empty.matches(&ParamSet::new()));
}

#[test]
fn exists_matches_any_value_but_not_absence() {
    let has_version = c(exists("version"));
    assert!(has_version.matches(&ps(&[("version", "v1")])));
    assert!(has_version.matches(&ps(&[("version", "")])));
    assert!(!has_version.matches(&ParamSet::new()));
    assert!(!has_version.matches(&ps(&[("env", "prod")])));
}

#[test]
fn and_requires_all_and_an_empty_and_is_true() {
    let both = c(and(vec![eq("env", "prod"), eq("version", "v1")]));
    assert!(both.matches(&ps(&[("env", "prod"), ("version", "v1")])));
    assert!(!both.matches(&ps(&[("env", "prod"), ("version", "v2")])));
    assert!(!both.matches(&ps(&[("env", "prod")])));
    let empty = c(and(vec![]));
    assert!(empty.matches(&ParamSet::new()));
    assert!(empty.matches(&ps(&[("env", "prod")])));
}

#[test]
fn or_requires_any_and_an_empty_or_is_false() {
    let either = c(or(vec![eq("env", "prod"), eq("env", "test")]));
    assert!(either.matches(&ps(&[("env", "prod")])));
    assert!(either.matches(&ps(&[("env", "test")])));
    assert!(!either.matches(&ps(&[("env", "qa")])));
    assert!(!either.matches(&ParamSet::new()));
    let empty = c(or(vec![]));
    assert!(!empty.matches(&ParamSet::new()));
    assert!(!empty.matches(&ps(&[("env", "prod")])));
}

#[test]
fn not_negates_and_not_of_unset_is_false() {
    let not_prod = c(not(eq("env", "prod")));
    assert!(!not_prod.matches(&ps(&[("env", "prod")])));
    assert!(not_prod.matches(&ps(&[("env", "test")])));
    assert!(not_prod.matches(&ParamSet::new()));
    let nothing = c(not(unset()));
    assert!(!nothing.matches(&ParamSet::new()));
    assert!(!nothing.matches(&ps(&[("env", "prod")])));
    // On the wire the inner message of `not_constraints` can only be empty, never missing.
    let decoded = Constraints::decode(&nothing.encoded()[..]).expect("decodes");
    assert!(!decoded.matches(&ParamSet::new()));
}

#[test]
fn unconstrained_parameters_do_not_prevent_a_match() {
    // TP2 "Unconstrained Parameters": keys the constraints never mention are ignored.
    let prod = c(eq("env", "prod"));
    assert!(prod.matches(&ps(&[("env", "prod"), ("version", "v1"), ("zone", "a")])));
    let not_v1 = c(not(eq("version", "v1")));
    assert!(not_v1.matches(&ps(&[("env", "prod"), ("zone", "a")])));
    // A variant without constraints matches every client.
    assert!(c(unset()).matches(&ps(&[("env", "prod"), ("version", "v9")])));
}

// ---------------------------------------------------------------------------------------------
// Validation

#[test]
fn empty_key_is_rejected_with_its_path() {
    let err = Constraints::new(and(vec![
        eq("env", "prod"),
        not(single("", Some(ConstraintType::Exists(Exists {})))),
    ]))
    .expect_err("empty key");
    assert_eq!(
        err,
        ConstraintError::EmptyKey {
            path: "and_constraints[1].not_constraints.constraint".into()
        }
    );
    assert!(err
        .to_string()
        .contains("`and_constraints[1].not_constraints.constraint` has an empty key"));
    let err = Constraints::new(eq("", "prod")).expect_err("empty key");
    assert_eq!(
        err,
        ConstraintError::EmptyKey {
            path: "constraint".into()
        }
    );
}

#[test]
fn constraint_without_value_or_exists_is_rejected_with_its_path() {
    let err = Constraints::new(or(vec![eq("env", "prod"), single("version", None)]))
        .expect_err("no matcher");
    assert_eq!(
        err,
        ConstraintError::NoMatcher {
            path: "or_constraints[1].constraint".into(),
            key: "version".into()
        }
    );
    assert!(err
        .to_string()
        .contains("sets neither `value` nor `exists`"));
}

fn nested_nots(depth: usize) -> Proto {
    let mut p = eq("k", "v");
    for _ in 1..depth {
        p = not(p);
    }
    p
}

#[test]
fn nesting_deeper_than_the_limit_is_rejected() {
    // 31 NOTs around one constraint: 32 levels, accepted.
    let deepest = c(nested_nots(MAX_DEPTH));
    assert!(deepest.matches(&ParamSet::new()));
    assert!(!deepest.matches(&ps(&[("k", "v")])));
    match Constraints::new(nested_nots(MAX_DEPTH + 1)) {
        Err(ConstraintError::TooDeep { path, max }) => {
            assert_eq!(max, MAX_DEPTH);
            assert_eq!(path, vec!["not_constraints"; MAX_DEPTH].join("."));
        }
        other => panic!("expected TooDeep, got {other:?}"),
    }
    // Lists nest too.
    let mut p = eq("k", "v");
    for _ in 0..MAX_DEPTH {
        p = and(vec![p]);
    }
    let err = Constraints::new(p).expect_err("too deep");
    assert!(matches!(err, ConstraintError::TooDeep { .. }), "{err}");
    assert!(err.to_string().contains("deeper than 32 levels"));
    // A message too deep for prost is a decode error, not a stack overflow.
    let mut p = eq("k", "v");
    for _ in 0..200 {
        p = not(p);
    }
    let bytes = p.encode_to_vec();
    assert!(matches!(
        Constraints::decode(&bytes),
        Err(ConstraintError::Decode(_))
    ));
}

#[test]
fn more_nodes_than_the_limit_is_rejected() {
    // The outer `and` is one node.
    let at_limit = or((0..MAX_NODES - 1)
        .map(|i| eq("k", &i.to_string()))
        .collect());
    assert!(c(at_limit).matches(&ps(&[("k", "7")])));
    let over = and((0..MAX_NODES).map(|i| eq("k", &i.to_string())).collect());
    let err = Constraints::new(over).expect_err("too many nodes");
    assert_eq!(
        err,
        ConstraintError::TooManyNodes {
            path: format!("and_constraints[{}]", MAX_NODES - 1),
            max: MAX_NODES
        }
    );
    assert!(err.to_string().contains("more than 1024 nodes"));
}

#[test]
fn more_distinct_keys_than_the_limit_is_rejected() {
    let at_limit = c(or((0..MAX_KEYS)
        .map(|i| exists(&format!("k{i:02}")))
        .collect()));
    assert_eq!(at_limit.keys().len(), MAX_KEYS);
    // Repeating a key does not count it twice.
    c(or((0..MAX_KEYS * 3)
        .map(|i| exists(&format!("k{:02}", i % MAX_KEYS)))
        .collect()));
    let over = or((0..=MAX_KEYS)
        .map(|i| exists(&format!("k{i:02}")))
        .collect());
    let err = Constraints::new(over).expect_err("too many keys");
    assert_eq!(
        err,
        ConstraintError::TooManyKeys {
            path: format!("or_constraints[{MAX_KEYS}].constraint"),
            key: format!("k{MAX_KEYS}"),
            max: MAX_KEYS
        }
    );
    assert!(err.to_string().contains("more than 32 distinct keys"));
}

#[test]
fn decode_accepts_the_encoding_and_rejects_garbage() {
    let original = c(and(vec![eq("env", "prod"), not(exists("version"))]));
    let decoded = Constraints::decode(&original.encoded()[..]).expect("decodes");
    assert_eq!(decoded, original);
    assert_eq!(decoded.proto(), original.proto());
    assert_eq!(
        &decoded.encoded()[..],
        &original.proto().encode_to_vec()[..]
    );
    assert!(matches!(
        Constraints::decode(&[0xff, 0xff, 0xff]),
        Err(ConstraintError::Decode(_))
    ));
    // Decoding validates.
    let bad = single("", Some(ConstraintType::Value("x".into()))).encode_to_vec();
    assert!(matches!(
        Constraints::decode(&bad),
        Err(ConstraintError::EmptyKey { .. })
    ));
    // An empty message is the unconstrained formula.
    assert!(Constraints::decode(&[])
        .expect("decodes")
        .matches(&ParamSet::new()));
}

#[test]
fn equality_and_hash_follow_the_encoding() {
    let a = c(and(vec![eq("env", "prod"), eq("version", "v1")]));
    let b = c(and(vec![eq("env", "prod"), eq("version", "v1")]));
    let swapped = c(and(vec![eq("version", "v1"), eq("env", "prod")]));
    assert_eq!(a, b);
    assert_eq!(hash_of(&a), hash_of(&b));
    // Same meaning, different encoding: different variants as far as identity goes.
    assert_ne!(a, swapped);
    // An empty value is still a value.
    assert_ne!(c(eq("env", "")), c(exists("env")));
    assert_ne!(c(unset()), c(and(vec![])));
}

#[test]
fn keys_lists_every_key_anywhere_in_the_formula() {
    let f = c(or(vec![
        and(vec![eq("env", "prod"), not(exists("version"))]),
        not(not(eq("zone", "a"))),
        unset(),
    ]));
    let expected: BTreeSet<String> = ["env", "version", "zone"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(f.keys(), &expected);
}

#[test]
fn display_is_compact_text_proto_as_tp2_writes_it() {
    let f = c(and(vec![eq("env", "prod"), not(exists("version"))]));
    assert_eq!(
        f.to_string(),
        r#"{and_constraints:[{constraint:{key:"env" value:"prod"}}, {not_constraints:{constraint:{key:"version" exists:{}}}}]}"#
    );
    assert_eq!(c(unset()).to_string(), "{}");
    assert_eq!(c(not(unset())).to_string(), "{not_constraints:{}}");
    assert_eq!(c(or(vec![])).to_string(), "{or_constraints:[]}");
    assert_eq!(
        c(eq("k", "a \"q\"")).to_string(),
        r#"{constraint:{key:"k" value:"a \"q\""}}"#
    );
    assert_eq!(
        format!("{:?}", c(exists("k"))),
        r#"Constraints({constraint:{key:"k" exists:{}}})"#
    );
}

// ---------------------------------------------------------------------------------------------
// Overlap and variant rules, with TP2's examples

#[test]
fn tp2_basic_env_prod_and_env_test_are_disjoint() {
    let prod = c(eq("env", "prod"));
    let test = c(eq("env", "test"));
    assert!(prod.matches(&ps(&[("env", "prod")])));
    assert!(!prod.matches(&ps(&[("env", "test")])));
    assert!(test.matches(&ps(&[("env", "test")])));
    assert!(!test.matches(&ps(&[("env", "prod")])));
    assert_eq!(checked_overlap(Some(&prod), Some(&test)), None);
    assert_eq!(check_variants(&[Some(&prod), Some(&test)]), Ok(()));
}

#[test]
fn tp2_exists_default_is_disjoint_from_the_new_key_variant() {
    let old = c(and(vec![eq("env", "prod"), not(exists("version"))]));
    let new = c(and(vec![eq("env", "prod"), eq("version", "v1")]));
    assert!(old.matches(&ps(&[("env", "prod")])));
    assert!(!old.matches(&ps(&[("env", "prod"), ("version", "v1")])));
    assert!(!old.matches(&ps(&[("env", "prod"), ("version", "v2")])));
    assert!(!old.matches(&ps(&[("env", "test")])));
    assert!(new.matches(&ps(&[("env", "prod"), ("version", "v1")])));
    assert!(!new.matches(&ps(&[("env", "prod")])));
    assert!(!new.matches(&ps(&[("env", "prod"), ("version", "v2")])));
    assert_eq!(checked_overlap(Some(&old), Some(&new)), None);
    assert_eq!(check_variants(&[Some(&old), Some(&new)]), Ok(()));
    // Without the `exists` default the same pair overlaps, at {env=prod, version=v1}.
    let plain = c(eq("env", "prod"));
    assert_eq!(
        checked_overlap(Some(&plain), Some(&new)),
        Some(ps(&[("env", "prod"), ("version", "v1")]))
    );
}

#[test]
fn tp2_example_route_configuration_variants_partition_all_nine_sets() {
    let prod = || eq("env", "prod");
    let v1 = || eq("version", "v1");
    let variants = [
        c(and(vec![not(prod()), not(v1())])),
        c(and(vec![prod(), not(v1())])),
        c(and(vec![not(prod()), v1()])),
        c(and(vec![prod(), v1()])),
    ];
    for env in ["prod", "canary", "test"] {
        for version in ["v1", "v2", "v3"] {
            let params = ps(&[("env", env), ("version", version)]);
            let matching: Vec<usize> = (0..variants.len())
                .filter(|&i| variants[i].matches(&params))
                .collect();
            let expected = usize::from(env == "prod") + 2 * usize::from(version == "v1");
            assert_eq!(matching, vec![expected], "{params}");
        }
    }
    let refs: Vec<Option<&Constraints>> = variants.iter().map(Some).collect();
    assert_eq!(check_variants(&refs), Ok(()));
}

#[test]
fn tp2_overlapping_or_variants_are_rejected_with_witness_env_test() {
    let a = c(or(vec![eq("env", "prod"), eq("env", "test")]));
    let b = c(or(vec![eq("env", "qa"), eq("env", "test")]));
    assert_eq!(
        checked_overlap(Some(&a), Some(&b)),
        Some(ps(&[("env", "test")]))
    );
    assert_eq!(
        check_variants(&[Some(&a), Some(&b)]),
        Err(VariantError::Overlap {
            first: 0,
            second: 1,
            witness: ps(&[("env", "test")])
        })
    );
}

#[test]
fn variants_with_different_key_sets_are_rejected() {
    // TP2 "Adding a New Key on the Server First".
    let a = c(eq("env", "prod"));
    let b = c(and(vec![eq("env", "prod"), eq("version", "v1")]));
    let err = check_variants(&[Some(&a), Some(&b)]).expect_err("different keys");
    assert_eq!(
        err,
        VariantError::DifferentKeys {
            first: 0,
            second: 1,
            first_keys: ["env".to_string()].into(),
            second_keys: ["env".to_string(), "version".to_string()].into(),
        }
    );
    assert_eq!(
        err.to_string(),
        "variants 0 and 1 constrain different keys: {env} vs {env, version}"
    );
    // Even when the key sets differ and the variants are disjoint.
    let c1 = c(eq("env", "prod"));
    let c2 = c(eq("version", "v1"));
    assert!(matches!(
        check_variants(&[Some(&c1), Some(&c2)]),
        Err(VariantError::DifferentKeys { .. })
    ));
}

#[test]
fn unconstrained_and_constrained_variants_are_rejected() {
    let prod = c(eq("env", "prod"));
    assert_eq!(
        check_variants(&[Some(&prod), None]),
        Err(VariantError::DifferentKeys {
            first: 0,
            second: 1,
            first_keys: ["env".to_string()].into(),
            second_keys: BTreeSet::new(),
        })
    );
    // Two unconstrained variants overlap everywhere.
    assert_eq!(
        check_variants(&[None, None]),
        Err(VariantError::Overlap {
            first: 0,
            second: 1,
            witness: ParamSet::new()
        })
    );
    // An unconstrained variant next to one that matches nothing is fine (same, empty, keys).
    let nothing = c(or(vec![]));
    assert_eq!(check_variants(&[None, Some(&nothing)]), Ok(()));
}

#[test]
fn check_variants_accepts_zero_or_one_variant() {
    assert_eq!(check_variants(&[]), Ok(()));
    assert_eq!(check_variants(&[None]), Ok(()));
    let prod = c(eq("env", "prod"));
    assert_eq!(check_variants(&[Some(&prod)]), Ok(()));
}

#[test]
fn check_variants_reports_the_first_violating_pair_in_order() {
    let prod = c(eq("env", "prod"));
    let test = c(eq("env", "test"));
    let prod_or_qa = c(or(vec![eq("env", "prod"), eq("env", "qa")]));
    let version = c(eq("version", "v1"));
    // (0,1) fine, (0,2) overlaps, (0,3) differs in keys: the overlap comes first.
    assert_eq!(
        check_variants(&[Some(&prod), Some(&test), Some(&prod_or_qa), Some(&version)]),
        Err(VariantError::Overlap {
            first: 0,
            second: 2,
            witness: ps(&[("env", "prod")])
        })
    );
    // (0,1) fine, (0,2) differs in keys.
    assert!(matches!(
        check_variants(&[Some(&prod), Some(&test), Some(&version), Some(&prod_or_qa)]),
        Err(VariantError::DifferentKeys {
            first: 0,
            second: 2,
            ..
        })
    ));
    // Only (0,3) overlaps.
    let qa = c(eq("env", "qa"));
    assert_eq!(
        check_variants(&[Some(&prod), Some(&test), Some(&qa), Some(&prod_or_qa)]),
        Err(VariantError::Overlap {
            first: 0,
            second: 3,
            witness: ps(&[("env", "prod")])
        })
    );
    // Only (1,2) overlaps.
    assert_eq!(
        check_variants(&[Some(&test), Some(&qa), Some(&prod_or_qa)]),
        Err(VariantError::Overlap {
            first: 1,
            second: 2,
            witness: ps(&[("env", "qa")])
        })
    );
}

#[test]
fn overlap_with_an_unconstrained_side_is_satisfiability() {
    let prod = c(eq("env", "prod"));
    assert_eq!(checked_overlap(None, None), Some(ParamSet::new()));
    assert_eq!(
        checked_overlap(None, Some(&prod)),
        Some(ps(&[("env", "prod")]))
    );
    assert_eq!(
        checked_overlap(Some(&prod), None),
        Some(ps(&[("env", "prod")]))
    );
    let contradiction = c(and(vec![eq("env", "prod"), not(exists("env"))]));
    assert_eq!(checked_overlap(Some(&contradiction), None), None);
    assert_eq!(checked_overlap(None, Some(&c(not(unset())))), None);
    // A formula that matches nothing overlaps with nothing, not even itself.
    assert_eq!(
        checked_overlap(Some(&contradiction), Some(&contradiction)),
        None
    );
}

#[test]
fn overlap_witness_uses_an_unmentioned_value_when_one_is_needed() {
    // Needs env present with a value other than every one mentioned.
    let a = c(and(vec![
        exists("env"),
        not(or(vec![eq("env", "other"), eq("env", "prod")])),
    ]));
    let b = c(not(eq("env", "other-1")));
    assert_eq!(
        checked_overlap(Some(&a), Some(&b)),
        Some(ps(&[("env", "other-2")]))
    );
    // Keys whose state does not matter are left out of the witness.
    let d = c(or(vec![eq("env", "prod"), eq("zone", "a")]));
    let e = c(or(vec![eq("env", "prod"), exists("version")]));
    assert_eq!(
        checked_overlap(Some(&d), Some(&e)),
        Some(ps(&[("env", "prod")]))
    );
}

#[test]
fn overlap_stays_fast_on_many_keys() {
    // Variants that pin 16 keys each, differing only in the last one, and a wide OR.
    let keys: Vec<String> = (0..16).map(|i| format!("k{i:02}")).collect();
    let pinned = |last: &str| {
        let mut parts: Vec<Proto> = keys[..15].iter().map(|k| eq(k, "v")).collect();
        parts.push(eq(&keys[15], last));
        c(and(parts))
    };
    let variants: Vec<Constraints> = (0..8).map(|i| pinned(&format!("x{i}"))).collect();
    let refs: Vec<Option<&Constraints>> = variants.iter().map(Some).collect();
    let started = Instant::now();
    assert_eq!(check_variants(&refs), Ok(()));
    let wide_a = c(and(keys.iter().map(|k| not(exists(k))).collect()));
    let wide_b = c(or(keys.iter().map(|k| exists(k)).collect()));
    assert_eq!(checked_overlap(Some(&wide_a), Some(&wide_b)), None);
    let all_pairs_a = c(and((0..MAX_KEYS)
        .map(|i| {
            or(vec![
                eq(&format!("p{i:02}"), "a"),
                eq(&format!("p{i:02}"), "b"),
            ])
        })
        .collect()));
    let all_pairs_b = c(and((0..MAX_KEYS)
        .map(|i| not(eq(&format!("p{i:02}"), "a")))
        .collect()));
    let w = checked_overlap(Some(&all_pairs_a), Some(&all_pairs_b)).expect("overlap");
    assert!(w.iter().all(|(_, v)| v == "b"));
    assert!(started.elapsed().as_secs() < 5);
}

// ---------------------------------------------------------------------------------------------
// Randomized: overlap against brute force

use crate::test_rng::Rng;

const KEYS: [&str; 3] = ["a", "b", "c"];
const VALUES: [&str; 3] = ["x", "y", "z"];

/// A random formula at most `depth` levels deep.
fn random_formula(rng: &mut Rng, depth: u32) -> Proto {
    let leaf_only = depth <= 1;
    match rng.below(if leaf_only { 3 } else { 7 }) {
        0 => eq(rng.pick(&KEYS), rng.pick(&VALUES)),
        1 => exists(rng.pick(&KEYS)),
        2 => {
            if rng.below(4) == 0 {
                unset()
            } else {
                eq(rng.pick(&KEYS), rng.pick(&VALUES))
            }
        }
        3 | 4 => {
            let n = rng.below(4);
            let children = (0..n).map(|_| random_formula(rng, depth - 1)).collect();
            if rng.below(2) == 0 {
                and(children)
            } else {
                or(children)
            }
        }
        _ => not(random_formula(rng, depth - 1)),
    }
}

/// Evaluates the proto directly, independently of `Constraints::matches`.
fn reference_matches(p: &Proto, params: &ParamSet) -> bool {
    match &p.r#type {
        None => true,
        Some(Type::Constraint(s)) => match &s.constraint_type {
            Some(ConstraintType::Value(v)) => params.get(&s.key) == Some(v.as_str()),
            Some(ConstraintType::Exists(_)) => params.get(&s.key).is_some(),
            None => unreachable!("generator always sets a matcher"),
        },
        Some(Type::AndConstraints(l)) => l.constraints.iter().all(|c| reference_matches(c, params)),
        Some(Type::OrConstraints(l)) => l.constraints.iter().any(|c| reference_matches(c, params)),
        Some(Type::NotConstraints(inner)) => !reference_matches(inner, params),
    }
}

/// Every assignment of each key to absent, x, y, z or w (a value no formula mentions).
fn all_param_sets() -> Vec<ParamSet> {
    let states = [None, Some("x"), Some("y"), Some("z"), Some("w")];
    let mut out = Vec::new();
    for a in states {
        for b in states {
            for c in states {
                let mut p = ParamSet::new();
                for (k, v) in KEYS.iter().zip([a, b, c]) {
                    if let Some(v) = v {
                        p.insert(*k, v);
                    }
                }
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn random_overlap_agrees_with_brute_force() {
    let sets = all_param_sets();
    let (mut overlapping, mut disjoint, mut with_none) = (0, 0, 0);
    for seed in [1u64, 2, 3, 4] {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(1));
        for _ in 0..1000 {
            let pa = random_formula(&mut rng, 4);
            let pb = random_formula(&mut rng, 4);
            let a = c(pa.clone());
            let b = c(pb.clone());
            // Sometimes one side is unconstrained.
            let (a, b) = match rng.below(10) {
                0 => (None, Some(&b)),
                1 => (Some(&a), None),
                _ => (Some(&a), Some(&b)),
            };
            if a.is_none() || b.is_none() {
                with_none += 1;
            }
            let matches_side = |side: Option<&Constraints>, proto: &Proto, p: &ParamSet| {
                side.is_none_or(|s| {
                    let m = s.matches(p);
                    assert_eq!(m, reference_matches(proto, p), "{s} on {p}");
                    m
                })
            };
            let brute = sets
                .iter()
                .find(|p| matches_side(a, &pa, p) && matches_side(b, &pb, p));
            let found = checked_overlap(a, b);
            assert_eq!(
                found.is_some(),
                brute.is_some(),
                "a={a:?} b={b:?} overlap={found:?} brute={brute:?}"
            );
            if let Some(w) = &found {
                assert!(matches_side(a, &pa, w) && matches_side(b, &pb, w));
                overlapping += 1;
            } else {
                disjoint += 1;
            }
            // Overlap is symmetric in whether it exists.
            assert_eq!(overlap(b, a).is_some(), found.is_some());
        }
    }
    // The generator exercises both outcomes.
    assert!(overlapping > 500 && disjoint > 500 && with_none > 200);
}

// ---------------------------------------------------------------------------------------------
// ParamSet as a value

#[test]
fn a_parameter_set_emptied_by_removal_is_the_empty_set() {
    let mut p = ps(&[("env", "prod")]);
    assert_eq!(p.remove("missing"), None);
    assert_eq!(p.remove("env").as_deref(), Some("prod"));
    assert!(p.is_empty());
    assert_eq!(p, ParamSet::new());
    assert_eq!(hash_of(&p), hash_of(&ParamSet::new()));
    assert_eq!(ps(&[]), ParamSet::new(), "built from no pairs");
    assert_eq!(p.to_string(), "{}");
}

#[test]
fn a_cloned_parameter_set_changes_apart_from_its_original() {
    let original = ps(&[("env", "prod"), ("zone", "a")]);
    let mut copy = original.clone();
    copy.insert("env", "staging");
    copy.remove("zone");
    assert_eq!(original, ps(&[("env", "prod"), ("zone", "a")]));
    assert_eq!(copy, ps(&[("env", "staging")]));
    assert!(ParamSet::new() < original, "the empty set sorts first");
}

#[test]
fn a_parameter_set_keeps_its_keys_in_order_and_the_last_value_of_each() {
    let mut p: ParamSet = [("zone", "a"), ("env", "prod"), ("zone", "b")]
        .into_iter()
        .collect();
    assert_eq!(
        p.iter().collect::<Vec<_>>(),
        [("env", "prod"), ("zone", "b")]
    );
    p.insert("app", "web");
    p.insert("env", "test");
    assert_eq!(
        p.iter().collect::<Vec<_>>(),
        [("app", "web"), ("env", "test"), ("zone", "b")]
    );
    assert_eq!(p.get("env"), Some("test"));
    assert_eq!(p.get("missing"), None);
    assert_eq!(p.len(), 3);
    assert_eq!(p.to_string(), "{app=web, env=test, zone=b}");
}
