//! The relay's one table of upstream subscriptions, sans-I/O but for the store it declares in:
//! per (group, type, name or wildcard) — a [`Want`] — who wants it and until when, whether the
//! upstream has answered it, and what it is pending as in the store; and the cached variants. One owner decides what a
//! group wants and whether it was answered; the source tells it what the downstream streams
//! ask and what the upstream sends, the observer asks it (under the same lock) whether a
//! request must wait for the upstream.
//!
//! **Who wants it.** Each downstream stream that asks for a want holds it; the first to ask
//! subscribes it upstream ([`Action::Subscribe`]), and when the last holder leaves, it is
//! unsubscribed after the linger (so that a client that reconnects, or flaps, does not churn
//! the upstream). A one-shot request (a `Fetch*` call, a REST poll) holds its wants as a stream
//! does, under its own id, while it is in hand (a REST poll held for a change, a request
//! waiting for the upstream), then they linger (one without an id: [`Table::touch`], the
//! linger only). Wants pinned at start (`--prefetch`) are never unsubscribed. Time is an input:
//! [`Table::poll_timeout`] says when to call [`Table::handle_timeout`].
//!
//! **Whether it was answered** (`answered.rs`). A want asked for and not answered yet is
//! declared *pending* in the store its clients read ([`xdsd_core::store::PendingNames`]; the server's for the shared
//! partition, its partition's own with `--aggregate-by cluster|node`, [`crate::stores`]): the
//! server then holds back what would tell a client that its name does not exist until the
//! upstream answers. Nothing waits here: the declaration is made in the observer's call, before
//! the server answers the request ([`Table::ask_all`], `ask.rs`). What an upstream response answers is the table's to say as
//! it takes the response in (each resource's name and aliases, a removal's subscribed names,
//! a does-not-exist; the type's wildcard, if the group subscribes to it, only once the group's
//! stream says that what it holds answers it: a response may answer only names asked before
//! the wildcard, `xdsd_client::WildcardAnswer`); those answers wait
//! in the table for their partition's commit, are resolved in its swap
//! ([`Table::stage_answers`], [`Table::stage_shared`]) and announced once it is committed,
//! which wakes the streams that wait for them through the store's watch path. What was answered is a flag of the want's entry: it goes
//! with the subscription (an answer nobody subscribed to is nothing to remember), so it never
//! outlives it and never goes stale after a linger.
//!
//! **What is cached** (`received.rs`: what the upstream sends). Each partition's cache
//! ([`crate::cache`]: what its groups were sent, the variants with their constraints) is held here, beside the rows that decide what it keeps: a
//! want's row leaving (its linger out) takes what its group held only through it — a name
//! unless the type's wildcard still holds it, a wildcard's names but those still subscribed by
//! name, an alias's resources unless another of their names is subscribed — in the same call,
//! under the same lock. The source takes each partition's change from here.
//!
//! **Narrowed.** Every variant of a name constrains the same keys (xRFC TP2's best practice,
//! which the store requires), so a client's variant is selected by its parameters of those keys
//! only. In the shared partition, once a variant of a name was received (by any group) its keys
//! are known, and a stream's want of the name in a group presenting other parameters too is
//! held through that group narrowed to the keys ([`GroupKey::narrowed`]; a name whose variants
//! constrain nothing, through the group of no parameters: the prefetched one): clients that
//! differ in keys no constraint reads share one upstream subscription. Each narrowed want has a
//! route (its full group, the group it goes to, the streams holding it so), which a stream's
//! drop or end follows. A variant received with other keys moves the routes of its name; a
//! removal (or does-not-exist) for a narrowed group sends the routes to it back to their full
//! groups (whose parameters may select what the narrowed ones do not): either way the wants
//! newly held are declared pending for their clients before the change is committed, so the
//! old group's answer is never shown to them. The keys of a name leave with its last variant.
//! Wildcards, globs and the other partitions (whose streams present their nodes) are never
//! narrowed by what was received.
//!
//! **Declared keys.** A wildcard's answer is a set of names each with keys of its own, and a
//! name of a variant that matches only some parameters is sent only to the streams presenting
//! them, so nothing received says which keys a type's wildcard is selected by: the clients'
//! whole parameter set goes upstream (a stream per node cluster, each sent the whole type). An
//! operator who knows every key the upstream's constraints read declares them
//! ([`Table::declare_upstream_keys`], `--upstream-keys`): a wildcard, a glob collection and a
//! name whose keys are not known yet are then narrowed to those keys, in the shared partition,
//! as a name is to its own (a name's keys, once received, still narrow it). A key received
//! outside them is logged (ERROR, once per type and key).
//!
//! Bounded: a want the upstream does not answer within `--upstream-wait` is given up (the
//! source expires it: the clients are served what the relay has, and the next ones do not wait
//! again), and past the store's limit of pending names a want is not declared (logged: its
//! clients are answered as if the relay had asked nothing). An entry exists while a stream, a
//! one-shot request or a linger holds it, or while it is declared for a request whose demand the source has
//! not taken in yet.
//!
//! **Lists held once** ([`Table::acquire_list`], `lists.rs`): the wants of a large request that
//! streams asked alike (the observer hands them one list) are held by the list, under a holder
//! of its own, and each stream holds the list: the second stream of a fleet costs a lookup, not
//! a hold of each want. A stream that lets go of one of a shared list's wants holds the rest
//! itself from then on.
//!
//! Costs follow the change: a subscription, a stream's end, a linger running out and an answer
//! cost the wants they touch (the lingering wants are ordered by deadline, the declared ones by
//! want, so that a wildcard's answer finds the names of its type in its group as a range).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use xdsd_core::hash::{HashMap as FastMap, HashSet as FastSet};
use xdsd_core::params::ParamSet;
use xdsd_core::store::{PendingName, PendingNames, WHOLE_TYPE};
use xdsd_core::ClientNode;

