//! The admin HTTP API: read-only views of a running server for operators and their tools.
//!
//! - `GET /healthz`: 200 while the process serves HTTP (liveness).
//! - `GET /readyz`: 200 when the server is ready and not shutting down, else 503.
//! - `GET /clients`: the connected clients as JSON (see [`clients_json`]).
//! - `GET /config?node=ID`: what a client with that node would be served (see [`config_json`]);
//!   with `&contents=1`, each resource's message too, in proto3 JSON.
//! - `GET /metrics`: Prometheus metrics, OpenMetrics text (see `xdsd_core::metrics`).
//! - `GET /history[?limit=N]`: the etcd prefix's history, as `xdsd history --output json` (see
//!   `history`); 404 when serving a directory.
//! - `GET /rollout` (and `POST /rollout/promote`, `/rollout/abort`): a gated rollout's state.
//! - `GET /` and `GET /client?node=ID`: the status page, HTML (see `page`).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse;
use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::google::protobuf::Any;
use envoy_types::pb::google::protobuf::{ListValue, Struct, Value as ProtobufValue};
use serde_json::{json, Value};
use tokio::net::TcpListener;

use xdsd_core::clients::{nack_details, resource_status, ClientStatus, TypeStatus};
use xdsd_core::http::{serve_http1, HttpTls};
use xdsd_core::metrics::CONTENT_TYPE;
use xdsd_core::session::SotwResponse;
use xdsd_core::{JsonCodec, ServerHandle};

use super::history::HistorySource;
use super::page::{self, PageInfo};

/// The admin API's routes over a server's `handle`, the status page saying `info` about the
/// program.
pub fn router(handle: ServerHandle, info: PageInfo, history: Option<Arc<HistorySource>>) -> Router {
    let info_source = info.source.clone();
    let page = page::routes(handle.clone(), info, history.clone());
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/clients", get(clients))
        .route("/config", get(config))
        .route("/metrics", get(metrics))
        .route("/rollout", get(rollout))
        .route("/rollout/promote", post(rollout_promote))
        .route("/rollout/abort", post(rollout_abort))
        .with_state(handle)
        .merge(page)
        .merge(super::history::routes(history, &info_source))
}

/// Serves the admin API on `listener` until `signal` completes, over TLS when `tls` is given
/// (a connection must send its request within the core's preface timeout either way), the status
/// page saying `info` about the program.
pub async fn serve(
    listener: TcpListener,
    handle: ServerHandle,
    tls: Option<HttpTls>,
    info: PageInfo,
    history: Option<Arc<HistorySource>>,
    signal: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_http1(listener, tls, router(handle, info, history), signal).await
}

/// `GET /rollout`: the gated rollout's state (see `xdsd_core::Rollout::status_json`).
async fn rollout(State(handle): State<ServerHandle>) -> Response {
    match handle.rollout() {
        Some(r) => json_response(StatusCode::OK, r.status_json()),
        None => not_gated(),
    }
}

/// `POST /rollout/promote`: the candidate goes to every client now.
async fn rollout_promote(State(handle): State<ServerHandle>) -> Response {
    let Some(r) = handle.rollout() else {
        return not_gated();
    };
    if r.promote() {
        json_response(StatusCode::OK, r.status_json())
    } else {
        let mut body = r.status_json();
        body["error"] = json!("no candidate to promote");
        json_response(StatusCode::CONFLICT, body)
    }
}

/// `POST /rollout/abort`: the candidate is dropped, the canaries go back to the stable state.
async fn rollout_abort(State(handle): State<ServerHandle>) -> Response {
    let Some(r) = handle.rollout() else {
        return not_gated();
    };
    if r.abort() {
        json_response(StatusCode::OK, r.status_json())
    } else {
        let mut body = r.status_json();
        body["error"] = json!("no rollout to abort");
        json_response(StatusCode::CONFLICT, body)
    }
}

fn not_gated() -> Response {
    json_response(
        StatusCode::NOT_FOUND,
        json!({"error": "no gated rollout on this server: every change goes to every client at once (`xdsd serve --canary` runs one)"}),
    )
}

fn json_response(status: StatusCode, body: Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        format!("{body}\n"),
    )
        .into_response()
}

