//! What the crate's tests share: the embedded descriptors, parsing a file that must parse (or
//! must not), and an assertion that shows the whole text.

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
