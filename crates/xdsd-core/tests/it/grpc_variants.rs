//! xRFC TP2 variants over real gRPC on loopback: what a client that subscribes with dynamic
//! parameters receives on the wire (resources wrapped in `Resource` with `resource_name`,
//! removals in `removed_resource_names`), and what a legacy client receives (plain resources).

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DiscoveryRequest, DynamicParameterConstraints, Resource, ResourceLocator,
};
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use xdsd_core::params::Constraints;
use xdsd_core::store::{Change, RESOURCE_WRAPPER};
use xdsd_core::types::CLUSTER_LOAD_ASSIGNMENT;

use crate::support::{label, labelled, node_with_metadata, protocol_tests, Mode, Server, WAIT};

fn env(value: &str) -> DynamicParameterConstraints {
    crate::support::env_constraint(value)
}

/// A server whose ClusterLoadAssignment "e" has a prod and a test variant (labelled so).
async fn server(mode: Mode) -> Server {
    let server = Server::start_in(mode).await;
    server
        .store
        .replace_all(["prod", "test"].map(|v| {
            labelled(CLUSTER_LOAD_ASSIGNMENT, "e", v)
                .with_constraints(Some(Constraints::new(env(v)).unwrap()))
        }))
        .unwrap();
    server
}

fn locator(env: &str) -> ResourceLocator {
    ResourceLocator {
        name: "e".into(),
        dynamic_parameters: [("env".to_string(), env.to_string())].into_iter().collect(),
    }
}

