//! The session's own rules: node identity, type resolution, parameter sets, push order.

use std::collections::BTreeMap;
use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};

use super::*;
use crate::protocol::delta::{DeltaMachine, DeltaResponse};
use crate::protocol::sotw::{SotwMachine, SotwRequest, SotwResponse};
use crate::protocol::test_support::input;
use crate::store::Store;
use crate::types::{CLUSTER, CLUSTER_LOAD_ASSIGNMENT, LISTENER};

fn node(id: &str, cluster: &str) -> Node {
    Node {
        id: id.into(),
        cluster: cluster.into(),
        ..Default::default()
    }
}

fn with_metadata(mut node: Node, fields: &[(&str, &str)]) -> Node {
    node.metadata = Some(Struct {
        fields: fields
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    Value {
                        kind: Some(Kind::StringValue(v.to_string())),
                    },
                )
            })
            .collect(),
    });
    node
}

fn sotw(type_url: &str, names: &[&str], nonce: &str, node: Option<&Node>) -> SotwRequest {
    (&DiscoveryRequest {
        type_url: type_url.into(),
        resource_names: names.iter().map(|n| n.to_string()).collect(),
        response_nonce: nonce.into(),
        node: node.cloned(),
        ..Default::default()
    })
        .into()
}

fn ads() -> Session<SotwMachine> {
    Session::new(None)
}

#[test]
fn a_session_that_refuses_secrets_ends_a_secret_request_with_permission_denied_and_serves_the_rest()
{
    use crate::types::SECRET;
    let store = Store::new();
    store
        .apply([
            crate::store::Change::Set(input(CLUSTER, "c", "c")),
            crate::store::Change::Set(input(SECRET, "key", "private")),
        ])
        .unwrap();
    let n = node("n", "c");
    // Other types are served as before.
    let mut s = ads();
    s.refuse_secrets();
    s.handle_request(&sotw(CLUSTER, &[], "", Some(&n)), &store.snapshot())
        .unwrap();
    let (_, response) = s
        .poll_response(&store.snapshot(), Instant::now())
        .expect("clusters");
    assert_eq!(response.len(), 1);
    // The secret type is refused, by name or wildcard.
    for names in [&["key"][..], &[]] {
        let mut s = ads();
        s.refuse_secrets();
        let err = s
            .handle_request(&sotw(SECRET, names, "", Some(&n)), &store.snapshot())
            .unwrap_err();
        assert_eq!(err, SessionError::SecretsOverPlaintext);
        assert_eq!(err.kind(), ErrorKind::PermissionDenied);
        assert!(s.poll_response(&store.snapshot(), Instant::now()).is_none());
    }
    // A session that does not refuse them serves them.
    let mut s = ads();
    s.handle_request(&sotw(SECRET, &["key"], "", Some(&n)), &store.snapshot())
        .unwrap();
    assert!(s.poll_response(&store.snapshot(), Instant::now()).is_some());
}

#[test]
fn subscribing_to_more_names_than_the_limit_ends_the_stream_with_resource_exhausted() {
    use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
    let store = Store::new();
    let options = SessionOptions {
        max_names: 5,
        ..Default::default()
    };
    let mut s: Session<DeltaMachine> = Session::with_options(None, options);
    let subscribe = |t: &str, names: &[&str]| DeltaDiscoveryRequest {
        type_url: t.into(),
        node: Some(node("n", "c")),
        resource_names_subscribe: names.iter().map(|n| n.to_string()).collect(),
        ..Default::default()
    };
    // Names add up across requests and types.
    s.handle_request(
        &subscribe(CLUSTER, &["a", "b", "c"]).into(),
        &store.snapshot(),
    )
    .unwrap();
    s.handle_request(
        &subscribe(CLUSTER_LOAD_ASSIGNMENT, &["a", "b"]).into(),
        &store.snapshot(),
    )
    .unwrap();
    let err = s
        .handle_request(
            &subscribe(CLUSTER_LOAD_ASSIGNMENT, &["c"]).into(),
            &store.snapshot(),
        )
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ResourceExhausted);
    assert_eq!(
        err.to_string(),
        "more than 5 subscribed resource names on one stream"
    );
}

#[test]
fn glob_collection_members_count_against_the_names_limit_from_the_response_that_sends_them() {
    use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
    const EP: &str = "type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint";
    let c1 = "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1";
    let store = Store::new();
    store
        .replace_all((0..4).map(|i| input(EP, &format!("{c1}/e{i}"), "1")))
        .unwrap();
    let options = SessionOptions {
        max_names: 5,
        ..Default::default()
    };
    let subscribe = |names: &[&str]| DeltaDiscoveryRequest {
        type_url: EP.into(),
        node: Some(node("n", "c")),
        resource_names_subscribe: names.iter().map(|n| n.to_string()).collect(),
        ..Default::default()
    };
    let glob = format!("{c1}/*");
    let now = Instant::now();
    // The glob and its four members: five, sent; a sixth name is past the limit.
    let mut s: Session<DeltaMachine> = Session::with_options(None, options.clone());
    s.handle_request(&subscribe(&[&glob]).into(), &store.snapshot())
        .unwrap();
    let (_, members) = s
        .poll_response(&store.snapshot(), now)
        .expect("the members");
    assert_eq!(members.resources.len(), 4);
    assert!(s.take_breach().is_none());
    assert_eq!(s.subscribed_names(), 5);
    let err = s
        .handle_request(&subscribe(&["other"]).into(), &store.snapshot())
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ResourceExhausted);
    // The glob and another name subscribed at once: the members are counted by the walk that
    // gathers them (one walk per glob subscription), and the response that would carry the
    // sixth name is not sent: the stream's error is a client one.
    let mut s: Session<DeltaMachine> = Session::with_options(None, options);
    s.handle_request(&subscribe(&[&glob, "other"]).into(), &store.snapshot())
        .unwrap();
    assert!(s.poll_response(&store.snapshot(), now).is_none());
    let err = s.take_breach().expect("the breach");
    assert_eq!(err.kind(), ErrorKind::ResourceExhausted);
}

#[test]
fn a_glob_member_added_after_the_subscription_counts_against_the_names_limit() {
    use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
    const EP: &str = "type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint";
    let c1 = "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1";
    let store = Store::new();
    store
        .replace_all((0..3).map(|i| input(EP, &format!("{c1}/e{i}"), "1")))
        .unwrap();
    let options = SessionOptions {
        max_names: 5,
        ..Default::default()
    };
    let mut s: Session<DeltaMachine> = Session::with_options(None, options);
    let request = DeltaDiscoveryRequest {
        type_url: EP.into(),
        node: Some(node("n", "c")),
        resource_names_subscribe: vec![format!("{c1}/*")],
        ..Default::default()
    };
    // The glob and its three members: four, within five.
    s.handle_request(&request.into(), &store.snapshot())
        .unwrap();
    let now = Instant::now();
    let (_, first) = s
        .poll_response(&store.snapshot(), now)
        .expect("the members");
    assert_eq!(first.resources.len(), 3);
    assert!(s.take_breach().is_none());
    let ack = |s: &mut Session<DeltaMachine>, r: &DeltaResponse| {
        let request = DeltaDiscoveryRequest {
            type_url: EP.into(),
            response_nonce: r.nonce.as_str().to_string(),
            ..Default::default()
        };
        s.handle_request(&request.into(), &store.snapshot())
            .unwrap();
    };
    ack(&mut s, &first);
    let add = |s: &mut Session<DeltaMachine>, id: &str| {
        let name = format!("{c1}/{id}");
        store
            .apply([crate::store::Change::Set(input(EP, &name, "1"))])
            .unwrap();
        s.handle_changes(
            [(
                Arc::from(EP),
                [Arc::from(name.as_str())].into_iter().collect(),
            )]
            .into_iter()
            .collect(),
        );
        s.poll_response(&store.snapshot(), now)
    };
    // A fourth member: five, sent.
    let (_, fourth) = add(&mut s, "e3").expect("the fourth member");
    assert!(s.take_breach().is_none());
    ack(&mut s, &fourth);
    // A fifth: six, past the limit: not sent, and the stream's error is a client one.
    assert!(add(&mut s, "e4").is_none());
    let err = s.take_breach().expect("the breach");
    assert_eq!(err.kind(), ErrorKind::ResourceExhausted);
}

#[test]
fn sotw_glob_members_added_after_the_subscription_count_against_the_names_limit() {
    const EP: &str = "type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint";
    let c1 = "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1";
    let glob = format!("{c1}/*");
    let store = Store::new();
    store
        .replace_all((0..3).map(|i| input(EP, &format!("{c1}/e{i}"), "1")))
        .unwrap();
    let options = SessionOptions {
        max_names: 5,
        ..Default::default()
    };
    let mut s: Session<SotwMachine> = Session::with_options(None, options);
    s.handle_request(
        &sotw(EP, &[&glob], "", Some(&node("n", "c"))),
        &store.snapshot(),
    )
    .unwrap();
    let now = Instant::now();
    let (_, first) = s
        .poll_response(&store.snapshot(), now)
        .expect("the members");
    assert_eq!(first.len(), 3);
    // The glob and its three members: four, within five.
    assert_eq!(s.subscribed_names(), 4);
    assert!(s.take_breach().is_none());
    let ack = |s: &mut Session<SotwMachine>, r: &SotwResponse| {
        s.handle_request(
            &sotw(EP, &[&glob], r.nonce.as_str(), None),
            &store.snapshot(),
        )
        .unwrap();
    };
    ack(&mut s, &first);
    let add = |s: &mut Session<SotwMachine>, id: &str| {
        let name = format!("{c1}/{id}");
        store
            .apply([crate::store::Change::Set(input(EP, &name, "1"))])
            .unwrap();
        s.handle_changes(
            [(
                Arc::from(EP),
                [Arc::from(name.as_str())].into_iter().collect(),
            )]
            .into_iter()
            .collect(),
        );
        s.poll_response(&store.snapshot(), now)
    };
    // A fourth member: five, sent.
    let (_, fourth) = add(&mut s, "e3").expect("the fourth member");
    assert!(s.take_breach().is_none());
    ack(&mut s, &fourth);
    // A fifth: six, past the limit: not sent, and the stream's error is a client one.
    assert!(add(&mut s, "e4").is_none());
    let err = s.take_breach().expect("the breach");
    assert_eq!(err.kind(), ErrorKind::ResourceExhausted);
}

#[test]
fn node_identity_is_taken_from_the_first_request() {
    let mut s = ads();
    let handled = s
        .handle_request(
            &sotw(CLUSTER, &[], "", Some(&node("a", "c"))),
            &Snapshot::default(),
        )
        .unwrap();
    assert!(handled.identified);
    assert_eq!(s.node_id(), "a");
    assert_eq!(s.node().unwrap().cluster, "c");
}

#[test]
fn later_requests_may_omit_the_node() {
    let mut s = ads();
    let snap = Snapshot::default();
    s.handle_request(&sotw(CLUSTER, &[], "", Some(&node("a", "c"))), &snap)
        .unwrap();
    s.handle_request(&sotw(LISTENER, &[], "", None), &snap)
        .unwrap();
    s.handle_request(&sotw(LISTENER, &[], "", Some(&node("", ""))), &snap)
        .unwrap();
    assert_eq!(s.node_id(), "a");
}

#[test]
fn a_later_request_with_a_different_node_is_an_error() {
    let snap = Snapshot::default();
    for other in [node("b", "c"), node("a", "other")] {
        let mut s = ads();
        s.handle_request(&sotw(CLUSTER, &[], "", Some(&node("a", "c"))), &snap)
            .unwrap();
        let err = s
            .handle_request(&sotw(LISTENER, &[], "", Some(&other)), &snap)
            .unwrap_err();
        assert!(matches!(err, SessionError::NodeChanged { .. }), "{err}");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    }
}

#[test]
fn an_aggregated_request_without_a_type_url_is_an_error() {
    let err = ads()
        .handle_request(&sotw("", &[], "", None), &Snapshot::default())
        .unwrap_err();
    assert_eq!(err, SessionError::MissingTypeUrl);
}

