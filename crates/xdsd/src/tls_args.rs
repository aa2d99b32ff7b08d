//! `xdsd serve`'s TLS options: TLS and mutual TLS on the --listen port, and the binding of a
//! client certificate's identity to the node it may claim (docs/tls.md).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tracing::{info, warn};
use xdsd_core::{IdentityRule, NodeIdentityRule, NodeIdentityRules, TlsOptions};

#[derive(clap::Args, Debug)]
pub(crate) struct TlsArgs {
    /// Serve TLS on --listen with this certificate chain (PEM, leaf first); needs --tls-key.
    /// The certificate, key and --client-ca files are read again when they change (checked
    /// every second): new connections get the new certificate, open ones are kept. A change
    /// that does not load (a half-written file, a key that is not the certificate's) is logged
    /// and the previous certificate kept.
    #[arg(
        long,
        help_heading = "TLS",
        value_name = "FILE",
        env = "XDSD_TLS_CERT",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,

    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(
        long,
        help_heading = "TLS",
        value_name = "FILE",
        env = "XDSD_TLS_KEY",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,

    /// Mutual TLS: every client must present a certificate signed by a CA of this PEM file,
    /// else its handshake fails. The certificate's identity is then bound to the node the
    /// client claims (see --identity-rule, --node-identity).
    #[arg(
        long,
        help_heading = "TLS",
        value_name = "FILE",
        env = "XDSD_CLIENT_CA",
        requires = "tls_cert"
    )]
    pub client_ca: Option<PathBuf>,

    /// With --client-ca, how a client certificate binds the node. spiffe: the identity is the
    /// certificate's first URI SAN (a SPIFFE ID), else its first DNS SAN, else its subject CN;
    /// the first request must carry a node that identity may claim (--node-identity), else the
    /// stream ends with PERMISSION_DENIED. none: no binding, any client the CA signed may claim
    /// any node.
    #[arg(
        long,
        help_heading = "TLS",
        value_name = "spiffe|none",
        default_value = "spiffe",
        env = "XDSD_IDENTITY_RULE"
    )]
    pub identity_rule: IdentityRule,

    /// Which nodes an identity may claim: IDENTITY=NODE (the node id) or
    /// IDENTITY=cluster:CLUSTER (the node's cluster), where * stands for any run of characters,
    /// e.g. 'spiffe://example.org/ns/*/sa/envoy=node-*'. Repeatable: a node is allowed when one
    /// rule matches both. Without any, the default rule: the node id must be the identity
    /// itself or its last /-separated segment (spiffe://example.org/ns/prod/sa/envoy-1 may be
    /// node envoy-1).
    #[arg(
        long,
        help_heading = "TLS",
        value_name = "RULE",
        env = "XDSD_NODE_IDENTITY",
        value_delimiter = ' ',
        requires = "client_ca"
    )]
    pub node_identity: Vec<NodeIdentityRule>,

    /// How long a client has to finish its TLS handshake before its connection is closed.
    #[arg(
        long,
        help_heading = "TLS",
        value_name = "DURATION",
        default_value = "10s",
        value_parser = crate::parse_duration,
        env = "XDSD_TLS_HANDSHAKE_TIMEOUT"
    )]
    pub tls_handshake_timeout: Duration,

    /// TLS handshakes in progress at once. While that many are, new connections wait in the
    /// listen backlog (a reconnecting fleet waits its turn; a flood of clients that never finish
    /// their handshake holds at most this many until --tls-handshake-timeout).
    #[arg(
        long,
        help_heading = "TLS",
        value_name = "N",
        default_value_t = xdsd_core::defaults::DEFAULT_MAX_HANDSHAKES,
        env = "XDSD_TLS_MAX_HANDSHAKES"
    )]
    pub tls_max_handshakes: usize,

    /// Serve secrets (SDS) to plaintext clients on other hosts. Without it, a plaintext
    /// connection from a non-loopback address that asks for secrets is ended with
    /// PERMISSION_DENIED: their private keys would cross the network in the clear. TLS clients,
    /// and plaintext ones on loopback (a sidecar), are served either way.
    #[arg(long, help_heading = "TLS", env = "XDSD_ALLOW_PLAINTEXT_SECRETS")]
    pub allow_plaintext_secrets: bool,
}

