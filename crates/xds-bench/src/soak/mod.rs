//! The soak (`xds-bench --scenarios soak --soak-duration 10m`): the topology users run, from
//! real processes — 3 etcd members, 2 `xdsd serve` replicas on them, 2 `xdsd relay`s in front of
//! the replicas (each given both, `--upstream A,B` with its own first, each through a TCP proxy
//! of its own: the links the soak cuts; `topology.rs`) — and clients split across replicas and
//! relays, SotW and delta (`client.rs`); churn all the time (clients leaving and joining, changes
//! pushed with `xdsd push`, some refused on purpose, canary rollouts promoted and halted); faults
//! on a schedule (a replica killed -9, the etcd leader killed, a relay's link to its replica cut,
//! a relay killed, an etcd member paused past the election timeout; `schedule.rs`); and checks,
//! continuously and at the end (`checks.rs`): convergence, nothing refused ever served, no stream
//! ended but by its process killed, a relay whose link is cut on its other upstream, no resend
//! after a failover, no leak. This file: the run's loop and its results. See BENCHMARKS.md's
//! soak section.

mod checks;
pub mod client;
pub mod procs;
pub mod proxy;
pub mod push;
mod report;
mod schedule;
mod topology;

pub use self::report::summary;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use self::checks::{percentiles, Violation};
use self::client::{ClientSpec, ClientState, Event, Via};
use self::procs::{sample, Etcd, Proc, Sample};
use self::proxy::Proxy;
use self::push::{PushKind, PushResult, Pusher, CYCLE};
use self::schedule::{Action, Fault, FAULTS};

/// The cluster whose ClusterLoadAssignment carries the marker of the last change.
pub const MARKER_CLUSTER: &str = "soak-00";
/// Markers of changes the replicas must refuse start here.
pub const REFUSED_BASE: u32 = 1_000_000;
/// Markers of a canary's poison (valid; NACKed by the canaries) start here.
pub const POISON_BASE: u32 = 2_000_000;

/// What a marker is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    Good,
    Refused,
    Poison,
}

impl Marker {
    pub fn of(m: u32) -> Marker {
        if m >= POISON_BASE {
            Marker::Poison
        } else if m >= REFUSED_BASE {
            Marker::Refused
        } else {
            Marker::Good
        }
    }
}

/// The environment variable of xdsd's test-only leak switch (crates/xdsd-core's stream
/// registry): every closed stream's record is kept. `--soak-leak` sets it on the replicas.
pub const LEAK_VAR: &str = "XDSD_TEST_KEEP_CLOSED_STREAMS";

#[derive(Debug, Clone)]
pub struct SoakOptions {
    pub duration: Duration,
    pub streams: usize,
    /// The convergence bound: a live stream behind the last accepted change for longer fails.
    pub bound: Duration,
    /// Streams replaced per minute, as a fraction of all.
    pub churn_per_minute: f64,
    pub push_every: Duration,
    /// Start the replicas with the leak switch (the checker must fail).
    pub leak: bool,
    pub xdsd_bin: PathBuf,
    pub out: PathBuf,
    pub seed: u64,
}

const CLUSTERS: usize = 8;
const REPLICAS: usize = 2;
const RELAYS: usize = 2;
/// A restarted process's own warm-up before its baseline is read.
const PROC_WARMUP: Duration = Duration::from_secs(20);
/// The replica and the relay the faults kill (the others live the whole run, so that their leak
/// figures span it: a restarted process is only held from its own warm-up on).
const KILLED: usize = 0;
/// How long after a fault is restored its clients may still be reconnecting.
const GRACE: Duration = Duration::from_secs(10);

