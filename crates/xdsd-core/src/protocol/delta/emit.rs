//! A delta response put together from what it owes, and what the client holds after it: the
//! resources sent (recorded as held, or as the end of the base), the removals by name or by
//! variant, the encoded run of a view shared by every stream that sends it.

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use prost::Message as _;

use super::gather::{Keys, Owed};
use super::holdings::{Base, Held, PendingBase};
use super::{DeltaMachine, DeltaResponse, RemovedVariant};
use crate::hash::HashSet;
use crate::params::Constraints;
use crate::protocol::{Key, NonceGen, ParamSetId, Views};
use crate::store::{field_len, resource_name, Encoding, Resource};

/// One response as [`DeltaMachine::emit`] puts it together.
#[derive(Debug, Default)]
struct Part {
    resources: Vec<Arc<Resource>>,
    /// Keys removed (by name, or by the variant they held).
    removed: BTreeSet<Key>,
    heartbeats: Vec<Arc<Resource>>,
    unresolved: Vec<Arc<str>>,
    /// Variants re-sent keys held before, which the client may stop holding.
    moved: Vec<RemovedVariant>,
    /// Where in `resources` the last resource that extends the base is (see `extends_base`).
    base_last: Option<usize>,
    /// How many resources were sent as the view's own.
    of_base: usize,
}

impl DeltaMachine {
    /// Whether sending `r` for `key` continues the view a response sends whole (see
    /// `pending_base`): recorded by moving the end of [`Holdings::base`] (see `emit`), not as an
    /// entry. Every resource of that response was read from that view (it has no aliases, so
    /// `r` is the view's resource of `key`'s name), and they come in its order, so what the base
    /// covers was sent.
    fn extends_base(&self, key_pid: ParamSetId, r: &Arc<Resource>) -> bool {
        let Some(PendingBase { pid, view, .. }) = &self.pending_base else {
            return false;
        };
        if key_pid != *pid {
            return false;
        }
        debug_assert!(view.get(r.name()).is_some_and(|v| Arc::ptr_eq(v, r)));
        self.has
            .base
            .as_ref()
            .is_none_or(|base| Arc::ptr_eq(&base.view, view))
    }

    /// The bytes `owed` takes in a response, about (a removal's exact size is known only once
    /// the part is put together).
    pub(super) fn owed_len(&self, owed: &Owed) -> usize {
        let encoding = self.core.encoding;
        let removal = |key: &Key| match (encoding.named, self.has.get(key)) {
            (true, Some(held)) => {
                field_len(resource_name(&key.0, held.constraints().map(|c| &**c)).encoded_len())
            }
            (true, None) => field_len(resource_name(&key.0, None).encoded_len()),
            (false, _) => field_len(key.0.len()),
        };
        match owed {
            Owed::Send(r, keys) => {
                // A key moving to another variant also removes the one it held, for clients
                // that hold variants apart (see `emit`; the others hold one per name). Not looked
                // up for the others: 10,000 lookups per response.
                let moves = if encoding.named {
                    keys.iter(r)
                        .filter(|k| {
                            self.has
                                .get(k)
                                .is_some_and(|h| h.constraints() != r.constraints())
                        })
                        .map(|k| removal(&k))
                        .sum::<usize>()
                } else {
                    0
                };
                field_len(r.delta_entry(encoding).len()) + moves
            }
            Owed::Remove(key) => removal(key),
            Owed::Beat(r) => field_len(r.heartbeat_entry(encoding).len()),
            Owed::Unresolved(key) => field_len(unresolved_entry(&key.0, "", encoding).len()) + 64,
        }
    }

    /// Puts one response together from what it owes, and records what the client holds after it.
    pub(super) fn emit(
        &mut self,
        owed: Vec<Owed>,
        views: &Views,
        nonces: &mut NonceGen,
        respond: bool,
        oversized: Option<usize>,
    ) -> Option<DeltaResponse> {
        let part = self.record_sends(owed);
        let whole = self.next_run(part.of_base, part.resources.len());
        let base_last = part
            .base_last
            .and_then(|i| part.resources.get(i))
            .map(|r| r.name().clone());
        if let Some(last) = base_last {
            self.extend_base(last);
        }
        let (removed, removed_variants) = self.removals(&part.removed, part.moved);
        if part.resources.is_empty()
            && part.unresolved.is_empty()
            && part.heartbeats.is_empty()
            && removed.is_empty()
            && removed_variants.is_empty()
            && !respond
        {
            return None;
        }
        let system_version_info = self.version(views);
        let nonce = nonces.next_nonce();
        let control_plane = self.core.sent(nonce, &system_version_info);
        Some(DeltaResponse {
            type_url: self.core.type_url.clone(),
            system_version_info,
            nonce,
            resources: part.resources.into(),
            whole,
            shared: None,
            removed,
            removed_variants,
            heartbeats: part.heartbeats,
            unresolved: part.unresolved,
            encoding: self.core.encoding,
            oversized,
            control_plane,
        })
    }

