//! Thin adapters that carry the protocol state machines over a transport.

pub mod grpc;
mod sotw_stream;
pub mod wire;
