//! From a resource directory to the store: the one code path `serve` (at start and at each
//! change), `check` and `render` share, so that they accept and reject exactly the same
//! directories.

use std::fmt;
use std::path::Path;

use xdsd_core::source::{store_hint, store_messages};
use xdsd_core::store::{ResourceInput, Store, StoreError, UpdateSummary};
use xdsd_source::{Descriptors, ParsedResource, SourceError};

/// Why a directory (or a change to it) was not committed.
#[derive(Debug)]
pub enum LoadError {
    /// The files: syntax, `@type`, fields, names, duplicates; every bad file.
    Source(SourceError),
    /// Variants whose `"@constraints"` the store refuses, each naming its resource.
    Constraints(Vec<String>),
    /// The store's commit rules: the variant rules of xRFC TP2, references.
    Store(StoreError),
}

impl LoadError {
    /// Each error on its own, for a list: one per bad file or resource, one per dangling
    /// reference.
    pub fn messages(&self) -> Vec<String> {
        match self {
            LoadError::Source(e) => e.errors().iter().map(|e| e.to_string()).collect(),
            LoadError::Constraints(list) => list.clone(),
            LoadError::Store(e) => store_messages(e),
        }
    }

    /// What to do about it, when the errors alone do not say.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            LoadError::Store(e) => store_hint(e),
            _ => None,
        }
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Source(e) => write!(f, "{e}"),
            LoadError::Constraints(list) => f.write_str(&list.join("; ")),
            LoadError::Store(e) => {
                write!(f, "{e}")?;
                if let Some(hint) = store_hint(e) {
                    write!(f, " ({hint})")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for LoadError {}

/// A committed load.
#[derive(Debug)]
pub struct Loaded {
    /// Resources read from the files (before VHDS route configurations are split).
    pub resources: usize,
    pub summary: UpdateSummary,
}

/// The store's inputs for parsed resources (see [`xdsd_source::resource_inputs`]).
fn inputs(resources: Vec<ParsedResource>) -> Result<Vec<ResourceInput>, LoadError> {
    xdsd_source::resource_inputs(resources)
        .map_err(|r| LoadError::Constraints(r.messages().to_vec()))
}

/// Replaces the store's content with `resources`, or changes nothing.
pub fn commit(store: &Store, resources: Vec<ParsedResource>) -> Result<Loaded, LoadError> {
    let count = resources.len();
    let summary = store
        .replace_all(inputs(resources)?)
        .map_err(LoadError::Store)?;
    Ok(Loaded {
        resources: count,
        summary,
    })
}

/// Loads `dir` and commits it to `store`.
pub fn load_into(
    descriptors: &Descriptors,
    dir: &Path,
    limits: &xdsd_source::Limits,
    store: &Store,
) -> Result<Loaded, LoadError> {
    let resources =
        xdsd_source::load_directory_with(descriptors, dir, limits).map_err(LoadError::Source)?;
    commit(store, resources)
}
