//! One-shot answers: a `Fetch*` call or a REST poll is one `DiscoveryRequest` answered by a fresh
//! per-type SotW session, as the first request of a per-type stream would be. The rules of the
//! answer live here, beside the session's; the transports (`transport::fetch`,
//! `transport::rest`) only decode, encode, ask observers and hold polls:
//!
//! - the answer is the whole state for the request, whatever version the client says it has
//!   ([`Pending::new`]);
//! - a response the session splits in parts is answered as one, at the last part's version
//!   ([`concatenate`]);
//! - when the session owes nothing (no name asked for exists), the answer is empty, at the
//!   version of the type as the client sees it ([`empty`]);
//! - REST: the version of an answer is a digest of its resources' names and versions
//!   ([`rest_version`]); a poll at the current version is held ([`rest_holds`]); an unchanged
//!   version is answered "not modified" ([`rest_modified`]); an answer carries no nonce
//!   ([`Answer::into_rest`]).

use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::session::{Handled, Session, SessionError};
use super::sotw::{SotwMachine, SotwRequest, SotwResources, SotwResponse};
use super::{Nonce, Text};
use crate::params::ParamSet;
use crate::store::{Encoding, Resource, Snapshot, View, Watcher};

/// A one-shot request the session took, not answered yet: the transport's observers may still
/// refuse it.
pub(crate) struct Pending {
    session: Session<SotwMachine>,
    handled: Handled,
}

impl Pending {
    /// Hands `request` to `session` (fresh, of one type), given the store's state `snapshot`.
    /// The answer is the whole state for the request, whatever version the client has (a stream
    /// would send nothing to a client that has the current version).
    pub(crate) fn new(
        mut session: Session<SotwMachine>,
        request: &SotwRequest,
        snapshot: &Snapshot,
    ) -> Result<Pending, SessionError> {
        let handled = if request.version_info.is_empty() {
            session.handle_request(request, snapshot)
        } else {
            let mut fresh = request.clone();
            fresh.version_info = Text::default();
            session.handle_request(&fresh, snapshot)
        }?;
        Ok(Pending { session, handled })
    }

    /// The session (its node, for observers and logs).
    pub(crate) fn session(&self) -> &Session<SotwMachine> {
        &self.session
    }

    /// What the session made of the request.
    pub(crate) fn handled(&self) -> &Handled {
        &self.handled
    }

    /// Until when the answer waits for names the request asks for that `snapshot` has pending
    /// and does not have (or for the whole type, asked by the wildcard): the latest time those
    /// are given up at; `None` when it waits for nothing. A one-shot answer is not told that a
    /// name does not exist before the source knows (see `store::pending`).
    pub(crate) fn waits_until(&self, snapshot: &Snapshot) -> Option<Instant> {
        let type_url = &self.handled.type_url;
        let pending = snapshot.pending(type_url)?;
        let wildcard = self.handled.change.wildcard == Some(true);
        let names = self
            .handled
            .change
            .added
            .iter()
            .map(|n| &**n)
            .chain(wildcard.then_some(crate::store::WHOLE_TYPE));
        let mut until: Option<Instant> = None;
        for name in names {
            for params in self.session.param_sets() {
                let Some(at) = pending.until(name, params) else {
                    continue;
                };
                let held = name != crate::store::WHOLE_TYPE
                    && snapshot
                        .get(type_url)
                        .is_some_and(|t| t.view(params).get(name).is_some());
                if !held {
                    until = until.max(Some(at));
                }
            }
        }
        until
    }

    /// Tells `watcher` what the request subscribes to (the watcher contract, as a stream's):
    /// what an answer that waits for pending names watches.
    pub(crate) fn watch(&self, watcher: &mut Watcher) {
        self.session
            .register(watcher, &self.handled.type_url, &self.handled.change);
    }

