//! The prefix's history as etcd keeps it (until compaction): one [`Change`] per revision that
//! changed a resource key or was a push, newest first, each a push (with what its marker
//! recorded) or a direct write (with its keys), and the gated-rollout state its revision reached
//! when a rollout record named it.
//!
//! etcd has no list of revisions: the history is replayed by one watch on the prefix from the
//! oldest revision etcd still has (found by reads: the smallest revision that is not compacted)
//! up to the revision of a read made first. A watch says nothing when there is nothing more to
//! say, so the read also tells where to stop: the latest revision that left a key under the
//! prefix, and the keys that were there then and are gone now (deleted since: their deletes are
//! waited for too). Only the changes kept (`limit`) are held, each with a bounded list of names.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use etcd_client::{EventType, GetOptions, WatchOptions};
use xdsd_core::rollout::{Record, RECORD_KEY};

use crate::error::{self, Kind};
use crate::keys::{classify, Key};
use crate::note::{Names, PushRecord};
use crate::push::PUSH_MARKER;
use crate::{Etcd, EtcdError};

/// The largest `limit` of [`Etcd::history`].
pub const MAX_HISTORY: usize = 10_000;

/// The resource keys one revision put or deleted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyChanges {
    /// Keys created.
    pub added: Names,
    /// Keys that existed and were put again.
    pub changed: Names,
    /// Keys deleted.
    pub removed: Names,
}

impl KeyChanges {
    /// How many keys the revision touched.
    pub fn total(&self) -> usize {
        self.added.count + self.changed.count + self.removed.count
    }
}

/// One revision of the prefix's history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// The etcd revision.
    pub revision: i64,
    /// What the push recorded in its marker; `None`: a direct write (not `xdsd push`).
    pub push: Option<PushRecord>,
    /// The resource keys it put or deleted.
    pub keys: KeyChanges,
    /// The furthest state a gated rollout's record gave this revision as its candidate
    /// (`soaking`, `promoted`, `halted`, `aborted`), when one did.
    pub rollout: Option<&'static str>,
}

/// The history read by [`Etcd::history`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct History {
    /// etcd's revision when it was read: the history goes up to it.
    pub current: i64,
    /// The oldest revision etcd still has (compacted before it): the history starts there.
    pub oldest: i64,
    /// The changes, newest first, at most the `limit` asked for.
    pub changes: Vec<Change>,
    /// Whether older changes (after `oldest`) were left out by the limit.
    pub more: bool,
}

/// Reads the history; see the module.
pub(crate) async fn history(etcd: &Etcd, limit: usize) -> Result<History, EtcdError> {
    let limit = limit.clamp(1, MAX_HISTORY);
    let (current, now) = keys_at(etcd, 0).await?;
    let oldest = oldest(etcd, current).await?;
    // The latest revision that left a key, and the keys deleted since (the revisions after it
    // that left no key are deletes of keys that were there then).
    let last_put = now.values().copied().max().unwrap_or(0);
    let mut pending: BTreeSet<Vec<u8>> = if last_put >= oldest {
        let (_, then) = keys_at(etcd, last_put).await?;
        then.into_keys().filter(|k| !now.contains_key(k)).collect()
    } else {
        let (_, then) = keys_at(etcd, oldest).await?;
        then.into_keys().filter(|k| !now.contains_key(k)).collect()
    };
    let mut out = History {
        current,
        oldest,
        changes: Vec::new(),
        more: false,
    };
    let mut kept: VecDeque<Change> = VecDeque::new();
    let mut open: Option<Change> = None;
    let mut seen = oldest - 1;
    let done = |seen: i64, pending: &BTreeSet<Vec<u8>>| seen >= last_put && pending.is_empty();
    if !done(seen, &pending) {
        let inner = &etcd.inner;
        let what = || format!("reading the history of prefix {}", inner.options.prefix);
        let options = WatchOptions::new()
            .with_range(inner.end.clone())
            .with_start_revision(oldest)
            .with_fragment();
        let mut client = inner.watch.clone();
        let mut stream = match etcd
            .call(what, client.watch(inner.prefix.clone(), Some(options)))
            .await?
        {
            Ok(stream) => stream,
            Err(e) => return Err(error::from_client(&inner.options.where_(), &what(), &e)),
        };
        'read: while !done(seen, &pending) {
            let message = match etcd.call(what, stream.message()).await? {
                Ok(Some(message)) => message,
                Ok(None) => {
                    return Err(EtcdError::Request {
                        endpoints: inner.options.where_(),
                        what: what(),
                        reason: "etcd ended the watch".into(),
                    })
                }
                Err(e) => return Err(error::from_client(&inner.options.where_(), &what(), &e)),
            };
            if message.canceled() {
                return Err(EtcdError::Request {
                    endpoints: inner.options.where_(),
                    what: what(),
                    reason: format!(
                        "etcd canceled the watch (compacted to revision {} meanwhile?): run it \
                         again",
                        message.compact_revision()
                    ),
                });
            }
            for event in message.events() {
                let Some(kv) = event.kv() else { continue };
                let revision = kv.mod_revision();
                if revision > current {
                    break 'read;
                }
                seen = seen.max(revision);
                if open.as_ref().is_some_and(|c| c.revision != revision) {
                    keep(&mut kept, &mut out.more, open.take(), limit);
                }
                let change = open.get_or_insert_with(|| Change {
                    revision,
                    push: None,
                    keys: KeyChanges::default(),
                    rollout: None,
                });
                let deleted = event.event_type() == EventType::Delete;
                if deleted {
                    pending.remove(kv.key());
                }
                match classify(&inner.prefix, kv.key()) {
                    Key::Resource(key) | Key::Invalid(key, _) => {
                        if deleted {
                            change.keys.removed.add(&key);
                        } else if kv.create_revision() == revision {
                            change.keys.added.add(&key);
                        } else {
                            change.keys.changed.add(&key);
                        }
                    }
                    Key::Reserved => {
                        let suffix = &kv.key()[inner.prefix.len().min(kv.key().len())..];
                        if suffix == PUSH_MARKER.as_bytes() && !deleted {
                            change.push = Some(PushRecord::parse(kv.value()));
                        } else if suffix == RECORD_KEY.as_bytes() && !deleted {
                            if let Ok(record) = Record::parse(kv.value()) {
                                let state = record.state.name();
                                // Later records about one candidate go further (the first
                                // decision wins): the last one read is the furthest.
                                if let Some(named) = kept
                                    .iter_mut()
                                    .find(|c| c.revision == record.candidate_revision)
                                {
                                    named.rollout = Some(state);
                                }
                            }
                        }
                    }
                }
            }
        }
        keep(&mut kept, &mut out.more, open.take(), limit);
        // (The watch ends when its stream is dropped.)
    }
    out.changes = kept.into_iter().rev().collect();
    Ok(out)
}

