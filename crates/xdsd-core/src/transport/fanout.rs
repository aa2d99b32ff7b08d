//! The fan-out of a stream's events to every observer of the server's streams, as the stream
//! driver tells them: the server's own first (the record of each client with the stream metrics,
//! a static call; then the store picker's, a gated rollout's canaries; each with its state of the
//! stream), then the embedder's [`StreamObserver`]s in the order they were added. A request is
//! the exception: the embedder's may refuse it, so they are asked first, and the server's own
//! record only what was accepted.
//! The driver knows nothing else of them: the admin API, CSDS and the status page read the
//! clients' records from [`StreamRegistry`], the rollout's gate is fed by its own observer.

use std::sync::Arc;

use tonic::Status;

use super::observer::{
    Acked, Nacked, OwnObserver, RequestSeen, ResponseSent, StreamClosed, StreamObserver,
    StreamOpened,
};
use super::picker::{SentGenerations, StorePicker};
use super::stats::StreamRegistry;

/// A server's observers (see the module).
pub(crate) struct Fanout {
    clients: Arc<StreamRegistry>,
    picker: Option<Arc<dyn StorePicker>>,
    embedder: Arc<[Arc<dyn StreamObserver>]>,
}

/// What the server's own observers keep of one stream, held by its driver.
pub(crate) struct Observed {
    client: <StreamRegistry as OwnObserver>::Stream,
    picked: Option<SentGenerations>,
}

impl Fanout {
    pub(crate) fn new(
        clients: Arc<StreamRegistry>,
        picker: Option<Arc<dyn StorePicker>>,
        embedder: Arc<[Arc<dyn StreamObserver>]>,
    ) -> Fanout {
        Fanout {
            clients,
            picker,
            embedder,
        }
    }

    /// The embedder's observers: all that a one-shot request (`Fetch*`, a REST poll) is told.
    pub(crate) fn embedder(&self) -> &[Arc<dyn StreamObserver>] {
        &self.embedder
    }

    pub(crate) fn stream_opened(&self, event: &StreamOpened<'_>) -> Observed {
        let observed = Observed {
            client: self.clients.stream_opened(event),
            picked: match &self.picker {
                Some(picker) => picker.stream_opened(event),
                None => None,
            },
        };
        for observer in self.embedder.iter() {
            observer.stream_opened(event);
        }
        observed
    }

    /// The embedder's observers may refuse the request (the first to refuse ends the stream);
    /// the server's own are told it once it is accepted.
    pub(crate) fn request(&self, o: &mut Observed, event: &RequestSeen<'_>) -> Result<(), Status> {
        for observer in self.embedder.iter() {
            observer.request(event)?;
        }
        self.clients.request(&mut o.client, event);
        if let Some(picker) = &self.picker {
            picker.request(&mut o.picked, event);
        }
        Ok(())
    }

    pub(crate) fn response_sent(&self, o: &mut Observed, event: &ResponseSent<'_>) {
        self.clients.response_sent(&mut o.client, event);
        if let Some(picker) = &self.picker {
            picker.response_sent(&mut o.picked, event);
        }
        for observer in self.embedder.iter() {
            observer.response_sent(event);
        }
    }

    pub(crate) fn acked(&self, o: &mut Observed, event: &Acked<'_>) {
        self.clients.acked(&mut o.client, event);
        if let Some(picker) = &self.picker {
            picker.acked(&mut o.picked, event);
        }
        for observer in self.embedder.iter() {
            observer.acked(event);
        }
    }

    pub(crate) fn nacked(&self, o: &mut Observed, event: &Nacked<'_>) {
        self.clients.nacked(&mut o.client, event);
        if let Some(picker) = &self.picker {
            picker.nacked(&mut o.picked, event);
        }
        for observer in self.embedder.iter() {
            observer.nacked(event);
        }
    }

    pub(crate) fn stream_closed(&self, o: &mut Observed, event: &StreamClosed<'_>) {
        self.clients.stream_closed(&mut o.client, event);
        if let Some(picker) = &self.picker {
            picker.stream_closed(&mut o.picked, event);
        }
        for observer in self.embedder.iter() {
            observer.stream_closed(event);
        }
    }
}
