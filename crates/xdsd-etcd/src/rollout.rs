//! A gated rollout's state shared by the replicas of one prefix: the record
//! ([`xdsd_core::rollout::Record`]) at `<prefix>.rollout` (reserved: never a resource).
//!
//! - At start, [`resume`] reads the record and the prefix as it was at the record's stable
//!   revision: the replica serves that stable state, and loads the source at the record's
//!   candidate revision ([`crate::EtcdSource::starting_at`]), so that its candidate is the
//!   others' (soaking, or halted with the same reason). When etcd compacted the stable revision
//!   away, the replica starts as without a record (logged at WARN).
//! - [`SharedRollout`] writes each decision taken here (in the background, the latest replacing
//!   one not written yet), in a transaction guarded by the record's mod revision and only when it
//!   goes further than the record there ([`Record::supersedes`]): a stale replica does not
//!   overwrite a newer decision. It watches the key and hands every record to
//!   [`Rollout::adopt`]; asked to ([`SharedState::refresh`]: a client holds a candidate another
//!   replica may have promoted), it reads the key again at once, one read for all the asks that
//!   come while one is under way.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, Txn, TxnOp, WatchOptions};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use xdsd_core::rollout::{Record, Rollout, SharedState, RECORD_KEY};
use xdsd_core::source::Update;
use xdsd_core::store::ResourceInput;

use crate::error;
use crate::{Etcd, EtcdError, EtcdSource, StartError};

/// What a replica starting takes up: the shared record and the stable state it names.
#[derive(Debug)]
pub struct Resume {
    /// The record.
    pub record: Record,
    /// The prefix's resources at the record's stable revision.
    pub stable: Vec<ResourceInput>,
}

/// The full key of the record.
fn record_key(etcd: &Etcd) -> String {
    format!("{}{RECORD_KEY}", etcd.inner.options.prefix)
}

/// The key as etcd has it now: the record (`None`, logged, when it does not read as one) and
/// the key's mod revision.
struct Stored {
    record: Option<Record>,
    mod_revision: i64,
}

/// The key as etcd has it now (`None`: no key), and etcd's revision.
async fn get(etcd: &Etcd) -> Result<(Option<Stored>, i64), EtcdError> {
    let key = record_key(etcd);
    let what = || format!("reading the rollout record {key}");
    let mut kv = etcd.inner.kv.clone();
    let response = match etcd.call(what, kv.get(key.clone(), None)).await? {
        Ok(response) => response,
        Err(e) => {
            return Err(error::from_client(
                &etcd.inner.options.where_(),
                &what(),
                &e,
            ))
        }
    };
    let revision = response.header().map(|h| h.revision()).unwrap_or(0);
    let stored = response.kvs().first().map(|kv| Stored {
        record: match Record::parse(kv.value()) {
            Ok(record) => Some(record),
            Err(why) => {
                tracing::warn!(key = %key, "the rollout record is ignored: {why}");
                None
            }
        },
        mod_revision: kv.mod_revision(),
    });
    Ok((stored, revision))
}

/// At start: the shared record and the stable state it names (`None` without a record, or when
/// its stable revision cannot be read: then the replica starts as without one, logged at WARN),
/// and etcd's revision the record was read at (follow records after it). `source` reads the
/// stable state as it reads resources.
pub async fn resume(etcd: &Etcd, source: &EtcdSource) -> Result<(Option<Resume>, i64), EtcdError> {
    let (stored, revision) = get(etcd).await?;
    let Some(record) = stored.and_then(|s| s.record) else {
        return Ok((None, revision));
    };
    match source.read_at(etcd, record.stable_revision).await {
        Ok(change) => match change.update {
            Update::All(stable) => Ok((Some(Resume { record, stable }), revision)),
            _ => Ok((None, revision)),
        },
        Err(StartError::Etcd(EtcdError::Compacted { .. })) => {
            tracing::warn!(
                key = %record_key(etcd),
                stable_revision = record.stable_revision,
                candidate_revision = record.candidate_revision,
                state = record.state.name(),
                "etcd compacted the rollout's stable revision away: serving the current state as \
                 the stable one (clients outside the cohort may get a change not promoted yet)"
            );
            Ok((None, revision))
        }
        Err(StartError::Rejected(why)) => {
            tracing::warn!(
                stable_revision = record.stable_revision,
                "the rollout's stable state does not load ({why}): serving the current state as \
                 the stable one"
            );
            Ok((None, revision))
        }
        Err(StartError::Etcd(e @ EtcdError::Request { .. })) => {
            // A revision etcd refuses otherwise (one ahead of it: etcd restored from a backup).
            tracing::warn!(
                stable_revision = record.stable_revision,
                "the rollout's stable state cannot be read ({e}): serving the current state as \
                 the stable one"
            );
            Ok((None, revision))
        }
        Err(StartError::Etcd(e)) => Err(e),
    }
}

