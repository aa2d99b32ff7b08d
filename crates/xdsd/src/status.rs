//! `xdsd status`: the fleet at a glance, from CSDS (`ClientStatusDiscoveryService`), so it works
//! against xdsd and any other CSDS server. One line per client with its state per type, NACKED
//! and STALE first, then a summary line; with NODE, that client's resources and NACKs; with
//! `--wait`, polls until every client is synced or the timeout passes.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::admin::fleet::{
    behind, client_rows, columns, row_json, rows_json, short_type, short_version, ClientRow,
    ReplicaView, RolloutView, Summary, TypeRow, TypeState,
};
use anyhow::Context;
use envoy_types::pb::envoy::r#type::matcher::v3::string_matcher::MatchPattern;
use envoy_types::pb::envoy::r#type::matcher::v3::{NodeMatcher, StringMatcher};
use envoy_types::pb::envoy::service::status::v3::client_status_discovery_service_client::ClientStatusDiscoveryServiceClient;
use envoy_types::pb::envoy::service::status::v3::ClientStatusRequest;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use xdsd_core::csds::{Served, ROLLOUT_METADATA, SERVED_METADATA};

/// The largest CSDS answer read (a fleet of 10,000 clients with their resource names fits).
const MAX_ANSWER_BYTES: usize = 256 * 1024 * 1024;

/// How often `--wait` asks again.
const POLL: Duration = Duration::from_millis(500);

#[derive(clap::Args, Debug)]
pub(crate) struct StatusArgs {
    /// Show only this client (its node id), with every resource it holds and its NACKs.
    #[arg(value_name = "NODE")]
    node: Option<String>,

    /// The CSDS server: xdsd's --listen address (host:port, or an http:// or https:// URL).
    /// Repeat it (or separate addresses by commas) for several replicas: their clients are
    /// listed together, with the etcd revision each replica serves and those behind marked; a
    /// replica that does not answer is listed UNREACHABLE with why (exit 1; 2 when none answers).
    #[arg(
        long,
        value_name = "ADDR",
        env = "XDSD_STATUS_SERVER",
        default_value = "127.0.0.1:18000",
        value_delimiter = ','
    )]
    server: Vec<String>,

    /// PEM CA certificate(s) to verify the server's certificate with: connects over TLS.
    #[arg(long, value_name = "FILE", env = "XDSD_STATUS_TLS_CA")]
    tls_ca: Option<PathBuf>,

    /// PEM client certificate for mutual TLS (with --tls-key).
    #[arg(
        long,
        value_name = "FILE",
        env = "XDSD_STATUS_TLS_CERT",
        requires = "tls_key"
    )]
    tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert.
    #[arg(
        long,
        value_name = "FILE",
        env = "XDSD_STATUS_TLS_KEY",
        requires = "tls_cert"
    )]
    tls_key: Option<PathBuf>,

    /// With NODE only (an error without): xdsd's admin address (host:port, plaintext), to show
    /// each resource's own version and the file (or key) it came from, which CSDS does not carry.
    #[arg(long, value_name = "ADDR", env = "XDSD_STATUS_ADMIN")]
    admin: Option<String>,

    /// `text` (a table for people) or `json` (for scripts).
    #[arg(
        long,
        value_name = "FORMAT",
        value_enum,
        env = "XDSD_STATUS_OUTPUT",
        default_value = "text"
    )]
    output: Output,

    /// Wait until every client is synced, a gated rollout promoted and no replica behind (exit
    /// 0), or --timeout passes (exit 1, listing the clients that are not); at once (exit 1) when
    /// the rollout halts or a change is held back after an abort.
    #[arg(long, env = "XDSD_STATUS_WAIT")]
    wait: bool,

    /// How long --wait waits (and how long one request may take), e.g. 60s, 2m.
    #[arg(
        long,
        value_name = "DURATION",
        env = "XDSD_STATUS_TIMEOUT",
        default_value = "60s",
        value_parser = crate::parse_duration
    )]
    timeout: Duration,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Output {
    Text,
    Json,
}

