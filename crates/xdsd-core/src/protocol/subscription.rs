//! The subscription core: what the SotW and the delta machine of one type on one stream both
//! keep, and the rules they share. The wildcard state and its legacy rule, the distinct parameter
//! sets of the subscribed keys and whether they are dense, what is owed by key (forced) and by
//! name (changed in the store), the nonce and version of the latest response (what an ACK or
//! NACK answers), the encoding and size limit of responses, and one classification of requests
//! ([`Core::classify`]). Each machine keeps its subscribed keys as
//! it needs them (SotW with what each was last sent, delta shared between streams) and adds its
//! own state: SotW its full-state responses and splits, delta what the client holds per key,
//! its removals and heartbeats.

use std::sync::Arc;

use super::{Key, Nonce, ParamSetId, RequestKind, Text};
use crate::hash::{HashMap, HashSet};
use crate::store::Encoding;

/// The special resource name that subscribes to every resource of a type.
pub const WILDCARD: &str = "*";

/// Empties a set, giving back its memory when it held many (a first response owes every name
/// of a large subscription once; later ones owe a few).
pub(crate) fn reset<T>(set: &mut HashSet<T>) {
    if set.capacity() > 64 {
        *set = HashSet::default();
    } else {
        set.clear();
    }
}

/// Whether a subscription covers every resource of its type, and by which rule (spec "How the
/// client specifies what resources to return").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wildcard {
    /// No request yet: the first one decides.
    Unrequested,
    /// The legacy wildcard: no request named anything (in SotW, every list was empty; in delta,
    /// no request subscribed or unsubscribed a name), which means `*`, with the request's
    /// default parameter set (followed when it changes).
    Legacy(ParamSetId),
    /// Named keys only: a request named something, and `*` is not subscribed.
    Off,
    /// `*` subscribed, resolving names with this parameter set: named explicitly, or the
    /// legacy wildcard kept once a request named something else (delta).
    Explicit(ParamSetId),
}

impl Wildcard {
    /// The parameter set of the wildcard, when it is on.
    pub(crate) fn pid(self) -> Option<ParamSetId> {
        match self {
            Wildcard::Legacy(pid) | Wildcard::Explicit(pid) => Some(pid),
            Wildcard::Unrequested | Wildcard::Off => None,
        }
    }

    /// Whether it is on.
    pub(crate) fn is_on(self) -> bool {
        self.pid().is_some()
    }

    /// `*` as a request's list of names says: subscribed with `pid`, or not.
    pub(crate) fn listed(pid: Option<ParamSetId>) -> Wildcard {
        pid.map_or(Wildcard::Off, Wildcard::Explicit)
    }

    /// The legacy rule, for a request that names something (`names_something`) or nothing, whose
    /// plain names use `default`: while no request named anything, one that names nothing is the
    /// legacy wildcard (with `default`); a request that names something ends the rule for good,
    /// a legacy wildcard then staying on as if `*` had been subscribed. The request's own `*`
    /// (listed, subscribed or unsubscribed) is read after this.
    pub(crate) fn legacy_rule(self, names_something: bool, default: ParamSetId) -> Wildcard {
        match self {
            Wildcard::Unrequested | Wildcard::Legacy(_) if !names_something => {
                Wildcard::Legacy(default)
            }
            Wildcard::Legacy(pid) | Wildcard::Explicit(pid) => Wildcard::Explicit(pid),
            Wildcard::Unrequested | Wildcard::Off => Wildcard::Off,
        }
    }
}

/// What a request whose nonce is not the latest response's means (spec "ACK/NACK and resource
/// type instance version", and "Incremental xDS").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OlderNonce {
    /// SotW: superseded by a response the client has not seen yet; the request is dropped whole
    /// (the client answers that response with its full, current list). Before any response,
    /// a nonce pairs with nothing: the request only changes the subscription.
    Stale,
    /// Delta: the nonce only pairs an ACK or NACK with a response; subscription changes are
    /// honoured whatever it is. Such a NACK rejects no version the machine knows.
    Answers,
}