impl TlsArgs {
    /// The TLS options, when TLS is on.
    pub(crate) fn options(&self) -> Option<TlsOptions> {
        let (cert, key) = (self.tls_cert.as_ref()?, self.tls_key.as_ref()?);
        let mut options = TlsOptions::from_pem(cert, key)
            .identity_rule(self.identity_rule)
            .node_rules(NodeIdentityRules::new(self.node_identity.iter().cloned()))
            .handshake_timeout(self.tls_handshake_timeout)
            .max_handshakes(self.tls_max_handshakes);
        if let Some(ca) = &self.client_ca {
            options = options.client_ca(ca);
        }
        Some(options)
    }

    /// Logs how the port is secured: a warning for plaintext off loopback.
    pub(crate) fn log(&self, addr: SocketAddr) {
        match (&self.tls_cert, &self.client_ca) {
            (None, _) if !addr.ip().is_loopback() && self.allow_plaintext_secrets => warn!(
                %addr,
                "serving plaintext on a non-loopback address, secrets too \
                 (--allow-plaintext-secrets): anyone who reaches it can read every resource, \
                 private keys included, and claim any node; use --tls-cert, --tls-key and \
                 --client-ca (docs/tls.md)"
            ),
            (None, _) if !addr.ip().is_loopback() => warn!(
                %addr,
                "serving plaintext on a non-loopback address: anyone who reaches it can read \
                 every resource and claim any node, and secrets are refused to clients on \
                 other hosts (--allow-plaintext-secrets serves them); use --tls-cert, \
                 --tls-key and --client-ca (docs/tls.md)"
            ),
            (None, _) => {}
            (Some(_), None) => info!(%addr, "TLS on; clients present no certificate"),
            (Some(_), Some(_)) => {
                let rules: Vec<String> = self.node_identity.iter().map(|r| r.to_string()).collect();
                info!(
                    %addr,
                    identity_rule = %self.identity_rule,
                    node_identity = ?rules,
                    "mutual TLS on: clients must present a certificate the client CA signed"
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::{Cli, Command};

    fn serve(extra: &[&str]) -> Result<super::TlsArgs, clap::error::ErrorKind> {
        let args = ["xdsd", "serve", "--resources", "dir"].iter().chain(extra);
        match Cli::try_parse_from(args).map(|cli| cli.command) {
            Ok(Command::Serve(args)) => Ok(*args.downstream.tls),
            Ok(other) => panic!("parsed as another command: {other:?}"),
            Err(e) => Err(e.kind()),
        }
    }

    #[test]
    fn tls_options_parse_and_require_each_other() {
        let tls = serve(&[
            "--tls-cert",
            "c.pem",
            "--tls-key",
            "k.pem",
            "--client-ca",
            "ca.pem",
            "--node-identity",
            "spiffe://example.org/ns/*/sa/envoy=node-*",
            "--node-identity",
            "gw.example.org=cluster:edge",
        ])
        .expect("valid");
        let options = tls.options().expect("TLS on");
        assert_eq!(options.node_rules.rules().len(), 2);
        assert!(options.client_ca.is_some());
        if std::env::var_os("XDSD_TLS_CERT").is_none() {
            assert!(serve(&[]).expect("valid").options().is_none());
            assert!(serve(&["--tls-cert", "c.pem"]).is_err(), "no key");
            assert!(serve(&["--client-ca", "ca.pem"]).is_err(), "no certificate");
        }
        assert!(serve(&[
            "--tls-cert",
            "c.pem",
            "--tls-key",
            "k.pem",
            "--client-ca",
            "ca.pem",
            "--node-identity",
            "no-equals-sign"
        ])
        .is_err());
        assert!(serve(&["--identity-rule", "cn"]).is_err());
    }
}
