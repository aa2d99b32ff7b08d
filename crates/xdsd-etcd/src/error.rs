//! What can go wrong talking to etcd, each saying what failed and where.

use std::path::PathBuf;
use std::time::Duration;

/// An error of the etcd access. Every message names the endpoints (and the key or file) involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EtcdError {
    /// The options cannot work (no endpoint, an empty prefix, an `http://` endpoint with TLS
    /// files, a reserved key in a push, ...).
    #[error("etcd options: {0}")]
    Options(String),
    /// A TLS file could not be read.
    #[error("cannot read the etcd TLS {what} file {}: {source}", path.display())]
    TlsFile {
        /// Which file: `CA`, `certificate` or `key`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// No endpoint answered (refused, reset, TLS handshake failed, no leader, ...).
    #[error("etcd at {endpoints} is unreachable while {what}: {reason}")]
    Unreachable {
        /// The endpoints, comma-separated.
        endpoints: String,
        /// What was being done (e.g. `reading prefix /xdsd/`).
        what: String,
        /// What the client library or etcd said.
        reason: String,
    },
    /// etcd did not answer within the request timeout.
    #[error("etcd at {endpoints} did not answer within {after:?} while {what}")]
    Timeout {
        /// The endpoints, comma-separated.
        endpoints: String,
        /// What was being done.
        what: String,
        /// The request timeout.
        after: Duration,
    },
    /// etcd refused the credentials, or the user lacks a permission on the prefix.
    #[error("etcd at {endpoints} refused {what}: {reason}")]
    Auth {
        /// The endpoints, comma-separated.
        endpoints: String,
        /// What was refused (e.g. `authentication as user xdsd`).
        what: String,
        /// What etcd said.
        reason: String,
    },
    /// The prefix changed between a push's read and its transaction: nothing was written.
    #[error(
        "the prefix {prefix} changed since it was read at revision {revision}: another push or \
         writer; nothing was written"
    )]
    Conflict {
        /// The prefix.
        prefix: String,
        /// The revision the push read.
        revision: i64,
    },
    /// A push needs more operations than one transaction may hold.
    #[error(
        "a push of {operations} operations (puts, deletes and the marker key) exceeds {} per etcd \
         transaction (etcd's --max-txn-ops, 128 by default; raise it on every etcd member and the \
         push's own limit with it): nothing was written",
        limit.map_or("etcd's limit".to_string(), |limit| format!("the limit of {limit}"))
    )]
    TooManyOperations {
        /// The operations the push needs.
        operations: usize,
        /// The configured limit it was checked against; `None` when etcd itself refused the
        /// transaction (its `--max-txn-ops` is lower than the configured limit).
        limit: Option<usize>,
    },
    /// A value is larger than the configured limit.
    #[error("the value of key {key} is {size} bytes, over the limit of {limit} bytes")]
    ValueTooLarge {
        /// The full etcd key.
        key: String,
        /// Its size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// etcd refused a request as larger than its `--max-request-bytes` (1.5 MiB by default).
    #[error(
        "etcd at {endpoints} refused {what} as too large (etcd's --max-request-bytes, 1.5 MiB by \
         default): {reason}"
    )]
    RequestTooLarge {
        /// The endpoints, comma-separated.
        endpoints: String,
        /// What was refused.
        what: String,
        /// What etcd said.
        reason: String,
    },
    /// A read at a past revision that etcd compacted away.
    #[error("etcd compacted the history of prefix {prefix} past revision {revision}")]
    Compacted {
        /// The prefix.
        prefix: String,
        /// The revision asked for.
        revision: i64,
    },
    /// Any other refusal or failure of a request.
    #[error("etcd at {endpoints}: {what} failed: {reason}")]
    Request {
        /// The endpoints, comma-separated.
        endpoints: String,
        /// What was being done.
        what: String,
        /// What the client library or etcd said.
        reason: String,
    },
}

/// What a failed call means, before the context is added.
pub(crate) enum Kind {
    Unreachable,
    Auth,
    TooManyOps,
    TooLargeRequest,
    /// A response over the client's decoding limit (a value over the limit).
    TooLargeResponse,
    /// The revision asked for was compacted.
    Compacted,
    Other,
}

/// Classifies an error of the client library.
pub(crate) fn kind(error: &etcd_client::Error) -> Kind {
    use tonic::Code;
    match error {
        etcd_client::Error::GRpcStatus(status) => {
            let message = status.message();
            match status.code() {
                Code::Unavailable | Code::Cancelled | Code::DeadlineExceeded | Code::Aborted => {
                    Kind::Unreachable
                }
                Code::Unauthenticated | Code::PermissionDenied => Kind::Auth,
                Code::OutOfRange if message.contains("length too large") => Kind::TooLargeResponse,
                Code::OutOfRange if message.contains("compacted") => Kind::Compacted,
                _ if message.contains("too many operations") => Kind::TooManyOps,
                _ if message.contains("request is too large") => Kind::TooLargeRequest,
                _ if message.contains("authentication failed")
                    || message.contains("invalid auth token")
                    || message.contains("user name is empty") =>
                {
                    Kind::Auth
                }
                _ => Kind::Other,
            }
        }
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => Kind::Unreachable,
        _ => Kind::Other,
    }
}

/// Whether etcd did not take the request: no connection (a listed endpoint down) or
/// `Unavailable` (e.g. `etcdserver: leader changed`, a proposal dropped by an election). Sending it
/// again is safe for a read, and for a transaction guarded by a revision (were it applied after
/// all, the retry finds the prefix changed and writes nothing).
pub(crate) fn unavailable(error: &etcd_client::Error) -> bool {
    match error {
        etcd_client::Error::GRpcStatus(status) => status.code() == tonic::Code::Unavailable,
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        _ => false,
    }
}

/// The error for a failed call doing `what` against `endpoints`.
pub(crate) fn from_client(endpoints: &str, what: &str, error: &etcd_client::Error) -> EtcdError {
    let endpoints = endpoints.to_string();
    let what = what.to_string();
    let reason = reason(error);
    match kind(error) {
        Kind::Unreachable => EtcdError::Unreachable {
            endpoints,
            what,
            reason,
        },
        Kind::Auth => EtcdError::Auth {
            endpoints,
            what,
            reason,
        },
        Kind::TooLargeRequest => EtcdError::RequestTooLarge {
            endpoints,
            what,
            reason,
        },
        _ => EtcdError::Request {
            endpoints,
            what,
            reason,
        },
    }
}

/// The shortest faithful text of an error of the client library: a gRPC status's code and
/// message, then the causes that add something (transport errors repeat their sources' text).
pub(crate) fn reason(error: &etcd_client::Error) -> String {
    let (mut text, mut source) = match error {
        etcd_client::Error::GRpcStatus(status) => (
            format!("{:?}: {}", status.code(), status.message()),
            std::error::Error::source(status),
        ),
        other => (other.to_string(), std::error::Error::source(other)),
    };
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
