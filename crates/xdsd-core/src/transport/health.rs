//! gRPC health checking (`grpc.health.v1.Health`) on the xDS address: SERVING while the server
//! is ready and not shutting down, NOT_SERVING otherwise. The service "" (the server) and each
//! service xdsd serves are known; any other is NOT_FOUND (Check) or SERVICE_UNKNOWN (Watch).

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use tokio::sync::watch;
use tonic::{Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

use super::context::ServerContext;
use crate::types::{ADS_SERVICE, PER_TYPE_SERVICES};

/// The CSDS service's name.
pub(crate) const CSDS_SERVICE: &str = "envoy.service.status.v3.ClientStatusDiscoveryService";

/// The largest health request accepted.
const MAX_HEALTH_REQUEST_BYTES: usize = 16 * 1024;

pub(crate) fn service(ctx: Arc<ServerContext>) -> HealthServer<HealthService> {
    HealthServer::new(HealthService { ctx }).max_decoding_message_size(MAX_HEALTH_REQUEST_BYTES)
}

pub(crate) struct HealthService {
    ctx: Arc<ServerContext>,
}

fn known(service: &str) -> bool {
    service.is_empty()
        || service == ADS_SERVICE
        || service == CSDS_SERVICE
        || PER_TYPE_SERVICES.iter().any(|(s, _)| *s == service)
}

fn status(serving: bool) -> ServingStatus {
    if serving {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    }
}

fn response(status: ServingStatus) -> HealthCheckResponse {
    HealthCheckResponse {
        status: status as i32,
    }
}

/// What a Watch call follows.
struct Watching {
    ready: watch::Receiver<bool>,
    shutdown: watch::Receiver<bool>,
    /// The status last sent; None before the first.
    sent: Option<ServingStatus>,
    /// The last one (NOT_SERVING on shutdown) was sent: the stream ends.
    done: bool,
}

impl Watching {
    fn now(&self) -> ServingStatus {
        status(*self.ready.borrow() && !*self.shutdown.borrow())
    }
}

#[tonic::async_trait]
impl Health for HealthService {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        if !known(&request.get_ref().service) {
            return Err(Status::not_found(format!(
                "xdsd does not serve {:?}",
                request.get_ref().service
            )));
        }
        Ok(Response::new(response(status(self.ctx.serving()))))
    }

    type WatchStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

    async fn watch(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        if !known(&request.get_ref().service) {
            // Never known: the status stays SERVICE_UNKNOWN until the server shuts down.
            let mut shutdown = self.ctx.shutdown.clone();
            let stream =
                futures::stream::once(async { Ok(response(ServingStatus::ServiceUnknown)) }).chain(
                    futures::stream::once(async move {
                        let _ = shutdown.wait_for(|down| *down).await;
                        Err(Status::unavailable("xdsd is shutting down"))
                    }),
                );
            return Ok(Response::new(Box::pin(stream)));
        }
        let state = Watching {
            ready: self.ctx.ready.subscribe(),
            shutdown: self.ctx.shutdown.clone(),
            sent: None,
            done: false,
        };
        let stream = futures::stream::unfold(state, |mut w| async move {
            if w.done {
                return None;
            }
            loop {
                let now = w.now();
                if w.sent != Some(now) {
                    w.sent = Some(now);
                    // Shutting down: NOT_SERVING is the last word, then the stream ends, so that
                    // the server's shutdown does not wait for it.
                    w.done = *w.shutdown.borrow();
                    return Some((Ok(response(now)), w));
                }
                if *w.shutdown.borrow() {
                    return None;
                }
                let changed = tokio::select! {
                    changed = w.ready.changed() => changed,
                    changed = w.shutdown.changed() => changed,
                };
                // The server is gone.
                if changed.is_err() {
                    return None;
                }
            }
        });
        Ok(Response::new(Box::pin(stream)))
    }
}