#[test]
fn a_per_type_service_serves_only_its_type() {
    let mut s: Session<SotwMachine> = Session::new(Some(Arc::from(CLUSTER)));
    let snap = Snapshot::default();
    // An empty type URL means the service's type.
    assert_eq!(
        &*s.handle_request(&sotw("", &[], "", None), &snap)
            .unwrap()
            .type_url,
        CLUSTER
    );
    let err = s
        .handle_request(&sotw(LISTENER, &[], "", None), &snap)
        .unwrap_err();
    assert!(matches!(err, SessionError::WrongType { .. }));
}

#[test]
fn node_metadata_strings_and_cluster_become_parameters() {
    let mut n = with_metadata(node("a", "edge"), &[("env", "prod"), ("zone", "z1")]);
    if let Some(m) = n.metadata.as_mut() {
        m.fields.insert(
            "replicas".into(),
            Value {
                kind: Some(Kind::NumberValue(3.0)),
            },
        );
    }
    let client = ClientNode::from_node(&n).unwrap();
    let expected: ParamSet = [
        ("env", "prod"),
        ("zone", "z1"),
        (NODE_CLUSTER_PARAM, "edge"),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        client.derived, expected,
        "non-string metadata is not a parameter"
    );
    assert_eq!(client.params_for(CLUSTER), &expected);
}

#[test]
fn node_dynamic_parameters_for_a_type_take_precedence_over_metadata() {
    let mut n = with_metadata(node("a", "c"), &[("env", "prod")]);
    n.dynamic_parameters.insert(
        CLUSTER.into(),
        envoy_types::pb::xds::core::v3::ContextParams {
            params: [("env".to_string(), "test".to_string())]
                .into_iter()
                .collect(),
        },
    );
    let client = ClientNode::from_node(&n).unwrap();
    assert_eq!(client.params_for(CLUSTER).get("env"), Some("test"));
    assert_eq!(client.params_for(LISTENER).get("env"), Some("prod"));
}

#[test]
fn too_many_distinct_parameter_sets_is_a_resource_limit() {
    let mut s = ads();
    let snap = Snapshot::default();
    let locators: Vec<ResourceLocator> = (0..=MAX_PARAM_SETS)
        .map(|i| ResourceLocator {
            name: format!("r{i}"),
            dynamic_parameters: [("k".to_string(), i.to_string())].into_iter().collect(),
        })
        .collect();
    let mut request = sotw(CLUSTER, &[], "", None);
    request.resource_locators = locators;
    let err = s.handle_request(&request, &snap).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ResourceExhausted, "{err}");
}

#[test]
fn parameter_sets_no_subscription_uses_are_reclaimed() {
    // One locator at a time, each SotW request replacing the last: the stream never uses more
    // than one parameter set at once, however many it has used.
    let mut s = ads();
    let snap = Snapshot::default();
    for i in 0..MAX_PARAM_SETS * 2 {
        let mut request = sotw(CLUSTER, &[], "", None);
        request.resource_locators = vec![ResourceLocator {
            name: "r".into(),
            dynamic_parameters: [("k".to_string(), i.to_string())].into_iter().collect(),
        }];
        if let Err(e) = s.handle_request(&request, &snap) {
            panic!("the request with parameter set {i}, one held at once: {e}");
        }
        while s.poll_response(&snap, Instant::now()).is_some() {}
    }
}

#[test]
fn responses_go_out_in_make_before_break_order() {
    let store = Store::new();
    store
        .replace_all([
            input(LISTENER, "l", "1"),
            input(CLUSTER, "c", "1"),
            input(CLUSTER_LOAD_ASSIGNMENT, "c", "1"),
        ])
        .unwrap();
    let snap = store.snapshot();
    let mut s = ads();
    for (t, names) in [
        (LISTENER, &[][..]),
        (CLUSTER_LOAD_ASSIGNMENT, &["c"][..]),
        (CLUSTER, &[][..]),
    ] {
        s.handle_request(&sotw(t, names, "", Some(&node("a", "c"))), &snap)
            .unwrap();
    }
    let mut order = Vec::new();
    while let Some((type_url, _)) = s.poll_response(&snap, Instant::now()) {
        order.push(type_url.to_string());
    }
    assert_eq!(order, [CLUSTER, CLUSTER_LOAD_ASSIGNMENT, LISTENER]);
}

/// xRFC TP2 through the session: which variant each subscription gets, in which form, and when.
mod tp2 {
    use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::single_constraint::{
        ConstraintType, Exists,
    };
    use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::{
        ConstraintList, SingleConstraint, Type,
    };
    use envoy_types::pb::envoy::service::discovery::v3::{
        DeltaDiscoveryRequest, DynamicParameterConstraints as Dpc,
    };

    use super::*;
    use crate::params::Constraints;
    use crate::protocol::delta::DeltaResponse;
    use crate::protocol::sotw::SotwResources;
    use crate::store::{Change, ResourceInput};
    use crate::types::ROUTE_CONFIGURATION;

