//! The scenarios of BENCHMARKS.md run against each server, each in a fresh server process,
//! with the same clients, configuration and changes: what they share (the plan, the rows and
//! their percentiles, a session's fleet opened and closed, the rounds of changes) and the run
//! that calls them; the scenarios themselves in the submodules (`fanout.rs`: S1-S7).

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

mod fanout;
mod gated;
mod leds;
mod relay;
mod relay_scale;
mod subscribe;
pub use fanout::{s1, s2, s5, s6, s7};
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

/// The median of sorted `xs` (0 for none).
pub fn median(xs: &[f64]) -> f64 {
    match xs.len() {
        0 => 0.0,
        n if n % 2 == 1 => xs[n / 2],
        n => (xs[n / 2 - 1] + xs[n / 2]) / 2.0,
    }
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

/// The canary cohort of S8 (`--canary 10%`).
const S8_CANARY: &str = "10%";

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
