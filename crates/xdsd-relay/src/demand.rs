//! What the downstream clients ask for, sans-I/O: which upstream subscriptions the relay holds.
//!
//! Each downstream stream that asks for a [`Want`] holds it; the first to ask subscribes it
//! upstream, and when the last holder leaves, it is unsubscribed after the linger (so that a
//! client that reconnects, or flaps, does not churn the upstream). A one-shot request (a
//! `Fetch*` call, a REST poll) holds its want for the linger only. Wants pinned at start
//! (`--prefetch`) are never unsubscribed. Time is an input: [`Demand::poll_timeout`] says when
//! to call [`Demand::handle_timeout`].

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::group::GroupKey;

/// The default linger: how long an upstream subscription outlives its last downstream client.
pub const DEFAULT_LINGER: Duration = Duration::from_secs(30);

/// One upstream subscription: in a group's stream, a type and a name (`*`: the wildcard), with
/// the dynamic parameters of a resource locator (xRFC TP2), subscribed upstream as that locator.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Want {
    /// The upstream stream (group) it is subscribed on.
    pub group: GroupKey,
    /// The type URL.
    pub type_url: String,
    /// The name, or `*` for every resource of the type.
    pub name: String,
    /// A resource locator's dynamic parameters; empty for a plain name and the wildcard.
    pub params: xdsd_client::Params,
}

impl Want {
    /// The resource `name` of `type_url` in `group`.
    pub fn named(group: GroupKey, type_url: impl Into<String>, name: impl Into<String>) -> Want {
        Want {
            group,
            type_url: type_url.into(),
            name: name.into(),
            params: xdsd_client::Params::new(),
        }
    }

    /// The resource locator of `name` of `type_url` with dynamic parameters `params`, in
    /// `group` (no parameters: the plain name).
    pub fn locator(
        group: GroupKey,
        type_url: impl Into<String>,
        name: impl Into<String>,
        params: xdsd_client::Params,
    ) -> Want {
        Want {
            params,
            ..Want::named(group, type_url, name)
        }
    }

    /// Whether it is a type's wildcard.
    pub fn is_wildcard(&self) -> bool {
        self.name == xdsd_client::WILDCARD
    }

    /// Whether it is a resource locator (a name with dynamic parameters of its own).
    pub fn is_locator(&self) -> bool {
        !self.params.is_empty()
    }

    /// The wildcard of `type_url` in `group`.
    pub fn wildcard(group: GroupKey, type_url: impl Into<String>) -> Want {
        Want::named(group, type_url, xdsd_client::WILDCARD)
    }
}

impl std::fmt::Display for Want {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)?;
        if self.is_locator() {
            f.write_str("{")?;
            for (i, (k, v)) in self.params.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{k}={v}")?;
            }
            f.write_str("}")?;
        }
        Ok(())
    }
}

/// What the relay must do upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Subscribe to it (first asked).
    Subscribe(Want),
    /// Unsubscribe from it (its last holder left a linger ago).
    Unsubscribe(Want),
}

#[derive(Debug, Default)]
struct Entry {
    /// The downstream streams holding it.
    holders: BTreeSet<u64>,
    /// Held by nobody since then: unsubscribed at this time.
    until: Option<Instant>,
    /// Never unsubscribed.
    pinned: bool,
}

/// The downstream demand and the upstream subscriptions it makes. See the module documentation.
#[derive(Debug)]
pub struct Demand {
    linger: Duration,
    wants: BTreeMap<Want, Entry>,
    /// What each stream holds.
    streams: HashMap<u64, BTreeSet<Want>>,
    actions: VecDeque<Action>,
}

impl Demand {
    /// No demand yet; subscriptions outlive their last holder by `linger`.
    pub fn new(linger: Duration) -> Demand {
        Demand {
            linger,
            wants: BTreeMap::new(),
            streams: HashMap::new(),
            actions: VecDeque::new(),
        }
    }

    /// Subscribes `want` for good (never unsubscribed).
    pub fn pin(&mut self, want: Want) {
        let entry = self.entry(want);
        entry.pinned = true;
        entry.until = None;
    }

    /// Downstream stream `stream` asks for `want`.
    pub fn acquire(&mut self, stream: u64, want: Want) {
        self.streams.entry(stream).or_default().insert(want.clone());
        let entry = self.entry(want);
        entry.holders.insert(stream);
        entry.until = None;
    }

    /// A one-shot request asked for `want` at `now`: held for the linger.
    pub fn touch(&mut self, want: Want, now: Instant) {
        let linger = self.linger;
        let entry = self.entry(want);
        if entry.holders.is_empty() && !entry.pinned {
            let until = now + linger;
            entry.until = Some(entry.until.map_or(until, |u| u.max(until)));
        }
    }

