//! Why the store refuses an update: [`StoreError`], and the TP2 rule two variants break
//! ([`VariantRule`]).

use super::refs::{self, Dangling};

/// Why the store refused an update (it then holds what it held before).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreError {
    /// Two resources (of one variant) share a type and a name.
    #[error("two resources of type {type_url} are named {name:?}{}", with_origins(.first, .second))]
    Duplicate {
        /// Their type URL.
        type_url: String,
        /// Their name.
        name: String,
        /// Where the first came from, when known.
        first: Option<String>,
        /// Where the second came from, when known.
        second: Option<String>,
    },
    /// A resource without a name.
    #[error("a resource of type {type_url} has an empty name")]
    EmptyName {
        /// Its type URL.
        type_url: String,
    },
    /// A malformed `xdstp://` name (xRFC TP1), or one whose type segment is not its type.
    #[error("{type_url} {name:?}{}: {error}", origin.as_deref().map(|o| format!(" ({o})")).unwrap_or_default())]
    BadName {
        /// Its type URL.
        type_url: String,
        /// The name as given.
        name: String,
        /// Where it came from, when known.
        origin: Option<String>,
        /// What is wrong with it.
        error: crate::xdstp::XdstpError,
    },
    /// A type URL that is not `type.googleapis.com/<package>.<Message>`.
    #[error("{type_url:?} is not a type URL (expected type.googleapis.com/<package>.<Message>)")]
    BadTypeUrl {
        /// The type URL given.
        type_url: String,
    },
    /// The variants of a name break a rule of xRFC TP2 (see [`VariantRule`]).
    #[error("variants of {type_url} {name:?}: {first} and {second}: {rule}")]
    Variants {
        /// The name's type URL.
        type_url: String,
        /// The name.
        name: String,
        /// The first of the two variants, by origin (or constraints when the origin is unknown).
        first: String,
        /// The second, the same way.
        second: String,
        /// The rule they break.
        rule: Box<VariantRule>,
    },
    /// References to resources that do not exist, in [`ReferenceMode::Strict`](super::ReferenceMode::Strict): all of them
    /// (the message lists the first [`MAX_LISTED`](super::MAX_LISTED)).
    #[error("{}", refs::describe(.0))]
    DanglingReferences(Vec<Dangling>),
}

/// A TP2 rule two variants of one name break.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VariantRule {
    /// The variants constrain different parameter keys.
    #[error(
        "they constrain different keys ({} vs {}); all variants of a name must constrain the same keys",
        keys(.first_keys), keys(.second_keys)
    )]
    DifferentKeys {
        /// The keys the first constrains.
        first_keys: Vec<String>,
        /// The keys the second constrains.
        second_keys: Vec<String>,
    },
    /// One parameter set matches both variants.
    #[error(
        "both match the parameters {witness} ({first_constraints} and {second_constraints}); \
         a parameter set may match at most one variant"
    )]
    Overlap {
        /// A parameter set both match.
        witness: String,
        /// The first's constraints.
        first_constraints: String,
        /// The second's constraints.
        second_constraints: String,
    },
}

fn keys(keys: &[String]) -> String {
    if keys.is_empty() {
        "no keys: unconstrained".to_owned()
    } else {
        format!("keys {}", keys.join(", "))
    }
}

fn with_origins(first: &Option<String>, second: &Option<String>) -> String {
    match (first, second) {
        (Some(a), Some(b)) => format!(": {a} and {b}"),
        _ => String::new(),
    }
}
