//! Sans-I/O protocol state machines. Input: a request, or "these names changed in the store".
//! Output: the response to send, if any. No sockets, clocks or tasks in here: the transports
//! drive these machines and tests drive them directly.

pub mod delta;
#[cfg(test)]
mod model_tests;
pub mod sotw;
#[cfg(test)]
mod test_support;

use std::sync::Arc;

use crate::store::TypeSnapshot;

/// A requested name as the store's shared allocation when the store has that resource, so that
/// streams subscribed to the same names share them.
pub(crate) fn intern(current: Option<&Arc<TypeSnapshot>>, name: &str) -> Arc<str> {
    current
        .and_then(|t| t.intern(name))
        .unwrap_or_else(|| name.into())
}

/// Makes the nonces of one stream: each response gets a fresh one, never reused on the stream.
#[derive(Debug, Default)]
pub struct NonceGen {
    next: u64,
}

impl NonceGen {
    pub fn next_nonce(&mut self) -> String {
        self.next += 1;
        self.next.to_string()
    }
}

/// How a request relates to the responses already sent for its type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestKind {
    /// The first request for this type on the stream.
    Initial,
    /// Accepts the response with this nonce.
    Ack { nonce: String },
    /// Rejects the response with this nonce (`error_detail` is set). `rejected_version` is the
    /// version that response carried.
    Nack {
        nonce: String,
        rejected_version: Option<Arc<str>>,
        message: String,
    },
    /// Changes the subscription without answering a response (no nonce).
    Update,
    /// Names a nonce older than the latest one sent for this type: superseded, not answered.
    Stale { nonce: String },
}

/// How a request changed what the stream watches, for the transport to pass on to the store.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SubscriptionChange {
    /// `Some(on)` when the wildcard subscription was turned on or off.
    pub wildcard: Option<bool>,
    pub added: Vec<Arc<str>>,
    pub removed: Vec<Arc<str>>,
}

/// The node identity of a stream, fixed by its first request. Only id and cluster are kept: a
/// whole Envoy Node (its extensions, metadata, version) would cost kilobytes per stream.
#[derive(Debug, Default)]
pub struct NodeIdentity {
    node: Option<(Box<str>, Box<str>)>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("node changed mid-stream: first request was from {first:?}, this one from {now:?}")]
pub struct NodeChanged {
    pub first: String,
    pub now: String,
}

impl NodeIdentity {
    /// Records the node of the first request that carries one; later requests may omit it, but
    /// one that names a different node (id or cluster) is a client error.
    pub fn check(&mut self, node: Option<(&str, &str)>) -> Result<(), NodeChanged> {
        let Some((now_id, now_cluster)) = node else {
            return Ok(());
        };
        if now_id.is_empty() && now_cluster.is_empty() {
            return Ok(());
        }
        match &self.node {
            None => {
                self.node = Some((now_id.into(), now_cluster.into()));
                Ok(())
            }
            Some((id, cluster)) if **id == *now_id && **cluster == *now_cluster => Ok(()),
            Some((id, _)) => Err(NodeChanged {
                first: id.to_string(),
                now: now_id.to_owned(),
            }),
        }
    }

    /// The node id for logs ("" until a request carried one).
    pub fn id(&self) -> &str {
        self.node.as_ref().map(|(id, _)| &**id).unwrap_or("")
    }

    /// Whether a request carried a node yet.
    pub fn is_known(&self) -> bool {
        self.node.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node<'a>(id: &'a str, cluster: &'a str) -> (&'a str, &'a str) {
        (id, cluster)
    }

    #[test]
    fn node_identity_is_taken_from_the_first_request() {
        let mut identity = NodeIdentity::default();
        identity.check(Some(node("a", "c"))).unwrap();
        assert_eq!(identity.id(), "a");
    }

    #[test]
    fn later_requests_may_omit_the_node() {
        let mut identity = NodeIdentity::default();
        identity.check(Some(node("a", "c"))).unwrap();
        identity.check(None).unwrap();
        identity.check(Some(("", ""))).unwrap();
        identity.check(Some(node("a", "c"))).unwrap();
    }

    #[test]
    fn a_later_request_with_a_different_node_is_an_error() {
        let mut identity = NodeIdentity::default();
        identity.check(Some(node("a", "c"))).unwrap();
        assert!(identity.check(Some(node("b", "c"))).is_err());
        assert!(identity.check(Some(node("a", "other"))).is_err());
    }

    #[test]
    fn nonces_are_never_reused_on_a_stream() {
        let mut nonces = NonceGen::default();
        let all: std::collections::HashSet<String> =
            (0..1000).map(|_| nonces.next_nonce()).collect();
        assert_eq!(all.len(), 1000);
    }
}
