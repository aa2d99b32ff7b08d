//! The one place where the session's errors become gRPC statuses, the way rustls maps its errors
//! to TLS alerts.

use tonic::Status;

use crate::protocol::session::{ErrorKind, SessionError};

/// The status that ends a stream after `error`; its message says what was wrong.
pub fn status_of(error: &SessionError) -> Status {
    let message = error.to_string();
    match error.kind() {
        ErrorKind::InvalidArgument => Status::invalid_argument(message),
        ErrorKind::ResourceExhausted => Status::resource_exhausted(message),
    }
}
