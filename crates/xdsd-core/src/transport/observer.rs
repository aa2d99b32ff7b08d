//! Observers of the server's streams (go-control-plane's `Callbacks`, typed): told when a stream
//! opens, of each request (which they may refuse: authorization lives here), of each response
//! sent, of each ACK and NACK, and when the stream closes. Give them to
//! [`XdsServerBuilder::observer`](super::grpc::XdsServerBuilder::observer).
//!
//! Observers are called on the stream's task, in the order they were added: keep them quick
//! (count, log, look a node up in a map) and hand anything slow to a task of your own.

use std::net::SocketAddr;

use tonic::Status;

use crate::protocol::session::ClientNode;
use crate::protocol::RequestKind;

/// Whether a stream is a state-of-the-world or an incremental (delta) one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Flavor {
    /// State of the world (`Stream*` methods).
    Sotw,
    /// Incremental (`Delta*` methods).
    Delta,
}

/// A stream that opened.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct StreamOpened<'a> {
    /// The stream's id, unique within the server; every later event of the stream carries it.
    pub stream: u64,
    /// The client's address, when known.
    pub peer: Option<SocketAddr>,
    /// The identity of the client's certificate (mutual TLS with identity binding), if any.
    pub identity: Option<&'a str>,
    /// The type URL of a per-type service; `None` for ADS.
    pub type_url: Option<&'a str>,
    /// SotW or delta.
    pub flavor: Flavor,
}

/// A request the stream's session accepted, before anything is sent for it. One-shot requests
/// (a `Fetch*` call, a REST poll) are told too, as requests of stream 0 (they have no stream and
/// no other event); a REST poll held for a change is told again each time it is re-read.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct RequestSeen<'a> {
    /// The stream's id; 0 for a one-shot request.
    pub stream: u64,
    /// The client's node (from the stream's first request that carried one), if any yet.
    pub node: Option<&'a ClientNode>,
    /// The request's type URL.
    pub type_url: &'a str,
    /// How the request relates to the responses already sent.
    pub kind: &'a RequestKind,
}

/// A response written to a stream.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ResponseSent<'a> {
    /// The stream's id.
    pub stream: u64,
    /// The client's node id ("" when it sent none).
    pub node_id: &'a str,
    /// The response's type URL.
    pub type_url: &'a str,
    /// Its version (`version_info`, or `system_version_info` for delta).
    pub version: &'a str,
    /// Its nonce.
    pub nonce: &'a str,
    /// The resources it carries.
    pub resources: usize,
    /// The names it removes (delta).
    pub removed: usize,
}

/// An ACK: the client accepted a response.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Acked<'a> {
    /// The stream's id.
    pub stream: u64,
    /// The client's node id.
    pub node_id: &'a str,
    /// The type URL.
    pub type_url: &'a str,
    /// The nonce of the response accepted.
    pub nonce: &'a str,
}

/// A NACK: the client rejected a response.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Nacked<'a> {
    /// The stream's id.
    pub stream: u64,
    /// The client's node id.
    pub node_id: &'a str,
    /// The type URL.
    pub type_url: &'a str,
    /// The version the rejected response carried, when known.
    pub version: Option<&'a str>,
    /// The nonce of the rejected response.
    pub nonce: &'a str,
    /// The client's error message.
    pub message: &'a str,
}

/// A stream that ended.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct StreamClosed<'a> {
    /// The stream's id.
    pub stream: u64,
    /// The client's node id ("" when it sent none).
    pub node_id: &'a str,
    /// The status the server ended it with; `None` when the client ended it.
    pub status: Option<&'a Status>,
}

/// Observes the server's streams; every method does nothing by default.
pub trait StreamObserver: Send + Sync + 'static {
    /// A stream opened (before its first request).
    fn stream_opened(&self, _event: &StreamOpened<'_>) {}

    /// A request was accepted by the stream's session. An error refuses it: the stream ends with
    /// that status (e.g. `Status::permission_denied` for a node this server must not serve),
    /// and nothing is sent for the request. A refused `Fetch*` call fails with the status, a
    /// refused REST poll is answered with the HTTP status that stands for it (403 for
    /// PERMISSION_DENIED).
    fn request(&self, _event: &RequestSeen<'_>) -> Result<(), Status> {
        Ok(())
    }

    /// A response is being written to the stream.
    fn response_sent(&self, _event: &ResponseSent<'_>) {}

    /// The client accepted a response.
    fn acked(&self, _event: &Acked<'_>) {}

    /// The client rejected a response.
    fn nacked(&self, _event: &Nacked<'_>) {}

    /// The stream ended (every opened stream ends once).
    fn stream_closed(&self, _event: &StreamClosed<'_>) {}
}
