//! TLS and mutual TLS on the xDS port, with rustls: the options, the server configuration built
//! from the certificate, key and client CA files, read again when they change, and the client
//! certificate's identity, for the session to bind the node to (see `protocol::identity`). The
//! handshake of each connection is done by the accept loop (`conn`).

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc;
use tokio_rustls::rustls::crypto::{ring, CryptoProvider};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;
use tracing::{info, warn};
use x509_parser::extensions::GeneralName;

use crate::protocol::identity::{IdentityBinding, NodeIdentityRules};

/// How long a client has to finish its TLS handshake by default.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// TLS handshakes in progress at once by default. A handshake costs CPU (two cores do a few
/// thousand a second) and tens of KiB until it ends; a fleet reconnecting at once waits its turn
/// in the listen backlog rather than taking the server's memory.
pub const DEFAULT_MAX_HANDSHAKES: usize = 1_024;

/// How often the certificate, key and client CA files are checked for changes by default.
pub const DEFAULT_RELOAD_INTERVAL: Duration = Duration::from_secs(1);

/// The largest certificate, key or CA file read (a CA bundle of a few hundred certificates is
/// well under this).
pub const MAX_PEM_BYTES: u64 = 16 * 1024 * 1024;

/// How a client certificate's identity is read, for binding the node to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum IdentityRule {
    /// The first URI SAN (a SPIFFE ID, `spiffe://trust-domain/path`), else the first DNS SAN,
    /// else the subject's common name; the node must be one the identity may claim
    /// ([`NodeIdentityRules`]).
    #[default]
    Spiffe,
    /// No binding: any client with a certificate the CA signed may claim any node.
    None,
}

impl FromStr for IdentityRule {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "spiffe" => Ok(IdentityRule::Spiffe),
            "none" => Ok(IdentityRule::None),
            _ => Err(format!("{s:?} is not an identity rule: spiffe or none")),
        }
    }
}

impl fmt::Display for IdentityRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IdentityRule::Spiffe => "spiffe",
            IdentityRule::None => "none",
        })
    }
}

/// TLS on an [`XdsServer`](super::grpc::XdsServer)'s port: a certificate chain and key (PEM
/// files), and with a client CA, mutual TLS: every client must present a certificate that CA
/// signed, and its node is bound to the certificate's identity ([`IdentityRule`]). The files
/// are read again when they change (checked every [`TlsOptions::reload_interval`]); open
/// connections keep the certificate they were made with.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TlsOptions {
    /// The server's certificate chain, leaf first (PEM).
    pub cert: PathBuf,
    /// The server's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// CA certificates (PEM) that client certificates must chain to; `None`: clients present
    /// none.
    pub client_ca: Option<PathBuf>,
    /// How a client certificate's identity is read and bound to the node (mutual TLS only).
    pub identity_rule: IdentityRule,
    /// Which nodes each identity may claim.
    pub node_rules: NodeIdentityRules,
    /// How long a TLS handshake may take before the connection is closed.
    pub handshake_timeout: Duration,
    /// How often the files are checked for changes (and read again when they change).
    pub reload_interval: Duration,
    /// TLS handshakes in progress at once; while they all are, new connections wait in the
    /// listen backlog. See [`DEFAULT_MAX_HANDSHAKES`].
    pub max_handshakes: usize,
}

impl TlsOptions {
    /// TLS with the certificate chain and key of these PEM files.
    pub fn from_pem(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> TlsOptions {
        TlsOptions {
            cert: cert.into(),
            key: key.into(),
            client_ca: None,
            identity_rule: IdentityRule::default(),
            node_rules: NodeIdentityRules::default(),
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            reload_interval: DEFAULT_RELOAD_INTERVAL,
            max_handshakes: DEFAULT_MAX_HANDSHAKES,
        }
    }

    /// Mutual TLS: clients must present a certificate signed by a CA of this PEM file.
    pub fn client_ca(mut self, ca: impl Into<PathBuf>) -> TlsOptions {
        self.client_ca = Some(ca.into());
        self
    }

    /// Sets how the client identity is read (see [`IdentityRule`]).
    pub fn identity_rule(mut self, rule: IdentityRule) -> TlsOptions {
        self.identity_rule = rule;
        self
    }

    /// Sets which nodes each identity may claim.
    pub fn node_rules(mut self, rules: NodeIdentityRules) -> TlsOptions {
        self.node_rules = rules;
        self
    }

    /// Sets [`TlsOptions::handshake_timeout`].
    pub fn handshake_timeout(mut self, timeout: Duration) -> TlsOptions {
        self.handshake_timeout = timeout;
        self
    }

    /// Sets [`TlsOptions::max_handshakes`] (at least 1).
    pub fn max_handshakes(mut self, handshakes: usize) -> TlsOptions {
        self.max_handshakes = handshakes.max(1);
        self
    }

    /// How often the files are checked for changes (at least every 10 ms).
    pub fn reload_interval(mut self, interval: Duration) -> TlsOptions {
        self.reload_interval = interval.max(Duration::from_millis(10));
        self
    }
}

/// Why the TLS files cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The error reading it.
        source: io::Error,
    },
    /// A file does not hold what it should.
    #[error("{path}: {detail}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },
    /// The certificate and the key are not a pair.
    #[error("the certificate {cert} and the key {key} do not go together: {detail}")]
    Mismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// Why they do not go together.
        detail: String,
    },
}