/// The state both machines keep (see the module's documentation). Public in a private module:
/// the [`Machine`](super::machine::Machine) trait's provided methods read it, and no type outside
/// the crate can implement that trait, since none can name it.
#[derive(Debug)]
pub struct Core {
    pub(super) type_url: Arc<str>,
    /// How resources go out: named by `resource_name` (TP2 clients), with their TTLs.
    pub(super) encoding: Encoding,
    pub(super) wildcard: Wildcard,
    /// Whether the subscribed keys are most of the type, watched as a whole (see
    /// [`super::dense`]).
    pub(super) dense: bool,
    /// The distinct parameter sets of the subscribed keys (nearly always one).
    pub(super) pids: Vec<ParamSetId>,
    /// Keys owed their resource with the next response whatever the client was sent or holds:
    /// newly (re)subscribed (the client may have forgotten them), or sent again (see
    /// [`Core::resend`]).
    pub(super) forced: HashSet<Key>,
    /// Names the store changed since the last response, of those the subscription watches.
    pub(super) dirty: HashSet<Arc<str>>,
    /// Keys whose answer waits for a name pending in the store (not known yet, see
    /// `store::pending`): owed again (`true`: forced; `false`: as a changed name) once the
    /// store tells the name changed, which it does when the name resolves. Not owed meanwhile:
    /// nothing is sent for them until then.
    pub(super) waiting: HashMap<Key, bool>,
    /// Nonce and version of the latest response sent.
    pub(super) last_nonce: Option<Nonce>,
    pub(super) last_version: Option<Arc<str>>,
    /// Responses are split to stay under this size where the protocol allows it.
    pub(super) max_response_bytes: usize,
    /// Whether a response was reported over the size limit (once per stream and type).
    warned: bool,
}

impl Core {
    /// The core of a subscription to `type_url` with nothing requested yet.
    pub(crate) fn new(type_url: Arc<str>) -> Core {
        Core {
            type_url,
            encoding: Encoding::default(),
            wildcard: Wildcard::Unrequested,
            dense: false,
            pids: Vec::new(),
            forced: HashSet::default(),
            dirty: HashSet::default(),
            waiting: HashMap::default(),
            last_nonce: None,
            last_version: None,
            max_response_bytes: usize::MAX,
            warned: false,
        }
    }

    /// Whether a request for this type came in (the first one is [`RequestKind::Initial`]).
    pub(crate) fn requested(&self) -> bool {
        self.wildcard != Wildcard::Unrequested
    }

    /// How a request relates to the responses sent: the first request of the type is initial;
    /// one without a nonce only changes the subscription; one with the latest response's nonce
    /// ACKs it, or NACKs it (with its version) when it carries an error (`error`, its message);
    /// one with another nonce is as `older` says.
    pub(crate) fn classify(
        &self,
        nonce: &Text,
        error: Option<&str>,
        older: OlderNonce,
    ) -> RequestKind {
        if !self.requested() {
            return RequestKind::Initial;
        }
        if nonce.as_bytes().is_empty() {
            return RequestKind::Update;
        }
        let latest = self.last_nonce.is_some_and(|last| last == *nonce);
        if !latest && older == OlderNonce::Stale {
            return match self.last_nonce {
                // Before any response there is no newer nonce, so nothing is stale yet.
                None => RequestKind::Update,
                Some(_) => RequestKind::Stale {
                    nonce: nonce.clone(),
                },
            };
        }
        match error {
            Some(message) => RequestKind::Nack {
                nonce: nonce.clone(),
                rejected_version: latest.then(|| self.last_version.clone()).flatten(),
                message: message.to_owned(),
            },
            None => RequestKind::Ack {
                nonce: nonce.clone(),
            },
        }
    }

    /// Records a response sent with `nonce` and `version`: whether it is the first of its type
    /// on the stream (the one that names the control plane).
    pub(crate) fn sent(&mut self, nonce: Nonce, version: &Arc<str>) -> bool {
        let first = self.last_nonce.replace(nonce).is_none();
        self.last_version = Some(version.clone());
        first
    }

