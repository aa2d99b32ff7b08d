//! The admin API's status page, plain HTML with no external assets (a small inline script
//! reloads it every few seconds; `?refresh=0` turns that off):
//!
//! - `GET /`: the server (version, source, generation, readiness, a gated rollout's state), the
//!   clients as `xdsd status` prints them — NACKED and STALE first, each NACK's message and
//!   origins under its row — and the configuration graph (listeners -> routes -> clusters ->
//!   endpoints -> LEDS collections, from the store's reference index) as inline SVG, dangling
//!   references and unused resources marked.
//! - `GET /client?node=ID`: one client's streams, and per type its state, versions, NACK and
//!   the resources it was sent (name, version, origin).
//!
//! At scale: the summary line counts every client; the table shows [`PAGE_SIZE`] clients a page
//! (`?page=N`, NACKED and STALE first, so problems are on the first page) and can be narrowed to
//! node ids containing a text (`?q=TEXT`); the graph draws at most [`MAX_GRAPH_NODES`] resources
//! of each type (problems first) and counts the rest. Everything a client or a file controls
//! (node ids, messages, names, origins) is escaped.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use serde_json::Value;
use xdsd_core::clients::{ClientStatus, TypeStatus};
use xdsd_core::store::Snapshot;
use xdsd_core::{types, ServerHandle};

use super::fleet::{
    columns, short_type, short_version, ClientRow, NackInfo, RolloutView, Summary, TypeRow,
    TypeState,
};
use super::history::HistorySource;
use super::served::{self as served, marks, row_of, Replica};

/// Clients shown per page of `GET /`.
pub const PAGE_SIZE: usize = 100;

/// Resources of each type drawn in the graph; the others are counted.
pub const MAX_GRAPH_NODES: usize = 200;

/// What the page says about the program serving it.
#[derive(Debug, Clone, Default)]
pub struct PageInfo {
    /// The program's version ("xdsd 0.1.0").
    pub version: String,
    /// Where the resources come from ("directory /etc/xdsd").
    pub source: String,
}

#[derive(Clone)]
struct PageState {
    handle: ServerHandle,
    info: Arc<PageInfo>,
    /// The etcd prefix's history; None for a directory.
    history: Option<Arc<HistorySource>>,
}

/// The changes of the history the page shows.
pub const HISTORY_ROWS: usize = 10;

/// The page's routes (`/`, `/client`), to merge into the admin router; with `history`, the page
/// shows the last [`HISTORY_ROWS`] changes of the etcd prefix.
pub fn routes(handle: ServerHandle, info: PageInfo, history: Option<Arc<HistorySource>>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/client", get(client))
        .with_state(PageState {
            handle,
            info: Arc::new(info),
            history,
        })
}

