//! What every stream of one server shares.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::watch;

use super::budget::{Budget, Charges, NameCharge};
use super::conn::ConnInfo;
use super::fanout::Fanout;
use super::observer::StreamObserver;
use super::options::ServerOptions;
use super::picker::StorePicker;
use super::stats::StreamRegistry;
use crate::metrics::Metrics;
use crate::ready::Readiness;
use crate::store::Store;

pub(crate) struct ServerContext {
    pub(crate) store: Store,
    pub(crate) options: ServerOptions,
    next_stream: AtomicU64,
    /// Each client's record and the stream counters (CSDS, the admin API, the status page read
    /// them), kept by one of `observers`.
    pub(crate) streams: Arc<StreamRegistry>,
    /// Flips to true when the server shuts down: every stream then ends with UNAVAILABLE, so
    /// that a graceful shutdown does not wait forever for streams that never end on their own.
    pub(crate) shutdown: watch::Receiver<bool>,
    /// Whether the server reports itself ready (gRPC health, the admin API's /readyz), shutdown
    /// aside.
    pub(crate) ready: Readiness,
    /// The bytes of all connections' unfinished requests (see `budget`).
    pub(crate) request_bytes: Arc<Budget>,
    /// The resource names all streams subscribe to (see `budget`).
    pub(crate) names: Arc<Budget>,
    /// Which store each client reads, when they do not all read `store` (a gated rollout: the
    /// cohort's clients read its canary store, the others `store`).
    pub(crate) picker: Option<Arc<dyn StorePicker>>,
    /// Every observer of the streams: the server's own, then the embedder's.
    pub(crate) observers: Fanout,
}

impl ServerContext {
    pub(crate) fn new(
        store: Store,
        options: ServerOptions,
        shutdown: watch::Receiver<bool>,
        metrics: Metrics,
    ) -> ServerContext {
        let streams = Arc::new(StreamRegistry::new(metrics));
        ServerContext {
            store,
            options,
            next_stream: AtomicU64::new(0),
            observers: Fanout::new(streams.clone(), None, Arc::new([])),
            streams,
            shutdown,
            ready: Readiness::default(),
            request_bytes: Arc::default(),
            names: Arc::default(),
            picker: None,
        }
    }

    /// Lets `picker` pick the store of each client (and observe every stream), and tells
    /// `observers` of every stream, after the server's own observers.
    pub(crate) fn set_observers(
        &mut self,
        picker: Option<Arc<dyn StorePicker>>,
        observers: Arc<[Arc<dyn StreamObserver>]>,
    ) {
        self.observers = Fanout::new(self.streams.clone(), picker.clone(), observers);
        self.picker = picker;
    }

    /// The store a client with the encoded `node` reads: the one the picker picks (a gated
    /// rollout's canary store for a node of its cohort), else the server's.
    pub(crate) fn store_for(&self, node: &[u8]) -> Store {
        match &self.picker {
            Some(picker) => picker.store_for(node),
            None => self.store.clone(),
        }
    }

    /// Ready, and not shutting down.
    pub(crate) fn serving(&self) -> bool {
        self.ready.get() && !*self.shutdown.borrow()
    }

    /// Where a request of connection `conn` charges its unfinished bytes (a connection of its
    /// own when it is not known: the routes mounted on a server of one's own).
    pub(crate) fn charges(&self, conn: Option<&ConnInfo>) -> Charges {
        Charges {
            connection: conn.map(|c| c.request_bytes.clone()).unwrap_or_default(),
            connection_limit: self.options.max_buffered_request_bytes,
            server: self.request_bytes.clone(),
            server_limit: self.options.max_buffered_request_bytes_total,
        }
    }

    /// The charge of a stream's subscribed names, on its connection's `names` and the server's.
    pub(crate) fn name_charge(&self, connection: Arc<Budget>) -> NameCharge {
        NameCharge::new(
            connection,
            self.options.max_names_per_connection,
            self.names.clone(),
            self.options.max_names_total,
        )
    }

    pub(crate) fn next_stream_id(&self) -> u64 {
        self.next_stream.fetch_add(1, Ordering::Relaxed) + 1
    }
}
