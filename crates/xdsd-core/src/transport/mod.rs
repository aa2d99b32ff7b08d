//! Thin adapters that carry the protocol sessions over a transport.

pub mod admin;
mod body;
mod budget;
pub(crate) mod clients;
mod coalesce;
pub(crate) mod conn;
mod context;
mod csds;
mod fanout;
mod fetch;
pub mod fleet;
pub mod grpc;
mod health;
pub mod observer;
mod options;
pub mod page;
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
