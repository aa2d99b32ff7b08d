//! Resource sources (see crate docs).
