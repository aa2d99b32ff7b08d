//! TLS and mutual TLS on the xDS port, with rustls: the handshake is done here, per accepted
//! connection and under a time limit, so that a slow or broken client holds up no other; the
//! certificate, key and client CA are read again when their files change; the client
//! certificate's identity is read for the session to bind the node to (see
//! `protocol::identity`).
//!
//! Each connection, TLS or not, carries a [`ConnInfo`] that tonic puts in every request's
//! extensions: the stream, `Fetch*` and REST handlers read the peer's address, certificates and
//! identity from there.

use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio_rustls::rustls::crypto::{ring, CryptoProvider};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::transport::server::Connected;
use tracing::{debug, info, warn};
use x509_parser::extensions::GeneralName;

use super::budget::Budget;
use crate::protocol::identity::{IdentityBinding, NodeIdentityRules};
use crate::protocol::session::{Machine, Session};

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
    options: TlsOptions,
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

    fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.current())
    }

    /// The identity of a client certificate, and what it binds.
    fn peer(&self, certificates: Vec<CertificateDer<'static>>) -> PeerTls {
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

/// What a request's connection is: put in every request's extensions by the server.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ConnInfo {
    /// The client's address.
    pub remote_addr: Option<SocketAddr>,
    /// The address it connected to.
    pub local_addr: Option<SocketAddr>,
    /// `None`: plaintext.
    pub tls: Option<Arc<PeerTls>>,
    /// The bytes of this connection's unfinished requests (see `budget`).
    pub(crate) request_bytes: Arc<Budget>,
    /// The resource names this connection's streams subscribe to (see `budget`).
    pub(crate) names: Arc<Budget>,
    /// The connection's number in this process (from 1), which its streams' watchers are
    /// grouped by: the store wakes a connection's streams one after another.
    pub(crate) id: u64,
    /// Flips when the connection is past its max age and grace (see
    /// [`ServerOptions::max_connection_age`](super::grpc::ServerOptions::max_connection_age)):
    /// its streams then end with UNAVAILABLE.
    pub(crate) retire: Arc<watch::Sender<bool>>,
}

impl ConnInfo {
    fn of(tcp: &TcpStream) -> ConnInfo {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        ConnInfo {
            remote_addr: tcp.peer_addr().ok(),
            local_addr: tcp.local_addr().ok(),
            tls: None,
            request_bytes: Arc::default(),
            names: Arc::default(),
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            retire: Arc::new(watch::Sender::new(false)),
        }
    }

    /// The identity binding of a connection's requests.
    pub fn binding(&self) -> Option<&IdentityBinding> {
        self.tls.as_ref().and_then(|t| t.binding.as_ref())
    }
}

/// What a connection's client may have: the node its certificate identity binds it to, and
/// whether secrets may reach it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Access {
    pub(crate) binding: Option<IdentityBinding>,
    /// Secrets are refused: a plaintext connection from another host would carry private keys
    /// in the clear across the network.
    pub(crate) refuse_secrets: bool,
    /// The names the connection's streams subscribe to (one of its own when the connection is
    /// not known).
    pub(crate) names: Arc<Budget>,
    /// [`ConnInfo::id`]; 0 when the connection is not known.
    pub(crate) connection: u64,
    /// [`ConnInfo::retire`]: flips when the connection's streams are to end.
    pub(crate) retired: Option<watch::Receiver<bool>>,
}

impl Access {
    /// The access of a connection; `allow_plaintext_secrets` is
    /// [`ServerOptions::allow_plaintext_secrets`](super::grpc::ServerOptions::allow_plaintext_secrets).
    /// Without a `ConnInfo` (the routes mounted on a server of one's own, which does its own TLS)
    /// nothing is refused.
    pub(crate) fn of(info: Option<&ConnInfo>, allow_plaintext_secrets: bool) -> Access {
        let Some(info) = info else {
            return Access::default();
        };
        let loopback = info.remote_addr.is_some_and(|a| a.ip().is_loopback());
        Access {
            binding: info.binding().cloned(),
            refuse_secrets: info.tls.is_none() && !loopback && !allow_plaintext_secrets,
            names: info.names.clone(),
            connection: info.id,
            retired: Some(info.retire.subscribe()),
        }
    }

