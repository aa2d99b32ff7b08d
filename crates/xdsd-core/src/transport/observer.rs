//! Observers of the server's streams (go-control-plane's `Callbacks`, typed): told when a stream
//! opens, of each request (which they may refuse: authorization lives here), of each response
//! sent, of each ACK and NACK, and when the stream closes. Give them to
//! [`XdsServerBuilder::observer`](super::grpc::XdsServerBuilder::observer).
//!
//! Observers are called on the stream's task, in the order they were added: keep them quick
//! (count, log, look a node up in a map) and hand anything slow to a task of your own.
//!
//! The server's own bookkeeping of its streams is made of observers too, told the same events
//! before the embedder's: each client's record that CSDS, the admin API and the status page
//! show, with the stream metrics (`stats`, `clients`), and a gated rollout's view of its canary
//! clients' answers (`rollout::observer`). The stream driver knows them only as observers.
//!
//! Type URLs, versions and the node are the server's own shared values (`Arc`s): an observer
//! that keeps one clones the `Arc` rather than the text.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use envoy_types::pb::envoy::service::discovery::v3::ResourceLocator;
use tonic::Status;

use crate::protocol::delta::UNSUBSCRIBE_KEY;
use crate::protocol::delta::{DeltaMachine, DeltaResponse};
use crate::protocol::session::{ClientNode, Machine};
use crate::protocol::sotw::{SotwMachine, SotwResponse};
use crate::protocol::Names;
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

impl Flavor {
    /// "SotW" or "delta", as logs, metrics and the admin API name it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Flavor::Sotw => SotwMachine::NAME,
            Flavor::Delta => DeltaMachine::NAME,
        }
    }
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
/// (a `Fetch*` call, a REST poll) are told too, as requests of stream 0 with an id of their own
/// ([`RequestSeen::one_shot`]; they have no stream, and no other event but [`OneShotDone`]); a
/// REST poll held for a change is told again each time it is re-read.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct RequestSeen<'a> {
    /// The stream's id; 0 for a one-shot request.
    pub stream: u64,
    /// A one-shot request's id (unique within the server: streams and one-shots are counted
    /// together), the same each time a held REST poll is re-read; [`OneShotDone`] carries it
    /// once the request is answered, refused or left. 0 for a stream's request.
    pub one_shot: u64,
    /// The client's node (from the stream's first request that carried one), if any yet.
    pub node: Option<&'a Arc<ClientNode>>,
    /// This request is the first to carry the client's node: `node` is new.
    pub identified: bool,
    /// The request's type URL.
    pub type_url: &'a Arc<str>,
    /// This is the first request for a type the store has nothing of (it is served as an empty
    /// type).
    pub unknown_type: bool,
    /// How the request relates to the responses already sent.
    pub kind: &'a RequestKind,
    /// On a stream's first request for the type ([`RequestKind::Initial`]), the version a
    /// reconnecting client says it holds (SotW's `version_info`); empty otherwise, and for delta.
    pub held_version: &'a str,
    /// On a stream's first request for the type, how many resources a reconnecting delta client
    /// says it holds (`initial_resource_versions`); 0 otherwise, and for SotW.
    pub held_resources: usize,
    /// What the request asks of the type: names, resource locators, the wildcard.
    pub asked: Asked<'a>,
}

/// What a request asks of its type, read in place from the request: nothing is copied for an
/// observer that does not look. A SotW request (and a one-shot one) names the whole
/// subscription of its type ([`Asked::is_whole`]); a delta request names what it adds and
/// removes. A name that is not UTF-8 names no resource and is left out.
#[derive(Debug, Clone, Copy)]
pub struct Asked<'a> {
    pub(crate) subscribe: Option<&'a Names>,
    pub(crate) unsubscribe: Option<&'a Names<UNSUBSCRIBE_KEY>>,
    pub(crate) locators: &'a [ResourceLocator],
    pub(crate) unsubscribe_locators: &'a [ResourceLocator],
    pub(crate) whole: bool,
    pub(crate) wildcard: Option<bool>,
    pub(crate) repeats: bool,
}

impl<'a> Asked<'a> {
    /// Whether [`Asked::names`] and [`Asked::locators`] are the whole subscription of the type
    /// (SotW), rather than what it adds (delta, whose removals are
    /// [`Asked::unsubscribed_names`] and [`Asked::unsubscribed_locators`]).
    pub fn is_whole(&self) -> bool {
        self.whole
    }

