//! Fuzz targets, run as property tests (proptest) for a fixed budget in every test run: hostile
//! request bytes through the decoders the server uses, and hostile request sequences, store
//! changes and time through the per-client session (SotW and delta), driven the way the stream
//! driver drives it (the in-memory harness, `xdsd_core::testing`). Nothing may panic; the properties below must hold. `XDSD_FUZZ_CASES` sets
//! the cases per target (default 256); see docs/fuzzing.md for longer runs.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, ResourceLocator};
use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
use proptest::prelude::*;
use prost::Message;
use xdsd_core::params::Constraints;
use xdsd_core::session::{DeltaMachine, DeltaRequest, Session, SotwMachine, SotwRequest};
use xdsd_core::store::{Change, Store};
use xdsd_core::testing::{Ask, Flavor, Pair};
use xdsd_core::types::{CLUSTER, CLUSTER_LOAD_ASSIGNMENT, LISTENER, ROUTE_CONFIGURATION, SECRET};

use crate::support::input;

const TYPES: [&str; 7] = [
    CLUSTER,
    CLUSTER_LOAD_ASSIGNMENT,
    LISTENER,
    ROUTE_CONFIGURATION,
    SECRET,
    "type.googleapis.com/no.such.Type",
    "",
];

fn type_url() -> impl Strategy<Value = String> {
    prop_oneof![
        (0..TYPES.len()).prop_map(|i| TYPES[i].to_owned()),
        "\\PC{0,40}",
    ]
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (0..5u8).prop_map(|i| format!("r{i}")),
        1 => Just("*".to_owned()),
        1 => "\\PC{0,12}",
    ]
}

fn env() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        Just(Some("prod".to_owned())),
        Just(Some("test".to_owned())),
    ]
}

fn node() -> impl Strategy<Value = Option<Node>> {
    prop_oneof![
        1 => Just(None),
        6 => (env(), prop_oneof![4 => Just("n".to_owned()), 1 => "\\PC{0,8}"]).prop_map(|(env, id)| {
            Some(Node {
                id,
                cluster: "c".into(),
                metadata: env.map(|env| Struct {
                    fields: [(
                        "env".to_owned(),
                        Value {
                            kind: Some(Kind::StringValue(env)),
                        },
                    )]
                    .into_iter()
                    .collect(),
                }),
                ..Default::default()
            })
        }),
    ]
}

/// A nonce: empty, one the server sent (by index among those sent), or anything.
#[derive(Debug, Clone)]
enum NonceSpec {
    Empty,
    Sent(usize),
    Other(String),
}

fn nonce() -> impl Strategy<Value = NonceSpec> {
    prop_oneof![
        1 => Just(NonceSpec::Empty),
        3 => (0..8usize).prop_map(NonceSpec::Sent),
        1 => "\\PC{0,6}".prop_map(NonceSpec::Other),
    ]
}

fn locators() -> impl Strategy<Value = Vec<ResourceLocator>> {
    prop::collection::vec(
        (name(), env()).prop_map(|(name, env)| ResourceLocator {
            name,
            dynamic_parameters: env.into_iter().map(|e| ("env".to_owned(), e)).collect(),
        }),
        0..3,
    )
}

#[derive(Debug, Clone)]
struct RequestSpec {
    type_url: String,
    names: Vec<String>,
    unsubscribe: Vec<String>,
    locators: Vec<ResourceLocator>,
    nonce: NonceSpec,
    version: Option<String>,
    node: Option<Node>,
    nack: bool,
}

fn request() -> impl Strategy<Value = RequestSpec> {
    (
        type_url(),
        prop::collection::vec(name(), 0..4),
        prop::collection::vec(name(), 0..3),
        locators(),
        nonce(),
        prop::option::of("\\PC{0,6}"),
        node(),
        any::<bool>(),
    )
        .prop_map(
            |(type_url, names, unsubscribe, locators, nonce, version, node, nack)| RequestSpec {
                type_url,
                names,
                unsubscribe,
                locators,
                nonce,
                version,
                node,
                nack,
            },
        )
}

