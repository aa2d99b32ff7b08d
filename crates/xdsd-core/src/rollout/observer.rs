//! The gate's view of the streams: an observer of every stream (see
//! `transport::observer::OwnObserver`) that tells the [`Rollout`] when a canary client connects,
//! ACKs or NACKs a response, and goes away. Which canary generation an answer is about is the
//! generation of the canary store the answered response was built from: the observer keeps, per
//! type of each canary stream, the nonce and generation of the last response sent.
//!
//! A stream reads the canary store when its node is in the cohort (the transport picks the store
//! on the stream's first request with a node, [`Rollout::store_for_raw`]); the observer counts
//! a stream as a canary by the same rule ([`Rollout::is_canary`]) when the node is identified.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::{NackDetail, Rollout};
use crate::metrics::Metrics;
use crate::store::Store;
use crate::transport::observer::{
    Acked, Nacked, OwnObserver, RequestSeen, ResponseSent, StreamClosed, StreamOpened,
};
use crate::transport::picker::{Hold, SentGenerations as CanarySent, StorePicker};

/// The observer of a server's streams for its gated rollout.
pub(crate) struct Canaries {
    rollout: Arc<Rollout>,
}

impl Canaries {
    pub(crate) fn new(rollout: Arc<Rollout>) -> Canaries {
        Canaries { rollout }
    }

    /// The rollout it observes for.
    pub(crate) fn rollout(&self) -> &Arc<Rollout> {
        &self.rollout
    }
}

/// The transport asks the rollout which store a client reads, through its observer.
impl StorePicker for Canaries {
    fn default_store(&self) -> &Store {
        self.rollout.stable_store()
    }

    fn store_for(&self, node: &[u8]) -> Store {
        self.rollout.store_for_raw(node).clone()
    }

    fn hold(&self, hold: Hold<'_>) -> Option<Pin<Box<dyn Future<Output = ()> + Send>>> {
        self.rollout.hold(hold)
    }

    fn set_metrics(&self, metrics: Metrics) {
        self.rollout.set_metrics(metrics);
    }

    fn status_json(&self) -> serde_json::Value {
        self.rollout().status_json()
    }

    fn as_any(&self) -> &dyn Any {
        self
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
        sent.sent(event.type_url, event.response.nonce(), event.generation);
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use envoy_types::pb::envoy::config::core::v3::Node;

    use super::*;
    use crate::protocol::session::ClientNode;
    use crate::protocol::sotw::{SotwResources, SotwResponse};
    use crate::protocol::{Nonce, RequestKind};
    use crate::rollout::{Cohort, GateConfig, Selector};
    use crate::store::{ResourceInput, Store};
    use crate::transport::observer::{Flavor, Sent};
    use crate::types::CLUSTER;

    fn cluster(content: &'static [u8]) -> ResourceInput {
        ResourceInput::new(CLUSTER, "a", bytes::Bytes::from_static(content))
    }

    /// A stream of node `id` as the transport tells it: opened, then its first request.
    fn connect(observer: &Canaries, stream: u64, id: &str) -> Option<CanarySent> {
        let opened = StreamOpened {
            stream,
            peer: None,
            identity: None,
            type_url: None,
            flavor: Flavor::Sotw,
        };
        let mut state = observer.stream_opened(&opened);
        let node = Arc::new(
            ClientNode::from_node(&Node {
                id: id.into(),
                ..Default::default()
            })
            .unwrap(),
        );
        observer.request(
            &mut state,
            &RequestSeen {
                stream,
                one_shot: 0,
                node: Some(&node),
                identified: true,
                type_url: &Arc::from(CLUSTER),
                unknown_type: false,
                kind: &RequestKind::Initial,
                held_version: "",
                held_resources: 0,
                asked: crate::transport::observer::Asked::sotw(
                    &crate::protocol::sotw::SotwRequest::default(),
                    Some(true),
                ),
            },
        );
        state
    }

    fn send(
        observer: &Canaries,
        state: &mut Option<CanarySent>,
        stream: u64,
        nonce: u64,
        generation: u64,
    ) {
        let type_url: Arc<str> = Arc::from(CLUSTER);
        let response = SotwResponse {
            type_url: type_url.clone(),
            version_info: Arc::from("v"),
            nonce: Nonce::from(nonce),
            resources: SotwResources::Some(Default::default()),
            encoding: Default::default(),
            updated: Default::default(),
            oversized: None,
            control_plane: true,
        };
        let nonce = response.nonce;
        observer.response_sent(
            state,
            &ResponseSent {
                stream,
                node_id: "",
                type_url: &type_url,
                version: &response.version_info,
                nonce: nonce.as_str(),
                resources: 0,
                removed: 0,
                bytes: 0,
                generation,
                response: Sent::Sotw(&response),
                at: Instant::now(),
            },
        );
    }

    fn ack(observer: &Canaries, state: &mut Option<CanarySent>, stream: u64, nonce: &str) {
        let acked = Acked {
            stream,
            node_id: "",
            type_url: &Arc::from(CLUSTER),
            nonce,
            at: Instant::now(),
        };
        observer.acked(state, &acked);
    }

    #[test]
    fn a_canary_s_ack_counts_for_the_generation_its_answered_response_was_built_from() {
        let cohort = Cohort::new(vec![Selector::parse("node=canary-*").unwrap()]);
        let config = GateConfig::default().min_canaries(1).soak(Duration::ZERO);
        let rollout = Rollout::unstarted(cohort, config, Store::new());
        rollout.canary_store().replace_all([cluster(b"1")]).unwrap();
        rollout.start().unwrap();
        let old = rollout.canary_store().snapshot().generation();
        let new = rollout
            .commit(|s| s.replace_all([cluster(b"2")]))
            .unwrap()
            .generation;
        let promotions = || rollout.status_json()["promotions"].as_u64().unwrap();
        let observer = Canaries::new(rollout.clone());

        // A client outside the cohort is none of the gate's business, whatever it ACKs.
        let mut edge = connect(&observer, 1, "edge-1");
        assert!(edge.is_none(), "not a canary");
        send(&observer, &mut edge, 1, 1, new);
        ack(&observer, &mut edge, 1, "1");
        assert_eq!(promotions(), 0);

        let mut canary = connect(&observer, 2, "canary-1");
        let canaries = rollout.status_json()["canaries"].clone();
        assert_eq!(canaries[0]["stream"], 2, "connected: {canaries}");
        // An ACK of a response built before the candidate does not count...
        send(&observer, &mut canary, 2, 1, old);
        ack(&observer, &mut canary, 2, "1");
        assert_eq!(promotions(), 0);
        // ...nor does an ACK of anything but the last response sent of the type.
        send(&observer, &mut canary, 2, 2, new);
        ack(&observer, &mut canary, 2, "1");
        assert_eq!(promotions(), 0);
        // The ACK of the candidate's response promotes it.
        ack(&observer, &mut canary, 2, "2");
        assert_eq!(promotions(), 1);

        let closed = StreamClosed {
            stream: 2,
            node_id: "canary-1",
            status: None,
        };
        observer.stream_closed(&mut canary, &closed);
        assert_eq!(rollout.status_json()["canaries"], serde_json::json!([]));
    }
}