    /// The plain names asked for (`*`, the explicit wildcard, as the client sent it).
    pub fn names(&self) -> impl Iterator<Item = &'a str> + 'a {
        let names = self.subscribe;
        names.into_iter().flat_map(|n| n.strs())
    }

    /// How many plain names were sent ([`Asked::names`] yields those that are text): room to
    /// make for them at once.
    pub fn names_sent(&self) -> usize {
        self.subscribe.map_or(0, |n| n.len())
    }

    /// The plain names as the request encodes them: two requests that name the same names in
    /// the same order have the same bytes (an observer that keeps what a large request named
    /// finds it again by one comparison, not name by name).
    pub fn names_encoded(&self) -> &'a [u8] {
        self.subscribe.map_or(&[], |n| n.encoded())
    }

    /// The plain names a delta request unsubscribes from.
    pub fn unsubscribed_names(&self) -> impl Iterator<Item = &'a str> + 'a {
        let names = self.unsubscribe;
        names.into_iter().flat_map(|n| n.strs())
    }

    /// The resource locators asked for: names with their own dynamic parameters (xRFC TP2).
    pub fn locators(&self) -> &'a [ResourceLocator] {
        self.locators
    }

    /// The resource locators a delta request unsubscribes from.
    pub fn unsubscribed_locators(&self) -> &'a [ResourceLocator] {
        self.unsubscribe_locators
    }

    /// `Some(on)` when this request turned the wildcard subscription of the type on or off (the
    /// legacy wildcard of a first request that names nothing included).
    pub fn wildcard(&self) -> Option<bool> {
        self.wildcard
    }

    /// Whether the stream's session found that this request states what the stream's last
    /// request of the type stated (a SotW ACK that repeats its subscription, as nearly every
    /// one does): an observer that keeps the stream's subscription has nothing to read, not
    /// even [`Asked::digest`]. `false` says nothing (a delta request, a one-shot request, a
    /// stream's first request of the type, a stale one).
    pub fn repeats(&self) -> bool {
        self.repeats
    }

    /// A digest of what this request states: its names and locators as sent, the ones it
    /// unsubscribes from, and the wildcard flag. Two requests that state the same lists in the
    /// same order have the same digest, so an observer that keeps it tells a SotW request that
    /// repeats its stream's subscription (as every ACK does) from one that changes it without
    /// reading the names, as the session itself does.
    pub fn digest(&self) -> u64 {
        use prost::Message;
        let locators = |list: &[ResourceLocator]| -> Vec<Vec<u8>> {
            list.iter().map(|l| l.encode_to_vec()).collect()
        };
        crate::protocol::digest((
            self.subscribe,
            self.unsubscribe,
            locators(self.locators),
            locators(self.unsubscribe_locators),
            self.whole,
            self.wildcard,
        ))
    }

    /// What a SotW request (or a one-shot one) asks.
    pub(crate) fn sotw(
        request: &'a crate::protocol::sotw::SotwRequest,
        wildcard: Option<bool>,
    ) -> Asked<'a> {
        Asked {
            subscribe: Some(&request.resource_names),
            unsubscribe: None,
            locators: &request.resource_locators,
            unsubscribe_locators: &[],
            whole: true,
            wildcard,
            repeats: false,
        }
    }

    /// What a delta request asks.
    pub(crate) fn delta(
        request: &'a crate::protocol::delta::DeltaRequest,
        wildcard: Option<bool>,
    ) -> Asked<'a> {
        Asked {
            subscribe: Some(&request.resource_names_subscribe),
            unsubscribe: Some(&request.resource_names_unsubscribe),
            locators: &request.resource_locators_subscribe,
            unsubscribe_locators: &request.resource_locators_unsubscribe,
            whole: false,
            wildcard,
            repeats: false,
        }
    }
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
    pub type_url: &'a Arc<str>,
    /// Its version (`version_info`, or `system_version_info` for delta).
    pub version: &'a Arc<str>,
    /// Its nonce.
    pub nonce: &'a str,
    /// The resources it carries.
    pub resources: usize,
    /// The names it removes (delta).
    pub removed: usize,
    /// Its size, encoded.
    pub bytes: usize,
    /// The generation of the store it was built from (the canary store's, for a canary client of
    /// a gated rollout).
    pub generation: u64,
    /// The response itself, for the server's own observers (the record of the client keeps its
    /// resources).
    pub(crate) response: Sent<'a>,
    /// When it went out.
    pub(crate) at: Instant,
}