    /// Downstream stream `stream` no longer asks for `want` (as of `now`): it lingers if nobody
    /// else holds it.
    pub fn drop_want(&mut self, stream: u64, want: &Want, now: Instant) {
        if let Some(held) = self.streams.get_mut(&stream) {
            held.remove(want);
        }
        if let Some(entry) = self.wants.get_mut(want) {
            entry.holders.remove(&stream);
            if entry.holders.is_empty() && !entry.pinned {
                entry.until = Some(now + self.linger);
            }
        }
    }

    /// Downstream stream `stream` ended at `now`: what it held lingers if nobody else holds it.
    pub fn release(&mut self, stream: u64, now: Instant) {
        let Some(held) = self.streams.remove(&stream) else {
            return;
        };
        for want in held {
            if let Some(entry) = self.wants.get_mut(&want) {
                entry.holders.remove(&stream);
                if entry.holders.is_empty() && !entry.pinned {
                    entry.until = Some(now + self.linger);
                }
            }
        }
    }

    /// When [`Demand::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.wants.values().filter_map(|e| e.until).min()
    }

    /// Unsubscribes what nobody held for the linger, as of `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let expired: Vec<Want> = self
            .wants
            .iter()
            .filter(|(_, e)| e.until.is_some_and(|u| u <= now))
            .map(|(w, _)| w.clone())
            .collect();
        for want in expired {
            self.wants.remove(&want);
            self.actions.push_back(Action::Unsubscribe(want));
        }
    }

    /// The next thing to do upstream.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The upstream subscriptions held.
    pub fn subscriptions(&self) -> usize {
        self.wants.len()
    }

    /// Whether `want` is subscribed.
    pub fn holds(&self, want: &Want) -> bool {
        self.wants.contains_key(want)
    }

    /// Whether `group` still has any subscription.
    pub fn group_used(&self, group: &GroupKey) -> bool {
        self.wants.keys().any(|w| &w.group == group)
    }

    /// The subscriptions of resource `name` of `type_url` in `group`: its plain name and its
    /// resource locators (not the type's wildcard).
    pub fn wants_of<'a>(
        &'a self,
        group: &GroupKey,
        type_url: &str,
        name: &'a str,
    ) -> impl Iterator<Item = &'a Want> + 'a {
        let start = Want::named(group.clone(), type_url, name);
        self.wants
            .range(start.clone()..)
            .map(|(w, _)| w)
            .take_while(move |w| {
                w.group == start.group && w.type_url == start.type_url && w.name == start.name
            })
    }

    fn entry(&mut self, want: Want) -> &mut Entry {
        if !self.wants.contains_key(&want) {
            self.actions.push_back(Action::Subscribe(want.clone()));
        }
        self.wants.entry(want).or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
    const LINGER: Duration = Duration::from_secs(30);

    fn cds() -> Want {
        Want::wildcard(GroupKey::Default, CDS)
    }

    fn actions(d: &mut Demand) -> Vec<Action> {
        std::iter::from_fn(|| d.poll_action()).collect()
    }

    #[test]
    fn a_want_first_asked_is_subscribed_upstream() {
        let mut d = Demand::new(LINGER);
        d.acquire(1, cds());
        assert_eq!(actions(&mut d), vec![Action::Subscribe(cds())]);
        assert_eq!(d.subscriptions(), 1);
    }

    #[test]
    fn a_name_no_longer_asked_by_its_last_stream_is_unsubscribed_after_the_linger() {
        let mut d = Demand::new(LINGER);
        let t0 = Instant::now();
        let a = Want::named(GroupKey::Default, CDS, "a");
        let b = Want::named(GroupKey::Default, CDS, "b");
        d.acquire(1, a.clone());
        d.acquire(1, b.clone());
        d.acquire(2, a.clone());
        actions(&mut d);
        d.drop_want(1, &a, t0);
        d.drop_want(1, &b, t0);
        assert_eq!(d.poll_timeout(), Some(t0 + LINGER), "b lingers, a is held");
        d.handle_timeout(t0 + LINGER);
        assert_eq!(actions(&mut d), vec![Action::Unsubscribe(b)]);
        // Stream 1 ending later releases nothing more.
        d.release(1, t0 + LINGER);
        assert_eq!(d.poll_timeout(), None);
        d.release(2, t0 + LINGER);
        d.handle_timeout(t0 + LINGER * 2);
        assert_eq!(actions(&mut d), vec![Action::Unsubscribe(a)]);
    }

    #[test]
    fn a_want_asked_again_by_another_stream_is_not_subscribed_again() {
        let mut d = Demand::new(LINGER);
        d.acquire(1, cds());
        actions(&mut d);
        d.acquire(2, cds());
        d.acquire(1, cds());
        assert_eq!(actions(&mut d), vec![]);
    }

    #[test]
    fn the_last_stream_leaving_unsubscribes_after_the_linger() {
        let mut d = Demand::new(LINGER);
        let t0 = Instant::now();
        d.acquire(1, cds());
        actions(&mut d);
        d.release(1, t0);
        assert_eq!(d.poll_timeout(), Some(t0 + LINGER));
        d.handle_timeout(t0 + LINGER - Duration::from_millis(1));
        assert_eq!(actions(&mut d), vec![]);
        d.handle_timeout(t0 + LINGER);
        assert_eq!(actions(&mut d), vec![Action::Unsubscribe(cds())]);
        assert_eq!(d.subscriptions(), 0);
        assert!(!d.group_used(&GroupKey::Default));
    }

    #[test]
    fn a_stream_asking_within_the_linger_keeps_the_subscription() {
        let mut d = Demand::new(LINGER);
        let t0 = Instant::now();
        d.acquire(1, cds());
        d.release(1, t0);
        d.acquire(2, cds());
        assert_eq!(d.poll_timeout(), None);
        d.handle_timeout(t0 + LINGER * 2);
        assert_eq!(actions(&mut d), vec![Action::Subscribe(cds())]);
    }

    #[test]
    fn a_want_held_by_another_stream_stays_when_one_leaves() {
        let mut d = Demand::new(LINGER);
        let t0 = Instant::now();
        d.acquire(1, cds());
        d.acquire(2, cds());
        d.release(1, t0);
        assert_eq!(d.poll_timeout(), None);
        d.release(2, t0 + LINGER);
        assert_eq!(d.poll_timeout(), Some(t0 + LINGER * 2));
    }

    #[test]
    fn a_pinned_want_is_never_unsubscribed() {
        let mut d = Demand::new(LINGER);
        let t0 = Instant::now();
        d.pin(cds());
        d.acquire(1, cds());
        d.release(1, t0);
        assert_eq!(d.poll_timeout(), None);
        d.handle_timeout(t0 + LINGER * 10);
        assert_eq!(actions(&mut d), vec![Action::Subscribe(cds())]);
    }

    #[test]
    fn a_one_shot_request_holds_its_want_for_the_linger_only() {
        let mut d = Demand::new(LINGER);
        let t0 = Instant::now();
        d.touch(cds(), t0);
        assert_eq!(actions(&mut d), vec![Action::Subscribe(cds())]);
        d.touch(cds(), t0 + Duration::from_secs(10));
        assert_eq!(
            d.poll_timeout(),
            Some(t0 + Duration::from_secs(10) + LINGER)
        );
        d.handle_timeout(t0 + Duration::from_secs(10) + LINGER);
        assert_eq!(actions(&mut d), vec![Action::Unsubscribe(cds())]);
    }

    #[test]
    fn a_one_shot_request_does_not_shorten_a_streams_hold() {
        let mut d = Demand::new(LINGER);
        let t0 = Instant::now();
        d.acquire(1, cds());
        d.touch(cds(), t0);
        assert_eq!(d.poll_timeout(), None);
    }

    #[test]
    fn locators_of_one_name_are_subscribed_apart_and_found_with_its_plain_name() {
        let mut d = Demand::new(LINGER);
        let params = |env: &str| [("env".to_owned(), env.to_owned())].into();
        let prod = Want::locator(GroupKey::Default, CDS, "a", params("prod"));
        let test = Want::locator(GroupKey::Default, CDS, "a", params("test"));
        let plain = Want::named(GroupKey::Default, CDS, "a");
        d.acquire(1, prod.clone());
        d.acquire(2, test.clone());
        d.acquire(2, plain.clone());
        d.acquire(2, Want::named(GroupKey::Default, CDS, "b"));
        assert_eq!(actions(&mut d).len(), 4, "each a subscription of its own");
        let of: Vec<&Want> = d.wants_of(&GroupKey::Default, CDS, "a").collect();
        assert_eq!(of, vec![&plain, &prod, &test]);
        let t0 = Instant::now();
        d.drop_want(2, &test, t0);
        d.handle_timeout(t0 + LINGER);
        assert_eq!(actions(&mut d), vec![Action::Unsubscribe(test)]);
        assert!(d.holds(&prod));
    }

    #[test]
    fn wants_of_different_groups_are_apart() {
        let mut d = Demand::new(LINGER);
        let other = Want::wildcard(GroupKey::Cluster("edge".into()), CDS);
        d.acquire(1, cds());
        d.acquire(2, other.clone());
        assert_eq!(
            actions(&mut d),
            vec![Action::Subscribe(cds()), Action::Subscribe(other)]
        );
        d.release(2, Instant::now());
        d.handle_timeout(Instant::now() + LINGER);
        assert!(d.group_used(&GroupKey::Default));
        assert!(!d.group_used(&GroupKey::Cluster("edge".into())));
    }
}