/// The TLS state of a serving server: the current configuration, and the files it came from.
pub(crate) struct TlsState {
    pub(crate) options: TlsOptions,
    provider: Arc<CryptoProvider>,
    /// h2 offered in ALPN (the xDS port; not the admin API, which speaks HTTP/1.1 only).
    h2: bool,
    /// HTTP/1.1 offered in ALPN (beside h2: REST-JSON is on).
    http1: AtomicBool,
    config: RwLock<Arc<ServerConfig>>,
    /// The files' stamps the current configuration (or the last failed attempt) was read at.
    stamps: Mutex<Vec<Option<Stamp>>>,
    rules: Arc<NodeIdentityRules>,
    /// The server's metrics, which count each reload (set when the server is built).
    metrics: std::sync::OnceLock<crate::metrics::Metrics>,
}

/// What tells that a file changed: its modification time, size and inode.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&meta);
    #[cfg(not(unix))]
    let inode = 0;
    Some(Stamp {
        modified: meta.modified().ok(),
        len: meta.len(),
        inode,
    })
}

fn read_pem(path: &Path) -> Result<Vec<u8>, TlsError> {
    let read = |source| TlsError::Read {
        path: path.to_owned(),
        source,
    };
    let mut bytes = Vec::new();
    // Bounded as it is read: the file may grow after a size check.
    io::Read::read_to_end(
        &mut io::Read::take(std::fs::File::open(path).map_err(read)?, MAX_PEM_BYTES + 1),
        &mut bytes,
    )
    .map_err(read)?;
    if bytes.len() as u64 > MAX_PEM_BYTES {
        return Err(TlsError::Invalid {
            path: path.to_owned(),
            detail: format!("more than the {MAX_PEM_BYTES} bytes a PEM file may have"),
        });
    }
    Ok(bytes)
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read_pem(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Invalid {
            path: path.to_owned(),
            detail: format!("not PEM certificates: {e}"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Invalid {
            path: path.to_owned(),
            detail: "no certificate (-----BEGIN CERTIFICATE-----) in it".into(),
        });
    }
    Ok(certs)
}

impl TlsState {
    /// Reads the files; an error if one is missing or wrong.
    pub(crate) fn load(options: TlsOptions) -> Result<TlsState, TlsError> {
        TlsState::load_with(options, true, false)
    }

    /// For an HTTP/1.1-only server (the admin API).
    pub(crate) fn load_http1(options: TlsOptions) -> Result<TlsState, TlsError> {
        TlsState::load_with(options, false, true)
    }

    fn load_with(options: TlsOptions, h2: bool, http1: bool) -> Result<TlsState, TlsError> {
        let provider = Arc::new(ring::default_provider());
        let stamps = files(&options).map(stamp).collect();
        let config = build(&options, &provider, alpn(h2, http1))?;
        Ok(TlsState {
            rules: Arc::new(options.node_rules.clone()),
            provider,
            h2,
            http1: AtomicBool::new(http1),
            config: RwLock::new(Arc::new(config)),
            stamps: Mutex::new(stamps),
            options,
            metrics: std::sync::OnceLock::new(),
        })
    }

    /// Counts each reload in `metrics` from now on.
    pub(crate) fn set_metrics(&self, metrics: crate::metrics::Metrics) {
        let _ = self.metrics.set(metrics);
    }

    fn stamps(&self) -> Vec<Option<Stamp>> {
        files(&self.options).map(stamp).collect()
    }

    pub(crate) fn options(&self) -> &TlsOptions {
        &self.options
    }

    /// Offers HTTP/1.1 in ALPN beside h2 (REST-JSON polling is on).
    pub(crate) fn set_http1(&self, on: bool) {
        self.http1.store(on, Ordering::Relaxed);
        let mut config = ServerConfig::clone(&self.current());
        config.alpn_protocols = self.alpn();
        if let Ok(mut current) = self.config.write() {
            *current = Arc::new(config);
        }
    }

    fn alpn(&self) -> Vec<Vec<u8>> {
        alpn(self.h2, self.http1.load(Ordering::Relaxed))
    }

    fn current(&self) -> Arc<ServerConfig> {
        match self.config.read() {
            Ok(config) => config.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn install(&self, config: ServerConfig, stamps: Vec<Option<Stamp>>) {
        match self.config.write() {
            Ok(mut current) => *current = Arc::new(config),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(config),
        }
        self.set_stamps(stamps);
    }

    fn set_stamps(&self, stamps: Vec<Option<Stamp>>) {
        if let Ok(mut current) = self.stamps.lock() {
            *current = stamps;
        }
    }

    /// Reads the files again if one changed since they were last read. A configuration that
    /// does not load is logged, and the current one kept, until the files change again.
    fn reload_if_changed(&self) {
        let stamps = self.stamps();
        let changed = match self.stamps.lock() {
            Ok(current) => stamps != *current,
            Err(_) => true,
        };
        if !changed {
            return;
        }
        match build(&self.options, &self.provider, self.alpn()) {
            Ok(config) => {
                self.install(config, stamps);
                if let Some(metrics) = self.metrics.get() {
                    metrics.tls_reload(true);
                }
                info!(cert = %self.options.cert.display(), "TLS certificate, key and client CA read again");
            }
            Err(error) => {
                self.set_stamps(stamps);
                if let Some(metrics) = self.metrics.get() {
                    metrics.tls_reload(false);
                }
                warn!(%error, "the TLS files changed but do not load: keeping the previous certificate");
            }
        }
    }

    pub(crate) fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.current())
    }

    /// The identity of a client certificate, and what it binds.
    pub(crate) fn peer(&self, certificates: Vec<CertificateDer<'static>>) -> PeerTls {
        let identity = certificates.first().and_then(identity_of);
        let binding = match (self.options.identity_rule, &self.options.client_ca) {
            (IdentityRule::Spiffe, Some(_)) => Some(IdentityBinding {
                identity: identity.clone().unwrap_or_else(|| "".into()),
                rules: self.rules.clone(),
            }),
            _ => None,
        };
        PeerTls {
            certificates,
            identity,
            binding,
        }
    }
}

/// The files of `options`: certificate, key and client CA.
fn files(options: &TlsOptions) -> impl Iterator<Item = &Path> {
    [Some(&options.cert), Some(&options.key)]
        .into_iter()
        .chain([options.client_ca.as_ref()])
        .flatten()
        .map(PathBuf::as_path)
}

/// The ALPN protocols offered: h2 (xDS), HTTP/1.1 (REST-JSON, the admin API).
fn alpn(h2: bool, http1: bool) -> Vec<Vec<u8>> {
    let mut alpn = Vec::new();
    if h2 {
        alpn.push(b"h2".to_vec());
    }
    if http1 {
        alpn.push(b"http/1.1".to_vec());
    }
    alpn
}

/// A configuration from the files as they are now.
fn build(
    o: &TlsOptions,
    provider: &Arc<CryptoProvider>,
    alpn: Vec<Vec<u8>>,
) -> Result<ServerConfig, TlsError> {
    let chain = certificates(&o.cert)?;
    let key_pem = read_pem(&o.key)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::Invalid {
        path: o.key.clone(),
        detail: format!("not a PEM private key: {e}"),
    })?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Invalid {
            path: o.cert.clone(),
            detail: e.to_string(),
        })?;
    let builder = match &o.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates(ca)? {
                roots.add(cert).map_err(|e| TlsError::Invalid {
                    path: ca.clone(),
                    detail: format!("not a CA certificate: {e}"),
                })?;
            }
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|e| TlsError::Invalid {
                        path: ca.clone(),
                        detail: e.to_string(),
                    })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Mismatch {
            cert: o.cert.clone(),
            key: o.key.clone(),
            detail: e.to_string(),
        })?;
    config.alpn_protocols = alpn;
    Ok(config)
}

