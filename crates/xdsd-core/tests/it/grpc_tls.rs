//! TLS and mutual TLS on the xDS port, over real gRPC on loopback with certificates made by the
//! test (rcgen): a client with a certificate the CA signed gets its config; one without a
//! certificate, or plaintext, is refused at the handshake; a certificate whose identity may not
//! claim the node is refused with PERMISSION_DENIED; and the server's certificate is replaced
//! under 20 open streams, none of which drops, while new handshakes see the new certificate.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::cluster::v3::cluster_discovery_service_client::ClusterDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Code, Status, Streaming};
use xdsd_core::store::{Change, Store};
use xdsd_core::types::CLUSTER;
use xdsd_core::JsonCodec;
use xdsd_core::NodeIdentityRules;
use xdsd_core::XdsServer;
use xdsd_core::{identity_of, TlsOptions};

use crate::support::{input, WAIT};
use xdsd_testsupport::pki::{replace, Id, Pair, Pki};

const SPIFFE_NODE_1: &str = "spiffe://example.org/ns/test/sa/node-1";

/// A "JSON" codec that passes the protobuf encoding through: the REST routes see a request body
/// and answer a body, which is all this test needs of them.
struct Passthrough;

impl JsonCodec for Passthrough {
    fn request_from_json(&self, json: &[u8]) -> Result<Vec<u8>, String> {
        Ok(json.to_vec())
    }
    fn response_to_json(&self, encoded: &[u8]) -> Result<Vec<u8>, String> {
        Ok(encoded.to_vec())
    }
}

struct TlsServer {
    store: Store,
    addr: SocketAddr,
    stats: xdsd_core::ServerHandle,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl TlsServer {
    async fn start(tls: TlsOptions) -> TlsServer {
        TlsServer::start_with(tls, false).await
    }

    async fn start_with(tls: TlsOptions, rest: bool) -> TlsServer {
        let store = Store::new();
        store
            .apply([Change::Set(input(CLUSTER, "cluster-a", b"a"))])
            .expect("a cluster");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let addr = listener.local_addr().expect("its address");
        let mut server = XdsServer::builder(store.clone()).tls(tls);
        if rest {
            server = server.rest_json(Arc::new(Passthrough));
        }
        let server = server.build().expect("the TLS files load");
        let stats = server.handle();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            server
                .serve(listener, async move {
                    let _ = stopped.await;
                })
                .await
                .expect("serve ends cleanly");
        });
        TlsServer {
            store,
            addr,
            stats,
            stop,
            task,
        }
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(WAIT, self.task)
            .await
            .expect("serve returns in time after its shutdown signal")
            .expect("the serving task ends");
    }
}

fn roots(ca: &std::path::Path) -> RootCertStore {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).expect("the CA file") {
        roots.add(cert.expect("a CA certificate")).expect("added");
    }
    roots
}

/// A TLS client configuration trusting `ca`, presenting `client` if given.
fn client_config(ca: &std::path::Path, client: Option<&Pair>) -> Arc<ClientConfig> {
    let builder =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_root_certificates(roots(ca));
    let mut config = match client {
        Some(pair) => builder
            .with_client_auth_cert(
                CertificateDer::pem_file_iter(&pair.cert)
                    .expect("the client certificate")
                    .collect::<Result<Vec<_>, _>>()
                    .expect("PEM"),
                PrivateKeyDer::from_pem_file(&pair.key).expect("the client key"),
            )
            .expect("a client certificate"),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Arc::new(config)
}

/// Connects tonic over TLS (SNI localhost) to `addr`.
#[derive(Clone)]
struct Connector {
    addr: SocketAddr,
    config: Arc<ClientConfig>,
}

type Connecting = Pin<
    Box<
        dyn Future<Output = io::Result<TokioIo<tokio_rustls::client::TlsStream<TcpStream>>>> + Send,
    >,
>;

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<tokio_rustls::client::TlsStream<TcpStream>>;
    type Error = io::Error;
    type Future = Connecting;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Connecting {
        let this = self.clone();
        Box::pin(async move {
            let tls = handshake(this.addr, this.config).await?;
            Ok(TokioIo::new(tls))
        })
    }
}

