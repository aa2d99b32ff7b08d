//! Thin adapters that carry the protocol state machines over a transport.

pub mod grpc;
mod stats;
pub use stats::{StreamCounters, StreamStatus};
mod stream;
pub mod wire;
