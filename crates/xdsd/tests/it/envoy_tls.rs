//! Mutual TLS between a real Envoy 1.40 and xdsd: certificates made by the test (rcgen); Envoy's
//! xds_cluster has an UpstreamTlsContext with its client certificate, the test CA and SNI
//! localhost. An Envoy whose certificate names its node gets its config and routes traffic; the
//! same Envoy config with a certificate of another identity gets nothing (xdsd ends its stream
//! with PERMISSION_DENIED, naming both identities) and has no dynamic listener. Plaintext on a
//! non-loopback address logs a warning at start; files that do not load stop xdsd at start. A
//! secret constrained on one identity reaches that Envoy only (SotW and delta ADS).

use std::path::Path;

use crate::support::scenario::{basic_resources, dynamic_bootstrap, Transport};
use crate::support::{unique_name, wait_for_body, Envoy, Upstream, Xdsd, DEADLINE};
use xdsd_testsupport::pki::{Id, Pair, Pki};

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
    // Envoy keeps retrying and keeps being refused; it never gets a listener. Its next attempt,
    // refused again, is what is waited for.
    let retried = xdsd.log.mark();
    xdsd.log
        .wait_for_since(
            retried,
            |l| l.contains("PermissionDenied") && l.contains(&other_node),
            DEADLINE,
        )
        .await
        .unwrap_or_else(|why| panic!("no second refusal ({why}). Log:\n{}", xdsd.log.text()));
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
async fn plaintext_off_loopback_is_served_with_a_warning_saying_whether_secrets_are() {
    let dir = basic_resources(Transport::Ads, 9);
    let warning = "serving plaintext on a non-loopback address";
    let mut open = Xdsd::start_on(&dir.path(), "0.0.0.0:0", &[]).await;
    open.log
        .expect_line_since(
            0,
            &[warning, "secrets are refused to clients on other hosts"],
            "the plaintext warning",
        )
        .await;
    open.terminate().await;
    let mut secrets =
        Xdsd::start_on(&dir.path(), "0.0.0.0:0", &["--allow-plaintext-secrets"]).await;
    secrets
        .log
        .expect_line_since(0, &[warning, "secrets too"], "the plaintext warning")
        .await;
    secrets.terminate().await;
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

/// A listener that terminates TLS with the SDS secret `server-cert` (from xdsd over ADS) and
/// answers every request itself: it is active once Envoy has the secret, warming without it.
const TLS_LISTENER: &str = r#""@type": type.googleapis.com/envoy.config.listener.v3.Listener
name: tls_listener
address: { socket_address: { address: 127.0.0.1, port_value: 0 } }
filter_chains:
- transport_socket:
    name: envoy.transport_sockets.tls
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
      common_tls_context:
        tls_certificate_sds_secret_configs:
        - name: server-cert
          sds_config: { ads: {}, resource_api_version: V3 }
  filters:
  - name: envoy.filters.network.http_connection_manager
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
      stat_prefix: tls
      route_config:
        virtual_hosts:
        - name: all
          domains: ["*"]
          routes:
          - match: { prefix: / }
            direct_response: { status: 200, body: { inline_string: secret-ok } }
      http_filters:
      - name: envoy.filters.http.router
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
"#;

/// The secret `server-cert`, a certificate and key for `owner` only.
fn owned_secret(owner: &str, pair: &Pair) -> String {
    let pem = |path: &Path| {
        std::fs::read_to_string(path)
            .expect("a PEM file")
            .replace('\n', "\\n")
    };
    format!(
        "\"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret
\"@constraints\": {{ constraint: {{ key: xds.identity, value: \"{owner}\" }} }}
name: server-cert
tls_certificate:
  certificate_chain: {{ inline_string: \"{cert}\" }}
  private_key: {{ inline_string: \"{key}\" }}
",
        cert = pem(&pair.cert),
        key = pem(&pair.key),
    )
}

/// Two Envoys over mutual TLS with the same config, each with its own identity, ask for the same
/// secret name: the one the secret is constrained to gets it (its TLS listener goes active), the
/// other is served everything else but never the secret: its config dump holds none of the
/// secret's bytes. (Envoy takes "does not exist" for a secret as a failed update and activates the
/// listener without a certificate, so the listener's state tells nothing.)
async fn a_secret_reaches_only_its_owner(transport: Transport) {
    let pki = Pki::new();
    let server = pki.server("server", 1);
    let upstream = Upstream::start("upstream-a").await;
    let owner_node = unique_name("owner");
    let other_node = unique_name("other");
    let owner_id = format!("{TRUST_DOMAIN}/{owner_node}");
    let other_id = format!("{TRUST_DOMAIN}/{other_node}");
    let secret_pair = pki.server("secret-owner", 2);
    let dir = basic_resources(transport, upstream.port);
    dir.write("tls_listener.yaml", TLS_LISTENER);
    dir.write("secret.yaml", &owned_secret(&owner_id, &secret_pair));
    let xdsd = Xdsd::start_with_args(&dir.path(), &tls_args(&server, &pki)).await;
    xdsd.expect_loaded_since(0).await;

    let bootstrap = |node: &str, client: &Pair| {
        let mut b = mtls_bootstrap(node, xdsd.port, client, &pki.ca);
        if transport == Transport::DeltaAds {
            b = b.replacen("api_type: GRPC\n", "api_type: DELTA_GRPC\n", 1);
        }
        b
    };
    let owner_client = pki.client("owner", Id::Uri(&owner_id));
    let other_client = pki.client("other", Id::Uri(&other_id));
    let owner = Envoy::start(&bootstrap(&owner_node, &owner_client)).await;
    let other = Envoy::start(&bootstrap(&other_node, &other_client)).await;

    // The owner: its TLS listener is active, with the secret.
    owner.listener_port("tls_listener").await;
    let cert_line = std::fs::read_to_string(&secret_pair.cert)
        .expect("the secret's certificate")
        .lines()
        .nth(1)
        .expect("a line of base64")
        .to_owned();
    let dump = owner.config_dump().await;
    assert!(dump.contains("dynamic_active_secrets"), "{dump}");
    assert!(
        dump.contains(&cert_line),
        "the owner has the certificate: {dump}"
    );

    // The other: served its listeners (traffic through listener_0), never the secret.
    let port = other.listener_port("listener_0").await;
    wait_for_body(port, "upstream-a", || {
        format!("xdsd log:\n{}", xdsd.log.text())
    })
    .await;
    // Its TLS listener goes active once Envoy has xdsd's answer for the secret (that it does not
    // exist for this client; see above): only then is the absence of the secret telling.
    other.listener_port("tls_listener").await;
    let dump = other.config_dump().await;
    assert!(!dump.contains("dynamic_active_secrets"), "{dump}");
    assert!(
        !dump.contains(&cert_line),
        "the secret's bytes reached the other Envoy: {dump}"
    );
    // It asked for the secret, and was told it does not exist.
    assert!(dump.contains("tls_listener"), "{dump}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_constrained_on_an_identity_reaches_only_that_envoy_over_sotw_ads() {
    a_secret_reaches_only_its_owner(Transport::Ads).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_constrained_on_an_identity_reaches_only_that_envoy_over_delta_ads() {
    a_secret_reaches_only_its_owner(Transport::DeltaAds).await;
}