use crate::cache::Cache;
use crate::group::{GroupKey, Partition};
use crate::metrics::RelayMetrics;
use crate::stores::Stores;
use crate::vecset::VecSet;

mod answered;
mod ask;
mod lists;
mod narrow;
mod received;

pub use crate::want::{Name, TypeKey, Want};
use ask::LastAsked;
#[cfg(test)]
use ask::LAST_ASKED_FROM;
pub(crate) use narrow::Routed;
use narrow::{Keys, Memo, Route};

/// How many resources of a response are cached per taking of the table's lock.
const PUTS_PER_LOCK: usize = 1024;

/// The default linger: how long an upstream subscription outlives its last downstream client.
pub const DEFAULT_LINGER: Duration = Duration::from_secs(30);

/// What the relay must do upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Subscribe to it (first asked).
    Subscribe(Want),
    /// Unsubscribe from it (its last holder left a linger ago).
    Unsubscribe(Want),
    /// Its last holder left a linger ago, and it was never asked by name: its stream's pinned
    /// wildcard brings it ([`State::covered`]), so there is nothing to unsubscribe.
    Forget(Want),
}

/// Who holds a want: a downstream stream (or a one-shot request), or a route of other
/// groups' streams narrowed to it.
#[derive(Debug, Clone, Copy)]
enum Holder {
    Stream(u64),
    Route,
}

/// One want's row. See the module documentation.
#[derive(Debug, Default)]
struct Entry {
    /// The downstream streams holding it, each with how many of its wants it holds it through
    /// (a stream's plain name and a locator of it may be narrowed to one want), by stream: a
    /// sorted vector, as most wants have one holder (see [`VecSet`]).
    holders: Vec<(u64, u32)>,
    /// The routes holding it (the narrowed wants of streams of other groups, see
    /// [`narrow::Route`]): each holds it once for all its streams.
    routes: u32,
    /// Held by nobody since then: unsubscribed at this time.
    until: Option<Instant>,
    /// Never unsubscribed.
    pinned: bool,
    /// Subscribed upstream (the source took in a demand for it).
    subscribed: bool,
    /// Subscribed upstream by its own name ([`Action::Subscribe`] sent): not a plain name its
    /// group's pinned wildcard of its type brings already (see [`State::covered`]).
    by_name: bool,
    /// The upstream answered it (or its wait was given up), and the answer is in the store.
    answered: bool,
    /// For a wildcard: its group's upstream stream was sent a response of its type since it was
    /// subscribed (taken in, maybe not committed yet; what readiness waits for).
    responded: bool,
    /// Declared pending in the store, not resolved yet: the pending name it was declared as.
    pending: Option<PendingName>,
}

impl Entry {
    fn add(&mut self, holder: Holder) {
        match holder {
            Holder::Stream(stream) => match self.holder(stream) {
                Ok(i) => self.holders[i].1 += 1,
                Err(i) => self.holders.insert(i, (stream, 1)),
            },
            Holder::Route => self.routes += 1,
        }
    }

