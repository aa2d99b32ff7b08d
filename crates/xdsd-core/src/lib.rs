//! xdsd's library: the resource store, the sans-I/O xDS protocol state machines and the
//! transports that carry them. The `xdsd` binary and the `xdsd-source` crate build on it; other
//! programs can embed it: build an [`XdsServer`] over a [`Store`] with [`XdsServer::builder`],
//! feed the store from a [`Source`] of your own through a [`Feed`], and watch or refuse streams
//! with a [`StreamObserver`]. The types an embedder needs are re-exported here.

#![warn(missing_docs)]

#[doc(hidden)]
pub mod hash;
pub(crate) mod logsafe;
pub mod metrics;
pub mod params;
pub mod protocol;
mod ready;
pub mod rollout;
pub mod source;
pub mod store;
#[cfg(test)]
mod test_rng;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod testing;
pub mod transport;
pub mod types;

pub use metrics::Metrics;
pub use ready::Readiness;
pub use rollout::Rollout;
pub use source::{ChangeSet, Feed, Rejection, Source, SourceEvent};
pub use store::{Change, ResourceInput, Store, UpdateSummary};
pub use transport::grpc::{ServerOptions, StatsHandle, XdsServer, XdsServerBuilder};
pub use transport::observer::{
    Acked, Flavor, Nacked, RequestSeen, ResponseSent, StreamClosed, StreamObserver, StreamOpened,
};
pub use transport::tls::TlsOptions;

/// The README's example, compiled by `cargo test --doc` so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeExample;
