//! A SotW response: what is owed (full state, the keys forced and changed, a scan of every key,
//! a new wildcard's view), what of it is new for the client, its version, and its parts when it
//! is over the size limit.

use std::collections::VecDeque;
use std::sync::Arc;

use super::{
    shared, LastSent, ResourceList, SentMark, SotwMachine, SotwResources, SotwResponse, Subscribed,
};
use crate::protocol::machine::Machine;
use crate::protocol::{part_len, Key, NonceGen, ParamSetId, Views, PART_OVERHEAD};
use crate::store::{field_len, Resource};

impl SotwMachine {
    /// The response of the store's changes alone (nothing else owed, not a full-state type,
    /// after the first response): the resources the client was not sent as they are now.
    pub(super) fn push_changes(
        &mut self,
        views: &Views,
        nonces: &mut NonceGen,
    ) -> Option<SotwResponse> {
        let resources = if self.check_all {
            self.scan_owed(views)
        } else {
            self.owed_keys(views)
        };
        self.respond = false;
        self.clear_dirty();
        let resources = shared(resources?);
        // Each resource is new or changed for the client: `updated` is all of them.
        let updated = resources.clone();
        let resources = SotwResources::Some(resources);
        self.finish(views, nonces, resources, updated, false)
    }

    /// The resources of the dirty and forced names the client was not sent as the store holds
    /// them now (what is new or changed for it), in name order, each once.
    pub(super) fn updated(&self, views: &Views) -> Vec<Arc<Resource>> {
        let mut updated: Vec<Arc<Resource>> = Vec::new();
        let mut names: Vec<&Arc<str>> = self
            .core
            .dirty
            .iter()
            .chain(self.core.forced.iter().map(|(n, _)| n))
            .collect();
        names.sort();
        names.dedup();
        for name in names {
            let keys = self.keys_of(name).collect::<Vec<_>>();
            let wildcard = self.core.wildcard.pid().map(|w| (name.clone(), w));
            for key in keys.iter().chain(wildcard.iter()) {
                if let Some(r) = views.get(&key.0, key.1) {
                    if !self.was_sent(&key.0, key.1, r)
                        && !updated.iter().any(|u| Arc::ptr_eq(u, r))
                    {
                        updated.push(r.clone());
                    }
                }
            }
        }
        updated
    }

    /// The response of `resources`, owed; or its first part, when it is too large.
    pub(super) fn finish(
        &mut self,
        views: &Views,
        nonces: &mut NonceGen,
        resources: SotwResources,
        updated: ResourceList,
        first: bool,
    ) -> Option<SotwResponse> {
        let version_info = self.version(views);
        if first
            && self
                .client_version
                .take()
                .is_some_and(|v| *v == *version_info)
        {
            // The client has exactly this already: nothing is resent (what it was sent is
            // recorded, so later changes go out as they would have).
            return None;
        }
        let size = self.resources_len(&resources);
        let budget = self.budget(&version_info);
        let mut oversized = None;
        if size > budget {
            if !self.full_state {
                let split = Box::new(Split {
                    rest: match resources {
                        SotwResources::All(view) => view.iter().cloned().collect(),
                        SotwResources::Some(list) => list.iter().cloned().collect(),
                    },
                    version: version_info,
                    parts: 0,
                });
                return Some(self.next_part(split, nonces, updated));
            }
            // Full-state types: a response holds them all, whatever its size.
            oversized = self.core.warn_once(Some(size));
        }
        Some(self.response(version_info, nonces, resources, updated, oversized))
    }

    fn response(
        &mut self,
        version_info: Arc<str>,
        nonces: &mut NonceGen,
        resources: SotwResources,
        updated: ResourceList,
        oversized: Option<usize>,
    ) -> SotwResponse {
        let (resources, updated) = self.spell(resources, updated);
        let nonce = nonces.next_nonce();
        let control_plane = self.core.sent(nonce, &version_info);
        SotwResponse {
            type_url: self.core.type_url.clone(),
            version_info,
            nonce,
            resources,
            encoding: self.core.encoding,
            updated,
            oversized,
            control_plane,
        }
    }

