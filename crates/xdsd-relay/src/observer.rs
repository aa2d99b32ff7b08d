//! The downstream demand, as the server's streams show it: an observer of the relay's own
//! server that tells the relay's source which type each downstream stream asks for, with the
//! client's node (its group), and when the stream ends.
//!
//! Only a stream's first request for a type (of its group) is passed on, so what the observer
//! keeps and sends is bounded by the streams the server admits times the types they ask for.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;
use tonic::Status;
use xdsd_core::ClientNode;
use xdsd_core::{RequestSeen, StreamClosed, StreamObserver};

use crate::answered::Answered;
use crate::demand::Want;
use crate::group::{group_of, AggregateBy};

/// What the observer tells the source.
#[derive(Debug)]
pub(crate) enum Demanded {
    /// A stream asks for a want.
    Acquire {
        stream: u64,
        want: Want,
        node: Option<Arc<ClientNode>>,
    },
    /// A one-shot request asked for a want.
    Touch {
        want: Want,
        node: Option<Arc<ClientNode>>,
    },
    /// A stream ended.
    Release { stream: u64 },
}

/// The relay's observer of its downstream streams; give it to the server's builder
/// ([`xdsd_core::XdsServerBuilder::observer`]).
pub struct RelayObserver {
    by: AggregateBy,
    answered: Arc<Answered>,
    /// How long a first request waits for the upstream's answer.
    wait: std::time::Duration,
    tx: mpsc::UnboundedSender<Demanded>,
    /// What each stream was seen asking for.
    seen: Mutex<HashMap<u64, BTreeSet<Want>>>,
}

impl std::fmt::Debug for RelayObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayObserver")
            .field("by", &self.by)
            .finish_non_exhaustive()
    }
}

impl RelayObserver {
    pub(crate) fn new(
        by: AggregateBy,
        tx: mpsc::UnboundedSender<Demanded>,
        answered: Arc<Answered>,
        wait: std::time::Duration,
    ) -> RelayObserver {
        RelayObserver {
            by,
            answered,
            wait,
            tx,
            seen: Mutex::new(HashMap::new()),
        }
    }

    fn send(&self, demanded: Demanded) {
        // A relay whose source stopped has nobody to tell.
        let _ = self.tx.send(demanded);
    }
}

impl StreamObserver for RelayObserver {
    fn request(&self, event: &RequestSeen<'_>) -> Result<(), Status> {
        let node = event.node.cloned();
        let group = group_of(self.by, node.as_deref(), event.type_url);
        let want = Want::wildcard(group, &**event.type_url);
        if event.stream == 0 {
            self.send(Demanded::Touch {
                want: want.clone(),
                node,
            });
            self.answered.wait_in_task(&want, self.wait);
            return Ok(());
        }
        let new = {
            let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            seen.entry(event.stream).or_default().insert(want.clone())
        };
        if new {
            self.send(Demanded::Acquire {
                stream: event.stream,
                want: want.clone(),
                node,
            });
            // Answered when the upstream answers, not told first that nothing exists.
            self.answered.wait_in_task(&want, self.wait);
        }
        Ok(())
    }

    fn stream_closed(&self, event: &StreamClosed<'_>) {
        let held = {
            let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            seen.remove(&event.stream)
        };
        if held.is_some() {
            self.send(Demanded::Release {
                stream: event.stream,
            });
        }
    }
}
