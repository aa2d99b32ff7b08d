//! The source revision of the state a store serves: which revision of its source (etcd's) the
//! last committed change was, so that a server can say which one it serves (CSDS answers, the
//! admin API) and replicas of one source can be compared.

use super::Store;

impl Store {
    /// The source revision of the state the store serves: that of the last change committed to
    /// it with one (through [`crate::CommitTarget::commit`], which a [`crate::Feed`] calls with
    /// the source's revision); `None` until then, and always for a source without revisions (a
    /// directory). A change the store refused leaves it as it was: the store still serves the
    /// earlier revision.
    pub fn source_revision(&self) -> Option<i64> {
        *self
            .inner
            .source_revision
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Records that the store now serves the source's `revision` (a [`crate::CommitTarget`] of
    /// one's own calls it after each change it committed).
    pub fn set_source_revision(&self, revision: Option<i64>) {
        *self
            .inner
            .source_revision
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = revision;
    }
}

#[cfg(test)]
mod tests {
    use crate::source::{CommitTarget, Update};
    use crate::store::{ResourceInput, Store};
    use crate::types::CLUSTER;

    /// A cluster named `name` (one byte), its discovery type `kind` (so that content differs).
    fn cluster(name: &str, kind: u8) -> ResourceInput {
        let mut value = vec![0x0a, 1];
        value.extend_from_slice(name.as_bytes());
        value.extend_from_slice(&[0x10, kind]);
        ResourceInput::new(CLUSTER, name, bytes::Bytes::from(value))
    }

    #[test]
    fn a_store_serves_the_revision_of_its_last_committed_change_and_keeps_it_on_a_refusal() {
        let store = Store::new();
        assert_eq!(store.source_revision(), None, "nothing committed yet");
        // (Through the trait: the store's own `commit` is another, private, method.)
        CommitTarget::first_load(&store, Update::All(vec![cluster("a", 1)]), Some(7))
            .expect("committed");
        assert_eq!(store.source_revision(), Some(7));
        CommitTarget::commit(&store, Update::All(vec![cluster("a", 2)]), Some(9))
            .expect("committed");
        assert_eq!(store.source_revision(), Some(9));
        // The same state again at a later revision: still a commit, at that revision.
        CommitTarget::commit(&store, Update::All(vec![cluster("a", 2)]), Some(11))
            .expect("committed");
        assert_eq!(store.source_revision(), Some(11));
        // Refused (a duplicate name): the store still serves revision 11.
        let refused = CommitTarget::commit(
            &store,
            Update::All(vec![cluster("b", 1), cluster("b", 2)]),
            Some(12),
        );
        assert!(refused.is_err(), "a duplicate is refused");
        assert_eq!(store.source_revision(), Some(11));
        // A source without revisions leaves none.
        let directory = Store::new();
        CommitTarget::commit(&directory, Update::All(vec![cluster("a", 1)]), None)
            .expect("committed");
        assert_eq!(directory.source_revision(), None);
    }
}
