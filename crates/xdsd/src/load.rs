//! From a resource directory to the store: the one code path `serve` (at start and at each
//! change), `check` and `render` share, so that they accept and reject exactly the same
//! directories.

use std::fmt;
use std::path::Path;

use xdsd_core::params::Constraints;
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
            LoadError::Store(StoreError::DanglingReferences(list)) => list
                .iter()
                .map(|d| format!("a reference to a resource that does not exist: {d}"))
                .collect(),
            LoadError::Store(e) => vec![e.to_string()],
        }
    }

    /// What to do about it, when the errors alone do not say.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            LoadError::Store(e) => hint(e),
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
                if let Some(hint) = hint(e) {
                    write!(f, " ({hint})")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for LoadError {}

/// What to do about a rejected change, when the error alone does not say.
fn hint(e: &StoreError) -> Option<&'static str> {
    match e {
        StoreError::DanglingReferences(_) => Some(
            "a resource the clients get elsewhere, such as a cluster of Envoy's bootstrap, can be \
             declared with --external-name TYPE:NAME; --references warn applies such changes",
        ),
        _ => None,
    }
}

/// A committed load.
#[derive(Debug)]
pub struct Loaded {
    /// Resources read from the files (before VHDS route configurations are split).
    pub resources: usize,
    pub summary: UpdateSummary,
}

/// The store's inputs for parsed resources; a variant's constraints are checked here (an empty
/// key, a constraint with neither value nor exists, the size bounds), naming its resource.
fn inputs(resources: Vec<ParsedResource>) -> Result<Vec<ResourceInput>, LoadError> {
    let mut errors = Vec::new();
    let mut out = Vec::with_capacity(resources.len());
    for r in resources {
        let constraints = match r
            .constraints
            .as_deref()
            .map(Constraints::decode)
            .transpose()
        {
            Ok(constraints) => constraints,
            Err(e) => {
                errors.push(format!(
                    "{} ({:?}): \"@constraints\": {e}",
                    r.origin, r.name
                ));
                continue;
            }
        };
        out.push(
            ResourceInput::new(r.type_url, r.name, r.value)
                .with_constraints(constraints)
                .with_ttl(r.ttl)
                .with_origin(r.origin),
        );
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(LoadError::Constraints(errors))
    }
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

/// Commits what a watched directory's cache holds: everything when the store does not hold its
/// last commit yet (the first reload), else only the names that changed since
/// ([`Store::replace_names`]), which ends in the same state as committing everything.
pub fn commit_cache(
    store: &Store,
    cache: &xdsd_source::DirectoryCache,
) -> Result<Loaded, LoadError> {
    if !cache.is_synced() {
        return commit(store, cache.resources());
    }
    let changes = cache.changes();
    let summary = store
        .replace_names(changes.names, inputs(changes.resources)?)
        .map_err(LoadError::Store)?;
    Ok(Loaded {
        resources: cache.resource_count(),
        summary,
    })
}

/// Loads `dir` into a cache of what each file holds, commits it to `store`, and returns the
/// cache (marked committed), to be handed to the directory's watch
/// ([`xdsd_source::DirectoryWatch::start_from`]): the directory is parsed once at start, and the
/// first change commits only what it changed.
pub fn load_cache_into(
    descriptors: &Descriptors,
    dir: &Path,
    limits: &xdsd_source::Limits,
    store: &Store,
) -> Result<(Loaded, xdsd_source::DirectoryCache), LoadError> {
    let mut cache = xdsd_source::DirectoryCache::default();
    cache
        .rescan(descriptors, dir, limits)
        .map_err(LoadError::Source)?;
    let loaded = commit(store, cache.resources())?;
    cache.committed();
    Ok((loaded, cache))
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