    /// Sorts out what one response owes, and records the resources it sends as held: as the
    /// end of the base when they extend it (see `extends_base`), else key by key, noting the
    /// variants a re-sent key held before (TP2 clients hold variants apart).
    fn record_sends(&mut self, owed: Vec<Owed>) -> Part {
        let sends = owed.iter().filter(|o| matches!(o, Owed::Send(..))).count();
        let mut part = Part {
            resources: Vec::with_capacity(sends),
            ..Part::default()
        };
        // What a re-sent key held before matters only to clients that hold variants apart (TP2,
        // `resource_name`): the others hold one per name, replaced in place, so it is not looked
        // up for them (a lookup by name in the map and in the base's view, per resource sent).
        let named = self.core.encoding.named;
        for item in owed {
            match item {
                Owed::Send(r, keys) => {
                    if let Keys::Own(pid) = keys {
                        if self.extends_base(pid, &r) {
                            // Held through the base (a wildcard's first answer): a member of a
                            // glob not named counts apart too, from when it is first held.
                            self.count_sent_own(&r, pid);
                            part.base_last = Some(part.resources.len());
                            part.resources.push(r);
                            part.of_base += 1;
                            continue;
                        }
                    }
                    // (Each key once: see `Keys::append`.)
                    for key in keys.into_keys(&r) {
                        self.count_sent_member(&r, &key);
                        if self.extends_base(key.1, &r) {
                            debug_assert!(key.0 == *r.name());
                            part.base_last = Some(part.resources.len());
                            continue;
                        }
                        if !named {
                            self.has.put(key, Held::of(&r));
                            continue;
                        }
                        if let Some(before) = self.has.insert(key, Held::of(&r)) {
                            if before.constraints() != r.constraints() {
                                part.moved
                                    .push((before.name().clone(), before.constraints().cloned()));
                            }
                        }
                    }
                    part.resources.push(r);
                }
                Owed::Remove(key) => {
                    part.removed.insert(key);
                }
                Owed::Beat(r) => part.heartbeats.push(r),
                Owed::Unresolved(key) => part.unresolved.push(key.0),
            }
        }
        part
    }

    /// The encoded run of the view a part sends, when its `sent` resources are all the view's
    /// own, in its order (`of_base` of them, see `extends_base`), right after what the parts
    /// before sent, which were the view from its first name: the next run of the view, whose
    /// entries are encoded once for every stream that sends them.
    fn next_run(&mut self, of_base: usize, sent: usize) -> Option<Bytes> {
        let pending = self.pending_base.as_mut()?;
        let mut whole = None;
        pending.run = match pending.run {
            Some(start) if of_base > 0 && of_base == sent => {
                whole = pending
                    .view
                    .delta_run(self.core.encoding, start, start + of_base);
                whole.as_ref().map(|_| start + of_base)
            }
            _ => None,
        };
        whole
    }

    /// Moves the end of the base the pending response records to `last`, the last name sent of
    /// it: the names the base now reaches past and that were not sent are not held.
    fn extend_base(&mut self, last: Arc<str>) {
        let Some(pending) = &mut self.pending_base else {
            return;
        };
        while pending.gaps.front().is_some_and(|gap| **gap < *last) {
            if let Some(gap) = pending.gaps.pop_front() {
                self.has.over.insert((gap, pending.pid), None);
            }
        }
        match &mut self.has.base {
            Some(base) => base.last = last,
            None => {
                self.has.base = Some(Base {
                    pid: pending.pid,
                    view: pending.view.clone(),
                    last,
                })
            }
        }
    }