impl ResponseSent<'_> {
    /// The resources it carries, in its order: their names, versions and origins.
    pub fn carried(&self) -> impl Iterator<Item = &Arc<crate::store::Resource>> + '_ {
        let (view, list) = match self.response {
            Sent::Sotw(r) => match &r.resources {
                crate::protocol::sotw::SotwResources::All(view) => (Some(view.iter()), None),
                crate::protocol::sotw::SotwResources::Some(list) => (None, Some(list.iter())),
            },
            Sent::Delta(r) => (None, Some(r.resources.iter())),
        };
        view.into_iter().flatten().chain(list.into_iter().flatten())
    }
}

/// A response as the server's own observers see it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Sent<'a> {
    Sotw(&'a SotwResponse),
    Delta(&'a DeltaResponse),
}

impl Sent<'_> {
    /// The response's nonce.
    pub(crate) fn nonce(self) -> crate::protocol::Nonce {
        match self {
            Sent::Sotw(r) => r.nonce,
            Sent::Delta(r) => r.nonce,
        }
    }
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
    pub type_url: &'a Arc<str>,
    /// The nonce of the response accepted.
    pub nonce: &'a str,
    /// When it came (the time of the stream's turn that read it).
    pub at: Instant,
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
    pub type_url: &'a Arc<str>,
    /// The version the rejected response carried, when known.
    pub version: Option<&'a Arc<str>>,
    /// The nonce of the rejected response.
    pub nonce: &'a str,
    /// The client's error message.
    pub message: &'a str,
    /// When it came (the time of the stream's turn that read it).
    pub at: Instant,
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

/// A one-shot request ([`RequestSeen::one_shot`]) is over: answered, refused, or left by its
/// caller (a REST poll's connection closed while it was held). Told once, after its last
/// [`RequestSeen`] (also for one refused before any observer was told it): an observer that
/// holds something for the request while it is in hand (a relay, what it asks subscribed
/// upstream) lets it go here.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct OneShotDone {
    /// The one-shot request's id.
    pub one_shot: u64,
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

    /// A one-shot request is over (told once for each).
    fn one_shot_done(&self, _event: &OneShotDone) {}
}

/// One of the server's own observers (the record of each client, a gated rollout's canaries):
/// told the same events as a [`StreamObserver`], in the same order, but with state of its own
/// per stream, made when the stream opens and handed back with each later event of it. So no
/// event looks its stream up in a map shared by every stream (a lock each response), and the
/// calls are static, ahead of the embedder's.
pub(crate) trait OwnObserver: Send + Sync {
    /// What it keeps of one stream.
    type Stream: Send;

    /// A stream opened: its state.
    fn stream_opened(&self, event: &StreamOpened<'_>) -> Self::Stream;

    /// A request was accepted (by the session, and by every embedder's observer).
    fn request(&self, _stream: &mut Self::Stream, _event: &RequestSeen<'_>) {}

    /// A response is being written to the stream.
    fn response_sent(&self, _stream: &mut Self::Stream, _event: &ResponseSent<'_>) {}

    /// The client accepted a response.
    fn acked(&self, _stream: &mut Self::Stream, _event: &Acked<'_>) {}

    /// The client rejected a response.
    fn nacked(&self, _stream: &mut Self::Stream, _event: &Nacked<'_>) {}

    /// The stream ended (its state is dropped with it).
    fn stream_closed(&self, _stream: &mut Self::Stream, _event: &StreamClosed<'_>) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::sotw::SotwRequest;

    fn request(names: &[&str], version: &str) -> SotwRequest {
        let mut request = SotwRequest {
            version_info: version.into(),
            ..Default::default()
        };
        for name in names {
            request.resource_names.push(name.as_bytes());
        }
        request
    }

    #[test]
    fn a_request_that_repeats_the_subscription_has_its_digest_whatever_else_it_carries() {
        let first = request(&["a", "b"], "");
        let ack = request(&["a", "b"], "v1");
        assert_eq!(
            Asked::sotw(&first, None).digest(),
            Asked::sotw(&ack, None).digest()
        );
        let changed = request(&["a", "c"], "v1");
        assert_ne!(
            Asked::sotw(&first, None).digest(),
            Asked::sotw(&changed, None).digest()
        );
        assert_ne!(
            Asked::sotw(&first, None).digest(),
            Asked::sotw(&first, Some(true)).digest()
        );
        let mut located = request(&["a", "b"], "v1");
        located.resource_locators.push(ResourceLocator {
            name: "c".into(),
            ..Default::default()
        });
        assert_ne!(
            Asked::sotw(&first, None).digest(),
            Asked::sotw(&located, None).digest()
        );
    }
}
