//! `--admin-listen`: the admin HTTP API beside the xDS server (`api`), its status page
//! (`page`), and the fleet view of a CSDS answer that the page and `xdsd status` share
//! (`fleet`). They read the server through the core's public surface: a `ServerHandle`'s
//! clients, preview, snapshot, metrics and rollout, the `clients` records, and
//! `xdsd_core::http` for the listener and its TLS.

pub mod api;
pub mod fleet;
pub mod history;
pub mod page;
pub mod served;

use std::net::SocketAddr;

use anyhow::Context;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tracing::{info, warn};
use xdsd_core::http::HttpTls;
use xdsd_core::ServerHandle;
use xdsd_core::TlsOptions;
use xdsd_etcd::EtcdOptions;

/// The default `--admin-listen`: loopback only, since the API shows every client's node.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:18001";

/// `--admin-listen`: an address, or "off".
pub fn parse_admin_listen(text: &str) -> Result<AdminListen, String> {
    if text.eq_ignore_ascii_case("off") {
        return Ok(AdminListen(None));
    }
    text.parse::<SocketAddr>()
        .map(|a| AdminListen(Some(a)))
        .map_err(|_| format!("{text:?} is neither an address (e.g. 127.0.0.1:18001) nor off"))
}

/// Where the admin API listens; None when it is off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdminListen(pub Option<SocketAddr>);

/// A running admin API.
pub struct Admin {
    stop: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

/// Binds the admin API's address (nothing when it is off), before anything is served.
pub async fn bind(listen: AdminListen) -> anyhow::Result<Option<tokio::net::TcpListener>> {
    let Some(addr) = listen.0 else {
        return Ok(None);
    };
    tokio::net::TcpListener::bind(addr)
        .await
        .map(Some)
        .map_err(|e| crate::bind_error(e, addr, "--admin-listen"))
}

/// Serves the admin API on `listener` (nothing when it is off), over TLS with `tls`, until
/// [`Admin::stop`]; its status page says the resources come from `source`, and with `history`
/// (an etcd prefix), `/history` and the page read that prefix's history, and show which
/// revision this replica and its `peers` (`--peers`) serve.
pub fn start(
    listener: Option<tokio::net::TcpListener>,
    tls: Option<TlsOptions>,
    handle: ServerHandle,
    source: String,
    history: Option<EtcdOptions>,
    peers: Vec<String>,
) -> anyhow::Result<Option<Admin>> {
    let Some(listener) = listener else {
        return Ok(None);
    };
    let tls = tls
        .map(HttpTls::load)
        .transpose()
        .context("cannot set up TLS for the admin API")?;
    let bound = listener.local_addr().context("reading the admin address")?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    info!(
        "admin API listening on {scheme}://{bound} ({})",
        served_paths(history.is_some(), handle.rollout().is_some())
    );
    if tls.is_none() && !bound.ip().is_loopback() {
        warn!(
            addr = %bound,
            "the admin API is plaintext on a non-loopback address: /clients shows every client's node and errors; consider --admin-tls"
        );
    }
    let (stop, stopped) = oneshot::channel::<()>();
    let info = page::PageInfo {
        version: format!("xdsd {}", env!("CARGO_PKG_VERSION")),
        source,
    };
    let history = history.map(|options| {
        history::HistorySource::new(options, served::Replicas::new(handle.clone(), peers))
    });
    let task = tokio::spawn(api::serve(
        listener,
        handle,
        tls,
        info,
        history,
        async move {
            let _ = stopped.await;
        },
    ));
    Ok(Some(Admin { stop, task }))
}

/// The paths the admin API serves, as its start line lists them: `/history` only on an etcd
/// prefix, `/rollout` only with a gated rollout (both are 404, saying why, otherwise).
fn served_paths(history: bool, rollout: bool) -> String {
    let mut paths = String::from("/ status page, /healthz, /readyz, /clients, /config, /metrics");
    if history {
        paths.push_str(", /history");
    }
    if rollout {
        paths.push_str(", /rollout");
    }
    paths
}

impl Admin {
    pub async fn stop(self) {
        let _ = self.stop.send(());
        match tokio::time::timeout(xdsd_core::defaults::SHUTDOWN_GRACE, self.task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => warn!("the admin API ended with an error: {e}"),
            Ok(Err(e)) => warn!("the admin API task ended abnormally: {e}"),
            // A client holding a connection open: the process exits all the same.
            Err(_) => {}
        }
    }
}
