//! Responses taken in: SotW and delta, each resource decoded and checked, the type's ACK or NACK
//! queued, and what changed told as events.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryResponse, DiscoveryResponse, DynamicParameterConstraints,
};
use prost::Message;

use super::canonical_owned;
use super::lookup::VariantKey;
use super::state::collection_of;
use super::wire::{decode_sotw, decode_wrapper, Received};
use super::{Client, Event, Held, HeldKey, Update, Wildcard, WildcardAnswer, WildcardWait};
use crate::types;

impl Client {
    /// Takes in a SotW response.
    pub fn handle_sotw(&mut self, now: Instant, response: DiscoveryResponse) {
        let DiscoveryResponse {
            version_info,
            resources,
            type_url,
            nonce,
            ..
        } = response;
        let Some(state) = self.types.get_mut(&type_url) else {
            return;
        };
        if !state.interested() {
            // Nothing of the type is asked for any more, so nothing is taken; but the nonce is
            // the stream's latest of the type, which its next request must carry (a server
            // ignores a request with an older one). No ACK: a SotW request naming nothing would
            // be read as the legacy wildcard.
            state.nonce = nonce;
            return;
        }
        let mut received = Vec::with_capacity(resources.len());
        let mut problem = None;
        for any in resources {
            match decode_sotw(&type_url, &version_info, any) {
                Ok(r) => received.push(r),
                Err(e) => {
                    problem = Some(e);
                    break;
                }
            }
        }
        let full_state = types::is_full_state(&type_url);
        let outcome = match problem {
            Some(reason) => Err(reason),
            None => self.apply(
                now,
                (&type_url, &version_info),
                received,
                Vec::new(),
                full_state,
            ),
        };
        self.answer(&type_url, &version_info, &nonce, outcome);
    }

    /// Takes in a delta response.
    pub fn handle_delta(&mut self, now: Instant, response: DeltaDiscoveryResponse) {
        let DeltaDiscoveryResponse {
            system_version_info,
            resources,
            type_url,
            removed_resources,
            removed_resource_names,
            nonce,
            ..
        } = response;
        if !self.types.contains_key(&type_url) {
            return;
        }
        let mut received = Vec::with_capacity(resources.len());
        let mut problem = None;
        for wire in resources {
            match decode_wrapper(&type_url, "", wire) {
                Ok(r) => received.push(r),
                Err(e) => {
                    problem = Some(e);
                    break;
                }
            }
        }
        let mut removed: Vec<(String, Option<Vec<u8>>)> = removed_resources
            .into_iter()
            .map(|n| (canonical_owned(n), None))
            .collect();
        removed.extend(removed_resource_names.into_iter().map(|n| {
            let constraints = n
                .dynamic_parameter_constraints
                .as_ref()
                .map(Message::encode_to_vec)
                .unwrap_or_default();
            (canonical_owned(n.name), Some(constraints))
        }));
        let outcome = match problem {
            Some(reason) => Err(reason),
            None => self.apply(
                now,
                (&type_url, &system_version_info),
                received,
                removed,
                false,
            ),
        };
        self.answer(&type_url, &system_version_info, &nonce, outcome);
    }

    /// ACKs or NACKs a response.
    fn answer(&mut self, type_url: &str, version: &str, nonce: &str, outcome: Result<(), String>) {
        let Some(state) = self.types.get_mut(type_url) else {
            return;
        };
        state.nonce = nonce.to_owned();
        state.owed = true;
        state.responses += 1;
        match outcome {
            Ok(()) => state.version = version.to_owned(),
            Err(reason) => {
                state.nack = Some(reason.clone());
                self.events.push_back(Event::Rejected {
                    type_url: type_url.to_owned(),
                    version: version.to_owned(),
                    reason,
                });
            }
        }
    }

