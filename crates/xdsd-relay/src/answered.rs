//! Which upstream subscriptions the upstream has answered (and whose answer is in the store),
//! shared by the source, which records them, and the observer, which makes a downstream
//! stream's first request for a subscription not answered yet wait for the answer: a client is
//! answered from what the upstream says, not told first that nothing exists.
//!
//! The wait is bounded (a client of an upstream that does not answer is served what the relay
//! has once it passes), and it happens only where it is safe to block a task: on a
//! multi-threaded tokio runtime, through `block_in_place`, which hands the worker's other tasks
//! to another thread meanwhile.

use std::collections::HashSet;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::demand::Want;

/// The subscriptions answered. See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct Answered {
    wants: Mutex<HashSet<Want>>,
    changed: Condvar,
}

impl Answered {
    /// `wants` are answered and their answer is in the store.
    pub(crate) fn announce(&self, wants: impl IntoIterator<Item = Want>) {
        let mut set = self.wants.lock().unwrap_or_else(|p| p.into_inner());
        set.extend(wants);
        self.changed.notify_all();
    }

    /// `want` is no longer subscribed.
    pub(crate) fn forget(&self, want: &Want) {
        let mut set = self.wants.lock().unwrap_or_else(|p| p.into_inner());
        set.remove(want);
    }

    /// Whether `want` is answered.
    pub(crate) fn is_answered(&self, want: &Want) -> bool {
        let set = self.wants.lock().unwrap_or_else(|p| p.into_inner());
        set.contains(want)
    }

    /// Waits until `want` is answered, at most `limit`; whether it is. A want the wait gave up
    /// on counts as answered from then on: the next clients are served what the relay has
    /// without waiting again (an upstream that is down, or that sends nothing of a type).
    pub(crate) fn wait(&self, want: &Want, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        let mut set = self.wants.lock().unwrap_or_else(|p| p.into_inner());
        while !set.contains(want) {
            let now = Instant::now();
            if now >= until {
                set.insert(want.clone());
                return false;
            }
            set = match self.changed.wait_timeout(set, until - now) {
                Ok((set, _)) => set,
                Err(p) => p.into_inner().0,
            };
        }
        true
    }

    /// [`Answered::wait`] from a task, where blocking is safe (a multi-threaded runtime);
    /// elsewhere it does not wait.
    pub(crate) fn wait_in_task(&self, want: &Want, limit: Duration) -> bool {
        use tokio::runtime::{Handle, RuntimeFlavor};
        match Handle::try_current() {
            Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| self.wait(want, limit))
            }
            _ => self.is_answered(want),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::GroupKey;
    use std::sync::Arc;

    fn want() -> Want {
        Want::wildcard(GroupKey::Default, "type.googleapis.com/x.Y")
    }

    #[test]
    fn a_first_request_waits_for_the_upstreams_answer() {
        let answered = Arc::new(Answered::default());
        let other = answered.clone();
        let waiter = std::thread::spawn(move || other.wait(&want(), Duration::from_secs(30)));
        answered.announce([want()]);
        assert_eq!(waiter.join().ok(), Some(true));
    }

    #[test]
    fn the_wait_for_an_upstream_that_does_not_answer_is_bounded_and_not_repeated() {
        let answered = Answered::default();
        assert!(!answered.wait(&want(), Duration::from_millis(10)));
        assert!(
            answered.wait(&want(), Duration::from_secs(30)),
            "the next client does not wait"
        );
    }

    #[test]
    fn an_unsubscribed_want_is_waited_for_again() {
        let answered = Answered::default();
        answered.announce([want()]);
        answered.forget(&want());
        assert!(!answered.is_answered(&want()));
    }
}
