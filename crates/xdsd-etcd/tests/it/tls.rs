//! TLS and mutual TLS to etcd.

use std::time::Duration;

use xdsd_etcd::{load, EtcdError};

use xdsd_testsupport::etcd::{options, Etcd, ServerTls};
use xdsd_testsupport::pki::{Id, Pki};

#[tokio::test]
async fn an_etcd_with_client_certificates_is_read_with_the_ca_certificate_and_key() {
    let pki = Pki::new();
    let server = pki.server("etcd", 1);
    let client = pki.client("xdsd", Id::Cn("xdsd"));
    let etcd = Etcd::start_with(
        Some(ServerTls {
            cert: server.cert,
            key: server.key,
            client_ca: pki.ca.clone(),
        }),
        &[],
    )
    .await;
    let endpoint = etcd.endpoint();
    assert!(endpoint.starts_with("https://"));

    let with_cert = options(&endpoint, "/t/")
        .with_ca(&pki.ca)
        .with_client_cert(&client.cert, &client.key);
    let (source, _) = load(&with_cert).await.expect("load over mutual TLS");
    let plan = source
        .plan_push([("a.yaml".to_string(), bytes::Bytes::from("a"))].into())
        .await
        .expect("plan");
    source.apply_push(&plan).await.expect("push");
    let snapshot = source.read().await.expect("read");
    assert_eq!(snapshot.entries.len(), 1);

    // Without the client certificate etcd refuses the handshake.
    let without = options(&endpoint, "/t/")
        .with_ca(&pki.ca)
        .with_request_timeout(Duration::from_secs(5));
    let error = load(&without).await.expect_err("refused");
    assert!(error.to_string().contains(&endpoint), "{error}");

    // A CA file that is not there is named.
    let missing = options(&endpoint, "/t/").with_ca(pki.path("missing.pem"));
    let error = load(&missing).await.expect_err("no CA file");
    assert!(
        matches!(error, EtcdError::TlsFile { what: "CA", .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("missing.pem"), "{error}");
}