/// `GET path` of an admin API at `addr` (`host:port`): the body of a 200.
pub async fn http_get(addr: &str, path: &str) -> anyhow::Result<String> {
    let go = async {
        let mut tcp = tokio::net::TcpStream::connect(addr).await?;
        tcp.write_all(
            format!("GET {path} HTTP/1.1\r\nhost: xdsd\r\nconnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
        let mut answer = Vec::new();
        tcp.read_to_end(&mut answer).await?;
        let answer = String::from_utf8_lossy(&answer).into_owned();
        let status = answer.lines().next().unwrap_or_default().to_owned();
        anyhow::ensure!(status.starts_with("HTTP/1.1 200"), "GET {path}: {status}");
        let body = answer
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        // Chunked bodies (axum's default for streamed ones) are not used by these routes.
        anyhow::Ok(body)
    };
    tokio::time::timeout(Duration::from_secs(5), go)
        .await
        .map_err(|_| anyhow::anyhow!("GET {path} on {addr} timed out"))?
}

/// The sum of a metric's samples in a Prometheus text exposition.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A small deterministic generator (xorshift64*), seeded by `--seed`.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// A change the replicas accepted (a good marker in etcd).
struct Accepted {
    marker: u32,
    at: Instant,
    phase: String,
}

struct Soak {
    opts: SoakOptions,
    t0: Instant,
    etcd: Etcd,
    replicas: Vec<Proc>,
    relays: Vec<Proc>,
    /// Per relay, its links (TCP proxies) to each replica: `links[j][k]` leads relay `j` to
    /// replica `k`.
    links: Vec<Vec<Proxy>>,
    clients: Vec<Arc<ClientState>>,
    by_id: HashMap<usize, Arc<ClientState>>,
    next_id: usize,
    events_tx: mpsc::UnboundedSender<Event>,
    rng: Rng,
    accepted: Vec<Accepted>,
    /// Per client: the marker its latencies were counted up to.
    counted: HashMap<usize, u32>,
    /// Per client: the change it was last reported stuck behind.
    stuck: HashMap<usize, u32>,
    latencies: HashMap<String, Vec<f64>>,
    faults: Vec<Fault>,
    violations: Vec<Violation>,
    samples: HashMap<String, Vec<(f64, u32, Sample)>>,
    /// Streams opened per process name, with the time (for the slopes).
    opened: HashMap<String, Vec<f64>>,
    pushes: HashMap<&'static str, (u64, u64)>,
    resends: u64,
    ends: u64,
    nacks: u64,
    left: u64,
    warmup_end: Instant,
    settle_start: Instant,
}

fn via_name(via: Via, i: usize) -> String {
    match via {
        Via::Replica => format!("replica-{i}"),
        Via::Relay => format!("relay-{i}"),
    }
}

impl Soak {
    fn secs(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.t0).as_secs_f64()
    }

    fn spawn_client(&mut self, slot: usize, via: Via, home: usize, delta: bool, canary_md: bool) {
        let id = self.next_id;
        self.next_id += 1;
        let (targets, addrs): (Vec<usize>, Vec<String>) = match via {
            Via::Replica => (0..REPLICAS)
                .map(|k| (home + k) % REPLICAS)
                .map(|k| (k, self.replicas[k].addr()))
                .unzip(),
            Via::Relay => (0..RELAYS)
                .map(|k| (home + k) % RELAYS)
                .map(|k| (k, self.relays[k].addr()))
                .unzip(),
        };
        let spec = ClientSpec {
            id,
            node: format!("soak-{slot}-{id}"),
            // Behind a relay the replicas see the relay's node: its clients are never canaries,
            // whatever their own metadata says (docs/rollouts.md).
            canary: canary_md && via == Via::Replica,
            canary_metadata: canary_md,
            delta,
            via,
            targets,
            addrs,
            clusters: (0..CLUSTERS).map(push::cluster_name).collect(),
        };
        let state = Arc::new(ClientState {
            spec,
            marker: AtomicU32::new(0),
            on: AtomicUsize::new(usize::MAX),
            leave: AtomicBool::new(false),
            go_home: AtomicBool::new(false),
            joined: Instant::now(),
        });
        self.by_id.insert(id, state.clone());
        if slot < self.clients.len() {
            self.clients[slot] = state.clone();
        } else {
            self.clients.push(state.clone());
        }
        tokio::spawn(client::run(state, self.events_tx.clone()));
    }

    /// Samples every process from /proc, and each xdsd process's heap in use from its admin
    /// API (after /proc, so that the admin connection is not counted among its fds).
    async fn sample_all(&mut self) {
        let t = self.secs(Instant::now());
        let procs = self
            .replicas
            .iter()
            .chain(&self.relays)
            .chain(&self.etcd.members);
        let mut got = Vec::new();
        for p in procs {
            if let Some(s) = sample(p.pid) {
                got.push((p.name.clone(), p.starts, p.admin.clone(), s));
            }
        }
        for (name, starts, admin, mut s) in got {
            if let Some(admin) = admin {
                if let Ok(text) = http_get(&admin, "/metrics").await {
                    s.heap = metric(&text, "xdsd_heap_in_use_bytes") as u64;
                }
            }
            self.samples.entry(name).or_default().push((t, starts, s));
        }
    }

    fn on_push(&mut self, r: PushResult) {
        let kind: &'static str = match r.kind {
            PushKind::Good => "good",
            PushKind::BadReferences => "bad-references",
            PushKind::BadDirect => "bad-direct",
            PushKind::Poison => "poison",
        };
        let e = self.pushes.entry(kind).or_insert((0, 0));
        e.0 += 1;
        if r.written {
            e.1 += 1;
        }
        if !r.note.is_empty() && !r.written {
            eprintln!(
                "[soak] change {} ({kind}) not written: {}",
                r.marker, r.note
            );
        }
        if r.written && r.kind == PushKind::Good {
            let phase = self.phase_at(r.at);
            self.accepted.push(Accepted {
                marker: r.marker,
                at: r.at,
                phase,
            });
        }
    }
}

