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
//! Bounded: a want the upstream does not answer within `--upstream-wait` is given up (the
//! source expires it: the clients are served what the relay has, and the next ones do not wait
//! again), and past the store's limit of pending names a want is not declared (logged: its
//! clients are answered as if the relay had asked nothing).
//!
//! The answered set and the declarations go under one lock, and a want is declared only while
//! it is not answered: an answer announced at the same moment is never missed (a name declared
//! after its answer was resolved would wait for nothing until it expired).

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use tracing::{info, warn};
use xdsd_core::params::ParamSet;
use xdsd_core::store::{PendingName, PendingNames, WHOLE_TYPE};
use xdsd_core::{ClientNode, NODE_CLUSTER_PARAM};

use crate::demand::Want;
use crate::group::GroupKey;
use crate::metrics::RelayMetrics;

/// The subscriptions answered, and those pending in the store. See the module documentation.
#[derive(Debug)]
pub(crate) struct Answered {
    state: Mutex<State>,
    /// The store's pending names, once the feed handed them to the source.
    store: OnceLock<PendingNames>,
    /// How long a want waits for the upstream's answer (`--upstream-wait`).
    wait: Duration,
    /// Counts the wants pending and those given up.
    metrics: RelayMetrics,
}

#[derive(Debug, Default)]
struct State {
    answered: HashSet<Want>,
    /// Declared pending in the store, not resolved yet: each want with the pending names it was
    /// declared as (one per scope of the clients that asked it, see [`scope`]).
    declared: HashMap<Want, Vec<PendingName>>,
    /// A refusal by the store's limit was logged (again only once the set had room).
    full_logged: bool,
}

impl State {
    /// The pending names declared, all wants together.
    fn pending(&self) -> usize {
        self.declared.values().map(Vec::len).sum()
    }
}

