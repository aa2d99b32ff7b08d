//! xdsd-core's integration tests: one binary, a module per subject, over real gRPC on loopback
//! to an in-process xdsd (see `support`).

mod embed;
mod fuzz;
mod grpc_delta;
mod grpc_fetch;
mod grpc_limits;
mod grpc_max_age;
mod grpc_observer;
mod grpc_picker;
mod grpc_rollout;
mod grpc_shutdown;
mod grpc_sotw;
mod grpc_status;
mod grpc_tls;
mod grpc_variants;
mod support;
