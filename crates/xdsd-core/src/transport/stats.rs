//! Counters of what the streams were sent, and each stream's record of its client (see
//! `clients`): for operators (CSDS, the admin API, metrics) and for tests that must count
//! resources rather than time them.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime};

use super::clients::{self, ClientStatus, Held, Track};
use super::observer::{
    Acked, Nacked, OwnObserver, RequestSeen, ResponseSent, StreamClosed, StreamOpened,
};
use crate::metrics::Metrics;
use crate::protocol::session::ClientNode;

/// Counts of one stream, or totals of a server.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamCounters {
    /// Responses sent.
    pub responses: u64,
    /// Resources sent (counted per response).
    pub resources: u64,
    /// Names removed (delta).
    pub removed: u64,
    /// ACKs received.
    pub acks: u64,
    /// NACKs received.
    pub nacks: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    responses: AtomicU64,
    resources: AtomicU64,
    removed: AtomicU64,
    acks: AtomicU64,
    nacks: AtomicU64,
}

impl std::ops::AddAssign for StreamCounters {
    fn add_assign(&mut self, other: StreamCounters) {
        self.responses += other.responses;
        self.resources += other.resources;
        self.removed += other.removed;
        self.acks += other.acks;
        self.nacks += other.nacks;
    }
}

impl Counters {
    fn read(&self) -> StreamCounters {
        StreamCounters {
            responses: self.responses.load(Ordering::Relaxed),
            resources: self.resources.load(Ordering::Relaxed),
            removed: self.removed.load(Ordering::Relaxed),
            acks: self.acks.load(Ordering::Relaxed),
            nacks: self.nacks.load(Ordering::Relaxed),
        }
    }
}

/// One open stream as an operator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamStatus {
    /// The stream's id.
    pub id: u64,
    /// The client's node id (empty before it sent one).
    pub node: String,
    /// "SotW" or "delta".
    pub flavor: &'static str,
    /// The stream's counts.
    pub counters: StreamCounters,
}

pub(crate) struct StreamEntry {
    flavor: &'static str,
    ads: bool,
    peer: Option<SocketAddr>,
    connected_at: SystemTime,
    counters: Counters,
    track: Mutex<Track>,
    /// The lists the records of the server's streams share ([`clients::SharedLists`]).
    lists: Arc<clients::SharedLists>,
}

impl StreamEntry {
    fn track(&self) -> MutexGuard<'_, Track> {
        self.track.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A request for `type_url` was handled; `in_store`: the store has that type; `node`: the
    /// client's node, when this request identified it.
    pub(crate) fn requested(
        &self,
        node: Option<&Arc<ClientNode>>,
        type_url: &Arc<str>,
        in_store: bool,
        held: Option<Held>,
    ) {
        let mut track = self.track();
        if let Some(node) = node {
            track.node = Some(node.clone());
        }
        track.requested(type_url, in_store, held);
    }

    pub(crate) fn sent(&self, response: &ResponseSent<'_>) {
        let c = &self.counters;
        c.responses.fetch_add(1, Ordering::Relaxed);
        c.resources
            .fetch_add(response.resources as u64, Ordering::Relaxed);
        c.removed
            .fetch_add(response.removed as u64, Ordering::Relaxed);
        self.track().sent(
            response.type_url,
            response.version,
            response.response.nonce(),
            clients::carried(response.response, &self.lists),
            response.resources,
            response.removed,
            clients::updated(response.response),
            response.bytes,
            response.at,
        );
    }

