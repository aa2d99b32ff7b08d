//! xdsd's library: the resource store, the sans-I/O xDS protocol state machines and the
//! transports that carry them. The `xdsd` binary and the `xdsd-source` crate build on it; other
//! programs can embed it (see `transport::grpc::XdsServer`).

pub mod protocol;
pub mod store;
pub mod transport;
pub mod types;
