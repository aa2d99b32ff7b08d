//! `xdsd get` against a real xdsd (the binary): SotW and delta, the wildcard and names, TP2
//! variants, a missing name, nothing within --timeout, and `--out DIR` round-tripped through
//! `xdsd check` and `xdsd serve` with byte-identical resources.

use std::collections::BTreeMap;
use std::process::Output;

use envoy_types::pb::envoy::config::core::v3::Node;
use xdsd_client::{types, Config, Event, Options, XdsClient};

use crate::support::{ResourceDir, Xdsd, DEADLINE};

pub const CLUSTERS: &str = r#"
"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
name: alpha
connect_timeout: 1s
---
"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
name: beta
connect_timeout: 2s
lb_policy: RING_HASH
metadata:
  filter_metadata:
    team: { owner: "on", zeta: 1, alpha: [1, "two"] }
"#;

pub const VARIANTS: &str = r#"
"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
"@match": { env: prod }
name: gamma
connect_timeout: 3s
---
"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
"@constraints": { constraint: { key: env, value: staging } }
name: gamma
connect_timeout: 4s
"#;

pub async fn xdsd(args: &[&str]) -> Output {
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_xdsd"))
        .args(args)
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(DEADLINE, run)
        .await
        .expect("xdsd returns in time")
        .expect("xdsd runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub fn serving(files: &[(&str, &str)]) -> ResourceDir {
    let dir = ResourceDir::new();
    for (name, contents) in files {
        dir.write(name, contents);
    }
    dir
}

async fn get(server: &Xdsd, extra: &[&str]) -> Output {
    let addr = format!("127.0.0.1:{}", server.port);
    let mut args = vec!["get", "--server", &addr];
    args.extend_from_slice(extra);
    xdsd(&args).await
}

/// Every `name:` at the start of a document's line, in order.
fn names(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("name: "))
        .map(|n| n.trim_matches('"').to_owned())
        .collect()
}

#[tokio::test]
async fn get_prints_the_wildcard_as_resource_documents_over_sotw_and_delta() {
    let dir = serving(&[("clusters.yaml", CLUSTERS)]);
    let server = Xdsd::start(&dir.path()).await;
    for flavor in [&[][..], &["--delta"][..], &["--per-type"][..]] {
        let mut args = flavor.to_vec();
        args.push("clusters");
        let out = get(&server, &args).await;
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{flavor:?}: {}", text(&out.stderr));
        assert_eq!(
            names(&stdout),
            vec!["alpha", "beta"],
            "{flavor:?}: {stdout}"
        );
        assert!(
            stdout.contains("\"@type\": \"type.googleapis.com/envoy.config.cluster.v3.Cluster\"")
        );
        assert_eq!(
            stdout.matches("\n---\n").count(),
            1,
            "two YAML documents: {stdout}"
        );
    }
    let out = get(&server, &["--output", "json", "--delta", "cluster", "beta"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON list");
    assert_eq!(list.as_array().map(Vec::len), Some(1));
    assert_eq!(list[0]["name"], "beta");
    assert_eq!(list[0]["lb_policy"], "RING_HASH");
}

#[tokio::test]
async fn get_a_missing_name_exits_1_naming_it() {
    let dir = serving(&[("clusters.yaml", CLUSTERS)]);
    let server = Xdsd::start(&dir.path()).await;
    for flavor in [&[][..], &["--delta"][..]] {
        let mut args = flavor.to_vec();
        args.extend(["--timeout", "3s", "cluster", "alpha", "nope"]);
        let out = get(&server, &args).await;
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{flavor:?}: {stderr}");
        assert!(
            stderr.contains("cluster \"nope\" does not exist"),
            "{stderr}"
        );
        assert_eq!(
            names(&text(&out.stdout)),
            vec!["alpha"],
            "what exists is printed"
        );
    }
}

#[tokio::test]
async fn get_at_a_refused_port_fails_at_once_saying_the_cause_once() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let addr = format!("127.0.0.1:{port}");
    // A timeout far longer than the test's deadline: waiting it out would fail the test.
    let out = xdsd(&["get", "--server", &addr, "--timeout", "600s", "cluster"]).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot connect to {addr}")),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("tcp connect error").count(),
        1,
        "the cause said once: {stderr}"
    );
    assert!(stderr.contains("Connection refused"), "{stderr}");
}

