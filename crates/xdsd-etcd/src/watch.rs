//! The watch: one etcd watch on the prefix, resumed after a loss, resynced after a compaction.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use bytes::Bytes;
use etcd_client::WatchOptions;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::error::{self, Kind};
use crate::keys::{classify, Key};
use crate::{Etcd, Event, KeyChange};

/// A running watch of the prefix: take its [`Event`]s with [`Watch::next`]. It never ends on its
/// own (etcd lost is reported and retried); dropping it stops it.
pub struct Watch {
    events: mpsc::Receiver<Event>,
    task: JoinHandle<()>,
}

impl Watch {
    /// The next event, waiting for it. `None` only if the watch's task died, which is a bug
    /// (it ends on its own only when the `Watch` is dropped).
    pub async fn next(&mut self) -> Option<Event> {
        self.events.recv().await
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch").finish_non_exhaustive()
    }
}

pub(crate) fn start(etcd: Etcd, after: i64) -> Watch {
    let (tx, events) = mpsc::channel(etcd.inner.options.capacity);
    let task = tokio::spawn(run(etcd, after, tx));
    Watch { events, task }
}

/// Why one watch ended.
enum End {
    /// The consumer dropped the watch.
    Gone,
    /// The watch is lost (etcd unreachable, stream error, canceled): retry later.
    Lost(String),
    /// etcd compacted past the revision to resume from, or sent more than the client takes:
    /// read the prefix again.
    Resync(String),
}

/// The delays between reconnection attempts.
struct Backoff {
    min: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    fn new((min, max): (Duration, Duration)) -> Backoff {
        Backoff {
            min,
            max,
            next: min,
        }
    }

    fn reset(&mut self) {
        self.next = self.min;
    }

    /// The next delay: between half and all of the current step, which then doubles.
    fn delay(&mut self) -> Duration {
        let step = self.next;
        self.next = (step * 2).min(self.max);
        let random = RandomState::new().build_hasher().finish();
        let half = step / 2;
        let nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
        half + Duration::from_nanos(if nanos == 0 { 0 } else { random % (nanos + 1) })
    }
}