/// The shared state on etcd: see the module. Its tasks stop when it is dropped.
pub struct SharedRollout {
    latest: watch::Sender<Option<Record>>,
    /// Asks for a read of the record now (one permit: asks while a read is under way make one
    /// read after it).
    refresh: Arc<Notify>,
    /// How many reads were made on asks.
    refreshed: Arc<AtomicU64>,
    tasks: [JoinHandle<()>; 3],
}

impl std::fmt::Debug for SharedRollout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedRollout").finish_non_exhaustive()
    }
}

impl SharedRollout {
    /// Writes the decisions of `rollout` to the record, and hands it the records written after
    /// etcd's revision `after` (from [`resume`]). Must be called within a tokio runtime.
    pub fn start(etcd: Etcd, rollout: Arc<Rollout>, after: i64) -> SharedRollout {
        let (latest, records) = watch::channel(None);
        let writer = tokio::spawn(write_records(etcd.clone(), records));
        // The mod revision of the last record handed over, by the watch or a read on ask.
        let followed = Arc::new(AtomicI64::new(0));
        let delay = std::env::var(WATCH_DELAY_VAR)
            .ok()
            .and_then(|ms| ms.parse().ok())
            .map(Duration::from_millis)
            .unwrap_or_default();
        let follower = tokio::spawn(follow_records(
            etcd.clone(),
            rollout.clone(),
            after,
            followed.clone(),
            delay,
        ));
        let refresh = Arc::new(Notify::new());
        let refreshed = Arc::new(AtomicU64::new(0));
        let reader = tokio::spawn(read_on_ask(
            etcd,
            rollout,
            followed,
            refresh.clone(),
            refreshed.clone(),
        ));
        SharedRollout {
            latest,
            refresh,
            refreshed,
            tasks: [writer, follower, reader],
        }
    }

    /// How many times the record was read on asks ([`SharedState::refresh`]) so far.
    pub fn reads_on_ask(&self) -> u64 {
        self.refreshed.load(Ordering::Relaxed)
    }
}

impl SharedState for SharedRollout {
    fn publish(&self, record: Record) {
        self.latest.send_replace(Some(record));
    }

    fn refresh(&self) {
        self.refresh.notify_one();
    }
}

/// Whether the record of `mod_revision` is newer than any handed over yet (and is now).
fn newer(followed: &AtomicI64, mod_revision: i64) -> bool {
    followed.fetch_max(mod_revision, Ordering::AcqRel) < mod_revision
}

/// Reads the record when asked ([`SharedState::refresh`]) and hands it to `rollout` when the
/// watch has not yet: one read at a time, the asks that come during one answered by the next.
async fn read_on_ask(
    etcd: Etcd,
    rollout: Arc<Rollout>,
    followed: Arc<AtomicI64>,
    asked: Arc<Notify>,
    reads: Arc<AtomicU64>,
) {
    loop {
        asked.notified().await;
        reads.fetch_add(1, Ordering::Relaxed);
        match get(&etcd).await {
            Ok((Some(stored), _)) => {
                if newer(&followed, stored.mod_revision) {
                    if let Some(record) = stored.record {
                        rollout.adopt(record);
                    }
                }
            }
            Ok((None, _)) => {}
            Err(e) => tracing::debug!("the rollout record could not be read again: {e}"),
        }
    }
}