    /// Where `stream` is among the holders (`Err`: where it would be).
    fn holder(&self, stream: u64) -> Result<usize, usize> {
        self.holders.binary_search_by_key(&stream, |(s, _)| *s)
    }

    /// `stream` holds it through one want fewer.
    fn drop_holder(&mut self, stream: u64) {
        if let Ok(i) = self.holder(stream) {
            self.holders[i].1 -= 1;
            if self.holders[i].1 == 0 {
                self.holders.remove(i);
            }
        }
    }

    /// Whether no stream, one-shot request or route holds it.
    fn held_by_nobody(&self) -> bool {
        self.holders.is_empty() && self.routes == 0
    }
}

#[derive(Debug)]
struct State {
    linger: Duration,
    /// The table (hashed: nothing reads it in order).
    wants: FastMap<Want, Entry>,
    /// The wants held by nobody, by the time each is unsubscribed at: what is due next, found
    /// without a scan of what is held.
    lingering: BTreeSet<(Instant, Want)>,
    /// How many wants each group has subscribed.
    groups: FastMap<GroupKey, usize>,
    /// How many wants are subscribed (the sum of `groups`, read without a scan).
    subscribed: usize,
    /// What each stream holds.
    streams: FastMap<u64, FastSet<Want>>,
    actions: VecDeque<Action>,
    /// The wants declared pending (an index of the entries whose `pending` is set), ordered so
    /// that a wildcard finds the names of its type in its group without a scan.
    declared: BTreeSet<Want>,
    /// Each declaration by its store's partition and pending name: what a store gives up is
    /// found without a scan of the declarations.
    by_pending: FastMap<(Partition, PendingName), Want>,
    /// How many declarations each partition's store holds: only those stores are looked at for
    /// what expires.
    partitions: HashMap<Partition, usize>,
    /// A refusal by the store's limit was logged (again only once the set had room).
    full_logged: bool,
    /// What each partition's groups were sent: the cached variants with their constraints
    /// (see [`crate::cache`]), kept and dropped by the rows' rules.
    caches: HashMap<Partition, Cache>,
    /// The partitions (not the shared one) whose cache may have changed since their last
    /// change taken: committed without a scan of the others.
    touched: BTreeSet<Partition>,
    /// The variants held in all the caches after the last changes taken.
    variants: usize,
    /// What the upstream's responses taken in answer, by partition, until their change is
    /// committed: resolved in the commit's own swap, then announced.
    answering: BTreeMap<Partition, Vec<Want>>,
    /// The shared partition's answers in the change handed to the feed, announced once it is
    /// committed (or refused).
    committing: Vec<Want>,
    /// The keys each name's variants constrain, by type and name, as last received in the
    /// shared partition (while its cache holds a variant of the name): what a want of the name
    /// is narrowed to (see the module documentation, "Narrowed").
    keys: FastMap<TypeKey, FastMap<String, Keys>>,
    /// The keys of an unconstrained variant (none), shared.
    no_keys: Keys,
    /// Every key the upstream's constraints read, as the operator declared them
    /// (`--upstream-keys`), if declared: what a wildcard, a glob collection and a name whose
    /// keys are not known yet are narrowed to (see the module documentation, "Declared keys").
    upstream_keys: Option<Keys>,
    /// The keys received outside `upstream_keys`, by type: each logged once.
    undeclared_logged: BTreeSet<(TypeKey, String)>,
    /// Counts the changes of `keys`: a narrowing looked up at one count is looked up again at
    /// another ([`Routed`]).
    keys_epoch: u64,
    /// The wants narrowed, by the full want (a stream's, in its own group): each one's route.
    routes: FastMap<Want, Route>,
    /// The full groups with a route, by type and name: what a name's keys changing moves.
    routed: FastMap<TypeKey, FastMap<Name, VecSet<GroupKey>>>,
    /// Counts the rows removed (a linger run out): an answer found before one is looked up
    /// again after it (a row's answer leaves with it).
    removals: u64,
    /// The latest large requests asked ([`Table::ask_all`]) and their narrowings, while what
    /// they were found from is unchanged.
    last_asked: VecDeque<LastAsked>,
    /// The lists of wants held once for every stream that asked the same (see
    /// [`Table::acquire_list`]), by the list's address.
    lists: FastMap<usize, lists::ListHold>,
    /// The lists each stream holds, by address.
    stream_lists: FastMap<u64, Vec<usize>>,
    /// Counts the lists held so far: each list holds its wants under a holder of its own.
    next_list: u64,
}

