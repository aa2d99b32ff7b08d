//! Asking: what a downstream request's wants need before the server answers it — each routed
//! through its narrowed group, and declared pending in its store unless the upstream answered
//! it — looked up once per request under the table's lock; a fleet's same request asked again
//! ([`LastAsked`]) is routed as it was.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Weak};
use std::time::Instant;

use tracing::warn;
use xdsd_core::store::PendingName;
use xdsd_core::ClientNode;

use super::{pending_name, scope, GroupKey, Memo, Partition, Routed, State, Table, Want};

/// A request's wants as [`Table::ask_all`] found them: their narrowings, every one answered
/// or declared, at a count of key changes and of rows removed. The streams of a fleet ask the
/// same names in the same requests (ten streams, 40,000 names each): asked again while neither
/// count moved, the same wants are routed the same way, and none can need declaring (an answer
/// is lost only with its row, a declaration only to its answer or its expiry, which answers
/// it), so the second stream's request costs a comparison of the lists, not the look-ups.
/// Kept for the latest [`ASKED_KEPT`] lists (a fleet's streams ask a large type's parts in
/// turn: each stream its parts one after the other) and the latest other request.
#[derive(Debug)]
pub(super) struct LastAsked {
    wants: AskedWants,
    epoch: u64,
    removals: u64,
    to: Arc<[Option<GroupKey>]>,
}

/// The wants of a [`LastAsked`].
#[derive(Debug)]
enum AskedWants {
    /// A list streams share ([`Table::ask_list`]), found again by its address: weakly (its
    /// address is not another list's while the reference lives), so that a list no stream
    /// holds is not kept for this.
    List(Weak<[Want]>),
    /// Another request's, copied.
    Copy(Arc<[Want]>),
}

/// Requests of fewer wants than this are looked up whole, never kept as [`LastAsked`].
pub(super) const LAST_ASKED_FROM: usize = 64;

/// How many requests [`LastAsked`] keeps.
const ASKED_KEPT: usize = 64;

/// The [`LastAsked`] of `wants` (`list`'s, if given) at `epoch` and `removals`, if kept.
fn asked_again<'a>(
    kept: &'a VecDeque<LastAsked>,
    wants: &[Want],
    list: Option<&Arc<[Want]>>,
    (epoch, removals): (u64, u64),
) -> Option<&'a LastAsked> {
    let now = |l: &&LastAsked| l.epoch == epoch && l.removals == removals;
    let by_address = list.and_then(|list| {
        kept.iter().filter(now).find(|l| match &l.wants {
            AskedWants::List(w) => std::ptr::eq(w.as_ptr() as *const Want, list.as_ptr()),
            AskedWants::Copy(_) => false,
        })
    });
    by_address.or_else(|| {
        kept.iter().filter(now).find(|l| match &l.wants {
            AskedWants::Copy(c) => {
                c.len() == wants.len()
                    && c.iter().zip(wants).all(|(a, b)| {
                        a.name == b.name && a.type_url == b.type_url && a.group == b.group
                    })
            }
            AskedWants::List(_) => false,
        })
    })
}

impl Table {
    /// A downstream client (of `node`, when it sent one) asks for `want` at `now`: unless it is
    /// answered, it is pending in the store for the clients of its group (see [`scope`]) until
    /// the upstream answers or `wait` passes.
    #[cfg(test)]
    pub(crate) fn ask(&self, want: &Want, node: Option<&ClientNode>, now: Instant) {
        self.ask_all(std::slice::from_ref(want), node, now);
    }

    /// [`Table::ask`] for each of `wants` (those of one request), declared in one swap of the
    /// store's state: it costs what it declares. Each is asked as it will be held: through its
    /// narrowed group, if any; those narrowings, for [`Table::acquire_all`] (which the source
    /// does next) to hold them by without looking them up again.
    pub(crate) fn ask_all(
        &self,
        wants: &[Want],
        node: Option<&ClientNode>,
        now: Instant,
    ) -> Routed {
        self.ask_wants(wants, None, node, now)
    }

    /// [`Table::ask_all`] of a list streams share ([`crate::observer::Lists`]): the same list
    /// asked again is known by its address, not compared want by want.
    pub(crate) fn ask_list(
        &self,
        list: &Arc<[Want]>,
        node: Option<&ClientNode>,
        now: Instant,
    ) -> Routed {
        self.ask_wants(list, Some(list), node, now)
    }

