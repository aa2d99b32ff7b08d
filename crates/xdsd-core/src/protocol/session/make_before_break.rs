//! Make-before-break (spec "Eventual consistency considerations"), on aggregated streams: a
//! response that refers to clusters waits until they and their endpoints were sent, and a
//! removed cluster or endpoint set lingers until what referred to it is ACKed, each at most
//! [`HOLD_TIMEOUT`].

use std::sync::Arc;
use std::time::Instant;

use super::{Machine, Session, HOLD_TIMEOUT};
use crate::protocol::Views;
use crate::store::{Snapshot, TypeSnapshot};
use crate::types;

/// Whether a type of push rank `rank` (`types::push_rank`) is one whose resources point at
/// clusters without waiting for them to be ready (Envoy does not warm routes): listeners, routes,
/// scoped routes, virtual hosts. They are held until the clusters they newly point at, and their
/// endpoints, were sent. The session tells its types by the rank each took once, not by their
/// type URLs' text.
pub(super) fn refers(rank: u8) -> bool {
    (3..=6).contains(&rank)
}

/// Whether a type of push rank `rank` is one whose removals wait until the client ACKed every
/// type that [`refers`] to it: clusters (rank 1) and endpoints (rank 2).
pub(super) fn referenced(rank: u8) -> bool {
    rank == 1 || rank == 2
}

/// Removed resources a client is still served, until what referred to them is ACKed.
pub(super) struct Lingering {
    pub(super) since: Instant,
    names: Vec<Arc<str>>,
    /// The state they were removed from, the store's state, and the two merged.
    old: Arc<TypeSnapshot>,
    base: Arc<TypeSnapshot>,
    merged: Arc<TypeSnapshot>,
}

/// Make-before-break (spec "Eventual consistency considerations"), on aggregated streams.
impl<M: Machine> Session<M> {
    /// Whether this session orders its responses make-before-break: an aggregated stream, with
    /// [`super::SessionOptions::make_before_break`] on.
    pub(super) fn ordered(&self) -> bool {
        self.fixed.is_none() && self.options.make_before_break
    }

    /// The state of a type this client is served: the store's, or for clusters and endpoints
    /// whose removal waits, the store's with the removed ones still in.
    pub(super) fn type_snapshot(
        &self,
        type_url: &Arc<str>,
        snapshot: &Snapshot,
    ) -> Option<Arc<TypeSnapshot>> {
        match self.lingering.get(type_url) {
            Some(l) => Some(l.merged.clone()),
            None => snapshot.get(type_url).cloned(),
        }
    }

    /// Whether every type that refers to clusters was sent and ACKed: removals may go.
    fn referrers_settled(&self) -> bool {
        self.types
            .values()
            .filter(|s| refers(s.rank))
            .all(|s| !s.machine.has_pending() && s.unacked.is_none())
    }

    /// Starts, updates and ends the lingering of removed clusters and endpoints: a removal waits
    /// until the routes (and listeners) that stopped referring to it are ACKed, or
    /// [`HOLD_TIMEOUT`].
    pub(super) fn update_lingering(&mut self, snapshot: &Snapshot, now: Instant) {
        self.lingering_due = false;
        let settled = self.referrers_settled();
        // Clusters, then endpoints.
        let mut found: [Option<Arc<str>>; 2] = [None, None];
        for (type_url, state) in self.types.iter() {
            if referenced(state.rank) {
                found[usize::from(state.rank - 1)] = Some(type_url.clone());
            }
        }
        for type_url in found.into_iter().flatten() {
            // (Nearly always none: no empty set made for nothing.)
            let changed = self.changed.remove(&type_url);
            let Some(new) = snapshot.get(&type_url).cloned() else {
                self.lingering.remove(&type_url);
                continue;
            };
            if let Some(l) = self.lingering.get_mut(&type_url) {
                if settled || now >= l.since + HOLD_TIMEOUT {
                    if let Some(l) = self.lingering.remove(&type_url) {
                        if let Some(state) = self.types.get_mut(&type_url) {
                            state.machine.mark_changed(l.names.iter());
                        }
                    }
                } else if !Arc::ptr_eq(&l.base, &new) {
                    l.names.retain(|n| new.variants(n).is_empty());
                    l.merged = Arc::new(new.with_lingering(&l.old, &l.names));
                    l.base = new.clone();
                }
            } else if !settled {
                if let Some(old) = self.served.get(&type_url) {
                    let names: Vec<Arc<str>> = changed
                        .into_iter()
                        .flatten()
                        .filter(|n| new.variants(n).is_empty() && !old.variants(n).is_empty())
                        .collect();
                    if !names.is_empty() {
                        let merged = Arc::new(new.with_lingering(old, &names));
                        self.lingering.insert(
                            type_url.clone(),
                            Lingering {
                                since: now,
                                names,
                                old: old.clone(),
                                base: new.clone(),
                                merged,
                            },
                        );
                    }
                }
            }
            if !self.lingering.contains_key(&type_url) {
                // Nearly always the state it was at the last response, or the next one.
                match self.served.get_mut(&type_url) {
                    Some(served) if Arc::ptr_eq(served, &new) => {}
                    Some(served) => *served = new,
                    None => self.served.insert(type_url, new),
                }
            }
        }
        if self.changed.is_empty() {
            // Served: an idle stream keeps no table for the next change.
            self.changed.shrink_to_fit();
        }
    }

