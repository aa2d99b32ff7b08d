//! Fuzz targets for a hostile server, run as property tests (proptest) for a fixed budget in
//! every test run: any bytes as a response, mutated responses, and hostile sequences of
//! responses (nonces, versions, removals, aliases, constraints, TTLs, heartbeats) interleaved
//! with subscriptions, reconnects and time, through the machine. Nothing may panic, and after
//! every step the machine's invariants hold (`Client::check_invariants`: its indexes agree with
//! what it holds, what it holds is wanted, the bounds hold) along with the protocol's rules
//! checked below. Unit tests (not `tests/it/`) because the invariants read private state.
//! `XDSD_FUZZ_CASES` sets the cases per target (default 256); see docs/fuzzing.md.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::single_constraint::{
    ConstraintType, Exists,
};
use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::{
    SingleConstraint, Type,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryResponse, DiscoveryResponse, DynamicParameterConstraints,
    Resource as WireResource, ResourceName,
};
use envoy_types::pb::google::protobuf::{Any, Duration as ProtoDuration};
use proptest::prelude::*;
use prost::Message;

use crate::types::{CLUSTER, CLUSTER_LOAD_ASSIGNMENT, LISTENER, VIRTUAL_HOST};
use crate::*;

const TYPES: [&str; 5] = [
    CLUSTER,
    CLUSTER_LOAD_ASSIGNMENT,
    LISTENER,
    VIRTUAL_HOST,
    "type.googleapis.com/no.such.Type",
];
const NAMES: [&str; 5] = ["a", "b", "c", "rc/x.example", ""];

fn type_url() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => (0..TYPES.len()).prop_map(|i| TYPES[i].to_owned()),
        1 => "\\PC{0,12}",
    ]
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => (0..NAMES.len()).prop_map(|i| NAMES[i].to_owned()),
        1 => "\\PC{0,6}",
    ]
}

fn single(key: &str, value: Option<&str>) -> DynamicParameterConstraints {
    DynamicParameterConstraints {
        r#type: Some(Type::Constraint(SingleConstraint {
            key: key.into(),
            constraint_type: Some(match value {
                Some(v) => ConstraintType::Value(v.into()),
                None => ConstraintType::Exists(Exists {}),
            }),
        })),
    }
}

