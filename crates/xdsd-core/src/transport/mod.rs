//! Thin adapters that carry the protocol sessions over a transport.

mod context;
mod fetch;
pub mod grpc;
pub mod rest;
mod stats;
pub mod status;
pub use stats::{StreamCounters, StreamStatus};
mod stream;
pub mod tls;
pub mod wire;
