//! REST-JSON polling (the spec's "REST-JSON polling subscriptions", Envoy's `api_type: REST`):
//! `POST /v3/discovery:clusters` (`:listeners`, `:routes`, `:scoped-routes`, `:endpoints`,
//! `:secrets`, `:runtime`) with a `DiscoveryRequest` in proto3 JSON, answered with a
//! `DiscoveryResponse` in proto3 JSON; `POST /v3/discovery:resources` serves the type the
//! request's `type_url` names. Each poll is answered by a fresh per-type session, as a `Fetch*`
//! call is, so the rules (names, wildcard, full state, variants) are a stream's.
//!
//! Long polling: a request whose `version_info` is the version of what it asks for is held until
//! something it asks for changes (answered 200) or [`ServerOptions::rest_hold`] passes (answered
//! `304 Not Modified`, which Envoy's REST subscription takes as "no change"). The version of a
//! REST answer is a digest of the names and versions of the resources in it, so a change to a
//! resource the client did not ask for never makes its unchanged set look new. At most
//! [`ServerOptions::max_held_polls`] polls are held at once; beyond that, polls are answered at
//! once.
//!
//! JSON goes through a [`JsonCodec`] (the binary's uses the Envoy descriptors): this crate never
//! writes JSON by hand. Bad input is a 4xx with a JSON body `{"code": …, "message": …}` (a
//! `google.rpc.Status`), never a 500 or a dropped connection.
//!
//! [`ServerOptions::rest_hold`]: super::grpc::ServerOptions::rest_hold
//! [`ServerOptions::max_held_polls`]: super::grpc::ServerOptions::max_held_polls

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Extension, Path, State};
use axum::routing::post;
use axum::Router;
use http::{header, HeaderMap, HeaderValue, StatusCode};
use prost::Message as _;
use tokio::sync::Semaphore;
use tracing::{debug, warn};

use super::conn::{Access, ConnInfo};
use super::context::ServerContext;
use super::fetch::{hold, settled_answer, OneShot};
use super::status::http_status_of;
use super::wire::SotwWire;

use crate::protocol::oneshot::{rest_holds, rest_modified, rest_version, Answer};
use crate::protocol::sotw::SotwRequest;
use crate::types;

/// Converts between proto3 JSON and the protobuf encoding of the two REST messages.
pub trait JsonCodec: Send + Sync + 'static {
    /// A `envoy.service.discovery.v3.DiscoveryRequest` in proto3 JSON, as its protobuf encoding;
    /// Err: why the JSON is not one.
    fn request_from_json(&self, json: &[u8]) -> Result<Vec<u8>, String>;
    /// The protobuf encoding of a `envoy.service.discovery.v3.DiscoveryResponse`, in proto3 JSON
    /// (resources as `Any` with `@type`).
    fn response_to_json(&self, encoded: &[u8]) -> Result<Vec<u8>, String>;
}

/// The REST paths (after `/v3/discovery:`) of the types Envoy polls, as its `api_type: REST`
/// config sources name them.
pub const REST_PATHS: &[(&str, &str)] = &[
    ("listeners", types::LISTENER),
    ("routes", types::ROUTE_CONFIGURATION),
    ("scoped-routes", types::SCOPED_ROUTE_CONFIGURATION),
    ("clusters", types::CLUSTER),
    ("endpoints", types::CLUSTER_LOAD_ASSIGNMENT),
    ("secrets", types::SECRET),
    ("runtime", types::RUNTIME),
];

/// The path that serves any type, named by the request's `type_url`.
pub const ANY_TYPE_PATH: &str = "resources";

struct Rest {
    ctx: Arc<ServerContext>,
    codec: Arc<dyn JsonCodec>,
    held: Semaphore,
}

/// The REST routes (`POST /v3/discovery:*`), over the same store and options as the gRPC ones.
pub(crate) fn routes(ctx: Arc<ServerContext>, codec: Arc<dyn JsonCodec>) -> Router {
    let held = Semaphore::new(ctx.options.max_held_polls.min(Semaphore::MAX_PERMITS));
    let rest = Arc::new(Rest { ctx, codec, held });
    Router::new()
        .route(
            "/v3/{action}",
            post(poll).fallback(|| async {
                error(
                    StatusCode::METHOD_NOT_ALLOWED,
                    tonic::Code::InvalidArgument,
                    "REST discovery takes a POST with a DiscoveryRequest in proto3 JSON",
                )
                .reply()
            }),
        )
        .with_state(rest)
}