async fn handshake(
    addr: SocketAddr,
    config: Arc<ClientConfig>,
) -> io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from("localhost").map_err(io::Error::other)?;
    TlsConnector::from(config).connect(name, tcp).await
}

/// A channel over TLS; `Err`: the connection failed.
async fn tls_channel(
    addr: SocketAddr,
    config: Arc<ClientConfig>,
) -> Result<Channel, tonic::transport::Error> {
    Endpoint::from_static("http://localhost")
        .connect_with_connector(Connector { addr, config })
        .await
}

fn request(node: &str, type_url: &str) -> DiscoveryRequest {
    DiscoveryRequest {
        node: Some(Node {
            id: node.into(),
            cluster: "test".into(),
            ..Default::default()
        }),
        type_url: type_url.into(),
        ..Default::default()
    }
}

/// An ADS stream that sent `first`; hold the sender to keep it open.
async fn ads(
    channel: &Channel,
    first: DiscoveryRequest,
) -> Result<(mpsc::Sender<DiscoveryRequest>, Streaming<DiscoveryResponse>), Status> {
    let (tx, rx) = mpsc::channel(4);
    tx.send(first).await.expect("queued");
    let responses = AggregatedDiscoveryServiceClient::new(channel.clone())
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await?
        .into_inner();
    Ok((tx, responses))
}

async fn next(responses: &mut Streaming<DiscoveryResponse>) -> Result<DiscoveryResponse, Status> {
    match tokio::time::timeout(WAIT, responses.message())
        .await
        .expect("an answer in time")
    {
        Ok(Some(response)) => Ok(response),
        Ok(None) => Err(Status::unknown("the stream ended without a status")),
        Err(status) => Err(status),
    }
}

/// The server's `xdsd_tls_reloads_total` of `result`.
fn tls_reloads(server: &TlsServer, result: &str) -> u64 {
    let series = format!("xdsd_tls_reloads_total{{result=\"{result}\"}} ");
    server
        .stats
        .metrics_text()
        .lines()
        .find_map(|l| l.strip_prefix(series.as_str()))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series}in the metrics"))
}

