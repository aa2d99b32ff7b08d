//! `xdstp://` names (xRFC TP1) as values: the `xdsd-xdstp` crate, which the client
//! (`xdsd-client`) shares without depending on the server. [`XdstpName`] is parsed once,
//! checked and canonical; a glob collection's parts and members are read from canonical text.

pub use xdsd_xdstp::*;

#[cfg(test)]
thread_local! {
    /// How many times this thread worked a name's glob collection out of the name (tests: what a
    /// stream's look at a changed member costs).
    pub(crate) static WORKED_OUT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// [`xdsd_xdstp::collection_of`] (counted in tests: `WORKED_OUT`).
pub fn collection_of(name: &str) -> Option<String> {
    #[cfg(test)]
    WORKED_OUT.with(|w| w.set(w.get() + 1));
    xdsd_xdstp::collection_of(name)
}

/// [`xdsd_xdstp::with_collection_of`] (counted in tests: `WORKED_OUT`).
pub fn with_collection_of<R>(name: &str, f: impl FnOnce(&str) -> R) -> Option<R> {
    #[cfg(test)]
    WORKED_OUT.with(|w| w.set(w.get() + 1));
    xdsd_xdstp::with_collection_of(name, f)
}
