//! Which upstream subscriptions the upstream has answered (and whose answer is in the store),
//! shared by the source, which records the answers, and the observer, which is told what each
//! downstream request asks for. A want asked for and not answered yet is declared *pending* in
//! the relay's store ([`xdsd_core::store::PendingNames`]): the server then holds back what would
//! tell a client that its name does not exist (a delta removal, a SotW full-state response
//! without it, a wildcard's first answer, a one-shot answer) until the upstream answers. Nothing
//! waits here: the declaration is made in the observer's call, before the server answers the
//! request, and the answer is resolved by the source once it is committed, which wakes the
//! streams that wait for it through the store's watch path.
//!
//! A want is declared in the store its clients read: the server's (the shared partition), or
//! its partition's own with `--aggregate-by cluster|node` ([`crate::stores`]).
//!
//! Bounded: a want the upstream does not answer within `--upstream-wait` is given up (the
//! source expires it: the clients are served what the relay has, and the next ones do not wait
//! again), and past the store's limit of pending names a want is not declared (logged: its
//! clients are answered as if the relay had asked nothing).
//!
//! The answered set and the declarations go under one lock, and a want is declared only while
//! it is not answered: an answer announced at the same moment is never missed (a name declared
//! after its answer was resolved would wait for nothing until it expired).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use tracing::{info, warn};
use xdsd_core::params::ParamSet;
use xdsd_core::store::{PendingName, PendingNames, WHOLE_TYPE};
use xdsd_core::ClientNode;

use crate::demand::Want;
use crate::group::Partition;
use crate::metrics::RelayMetrics;
use crate::stores::Stores;

/// The subscriptions answered, and those pending in the store. See the module documentation.
#[derive(Debug)]
pub(crate) struct Answered {
    state: Mutex<State>,
    /// The server's store's pending names (the shared partition's), once the feed handed them
    /// to the source.
    store: OnceLock<PendingNames>,
    /// The other partitions' stores.
    stores: Arc<Stores>,
    /// How long a want waits for the upstream's answer (`--upstream-wait`).
    wait: Duration,
    /// Counts the wants pending and those given up.
    metrics: RelayMetrics,
}

#[derive(Debug, Default)]
struct State {
    /// The wants asked for (declared) and answered since, until they are unsubscribed: nothing
    /// is kept of an answer nobody asked for (a resource a wildcard brings), so the set is
    /// bounded by the subscriptions and never outlives them.
    answered: HashSet<Want>,
    /// Declared pending in the store, not resolved yet: each want with the pending name it was
    /// declared as (see [`scope`]), ordered so that a wildcard finds the names of its type in
    /// its group without a scan.
    declared: BTreeMap<Want, PendingName>,
    /// Each declaration by its store's partition and pending name: what a store gives up is
    /// found without a scan of the declarations.
    by_pending: HashMap<(Partition, PendingName), Want>,
    /// How many declarations each partition's store holds: only those stores are looked at for
    /// what expires.
    partitions: HashMap<Partition, usize>,
    /// A refusal by the store's limit was logged (again only once the set had room).
    full_logged: bool,
}

impl State {
    /// The pending names declared.
    fn pending(&self) -> usize {
        self.declared.len()
    }

    fn declare(&mut self, want: Want, name: PendingName) {
        let partition = want.group.partition.clone();
        if let Some(old) = self.declared.insert(want.clone(), name.clone()) {
            // (Not reached: a want is declared only while it is not.)
            self.by_pending.remove(&(partition.clone(), old));
        } else {
            *self.partitions.entry(partition.clone()).or_default() += 1;
        }
        self.by_pending.insert((partition, name), want);
    }

    fn undeclare(&mut self, want: &Want) -> Option<PendingName> {
        let name = self.declared.remove(want)?;
        let partition = &want.group.partition;
        self.by_pending.remove(&(partition.clone(), name.clone()));
        if let Some(count) = self.partitions.get_mut(partition) {
            *count -= 1;
            if *count == 0 {
                self.partitions.remove(partition);
            }
        }
        Some(name)
    }
}

