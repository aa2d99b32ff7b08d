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

use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use tracing::{info, warn};
use xdsd_core::params::ParamSet;
use xdsd_core::store::{PendingName, PendingNames, WHOLE_TYPE};

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
    /// Declared pending in the store, not resolved yet.
    declared: HashSet<Want>,
    /// A refusal by the store's limit was logged (again only once the set had room).
    full_logged: bool,
}

/// The pending name a want stands for: its type and name (its wildcard: the whole type), for
/// the clients of its group (with parameters of their own: those; else every client).
fn pending_name(want: &Want) -> PendingName {
    let name = if want.is_wildcard() {
        WHOLE_TYPE
    } else {
        want.name.as_str()
    };
    let name = PendingName::new(want.type_url.clone(), name);
    match &want.group {
        GroupKey::Params(params) => name.with_params(
            params
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect::<ParamSet>(),
        ),
        GroupKey::Default | GroupKey::Cluster(_) | GroupKey::Node(_) => name,
    }
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

    /// A downstream client asks for `want` at `now`: unless it is answered, it is pending in the
    /// store until the upstream answers or `wait` passes.
    pub(crate) fn ask(&self, want: &Want, now: Instant) {
        let Some(store) = self.store.get() else {
            return;
        };
        let mut state = self.state();
        if Self::answered_in(&state, want) || state.declared.contains(want) {
            return;
        }
        match store.declare(pending_name(want), now + self.wait) {
            Ok(_) => {
                state.declared.insert(want.clone());
                state.full_logged = false;
                self.metrics.set_pending(state.declared.len());
            }
            Err(e) => {
                if !std::mem::replace(&mut state.full_logged, true) {
                    warn!(stream = %want.group, type_url = %want.type_url, name = %want.name, "not held for the upstream's answer: {e}");
                }
            }
        }
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
        let mut resolved: Vec<PendingName> = Vec::new();
        for want in wants {
            if want.is_wildcard() {
                resolved.extend(
                    state
                        .declared
                        .iter()
                        .filter(|w| w.group == want.group && w.type_url == want.type_url)
                        .map(pending_name),
                );
            }
            if state.declared.contains(want) {
                resolved.push(pending_name(want));
            }
        }
        store.resolve_with_next_commit(&resolved);
    }

    /// `wants` are answered and their answer is in the store: no longer pending (a wildcard's
    /// answer answers the names of its type in its group too).
    pub(crate) fn announce(&self, wants: impl IntoIterator<Item = Want>) {
        let mut state = self.state();
        let mut resolved: Vec<PendingName> = Vec::new();
        for want in wants {
            if want.is_wildcard() {
                let names: Vec<Want> = state
                    .declared
                    .iter()
                    .filter(|w| w.group == want.group && w.type_url == want.type_url)
                    .cloned()
                    .collect();
                for name in names {
                    state.declared.remove(&name);
                    resolved.push(pending_name(&name));
                }
            }
            if state.declared.remove(&want) {
                resolved.push(pending_name(&want));
            }
            state.answered.insert(want);
        }
        if let (Some(store), false) = (self.store.get(), resolved.is_empty()) {
            store.resolve(&resolved);
            self.metrics.set_pending(state.declared.len());
        }
    }

    /// `want` is no longer subscribed upstream: not answered, and no longer pending.
    pub(crate) fn forget(&self, want: &Want) {
        let mut state = self.state();
        state.answered.remove(want);
        if state.declared.remove(want) {
            if let Some(store) = self.store.get() {
                store.resolve([&pending_name(want)]);
            }
            self.metrics.set_pending(state.declared.len());
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
        let gone: Vec<Want> = state
            .declared
            .iter()
            .filter(|w| expired.contains(&pending_name(w)))
            .cloned()
            .collect();
        for want in &gone {
            state.declared.remove(want);
            state.answered.insert(want.clone());
            info!(stream = %want.group, type_url = %want.type_url, name = %want.name, "the upstream did not answer within {:?}: answered with what the relay has", self.wait);
        }
        self.metrics.expired(gone.len());
        self.metrics.set_pending(state.declared.len());
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
        answered.ask(&named("a"), Instant::now());
        let pending = store.pending_names();
        assert!(pending.is_pending(&PendingName::new(CDS, "a")));
        answered.announce([named("a")]);
        assert!(pending.is_empty());
        answered.ask(&named("a"), Instant::now());
        assert!(pending.is_empty(), "answered: not pending again");
    }

    #[test]
    fn a_types_wildcard_is_pending_as_the_whole_type_and_its_answer_answers_its_names() {
        let store = Store::new();
        let answered = attached(&store);
        let wildcard = Want::wildcard(GroupKey::Default, CDS);
        answered.ask(&wildcard, Instant::now());
        answered.ask(&named("a"), Instant::now());
        let pending = store.pending_names();
        assert!(pending.is_pending(&PendingName::new(CDS, WHOLE_TYPE)));
        answered.announce([wildcard]);
        assert!(pending.is_empty(), "the name is answered with the type");
        answered.ask(&named("b"), Instant::now());
        assert!(pending.is_empty(), "a name of an answered wildcard");
    }

    #[test]
    fn a_want_of_a_parameters_group_is_pending_for_its_parameters_only() {
        let store = Store::new();
        let answered = attached(&store);
        let group = GroupKey::Params([("env".to_owned(), "prod".to_owned())].into());
        answered.ask(&Want::named(group, CDS, "a"), Instant::now());
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
        answered.ask(&named("a"), t0);
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
        answered.ask(&named("a"), t0 + WAIT);
        assert!(store.pending_names().is_empty());
    }

    #[test]
    fn an_unsubscribed_want_is_no_longer_pending_and_is_waited_for_again() {
        let store = Store::new();
        let answered = attached(&store);
        answered.ask(&named("a"), Instant::now());
        answered.forget(&named("a"));
        assert!(store.pending_names().is_empty());
        answered.announce([named("b")]);
        answered.forget(&named("b"));
        assert!(!answered.is_answered(&named("b")));
        answered.ask(&named("b"), Instant::now());
        assert_eq!(store.pending_names().len(), 1);
    }

    #[test]
    fn past_the_limit_a_want_is_not_held() {
        let store = Store::new();
        let answered = Answered::new(WAIT, RelayMetrics::new());
        answered.attach(store.pending_names(), 1);
        answered.ask(&named("a"), Instant::now());
        answered.ask(&named("b"), Instant::now());
        let pending = store.pending_names();
        assert_eq!(pending.len(), 1);
        assert!(!pending.is_pending(&PendingName::new(CDS, "b")));
    }
}