    fn single(key: &str, t: ConstraintType) -> Dpc {
        Dpc {
            r#type: Some(Type::Constraint(SingleConstraint {
                key: key.into(),
                constraint_type: Some(t),
            })),
        }
    }
    fn eq(key: &str, value: &str) -> Dpc {
        single(key, ConstraintType::Value(value.into()))
    }
    fn exists(key: &str) -> Dpc {
        single(key, ConstraintType::Exists(Exists {}))
    }
    fn not(c: Dpc) -> Dpc {
        Dpc {
            r#type: Some(Type::NotConstraints(Box::new(c))),
        }
    }
    fn and(cs: Vec<Dpc>) -> Dpc {
        Dpc {
            r#type: Some(Type::AndConstraints(ConstraintList { constraints: cs })),
        }
    }

    /// A variant of `name` whose content is `content`.
    fn variant(type_url: &str, name: &str, content: &str, c: Option<Dpc>) -> ResourceInput {
        input(type_url, name, content)
            .with_constraints(c.map(|c| Constraints::new(c).unwrap()))
            .with_origin(format!("{name}/{content}"))
    }

    fn store(inputs: Vec<ResourceInput>) -> Store {
        let store = Store::new();
        store.replace_all(inputs).unwrap();
        store
    }

    fn params(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn locator(name: &str, pairs: &[(&str, &str)]) -> ResourceLocator {
        ResourceLocator {
            name: name.into(),
            dynamic_parameters: params(pairs).into_iter().collect(),
        }
    }

    /// A node that sends `pairs` as dynamic parameters for every type used here.
    fn node_with_parameters(pairs: &[(&str, &str)]) -> Node {
        let mut n = node("tp2", "c");
        for t in [
            LISTENER,
            CLUSTER,
            CLUSTER_LOAD_ASSIGNMENT,
            ROUTE_CONFIGURATION,
        ] {
            n.dynamic_parameters.insert(
                t.into(),
                envoy_types::pb::xds::core::v3::ContextParams {
                    params: params(pairs).into_iter().collect(),
                },
            );
        }
        n
    }

    /// (name, content, constraints as text or "-") of each resource of a SotW response.
    fn sotw_seen(r: &SotwResponse) -> Vec<(String, String, String)> {
        let list: Vec<Arc<Resource>> = match &r.resources {
            SotwResources::All(v) => v.iter().cloned().collect(),
            SotwResources::Some(l) => l.to_vec(),
        };
        list.iter().map(|x| seen(x)).collect()
    }

    fn seen(x: &Resource) -> (String, String, String) {
        (
            x.name().to_string(),
            String::from_utf8_lossy(&x.value()).into_owned(),
            x.constraints().map(|c| c.to_string()).unwrap_or("-".into()),
        )
    }

    fn contents(r: &SotwResponse) -> Vec<String> {
        sotw_seen(r).into_iter().map(|(_, c, _)| c).collect()
    }

    /// The SotW response a session owes right now for its one subscribed type.
    fn sotw_poll(s: &mut Session<SotwMachine>, store: &Store) -> Option<SotwResponse> {
        s.poll_response(&store.snapshot(), Instant::now())
            .map(|(_, r)| r)
    }

    /// The next response, ACKed as a client does (the next one waits for it).
    fn delta_poll(s: &mut Session<DeltaMachine>, store: &Store) -> Option<DeltaResponse> {
        let (type_url, r) = s.poll_response(&store.snapshot(), Instant::now())?;
        let ack = DeltaDiscoveryRequest {
            type_url: type_url.to_string(),
            response_nonce: r.nonce.as_str().to_string(),
            ..Default::default()
        };
        s.handle_request(&(&ack).into(), &store.snapshot()).unwrap();
        Some(r)
    }

    fn delta_request(type_url: &str, node: Option<&Node>) -> DeltaDiscoveryRequest {
        DeltaDiscoveryRequest {
            type_url: type_url.into(),
            node: node.cloned(),
            ..Default::default()
        }
    }

    #[test]
    fn a_reclaimed_parameter_set_is_served_the_variant_its_new_parameters_select() {
        let store = store(vec![
            variant(CLUSTER, "r", "rx", Some(eq("k", "x"))),
            variant(CLUSTER, "r", "ry", Some(eq("k", "y"))),
        ]);
        let snap = store.snapshot();
        let mut s = ads();
        // Every id used once, one locator at a time; then `x` and `y` on reclaimed ids.
        let sets: Vec<String> = (0..MAX_PARAM_SETS)
            .map(|i| i.to_string())
            .chain(["x".into(), "y".into()])
            .collect();
        let mut last: Option<SotwResponse> = None;
        for k in &sets {
            // Each request ACKs the last response (the next one waits for that).
            let nonce = last.as_ref().map(|r| r.nonce.as_str().to_owned());
            let mut request = sotw(CLUSTER, &[], nonce.as_deref().unwrap_or(""), None);
            request.resource_locators = vec![locator("r", &[("k", k)])];
            s.handle_request(&request, &snap)
                .unwrap_or_else(|e| panic!("the request with k={k}: {e}"));
            while let Some((_, r)) = s.poll_response(&snap, Instant::now()) {
                last = Some(r);
            }
            if k == "x" {
                let r = last.as_ref().expect("a response for k=x");
                assert_eq!(contents(r), ["rx"]);
            }
        }
        assert!(s.param_sets_reused() >= 2, "{}", s.param_sets_reused());
        let r = last.expect("a response for k=y");
        assert_eq!(contents(&r), ["ry"]);
    }

    /// The RouteConfiguration table of TP2's "Example": four variants over `env` and `version`.
    fn route_table() -> Store {
        let p = || eq("env", "prod");
        let v1 = || eq("version", "v1");
        store(vec![
            variant(
                ROUTE_CONFIGURATION,
                "r",
                "neither",
                Some(and(vec![not(p()), not(v1())])),
            ),
            variant(
                ROUTE_CONFIGURATION,
                "r",
                "prod",
                Some(and(vec![p(), not(v1())])),
            ),
            variant(
                ROUTE_CONFIGURATION,
                "r",
                "v1",
                Some(and(vec![not(p()), v1()])),
            ),
            variant(
                ROUTE_CONFIGURATION,
                "r",
                "prod+v1",
                Some(and(vec![p(), v1()])),
            ),
        ])
    }

    fn env_store() -> Store {
        store(vec![
            variant(
                CLUSTER_LOAD_ASSIGNMENT,
                "e",
                "prod",
                Some(eq("env", "prod")),
            ),
            variant(
                CLUSTER_LOAD_ASSIGNMENT,
                "e",
                "test",
                Some(eq("env", "test")),
            ),
        ])
    }

    #[test]
    fn tp2_env_prod_and_env_test_each_get_their_variant_over_sotw() {
        let store = env_store();
        for env in ["prod", "test"] {
            let mut s = ads();
            let n = node_with_parameters(&[("env", env)]);
            s.handle_request(
                &sotw(CLUSTER_LOAD_ASSIGNMENT, &["e"], "", Some(&n)),
                &store.snapshot(),
            )
            .unwrap();
            let r = sotw_poll(&mut s, &store).unwrap();
            assert!(
                r.encoding.named,
                "a client that sends dynamic parameters gets resource_name"
            );
            assert_eq!(
                sotw_seen(&r),
                [(
                    "e".into(),
                    env.to_string(),
                    format!("{{constraint:{{key:\"env\" value:\"{env}\"}}}}")
                )]
            );
        }
    }

    #[test]
    fn tp2_env_prod_and_env_test_each_get_their_variant_over_delta() {
        let store = env_store();
        for env in ["prod", "test"] {
            let mut s: Session<DeltaMachine> = Session::new(None);
            let mut req = delta_request(CLUSTER_LOAD_ASSIGNMENT, None);
            req.resource_locators_subscribe = vec![locator("e", &[("env", env)])];
            s.handle_request(&(&req).into(), &store.snapshot()).unwrap();
            let r = delta_poll(&mut s, &store).unwrap();
            assert!(r.encoding.named);
            let got: Vec<_> = r.resources.iter().map(|x| seen(x)).collect();
            assert_eq!(got.len(), 1);
            assert_eq!(got[0].1, env);
        }
    }

    #[test]
    fn legacy_clients_get_the_variant_of_their_node_metadata_as_a_plain_resource() {
        let store = env_store();
        let mut s = ads();
        let n = with_metadata(node("envoy", "c"), &[("env", "test")]);
        s.handle_request(
            &sotw(CLUSTER_LOAD_ASSIGNMENT, &["e"], "", Some(&n)),
            &store.snapshot(),
        )
        .unwrap();
        let r = sotw_poll(&mut s, &store).unwrap();
        assert!(
            !r.encoding.named,
            "a client that sent no dynamic parameters gets plain resources"
        );
        assert_eq!(contents(&r), ["test"]);
    }

    #[test]
    fn a_node_whose_metadata_changes_mid_stream_gets_the_variant_of_its_new_metadata() {
        let store = env_store();
        let mut s = ads();
        let test = with_metadata(node("envoy", "c"), &[("env", "test")]);
        let request = |nonce: &str, n: &Node| sotw(CLUSTER_LOAD_ASSIGNMENT, &["e"], nonce, Some(n));
        s.handle_request(&request("", &test), &store.snapshot())
            .unwrap();
        let r = sotw_poll(&mut s, &store).unwrap();
        assert_eq!(contents(&r), ["test"]);
        s.handle_request(&request(&r.nonce, &test), &store.snapshot())
            .unwrap();
        assert!(
            sotw_poll(&mut s, &store).is_none(),
            "an ACK changes nothing"
        );
        let prod = with_metadata(node("envoy", "c"), &[("env", "prod")]);
        s.handle_request(&request(&r.nonce, &prod), &store.snapshot())
            .unwrap();
        let r = sotw_poll(&mut s, &store).expect("the new node's variant");
        assert_eq!(contents(&r), ["prod"]);
    }

    #[test]
    fn node_cluster_is_a_parameter_for_legacy_clients() {
        let store = store(vec![
            variant(CLUSTER, "c", "edge", Some(eq(NODE_CLUSTER_PARAM, "edge"))),
            variant(CLUSTER, "c", "mesh", Some(eq(NODE_CLUSTER_PARAM, "mesh"))),
        ]);
        let mut s = ads();
        s.handle_request(
            &sotw(CLUSTER, &[], "", Some(&node("x", "mesh"))),
            &store.snapshot(),
        )
        .unwrap();
        assert_eq!(contents(&sotw_poll(&mut s, &store).unwrap()), ["mesh"]);
    }

    #[test]
    fn tp2_clients_adding_a_key_first_keep_getting_their_variant() {
        let store = env_store();
        for (env, version) in [
            ("prod", "v1"),
            ("prod", "v2"),
            ("test", "v1"),
            ("test", "v2"),
        ] {
            let mut s = ads();
            let n = node_with_parameters(&[("env", env), ("version", version)]);
            s.handle_request(
                &sotw(CLUSTER_LOAD_ASSIGNMENT, &["e"], "", Some(&n)),
                &store.snapshot(),
            )
            .unwrap();
            assert_eq!(contents(&sotw_poll(&mut s, &store).unwrap()), [env]);
        }
    }

    const A_EPS: &str = "xdstp://a.test/envoy.config.endpoint.v3.ClusterLoadAssignment/e";
    const B_EPS: &str = "xdstp://b.test/envoy.config.endpoint.v3.ClusterLoadAssignment/e";
    const A_GLOB: &str = "xdstp://a.test/envoy.config.endpoint.v3.ClusterLoadAssignment/g/*";
    const A_MEMBER: &str = "xdstp://a.test/envoy.config.endpoint.v3.ClusterLoadAssignment/g/m";

    /// `e`, an xdstp name of each of `a.test` and `b.test`, and a member of a glob of `a.test`,
    /// each in an `env=prod` and an `env=test` variant.
    fn authorities_store() -> Store {
        let mut inputs = Vec::new();
        for name in ["e", A_EPS, B_EPS, A_MEMBER] {
            for env in ["prod", "test"] {
                inputs.push(variant(
                    CLUSTER_LOAD_ASSIGNMENT,
                    name,
                    env,
                    Some(eq("env", env)),
                ));
            }
        }
        store(inputs)
    }

    /// A session whose `a.test` names are matched with `env=test` (a relay's `--param-for`).
    fn with_authority_params<M: Machine>() -> Session<M> {
        let options = SessionOptions {
            authority_params: Arc::new(
                [("a.test".to_owned(), [("env", "test")].into_iter().collect())].into(),
            ),
            ..Default::default()
        };
        Session::with_options(None, options)
    }

    #[test]
    fn an_authoritys_plain_names_are_matched_with_its_own_parameter_set_over_sotw() {
        let store = authorities_store();
        let mut s: Session<SotwMachine> = with_authority_params();
        // The node's parameters select `prod`: the names of other authorities, and plain names,
        // get it; `a.test`'s names get `test`, spelled as the client spells them.
        let n = with_metadata(node("envoy", "c"), &[("env", "prod")]);
        let names = ["e", A_EPS, B_EPS];
        s.handle_request(
            &sotw(CLUSTER_LOAD_ASSIGNMENT, &names, "", Some(&n)),
            &store.snapshot(),
        )
        .unwrap();
        let r = sotw_poll(&mut s, &store).unwrap();
        let mut got: Vec<(String, String)> = sotw_seen(&r)
            .into_iter()
            .map(|(name, content, _)| (name, content))
            .collect();
        got.sort();
        assert_eq!(
            got,
            [
                ("e".to_owned(), "prod".to_owned()),
                (A_EPS.to_owned(), "test".to_owned()),
                (B_EPS.to_owned(), "prod".to_owned()),
            ]
        );
        // The same list again (an ACK) holds the same keys.
        let keys = s.types.get(CLUSTER_LOAD_ASSIGNMENT).unwrap().keys;
        s.handle_request(
            &sotw(CLUSTER_LOAD_ASSIGNMENT, &names, r.nonce.as_str(), None),
            &store.snapshot(),
        )
        .unwrap();
        assert_eq!(s.types.get(CLUSTER_LOAD_ASSIGNMENT).unwrap().keys, keys);
        assert!(sotw_poll(&mut s, &store).is_none(), "nothing owed again");
    }

    #[test]
    fn an_authoritys_plain_names_are_matched_with_its_own_parameter_set_over_delta() {
        let store = authorities_store();
        let mut s: Session<DeltaMachine> = with_authority_params();
        let n = node_with_parameters(&[("env", "prod")]);
        let mut req = delta_request(CLUSTER_LOAD_ASSIGNMENT, Some(&n));
        req.resource_names_subscribe = vec!["e".into(), A_EPS.into(), B_EPS.into(), A_GLOB.into()];
        s.handle_request(&(&req).into(), &store.snapshot()).unwrap();
        let r = delta_poll(&mut s, &store).unwrap();
        let mut got: Vec<(String, String)> = r
            .resources
            .iter()
            .map(|x| {
                let (name, content, _) = seen(x);
                (name, content)
            })
            .collect();
        got.sort();
        assert_eq!(
            got,
            [
                ("e".to_owned(), "prod".to_owned()),
                (A_EPS.to_owned(), "test".to_owned()),
                (A_MEMBER.to_owned(), "test".to_owned()),
                (B_EPS.to_owned(), "prod".to_owned()),
            ],
            "a glob of the authority takes its members' variants of its set too"
        );
        // Unsubscribed by its plain name, the authority's key goes: a change of it is not sent.
        let keys = s.types.get(CLUSTER_LOAD_ASSIGNMENT).unwrap().keys;
        let mut req = delta_request(CLUSTER_LOAD_ASSIGNMENT, None);
        req.resource_names_unsubscribe = vec![A_EPS.into()];
        s.handle_request(&(&req).into(), &store.snapshot()).unwrap();
        assert_eq!(s.types.get(CLUSTER_LOAD_ASSIGNMENT).unwrap().keys, keys - 1);
    }

    #[test]
    fn tp2_exists_default_serves_clients_not_sending_the_new_key() {
        let store = store(vec![
            variant(
                CLUSTER_LOAD_ASSIGNMENT,
                "e",
                "default",
                Some(and(vec![eq("env", "prod"), not(exists("version"))])),
            ),
            variant(
                CLUSTER_LOAD_ASSIGNMENT,
                "e",
                "v1",
                Some(and(vec![eq("env", "prod"), eq("version", "v1")])),
            ),
        ]);
        type Case<'a> = (&'a [(&'a str, &'a str)], Option<&'a str>);
        let cases: [Case<'_>; 3] = [
            (&[("env", "prod")], Some("default")),
            (&[("env", "prod"), ("version", "v1")], Some("v1")),
            (&[("env", "prod"), ("version", "v2")], None),
        ];
        for (pairs, want) in cases {
            let mut s = ads();
            let n = node_with_parameters(pairs);
            s.handle_request(
                &sotw(CLUSTER_LOAD_ASSIGNMENT, &["e"], "", Some(&n)),
                &store.snapshot(),
            )
            .unwrap();
            let got = sotw_poll(&mut s, &store)
                .map(|r| contents(&r))
                .unwrap_or_default();
            assert_eq!(got, want.into_iter().collect::<Vec<_>>(), "{pairs:?}");
        }
    }

    /// What a client with `pairs` receives of the route table, over SotW and over delta.
    fn route_for(store: &Store, pairs: &[(&str, &str)]) -> (Vec<String>, Vec<String>) {
        let mut s = ads();
        let mut req = sotw(ROUTE_CONFIGURATION, &[], "", None);
        req.resource_locators = vec![locator("r", pairs)];
        s.handle_request(&req, &store.snapshot()).unwrap();
        let sotw = sotw_poll(&mut s, store)
            .map(|r| contents(&r))
            .unwrap_or_default();
        let mut d: Session<DeltaMachine> = Session::new(None);
        let mut req = delta_request(ROUTE_CONFIGURATION, None);
        req.resource_locators_subscribe = vec![locator("r", pairs)];
        d.handle_request(&(&req).into(), &store.snapshot()).unwrap();
        let r = delta_poll(&mut d, store).unwrap();
        let delta = r.resources.iter().map(|x| seen(x).1).collect();
        (sotw, delta)
    }

    #[test]
    fn tp2_route_table_each_of_nine_parameter_sets_gets_exactly_its_variant() {
        let store = route_table();
        for env in ["prod", "canary", "test"] {
            for version in ["v1", "v2", "v3"] {
                let want = match (env == "prod", version == "v1") {
                    (false, false) => "neither",
                    (true, false) => "prod",
                    (false, true) => "v1",
                    (true, true) => "prod+v1",
                };
                let (sotw, delta) = route_for(&store, &[("env", env), ("version", version)]);
                assert_eq!(sotw, [want], "SotW env={env} version={version}");
                assert_eq!(delta, [want], "delta env={env} version={version}");
            }
        }
    }

    #[test]
    fn tp2_route_table_parameter_sets_missing_a_key_get_exactly_one_variant() {
        let store = route_table();
        let cases: [(&[(&str, &str)], &str); 4] = [
            (&[], "neither"),
            (&[("env", "prod")], "prod"),
            (&[("version", "v1")], "v1"),
            (&[("region", "eu")], "neither"),
        ];
        for (pairs, want) in cases {
            let (sotw, delta) = route_for(&store, pairs);
            assert_eq!(sotw, [want], "SotW {pairs:?}");
            assert_eq!(delta, [want], "delta {pairs:?}");
        }
    }

    #[test]
    fn a_subscription_matching_nothing_gets_the_variant_once_it_appears() {
        let store = env_store();
        let mut s: Session<DeltaMachine> = Session::new(None);
        let mut req = delta_request(CLUSTER_LOAD_ASSIGNMENT, None);
        req.resource_locators_subscribe = vec![locator("e", &[("env", "qa")])];
        s.handle_request(&(&req).into(), &store.snapshot()).unwrap();
        let r = delta_poll(&mut s, &store).unwrap();
        assert!(r.resources.is_empty());
        assert_eq!(
            r.removed_variants.len(),
            1,
            "reported as not existing at once"
        );
        store
            .apply([Change::Set(variant(
                CLUSTER_LOAD_ASSIGNMENT,
                "e",
                "qa",
                Some(eq("env", "qa")),
            ))])
            .unwrap();
        changed(&mut s, CLUSTER_LOAD_ASSIGNMENT, "e");
        let r = delta_poll(&mut s, &store).unwrap();
        assert_eq!(
            r.resources.iter().map(|x| seen(x).1).collect::<Vec<_>>(),
            ["qa"]
        );
    }

    /// Tells a session that `name` of `type_url` changed, as the store's watch would.
    fn changed<M: Machine>(s: &mut Session<M>, type_url: &str, name: &str) {
        s.handle_changes(
            [(Arc::from(type_url), [Arc::from(name)].into_iter().collect())]
                .into_iter()
                .collect(),
        );
    }

    #[test]
    fn a_variant_that_stops_matching_is_reported_gone() {
        let store = env_store();
        // Delta, TP2 client: the variant is removed by its resource_name.
        let mut d: Session<DeltaMachine> = Session::new(None);
        let mut req = delta_request(CLUSTER_LOAD_ASSIGNMENT, None);
        req.resource_locators_subscribe = vec![locator("e", &[("env", "test")])];
        d.handle_request(&(&req).into(), &store.snapshot()).unwrap();
        delta_poll(&mut d, &store).unwrap();
        // Legacy delta client (metadata): removed by name.
        let mut l: Session<DeltaMachine> = Session::new(None);
        let mut req = delta_request(
            CLUSTER_LOAD_ASSIGNMENT,
            Some(&with_metadata(node("n", "c"), &[("env", "test")])),
        );
        req.resource_names_subscribe = vec!["e".into()];
        l.handle_request(&(&req).into(), &store.snapshot()).unwrap();
        assert_eq!(delta_poll(&mut l, &store).unwrap().resources.len(), 1);
        store
            .apply([Change::RemoveVariant {
                type_url: CLUSTER_LOAD_ASSIGNMENT.into(),
                name: "e".into(),
                constraints: Some(Constraints::new(eq("env", "test")).unwrap()),
            }])
            .unwrap();
        changed(&mut d, CLUSTER_LOAD_ASSIGNMENT, "e");
        changed(&mut l, CLUSTER_LOAD_ASSIGNMENT, "e");
        let r = delta_poll(&mut d, &store).unwrap();
        assert!(r.resources.is_empty());
        assert_eq!(r.removed_variants.len(), 1);
        assert_eq!(
            r.removed_variants[0].1.as_ref().map(|c| c.to_string()),
            Some("{constraint:{key:\"env\" value:\"test\"}}".to_string())
        );
        let r = delta_poll(&mut l, &store).unwrap();
        assert_eq!(r.removed, [Arc::from("e")]);
        assert!(r.removed_variants.is_empty());
    }

    #[test]
    fn tp2_transition_sends_the_removal_and_the_new_variant_in_one_response() {
        let store = env_store();
        let mut d: Session<DeltaMachine> = Session::new(None);
        let mut req = delta_request(CLUSTER_LOAD_ASSIGNMENT, None);
        req.resource_locators_subscribe = vec![locator("e", &[("env", "prod"), ("version", "v1")])];
        d.handle_request(&(&req).into(), &store.snapshot()).unwrap();
        assert_eq!(delta_poll(&mut d, &store).unwrap().resources.len(), 1);
        // The env=prod variant is replaced by two that also constrain `version` (and env=test
        // gets the key too: every variant constrains the same keys).
        store
            .replace_all(vec![
                variant(
                    CLUSTER_LOAD_ASSIGNMENT,
                    "e",
                    "prod-v1",
                    Some(and(vec![eq("env", "prod"), eq("version", "v1")])),
                ),
                variant(
                    CLUSTER_LOAD_ASSIGNMENT,
                    "e",
                    "prod-v2",
                    Some(and(vec![eq("env", "prod"), eq("version", "v2")])),
                ),
                variant(
                    CLUSTER_LOAD_ASSIGNMENT,
                    "e",
                    "test",
                    Some(and(vec![eq("env", "test"), exists("version")])),
                ),
            ])
            .unwrap();
        changed(&mut d, CLUSTER_LOAD_ASSIGNMENT, "e");
        let r = delta_poll(&mut d, &store).unwrap();
        assert_eq!(
            r.resources.iter().map(|x| seen(x).1).collect::<Vec<_>>(),
            ["prod-v1"]
        );
        assert_eq!(
            r.removed_variants.len(),
            1,
            "the old variant goes in the same response"
        );
        assert_eq!(
            r.removed_variants[0].1.as_ref().map(|c| c.to_string()),
            Some("{constraint:{key:\"env\" value:\"prod\"}}".to_string())
        );
        assert!(delta_poll(&mut d, &store).is_none());
    }

    #[test]
    fn one_stream_may_subscribe_to_one_name_with_several_parameter_sets() {
        let store = env_store();
        let mut s = ads();
        let mut req = sotw(CLUSTER_LOAD_ASSIGNMENT, &[], "", None);
        req.resource_locators = vec![
            locator("e", &[("env", "prod")]),
            locator("e", &[("env", "test")]),
        ];
        s.handle_request(&req, &store.snapshot()).unwrap();
        let mut got = contents(&sotw_poll(&mut s, &store).unwrap());
        got.sort();
        assert_eq!(got, ["prod", "test"]);
        let mut d: Session<DeltaMachine> = Session::new(None);
        let mut req = delta_request(CLUSTER_LOAD_ASSIGNMENT, None);
        req.resource_locators_subscribe = vec![
            locator("e", &[("env", "prod")]),
            locator("e", &[("env", "test")]),
        ];
        d.handle_request(&(&req).into(), &store.snapshot()).unwrap();
        let r = delta_poll(&mut d, &store).unwrap();
        let mut got: Vec<String> = r.resources.iter().map(|x| seen(x).1).collect();
        got.sort();
        assert_eq!(got, ["prod", "test"]);
    }

    #[test]
    fn lds_wildcard_returns_per_name_the_matching_variant() {
        let store = store(vec![
            variant(LISTENER, "a", "a-prod", Some(eq("env", "prod"))),
            variant(LISTENER, "a", "a-test", Some(eq("env", "test"))),
            variant(LISTENER, "b", "b-prod", Some(eq("env", "prod"))),
            variant(LISTENER, "shared", "shared", None),
        ]);
        for (env, want) in [
            ("prod", vec!["a-prod", "b-prod", "shared"]),
            ("test", vec!["a-test", "shared"]),
        ] {
            let mut s = ads();
            let n = with_metadata(node("x", "c"), &[("env", env)]);
            s.handle_request(&sotw(LISTENER, &[], "", Some(&n)), &store.snapshot())
                .unwrap();
            assert_eq!(contents(&sotw_poll(&mut s, &store).unwrap()), want);
        }
    }

    #[test]
    fn a_change_to_another_groups_variant_sends_nothing() {
        let store = env_store();
        let mut s = ads();
        let n = with_metadata(node("x", "c"), &[("env", "prod")]);
        s.handle_request(
            &sotw(CLUSTER_LOAD_ASSIGNMENT, &["e"], "", Some(&n)),
            &store.snapshot(),
        )
        .unwrap();
        let r = sotw_poll(&mut s, &store).unwrap();
        s.handle_request(
            &sotw(CLUSTER_LOAD_ASSIGNMENT, &["e"], &r.nonce, None),
            &store.snapshot(),
        )
        .unwrap();
        store
            .apply([Change::Set(variant(
                CLUSTER_LOAD_ASSIGNMENT,
                "e",
                "test-2",
                Some(eq("env", "test")),
            ))])
            .unwrap();
        changed(&mut s, CLUSTER_LOAD_ASSIGNMENT, "e");
        assert!(sotw_poll(&mut s, &store).is_none());
        store
            .apply([Change::Set(variant(
                CLUSTER_LOAD_ASSIGNMENT,
                "e",
                "prod-2",
                Some(eq("env", "prod")),
            ))])
            .unwrap();
        changed(&mut s, CLUSTER_LOAD_ASSIGNMENT, "e");
        assert_eq!(contents(&sotw_poll(&mut s, &store).unwrap()), ["prod-2"]);
    }

    #[test]
    fn variants_that_overlap_are_rejected_naming_both_and_a_parameter_set() {
        let or = |a: &str, b: &str| Dpc {
            r#type: Some(Type::OrConstraints(ConstraintList {
                constraints: vec![eq("env", a), eq("env", b)],
            })),
        };
        let store = Store::new();
        let err = store
            .replace_all(vec![
                variant(CLUSTER, "c", "1", Some(or("prod", "test"))),
                variant(CLUSTER, "c", "2", Some(or("qa", "test"))),
            ])
            .unwrap_err()
            .to_string();
        assert!(err.contains("c/1") && err.contains("c/2"), "{err}");
        assert!(err.contains("env=test"), "{err}");
    }

    #[test]
    fn variants_constraining_different_keys_are_rejected() {
        let store = Store::new();
        let err = store
            .replace_all(vec![
                variant(CLUSTER, "c", "1", Some(eq("env", "prod"))),
                variant(
                    CLUSTER,
                    "c",
                    "2",
                    Some(and(vec![eq("env", "test"), eq("version", "v1")])),
                ),
            ])
            .unwrap_err()
            .to_string();
        assert!(err.contains("different keys"), "{err}");
        assert!(err.contains("c/1") && err.contains("c/2"), "{err}");
    }

    /// Secrets for their owners: a variant constrained on [`IDENTITY_PARAM`] exists only for the
    /// client whose verified certificate identity it names; other clients (another identity, no
    /// mutual TLS, a client claiming the identity in its metadata) never get it, wildcard or not.
    #[test]
    fn a_resource_constrained_on_the_verified_identity_exists_only_for_that_identity() {
        use crate::protocol::identity::{IdentityBinding, NodeIdentityRules};
        use crate::types::SECRET;
        let store = store(vec![
            variant(
                SECRET,
                "key",
                "a's key",
                Some(eq(IDENTITY_PARAM, "spiffe://t/a")),
            ),
            variant(
                SECRET,
                "key",
                "b's key",
                Some(eq(IDENTITY_PARAM, "spiffe://t/b")),
            ),
            variant(SECRET, "shared", "everyone's", None),
        ]);
        let bound = |identity: &str| {
            let mut s: Session<SotwMachine> = Session::new(None);
            s.bind_identity(IdentityBinding {
                identity: identity.into(),
                rules: Arc::new(NodeIdentityRules::default_rule()),
            });
            s
        };
        let ask = |s: &mut Session<SotwMachine>, node: &Node, names: &[&str]| {
            s.handle_request(&sotw(SECRET, names, "", Some(node)), &store.snapshot())
                .unwrap();
            sotw_poll(s, &store)
                .map(|r| contents(&r))
                .unwrap_or_default()
        };
        // Wildcard and by name: each identity gets its own key.
        let mut a = bound("spiffe://t/a");
        assert_eq!(ask(&mut a, &node("a", "c"), &[]), ["a's key", "everyone's"]);
        let mut b = bound("spiffe://t/b");
        assert_eq!(ask(&mut b, &node("b", "c"), &["key"]), ["b's key"]);
        // Another identity: the key does not exist for it.
        let mut c = bound("spiffe://t/c");
        assert_eq!(ask(&mut c, &node("c", "c"), &[]), ["everyone's"]);
        // No mutual TLS, claiming an identity in the node's metadata: nothing of the keys.
        let mut plain: Session<SotwMachine> = Session::new(None);
        let claiming = with_metadata(node("a", "c"), &[(IDENTITY_PARAM, "spiffe://t/a")]);
        assert_eq!(ask(&mut plain, &claiming, &[]), ["everyone's"]);
        // Nor through a dynamic parameter of a delta client.
        let mut delta: Session<DeltaMachine> = Session::new(None);
        let mut dnode = node("a", "c");
        dnode.dynamic_parameters.insert(
            SECRET.into(),
            envoy_types::pb::xds::core::v3::ContextParams {
                params: params(&[(IDENTITY_PARAM, "spiffe://t/a")])
                    .into_iter()
                    .collect(),
            },
        );
        delta
            .handle_request(
                &(&DeltaDiscoveryRequest {
                    type_url: SECRET.into(),
                    node: Some(dnode),
                    resource_names_subscribe: vec!["key".into()],
                    ..Default::default()
                })
                    .into(),
                &store.snapshot(),
            )
            .unwrap();
        let r = delta_poll(&mut delta, &store).unwrap();
        assert!(
            r.resources.is_empty(),
            "{:?}",
            r.resources.iter().map(|x| seen(x)).collect::<Vec<_>>()
        );
    }
}

