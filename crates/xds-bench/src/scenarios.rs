//! The scenarios (S1–S5 of BENCHMARKS.md) run against each server, each in a fresh server
//! process, with the same clients, configuration and changes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::Serialize;
use tokio::io::AsyncWriteExt;

use crate::client::{ClientResult, Fleet, FleetSpec, Kind, Shared};
use crate::config::{self, ConfigSpec, Res, Rng, INITIAL_MARKER};
use crate::control::{parse_ok, self_cpu_seconds, Proc, Server};
use crate::server::hex;

mod gated;
mod leds;
mod relay;
mod relay_scale;
mod subscribe;
#[cfg(test)]
use gated::in_cohort;
pub use gated::{s8, s9};
pub use leds::s13;
pub use relay::{s10, s11};
pub use relay_scale::s12;
pub use subscribe::s14;

/// Percentiles in milliseconds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Pct {
    pub n: usize,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

pub fn pct(mut ns: Vec<u64>) -> Option<Pct> {
    if ns.is_empty() {
        return None;
    }
    ns.sort_unstable();
    let at = |q: f64| {
        let i = ((q * ns.len() as f64).ceil() as usize).clamp(1, ns.len()) - 1;
        ns[i] as f64 / 1e6
    };
    Some(Pct {
        n: ns.len(),
        p50: at(0.50),
        p90: at(0.90),
        p99: at(0.99),
        max: *ns.last().unwrap_or(&0) as f64 / 1e6,
    })
}

/// One measured (scenario, server, mode, size) cell.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Row {
    pub scenario: String,
    pub server: String,
    pub mode: String,
    pub streams: usize,
    pub connections: usize,
    pub clusters: usize,
    /// S5: offered changes per second.
    pub rate: Option<u32>,
    /// S5: changes per second the server accepted.
    pub achieved_rate: Option<f64>,
    pub changes: usize,
    /// Per change: from accepted by the server to the last client having it.
    pub conv_ms: Option<Pct>,
    /// Per (client, change): from accepted to that client having it.
    pub client_ms: Option<Pct>,
    /// (client, change) pairs never delivered before the timeout.
    pub missing: usize,
    /// Per client: from the start of connecting to the initial sync being complete.
    pub sync_ms: Option<Pct>,
    pub synced: usize,
    pub errors: usize,
    pub error_samples: Vec<String>,
    /// Server CPU seconds during the initial sync and during the changes.
    pub sync_cpu_s: f64,
    pub change_cpu_s: f64,
    /// S13: the median change's CPU seconds (read to the nanosecond).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change_cpu_median_s: Option<f64>,
    /// S13: each change's CPU seconds and convergence (ms), in the order they were made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change_cpus_s: Option<Vec<f64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change_conv_ms: Option<Vec<f64>>,
    /// S12: server CPU seconds from the last stream synced until the server was idle.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tail_cpu_s: Option<f64>,
    /// Load generator CPU seconds during the changes (it shares the machine).
    pub client_cpu_s: f64,
    /// Response payload bytes (gRPC messages with their 5-byte frame headers) the clients
    /// received during the changes, and responses.
    pub bytes: u64,
    pub responses: u64,
    pub sync_bytes: u64,
    /// Server RSS after loading the configuration, after the initial sync (idle), and peak.
    pub rss_base_kib: u64,
    pub rss_idle_kib: u64,
    pub rss_peak_kib: u64,
    pub rss_per_stream_kib: f64,
    /// S6: parameter groups, and the responses the streams of the groups whose variant did not
    /// change received during the changes (a correct server sends them nothing).
    pub groups: usize,
    pub other_responses: Option<u64>,
    /// S8: per change, from accepted to the last canary having it (the cohort's convergence),
    /// and to the last client outside the cohort having it (the promotion's).
    pub canary_ms: Option<Pct>,
    pub promoted_ms: Option<Pct>,
    pub note: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub quick: bool,
    pub servers: Vec<Server>,
    pub scenarios: Vec<String>,
    pub streams_per_connection: usize,
    pub seed: u64,
    pub s1_streams: Vec<usize>,
    /// S1's modes, in order: `false` SotW, `true` delta.
    pub s1_delta: Vec<bool>,
    pub s1_config: ConfigSpec,
    pub rounds: usize,
    pub s2_streams: usize,
    pub s2_clusters: Vec<usize>,
    /// S2's modes, in order: `false` SotW, `true` delta.
    pub s2_delta: Vec<bool>,
    pub s2_rounds: usize,
    pub s5_streams: usize,
    pub s5_rates: Vec<u32>,
    pub s5_secs: f64,
    pub s6_streams: Vec<usize>,
    pub s6_groups: usize,
    pub s7_files: Vec<usize>,
    /// S10 stream counts.
    pub s10_streams: Vec<usize>,
    /// S11: relays, and streams per relay.
    pub s11_relays: usize,
    pub s11_streams: usize,
    /// S12: names the relay holds, and the streams behind it.
    pub s12_names: Vec<usize>,
    pub s12_streams: usize,
    /// S12: pairs of a direct side and a relayed one, alternating which runs first.
    pub s12_pairs: usize,
    /// S13 (LEDS): delta streams, and endpoints of the cluster.
    pub s13_streams: usize,
    pub s13_endpoints: usize,
    /// S14: the names the larger stream holds, and the requests on each stream.
    pub s14_names: usize,
    pub s14_requests: usize,
    /// S13: changes per side.
    pub s13_changes: usize,
    pub sync_timeout_s: u64,
    pub change_timeout_s: u64,
}