    /// The resources of a response (and its `updated`) with those the client spelled
    /// non-canonically under each of its spellings. Nothing to do (no lookup) for every other
    /// client.
    fn spell(
        &self,
        resources: SotwResources,
        updated: ResourceList,
    ) -> (SotwResources, ResourceList) {
        if self.spelled.is_empty() {
            return (resources, updated);
        }
        let respell = |list: &mut dyn Iterator<Item = &Arc<Resource>>| -> Option<ResourceList> {
            let mut out = Vec::new();
            let mut renamed = false;
            for r in list {
                match self.spelled.get(r.name()) {
                    Some(spellings) => {
                        renamed = true;
                        for s in spellings.iter() {
                            if s == r.name() {
                                out.push(r.clone());
                            } else {
                                out.push(Arc::new(r.renamed(s.clone())));
                            }
                        }
                    }
                    None => out.push(r.clone()),
                }
            }
            renamed.then(|| shared(out))
        };
        let respelled = respell(&mut resources.iter());
        let resources = match respelled {
            Some(list) => SotwResources::Some(list),
            None => resources,
        };
        let respelled = respell(&mut updated.iter());
        let updated = respelled.unwrap_or(updated);
        (resources, updated)
    }

    /// The bytes a response may give its resources.
    fn budget(&self, version: &str) -> usize {
        self.core
            .max_response_bytes
            .saturating_sub(self.core.type_url.len() + version.len() + PART_OVERHEAD)
    }

    fn resources_len(&self, resources: &SotwResources) -> usize {
        match resources {
            SotwResources::All(view) => view.sotw_body(self.core.encoding).len(),
            SotwResources::Some(list) => list
                .iter()
                .map(|r| field_len(r.sotw_entry(self.core.encoding).len()))
                .sum(),
        }
    }

    /// The next part of a split response; what is left of it is kept for the next call.
    pub(super) fn next_part(
        &mut self,
        mut split: Box<Split>,
        nonces: &mut NonceGen,
        updated: ResourceList,
    ) -> SotwResponse {
        let (count, oversized) = part_len(
            split
                .rest
                .iter()
                .map(|r| field_len(r.sotw_entry(self.core.encoding).len())),
            self.budget(&split.version),
        );
        let part: Vec<Arc<Resource>> = split.rest.drain(..count).collect();
        split.parts += 1;
        let version = if split.rest.is_empty() {
            // The last part: the split (and a large response's buffer) is not kept.
            split.version.clone()
        } else {
            let version = Arc::from(format!("{}-part-{}", split.version, split.parts));
            self.split = Some(split);
            version
        };
        let oversized = self.core.warn_once(oversized);
        self.response(
            version,
            nonces,
            SotwResources::Some(shared(part)),
            updated,
            oversized,
        )
    }

    /// Gives the rest of a split response back to what is owed, to be computed again with what
    /// changed.
    pub(super) fn fold_rest(&mut self) {
        if let Some(split) = self.split.take() {
            for r in split.rest {
                self.resend(r.name());
            }
        }
    }

    /// The version of what this client is sent: the version of the view it reads, or of the
    /// whole type when it reads several.
    fn version(&self, views: &Views) -> Arc<str> {
        let mut pids = self
            .core
            .pids
            .iter()
            .copied()
            .chain(self.core.wildcard.pid());
        let first = pids.next().unwrap_or(0);
        if pids.all(|p| views.view(p).version() == views.view(first).version()) {
            views.view(first).version().clone()
        } else {
            let mut all: Vec<&str> = self
                .core
                .pids
                .iter()
                .copied()
                .chain(self.core.wildcard.pid())
                .map(|p| &**views.view(p).version())
                .collect();
            all.sort_unstable();
            all.dedup();
            all.join(".").into()
        }
    }

    /// LDS/CDS: all subscribed resources, sent when that set differs from what the client has,
    /// or when owed a response anyway.
    pub(super) fn full_state_resources(&mut self, views: &Views) -> Option<SotwResources> {
        let changed = match self.core.wildcard.pid() {
            Some(w) if self.sent_view_version.as_ref() != Some(views.view(w).version()) => true,
            _ => self
                .core
                .dirty
                .iter()
                .flat_map(|n| self.keys_of(n))
                .any(|k| {
                    let now = views.get(&k.0, k.1).map(|r| SentMark::of(r));
                    let sent = match self.names.get(&k.0, k.1) {
                        Some(sent) => *sent,
                        // A member of a glob collection.
                        None => self.members.get(&k),
                    };
                    now != sent
                }),
        };
        if !(self.respond || !self.core.forced.is_empty() || changed) {
            return None;
        }
        self.record_all_sent(views);
        self.sent_view_version = self
            .core
            .wildcard
            .pid()
            .map(|w| views.view(w).version().clone());
        if let Some(w) = self.core.wildcard.pid() {
            if self.core.pids.iter().all(|p| *p == w) {
                return Some(SotwResources::All(views.view(w).clone()));
            }
        }
        let mut out: Vec<Arc<Resource>> = self
            .core
            .wildcard
            .pid()
            .into_iter()
            .flat_map(|w| views.view(w).iter().cloned())
            .collect();
        for (name, pid) in self.names.keys() {
            if let Some(r) = views.get(name, pid) {
                out.push(r.clone());
            }
        }
        if !self.globs.is_empty() {
            // Every member of each glob collection (a full-state response holds them all).
            self.members.clear();
            self.named_members = 0;
            let globs = self.globs.clone();
            self.owe_members(views, globs.iter(), &mut out);
        }
        Some(SotwResources::Some(shared(dedup(out))))
    }