    /// `oversized` the first time a response is over the size limit, `None` after.
    pub(crate) fn warn_once(&mut self, oversized: Option<usize>) -> Option<usize> {
        oversized.filter(|_| !std::mem::replace(&mut self.warned, true))
    }

    /// Records the names the store changed (added, modified or removed) that the subscription
    /// watches: every name under the wildcard, else those `contains` says one of the parameter
    /// sets subscribes to.
    pub(crate) fn mark_changed<'a>(
        &mut self,
        names: impl IntoIterator<Item = &'a Arc<str>>,
        contains: impl Fn(&Arc<str>, ParamSetId) -> bool,
    ) {
        let Core {
            dirty,
            wildcard,
            pids,
            forced,
            waiting,
            ..
        } = self;
        let w = wildcard.pid();
        if !waiting.is_empty() {
            // A name that waited resolved (or changed): its keys are owed again.
            let names = names.into_iter().inspect(|name| {
                for pid in pids.iter().copied().chain(w) {
                    let key = (*name).clone();
                    if let Some(force) = waiting.remove(&(key.clone(), pid)) {
                        if force && (w == Some(pid) || contains(name, pid)) {
                            forced.insert((key, pid));
                        }
                    }
                }
            });
            super::mark_dirty(dirty, names, |name| {
                w.is_some() || pids.iter().any(|p| contains(name, *p))
            });
            return;
        }
        super::mark_dirty(dirty, names, |name| {
            w.is_some() || pids.iter().any(|p| contains(name, *p))
        });
    }

    /// Owes `name` with the next response, changed or not: its key of each parameter set that
    /// subscribes to it (`contains`), and the wildcard's. Called for every dependent of every
    /// resource a response sends (10,000 endpoints after 10,000 clusters): no list of keys is
    /// made.
    pub(crate) fn resend(
        &mut self,
        name: &Arc<str>,
        contains: impl Fn(&Arc<str>, ParamSetId) -> bool,
    ) {
        for pid in &self.pids {
            if contains(name, *pid) {
                self.forced.insert((name.clone(), *pid));
            }
        }
        if let Some(w) = self.wildcard.pid() {
            self.forced.insert((name.clone(), w));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nack(nonce: &str, rejected_version: Option<&str>) -> RequestKind {
        RequestKind::Nack {
            nonce: nonce.into(),
            rejected_version: rejected_version.map(Arc::from),
            message: "bad".into(),
        }
    }

    /// A core that was requested and sent responses "1" (version "v1") and "2" ("v2").
    fn answered() -> Core {
        let mut core = Core::new("t".into());
        core.wildcard = Wildcard::Off;
        core.sent(Nonce::from(1), &Arc::from("v1"));
        core.sent(Nonce::from(2), &Arc::from("v2"));
        core
    }

    #[test]
    fn the_first_request_of_a_type_is_initial_whatever_its_nonce() {
        let core = Core::new("t".into());
        for older in [OlderNonce::Stale, OlderNonce::Answers] {
            assert_eq!(core.classify(&"".into(), None, older), RequestKind::Initial);
            assert_eq!(
                core.classify(&"7".into(), Some("bad"), older),
                RequestKind::Initial
            );
        }
    }

    #[test]
    fn a_request_without_a_nonce_only_changes_the_subscription() {
        let core = answered();
        for older in [OlderNonce::Stale, OlderNonce::Answers] {
            assert_eq!(core.classify(&"".into(), None, older), RequestKind::Update);
            assert_eq!(
                core.classify(&"".into(), Some("bad"), older),
                RequestKind::Update
            );
        }
    }

    #[test]
    fn the_latest_nonce_acks_or_nacks_the_latest_response_with_its_version() {
        let core = answered();
        for older in [OlderNonce::Stale, OlderNonce::Answers] {
            assert_eq!(
                core.classify(&"2".into(), None, older),
                RequestKind::Ack { nonce: "2".into() }
            );
            assert_eq!(
                core.classify(&"2".into(), Some("bad"), older),
                nack("2", Some("v2"))
            );
        }
    }

    #[test]
    fn sotw_drops_a_request_whose_nonce_a_newer_response_superseded() {
        let core = answered();
        for error in [None, Some("bad")] {
            assert_eq!(
                core.classify(&"1".into(), error, OlderNonce::Stale),
                RequestKind::Stale { nonce: "1".into() }
            );
        }
    }

    #[test]
    fn sotw_takes_a_nonce_before_any_response_as_a_subscription_change() {
        let mut core = Core::new("t".into());
        core.wildcard = Wildcard::Legacy(0);
        assert_eq!(
            core.classify(&"5".into(), None, OlderNonce::Stale),
            RequestKind::Update
        );
    }

    #[test]
    fn delta_pairs_an_older_nonce_with_its_ack_or_nack_but_knows_no_version_of_it() {
        let core = answered();
        assert_eq!(
            core.classify(&"1".into(), None, OlderNonce::Answers),
            RequestKind::Ack { nonce: "1".into() }
        );
        assert_eq!(
            core.classify(&"1".into(), Some("bad"), OlderNonce::Answers),
            nack("1", None)
        );
    }

    #[test]
    fn a_request_that_names_nothing_before_any_named_one_is_the_legacy_wildcard() {
        let w = Wildcard::Unrequested.legacy_rule(false, 0);
        assert_eq!(w, Wildcard::Legacy(0));
        assert_eq!(
            w.legacy_rule(false, 1),
            Wildcard::Legacy(1),
            "follows the default parameter set"
        );
    }

    #[test]
    fn a_request_that_names_something_ends_the_legacy_wildcard_for_good() {
        assert_eq!(Wildcard::Unrequested.legacy_rule(true, 0), Wildcard::Off);
        assert_eq!(
            Wildcard::Legacy(3).legacy_rule(true, 0),
            Wildcard::Explicit(3),
            "the legacy wildcard stays on as `*`"
        );
        assert_eq!(
            Wildcard::Off.legacy_rule(false, 0),
            Wildcard::Off,
            "an empty request after a named one is no wildcard"
        );
        assert_eq!(
            Wildcard::Explicit(2).legacy_rule(false, 0),
            Wildcard::Explicit(2)
        );
    }

    #[test]
    fn a_changed_name_is_owed_when_subscribed_or_under_the_wildcard() {
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let mut core = Core::new("t".into());
        core.wildcard = Wildcard::Off;
        core.pids = vec![0, 2];
        core.mark_changed([&a, &b], |name, pid| &**name == "a" && pid == 2);
        assert!(core.dirty.contains(&a));
        assert!(!core.dirty.contains(&b), "not subscribed");
        core.wildcard = Wildcard::Explicit(1);
        core.mark_changed([&b], |_, _| false);
        assert!(core.dirty.contains(&b), "the wildcard watches every name");
    }

    #[test]
    fn a_name_sent_again_owes_each_of_its_keys_and_the_wildcard_s() {
        let name: Arc<str> = "a".into();
        let mut core = Core::new("t".into());
        core.wildcard = Wildcard::Legacy(1);
        core.pids = vec![0, 2, 3];
        core.resend(&name, |_, pid| pid != 3);
        let mut forced: Vec<ParamSetId> = core.forced.iter().map(|(_, p)| *p).collect();
        forced.sort_unstable();
        assert_eq!(forced, [0, 1, 2]);
        let mut core = Core::new("t".into());
        core.wildcard = Wildcard::Off;
        core.pids = vec![0];
        core.resend(&name, |_, _| false);
        assert!(core.forced.is_empty(), "not subscribed");
    }

    #[test]
    fn only_the_first_response_names_the_control_plane() {
        let mut core = Core::new("t".into());
        assert!(core.sent(Nonce::from(1), &Arc::from("v1")));
        assert!(!core.sent(Nonce::from(2), &Arc::from("v2")));
        assert_eq!(core.last_version.as_deref(), Some("v2"));
    }

    #[test]
    fn an_oversized_response_is_reported_once() {
        let mut core = Core::new("t".into());
        assert_eq!(core.warn_once(None), None);
        assert_eq!(core.warn_once(Some(10)), Some(10));
        assert_eq!(core.warn_once(Some(20)), None);
    }
}
