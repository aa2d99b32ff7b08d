//! Narrowed: a name held through its group narrowed to the keys its variants constrain (see
//! the table's module documentation, "Narrowed"). The routes of the wants so held — looked up,
//! made, followed when a stream lets go, moved when a name's keys change or a narrowed group is
//! told a name is gone — and the keys learnt from the shared partition's variants.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use tracing::error;
use xdsd_core::params::Constraints;

use super::{Holder, Name, State, Table, TypeKey, Want};
use crate::group::{GroupKey, Partition};
use crate::vecset::VecSet;

/// The keys a name's variants constrain (xRFC TP2: every variant of a name constrains the same
/// keys, as the relay's store requires), shared by the names that have the same.
pub(super) type Keys = Arc<BTreeSet<String>>;

/// A narrowed want's route: the want it is held through (its name in its group narrowed to the
/// keys its name's variants constrain), and the streams holding it so. The route holds that
/// want once for all its streams ([`super::Entry::routes`]): a stream joining a route costs a
/// lookup of its full want, not a hold of the narrowed one.
#[derive(Debug)]
pub(super) struct Route {
    pub(super) held: Want,
    pub(super) streams: VecSet<u64>,
}

/// The narrowings of a request's wants as [`Table::ask_all`] looked them up (`None`: the
/// want's own group), with the count of key changes they were looked up at: a name's wants are
/// routed once per request, not once by the observer and again by the source, unless a name's
/// keys changed in between.
#[derive(Debug)]
pub(crate) struct Routed {
    pub(super) epoch: u64,
    pub(super) to: Arc<[Option<GroupKey>]>,
}

/// A narrowing looked up last: a request's wants share their group, and most names the same
/// keys (none), so a group is narrowed once per request rather than once per name.
pub(super) type Memo = Option<(GroupKey, Keys, Option<GroupKey>)>;

impl State {
    /// The narrower group the full want `want` is held through, if any: in the shared
    /// partition, a name (not a wildcard, not a glob) whose variants' keys are known, of a
    /// group presenting parameters beyond them; with declared keys
    /// ([`Table::declare_upstream_keys`]), any other want of such a group, by those. `memo` is
    /// the last narrowing looked up.
    pub(super) fn route(&self, want: &Want, memo: &mut Memo) -> Option<GroupKey> {
        if want.group.partition != Partition::All || want.group.params.is_empty() {
            return None;
        }
        let set = want.is_wildcard()
            || (xdsd_core::xdstp::is_xdstp(&want.name) && xdsd_core::xdstp::is_glob(&want.name));
        // A name's own keys once known; else (and for a wildcard or a glob collection, a set
        // of names with keys of their own) the keys declared to be all the upstream reads.
        let learnt = if set {
            None
        } else {
            self.keys
                .get(&want.type_url)
                .and_then(|names| names.get(&*want.name))
        };
        let keys = learnt.or(self.upstream_keys.as_ref())?;
        if let Some((group, known, to)) = memo {
            if *group == want.group && (Arc::ptr_eq(known, keys) || known == keys) {
                return to.clone();
            }
        }
        let to = want.group.narrowed(keys);
        *memo = Some((want.group.clone(), keys.clone(), to.clone()));
        to
    }

    /// `stream` holds the full want `want` through the group `to` (`None`: its own); the want
    /// held. A want already routed there costs one lookup (ten streams of one parameter set
    /// holding a name: the route made once, by the first).
    pub(super) fn hold(&mut self, stream: u64, want: &Want, to: Option<GroupKey>) -> Want {
        let Some(to) = to else {
            self.hold_for(Holder::Stream(stream), want);
            return want.clone();
        };
        if let Some(route) = self.routes.get_mut(want) {
            if route.held.group == to {
                route.streams.insert(stream);
                return route.held.clone();
            }
            // (Routed elsewhere since: its streams move with it.)
            self.reroute_one(want, Some(to.clone()), Instant::now());
            if let Some(route) = self.routes.get_mut(want) {
                route.streams.insert(stream);
                return route.held.clone();
            }
        }
        let held = Want::named(to, &want.type_url, want.name.clone());
        self.routes.insert(
            want.clone(),
            Route {
                held: held.clone(),
                streams: VecSet::one(stream),
            },
        );
        let groups = match self.routed.get_mut(&want.type_url) {
            Some(names) => names,
            None => self.routed.entry(want.type_url.clone()).or_default(),
        };
        groups
            .entry(want.name.clone())
            .or_default()
            .insert(want.group.clone());
        self.hold_for(Holder::Route, &held);
        held
    }

    /// The route of the full want `want` taken out (what it held no longer held by it, as of
    /// `now`): its streams.
    fn take_route(&mut self, want: &Want, now: Instant) -> Option<VecSet<u64>> {
        let route = self.routes.remove(want)?;
        if let Some(names) = self.routed.get_mut(&want.type_url) {
            if let Some(groups) = names.get_mut(&want.name) {
                groups.remove(&want.group);
                if groups.is_empty() {
                    names.remove(&want.name);
                }
            }
            if names.is_empty() {
                self.routed.remove(&want.type_url);
            }
        }
        self.let_go_of(Holder::Route, &route.held, now);
        Some(route.streams)
    }