/// TTLs and heartbeats (spec "TTL"): time is an input, so these never sleep.
mod ttl {
    use std::time::{Duration, Instant};

    use envoy_types::pb::envoy::service::discovery::v3::{
        DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryResponse, Resource as Wrapped,
    };
    use prost::Message;

    use super::*;
    use crate::protocol::test_support::input;
    use crate::store::{Change, ResourceInput, Store, RESOURCE_WRAPPER};
    use crate::transport::wire::{DeltaWire, SotwWire};
    use crate::types::RUNTIME;

    const TTL: Duration = Duration::from_secs(30);

    fn with_ttl(name: &str, content: &str, ttl: Option<Duration>) -> ResourceInput {
        input(RUNTIME, name, content).with_ttl(ttl)
    }

    fn store() -> Store {
        let store = Store::new();
        store
            .replace_all([
                with_ttl("fault", "inject", Some(TTL)),
                with_ttl("plain", "kept", None),
            ])
            .unwrap();
        store
    }

    fn client(user_agent: &str, features: &[&str]) -> Node {
        Node {
            id: "n".into(),
            cluster: "c".into(),
            user_agent_name: user_agent.into(),
            client_features: features.iter().map(|f| f.to_string()).collect(),
            ..Default::default()
        }
    }

    /// Envoy sends no client features on its SotW streams, yet takes TTLs and SotW wrappers.
    fn envoy() -> Node {
        client("envoy", &[])
    }

