//! What every stream of one server shares.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::watch;

use super::grpc::ServerOptions;
use super::metrics::Metrics;
use super::stats::StreamRegistry;
use crate::store::Store;

pub(crate) struct ServerContext {
    pub(crate) store: Store,
    pub(crate) options: ServerOptions,
    next_stream: AtomicU64,
    pub(crate) streams: StreamRegistry,
    /// Flips to true when the server shuts down: every stream then ends with UNAVAILABLE, so
    /// that a graceful shutdown does not wait forever for streams that never end on their own.
    pub(crate) shutdown: watch::Receiver<bool>,
    /// Whether the server reports itself ready (gRPC health, the admin API's /readyz), shutdown
    /// aside.
    pub(crate) ready: watch::Sender<bool>,
}

impl ServerContext {
    pub(crate) fn new(
        store: Store,
        options: ServerOptions,
        shutdown: watch::Receiver<bool>,
        metrics: Metrics,
    ) -> ServerContext {
        ServerContext {
            store,
            options,
            next_stream: AtomicU64::new(0),
            streams: StreamRegistry::new(metrics),
            shutdown,
            ready: watch::Sender::new(true),
        }
    }

    /// Ready, and not shutting down.
    pub(crate) fn serving(&self) -> bool {
        *self.ready.borrow() && !*self.shutdown.borrow()
    }

    pub(crate) fn next_stream_id(&self) -> u64 {
        self.next_stream.fetch_add(1, Ordering::Relaxed) + 1
    }
}