    /// The client ACKed (`nack` None) or NACKed (`Some((rejected version, message))`) the
    /// response with `nonce`, at `now`.
    pub(crate) fn answered(
        &self,
        type_url: &Arc<str>,
        nonce: &str,
        nack: Option<(Option<Arc<str>>, &str)>,
        now: Instant,
    ) {
        let ack = nack.is_none();
        let counter = if ack {
            &self.counters.acks
        } else {
            &self.counters.nacks
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.track().answered(type_url, nonce, nack, now);
    }

    fn client_status(&self, id: u64) -> ClientStatus {
        let track = self.track();
        ClientStatus {
            stream: id,
            ads: self.ads,
            flavor: self.flavor,
            peer: self.peer,
            connected_at: self.connected_at,
            node: track.node.as_deref().cloned(),
            counters: self.counters.read(),
            types: track.types(),
        }
    }

    fn node_id(&self) -> String {
        self.track()
            .node
            .as_ref()
            .map(|n| n.id.clone())
            .unwrap_or_default()
    }
}

#[derive(Default)]
struct Open {
    streams: HashMap<u64, Arc<StreamEntry>>,
    closed: StreamCounters,
}

#[derive(Default)]
pub(crate) struct StreamRegistry {
    /// The open streams and what the closed ones counted. A server's totals are summed when
    /// read: counted by every stream as it went, they were atomics that both cores took turns
    /// at (four per response and ACK of every stream).
    open: Mutex<Open>,
    pub(crate) metrics: Metrics,
    /// The lists of resources the streams' records share.
    lists: Arc<clients::SharedLists>,
    /// Test only: closed streams' records are kept, a leak on purpose ([`KEEP_CLOSED_VAR`]).
    keep_closed: bool,
}

/// Test only: with this variable set to 1, every closed stream's record is kept (a leak on
/// purpose, the stream still counted as connected), so that the soak (crates/xds-bench, see
/// BENCHMARKS.md) can show that its checks catch a leak. Never set it in production.
pub const KEEP_CLOSED_VAR: &str = "XDSD_TEST_KEEP_CLOSED_STREAMS";

impl StreamRegistry {
    pub(crate) fn new(metrics: Metrics) -> StreamRegistry {
        StreamRegistry {
            metrics,
            keep_closed: std::env::var_os(KEEP_CLOSED_VAR).is_some_and(|v| v == "1"),
            ..StreamRegistry::default()
        }
    }

    /// Registers a stream: `ads` for an aggregated one, from `peer`.
    pub(crate) fn open(
        &self,
        id: u64,
        flavor: &'static str,
        ads: bool,
        peer: Option<SocketAddr>,
    ) -> Arc<StreamEntry> {
        let entry = Arc::new(StreamEntry {
            flavor,
            ads,
            peer,
            connected_at: SystemTime::now(),
            counters: Counters::default(),
            track: Mutex::new(Track::new(self.metrics.clone())),
            lists: self.lists.clone(),
        });
        self.metrics.stream_opened(flavor, ads);
        self.lock().streams.insert(id, entry.clone());
        entry
    }

    pub(crate) fn close(&self, id: u64) {
        if self.keep_closed {
            return;
        }
        let mut open = self.lock();
        if let Some(entry) = open.streams.remove(&id) {
            // Under the lock: a total read meanwhile counts the stream once.
            open.closed += entry.counters.read();
            drop(open);
            self.metrics.stream_closed(entry.flavor, entry.ads);
        }
    }

    /// Every open stream's client, by stream id.
    pub(crate) fn clients(&self) -> Vec<ClientStatus> {
        let entries: Vec<(u64, Arc<StreamEntry>)> = self
            .lock()
            .streams
            .iter()
            .map(|(id, e)| (*id, e.clone()))
            .collect();
        let mut list: Vec<ClientStatus> =
            entries.iter().map(|(id, e)| e.client_status(*id)).collect();
        list.sort_by_key(|c| c.stream);
        list
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn list(&self) -> Vec<StreamStatus> {
        let mut list: Vec<StreamStatus> = self
            .lock()
            .streams
            .iter()
            .map(|(id, e)| StreamStatus {
                id: *id,
                node: e.node_id(),
                flavor: e.flavor,
                counters: e.counters.read(),
            })
            .collect();
        list.sort_by_key(|s| s.id);
        list
    }

    pub(crate) fn totals(&self) -> StreamCounters {
        let open = self.lock();
        let mut totals = open.closed;
        for entry in open.streams.values() {
            totals += entry.counters.read();
        }
        totals
    }
}

/// The record of each client (what CSDS, the admin API and the status page show) and the stream
/// metrics are an observer of the streams: a stream's entry is made when it opens, fed by its
/// events, and dropped when it closes.
impl OwnObserver for StreamRegistry {
    type Stream = Arc<StreamEntry>;

