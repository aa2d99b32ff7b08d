//! What the upstream sends: the variants cached per partition, what each response answers
//! (staged with its partition's commit, announced once committed), removals and
//! does-not-exist, and each partition's change for its store. See the table's module
//! documentation.

use std::collections::BTreeSet;
use std::time::Instant;

use envoy_types::pb::envoy::service::discovery::v3::DynamicParameterConstraints;
use xdsd_core::ChangeSet;

use super::{glob_of, GroupKey, Partition, Table, TypeKey, Want, PUTS_PER_LOCK};

impl Table {
    /// `group` was sent `resources` of `type_url` (added or changed) in one response: cached,
    /// and what they answer is answered once committed — each resource's name and aliases
    /// (VHDS: asked as `ROUTE_CONFIG/DOMAIN`) and the glob collections they are members of;
    /// never the type's wildcard ([`Table::wildcard_answered`] says when).
    pub(crate) fn received(
        &self,
        group: &GroupKey,
        type_url: &str,
        resources: &mut [&mut xdsd_client::Resource],
    ) {
        let type_key = TypeKey::of(type_url);
        let mut answers = Vec::new();
        // Taken in a slice at a time: the observer, which declares under the same lock, waits
        // for a slice, not for a whole response (100,000 names).
        let mut rerouted = Vec::new();
        for slice in resources.chunks_mut(PUTS_PER_LOCK) {
            let mut state = self.state();
            let cache = state.cache(&group.partition);
            cache.put_all(group, &type_key, slice);
            for r in slice.iter() {
                answers.extend(
                    r.names()
                        .map(|name| Want::named(group.clone(), &type_key, name)),
                );
            }
            if group.partition == Partition::All {
                for r in slice {
                    rerouted.extend(state.learn_keys(&type_key, r));
                }
            }
        }
        let mut state = self.state();
        if !rerouted.is_empty() {
            // Held through another group now: pending there (for those clients) until it
            // answers, so that nothing the old group's answer says is shown them meanwhile.
            let wants: Vec<&Want> = rerouted.iter().collect();
            self.declare_in(&mut state, &wants, None, Instant::now());
        }
        // A response of its type is not its wildcard's answer (it may answer names asked
        // before the wildcard, sent before the upstream read it): the group's stream says
        // which is ([`Table::wildcard_answered`]). It is a response, which readiness reads.
        let wildcard = Want::wildcard(group.clone(), &type_key);
        if let Some(entry) = state.wants.get_mut(&wildcard).filter(|e| e.subscribed) {
            entry.responded = true;
        }
        // A member answers its glob collection if the group subscribes to it: the upstream
        // sends a glob's members together (xRFC TP1). Only xdstp names pay (a lookup per
        // collection, not per member).
        let mut last: Option<Want> = None;
        let globs: Vec<Want> = resources
            .iter()
            .filter(|r| xdsd_core::xdstp::is_xdstp(&r.name))
            .filter_map(|r| glob_of(&Want::named(group.clone(), &type_key, r.name.as_str())))
            .filter(|glob| {
                let new = last.as_ref() != Some(glob);
                last = Some(glob.clone());
                new && state.holds(glob)
            })
            .collect();
        answers.extend(globs);
        state.answering(&group.partition).append(&mut answers);
    }

    /// `group`'s upstream stream holds its server's answer to the wildcard of `type_url`
    /// (`xdsd_client::Event::WildcardAnswered`, after the events of the response that brought
    /// it): the wildcard, if the group subscribes to it, is answered once committed, and with
    /// it the names of its type in its group. Whether it was not answered before (a stream
    /// that reconnected answers it again).
    pub(crate) fn wildcard_answered(&self, group: &GroupKey, type_url: &str) -> bool {
        let mut state = self.state();
        let wildcard = Want::wildcard(group.clone(), type_url);
        let Some(entry) = state.wants.get(&wildcard).filter(|e| e.subscribed) else {
            return false;
        };
        let first = !entry.answered;
        state.answering(&group.partition).push(wildcard);
        first
    }