/// Runs `xdsd status`: 0 when every server answered and every client shown is synced; 2 when no
/// server answered; 1 otherwise (a server unreachable among others, a client not synced) or on
/// an error.
pub(crate) fn run(args: StatusArgs) -> ExitCode {
    if args.admin.is_some() && args.node.is_none() {
        eprintln!(
            "xdsd status: --admin is read only with NODE (to show that client's resource versions \
             and files); give NODE, or leave --admin (and XDSD_STATUS_ADMIN) out"
        );
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("xdsd status: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(status(&args)) {
        Ok(outcome) => outcome.code(),
        Err(e) => {
            eprintln!("xdsd status: {}", crate::error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// The TLS files `connect` presents: a CA to verify the server with, and a client certificate
/// with its key.
#[derive(Default)]
pub(crate) struct ClientTls<'a> {
    pub(crate) ca: Option<&'a std::path::Path>,
    pub(crate) cert_key: Option<(&'a std::path::Path, &'a std::path::Path)>,
}

/// A gRPC channel to `server` (host:port, or an http:// or https:// URL): over TLS for an
/// https:// URL or with `tls` files, each request within `timeout`.
pub(crate) async fn connect(
    server: &str,
    tls_files: &ClientTls<'_>,
    timeout: Duration,
) -> anyhow::Result<Channel> {
    let (endpoint, url) = endpoint(server, tls_files, timeout)?;
    dial(server, &url, &endpoint).await
}

/// The endpoint of `server` and its URL: an error here (not an address, a TLS file that cannot
/// be read) is the command's, not the server's.
fn endpoint(
    server: &str,
    tls_files: &ClientTls<'_>,
    timeout: Duration,
) -> anyhow::Result<(Endpoint, String)> {
    let tls = tls_files.ca.is_some() || tls_files.cert_key.is_some();
    let url = if server.contains("://") {
        server.to_owned()
    } else if tls {
        format!("https://{server}")
    } else {
        format!("http://{server}")
    };
    let mut endpoint = Endpoint::from_shared(url.clone())
        .with_context(|| format!("--server {server:?} is not an address"))?
        .connect_timeout(timeout.min(Duration::from_secs(10)))
        .timeout(timeout);
    if tls || url.starts_with("https://") {
        let mut config = ClientTlsConfig::new().with_enabled_roots();
        if let Some(ca) = tls_files.ca {
            let pem = std::fs::read(ca)
                .with_context(|| format!("--tls-ca {}: cannot read it", ca.display()))?;
            config = config.ca_certificate(Certificate::from_pem(pem));
        }
        if let Some((cert, key)) = tls_files.cert_key {
            let cert = std::fs::read(cert)
                .with_context(|| format!("--tls-cert {}: cannot read it", cert.display()))?;
            let key = std::fs::read(key)
                .with_context(|| format!("--tls-key {}: cannot read it", key.display()))?;
            config = config.identity(Identity::from_pem(cert, key));
        }
        endpoint = endpoint
            .tls_config(config)
            .context("setting up TLS to the server")?;
    }
    Ok((endpoint, url))
}

/// Connects to `endpoint` (`server`, at `url`).
async fn dial(server: &str, url: &str, endpoint: &Endpoint) -> anyhow::Result<Channel> {
    match endpoint.connect().await {
        Ok(channel) => Ok(channel),
        Err(e) => {
            let error = anyhow::Error::from(e);
            let chain = crate::error_chain(&error);
            if chain.contains("h2 protocol error") || chain.contains("frame with invalid size") {
                Err(not_grpc(server))
            } else {
                Err(error.context(format!("cannot connect to the CSDS server at {url}")))
            }
        }
    }
}

/// The error for a `--server` that answered HTTP, not gRPC.
fn not_grpc(server: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "{server} answered as an HTTP endpoint, not xDS gRPC (it is not xdsd's xDS port: the \
         admin API, or Envoy's admin?): give --server the address xdsd serves xDS on, its --listen"
    )
}

/// A CSDS call's error: a status that is not gRPC's says the server is not a gRPC one.
fn csds_error(server: &str, status: &tonic::Status) -> anyhow::Error {
    let message = status.message();
    if message.contains("grpc-status header missing")
        || message.contains("invalid compression flag")
        || message.contains("invalid content-type")
    {
        not_grpc(server)
    } else {
        anyhow::anyhow!("CSDS: {}: {}", status.code(), message)
    }
}

/// What the CSDS answers say: the clients (of every server), xdsd's gated rollout when it has
/// one (the first server's that does), and what each server serves.
struct Answer {
    rows: Vec<ClientRow>,
    /// `GET /rollout`'s JSON, as xdsd's CSDS answer carries it.
    rollout_json: Option<serde_json::Value>,
    rollout: Option<RolloutView>,
    /// Each server that answered, in order, with what it serves (none from a server that is not
    /// xdsd).
    replicas: Vec<ReplicaView>,
    /// Each server that did not answer, in order, and why.
    unreachable: Vec<(String, String)>,
}

impl Answer {
    /// Every server answered, every client synced, no rollout left to finish, and no replica
    /// behind.
    fn done(&self) -> bool {
        self.unreachable.is_empty()
            && Summary::of(&self.rows).all_synced()
            && self.rollout.as_ref().is_none_or(RolloutView::done)
            && !behind(&self.replicas).contains(&true)
    }
}

/// One `--server`: where it is, and its CSDS client once connected.
struct Server {
    name: String,
    url: String,
    endpoint: Endpoint,
    client: Option<ClientStatusDiscoveryServiceClient<Channel>>,
}

impl Server {
    /// Its client, connecting first when it has none (again after a failure).
    async fn client(&mut self) -> anyhow::Result<&mut ClientStatusDiscoveryServiceClient<Channel>> {
        if self.client.is_none() {
            let channel = dial(&self.name, &self.url, &self.endpoint).await?;
            self.client = Some(
                ClientStatusDiscoveryServiceClient::new(channel)
                    .max_decoding_message_size(MAX_ANSWER_BYTES),
            );
        }
        self.client
            .as_mut()
            .ok_or_else(|| anyhow::anyhow!("no client"))
    }
}

/// The request for the clients (only NODE's with a node).
fn request(node: Option<&str>) -> ClientStatusRequest {
    ClientStatusRequest {
        node_matchers: node
            .map(|id| NodeMatcher {
                node_id: Some(StringMatcher {
                    match_pattern: Some(MatchPattern::Exact(id.to_owned())),
                    ignore_case: false,
                }),
                node_metadatas: vec![],
            })
            .into_iter()
            .collect(),
        exclude_resource_contents: true,
        ..Default::default()
    }
}

/// What an xdsd's CSDS answer says it serves ([`SERVED_METADATA`]); `None` from another server.
pub(crate) fn served_of<T>(answer: &tonic::Response<T>) -> Option<Served> {
    answer
        .metadata()
        .get_bin(SERVED_METADATA)
        .and_then(|v| v.to_bytes().ok())
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|json| Served::from_json(&json))
}

/// The clients every server that answers reports (only NODE's with a node), what each serves,
/// and which did not answer and why.
async fn fetch(servers: &mut [Server], node: Option<&str>) -> Answer {
    let mut out = Answer {
        rows: Vec::new(),
        rollout_json: None,
        rollout: None,
        replicas: Vec::new(),
        unreachable: Vec::new(),
    };
    let mut configs = Vec::new();
    for server in servers.iter_mut() {
        let asked = match server.client().await {
            Ok(client) => client
                .fetch_client_status(request(node))
                .await
                .map_err(|status| csds_error(&server.name, &status)),
            Err(e) => Err(e),
        };
        let answer = match asked {
            Ok(answer) => answer,
            Err(e) => {
                // Connected anew at the next ask.
                server.client = None;
                out.unreachable
                    .push((server.name.clone(), crate::error_chain(&e)));
                continue;
            }
        };
        let server = &server.name;
        if out.rollout_json.is_none() {
            out.rollout_json = answer
                .metadata()
                .get_bin(ROLLOUT_METADATA)
                .and_then(|v| v.to_bytes().ok())
                .and_then(|b| serde_json::from_slice(&b).ok());
        }
        out.replicas.push(ReplicaView {
            name: server.clone(),
            served: served_of(&answer),
        });
        configs.extend(answer.into_inner().config);
    }
    out.rows = client_rows(&configs);
    out.rollout = out.rollout_json.as_ref().and_then(RolloutView::from_json);
    out
}

/// How `status` ended: every client synced (and the rest `--wait` waits for), or not; and how
/// many of the servers did not answer.
pub(crate) struct Outcome {
    done: bool,
    unreachable: usize,
    servers: usize,
}

impl Outcome {
    /// 0 when done; 2 when no server answered; 1 otherwise (a server unreachable among others
    /// that answered, a client not synced).
    fn code(&self) -> ExitCode {
        if self.unreachable > 0 && self.unreachable == self.servers {
            ExitCode::from(2)
        } else if self.done && self.unreachable == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    }
}

async fn status(args: &StatusArgs) -> anyhow::Result<Outcome> {
    let tls = ClientTls {
        ca: args.tls_ca.as_deref(),
        cert_key: args.tls_cert.as_deref().zip(args.tls_key.as_deref()),
    };
    let mut servers = Vec::new();
    for server in &args.server {
        let (endpoint, url) = endpoint(server, &tls, args.timeout)?;
        servers.push(Server {
            name: server.clone(),
            url,
            endpoint,
            client: None,
        });
    }
    let deadline = tokio::time::Instant::now() + args.timeout;
    let node = args.node.as_deref();
    let mut answer = fetch(&mut servers, node).await;
    if args.wait {
        // A halted rollout, or a change held back after an abort, moves no further: no wait.
        while !answer.done()
            && !answer.rollout.as_ref().is_some_and(RolloutView::stuck)
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(POLL.min(deadline - tokio::time::Instant::now())).await;
            answer = fetch(&mut servers, node).await;
        }
    }
    let done = answer.done();
    let Answer {
        mut rows,
        rollout_json,
        rollout,
        replicas,
        unreachable,
    } = answer;
    let outcome = |done: bool| Outcome {
        done,
        unreachable: unreachable.len(),
        servers: servers.len(),
    };
    for (server, why) in &unreachable {
        eprintln!("xdsd status: {server} is unreachable: {}", clean(why));
    }
    if unreachable.len() == servers.len() {
        // Nothing to show: no server answered.
        return Ok(outcome(false));
    }
    if let (Some(admin), Some(node)) = (&args.admin, &args.node) {
        // Read even when NODE is not connected: a wrong --admin is said, not skipped.
        let clients = admin_clients(admin, args.timeout).await?;
        if let Some(row) = rows.first_mut() {
            add_origins(row, &clients, node);
        }
    }
    let summary = Summary::of(&rows);
    let lagging = behind(&replicas);
    let mut out = std::io::stdout().lock();
    let mut text = match (args.output, &args.node) {
        (Output::Json, None) => {
            let mut json = rows_json(&rows);
            if let Some(r) = &rollout_json {
                json["rollout"] = r.clone();
            }
            if replicas.iter().any(|r| r.served.is_some()) || !unreachable.is_empty() {
                json["replicas"] = replicas_json(&replicas, &lagging, &unreachable);
            }
            json.to_string() + "\n"
        }
        (Output::Json, Some(_)) => match rows.first() {
            Some(row) => row_json(row).to_string() + "\n",
            None => "null\n".to_owned(),
        },
        (Output::Text, None) => {
            table(&rows, colours())
                + &replicas_text(&replicas, &lagging)
                + &unreachable_text(&unreachable)
        }
        (Output::Text, Some(id)) => match rows.first() {
            Some(row) => detail(row, colours()),
            None => format!("no client with node id {id:?} is connected\n"),
        },
    };
    if let (Output::Text, Some(r)) = (args.output, &rollout) {
        text.push_str(&rollout_text(r, &rows));
    }
    out.write_all(text.as_bytes())
        .context("writing the answer")?;
    if let Some((node, type_url, message)) = rollout.as_ref().and_then(|r| r.halt.as_ref()) {
        eprintln!(
            "xdsd status: the rollout halted: {} NACKed {}: {}",
            clean(node),
            short_type(type_url),
            clean(message)
        );
    } else if let Some(held) = rollout.as_ref().and_then(|r| r.held_change.as_ref()) {
        eprintln!("xdsd status: {held}");
    } else if args.wait && !summary.all_synced() {
        eprintln!(
            "xdsd status: not every client synced within {:?}",
            args.timeout
        );
    } else if args.wait && lagging.contains(&true) {
        eprintln!(
            "xdsd status: a replica still serves an older state after {:?}",
            args.timeout
        );
    } else if args.wait && !unreachable.is_empty() {
        eprintln!(
            "xdsd status: a server was still unreachable after {:?}",
            args.timeout
        );
    } else if args.wait && !done {
        eprintln!(
            "xdsd status: the rollout did not reach the whole fleet within {:?}",
            args.timeout
        );
    }
    Ok(outcome(done && (args.node.is_none() || !rows.is_empty())))
}

/// The servers that did not answer, one line each, under the table.
fn unreachable_text(unreachable: &[(String, String)]) -> String {
    let mut out = String::new();
    for (i, (server, why)) in unreachable.iter().enumerate() {
        if i == 0 {
            out.push('\n');
        }
        out.push_str(&format!(
            "replica {} UNREACHABLE: {}\n",
            clean(server),
            clean(why)
        ));
    }
    out
}

/// Each replica that says what it serves, one line each: `replica ADDR serves etcd revision
/// 42`, and `: BEHIND ...` when another serves a later state.
pub(crate) fn replicas_text(replicas: &[ReplicaView], lagging: &[bool]) -> String {
    let latest = replicas
        .iter()
        .filter_map(|r| r.served.as_ref()?.revision)
        .max();
    let mut out = String::new();
    for (r, behind) in replicas.iter().zip(lagging) {
        let Some(revision) = r.served.as_ref().and_then(|s| s.revision) else {
            continue;
        };
        if out.is_empty() {
            out.push('\n');
        }
        out.push_str(&format!(
            "replica {} serves etcd revision {revision}",
            clean(&r.name)
        ));
        if let Some(candidate) = r.served.as_ref().and_then(|s| s.candidate_revision) {
            out.push_str(&format!(" (its canaries {candidate})"));
        }
        if *behind {
            out.push_str(&format!(
                ": BEHIND (revision {} is served elsewhere, with other resources)",
                latest.unwrap_or(revision)
            ));
        }
        out.push('\n');
    }
    out
}

/// The replicas as `--output json` lists them: those that answered, then those that did not
/// (`address` and `unreachable`, why).
fn replicas_json(
    replicas: &[ReplicaView],
    lagging: &[bool],
    unreachable: &[(String, String)],
) -> serde_json::Value {
    let answered = replicas.iter().zip(lagging).map(|(r, behind)| {
        let mut json = r
            .served
            .as_ref()
            .map(Served::to_json)
            .unwrap_or_else(|| serde_json::json!({}));
        json["address"] = serde_json::json!(r.name);
        json["behind"] = serde_json::json!(behind);
        json
    });
    let silent = unreachable
        .iter()
        .map(|(server, why)| serde_json::json!({"address": server, "unreachable": why}));
    serde_json::Value::Array(answered.chain(silent).collect())
}

/// The rollout under the table: its state, each client (canaries first) with the state it
/// holds, and what stops it when it is stuck.
pub(crate) fn rollout_text(rollout: &RolloutView, rows: &[ClientRow]) -> String {
    let mut out = format!("\n{}\n", rollout.line());
    for (type_url, stable, candidate) in rollout.changed_types() {
        out.push_str(&format!(
            "  {}: stable {}, candidate {}\n",
            short_type(type_url),
            if stable.is_empty() {
                "-"
            } else {
                short_version(stable)
            },
            if candidate.is_empty() {
                "-"
            } else {
                short_version(candidate)
            }
        ));
    }
    if let Some((node, type_url, message)) = &rollout.halt {
        out.push_str(&format!(
            "  halted: {} NACKed {}: {}\n",
            clean(node),
            short_type(type_url),
            clean(message)
        ));
    }
    if let Some(empty) = &rollout.cohort_empty {
        out.push_str(&format!("  {}\n", clean(empty)));
    }
    if let Some(held) = &rollout.held_change {
        out.push_str(&format!("  {}\n", clean(held)));
    }
    let mut clients: Vec<&ClientRow> = rows.iter().collect();
    clients.sort_by_key(|r| !rollout.is_canary(&r.id));
    let width = clients
        .iter()
        .map(|r| r.id.chars().count())
        .max()
        .unwrap_or(0);
    for r in clients {
        let role = if rollout.is_canary(&r.id) {
            "canary"
        } else {
            "      "
        };
        out.push_str(&format!(
            "  {role}  {:<width$}  holds {}\n",
            clean(&r.id),
            rollout.holds(r).as_str()
        ));
    }
    if !rollout.done() {
        out.push_str("the change has not reached the whole fleet\n");
    }
    out
}

/// The largest `/clients` answer read from the admin API.
const MAX_ADMIN_ANSWER_BYTES: u64 = 256 * 1024 * 1024;

/// `GET /clients` from xdsd's admin API at `addr` (plaintext HTTP/1.0): every stream as JSON.
async fn admin_clients(addr: &str, within: Duration) -> anyhow::Result<serde_json::Value> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = addr
        .strip_prefix("http://")
        .unwrap_or(addr)
        .trim_end_matches('/');
    if host.contains("://") {
        anyhow::bail!("--admin {addr:?}: only a plaintext admin address (host:port) is supported");
    }
    let fetch = async {
        let mut stream = tokio::net::TcpStream::connect(host).await?;
        stream
            .write_all(format!("GET /clients HTTP/1.0\r\nhost: {host}\r\n\r\n").as_bytes())
            .await?;
        let mut raw = Vec::new();
        stream
            .take(MAX_ADMIN_ANSWER_BYTES)
            .read_to_end(&mut raw)
            .await?;
        Ok::<_, std::io::Error>(raw)
    };
    let raw = tokio::time::timeout(within, fetch)
        .await
        .map_err(|_| anyhow::anyhow!("--admin {addr}: no answer within {within:?}"))?
        .with_context(|| format!("--admin {addr}: GET /clients"))?;
    let text = String::from_utf8_lossy(&raw);
    let not_admin = || {
        anyhow::anyhow!(
            "--admin {addr}: GET /clients was not answered by xdsd's admin API (is it the xDS \
             port?): give --admin the address of xdsd's --admin-listen"
        )
    };
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return Err(not_admin());
    };
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        let status = head.lines().next().unwrap_or_default();
        anyhow::bail!("--admin {addr}: GET /clients answered {status:?}");
    }
    let json = head.lines().any(|l| {
        l.to_ascii_lowercase()
            .starts_with("content-type: application/json")
    });
    match serde_json::from_str::<serde_json::Value>(body) {
        Ok(clients) if json && clients.is_array() => Ok(clients),
        _ => Err(not_admin()),
    }
}

