//! Whether a server reports itself ready: a [`Readiness`] handle, which a [`crate::Feed`] sets
//! from its source's health and the server's gRPC health service reads.

use std::sync::Arc;

use tokio::sync::watch;

/// Whether a server reports itself ready (gRPC health `SERVING`, the admin API's `/readyz`):
/// a handle on one flag, cloned by whoever sets it ([`crate::Feed::ready`], a program that starts
/// serving before its first load) and by the server that reads it. Ready from the start.
#[derive(Clone)]
pub struct Readiness {
    ready: Arc<watch::Sender<bool>>,
}

impl Default for Readiness {
    fn default() -> Readiness {
        Readiness {
            ready: Arc::new(watch::Sender::new(true)),
        }
    }
}

impl Readiness {
    /// Sets whether the server reports itself ready.
    pub fn set(&self, ready: bool) {
        self.ready.send_replace(ready);
    }

    /// Whether it is ready.
    pub fn get(&self) -> bool {
        *self.ready.borrow()
    }

    /// A receiver told of each change (the gRPC health watch).
    pub(crate) fn subscribe(&self) -> watch::Receiver<bool> {
        self.ready.subscribe()
    }
}