pub struct Ctx {
    pub plan: Plan,
    pub peer_bin: Option<PathBuf>,
    pub xdsd_bin: Option<PathBuf>,
    pub scratch: PathBuf,
    records: HashMap<String, PathBuf>,
    /// Extra arguments of `xdsd serve` for the xdsd-dir server (S7's `--reload full`).
    xdsd_args: Vec<String>,
}

impl Ctx {
    pub fn new(
        plan: Plan,
        peer_bin: Option<PathBuf>,
        xdsd_bin: Option<PathBuf>,
        scratch: PathBuf,
    ) -> Ctx {
        Ctx {
            plan,
            peer_bin,
            xdsd_bin,
            scratch,
            records: HashMap::new(),
            xdsd_args: Vec::new(),
        }
    }

    /// The record file of `spec` (with `groups` > 0: S6's, a variant per group).
    fn records(&mut self, spec: &ConfigSpec, groups: usize) -> anyhow::Result<PathBuf> {
        let key = format!(
            "c{}-e{}-l{}-r{}-s{}-g{groups}",
            spec.clusters, spec.endpoints, spec.listeners, spec.routes, spec.seed
        );
        if let Some(p) = self.records.get(&key) {
            return Ok(p.clone());
        }
        let path = self.scratch.join(format!("config-{key}.rec"));
        let resources = if groups > 0 {
            config::generate_groups(spec, groups)
        } else {
            config::generate(spec)
        };
        config::write_records(&path, &resources)?;
        self.records.insert(key, path.clone());
        Ok(path)
    }

    fn log(&self, server: Server, what: &str) -> PathBuf {
        self.scratch.join(format!("{}-{what}.log", server.name()))
    }
}

/// A server process with a synced fleet of clients.
struct Session {
    proc: Proc,
    fleet: Fleet,
    row: Row,
    /// When the last stream synced, and the server's CPU seconds then (S12's sync tail).
    synced_at: std::time::Instant,
    synced_cpu_s: f64,
}

fn progress(msg: &str) {
    eprintln!("[xds-bench] {msg}");
}

