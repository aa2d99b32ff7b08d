//! xdsd's access to etcd (the v3 API, through the `etcd-client` crate 0.21): everything that
//! talks to etcd for the etcd resource source and `xdsd push`, and nothing about resources.
//!
//! - [`load`] (or [`Etcd::connect`] then [`Etcd::read`]): the whole prefix in one read at one
//!   revision, as a [`Snapshot`] of key suffix → value.
//! - [`Etcd::watch`]: one watch on the prefix from the next revision, as [`Event`]s: one
//!   [`Event::Revision`] per etcd revision (one transaction), [`Event::Health`] when etcd is lost
//!   and found again (the watch resumes from the last revision seen), [`Event::Resync`] when etcd
//!   compacted past that revision (the prefix is read again).
//! - [`Etcd::plan_push`] and [`Etcd::apply_push`]: make the prefix hold exactly a given set of
//!   keys, in one transaction guarded by the revision read.
//! - [`Etcd::history`]: the prefix's revisions as etcd keeps them (until compaction), each a push
//!   with what its marker recorded ([`PushNote`]: author, message, names) or a direct write with
//!   its keys; [`Etcd::apply_push_noted`] writes such a note with a push.
//! - [`EtcdSource`]: the prefix as an [`xdsd_core::source::Source`], each key holding what a
//!   resource file holds.
//! - [`rollout`]: a gated rollout's state shared by the replicas (`<prefix>.rollout`).
//!
//! **Keys.** A key under the prefix is named by its suffix after the prefix (`/xdsd/a/b.yaml`
//! under `/xdsd/` is `a/b.yaml`). Keys whose last `/`-separated segment starts with `.` are not
//! resources: they are reserved for xdsd's own records (`<prefix>.push`, written by every push,
//! and `<prefix>.rollout`, the shared state of a gated rollout)
//! and are ignored by the read, the watch and the push's diff. A key that cannot be a resource
//! (not UTF-8, the prefix itself) or a value over [`EtcdOptions::with_max_value_bytes`] is not
//! dropped silently: it is reported as [`KeyChange::Rejected`] or in [`Snapshot::rejected`],
//! for the consumer to report as an error for that key.
//!
//! **Bounds.** Reads are paged (a response holds at most a page of keys, each at most the value
//! limit); the watch holds at most one etcd response and [`EtcdOptions::with_event_capacity`]
//! events for the consumer, and stops reading from etcd while the consumer is behind.
#![warn(missing_docs)]

mod error;
mod history;
mod keys;
mod note;
mod options;
mod push;
mod read;
pub mod rollout;
mod source;
mod watch;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

pub use error::EtcdError;
pub use history::{Change, History, KeyChanges, MAX_HISTORY};
pub use note::{
    Names, PushNote, PushRecord, FIRST_NAMES, MAX_AUTHOR_BYTES, MAX_MESSAGE_BYTES, MAX_NAME_BYTES,
};
pub use options::{EtcdOptions, DEFAULT_MAX_TXN_OPS, DEFAULT_MAX_VALUE_BYTES};
pub use push::{PushPlan, PUSH_MARKER};
pub use source::{parse_value, EtcdSource, StartError};
pub use watch::Watch;

/// How many times a read or a push's transaction is sent when etcd answers `Unavailable` (the
/// client sent it to a listed endpoint that is down, or an election is under way): the client
/// balances over the endpoints, so a later attempt reaches a live one.
pub(crate) const UNAVAILABLE_ATTEMPTS: u32 = 5;

/// The contents of the prefix at one revision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The etcd revision the prefix was read at.
    pub revision: i64,
    /// Every resource key (its suffix after the prefix) with its value.
    pub entries: BTreeMap<String, Bytes>,
    /// Keys under the prefix that cannot be resources, with the reason (a value over the limit,
    /// a key that is not UTF-8 — named with its invalid bytes replaced); the consumer reports
    /// each as an error for that key.
    pub rejected: BTreeMap<String, String>,
}