    /// `stream` no longer holds the full want `want` (as of `now`): what it held it through
    /// lingers if nobody else holds it.
    pub(super) fn unhold(&mut self, stream: u64, want: &Want, now: Instant) {
        if let Some(route) = self.routes.get_mut(want) {
            if route.streams.remove(&stream) {
                if route.streams.is_empty() {
                    self.take_route(want, now);
                }
                return;
            }
        }
        // Held through its own group (a name whose keys were not known when it was asked).
        self.let_go(stream, want, now);
    }

    /// The route of the full want `want` moved to `to` (`None`: its own group), its streams
    /// with it, as of `now`: the wants newly held.
    fn reroute_one(&mut self, want: &Want, to: Option<GroupKey>, now: Instant) -> Vec<Want> {
        let Some(streams) = self.take_route(want, now) else {
            return Vec::new();
        };
        let mut held = Vec::new();
        for stream in streams {
            let h = self.hold(stream, want, to.clone());
            if held.last() != Some(&h) {
                held.push(h);
            }
        }
        held
    }

    /// The routes of `name` of `type_url` whose group is no longer the one `to` says (a full
    /// group's new route, `None`: its own) move there, their streams with them (as of `now`):
    /// the wants newly held.
    pub(super) fn reroute(
        &mut self,
        type_url: &TypeKey,
        name: &str,
        to: impl Fn(&GroupKey, &GroupKey) -> Option<Option<GroupKey>>,
        now: Instant,
    ) -> Vec<Want> {
        let Some(groups) = self.routed.get(type_url).and_then(|n| n.get(name)) else {
            return Vec::new();
        };
        let name: Name = name.into();
        let moves: Vec<(Want, Option<GroupKey>)> = groups
            .iter()
            .filter_map(|full| {
                let want = Want::named(full.clone(), type_url, name.clone());
                let route = self.routes.get(&want)?;
                let new = to(full, &route.held.group)?;
                (new.as_ref() != Some(&route.held.group)).then_some((want, new))
            })
            .collect();
        let mut held = Vec::new();
        for (want, new) in moves {
            held.extend(self.reroute_one(&want, new, now));
        }
        held.sort();
        held.dedup();
        held
    }

    /// The shared partition was sent the variant `r`: the keys its name's variants constrain
    /// are its (a name's variants all constrain the same keys), and the wants narrowed by other
    /// keys are routed by these (as of now): the wants newly held.
    pub(super) fn learn_keys(
        &mut self,
        type_url: &TypeKey,
        r: &xdsd_client::Resource,
    ) -> Vec<Want> {
        let keys = match r.constraints.as_ref().filter(|c| c.r#type.is_some()) {
            None => self.no_keys.clone(),
            // Constraints the store cannot take teach nothing (it says why).
            Some(c) => match Constraints::new(c.clone()) {
                Ok(c) => Arc::new(c.keys().clone()),
                Err(_) => return Vec::new(),
            },
        };
        let names = match self.keys.get_mut(type_url) {
            Some(names) => names,
            None => self.keys.entry(type_url.clone()).or_default(),
        };
        if let Some(declared) = &self.upstream_keys {
            for key in keys.iter().filter(|k| !declared.contains(*k)) {
                if self
                    .undeclared_logged
                    .insert((type_url.clone(), key.clone()))
                {
                    error!(type_url = %type_url, name = %r.name, key = %key, "the upstream constrains a key --upstream-keys does not name: a wildcard, a glob collection or a name not received yet is fetched without it, and may be sent a variant that is not its clients' (name every key the upstream's constraints read)");
                }
            }
        }
        match names.get_mut(&r.name) {
            Some(known) if **known == *keys => return Vec::new(),
            Some(known) => *known = keys.clone(),
            None => {
                names.insert(r.name.clone(), keys.clone());
            }
        }
        // A route looked up before this is looked up again.
        self.keys_epoch += 1;
        if self.routes.is_empty() {
            return Vec::new();
        }
        self.reroute(
            type_url,
            &r.name,
            |full, _| Some(full.narrowed(&keys)),
            Instant::now(),
        )
    }
}

impl Table {
    /// `group` was told that `names` of `type_url` are gone (or do not exist) for its
    /// parameters: the wants narrowed to it are held through their own groups again and
    /// pending there, as of now (their own parameters may select a variant its do not: the
    /// keys a name's variants constrain may have changed upstream) — with declared keys,
    /// through their groups narrowed to those, the widest the declaration lets a name be
    /// asked by (a want narrowed to them stays: that group's answer is its clients').
    pub(super) fn widen(
        &self,
        state: &mut State,
        group: &GroupKey,
        type_url: &str,
        names: &[String],
    ) {
        if group.partition != Partition::All || state.routes.is_empty() {
            return;
        }
        let now = Instant::now();
        let type_url = TypeKey::of(type_url);
        let mut widened = Vec::new();
        let declared = state.upstream_keys.clone();
        let widest = |full: &GroupKey| declared.as_ref().and_then(|keys| full.narrowed(keys));
        for name in names {
            widened.extend(state.reroute(
                &type_url,
                name,
                |full, to| (to == group).then(|| widest(full)),
                now,
            ));
        }
        if !widened.is_empty() {
            let wants: Vec<&Want> = widened.iter().collect();
            self.declare_in(state, &wants, None, now);
        }
    }
}
