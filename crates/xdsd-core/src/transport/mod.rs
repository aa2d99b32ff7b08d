//! Thin adapters that carry the protocol state machines over a transport.

pub mod grpc;
mod stream;
pub mod wire;