    fn delta_subscribe(node: &Node, names: &[&str]) -> DeltaDiscoveryRequest {
        DeltaDiscoveryRequest {
            type_url: RUNTIME.into(),
            node: Some(node.clone()),
            resource_names_subscribe: names.iter().map(|n| n.to_string()).collect(),
            ..Default::default()
        }
    }

    fn delta_ack(nonce: &str) -> DeltaDiscoveryRequest {
        DeltaDiscoveryRequest {
            type_url: RUNTIME.into(),
            response_nonce: nonce.into(),
            ..Default::default()
        }
    }

    /// The next delta response as the client decodes it.
    fn delta_next(
        s: &mut Session<DeltaMachine>,
        store: &Store,
        now: Instant,
    ) -> Option<DeltaDiscoveryResponse> {
        let (_, r) = s.poll_response(&store.snapshot(), now)?;
        let bytes = DeltaWire::from(r).encode_to_vec();
        Some(DeltaDiscoveryResponse::decode(bytes.as_slice()).unwrap())
    }

    fn sotw_next(
        s: &mut Session<SotwMachine>,
        store: &Store,
        now: Instant,
    ) -> Option<DiscoveryResponse> {
        let (_, r) = s.poll_response(&store.snapshot(), now)?;
        let bytes = SotwWire::from(r).encode_to_vec();
        Some(DiscoveryResponse::decode(bytes.as_slice()).unwrap())
    }

    fn ttl_of(r: &Wrapped) -> Option<Duration> {
        r.ttl
            .as_ref()
            .map(|d| Duration::new(d.seconds as u64, d.nanos as u32))
    }

    fn delta_session(node: &Node, store: &Store) -> (Session<DeltaMachine>, Instant) {
        delta_session_for(node, &["fault", "plain"], store)
    }

    /// Sessions that do not wait for ACKs: these tests are about the deadlines of TTLs, and a
    /// response waiting for its ACK adds one of its own (`session::tests::ack_wait`).
    fn no_ack_wait() -> SessionOptions {
        SessionOptions {
            ack_wait: Duration::ZERO,
            ..SessionOptions::default()
        }
    }

    fn delta_session_for(
        node: &Node,
        names: &[&str],
        store: &Store,
    ) -> (Session<DeltaMachine>, Instant) {
        let mut s: Session<DeltaMachine> = Session::with_options(None, no_ack_wait());
        s.handle_request(&delta_subscribe(node, names).into(), &store.snapshot())
            .unwrap();
        (s, Instant::now())
    }

    /// An ADS SotW session of `node` subscribed to `names` of the runtime type.
    fn sotw_session(node: &Node, names: &[&str], store: &Store) -> Session<SotwMachine> {
        let mut s = Session::with_options(None, no_ack_wait());
        s.handle_request(&sotw(RUNTIME, names, "", Some(node)), &store.snapshot())
            .unwrap();
        s
    }

    #[test]
    fn delta_resources_carry_their_ttl_to_clients_that_take_ttls() {
        let store = store();
        for node in [envoy(), client("grpc-go", &[FEATURE_RESOURCE_TTL])] {
            let (mut s, now) = delta_session(&node, &store);
            let r = delta_next(&mut s, &store, now).unwrap();
            let by_name: BTreeMap<&str, &Wrapped> =
                r.resources.iter().map(|x| (x.name.as_str(), x)).collect();
            assert_eq!(ttl_of(by_name["fault"]), Some(TTL));
            assert_eq!(ttl_of(by_name["plain"]), None);
            assert!(by_name["fault"].resource.is_some());
        }
    }

    #[test]
    fn ttls_are_sent_only_to_clients_that_take_them() {
        let store = store();
        let (mut s, now) = delta_session(&client("grpc-go", &[]), &store);
        let r = delta_next(&mut s, &store, now).unwrap();
        assert!(r.resources.iter().all(|x| x.ttl.is_none()));
        assert_eq!(
            s.poll_timeout(),
            None,
            "no heartbeats for a client without TTLs"
        );
    }

    #[test]
    fn heartbeats_renew_a_ttl_every_third_of_it_without_a_body() {
        let store = store();
        let (mut s, t0) = delta_session(&envoy(), &store);
        let first = delta_next(&mut s, &store, t0).unwrap();
        s.handle_request(&delta_ack(&first.nonce).into(), &store.snapshot())
            .unwrap();
        assert_eq!(s.poll_timeout(), Some(t0 + TTL / 3));
        // Nothing is owed before the deadline.
        s.handle_timeout(t0 + TTL / 4);
        assert!(delta_next(&mut s, &store, t0 + TTL / 4).is_none());
        let t1 = t0 + TTL / 3;
        s.handle_timeout(t1);
        let beat = delta_next(&mut s, &store, t1).unwrap();
        assert_eq!(beat.resources.len(), 1, "only the resource with a TTL");
        let r = &beat.resources[0];
        assert_eq!(r.name, "fault");
        assert!(r.resource.is_none(), "a heartbeat has no body");
        let version = first.resources.iter().find(|x| x.name == "fault").unwrap();
        assert_eq!(
            r.version, version.version,
            "a heartbeat names the held version"
        );
        assert_eq!(ttl_of(r), Some(TTL));
        assert!(beat.removed_resources.is_empty());
        // And the next one is a third of the TTL later again.
        assert_eq!(s.poll_timeout(), Some(t1 + TTL / 3));
    }

    /// A runtime resource with an xdstp name (`?a=1&b=2`) and a TTL, and the client's other
    /// spelling of it (`?b=2&a=1`).
    const XDSTP_TTL: &str = "xdstp://a/envoy.service.runtime.v3.Runtime/fault?a=1&b=2";
    const SPELLED: &str = "xdstp://a/envoy.service.runtime.v3.Runtime/fault?b=2&a=1";

    fn xdstp_store() -> Store {
        let store = Store::new();
        store
            .replace_all([with_ttl(XDSTP_TTL, "inject", Some(TTL))])
            .unwrap();
        store
    }

    #[test]
    fn delta_ttl_of_a_resource_subscribed_by_a_non_canonical_spelling_is_renewed_under_it() {
        let store = xdstp_store();
        let (mut s, t0) = delta_session_for(&envoy(), &[SPELLED], &store);
        let first = delta_next(&mut s, &store, t0).unwrap();
        assert_eq!(first.resources[0].name, SPELLED);
        s.handle_request(&delta_ack(&first.nonce).into(), &store.snapshot())
            .unwrap();
        let t1 = t0 + TTL / 3;
        s.handle_timeout(t1);
        let beat = delta_next(&mut s, &store, t1).expect("a heartbeat");
        assert_eq!(beat.resources.len(), 1);
        assert_eq!(
            beat.resources[0].name, SPELLED,
            "under the client's spelling"
        );
        assert!(
            beat.resources[0].resource.is_none(),
            "a heartbeat has no body"
        );
        assert_eq!(ttl_of(&beat.resources[0]), Some(TTL));
    }

    #[test]
    fn sotw_ttl_of_a_resource_subscribed_by_a_non_canonical_spelling_is_renewed_under_it() {
        let store = xdstp_store();
        let mut s = sotw_session(&envoy(), &[SPELLED], &store);
        let t0 = Instant::now();
        let first = sotw_next(&mut s, &store, t0).unwrap();
        let wrapped = |r: &DiscoveryResponse| -> Vec<Wrapped> {
            r.resources
                .iter()
                .map(|a| Wrapped::decode(a.value.as_slice()).unwrap())
                .collect()
        };
        assert_eq!(wrapped(&first)[0].name, SPELLED);
        s.handle_request(
            &sotw(RUNTIME, &[SPELLED], &first.nonce, Some(&envoy())),
            &store.snapshot(),
        )
        .unwrap();
        let t1 = t0 + TTL / 3;
        s.handle_timeout(t1);
        let beat = sotw_next(&mut s, &store, t1).expect("the resource sent again");
        let beat = wrapped(&beat);
        assert_eq!(beat.len(), 1);
        assert_eq!(beat[0].name, SPELLED, "under the client's spelling");
        assert_eq!(ttl_of(&beat[0]), Some(TTL));
    }

    #[test]
    fn a_resource_changed_since_it_was_sent_is_renewed_with_its_body() {
        let store = store();
        let (mut s, t0) = delta_session(&envoy(), &store);
        delta_next(&mut s, &store, t0).unwrap();
        store
            .apply([Change::Set(with_ttl("fault", "inject more", Some(TTL)))])
            .unwrap();
        // The change is not yet known to the session (no handle_changes): the renewal finds the
        // client's version stale and sends the resource.
        s.handle_timeout(t0 + TTL / 3);
        let r = delta_next(&mut s, &store, t0 + TTL / 3).unwrap();
        assert_eq!(r.resources.len(), 1);
        assert_eq!(
            r.resources[0].resource.as_ref().unwrap().value,
            b"inject more"
        );
    }

    #[test]
    fn a_changed_ttl_is_a_new_version() {
        let a = Resource::variant_with_ttl(RUNTIME, "x", Vec::new(), None, Some(TTL), "v".into());
        let b = Resource::variant_with_ttl(RUNTIME, "x", Vec::new(), None, None, "v".into());
        let c =
            Resource::variant_with_ttl(RUNTIME, "x", Vec::new(), None, Some(TTL * 2), "v".into());
        assert_ne!(a.version(), b.version());
        assert_ne!(a.version(), c.version());
    }