    /// The answer, given the store's state `snapshot`: every part the session owes, as one
    /// response; or an empty one at the type's version when it owes nothing.
    pub(crate) fn answer(mut self, snapshot: &Snapshot) -> Answer {
        let now = Instant::now();
        let mut response: Option<SotwResponse> = None;
        while let Some((_, part)) = self.session.poll_response(snapshot, now) {
            response = Some(match response {
                Some(whole) => concatenate(whole, part),
                None => part,
            });
        }
        let type_url = self.handled.type_url.clone();
        let response = response.unwrap_or_else(|| {
            let params = self
                .session
                .node()
                .map(|n| n.params_for(&type_url).clone())
                .unwrap_or_default();
            empty(type_url, &params, snapshot)
        });
        Answer {
            response,
            session: self.session,
            handled: self.handled,
        }
    }
}

/// A one-shot answer, and the session that made it (what a held poll watches).
pub(crate) struct Answer {
    pub(crate) response: SotwResponse,
    session: Session<SotwMachine>,
    handled: Handled,
}

impl Answer {
    /// The node id for logs.
    pub(crate) fn node_id(&self) -> &str {
        self.session.node_id()
    }

    /// Tells `watcher` what the request subscribes to (the watcher contract, as a stream's):
    /// what a poll held until its answer changes watches.
    pub(crate) fn watch(&self, watcher: &mut Watcher) {
        self.session
            .register(watcher, &self.handled.type_url, &self.handled.change);
    }

    /// The answer as REST sends it: at its REST version, with no nonce (a poll is not ACKed).
    pub(crate) fn into_rest(self, version: String) -> SotwResponse {
        let mut response = self.response;
        response.version_info = version.into();
        response.nonce = Nonce::default();
        response
    }
}

/// A response with no resources, at the version of what a client with `params` sees of the type.
pub(crate) fn empty(type_url: Arc<str>, params: &ParamSet, snapshot: &Snapshot) -> SotwResponse {
    let version_info = match snapshot.get(&type_url) {
        Some(t) => t.view(params).version().clone(),
        None => View::empty(type_url.clone()).version().clone(),
    };
    SotwResponse {
        type_url,
        version_info,
        nonce: Nonce::default(),
        resources: SotwResources::Some(Default::default()),
        encoding: Encoding::default(),
        updated: Default::default(),
        oversized: None,
        control_plane: true,
    }
}

/// One response holding the resources of `first`, then those of `next`, at `next`'s version.
pub(crate) fn concatenate(mut first: SotwResponse, next: SotwResponse) -> SotwResponse {
    let mut resources = resource_list(first.resources);
    resources.extend(resource_list(next.resources));
    first.resources = SotwResources::Some(resources.into());
    first.updated = first
        .updated
        .iter()
        .chain(next.updated.iter())
        .cloned()
        .collect();
    first.version_info = next.version_info;
    first.nonce = next.nonce;
    first
}

fn resource_list(resources: SotwResources) -> Vec<Arc<Resource>> {
    match resources {
        SotwResources::All(view) => view.iter().cloned().collect(),
        SotwResources::Some(list) => list.to_vec(),
    }
}

/// The version of a REST answer: a digest of the type and of the name and version of every
/// resource in it (the same set, the same version; never empty). A change to a resource the
/// client did not ask for never makes its unchanged set look new.
pub(crate) fn rest_version(response: &SotwResponse) -> String {
    let mut ids: Vec<(&str, &str)> = match &response.resources {
        SotwResources::All(view) => view.iter().map(|r| (&**r.name(), &**r.version())).collect(),
        SotwResources::Some(list) => list.iter().map(|r| (&**r.name(), &**r.version())).collect(),
    };
    ids.sort_unstable();
    let digest =
        foldhash::fast::FixedState::default().hash_one((&*response.type_url, ids.as_slice()));
    format!("{digest:016x}")
}

/// Whether a REST poll that says it has `asked` is held until its answer (now at `current`)
/// changes: when it already has the current version, and polls are held at all (`hold` is not
/// zero). (How many are held at once is the transport's bound.)
pub(crate) fn rest_holds(asked: &str, current: &str, hold: Duration) -> bool {
    !rest_modified(asked, current) && !hold.is_zero()
}

/// Whether a REST poll that says it has `asked` is answered with resources: when the answer's
/// version differs; an unchanged version is answered "not modified" (HTTP 304).
pub(crate) fn rest_modified(asked: &str, current: &str) -> bool {
    asked != current
}

#[cfg(test)]
mod tests;
