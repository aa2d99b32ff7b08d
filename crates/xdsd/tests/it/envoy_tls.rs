//! Mutual TLS between a real Envoy 1.40 and xdsd: certificates made by the test (rcgen); Envoy's
//! xds_cluster has an UpstreamTlsContext with its client certificate, the test CA and SNI
//! localhost. An Envoy whose certificate names its node gets its config and routes traffic; the
//! same Envoy config with a certificate of another identity gets nothing (xdsd ends its stream
//! with PERMISSION_DENIED, naming both identities) and has no dynamic listener. Plaintext on a
//! non-loopback address logs a warning at start; files that do not load stop xdsd at start.

use std::path::Path;
use std::time::Duration;

use crate::pki::{Id, Pair, Pki};
use crate::support::scenario::{basic_resources, dynamic_bootstrap, Transport};
use crate::support::{unique_name, wait_for_body, Envoy, Upstream, Xdsd, DEADLINE};

const TRUST_DOMAIN: &str = "spiffe://xdsd.test/ns/tests/sa";

/// [`dynamic_bootstrap`] over ADS, its xds_cluster (the last thing in it) reaching xdsd over
/// mutual TLS with `client`.
fn mtls_bootstrap(node_id: &str, xds_port: u16, client: &Pair, ca: &Path) -> String {
    let mut bootstrap = dynamic_bootstrap(node_id, xds_port, Transport::Ads);
    bootstrap.push_str(&format!(
        "    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        sni: localhost
        common_tls_context:
          alpn_protocols: [h2]
          tls_certificates:
          - certificate_chain: {{ filename: {cert} }}
            private_key: {{ filename: {key} }}
          validation_context:
            trusted_ca: {{ filename: {ca} }}
            match_typed_subject_alt_names:
            - san_type: DNS
              matcher: {{ exact: localhost }}
",
        cert = client.cert.display(),
        key = client.key.display(),
        ca = ca.display(),
    ));
    bootstrap
}

fn tls_args<'a>(server: &'a Pair, pki: &'a Pki) -> Vec<&'a str> {
    vec![
        "--log-level",
        "debug",
        "--tls-cert",
        server.cert.to_str().expect("a UTF-8 path"),
        "--tls-key",
        server.key.to_str().expect("a UTF-8 path"),
        "--client-ca",
        pki.ca.to_str().expect("a UTF-8 path"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_over_mutual_tls_gets_config_only_for_its_own_node() {
    let pki = Pki::new();
    let server = pki.server("server", 1);
    let upstream = Upstream::start("upstream-a").await;
    let dir = basic_resources(Transport::Ads, upstream.port);
    let xdsd = Xdsd::start_with_args(&dir.path(), &tls_args(&server, &pki)).await;
    xdsd.expect_loaded_since(0).await;
    xdsd.log
        .expect_line_since(0, &["mutual TLS on"], "xdsd to log that mutual TLS is on")
        .await;

    // Its own node: config, and traffic through it.
    let node_id = unique_name("envoy-node");
    let identity = format!("{TRUST_DOMAIN}/{node_id}");
    let client = pki.client("envoy", Id::Uri(&identity));
    let envoy = Envoy::start(&mtls_bootstrap(&node_id, xdsd.port, &client, &pki.ca)).await;
    let port = envoy.listener_port("listener_0").await;
    wait_for_body(port, "upstream-a", || {
        format!("xdsd log:\n{}", xdsd.log.text())
    })
    .await;
    let opened = xdsd
        .log
        .expect_line_since(
            0,
            &["stream opened", &identity],
            "a stream with the identity",
        )
        .await;
    assert!(opened.contains("identity="), "{opened}");

    // The same Envoy config with a certificate of another identity: refused.
    let mark = xdsd.log.mark();
    let other_node = unique_name("envoy-node");
    let stranger = pki.client("stranger", Id::Uri(&format!("{TRUST_DOMAIN}/someone-else")));
    let refused = Envoy::start(&mtls_bootstrap(&other_node, xdsd.port, &stranger, &pki.ca)).await;
    let denied = xdsd
        .log
        .wait_for_since(
            mark,
            |l| l.contains("PermissionDenied") && l.contains(&other_node),
            DEADLINE,
        )
        .await
        .unwrap_or_else(|why| panic!("no PERMISSION_DENIED ({why}). Log:\n{}", xdsd.log.text()));
    assert!(denied.contains("someone-else"), "both identities: {denied}");
    assert!(denied.contains("WARN"), "{denied}");
    // Envoy keeps retrying and keeps being refused; it never gets a listener.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let listeners = refused
        .admin_get("/listeners?format=json")
        .await
        .expect("Envoy's admin answers");
    assert!(
        !listeners.body.contains("listener_0"),
        "the refused Envoy has a listener: {}",
        listeners.body
    );
    let dump = refused.config_dump().await;
    assert!(!dump.contains("dynamic_listeners"), "{dump}");
    // The served Envoy was not disturbed.
    wait_for_body(port, "upstream-a", || {
        format!("xdsd log:\n{}", xdsd.log.text())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_off_loopback_is_served_with_a_warning() {
    let dir = basic_resources(Transport::Ads, 9);
    let warning = "serving plaintext on a non-loopback address";
    let mut open = Xdsd::start_on(&dir.path(), "0.0.0.0:0", &[]).await;
    open.log
        .expect_line_since(0, &[warning], "the plaintext warning")
        .await;
    open.terminate().await;
    let mut local = Xdsd::start(&dir.path()).await;
    local.expect_loaded_since(0).await;
    local.terminate().await;
    assert!(
        !local.log.text().contains(warning),
        "no warning on loopback:\n{}",
        local.log.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_files_that_do_not_load_stop_xdsd_at_start() {
    let pki = Pki::new();
    let server = pki.server("server", 1);
    let other = pki.server("other", 2);
    let dir = basic_resources(Transport::Ads, 9);
    let bin = env!("CARGO_BIN_EXE_xdsd");
    let cases: [(&str, &Path, &str); 2] = [
        (
            "a key of another certificate",
            &other.key,
            "do not go together",
        ),
        ("a missing key", &pki.path("missing.key"), "cannot read"),
    ];
    for (what, key, expected) in cases {
        let out = tokio::time::timeout(
            DEADLINE,
            tokio::process::Command::new(bin)
                .args(["serve", "--listen", "127.0.0.1:0", "--resources"])
                .arg(dir.path())
                .arg("--tls-cert")
                .arg(&server.cert)
                .arg("--tls-key")
                .arg(key)
                .env("NO_COLOR", "1")
                .output(),
        )
        .await
        .expect("xdsd exits in time")
        .expect("xdsd ran");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{what}: xdsd started");
        assert!(stderr.contains(expected), "{what}: {stderr}");
    }
}
