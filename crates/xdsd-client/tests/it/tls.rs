//! The driver over TLS and mutual TLS (rustls) to an in-process xdsd whose client CA binds the
//! node to the certificate's identity.

use envoy_types::pb::envoy::config::core::v3::Node;
use xdsd_client::types::CLUSTER;
use xdsd_client::{Config, Event, Options, Tls, XdsClient};
use xdsd_core::TlsOptions;

use xdsd_testsupport::pki::{Id, Pki};
use xdsd_testsupport::server::*;

fn config() -> Config {
    Config::new(Node {
        id: "client-test".into(),
        ..Default::default()
    })
}

fn read(path: &std::path::Path) -> Vec<u8> {
    std::fs::read(path).expect("a PEM file")
}

#[tokio::test]
async fn mutual_tls_client_gets_its_resources() {
    let pki = Pki::new();
    let server_pair = pki.server("server", 1);
    let client_pair = pki.client(
        "client",
        Id::Uri("spiffe://example.org/ns/test/sa/client-test"),
    );
    let server = Server::start_tls(
        TlsOptions::from_pem(&server_pair.cert, &server_pair.key).client_ca(&pki.ca),
    )
    .await;
    server.set(cluster("a", "1"));
    let mut options = Options::new(server.addr.to_string());
    options.tls = Some(Tls {
        ca_pem: Some(read(&pki.ca)),
        identity: Some((read(&client_pair.cert), read(&client_pair.key))),
        domain: None,
    });
    let (client, mut events) = XdsClient::start(options, config(), None).expect("started");
    client.subscribe(CLUSTER, vec!["a".into()]);
    let update = next_news(&mut events).await;
    assert_eq!(update_names(&update), (vec!["a".into()], vec![]));
    drop(client);
    server.stop().await;
}

#[tokio::test]
async fn client_without_a_certificate_is_refused_and_says_so() {
    let pki = Pki::new();
    let server_pair = pki.server("server", 1);
    let server = Server::start_tls(
        TlsOptions::from_pem(&server_pair.cert, &server_pair.key).client_ca(&pki.ca),
    )
    .await;
    server.set(cluster("a", "1"));
    let mut options = Options::new(server.addr.to_string());
    options.tls = Some(Tls {
        ca_pem: Some(read(&pki.ca)),
        ..Default::default()
    });
    let (client, mut events) = XdsClient::start(options, config(), None).expect("started");
    client.subscribe(CLUSTER, vec!["a".into()]);
    match next_news(&mut events).await {
        Event::Disconnected { reason } => assert!(!reason.is_empty()),
        other => panic!("no resources without a client certificate: {other:?}"),
    }
    drop(client);
    server.stop().await;
}