async fn sotw_locators_get_resources_wrapped_with_their_constraints(mode: Mode) {
    let server = server(mode).await;
    let (tx, rx) = mpsc::channel(4);
    let mut responses = AggregatedDiscoveryServiceClient::new(server.channel.clone())
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(DiscoveryRequest {
        node: node_with_metadata("variants-test", "", &[]),
        type_url: CLUSTER_LOAD_ASSIGNMENT.into(),
        resource_locators: vec![locator("test")],
        ..Default::default()
    })
    .await
    .unwrap();
    let r = tokio::time::timeout(WAIT, responses.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(!r.version_info.is_empty());
    assert_eq!(r.resources.len(), 1);
    let any = &r.resources[0];
    assert_eq!(any.type_url, RESOURCE_WRAPPER);
    let wrapped = Resource::decode(any.value.as_slice()).unwrap();
    assert!(wrapped.name.is_empty(), "resource_name replaces name");
    let name = wrapped.resource_name.unwrap();
    assert_eq!(name.name, "e");
    assert_eq!(name.dynamic_parameter_constraints, Some(env("test")));
    let inner = wrapped.resource.unwrap();
    assert_eq!(inner.type_url, CLUSTER_LOAD_ASSIGNMENT);
    assert_eq!(label(&inner.value), "test");
    drop(tx);
    server.stop().await;
}

async fn sotw_legacy_client_gets_the_plain_variant_of_its_metadata(mode: Mode) {
    let server = server(mode).await;
    let (tx, rx) = mpsc::channel(4);
    let mut responses = AggregatedDiscoveryServiceClient::new(server.channel.clone())
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(DiscoveryRequest {
        node: node_with_metadata("variants-test", "", &[("env", "prod")]),
        type_url: CLUSTER_LOAD_ASSIGNMENT.into(),
        resource_names: vec!["e".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let r = tokio::time::timeout(WAIT, responses.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(r.resources.len(), 1);
    assert_eq!(r.resources[0].type_url, CLUSTER_LOAD_ASSIGNMENT);
    assert_eq!(label(&r.resources[0].value), "prod");
    drop(tx);
    server.stop().await;
}

async fn delta_locators_get_resource_names_and_removed_resource_names(mode: Mode) {
    let server = server(mode).await;
    let (tx, rx) = mpsc::channel(4);
    let mut responses = AggregatedDiscoveryServiceClient::new(server.channel.clone())
        .delta_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(DeltaDiscoveryRequest {
        node: node_with_metadata("variants-test", "", &[]),
        type_url: CLUSTER_LOAD_ASSIGNMENT.into(),
        resource_locators_subscribe: vec![locator("test")],
        ..Default::default()
    })
    .await
    .unwrap();
    let mut next = async || {
        tokio::time::timeout(WAIT, responses.message())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
    };
    let r = next().await;
    assert_eq!(r.resources.len(), 1);
    let name = r.resources[0].resource_name.clone().unwrap();
    assert_eq!(name.dynamic_parameter_constraints, Some(env("test")));
    assert!(r.resources[0].name.is_empty());
    tx.send(DeltaDiscoveryRequest {
        type_url: CLUSTER_LOAD_ASSIGNMENT.into(),
        response_nonce: r.nonce.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    server
        .store
        .apply([Change::RemoveVariant {
            type_url: CLUSTER_LOAD_ASSIGNMENT.into(),
            name: "e".into(),
            constraints: Some(Constraints::new(env("test")).unwrap()),
        }])
        .unwrap();
    let r = next().await;
    assert!(r.resources.is_empty());
    assert!(r.removed_resources.is_empty());
    assert_eq!(r.removed_resource_names.len(), 1);
    assert_eq!(r.removed_resource_names[0].name, "e");
    assert_eq!(
        r.removed_resource_names[0].dynamic_parameter_constraints,
        Some(env("test"))
    );
    drop(tx);
    server.stop().await;
}

/// `ServerHandle::preview` (the admin API's `GET /config`): what a client with that node would
/// be served, the variant its parameters pick, without connecting one.
async fn a_preview_shows_what_a_node_would_receive(mode: Mode) {
    use envoy_types::pb::envoy::config::core::v3::Node;
    use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
    let server = server(mode).await;
    server.put(xdsd_core::types::CLUSTER, "c", "c");
    let node = |env: Option<&str>| Node {
        id: "n1".into(),
        metadata: env.map(|env| Struct {
            fields: [(
                "env".to_owned(),
                Value {
                    kind: Some(Kind::StringValue(env.into())),
                },
            )]
            .into(),
        }),
        ..Default::default()
    };
    let preview = |env: Option<&str>| server.handle.preview(&node(env)).expect("a preview");
    let of = |types: &[xdsd_core::session::SotwResponse], type_url: &str| {
        types
            .iter()
            .find(|t| &*t.type_url == type_url)
            .map(|t| t.resources.iter().cloned().collect::<Vec<_>>())
            .unwrap_or_else(|| panic!("no {type_url}"))
    };
    let prod = preview(Some("prod"));
    let e = of(&prod, CLUSTER_LOAD_ASSIGNMENT);
    assert_eq!(e.len(), 1);
    assert_eq!(&**e[0].name(), "e");
    assert!(e[0]
        .constraints()
        .is_some_and(|c| c.to_string().contains("prod")));
    let clusters = of(&prod, xdsd_core::types::CLUSTER);
    assert_eq!(&**clusters[0].name(), "c");
    let test = of(&preview(Some("test")), CLUSTER_LOAD_ASSIGNMENT);
    assert!(test[0]
        .constraints()
        .is_some_and(|c| c.to_string().contains("test")));
    // No parameters: no variant matches.
    assert!(of(&preview(None), CLUSTER_LOAD_ASSIGNMENT).is_empty());
    // A type pending whole (a relay's wildcard, asked upstream and not answered yet) holds back a client's
    // clusters, not the preview of what the store holds.
    server
        .store
        .pending_names()
        .declare(
            xdsd_core::store::PendingName::new(
                xdsd_core::types::CLUSTER,
                xdsd_core::store::WHOLE_TYPE,
            ),
            std::time::Instant::now() + std::time::Duration::from_secs(60),
        )
        .expect("room for it");
    let clusters = of(&preview(Some("prod")), xdsd_core::types::CLUSTER);
    assert_eq!(
        clusters.len(),
        1,
        "the store's clusters, pending name or not"
    );
}

// ---- Every way a client names its parameters, as the server derives them (TP2), each checked
// directly and through a relay in each grouping: a relay is transparent.

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::config::route::v3::{RouteConfiguration, VirtualHost};
use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::{
    ConstraintList, Type as ConstraintKind,
};
use envoy_types::pb::google::protobuf::{value::Kind, Any, Struct, Value};
use envoy_types::pb::xds::core::v3::ContextParams;
use xdsd_core::store::ResourceInput;
use xdsd_core::types::{CLUSTER, ROUTE_CONFIGURATION};

fn not(c: DynamicParameterConstraints) -> DynamicParameterConstraints {
    DynamicParameterConstraints {
        r#type: Some(ConstraintKind::NotConstraints(Box::new(c))),
    }
}

fn and(cs: Vec<DynamicParameterConstraints>) -> DynamicParameterConstraints {
    DynamicParameterConstraints {
        r#type: Some(ConstraintKind::AndConstraints(ConstraintList {
            constraints: cs,
        })),
    }
}

fn eq(key: &str, value: &str) -> DynamicParameterConstraints {
    use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::single_constraint::ConstraintType;
    use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::SingleConstraint;
    DynamicParameterConstraints {
        r#type: Some(ConstraintKind::Constraint(SingleConstraint {
            key: key.into(),
            constraint_type: Some(ConstraintType::Value(value.into())),
        })),
    }
}

/// A variant of RouteConfiguration `name` labelled `label` (its virtual host's name).
fn route(name: &str, label: &str, c: Option<DynamicParameterConstraints>) -> ResourceInput {
    let body = RouteConfiguration {
        name: name.into(),
        virtual_hosts: vec![VirtualHost {
            name: label.into(),
            domains: vec!["*".into()],
            ..Default::default()
        }],
        ..Default::default()
    };
    ResourceInput::new(ROUTE_CONFIGURATION, name, body.encode_to_vec().into())
        .with_constraints(c.map(|c| Constraints::new(c).unwrap()))
}

/// A variant of Cluster `name` labelled `label` (its `alt_stat_name`).
fn cluster(name: &str, label: &str, c: Option<DynamicParameterConstraints>) -> ResourceInput {
    let body = Cluster {
        name: name.into(),
        alt_stat_name: label.into(),
        ..Default::default()
    };
    ResourceInput::new(CLUSTER, name, body.encode_to_vec().into())
        .with_constraints(c.map(|c| Constraints::new(c).unwrap()))
}

/// The label of a body of [`route`] or [`cluster`], and its name.
fn read(type_url: &str, body: &[u8]) -> (String, String) {
    if type_url == ROUTE_CONFIGURATION {
        let r = RouteConfiguration::decode(body).unwrap();
        (r.name, r.virtual_hosts[0].name.clone())
    } else {
        let c = Cluster::decode(body).unwrap();
        (c.name, c.alt_stat_name)
    }
}

/// What a client saw of one resource: its name, its variant's label, and the constraints it
/// was named with (none for a plain resource).
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    name: String,
    label: String,
    constraints: Option<DynamicParameterConstraints>,
}

