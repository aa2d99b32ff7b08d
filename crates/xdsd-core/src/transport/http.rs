//! An HTTP/1.1 listener for a program's own endpoints beside the xDS server (the `xdsd` binary's
//! admin API): the same accept loop as the xDS port — TLS reloaded when its files change, a
//! handshake and a first request each within a time limit.

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;

use super::conn::Listener;
use super::options::DEFAULT_PREFACE_TIMEOUT;
use super::tls::{TlsError, TlsOptions, TlsState};

/// TLS (and with a client CA, mutual TLS) for an HTTP/1.1 listener: its certificate files are
/// read again when they change, as on the xDS port. No node is bound to the client's identity
/// here: with a client CA, any client it signed may connect.
#[derive(Clone)]
pub struct HttpTls(Arc<TlsState>);

impl HttpTls {
    /// Reads the files; an error if one is missing or wrong.
    pub fn load(options: TlsOptions) -> Result<HttpTls, TlsError> {
        TlsState::load_http1(options).map(|state| HttpTls(Arc::new(state)))
    }
}

/// Serves `router` over HTTP/1.1 on `listener`, over TLS when `tls` is given, until `signal`
/// completes. Either way a connection must send its request within
/// [`DEFAULT_PREFACE_TIMEOUT`] of connecting (or of its handshake).
pub async fn serve_http1(
    listener: TcpListener,
    tls: Option<HttpTls>,
    router: axum::Router,
    signal: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = Listener::new(listener, tls.map(|t| t.0), DEFAULT_PREFACE_TIMEOUT);
    axum::serve(listener, router)
        .with_graceful_shutdown(signal)
        .await
}