async fn readyz(State(handle): State<ServerHandle>) -> Response {
    if handle.serving() {
        (StatusCode::OK, "ready\n").into_response()
    } else if handle.shutting_down() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: shutting down\n",
        )
            .into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n").into_response()
    }
}

async fn clients(State(handle): State<ServerHandle>) -> Response {
    let body = clients_json(&handle.clients()).to_string() + "\n";
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn metrics(State(handle): State<ServerHandle>) -> Response {
    (
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        handle.metrics_text(),
    )
        .into_response()
}

/// `GET /config?node=ID[&cluster=CLUSTER][&metadata=JSON][&contents=1]`: what a client with that
/// node would be served, subscribing to everything, of each type (see [`config_json`]), with
/// `contents=1` each resource's message in proto3 JSON (through the server's REST JSON codec).
async fn config(
    State(handle): State<ServerHandle>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let bad = |message: String| (StatusCode::BAD_REQUEST, message + "\n").into_response();
    let Some(id) = query.get("node") else {
        return bad(
            "GET /config needs ?node=ID (and optionally &cluster=CLUSTER, &metadata={...} as JSON)"
                .into(),
        );
    };
    let metadata = match query
        .get("metadata")
        .map(|m| serde_json::from_str::<Value>(m))
    {
        None => None,
        Some(Ok(Value::Object(fields))) => Some(Struct {
            fields: fields
                .into_iter()
                .map(|(k, v)| (k, protobuf_value(v)))
                .collect(),
        }),
        Some(Ok(_)) => return bad("metadata must be a JSON object".into()),
        Some(Err(e)) => return bad(format!("metadata is not JSON: {e}")),
    };
    let node = Node {
        id: id.clone(),
        cluster: query.get("cluster").cloned().unwrap_or_default(),
        metadata,
        ..Default::default()
    };
    let contents =
        match query.get("contents").map(String::as_str) {
            None | Some("0" | "false") => None,
            Some("1" | "true") => match handle.json_codec() {
                Some(codec) => Some(codec),
                None => return bad(
                    "contents=1 needs the server's proto3 JSON codec (XdsServerBuilder::rest_json)"
                        .into(),
                ),
            },
            Some(other) => return bad(format!("contents must be 1 or 0, not {other:?}")),
        };
    match handle.preview(&node) {
        Ok(types) => {
            let mut body = config_json(&node, &types);
            if let Some(codec) = contents {
                if let Err(e) = add_contents(&mut body, &types, codec) {
                    return (StatusCode::INTERNAL_SERVER_ERROR, e + "\n").into_response();
                }
            }
            (
                [(header::CONTENT_TYPE, "application/json")],
                body.to_string() + "\n",
            )
                .into_response()
        }
        Err(e) => bad(e.message().to_string()),
    }
}

/// `contents=1`: each resource of a [`config_json`] answer gets `contents`, its message in proto3
/// JSON (with `@type`), written by `codec` as a REST `DiscoveryResponse` of each type.
fn add_contents(
    body: &mut Value,
    types: &[SotwResponse],
    codec: &dyn JsonCodec,
) -> Result<(), String> {
    use prost::Message as _;
    let listed = body
        .get_mut("types")
        .and_then(Value::as_array_mut)
        .ok_or("no types in the answer")?;
    for (t, listed) in types.iter().zip(listed) {
        let list = t.resources.iter();
        let response = DiscoveryResponse {
            type_url: t.type_url.to_string(),
            version_info: t.version_info.to_string(),
            resources: list
                .map(|r| Any::decode(r.any_bytes().clone()).map_err(|e| e.to_string()))
                .collect::<Result<_, _>>()?,
            ..Default::default()
        };
        let json = codec.response_to_json(&response.encode_to_vec())?;
        let json: Value = serde_json::from_slice(&json).map_err(|e| e.to_string())?;
        let contents = match json.get("resources") {
            Some(Value::Array(items)) => items.clone(),
            _ => Vec::new(),
        };
        let resources = listed
            .get_mut("resources")
            .and_then(Value::as_array_mut)
            .ok_or("no resources in the answer")?;
        for (resource, content) in resources.iter_mut().zip(contents) {
            if let Value::Object(fields) = resource {
                fields.insert("contents".into(), content);
            }
        }
    }
    Ok(())
}

/// A JSON value as a `google.protobuf.Value`.
fn protobuf_value(value: Value) -> ProtobufValue {
    let kind = match value {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or_default()),
        Value::String(s) => Kind::StringValue(s),
        Value::Array(items) => Kind::ListValue(ListValue {
            values: items.into_iter().map(protobuf_value).collect(),
        }),
        Value::Object(fields) => Kind::StructValue(Struct {
            fields: fields
                .into_iter()
                .map(|(k, v)| (k, protobuf_value(v)))
                .collect(),
        }),
    };
    ProtobufValue { kind: Some(kind) }
}