/// Waits until the server counted `at_least` TLS reloads of `result`.
async fn wait_tls_reloads(server: &TlsServer, result: &str, at_least: u64) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while tls_reloads(server, result) < at_least {
        assert!(
            tokio::time::Instant::now() < deadline,
            "fewer than {at_least} TLS reloads {result} in time"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn mtls(pki: &Pki, server: &Pair) -> TlsOptions {
    TlsOptions::from_pem(&server.cert, &server.key)
        .client_ca(&pki.ca)
        .reload_interval(Duration::from_millis(50))
}

#[tokio::test]
async fn a_client_with_a_certificate_gets_its_config_and_others_are_refused() {
    let pki = Pki::new();
    let server_pair = pki.server("server", 1);
    let client = pki.client("node-1", Id::Uri(SPIFFE_NODE_1));
    let server = TlsServer::start(mtls(&pki, &server_pair)).await;

    // The right certificate: config over mutual TLS.
    let channel = tls_channel(server.addr, client_config(&pki.ca, Some(&client)))
        .await
        .expect("a TLS connection");
    let (_tx, mut responses) = ads(&channel, request("node-1", CLUSTER))
        .await
        .expect("a stream");
    let response = next(&mut responses).await.expect("a response");
    assert_eq!(response.resources.len(), 1);
    // Fetch too.
    let fetched = ClusterDiscoveryServiceClient::new(channel.clone())
        .fetch_clusters(request("node-1", CLUSTER))
        .await
        .expect("fetched")
        .into_inner();
    assert_eq!(fetched.resources.len(), 1);
    let streams = server.stats.streams();
    assert_eq!(streams.len(), 1, "{streams:?}");

    // No client certificate: the server refuses the handshake (with TLS 1.3 the client
    // learns it on its first read), and no stream opens.
    let refused = async {
        let channel = tls_channel(server.addr, client_config(&pki.ca, None)).await?;
        ads(&channel, request("node-1", CLUSTER))
            .await
            .map_err(|s| s.to_string())?
            .1
            .message()
            .await
            .map_err(|s| s.to_string())?;
        Ok::<_, Box<dyn std::error::Error>>(())
    };
    let outcome = tokio::time::timeout(WAIT, refused).await.expect("in time");
    assert!(
        outcome.is_err(),
        "a client without a certificate was served"
    );

    // A certificate of another CA: refused the same way.
    let other = Pki::named("another CA");
    let stranger = other.client("node-1", Id::Uri(SPIFFE_NODE_1));
    let config = client_config(&pki.ca, Some(&stranger));
    let stranger_refused = async {
        let channel = tls_channel(server.addr, config).await?;
        ads(&channel, request("node-1", CLUSTER))
            .await
            .map_err(|s| s.to_string())?
            .1
            .message()
            .await
            .map_err(|s| s.to_string())?;
        Ok::<_, Box<dyn std::error::Error>>(())
    };
    let outcome = tokio::time::timeout(WAIT, stranger_refused)
        .await
        .expect("in time");
    assert!(outcome.is_err(), "a certificate of another CA was served");

    // Plaintext gRPC on the TLS port: refused.
    let plaintext = async {
        let channel = Channel::from_shared(format!("http://{}", server.addr))?
            .connect()
            .await?;
        ads(&channel, request("node-1", CLUSTER))
            .await
            .map_err(|s| s.to_string())?
            .1
            .message()
            .await
            .map_err(|s| s.to_string())?;
        Ok::<_, Box<dyn std::error::Error>>(())
    };
    let outcome = tokio::time::timeout(WAIT, plaintext)
        .await
        .expect("in time");
    assert!(outcome.is_err(), "a plaintext client was served");

    // The refused clients left the served one alone.
    assert_eq!(server.stats.streams().len(), 1);
    server
        .store
        .apply([Change::Set(input(CLUSTER, "cluster-b", b"b"))])
        .expect("another cluster");
    assert_eq!(
        next(&mut responses)
            .await
            .expect("an update")
            .resources
            .len(),
        2
    );

    // A client that opens a connection and never starts its handshake holds up no one, not
    // even shutdown.
    let _silent = TcpStream::connect(server.addr).await.expect("connected");
    drop(channel);
    let stopping = std::time::Instant::now();
    server.stop().await;
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "shutdown took {:?}",
        stopping.elapsed()
    );
}

#[tokio::test]
async fn a_certificate_may_claim_only_the_nodes_of_its_identity() {
    let pki = Pki::new();
    let server_pair = pki.server("server", 1);
    let client = pki.client("node-1", Id::Uri(SPIFFE_NODE_1));
    let by_dns = pki.client("dns", Id::Dns("gw.example.org"));
    let by_cn = pki.client("cn", Id::Cn("edge-7"));
    let server = TlsServer::start(mtls(&pki, &server_pair)).await;

    let channel = tls_channel(server.addr, client_config(&pki.ca, Some(&client)))
        .await
        .expect("a TLS connection");
    // Another node id: PERMISSION_DENIED, naming both.
    let (_tx, mut responses) = ads(&channel, request("node-2", CLUSTER))
        .await
        .expect("a stream");
    let status = next(&mut responses).await.expect_err("refused");
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert!(
        status.message().contains(SPIFFE_NODE_1) && status.message().contains("\"node-2\""),
        "{status:?}"
    );
    // Fetch: the same.
    let status = ClusterDiscoveryServiceClient::new(channel.clone())
        .fetch_clusters(request("node-2", CLUSTER))
        .await
        .expect_err("refused");
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    // No node at all: refused too (it could not be checked).
    let mut anonymous = request("", CLUSTER);
    anonymous.node = None;
    let (_tx2, mut responses) = ads(&channel, anonymous).await.expect("a stream");
    let status = next(&mut responses).await.expect_err("refused");
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    // The full SPIFFE ID as the node id is the identity itself: allowed.
    let (_tx3, mut responses) = ads(&channel, request(SPIFFE_NODE_1, CLUSTER))
        .await
        .expect("a stream");
    next(&mut responses).await.expect("served");

    // A DNS SAN, and a subject CN, are the identity when there is no URI SAN.
    for (pair, node) in [(&by_dns, "gw.example.org"), (&by_cn, "edge-7")] {
        let channel = tls_channel(server.addr, client_config(&pki.ca, Some(pair)))
            .await
            .expect("a TLS connection");
        let (_tx, mut responses) = ads(&channel, request(node, CLUSTER))
            .await
            .expect("a stream");
        next(&mut responses).await.expect("served its own node");
        let (_tx, mut responses) = ads(&channel, request("node-1", CLUSTER))
            .await
            .expect("a stream");
        let status = next(&mut responses).await.expect_err("refused");
        assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    }
    server.stop().await;

    // With rules: the identity's pattern, and node ids or a cluster.
    let rules = NodeIdentityRules::new([
        "spiffe://example.org/ns/*/sa/node-1=node-*"
            .parse()
            .expect("a rule"),
        "gw.example.org=cluster:edge".parse().expect("a rule"),
    ]);
    let server = TlsServer::start(mtls(&pki, &server_pair).node_rules(rules)).await;
    let channel = tls_channel(server.addr, client_config(&pki.ca, Some(&client)))
        .await
        .expect("a TLS connection");
    let (_tx, mut responses) = ads(&channel, request("node-9", CLUSTER))
        .await
        .expect("a stream");
    next(&mut responses).await.expect("node-* allowed");
    let (_tx, mut responses) = ads(&channel, request("other", CLUSTER))
        .await
        .expect("a stream");
    assert_eq!(
        next(&mut responses).await.expect_err("refused").code(),
        Code::PermissionDenied
    );
    let gw = tls_channel(server.addr, client_config(&pki.ca, Some(&by_dns)))
        .await
        .expect("a TLS connection");
    let mut edge = request("anything", CLUSTER);
    if let Some(node) = edge.node.as_mut() {
        node.cluster = "edge".into();
    }
    let (_tx, mut responses) = ads(&gw, edge).await.expect("a stream");
    next(&mut responses).await.expect("cluster edge allowed");
    server.stop().await;
}

/// The certificate a new handshake with `addr` is shown.
async fn presented(addr: SocketAddr, config: Arc<ClientConfig>) -> CertificateDer<'static> {
    let tls = handshake(addr, config).await.expect("a handshake");
    let (_, session) = tls.get_ref();
    session
        .peer_certificates()
        .and_then(|c| c.first())
        .expect("the server's certificate")
        .clone()
        .into_owned()
}

