//! A store per group of nodes (`--aggregate-by cluster|node`): each partition's downstream
//! streams read a store that holds only what that partition's upstream streams were sent, so
//! that an upstream varying a name's body by node without TP2 constraints (a legacy server, the
//! case `--aggregate-by` exists for) never has one group's body served to another. Clients of
//! the shared partition (every client by default, and those without a node) read the server's
//! own store, which the relay's [`xdsd_core::Feed`] commits to.
//!
//! The registry is the one owner of "which store does a partition read": the server's store
//! picker ([`xdsd_core::PickStore`], [`Stores::pick`]) asks it at a stream's first request, the
//! observer declares a name pending in it ([`crate::table`]), the source commits into it.
//! It keeps each store weakly ([`xdsd_core::WeakStore`]): a partition's store lives while a
//! downstream stream reads it or the source holds something of it, and is found again, the
//! same store, by whoever asks meanwhile; once nothing holds it, the next ask makes a new one
//! (nothing reads the old one). So the registry is bounded by the partitions in use, not by
//! every node ever seen.

use std::collections::HashMap;
use std::sync::Mutex;

use envoy_types::pb::envoy::config::core::v3::Node;
use prost::Message;
use xdsd_core::store::{PendingNames, ReferencePolicy};
use xdsd_core::{Store, WeakStore};

use crate::group::{AggregateBy, Partition};

/// The stores of the partitions. See the module documentation.
#[derive(Debug)]
pub(crate) struct Stores {
    by: AggregateBy,
    /// How many names may be pending at once in each store (`--max-pending`).
    max_pending: usize,
    map: Mutex<Registry>,
}

#[derive(Default)]
struct Registry {
    stores: HashMap<Partition, WeakStore>,
    /// The entries at the last sweep of those nothing holds (twice as many: swept again), so
    /// that the sweeps cost O(1) per store made.
    swept_at: usize,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("stores", &self.stores.len())
            .finish()
    }
}

impl Stores {
    /// The stores of the partitions made by `by`, each with at most `max_pending` names pending.
    pub(crate) fn new(by: AggregateBy, max_pending: usize) -> Stores {
        Stores {
            by,
            max_pending,
            map: Mutex::default(),
        }
    }

    /// The partition of a node's clients.
    pub(crate) fn partition_of(&self, node: &Node) -> Partition {
        match self.by {
            AggregateBy::None => Partition::All,
            AggregateBy::Cluster => Partition::Cluster(node.cluster.clone()),
            AggregateBy::Node => Partition::Node(node.id.clone()),
        }
    }

    /// The store a client with the encoded `node` reads: `None` for the shared partition (the
    /// server's store).
    pub(crate) fn pick(&self, node: &[u8]) -> Option<Store> {
        if self.by == AggregateBy::None {
            return None;
        }
        // A node that does not decode is refused by the session; it reads the server's store
        // meanwhile. No node, or one with neither id nor cluster (which the session takes as
        // none): the shared partition, as the observer groups it.
        let node = Node::decode(node).ok()?;
        if node.id.is_empty() && node.cluster.is_empty() {
            return None;
        }
        self.store(&self.partition_of(&node))
    }

    /// The store of `partition`, made if nothing holds one: `None` for the shared partition.
    pub(crate) fn store(&self, partition: &Partition) -> Option<Store> {
        if *partition == Partition::All {
            return None;
        }
        let mut registry = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(store) = registry.stores.get(partition).and_then(WeakStore::upgrade) {
            return Some(store);
        }
        // The relay holds what its clients asked for, not a whole graph: references are the
        // upstream's business (as the server's own store, `xdsd relay`).
        let store = Store::with_reference_policy(ReferencePolicy::off());
        store.pending_names().set_limit(self.max_pending);
        registry.stores.insert(partition.clone(), store.downgrade());
        if registry.stores.len() >= 2 * registry.swept_at.max(16) {
            registry.stores.retain(|_, s| s.upgrade().is_some());
            registry.swept_at = registry.stores.len();
        }
        Some(store)
    }

    /// The pending names of `partition`'s store, if anything holds it (`None` for the shared
    /// partition, whose are the feed's).
    pub(crate) fn pending_if_held(&self, partition: &Partition) -> Option<PendingNames> {
        let registry = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let store = registry.stores.get(partition)?.upgrade()?;
        Some(store.pending_names())
    }

    /// How many partitions' stores are registered (some may be held by nothing any more).
    #[cfg(test)]
    fn registered(&self) -> usize {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .stores
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, cluster: &str) -> Vec<u8> {
        Node {
            id: id.into(),
            cluster: cluster.into(),
            ..Default::default()
        }
        .encode_to_vec()
    }

    #[test]
    fn by_default_every_client_reads_the_servers_store() {
        let stores = Stores::new(AggregateBy::None, 10);
        assert!(stores.pick(&node("a", "x")).is_none());
    }

    #[test]
    fn each_cluster_reads_a_store_of_its_own_and_the_same_one_while_it_is_held() {
        let stores = Stores::new(AggregateBy::Cluster, 10);
        let a = stores.pick(&node("n1", "a")).expect("a store of cluster a");
        let a2 = stores.pick(&node("n2", "a")).expect("a store of cluster a");
        let b = stores.pick(&node("n3", "b")).expect("a store of cluster b");
        assert!(a.same_as(&a2), "one store per cluster");
        assert!(!a.same_as(&b), "clusters do not share a store");
        assert_eq!(a.pending_names().limit(), 10);
    }

    #[test]
    fn a_client_without_a_node_reads_the_servers_store() {
        let stores = Stores::new(AggregateBy::Cluster, 10);
        assert!(stores.pick(&[]).is_none(), "no node");
        assert!(
            stores.pick(&node("", "")).is_none(),
            "neither id nor cluster"
        );
        assert!(
            stores.pick(&node("n", "")).is_some(),
            "an id: its cluster \"\""
        );
    }

    #[test]
    fn each_node_reads_a_store_of_its_own() {
        let stores = Stores::new(AggregateBy::Node, 10);
        let a = stores.pick(&node("n1", "a")).expect("a store of node n1");
        let b = stores.pick(&node("n2", "a")).expect("a store of node n2");
        assert!(!a.same_as(&b));
    }

    #[test]
    fn a_store_nothing_holds_is_forgotten() {
        let stores = Stores::new(AggregateBy::Node, 10);
        for i in 0..1000 {
            let store = stores.pick(&node(&format!("n{i}"), "a"));
            assert!(store.is_some());
        }
        assert!(stores.registered() < 40, "{}", stores.registered());
        let held = stores.pick(&node("kept", "a")).expect("a store");
        assert!(stores
            .pending_if_held(&Partition::Node("kept".into()))
            .is_some());
        drop(held);
        assert!(stores
            .pending_if_held(&Partition::Node("kept".into()))
            .is_none());
    }
}
