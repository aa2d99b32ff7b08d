//! Thin adapters that carry the protocol sessions over a transport.

mod body;
mod budget;
pub(crate) mod clients;
mod coalesce;
pub(crate) mod conn;
mod context;
pub(crate) mod csds;
mod fanout;
pub(crate) mod fetch;
pub mod grpc;
mod health;
pub(crate) mod http;
pub mod observer;
mod options;
pub(crate) mod picker;
mod requests;
pub mod rest;
mod stats;
pub(crate) mod status;
pub use conn::ConnInfo;
pub use stats::{StreamCounters, StreamStatus};
mod stream;
pub mod tls;
pub(crate) mod wire;