fn pem_cert(path: &std::path::Path) -> CertificateDer<'static> {
    CertificateDer::from_pem_file(path).expect("a certificate")
}

fn serial(cert: &CertificateDer<'_>) -> Vec<u8> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).expect("parses");
    parsed.raw_serial().to_vec()
}

/// Waits until a new handshake is shown `expected`.
async fn wait_presented(
    addr: SocketAddr,
    config: &Arc<ClientConfig>,
    expected: &CertificateDer<'_>,
) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let seen = presented(addr, config.clone()).await;
        if seen == *expected {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still shown serial {:?}, not {:?}",
            serial(&seen),
            serial(expected)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_server_certificate_is_replaced_under_open_streams() {
    const STREAMS: usize = 100;
    let pki = Pki::new();
    let server_pair = pki.server("server", 1);
    let client = pki.client("node-1", Id::Uri(SPIFFE_NODE_1));
    let config = client_config(&pki.ca, Some(&client));
    let server = TlsServer::start(mtls(&pki, &server_pair)).await;
    let first = pem_cert(&server_pair.cert);
    assert_eq!(presented(server.addr, config.clone()).await, first);
    assert_eq!(
        identity_of(&pem_cert(&client.cert)).as_deref(),
        Some(SPIFFE_NODE_1)
    );

    // 100 streams, each on a connection of its own, each with its first response.
    let mut streams = Vec::new();
    for _ in 0..STREAMS {
        let channel = tls_channel(server.addr, config.clone())
            .await
            .expect("a TLS connection");
        let (tx, mut responses) = ads(&channel, request("node-1", CLUSTER))
            .await
            .expect("a stream");
        assert_eq!(
            next(&mut responses)
                .await
                .expect("a response")
                .resources
                .len(),
            1
        );
        streams.push((channel, tx, responses));
    }

    // A new certificate and key: new handshakes see it.
    pki.write_server(&server_pair, 2);
    let second = pem_cert(&server_pair.cert);
    assert_ne!(serial(&first), serial(&second));
    wait_presented(server.addr, &config, &second).await;

    // A broken certificate file is not taken: the last good one stays.
    // What is waited for: the server's count of rejected reloads going up.
    let rejected = tls_reloads(&server, "rejected");
    replace(
        &server_pair.cert,
        b"-----BEGIN CERTIFICATE-----\nnot base64\n",
    );
    wait_tls_reloads(&server, "rejected", rejected + 1).await;
    assert_eq!(presented(server.addr, config.clone()).await, second);
    // A key that is not the certificate's is not taken either.
    let stray = pki.client("stray", Id::Cn("stray"));
    std::fs::copy(&stray.cert, &server_pair.cert).expect("copied");
    wait_tls_reloads(&server, "rejected", rejected + 2).await;
    assert_eq!(presented(server.addr, config.clone()).await, second);
    // Fixed: taken.
    pki.write_server(&server_pair, 3);
    let third = pem_cert(&server_pair.cert);
    wait_presented(server.addr, &config, &third).await;

    // Not one of the streams dropped: each takes the next change.
    assert_eq!(server.stats.streams().len(), STREAMS);
    server
        .store
        .apply([Change::Set(input(CLUSTER, "cluster-b", b"b"))])
        .expect("another cluster");
    for (_, _, responses) in &mut streams {
        assert_eq!(next(responses).await.expect("an update").resources.len(), 2);
    }
    drop(streams);
    server.stop().await;
}

/// One HTTP/1.1 REST poll over TLS, ALPN http/1.1: the status line and the body.
async fn rest_poll(addr: SocketAddr, pki: &Pki, client: &Pair, node: &str) -> (String, Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut config = ClientConfig::clone(&client_config(&pki.ca, Some(client)));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let mut tls = handshake(addr, Arc::new(config))
        .await
        .expect("a handshake");
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let body = prost::Message::encode_to_vec(&request(node, CLUSTER));
    let head = format!(
        "POST /v3/discovery:clusters HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).await.expect("sent");
    tls.write_all(&body).await.expect("sent");
    let mut answer = Vec::new();
    // The server closes after its answer (connection: close); a TLS close without
    // close_notify is fine here.
    let _ = tokio::time::timeout(WAIT, tls.read_to_end(&mut answer))
        .await
        .expect("an answer in time");
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP answer");
    let status = String::from_utf8_lossy(&answer[..split])
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    (status, answer[split + 4..].to_vec())
}

#[tokio::test]
async fn rest_polls_over_mutual_tls_are_bound_to_the_identity_too() {
    let pki = Pki::new();
    let server_pair = pki.server("server", 1);
    let client = pki.client("node-1", Id::Uri(SPIFFE_NODE_1));
    let server = TlsServer::start_with(mtls(&pki, &server_pair), true).await;

    let (status, body) = rest_poll(server.addr, &pki, &client, "node-1").await;
    assert!(status.contains(" 200 "), "{status}");
    let response: DiscoveryResponse = prost::Message::decode(body.as_slice()).expect("a response");
    assert_eq!(response.resources.len(), 1);

    let (status, body) = rest_poll(server.addr, &pki, &client, "node-2").await;
    assert!(status.contains(" 403 "), "{status}");
    let body = String::from_utf8_lossy(&body);
    assert!(
        body.contains("node-2") && body.contains("may not claim"),
        "{body}"
    );
    server.stop().await;
}

/// Two identities subscribe to the same secret name over mutual TLS: each gets its own variant,
/// a third identity gets neither (and none of their bytes), wildcard and by name.
#[tokio::test]
async fn a_secret_constrained_on_an_identity_reaches_only_that_identity() {
    use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::single_constraint::ConstraintType;
    use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::{
        SingleConstraint, Type,
    };
    use envoy_types::pb::envoy::service::discovery::v3::DynamicParameterConstraints;
    use xdsd_core::params::Constraints;
    use xdsd_core::IDENTITY_PARAM;
    use xdsd_core::types::SECRET;

    let pki = Pki::new();
    let server_pair = pki.server("server", 1);
    let server = TlsServer::start(mtls(&pki, &server_pair)).await;
    let owner = |identity: &str| {
        Constraints::new(DynamicParameterConstraints {
            r#type: Some(Type::Constraint(SingleConstraint {
                key: IDENTITY_PARAM.into(),
                constraint_type: Some(ConstraintType::Value(identity.into())),
            })),
        })
        .expect("a constraint")
    };
    let one = "spiffe://example.org/ns/test/sa/node-1";
    let two = "spiffe://example.org/ns/test/sa/node-2";
    server
        .store
        .apply([
            Change::Set(input(SECRET, "key", b"secret-of-one").with_constraints(Some(owner(one)))),
            Change::Set(input(SECRET, "key", b"secret-of-two").with_constraints(Some(owner(two)))),
        ])
        .expect("the secrets");

    let values = |r: &DiscoveryResponse| -> Vec<Vec<u8>> {
        r.resources.iter().map(|a| a.value.clone()).collect()
    };
    for (node, identity, expected) in [
        ("node-1", one, Some(b"secret-of-one".as_slice())),
        ("node-2", two, Some(b"secret-of-two".as_slice())),
        ("node-3", "spiffe://example.org/ns/test/sa/node-3", None),
    ] {
        let client = pki.client(node, Id::Uri(identity));
        let channel = tls_channel(server.addr, client_config(&pki.ca, Some(&client)))
            .await
            .expect("a TLS connection");
        for names in [vec![], vec!["key".to_owned()]] {
            let mut first = request(node, SECRET);
            first.resource_names = names.clone();
            let (_tx, mut responses) = ads(&channel, first).await.expect("a stream");
            match expected {
                Some(bytes) => {
                    let r = next(&mut responses).await.expect("a response");
                    assert_eq!(values(&r), [bytes.to_vec()], "{node} {names:?}");
                }
                None => {
                    // Wildcard: an empty answer; by name: nothing (SotW has no "does not exist").
                    let r =
                        tokio::time::timeout(Duration::from_millis(500), responses.message()).await;
                    if let Ok(Ok(Some(r))) = r {
                        assert!(r.resources.is_empty(), "{node} {names:?}: {:?}", values(&r));
                    }
                }
            }
        }
    }
    server.stop().await;
}