#[derive(Debug, Clone)]
enum Step {
    Request(Box<RequestSpec>),
    /// Set (with content and variant) or remove a resource.
    Store {
        type_url: usize,
        name: u8,
        content: Option<u8>,
        env: Option<String>,
    },
    /// Time passes.
    Wait(u64),
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        prop_oneof![
            4 => request().prop_map(|r| Step::Request(Box::new(r))),
            3 => (0..4usize, 0..5u8, prop::option::of(0..3u8), env()).prop_map(
                |(type_url, name, content, env)| Step::Store { type_url, name, content, env }
            ),
            1 => (0..120_000u64).prop_map(Step::Wait),
        ],
        1..40,
    )
}

impl RequestSpec {
    /// The spec as the harness's client sends it, answering `nonce`.
    fn ask(&self, nonce: String) -> Ask {
        Ask {
            type_url: self.type_url.clone(),
            subscribe: self.names.clone(),
            unsubscribe: self.unsubscribe.clone(),
            locators: self.locators.clone(),
            version: self.version.clone(),
            nonce,
            node: self.node.clone(),
            nack: self.nack.then(|| "rejected".to_owned()),
        }
    }
}

/// Runs `steps` through a session the way the stream driver does, in the in-memory harness
/// (`xdsd_core::testing`): requests in (the watcher told what they watch), store changes in
/// when they wake the watcher, time in, every response drained after each step and the waiting
/// types muted. A request the session refuses ends the stream, as it would on the wire.
fn run<M: Flavor>(steps: &[Step]) -> Result<(), TestCaseError> {
    let mut pair: Pair<M> = Pair::new(Store::new(), Session::new(None), None);
    let mut seen = HashSet::new();
    let mut ever_set: HashSet<String> = HashSet::new();
    // The stream starts the way clients start one: a node, clusters by wildcard; what follows
    // is anything.
    let first = Step::Request(Box::new(RequestSpec {
        type_url: CLUSTER.into(),
        names: Vec::new(),
        unsubscribe: Vec::new(),
        locators: Vec::new(),
        nonce: NonceSpec::Empty,
        version: None,
        node: Some(Node {
            id: "n".into(),
            cluster: "c".into(),
            ..Default::default()
        }),
        nack: false,
    }));
    let mut responses = 0;
    for step in std::iter::once(&first).chain(steps) {
        match step {
            Step::Request(spec) => {
                let nonces = pair.client.nonces();
                let nonce = match &spec.nonce {
                    NonceSpec::Empty => String::new(),
                    NonceSpec::Sent(i) => nonces
                        .get(nonces.len().saturating_sub(1 + i))
                        .cloned()
                        .unwrap_or_default(),
                    NonceSpec::Other(n) => n.clone(),
                };
                if pair.send(&spec.ask(nonce)).is_err() {
                    // The stream ends.
                    return Ok(());
                }
            }
            Step::Store {
                type_url,
                name,
                content,
                env,
            } => {
                let type_url = TYPES[*type_url];
                let name = format!("r{name}");
                let change = match content {
                    Some(c) => {
                        let constraints = env.as_ref().map(|e| {
                            Constraints::new(crate::support::env_constraint(e))
                                .expect("a valid constraint")
                        });
                        ever_set.insert(name.clone());
                        Change::Set(
                            input(type_url, &name, format!("content-{c}").as_bytes())
                                .with_constraints(constraints),
                        )
                    }
                    None => Change::Remove {
                        type_url: type_url.into(),
                        name,
                    },
                };
                // The store may refuse a change (the variant rules): then nothing changed.
                let _ = pair.store.apply([change]);
                pair.wake();
            }
            Step::Wait(ms) => pair.advance(Duration::from_millis(*ms)),
        }
        for (type_url, response) in pair.flush() {
            let received = M::received(&response);
            let nonce = received.nonce;
            prop_assert!(!nonce.is_empty(), "a response without a nonce ({type_url})");
            prop_assert!(seen.insert(nonce.clone()), "nonce {nonce} sent twice");
            for (name, _) in received.resources {
                prop_assert!(
                    ever_set.contains(&name),
                    "{type_url} response carries {name}, which the store never held"
                );
            }
            responses += 1;
        }
    }
    // A sequence whose store changes touched clusters was answered.
    let touched_clusters = steps.iter().any(|s| {
        matches!(
            s,
            Step::Store {
                type_url: 0,
                content: Some(_),
                env: None,
                ..
            }
        )
    });
    if touched_clusters && !steps.iter().any(|s| matches!(s, Step::Request(_))) {
        prop_assert!(
            responses > 0,
            "clusters were set and the wildcard stream got nothing"
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(xdsd_testsupport::fuzz::config())]

    /// Any bytes through the request decoders the server uses, then into a session: an error or
    /// a request, never a panic.
    #[test]
    fn arbitrary_bytes_never_panic_the_request_decoders(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let store = Store::new();
        store.apply([Change::Set(input(CLUSTER, "r0", b"c"))]).expect("a cluster");
        if let Ok(request) = SotwRequest::decode(bytes.as_slice()) {
            let mut session: Session<SotwMachine> = Session::new(None);
            let mut watcher = store.watcher();
            if session.handle_request_watched(&request, &store.snapshot(), &mut watcher).is_ok() {
                while session.poll_response(&store.snapshot(), Instant::now()).is_some() {}
            }
        }
        if let Ok(request) = DeltaRequest::decode(bytes.as_slice()) {
            let mut session: Session<DeltaMachine> = Session::new(None);
            let mut watcher = store.watcher();
            if session.handle_request_watched(&request, &store.snapshot(), &mut watcher).is_ok() {
                while session.poll_response(&store.snapshot(), Instant::now()).is_some() {}
            }
        }
    }

    /// Valid requests with bytes flipped, cut or inserted: the zero-copy SotW decoder agrees
    /// with prost's on what is a DiscoveryRequest, and nothing panics.
    #[test]
    fn mutated_requests_never_panic_the_decoders(
        spec in request(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0..3u8), 0..6),
    ) {
        let mut bytes = DiscoveryRequest {
            version_info: spec.version.clone().unwrap_or_default(),
            node: spec.node.clone(),
            resource_names: spec.names.clone(),
            resource_locators: spec.locators.clone(),
            type_url: spec.type_url.clone(),
            ..Default::default()
        }
        .encode_to_vec();
        for (at, byte, op) in edits {
            if bytes.is_empty() {
                bytes.push(byte);
                continue;
            }
            let i = at.index(bytes.len());
            match op {
                0 => bytes[i] = byte,
                1 => bytes.truncate(i),
                _ => bytes.insert(i, byte),
            }
        }
        let ours = SotwRequest::decode(bytes.as_slice());
        let prost = DiscoveryRequest::decode(bytes.as_slice());
        if let (Ok(ours), Ok(prost)) = (&ours, &prost) {
            prop_assert_eq!(&ours.type_url, &prost.type_url);
            prop_assert_eq!(&ours.version_info, &prost.version_info);
        }
        if prost.is_ok() {
            prop_assert!(ours.is_ok(), "a valid DiscoveryRequest our decoder refuses: {:?}", ours.err());
        }
    }

    /// Hostile request sequences, store changes and time through a SotW session.
    #[test]
    fn hostile_sequences_keep_the_sotw_session_sound(steps in steps()) {
        run::<SotwMachine>(&steps)?;
    }

    /// Hostile request sequences, store changes and time through a delta session.
    #[test]
    fn hostile_sequences_keep_the_delta_session_sound(steps in steps()) {
        run::<DeltaMachine>(&steps)?;
    }
}