/// Keeps `change` when it is a change (resource keys or a push), dropping the oldest kept past
/// `limit`.
fn keep(kept: &mut VecDeque<Change>, more: &mut bool, change: Option<Change>, limit: usize) {
    let Some(change) = change else { return };
    if change.push.is_none() && change.keys.total() == 0 {
        // Only reserved keys (a rollout record): not a change of the resources.
        return;
    }
    if kept.len() == limit {
        kept.pop_front();
        *more = true;
    }
    kept.push_back(change);
}

/// Every key under the prefix (reserved ones too) with its mod revision, at `revision` (0: the
/// latest), and the revision read; [`EtcdError::Compacted`] when etcd compacted it.
async fn keys_at(etcd: &Etcd, revision: i64) -> Result<(i64, BTreeMap<Vec<u8>, i64>), EtcdError> {
    let inner = &etcd.inner;
    let what = || format!("reading the keys of prefix {}", inner.options.prefix);
    let mut kv = inner.kv.clone();
    let mut keys = BTreeMap::new();
    let mut start = inner.prefix.clone();
    let mut at = revision;
    loop {
        let mut get = GetOptions::new()
            .with_range(inner.end.clone())
            .with_keys_only()
            .with_limit(1024);
        if at > 0 {
            get = get.with_revision(at);
        }
        let response = match etcd.call(what, kv.get(start.clone(), Some(get))).await? {
            Ok(response) => response,
            Err(e) if matches!(error::kind(&e), Kind::Compacted) => {
                return Err(EtcdError::Compacted {
                    prefix: inner.options.prefix.clone(),
                    revision: at,
                })
            }
            Err(e) => return Err(error::from_client(&inner.options.where_(), &what(), &e)),
        };
        if at == 0 {
            at = response.header().map(|h| h.revision()).unwrap_or(0);
        }
        for kv in response.kvs() {
            keys.insert(kv.key().to_vec(), kv.mod_revision());
        }
        match response.kvs().last() {
            Some(last) if response.more() => {
                start = last.key().to_vec();
                start.push(0);
            }
            _ => return Ok((at, keys)),
        }
    }
}

/// The oldest revision etcd still has (at most `current`): the smallest one a read at does not
/// find compacted, by bisection.
pub(crate) async fn oldest(etcd: &Etcd, current: i64) -> Result<i64, EtcdError> {
    let inner = &etcd.inner;
    let what = || {
        format!(
            "finding the oldest revision of prefix {}",
            inner.options.prefix
        )
    };
    let mut kv = inner.kv.clone();
    // Invariant: `high` reads; everything below `low` is compacted.
    let (mut low, mut high) = (1, current.max(1));
    while low < high {
        let middle = low + (high - low) / 2;
        let get = GetOptions::new()
            .with_range(inner.end.clone())
            .with_count_only()
            .with_revision(middle);
        match etcd
            .call(what, kv.get(inner.prefix.clone(), Some(get)))
            .await?
        {
            Ok(_) => high = middle,
            Err(e) if matches!(error::kind(&e), Kind::Compacted) => low = middle + 1,
            Err(e) => return Err(error::from_client(&inner.options.where_(), &what(), &e)),
        }
    }
    Ok(high)
}
