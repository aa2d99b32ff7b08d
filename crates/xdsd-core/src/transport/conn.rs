//! A connection to the server, TLS or not: the accept loops (plaintext, or a TLS handshake per
//! connection under a time limit, so that a slow or broken client holds up no other; see `tls`
//! for TLS's own options and reloading), the first bytes of a request awaited within the
//! preface timeout, each connection served until its client closes it or its age and grace are
//! over, and closed on shutdown after the grace period.
//!
//! Each connection carries a [`ConnInfo`] that tonic puts in every request's extensions: the
//! stream, `Fetch*` and REST handlers read the peer's address, certificates and identity from
//! there, and what it may be sent ([`Access`]).

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnectionBuilder;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio_rustls::rustls;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::body::Body;
use tonic::service::Routes;
use tonic::transport::server::Connected;
use tracing::{debug, warn};

use super::budget::Budget;
use super::coalesce::Coalesced;
use super::options::{MAX_CONNECTION_AGE_JITTER, SHUTDOWN_GRACE};
use super::tls::{reload_tls, PeerTls, TlsState};
use crate::protocol::identity::IdentityBinding;
use crate::protocol::session::{Machine, Session};

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

/// The age and grace of every connection (see [`ServerOptions::max_connection_age`]).
pub(crate) struct ConnectionAge {
    pub(crate) age: Option<Duration>,
    pub(crate) grace: Duration,
    /// Random keys, to draw each connection's jitter from.
    pub(crate) seed: std::collections::hash_map::RandomState,
}

impl ConnectionAge {
    /// The age and grace of a new connection: the age drawn within the jitter.
    pub(crate) fn of(&self) -> Option<(Duration, Duration)> {
        use std::hash::BuildHasher;
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let age = self.age?;
        let draw = self
            .seed
            .hash_one(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        // Uniform in [-1, 1].
        let unit = (draw >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
        Some((
            age.mul_f64(1.0 + MAX_CONNECTION_AGE_JITTER * unit),
            self.grace,
        ))
    }
}

/// Serves one connection until it ends, or `drain` flips (it is then told to go away and ends
/// when its streams have; `Closable` closes it after the grace period), or it reaches its `age`:
/// it is then told to go away, its streams end with UNAVAILABLE the grace later, and it is
/// closed [`SHUTDOWN_GRACE`] after that if its client has not closed it.
pub(crate) async fn serve_connection(
    builder: Arc<ConnectionBuilder<TokioExecutor>>,
    io: Closable,
    service: WithConnInfo,
    mut drain: watch::Receiver<bool>,
    age: Option<(Duration, Duration)>,
) {
    let retire = service.info.retire.clone();
    let conn = builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(service));
    tokio::pin!(conn);
    let aging = async move {
        let Some((age, grace)) = age else {
            return std::future::pending().await;
        };
        tokio::time::sleep(age).await;
        grace
    };
    tokio::pin!(aging);
    // When the connection is closed (past its age, grace and the streams' final wait).
    let mut deadline: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(std::future::pending());
    let (mut draining, mut aged) = (false, false);
    loop {
        tokio::select! {
            served = &mut conn => {
                if let Err(error) = served {
                    debug!(error = %error, "connection ended");
                }
                return;
            }
            changed = drain.wait_for(|d| *d), if !draining => {
                draining = true;
                if changed.is_ok() {
                    conn.as_mut().graceful_shutdown();
                }
            }
            grace = &mut aging, if !aged => {
                aged = true;
                debug!("connection reached its max age (--max-connection-age): telling it to go away");
                conn.as_mut().graceful_shutdown();
                let retire = retire.clone();
                deadline = Box::pin(async move {
                    tokio::time::sleep(grace).await;
                    // Its streams end, as at shutdown.
                    retire.send_replace(true);
                    tokio::time::sleep(SHUTDOWN_GRACE).await;
                });
            }
            () = &mut deadline => {
                debug!("connection past its max age and grace: closed");
                return;
            }
        }
    }
}

/// The routes, serving the requests of one connection: each carries its [`ConnInfo`].
#[derive(Clone)]
pub(crate) struct WithConnInfo {
    pub(crate) routes: Routes,
    pub(crate) info: ConnInfo,
}

impl<B> tower_service::Service<http::Request<B>> for WithConnInfo
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = <Routes as tower_service::Service<http::Request<Body>>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        tower_service::Service::<http::Request<Body>>::poll_ready(&mut self.routes, cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let mut req = req.map(Body::new);
        req.extensions_mut().insert(self.info.clone());
        self.routes.call(req)
    }
}

/// A connection that [`XdsServer::serve`] can close: once `closing` flips (or its sender is
/// gone), every read and write fails, so that the HTTP/2 connection driving it ends, whatever
/// state its streams are in.
pub(crate) struct Closable {
    io: Coalesced<Conn>,
    closing: Pin<Box<dyn Future<Output = ()> + Send>>,
    closed: bool,
    /// This connection's place under [`ServerOptions::max_connections`], given back on close.
    _permit: OwnedSemaphorePermit,
}

impl Closable {
    pub(crate) fn new(
        io: Conn,
        mut closing: watch::Receiver<bool>,
        permit: OwnedSemaphorePermit,
    ) -> Closable {
        Closable {
            io: Coalesced::new(io),
            closing: Box::pin(async move {
                let _ = closing.wait_for(|close| *close).await;
            }),
            closed: false,
            _permit: permit,
        }
    }

    /// Whether the connection is closed; if not, `cx` is woken when it is.
    fn poll_closed(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.closed && self.closing.as_mut().poll(cx).is_ready() {
            self.closed = true;
        }
        self.closed
    }

    fn closed_error() -> io::Error {
        io::Error::new(
            io::ErrorKind::ConnectionAborted,
            "xdsd is shutting down: connection closed after the grace period",
        )
    }
}

impl AsyncRead for Closable {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.poll_closed(cx) {
            return Poll::Ready(Err(Closable::closed_error()));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Closable {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.poll_closed(cx) {
            return Poll::Ready(Err(Closable::closed_error()));
        }
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.poll_closed(cx) {
            return Poll::Ready(Err(Closable::closed_error()));
        }
        Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.poll_closed(cx) {
            return Poll::Ready(Err(Closable::closed_error()));
        }
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.poll_closed(cx) {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

impl Connected for Closable {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        self.io.get_ref().connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::options::ServerOptions;

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

    #[test]
    fn each_connection_s_age_is_drawn_within_ten_percent_either_side() {
        let age = ConnectionAge {
            age: Some(Duration::from_secs(100)),
            grace: Duration::from_secs(7),
            seed: std::collections::hash_map::RandomState::new(),
        };
        let drawn: Vec<Duration> = (0..1000).map(|_| age.of().unwrap().0).collect();
        assert!(drawn
            .iter()
            .all(|d| (Duration::from_secs(90)..=Duration::from_secs(110)).contains(d)));
        // Spread over the whole range, not one value: both tenths at the ends are drawn.
        assert!(drawn.iter().any(|d| *d < Duration::from_secs(92)));
        assert!(drawn.iter().any(|d| *d > Duration::from_secs(108)));
        assert_eq!(age.of().unwrap().1, Duration::from_secs(7));
        let off = ConnectionAge { age: None, ..age };
        assert_eq!(off.of(), None);
        assert_eq!(
            ServerOptions::default()
                .max_connection_age(Some(Duration::ZERO), Duration::from_secs(1))
                .max_connection_age,
            None
        );
    }
}