/// The identity of a certificate: its first URI SAN, else its first DNS SAN, else its
/// subject's common name. `None`: it has none of these, or it does not parse.
pub fn identity_of(cert: &CertificateDer<'_>) -> Option<Arc<str>> {
    let (_, cert) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        let names = &san.value.general_names;
        let uri = names.iter().find_map(|n| match n {
            GeneralName::URI(uri) => Some(*uri),
            _ => None,
        });
        let dns = || {
            names.iter().find_map(|n| match n {
                GeneralName::DNSName(dns) => Some(*dns),
                _ => None,
            })
        };
        if let Some(name) = uri.or_else(dns) {
            return Some(name.into());
        }
    }
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(Arc::from)
}

/// Reads the certificate, key and CA files again when they change, until the server stops
/// accepting.
pub(crate) async fn reload_tls<T>(tls: Arc<TlsState>, tx: mpsc::Sender<T>) {
    let mut reload = tokio::time::interval(tls.options.reload_interval);
    reload.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tx.closed() => return,
            _ = reload.tick() => {
                let state = tls.clone();
                // File reads and certificate parsing, off the runtime's threads.
                let _ = tokio::task::spawn_blocking(move || state.reload_if_changed()).await;
            }
        }
    }
}

/// What a TLS client presented.
#[derive(Debug)]
#[non_exhaustive]
pub struct PeerTls {
    /// The client's certificate chain, leaf first (empty without mutual TLS).
    pub certificates: Vec<CertificateDer<'static>>,
    /// The leaf certificate's identity ([`identity_of`]).
    pub identity: Option<Arc<str>>,
    /// What the client's node is checked against, when the identity is bound.
    pub binding: Option<IdentityBinding>,
}
