//! One test binary for the crate (each binary links envoy-types, which is slow on small machines).

mod canonical;
mod constraints;
mod descriptors;
mod directory;
mod errors;
mod fuzz;
mod incremental;
mod parse;
mod positions;
mod support;
mod ttl;
mod watch;
mod xdstp;