    /// The names (or, for clients that hold variants by `resource_name`, the variants) the
    /// client stops holding: what a re-sent key held before (`moved`), what a `removed` key
    /// held, unless another key still holds it afterwards. Removed keys the client was never
    /// sent are removed by their own name: it may hold them from an earlier stream.
    fn removals(
        &mut self,
        removed: &BTreeSet<Key>,
        moved: Vec<RemovedVariant>,
    ) -> (Vec<Arc<str>>, Vec<RemovedVariant>) {
        let mut dropped: Vec<RemovedVariant> = Vec::new();
        let mut unknown: Vec<Arc<str>> = Vec::new();
        for key in removed {
            match self.has.remove(key) {
                Some(before) => {
                    if super::glob_only(&self.names, key) {
                        self.glob_members.sub(key);
                    }
                    dropped.push((before.name().clone(), before.constraints().cloned()))
                }
                None => unknown.push(key.0.clone()),
            }
        }
        if self.core.encoding.named {
            (Vec::new(), self.removed_variants(moved, dropped, unknown))
        } else {
            (self.removed_names(dropped, unknown), Vec::new())
        }
    }

    /// The variants to drop, of those `moved` and `dropped`, and the `unknown` names, for a
    /// client that holds variants by `resource_name`: those no key holds any more.
    fn removed_variants(
        &self,
        moved: Vec<RemovedVariant>,
        dropped: Vec<RemovedVariant>,
        unknown: Vec<Arc<str>>,
    ) -> Vec<RemovedVariant> {
        if moved.is_empty() && dropped.is_empty() && unknown.is_empty() {
            // Nothing to drop (nearly every response): what the client holds is not read (a
            // set of every variant held, made per response, was a relay's upstream stream's
            // cost of each one-resource change: 7 ms at 40,000 names).
            return Vec::new();
        }
        let held: HashSet<(&Arc<str>, Option<&Arc<Constraints>>)> = self
            .has
            .iter()
            .map(|(_, h)| (h.name(), h.constraints()))
            .collect();
        let held_name = |n: &Arc<str>| held.iter().any(|(h, _)| *h == n);
        let mut variants: Vec<RemovedVariant> = moved
            .into_iter()
            .chain(dropped)
            .filter(|(n, c)| !held.contains(&(n, c.as_ref())))
            .collect();
        for name in unknown {
            if !variants.iter().any(|(n, _)| *n == name) && !held_name(&name) {
                variants.push((name, None));
            }
        }
        variants.sort_by(|a, b| a.0.cmp(&b.0));
        variants.dedup();
        variants
    }

    /// The names to drop, of those `dropped` and `unknown`, for a client that holds one
    /// variant per name: those no key holds any more.
    fn removed_names(&self, dropped: Vec<RemovedVariant>, unknown: Vec<Arc<str>>) -> Vec<Arc<str>> {
        // Whether another key still holds a name: one subscribed by that name, or (VHDS only:
        // other types have no aliases) by an alias of it.
        let aliased: Option<HashSet<&Arc<str>>> = (*self.core.type_url
            == *crate::types::VIRTUAL_HOST)
            .then(|| self.has.iter().map(|(_, h)| h.name()).collect());
        let held_name = |n: &Arc<str>| match &aliased {
            Some(names) => names.contains(n),
            None => self
                .keys_of(n)
                .any(|k| self.has.get(&k).is_some_and(|h| h.name() == n)),
        };
        let mut names: Vec<Arc<str>> = dropped
            .into_iter()
            .map(|(n, _)| n)
            .chain(unknown)
            .filter(|n| !held_name(n))
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// The version of the view this client reads (for debugging only, in delta).
    pub(super) fn version(&self, views: &Views) -> Arc<str> {
        self.version_view(views).version().clone()
    }

    /// The view whose version a response carries (the wildcard's, else the first parameter
    /// set's).
    pub(super) fn version_view<'v>(&self, views: &'v Views) -> &'v Arc<crate::store::View> {
        let pid = self
            .core
            .wildcard
            .pid()
            .or(self.core.pids.first().copied())
            .unwrap_or(0);
        views.view(pid)
    }
}

/// The `resources` entry that tells a VHDS client that `alias` names no virtual host: a
/// resource named by the alias, with the alias in `aliases`, a version and no body (what Envoy's
/// on-demand VHDS waits for to answer the request that asked for it with a 404).
pub fn unresolved_entry(alias: &str, version: &str, encoding: Encoding) -> Vec<u8> {
    let (name, resource_name) = if encoding.named {
        (String::new(), Some(resource_name(alias, None)))
    } else {
        (alias.to_owned(), None)
    };
    envoy_types::pb::envoy::service::discovery::v3::Resource {
        name,
        resource_name,
        aliases: vec![alias.to_owned()],
        version: version.to_owned(),
        ..Default::default()
    }
    .encode_to_vec()
}