fn seen_any(any: &Any) -> Seen {
    if any.type_url == RESOURCE_WRAPPER {
        let wrapped = Resource::decode(any.value.as_slice()).unwrap();
        seen_resource(&wrapped)
    } else {
        let (name, label) = read(&any.type_url, &any.value);
        Seen {
            name,
            label,
            constraints: None,
        }
    }
}

fn seen_resource(r: &Resource) -> Seen {
    let inner = r.resource.as_ref().expect("a body");
    let (body_name, label) = read(&inner.type_url, &inner.value);
    let (name, constraints) = match &r.resource_name {
        // An unconstrained variant may be named with empty constraints: none.
        Some(n) => (
            n.name.clone(),
            n.dynamic_parameter_constraints
                .clone()
                .filter(|c| c.r#type.is_some()),
        ),
        None => (r.name.clone(), None),
    };
    assert_eq!(name, body_name, "a resource's name is its body's");
    Seen {
        name,
        label,
        constraints,
    }
}

fn sorted(mut seen: Vec<Seen>) -> Vec<Seen> {
    seen.sort_by(|a, b| a.name.cmp(&b.name));
    seen
}

/// The first SotW response to `request` on a stream of its own.
async fn sotw_first(server: &Server, request: DiscoveryRequest) -> Vec<Seen> {
    let (tx, rx) = mpsc::channel(4);
    let mut responses = AggregatedDiscoveryServiceClient::new(server.channel.clone())
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(request).await.unwrap();
    let r = tokio::time::timeout(WAIT, responses.message())
        .await
        .expect("answered in time")
        .unwrap()
        .expect("a response");
    sorted(r.resources.iter().map(seen_any).collect())
}

/// The first delta response to `request` on a stream of its own, and the names it removed.
async fn delta_first(server: &Server, request: DeltaDiscoveryRequest) -> (Vec<Seen>, Vec<String>) {
    let (tx, rx) = mpsc::channel(4);
    let mut responses = AggregatedDiscoveryServiceClient::new(server.channel.clone())
        .delta_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(request).await.unwrap();
    let r = tokio::time::timeout(WAIT, responses.message())
        .await
        .expect("answered in time")
        .unwrap()
        .expect("a response");
    let mut removed = r.removed_resources.clone();
    removed.extend(r.removed_resource_names.iter().map(|n| n.name.clone()));
    (
        sorted(r.resources.iter().map(seen_resource).collect()),
        removed,
    )
}

/// A node that names its parameters only by metadata, as every Envoy does: `pairs` as
/// top-level strings, plus a nested struct (which is no parameter) and a number.
fn metadata_node(id: &str, pairs: &[(&str, &str)]) -> Option<Node> {
    let string = |s: &str| Value {
        kind: Some(Kind::StringValue(s.into())),
    };
    let mut fields: std::collections::HashMap<String, Value> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), string(v)))
        .collect();
    fields.insert(
        "build".into(),
        Value {
            kind: Some(Kind::StructValue(Struct {
                fields: [("sha".to_owned(), string("abc"))].into(),
            })),
        },
    );
    fields.insert(
        "replicas".into(),
        Value {
            kind: Some(Kind::NumberValue(3.0)),
        },
    );
    Some(Node {
        id: id.into(),
        metadata: Some(Struct { fields }),
        ..Default::default()
    })
}