    #[test]
    fn a_resource_whose_ttl_was_removed_is_no_longer_renewed() {
        let store = store();
        let (mut s, t0) = delta_session(&envoy(), &store);
        delta_next(&mut s, &store, t0).unwrap();
        store
            .apply([Change::Set(with_ttl("fault", "inject", None))])
            .unwrap();
        s.handle_changes(
            [(
                Arc::<str>::from(RUNTIME),
                [Arc::<str>::from("fault")].into_iter().collect(),
            )]
            .into_iter()
            .collect(),
        );
        let r = delta_next(&mut s, &store, t0).unwrap();
        assert!(r.resources[0].ttl.is_none(), "resent without its TTL");
        assert_eq!(s.poll_timeout(), None);
    }

    #[test]
    fn sotw_wraps_resources_with_a_ttl_for_clients_that_take_wrappers() {
        let store = store();
        let mut s = sotw_session(&envoy(), &["fault", "plain"], &store);
        let t0 = Instant::now();
        let r = sotw_next(&mut s, &store, t0).unwrap();
        let wrapped: Vec<Wrapped> = r
            .resources
            .iter()
            .filter(|a| a.type_url == RESOURCE_WRAPPER)
            .map(|a| Wrapped::decode(a.value.as_slice()).unwrap())
            .collect();
        assert_eq!(wrapped.len(), 1, "only the resource with a TTL is wrapped");
        assert_eq!(wrapped[0].name, "fault");
        assert_eq!(ttl_of(&wrapped[0]), Some(TTL));
        assert_eq!(wrapped[0].resource.as_ref().unwrap().value, b"inject");
        assert!(r
            .resources
            .iter()
            .any(|a| a.type_url == RUNTIME && a.value == b"kept"));
        assert_eq!(s.poll_timeout(), Some(t0 + TTL / 3));

        // A client that takes wrappers but no TTLs, and one that takes TTLs but no wrappers:
        // plain resources only.
        for node in [
            client("grpc-go", &[FEATURE_RESOURCE_IN_SOTW]),
            client("grpc-go", &[FEATURE_RESOURCE_TTL]),
        ] {
            let mut s = sotw_session(&node, &["fault"], &store);
            let r = sotw_next(&mut s, &store, t0).unwrap();
            assert!(r.resources.iter().all(|a| a.type_url == RUNTIME));
            assert_eq!(s.poll_timeout(), None);
        }
    }

    #[test]
    fn sotw_renews_a_ttl_by_sending_the_resource_again() {
        let store = store();
        let mut s = sotw_session(&envoy(), &["fault", "plain"], &store);
        let t0 = Instant::now();
        let first = sotw_next(&mut s, &store, t0).unwrap();
        s.handle_request(
            &sotw(RUNTIME, &["fault", "plain"], &first.nonce, None),
            &store.snapshot(),
        )
        .unwrap();
        assert!(sotw_next(&mut s, &store, t0).is_none());
        s.handle_timeout(t0 + TTL / 3);
        let beat = sotw_next(&mut s, &store, t0 + TTL / 3).unwrap();
        assert_eq!(beat.version_info, first.version_info, "nothing changed");
        assert_eq!(beat.resources.len(), 1);
        let w = Wrapped::decode(beat.resources[0].value.as_slice()).unwrap();
        assert_eq!((w.name.as_str(), ttl_of(&w)), ("fault", Some(TTL)));
        assert!(w.resource.is_some(), "SotW renews with the body");
    }

    #[test]
    fn virtual_hosts_are_renewed_with_their_body() {
        use crate::types::VIRTUAL_HOST;
        let store = Store::new();
        store
            .replace_all([input(VIRTUAL_HOST, "rc/vh", "host").with_ttl(Some(TTL))])
            .unwrap();
        let mut s: Session<DeltaMachine> = Session::new(None);
        let request = DeltaDiscoveryRequest {
            type_url: VIRTUAL_HOST.into(),
            node: Some(envoy()),
            resource_names_subscribe: vec!["rc/vh".into()],
            ..Default::default()
        };
        s.handle_request(&(&request).into(), &store.snapshot())
            .unwrap();
        let t0 = Instant::now();
        delta_next(&mut s, &store, t0).unwrap();
        s.handle_timeout(t0 + TTL / 3);
        let r = delta_next(&mut s, &store, t0 + TTL / 3).unwrap();
        assert_eq!(r.resources.len(), 1);
        assert!(
            r.resources[0].resource.is_some(),
            "VHDS takes no body-less heartbeat"
        );
        assert_eq!(ttl_of(&r.resources[0]), Some(TTL));
    }

    #[test]
    fn heartbeats_never_come_faster_than_the_floor() {
        let store = Store::new();
        store
            .replace_all([with_ttl("fast", "x", Some(Duration::from_millis(30)))])
            .unwrap();
        let (mut s, t0) = delta_session_for(&envoy(), &["fast"], &store);
        delta_next(&mut s, &store, t0).unwrap();
        assert_eq!(s.poll_timeout(), Some(t0 + MIN_HEARTBEAT_INTERVAL));
    }
}

/// Make-before-break on aggregated streams (spec "Eventual consistency considerations"): one
/// store update adds cluster Y with endpoints, repoints route r1 from X to Y and removes X. The
/// client must get CDS(Y), then EDS(Y) (once it asks), then RDS(r1 -> Y), and X's removal only
/// after it ACKed that route.
mod make_before_break {
    use std::time::Instant;

    use bytes::Bytes;
    use envoy_types::pb::envoy::config::cluster::v3::cluster::{
        ClusterDiscoveryType, DiscoveryType, EdsClusterConfig,
    };
    use envoy_types::pb::envoy::config::cluster::v3::Cluster;
    use envoy_types::pb::envoy::config::core::v3::config_source::ConfigSourceSpecifier;
    use envoy_types::pb::envoy::config::core::v3::{AggregatedConfigSource, ConfigSource};
    use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
    use envoy_types::pb::envoy::config::route::v3::route::Action;
    use envoy_types::pb::envoy::config::route::v3::route_action::ClusterSpecifier;
    use envoy_types::pb::envoy::config::route::v3::{
        Route, RouteAction, RouteConfiguration, VirtualHost,
    };
    use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
    use prost::Message;

    use super::*;
    use crate::store::{Change, ResourceInput, Store};
    use crate::types::ROUTE_CONFIGURATION;

