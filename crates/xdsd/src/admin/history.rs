//! `GET /history`: the etcd prefix's history as JSON, the same rows as
//! `xdsd history --output json` (newest first) with each one's `served`: the replicas that serve
//! it (see `served`); and the last changes the status page shows. A directory or an upstream has
//! no history of its own: 404, saying so.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::Mutex;
use xdsd_etcd::{Etcd, EtcdOptions};

use super::served::{marks, with_served, Replicas};

/// Rows `GET /history` answers without `?limit=N`.
const DEFAULT_LIMIT: usize = crate::history::DEFAULT_LIMIT as usize;

/// The most rows one request may ask for (each is a revision etcd replays).
pub const MAX_LIMIT: usize = 1000;

/// How long etcd may take to answer a history request.
const HISTORY_TIMEOUT: Duration = Duration::from_secs(5);

/// What a server whose resources come from `source` (a directory, an upstream) answers: only
/// an etcd prefix has a history.
fn no_history(source: &str) -> String {
    format!(
        "no history: the resources come from {source}, which keeps none (only an etcd prefix has \
         one, served by `xdsd serve --etcd-endpoints`); a directory kept in git has git's history"
    )
}

/// How long an answer is reused: the status page reloads every 5 s, and each read replays the
/// prefix's revisions in etcd.
const REUSE: Duration = Duration::from_secs(2);

/// The history of the etcd prefix being served: one connection, made at the first request; one
/// read at a time, its answer reused for [`REUSE`] (so that clients polling the API or the page
/// cost etcd one replay every 2 s at most).
pub struct HistorySource {
    options: EtcdOptions,
    state: Mutex<Held>,
    /// This replica and its peers: which revision each serves.
    replicas: Replicas,
}

#[derive(Default)]
struct Held {
    etcd: Option<Etcd>,
    /// The last answer: when, for which limit, at which revision this replica served.
    last: Option<(Instant, usize, Option<i64>, Value)>,
}

impl HistorySource {
    /// The history of the prefix `options` name, served by `replicas`.
    pub fn new(options: EtcdOptions, replicas: Replicas) -> Arc<HistorySource> {
        Arc::new(HistorySource {
            options,
            state: Mutex::new(Held::default()),
            replicas,
        })
    }

    /// This replica and its peers.
    pub fn replicas(&self) -> &Replicas {
        &self.replicas
    }

    /// The newest `limit` changes as `xdsd history --output json` prints them, or why not. (An
    /// answer is reused for [`REUSE`], unless this replica applied a change since.)
    pub async fn rows(&self, limit: usize) -> Result<Value, String> {
        let mut state = self.state.lock().await;
        let serving = self.replicas.this_revision();
        if let Some((at, l, revision, rows)) = &state.last {
            if *l == limit && *revision == serving && at.elapsed() < REUSE {
                return Ok(rows.clone());
            }
        }
        let read = async {
            let etcd = match &state.etcd {
                Some(etcd) => etcd.clone(),
                None => {
                    let etcd = Etcd::connect(&self.options)
                        .await
                        .map_err(|e| format!("cannot connect to etcd: {e}"))?;
                    state.etcd = Some(etcd.clone());
                    etcd
                }
            };
            crate::history::rows(&etcd, limit)
                .await
                .map_err(|e| format!("cannot read the history: {e}"))
        };
        let rows = tokio::time::timeout(HISTORY_TIMEOUT, read)
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "etcd did not answer within {}s",
                    HISTORY_TIMEOUT.as_secs()
                ))
            })?;
        state.last = Some((Instant::now(), limit, serving, rows.clone()));
        Ok(rows)
    }
}

/// The route `GET /history[?limit=N]`, over the prefix's history (None for a directory or an
/// upstream: 404, saying that `source` keeps none).
pub fn routes(history: Option<Arc<HistorySource>>, source: &str) -> Router {
    let history = history.ok_or_else(|| Arc::new(no_history(source)));
    Router::new()
        .route("/history", get(history_rows))
        .with_state(history)
}

async fn history_rows(
    State(history): State<Result<Arc<HistorySource>, Arc<String>>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let history = match history {
        Ok(history) => history,
        Err(none) => return json_error(StatusCode::NOT_FOUND, none.to_string()),
    };
    let limit = match query.get("limit").map(|l| l.parse::<usize>()) {
        None => DEFAULT_LIMIT,
        Some(Ok(n)) if (1..=MAX_LIMIT).contains(&n) => n,
        Some(_) => {
            return json_error(
                StatusCode::BAD_REQUEST,
                format!("limit must be a number from 1 to {MAX_LIMIT}"),
            )
        }
    };
    match history.rows(limit).await {
        Ok(rows) => {
            let rows = with_served(rows, &marks(&history.replicas.all().await));
            (
                [(header::CONTENT_TYPE, "application/json")],
                format!("{rows}\n"),
            )
                .into_response()
        }
        Err(e) => json_error(StatusCode::BAD_GATEWAY, e),
    }
}

fn json_error(status: StatusCode, message: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        format!("{}\n", json!({ "error": message })),
    )
        .into_response()
}
