//! The gate's view of the streams: an observer of every stream (see
//! `transport::observer::OwnObserver`) that tells the [`Rollout`] when a canary client connects,
//! ACKs or NACKs a response, and goes away. Which canary generation an answer is about is the
//! generation of the canary store the answered response was built from: the observer keeps, per
//! type of each canary stream, the nonce and generation of the last response sent.
//!
//! A stream reads the canary store when its node is in the cohort (the transport picks the store
//! on the stream's first request with a node, [`Rollout::store_for_raw`]); the observer counts
//! a stream as a canary by the same rule ([`Rollout::is_canary`]) when the node is identified.

use std::sync::Arc;

use super::{NackDetail, Rollout};
use crate::protocol::Nonce;
use crate::transport::observer::{
    Acked, Nacked, OwnObserver, RequestSeen, ResponseSent, StreamClosed, StreamOpened,
};
use crate::types::TypeMap;

/// The observer of a server's streams for its gated rollout.
pub(crate) struct Canaries {
    rollout: Arc<Rollout>,
}

impl Canaries {
    pub(crate) fn new(rollout: Arc<Rollout>) -> Canaries {
        Canaries { rollout }
    }
}

/// What a canary stream sent last, per type: the nonce, and the canary store's generation the
/// response was built from (what an ACK or NACK of it is about).
#[derive(Default)]
pub(crate) struct CanarySent(TypeMap<(Nonce, u64)>);

impl CanarySent {
    /// The generation of the response with `nonce` of `type_url`, when it is the last one sent.
    fn generation(&self, type_url: &str, nonce: &str) -> Option<u64> {
        let (sent, generation) = self.0.get(type_url)?;
        (sent.as_str() == nonce).then_some(*generation)
    }
}

impl OwnObserver for Canaries {
    /// `None` for a stream not (yet) known as a canary.
    type Stream = Option<CanarySent>;

    fn stream_opened(&self, _event: &StreamOpened<'_>) -> Option<CanarySent> {
        None
    }

    fn request(&self, canary: &mut Option<CanarySent>, event: &RequestSeen<'_>) {
        if !event.identified || canary.is_some() {
            return;
        }
        let Some(node) = event.node else {
            return;
        };
        if self.rollout.is_canary(node) {
            self.rollout.connected(event.stream, &node.id);
            *canary = Some(CanarySent::default());
        }
    }

    fn response_sent(&self, canary: &mut Option<CanarySent>, event: &ResponseSent<'_>) {
        let Some(sent) = canary else {
            return;
        };
        let nonce = event.response.nonce();
        match sent.0.get_mut(event.type_url) {
            Some(last) => *last = (nonce, event.generation),
            None => sent
                .0
                .insert(event.type_url.clone(), (nonce, event.generation)),
        }
    }

    fn acked(&self, canary: &mut Option<CanarySent>, event: &Acked<'_>) {
        let Some(sent) = canary else {
            return;
        };
        if let Some(generation) = sent.generation(event.type_url, event.nonce) {
            self.rollout.acked(event.stream, event.type_url, generation);
        }
    }

    fn nacked(&self, canary: &mut Option<CanarySent>, event: &Nacked<'_>) {
        let Some(sent) = canary else {
            return;
        };
        if let Some(generation) = sent.generation(event.type_url, event.nonce) {
            let detail = NackDetail::new(
                &**event.type_url,
                event.version.map_or("", |v| &**v),
                event.message,
            );
            self.rollout.nacked(event.stream, generation, detail);
        }
    }

    fn stream_closed(&self, canary: &mut Option<CanarySent>, event: &StreamClosed<'_>) {
        if canary.take().is_some() {
            self.rollout.disconnected(event.stream);
        }
    }
}