    /// Other types: only the subscribed resources that changed or were newly subscribed.
    /// The resources owed for the keys forced (each, changed or not) and for the keys of the
    /// dirty names (those the client was not sent as they are now), in name order; records them
    /// as sent. `None` when none is owed.
    fn owed_keys(&mut self, views: &Views) -> Option<Vec<Arc<Resource>>> {
        let mut out: Vec<Arc<Resource>> =
            Vec::with_capacity(self.core.forced.len() + self.core.dirty.len());
        if !self.globs.is_empty() {
            self.owe_glob_changes(views, &mut out);
        }
        let (names, pids, wildcard) = (&mut self.names, &self.core.pids, self.core.wildcard.pid());
        for (name, pid) in &self.core.forced {
            // Still subscribed: a request may have dropped it since it was forced.
            if names.contains(name, *pid) || wildcard == Some(*pid) {
                owe(names, views, name, *pid, true, &mut out);
            }
        }
        for name in &self.core.dirty {
            // The name's keys: subscribed with one of the parameter sets, then the wildcard's
            // unless it is one of those; a key forced is done.
            for i in 0..=pids.len() {
                let pid = match (pids.get(i), wildcard) {
                    (Some(&pid), _) if names.contains(name, pid) => pid,
                    (None, Some(w)) if !(pids.contains(&w) && names.contains(name, w)) => w,
                    _ => continue,
                };
                if !self.core.forced.is_empty() && self.core.forced.contains(&(name.clone(), pid)) {
                    continue;
                }
                owe(names, views, name, pid, false, &mut out);
            }
        }
        (!out.is_empty()).then(|| dedup(out))
    }

    /// The members owed of the glob collections subscribed: every member of a glob forced (newly
    /// subscribed), and the changed members the client was not sent as they are now.
    fn owe_glob_changes(&mut self, views: &Views, out: &mut Vec<Arc<Resource>>) {
        let forced: Vec<Key> = self
            .globs
            .iter()
            .filter(|k| self.core.forced.contains(*k))
            .cloned()
            .collect();
        self.owe_members(views, forced.iter(), out);
        // Each changed member's keys: its glob as its resource says it (worked out once, when
        // the store built it), or, gone or found by an alias, worked out from its name.
        let mut changed: Vec<(Key, Option<Arc<Resource>>)> = Vec::new();
        for name in self.core.dirty.iter() {
            if !crate::xdstp::is_xdstp(name) {
                continue;
            }
            for &pid in &self.core.pids {
                let found = views.get(name, pid);
                let member = match found {
                    Some(r) if super::is_own(r, name) => r
                        .collection()
                        .is_some_and(|glob| super::in_glob_of(&self.globs, glob, name, pid)),
                    _ => self.in_glob(name, pid),
                };
                if member {
                    changed.push(((name.clone(), pid), found.cloned()));
                }
            }
        }
        for (key, found) in changed {
            self.owe_member(key, found, out);
        }
    }

    /// What [`Self::owed_keys`] gives when every key may have changed (`check_all`, no key
    /// forced): each key's resource the client was not sent as it is now, in name order,
    /// recorded as sent. One lookup per key, in the view's order when the keys are most of it.
    fn scan_owed(&mut self, views: &Views) -> Option<Vec<Arc<Resource>>> {
        let mut out: Vec<Arc<Resource>> = Vec::with_capacity(self.names.len());
        if let [pid] = self.core.pids[..] {
            let view = views.view(pid);
            if crate::protocol::in_view_order(view, self.names.len()) {
                let found = self
                    .names
                    .join_view(pid, view.iter(), |sent, r| record_owed(sent, r, &mut out));
                if found < self.names.len() {
                    // Subscribed names the store does not have (any more): nothing sent of them.
                    for ((name, _), sent) in self.names.iter_mut() {
                        if sent.is_some() && view.get(name).is_none() {
                            *sent = None;
                        }
                    }
                }
                return (!out.is_empty()).then_some(out);
            }
        }
        for ((name, pid), sent) in self.names.iter_mut() {
            match views.get(name, pid) {
                Some(r) => record_owed(sent, r, &mut out),
                None => *sent = None,
            }
        }
        (!out.is_empty()).then(|| dedup(out))
    }