/// A REST answer: a status and a JSON body.
type Reply = http::Response<Body>;

fn reply(status: StatusCode, body: Vec<u8>) -> Reply {
    let mut response = http::Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// Why a poll is not answered with resources: an HTTP status, the gRPC code that says the same,
/// and what was wrong. Answered with a `google.rpc.Status` JSON body.
#[derive(Debug)]
struct RestError {
    status: StatusCode,
    code: tonic::Code,
    message: String,
}

fn error(status: StatusCode, code: tonic::Code, message: impl Into<String>) -> RestError {
    RestError {
        status,
        code,
        message: message.into(),
    }
}

impl RestError {
    fn reply(self) -> Reply {
        let body = serde_json::json!({ "code": self.code as i32, "message": self.message });
        reply(self.status, body.to_string().into_bytes())
    }
}

fn not_modified() -> Reply {
    let mut response = http::Response::new(Body::empty());
    *response.status_mut() = StatusCode::NOT_MODIFIED;
    response
}

async fn poll(
    State(rest): State<Arc<Rest>>,
    Path(action): Path<String>,
    conn: Option<Extension<ConnInfo>>,
    headers: HeaderMap,
    body: Body,
) -> Reply {
    let peer = conn.as_ref().and_then(|c| c.remote_addr);
    let access = Access::of(conn.as_deref(), rest.ctx.options.allow_plaintext_secrets);
    match rest.poll(&action, &access, &headers, body).await {
        Err(e) if e.code == tonic::Code::PermissionDenied => {
            warn!(peer = ?peer, error = %crate::logsafe::shown(&e.message), "REST poll refused");
            e.reply()
        }
        Ok(reply) => reply,
        Err(e) => e.reply(),
    }
}

impl Rest {
    async fn poll(
        &self,
        action: &str,
        access: &Access,
        headers: &HeaderMap,
        body: Body,
    ) -> Result<Reply, RestError> {
        let path_type = self.path_type(action)?;
        let json = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.split(';')
                    .next()
                    .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
            });
        if !json {
            return Err(error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                tonic::Code::InvalidArgument,
                "the body must be a DiscoveryRequest in proto3 JSON, with content-type: \
                 application/json",
            ));
        }
        let limit = self.ctx.options.max_request_bytes;
        let bytes = axum::body::to_bytes(body, limit).await.map_err(|_| {
            error(
                StatusCode::PAYLOAD_TOO_LARGE,
                tonic::Code::ResourceExhausted,
                format!(
                    "the request is larger than the {limit} bytes this server accepts (its max \
                     request size), or its body could not be read"
                ),
            )
        })?;
        let encoded = self.codec.request_from_json(&bytes).map_err(|e| {
            error(
                StatusCode::BAD_REQUEST,
                tonic::Code::InvalidArgument,
                format!("the body is not a DiscoveryRequest in proto3 JSON: {e}"),
            )
        })?;
        let request = SotwRequest::decode(encoded.as_slice()).map_err(|e| {
            error(
                StatusCode::BAD_REQUEST,
                tonic::Code::InvalidArgument,
                format!("the request does not decode: {e}"),
            )
        })?;
        let type_url: Arc<str> = match path_type {
            Some(t) => t.into(),
            None if request.type_url.is_empty() => {
                return Err(error(
                    StatusCode::BAD_REQUEST,
                    tonic::Code::InvalidArgument,
                    format!("/v3/discovery:{ANY_TYPE_PATH} serves the type the request's type_url names; it has none"),
                ))
            }
            None => request.type_url.as_str().into(),
        };
        self.answer(type_url, access, &request).await
    }

    /// The type a path serves (`None`: the one the request names).
    fn path_type(&self, action: &str) -> Result<Option<&'static str>, RestError> {
        let unknown = || {
            let paths: Vec<String> = REST_PATHS
                .iter()
                .map(|(p, _)| *p)
                .chain([ANY_TYPE_PATH])
                .map(|p| format!("/v3/discovery:{p}"))
                .collect();
            error(
                StatusCode::NOT_FOUND,
                tonic::Code::NotFound,
                format!(
                    "no REST discovery service at /v3/{action}; there are {}",
                    paths.join(", ")
                ),
            )
        };
        let name = action.strip_prefix("discovery:").ok_or_else(unknown)?;
        if name == ANY_TYPE_PATH {
            return Ok(None);
        }
        REST_PATHS
            .iter()
            .find(|(p, _)| *p == name)
            .map(|(_, t)| Some(*t))
            .ok_or_else(unknown)
    }

    /// Answers at once when the request's version is not current; else holds it until its
    /// answer changes, [`ServerOptions::rest_hold`] passes or xdsd shuts down.
    ///
    /// [`ServerOptions::rest_hold`]: super::grpc::ServerOptions::rest_hold
    async fn answer(
        &self,
        type_url: Arc<str>,
        access: &Access,
        request: &SotwRequest,
    ) -> Result<Reply, RestError> {
        let started = Instant::now();
        // What the observers hold for the poll, they hold while it is held.
        let one_shot = OneShot::new(&self.ctx, self.ctx.observers.embedder());
        hold(
            &self.ctx,
            &type_url,
            access,
            request,
            &one_shot,
            &rest_version,
        )
        .await;
        let mut current = self.current(&type_url, access, request, &one_shot).await?;
        let hold = self.ctx.options.rest_hold;
        let permit = if rest_holds(&request.version_info, &current.1, hold) {
            self.held.try_acquire().ok()
        } else {
            None
        };
        if let Some(_permit) = permit {
            let deadline = tokio::time::Instant::now() + hold;
            let mut watcher = self.ctx.store_for(&request.node_raw).watcher();
            current.0.watch(&mut watcher);
            let mut shutdown = self.ctx.shutdown.clone();
            // Read again now that changes are watched: none slips between the two.
            current = self.current(&type_url, access, request, &one_shot).await?;
            if !rest_modified(&request.version_info, &current.1) {
                debug!(node = %crate::logsafe::shown(current.0.node_id()), type_url = %crate::logsafe::shown(&type_url), "REST poll held");
            }
            while !rest_modified(&request.version_info, &current.1) {
                // (Read again after the `select!`: what it holds of the shutdown signal is not
                // `Send` across an await.)
                let changed = tokio::select! {
                    _ = watcher.changed() => true,
                    _ = tokio::time::sleep_until(deadline) => false,
                    _ = shutdown.wait_for(|down| *down) => false,
                };
                if !changed {
                    break;
                }
                watcher.take_changes();
                current = self.current(&type_url, access, request, &one_shot).await?;
            }
        }
        let (answer, version) = current;
        let held_ms = started.elapsed().as_millis() as u64;
        if !rest_modified(&request.version_info, &version) {
            debug!(node = %crate::logsafe::shown(answer.node_id()), type_url = %crate::logsafe::shown(&type_url), %version, held_ms, "REST poll: not modified");
            return Ok(not_modified());
        }
        debug!(
            node = %crate::logsafe::shown(answer.node_id()),
            type_url = %crate::logsafe::shown(&type_url),
            %version,
            resources = answer.response.len(),
            held_ms,
            "REST poll answered"
        );
        let response = answer.into_rest(version);
        let encoded = SotwWire::from(response).encode_to_vec();
        let json = self.codec.response_to_json(&encoded).map_err(|e| {
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                tonic::Code::Internal,
                format!("the response cannot be written as JSON: {e}"),
            )
        })?;
        Ok(reply(StatusCode::OK, json))
    }

    /// The answer to `request` now, and its REST version.
    ///
    /// Names the store has pending are waited for (see `fetch::settled_answer`).
    async fn current(
        &self,
        type_url: &Arc<str>,
        access: &Access,
        request: &SotwRequest,
        one_shot: &OneShot<'_>,
    ) -> Result<(Answer, String), RestError> {
        let answer = settled_answer(&self.ctx, type_url.clone(), access, request, one_shot)
            .await
            .map_err(|e| rejected(&e.status()))?;
        let version = rest_version(&answer.response);
        Ok((answer, version))
    }
}

/// A refused request as a REST answer: its gRPC status (see `status`, which owns the mapping)
/// and the HTTP status that stands for it.
fn rejected(status: &tonic::Status) -> RestError {
    error(
        http_status_of(status.code()),
        status.code(),
        status.message(),
    )
}