    /// The bound identity, for logs.
    pub(crate) fn identity(&self) -> Option<&str> {
        self.binding.as_ref().map(|b| &*b.identity)
    }

    /// Applies it to a client's session.
    pub(crate) fn apply<M: Machine>(&self, session: &mut Session<M>) {
        if let Some(binding) = &self.binding {
            session.bind_identity(binding.clone());
        }
        if self.refuse_secrets {
            session.refuse_secrets();
        }
    }
}

/// The peer address and access of a request, from its HTTP extensions.
pub(crate) fn peer_of_http(
    extensions: &http::Extensions,
    allow_plaintext_secrets: bool,
) -> (Option<SocketAddr>, Access) {
    match extensions.get::<ConnInfo>() {
        Some(info) => (
            info.remote_addr,
            Access::of(Some(info), allow_plaintext_secrets),
        ),
        // Routes mounted on a tonic server of one's own.
        None => (
            extensions
                .get::<tonic::transport::server::TcpConnectInfo>()
                .and_then(|i| i.remote_addr()),
            Access::default(),
        ),
    }
}

/// The peer address and access of a request.
pub(crate) fn peer_of<T>(
    request: &tonic::Request<T>,
    allow_plaintext_secrets: bool,
) -> (Option<SocketAddr>, Access) {
    match request.extensions().get::<ConnInfo>() {
        Some(info) => (
            info.remote_addr,
            Access::of(Some(info), allow_plaintext_secrets),
        ),
        None => (request.remote_addr(), Access::default()),
    }
}

/// One accepted connection, plaintext or TLS, with its deadline for the first bytes of a request.
pub(crate) struct Conn {
    io: Io,
    info: ConnInfo,
    /// Until the first bytes of a request came: the deadline for them (see [`Preface`]).
    preface: Option<Preface>,
}

enum Io {
    Tcp(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// How many bytes a new connection must send before [`ServerOptions::preface_timeout`](super::grpc::ServerOptions::preface_timeout): the
/// HTTP/2 connection preface (24 bytes) and the header of the SETTINGS frame that must follow it
/// (9); an HTTP/1.1 REST request line is longer than that.
pub const PREFACE_BYTES: usize = 33;

/// The deadline of a connection that has not yet sent [`PREFACE_BYTES`]: a client that connects
/// and stalls (or trickles) is closed then, instead of holding a connection and its buffers for
/// ever (HTTP/2 keepalive pings only start once the preface is in).
struct Preface {
    deadline: Pin<Box<tokio::time::Sleep>>,
    timeout: Duration,
    left: usize,
}

impl Conn {
    fn new(io: Io, info: ConnInfo, preface_timeout: Duration) -> Conn {
        Conn {
            io,
            info,
            preface: Some(Preface {
                deadline: Box::pin(tokio::time::sleep(preface_timeout)),
                timeout: preface_timeout,
                left: PREFACE_BYTES,
            }),
        }
    }

    fn io(&mut self) -> Pin<&mut (dyn AsyncReadWrite + Send)> {
        match &mut self.io {
            Io::Tcp(io) => Pin::new(io),
            Io::Tls(io) => Pin::new(io.as_mut()),
        }
    }
}

/// Both halves of a connection's I/O, as one object.
trait AsyncReadWrite: AsyncRead + AsyncWrite + Unpin {}
impl<T: AsyncRead + AsyncWrite + Unpin> AsyncReadWrite for T {}

impl Connected for Conn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(preface) = &mut this.preface {
            if preface.deadline.as_mut().poll(cx).is_ready() {
                debug!(peer = ?this.info.remote_addr, timeout = ?preface.timeout, "closing a connection that sent no request in time");
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no request within the preface timeout",
                )));
            }
        }
        let before = buf.filled().len();
        let read = this.io().poll_read(cx, buf);
        if let (Poll::Ready(Ok(())), Some(preface)) = (&read, &mut this.preface) {
            preface.left = preface.left.saturating_sub(buf.filled().len() - before);
            if preface.left == 0 {
                this.preface = None;
            }
        }
        read
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().io().poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().io().poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        match &self.io {
            Io::Tcp(io) => io.is_write_vectored(),
            Io::Tls(io) => io.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().io().poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().io().poll_shutdown(cx)
    }
}

