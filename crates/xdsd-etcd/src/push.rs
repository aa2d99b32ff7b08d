//! The write path: make the prefix hold exactly a set of keys, in one guarded transaction.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use xdsd_core::rollout::RECORD_KEY;

use crate::error::{self, Kind};
use crate::keys::is_reserved;
use crate::{Etcd, EtcdError, Snapshot};

use crate::note::PushNote;

/// The key suffix of the marker every push writes under the prefix (`<prefix>.push`): it holds
/// the revision the push read, when it was written, and who pushed what and why
/// (`{"read_revision":R,"unix_ms":T,"author":…,"message":…,"added":{"count":N,"first":[…]},…}`,
/// a [`PushRecord`]), and, being modified by every push, makes two concurrent pushes conflict
/// even when one only deletes.
pub const PUSH_MARKER: &str = ".push";

/// What a push would write: the difference between the prefix at `revision` and the desired
/// keys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PushPlan {
    /// The revision the prefix was read at; the transaction is guarded by it.
    pub revision: i64,
    /// Keys (suffixes) to create or change, with their new values, in key order.
    pub puts: Vec<(String, Bytes)>,
    /// Keys (suffixes) to delete, in key order.
    pub deletes: Vec<String>,
    /// How many desired keys already hold their value.
    pub unchanged: usize,
}

impl PushPlan {
    /// The operations of the transaction: puts, deletes and the marker.
    pub fn operations(&self) -> usize {
        self.puts.len() + self.deletes.len() + 1
    }

    /// Whether the push changes no resource key (it would still write the marker).
    pub fn is_empty(&self) -> bool {
        self.puts.is_empty() && self.deletes.is_empty()
    }
}

pub(crate) async fn plan(
    etcd: &Etcd,
    desired: BTreeMap<String, Bytes>,
) -> Result<PushPlan, EtcdError> {
    check(etcd, &desired)?;
    let current = etcd.read().await?;
    Ok(diff(&current, desired))
}

/// Refuses reserved and empty keys and values over the limit.
pub(crate) fn check(etcd: &Etcd, desired: &BTreeMap<String, Bytes>) -> Result<(), EtcdError> {
    let options = &etcd.inner.options;
    for (key, value) in desired {
        if key.is_empty() || is_reserved(key) {
            return Err(EtcdError::Options(format!(
                "key {:?} cannot be pushed: keys must be non-empty and their last segment may not \
                 start with '.' (reserved for xdsd's records)",
                key
            )));
        }
        if value.len() > options.max_value_bytes {
            return Err(EtcdError::ValueTooLarge {
                key: format!("{}{key}", options.prefix),
                size: value.len(),
                limit: options.max_value_bytes,
            });
        }
    }
    Ok(())
}

/// What makes `current` hold exactly `desired`.
pub(crate) fn diff(current: &Snapshot, desired: BTreeMap<String, Bytes>) -> PushPlan {
    let mut plan = PushPlan {
        revision: current.revision,
        ..PushPlan::default()
    };
    for key in current.entries.keys().chain(current.rejected.keys()) {
        if !desired.contains_key(key) {
            plan.deletes.push(key.clone());
        }
    }
    plan.deletes.sort();
    plan.deletes.dedup();
    for (key, value) in desired {
        if current.entries.get(&key) == Some(&value) {
            plan.unchanged += 1;
        } else {
            plan.puts.push((key, value));
        }
    }
    plan
}

pub(crate) async fn apply(etcd: &Etcd, plan: &PushPlan, note: &PushNote) -> Result<i64, EtcdError> {
    note.check()?;
    let inner = &etcd.inner;
    let options = &inner.options;
    let operations = plan.operations();
    if operations > options.max_txn_ops {
        return Err(EtcdError::TooManyOperations {
            operations,
            limit: Some(options.max_txn_ops),
        });
    }
    let prefix = &options.prefix;
    let mut ops = Vec::with_capacity(operations);
    for (key, value) in &plan.puts {
        ops.push(TxnOp::put(format!("{prefix}{key}"), value.to_vec(), None));
    }
    for key in &plan.deletes {
        ops.push(TxnOp::delete(format!("{prefix}{key}"), None));
    }
    let unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    ops.push(TxnOp::put(
        format!("{prefix}{PUSH_MARKER}"),
        note.marker(plan.revision, unix_ms as u64).to_string(),
        None,
    ));
    // No key in [prefix, prefix end) modified after the revision read (etcd 3.3+ compares over
    // a range; an empty range compares as a key with mod revision 0), but for the rollout
    // record, which replicas write as they decide (not a resource: a push need not conflict
    // with it).
    let record = format!("{prefix}{RECORD_KEY}").into_bytes();
    let mut after_record = record.clone();
    after_record.push(0);
    let unchanged = |from: Vec<u8>, to: Vec<u8>| {
        Compare::mod_revision(from, CompareOp::Less, plan.revision.saturating_add(1)).with_range(to)
    };
    let txn = || {
        Txn::new()
            .when([
                unchanged(inner.prefix.clone(), record.clone()),
                unchanged(after_record.clone(), inner.end.clone()),
            ])
            .and_then(ops.clone())
    };
    let what = || format!("the push transaction on prefix {prefix}");
    let mut kv = inner.kv.clone();
    let mut attempt = 1;
    let response = loop {
        match etcd.call(what, kv.txn(txn())).await? {
            Ok(response) => break response,
            // Not taken (an endpoint down, an election): guarded by the revision, so safe to
            // send again.
            Err(e) if error::unavailable(&e) && attempt < crate::UNAVAILABLE_ATTEMPTS => {
                etcd.unavailable_pause(attempt, &what(), &error::reason(&e))
                    .await;
                attempt += 1;
            }
            Err(e) => {
                return Err(match error::kind(&e) {
                    Kind::TooManyOps => EtcdError::TooManyOperations {
                        operations,
                        limit: None,
                    },
                    _ => error::from_client(&options.where_(), &what(), &e),
                })
            }
        }
    };
    if !response.succeeded() {
        return Err(EtcdError::Conflict {
            prefix: prefix.clone(),
            revision: plan.revision,
        });
    }
    match response.header() {
        Some(header) => Ok(header.revision()),
        None => Err(EtcdError::Request {
            endpoints: options.where_(),
            what: what(),
            reason: "the response has no revision (the push was written)".into(),
        }),
    }
}