/// Each resource's own version and origin, from the admin API's `/clients` streams of `node`.
fn add_origins(row: &mut ClientRow, clients: &serde_json::Value, node: &str) {
    let streams = clients.as_array().into_iter().flatten();
    let ours = streams.filter(|s| s["node"]["id"].as_str() == Some(node));
    for stream in ours {
        for t in stream["types"].as_array().into_iter().flatten() {
            let Some(type_url) = t["type_url"].as_str() else {
                continue;
            };
            let Some(row_type) = row.types.iter_mut().find(|r| r.type_url == type_url) else {
                continue;
            };
            for sent in t["last_sent"]["resources"].as_array().into_iter().flatten() {
                let Some(name) = sent["name"].as_str() else {
                    continue;
                };
                if let Some(r) = row_type.resources.iter_mut().find(|r| r.name == name) {
                    if let Some(version) = sent["version"].as_str() {
                        r.version = version.to_owned();
                        r.own_version = true;
                    }
                    if let Some(origin) = sent["origin"].as_str() {
                        r.origin = origin.to_owned();
                    }
                }
            }
        }
    }
}

/// Colours on a terminal, unless NO_COLOR is set.
fn colours() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

fn paint(text: &str, state: TypeState, colour: bool) -> String {
    if !colour {
        return text.to_owned();
    }
    let code = match state {
        TypeState::Synced => "32",
        TypeState::Stale => "33",
        TypeState::Nacked => "1;31",
        TypeState::NotSent => "2",
    };
    format!("\x1b[{code}m{text}\x1b[0m")
}