    fn cluster(name: &str) -> ResourceInput {
        let c = Cluster {
            name: name.into(),
            cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32)),
            eds_cluster_config: Some(EdsClusterConfig {
                eds_config: Some(ConfigSource {
                    config_source_specifier: Some(ConfigSourceSpecifier::Ads(
                        AggregatedConfigSource::default(),
                    )),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        ResourceInput::new(CLUSTER, name, c.encode_to_vec().into())
    }

    fn endpoints(name: &str) -> ResourceInput {
        let e = ClusterLoadAssignment {
            cluster_name: name.into(),
            ..Default::default()
        };
        ResourceInput::new(CLUSTER_LOAD_ASSIGNMENT, name, e.encode_to_vec().into())
    }

    fn route(name: &str, to: &str) -> ResourceInput {
        let r = RouteConfiguration {
            name: name.into(),
            virtual_hosts: vec![VirtualHost {
                name: "all".into(),
                domains: vec!["*".into()],
                routes: vec![Route {
                    action: Some(Action::Route(RouteAction {
                        cluster_specifier: Some(ClusterSpecifier::Cluster(to.into())),
                        ..Default::default()
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        ResourceInput::new(ROUTE_CONFIGURATION, name, Bytes::from(r.encode_to_vec()))
    }

    fn store() -> Store {
        let store = Store::new();
        store
            .replace_all([cluster("x"), endpoints("x"), route("r1", "x")])
            .unwrap();
        store
    }

    /// The update of the scenario, and the changes the store reports for it.
    /// Moves route r1 from cluster X to a new cluster Y and removes X, in one commit; the changes
    /// as a stream watching the three types whole takes them from the store.
    fn switch(store: &Store) -> Changes {
        let mut watcher = store.watcher();
        for t in [CLUSTER, CLUSTER_LOAD_ASSIGNMENT, ROUTE_CONFIGURATION] {
            watcher.set_wildcard(&Arc::from(t), true);
        }
        store
            .apply([
                Change::Set(cluster("y")),
                Change::Set(endpoints("y")),
                Change::Set(route("r1", "y")),
                Change::Remove {
                    type_url: CLUSTER.into(),
                    name: "x".into(),
                },
                Change::Remove {
                    type_url: CLUSTER_LOAD_ASSIGNMENT.into(),
                    name: "x".into(),
                },
            ])
            .unwrap();
        watcher.take_changes()
    }

    /// What a response carries, as (type, names).
    type Seen = (String, Vec<String>, Vec<String>);

    fn sotw_seen(type_url: &str, r: &SotwResponse) -> Seen {
        let mut names: Vec<String> = r.names().iter().map(|n| n.to_string()).collect();
        names.sort();
        (short(type_url), names, Vec::new())
    }

    fn delta_seen(type_url: &str, r: &DeltaResponse) -> Seen {
        (
            short(type_url),
            r.resources.iter().map(|x| x.name().to_string()).collect(),
            r.removed.iter().map(|x| x.to_string()).collect(),
        )
    }

    fn short(type_url: &str) -> String {
        match type_url {
            CLUSTER => "CDS",
            CLUSTER_LOAD_ASSIGNMENT => "EDS",
            ROUTE_CONFIGURATION => "RDS",
            _ => "?",
        }
        .to_owned()
    }

    fn seen(t: &str, names: &[&str], removed: &[&str]) -> Seen {
        let v = |n: &[&str]| n.iter().map(|s| s.to_string()).collect();
        (t.to_owned(), v(names), v(removed))
    }

    struct Sotw {
        s: Session<SotwMachine>,
        store: Store,
        nonces: HashMap<String, String>,
        eds: Vec<&'static str>,
    }

    impl Sotw {
        /// A client of `s` subscribed to every cluster, X's endpoints and route r1 of `store`,
        /// with everything sent and ACKed.
        fn synced(s: Session<SotwMachine>, store: Store) -> Sotw {
            let mut c = Sotw {
                s,
                store,
                nonces: HashMap::default(),
                eds: vec!["x"],
            };
            c.request(CLUSTER, &[]);
            c.request(CLUSTER_LOAD_ASSIGNMENT, &["x"]);
            c.request(ROUTE_CONFIGURATION, &["r1"]);
            while c.poll().is_some() {}
            for t in [CLUSTER, CLUSTER_LOAD_ASSIGNMENT, ROUTE_CONFIGURATION] {
                c.ack(t);
            }
            c
        }

        fn request(&mut self, type_url: &str, names: &[&str]) {
            let nonce = self.nonces.get(type_url).cloned().unwrap_or_default();
            let node = node("envoy", "c");
            self.s
                .handle_request(
                    &sotw(type_url, names, &nonce, Some(&node)),
                    &self.store.snapshot(),
                )
                .unwrap();
        }

        fn poll(&mut self) -> Option<Seen> {
            let (t, r) = self
                .s
                .poll_response(&self.store.snapshot(), Instant::now())?;
            self.nonces.insert(t.to_string(), r.nonce.to_string());
            Some(sotw_seen(&t, &r))
        }

        /// ACKs the latest response of a type (the request repeats its names).
        fn ack(&mut self, type_url: &str) {
            let names: Vec<&str> = match type_url {
                CLUSTER => Vec::new(),
                CLUSTER_LOAD_ASSIGNMENT => self.eds.clone(),
                _ => vec!["r1"],
            };
            self.request(type_url, &names);
        }
    }

    #[test]
    fn sotw_ads_sends_the_new_cluster_and_its_endpoints_before_the_route_and_removes_the_old_cluster_after_the_route_ack(
    ) {
        let mut c = Sotw::synced(ads(), store());
        assert_eq!(c.poll(), None);

        let changes = switch(&c.store);
        c.s.handle_changes(changes);
        // CDS first, with Y and still X (the route still points at X).
        assert_eq!(c.poll(), Some(seen("CDS", &["x", "y"], &[])));
        // The route waits: the client has not asked for Y's endpoints yet. (X's endpoints may
        // go again: a SotW wildcard does not tell which clusters changed.)
        let next = c.poll();
        assert!(next.as_ref().is_none_or(|(t, _, _)| t == "EDS"), "{next:?}");
        assert_eq!(c.poll(), None);
        c.ack(CLUSTER);
        assert_eq!(c.poll(), None);
        // Envoy asks for Y's endpoints once it has the cluster.
        c.eds = vec!["x", "y"];
        c.ack(CLUSTER_LOAD_ASSIGNMENT);
        assert_eq!(c.poll(), Some(seen("EDS", &["y"], &[])));
        // Now the route.
        assert_eq!(c.poll(), Some(seen("RDS", &["r1"], &[])));
        assert_eq!(c.poll(), None, "X stays until the route is ACKed");
        c.ack(CLUSTER_LOAD_ASSIGNMENT);
        assert_eq!(c.poll(), None);
        c.ack(ROUTE_CONFIGURATION);
        assert_eq!(
            c.poll(),
            Some(seen("CDS", &["y"], &[])),
            "X's removal goes last"
        );
        assert_eq!(c.poll(), None);
    }

    #[test]
    fn a_held_route_goes_after_the_hold_timeout_when_the_endpoints_are_never_asked_for() {
        let mut c = Sotw::synced(ads(), store());
        let changes = switch(&c.store);
        c.s.handle_changes(changes);
        let t0 = Instant::now();
        assert_eq!(c.poll().map(|s| s.0), Some("CDS".to_owned()));
        while let Some((t, _)) = c.s.poll_response(&c.store.snapshot(), t0) {
            assert_ne!(&*t, ROUTE_CONFIGURATION, "the route is held");
        }
        let deadline = c.s.poll_timeout().expect("a held route sets a deadline");
        assert!(deadline <= t0 + HOLD_TIMEOUT + std::time::Duration::from_secs(1));
        c.s.handle_timeout(deadline);
        let (t, r) = c.s.poll_response(&c.store.snapshot(), deadline).unwrap();
        assert_eq!(sotw_seen(&t, &r), seen("RDS", &["r1"], &[]));
    }

    #[test]
    fn delta_ads_sends_the_new_cluster_and_its_endpoints_before_the_route_and_removes_the_old_cluster_after_the_route_ack(
    ) {
        let store = store();
        let mut s: Session<DeltaMachine> = Session::new(None);
        let mut nonces: HashMap<String, String> = HashMap::default();
        let node = node("envoy", "c");
        let send = |s: &mut Session<DeltaMachine>,
                    nonces: &HashMap<String, String>,
                    t: &str,
                    subscribe: &[&str],
                    unsubscribe: &[&str]| {
            let r = DeltaDiscoveryRequest {
                type_url: t.into(),
                node: Some(node.clone()),
                response_nonce: nonces.get(t).cloned().unwrap_or_default(),
                resource_names_subscribe: subscribe.iter().map(|n| n.to_string()).collect(),
                resource_names_unsubscribe: unsubscribe.iter().map(|n| n.to_string()).collect(),
                ..Default::default()
            };
            s.handle_request(&(&r).into(), &store.snapshot()).unwrap();
        };
        let poll = |s: &mut Session<DeltaMachine>, nonces: &mut HashMap<String, String>| {
            let (t, r) = s.poll_response(&store.snapshot(), Instant::now())?;
            nonces.insert(t.to_string(), r.nonce.to_string());
            Some(delta_seen(&t, &r))
        };
        send(&mut s, &nonces, CLUSTER, &[], &[]);
        send(&mut s, &nonces, CLUSTER_LOAD_ASSIGNMENT, &["x"], &[]);
        send(&mut s, &nonces, ROUTE_CONFIGURATION, &["r1"], &[]);
        while poll(&mut s, &mut nonces).is_some() {}
        for t in [CLUSTER, CLUSTER_LOAD_ASSIGNMENT, ROUTE_CONFIGURATION] {
            send(&mut s, &nonces, t, &[], &[]);
        }
        assert_eq!(poll(&mut s, &mut nonces), None);

        s.handle_changes(switch(&store));
        assert_eq!(poll(&mut s, &mut nonces), Some(seen("CDS", &["y"], &[])));
        assert_eq!(
            poll(&mut s, &mut nonces),
            None,
            "the route waits for Y's endpoints"
        );
        send(&mut s, &nonces, CLUSTER, &[], &[]);
        send(&mut s, &nonces, CLUSTER_LOAD_ASSIGNMENT, &["y"], &[]);
        assert_eq!(poll(&mut s, &mut nonces), Some(seen("EDS", &["y"], &[])));
        assert_eq!(poll(&mut s, &mut nonces), Some(seen("RDS", &["r1"], &[])));
        assert_eq!(
            poll(&mut s, &mut nonces),
            None,
            "X stays until the route is ACKed"
        );
        send(&mut s, &nonces, CLUSTER_LOAD_ASSIGNMENT, &[], &[]);
        send(&mut s, &nonces, ROUTE_CONFIGURATION, &[], &[]);
        assert_eq!(poll(&mut s, &mut nonces), Some(seen("CDS", &[], &["x"])));
        assert_eq!(poll(&mut s, &mut nonces), Some(seen("EDS", &[], &["x"])));
        assert_eq!(poll(&mut s, &mut nonces), None);
    }

    /// Cluster `name` as `cluster` makes it, changed (another stat name).
    fn changed_cluster(name: &str) -> ResourceInput {
        let mut c = Cluster::decode(cluster(name).value).unwrap();
        c.alt_stat_name = "changed".into();
        ResourceInput::new(CLUSTER, name, c.encode_to_vec().into())
    }

    #[test]
    fn a_cluster_changed_then_removed_lingers_as_the_client_was_last_sent_it() {
        let store = store();
        let mut s: Session<DeltaMachine> = Session::new(None);
        let mut nonces: HashMap<String, String> = HashMap::default();
        let node = node("envoy", "c");
        let send = |s: &mut Session<DeltaMachine>,
                    nonces: &HashMap<String, String>,
                    t: &str,
                    subscribe: &[&str]| {
            let r = DeltaDiscoveryRequest {
                type_url: t.into(),
                node: Some(node.clone()),
                response_nonce: nonces.get(t).cloned().unwrap_or_default(),
                resource_names_subscribe: subscribe.iter().map(|n| n.to_string()).collect(),
                ..Default::default()
            };
            s.handle_request(&(&r).into(), &store.snapshot()).unwrap();
        };
        // Every response owed, each ACKed.
        let settle = |s: &mut Session<DeltaMachine>, nonces: &mut HashMap<String, String>| {
            let mut seen = Vec::new();
            while let Some((t, r)) = s.poll_response(&store.snapshot(), Instant::now()) {
                nonces.insert(t.to_string(), r.nonce.to_string());
                seen.push(delta_seen(&t, &r));
            }
            for (t, _, _) in &seen {
                let t = match t.as_str() {
                    "CDS" => CLUSTER,
                    "EDS" => CLUSTER_LOAD_ASSIGNMENT,
                    _ => ROUTE_CONFIGURATION,
                };
                send(s, nonces, t, &[]);
            }
            seen
        };
        send(&mut s, &nonces, CLUSTER, &[]);
        send(&mut s, &nonces, CLUSTER_LOAD_ASSIGNMENT, &["x"]);
        send(&mut s, &nonces, ROUTE_CONFIGURATION, &["r1"]);
        settle(&mut s, &mut nonces);
        assert_eq!(settle(&mut s, &mut nonces), Vec::<Seen>::new());

        // X changes, and the client is sent it.
        let mut watcher = store.watcher();
        watcher.set_wildcard(&Arc::from(CLUSTER), true);
        store.apply([Change::Set(changed_cluster("x"))]).unwrap();
        s.handle_changes(watcher.take_changes());
        let sent = settle(&mut s, &mut nonces);
        assert_eq!(sent.first(), Some(&seen("CDS", &["x"], &[])), "{sent:?}");

        // Then X is removed while the route still points at it: X lingers as the client holds
        // it (changed), so nothing of X goes out before the route's ACK.
        s.handle_changes(switch(&store));
        let (t, r) = s.poll_response(&store.snapshot(), Instant::now()).unwrap();
        assert_eq!(delta_seen(&t, &r), seen("CDS", &["y"], &[]));
    }

    /// A ClusterLoadAssignment of about 1 KiB.
    fn big_endpoints(name: &str) -> ResourceInput {
        use envoy_types::pb::envoy::config::core::v3::Locality;
        use envoy_types::pb::envoy::config::endpoint::v3::LocalityLbEndpoints;
        let e = ClusterLoadAssignment {
            cluster_name: name.into(),
            endpoints: vec![LocalityLbEndpoints {
                locality: Some(Locality {
                    region: "r".repeat(1000),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        };
        ResourceInput::new(CLUSTER_LOAD_ASSIGNMENT, name, e.encode_to_vec().into())
    }

    #[test]
    fn a_route_waits_for_the_last_part_of_split_endpoints() {
        let store = store();
        let options = SessionOptions {
            max_response_bytes: 16 * 1024,
            ..Default::default()
        };
        let mut c = Sotw::synced(Session::with_options(None, options), store);
        // 40 KiB of new endpoints, Y's sorting last, and the route moved to Y.
        let many: Vec<&'static str> = (0..40)
            .map(|i| &*Box::leak(format!("e{i:02}").into_boxed_str()))
            .collect();
        let mut changes: Vec<Change> = many.iter().map(|n| Change::Set(big_endpoints(n))).collect();
        changes.push(Change::Set(cluster("y")));
        changes.push(Change::Set(big_endpoints("y")));
        changes.push(Change::Set(route("r1", "y")));
        c.store.apply(changes).unwrap();
        let mut names: HashSet<Arc<str>> = many.iter().map(|n| Arc::from(*n)).collect();
        names.insert(Arc::from("y"));
        c.s.handle_changes(
            [
                (
                    Arc::<str>::from(CLUSTER),
                    [Arc::from("y")].into_iter().collect(),
                ),
                (Arc::<str>::from(CLUSTER_LOAD_ASSIGNMENT), names),
                (
                    Arc::<str>::from(ROUTE_CONFIGURATION),
                    [Arc::from("r1")].into_iter().collect(),
                ),
            ]
            .into_iter()
            .collect(),
        );
        assert_eq!(c.poll().map(|s| s.0), Some("CDS".to_owned()));
        c.ack(CLUSTER);
        c.eds = [vec!["x", "y"], many.clone()].concat();
        c.ack(CLUSTER_LOAD_ASSIGNMENT);
        let mut order: Vec<Seen> = Vec::new();
        while let Some(seen) = c.poll() {
            order.push(seen);
        }
        let route = order
            .iter()
            .position(|s| s.0 == "RDS")
            .expect("the route goes");
        let y = order
            .iter()
            .position(|s| s.0 == "EDS" && s.1.contains(&"y".to_owned()))
            .expect("Y's endpoints go");
        let eds_parts = order.iter().filter(|s| s.0 == "EDS").count();
        assert!(eds_parts >= 3, "the endpoints go in parts: {order:?}");
        assert!(y < route, "the route waits for Y's endpoints: {order:?}");
    }
}

#[test]
fn a_bound_identity_must_match_the_node_of_the_first_request() {
    use crate::protocol::identity::{IdentityBinding, NodeIdentityRules};
    let binding = IdentityBinding {
        identity: "spiffe://example.org/ns/prod/sa/envoy-1".into(),
        rules: Arc::new(NodeIdentityRules::default_rule()),
    };
    let snapshot = Snapshot::default();

    let mut s = ads();
    s.bind_identity(binding.clone());
    let err = s
        .handle_request(&sotw(CLUSTER, &[], "", None), &snapshot)
        .expect_err("no node");
    assert!(matches!(err, SessionError::NodeRequired { .. }), "{err}");
    assert_eq!(err.kind(), ErrorKind::PermissionDenied);

    let mut s = ads();
    s.bind_identity(binding.clone());
    let err = s
        .handle_request(
            &sotw(CLUSTER, &[], "", Some(&node("envoy-2\n", "c"))),
            &snapshot,
        )
        .expect_err("another node");
    assert_eq!(err.kind(), ErrorKind::PermissionDenied);
    let message = err.to_string();
    assert!(
        message.contains("\"spiffe://example.org/ns/prod/sa/envoy-1\"")
            && message.contains("\"envoy-2\\n\""),
        "both identities, escaped: {message}"
    );

    let mut s = ads();
    s.bind_identity(binding);
    s.handle_request(
        &sotw(CLUSTER, &[], "", Some(&node("envoy-1", "c"))),
        &snapshot,
    )
    .expect("its own node");
    // Later requests may omit the node, as without a binding.
    s.handle_request(&sotw(LISTENER, &[], "", None), &snapshot)
        .expect("node known");
}

/// One response in flight per type ([`SessionOptions::ack_wait`]).
mod ack_wait {
    use std::time::{Duration, Instant};

    use envoy_types::pb::google::rpc::Status;

    use super::*;
    use crate::protocol::sotw::SotwResponse;
    use crate::protocol::test_support::store_with;
    use crate::store::Change;
    use crate::types::RUNTIME;

    const WAIT: Duration = DEFAULT_ACK_WAIT;

    /// A SotW request of `names` answering `nonce` (a NACK with `nack`).
    fn answer(
        s: &mut Session<SotwMachine>,
        store: &Store,
        type_url: &str,
        names: &[&str],
        nonce: &str,
        nack: bool,
    ) {
        let mut request = DiscoveryRequest {
            type_url: type_url.into(),
            resource_names: names.iter().map(|n| n.to_string()).collect(),
            response_nonce: nonce.into(),
            node: Some(node("n", "c")),
            ..Default::default()
        };
        if nack {
            request.error_detail = Some(Status {
                code: 3,
                message: "rejected by test".into(),
                details: vec![],
            });
        }
        s.handle_request(&(&request).into(), &store.snapshot())
            .unwrap();
    }

    fn next(
        s: &mut Session<SotwMachine>,
        store: &Store,
        now: Instant,
    ) -> Option<(Arc<str>, SotwResponse)> {
        s.poll_response(&store.snapshot(), now)
    }

    /// Sets `name` of `type_url` in the store and tells the session, as the store's watch does.
    fn change(s: &mut Session<SotwMachine>, store: &Store, type_url: &str, name: &str) {
        store
            .apply([Change::Set(input(
                type_url,
                name,
                &format!("{name} at {:?}", Instant::now()),
            ))])
            .unwrap();
        s.handle_changes(
            [(Arc::from(type_url), [Arc::from(name)].into_iter().collect())]
                .into_iter()
                .collect(),
        );
    }

    fn names(r: &SotwResponse) -> Vec<String> {
        r.names().iter().map(|n| n.to_string()).collect()
    }

    /// An ADS session subscribed to `subscribed` of the runtime type (which the store holds),
    /// and its first response, not answered yet.
    fn started(subscribed: &[&str]) -> (Store, Session<SotwMachine>, Instant, SotwResponse) {
        let resources: Vec<(&str, &str)> = subscribed.iter().map(|n| (*n, "1")).collect();
        let store = store_with(RUNTIME, &resources);
        let mut s = ads();
        let t0 = Instant::now();
        answer(&mut s, &store, RUNTIME, subscribed, "", false);
        let (_, first) = next(&mut s, &store, t0).unwrap();
        (store, s, t0, first)
    }

    #[test]
    fn the_session_s_deadline_is_the_end_of_the_earliest_of_its_types_waits() {
        use crate::types::SECRET;
        let (store, mut s, t0, first) = started(&["a"]);
        // A second type, subscribed and sent later: it waits from then on.
        store.apply([Change::Set(input(SECRET, "k", "1"))]).unwrap();
        answer(&mut s, &store, SECRET, &["k"], "", false);
        let t1 = t0 + WAIT / 2;
        let (_, secrets) = next(&mut s, &store, t1).expect("the secret");
        assert_eq!(
            s.poll_timeout(),
            Some(t0 + WAIT),
            "the first type's ends first"
        );
        answer(&mut s, &store, RUNTIME, &["a"], first.nonce.as_str(), false);
        assert_eq!(s.poll_timeout(), Some(t1 + WAIT), "then the second's");
        answer(
            &mut s,
            &store,
            SECRET,
            &["k"],
            secrets.nonce.as_str(),
            false,
        );
        assert_eq!(s.poll_timeout(), None, "none waits");
    }

    #[test]
    fn a_types_next_response_waits_for_the_ack_of_the_last_and_carries_what_changed_meanwhile() {
        let (store, mut s, t0, first) = started(&["a", "b"]);
        change(&mut s, &store, RUNTIME, "a");
        assert!(
            next(&mut s, &store, t0).is_none(),
            "the first is not answered"
        );
        change(&mut s, &store, RUNTIME, "b");
        assert!(next(&mut s, &store, t0).is_none());
        answer(
            &mut s,
            &store,
            RUNTIME,
            &["a", "b"],
            first.nonce.as_str(),
            false,
        );
        let (_, second) = next(&mut s, &store, t0).unwrap();
        assert_eq!(names(&second), ["a", "b"], "both changes in one response");
        assert!(next(&mut s, &store, t0).is_none());
    }

    #[test]
    fn a_nack_lets_the_next_response_go_as_an_ack_does() {
        let (store, mut s, t0, first) = started(&["a"]);
        change(&mut s, &store, RUNTIME, "a");
        assert!(next(&mut s, &store, t0).is_none());
        answer(&mut s, &store, RUNTIME, &["a"], first.nonce.as_str(), true);
        assert_eq!(names(&next(&mut s, &store, t0).unwrap().1), ["a"]);
    }

    #[test]
    fn an_unanswered_response_holds_the_next_one_back_for_ack_wait_at_most() {
        let (store, mut s, t0, first) = started(&["a"]);
        assert_eq!(s.poll_timeout(), Some(t0 + WAIT));
        change(&mut s, &store, RUNTIME, "a");
        s.handle_timeout(t0 + WAIT / 2);
        assert!(next(&mut s, &store, t0 + WAIT / 2).is_none());
        s.handle_timeout(t0 + WAIT);
        assert_eq!(s.poll_timeout(), None, "no longer waiting");
        let t1 = t0 + WAIT;
        let (_, second) = next(&mut s, &store, t1).unwrap();
        assert_eq!(s.poll_timeout(), Some(t1 + WAIT));
        // The first one's late ACK answers nothing in flight: the next change waits for the
        // second one's.
        answer(&mut s, &store, RUNTIME, &["a"], first.nonce.as_str(), false);
        change(&mut s, &store, RUNTIME, "a");
        assert!(next(&mut s, &store, t1).is_none());
        answer(
            &mut s,
            &store,
            RUNTIME,
            &["a"],
            second.nonce.as_str(),
            false,
        );
        assert!(next(&mut s, &store, t1).is_some());
    }

    #[test]
    fn a_type_waits_only_for_the_ack_of_its_own_last_response() {
        let store = store_with(RUNTIME, &[("a", "1")]);
        store
            .apply([Change::Set(input(CLUSTER_LOAD_ASSIGNMENT, "e", "1"))])
            .unwrap();
        let mut s = ads();
        let t0 = Instant::now();
        answer(&mut s, &store, RUNTIME, &["a"], "", false);
        answer(&mut s, &store, CLUSTER_LOAD_ASSIGNMENT, &["e"], "", false);
        let mut sent = BTreeMap::new();
        while let Some((type_url, r)) = next(&mut s, &store, t0) {
            sent.insert(type_url.to_string(), r.nonce);
        }
        assert_eq!(sent.len(), 2);
        answer(
            &mut s,
            &store,
            RUNTIME,
            &["a"],
            sent[RUNTIME].as_str(),
            false,
        );
        change(&mut s, &store, RUNTIME, "a");
        change(&mut s, &store, CLUSTER_LOAD_ASSIGNMENT, "e");
        let (type_url, _) = next(&mut s, &store, t0).unwrap();
        assert_eq!(&*type_url, RUNTIME);
        assert!(next(&mut s, &store, t0).is_none(), "the endpoints wait");
        let nonce = sent[CLUSTER_LOAD_ASSIGNMENT].as_str();
        answer(
            &mut s,
            &store,
            CLUSTER_LOAD_ASSIGNMENT,
            &["e"],
            nonce,
            false,
        );
        let (type_url, _) = next(&mut s, &store, t0).unwrap();
        assert_eq!(&*type_url, CLUSTER_LOAD_ASSIGNMENT);
    }

    #[test]
    fn the_parts_of_a_response_over_the_size_limit_do_not_wait() {
        let resources: Vec<(String, String)> =
            (0..6).map(|i| (format!("r{i}"), "x".repeat(100))).collect();
        let resources: Vec<(&str, &str)> = resources
            .iter()
            .map(|(n, c)| (n.as_str(), c.as_str()))
            .collect();
        let store = store_with(RUNTIME, &resources);
        let options = SessionOptions {
            max_response_bytes: 400,
            ..SessionOptions::default()
        };
        let mut s: Session<SotwMachine> = Session::with_options(None, options);
        let t0 = Instant::now();
        let all: Vec<&str> = resources.iter().map(|(n, _)| *n).collect();
        answer(&mut s, &store, RUNTIME, &all, "", false);
        let mut parts = Vec::new();
        while let Some((_, r)) = next(&mut s, &store, t0) {
            parts.push(r);
        }
        assert!(parts.len() > 1, "{} parts", parts.len());
        assert_eq!(parts.iter().map(|p| p.len()).sum::<usize>(), 6);
        change(&mut s, &store, RUNTIME, "r0");
        assert!(next(&mut s, &store, t0).is_none(), "a new change waits");
    }

    #[test]
    fn with_no_ack_wait_each_change_goes_out_at_once() {
        let store = store_with(RUNTIME, &[("a", "1")]);
        let options = SessionOptions {
            ack_wait: Duration::ZERO,
            ..SessionOptions::default()
        };
        let mut s: Session<SotwMachine> = Session::with_options(None, options);
        let t0 = Instant::now();
        answer(&mut s, &store, RUNTIME, &["a"], "", false);
        assert!(next(&mut s, &store, t0).is_some());
        assert_eq!(s.poll_timeout(), None);
        change(&mut s, &store, RUNTIME, "a");
        assert!(next(&mut s, &store, t0).is_some());
    }
}

#[test]
fn a_reconnecting_clients_glob_members_count_against_the_names_limit_as_they_are_sent_again() {
    use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
    const EP: &str = "type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint";
    let c1 = "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1";
    let store = Store::new();
    store
        .replace_all((0..4).map(|i| input(EP, &format!("{c1}/e{i}"), "1")))
        .unwrap();
    let options = SessionOptions {
        max_names: 5,
        ..Default::default()
    };
    let mut s: Session<DeltaMachine> = Session::with_options(None, options);
    // A client back after a reconnect: the glob, and the four members it holds.
    let reconnect = DeltaDiscoveryRequest {
        type_url: EP.into(),
        node: Some(node("n", "c")),
        resource_names_subscribe: vec![format!("{c1}/*")],
        initial_resource_versions: (0..4)
            .map(|i| (format!("{c1}/e{i}"), "1".to_owned()))
            .collect(),
        ..Default::default()
    };
    s.handle_request(&reconnect.into(), &store.snapshot())
        .unwrap();
    // A glob's members are not claimed by name: they are sent again, and count as they are.
    while s.poll_response(&store.snapshot(), Instant::now()).is_some() {}
    assert!(s.take_breach().is_none());
    assert_eq!(
        s.subscribed_names(),
        5,
        "the glob and the four members held"
    );
    let other = DeltaDiscoveryRequest {
        type_url: EP.into(),
        resource_names_subscribe: vec!["other".into()],
        ..Default::default()
    };
    let err = s
        .handle_request(&other.into(), &store.snapshot())
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ResourceExhausted);
}