    pub(super) fn changed_resources(&mut self, views: &Views) -> Option<SotwResources> {
        if let (true, Some(w)) = (self.respond, self.core.wildcard.pid()) {
            // A new wildcard gets everything there is, even nothing.
            self.record_all_sent(views);
            if self.core.pids.iter().all(|p| *p == w) {
                return Some(SotwResources::All(views.view(w).clone()));
            }
            let mut out: Vec<Arc<Resource>> = views.view(w).iter().cloned().collect();
            out.extend(
                self.names
                    .keys()
                    .filter_map(|(n, p)| views.get(n, p).cloned()),
            );
            return Some(SotwResources::Some(shared(dedup(out))));
        }
        if self.respond {
            // Every subscribed key is owed (a first response): no need to gather candidates.
            return self.all_subscribed(views);
        }
        self.owed_keys(views)
            .map(|list| SotwResources::Some(shared(list)))
    }

    /// Every explicitly subscribed resource (no wildcard), recorded as sent. A subscription to
    /// most of a view with one parameter set and no aliases (a client that names every cluster's
    /// endpoints) is read in the view's order: each resource is looked up once, and comes out
    /// sorted.
    fn all_subscribed(&mut self, views: &Views) -> Option<SotwResources> {
        if !self.globs.is_empty() {
            // With glob collections: every key's resource, and every member of each glob.
            self.record_all_sent(views);
            let mut out: Vec<Arc<Resource>> = self
                .names
                .keys()
                .filter_map(|(name, pid)| views.get(name, pid).cloned())
                .collect();
            let globs = self.globs.clone();
            self.owe_members(views, globs.iter(), &mut out);
            return (!out.is_empty()).then(|| SotwResources::Some(shared(dedup(out))));
        }
        if let [pid] = self.core.pids[..] {
            let view = views.view(pid);
            if crate::protocol::in_view_order(view, self.names.len()) {
                let mut out: Vec<Arc<Resource>> = Vec::with_capacity(self.names.len());
                self.names.join_view(pid, view.iter(), |sent, r| {
                    *sent = Some(SentMark::of(r));
                    out.push(r.clone());
                });
                if out.len() < self.names.len() {
                    // Subscribed names the store does not have: nothing sent of them.
                    for ((name, _), sent) in self.names.iter_mut() {
                        if view.get(name).is_none() {
                            *sent = None;
                        }
                    }
                }
                return (!out.is_empty()).then(|| SotwResources::Some(shared(out)));
            }
        }
        self.record_all_sent(views);
        let out: Vec<Arc<Resource>> = self
            .names
            .keys()
            .filter_map(|(name, pid)| views.get(name, pid).cloned())
            .collect();
        (!out.is_empty()).then(|| SotwResources::Some(shared(dedup(out))))
    }
}

/// The rest of a SotW response that goes out in parts: its resources in name order, its version,
/// the number of parts sent.
#[derive(Debug)]
pub(super) struct Split {
    pub(super) rest: VecDeque<Arc<Resource>>,
    version: Arc<str>,
    parts: usize,
}

/// Adds the resource of the key (`name`, `pid`) to `out` if it is owed (`always`, or the client
/// was not sent it as it is now), and records it as sent. A key whose resource is gone is
/// forgotten as sent: SotW has no deletion for these types, and the resource goes out again if
/// it comes back with the same content.
fn owe(
    names: &mut Subscribed,
    views: &Views,
    name: &Arc<str>,
    pid: ParamSetId,
    always: bool,
    out: &mut Vec<Arc<Resource>>,
) {
    match (views.get(name, pid), names.get_mut(name, pid)) {
        (Some(r), Some(sent)) if always => {
            *sent = Some(SentMark::of(r));
            out.push(r.clone());
        }
        (Some(r), Some(sent)) => record_owed(sent, r, out),
        // Only the wildcard has it: no record per name.
        (Some(r), None) => out.push(r.clone()),
        (None, Some(sent)) => *sent = None,
        (None, None) => {}
    }
}

/// Adds `r` to `out` if the client was not sent it as it is (`sent`), and records it as sent.
fn record_owed(sent: &mut LastSent, r: &Arc<Resource>, out: &mut Vec<Arc<Resource>>) {
    let mark = Some(SentMark::of(r));
    if *sent != mark {
        *sent = mark;
        out.push(r.clone());
    }
}

/// Resources in name order, each variant once.
fn dedup(mut resources: Vec<Arc<Resource>>) -> Vec<Arc<Resource>> {
    // The address last: one resource listed twice ends up side by side whatever the order of
    // variants with the same name and version. (Unstable: no buffer to allocate.)
    resources.sort_unstable_by(|a, b| {
        (a.name(), a.version(), Arc::as_ptr(a)).cmp(&(b.name(), b.version(), Arc::as_ptr(b)))
    });
    resources.dedup_by(|a, b| Arc::ptr_eq(a, b));
    resources
}