#[tokio::test]
async fn get_with_nothing_within_the_timeout_exits_1_saying_why() {
    // A server that accepts the connection and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let addr = listener.local_addr().expect("its address").to_string();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            open.push(socket);
        }
    });
    let out = xdsd(&["get", "--server", &addr, "--timeout", "1s", "cluster"]).await;
    held.abort();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("nothing received from"), "{stderr}");
}

#[tokio::test]
async fn get_picks_the_variant_of_its_parameters_and_prints_its_constraints() {
    let dir = serving(&[("variants.yaml", VARIANTS)]);
    let server = Xdsd::start(&dir.path()).await;
    for how in [
        &["--param", "env=staging"][..],
        &["--param", "env=staging", "--delta"][..],
        &["--node-metadata", "env=staging"][..],
    ] {
        let mut args = how.to_vec();
        args.extend(["cluster", "gamma"]);
        let out = get(&server, &args).await;
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{how:?}: {}", text(&out.stderr));
        assert!(
            stdout.contains("connect_timeout: \"4s\""),
            "{how:?}: {stdout}"
        );
        // A client with dynamic parameters speaks TP2: the variant comes with its constraints.
        // One chosen by its metadata alone is sent as a plain resource.
        if how.contains(&"--param") {
            assert!(stdout.contains("\"@constraints\":"), "{how:?}: {stdout}");
            assert!(stdout.contains("value: \"staging\""), "{how:?}: {stdout}");
        }
    }
}

/// Every resource of `type_url` an xdsd serves to a wildcard subscription with `env` set, by
/// name and constraints: its encoded body.
async fn served(port: u16, env: &str) -> BTreeMap<(String, Vec<u8>), Vec<u8>> {
    let mut node = Node {
        id: "round-trip".into(),
        ..Default::default()
    };
    node.dynamic_parameters.insert(
        types::CLUSTER.into(),
        envoy_types::pb::xds::core::v3::ContextParams {
            params: [("env".to_string(), env.to_string())].into(),
        },
    );
    let (client, mut events) = XdsClient::start(
        Options::new(format!("127.0.0.1:{port}")),
        Config::new(node),
        None,
    )
    .expect("client");
    client.subscribe(types::CLUSTER, vec!["*".into()]);
    let update = tokio::time::timeout(DEADLINE, async {
        loop {
            match events.next().await {
                Some(Event::Update(u)) => return u,
                Some(_) => {}
                None => panic!("the client stopped"),
            }
        }
    })
    .await
    .expect("resources in time");
    update
        .added
        .into_iter()
        .map(|r| {
            let constraints = r
                .constraints
                .as_ref()
                .map(prost::Message::encode_to_vec)
                .unwrap_or_default();
            ((r.name, constraints), r.body.value)
        })
        .collect()
}