/// One change of one key under the prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyChange {
    /// The key was created or changed and now holds `value`.
    Put {
        /// The key's suffix after the prefix.
        key: String,
        /// Its value.
        value: Bytes,
    },
    /// The key was deleted.
    Delete {
        /// The key's suffix after the prefix.
        key: String,
    },
    /// The key was created or changed, but what it holds cannot be a resource (`reason`: its
    /// value is over the limit, or the key is not UTF-8). The consumer treats it like a value
    /// that does not parse: an error for the key.
    Rejected {
        /// The key's suffix after the prefix.
        key: String,
        /// Why.
        reason: String,
    },
}

impl KeyChange {
    /// The key's suffix after the prefix.
    pub fn key(&self) -> &str {
        match self {
            KeyChange::Put { key, .. }
            | KeyChange::Delete { key }
            | KeyChange::Rejected { key, .. } => key,
        }
    }
}

/// What a [`Watch`] reports.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// Every change of one etcd revision (one transaction), in etcd's order: one store commit.
    /// Revisions come in increasing order, each once; a revision that changed only reserved keys
    /// (a push that changed nothing but its marker) is not reported.
    Revision {
        /// The etcd revision.
        revision: i64,
        /// Its changes to resource keys.
        changes: Vec<KeyChange>,
    },
    /// The watch could not resume from the last revision seen (etcd compacted past it): the whole
    /// prefix was read again at `snapshot.revision`; the consumer replaces everything with it.
    /// The watch continues from the next revision.
    Resync(Snapshot),
    /// etcd became unreachable (`healthy: false`, with the reason) or reachable again (`healthy:
    /// true`, sent once the watch is re-established, before any event after it). Reported once
    /// per change of state; the watch starts healthy.
    Health {
        /// Whether the watch is established.
        healthy: bool,
        /// What happened (the error while unhealthy).
        reason: String,
    },
}

/// A connection to etcd for one prefix: cheap to clone, shared by reads, watches and pushes.
#[derive(Clone)]
pub struct Etcd {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Etcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Etcd")
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

struct Inner {
    options: EtcdOptions,
    kv: etcd_client::KvClient,
    watch: etcd_client::WatchClient,
    /// The prefix's bytes and the end of its range.
    prefix: Vec<u8>,
    end: Vec<u8>,
}

/// Connects to etcd and reads the whole prefix at one revision: what a source loads first.
/// Watch from `snapshot.revision` ([`Etcd::watch`]) to follow it.
pub async fn load(options: &EtcdOptions) -> Result<(Etcd, Snapshot), EtcdError> {
    let etcd = Etcd::connect(options).await?;
    let snapshot = etcd.read().await?;
    Ok((etcd, snapshot))
}

/// Some slack over the value limit for the rest of a response (key, header, framing).
const RESPONSE_SLACK: usize = 1024 * 1024;

impl Etcd {
    /// Checks the options, reads the TLS files and prepares the connection (authenticating when a
    /// user is set). Without a user nothing is sent yet: an etcd that is not there is found by
    /// the first read.
    pub async fn connect(options: &EtcdOptions) -> Result<Etcd, EtcdError> {
        if options.endpoints.is_empty() || options.endpoints.iter().any(|e| e.trim().is_empty()) {
            return Err(EtcdError::Options(
                "at least one endpoint is needed, and none may be empty".into(),
            ));
        }
        if options.prefix.is_empty() {
            return Err(EtcdError::Options(
                "the prefix may not be empty (it would be the whole of etcd)".into(),
            ));
        }
        if options.cert.is_some() != options.key.is_some() {
            return Err(EtcdError::Options(
                "a client certificate needs its key and a key its certificate".into(),
            ));
        }
        let mut connect = etcd_client::ConnectOptions::new()
            .with_connect_timeout(options.connect_timeout)
            .with_keep_alive(options.keep_alive.0, options.keep_alive.1)
            .with_keep_alive_while_idle(false)
            .with_require_leader(true);
        if options.tls() {
            if let Some(plain) = options.endpoints.iter().find(|e| e.starts_with("http://")) {
                return Err(EtcdError::Options(format!(
                    "endpoint {plain} is plain http but TLS files are set: use https://"
                )));
            }
            let mut tls = etcd_client::TlsOptions::new();
            if let Some(ca) = &options.ca {
                let pem = read_tls_file("CA", ca)?;
                tls = tls.ca_certificate(etcd_client::Certificate::from_pem(pem));
            }
            if let (Some(cert), Some(key)) = (&options.cert, &options.key) {
                let cert = read_tls_file("certificate", cert)?;
                let key = read_tls_file("key", key)?;
                tls = tls.identity(etcd_client::Identity::from_pem(cert, key));
            }
            connect = connect.with_tls(tls);
        }
        if let Some((user, password)) = &options.user {
            connect = connect
                .with_user(user.clone(), password.clone())
                .with_auto_token_refresh(true);
        }
        let where_ = options.where_();
        let what = match options.user() {
            Some(user) => format!("authentication as user {user}"),
            None => "connecting".to_string(),
        };
        let client = match tokio::time::timeout(
            options.request_timeout,
            etcd_client::Client::connect(&options.endpoints, Some(connect)),
        )
        .await
        {
            Err(_) => {
                return Err(EtcdError::Timeout {
                    endpoints: where_,
                    what,
                    after: options.request_timeout,
                })
            }
            Ok(Err(e)) => {
                return Err(match error::kind(&e) {
                    error::Kind::Unreachable => error::from_client(&where_, &what, &e),
                    _ if options.user.is_some() => EtcdError::Auth {
                        endpoints: where_,
                        what,
                        reason: error::reason(&e),
                    },
                    _ => EtcdError::Options(format!("{where_}: {}", error::reason(&e))),
                })
            }
            Ok(Ok(client)) => client,
        };
        let limit = options.max_value_bytes.saturating_add(RESPONSE_SLACK);
        let prefix = options.prefix.as_bytes().to_vec();
        let end = keys::prefix_end(&prefix);
        Ok(Etcd {
            inner: Arc::new(Inner {
                options: options.clone(),
                kv: client.kv_client().max_decoding_message_size(limit),
                watch: client.watch_client().max_decoding_message_size(limit),
                prefix,
                end,
            }),
        })
    }