    /// The upstream removed these variants of `names` of `type_url` from `group`: the wants
    /// subscribed that this answers (each name, and each alias the group held them under) are
    /// answered once committed.
    pub(crate) fn removed(
        &self,
        group: &GroupKey,
        type_url: &str,
        names: &[String],
        variants: &[(String, Option<DynamicParameterConstraints>)],
    ) {
        let mut state = self.state();
        let cache = state.cache(&group.partition);
        let aliases: Vec<String> = names
            .iter()
            .flat_map(|n| cache.aliases_of(group, type_url, n))
            .collect();
        cache.remove_variants(group, type_url, variants);
        let type_key = TypeKey::of(type_url);
        let answers: Vec<Want> = names
            .iter()
            .chain(&aliases)
            .map(|name| Want::named(group.clone(), &type_key, name.as_str()))
            .filter(|want| state.holds(want))
            .collect();
        state.answering(&group.partition).extend(answers);
        self.widen(&mut state, group, type_url, names);
    }

    /// The upstream says `name` of `type_url` does not exist for `group`: answered once
    /// committed.
    pub(crate) fn does_not_exist(&self, group: &GroupKey, type_url: &str, name: &str) {
        let mut state = self.state();
        state
            .cache(&group.partition)
            .remove(group, type_url, &[name.to_owned()]);
        state
            .answering(&group.partition)
            .push(Want::named(group.clone(), type_url, name));
        self.widen(&mut state, group, type_url, &[name.to_owned()]);
    }

    /// The partitions other than the shared one whose cache may have changed, or that have
    /// answers to announce, since asked last.
    pub(crate) fn take_touched(&self) -> BTreeSet<Partition> {
        let mut state = self.state();
        let mut touched = std::mem::take(&mut state.touched);
        touched.extend(
            state
                .answering
                .keys()
                .filter(|p| **p != Partition::All)
                .cloned(),
        );
        touched
    }

    /// `partition`'s answers are in the change about to be committed to its store: resolved in
    /// that commit's own swap (see [`Table::stage_in`]).
    pub(crate) fn stage_answers(&self, partition: &Partition) {
        let state = self.state();
        if let Some(wants) = state.answering.get(partition) {
            self.stage_in(&state, wants);
        }
    }

    /// `partition`'s answers are committed (or refused, or changed nothing): announced.
    pub(crate) fn announce_answers(&self, partition: &Partition) {
        let mut state = self.state();
        if let Some(wants) = state.answering.remove(partition) {
            self.announce_in(&mut state, wants);
        }
    }

    /// The shared partition's answers go with the change handed to the feed: resolved in its
    /// commit's swap, announced by [`Table::announce_committed`].
    pub(crate) fn stage_shared(&self) {
        let mut state = self.state();
        let wants = state.answering.remove(&Partition::All).unwrap_or_default();
        self.stage_in(&state, &wants);
        state.committing.extend(wants);
    }

    /// The feed committed (or refused) the shared partition's change: its answers announced.
    pub(crate) fn announce_committed(&self) {
        let mut state = self.state();
        let wants = std::mem::take(&mut state.committing);
        self.announce_in(&mut state, wants);
    }

    /// The change of `partition`'s cache since its last, if any, with the variants the cache
    /// could not give the store; a partition whose cache holds nothing any more is let go.
    pub(crate) fn take_change(&self, partition: &Partition) -> Option<(ChangeSet, Vec<String>)> {
        let mut state = self.state();
        let cache = state.caches.get_mut(partition)?;
        let before = cache.variants();
        let taken = cache.take_change();
        let after = cache.variants();
        let emptied = cache.take_emptied();
        if cache.is_empty() && *partition != Partition::All {
            state.caches.remove(partition);
        }
        state.variants = state.variants + after - before;
        if *partition == Partition::All {
            // The keys of a name no group holds are forgotten (known again from its next
            // variant): what the table keeps per name goes with the name.
            for (type_url, name) in emptied {
                let held = state
                    .caches
                    .get(partition)
                    .is_some_and(|c| c.holds_name(&type_url, &name));
                if !held {
                    let type_url = TypeKey::of(&type_url);
                    if let Some(names) = state.keys.get_mut(&type_url) {
                        let forgot = names.remove(&name).is_some();
                        if names.is_empty() {
                            state.keys.remove(&type_url);
                        }
                        if forgot {
                            state.keys_epoch += 1;
                        }
                    }
                }
            }
        }
        taken
    }

    /// Whether `partition`'s cache holds anything.
    pub(crate) fn holds_any(&self, partition: &Partition) -> bool {
        self.state().caches.contains_key(partition)
    }

    /// The variants held in all the caches after the last changes taken.
    pub(crate) fn variants(&self) -> usize {
        self.state().variants
    }
}