/// Connections in a handshake, finished or not, that the server has not taken yet.
const HANDSHAKED_QUEUE: usize = 64;

pub(crate) type Incoming = Pin<Box<dyn Stream<Item = io::Result<Conn>> + Send>>;

/// The connections of `listener`: plaintext, or with `tls` each after its TLS handshake, done
/// concurrently (a client that never finishes its handshake holds up no other, and is dropped
/// after the handshake timeout; at most [`TlsOptions::max_handshakes`] at once). Each must then
/// send the start of a request within `preface_timeout`. The listener is closed when the stream
/// is dropped.
pub(crate) fn incoming(
    listener: TcpListener,
    tls: Option<Arc<TlsState>>,
    preface_timeout: Duration,
) -> Incoming {
    let (tx, rx) = mpsc::channel(HANDSHAKED_QUEUE);
    match tls {
        Some(tls) => {
            tokio::spawn(reload_tls(tls.clone(), tx.clone()));
            tokio::spawn(accept_tls(listener, tls, preface_timeout, tx))
        }
        None => tokio::spawn(accept_plain(listener, preface_timeout, tx)),
    };
    Box::pin(ReceiverStream::new(rx).map(Ok))
}

/// How long the accept loop waits after a failed accept (out of file descriptors, say) before it
/// tries again: a failing accept is retried at once by default, which spins a core.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