    /// The options this connection was made with.
    pub fn options(&self) -> &EtcdOptions {
        &self.inner.options
    }

    /// Reads the whole prefix at one revision (the latest), page by page.
    pub async fn read(&self) -> Result<Snapshot, EtcdError> {
        read::read(self).await
    }

    /// Reads the whole prefix as it was at `revision` (a past one), page by page;
    /// [`EtcdError::Compacted`] when etcd compacted it away.
    pub async fn read_at(&self, revision: i64) -> Result<Snapshot, EtcdError> {
        read::read_at(self, revision).await
    }

    /// Starts watching the prefix for changes after revision `after` (usually the revision of
    /// the snapshot just read): a task that runs until the [`Watch`] is dropped. See [`Event`].
    /// Must be called within a tokio runtime.
    pub fn watch(&self, after: i64) -> Watch {
        watch::start(self.clone(), after)
    }

    /// Reads the prefix and compares it with `desired` (key suffix → value): what a push would
    /// write. Refuses reserved keys (last segment starting with `.`), empty keys and values over
    /// the value limit. Reserved keys in etcd are left alone; a key that is not UTF-8 cannot be
    /// named and is left alone too (its delete, under its lossy name, deletes nothing).
    pub async fn plan_push(&self, desired: BTreeMap<String, Bytes>) -> Result<PushPlan, EtcdError> {
        push::plan(self, desired).await
    }

    /// Writes `plan` in one etcd transaction that succeeds only if no key under the prefix was
    /// modified after `plan.revision` (and writes the marker key [`PUSH_MARKER`] so that a
    /// concurrent push that only deletes is detected too). Returns the revision written;
    /// [`EtcdError::Conflict`] when the prefix changed meanwhile (nothing written);
    /// [`EtcdError::TooManyOperations`] when the plan needs more operations than
    /// [`EtcdOptions::with_max_txn_ops`] (nothing sent).
    pub async fn apply_push(&self, plan: &PushPlan) -> Result<i64, EtcdError> {
        push::apply(self, plan, &PushNote::default()).await
    }