#[tokio::test]
async fn get_out_writes_a_directory_that_checks_and_serves_the_same_resources() {
    let dir = serving(&[("clusters.yaml", CLUSTERS), ("variants.yaml", VARIANTS)]);
    let first = Xdsd::start(&dir.path()).await;
    let copy = tempfile::tempdir().expect("a directory");
    let out_dir = copy.path().join("out");
    let out_arg = out_dir.to_string_lossy().into_owned();
    // Each variant is fetched with its parameters, into the same directory.
    for env in ["prod", "staging"] {
        let param = format!("env={env}");
        let out = get(&first, &["--param", &param, "--out", &out_arg, "cluster"]).await;
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let check = xdsd(&["check", "--resources", &out_arg]).await;
    assert!(
        check.status.success(),
        "xdsd check: {}{}",
        text(&check.stdout),
        text(&check.stderr)
    );
    let second = Xdsd::start(&out_dir).await;
    for env in ["prod", "staging"] {
        let a = served(first.port, env).await;
        let b = served(second.port, env).await;
        assert_eq!(a.len(), 3, "alpha, beta and a gamma: {:?}", a.keys());
        assert_eq!(a, b, "byte-identical resources for env={env}");
    }
}

/// With no TYPE, `get --out DIR` takes the listener and cluster wildcards and what they
/// reference (the route, the endpoints), so that `xdsd check` passes on DIR at once; `all` is
/// the same.
#[tokio::test]
async fn get_out_with_no_type_writes_what_the_listeners_and_clusters_reference() {
    let server = Xdsd::start(&crate::support::repo_root().join("examples/basic/resources")).await;
    for how in [&[][..], &["all"][..], &["--delta"][..]] {
        let copy = tempfile::tempdir().expect("a directory");
        let out_dir = copy.path().join("out");
        let out_arg = out_dir.to_string_lossy().into_owned();
        let mut args = vec!["--out", out_arg.as_str()];
        args.extend_from_slice(how);
        let out = get(&server, &args).await;
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{how:?}: {stderr}");
        assert!(
            stderr.contains("wrote 4 resource files"),
            "{how:?}: {stderr}"
        );
        let mut files: Vec<String> = std::fs::read_dir(&out_dir)
            .expect("the directory")
            .map(|e| {
                e.expect("an entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        files.sort();
        assert_eq!(
            files,
            [
                "cluster-backend.yaml",
                "endpoints-backend.yaml",
                "listener-listener_0.yaml",
                "route-local_route.yaml"
            ],
            "{how:?}"
        );
        let check = xdsd(&["check", "--resources", &out_arg]).await;
        assert!(
            check.status.success(),
            "{how:?}: xdsd check: {}{}",
            text(&check.stdout),
            text(&check.stderr)
        );
    }
    // A NAME needs its TYPE.
    let out = get(&server, &["all", "backend"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("needs a TYPE"),
        "{}",
        text(&out.stderr)
    );
    // watch follows one type.
    let addr = format!("127.0.0.1:{}", server.port);
    let out = xdsd(&["watch", "--server", &addr]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

/// A type the server has none of: an empty JSON list (`[]`), and a word on stderr; a list's
/// elements are indented.
#[tokio::test]
async fn get_of_a_type_with_none_says_so_and_json_lists_are_indented() {
    let dir = serving(&[("clusters.yaml", CLUSTERS)]);
    let server = Xdsd::start(&dir.path()).await;
    for format in ["yaml", "json"] {
        let out = get(&server, &["--output", format, "secret"]).await;
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{format}: {stderr}");
        assert!(
            stderr.contains("sent no secret resource"),
            "{format}: {stderr}"
        );
        let expected = if format == "json" { "[]\n" } else { "" };
        assert_eq!(text(&out.stdout), expected, "{format}");
    }
    let out = get(&server, &["--output", "json", "cluster"]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.first(), Some(&"["), "{stdout}");
    assert_eq!(lines.last(), Some(&"]"), "{stdout}");
    assert!(
        lines[1..lines.len() - 1]
            .iter()
            .all(|l| l.starts_with("  ") && !l.trim().is_empty()),
        "each element indented, no blank line: {stdout}"
    );
    let list: serde_json::Value = serde_json::from_str(&stdout).expect("a JSON list");
    assert_eq!(list.as_array().map(Vec::len), Some(2), "{stdout}");
}

#[tokio::test]
async fn get_against_rust_control_plane_over_sotw() {
    use prost::Message as _;
    use xdsd_testsupport::peer::{Peer, PEER_NODE};
    let Some(mut peer) = Peer::start().await else {
        return;
    };
    for (name, timeout) in [("alpha", "1s"), ("beta", "2s")] {
        let cluster = envoy_types::pb::envoy::config::cluster::v3::Cluster {
            name: name.into(),
            connect_timeout: Some(envoy_types::pb::google::protobuf::Duration {
                seconds: timeout.trim_end_matches('s').parse().expect("seconds"),
                nanos: 0,
            }),
            ..Default::default()
        };
        peer.set(types::CLUSTER, name, &cluster.encode_to_vec())
            .await;
    }
    let out = xdsd(&[
        "get", "--server", &peer.addr, "--node", PEER_NODE, "cluster",
    ])
    .await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(names(&stdout), vec!["alpha", "beta"], "{stdout}");
    assert!(stdout.contains("connect_timeout: \"2s\""), "{stdout}");
    let out = xdsd(&[
        "get",
        "--server",
        &peer.addr,
        "--node",
        PEER_NODE,
        "--timeout",
        "2s",
        "cluster",
        "nope",
    ])
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("cluster \"nope\" does not exist"));

    // With no TYPE, the endpoints an EDS cluster names are fetched too, from another server: the
    // directory passes `check`.
    use envoy_types::pb::envoy::config::cluster::v3::cluster::{
        ClusterDiscoveryType, DiscoveryType, EdsClusterConfig,
    };
    use envoy_types::pb::envoy::config::core::v3::{
        config_source::ConfigSourceSpecifier, AggregatedConfigSource, ConfigSource,
    };
    let eds = envoy_types::pb::envoy::config::cluster::v3::Cluster {
        name: "gamma".into(),
        connect_timeout: Some(envoy_types::pb::google::protobuf::Duration {
            seconds: 1,
            nanos: 0,
        }),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32)),
        eds_cluster_config: Some(EdsClusterConfig {
            eds_config: Some(ConfigSource {
                config_source_specifier: Some(ConfigSourceSpecifier::Ads(
                    AggregatedConfigSource {},
                )),
                ..Default::default()
            }),
            service_name: String::new(),
        }),
        ..Default::default()
    };
    peer.set(types::CLUSTER, "gamma", &eds.encode_to_vec())
        .await;
    let endpoints = envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment {
        cluster_name: "gamma".into(),
        ..Default::default()
    };
    peer.set(
        types::CLUSTER_LOAD_ASSIGNMENT,
        "gamma",
        &endpoints.encode_to_vec(),
    )
    .await;
    let copy = tempfile::tempdir().expect("a directory");
    let out_arg = copy.path().join("out").to_string_lossy().into_owned();
    let out = xdsd(&[
        "get",
        "--server",
        &peer.addr,
        "--node",
        PEER_NODE,
        "--timeout",
        "3s",
        "--out",
        &out_arg,
    ])
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        copy.path().join("out/endpoints-gamma.yaml").is_file(),
        "{}",
        text(&out.stderr)
    );
    let check = xdsd(&["check", "--resources", &out_arg]).await;
    assert!(
        check.status.success(),
        "xdsd check: {}{}",
        text(&check.stdout),
        text(&check.stderr)
    );
}

/// An xdsd over mutual TLS serving CLUSTERS, and the TLS arguments of `get` as the client
/// certificate of node `edge-1` (the PKI and the directory live as long as the server needs).
struct MutualTls {
    server: Xdsd,
    tls: Vec<String>,
    _pki: xdsd_testsupport::pki::Pki,
    _dir: ResourceDir,
}

async fn mutual_tls() -> MutualTls {
    use xdsd_testsupport::pki::{Id, Pki};
    let pki = Pki::new();
    let server_pair = pki.server("server", 1);
    let client_pair = pki.client("edge-1", Id::Uri("spiffe://xdsd.test/ns/edge/sa/edge-1"));
    let dir = serving(&[("clusters.yaml", CLUSTERS)]);
    let path = |p: &std::path::Path| p.to_str().expect("a UTF-8 path").to_owned();
    let (cert, key, ca) = (
        path(&server_pair.cert),
        path(&server_pair.key),
        path(&pki.ca),
    );
    let server = Xdsd::start_with_args(
        &dir.path(),
        &["--tls-cert", &cert, "--tls-key", &key, "--client-ca", &ca],
    )
    .await;
    let tls = vec![
        "--tls-ca".to_owned(),
        ca,
        "--tls-cert".to_owned(),
        path(&client_pair.cert),
        "--tls-key".to_owned(),
        path(&client_pair.key),
    ];
    MutualTls {
        server,
        tls,
        _pki: pki,
        _dir: dir,
    }
}

#[tokio::test]
async fn get_speaks_mutual_tls_as_the_node_its_certificate_names() {
    let m = mutual_tls().await;
    let mut args: Vec<&str> = m.tls.iter().map(String::as_str).collect();
    args.extend(["--node", "edge-1", "cluster", "alpha"]);
    let out = get(&m.server, &args).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(names(&text(&out.stdout)), vec!["alpha"]);
    // A node the certificate may not claim is refused, and get says why.
    let mut args: Vec<&str> = m.tls.iter().map(String::as_str).collect();
    args.extend(["--node", "someone-else", "--timeout", "3s", "cluster"]);
    let out = get(&m.server, &args).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("PermissionDenied"), "{stderr}");
}

#[tokio::test]
async fn get_stops_at_once_on_a_status_that_asking_again_cannot_change() {
    let m = mutual_tls().await;
    // A node the certificate may not claim: PermissionDenied on every attempt. With a timeout
    // longer than the test's deadline, only stopping at the first refusal passes.
    let mut args: Vec<&str> = m.tls.iter().map(String::as_str).collect();
    args.extend(["--node", "someone-else", "--timeout", "60m", "cluster"]);
    let started = std::time::Instant::now();
    let out = get(&m.server, &args).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("refused the stream with PermissionDenied"),
        "{stderr}"
    );
    assert!(
        started.elapsed() < DEADLINE / 2,
        "stopped after {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn get_with_several_servers_goes_on_to_the_next_when_one_cannot_be_reached() {
    let dir = serving(&[("clusters.yaml", CLUSTERS)]);
    let server = Xdsd::start(&dir.path()).await;
    // A port nothing listens on, first.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let servers = format!("127.0.0.1:{port},127.0.0.1:{}", server.port);
    let out = xdsd(&["get", "--server", &servers, "--timeout", "10s", "clusters"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(names(&text(&out.stdout)), vec!["alpha", "beta"]);
}

pub const LB: &str = "type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint";
pub const LB_C1: &str = "xdstp://xdsd.test/envoy.config.endpoint.v3.LbEndpoint/c1";

pub fn lb_endpoint(id: &str, port: u16) -> String {
    format!(
        "\"@type\": {LB}\n\"@name\": {LB_C1}/{id}\n\
         endpoint: {{ address: {{ socket_address: {{ address: 10.0.0.1, port_value: {port} }} }} }}\n"
    )
}

/// The cluster of authority a.test that [`two_authorities`]'s servers both hold.
pub const A_CLUSTER: &str = "xdstp://a.test/envoy.config.cluster.v3.Cluster/c1";

/// An `LbEndpoint` member of authority b.test's collection `c1`.
pub fn b_endpoint(id: &str, port: u16) -> String {
    lb_endpoint(id, port).replace("xdsd.test", "b.test")
}

/// Two xdsd servers, started and loaded, each the control plane of one authority and each with
/// a decoy of the other's resources: a.test's cluster [`A_CLUSTER`] and a plain cluster `plain`
/// (connect_timeout 1 s in a's, 9 s in b's), b.test's endpoints `e1` (port 8001 in b's, 9999 in
/// a's) and `e2` (8002, b's only). The resource directories are kept with them.
pub async fn two_authorities() -> ([ResourceDir; 2], Xdsd, Xdsd) {
    let cluster = |name: &str, timeout: &str| {
        format!(
            "\"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\nname: {name}\nconnect_timeout: {timeout}\n"
        )
    };
    let dir_a = serving(&[
        ("c1.yaml", &cluster(A_CLUSTER, "1s")),
        ("plain.yaml", &cluster("plain", "1s")),
        ("e1.yaml", &b_endpoint("e1", 9999)),
    ]);
    let dir_b = serving(&[
        ("c1.yaml", &cluster(A_CLUSTER, "9s")),
        ("plain.yaml", &cluster("plain", "9s")),
        ("e1.yaml", &b_endpoint("e1", 8001)),
        ("e2.yaml", &b_endpoint("e2", 8002)),
    ]);
    let a = Xdsd::start(&dir_a.path()).await;
    let b = Xdsd::start(&dir_b.path()).await;
    a.expect_loaded_since(0).await;
    b.expect_loaded_since(0).await;
    ([dir_a, dir_b], a, b)
}

/// Every `"@name":` at the start of a document's line, in order.
fn at_names(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("\"@name\": "))
        .map(|n| n.trim_matches('"').to_owned())
        .collect()
}

const IN_C: &str = "xdstp://xdsd.test/envoy.config.cluster.v3.Cluster/in";

fn xdstp_cluster(name: &str) -> String {
    format!(
        "\"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\nname: {name}\nconnect_timeout: 1s\n"
    )
}

#[tokio::test]
async fn get_a_glob_collection_prints_its_members_each_named() {
    // Members directly under c1; one below it, one in another collection, one with other
    // context parameters: not members.
    let dir = serving(&[
        ("e1.yaml", &lb_endpoint("e1", 8001)),
        ("e2.yaml", &lb_endpoint("e2", 8002)),
        ("e3.yaml", &lb_endpoint("sub/e3", 8003)),
        ("e4.yaml", &lb_endpoint("e4?zone=b", 8004)),
        (
            "e5.yaml",
            &lb_endpoint("e5", 8005).replace("/c1/e5", "/c2/e5"),
        ),
        ("c1.yaml", &xdstp_cluster(&format!("{IN_C}/c1"))),
        ("c2.yaml", &xdstp_cluster(&format!("{IN_C}/sub/c2"))),
    ]);
    let server = Xdsd::start(&dir.path()).await;
    let glob = format!("{LB_C1}/*");
    // LbEndpoint has no name field: delta names it, and so does SotW, wrapping it in a
    // `Resource` for a client that takes wrappers (xdsd get does; docs/xdstp.md).
    for flavor in [&["--delta"][..], &[][..]] {
        let mut args = flavor.to_vec();
        args.extend([LB, glob.as_str()]);
        let out = get(&server, &args).await;
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{flavor:?}: {}", text(&out.stderr));
        assert_eq!(
            at_names(&stdout),
            [format!("{LB_C1}/e1"), format!("{LB_C1}/e2")],
            "{flavor:?}: {stdout}"
        );
        assert!(stdout.contains("port_value: 8001"), "{stdout}");
    }
    // With context parameters (spelled in any order), and a name of the collection by name.
    let out = get(&server, &["--delta", LB, &format!("{LB_C1}/*?zone=b")]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(at_names(&text(&out.stdout)), [format!("{LB_C1}/e4?zone=b")]);
    // An empty collection: nothing printed, said so, exit 0.
    let empty = format!("{LB_C1}/none/*");
    for flavor in [&["--delta"][..], &[][..]] {
        let mut args = flavor.to_vec();
        args.extend(["--timeout", "3s", LB, empty.as_str()]);
        let out = get(&server, &args).await;
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{flavor:?}: {stderr}");
        assert!(at_names(&text(&out.stdout)).is_empty());
        assert!(stderr.contains("has no members"), "{flavor:?}: {stderr}");
    }
    // SotW: a glob of clusters, its members named by their own name field.
    let glob = format!("{IN_C}/*");
    for flavor in [&[][..], &["--per-type"][..]] {
        let mut args = flavor.to_vec();
        args.extend(["cluster", glob.as_str()]);
        let out = get(&server, &args).await;
        assert!(out.status.success(), "{flavor:?}: {}", text(&out.stderr));
        assert_eq!(
            names(&text(&out.stdout)),
            [format!("{IN_C}/c1")],
            "{flavor:?}"
        );
    }
    // A malformed xdstp name is refused before anything is asked.
    let out = get(&server, &[LB, &format!("{LB_C1}/e1?k=1&k=2")]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("malformed xdstp name"),
        "{}",
        text(&out.stderr)
    );
}

/// xRFC TP2 "Client Configuration": one parameter set per authority. Two xdsd servers serve
/// variants by `env`; `--param env=prod` is every other name's set, `--param-for` gives b.test
/// (served by b) `env=test` and a.test (served by the default server, on a connection of its
/// own) `env=canary`: each name is its authority's variant, a glob's members too.
#[tokio::test]
async fn get_param_for_asks_each_authoritys_names_with_its_own_parameters() {
    let ([_dir_a, _dir_b], a, b) = authorities_with_variants().await;
    let b_addr = format!("b.test=127.0.0.1:{}", b.port);
    let per_authority = [
        "--server-for",
        &b_addr,
        "--param",
        "env=prod",
        "--param-for",
        "b.test:env=test",
        "--param-for",
        "a.test:env=canary",
    ];
    let a_addr = format!("127.0.0.1:{}", a.port);
    expect_each_authoritys_variant(&a_addr, &per_authority).await;
}

/// Two xdsd servers, each the control plane of one authority, serving variants by `env`: a's
/// `A_CLUSTER` (`connect_timeout` 1s for `env=prod`, 3s for `env=canary`) and plain name `plain`
/// (the same), b's glob collection `c1/*` (member `e1` on port 8001 for `env=test`, 9001 for
/// `env=prod`).
pub async fn authorities_with_variants() -> ([ResourceDir; 2], Xdsd, Xdsd) {
    let constrained = |env: &str, doc: String| {
        format!("\"@constraints\": {{ constraint: {{ key: env, value: {env} }} }}\n{doc}")
    };
    let cluster = |name: &str, timeout: &str| {
        format!(
            "\"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\nname: {name}\nconnect_timeout: {timeout}\n"
        )
    };
    let dir_a = serving(&[
        (
            "c1-prod.yaml",
            &constrained("prod", cluster(A_CLUSTER, "1s")),
        ),
        (
            "c1-canary.yaml",
            &constrained("canary", cluster(A_CLUSTER, "3s")),
        ),
        (
            "plain-prod.yaml",
            &constrained("prod", cluster("plain", "1s")),
        ),
        (
            "plain-canary.yaml",
            &constrained("canary", cluster("plain", "3s")),
        ),
    ]);
    let dir_b = serving(&[
        ("e1-test.yaml", &constrained("test", b_endpoint("e1", 8001))),
        ("e1-prod.yaml", &constrained("prod", b_endpoint("e1", 9001))),
    ]);
    let a = Xdsd::start(&dir_a.path()).await;
    let b = Xdsd::start(&dir_b.path()).await;
    a.expect_loaded_since(0).await;
    b.expect_loaded_since(0).await;
    ([dir_a, dir_b], a, b)
}

/// `xdsd get` of `server` (SotW and delta) with `extra` arguments, of the servers of
/// [`authorities_with_variants`]: b.test's glob collection gives its `env=test` member (port
/// 8001), a.test's cluster its `env=canary` variant (3s), `plain` its `env=prod` one (1s).
pub async fn expect_each_authoritys_variant(server: &str, extra: &[&str]) {
    let glob = "xdstp://b.test/envoy.config.endpoint.v3.LbEndpoint/c1/*";
    for flavor in [&["--delta"][..], &[][..]] {
        let mut args = vec!["get", "--server", server];
        args.extend(flavor);
        args.extend(extra);
        args.extend([LB, glob]);
        let out = xdsd(&args).await;
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{flavor:?}: {}", text(&out.stderr));
        assert_eq!(
            at_names(&stdout),
            ["xdstp://b.test/envoy.config.endpoint.v3.LbEndpoint/c1/e1"],
            "{flavor:?}: {stdout}"
        );
        assert!(
            stdout.contains("8001") && !stdout.contains("9001"),
            "{flavor:?}: b.test's env=test variant: {stdout}"
        );
        let mut args = vec!["get", "--server", server];
        args.extend(flavor);
        args.extend(extra);
        args.extend(["cluster", A_CLUSTER, "plain"]);
        let out = xdsd(&args).await;
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{flavor:?}: {}", text(&out.stderr));
        let docs: Vec<&str> = stdout.split("\n---").collect();
        assert_eq!(docs.len(), 2, "{flavor:?}: {stdout}");
        let doc_of = |name: &str| {
            docs.iter()
                .find(|d| d.contains(&format!("name: \"{name}\"\n")))
                .unwrap_or_else(|| panic!("{name} in {stdout}"))
                .to_string()
        };
        assert!(
            doc_of(A_CLUSTER).contains("\"3s\""),
            "{flavor:?}: a.test's env=canary variant: {stdout}"
        );
        assert!(
            doc_of("plain").contains("\"1s\""),
            "{flavor:?}: --param's env=prod variant: {stdout}"
        );
    }
}

#[tokio::test]
async fn get_server_for_asks_each_authoritys_names_of_its_own_server() {
    let (_dirs, a, b) = two_authorities().await;
    let a_cluster = A_CLUSTER;
    let b_addr = format!("b.test=127.0.0.1:{}", b.port);
    let glob = "xdstp://b.test/envoy.config.endpoint.v3.LbEndpoint/c1/*";
    for flavor in [&["--delta"][..], &[][..]] {
        let mut args = flavor.to_vec();
        args.extend(["--server-for", &b_addr, LB, glob]);
        let out = get(&a, &args).await;
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{flavor:?}: {}", text(&out.stderr));
        let members = [
            "xdstp://b.test/envoy.config.endpoint.v3.LbEndpoint/c1/e1",
            "xdstp://b.test/envoy.config.endpoint.v3.LbEndpoint/c1/e2",
        ];
        assert_eq!(at_names(&stdout), members, "{flavor:?}: {stdout}");
        assert!(!stdout.contains("9999"), "the decoy: {stdout}");
        let mut args = flavor.to_vec();
        args.extend(["--server-for", &b_addr, "cluster", a_cluster, "plain"]);
        let out = get(&a, &args).await;
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{flavor:?}: {}", text(&out.stderr));
        assert_eq!(names(&stdout), ["plain", a_cluster], "{stdout}");
        assert!(!stdout.contains("9s"), "the decoys: {stdout}");
    }
}