    /// Applies a response's resources and removals, or says why it is rejected (then nothing of
    /// it is applied).
    fn apply(
        &mut self,
        now: Instant,
        (type_url, version): (&str, &str),
        received: Vec<Received>,
        removed: Vec<(String, Option<Vec<u8>>)>,
        full_state: bool,
    ) -> Result<(), String> {
        let limits = self.config.limits;
        let state = self.types.get(type_url).expect("checked by the caller");
        // What the response holds: updates (each with what the bounds below find of its key)
        // and heartbeats, by key.
        let mut updates: Vec<(Held, Found)> = Vec::with_capacity(received.len());
        let mut heartbeats: Vec<(HeldKey, String, Option<Duration>)> = Vec::new();
        let mut absent: Vec<String> = Vec::new();
        for r in received {
            match r {
                Received::Resource(resource) => {
                    if !state.wants(&resource) {
                        continue;
                    }
                    updates.push((Held::new(resource, now), Found::default()));
                }
                Received::Heartbeat { key, version, ttl } => heartbeats.push((key, version, ttl)),
                Received::Absent { names } => absent.extend(names),
            }
        }
        // In key order (a server's response is mostly in name order already, which the sort
        // takes in one pass), a key twice side by side.
        updates.sort_by(|(a, _), (b, _)| a.cmp(b));
        if let Some(pair) = updates.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(format!(
                "resource {:?} is in the response twice",
                pair[0].0.resource.name
            ));
        }
        if let Some(validator) = self.validator.as_mut() {
            for (held, _) in &updates {
                let resource = &held.resource;
                validator(resource).map_err(|e| format!("resource {:?}: {e}", resource.name))?;
            }
        }
        // The bounds, before anything changes: the names held after it (a full state replaces
        // them), counted from what the response holds; the bytes it replaces, from the same
        // look-up of each key, whose finding (the key held; its name held) is kept for the
        // apply below.
        let mut names = if full_state { 0 } else { state.held_names };
        let mut replaced = 0;
        let mut last: Option<&str> = None;
        for (update, found) in &mut updates {
            let name = update.resource.name.as_str();
            let (held, name_held) = state.find(update);
            if let Some(h) = held {
                replaced += h.bytes;
            }
            let new_name = full_state || !name_held;
            if last != Some(name) && new_name {
                names += 1;
            }
            last = Some(name);
            *found = Found::of(held, name_held, update);
        }
        if names > limits.max_names {
            return Err(format!(
                "the response would have the client hold {names} names of {type_url}, more than \
                 its limit of {}",
                limits.max_names
            ));
        }
        let dropped: usize = if full_state {
            state.held_bytes - replaced
        } else {
            0
        };
        let new_bytes: usize = updates.iter().map(|(h, _)| h.bytes).sum();
        let total = self.bytes() - replaced - dropped + new_bytes;
        if total > limits.max_bytes {
            return Err(format!(
                "the response would have the client hold {total} bytes of resources, more than \
                 its limit of {}",
                limits.max_bytes
            ));
        }

