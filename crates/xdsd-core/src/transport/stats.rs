//! Counters of what the streams were sent: for operators (logs, a future admin API) and for
//! tests that must count resources rather than time them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Counts of one stream, or totals of a server.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StreamCounters {
    pub responses: u64,
    pub resources: u64,
    pub removed: u64,
    pub acks: u64,
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
pub struct StreamStatus {
    pub id: u64,
    pub node: String,
    /// "SotW" or "delta".
    pub variant: &'static str,
    pub counters: StreamCounters,
}

pub(crate) struct StreamEntry {
    node: Mutex<String>,
    variant: &'static str,
    counters: Counters,
    totals: Arc<Counters>,
}

impl StreamEntry {
    pub(crate) fn set_node(&self, node: &str) {
        *self.node.lock().unwrap_or_else(|e| e.into_inner()) = node.to_owned();
    }

    pub(crate) fn sent(&self, resources: usize, removed: usize) {
        for c in [&self.counters, &*self.totals] {
            c.responses.fetch_add(1, Ordering::Relaxed);
            c.resources.fetch_add(resources as u64, Ordering::Relaxed);
            c.removed.fetch_add(removed as u64, Ordering::Relaxed);
        }
    }

    pub(crate) fn acked(&self, ack: bool) {
        for c in [&self.counters, &*self.totals] {
            let counter = if ack { &c.acks } else { &c.nacks };
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[derive(Default)]
pub(crate) struct StreamRegistry {
    open: Mutex<HashMap<u64, Arc<StreamEntry>>>,
    totals: Arc<Counters>,
}

impl StreamRegistry {
    pub(crate) fn open(&self, id: u64, variant: &'static str) -> Arc<StreamEntry> {
        let entry = Arc::new(StreamEntry {
            node: Mutex::default(),
            variant,
            counters: Counters::default(),
            totals: self.totals.clone(),
        });
        self.lock().insert(id, entry.clone());
        entry
    }

    pub(crate) fn close(&self, id: u64) {
        self.lock().remove(&id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<StreamEntry>>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn list(&self) -> Vec<StreamStatus> {
        let mut list: Vec<StreamStatus> = self
            .lock()
            .iter()
            .map(|(id, e)| StreamStatus {
                id: *id,
                node: e.node.lock().unwrap_or_else(|e| e.into_inner()).clone(),
                variant: e.variant,
                counters: e.counters.read(),
            })
            .collect();
        list.sort_by_key(|s| s.id);
        list
    }

    pub(crate) fn totals(&self) -> StreamCounters {
        self.totals.read()
    }
}
