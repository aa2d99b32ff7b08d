//! The watcher contract: what a session's [`Watcher`] must be told, and when, for the store's
//! changes to reach the session exactly when they matter. Every driver of a session (the stream
//! driver, a held REST poll, the fuzz and model tests' harness) goes through these methods, so
//! the order below is kept in one place:
//!
//! 1. After a request: the parameter sets first (a new one, the node's or a locator's, resolves
//!    the names watched next, and changes of the variants it matches must wake the client), then
//!    the wildcard, the dense (whole-type) watch, the names unwatched and watched. All before
//!    the next snapshot is read, so no change slips between the two.
//! 2. After a request or a timeout (either may let a waiting response go): the changes of the
//!    muted types are taken into the session.
//! 3. When the watcher wakes: every change is taken into the session.
//! 4. After the owed responses went out: the types whose next response waits for the client's
//!    answer are muted (their changes are recorded without waking anyone until 2.).

use std::sync::Arc;
use std::time::Instant;

use super::session::{Handled, Machine, Session, SessionError};
use super::SubscriptionChange;
use crate::store::{Snapshot, Watcher};

impl<M: Machine> Session<M> {
    /// Takes in a request (`snapshot` is the store's current state) and tells `watcher` what it
    /// now watches (rule 1), then takes the changes the watcher held back for muted types (rule
    /// 2). The only way in for a request: a driver cannot skip the contract.
    pub fn handle_request_watched(
        &mut self,
        request: &M::Request,
        snapshot: &Snapshot,
        watcher: &mut Watcher,
    ) -> Result<Handled, SessionError> {
        let handled = self.handle_request(request, snapshot)?;
        self.register(watcher, &handled.type_url, &handled.change);
        self.take_muted_changes(watcher);
        Ok(handled)
    }

    /// Tells `watcher` what a handled request changed in what the session watches of
    /// `type_url` (rule 1): the session's parameter sets first, then the wildcard, the dense
    /// watch and the names.
    pub fn register(
        &self,
        watcher: &mut Watcher,
        type_url: &Arc<str>,
        change: &SubscriptionChange,
    ) {
        let params = self.param_sets();
        // The list grows, or at its limit a set is replaced: its length and the replacements
        // tell whether it changed.
        let reused = self.param_sets_reused();
        if watcher.params_len() != Some(params.len()) || watcher.params_reused() != reused {
            watcher.set_params(params);
            watcher.set_params_reused(reused);
        }
        if let Some(on) = change.wildcard {
            watcher.set_wildcard(type_url, on);
        }
        if let Some(on) = change.dense {
            watcher.set_dense(type_url, on);
        }
        watcher.unwatch(type_url, &change.removed);
        watcher.watch(type_url, &change.added);
    }

    /// Takes in the time (a resend or TTL heartbeat may be due, see [`Session::poll_timeout`]),
    /// then the changes the watcher held back for muted types: a wait that ended may let their
    /// responses go (rule 2).
    pub fn handle_timeout_watched(&mut self, now: Instant, watcher: &Watcher) {
        self.handle_timeout(now);
        self.take_muted_changes(watcher);
    }

    /// Takes every change `watcher` recorded (rule 3): when it woke.
    pub fn take_changes_from(&mut self, watcher: &Watcher) {
        self.handle_changes(watcher.take_changes());
    }

    /// Mutes, in `watcher`, the types whose next response waits for the client's answer
    /// (rule 4): after the responses owed went out.
    pub fn mute_waiting(&self, watcher: &mut Watcher) {
        watcher.mute(self.waiting_types());
    }

    /// Takes the changes of the muted types, if any are muted and any were recorded (rule 2).
    fn take_muted_changes(&mut self, watcher: &Watcher) {
        if watcher.is_muting() && watcher.has_changes() {
            self.handle_changes(watcher.take_changes());
        }
    }
}

#[cfg(test)]
mod tests;
