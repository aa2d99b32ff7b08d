//! The one place where what ends a stream (or fails a `Fetch*` call) becomes a gRPC status, the way rustls maps its errors
//! to TLS alerts: the session's errors, and requests that cannot be read.

use std::error::Error as _;

use tonic::{Code, Status};

use crate::protocol::session::{ErrorKind, SessionError};

/// The status that ends a stream after `error`; its message says what was wrong.
pub fn status_of(error: &SessionError) -> Status {
    let message = error.to_string();
    match error.kind() {
        ErrorKind::InvalidArgument => Status::invalid_argument(message),
        ErrorKind::ResourceExhausted => Status::resource_exhausted(message),
        ErrorKind::PermissionDenied => Status::permission_denied(message),
    }
}

/// The HTTP status a REST poll refused with gRPC `code` is answered with.
pub(crate) fn http_status_of(code: Code) -> http::StatusCode {
    use http::StatusCode;
    match code {
        Code::InvalidArgument | Code::OutOfRange | Code::FailedPrecondition => {
            StatusCode::BAD_REQUEST
        }
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::Cancelled => StatusCode::REQUEST_TIMEOUT,
        Code::Ok | Code::Unknown | Code::Internal | Code::DataLoss => {
            StatusCode::INTERNAL_SERVER_ERROR
        }
    }
}

/// A request that is a well-framed gRPC message but not a `what` (e.g. `DiscoveryRequest`).
pub(crate) fn undecodable(what: &str, error: &prost::DecodeError) -> Status {
    Status::invalid_argument(format!("the request is not a valid {what}: {error}"))
}

/// A unary call (`Fetch*`) whose request stream ended without its one request.
pub(crate) fn no_request() -> Status {
    Status::invalid_argument("the call carries no DiscoveryRequest")
}

/// What ends a stream whose request could not be read, with `max_request_bytes` the limit it was
/// read under. `None`: the transport failed (the client reset the stream, the connection broke),
/// and no status can reach the client.
pub(crate) fn status_of_read_error(error: &Status, max_request_bytes: usize) -> Option<Status> {
    // Errors of the connection carry their cause (an HTTP/2 or I/O error); those of the message
    // framing and decoding, below, are made without one.
    if error.source().is_some() {
        return None;
    }
    match error.code() {
        // The length in the message's header is over the decoding limit: refused before any
        // of the body is buffered.
        Code::OutOfRange => Some(Status::resource_exhausted(format!(
            "the request is larger than the {max_request_bytes} bytes this server accepts \
             (its max request size): {}",
            error.message()
        ))),
        // From `undecodable`; a request over the budget of unfinished requests (`budget`).
        Code::InvalidArgument | Code::ResourceExhausted => Some(error.clone()),
        // The gRPC framing is wrong (a bad compression flag, a message cut short by the end of
        // the stream).
        Code::Internal => Some(Status::invalid_argument(format!(
            "the request stream is not valid gRPC: {}",
            error.message()
        ))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_oversized_request_is_resource_exhausted_naming_the_limit() {
        let read = Status::out_of_range("found 5000 bytes, the limit is: 4096 bytes");
        let status = status_of_read_error(&read, 4096).expect("a status for the client");
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert!(status.message().contains("4096 bytes"), "{status:?}");
        assert!(status.message().contains("5000"), "{status:?}");
    }

    #[test]
    fn an_undecodable_request_is_invalid_argument_saying_why() {
        let error = <envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest as prost::Message>::decode(
            &[0xff_u8, 0xff, 0xff][..],
        )
        .expect_err("not a message");
        let read = undecodable("DiscoveryRequest", &error);
        let status = status_of_read_error(&read, 4096).expect("a status for the client");
        assert_eq!(status.code(), Code::InvalidArgument);
        assert!(
            status.message().contains("not a valid DiscoveryRequest"),
            "{status:?}"
        );
    }

    #[test]
    fn a_broken_transport_gets_no_status() {
        let mut read = Status::internal("h2 protocol error: stream reset");
        read.set_source(std::sync::Arc::new(std::io::Error::other("reset")));
        assert!(status_of_read_error(&read, 4096).is_none());
        assert!(status_of_read_error(&Status::unknown("connection lost"), 4096).is_none());
    }
}