/// The clients a want asked by a client of `node` is pending for, as the parameters their
/// parameter set must hold (the store matches a pending name so: [`PendingName::with_params`]).
/// Only the clients of the group that asked are held, as closely as parameters can say it: a
/// resource locator's own parameters; a parameters group's parameters; a `cluster` group's
/// cluster (`xds.node.cluster`, which the parameter set of a client without dynamic parameters
/// for the type holds); else (a client with dynamic parameters in a `cluster` group, a `node`
/// group: no parameter names a node) the asking client's own parameter set for the type. The
/// shared group's wants hold every client (nothing tells its clients apart from a parameters
/// group's).
fn scope(want: &Want, node: Option<&ClientNode>) -> ParamSet {
    let own = match &want.group {
        _ if want.is_locator() => Some(&want.params),
        GroupKey::Params(params) => Some(params),
        _ => None,
    };
    if let Some(params) = own {
        return params
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
    }
    match (&want.group, node) {
        (GroupKey::Default | GroupKey::Params(_), _)
        | (GroupKey::Cluster(_) | GroupKey::Node(_), None) => ParamSet::new(),
        (GroupKey::Cluster(cluster), Some(node)) => {
            let set = node.params_for(&want.type_url);
            if set.get(NODE_CLUSTER_PARAM) == Some(cluster.as_str()) {
                [(NODE_CLUSTER_PARAM, cluster.as_str())]
                    .into_iter()
                    .collect()
            } else {
                set.clone()
            }
        }
        (GroupKey::Node(_), Some(node)) => node.params_for(&want.type_url).clone(),
    }
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
    pub(crate) fn new(wait: Duration, metrics: RelayMetrics) -> Answered {
        Answered {
            state: Mutex::new(State::default()),
            store: OnceLock::new(),
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
    pub(crate) fn ask(&self, want: &Want, node: Option<&ClientNode>, now: Instant) {
        let Some(store) = self.store.get() else {
            return;
        };
        let mut state = self.state();
        if Self::answered_in(&state, want) {
            return;
        }
        let name = pending_name(want, scope(want, node));
        if state.declared.get(want).is_some_and(|n| n.contains(&name)) {
            return;
        }
        match store.declare(name.clone(), now + self.wait) {
            Ok(_) => {
                state.declared.entry(want.clone()).or_default().push(name);
                state.full_logged = false;
                self.metrics.set_pending(state.pending());
            }
            Err(e) => {
                if !std::mem::replace(&mut state.full_logged, true) {
                    warn!(stream = %want.group, type_url = %want.type_url, name = %want.name, "not held for the upstream's answer: {e}");
                }
            }
        }
    }

    /// The wants declared that `want`'s answer answers: itself, and for a wildcard the names of
    /// its type in its group.
    fn answered_by(state: &State, want: &Want) -> Vec<Want> {
        state
            .declared
            .keys()
            .filter(|w| {
                *w == want
                    || (want.is_wildcard() && w.group == want.group && w.type_url == want.type_url)
            })
            .cloned()
            .collect()
    }

    /// `wants` are answered by the change about to be committed: what they answer is resolved
    /// in the commit's own swap, so that a downstream stream reads the upstream's answer whole
    /// (its resources and the names it says do not exist) in one response. [`Answered::announce`]
    /// once committed (or refused) settles the rest.
    pub(crate) fn stage(&self, wants: &[Want]) {
        let Some(store) = self.store.get() else {
            return;
        };
        let state = self.state();
        let resolved: Vec<&PendingName> = wants
            .iter()
            .flat_map(|want| Self::answered_by(&state, want))
            .filter_map(|w| state.declared.get(&w))
            .flatten()
            .collect();
        store.resolve_with_next_commit(resolved);
    }

    /// `wants` are answered and their answer is in the store: no longer pending (a wildcard's
    /// answer answers the names of its type in its group too).
    pub(crate) fn announce(&self, wants: impl IntoIterator<Item = Want>) {
        let mut state = self.state();
        let mut resolved: Vec<PendingName> = Vec::new();
        for want in wants {
            for w in Self::answered_by(&state, &want) {
                resolved.extend(state.declared.remove(&w).unwrap_or_default());
            }
            state.answered.insert(want);
        }
        if let (Some(store), false) = (self.store.get(), resolved.is_empty()) {
            store.resolve(&resolved);
            self.metrics.set_pending(state.pending());
        }
    }

    /// `want` is no longer subscribed upstream: not answered, and no longer pending.
    pub(crate) fn forget(&self, want: &Want) {
        let mut state = self.state();
        state.answered.remove(want);
        if let Some(names) = state.declared.remove(want) {
            if let Some(store) = self.store.get() {
                store.resolve(&names);
            }
            self.metrics.set_pending(state.pending());
        }
    }

    /// Whether `want` is answered.
    pub(crate) fn is_answered(&self, want: &Want) -> bool {
        Self::answered_in(&self.state(), want)
    }

    /// When [`Answered::expire`] is next due.
    pub(crate) fn next_expiry(&self) -> Option<Instant> {
        self.store.get()?.next_expiry()
    }

    /// Gives up, as of `now`, the wants whose wait passed: the clients are served what the
    /// relay has, and they count as answered (the next clients do not wait again: an upstream
    /// that is down, or that sends nothing of a type); those wants.
    pub(crate) fn expire(&self, now: Instant) -> Vec<Want> {
        let Some(store) = self.store.get() else {
            return Vec::new();
        };
        let mut state = self.state();
        let expired: HashSet<PendingName> = store.expire(now).into_iter().collect();
        if expired.is_empty() {
            return Vec::new();
        }
        // A want is given up once every scope it was declared for is.
        let mut gone: Vec<Want> = Vec::new();
        state.declared.retain(|want, names| {
            names.retain(|n| !expired.contains(n));
            if names.is_empty() {
                gone.push(want.clone());
            }
            !names.is_empty()
        });
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
    use xdsd_core::Store;

    const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
    const WAIT: Duration = Duration::from_secs(10);

    fn attached(store: &Store) -> Answered {
        let answered = Answered::new(WAIT, RelayMetrics::new());
        answered.attach(store.pending_names(), 100);
        answered
    }

    fn named(name: &str) -> Want {
        Want::named(GroupKey::Default, CDS, name)
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
        let wildcard = Want::wildcard(GroupKey::Default, CDS);
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
        let group = GroupKey::Params([("env".to_owned(), "prod".to_owned())].into());
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
    fn past_the_limit_a_want_is_not_held() {
        let store = Store::new();
        let answered = Answered::new(WAIT, RelayMetrics::new());
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

    #[test]
    fn a_want_of_a_cluster_group_is_pending_for_the_clients_of_that_cluster_only() {
        let store = Store::new();
        let answered = attached(&store);
        let group = GroupKey::Cluster("edge".into());
        let want = Want::named(group, CDS, "a");
        answered.ask(&want, Some(&client("n1", "edge")), Instant::now());
        let edge: ParamSet = [(NODE_CLUSTER_PARAM, "edge")].into_iter().collect();
        let pending = store.pending_names();
        assert!(pending.is_pending(&PendingName::new(CDS, "a").with_params(edge)));
        assert!(
            !pending.is_pending(&PendingName::new(CDS, "a")),
            "not for every client"
        );
        // Another client of the cluster: the same scope, declared once.
        answered.ask(&want, Some(&client("n2", "edge")), Instant::now());
        assert_eq!(pending.len(), 1);
        answered.announce([want]);
        assert!(pending.is_empty());
    }

    #[test]
    fn a_want_of_a_node_group_is_pending_for_the_parameters_of_the_client_that_asked() {
        let store = Store::new();
        let answered = attached(&store);
        let want = Want::named(GroupKey::Node("n1".into()), CDS, "a");
        let node = client("n1", "edge");
        answered.ask(&want, Some(&node), Instant::now());
        let pending = store.pending_names();
        let own = node.params_for(CDS).clone();
        assert!(pending.is_pending(&PendingName::new(CDS, "a").with_params(own)));
        assert!(!pending.is_pending(&PendingName::new(CDS, "a")));
        answered.forget(&want);
        assert!(pending.is_empty());
    }

    #[test]
    fn a_want_given_up_for_every_scope_it_was_declared_for_is_answered() {
        let store = Store::new();
        let answered = attached(&store);
        let want = Want::named(GroupKey::Node("n1".into()), CDS, "a");
        let t0 = Instant::now();
        answered.ask(&want, Some(&client("n1", "edge")), t0);
        answered.ask(&want, Some(&client("n1", "other")), t0 + WAIT / 2);
        assert!(answered.expire(t0 + WAIT).is_empty(), "one scope left");
        assert!(!answered.is_answered(&want));
        assert_eq!(answered.expire(t0 + WAIT * 2), vec![want.clone()]);
        assert!(answered.is_answered(&want));
    }
}