    /// [`Table::ask_all`] of `wants`, which are `list`'s if given.
    fn ask_wants(
        &self,
        wants: &[Want],
        list: Option<&Arc<[Want]>>,
        node: Option<&ClientNode>,
        now: Instant,
    ) -> Routed {
        let mut state = self.state();
        let at = (state.keys_epoch, state.removals);
        if let Some(last) = asked_again(&state.last_asked, wants, list, at) {
            return Routed {
                epoch: last.epoch,
                to: last.to.clone(),
            };
        }
        let mut memo: Memo = None;
        let to: Arc<[Option<GroupKey>]> = wants.iter().map(|w| state.route(w, &mut memo)).collect();
        let routed: Vec<std::borrow::Cow<'_, Want>> = wants
            .iter()
            .zip(to.iter())
            .map(|(w, to)| match to {
                Some(to) => {
                    std::borrow::Cow::Owned(Want::named(to.clone(), &w.type_url, w.name.clone()))
                }
                None => std::borrow::Cow::Borrowed(w),
            })
            .collect();
        let asked: Vec<&Want> = routed.iter().map(|w| w.as_ref()).collect();
        let all = self.declare_in(&mut state, &asked, node, now);
        if all && wants.len() >= LAST_ASKED_FROM {
            let wants = match list {
                Some(list) => AskedWants::List(Arc::downgrade(list)),
                None => AskedWants::Copy(wants.into()),
            };
            let at = (state.keys_epoch, state.removals);
            let kept = &mut state.last_asked;
            // Those of another time are never found again; one copy at most.
            kept.retain(|l| {
                l.epoch == at.0
                    && l.removals == at.1
                    && !matches!(
                        (&l.wants, &wants),
                        (AskedWants::Copy(_), AskedWants::Copy(_))
                    )
                    && !matches!(&l.wants, AskedWants::List(w) if w.strong_count() == 0)
            });
            if kept.len() == ASKED_KEPT {
                kept.pop_front();
            }
            kept.push_back(LastAsked {
                wants,
                epoch: at.0,
                removals: at.1,
                to: to.clone(),
            });
        }
        Routed {
            epoch: state.keys_epoch,
            to,
        }
    }

    /// Declares pending each of `wants` not answered (nor declared already), in one swap of
    /// its store's state: whether every one is (answered, declared, or its store held).
    pub(super) fn declare_in(
        &self,
        state: &mut State,
        wants: &[&Want],
        node: Option<&ClientNode>,
        now: Instant,
    ) -> bool {
        let mut all = true;
        // By the store each want's clients read (one, but for a locator's partition: the same).
        let mut by: BTreeMap<&Partition, Vec<(&Want, PendingName)>> = BTreeMap::new();
        let mut memo = None;
        for &want in wants {
            let answered = state.answered(want, &mut memo);
            let declared = || state.wants.get(want).is_some_and(|e| e.pending.is_some());
            if !answered && !declared() {
                by.entry(&want.group.partition)
                    .or_default()
                    .push((want, pending_name(want, scope(want, node))));
            }
        }
        // Room for the rows and indexes of what is declared, made at once (a first request of
        // 100,000 names grew each map by doubling, every doubling fresh pages).
        let new: usize = by.values().map(Vec::len).sum();
        state.wants.reserve(new);
        state.by_pending.reserve(new);
        for (partition, asked) in by {
            let Some(store) = self.pending_of(partition, true) else {
                all = false;
                continue;
            };
            let results =
                store.declare_all(asked.iter().map(|(_, name)| name.clone()), now + self.wait);
            for ((want, name), result) in asked.into_iter().zip(results) {
                match result {
                    Ok(_) => {
                        state.declare(want, name);
                        state.full_logged = false;
                    }
                    Err(e) => {
                        all = false;
                        if !std::mem::replace(&mut state.full_logged, true) {
                            warn!(stream = %want.group, type_url = %want.type_url, name = %want.name, "not held for the upstream's answer: {e}");
                        }
                    }
                }
            }
        }
        self.metrics.set_pending(state.declared.len());
        all
    }
}
