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
mod ttl;
mod watch;

use std::path::Path;

use xdsd_source::{parse_file, Descriptors, ParsedResource, SourceError};

pub fn descriptors() -> Descriptors {
    Descriptors::envoy().expect("embedded descriptors decode")
}

pub fn parse(path: &str, text: &str) -> Vec<ParsedResource> {
    match parse_file(&descriptors(), Path::new(path), text) {
        Ok(resources) => resources,
        Err(e) => panic!("{path} should parse, got: {e}"),
    }
}

pub fn parse_err(path: &str, text: &str) -> SourceError {
    match parse_file(&descriptors(), Path::new(path), text) {
        Ok(resources) => panic!("{path} should fail, got {resources:#?}"),
        Err(e) => e,
    }
}

/// Asserts `text` contains every needle, showing the whole text when not.
#[track_caller]
pub fn assert_mentions(text: &str, needles: &[&str]) {
    for needle in needles {
        assert!(text.contains(needle), "expected {needle:?} in:\n{text}");
    }
}