async fn run(etcd: Etcd, mut after: i64, tx: mpsc::Sender<Event>) {
    let options = &etcd.inner.options;
    let mut backoff = Backoff::new(options.backoff);
    let mut healthy = true;
    let mut resync = false;
    loop {
        let end = if resync {
            match etcd.read().await {
                Ok(snapshot) => {
                    tracing::info!(prefix = %options.prefix, revision = snapshot.revision,
                        "etcd: read the prefix again");
                    let revision = snapshot.revision;
                    if !set_health(&tx, &mut healthy, true, "the prefix was read again").await
                        || tx.send(Event::Resync(snapshot)).await.is_err()
                    {
                        return;
                    }
                    after = revision;
                    resync = false;
                    backoff.reset();
                    continue;
                }
                Err(e) => End::Lost(e.to_string()),
            }
        } else {
            follow(&etcd, &mut after, &tx, &mut healthy, &mut backoff).await
        };
        match end {
            End::Gone => return,
            End::Resync(why) => {
                tracing::warn!(prefix = %options.prefix, after, "etcd: {why}; reading the prefix again");
                resync = true;
            }
            End::Lost(why) => {
                if healthy {
                    tracing::warn!(endpoints = %options.where_(), prefix = %options.prefix,
                        "etcd watch lost: {why}");
                }
                if !set_health(&tx, &mut healthy, false, &why).await {
                    return;
                }
                let delay = backoff.delay();
                tracing::debug!(?delay, "etcd: watching again after {delay:?}: {why}");
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// Reports a change of health; false when the consumer is gone.
async fn set_health(tx: &mpsc::Sender<Event>, healthy: &mut bool, now: bool, reason: &str) -> bool {
    if *healthy == now {
        return true;
    }
    *healthy = now;
    tx.send(Event::Health {
        healthy: now,
        reason: reason.to_string(),
    })
    .await
    .is_ok()
}

/// Opens one watch from `after + 1` and forwards its revisions until it ends.
async fn follow(
    etcd: &Etcd,
    after: &mut i64,
    tx: &mpsc::Sender<Event>,
    healthy: &mut bool,
    backoff: &mut Backoff,
) -> End {
    let inner = &etcd.inner;
    let options = &inner.options;
    let what = || format!("watching prefix {}", options.prefix);
    // Fragmenting stays off (`WatchOptions::new` leaves it so): etcd then sends each revision
    // whole in one response.
    let watch = WatchOptions::new()
        .with_range(inner.end.clone())
        .with_start_revision(*after + 1);
    let mut client = inner.watch.clone();
    let mut stream = match etcd
        .call(what, client.watch(inner.prefix.clone(), Some(watch)))
        .await
    {
        Err(timeout) => return End::Lost(timeout.to_string()),
        Ok(Err(e)) => {
            return End::Lost(error::from_client(&options.where_(), &what(), &e).to_string())
        }
        Ok(Ok(stream)) => stream,
    };
    let mut established = false;
    loop {
        let message = if established {
            stream.message().await
        } else {
            match etcd.call(what, stream.message()).await {
                Err(timeout) => return End::Lost(timeout.to_string()),
                Ok(message) => message,
            }
        };
        let response = match message {
            Ok(Some(response)) => response,
            Ok(None) => return End::Lost("etcd closed the watch stream".into()),
            Err(e) => {
                return match error::kind(&e) {
                    Kind::TooLargeResponse => End::Resync(format!(
                        "a watch response was over the limit ({})",
                        error::reason(&e)
                    )),
                    _ => End::Lost(error::from_client(&options.where_(), &what(), &e).to_string()),
                }
            }
        };
        if response.canceled() {
            if response.compact_revision() > 0 {
                return End::Resync(format!(
                    "etcd compacted past revision {} (to {})",
                    *after + 1,
                    response.compact_revision()
                ));
            }
            let reason = response.cancel_reason();
            return End::Lost(format!(
                "etcd at {} canceled the watch of {}: {}",
                options.where_(),
                options.prefix,
                if reason.is_empty() {
                    "no reason given"
                } else {
                    reason
                }
            ));
        }
        if !established {
            established = true;
            backoff.reset();
            if !set_health(tx, healthy, true, "the watch is established again").await {
                return End::Gone;
            }
        }
        for (revision, changes) in group(etcd, *after, response.events()) {
            *after = revision;
            if changes.is_empty() {
                continue;
            }
            if tx
                .send(Event::Revision { revision, changes })
                .await
                .is_err()
            {
                return End::Gone;
            }
        }
    }
}

/// The events of one response as (revision, changes to resource keys), one entry per revision
/// in order, skipping revisions not after `after` (never repeated).
fn group(etcd: &Etcd, after: i64, events: &[etcd_client::Event]) -> Vec<(i64, Vec<KeyChange>)> {
    let limit = etcd.inner.options.max_value_bytes;
    let mut groups: Vec<(i64, Vec<KeyChange>)> = Vec::new();
    for event in events {
        let Some(kv) = event.kv() else { continue };
        let revision = kv.mod_revision();
        if revision <= after {
            continue;
        }
        let change = match classify(&etcd.inner.prefix, kv.key()) {
            Key::Reserved => None,
            // A delete event's key-value has version 0 (etcd resets it on deletion); a put's is
            // at least 1. Read this way rather than by the event type, whose accessor panics on
            // a type it does not know.
            Key::Resource(key) | Key::Invalid(key, _) if kv.version() == 0 => {
                Some(KeyChange::Delete { key })
            }
            Key::Invalid(key, why) => Some(KeyChange::Rejected {
                key,
                reason: why.to_string(),
            }),
            Key::Resource(key) if kv.value().len() > limit => Some(KeyChange::Rejected {
                key,
                reason: format!(
                    "the value is {} bytes, over the limit of {limit} bytes",
                    kv.value().len()
                ),
            }),
            Key::Resource(key) => Some(KeyChange::Put {
                key,
                value: Bytes::copy_from_slice(kv.value()),
            }),
        };
        match groups.last_mut() {
            Some((last, changes)) if *last == revision => changes.extend(change),
            _ => groups.push((revision, change.into_iter().collect())),
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_max_with_jitter_between_half_and_all() {
        let mut b = Backoff::new((Duration::from_millis(100), Duration::from_millis(500)));
        let steps = [100, 200, 400, 500, 500];
        for step in steps {
            let d = b.delay();
            let step = Duration::from_millis(step);
            assert!(d >= step / 2 && d <= step, "{d:?} for step {step:?}");
        }
        b.reset();
        assert!(b.delay() <= Duration::from_millis(100));
    }
}
