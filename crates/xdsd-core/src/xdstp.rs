//! `xdstp://` names (xRFC TP1) as values: the `xdsd-xdstp` crate, which the client
//! (`xdsd-client`) shares without depending on the server. [`XdstpName`] is parsed once,
//! checked and canonical; a glob collection's parts and members are read from canonical text.

pub use xdsd_xdstp::*;
