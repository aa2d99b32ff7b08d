//! The errors that end a session, and the category each is reported as (see
//! `transport::status`, which maps them to gRPC statuses in one place).

/// Why a session cannot go on: the client sent something xdsd will not serve. Each ends the
/// stream; [`SessionError::kind`] says which status it maps to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// A request names another node than the stream's first one did.
    #[error("node changed mid-stream: first request was from {first:?}, this one from {now:?}")]
    NodeChanged {
        /// The node id of the stream's first request.
        first: String,
        /// The node id of this one.
        now: String,
    },
    /// A request on an aggregated (ADS) stream names no type.
    #[error("a request on an aggregated stream must set type_url")]
    MissingTypeUrl,
    /// A request on a per-type service asks for another type.
    #[error("this service serves {serves}; the request is for {requested}")]
    WrongType {
        /// The type URL the service serves.
        serves: String,
        /// The type URL the request asks for.
        requested: String,
    },
    /// The request's node is not a valid `Node` message (the decoder's message).
    #[error("the node does not decode: {0}")]
    BadNode(String),
    /// Parameters (node metadata, dynamic parameters, a resource locator's) over their bounds.
    #[error("{what}: {detail}")]
    BadParameters {
        /// Whose parameters: "the node's metadata", "the resource locator ...".
        what: String,
        /// What is wrong with them.
        detail: String,
    },
    /// More of something on one stream than a session holds (names, types, parameter sets).
    #[error("more than {limit} {what} on one stream")]
    Limit {
        /// What went over its limit ("resource names", "type URLs", ...).
        what: &'static str,
        /// The limit.
        limit: usize,
    },
    #[error(
        "the client certificate's identity {identity:?} may not claim node {node:?} \
         (cluster {cluster:?})"
    )]
    /// The client's certificate identity may not claim the node it sent (mutual TLS with node
    /// identity rules).
    NodeNotAllowed {
        /// The certificate's identity.
        identity: String,
        /// The node id claimed.
        node: String,
        /// The node's cluster.
        cluster: String,
    },
    #[error(
        "the request carries no node; the first request of a client with a certificate \
         (identity {identity:?}) must, to be checked against it"
    )]
    /// A client with a certificate sent no node in its first request, so its identity cannot be
    /// checked against one.
    NodeRequired {
        /// The certificate's identity.
        identity: String,
    },
    #[error(
        "secrets are served only over TLS or loopback connections, and this one is plaintext \
         from another host (the server must serve TLS, or be told to allow plaintext secrets)"
    )]
    /// Secrets (SDS) asked for over a plaintext connection from another host.
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
    /// The category the error is reported as (every error has one: the match lists them all).
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