        // Accepted: apply.
        let state = self.types.get_mut(type_url).expect("checked by the caller");
        // Whether it answers the type's wildcard (see `WildcardAnswer`): looked at only while
        // the wildcard waits for its answer on this stream.
        let wildcard_answer = match state.wildcard_wait {
            Some(_) if state.wildcard() == Wildcard::Off => None,
            Some(WildcardWait { first: true, .. }) => Some(WildcardAnswer::FirstRequest),
            Some(_)
                if updates
                    .iter()
                    .any(|(h, _)| !state.asks_by_name(&h.resource)) =>
            {
                Some(WildcardAnswer::Unasked)
            }
            _ => None,
        };
        let mut update = Update {
            type_url: type_url.to_owned(),
            version: version.to_owned(),
            added: Vec::new(),
            changed: Vec::new(),
        };
        let mut gone: Vec<String> = Vec::new();
        let mut gone_variants: Vec<(String, Option<DynamicParameterConstraints>)> = Vec::new();
        let mut missing: Vec<String> = Vec::new();
        let mut missing_set: BTreeSet<String> = BTreeSet::new();
        if full_state {
            // A heartbeat keeps its resource, as the resource itself would.
            let beating: BTreeSet<(&str, &[u8])> = heartbeats
                .iter()
                .map(|((n, c), _, _)| (n.as_str(), c.as_slice()))
                .collect();
            let mut leaving: Vec<HeldKey> = state
                .held
                .iter()
                .filter(|&h| {
                    updates.binary_search_by(|(u, _)| u.cmp(h)).is_err()
                        && !beating.contains(&h.parts())
                })
                .map(Held::key)
                .collect();
            // Told in key order (the set is hashed).
            leaving.sort_unstable();
            for key in leaving {
                if let Some(h) = state.take_held(&key) {
                    gone_variants.push((key.0.clone(), h.resource.constraints));
                    gone.push(key.0);
                }
            }
            let gone_set: BTreeSet<&str> = gone.iter().map(String::as_str).collect();
            // A glob collection with a member in the response is present too.
            let collections: BTreeSet<String> = updates
                .iter()
                .map(|(h, _)| h.resource.name.as_str())
                .chain(beating.iter().map(|(n, _)| *n))
                .filter_map(collection_of)
                .collect();
            let present: BTreeSet<&str> = updates
                .iter()
                .map(|(h, _)| h.resource.name.as_str())
                .chain(beating.iter().map(|(n, _)| *n))
                .chain(collections.iter().map(String::as_str))
                .collect();
            // A name never received is concluded missing only when this response surely
            // follows the request that asked for it (spec, "Knowing When a Requested Resource
            // Does Not Exist": a response may answer an earlier request): the stream's first
            // request, or one sent before an earlier response of this stream. Otherwise its
            // timer decides.
            let before = state.responses;
            for (key, sub) in state.subs.iter_mut() {
                if present.contains(key.name.as_str()) || sub.missing {
                    continue;
                }
                let was_held = gone_set.contains(key.name.as_str());
                let follows = match sub.asked_at {
                    Some(None) => true,
                    Some(Some(at)) => before > at,
                    None => false,
                };
                if was_held || follows {
                    sub.missing = true;
                    if let Some(d) = sub.deadline.take() {
                        super::lookup::stop_timer(&mut state.deadlines, d, key);
                    }
                    if !was_held && missing_set.insert(key.name.clone()) {
                        missing.push(key.name.clone());
                    }
                }
            }
        }
        for (name, constraints) in removed {
            let keys: Vec<HeldKey> = match constraints {
                Some(c) => vec![(name.clone(), c)],
                None => state.variants_of(&name).map(Held::key).collect(),
            };
            let mut was_held = false;
            for key in keys {
                if let Some(h) = state.take_held(&key) {
                    gone_variants.push((name.clone(), h.resource.constraints));
                    was_held = true;
                }
            }
            if was_held {
                gone.push(name.clone());
            }
            let (subscribed, _) = state.settle(&name, true);
            if subscribed && !was_held && !state.holds(&name) && missing_set.insert(name.clone()) {
                missing.push(name);
            }
        }
        // Names asked by alias that no resource has: each subscribed one does not exist (once
        // until it is received, as a timer's).
        for name in absent {
            let (_, newly) = state.settle(&name, true);
            if newly && missing_set.insert(name.clone()) {
                missing.push(name);
            }
        }
        for (key, hb_version, ttl) in heartbeats {
            if state
                .held_at(&key)
                .is_some_and(|h| h.resource.version == hb_version)
            {
                state.set_expiry(&key, ttl.and_then(|t| now.checked_add(t)));
            }
        }
        // What the bounds found of each key holds unless something was dropped since (a full
        // state's leaving, a removal): then each is looked up again.
        let unchanged = gone_variants.is_empty();
        let new = updates.iter().filter(|(_, found)| !found.held).count();
        update.added.reserve(new);
        let mut fresh: Vec<Held> = Vec::with_capacity(new);
        let mut fresh_names = 0;
        let keep = self.config.keep_bodies;
        for (mut held, found) in updates {
            // Its subscriptions, by its name or an alias.
            for name in held.resource.names() {
                state.settle(name, false);
            }
            // The glob collection it is a member of, if subscribed.
            if let Some(c) = collection_of(&held.resource.name) {
                state.settle(&c, false);
            }
            let Found {
                held: key_held,
                name_held,
                same_body,
                digest,
            } = if unchanged {
                found
            } else {
                let (h, name_held) = state.find(&held);
                Found::of(h, name_held, &held)
            };
            if key_held {
                // A SotW resource's version is its response's: only a new body is a change,
                // and only a change is copied for the event (a full state resends every
                // resource, most of them unchanged).
                let changed = if same_body {
                    // Unchanged: held as it was (its body, or its digest, is the same).
                    if !keep {
                        held.shed_body(digest);
                    }
                    None
                } else {
                    Some(held.for_event(keep, digest))
                };
                let old = state.put_held(held, name_held);
                debug_assert!(old.is_some(), "found held, and nothing dropped since");
                update.changed.extend(changed);
                continue;
            }
            // The one copy of it: what is held, and what the event hands out (with the body,
            // which it keeps only when asked to).
            let resource = held.for_event(keep, None);
            // New: its name is new unless held, or new with the one put just before (a name's
            // variants are side by side in key order, and all new when its name is).
            if !name_held
                && fresh
                    .last()
                    .is_none_or(|h| h.resource.name != held.resource.name)
            {
                fresh_names += 1;
            }
            fresh.push(held);
            update.added.push(resource);
        }
        state.hold_new(fresh, fresh_names);
        if !update.added.is_empty() || !update.changed.is_empty() || !state.answered {
            self.events.push_back(Event::Update(update));
        }
        state.answered = true;
        gone.dedup();
        if !gone.is_empty() {
            self.events.push_back(Event::Removed {
                type_url: type_url.to_owned(),
                version: version.to_owned(),
                names: gone,
                variants: gone_variants,
                expired: false,
            });
        }
        for name in missing {
            self.events.push_back(Event::DoesNotExist {
                type_url: type_url.to_owned(),
                name,
            });
        }
        if let Some(by) = wildcard_answer {
            state.wildcard_wait = None;
            state.wildcard_answered = true;
            self.events.push_back(Event::WildcardAnswered {
                type_url: type_url.to_owned(),
                by,
            });
        }
        Ok(())
    }
}

/// What the bounds found of a resource's key, kept for the apply (while nothing held is
/// dropped in between, it still holds, and the key is not looked up again).
#[derive(Debug, Clone, Copy, Default)]
struct Found {
    /// The key is held.
    held: bool,
    /// A variant of the key's name is held (under its own name).
    name_held: bool,
    /// The key is held with the same body.
    same_body: bool,
    /// The new body's digest, when comparing it with the held one's (`Config::keep_bodies`
    /// off) worked it out: not hashed again when the body is shed.
    digest: Option<u64>,
}

impl Found {
    /// What [`TypeState::find`](super::state::TypeState::find) found of `taken`'s key:
    /// `held`, and `name_held`.
    fn of(held: Option<&Held>, name_held: bool, taken: &Held) -> Found {
        let (same_body, digest) = held.map_or((false, None), |h| h.same_body(taken));
        Found {
            held: held.is_some(),
            name_held,
            same_body,
            digest,
        }
    }
}