/// `text` with the HTML metacharacters escaped, for element content and quoted attributes.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `text` as a URL query value.
fn query_value(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The page's style sheet, a real `.css` file.
const STYLE: &str = include_str!("page/page.css");

/// The page's HTML around its body, a real `.html` file: `{{title}}`, `{{style}}` and `{{body}}`
/// are filled in (the body and title escaped where they hold outside text), and its script
/// reloads the page every 5 s unless `?refresh=0`.
const TEMPLATE: &str = include_str!("page/page.html");

/// [`TEMPLATE`] with its places filled: `title` escaped here, `body` already HTML.
fn fill(title: &str, body: &str) -> String {
    let mut out = String::with_capacity(TEMPLATE.len() + STYLE.len() + body.len());
    let mut rest = TEMPLATE;
    while let Some(at) = rest.find("{{") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let Some(end) = after.find("}}") else {
            out.push_str(&rest[at..]);
            rest = "";
            break;
        };
        match &after[..end] {
            "title" => out.push_str(&escape(title)),
            "style" => out.push_str(STYLE),
            "body" => out.push_str(body),
            other => {
                out.push_str("{{");
                out.push_str(other);
                out.push_str("}}");
            }
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

fn document(title: &str, body: &str) -> Response {
    let html = fill(title, body);
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        html,
    )
        .into_response()
}

/// A type's state as the page (and `xdsd status`, through CSDS) shows it.
fn type_state(t: &TypeStatus) -> TypeState {
    if t.nacked {
        TypeState::Nacked
    } else if t.last_sent.is_none() && t.held.is_some() {
        // Reconnected holding what it is owed: nothing was (re)sent.
        TypeState::Synced
    } else if t.last_sent.is_none() {
        TypeState::NotSent
    } else if t.pending {
        TypeState::Stale
    } else {
        TypeState::Synced
    }
}

fn type_row(t: &TypeStatus) -> TypeRow {
    TypeRow {
        type_url: t.type_url.to_string(),
        state: type_state(t),
        version: t
            .running_version()
            .map(|v| v.to_string())
            .unwrap_or_default(),
        nack: t.last_nack.as_ref().filter(|_| t.nacked).map(|n| NackInfo {
            message: n.message.clone(),
            origins: n.origins.iter().map(|o| o.to_string()).collect(),
            version: n.version.as_deref().unwrap_or("").to_owned(),
        }),
        resources: Vec::new(),
    }
}

/// The streams as client rows (the streams of one node id are one client, as in CSDS), without
/// their resources: what the table needs.
fn rows(streams: &[ClientStatus]) -> Vec<ClientRow> {
    let mut rows: Vec<ClientRow> = Vec::new();
    let mut by_id: HashMap<&str, usize> = HashMap::new();
    for s in streams {
        let node = s.node.as_ref();
        let id = node.map(|n| n.id.as_str()).unwrap_or("");
        let at = match by_id.get(id).filter(|_| !id.is_empty()) {
            Some(at) => *at,
            None => {
                let agent = node
                    .map(|n| {
                        [n.user_agent_name.as_str(), n.user_agent_version.as_str()]
                            .iter()
                            .filter(|s| !s.is_empty())
                            .copied()
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                    .unwrap_or_default();
                rows.push(ClientRow {
                    id: id.to_owned(),
                    cluster: node.map(|n| n.cluster.clone()).unwrap_or_default(),
                    agent,
                    types: Vec::new(),
                });
                by_id.insert(id, rows.len() - 1);
                rows.len() - 1
            }
        };
        rows[at].types.extend(s.types.iter().map(type_row));
    }
    rows.sort_by(|a, b| b.state().cmp(&a.state()).then_with(|| a.id.cmp(&b.id)));
    rows
}

fn state_class(state: TypeState) -> &'static str {
    match state {
        TypeState::NotSent => "NOT_SENT",
        other => other.as_str(),
    }
}

fn client_link(id: &str) -> String {
    format!(
        "<a class=\"node\" href=\"/client?node={}\">{}</a>",
        query_value(id),
        escape(if id.is_empty() { "(no node yet)" } else { id })
    )
}

fn origins(list: &[String]) -> String {
    if list.is_empty() {
        return String::new();
    }
    let names: Vec<String> = list
        .iter()
        .map(|o| format!("<code class=\"origin\">{}</code>", escape(o)))
        .collect();
    format!(" <span class=\"origins\">from {}</span>", names.join(", "))
}

/// The clients table: one row per client, a row under it per NACK with its message and origins.
fn clients_table(out: &mut String, rows: &[ClientRow], types: &[String]) {
    out.push_str("<table id=\"clients\"><tr><th>node</th><th>cluster</th><th>agent</th>");
    for t in types {
        let _ = write!(
            out,
            "<th title=\"{}\">{}</th>",
            escape(t),
            escape(short_type(t))
        );
    }
    out.push_str("</tr>");
    for r in rows {
        let _ = write!(
            out,
            "<tr class=\"client\"><td>{}</td><td>{}</td><td>{}</td>",
            client_link(&r.id),
            escape(&r.cluster),
            escape(&r.agent)
        );
        for t in types {
            match r
                .types
                .iter()
                .filter(|x| &x.type_url == t)
                .max_by_key(|x| x.state)
            {
                Some(x) => {
                    let _ = write!(
                        out,
                        "<td class=\"{}\">{} <span class=\"mono\">{}</span></td>",
                        state_class(x.state),
                        x.state.as_str(),
                        escape(&x.versions(true))
                    );
                }
                None => out.push_str("<td class=\"muted\">-</td>"),
            }
        }
        out.push_str("</tr>");
        for t in &r.types {
            if let Some(n) = &t.nack {
                let version = if n.version.is_empty() {
                    String::new()
                } else {
                    format!(" version {}", escape(short_version(&n.version)))
                };
                let _ = write!(
                    out,
                    "<tr class=\"nack\"><td colspan=\"{}\">{} NACKED{version}: \
                     <span class=\"message\">{}</span>{}</td></tr>",
                    3 + types.len(),
                    escape(short_type(&t.type_url)),
                    escape(&n.message),
                    origins(&n.origins)
                );
            }
        }
    }
    out.push_str("</table>");
}

fn server_section(out: &mut String, state: &PageState) {
    let snapshot = state.handle.snapshot();
    let readiness = if state.handle.serving() {
        "<span class=\"SYNCED\">ready</span>"
    } else if state.handle.shutting_down() {
        "<span class=\"NACKED\">shutting down</span>"
    } else {
        "<span class=\"STALE\">not ready</span>"
    };
    let _ = write!(
        out,
        "<table class=\"server\"><tr><td>version</td><td>{}</td></tr>\
         <tr><td>source</td><td>{}</td></tr>\
         <tr><td>generation</td><td id=\"generation\">{}</td></tr>\
         <tr><td>readiness</td><td id=\"readiness\">{readiness}</td></tr>",
        escape(&state.info.version),
        escape(&state.info.source),
        snapshot.generation()
    );
    let versions: Vec<String> = snapshot
        .types()
        .map(|t| {
            format!(
                "{} <span class=\"mono\">{}</span> ({})",
                escape(short_type(t.type_url())),
                escape(short_version(t.version())),
                t.len()
            )
        })
        .collect();
    let _ = write!(
        out,
        "<tr><td>resources</td><td>{}</td></tr>",
        versions.join(", ")
    );
    if let Some(rollout) = state.handle.rollout() {
        let status = rollout.status_json();
        let name = status["state"].as_str().unwrap_or("?");
        let candidate = status["candidate"]["generation"]
            .as_u64()
            .map(|g| format!(", candidate generation {g}"))
            .unwrap_or_default();
        let canaries = status["canaries"].as_array().map(Vec::len).unwrap_or(0);
        let _ = write!(
            out,
            "<tr><td>rollout</td><td id=\"rollout\"><b>{}</b>{}, {} canaries",
            escape(name),
            escape(&candidate),
            canaries,
        );
        if let Some(view) = RolloutView::from_json(&status) {
            rollout_notes(out, &view, &rows(&state.handle.clients()));
        }
        let _ = write!(
            out,
            "<details><summary>details</summary><pre>{}</pre></details></td></tr>",
            escape(&serde_json::to_string_pretty(&status).unwrap_or_default())
        );
    }
    out.push_str("</table>");
}

/// Under the rollout's state: its halt, an empty cohort, a change held back after an abort, and
/// which state each client holds (the canaries first; up to [`PAGE_SIZE`] clients).
fn rollout_notes(out: &mut String, view: &RolloutView, rows: &[ClientRow]) {
    if let Some((node, type_url, message)) = &view.halt {
        let _ = write!(
            out,
            "<p class=\"NACKED\">halted: {} NACKed {}: {}</p>",
            escape(node),
            escape(short_type(type_url)),
            escape(message)
        );
    }
    for note in view.cohort_empty.iter().chain(&view.held_change) {
        let _ = write!(out, "<p class=\"STALE\">{}</p>", escape(note));
    }
    let mut clients: Vec<&ClientRow> = rows.iter().collect();
    clients.sort_by_key(|r| !view.is_canary(&r.id));
    out.push_str("<table class=\"holds\">");
    for r in clients.into_iter().take(PAGE_SIZE) {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>holds {}</td></tr>",
            if view.is_canary(&r.id) { "canary" } else { "" },
            escape(&r.id),
            view.holds(r).as_str()
        );
    }
    out.push_str("</table>");
}

async fn index(
    State(state): State<PageState>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let all = rows(&state.handle.clients());
    let mut out = String::with_capacity(16 * 1024);
    out.push_str("<h1>xdsd</h1>");
    server_section(&mut out, &state);
    if let Some(history) = &state.history {
        let replicas = history.replicas().all().await;
        history_section(&mut out, history.rows(HISTORY_ROWS).await, &replicas);
    }
    clients_section(&mut out, all, &query);
    out.push_str("<h2>Configuration</h2>");
    graph(&mut out, &state.handle.snapshot());
    document("xdsd status", &out)
}

/// The last changes of the etcd prefix (`GET /history`'s rows): revision, age, author, message,
/// counts, and which replicas serve each (`replicas`: this one and its peers, a gated rollout's
/// canaries apart), a replica behind the latest change marked; then the replicas, each with the
/// change it serves.
fn history_section(out: &mut String, rows: Result<Value, String>, replicas: &[Replica]) {
    out.push_str("<h2>Recent changes</h2>");
    let rows = match rows {
        Ok(Value::Array(rows)) => rows,
        Ok(_) => Vec::new(),
        Err(e) => {
            let _ = write!(out, "<p id=\"history\" class=\"NACKED\">{}</p>", escape(&e));
            replicas_table(out, replicas, &[]);
            return;
        }
    };
    if rows.is_empty() {
        out.push_str("<p id=\"history\">no change in etcd's history</p>");
        replicas_table(out, replicas, &rows);
        return;
    }
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let marks = marks(replicas);
    let at: Vec<Option<usize>> = marks.iter().map(|m| row_of(&rows, m)).collect();
    out.push_str(
        "<table id=\"history\"><tr><th>revision</th><th>age</th><th>author</th>\
         <th>message</th><th>changes</th><th>rollout</th><th>served by</th></tr>",
    );
    for (i, row) in rows.iter().enumerate() {
        let revision = row["revision"].as_i64().unwrap_or(0);
        let age = row["unix_ms"]
            .as_u64()
            .map(|at| age(now_ms.saturating_sub(at) / 1000))
            .unwrap_or_else(|| "-".into());
        let kind = row["kind"].as_str().unwrap_or("");
        let author = row["author"].as_str().unwrap_or("");
        let message = match (kind, row["message"].as_str().unwrap_or("")) {
            ("direct write", _) => "direct write".to_owned(),
            ("rollback", m) => format!(
                "rollback to {}{}{m}",
                row["rollback_to"],
                if m.is_empty() { "" } else { ": " }
            ),
            (_, m) => m.to_owned(),
        };
        let count = |key: &str| row[key]["count"].as_u64().unwrap_or(0);
        let served: Vec<String> = marks
            .iter()
            .zip(&at)
            .filter(|(_, at)| **at == Some(i))
            .map(|(m, _)| {
                if m.lags && i > 0 {
                    format!(
                        "<span class=\"served STALE\">{} (behind)</span>",
                        escape(&m.label)
                    )
                } else {
                    format!("<span class=\"served\">{}</span>", escape(&m.label))
                }
            })
            .collect();
        let _ = write!(
            out,
            "<tr class=\"change\"><td class=\"mono\">{revision}</td><td>{age}</td>\
             <td>{}</td><td>{}</td><td class=\"mono\">+{} ~{} -{}</td><td>{}</td><td>{}</td></tr>",
            escape(author),
            escape(message.lines().next().unwrap_or("")),
            count("added"),
            count("changed"),
            count("removed"),
            escape(row["rollout"].as_str().unwrap_or("")),
            served.join(", "),
        );
    }
    out.push_str("</table>");
    replicas_table(out, replicas, &rows);
}

/// The replicas under the page's last changes: each with the revision it serves, the change
/// that is, and whether it is behind the latest change (or could not be asked).
pub fn replicas_table(out: &mut String, replicas: &[Replica], rows: &[Value]) {
    out.push_str(
        "<table id=\"replicas\"><tr><th>replica</th><th>revision</th><th>serves</th></tr>",
    );
    let latest = rows.first().and_then(|r| r["revision"].as_i64());
    for r in replicas {
        let (revision, serves, class) = match &r.served {
            Err(e) => ("-".to_owned(), format!("not known: {e}"), "NACKED"),
            Ok(s) => match s.revision {
                None => (
                    "-".to_owned(),
                    "no revision (not loaded yet?)".to_owned(),
                    "STALE",
                ),
                Some(revision) => {
                    let mark = served::Mark {
                        revision,
                        label: String::new(),
                        lags: true,
                    };
                    let change = row_of(rows, &mark).and_then(|i| rows[i]["revision"].as_i64());
                    let lags = s.candidate_revision.is_none();
                    match (change, latest) {
                        (Some(c), Some(l)) if c == l => (
                            revision.to_string(),
                            format!("the latest change, {c}"),
                            "SYNCED",
                        ),
                        (Some(c), Some(l)) if lags => (
                            revision.to_string(),
                            format!("change {c}: behind, the latest change is {l}"),
                            "STALE",
                        ),
                        (Some(c), _) => (revision.to_string(), format!("change {c}"), ""),
                        (None, Some(l)) => (
                            revision.to_string(),
                            format!(
                                "a change older than those shown: behind, the latest change is \
                                 {l}"
                            ),
                            "STALE",
                        ),
                        (None, None) => (revision.to_string(), String::new(), ""),
                    }
                }
            },
        };
        let candidate = r
            .served
            .as_ref()
            .ok()
            .and_then(|s| s.candidate_revision)
            .map(|c| format!(" (canaries: {c})"))
            .unwrap_or_default();
        let _ = write!(
            out,
            "<tr class=\"replica\"><td>{}</td><td class=\"mono\">{revision}{candidate}</td>\
             <td class=\"{class}\">{}</td></tr>",
            escape(&r.name),
            escape(&serves)
        );
    }
    out.push_str("</table>");
}

/// `seconds` as an age: "42s", "5m", "3h", "2d".
fn age(seconds: u64) -> String {
    match seconds {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// The summary of every client, then the page `?page=N` of those whose node id contains
/// `?q=TEXT`: [`PAGE_SIZE`] rows, in the order of `all` (problems first).
fn clients_section(out: &mut String, mut all: Vec<ClientRow>, query: &HashMap<String, String>) {
    let summary = Summary::of(&all);
    let filter = query.get("q").map(String::as_str).unwrap_or("");
    if !filter.is_empty() {
        all.retain(|r| r.id.contains(filter));
    }
    let pages = all.len().div_ceil(PAGE_SIZE).max(1);
    let page = query
        .get("page")
        .and_then(|p| p.parse::<usize>().ok())
        .unwrap_or(1)
        .clamp(1, pages);
    let shown = &all[(page - 1) * PAGE_SIZE..(page * PAGE_SIZE).min(all.len())];
    let types = columns(&all);
    let _ = write!(
        out,
        "<h2>Clients</h2><div class=\"summary\" id=\"summary\">{}</div>\
         <form method=\"get\" action=\"/\">node id contains <input name=\"q\" value=\"{}\"> \
         <button>filter</button></form>",
        escape(&summary.line()),
        escape(filter)
    );
    clients_table(out, shown, &types);
    if pages > 1 {
        let _ = write!(
            out,
            "<p id=\"pages\">page {page} of {pages} ({} clients",
            all.len()
        );
        for (label, to) in [("previous", page - 1), ("next", page + 1)] {
            if (1..=pages).contains(&to) {
                let _ = write!(
                    out,
                    ", <a href=\"/?page={to}&amp;q={}\">{label}</a>",
                    query_value(filter)
                );
            }
        }
        out.push_str(")</p>");
    }
}

async fn client(
    State(state): State<PageState>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(id) = query.get("node") else {
        return (StatusCode::BAD_REQUEST, "GET /client needs ?node=ID\n").into_response();
    };
    let streams: Vec<ClientStatus> = state
        .handle
        .clients()
        .into_iter()
        .filter(|c| c.node.as_ref().map(|n| n.id.as_str()).unwrap_or("") == id)
        .collect();
    let mut out = String::with_capacity(8 * 1024);
    let _ = write!(
        out,
        "<p><a href=\"/\">&larr; all clients</a></p><h1>client <span id=\"node\">{}</span></h1>",
        escape(id)
    );
    if streams.is_empty() {
        out.push_str("<p>No connected client has this node id.</p>");
        let mut response = document("xdsd client", &out);
        *response.status_mut() = StatusCode::NOT_FOUND;
        return response;
    }
    if let Some(node) = streams.iter().find_map(|s| s.node.as_ref()) {
        let _ = write!(
            out,
            "<table class=\"server\"><tr><td>cluster</td><td>{}</td></tr>\
             <tr><td>agent</td><td>{} {}</td></tr></table>",
            escape(&node.cluster),
            escape(&node.user_agent_name),
            escape(&node.user_agent_version)
        );
    }
    for s in &streams {
        let _ = write!(
            out,
            "<h2>stream {} ({}, {}{})</h2>",
            s.stream,
            if s.ads { "ADS" } else { "per-type" },
            s.flavor,
            s.peer
                .map(|p| format!(", from {}", escape(&p.to_string())))
                .unwrap_or_default()
        );
        for t in &s.types {
            client_type(&mut out, t);
        }
    }
    document(&format!("xdsd client {id}"), &out)
}

/// One type of a client's page: its state, versions, NACK and resources.
fn client_type(out: &mut String, t: &TypeStatus) {
    let state = type_state(t);
    let sent = t.last_sent.as_ref();
    let _ = write!(
        out,
        "<h3>{} <span class=\"{}\">{}</span></h3>\
         <p class=\"muted\">{}: sent version {}, ACKed version {}</p>",
        escape(short_type(&t.type_url)),
        state_class(state),
        state.as_str(),
        escape(&t.type_url),
        escape(sent.map(|s| &*s.version).unwrap_or("-")),
        escape(t.last_ack.as_ref().map(|a| &*a.version).unwrap_or("-"))
    );
    if let Some(held) = &t.held {
        let what = if held.version.is_empty() {
            format!("{} resources", held.resources)
        } else {
            format!("version {}", held.version)
        };
        let _ = write!(
            out,
            "<p class=\"muted\">reconnected holding {}</p>",
            escape(&what)
        );
    }
    if let Some(n) = t.last_nack.as_ref().filter(|_| t.nacked) {
        let names: Vec<String> = n.origins.iter().map(|o| o.to_string()).collect();
        let _ = write!(
            out,
            "<table><tr class=\"nack\"><td>NACK of version {}: \
             <span class=\"message\">{}</span>{}</td></tr></table>",
            escape(n.version.as_deref().unwrap_or("?")),
            escape(&n.message),
            origins(&names)
        );
    }
    let Some(sent) = sent else { return };
    out.push_str(
        "<table class=\"resources\"><tr><th>resource</th><th>version</th><th>origin</th></tr>",
    );
    for r in sent.resources.iter() {
        let _ = write!(
            out,
            "<tr><td class=\"mono\">{}</td><td class=\"mono\">{}</td><td>{}</td></tr>",
            escape(r.name()),
            escape(short_version(r.version())),
            escape(r.origin().map(|o| &**o).unwrap_or("-"))
        );
    }
    out.push_str("</table>");
    if sent.resource_count > sent.resources.len() {
        let _ = write!(
            out,
            "<p class=\"muted\">the first {} of the {} resources of the last response</p>",
            sent.resources.len(),
            sent.resource_count
        );
    }
}

/// The graph's columns: listeners, routes, clusters, endpoints, LEDS collections.
const GRAPH_TYPES: [&str; 5] = [
    types::LISTENER,
    types::ROUTE_CONFIGURATION,
    types::CLUSTER,
    types::CLUSTER_LOAD_ASSIGNMENT,
    types::LB_ENDPOINT,
];

/// The column of LEDS: its nodes are glob collections of `LbEndpoint` (xRFC TP1), each with
/// its count of members, not the members one by one (a cluster may have 10,000).
const LEDS_COLUMN: usize = 4;

const COLUMN: usize = 250;
const NODE_W: usize = 200;
const ROW: usize = 26;
const TOP: usize = 30;
const LABEL_CHARS: usize = 26;

/// A name cut to fit a node's box. An xdstp name shows its id (and context parameters): its
/// scheme, authority and type fill the box and say less (the full name is the node's title).
fn label(name: &str) -> String {
    let name = match xdsd_core::xdstp::XdstpName::parse(name) {
        Ok(x) if x.query().is_empty() => x.id().to_owned(),
        Ok(x) => format!("{}?{}", x.id(), x.query()),
        Err(_) => name.to_owned(),
    };
    let name = name.as_str();
    if name.chars().count() <= LABEL_CHARS {
        name.to_owned()
    } else {
        let cut: String = name.chars().take(LABEL_CHARS - 1).collect();
        format!("{cut}…")
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Mark {
    Used,
    Unused,
    Missing,
}

/// The configuration graph as inline SVG: one column per type, an edge per reference between
/// them; a reference to a resource the store does not have is drawn to a red dashed node
/// ("missing"), a route, cluster or endpoint resource nothing refers to is grey and dashed
/// ("unused"). LEDS is drawn as collections: a ClusterLoadAssignment's edge goes to the glob
/// collection it names, shown with its count of members; a collection with no members is not
/// missing (it is not dangling), one nothing refers to is unused.
fn graph(out: &mut String, snapshot: &Snapshot) {
    let mut referenced: BTreeSet<(usize, String)> = BTreeSet::new();
    let mut edges: Vec<((usize, String), (usize, String))> = Vec::new();
    let mut missing: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
    for (col, t) in GRAPH_TYPES.iter().enumerate() {
        let Some(ts) = snapshot.get(t) else { continue };
        for r in ts.iter() {
            for reference in r.references() {
                let Some(to) = GRAPH_TYPES.iter().position(|g| *g == reference.type_url) else {
                    continue;
                };
                referenced.insert((to, reference.name.to_string()));
                if !reference.collection
                    && snapshot
                        .resource(reference.type_url, &reference.name)
                        .is_none()
                {
                    missing
                        .entry(to)
                        .or_default()
                        .insert(reference.name.to_string());
                }
                edges.push((
                    (col, r.name().to_string()),
                    (to, reference.name.to_string()),
                ));
            }
        }
    }
    // Each node: its name, what its title says after it (its file, or a collection's members),
    // its mark.
    let mut columns: Vec<Vec<(String, String, Mark)>> = vec![Vec::new(); GRAPH_TYPES.len()];
    let mut hidden = [0usize; GRAPH_TYPES.len()];
    for (col, t) in GRAPH_TYPES.iter().enumerate() {
        let mut names: BTreeMap<String, (String, Mark)> = BTreeMap::new();
        if col == LEDS_COLUMN {
            columns[col] = collections(snapshot, &referenced, &mut hidden[col]);
            continue;
        }
        if let Some(ts) = snapshot.get(t) {
            for r in ts.iter() {
                let used = col == 0 || referenced.contains(&(col, r.name().to_string()));
                names.entry(r.name().to_string()).or_insert((
                    r.origin().map(|o| format!("from {o}")).unwrap_or_default(),
                    if used { Mark::Used } else { Mark::Unused },
                ));
            }
        }
        for name in missing.get(&col).into_iter().flatten() {
            names.insert(name.clone(), (String::new(), Mark::Missing));
        }
        // Problems first, so that a capped column still shows them.
        let mut list: Vec<(String, String, Mark)> =
            names.into_iter().map(|(n, (o, m))| (n, o, m)).collect();
        list.sort_by_key(|(_, _, m)| *m == Mark::Used);
        hidden[col] = list.len().saturating_sub(MAX_GRAPH_NODES);
        list.truncate(MAX_GRAPH_NODES);
        columns[col] = list;
    }
    let place: HashMap<(usize, &str), usize> = columns
        .iter()
        .enumerate()
        .flat_map(|(c, list)| {
            list.iter()
                .enumerate()
                .map(move |(i, n)| ((c, n.0.as_str()), i))
        })
        .collect();
    let tallest = columns.iter().map(Vec::len).max().unwrap_or(0).max(1);
    let width = COLUMN * GRAPH_TYPES.len();
    let height = TOP + tallest * ROW + 10;
    let _ = write!(
        out,
        "<svg id=\"graph\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" \
         height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\" \
         aria-label=\"configuration graph\">"
    );
    for (col, t) in GRAPH_TYPES.iter().enumerate() {
        let more = if hidden[col] > 0 {
            format!(" (+{} more)", hidden[col])
        } else {
            String::new()
        };
        let _ = write!(
            out,
            "<text x=\"{}\" y=\"16\" font-weight=\"bold\">{}{}</text>",
            col * COLUMN + 10,
            short_type(t),
            more
        );
    }
    let y = |i: usize| TOP + i * ROW;
    for ((from_col, from), (to_col, to)) in &edges {
        let (Some(a), Some(b)) = (
            place.get(&(*from_col, from.as_str())),
            place.get(&(*to_col, to.as_str())),
        ) else {
            continue;
        };
        let _ = write!(
            out,
            "<line class=\"edge\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#999\"/>",
            from_col * COLUMN + 10 + NODE_W,
            y(*a) + 10,
            to_col * COLUMN + 10,
            y(*b) + 10
        );
    }
    for (col, list) in columns.iter().enumerate() {
        for (i, (name, origin, mark)) in list.iter().enumerate() {
            let (class, fill, stroke, dash, note) = match mark {
                Mark::Used => ("resource", "#eef4ff", "#4a6fa5", "", ""),
                Mark::Unused => (
                    "resource unused",
                    "#f2f2f2",
                    "#999",
                    " stroke-dasharray=\"4 3\"",
                    " (unused)",
                ),
                Mark::Missing => (
                    "resource missing",
                    "#fdecea",
                    "#c62828",
                    " stroke-dasharray=\"4 3\"",
                    " (missing)",
                ),
            };
            let title = if origin.is_empty() {
                format!("{name}{note}")
            } else {
                format!("{name}{note} {origin}")
            };
            let _ = write!(
                out,
                "<g class=\"{class}\" data-type=\"{}\"><title>{}</title>\
                 <rect x=\"{}\" y=\"{}\" width=\"{NODE_W}\" height=\"20\" rx=\"4\" \
                 fill=\"{fill}\" stroke=\"{stroke}\"{dash}/>\
                 <text x=\"{}\" y=\"{}\">{}{}</text></g>",
                short_type(GRAPH_TYPES[col]),
                escape(&title),
                col * COLUMN + 10,
                y(i),
                col * COLUMN + 16,
                y(i) + 14,
                escape(&label(name)),
                if *mark == Mark::Used { "" } else { " ⚠" }
            );
        }
    }
    out.push_str(
        "</svg><p class=\"muted\">Red dashed: referenced but missing; grey dashed: nothing \
         refers to it. Hover a resource for its full name and file.</p>",
    );
}

/// The LEDS column: the glob collections of `LbEndpoint` the store has members of or a
/// ClusterLoadAssignment refers to, each with its count of members ("2 members"); problems
/// (unused) first, at most [`MAX_GRAPH_NODES`] (the others counted in `hidden`).
fn collections(
    snapshot: &Snapshot,
    referenced: &BTreeSet<(usize, String)>,
    hidden: &mut usize,
) -> Vec<(String, String, Mark)> {
    let mut members: BTreeMap<String, usize> = BTreeMap::new();
    for r in snapshot
        .get(types::LB_ENDPOINT)
        .into_iter()
        .flat_map(|t| t.iter())
    {
        if let Some(c) = xdsd_core::xdstp::collection_of(r.name()) {
            *members.entry(c).or_default() += 1;
        }
    }
    for (_, glob) in referenced.range((LEDS_COLUMN, String::new())..) {
        members.entry(glob.clone()).or_default();
    }
    let mut list: Vec<(String, String, Mark)> = members
        .into_iter()
        .map(|(glob, n)| {
            let used = referenced.contains(&(LEDS_COLUMN, glob.clone()));
            let count = if n == 1 {
                "1 member".to_owned()
            } else {
                format!("{n} members")
            };
            let mark = if used { Mark::Used } else { Mark::Unused };
            (glob, count, mark)
        })
        .collect();
    list.sort_by_key(|(_, _, m)| *m == Mark::Used);
    *hidden = list.len().saturating_sub(MAX_GRAPH_NODES);
    list.truncate(MAX_GRAPH_NODES);
    list
}

#[cfg(test)]
mod tests;
