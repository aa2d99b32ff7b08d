//! The errors that end a session, and the category each is reported as (see
//! `transport::status`, which maps them to gRPC statuses in one place).

/// Why a session cannot go on: the client sent something xdsd will not serve. Each ends the
/// stream; [`SessionError::kind`] says which status it maps to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    #[error("node changed mid-stream: first request was from {first:?}, this one from {now:?}")]
    NodeChanged { first: String, now: String },
    #[error("a request on an aggregated stream must set type_url")]
    MissingTypeUrl,
    #[error("this service serves {serves}; the request is for {requested}")]
    WrongType { serves: String, requested: String },
    #[error("the node does not decode: {0}")]
    BadNode(String),
    #[error("{what}: {detail}")]
    BadParameters { what: String, detail: String },
    #[error("more than {limit} {what} on one stream")]
    Limit { what: &'static str, limit: usize },
    #[error(
        "the client certificate's identity {identity:?} may not claim node {node:?} \
         (cluster {cluster:?})"
    )]
    NodeNotAllowed {
        identity: String,
        node: String,
        cluster: String,
    },
    #[error(
        "the request carries no node; the first request of a client with a certificate \
         (identity {identity:?}) must, to be checked against it"
    )]
    NodeRequired { identity: String },
    #[error(
        "secrets are served only over TLS or loopback connections, and this one is plaintext \
         from another host (the server must serve TLS, or be told to allow plaintext secrets)"
    )]
    SecretsOverPlaintext,
}

/// How a [`SessionError`] is reported: the category a transport maps to its status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The request is wrong (gRPC INVALID_ARGUMENT).
    InvalidArgument,
    /// The request asks for more than xdsd holds for one client (gRPC RESOURCE_EXHAUSTED).
    ResourceExhausted,
    /// The client may not be the node it claims (gRPC PERMISSION_DENIED).
    PermissionDenied,
}

impl SessionError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            SessionError::Limit { .. } => ErrorKind::ResourceExhausted,
            SessionError::NodeNotAllowed { .. }
            | SessionError::NodeRequired { .. }
            | SessionError::SecretsOverPlaintext => ErrorKind::PermissionDenied,
            // Listed, not `_`: a new error must be given its kind here.
            SessionError::NodeChanged { .. }
            | SessionError::MissingTypeUrl
            | SessionError::WrongType { .. }
            | SessionError::BadNode(_)
            | SessionError::BadParameters { .. } => ErrorKind::InvalidArgument,
        }
    }
}