async fn accept_plain(listener: TcpListener, preface_timeout: Duration, tx: mpsc::Sender<Conn>) {
    let mut failing = false;
    loop {
        tokio::select! {
            // The server stopped accepting: the listener closes with this task.
            _ = tx.closed() => return,
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => {
                    failing = false;
                    // Responses are small and latency matters: no Nagle delay.
                    let _ = tcp.set_nodelay(true);
                    let info = ConnInfo::of(&tcp);
                    if tx.send(Conn::new(Io::Tcp(tcp), info, preface_timeout)).await.is_err() {
                        return;
                    }
                }
                Err(error) => {
                    // Logged once per run of failures; open streams are served meanwhile.
                    if !std::mem::replace(&mut failing, true) {
                        warn!(%error, "cannot accept connections (out of file descriptors?): retrying every {ACCEPT_BACKOFF:?}");
                    }
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
        }
    }
}

/// Reads the certificate, key and CA files again when they change, until the server stops
/// accepting.
async fn reload_tls(tls: Arc<TlsState>, tx: mpsc::Sender<Conn>) {
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

async fn accept_tls(
    listener: TcpListener,
    tls: Arc<TlsState>,
    preface_timeout: Duration,
    tx: mpsc::Sender<Conn>,
) {
    let handshakes = Arc::new(Semaphore::new(
        tls.options.max_handshakes.clamp(1, Semaphore::MAX_PERMITS),
    ));
    // Whether the latest connection had to wait for a handshake slot: logged once per run.
    let mut full = false;
    loop {
        // A slot first: while every slot is taken, connections wait in the listen backlog.
        let slot = match handshakes.clone().try_acquire_owned() {
            Ok(slot) => {
                full = false;
                slot
            }
            Err(_) => {
                if !std::mem::replace(&mut full, true) {
                    warn!(
                        limit = tls.options.max_handshakes,
                        "TLS handshakes in progress reached their limit (--tls-max-handshakes): new connections wait until some finish"
                    );
                }
                tokio::select! {
                    _ = tx.closed() => return,
                    slot = handshakes.clone().acquire_owned() => match slot {
                        Ok(slot) => slot,
                        Err(_) => return,
                    },
                }
            }
        };
        tokio::select! {
            // The server stopped accepting: the listener closes with this task.
            _ = tx.closed() => return,
            accepted = listener.accept() => match accepted {
                Ok((tcp, peer)) => {
                    let _ = tcp.set_nodelay(true);
                    tokio::spawn(handshake(tcp, peer, tls.clone(), preface_timeout, tx.clone(), slot));
                }
                Err(error) => {
                    debug!(%error, "accept failed");
                    // Out of file descriptors, say: give the others time to close some.
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
        }
    }
}

async fn handshake(
    tcp: TcpStream,
    peer: SocketAddr,
    tls: Arc<TlsState>,
    preface_timeout: Duration,
    tx: mpsc::Sender<Conn>,
    slot: OwnedSemaphorePermit,
) {
    let info = ConnInfo::of(&tcp);
    let acceptor = tls.acceptor();
    let stream = match tokio::time::timeout(tls.options.handshake_timeout, acceptor.accept(tcp))
        .await
    {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            // rustls errors (a bad or missing client certificate, a plaintext client) are the
            // client's misconfiguration; I/O errors (a reset) are noise.
            match error
                .get_ref()
                .and_then(|e| e.downcast_ref::<rustls::Error>())
            {
                Some(tls_error) => {
                    warn!(peer = %peer, error = %tls_error, "TLS handshake failed")
                }
                None => debug!(peer = %peer, %error, "TLS handshake failed"),
            }
            return;
        }
        Err(_) => {
            debug!(peer = %peer, timeout = ?tls.options.handshake_timeout, "TLS handshake timed out");
            return;
        }
    };
    let certificates = stream
        .get_ref()
        .1
        .peer_certificates()
        .map(|c| c.to_vec())
        .unwrap_or_default();
    let peer_tls = tls.peer(certificates);
    debug!(
        peer = %peer,
        identity = ?peer_tls.identity.as_deref(),
        "TLS handshake done"
    );
    let info = ConnInfo {
        tls: Some(Arc::new(peer_tls)),
        ..info
    };
    // The slot is given back once the handshake is done, not when the server takes the
    // connection.
    drop(slot);
    let conn = Conn::new(Io::Tls(Box::new(stream)), info, preface_timeout);
    let _ = tx.send(conn).await;
}

/// [`incoming`] connections as an axum listener (the admin API).
pub(crate) struct Listener {
    incoming: Incoming,
    local: Option<SocketAddr>,
}

impl Listener {
    pub(crate) fn new(
        listener: TcpListener,
        tls: Option<Arc<TlsState>>,
        preface_timeout: Duration,
    ) -> Listener {
        let local = listener.local_addr().ok();
        Listener {
            incoming: incoming(listener, tls, preface_timeout),
            local,
        }
    }
}

impl axum::serve::Listener for Listener {
    type Io = Conn;
    type Addr = Option<SocketAddr>;

    async fn accept(&mut self) -> (Conn, Option<SocketAddr>) {
        loop {
            match self.incoming.next().await {
                Some(Ok(conn)) => {
                    let peer = conn.info.remote_addr;
                    return (conn, peer);
                }
                Some(Err(_)) => continue,
                // The accept task is gone: no more connections.
                None => std::future::pending().await,
            }
        }
    }

    fn local_addr(&self) -> io::Result<Option<SocketAddr>> {
        Ok(self.local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(remote: &str, tls: bool) -> ConnInfo {
        ConnInfo {
            remote_addr: remote.parse().ok(),
            local_addr: None,
            request_bytes: Arc::default(),
            names: Arc::default(),
            id: 1,
            retire: Arc::new(watch::Sender::new(false)),
            tls: tls.then(|| {
                Arc::new(PeerTls {
                    certificates: Vec::new(),
                    identity: None,
                    binding: None,
                })
            }),
        }
    }

    #[test]
    fn secrets_are_refused_only_on_plaintext_connections_from_other_hosts_unless_allowed() {
        let refused = |remote: &str, tls: bool, allow: bool| {
            Access::of(Some(&info(remote, tls)), allow).refuse_secrets
        };
        assert!(refused("10.0.0.7:4000", false, false));
        assert!(refused("[2001:db8::1]:4000", false, false));
        assert!(!refused("10.0.0.7:4000", true, false), "TLS");
        assert!(!refused("10.0.0.7:4000", false, true), "allowed");
        assert!(!refused("127.0.0.1:4000", false, false), "loopback");
        assert!(!refused("[::1]:4000", false, false), "loopback");
        // An unknown peer over plaintext is not known to be local.
        assert!(refused("unknown", false, false));
        // Routes mounted on a server of one's own: its TLS is its business.
        assert!(!Access::of(None, false).refuse_secrets);
    }
}