#[tokio::test]
async fn connections_wait_while_every_handshake_slot_is_taken() {
    let pki = Pki::new();
    let server_pair = pki.server("server", 1);
    let tls = TlsOptions::from_pem(&server_pair.cert, &server_pair.key)
        .handshake_timeout(Duration::from_secs(600))
        .max_handshakes(2);
    let server = TlsServer::start(tls).await;
    // Two clients connect and never start their handshake: both slots are taken.
    let first = TcpStream::connect(server.addr).await.expect("connected");
    let _second = TcpStream::connect(server.addr).await.expect("connected");
    let config = client_config(&pki.ca, None);
    let waiting = tokio::spawn(handshake(server.addr, config.clone()));
    // The thing tested: no handshake within half a second while both slots are taken.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiting.is_finished(),
        "a third handshake waits while both slots are taken"
    );
    // One stalled client goes away: its slot serves the waiting one.
    drop(first);
    let done = tokio::time::timeout(WAIT, waiting)
        .await
        .expect("the waiting handshake ends in time")
        .expect("the task");
    assert!(done.is_ok(), "{:?}", done.err());
    server.stop().await;
}

/// `GET path` over TLS (ALPN http/1.1) to `addr`: the status line, or why the exchange failed.
async fn https_get(
    addr: SocketAddr,
    pki: &Pki,
    client: Option<&Pair>,
    path: &str,
) -> Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut config = ClientConfig::clone(&client_config(&pki.ca, client));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let mut tls = handshake(addr, Arc::new(config))
        .await
        .map_err(|e| e.to_string())?;
    let head = format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n");
    tls.write_all(head.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(WAIT, tls.read_to_end(&mut answer))
        .await
        .map_err(|_| "no answer in time".to_owned())?;
    if answer.is_empty() {
        return Err(format!("no answer: {read:?}"));
    }
    Ok(String::from_utf8_lossy(&answer)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned())
}