/// A cell as `xdsd status` prints it: `SYNCED 0123abcd`, `NACKED rejected fedcba98, accepted
/// 0123abcd`.
fn cell(t: &TypeRow) -> String {
    let versions = t.versions(true);
    if versions.is_empty() {
        t.state.as_str().to_owned()
    } else {
        format!("{} {versions}", t.state.as_str())
    }
}

/// Characters that would move the cursor or change colours are shown escaped: node ids and
/// messages come from clients.
fn clean(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

/// The table of every client, NACKED and STALE rows first, each NACK's message under the table,
/// and the summary line.
pub(crate) fn table(rows: &[ClientRow], colour: bool) -> String {
    let types = columns(rows);
    let mut header: Vec<String> = vec!["NODE".into(), "CLUSTER".into(), "AGENT".into()];
    header.extend(types.iter().map(|t| short_type(t).to_owned()));
    let mut lines: Vec<Vec<(String, Option<TypeState>)>> =
        vec![header.into_iter().map(|h| (h, None)).collect()];
    for r in rows {
        let mut line = vec![
            (clean(&r.id), None),
            (clean(&r.cluster), None),
            (clean(&r.agent), None),
        ];
        for t in &types {
            line.push(match r.type_row(t) {
                Some(x) => (cell(x), Some(x.state)),
                None => ("-".into(), None),
            });
        }
        lines.push(line);
    }
    let widths: Vec<usize> = (0..lines[0].len())
        .map(|i| {
            lines
                .iter()
                .map(|l| l[i].0.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for line in &lines {
        let cells: Vec<String> = line
            .iter()
            .zip(&widths)
            .map(|((text, state), width)| {
                let padded = format!("{text:<width$}");
                match state {
                    Some(s) => paint(&padded, *s, colour),
                    None => padded,
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    for r in rows {
        for t in &r.types {
            if let Some(n) = &t.nack {
                out.push_str(&format!(
                    "\n{} {} {}: {}\n",
                    clean(&r.id),
                    short_type(&t.type_url),
                    paint("NACKED", TypeState::Nacked, colour),
                    clean(&n.message)
                ));
                if !n.origins.is_empty() {
                    out.push_str(&format!("  from {}\n", clean(&n.origins.join(", "))));
                }
            }
        }
    }
    out.push('\n');
    out.push_str(&Summary::of(rows).line());
    out.push('\n');
    out
}

/// One client: per type its state and version, its NACK, and every resource it holds.
pub(crate) fn detail(row: &ClientRow, colour: bool) -> String {
    let mut out = format!("node     {}\n", clean(&row.id));
    if !row.cluster.is_empty() {
        out.push_str(&format!("cluster  {}\n", clean(&row.cluster)));
    }
    if !row.agent.is_empty() {
        out.push_str(&format!("agent    {}\n", clean(&row.agent)));
    }
    for t in &row.types {
        out.push_str(&format!(
            "\n{} {}  {}\n",
            short_type(&t.type_url),
            paint(t.state.as_str(), t.state, colour),
            if t.versions(false).is_empty() {
                "(no version ACKed)".to_owned()
            } else if t.nack.is_some() {
                clean(&t.versions(false))
            } else {
                format!("accepted {}", clean(&t.versions(false)))
            }
        ));
        if let Some(n) = &t.nack {
            out.push_str(&format!(
                "  NACK of version {}: {}\n",
                clean(&n.version),
                clean(&n.message)
            ));
            for o in &n.origins {
                out.push_str(&format!("    from {}\n", clean(o)));
            }
        }
        let width = t
            .resources
            .iter()
            .map(|r| r.name.chars().count())
            .max()
            .unwrap_or(0);
        for r in &t.resources {
            let line = format!(
                "  {:<width$}  {}  {}",
                clean(&r.name),
                clean(&r.version_text(true)),
                clean(&r.origin)
            );
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::fleet::{NackInfo, TypeRow};

    const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";

    fn row(id: &str, state: TypeState, nack: Option<NackInfo>) -> ClientRow {
        ClientRow {
            id: id.into(),
            cluster: "front".into(),
            agent: "envoy 1.40.0".into(),
            types: vec![TypeRow {
                type_url: CDS.into(),
                state,
                version: "0123456789abcdef".into(),
                nack,
                resources: vec![],
            }],
        }
    }

    #[test]
    fn the_table_aligns_columns_lists_nacks_and_sums_up_without_colours_off_a_terminal() {
        let nack = NackInfo {
            message: "bad\x1b[2Jport".into(),
            origins: vec!["c.yaml (resource #1)".into()],
            version: "fedcba98".into(),
        };
        let rows = vec![
            row("b-envoy", TypeState::Nacked, Some(nack)),
            row("a", TypeState::Synced, None),
        ];
        let text = table(&rows, false);
        assert_eq!(
            text,
            "NODE     CLUSTER  AGENT         CDS\n\
             b-envoy  front    envoy 1.40.0  NACKED rejected fedcba98, accepted 01234567\n\
             a        front    envoy 1.40.0  SYNCED 01234567\n\
             \n\
             b-envoy CDS NACKED: bad\\u{1b}[2Jport\n  from c.yaml (resource #1)\n\
             \n\
             2 clients: 1 synced, 1 NACKED\n"
        );
        let coloured = table(&rows, true);
        assert!(
            coloured.contains("\x1b[1;31mNACKED rejected fedcba98, accepted 01234567\x1b[0m"),
            "{coloured:?}"
        );
        assert!(
            coloured.contains("\x1b[32mSYNCED 01234567 "),
            "{coloured:?}"
        );
    }
}
