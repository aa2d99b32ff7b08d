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

/// One upstream subscription: in a group's stream, a type and a name (`*`: the wildcard). A
/// downstream resource locator is the plain name in the stream of the locator's parameters
/// ([`GroupKey::with_params`]): upstream the relay subscribes names only.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Want {
    /// The upstream stream (group) it is subscribed on.
    pub group: GroupKey,
    /// The type URL.
    pub type_url: String,
    /// The name, or `*` for every resource of the type.
    pub name: String,
}

impl Want {
    /// The resource `name` of `type_url` in `group`.
    pub fn named(group: GroupKey, type_url: impl Into<String>, name: impl Into<String>) -> Want {
        Want {
            group,
            type_url: type_url.into(),
            name: name.into(),
        }
    }

    /// Whether it is a type's wildcard.
    pub fn is_wildcard(&self) -> bool {
        self.name == xdsd_client::WILDCARD
    }

    /// The wildcard of `type_url` in `group`.
    pub fn wildcard(group: GroupKey, type_url: impl Into<String>) -> Want {
        Want::named(group, type_url, xdsd_client::WILDCARD)
    }
}

impl std::fmt::Display for Want {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
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
    /// The wants held by nobody, by the time each is unsubscribed at: what is due next, found
    /// without a scan of what is held.
    lingering: BTreeSet<(Instant, Want)>,
    /// How many wants each group holds.
    groups: HashMap<GroupKey, usize>,
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
            lingering: BTreeSet::new(),
            groups: HashMap::new(),
            streams: HashMap::new(),
            actions: VecDeque::new(),
        }
    }

    /// Sets when `want` (held) is unsubscribed, `None` for never.
    fn set_until(&mut self, want: &Want, until: Option<Instant>) {
        let Some(entry) = self.wants.get_mut(want) else {
            return;
        };
        if entry.until == until {
            return;
        }
        if let Some(old) = entry.until.take() {
            self.lingering.remove(&(old, want.clone()));
        }
        if let Some(new) = until {
            self.lingering.insert((new, want.clone()));
        }
        entry.until = until;
    }

    /// Subscribes `want` for good (never unsubscribed).
    pub fn pin(&mut self, want: Want) {
        self.entry(want.clone()).pinned = true;
        self.set_until(&want, None);
    }

    /// Downstream stream `stream` asks for `want`.
    pub fn acquire(&mut self, stream: u64, want: Want) {
        self.streams.entry(stream).or_default().insert(want.clone());
        self.entry(want.clone()).holders.insert(stream);
        self.set_until(&want, None);
    }

    /// A one-shot request asked for `want` at `now`: held for the linger.
    pub fn touch(&mut self, want: Want, now: Instant) {
        let until = now + self.linger;
        let entry = self.entry(want.clone());
        if entry.holders.is_empty() && !entry.pinned {
            let until = Some(entry.until.map_or(until, |u| u.max(until)));
            self.set_until(&want, until);
        }
    }

    /// `stream` no longer holds `want` (as of `now`): it lingers if nobody else holds it.
    fn let_go(&mut self, stream: u64, want: &Want, now: Instant) {
        if let Some(entry) = self.wants.get_mut(want) {
            entry.holders.remove(&stream);
            if entry.holders.is_empty() && !entry.pinned {
                let until = now + self.linger;
                self.set_until(want, Some(until));
            }
        }
    }

    /// Downstream stream `stream` no longer asks for `want` (as of `now`): it lingers if nobody
    /// else holds it.
    pub fn drop_want(&mut self, stream: u64, want: &Want, now: Instant) {
        if let Some(held) = self.streams.get_mut(&stream) {
            held.remove(want);
        }
        self.let_go(stream, want, now);
    }

    /// Downstream stream `stream` ended at `now`: what it held lingers if nobody else holds it.
    pub fn release(&mut self, stream: u64, now: Instant) {
        let Some(held) = self.streams.remove(&stream) else {
            return;
        };
        for want in held {
            self.let_go(stream, &want, now);
        }
    }

    /// When [`Demand::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.lingering.first().map(|(until, _)| *until)
    }

    /// Unsubscribes what nobody held for the linger, as of `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some((until, _)) = self.lingering.first() {
            if *until > now {
                break;
            }
            let Some((_, want)) = self.lingering.pop_first() else {
                break;
            };
            self.wants.remove(&want);
            if let Some(count) = self.groups.get_mut(&want.group) {
                *count -= 1;
                if *count == 0 {
                    self.groups.remove(&want.group);
                }
            }
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
        self.groups.contains_key(group)
    }

    /// The subscription of resource `name` of `type_url` in `group` (not the type's wildcard),
    /// if held.
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
            *self.groups.entry(want.group.clone()).or_default() += 1;
        }
        self.wants.entry(want).or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
    const LINGER: Duration = Duration::from_secs(30);

    fn edge() -> GroupKey {
        GroupKey::of(
            crate::group::Partition::Cluster("edge".into()),
            Default::default(),
            CDS,
        )
    }

    fn cds() -> Want {
        Want::wildcard(GroupKey::shared(), CDS)
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
        let a = Want::named(GroupKey::shared(), CDS, "a");
        let b = Want::named(GroupKey::shared(), CDS, "b");
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
        assert!(!d.group_used(&GroupKey::shared()));
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
    fn a_locators_want_is_its_plain_name_in_the_stream_of_its_parameters() {
        let mut d = Demand::new(LINGER);
        let params = |env: &str| [("env".to_owned(), env.to_owned())].into();
        let prod = Want::named(GroupKey::shared().with_params(params("prod")), CDS, "a");
        let test = Want::named(GroupKey::shared().with_params(params("test")), CDS, "a");
        let plain = Want::named(GroupKey::shared(), CDS, "a");
        d.acquire(1, prod.clone());
        d.acquire(2, test.clone());
        d.acquire(2, plain.clone());
        assert_eq!(actions(&mut d).len(), 3, "each a subscription of its own");
        let of: Vec<&Want> = d.wants_of(&prod.group, CDS, "a").collect();
        assert_eq!(of, vec![&prod]);
        let t0 = Instant::now();
        d.drop_want(2, &test, t0);
        d.handle_timeout(t0 + LINGER);
        assert_eq!(actions(&mut d), vec![Action::Unsubscribe(test)]);
        assert!(d.holds(&prod));
    }

    #[test]
    fn wants_of_different_groups_are_apart() {
        let mut d = Demand::new(LINGER);
        let other = Want::wildcard(edge(), CDS);
        d.acquire(1, cds());
        d.acquire(2, other.clone());
        assert_eq!(
            actions(&mut d),
            vec![Action::Subscribe(cds()), Action::Subscribe(other)]
        );
        d.release(2, Instant::now());
        d.handle_timeout(Instant::now() + LINGER);
        assert!(d.group_used(&GroupKey::shared()));
        assert!(!d.group_used(&edge()));
    }
}