fn constraints() -> impl Strategy<Value = Option<DynamicParameterConstraints>> {
    prop_oneof![
        3 => Just(None),
        1 => Just(Some(single("env", Some("prod")))),
        1 => Just(Some(single("env", Some("test")))),
        1 => Just(Some(single("zone", None))),
        1 => Just(Some(DynamicParameterConstraints { r#type: None })),
        1 => Just(Some(DynamicParameterConstraints {
            r#type: Some(Type::NotConstraints(Box::new(single("env", Some("prod"))))),
        })),
    ]
}

fn params() -> impl Strategy<Value = Params> {
    prop_oneof![
        Just(Params::new()),
        Just([("env".to_owned(), "prod".to_owned())].into()),
        Just([("env".to_owned(), "test".to_owned())].into()),
        Just([("zone".to_owned(), "z".to_owned())].into()),
    ]
}

/// A body of `type_url` named `name` (field 1, as every xDS resource), with `tag` in it.
fn body(type_url: &str, name: &str, tag: u8) -> Any {
    Any {
        type_url: type_url.to_owned(),
        value: Cluster {
            name: name.to_owned(),
            alt_stat_name: format!("t{tag}"),
            ..Default::default()
        }
        .encode_to_vec(),
    }
}

/// One resource of a response, as the server writes it.
#[derive(Debug, Clone)]
struct ResourceSpec {
    name: String,
    /// None: no body (a heartbeat, or with aliases an alias's "not found").
    tag: Option<u8>,
    /// The body of another type than the response's.
    wrong_type: bool,
    /// Named in the body only (a wrapper without `name`).
    unnamed: bool,
    constraints: Option<DynamicParameterConstraints>,
    aliases: Vec<String>,
    version: String,
    ttl: Option<i64>,
    /// SotW: in a `Resource` wrapper.
    wrapped: bool,
}

fn resource() -> impl Strategy<Value = ResourceSpec> {
    (
        name(),
        prop_oneof![4 => (0..3u8).prop_map(Some), 1 => Just(None)],
        prop::bool::weighted(0.05),
        prop::bool::weighted(0.1),
        constraints(),
        prop::collection::vec(name(), 0..2),
        prop_oneof![Just(String::new()), (0..3u8).prop_map(|v| format!("v{v}"))],
        prop::option::weighted(0.2, prop_oneof![Just(-5i64), 1..100i64, Just(i64::MAX)]),
        any::<bool>(),
    )
        .prop_map(
            |(name, tag, wrong_type, unnamed, constraints, aliases, version, ttl, wrapped)| {
                ResourceSpec {
                    name,
                    tag,
                    wrong_type,
                    unnamed,
                    constraints,
                    aliases,
                    version,
                    ttl,
                    wrapped,
                }
            },
        )
}

impl ResourceSpec {
    fn wire(&self, type_url: &str) -> WireResource {
        let body_type = if self.wrong_type { LISTENER } else { type_url };
        let resource = self.tag.map(|t| body(body_type, &self.name, t));
        let name = if self.unnamed {
            String::new()
        } else {
            self.name.clone()
        };
        WireResource {
            name: if self.constraints.is_some() {
                String::new()
            } else {
                name.clone()
            },
            resource_name: self.constraints.clone().map(|c| ResourceName {
                name,
                dynamic_parameter_constraints: Some(c),
            }),
            aliases: self.aliases.clone(),
            version: self.version.clone(),
            resource,
            ttl: self.ttl.map(|s| ProtoDuration {
                seconds: s,
                nanos: 0,
            }),
            ..Default::default()
        }
    }

    fn sotw(&self, type_url: &str) -> Any {
        if self.wrapped || self.tag.is_none() {
            Any {
                type_url: RESOURCE_WRAPPER.to_owned(),
                value: self.wire(type_url).encode_to_vec(),
            }
        } else {
            let body_type = if self.wrong_type { LISTENER } else { type_url };
            body(body_type, &self.name, self.tag.unwrap_or(0))
        }
    }
}

#[derive(Debug, Clone)]
struct ResponseSpec {
    type_url: String,
    version: String,
    /// None: a fresh nonce; Some: this one (a repeat, or made up).
    nonce: Option<String>,
    resources: Vec<ResourceSpec>,
    removed: Vec<String>,
    removed_variants: Vec<(String, Option<DynamicParameterConstraints>)>,
}

fn response() -> impl Strategy<Value = ResponseSpec> {
    (
        type_url(),
        prop_oneof![Just(String::new()), (0..4u8).prop_map(|v| format!("v{v}"))],
        prop::option::weighted(0.2, "\\PC{0,3}"),
        prop::collection::vec(resource(), 0..5),
        prop::collection::vec(name(), 0..3),
        prop::collection::vec((name(), constraints()), 0..2),
    )
        .prop_map(
            |(type_url, version, nonce, resources, removed, removed_variants)| ResponseSpec {
                type_url,
                version,
                nonce,
                resources,
                removed,
                removed_variants,
            },
        )
}

impl ResponseSpec {
    fn sotw(&self, nonce: String) -> DiscoveryResponse {
        DiscoveryResponse {
            version_info: self.version.clone(),
            resources: self
                .resources
                .iter()
                .map(|r| r.sotw(&self.type_url))
                .collect(),
            type_url: self.type_url.clone(),
            nonce,
            ..Default::default()
        }
    }

    fn delta(&self, nonce: String) -> DeltaDiscoveryResponse {
        DeltaDiscoveryResponse {
            system_version_info: self.version.clone(),
            resources: self
                .resources
                .iter()
                .map(|r| r.wire(&self.type_url))
                .collect(),
            type_url: self.type_url.clone(),
            removed_resources: self.removed.clone(),
            removed_resource_names: self
                .removed_variants
                .iter()
                .map(|(name, c)| ResourceName {
                    name: name.clone(),
                    dynamic_parameter_constraints: c.clone(),
                })
                .collect(),
            nonce,
            ..Default::default()
        }
    }
}

#[derive(Debug, Clone)]
enum Step {
    Subscribe(String, String),
    Locator(String, String, Params),
    Unsubscribe(String, String),
    UnsubscribeLocator(String, String, Params),
    LegacyWildcard(String),
    Connect,
    Disconnect,
    Respond(Box<ResponseSpec>),
    Wait(u64),
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        prop_oneof![
            3 => (type_url(), prop_oneof![4 => name(), 1 => Just("*".to_owned())])
                .prop_map(|(t, n)| Step::Subscribe(t, n)),
            1 => (type_url(), name(), params()).prop_map(|(t, n, p)| Step::Locator(t, n, p)),
            1 => (type_url(), prop_oneof![4 => name(), 1 => Just("*".to_owned())])
                .prop_map(|(t, n)| Step::Unsubscribe(t, n)),
            1 => (type_url(), name(), params())
                .prop_map(|(t, n, p)| Step::UnsubscribeLocator(t, n, p)),
            1 => type_url().prop_map(Step::LegacyWildcard),
            1 => Just(Step::Connect),
            1 => Just(Step::Disconnect),
            6 => response().prop_map(|r| Step::Respond(Box::new(r))),
            1 => (0..40_000u64).prop_map(Step::Wait),
        ],
        1..40,
    )
}

/// A client with small bounds, so that hostile responses reach them.
fn client(flavor: Flavor, ads: bool) -> Client {
    client_keeping(flavor, ads, true)
}

/// [`client`], keeping the bodies it received or only their digests (`Config::keep_bodies`).
fn client_keeping(flavor: Flavor, ads: bool, keep_bodies: bool) -> Client {
    let mut config = Config::new(Node {
        id: "fuzz".into(),
        ..Default::default()
    });
    config.flavor = flavor;
    config.ads = ads;
    config.limits = Limits {
        max_types: 3,
        max_names: 4,
        max_bytes: 80,
    };
    config.keep_bodies = keep_bodies;
    Client::new(config)
}

/// What the machine held of a type: (name, constraints' bytes, version, body).
fn snapshot(client: &Client, type_url: &str) -> Vec<(String, Vec<u8>, String, Any)> {
    client
        .resources(type_url)
        .map(|r| {
            (
                r.name.clone(),
                r.constraints
                    .as_ref()
                    .map(Message::encode_to_vec)
                    .unwrap_or_default(),
                r.version.clone(),
                r.body.clone(),
            )
        })
        .collect()
}

/// Runs `steps`; panics (with the step) where a rule breaks.
fn run(flavor: Flavor, ads: bool, keep: bool, steps: &[Step]) -> Result<(), TestCaseError> {
    let mut c = client_keeping(flavor, ads, keep);
    let mut now = Instant::now();
    let mut fresh = 0u64;
    // The last nonce received of each type on this stream: each request carries it.
    let mut nonces: BTreeMap<String, String> = BTreeMap::new();
    for (i, step) in steps.iter().enumerate() {
        let mut rejected_check = None;
        match step {
            Step::Subscribe(t, n) => {
                let _ = c.subscribe(t, [n]);
            }
            Step::Locator(t, n, p) => {
                let _ = c.subscribe_locator(t, n, p.clone());
            }
            Step::Unsubscribe(t, n) => c.unsubscribe(t, n),
            Step::UnsubscribeLocator(t, n, p) => c.unsubscribe_locator(t, n, p.clone()),
            Step::LegacyWildcard(t) => {
                let _ = c.subscribe_legacy_wildcard(t);
            }
            Step::Connect => {
                if !c.is_connected() {
                    c.connected();
                    nonces.clear();
                }
            }
            Step::Disconnect => c.disconnected("fuzz"),
            Step::Respond(r) => {
                // A server answers only on a stream that is up.
                if c.is_connected() {
                    let nonce = r.nonce.clone().unwrap_or_else(|| {
                        fresh += 1;
                        format!("n{fresh}")
                    });
                    let before = snapshot(&c, &r.type_url);
                    let known = c.knows_type(&r.type_url);
                    match flavor {
                        Flavor::Sotw => c.handle_sotw(now, r.sotw(nonce.clone())),
                        Flavor::Delta => c.handle_delta(now, r.delta(nonce.clone())),
                    }
                    if known {
                        nonces.insert(r.type_url.clone(), nonce);
                    }
                    rejected_check = Some((r.type_url.clone(), before));
                }
            }
            Step::Wait(ms) => {
                now += Duration::from_millis(*ms);
                c.handle_timeout(now);
            }
        }
        c.check_invariants()
            .map_err(|e| TestCaseError::fail(format!("step {i} {step:?}: {e}")))?;
        let events: Vec<Event> = std::iter::from_fn(|| c.poll_event()).collect();
        if let Some((type_url, before)) = rejected_check {
            // A NACKed response changes nothing held.
            if events
                .iter()
                .any(|e| matches!(e, Event::Rejected { type_url: t, .. } if *t == type_url))
            {
                prop_assert_eq!(&before, &snapshot(&c, &type_url), "step {}: NACK kept", i);
            }
        }
        // Every request carries the last nonce received of its type on this stream.
        let mut drained = 0;
        while let Some(request) = c.poll_request(now) {
            drained += 1;
            prop_assert!(drained < 64, "requests never end");
            let (type_url, nonce) = match &request {
                Request::Sotw(r) => (&r.type_url, &r.response_nonce),
                Request::Delta(r) => (&r.type_url, &r.response_nonce),
            };
            let expected = nonces.get(type_url).cloned().unwrap_or_default();
            prop_assert_eq!(nonce, &expected, "step {}: the nonce of {}", i, type_url);
        }
        prop_assert!(c.is_connected() || drained == 0, "a request while down");
        // A timer is never due in the past once handled.
        c.handle_timeout(now);
        prop_assert!(
            c.poll_timeout().is_none_or(|t| t > now),
            "step {}: a timer due",
            i
        );
        std::iter::from_fn(|| c.poll_event()).for_each(drop);
    }
    Ok(())
}

proptest! {
    #![proptest_config(xdsd_testsupport::fuzz::config())]

    #[test]
    fn arbitrary_bytes_as_responses_never_panic_the_client(
        bytes in prop::collection::vec(any::<u8>(), 0..512),
        flavor in prop_oneof![Just(Flavor::Sotw), Just(Flavor::Delta)],
    ) {
        let mut c = client(flavor, true);
        c.connected();
        for t in [CLUSTER, LISTENER] {
            let _ = c.subscribe(t, ["*"]);
        }
        let _ = c.subscribe(CLUSTER_LOAD_ASSIGNMENT, ["a", "b"]);
        std::iter::from_fn(|| c.poll_request(Instant::now())).for_each(drop);
        let now = Instant::now();
        match flavor {
            Flavor::Sotw => {
                if let Ok(r) = DiscoveryResponse::decode(bytes.as_slice()) {
                    c.handle_sotw(now, r);
                }
            }
            Flavor::Delta => {
                if let Ok(r) = DeltaDiscoveryResponse::decode(bytes.as_slice()) {
                    c.handle_delta(now, r);
                }
            }
        }
        // And any bytes as one resource's body or wrapper.
        c.handle_sotw(now, DiscoveryResponse {
            type_url: CLUSTER.into(),
            resources: vec![
                Any { type_url: CLUSTER.into(), value: bytes.clone() },
                Any { type_url: RESOURCE_WRAPPER.into(), value: bytes.clone() },
            ],
            nonce: "x".into(),
            ..Default::default()
        });
        c.check_invariants().map_err(TestCaseError::fail)?;
        std::iter::from_fn(|| c.poll_request(now)).for_each(drop);
        std::iter::from_fn(|| c.poll_event()).for_each(drop);
    }

    #[test]
    fn mutated_responses_never_panic_the_client(
        spec in response(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0..3u8), 1..6),
        flavor in prop_oneof![Just(Flavor::Sotw), Just(Flavor::Delta)],
    ) {
        let mut c = client(flavor, true);
        c.connected();
        let _ = c.subscribe(&spec.type_url, ["*"]);
        let _ = c.subscribe(&spec.type_url, ["a"]);
        std::iter::from_fn(|| c.poll_request(Instant::now())).for_each(drop);
        let mut bytes = match flavor {
            Flavor::Sotw => spec.sotw("n".into()).encode_to_vec(),
            Flavor::Delta => spec.delta("n".into()).encode_to_vec(),
        };
        for (at, byte, op) in edits {
            if bytes.is_empty() {
                bytes.push(byte);
                continue;
            }
            let i = at.index(bytes.len());
            match op {
                0 => bytes[i] = byte,
                1 => bytes.insert(i, byte),
                _ => bytes.truncate(i),
            }
        }
        let now = Instant::now();
        match flavor {
            Flavor::Sotw => {
                if let Ok(r) = DiscoveryResponse::decode(bytes.as_slice()) {
                    c.handle_sotw(now, r);
                }
            }
            Flavor::Delta => {
                if let Ok(r) = DeltaDiscoveryResponse::decode(bytes.as_slice()) {
                    c.handle_delta(now, r);
                }
            }
        }
        c.check_invariants().map_err(TestCaseError::fail)?;
        std::iter::from_fn(|| c.poll_request(now)).for_each(drop);
    }

    #[test]
    fn hostile_response_sequences_keep_the_sotw_client_sound(steps in steps(), ads in any::<bool>(), keep in any::<bool>()) {
        run(Flavor::Sotw, ads, keep, &steps)?;
    }

    #[test]
    fn hostile_response_sequences_keep_the_delta_client_sound(steps in steps(), ads in any::<bool>(), keep in any::<bool>()) {
        run(Flavor::Delta, ads, keep, &steps)?;
    }
}