/// Runs the soak; returns its section of results.json (`passed` false when an invariant broke)
/// and writes soak.svg into `opts.out`.
pub async fn run(opts: SoakOptions) -> anyhow::Result<Value> {
    let t0 = Instant::now();
    let root = opts.out.join("soak");
    if root.exists() {
        std::fs::remove_dir_all(&root)?;
    }
    let logs = root.join("logs");
    std::fs::create_dir_all(&logs)?;
    eprintln!(
        "[soak] starting 3 etcd members (logs in {})",
        logs.display()
    );
    let etcd = Etcd::start(&root.join("etcd"), &logs, 3).await?;
    let etcd_client = etcd.client().await?;
    let mut pusher = Pusher {
        xdsd_bin: opts.xdsd_bin.clone(),
        dir: root.join("push"),
        endpoints: etcd.endpoints(),
        etcd: etcd_client,
        clusters: CLUSTERS,
        admins: Vec::new(),
    };
    // The first state, before any replica.
    let mut serial = 1u32;
    let first = pusher.change(serial, PushKind::Good).await;
    anyhow::ensure!(first.written, "the first push failed: {}", first.note);
    let (replicas, links, relays) = topology::start(&opts, &etcd.endpoints(), &logs).await?;
    pusher.admins = replicas.iter().filter_map(|r| r.admin.clone()).collect();
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let warmup = opts
        .duration
        .mul_f64(0.15)
        .clamp(Duration::from_secs(30), Duration::from_secs(300));
    let settle = Duration::from_secs(30);
    let start = Instant::now();
    let mut soak = Soak {
        t0,
        etcd,
        replicas,
        relays,
        links,
        clients: Vec::new(),
        by_id: HashMap::new(),
        next_id: 0,
        events_tx,
        rng: Rng(opts.seed.max(1)),
        accepted: Vec::new(),
        counted: HashMap::new(),
        stuck: HashMap::new(),
        latencies: HashMap::new(),
        faults: Vec::new(),
        violations: Vec::new(),
        samples: HashMap::new(),
        opened: HashMap::new(),
        pushes: HashMap::new(),
        resends: 0,
        ends: 0,
        nacks: 0,
        left: 0,
        warmup_end: start + warmup,
        settle_start: start + opts.duration.saturating_sub(settle),
        opts: opts.clone(),
    };
    soak.on_push(first);
    // Clients: half direct, half through the relays; SotW and delta in turn; one in four with
    // the canary metadata.
    let direct = opts.streams.div_ceil(2);
    for slot in 0..opts.streams {
        let (via, home) = if slot < direct {
            (Via::Replica, slot % REPLICAS)
        } else {
            (Via::Relay, slot % RELAYS)
        };
        soak.spawn_client(slot, via, home, slot % 2 == 1, slot % 4 == 0);
    }
    eprintln!(
        "[soak] {} streams ({direct} direct), {} s (warm-up {} s, settle {} s)",
        opts.streams,
        opts.duration.as_secs(),
        warmup.as_secs(),
        settle.as_secs()
    );
    // Changes: a task of their own (a push waits on etcd), its results into the loop.
    let (push_tx, mut pushed) = mpsc::unbounded_channel::<PushResult>();
    let stop_pushing = Arc::new(AtomicBool::new(false));
    let stop = stop_pushing.clone();
    let push_every = opts.push_every;
    let pusher_task = tokio::spawn(async move {
        let mut n = 0usize;
        let mut tick = tokio::time::interval(push_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        while !stop.load(Ordering::Relaxed) {
            tick.tick().await;
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let mut kind = CYCLE[n % CYCLE.len()];
            n += 1;
            serial += 1;
            if kind == PushKind::Poison {
                // A poison while the last change still soaks would replace it as the
                // candidate: wait for the replicas to promote it first.
                let idle = pusher
                    .wait_rollout(Duration::from_secs(20), |s| s == "idle")
                    .await;
                if !idle {
                    kind = PushKind::Good;
                }
            }
            let r = pusher.change(serial, kind).await;
            let halt = r.kind == PushKind::Poison && r.written;
            if push_tx.send(r).is_err() {
                break;
            }
            if halt {
                // The canaries NACK it and the replicas halt; the next change starts afresh.
                pusher
                    .wait_rollout(Duration::from_secs(15), |s| s == "halted")
                    .await;
            }
        }
    });
    // The fault schedule: spread over the time between the warm-up and the settle.
    let window = soak.settle_start.saturating_duration_since(soak.warmup_end);
    let count = ((window.as_secs_f64() / 30.0).floor() as usize).max(FAULTS.len());
    let spacing = window.div_f64(count as f64 + 0.5);
    let mut next_fault = 0usize;
    let mut actions: Vec<(Instant, Action)> = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut credit = 0.0;
    let per_tick = opts.streams as f64 * opts.churn_per_minute / 60.0;
    let end = start + opts.duration;
    let mut sampled = Instant::now();
    let mut settled = false;
    loop {
        tokio::select! {
            Some(e) = events.recv() => soak.on_event(e),
            Some(r) = pushed.recv() => soak.on_push(r),
            _ = tick.tick() => {
                let now = Instant::now();
                if now >= end {
                    break;
                }
                if now.duration_since(sampled) >= Duration::from_secs(2) {
                    soak.sample_all().await;
                    sampled = now;
                }
                soak.check_stuck(now);
                let mut crashed = Vec::new();
                for p in soak.replicas.iter_mut().chain(soak.relays.iter_mut()) {
                    if let Some(status) = p.exited() {
                        let _ = p.kill9().await;
                        crashed.push((p.name.clone(), status));
                    }
                }
                for (name, status) in crashed {
                    soak.broken(now, "no crash", name, String::new(), format!("exited on its own: {status}"));
                }
                if now >= soak.settle_start {
                    if !settled {
                        settled = true;
                        stop_pushing.store(true, Ordering::Relaxed);
                        // Every client and relay back home for the end's counts and leak figures.
                        actions.push((now, Action::Rebalance));
                    }
                } else if now >= soak.warmup_end {
                    soak.churn(&mut credit, per_tick);
                    let due = soak.warmup_end + spacing.mul_f64(next_fault as f64 + 0.5);
                    if now >= due && next_fault < count {
                        match soak.inject(next_fault).await {
                            Ok(after) => {
                                let at = Instant::now();
                                actions.extend(after.into_iter().map(|(d, a)| (at + d, a)));
                            }
                            Err(e) => eprintln!("[soak] fault {next_fault} not injected: {e:#}"),
                        }
                        next_fault += 1;
                    }
                } else {
                    soak.churn(&mut credit, per_tick);
                }
                let due: Vec<Action> = {
                    let (due, later): (Vec<_>, Vec<_>) = actions.drain(..).partition(|(t, _)| *t <= now);
                    actions = later;
                    due.into_iter().map(|(_, a)| a).collect()
                };
                for a in due {
                    if let Some((d, next)) = soak.act(a).await {
                        actions.push((Instant::now() + d, next));
                    }
                }
            }
        }
    }
    let _ = pusher_task.await;
    while let Ok(r) = pushed.try_recv() {
        soak.on_push(r);
    }
    // The end: every event in, the last convergence checked, counts and leaks read.
    tokio::time::sleep(Duration::from_millis(500)).await;
    while let Ok(e) = events.try_recv() {
        soak.on_event(e);
    }
    let now = Instant::now();
    if let Some(last) = soak.accepted.last() {
        let want = last.marker;
        let behind: Vec<Arc<ClientState>> = soak
            .clients
            .iter()
            .filter(|c| c.marker.load(Ordering::Relaxed) < want)
            .cloned()
            .collect();
        for c in behind {
            soak.broken(
                now,
                "converges",
                via_name(c.spec.via, c.spec.targets[0]),
                c.spec.node.clone(),
                format!(
                    "at the end holds change {}, not the last accepted {want}",
                    c.marker.load(Ordering::Relaxed)
                ),
            );
        }
    }
    let counts = soak.check_counts().await;
    soak.sample_all().await;
    let leaks = soak.leaks();
    for c in &soak.clients {
        c.leave.store(true, Ordering::Relaxed);
    }
    // Which faults the run survived: no invariant broken from the fault to its grace's end.
    for f in &mut soak.faults {
        let from = f.at_s;
        let to =
            f.restored_s.unwrap_or(f64::MAX) + GRACE.as_secs_f64() + soak.opts.bound.as_secs_f64();
        let hits: Vec<&Violation> = soak
            .violations
            .iter()
            .filter(|v| v.at_s >= from && v.at_s <= to)
            .collect();
        f.survived = f.restored.is_some() && hits.is_empty();
        if !hits.is_empty() {
            f.note = format!("{} invariant(s) broken meanwhile", hits.len());
        }
    }
    let mut conv = serde_json::Map::new();
    let mut phases: Vec<String> = soak.latencies.keys().cloned().collect();
    phases.sort();
    for p in phases {
        if let Some(v) = soak.latencies.get_mut(&p) {
            conv.insert(p, percentiles(v));
        }
    }
    let svg = report::svg(
        &soak.samples,
        &soak
            .faults
            .iter()
            .map(|f| (f.at_s, format!("{:?}", f.kind)))
            .collect::<Vec<_>>(),
        soak.secs(soak.warmup_end),
    );
    std::fs::write(opts.out.join("soak.svg"), svg)?;
    let pushes: serde_json::Map<String, Value> = soak
        .pushes
        .iter()
        .map(|(k, (tried, written))| (k.to_string(), json!({"tried": tried, "written": written})))
        .collect();
    let survived = soak.faults.iter().filter(|f| f.survived).count();
    let passed = soak.violations.is_empty();
    let result = json!({
        "passed": passed,
        "duration_s": opts.duration.as_secs_f64(),
        "streams": opts.streams,
        "leak_switch": opts.leak,
        "bound_s": opts.bound.as_secs_f64(),
        "warmup_s": warmup.as_secs_f64(),
        "faults_injected": soak.faults.len(),
        "faults_survived": survived,
        "faults": soak.faults,
        "invariants_broken": {"count": soak.violations.len(), "list": soak.violations},
        "changes": pushes,
        "changes_accepted": soak.accepted.len(),
        "convergence": conv,
        "clients_replaced": soak.left,
        "streams_ended": soak.ends,
        "resends": soak.resends,
        "canary_nacks": soak.nacks,
        "processes": leaks,
        "server_counts": counts,
        "plot": "soak.svg",
    });
    for p in soak
        .replicas
        .iter_mut()
        .chain(soak.relays.iter_mut())
        .chain(soak.etcd.members.iter_mut())
    {
        let _ = p.pause(false);
        p.stop().await;
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_by_range() {
        assert_eq!(Marker::of(1), Marker::Good);
        assert_eq!(Marker::of(REFUSED_BASE - 1), Marker::Good);
        assert_eq!(Marker::of(REFUSED_BASE + 7), Marker::Refused);
        assert_eq!(Marker::of(POISON_BASE + 7), Marker::Poison);
    }

    #[test]
    fn metric_sums_a_name_not_its_prefix() {
        let text = "# HELP x\nxdsd_relay_pending 2\nxdsd_relay_pending_expired_total 9\n\
            xdsd_relay_upstream_streams{kind=\"a\"} 1\nxdsd_relay_upstream_streams{kind=\"b\"} 2\n";
        assert_eq!(metric(text, "xdsd_relay_pending"), 2.0);
        assert_eq!(metric(text, "xdsd_relay_upstream_streams"), 3.0);
        assert_eq!(metric(text, "xdsd_nothing"), 0.0);
    }

    /// The link the soak cuts: connections through it are closed at the cut, refused while it is
    /// cut, and pass again once it is restored.
    #[tokio::test]
    async fn proxy_cuts_and_restores() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = echo.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        let proxy = Proxy::start(&target).await.unwrap();
        let roundtrip = |mut s: tokio::net::TcpStream| async move {
            s.write_all(b"ping").await.ok()?;
            let mut buf = [0u8; 4];
            s.read_exact(&mut buf).await.ok()?;
            Some((buf, s))
        };
        let s = tokio::net::TcpStream::connect(&proxy.addr).await.unwrap();
        let (got, mut s) = roundtrip(s).await.expect("through the proxy");
        assert_eq!(&got, b"ping");
        proxy.cut();
        let mut buf = [0u8; 4];
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("the cut closes the connection");
        assert!(matches!(n, Ok(0) | Err(_)), "closed by the cut");
        let s = tokio::net::TcpStream::connect(&proxy.addr).await.unwrap();
        assert!(roundtrip(s).await.is_none(), "refused while cut");
        proxy.restore();
        let s = tokio::net::TcpStream::connect(&proxy.addr).await.unwrap();
        assert!(roundtrip(s).await.is_some(), "passes once restored");
    }
}
