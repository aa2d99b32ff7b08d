//! Which store each client reads when they do not all read one: a gated rollout's cohort reads
//! its canary store (see `crate::rollout`). The transport asks, on a stream's first request with
//! a node (`stream.rs`), and tells the picker's own observer of every stream what it was sent
//! and what its client answered; the rollout answers and keeps its gate. The transport knows
//! nothing else of it: this is the seam that keeps the transport below the rollout.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::observer::{OwnObserver, StreamOpened};
use crate::metrics::Metrics;
use crate::protocol::session::ClientNode;
use crate::protocol::Nonce;
use crate::store::{Snapshot, Store};
use crate::types::TypeMap;

/// Picks the store each client reads (a gated rollout implements it), and observes the streams
/// with state of its own per stream: `None` for a stream not (yet) known to read a picked store.
pub(crate) trait StorePicker: OwnObserver<Stream = Option<SentGenerations>> + Any {
    /// The store every client reads unless picked otherwise (a rollout's stable store): the
    /// server's store.
    fn default_store(&self) -> &Store;

    /// The store a client with the encoded `node` reads.
    fn store_for(&self, node: &[u8]) -> Store;

    /// Before a request that says what its client holds is handled: a wait the stream's answer
    /// must wait out first, when what the client holds shows it may be behind no longer (a
    /// gated rollout: a client outside the cohort holding the candidate's versions, which
    /// another replica may have promoted). `store` is the store the stream reads; `node` the
    /// request's encoded node while the stream has none yet (its store is picked next). The
    /// wait is bounded by the picker. None: answer now (every picker but a rollout's).
    fn hold(&self, _hold: Hold<'_>) -> Option<Pin<Box<dyn Future<Output = ()> + Send>>> {
        None
    }

    /// Counts into the server's `metrics`.
    fn set_metrics(&self, metrics: Metrics);

    /// What status tools show of the picking (a gated rollout's `GET /rollout` JSON), carried
    /// in CSDS answers' metadata.
    fn status_json(&self) -> serde_json::Value;

    /// Itself, for the layer that made it to find it again (the rollout behind a server's
    /// handle).
    fn as_any(&self) -> &dyn Any;
}

/// A request that says what its client holds, as [`StorePicker::hold`] is asked about it.
pub(crate) struct Hold<'a> {
    /// The stream's id, for logs.
    pub(crate) stream: u64,
    /// The store the stream reads now.
    pub(crate) store: &'a Store,
    /// The request's encoded node, while the stream has none yet (its store is picked from it).
    pub(crate) node: Option<&'a [u8]>,
    /// The stream's client, once its node is known (else `node` is).
    pub(crate) client: Option<&'a ClientNode>,
    /// The type the request is about.
    pub(crate) type_url: &'a str,
    /// What it holds of it.
    pub(crate) held: Held<'a>,
}

/// What a client says it holds of a type when it (re)subscribes.
#[derive(Clone, Copy)]
pub(crate) enum Held<'a> {
    /// SotW: the type's `version_info`.
    Version(&'a str),
    /// Delta: `initial_resource_versions`, name to version.
    Resources(&'a crate::protocol::delta::InitialVersions),
    /// A one-shot request (`Fetch*`, a REST poll): its `version_info`, and the version its
    /// answer would have from a given state (None: it would be refused).
    Answer {
        version: &'a str,
        of: &'a (dyn Fn(&Snapshot) -> Option<String> + Sync),
    },
}

/// What a stream that reads a picked store was sent last, per type: the nonce, and the
/// generation of the store the response was built from (what an ACK or NACK of it is about).
#[derive(Default)]
pub(crate) struct SentGenerations(TypeMap<(Nonce, u64)>);

impl SentGenerations {
    /// Records the response with `nonce` of `type_url`, built from the store at `generation`.
    pub(crate) fn sent(&mut self, type_url: &std::sync::Arc<str>, nonce: Nonce, generation: u64) {
        match self.0.get_mut(type_url) {
            Some(last) => *last = (nonce, generation),
            None => self.0.insert(type_url.clone(), (nonce, generation)),
        }
    }

    /// The generation of the response with `nonce` of `type_url`, when it is the last one sent.
    pub(crate) fn generation(&self, type_url: &str, nonce: &str) -> Option<u64> {
        let (sent, generation) = self.0.get(type_url)?;
        (sent.as_str() == nonce).then_some(*generation)
    }
}

/// Picks the store each client reads, for a program that serves different clients different
/// states from stores of its own (`xdsd relay --aggregate-by`: each group of clients reads its
/// group's store): give it to [`crate::XdsServerBuilder::store_picker`]. The server asks on a
/// stream's first request with a node (and on each one-shot request, by its node); the stream
/// reads and watches that store from then on.
pub trait PickStore: Send + Sync + 'static {
    /// The store a client with the encoded `node` reads; `None`: the server's own.
    fn store_for(&self, node: &[u8]) -> Option<Store>;
}

/// A [`PickStore`] as the transport's picker: it observes nothing.
pub(crate) struct Picked {
    /// The server's store.
    pub(crate) default: Store,
    pub(crate) picker: Arc<dyn PickStore>,
}

impl OwnObserver for Picked {
    type Stream = Option<SentGenerations>;

    fn stream_opened(&self, _event: &StreamOpened<'_>) -> Option<SentGenerations> {
        None
    }
}

impl StorePicker for Picked {
    fn default_store(&self) -> &Store {
        &self.default
    }

    fn store_for(&self, node: &[u8]) -> Store {
        self.picker
            .store_for(node)
            .unwrap_or_else(|| self.default.clone())
    }

    fn set_metrics(&self, _metrics: Metrics) {}

    /// Nothing to show: no rollout.
    fn status_json(&self) -> serde_json::Value {
        serde_json::Value::Null
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
