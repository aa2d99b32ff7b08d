//! The client against real servers: an in-process xdsd on 127.0.0.1 (`xdsd.rs`) and
//! rust-control-plane 0.1.2, the bench peer (`peer.rs`).

mod peer;
mod tls;
mod xdsd;