/// A node with dynamic parameters `pairs` for `type_url`.
fn params_node(id: &str, type_url: &str, pairs: &[(&str, &str)]) -> Option<Node> {
    Some(Node {
        id: id.into(),
        dynamic_parameters: [(
            type_url.to_owned(),
            ContextParams {
                params: pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            },
        )]
        .into(),
        ..Default::default()
    })
}

/// The four variants of TP2's "Example": `rt` over `env` and `version`.
fn rt_variants() -> [(&'static str, DynamicParameterConstraints); 4] {
    let p = || eq("env", "prod");
    let v1 = || eq("version", "v1");
    [
        ("neither", and(vec![not(p()), not(v1())])),
        ("prod", and(vec![p(), not(v1())])),
        ("v1", and(vec![not(p()), v1()])),
        ("prod+v1", and(vec![p(), v1()])),
    ]
}

/// A server with `rt`'s four variants, `r1`'s prod and test variants, and clusters of which
/// some are for one `env` only.
async fn tp2_server(mode: Mode) -> Server {
    let server = Server::start_in(mode).await;
    let mut inputs: Vec<ResourceInput> = rt_variants()
        .into_iter()
        .map(|(label, c)| route("rt", label, Some(c)))
        .collect();
    for env in ["prod", "test"] {
        inputs.push(route("r1", env, Some(eq("env", env))));
        inputs.push(cluster(&format!("only-{env}"), env, Some(eq("env", env))));
        inputs.push(cluster("svc", env, Some(eq("env", env))));
    }
    inputs.push(cluster("shared", "shared", None));
    server.store.replace_all(inputs).unwrap();
    server
}

fn plain(name: &str, label: &str) -> Seen {
    Seen {
        name: name.into(),
        label: label.into(),
        constraints: None,
    }
}

fn named(name: &str, label: &str, c: DynamicParameterConstraints) -> Seen {
    Seen {
        name: name.into(),
        label: label.into(),
        constraints: Some(c),
    }
}

/// TP2 "Migrating From Node Metadata": a client without dynamic parameters is served by the
/// top-level string fields of its metadata, over SotW and delta, as plain resources.
async fn a_metadata_only_client_gets_the_variant_of_its_metadata(mode: Mode) {
    let server = tp2_server(mode).await;
    let metadata = [("env", "prod"), ("team", "payments")];
    let got = sotw_first(
        &server,
        DiscoveryRequest {
            node: metadata_node("metadata-sotw", &metadata),
            type_url: ROUTE_CONFIGURATION.into(),
            resource_names: vec!["r1".into()],
            ..Default::default()
        },
    )
    .await;
    assert_eq!(got, vec![plain("r1", "prod")]);
    let (got, removed) = delta_first(
        &server,
        DeltaDiscoveryRequest {
            node: metadata_node("metadata-delta", &[("env", "test"), ("team", "payments")]),
            type_url: ROUTE_CONFIGURATION.into(),
            resource_names_subscribe: vec!["r1".into()],
            ..Default::default()
        },
    )
    .await;
    assert_eq!(got, vec![plain("r1", "test")]);
    assert!(removed.is_empty(), "r1 exists for env=test: {removed:?}");
    server.stop().await;
}

/// TP2's "Example": each of 18 parameter sets (env and version each set or not, given as
/// dynamic parameters or as metadata) gets the one variant of `rt` its parameters select.
async fn each_parameter_set_gets_its_variant_of_the_four_variant_example(mode: Mode) {
    let server = tp2_server(mode).await;
    let variants = rt_variants();
    let mut checked = 0;
    for env in [None, Some("prod"), Some("test")] {
        for version in [None, Some("v1"), Some("v2")] {
            let pairs: Vec<(&str, &str)> =
                [env.map(|e| ("env", e)), version.map(|v| ("version", v))]
                    .into_iter()
                    .flatten()
                    .collect();
            let label = match (env == Some("prod"), version == Some("v1")) {
                (false, false) => "neither",
                (true, false) => "prod",
                (false, true) => "v1",
                (true, true) => "prod+v1",
            };
            let constraints = variants
                .iter()
                .find(|(l, _)| *l == label)
                .map(|(_, c)| c.clone())
                .unwrap();
            for by_metadata in [false, true] {
                let id = format!("rt-{env:?}-{version:?}-{by_metadata}");
                let node = if by_metadata {
                    metadata_node(&id, &pairs)
                } else {
                    params_node(&id, ROUTE_CONFIGURATION, &pairs)
                };
                let got = sotw_first(
                    &server,
                    DiscoveryRequest {
                        node,
                        type_url: ROUTE_CONFIGURATION.into(),
                        resource_names: vec!["rt".into()],
                        ..Default::default()
                    },
                )
                .await;
                // A client with dynamic parameters is sent the constraints (TP2); a legacy
                // client, plain resources.
                let want = if by_metadata {
                    plain("rt", label)
                } else {
                    named("rt", label, constraints.clone())
                };
                assert_eq!(got, vec![want], "{pairs:?}, by metadata: {by_metadata}");
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 18);
    server.stop().await;
}

/// A wildcard follows its client's parameters name by name: the names for its parameters,
/// each one's variant for them, the unconstrained ones.
async fn a_wildcard_gets_the_variant_of_each_name_for_its_parameters(mode: Mode) {
    let server = tp2_server(mode).await;
    let node = metadata_node("wildcard-prod", &[("env", "prod")]).expect("a node");
    assert_eq!(sotw_clusters(&server, node).await, prod_clusters());
    let (got, removed) = delta_first(
        &server,
        DeltaDiscoveryRequest {
            node: params_node("wildcard-test", CLUSTER, &[("env", "test")]),
            type_url: CLUSTER.into(),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(
        got,
        vec![
            named("only-test", "test", eq("env", "test")),
            Seen {
                name: "shared".into(),
                label: "shared".into(),
                constraints: None
            },
            named("svc", "test", eq("env", "test")),
        ]
    );
    assert!(removed.is_empty());
    let got = sotw_first(
        &server,
        DiscoveryRequest {
            node: metadata_node("wildcard-none", &[]),
            type_url: CLUSTER.into(),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(got, vec![plain("shared", "shared")]);
    server.stop().await;
}

/// What a SotW CDS wildcard of `node` is first sent.
async fn sotw_clusters(server: &Server, node: Node) -> Vec<Seen> {
    sotw_first(
        server,
        DiscoveryRequest {
            node: Some(node),
            type_url: CLUSTER.into(),
            ..Default::default()
        },
    )
    .await
}

/// The clusters of [`tp2_server`] for `env=prod`.
fn prod_clusters() -> Vec<Seen> {
    vec![
        plain("only-prod", "prod"),
        plain("shared", "shared"),
        plain("svc", "prod"),
    ]
}

/// Envoys of several node clusters (every Envoy presents one) with the same `env` each get
/// their wildcard's variants, through a relay as directly; a relay told the keys the upstream's
/// constraints read fetches them on one upstream stream, not one per node cluster (#56,
/// declared keys).
async fn node_clusters_of_one_env_get_their_wildcard_and_share_a_stream_by_the_declared_keys(
    mode: Mode,
) {
    let server = tp2_server(mode).await;
    let before = server.upstream_streams();
    for cluster in ["web", "api", "db"] {
        let mut node =
            metadata_node(&format!("wildcard-{cluster}"), &[("env", "prod")]).expect("a node");
        node.cluster = cluster.into();
        assert_eq!(
            sotw_clusters(&server, node).await,
            prod_clusters(),
            "{cluster}"
        );
    }
    if let (Mode::RelayDeclaredKeys, Some(before), Some(after)) =
        (mode, before, server.upstream_streams())
    {
        assert!(
            after <= before + 1,
            "one upstream stream for env=prod, not one per node cluster: {before} then {after}"
        );
    }
    server.stop().await;
}

/// A resource locator gets the variant its parameters select, with that variant's
/// constraints (TP2: a caching proxy MUST send them).
async fn a_locator_gets_its_variant_with_its_constraints(mode: Mode) {
    let server = tp2_server(mode).await;
    let variants = rt_variants();
    let got = sotw_first(
        &server,
        DiscoveryRequest {
            node: metadata_node("locator-canary", &[("env", "prod")]),
            type_url: ROUTE_CONFIGURATION.into(),
            resource_locators: vec![ResourceLocator {
                name: "rt".into(),
                dynamic_parameters: [("env".to_owned(), "canary".to_owned())].into(),
            }],
            ..Default::default()
        },
    )
    .await;
    assert_eq!(got, vec![named("rt", "neither", variants[0].1.clone())]);
    let (got, _) = delta_first(
        &server,
        DeltaDiscoveryRequest {
            node: metadata_node("locator-prod-v1", &[]),
            type_url: ROUTE_CONFIGURATION.into(),
            resource_locators_subscribe: vec![ResourceLocator {
                name: "rt".into(),
                dynamic_parameters: [
                    ("env".to_owned(), "prod".to_owned()),
                    ("version".to_owned(), "v1".to_owned()),
                ]
                .into(),
            }],
            ..Default::default()
        },
    )
    .await;
    assert_eq!(got, vec![named("rt", "prod+v1", variants[3].1.clone())]);
    server.stop().await;
}

/// A SotW ADS stream of a metadata-only client asking RouteConfiguration `r1`: the stream and
/// the label of the first `r1` it is sent.
async fn r1_stream(
    server: &Server,
    id: &str,
    metadata: &[(&str, &str)],
) -> (
    mpsc::Sender<DiscoveryRequest>,
    tonic::Streaming<envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse>,
    String,
) {
    let (tx, rx) = mpsc::channel(4);
    let mut responses = AggregatedDiscoveryServiceClient::new(server.channel.clone())
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(DiscoveryRequest {
        node: metadata_node(id, metadata),
        type_url: ROUTE_CONFIGURATION.into(),
        resource_names: vec!["r1".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let label = next_r1(&mut responses, &tx).await;
    (tx, responses, label)
}

/// The label of `r1` in the stream's next response, ACKed.
async fn next_r1(
    responses: &mut tonic::Streaming<
        envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse,
    >,
    tx: &mpsc::Sender<DiscoveryRequest>,
) -> String {
    let r = tokio::time::timeout(WAIT, responses.message())
        .await
        .expect("answered in time")
        .unwrap()
        .expect("a response");
    tx.send(DiscoveryRequest {
        type_url: r.type_url.clone(),
        version_info: r.version_info.clone(),
        response_nonce: r.nonce.clone(),
        resource_names: vec!["r1".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let seen: Vec<Seen> = r.resources.iter().map(seen_any).collect();
    assert_eq!(seen.len(), 1, "r1 only: {seen:?}");
    seen[0].label.clone()
}

/// Clients whose metadata carries a per-pod field (every Envoy's pod name) get the variant of
/// their parameters, through a relay as directly; the relay, once it knows the keys `r1`'s
/// variants constrain (`env`), fetches for them by those keys only, so more pods open no more
/// upstream streams (#56, narrowing). A key the upstream starts constraining later (`zone`) is
/// seen, and each pod gets its new variant.
async fn per_pod_metadata_gets_its_variant_and_a_key_seen_later_is_followed(mode: Mode) {
    let server = tp2_server(mode).await;
    let pod = |env: &'static str, pod: &'static str, zone: &'static str| {
        [("env", env), ("pod", pod), ("zone", zone)]
    };
    let first = r1_stream(&server, "p1", &pod("prod", "p1", "a")).await;
    assert_eq!(first.2, "prod");
    let after_first = server.upstream_streams();
    let mut pods = Vec::new();
    for (id, env, zone) in [
        ("p2", "prod", "a"),
        ("p3", "prod", "b"),
        ("p4", "test", "a"),
    ] {
        let stream = r1_stream(&server, id, &pod(env, id, zone)).await;
        assert_eq!(stream.2, env, "{id}");
        pods.push((id, env, zone, stream));
    }
    let after_envs = server.upstream_streams();
    for (id, env, zone) in [
        ("p5", "prod", "b"),
        ("p6", "test", "b"),
        ("p7", "prod", "a"),
    ] {
        let stream = r1_stream(&server, id, &pod(env, id, zone)).await;
        assert_eq!(stream.2, env, "{id}");
        pods.push((id, env, zone, stream));
    }
    // (Grouped by node, each pod is a group of its own: nothing to count.)
    if let (Mode::Relay, Some(first), Some(envs), Some(now)) =
        (mode, after_first, after_envs, server.upstream_streams())
    {
        assert!(
            envs <= first + 2,
            "at most one upstream stream more per env, not one per pod: {first} then {envs}"
        );
        assert_eq!(
            now, envs,
            "more pods of known envs: no more upstream streams"
        );
    }
    // r1's variants now constrain zone too (every variant the same keys).
    let zone_a = || eq("zone", "a");
    let mut inputs = vec![
        route("r1", "prod-a", Some(and(vec![eq("env", "prod"), zone_a()]))),
        route(
            "r1",
            "prod-other",
            Some(and(vec![eq("env", "prod"), not(zone_a())])),
        ),
        route("r1", "test-a", Some(and(vec![eq("env", "test"), zone_a()]))),
        route(
            "r1",
            "test-other",
            Some(and(vec![eq("env", "test"), not(zone_a())])),
        ),
    ];
    inputs.extend(
        rt_variants()
            .into_iter()
            .map(|(l, c)| route("rt", l, Some(c))),
    );
    server.store.replace_all(inputs).unwrap();
    for (id, env, zone, (tx, mut responses, _)) in pods {
        let want = format!("{env}-{}", if zone == "a" { "a" } else { "other" });
        let mut got = Vec::new();
        loop {
            let label = next_r1(&mut responses, &tx).await;
            got.push(label.clone());
            if label == want {
                break;
            }
            assert!(
                label == env,
                "{id} is sent its old variant or its new one, never another: {got:?}"
            );
        }
    }
    server.stop().await;
}

protocol_tests! {
    through_a_relay: [
        sotw_locators_get_resources_wrapped_with_their_constraints,
        delta_locators_get_resource_names_and_removed_resource_names,
    ],
    // What the server the client reaches holds, not a rule of the protocol.
    direct_only: [a_preview_shows_what_a_node_would_receive],
    relay_by_node: [],
    // A client's variant is chosen by its parameters as the server derives them, whatever
    // grouping the relay uses.
    through_both_relays: [
        sotw_legacy_client_gets_the_plain_variant_of_its_metadata,
        a_metadata_only_client_gets_the_variant_of_its_metadata,
        each_parameter_set_gets_its_variant_of_the_four_variant_example,
        a_wildcard_gets_the_variant_of_each_name_for_its_parameters,
        a_locator_gets_its_variant_with_its_constraints,
        per_pod_metadata_gets_its_variant_and_a_key_seen_later_is_followed,
        node_clusters_of_one_env_get_their_wildcard_and_share_a_stream_by_the_declared_keys,
    ],
    // The same through a relay told the keys the upstream reads (`--upstream-keys`): wildcards
    // and names not received yet fetched by those keys only; a key the upstream constrains
    // later (`zone`, undeclared) followed by name.
    relay_declared_keys: [
        sotw_locators_get_resources_wrapped_with_their_constraints,
        delta_locators_get_resource_names_and_removed_resource_names,
        sotw_legacy_client_gets_the_plain_variant_of_its_metadata,
        a_metadata_only_client_gets_the_variant_of_its_metadata,
        each_parameter_set_gets_its_variant_of_the_four_variant_example,
        a_wildcard_gets_the_variant_of_each_name_for_its_parameters,
        a_locator_gets_its_variant_with_its_constraints,
        per_pod_metadata_gets_its_variant_and_a_key_seen_later_is_followed,
        node_clusters_of_one_env_get_their_wildcard_and_share_a_stream_by_the_declared_keys,
    ],
}
