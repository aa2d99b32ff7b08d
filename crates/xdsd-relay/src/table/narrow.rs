//! Narrowed: a name held through its group narrowed to the keys its variants constrain (see
//! the table's module documentation, "Narrowed"). The routes of the wants so held — looked up,
//! made, followed when a stream lets go, moved when a name's keys change or a narrowed group is
//! told a name is gone — and the keys learnt from the shared partition's variants.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use xdsd_core::params::Constraints;

use super::{State, Table, TypeKey, Want};
use crate::group::{GroupKey, Partition};

/// The keys a name's variants constrain (xRFC TP2: every variant of a name constrains the same
/// keys, as the relay's store requires), shared by the names that have the same.
pub(super) type Keys = Arc<BTreeSet<String>>;

/// A narrowed want's route: the group it is held through (its own parameters narrowed to the
/// keys its name's variants constrain), and the streams holding it so.
#[derive(Debug)]
pub(super) struct Route {
    pub(super) to: GroupKey,
    pub(super) streams: BTreeSet<u64>,
}

/// The narrowings of a request's wants as [`Table::ask_all`] looked them up (`None`: the
/// want's own group), with the count of key changes they were looked up at: a name's wants are
/// routed once per request, not once by the observer and again by the source, unless a name's
/// keys changed in between.
#[derive(Debug)]
pub(crate) struct Routed {
    pub(super) epoch: u64,
    pub(super) to: Vec<Option<GroupKey>>,
}

/// A narrowing looked up last: a request's wants share their group, and most names the same
/// keys (none), so a group is narrowed once per request rather than once per name.
pub(super) type Memo = Option<(GroupKey, Keys, Option<GroupKey>)>;

impl State {
    /// The narrower group the full want `want` is held through, if any: in the shared
    /// partition, a name (not a wildcard, not a glob) whose variants' keys are known, of a
    /// group presenting parameters beyond them. `memo` is the last narrowing looked up.
    pub(super) fn route(&self, want: &Want, memo: &mut Memo) -> Option<GroupKey> {
        if want.group.partition != Partition::All
            || want.group.params.is_empty()
            || want.is_wildcard()
            || (xdsd_core::xdstp::is_xdstp(&want.name) && xdsd_core::xdstp::is_glob(&want.name))
        {
            return None;
        }
        let keys = self.keys.get(&want.type_url)?.get(&want.name)?;
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
    /// held.
    pub(super) fn hold(&mut self, stream: u64, want: &Want, to: Option<GroupKey>) -> Want {
        let held = match to {
            None => want.clone(),
            Some(to) => {
                // Looked up before made: a name held by ten streams is copied once.
                let names = match self.routes.get_mut(&want.type_url) {
                    Some(names) => names,
                    None => self.routes.entry(want.type_url.clone()).or_default(),
                };
                let routes = match names.get_mut(&want.name) {
                    Some(routes) => routes,
                    None => names.entry(want.name.clone()).or_default(),
                };
                let route = routes.entry(want.group.clone()).or_insert_with(|| Route {
                    to,
                    streams: BTreeSet::new(),
                });
                route.streams.insert(stream);
                Want::named(route.to.clone(), &want.type_url, &want.name)
            }
        };
        match self.wants.get_mut(&held) {
            Some(entry) if entry.subscribed && entry.until.is_none() => {
                *entry.holders.entry(stream).or_default() += 1;
            }
            _ => {
                *self.subscribed(&held).holders.entry(stream).or_default() += 1;
                self.set_until(&held, None);
            }
        }
        held
    }

    /// The route of `name` of `type_url` from `full` taken out: the group it went to.
    pub(super) fn take_route(
        &mut self,
        type_url: &TypeKey,
        name: &str,
        full: &GroupKey,
    ) -> Option<GroupKey> {
        let names = self.routes.get_mut(type_url)?;
        let routes = names.get_mut(name)?;
        let route = routes.remove(full);
        if routes.is_empty() {
            names.remove(name);
            if names.is_empty() {
                self.routes.remove(type_url);
            }
        }
        route.map(|r| r.to)
    }

    /// `stream` no longer holds the full want `want` (as of `now`): what it held it through
    /// lingers if nobody else holds it.
    pub(super) fn unhold(&mut self, stream: u64, want: &Want, now: Instant) {
        let mut held = None;
        if let Some(names) = self.routes.get_mut(&want.type_url) {
            if let Some(routes) = names.get_mut(&want.name) {
                if let Some(route) = routes.get_mut(&want.group) {
                    route.streams.remove(&stream);
                    held = Some(Want::named(route.to.clone(), &want.type_url, &want.name));
                    if route.streams.is_empty() {
                        routes.remove(&want.group);
                    }
                }
                if routes.is_empty() {
                    names.remove(&want.name);
                }
            }
            if names.is_empty() {
                self.routes.remove(&want.type_url);
            }
        }
        self.let_go(stream, held.as_ref().unwrap_or(want), now);
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
        let Some(routes) = self.routes.get(type_url).and_then(|n| n.get(name)) else {
            return Vec::new();
        };
        let moves: Vec<(GroupKey, Option<GroupKey>, Vec<u64>)> = routes
            .iter()
            .filter_map(|(full, route)| {
                let new = to(full, &route.to)?;
                (new.as_ref() != Some(&route.to))
                    .then(|| (full.clone(), new, route.streams.iter().copied().collect()))
            })
            .collect();
        let mut held = Vec::new();
        for (full, new, streams) in moves {
            let Some(old) = self.take_route(type_url, name, &full) else {
                continue;
            };
            let old = Want::named(old, type_url, name);
            let want = Want::named(full, type_url, name);
            for stream in streams {
                self.let_go(stream, &old, now);
                held.push(self.hold(stream, &want, new.clone()));
            }
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
    /// keys a name's variants constrain may have changed upstream).
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
        for name in names {
            widened.extend(state.reroute(
                &type_url,
                name,
                |_, to| (to == group).then_some(None),
                now,
            ));
        }
        if !widened.is_empty() {
            let wants: Vec<&Want> = widened.iter().collect();
            self.declare_in(state, &wants, None, now);
        }
    }
}