/// An HTTP/1.1 listener (the binary's admin API) over (mutual) TLS: a client with a certificate
/// the CA signed reads it; one without a certificate, or speaking plaintext, gets nothing.
#[tokio::test]
async fn an_http1_listener_serves_over_mutual_tls_only() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let pki = Pki::new();
    let server_pair = pki.server("server", 1);
    let client = pki.client("node-1", Id::Uri(SPIFFE_NODE_1));
    let server = TlsServer::start(mtls(&pki, &server_pair)).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let addr = listener.local_addr().expect("its address");
    let tls = xdsd_core::http::HttpTls::load(mtls(&pki, &server_pair)).expect("the TLS files load");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let router = axum::Router::new()
        .route("/healthz", axum::routing::get(|| async { "ok\n" }))
        .route("/readyz", axum::routing::get(|| async { "ready\n" }));
    let admin = tokio::spawn(xdsd_core::http::serve_http1(
        listener,
        Some(tls),
        router,
        async move {
            let _ = stopped.await;
        },
    ));

    let ok = https_get(addr, &pki, Some(&client), "/healthz").await;
    assert!(ok.as_deref().is_ok_and(|s| s.contains(" 200 ")), "{ok:?}");
    let ready = https_get(addr, &pki, Some(&client), "/readyz").await;
    assert!(
        ready.as_deref().is_ok_and(|s| s.contains(" 200 ")),
        "{ready:?}"
    );
    // No client certificate: the handshake (or the first read) fails.
    let refused = https_get(addr, &pki, None, "/healthz").await;
    assert!(refused.is_err(), "{refused:?}");
    // Plaintext HTTP: no answer.
    let mut plain = TcpStream::connect(addr).await.expect("connected");
    plain
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
        .await
        .expect("sent");
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(WAIT, plain.read_to_end(&mut answer)).await;
    assert!(
        !String::from_utf8_lossy(&answer).contains("200"),
        "a plaintext client was answered: {answer:?}"
    );

    let _ = stop.send(());
    let _ = tokio::time::timeout(WAIT, admin).await;
    server.stop().await;
}