    /// [`Etcd::plan_push`] against `current`, a read of the prefix made by the caller (whose
    /// revision guards the push): no read of its own.
    pub fn plan_push_on(
        &self,
        current: &Snapshot,
        desired: BTreeMap<String, Bytes>,
    ) -> Result<PushPlan, EtcdError> {
        push::check(self, &desired)?;
        Ok(push::diff(current, desired))
    }

    /// [`Etcd::apply_push`] with `note` (who, why, what) in the marker, for the history. A
    /// message or author over its limit ([`MAX_MESSAGE_BYTES`], [`MAX_AUTHOR_BYTES`]) is
    /// refused, nothing sent.
    pub async fn apply_push_noted(
        &self,
        plan: &PushPlan,
        note: &PushNote,
    ) -> Result<i64, EtcdError> {
        push::apply(self, plan, note).await
    }

    /// The prefix's history up to now, newest first, at most `limit` changes (at most
    /// [`MAX_HISTORY`]): see [`History`].
    pub async fn history(&self, limit: usize) -> Result<History, EtcdError> {
        history::history(self, limit).await
    }

    /// The oldest revision etcd still has (it compacted the ones before).
    pub async fn oldest_revision(&self) -> Result<i64, EtcdError> {
        let current = self.read_revision().await?;
        history::oldest(self, current).await
    }

    /// etcd's current revision.
    async fn read_revision(&self) -> Result<i64, EtcdError> {
        let inner = &self.inner;
        let what = || format!("reading prefix {}", inner.options.prefix);
        let mut kv = inner.kv.clone();
        let get = etcd_client::GetOptions::new().with_count_only();
        match self
            .call(what, kv.get(inner.prefix.clone(), Some(get)))
            .await?
        {
            Ok(response) => Ok(response.header().map(|h| h.revision()).unwrap_or(0)),
            Err(e) => Err(error::from_client(&inner.options.where_(), &what(), &e)),
        }
    }

    /// Records in the gated rollout's shared record (`<prefix>.rollout`) that `revision` is
    /// promoted: replicas running a gated rollout promote it at once (when its change reaches
    /// them) rather than soaking it with the canaries. What `xdsd rollback --skip-canary` does
    /// after its push. Returns whether it was written (not when the record is already about a
    /// later revision).
    pub async fn promote_now(&self, revision: i64) -> Result<bool, EtcdError> {
        use xdsd_core::rollout::{Record, RecordState};
        rollout::write(
            self,
            &Record::new(revision, revision, RecordState::Promoted),
        )
        .await
    }

    /// Waits before attempt `attempt` (1, 2, …) of a request etcd answered `Unavailable` (a
    /// listed endpoint that is down, an election under way): the backoff's minimum, doubled per
    /// attempt, capped at its maximum; logged with what is retried and why.
    pub(crate) async fn unavailable_pause(&self, attempt: u32, what: &str, reason: &str) {
        let (min, max) = self.inner.options.backoff;
        let delay = min
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
            .min(max);
        tracing::warn!(
            endpoints = %self.inner.options.where_(),
            attempt,
            of = UNAVAILABLE_ATTEMPTS,
            ?delay,
            "{what}: etcd unavailable ({reason}); retrying"
        );
        tokio::time::sleep(delay).await;
    }

    /// Runs one request with the request timeout, mapping its error with `what`.
    pub(crate) async fn call<T>(
        &self,
        what: impl FnOnce() -> String,
        request: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<Result<T, etcd_client::Error>, EtcdError> {
        let after: Duration = self.inner.options.request_timeout;
        match tokio::time::timeout(after, request).await {
            Ok(result) => Ok(result),
            Err(_) => Err(EtcdError::Timeout {
                endpoints: self.inner.options.where_(),
                what: what(),
                after,
            }),
        }
    }
}

fn read_tls_file(what: &'static str, path: &std::path::Path) -> Result<Vec<u8>, EtcdError> {
    std::fs::read(path).map_err(|source| EtcdError::TlsFile {
        what,
        path: path.to_path_buf(),
        source,
    })
}