async fn open(
    ctx: &mut Ctx,
    server: Server,
    spec: &ConfigSpec,
    fleet: FleetSpec,
    row: Row,
) -> anyhow::Result<Session> {
    let records = ctx.records(spec, fleet.groups)?;
    let tag = format!("{}-{}-{}", row.scenario, row.mode, row.streams);
    let dir = ctx.scratch.join(format!("resources-{tag}"));
    let mut proc = Proc::spawn(
        server,
        ctx.peer_bin.as_deref(),
        ctx.xdsd_bin.as_deref().map(|b| (b, dir.as_path())),
        &ctx.xdsd_args,
        &ctx.log(server, &tag),
    )
    .await?;
    proc.nodes(fleet.streams).await?;
    // Under churn the limit coalesces as xdsd does, or it would measure its own backlog.
    if server == Server::Limit && row.scenario == "S5" {
        proc.coalesce().await?;
    }
    proc.load(&records).await?;
    // A gated rollout (S8): the initial configuration goes to everyone before the clients come.
    if ctx.xdsd_args.iter().any(|a| a == "--canary") {
        proc.promote().await?;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // S12: the clients come to a server that holds the load (a relay its prefetch of it).
    if row.scenario == "S12" {
        let (cpu, took) =
            relay_scale::idle(&proc, std::time::Instant::now(), proc.cpu_seconds()).await;
        if took.is_none() {
            progress(&format!(
                "S12 {}: not idle before the sync ({:.0} ms of CPU in {} s)",
                server.name(),
                cpu * 1e3,
                relay_scale::IDLE_WAIT.as_secs()
            ));
        }
    }
    let mut row = row;
    row.rss_base_kib = proc.rss_kib().0;
    proc.phase("sync-start").await;
    let cpu0 = proc.cpu_seconds();
    let streams = fleet.streams;
    let shared = Shared::new(fleet);
    let fleet = Fleet::start(&proc.addr, shared).await?;
    let synced = fleet
        .wait_synced(Duration::from_secs(ctx.plan.sync_timeout_s))
        .await;
    let synced_at = std::time::Instant::now();
    let synced_cpu_s = proc.cpu_seconds();
    proc.phase("sync-end").await;
    row.sync_cpu_s = synced_cpu_s - cpu0;
    row.synced = fleet.shared.synced.load(Ordering::Relaxed);
    row.sync_bytes = fleet.shared.bytes.load(Ordering::Relaxed);
    if !synced {
        row.note = format!(
            "initial sync incomplete after {} s: {}/{} clients",
            ctx.plan.sync_timeout_s, row.synced, streams
        );
    }
    // Let the ACKs of the initial sync land and the allocator settle before reading RSS.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (rss, peak) = proc.rss_kib();
    row.rss_idle_kib = rss;
    row.rss_peak_kib = peak;
    row.rss_per_stream_kib = rss.saturating_sub(row.rss_base_kib) as f64 / streams.max(1) as f64;
    Ok(Session {
        proc,
        fleet,
        row,
        synced_at,
        synced_cpu_s,
    })
}

/// Stops the clients and the server; fills the sync figures and errors.
async fn close(s: Session) -> (Row, Vec<ClientResult>) {
    let Session {
        proc,
        fleet,
        mut row,
        ..
    } = s;
    let started = fleet.started_ns;
    let shared = fleet.shared.clone();
    let results = fleet.stop().await;
    row.rss_peak_kib = row.rss_peak_kib.max(proc.rss_kib().1);
    proc.stop().await;
    row.sync_ms = pct(results
        .iter()
        .filter_map(|r| r.synced_ns.map(|t| t.saturating_sub(started)))
        .collect());
    row.errors = shared.errors.load(Ordering::Relaxed);
    row.error_samples = shared.error_samples();
    (row, results)
}

/// For each change (tracked id, marker, accepted): the latency to each client, from the clients'
/// records. Returns (per change: time to the last client, or None if one never got it; pooled
/// per-client latencies; missing pairs).
pub fn latencies(
    changes: &[(u32, u32, u64)],
    results: &[ClientResult],
) -> (Vec<Option<u64>>, Vec<u64>, usize) {
    latencies_of(changes, &results.iter().collect::<Vec<_>>())
}

/// [`latencies`] over some of the clients.
pub fn latencies_of(
    changes: &[(u32, u32, u64)],
    results: &[&ClientResult],
) -> (Vec<Option<u64>>, Vec<u64>, usize) {
    let mut last = vec![Some(0u64); changes.len()];
    let mut pooled = Vec::with_capacity(changes.len() * results.len());
    let mut missing = 0;
    for r in results {
        let mut by_id: HashMap<u32, Vec<(u32, u64)>> = HashMap::new();
        for d in &r.deliveries {
            by_id
                .entry(d.tracked)
                .or_default()
                .push((d.marker, d.at_ns));
        }
        for (i, (id, marker, accepted)) in changes.iter().enumerate() {
            let got = by_id.get(id).and_then(|v| {
                let at = v.partition_point(|(m, _)| m < marker);
                v.get(at).map(|(_, t)| t.saturating_sub(*accepted))
            });
            match got {
                Some(l) => {
                    pooled.push(l);
                    if let Some(x) = &mut last[i] {
                        *x = (*x).max(l);
                    }
                }
                None => {
                    missing += 1;
                    last[i] = None;
                }
            }
        }
    }
    (last, pooled, missing)
}

fn fill_latencies(row: &mut Row, changes: &[(u32, u32, u64)], results: &[ClientResult]) {
    if std::env::var_os("XDS_BENCH_DEBUG").is_some() {
        for (i, r) in results.iter().enumerate() {
            eprintln!(
                "client {i}: responses {} deliveries {:?}",
                r.responses,
                r.deliveries
                    .iter()
                    .map(|d| (d.tracked, d.marker))
                    .collect::<Vec<_>>()
            );
        }
        eprintln!(
            "changes {:?}",
            changes.iter().map(|c| (c.0, c.1)).collect::<Vec<_>>()
        );
    }
    let (last, pooled, missing) = latencies(changes, results);
    if let Some(path) = std::env::var_os("XDS_BENCH_SERIES") {
        let mut out = String::new();
        let mut worst = vec![(0u64, 0usize); changes.len()];
        for (ci, r) in results.iter().enumerate() {
            let (l, _, _) = latencies_of(changes, &[r]);
            for (i, x) in l.iter().enumerate() {
                if let Some(x) = x {
                    if *x >= worst[i].0 {
                        worst[i] = (*x, ci);
                    }
                }
            }
        }
        for (i, c) in changes.iter().enumerate() {
            out.push_str(&format!(
                "{} {} {}\n",
                c.2,
                worst[i].0 / 1_000_000,
                worst[i].1
            ));
        }
        let _ = std::fs::write(path, out);
    }
    row.changes = changes.len();
    row.conv_ms = pct(last.iter().flatten().copied().collect());
    row.client_ms = pct(pooled);
    row.missing = missing;
}

fn connections(ctx: &Ctx, streams: usize) -> usize {
    streams
        .div_ceil(ctx.plan.streams_per_connection.max(1))
        .max(1)
}

/// Changes one tracked resource per round and waits for every client to have it.
async fn rounds(
    ctx: &Ctx,
    s: &mut Session,
    kind: Kind,
    make: impl Fn(usize, u32) -> Res,
    rounds: usize,
    next_marker: &mut u32,
) -> anyhow::Result<Vec<(u32, u32, u64)>> {
    let tracked = s.fleet.shared.spec().tracked.len();
    s.proc.phase("changes-start").await;
    let cpu0 = s.proc.cpu_seconds();
    let client0 = self_cpu_seconds();
    let bytes0 = s.fleet.shared.bytes.load(Ordering::Relaxed);
    let resp0 = s.fleet.shared.responses.load(Ordering::Relaxed);
    let mut changes = Vec::new();
    for r in 0..rounds {
        let id = (r % tracked) as u32;
        *next_marker += 1;
        let res = make(id as usize, *next_marker);
        debug_assert_eq!(res.type_url, kind.type_url());
        let accepted = s
            .proc
            .set(res.type_url, &res.name, &res.value, res.group.as_deref())
            .await?;
        changes.push((id, *next_marker, accepted));
        let ok = s
            .fleet
            .wait_marker(
                id,
                *next_marker,
                Duration::from_secs(ctx.plan.change_timeout_s),
            )
            .await;
        if !ok {
            s.row.note = format!(
                "round {r}: not every client converged in {} s",
                ctx.plan.change_timeout_s
            );
            break;
        }
        // Let the ACKs land before the next change.
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    s.row.change_cpu_s = s.proc.cpu_seconds() - cpu0;
    s.row.client_cpu_s = self_cpu_seconds() - client0;
    s.row.bytes = s.fleet.shared.bytes.load(Ordering::Relaxed) - bytes0;
    s.row.responses = s.fleet.shared.responses.load(Ordering::Relaxed) - resp0;
    s.proc.phase("changes-end").await;
    Ok(changes)
}

/// A row with its identifying columns filled in.
fn new_row(
    ctx: &Ctx,
    scenario: &str,
    server: Server,
    delta: bool,
    streams: usize,
    clusters: usize,
) -> Row {
    Row {
        scenario: scenario.into(),
        server: server.name().into(),
        mode: if delta { "delta" } else { "sotw" }.into(),
        streams,
        connections: connections(ctx, streams),
        clusters,
        ..Default::default()
    }
}

/// The fleet for `row` that syncs `spec` like Envoy and records the versions of `tracked`.
fn fleet_for(
    row: &Row,
    spec: &ConfigSpec,
    delta: bool,
    tracked_kind: Kind,
    tracked: Vec<String>,
) -> FleetSpec {
    FleetSpec {
        streams: row.streams,
        connections: row.connections,
        delta,
        expect_clusters: spec.clusters,
        expect_routes: config::referenced_routes(spec),
        tracked_kind,
        tracked,
        groups: 0,
        failover: false,
    }
}

/// Opens a session, applies `n` changes made by `make` (one per round) and closes it: the row with
/// its convergence figures, or with a note saying what failed.
async fn measure_rounds(
    ctx: &mut Ctx,
    server: Server,
    spec: &ConfigSpec,
    fleet: FleetSpec,
    row: Row,
    make: impl Fn(usize, u32) -> Res,
    n: usize,
) -> Row {
    let kind = fleet.tracked_kind;
    let mut s = match open(ctx, server, spec, fleet, row.clone()).await {
        Ok(s) => s,
        Err(e) => return failed_row(row, &e),
    };
    let mut changes = Vec::new();
    if s.row.note.is_empty() {
        let mut marker = INITIAL_MARKER;
        match rounds(ctx, &mut s, kind, make, n, &mut marker).await {
            Ok(c) => changes = c,
            Err(e) => s.row.note = format!("failed: {e:#}"),
        }
    }
    let (mut row, results) = close(s).await;
    fill_latencies(&mut row, &changes, &results);
    row
}

fn failed_row(mut row: Row, e: &anyhow::Error) -> Row {
    row.note = format!("failed: {e:#}");
    row
}

/// S1 fan-out (and S3 idle memory, S4 connect storm from the same sessions): N streams, C
/// clusters with EDS; one ClusterLoadAssignment changes per round. Every stream SotW ADS, or
/// (`delta`) every stream delta ADS.
pub async fn s1(ctx: &mut Ctx, server: Server, streams: usize, delta: bool) -> Row {
    let spec = ctx.plan.s1_config;
    let row = new_row(ctx, "S1", server, delta, streams, spec.clusters);
    if delta && !server.supports_delta() {
        let mut row = row;
        row.note = "not supported: rust-control-plane 0.1.2 does not implement DeltaAggregatedResources (the stream panics)".into();
        return row;
    }
    progress(&format!(
        "S1 {} {} streams={streams}",
        server.name(),
        row.mode
    ));
    let tracked = (0..spec.clusters).map(config::cluster_name).collect();
    let fleet = fleet_for(&row, &spec, delta, Kind::Eds, tracked);
    let n = ctx.plan.rounds;
    let make = |i, m| config::load_assignment(&spec, i, m);
    measure_rounds(ctx, server, &spec, fleet, row, make, n).await
}

/// The canary cohort of S8 (`--canary 10%`).
/// Above this many (node, cluster) pairs the peer's per-node snapshots do not fit in memory.
const PEER_MAX_NODE_CLUSTERS: usize = 2_000_000;

const S8_CANARY: &str = "10%";

/// S2 large state: N streams, C clusters; one Cluster changes per round; SotW or delta.
pub async fn s2(ctx: &mut Ctx, server: Server, delta: bool, clusters: usize) -> Row {
    let spec = ConfigSpec {
        clusters,
        endpoints: 1,
        listeners: 1,
        routes: 1,
        seed: ctx.plan.seed,
    };
    let streams = ctx.plan.s2_streams;
    let row = new_row(ctx, "S2", server, delta, streams, clusters);
    if delta && !server.supports_delta() {
        let mut row = row;
        row.note = "not supported: rust-control-plane 0.1.2 does not implement DeltaAggregatedResources (the stream panics)".into();
        return row;
    }
    // bench-peer keeps one snapshot per node (see bench-peer/src/main.rs), two copies of each in
    // rust-control-plane's cache, every resource a decoded message of a few hundred bytes to KiB.
    if server == Server::Peer && clusters * streams > PEER_MAX_NODE_CLUSTERS {
        let mut row = row;
        row.note = format!(
            "not run: the peer would hold {streams} per-node snapshots of {clusters} clusters and their endpoints, twice (over 20 GiB)"
        );
        return row;
    }
    progress(&format!(
        "S2 {} {} clusters={clusters}",
        server.name(),
        row.mode
    ));
    let n = ctx.plan.s2_rounds;
    let tracked = (0..n.min(clusters)).map(config::cluster_name).collect();
    let fleet = fleet_for(&row, &spec, delta, Kind::Cds, tracked);
    let make = |i, m| config::cluster(&spec, i, m);
    measure_rounds(ctx, server, &spec, fleet, row, make, n).await
}

/// S5 churn: N streams (S1's configuration); endpoint changes at each offered rate in turn, for
/// `s5_secs` each, on one server process and one fleet. At most `WINDOW` changes wait in the
/// server's input: a server slower than the offered rate shows as a lower achieved rate.
pub async fn s5(ctx: &mut Ctx, server: Server) -> Vec<Row> {
    const WINDOW: usize = 64;
    let spec = ctx.plan.s1_config;
    let streams = ctx.plan.s5_streams;
    let base = new_row(ctx, "S5", server, false, streams, spec.clusters);
    progress(&format!("S5 {} streams={streams}", server.name()));
    let tracked = (0..spec.clusters).map(config::cluster_name).collect();
    let fleet = fleet_for(&base, &spec, false, Kind::Eds, tracked);
    let mut s = match open(ctx, server, &spec, fleet, base.clone()).await {
        Ok(s) => s,
        Err(e) => return vec![failed_row(base, &e)],
    };
    let mut rng = Rng::new(ctx.plan.seed ^ 0xC4A2);
    let mut marker = INITIAL_MARKER;
    // Per rate: changes (id, marker, accepted), offered, achieved, cpu, client cpu, bytes, responses, note.
    let mut phases = Vec::new();
    if s.row.note.is_empty() {
        for &rate in &ctx.plan.s5_rates {
            progress(&format!("S5 {} rate={rate}/s", server.name()));
            let total = ((rate as f64 * ctx.plan.s5_secs).round() as usize).max(1);
            let cpu0 = s.proc.cpu_seconds();
            let client0 = self_cpu_seconds();
            let bytes0 = s.fleet.shared.bytes.load(Ordering::Relaxed);
            let resp0 = s.fleet.shared.responses.load(Ordering::Relaxed);
            let mut pending: Vec<(u32, u32)> = Vec::with_capacity(total);
            let mut accepted: Vec<u64> = Vec::with_capacity(total);
            let mut last_marker: HashMap<u32, u32> = HashMap::new();
            let start = tokio::time::Instant::now();
            let mut tick = tokio::time::interval(Duration::from_millis(1));
            let deadline = start + Duration::from_secs_f64(ctx.plan.s5_secs * 4.0 + 30.0);
            let mut note = String::new();
            // Offer changes for `s5_secs` (at most `total`), then wait for the server to accept
            // the ones in flight: a server slower than the offered rate accepts fewer.
            let mut offering = true;
            while offering || accepted.len() < pending.len() {
                tokio::select! {
                    line = s.proc.lines.next_line() => {
                        match line.ok().flatten().map(|l| parse_ok(&l)) {
                            Some(Ok(v)) => accepted.push(v[0]),
                            other => { note = format!("server stopped answering: {other:?}"); break; }
                        }
                    }
                    _ = tick.tick(), if offering => {
                        if start.elapsed().as_secs_f64() >= ctx.plan.s5_secs || pending.len() >= total {
                            offering = false;
                            continue;
                        }
                        if tokio::time::Instant::now() > deadline {
                            note = "churn timed out".into();
                            break;
                        }
                        let due = ((start.elapsed().as_secs_f64() * rate as f64) as usize).min(total);
                        let mut batch = String::new();
                        while pending.len() < due && pending.len() - accepted.len() < WINDOW {
                            let id = rng.below(spec.clusters) as u32;
                            marker += 1;
                            let res = config::load_assignment(&spec, id as usize, marker);
                            batch.push_str(&format!("set {} {} {}\n", res.type_url, res.name, hex(&res.value)));
                            pending.push((id, marker));
                            last_marker.insert(id, marker);
                        }
                        if !batch.is_empty() {
                            if let Err(e) = s.proc.stdin.write_all(batch.as_bytes()).await {
                                note = format!("write: {e}");
                                break;
                            }
                            let _ = s.proc.stdin.flush().await;
                        }
                    }
                }
            }
            // Drain: every client has the last version of every changed cluster.
            let drain = Duration::from_secs(ctx.plan.change_timeout_s);
            for (id, m) in &last_marker {
                if !s.fleet.wait_marker(*id, *m, drain).await {
                    note = format!(
                        "not every client converged {} s after the churn",
                        drain.as_secs()
                    );
                    break;
                }
            }
            let changes: Vec<(u32, u32, u64)> = pending
                .iter()
                .zip(&accepted)
                .map(|((id, m), a)| (*id, *m, *a))
                .collect();
            let achieved = match (accepted.first(), accepted.last()) {
                (Some(a), Some(b)) if b > a => {
                    Some((accepted.len() - 1) as f64 / ((b - a) as f64 / 1e9))
                }
                _ => None,
            };
            phases.push((
                rate,
                changes,
                achieved,
                s.proc.cpu_seconds() - cpu0,
                self_cpu_seconds() - client0,
                s.fleet.shared.bytes.load(Ordering::Relaxed) - bytes0,
                s.fleet.shared.responses.load(Ordering::Relaxed) - resp0,
                note.clone(),
            ));
            if !note.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    let (row, results) = close(s).await;
    if phases.is_empty() {
        return vec![row];
    }
    phases
        .into_iter()
        .map(
            |(rate, changes, achieved, cpu, ccpu, bytes, responses, note)| {
                let mut r = row.clone();
                r.rate = Some(rate);
                r.achieved_rate = achieved;
                r.change_cpu_s = cpu;
                r.client_cpu_s = ccpu;
                r.bytes = bytes;
                r.responses = responses;
                if !note.is_empty() {
                    r.note = note;
                }
                fill_latencies(&mut r, &changes, &results);
                r
            },
        )
        .collect()
}

/// S6 variant groups: N streams in `s6_groups` groups by node metadata (`env: g0`, ...), S1's
/// configuration with one variant per group of every cluster and ClusterLoadAssignment. Round r
/// changes group `r % groups`'s variant of one ClusterLoadAssignment; convergence is that
/// group's (its last stream having the change), and the streams of the other groups must
/// receive nothing (`other_responses`). Only xdsd and xdsd-dir have variants.
pub async fn s6(ctx: &mut Ctx, server: Server, streams: usize) -> Row {
    let spec = ctx.plan.s1_config;
    let groups = ctx.plan.s6_groups.max(1);
    let mut row = new_row(ctx, "S6", server, false, streams, spec.clusters);
    row.groups = groups;
    if !matches!(server, Server::Xdsd | Server::XdsdDir | Server::XdsdEtcd) {
        row.note = format!(
            "not run: the {} has no variants (xRFC TP2 dynamic parameters)",
            if server == Server::Limit {
                "limit"
            } else {
                "peer"
            }
        );
        return row;
    }
    progress(&format!(
        "S6 {} streams={streams} groups={groups}",
        server.name()
    ));
    let tracked = (0..spec.clusters).map(config::cluster_name).collect();
    let mut fleet = fleet_for(&row, &spec, false, Kind::Eds, tracked);
    fleet.groups = groups;
    let mut s = match open(ctx, server, &spec, fleet, row.clone()).await {
        Ok(s) => s,
        Err(e) => return failed_row(row, &e),
    };
    // (tracked id, marker, accepted, group) per change.
    let mut changes: Vec<(u32, u32, u64, usize)> = Vec::new();
    let mut other = 0u64;
    if s.row.note.is_empty() {
        let cpu0 = s.proc.cpu_seconds();
        let client0 = self_cpu_seconds();
        let bytes0 = s.fleet.shared.bytes.load(Ordering::Relaxed);
        let resp0 = s.fleet.shared.responses.load(Ordering::Relaxed);
        let mut marker = INITIAL_MARKER;
        for r in 0..ctx.plan.rounds {
            let g = r % groups;
            let id = (r % spec.clusters) as u32;
            marker += 1;
            let res = config::group_load_assignment(&spec, g, id as usize, marker);
            let before: Vec<u64> = s
                .fleet
                .shared
                .group_responses
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect();
            let accepted = match s
                .proc
                .set(res.type_url, &res.name, &res.value, res.group.as_deref())
                .await
            {
                Ok(a) => a,
                Err(e) => {
                    s.row.note = format!("failed: {e:#}");
                    break;
                }
            };
            changes.push((id, marker, accepted, g));
            let timeout = Duration::from_secs(ctx.plan.change_timeout_s);
            if !s.fleet.wait_group_marker(g, id, marker, timeout).await {
                s.row.note = format!(
                    "round {r}: not every client of group {g} converged in {} s",
                    ctx.plan.change_timeout_s
                );
                break;
            }
            // Time for a response the other groups should not get to arrive, and for the ACKs.
            tokio::time::sleep(Duration::from_millis(100)).await;
            other += s
                .fleet
                .shared
                .group_responses
                .iter()
                .zip(&before)
                .enumerate()
                .filter(|(i, _)| *i != g)
                .map(|(_, (c, b))| c.load(Ordering::Relaxed) - b)
                .sum::<u64>();
        }
        s.row.change_cpu_s = s.proc.cpu_seconds() - cpu0;
        s.row.client_cpu_s = self_cpu_seconds() - client0;
        s.row.bytes = s.fleet.shared.bytes.load(Ordering::Relaxed) - bytes0;
        s.row.responses = s.fleet.shared.responses.load(Ordering::Relaxed) - resp0;
        s.row.other_responses = Some(other);
    }
    let (mut row, results) = close(s).await;
    // Each change against the clients of its group only.
    let mut last = Vec::new();
    let mut pooled = Vec::new();
    for (id, m, accepted, g) in &changes {
        let of_group: Vec<&ClientResult> = results
            .iter()
            .enumerate()
            .filter(|(i, _)| i % groups == *g)
            .map(|(_, r)| r)
            .collect();
        let (l, p, missing) = latencies_of(&[(*id, *m, *accepted)], &of_group);
        last.extend(l);
        pooled.extend(p);
        row.missing += missing;
    }
    row.changes = changes.len();
    row.conv_ms = pct(last.into_iter().flatten().collect());
    row.client_ms = pct(pooled);
    row
}

/// Streams of S7: enough to see convergence, few enough that the reload dominates.
const S7_STREAMS: usize = 10;

/// S7 one-file change: a directory of `files` resource files (clusters and their endpoints, one
/// file each, and S1's listeners and routes); each round renames one endpoints file into place;
/// 10 streams watch every endpoint set. The xdsd binary only (xdsd-dir), incremental reloads
/// against `--reload full` (every file read and parsed on every change) in the same run.
pub async fn s7(ctx: &mut Ctx, server: Server, files: usize, full: bool) -> Row {
    let spec = ConfigSpec {
        clusters: (files / 2).max(1),
        ..ctx.plan.s1_config
    };
    // The row's `clusters` holds the directory's size in files.
    let mut row = new_row(ctx, "S7", server, false, S7_STREAMS, files);
    row.mode = if full { "full" } else { "incremental" }.into();
    progress(&format!(
        "S7 {} files={files} reload={}",
        server.name(),
        row.mode
    ));
    let tracked = (0..spec.clusters).map(config::cluster_name).collect();
    let fleet = fleet_for(&row, &spec, false, Kind::Eds, tracked);
    let n = ctx.plan.rounds.min(5);
    let make = |i, m| config::load_assignment(&spec, i, m);
    ctx.xdsd_args = if full {
        vec!["--reload".into(), "full".into()]
    } else {
        Vec::new()
    };
    let row = measure_rounds(ctx, server, &spec, fleet, row, make, n).await;
    ctx.xdsd_args.clear();
    row
}

pub async fn run_all(ctx: &mut Ctx) -> Vec<Row> {
    let mut rows = Vec::new();
    let plan = ctx.plan.clone();
    let wants = |s: &str| plan.scenarios.iter().any(|x| x.eq_ignore_ascii_case(s));
    if wants("s1") || wants("s3") || wants("s4") {
        for &n in &plan.s1_streams {
            for &delta in &plan.s1_delta {
                for &server in &plan.servers {
                    rows.push(s1(ctx, server, n, delta).await);
                }
            }
        }
    }
    if wants("s8") {
        for &n in &plan.s1_streams {
            for &server in plan.servers.iter().filter(|s| s.runs_the_binary()) {
                rows.push(s8(ctx, server, n).await);
            }
        }
    }
    if wants("s9") {
        for &n in &plan.s1_streams {
            for &server in plan.servers.iter().filter(|s| **s == Server::XdsdEtcd) {
                rows.push(s9(ctx, server, n).await);
            }
        }
    }
    if wants("s2") {
        for &c in &plan.s2_clusters {
            for &delta in &plan.s2_delta {
                for &server in &plan.servers {
                    rows.push(s2(ctx, server, delta, c).await);
                }
            }
        }
    }
    if wants("s5") {
        for &server in &plan.servers {
            rows.extend(s5(ctx, server).await);
        }
    }
    if wants("s6") {
        for &n in &plan.s6_streams {
            for &server in &plan.servers {
                rows.push(s6(ctx, server, n).await);
            }
        }
    }
    // S10 and S11 run the binary (--xdsd-bin) whatever --servers says: they compare its paths.
    if wants("s10") {
        for &n in &plan.s10_streams {
            rows.extend(s10(ctx, n).await);
        }
    }
    if wants("s11") {
        rows.push(s11(ctx).await);
    }
    if wants("s12") {
        for &n in &plan.s12_names {
            rows.extend(s12(ctx, n).await);
        }
    }
    if wants("s13") {
        rows.extend(s13(ctx).await);
    }
    if wants("s14") {
        rows.extend(s14(ctx).await);
    }
    if wants("s7") && plan.servers.contains(&Server::XdsdDir) {
        for &files in &plan.s7_files {
            for full in [true, false] {
                rows.push(s7(ctx, Server::XdsdDir, files, full).await);
            }
        }
    }
    rows
}

pub fn scratch_dir(out: &Path) -> PathBuf {
    out.join("scratch")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s8_s_cohort_is_a_tenth_of_the_bench_s_nodes_as_xdsd_picks_them() {
        let id = |i: usize| format!("{}{i}", crate::client::NODE_PREFIX);
        let picked = (0..10_000)
            .filter(|i| in_cohort(S8_CANARY, &id(*i)))
            .count();
        assert!((800..1200).contains(&picked), "{picked} of 10,000");
        assert!((0..100).all(|i| in_cohort("100%", &id(i))));
        assert!((0..100).all(|i| !in_cohort("0%", &id(i))));
    }
}
