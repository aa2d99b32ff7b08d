//! xdsd's library: the resource store, the sans-I/O xDS protocol state machines and the
//! transports that carry them. The `xdsd` binary and the `xdsd-source` crate build on it; other
//! programs can embed it: build an [`XdsServer`] over a [`Store`] with [`XdsServer::builder`],
//! feed the store from a [`Source`] of your own through a [`Feed`], and watch or refuse streams
//! with a [`StreamObserver`]. Gate changes through a canary cohort with a [`Rollout`].
//!
//! The types an embedder needs are here at the root; the server's defaults and bounds are in
//! [`defaults`], a client's record as [`ServerHandle::clients`] gives it in [`clients`], and the
//! sans-I/O session in [`session`], public on purpose (like quinn-proto's `Connection`): a
//! transport of one's own, or a test, drives it without a server.

#![warn(missing_docs)]

#[doc(hidden)]
pub mod hash;
pub(crate) mod logsafe;
pub mod metrics;
pub mod params;
pub(crate) mod protocol;
mod ready;
pub mod rollout;
pub mod source;
pub mod store;
#[cfg(test)]
mod test_rng;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod testing;
pub(crate) mod transport;
pub mod types;
pub mod xdstp;

pub use metrics::{MetricSeries, Metrics};
pub use protocol::identity::{Glob, NodeIdentityRule, NodeIdentityRules};
pub use protocol::session::{ClientNode, IDENTITY_PARAM, NODE_CLUSTER_PARAM};
pub use protocol::RequestKind;
pub use ready::Readiness;
pub use rollout::{Cohort, GateConfig, Rollout, Selector};
pub use source::{
    ChangeSet, CommitError, CommitTarget, DynSource, Feed, Rejection, Source, SourceEvent,
    SourceFuture, Update,
};
pub use store::{Change, ResourceInput, Store, UpdateSummary, WeakStore};
pub use transport::grpc::{ServerHandle, ServerOptions, XdsServer, XdsServerBuilder};
pub use transport::observer::{
    Acked, Asked, Flavor, Nacked, OneShotDone, RequestSeen, ResponseSent, StreamClosed,
    StreamObserver, StreamOpened,
};
pub use transport::picker::PickStore;
pub use transport::rest::JsonCodec;
pub use transport::tls::{identity_of, IdentityRule, PeerTls, TlsError, TlsOptions};
pub use transport::{ConnInfo, StreamCounters, StreamStatus};

/// The server's defaults and bounds, as [`ServerOptions::default`], [`TlsOptions`] and the
/// session take them (a program's flags default to them too).
pub mod defaults {
    pub use crate::protocol::session::{
        DEFAULT_ACK_WAIT, DEFAULT_MAX_NAMES, DEFAULT_MAX_RESPONSE_BYTES, MAX_PARAMS, MAX_PARAM_LEN,
        MAX_PARAM_SETS, MAX_TYPES,
    };
    pub use crate::transport::conn::PREFACE_BYTES;
    pub use crate::transport::grpc::{
        DEFAULT_MAX_BUFFERED_REQUEST_BYTES, DEFAULT_MAX_BUFFERED_REQUEST_BYTES_TOTAL,
        DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_CONNECTION_AGE_GRACE, DEFAULT_MAX_HELD_POLLS,
        DEFAULT_MAX_NAMES_PER_CONNECTION, DEFAULT_MAX_NAMES_TOTAL, DEFAULT_MAX_REQUEST_BYTES,
        DEFAULT_MAX_STREAMS_PER_CONNECTION, DEFAULT_PREFACE_TIMEOUT, DEFAULT_REST_HOLD,
        MIN_MAX_REQUEST_BYTES, MIN_MAX_RESPONSE_BYTES, SHUTDOWN_GRACE,
    };
    pub use crate::transport::tls::{
        DEFAULT_HANDSHAKE_TIMEOUT, DEFAULT_MAX_HANDSHAKES, DEFAULT_RELOAD_INTERVAL, MAX_PEM_BYTES,
    };
}

/// Each connected client's record, as [`ServerHandle::clients`] gives it: its node, and per type
/// the last response, ACK and NACK.
pub mod clients {
    pub use crate::protocol::user_agent_version;
    pub use crate::transport::clients::{
        Ack, ClientStatus, Nack, Sent, SentResources, TypeStatus, MAX_NACK_MESSAGE_BYTES,
        MAX_NACK_ORIGINS, MAX_TRACKED_RESOURCES,
    };
    pub use crate::transport::csds::{nack_details, resource_status};
}

/// What xdsd's CSDS `FetchClientStatus` answers carry beyond CSDS, in their response metadata:
/// what the server serves ([`csds::Served`] in [`csds::SERVED_METADATA`], also
/// [`ServerHandle::served`]) and a gated rollout's state ([`csds::ROLLOUT_METADATA`]).
pub mod csds {
    pub use crate::transport::csds::{Served, ROLLOUT_METADATA, SERVED_METADATA};
}

/// The sans-I/O xDS session, public on purpose (like quinn-proto's `Connection`): requests and
/// time in, responses and what to watch in the store out, one state machine per type (State of
/// the World or incremental). [`XdsServer`] drives one per stream; a transport of one's own, a
/// fuzz target or a model test can drive it without a server (see `testing`).
pub mod session {
    pub use crate::protocol::delta::{
        unresolved_entry, DeltaMachine, DeltaRequest, DeltaResponse, InitialVersions,
        UNSUBSCRIBE_KEY,
    };
    pub use crate::protocol::session::{
        ErrorKind, Handled, Machine, Session, SessionError, SessionOptions,
        FEATURE_RESOURCE_IN_SOTW, FEATURE_RESOURCE_IN_SOTW_ALT, FEATURE_RESOURCE_TTL,
    };
    pub use crate::protocol::sotw::{
        NodeId, SotwMachine, SotwRequest, SotwResources, SotwResponse,
    };
    pub use crate::protocol::{names_key, Names, Nonce, ParamSetId, SubscriptionChange, Views};
}

/// The protocol's session module as it is (what [`session`] re-exports, and the rest): for the
/// links of its items' docs, and the benchmarks and fuzz targets; not part of the front door.
#[doc(hidden)]
pub use protocol::session as protocol_session;

/// An HTTP/1.1 listener for a program's own endpoints beside the xDS server (the `xdsd`
/// binary's admin API): TLS reloaded as on the xDS port, a handshake and a first request each
/// within a time limit.
pub mod http {
    pub use crate::transport::http::{serve_http1, HttpTls};
}

/// The README's example, compiled by `cargo test --doc` so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeExample;