impl Drop for SharedRollout {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Test only: with this variable set to a number of milliseconds, the records the watch brings
/// are handed over that much later (a replica that hears of the others' decisions late), so
/// that tests can show what a replica does before it hears of them. Never set it in production.
pub const WATCH_DELAY_VAR: &str = "XDSD_TEST_ROLLOUT_WATCH_DELAY_MS";

/// Attempts at one record before it is given up (logged at WARN), a second apart.
const ATTEMPTS: usize = 10;

async fn write_records(etcd: Etcd, mut records: watch::Receiver<Option<Record>>) {
    while records.changed().await.is_ok() {
        let Some(record) = records.borrow_and_update().clone() else {
            continue;
        };
        for attempt in 1..=ATTEMPTS {
            match write(&etcd, &record).await {
                Ok(_) => break,
                Err(e) if attempt == ATTEMPTS => {
                    tracing::warn!(
                        state = record.state.name(),
                        candidate_revision = record.candidate_revision,
                        "the rollout record was not written: {e}; the other replicas decide on \
                         their own until the next decision is written"
                    );
                }
                Err(e) => {
                    tracing::debug!("the rollout record was not written ({e}); trying again");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    if records.has_changed().unwrap_or(true) {
                        // A newer decision replaces this one.
                        break;
                    }
                }
            }
        }
    }
}

/// Writes `record` at `<prefix>.rollout` unless the record there is as far or further
/// ([`Record::supersedes`]), in a transaction guarded by the mod revision read (a write in
/// between: read again and decide again). Returns whether it was written. (What
/// [`SharedRollout`] does with each decision, in the background.)
pub async fn write(etcd: &Etcd, record: &Record) -> Result<bool, EtcdError> {
    let key = record_key(etcd);
    let value = record.to_json().to_string();
    for _ in 0..ATTEMPTS {
        let (current, _) = get(etcd).await?;
        let guard = match &current {
            Some(Stored {
                record: Some(current),
                ..
            }) if !record.supersedes(current) => return Ok(false),
            // (What does not read as a record is replaced.)
            Some(stored) => {
                Compare::mod_revision(key.clone(), CompareOp::Equal, stored.mod_revision)
            }
            None => Compare::version(key.clone(), CompareOp::Equal, 0),
        };
        let txn = Txn::new()
            .when([guard])
            .and_then([TxnOp::put(key.clone(), value.clone(), None)]);
        let what = || format!("writing the rollout record {key}");
        let mut kv = etcd.inner.kv.clone();
        match etcd.call(what, kv.txn(txn)).await? {
            Ok(response) if response.succeeded() => {
                tracing::debug!(key = %key, record = %value, "rollout record written");
                return Ok(true);
            }
            Ok(_) => continue,
            Err(e) => {
                return Err(error::from_client(
                    &etcd.inner.options.where_(),
                    &what(),
                    &e,
                ))
            }
        }
    }
    Err(EtcdError::Conflict {
        prefix: key,
        revision: record.candidate_revision,
    })
}

/// Watches the record from after `after` and hands each to `rollout`; after a loss (or a
/// compaction) reads it again and watches on.
async fn follow_records(
    etcd: Etcd,
    rollout: Arc<Rollout>,
    mut after: i64,
    followed: Arc<AtomicI64>,
    delay: Duration,
) {
    let key = record_key(&etcd);
    loop {
        let watch = WatchOptions::new().with_start_revision(after + 1);
        let mut client = etcd.inner.watch.clone();
        let what = || format!("watching the rollout record {key}");
        if let Ok(Ok(mut stream)) = etcd
            .call(what, client.watch(key.clone(), Some(watch)))
            .await
        {
            while let Ok(Some(response)) = stream.message().await {
                if response.canceled() {
                    break;
                }
                for event in response.events() {
                    let Some(kv) = event.kv() else { continue };
                    after = after.max(kv.mod_revision());
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    if kv.version() == 0 || !newer(&followed, kv.mod_revision()) {
                        continue;
                    }
                    match Record::parse(kv.value()) {
                        Ok(record) => rollout.adopt(record),
                        Err(why) => {
                            tracing::warn!(key = %key, "the rollout record is ignored: {why}")
                        }
                    }
                }
            }
        }
        // Lost, canceled or compacted: read it as it is now, and watch from there.
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if let Ok((stored, revision)) = get(&etcd).await {
                if let Some(stored) = stored.filter(|s| newer(&followed, s.mod_revision)) {
                    if let Some(record) = stored.record {
                        rollout.adopt(record);
                    }
                }
                after = revision;
                break;
            }
        }
    }
}
