use std::fmt;
use std::path::PathBuf;

/// Which resource of which file an error is about, with whatever was known about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceRef {
    pub file: PathBuf,
    /// 1-based position of the resource in its file, counting across YAML documents.
    pub index: usize,
    /// The `@type` as written, when it was a string.
    pub type_url: Option<String>,
    /// The resource's name, when it could be read.
    pub name: Option<String>,
}

impl fmt::Display for ResourceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (resource #{}", self.file.display(), self.index)?;
        if let Some(type_url) = &self.type_url {
            write!(f, ", @type {type_url}")?;
        }
        if let Some(name) = &self.name {
            write!(f, ", name {name:?}")?;
        }
        f.write_str(")")
    }
}

/// What is wrong with one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Problem {
    /// The resource is not a mapping (found names what it is instead).
    NotAMapping {
        found: &'static str,
    },
    MissingType,
    TypeNotAString,
    /// `@type` has no `/`, so it is a bare message name rather than a type URL.
    NotATypeUrl(String),
    /// `@type` names no message in the descriptor pool.
    UnknownType(String),
    /// The message type has no string `name` (nor `cluster_name`) field to serve it under.
    Unnamed(String),
    /// The name field (`name` or `cluster_name`) is empty.
    EmptyName(&'static str),
    /// An `xdstp://` name (in `@name` or the name field) that is malformed, or not of the
    /// resource's type, or `@name` that is not an xdstp name or differs from the name field.
    Name(String),
    /// `"@constraints"` or `"@match"` is not a valid set of constraints.
    Constraints(String),
    /// `"@ttl"` is not a proto3 JSON duration of at least [`crate::MIN_TTL`].
    Ttl(String),
    /// The proto3 JSON decoder rejected the message: unknown field, wrong value type, bad
    /// duration, unknown nested `@type`... The text carries the parser's field path and
    /// line/column where it gives them.
    Invalid(String),
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::NotAMapping { found } => write!(
                f,
                "expected a resource (a mapping with an \"@type\" key), found {found}"
            ),
            Problem::MissingType => f.write_str(
                "missing \"@type\": each resource names its message type, e.g. \
                 \"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster",
            ),
            Problem::TypeNotAString => f.write_str("\"@type\" must be a string"),
            Problem::NotATypeUrl(t) => write!(
                f,
                "\"@type\" {t:?} is not a type URL; write type.googleapis.com/{t}"
            ),
            Problem::UnknownType(t) => write!(
                f,
                "unknown \"@type\" {t:?}: no such message in the Envoy descriptors"
            ),
            Problem::Unnamed(t) => write!(
                f,
                "{t} has no string `name` or `cluster_name` field: name it with \"@name\": xdstp://AUTHORITY/{t}/ID beside \"@type\""
            ),
            Problem::EmptyName(field) => write!(f, "empty name: `{field}` must be set"),
            Problem::Constraints(message) => f.write_str(message),
            Problem::Ttl(message) => write!(f, "\"@ttl\": {message}"),
            Problem::Name(message) => f.write_str(message),
            Problem::Invalid(message) => f.write_str(message),
        }
    }
}

/// Everything that can go wrong loading or watching resources.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    #[error("decoding the embedded Envoy descriptor set: {0}")]
    Descriptors(#[source] prost_reflect::DescriptorError),

    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The file as a whole is unusable: malformed YAML/JSON (the message carries line and
    /// column), an unsupported extension, or a bad `resources:` wrapper.
    #[error("{}: {message}", file.display())]
    File { file: PathBuf, message: String },

    #[error("{resource}: {problem}")]
    Resource {
        resource: ResourceRef,
        problem: Problem,
    },

    /// Two resources share a type and name; `first` and `second` are their origins.
    #[error(
        "duplicate resource: {type_url} named {name:?} is defined in {first} and again in {second}"
    )]
    Duplicate {
        type_url: String,
        name: String,
        first: String,
        second: String,
    },

    #[error("watching {}: {source}", path.display())]
    Watch {
        path: PathBuf,
        #[source]
        source: notify::Error,
    },

    /// Several of the above, from different files, in file order.
    #[error("{}", DisplayList(.0))]
    Multiple(Vec<SourceError>),
}

impl SourceError {
    /// Collapses a list of errors: one stays itself, several become `Multiple`.
    pub(crate) fn from_list(mut errors: Vec<SourceError>) -> Option<SourceError> {
        match errors.len() {
            0 => None,
            1 => errors.pop(),
            _ => Some(SourceError::Multiple(errors)),
        }
    }

    /// A copy, for an error kept with a file that did not change (an I/O error keeps its kind
    /// and message; the descriptor and watch errors, which no file has, keep their message).
    pub(crate) fn copy(&self) -> SourceError {
        match self {
            SourceError::Io { path, source } => SourceError::Io {
                path: path.clone(),
                source: std::io::Error::new(source.kind(), source.to_string()),
            },
            SourceError::File { file, message } => SourceError::File {
                file: file.clone(),
                message: message.clone(),
            },
            SourceError::Resource { resource, problem } => SourceError::Resource {
                resource: resource.clone(),
                problem: problem.clone(),
            },
            SourceError::Duplicate {
                type_url,
                name,
                first,
                second,
            } => SourceError::Duplicate {
                type_url: type_url.clone(),
                name: name.clone(),
                first: first.clone(),
                second: second.clone(),
            },
            SourceError::Multiple(list) => {
                SourceError::Multiple(list.iter().map(SourceError::copy).collect())
            }
            SourceError::Descriptors(_) | SourceError::Watch { .. } => SourceError::File {
                file: PathBuf::new(),
                message: self.to_string(),
            },
        }
    }

    /// The individual errors (itself, unless it is `Multiple`).
    pub fn errors(&self) -> Vec<&SourceError> {
        match self {
            SourceError::Multiple(list) => list.iter().flat_map(SourceError::errors).collect(),
            other => vec![other],
        }
    }
}

struct DisplayList<'a>(&'a [SourceError]);

impl fmt::Display for DisplayList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} errors:", self.0.len())?;
        for error in self.0 {
            write!(f, "\n  {error}")?;
        }
        Ok(())
    }
}