/// What `GET /config` answers: the node, and per type the version and the resources (name,
/// version, constraints of the variant, the file it came from).
pub fn config_json(node: &Node, types: &[SotwResponse]) -> Value {
    let types: Vec<Value> = types
        .iter()
        .map(|t| {
            let list = t.resources.iter();
            let resources: Vec<Value> = list
                .map(|r| {
                    json!({
                        "name": &**r.name(),
                        "version": &**r.version(),
                        "constraints": r.constraints().map(|c| c.to_string()),
                        "origin": r.origin().map(|o| &**o),
                    })
                })
                .collect();
            json!({
                "type_url": &*t.type_url,
                "version": &*t.version_info,
                "resources": resources,
            })
        })
        .collect();
    json!({
        "node": {"id": node.id, "cluster": node.cluster},
        "types": types,
    })
}

/// Seconds since the Unix epoch.
fn unix(at: SystemTime) -> f64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The clients as `GET /clients` answers them: a JSON array, one object per stream.
pub fn clients_json(clients: &[ClientStatus]) -> Value {
    Value::Array(clients.iter().map(client_json).collect())
}

fn client_json(c: &ClientStatus) -> Value {
    let node = c.node.as_ref().map(|n| {
        json!({
            "id": n.id,
            "cluster": n.cluster,
            "user_agent_name": n.user_agent_name,
            "user_agent_version": n.user_agent_version,
        })
    });
    json!({
        "stream": c.stream,
        "node": node,
        "peer": c.peer.map(|p| p.to_string()),
        "flavor": c.flavor,
        "service": if c.ads { "ADS" } else { "per-type" },
        "connected_at": unix(c.connected_at),
        "counters": {
            "responses": c.counters.responses,
            "resources": c.counters.resources,
            "removed": c.counters.removed,
            "acks": c.counters.acks,
            "nacks": c.counters.nacks,
        },
        "types": c.types.iter().map(type_json).collect::<Vec<_>>(),
    })
}

fn type_json(t: &TypeStatus) -> Value {
    let status = resource_status(t).as_str_name();
    let last_sent = t.last_sent.as_ref().map(|s| {
        json!({
            "version": &*s.version,
            "nonce": s.nonce.as_str(),
            "at": unix(s.at),
            "resource_count": s.resource_count,
            "removed": s.removed,
            "resources": s.resources.iter().map(|r| json!({
                "name": &**r.name(),
                "version": &**r.version(),
                "origin": r.origin().map(|o| &**o),
            })).collect::<Vec<_>>(),
        })
    });
    let last_ack = t.last_ack.as_ref().map(|a| {
        json!({
            "version": &*a.version,
            "nonce": a.nonce,
            "at": unix(a.at),
        })
    });
    let last_nack = t.last_nack.as_ref().map(|n| {
        json!({
            "version": n.version.as_deref(),
            "nonce": n.nonce,
            "at": unix(n.at),
            "message": n.message,
            "origins": n.origins.iter().map(|o| &**o).collect::<Vec<_>>(),
            "details": nack_details(&n.message, &n.origins),
        })
    });
    let held = t.held.as_ref().map(|h| {
        json!({
            "version": &*h.version,
            "resources": h.resources,
        })
    });
    json!({
        "type_url": &*t.type_url,
        "status": status,
        "pending": t.pending,
        "held": held,
        "last_sent": last_sent,
        "last_ack": last_ack,
        "last_nack": last_nack,
    })
}