    /// Whether a response of `type_url` (which refers to clusters) must wait: something it would
    /// send points at a cluster the client was not sent yet, or at an EDS cluster whose endpoints
    /// it was not sent yet. At most [`HOLD_TIMEOUT`].
    pub(super) fn hold(
        &mut self,
        type_url: &Arc<str>,
        views: &Views,
        snapshot: &Snapshot,
        now: Instant,
    ) -> bool {
        let blocked = self.waits_for_clusters(type_url, views, snapshot);
        let Some(state) = self.types.get_mut(type_url) else {
            return false;
        };
        if !blocked {
            state.held_since = None;
            return false;
        }
        let since = *state.held_since.get_or_insert(now);
        now < since + HOLD_TIMEOUT
    }

    fn waits_for_clusters(&self, type_url: &Arc<str>, views: &Views, snapshot: &Snapshot) -> bool {
        let (Some(state), Some((cds_type, cds))) = (
            self.types.get(type_url),
            self.types.get_key_value(types::CLUSTER),
        ) else {
            // Clusters do not come from this stream: nothing to order against.
            return false;
        };
        let unsent = state.machine.unsent(views);
        let targets: Vec<&Arc<str>> = unsent
            .iter()
            .flat_map(|r| r.references())
            .filter(|r| r.type_url == types::CLUSTER)
            .map(|r| &r.name)
            .collect();
        if targets.is_empty() {
            return false;
        }
        let cds_views = Views::new(
            cds_type,
            self.type_snapshot(cds_type, snapshot).as_ref(),
            self.params.iter(),
        );
        let eds_type: Arc<str> = Arc::from(types::CLUSTER_LOAD_ASSIGNMENT);
        let eds = self.types.get(&eds_type);
        let eds_views = Views::new(
            &eds_type,
            self.type_snapshot(&eds_type, snapshot).as_ref(),
            self.params.iter(),
        );
        let eds_pid = eds.map(|s| s.default).unwrap_or(cds.default);
        targets.into_iter().any(|name| {
            let Some(cluster) = cds_views.get(name, cds.default) else {
                return false;
            };
            if !cds.machine.has_sent(name, &cds_views) {
                return true;
            }
            cluster
                .references()
                .iter()
                .filter(|r| r.type_url == types::CLUSTER_LOAD_ASSIGNMENT)
                .any(|r| {
                    eds_views.get(&r.name, eds_pid).is_some()
                        && eds.is_none_or(|e| !e.machine.has_sent(&r.name, &eds_views))
                })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REFERRERS: [&str; 4] = [
        types::ROUTE_CONFIGURATION,
        types::VIRTUAL_HOST,
        types::LISTENER,
        types::SCOPED_ROUTE_CONFIGURATION,
    ];
    const REFERENCED: [&str; 2] = [types::CLUSTER, types::CLUSTER_LOAD_ASSIGNMENT];

    #[test]
    fn the_ranks_tell_the_same_types_as_the_lists() {
        for t in REFERRERS {
            assert!(refers(types::push_rank(t)), "{t}");
            assert!(!referenced(types::push_rank(t)), "{t}");
        }
        for t in REFERENCED {
            assert!(referenced(types::push_rank(t)), "{t}");
            assert!(!refers(types::push_rank(t)), "{t}");
        }
        for t in [
            types::SECRET,
            types::RUNTIME,
            "type.googleapis.com/made.up.Type",
        ] {
            assert!(
                !refers(types::push_rank(t)) && !referenced(types::push_rank(t)),
                "{t}"
            );
        }
    }
}
