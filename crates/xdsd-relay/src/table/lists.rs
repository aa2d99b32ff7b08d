//! Lists held once: the wants of a request that several streams asked alike (every stream of a
//! fleet asks the same names, in the same requests: ten streams of 40,000 EDS names each) are
//! held by the list, under a holder of its own, and each stream holds the list. A stream
//! joining a list costs a lookup, not a hold of each of its wants (each a row, a route and a
//! stream's set to look up and grow: the relay's per-want work was about a quarter of its CPU
//! while S12's streams synced). The list's holder is a stream to the rest of the table: its
//! wants are held, routed, narrowed and rerouted as any stream's.
//!
//! A stream that lets go of one want of a list it shares holds the rest itself from then on (a
//! copy of the list once per stream that deviates: the others keep the list); a stream's end
//! leaves its lists, and the last stream leaving a list lets go of what it held.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use super::{Routed, State, Table, Want};

/// How many of a list's wants are held under one taking of the table's lock (see
/// [`Table::acquire_list`]).
pub(super) const LIST_PART: usize = 1024;

/// A list's holder is this bit and the list's count: no downstream stream or one-shot request
/// has such an id (the server counts them from 1).
const LIST_HOLDER: u64 = 1 << 63;

/// A list of wants held once for the streams that asked it.
#[derive(Debug)]
pub(super) struct ListHold {
    /// Its wants (kept: its address is the list's key while it is held).
    list: Arc<[Want]>,
    /// The holder its wants are held under.
    holder: u64,
    /// The streams holding it.
    streams: BTreeSet<u64>,
}

/// A list's key: its address.
fn key(list: &Arc<[Want]>) -> usize {
    Arc::as_ptr(list) as *const Want as usize
}

impl State {
    /// `stream` holds `list` (see [`Table::acquire_list`]): the holder its wants are to be
    /// held under if it is the list's first stream (`None`: the list is held already).
    fn join_list(&mut self, stream: u64, list: &Arc<[Want]>) -> Option<u64> {
        let key = key(list);
        if let Some(hold) = self.lists.get_mut(&key) {
            if hold.streams.insert(stream) {
                self.stream_lists.entry(stream).or_default().push(key);
            }
            return None;
        }
        self.next_list += 1;
        let holder = LIST_HOLDER | self.next_list;
        self.lists.insert(
            key,
            ListHold {
                list: list.clone(),
                holder,
                streams: BTreeSet::from([stream]),
            },
        );
        self.stream_lists.entry(stream).or_default().push(key);
        Some(holder)
    }

    /// `stream` leaves the list `key` (as of `now`): the last to leave lets go of its wants.
    fn leave_list(&mut self, stream: u64, key: usize, now: Instant) {
        let Some(hold) = self.lists.get_mut(&key) else {
            return;
        };
        hold.streams.remove(&stream);
        if hold.streams.is_empty() {
            let holder = hold.holder;
            self.lists.remove(&key);
            self.release(holder, now);
        }
    }

    /// `stream` ended (as of `now`): it leaves every list it holds.
    pub(super) fn leave_lists(&mut self, stream: u64, now: Instant) {
        for key in self.stream_lists.remove(&stream).unwrap_or_default() {
            self.leave_list(stream, key, now);
        }
    }

    /// `stream` no longer asks for `want`, which it holds through a list (as of `now`): it
    /// holds the rest of that list itself, and leaves it. Whether it held `want` so.
    pub(super) fn drop_from_list(&mut self, stream: u64, want: &Want, now: Instant) -> bool {
        let Some(keys) = self.stream_lists.get(&stream) else {
            return false;
        };
        let found = keys.iter().copied().find(|key| {
            self.lists.get(key).is_some_and(|hold| {
                self.streams
                    .get(&hold.holder)
                    .is_some_and(|held| held.contains(want))
            })
        });
        let Some(key) = found else {
            return false;
        };
        let rest: Vec<Want> = match self.lists.get(&key) {
            Some(hold) => hold.list.iter().filter(|w| *w != want).cloned().collect(),
            None => return false,
        };
        // Held by the stream first, so that nothing it still asks lingers in between.
        self.acquire_all(stream, rest, None);
        if let Some(keys) = self.stream_lists.get_mut(&stream) {
            keys.retain(|k| *k != key);
        }
        self.leave_list(stream, key, now);
        true
    }
}

impl Table {
    /// Downstream stream `stream` asks for the wants of `list` (those of one request), held
    /// once for every stream that asks the same list (the same `Arc`: the observer hands the
    /// streams that asked alike one list): the first holds its wants as
    /// [`Table::acquire_all`] does, under the list's own holder; the others cost a lookup.
    ///
    /// The first stream's list is held [`LIST_PART`] wants at a time, the table's lock let go
    /// between the parts: a stream's request asks the table under that lock from the stream's
    /// own task ([`Table::ask_list`], through the observer), and waited while the source held
    /// a part of CDS's 8,000 EDS names one by one (5-23 ms each, once 117 ms: S12 at 100,000
    /// names, BENCHMARKS.md stop 74). Nothing but such asks comes between the parts (every
    /// other change of the table is the source's own): a want asked for before the list
    /// holds it is as a want asked for before the source took the request in.
    pub(crate) fn acquire_list(&self, stream: u64, list: Arc<[Want]>, routed: Option<Routed>) {
        let Some(holder) = self.state().join_list(stream, &list) else {
            return;
        };
        let routed = routed.filter(|r| r.to.len() == list.len());
        for (part, wants) in list.chunks(LIST_PART).enumerate() {
            let from = part * LIST_PART;
            let routed = routed.as_ref().map(|r| Routed {
                epoch: r.epoch,
                to: r.to[from..from + wants.len()].into(),
            });
            self.state().acquire_all(holder, wants.to_vec(), routed);
        }
    }
}