impl State {
    /// What the responses taken in answer in `partition`, not committed yet.
    fn answering(&mut self, partition: &Partition) -> &mut Vec<Want> {
        self.answering.entry(partition.clone()).or_default()
    }

    /// Whether `want` is subscribed.
    fn holds(&self, want: &Want) -> bool {
        self.wants.get(want).is_some_and(|e| e.subscribed)
    }

    /// The cache of `partition` (made if there is none), marked as maybe changed.
    fn cache(&mut self, partition: &Partition) -> &mut Cache {
        if *partition != Partition::All {
            self.touched.insert(partition.clone());
        }
        self.caches.entry(partition.clone()).or_default()
    }

    /// `want` is no longer subscribed: what its group held only through it leaves the cache.
    fn drop_unsubscribed(&mut self, want: &Want) {
        let wildcard = Want::wildcard(want.group.clone(), &want.type_url);
        if !want.is_wildcard() && self.holds(&wildcard) {
            // Still held through the type's wildcard.
            return;
        }
        if self.holds_through_glob(want) {
            // Still held through its glob collection (xRFC TP1).
            return;
        }
        if !self.caches.contains_key(&want.group.partition) {
            return;
        }
        let group = &want.group;
        let type_url = &want.type_url;
        let named = |wants: &FastMap<Want, Entry>, name: &str| {
            wants
                .get(&Want::named(group.clone(), type_url, name))
                .is_some_and(|e| e.subscribed)
        };
        if group.partition != Partition::All {
            self.touched.insert(group.partition.clone());
        }
        let State { caches, wants, .. } = self;
        let Some(cache) = caches.get_mut(&group.partition) else {
            return;
        };
        if want.is_wildcard() {
            // The names still subscribed by name stay.
            cache.drop_type(group, type_url, |name| named(wants, name));
            return;
        }
        if xdsd_core::xdstp::is_glob(&want.name) {
            // A glob collection: its members leave, but those still subscribed by name.
            let members = cache.members(group, type_url, &want.name);
            let gone: Vec<String> = members.into_iter().filter(|m| !named(wants, m)).collect();
            cache.remove(group, type_url, &gone);
            return;
        }
        cache.remove(group, type_url, &[want.name.to_string()]);
        // A name that was an alias (VHDS): what is held under it leaves with it, unless a
        // subscription still names it or another of its aliases.
        for name in cache.aliased(group, type_url, &want.name) {
            let mut names = cache.aliases_of(group, type_url, &name);
            names.push(name.clone());
            if !names.iter().any(|n| named(wants, n)) {
                cache.remove(group, type_url, &[name]);
            }
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

    /// Whether `want` is a plain name its group's pinned wildcard of its type brings (the
    /// `--prefetch` stream's): subscribed by name too, it costs the upstream and the relay a
    /// second answer of every such name (xdsd sends a name subscribed anew whatever the stream
    /// holds: ten streams of 40,000 names each, every name sent twice over the sync), and a
    /// pinned wildcard is never let go of, so nothing is lost by not asking. Not for xdstp
    /// names (an authority's may go to another server, a glob is not a name) nor for VHDS
    /// (asked by alias, on demand: no wildcard brings it).
    fn covered(&self, want: &Want) -> bool {
        !want.is_wildcard()
            && !xdsd_core::xdstp::is_xdstp(&want.name)
            && *want.type_url != *xdsd_core::types::VIRTUAL_HOST
            && self
                .wants
                .get(&Want::wildcard(want.group.clone(), &want.type_url))
                .is_some_and(|w| w.pinned)
    }

    /// The entry of `want`, subscribed upstream if it was not (by its own name unless its
    /// group's pinned wildcard brings it, [`State::covered`]).
    fn subscribed(&mut self, want: &Want) -> &mut Entry {
        let covered = !self.wants.get(want).is_some_and(|e| e.subscribed) && self.covered(want);
        let entry = self.wants.entry(want.clone()).or_default();
        if !entry.subscribed {
            entry.subscribed = true;
            entry.by_name = !covered;
            if !covered {
                self.actions.push_back(Action::Subscribe(want.clone()));
            }
            *self.groups.entry(want.group.clone()).or_default() += 1;
            self.subscribed += 1;
        }
        entry
    }

    /// `holder` holds `want`, subscribed if it was not, never unsubscribed while held.
    fn hold_for(&mut self, holder: Holder, want: &Want) {
        match self.wants.get_mut(want) {
            Some(entry) if entry.subscribed && entry.until.is_none() => entry.add(holder),
            _ => {
                self.subscribed(want).add(holder);
                self.set_until(want, None);
            }
        }
    }

    /// [`Table::acquire_all`] under the lock.
    fn acquire_all(&mut self, stream: u64, wants: Vec<Want>, routed: Option<Routed>) {
        let mut held = self.streams.remove(&stream).unwrap_or_default();
        // Room for what the stream holds, made at once (see `declare_in`).
        held.reserve(wants.len());
        let epoch = self.keys_epoch;
        let routed = routed
            .filter(|r| r.epoch == epoch && r.to.len() == wants.len())
            .map(|r| r.to);
        let mut memo: Memo = None;
        for (i, want) in wants.into_iter().enumerate() {
            if !held.insert(want.clone()) {
                // Held already (a REST poll read again): nothing to do.
                continue;
            }
            let to = match &routed {
                Some(to) => to[i].clone(),
                None => self.route(&want, &mut memo),
            };
            self.hold(stream, &want, to);
        }
        self.streams.insert(stream, held);
    }

    /// [`Table::release`] under the lock: the stream's own wants and the lists it holds.
    fn release(&mut self, stream: u64, now: Instant) {
        self.leave_lists(stream, now);
        let Some(held) = self.streams.remove(&stream) else {
            return;
        };
        for want in held {
            self.unhold(stream, &want, now);
        }
    }

    /// `stream` no longer holds `want` (as of `now`): it lingers if nobody else holds it.
    fn let_go(&mut self, stream: u64, want: &Want, now: Instant) {
        self.let_go_of(Holder::Stream(stream), want, now);
    }

    /// `holder` no longer holds `want` (as of `now`): it lingers if nobody else holds it.
    fn let_go_of(&mut self, holder: Holder, want: &Want, now: Instant) {
        let linger = self.linger;
        if let Some(entry) = self.wants.get_mut(want) {
            match holder {
                Holder::Stream(stream) => entry.drop_holder(stream),
                Holder::Route => entry.routes = entry.routes.saturating_sub(1),
            }
            if entry.held_by_nobody() && !entry.pinned {
                self.set_until(want, Some(now + linger));
            }
        }
    }

    fn declare(&mut self, want: &Want, name: PendingName) {
        let partition = want.group.partition.clone();
        let entry = self.wants.entry(want.clone()).or_default();
        if let Some(old) = entry.pending.replace(name.clone()) {
            // (Not reached: a want is declared only while it is not.)
            self.by_pending.remove(&(partition.clone(), old));
        } else {
            *self.partitions.entry(partition.clone()).or_default() += 1;
        }
        self.declared.insert(want.clone());
        self.by_pending.insert((partition, name), want.clone());
    }

    /// `want` is no longer pending: the name it was declared as, if it was.
    fn undeclare(&mut self, want: &Want) -> Option<PendingName> {
        let name = self.wants.get_mut(want)?.pending.take()?;
        self.declared.remove(want);
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

    /// Whether `want` is answered: its own answer, or for a name, its type's wildcard's in its
    /// group (the upstream sent every resource of the type) or its glob collection's (the
    /// upstream sent every member of it) — the one rule, for the observer's declarations and
    /// the source's subscriptions alike. The wildcard's answer is looked up once per group and
    /// type over the calls that share `memo` (a request's wants share both), not once per name.
    fn answered<'a>(&self, want: &'a Want, memo: &mut Option<(&'a Want, bool)>) -> bool {
        let answered = |w: &Want| self.wants.get(w).is_some_and(|e| e.answered);
        if answered(want) {
            return true;
        }
        if !want.is_wildcard() {
            let wildcard = match memo {
                Some((last, answered))
                    if last.group == want.group && last.type_url == want.type_url =>
                {
                    *answered
                }
                _ => {
                    let wildcard = answered(&Want::wildcard(want.group.clone(), &want.type_url));
                    *memo = Some((want, wildcard));
                    wildcard
                }
            };
            if wildcard {
                return true;
            }
        }
        glob_of(want).is_some_and(|glob| answered(&glob))
    }

    /// Whether the name `want` is a member of a glob collection its group subscribes to.
    fn holds_through_glob(&self, want: &Want) -> bool {
        glob_of(want).is_some_and(|glob| self.holds(&glob))
    }

    /// The wants declared that `want`'s answer answers: itself, and for a wildcard the names of
    /// its type in its group (a range of the ordered declarations, not a scan).
    fn answered_by(&self, want: &Want) -> Vec<Want> {
        if !want.is_wildcard() {
            // (A hashed lookup of its row: the declarations' order is for wildcards.)
            let declared = self.wants.get(want).is_some_and(|e| e.pending.is_some());
            return if declared {
                vec![want.clone()]
            } else {
                Vec::new()
            };
        }
        let from = Want::named(want.group.clone(), &want.type_url, "");
        self.declared
            .range(from..)
            .take_while(|w| w.group == want.group && w.type_url == want.type_url)
            .cloned()
            .collect()
    }
}

/// The glob collection (xRFC TP1) the name `want` is a member of, in its group: `None` for a
/// name that is not an xdstp name (one comparison), a glob, or the wildcard. Names are
/// canonical here (the observer subscribes them so, the upstream sends them so).
fn glob_of(want: &Want) -> Option<Want> {
    if !xdsd_core::xdstp::is_xdstp(&want.name) || xdsd_core::xdstp::is_glob(&want.name) {
        return None;
    }
    let glob = xdsd_core::xdstp::collection_of(&want.name)?;
    Some(Want::named(want.group.clone(), &want.type_url, glob))
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
        &*want.name
    };
    PendingName::new(want.type_url.as_str(), name).with_params(scope)
}

/// The table, shared by the source (its one writer of demand and answers) and the observer
/// (which declares under the same lock). See the module documentation.
#[derive(Debug)]
pub(crate) struct Table {
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

impl Table {
    /// Nothing wanted; subscriptions outlive their last holder by `linger`; a want waits at
    /// most `wait` for the upstream's answer; counted in `metrics`.
    pub(crate) fn new(
        linger: Duration,
        wait: Duration,
        metrics: RelayMetrics,
        stores: Arc<Stores>,
    ) -> Table {
        Table {
            state: Mutex::new(State {
                linger,
                wants: FastMap::default(),
                lingering: BTreeSet::new(),
                groups: FastMap::default(),
                subscribed: 0,
                streams: FastMap::default(),
                actions: VecDeque::new(),
                declared: BTreeSet::new(),
                by_pending: FastMap::default(),
                partitions: HashMap::new(),
                full_logged: false,
                caches: HashMap::new(),
                touched: BTreeSet::new(),
                variants: 0,
                answering: BTreeMap::new(),
                committing: Vec::new(),
                keys: FastMap::default(),
                no_keys: Keys::default(),
                upstream_keys: None,
                undeclared_logged: BTreeSet::new(),
                keys_epoch: 0,
                routes: FastMap::default(),
                routed: FastMap::default(),
                removals: 0,
                last_asked: VecDeque::new(),
                lists: FastMap::default(),
                stream_lists: FastMap::default(),
                next_list: 0,
            }),
            store: OnceLock::new(),
            stores,
            wait,
            metrics,
        }
    }

    /// Declares `keys` every key the upstream's constraints read, for every type (`None`: not
    /// known, the default): a wildcard, a glob collection and a name whose keys are not known
    /// yet are then held through their group narrowed to them, not through the clients' whole
    /// parameter set (see the module documentation, "Declared keys").
    pub(crate) fn declare_upstream_keys(&self, keys: Option<BTreeSet<String>>) {
        let mut state = self.state();
        state.upstream_keys = keys.map(Arc::new);
        state.keys_epoch += 1;
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    // --- Who wants it -------------------------------------------------------------------

    /// Subscribes `want` for good (never unsubscribed).
    pub(crate) fn pin(&self, want: Want) {
        let mut state = self.state();
        state.subscribed(&want).pinned = true;
        state.set_until(&want, None);
    }

    /// Downstream stream `stream` asks for `want`.
    #[cfg(test)]
    pub(crate) fn acquire(&self, stream: u64, want: Want) {
        self.acquire_all(stream, vec![want], None);
    }

    /// Downstream stream `stream` asks for `wants` (those of one request): under one lock, and
    /// a want another stream holds already costs its lookups, nothing copied but the want
    /// itself into the stream's set (ten streams of 100,000 names each: the sync's tail).
    ///
    /// A name is held through its group narrowed to the keys its variants constrain, when they
    /// are known (see the module documentation, "Narrowed"): as `routed` says (what
    /// [`Table::ask_all`] looked up for these wants) unless a name's keys changed since, else
    /// looked up here.
    pub(crate) fn acquire_all(&self, stream: u64, wants: Vec<Want>, routed: Option<Routed>) {
        self.state().acquire_all(stream, wants, routed);
    }

    /// A one-shot request asked for `want` at `now`: held for the linger.
    pub(crate) fn touch(&self, want: Want, now: Instant) {
        let mut state = self.state();
        let until = now + state.linger;
        let entry = state.subscribed(&want);
        if entry.held_by_nobody() && !entry.pinned {
            let until = Some(entry.until.map_or(until, |u| u.max(until)));
            state.set_until(&want, until);
        }
    }

    /// Downstream stream `stream` no longer asks for `want` (as of `now`): it lingers if nobody
    /// else holds it.
    pub(crate) fn drop_want(&self, stream: u64, want: &Want, now: Instant) {
        let mut state = self.state();
        let held = state
            .streams
            .get_mut(&stream)
            .is_some_and(|held| held.remove(want));
        if held {
            state.unhold(stream, want, now);
        } else if !state.drop_from_list(stream, want, now) {
            state.let_go(stream, want, now);
        }
    }

    /// Downstream stream `stream` ended at `now`: what it held lingers if nobody else holds it.
    pub(crate) fn release(&self, stream: u64, now: Instant) {
        self.state().release(stream, now);
    }

    /// When [`Table::handle_timeout`] is next due.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        self.state().lingering.first().map(|(until, _)| *until)
    }

    /// Unsubscribes what nobody held for the linger, as of `now`: its row leaves the table,
    /// its answer and its declaration with it (a later client waits for the upstream again).
    pub(crate) fn handle_timeout(&self, now: Instant) {
        let mut state = self.state();
        let mut resolved: Vec<(Partition, PendingName)> = Vec::new();
        while let Some((until, _)) = state.lingering.first() {
            if *until > now {
                break;
            }
            let Some((_, want)) = state.lingering.pop_first() else {
                break;
            };
            if let Some(name) = state.undeclare(&want) {
                resolved.push((want.group.partition.clone(), name));
            }
            state.removals += 1;
            let (subscribed, by_name) = state
                .wants
                .remove(&want)
                .map_or((false, false), |e| (e.subscribed, e.by_name));
            if subscribed {
                state.subscribed -= 1;
            }
            if let Some(count) = state.groups.get_mut(&want.group) {
                *count -= 1;
                if *count == 0 {
                    state.groups.remove(&want.group);
                }
            }
            state.drop_unsubscribed(&want);
            state.actions.push_back(if by_name {
                Action::Unsubscribe(want)
            } else {
                Action::Forget(want)
            });
        }
        if !resolved.is_empty() {
            self.resolve(resolved.iter().map(|(p, n)| (p, n)).collect(), false);
            self.metrics.set_pending(state.declared.len());
        }
    }

    /// The next thing to do upstream.
    #[cfg(test)]
    pub(crate) fn poll_action(&self) -> Option<Action> {
        self.state().actions.pop_front()
    }

    /// What to do upstream, in order, taken under one lock (a request of 100,000 names is
    /// 100,000 subscriptions).
    pub(crate) fn take_actions(&self) -> VecDeque<Action> {
        std::mem::take(&mut self.state().actions)
    }

    /// The upstream subscriptions held.
    pub(crate) fn subscriptions(&self) -> usize {
        self.state().subscribed
    }

    /// Whether `want` is subscribed.
    #[cfg(test)]
    pub(crate) fn holds(&self, want: &Want) -> bool {
        self.state().holds(want)
    }

    /// Whether `group` still has any subscription.
    pub(crate) fn group_used(&self, group: &GroupKey) -> bool {
        self.state().groups.contains_key(group)
    }

    /// The rows in the table (what it holds is bounded by this).
    #[cfg(test)]
    fn rows(&self) -> usize {
        self.state().wants.len()
    }
}

#[cfg(test)]
mod tests;