/// The clients a want is pending for, as the parameters their parameter set must hold (the
/// store matches a pending name so: [`PendingName::with_params`]): the parameters its group
/// presents upstream, which are those of every client whose demand goes to that group (a
/// client's parameters for the type as the server derives them, or a resource locator's own).
/// A group of a node cluster or a node id holds, too, the clients of other nodes with the same
/// parameters, for as long as the upstream takes to answer: no parameter names a node id.
fn scope(want: &Want, _node: Option<&ClientNode>) -> ParamSet {
    want.group.param_set()
}

/// The pending name a want stands for: its type and name (its wildcard: the whole type), for
/// the clients of `scope`.
fn pending_name(want: &Want, scope: ParamSet) -> PendingName {
    let name = if want.is_wildcard() {
        WHOLE_TYPE
    } else {
        want.name.as_str()
    };
    PendingName::new(want.type_url.clone(), name).with_params(scope)
}

impl Answered {
    /// Nothing answered; a want waits at most `wait` for the upstream's answer; counted in
    /// `metrics`.
    pub(crate) fn new(wait: Duration, metrics: RelayMetrics, stores: Arc<Stores>) -> Answered {
        Answered {
            state: Mutex::new(State::default()),
            store: OnceLock::new(),
            stores,
            wait,
            metrics,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The store's pending names, where wants are declared from now on; at most `limit` at once.
    pub(crate) fn attach(&self, pending: PendingNames, limit: usize) {
        pending.set_limit(limit);
        let _ = self.store.set(pending);
    }

    /// The pending names of the store `partition`'s clients read; with `make`, that store made
    /// if nothing holds it (a client asking holds it already: the same store).
    fn pending_of(&self, partition: &Partition, make: bool) -> Option<PendingNames> {
        match partition {
            Partition::All => self.store.get().cloned(),
            _ if make => self.stores.store(partition).map(|s| s.pending_names()),
            _ => self.stores.pending_if_held(partition),
        }
    }

    /// Resolves `names`, each in its partition's store, now (`staged`: with that store's next
    /// commit).
    fn resolve(&self, names: Vec<(&Partition, &PendingName)>, staged: bool) {
        let mut by: BTreeMap<&Partition, Vec<&PendingName>> = BTreeMap::new();
        for (partition, name) in names {
            by.entry(partition).or_default().push(name);
        }
        for (partition, names) in by {
            if let Some(pending) = self.pending_of(partition, false) {
                if staged {
                    pending.resolve_with_next_commit(names);
                } else {
                    pending.resolve(names);
                }
            }
        }
    }

    /// Whether `want` is answered (its own answer, or for a name, its type's wildcard's in its
    /// group: the upstream sent every resource of the type).
    fn answered_in(state: &State, want: &Want) -> bool {
        state.answered.contains(want)
            || (!want.is_wildcard()
                && state
                    .answered
                    .contains(&Want::wildcard(want.group.clone(), &want.type_url)))
    }

    /// A downstream client (of `node`, when it sent one) asks for `want` at `now`: unless it is
    /// answered, it is pending in the store for the clients of its group (see [`scope`]) until
    /// the upstream answers or `wait` passes.
    #[cfg(test)]
    pub(crate) fn ask(&self, want: &Want, node: Option<&ClientNode>, now: Instant) {
        self.ask_all(std::slice::from_ref(want), node, now);
    }

    /// [`Answered::ask`] for each of `wants` (those of one request), declared in one swap of the
    /// store's state: it costs what it declares.
    pub(crate) fn ask_all(&self, wants: &[Want], node: Option<&ClientNode>, now: Instant) {
        let mut state = self.state();
        // By the store each want's clients read (one, but for a locator's partition: the same).
        let mut by: BTreeMap<&Partition, Vec<(&Want, PendingName)>> = BTreeMap::new();
        for want in wants {
            if !Self::answered_in(&state, want) && !state.declared.contains_key(want) {
                by.entry(&want.group.partition)
                    .or_default()
                    .push((want, pending_name(want, scope(want, node))));
            }
        }
        for (partition, asked) in by {
            let Some(store) = self.pending_of(partition, true) else {
                continue;
            };
            self.declare(&mut state, &store, asked, now);
        }
        self.metrics.set_pending(state.pending());
    }

    fn declare(
        &self,
        state: &mut State,
        store: &PendingNames,
        asked: Vec<(&Want, PendingName)>,
        now: Instant,
    ) {
        let results =
            store.declare_all(asked.iter().map(|(_, name)| name.clone()), now + self.wait);
        for ((want, name), result) in asked.into_iter().zip(results) {
            match result {
                Ok(_) => {
                    state.declare(want.clone(), name);
                    state.full_logged = false;
                }
                Err(e) => {
                    if !std::mem::replace(&mut state.full_logged, true) {
                        warn!(stream = %want.group, type_url = %want.type_url, name = %want.name, "not held for the upstream's answer: {e}");
                    }
                }
            }
        }
    }

    /// The wants declared that `want`'s answer answers: itself, and for a wildcard the names of
    /// its type in its group (a range of the ordered declarations, not a scan).
    fn answered_by(state: &State, want: &Want) -> Vec<Want> {
        if !want.is_wildcard() {
            return state
                .declared
                .get_key_value(want)
                .map(|(w, _)| w.clone())
                .into_iter()
                .collect();
        }
        let from = Want::named(want.group.clone(), &want.type_url, "");
        state
            .declared
            .range(from..)
            .map(|(w, _)| w)
            .take_while(|w| w.group == want.group && w.type_url == want.type_url)
            .cloned()
            .collect()
    }

    /// `wants` are answered by the change about to be committed: what they answer is resolved
    /// in the commit's own swap, so that a downstream stream reads the upstream's answer whole
    /// (its resources and the names it says do not exist) in one response. [`Answered::announce`]
    /// once committed (or refused) settles the rest.
    pub(crate) fn stage(&self, wants: &[Want]) {
        let state = self.state();
        let answered: Vec<Want> = wants
            .iter()
            .flat_map(|want| Self::answered_by(&state, want))
            .collect();
        let resolved: Vec<(&Partition, &PendingName)> = answered
            .iter()
            .filter_map(|w| Some((&w.group.partition, state.declared.get(w)?)))
            .collect();
        self.resolve(resolved, true);
    }

    /// `wants` are answered and their answer is in the store: no longer pending (a wildcard's
    /// answer answers the names of its type in its group too).
    pub(crate) fn announce(&self, wants: impl IntoIterator<Item = Want>) {
        let mut state = self.state();
        let mut resolved: Vec<(Partition, PendingName)> = Vec::new();
        for want in wants {
            let mut asked = false;
            for w in Self::answered_by(&state, &want) {
                asked |= w == want;
                if let Some(name) = state.undeclare(&w) {
                    resolved.push((w.group.partition, name));
                }
            }
            // Kept only for what was asked (a want answered before it was declared, a
            // wildcard's): an answer nobody asked for is nothing to remember.
            if asked || want.is_wildcard() {
                state.answered.insert(want);
            }
        }
        if !resolved.is_empty() {
            self.resolve(resolved.iter().map(|(p, n)| (p, n)).collect(), false);
            self.metrics.set_pending(state.pending());
        }
    }

    /// `want` is no longer subscribed upstream: not answered, and no longer pending.
    pub(crate) fn forget(&self, want: &Want) {
        let mut state = self.state();
        state.answered.remove(want);
        if let Some(name) = state.undeclare(want) {
            self.resolve(vec![(&want.group.partition, &name)], false);
            self.metrics.set_pending(state.pending());
        }
    }

    /// Whether `want` is answered.
    pub(crate) fn is_answered(&self, want: &Want) -> bool {
        Self::answered_in(&self.state(), want)
    }

    /// When [`Answered::expire`] is next due.
    /// (The stores with declarations are looked at, not every partition's.)
    pub(crate) fn next_expiry(&self) -> Option<Instant> {
        let state = self.state();
        state
            .partitions
            .keys()
            .filter_map(|p| self.pending_of(p, false)?.next_expiry())
            .min()
    }

    /// Gives up, as of `now`, the wants whose wait passed: the clients are served what the
    /// relay has, and they count as answered (the next clients do not wait again: an upstream
    /// that is down, or that sends nothing of a type); those wants.
    pub(crate) fn expire(&self, now: Instant) -> Vec<Want> {
        let mut state = self.state();
        let partitions: Vec<Partition> = state.partitions.keys().cloned().collect();
        let mut gone: Vec<Want> = Vec::new();
        for partition in partitions {
            let Some(store) = self.pending_of(&partition, false) else {
                continue;
            };
            for name in store.expire(now) {
                let want = state.by_pending.get(&(partition.clone(), name)).cloned();
                if let Some(want) = want {
                    state.undeclare(&want);
                    gone.push(want);
                }
            }
        }
        if gone.is_empty() {
            return Vec::new();
        }
        for want in &gone {
            state.answered.insert(want.clone());
            info!(stream = %want.group, type_url = %want.type_url, name = %want.name, "the upstream did not answer within {:?}: answered with what the relay has", self.wait);
        }
        self.metrics.expired(gone.len());
        self.metrics.set_pending(state.pending());
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::GroupKey;
    use xdsd_core::Store;

    const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
    const WAIT: Duration = Duration::from_secs(10);

    fn attached(store: &Store) -> Answered {
        let answered = Answered::new(WAIT, RelayMetrics::new(), shared_stores());
        answered.attach(store.pending_names(), 100);
        answered
    }

    fn shared_stores() -> Arc<Stores> {
        Arc::new(Stores::new(crate::AggregateBy::None, 100))
    }

    fn named(name: &str) -> Want {
        Want::named(GroupKey::shared(), CDS, name)
    }

    #[test]
    fn a_want_asked_before_its_answer_is_pending_until_announced() {
        let store = Store::new();
        let answered = attached(&store);
        answered.ask(&named("a"), None, Instant::now());
        let pending = store.pending_names();
        assert!(pending.is_pending(&PendingName::new(CDS, "a")));
        answered.announce([named("a")]);
        assert!(pending.is_empty());
        answered.ask(&named("a"), None, Instant::now());
        assert!(pending.is_empty(), "answered: not pending again");
    }

    #[test]
    fn a_types_wildcard_is_pending_as_the_whole_type_and_its_answer_answers_its_names() {
        let store = Store::new();
        let answered = attached(&store);
        let wildcard = Want::wildcard(GroupKey::shared(), CDS);
        answered.ask(&wildcard, None, Instant::now());
        answered.ask(&named("a"), None, Instant::now());
        let pending = store.pending_names();
        assert!(pending.is_pending(&PendingName::new(CDS, WHOLE_TYPE)));
        answered.announce([wildcard]);
        assert!(pending.is_empty(), "the name is answered with the type");
        answered.ask(&named("b"), None, Instant::now());
        assert!(pending.is_empty(), "a name of an answered wildcard");
    }

    #[test]
    fn a_want_of_a_parameters_group_is_pending_for_its_parameters_only() {
        let store = Store::new();
        let answered = attached(&store);
        let group = GroupKey::shared().with_params([("env".to_owned(), "prod".to_owned())].into());
        answered.ask(&Want::named(group, CDS, "a"), None, Instant::now());
        let pending = store.pending_names();
        let prod: ParamSet = [("env", "prod")].into_iter().collect();
        assert!(pending.is_pending(&PendingName::new(CDS, "a").with_params(prod)));
        assert!(!pending.is_pending(&PendingName::new(CDS, "a")));
    }

    #[test]
    fn a_want_the_upstream_does_not_answer_expires_and_is_not_waited_for_again() {
        let store = Store::new();
        let answered = attached(&store);
        let t0 = Instant::now();
        answered.ask(&named("a"), None, t0);
        assert_eq!(answered.next_expiry(), Some(t0 + WAIT));
        assert!(answered.expire(t0 + WAIT / 2).is_empty());
        assert_eq!(answered.metrics.pending(), 1);
        assert_eq!(answered.expire(t0 + WAIT), vec![named("a")]);
        assert!(answered.is_answered(&named("a")));
        assert_eq!(
            (
                answered.metrics.pending(),
                answered.metrics.pending_expired()
            ),
            (0, 1)
        );
        answered.ask(&named("a"), None, t0 + WAIT);
        assert!(store.pending_names().is_empty());
    }

    #[test]
    fn an_unsubscribed_want_is_no_longer_pending_and_is_waited_for_again() {
        let store = Store::new();
        let answered = attached(&store);
        answered.ask(&named("a"), None, Instant::now());
        answered.forget(&named("a"));
        assert!(store.pending_names().is_empty());
        answered.announce([named("b")]);
        answered.forget(&named("b"));
        assert!(!answered.is_answered(&named("b")));
        answered.ask(&named("b"), None, Instant::now());
        assert_eq!(store.pending_names().len(), 1);
    }

    #[test]
    fn an_answer_nobody_asked_for_is_not_kept() {
        // A wildcard's resources are announced name by name; once the wildcard lingered out
        // (forgotten), a later client of one of those names waits for the upstream's answer
        // again rather than being told at once that it does not exist.
        let store = Store::new();
        let answered = attached(&store);
        let wildcard = Want::wildcard(GroupKey::shared(), CDS);
        answered.ask(&wildcard, None, Instant::now());
        answered.announce([wildcard.clone(), named("a"), named("b")]);
        answered.forget(&wildcard);
        assert_eq!(answered.state().answered.len(), 0, "nothing kept");
        answered.ask(&named("a"), None, Instant::now());
        assert!(store
            .pending_names()
            .is_pending(&PendingName::new(CDS, "a")));
    }

    #[test]
    fn a_locator_is_not_answered_by_the_wildcard_of_its_clients_group() {
        // The wildcard follows its group's parameters; a locator brings its own, so it is the
        // name in the group of those, which that wildcard does not answer.
        let store = Store::new();
        let answered = attached(&store);
        let wildcard = Want::wildcard(GroupKey::shared(), CDS);
        answered.ask(&wildcard, None, Instant::now());
        answered.announce([wildcard]);
        let prod = GroupKey::shared().with_params([("env".to_owned(), "prod".to_owned())].into());
        let locator = Want::named(prod, CDS, "a");
        answered.ask(&locator, None, Instant::now());
        assert!(!answered.is_answered(&locator));
        let prod: ParamSet = [("env", "prod")].into_iter().collect();
        assert!(store
            .pending_names()
            .is_pending(&PendingName::new(CDS, "a").with_params(prod)));
    }

    #[test]
    fn past_the_limit_a_want_is_not_held() {
        let store = Store::new();
        let answered = Answered::new(WAIT, RelayMetrics::new(), shared_stores());
        answered.attach(store.pending_names(), 1);
        answered.ask(&named("a"), None, Instant::now());
        answered.ask(&named("b"), None, Instant::now());
        let pending = store.pending_names();
        assert_eq!(pending.len(), 1);
        assert!(!pending.is_pending(&PendingName::new(CDS, "b")));
    }

    fn client(id: &str, cluster: &str) -> ClientNode {
        let node = envoy_types::pb::envoy::config::core::v3::Node {
            id: id.into(),
            cluster: cluster.into(),
            ..Default::default()
        };
        ClientNode::from_node(&node).expect("a valid node")
    }

    fn group_of(by: crate::AggregateBy, node: &ClientNode) -> GroupKey {
        crate::group::group_of(by, Some(node), CDS)
    }

    /// An `Answered` of the server's `store` and the partitions' stores grouped `by`.
    fn grouped(store: &Store, by: crate::AggregateBy) -> (Answered, Arc<Stores>) {
        let stores = Arc::new(Stores::new(by, 100));
        let answered = Answered::new(WAIT, RelayMetrics::new(), stores.clone());
        answered.attach(store.pending_names(), 100);
        (answered, stores)
    }

    #[test]
    fn a_want_of_a_cluster_group_is_pending_in_its_clusters_store_for_its_clients_only() {
        let store = Store::new();
        let (answered, stores) = grouped(&store, crate::AggregateBy::Cluster);
        let node = client("n1", "edge");
        let want = Want::named(group_of(crate::AggregateBy::Cluster, &node), CDS, "a");
        // The client's stream holds its store (the server's picker gave it).
        let edge_store = stores
            .store(&want.group.partition)
            .expect("the cluster's store");
        answered.ask(&want, Some(&node), Instant::now());
        let edge: ParamSet = [(xdsd_core::NODE_CLUSTER_PARAM, "edge")]
            .into_iter()
            .collect();
        let pending = edge_store.pending_names();
        assert!(pending.is_pending(&PendingName::new(CDS, "a").with_params(edge)));
        assert!(
            !pending.is_pending(&PendingName::new(CDS, "a")),
            "not for every client"
        );
        assert!(store.pending_names().is_empty(), "not in the shared store");
        // Another client of the cluster: the same scope, declared once.
        answered.ask(&want, Some(&client("n2", "edge")), Instant::now());
        assert_eq!(pending.len(), 1);
        answered.announce([want]);
        assert!(pending.is_empty());
    }

    #[test]
    fn a_want_of_a_node_group_is_pending_in_its_nodes_store_for_its_parameters() {
        let store = Store::new();
        let (answered, stores) = grouped(&store, crate::AggregateBy::Node);
        let node = client("n1", "edge");
        let want = Want::named(group_of(crate::AggregateBy::Node, &node), CDS, "a");
        let own_store = stores
            .store(&want.group.partition)
            .expect("the node's store");
        answered.ask(&want, Some(&node), Instant::now());
        let pending = own_store.pending_names();
        let own = node.params_for(CDS).clone();
        assert!(pending.is_pending(&PendingName::new(CDS, "a").with_params(own)));
        assert!(!pending.is_pending(&PendingName::new(CDS, "a")));
        answered.forget(&want);
        assert!(pending.is_empty());
    }

    #[test]
    fn a_want_of_a_partitions_store_expires_there() {
        let store = Store::new();
        let (answered, stores) = grouped(&store, crate::AggregateBy::Cluster);
        let node = client("n1", "edge");
        let want = Want::named(group_of(crate::AggregateBy::Cluster, &node), CDS, "a");
        let _held = stores.store(&want.group.partition);
        let t0 = Instant::now();
        answered.ask(&want, Some(&node), t0);
        assert_eq!(answered.next_expiry(), Some(t0 + WAIT));
        assert_eq!(answered.expire(t0 + WAIT), vec![want.clone()]);
        assert!(answered.is_answered(&want));
    }

    #[test]
    fn a_want_expires_in_its_partitions_store_only_and_nothing_else_is_given_up() {
        let store = Store::new();
        let (answered, stores) = grouped(&store, crate::AggregateBy::Cluster);
        let (na, nb) = (client("n1", "a"), client("n2", "b"));
        let wa = Want::named(group_of(crate::AggregateBy::Cluster, &na), CDS, "x");
        let wb = Want::named(group_of(crate::AggregateBy::Cluster, &nb), CDS, "x");
        let (sa, sb) = (
            stores.store(&wa.group.partition).expect("a's store"),
            stores.store(&wb.group.partition).expect("b's store"),
        );
        let t0 = Instant::now();
        answered.ask(&wa, Some(&na), t0);
        answered.ask(&wb, Some(&nb), t0 + WAIT / 2);
        assert_eq!(answered.next_expiry(), Some(t0 + WAIT));
        assert_eq!(answered.expire(t0 + WAIT), vec![wa.clone()]);
        assert!(sa.pending_names().is_empty());
        assert_eq!(sb.pending_names().len(), 1, "b's still pending");
        assert_eq!(answered.next_expiry(), Some(t0 + WAIT + WAIT / 2));
        answered.announce([wb.clone()]);
        assert_eq!(answered.next_expiry(), None, "nothing declared");
        assert!(answered.state().by_pending.is_empty());
        assert!(answered.state().partitions.is_empty());
    }

    #[test]
    fn a_want_given_up_for_every_scope_it_was_declared_for_is_answered() {
        let store = Store::new();
        let answered = attached(&store);
        let want = Want::named(GroupKey::shared(), CDS, "a");
        let t0 = Instant::now();
        answered.ask(&want, Some(&client("n1", "edge")), t0);
        assert!(answered.expire(t0 + WAIT / 2).is_empty());
        assert!(!answered.is_answered(&want));
        assert_eq!(answered.expire(t0 + WAIT), vec![want.clone()]);
        assert!(answered.is_answered(&want));
    }
}
