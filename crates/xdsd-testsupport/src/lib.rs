//! What the tests of several xdsd crates share, as a dev-dependency (never published): each
//! harness behind a feature of its name, so a crate's tests build only the ones they use.
//!
//! - [`pki`]: a test CA and certificates (rcgen), nothing committed;
//! - [`etcd`]: a real etcd per test on 127.0.0.1 with OS-picked ports;
//! - [`peer`]: rust-control-plane 0.1.2 (`bench-peer/`) as a server nobody here wrote;
//! - [`rollout`]: a gated rollout's state, typed, from its JSON;
//! - [`fuzz`]: the fuzz targets' shared proptest budget;
//! - [`server`]: an in-process xdsd for the xDS client's tests (and the relay's upstream).

#![warn(missing_docs)]

#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(feature = "fuzz")]
pub mod fuzz;
#[cfg(feature = "peer")]
pub mod peer;
#[cfg(feature = "pki")]
pub mod pki;
#[cfg(feature = "rollout")]
pub mod rollout;
#[cfg(feature = "server")]
pub mod server;