    fn stream_opened(&self, event: &StreamOpened<'_>) -> Arc<StreamEntry> {
        self.open(
            event.stream,
            event.flavor.name(),
            event.type_url.is_none(),
            event.peer,
        )
    }

    fn request(&self, entry: &mut Arc<StreamEntry>, event: &RequestSeen<'_>) {
        // An ACK or a NACK answers a response of a type its first request recorded, and tells
        // the record nothing more (no node, nothing held): the entry's lock is not taken for
        // it. What it answers is recorded by `acked` and `nacked`.
        if !event.identified
            && matches!(
                event.kind,
                crate::protocol::RequestKind::Ack { .. }
                    | crate::protocol::RequestKind::Nack { .. }
            )
            && event.held_version.is_empty()
            && event.held_resources == 0
        {
            return;
        }
        let node = event.node.filter(|_| event.identified);
        let held = (!event.held_version.is_empty() || event.held_resources > 0).then(|| Held {
            version: event.held_version.into(),
            resources: event.held_resources,
        });
        entry.requested(node, event.type_url, !event.unknown_type, held);
    }

    fn response_sent(&self, entry: &mut Arc<StreamEntry>, event: &ResponseSent<'_>) {
        entry.sent(event);
    }

    fn acked(&self, entry: &mut Arc<StreamEntry>, event: &Acked<'_>) {
        entry.answered(event.type_url, event.nonce, None, event.at);
    }

    fn nacked(&self, entry: &mut Arc<StreamEntry>, event: &Nacked<'_>) {
        entry.answered(
            event.type_url,
            event.nonce,
            Some((event.version.cloned(), event.message)),
            event.at,
        );
    }

    fn stream_closed(&self, _entry: &mut Arc<StreamEntry>, event: &StreamClosed<'_>) {
        self.close(event.stream);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(entry: &StreamEntry, resources: usize) {
        use crate::protocol::sotw::{SotwResources, SotwResponse};
        use crate::protocol::Nonce;
        let type_url: Arc<str> = Arc::from(crate::types::CLUSTER);
        let response = SotwResponse {
            type_url: type_url.clone(),
            version_info: Arc::from("v"),
            nonce: Nonce::from(1),
            resources: SotwResources::Some(Default::default()),
            encoding: Default::default(),
            updated: Default::default(),
            oversized: None,
            control_plane: true,
        };
        entry.sent(&ResponseSent {
            stream: 1,
            node_id: "",
            type_url: &type_url,
            version: &response.version_info,
            nonce: "1",
            resources,
            removed: 0,
            bytes: 10,
            generation: 1,
            response: super::super::observer::Sent::Sotw(&response),
            at: Instant::now(),
        });
    }

    #[test]
    fn a_servers_totals_count_its_open_and_its_closed_streams() {
        let registry = StreamRegistry::default();
        let a = registry.open(1, "SotW", true, None);
        let b = registry.open(2, "delta", true, None);
        send(&a, 3);
        send(&b, 4);
        b.answered(&Arc::from(crate::types::CLUSTER), "1", None, Instant::now());
        registry.close(2);
        send(&a, 5);
        let totals = registry.totals();
        assert_eq!(
            (totals.responses, totals.resources, totals.acks),
            (3, 12, 1)
        );
        assert_eq!(registry.list().len(), 1, "one stream is open");
    }
}
