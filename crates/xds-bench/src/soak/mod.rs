//! The soak (`xds-bench --scenarios soak --soak-duration 10m`): the topology users run, from
//! real processes — 3 etcd members, 2 `xdsd serve` replicas on them, 2 `xdsd relay`s in front of
//! the replicas (each given both, `--upstream A,B` with its own first, each through a TCP proxy of
//! its own: the links the soak cuts) — and clients split across
//! replicas and relays, SotW and delta; churn all the time (clients leaving and joining, changes
//! pushed with `xdsd push`, some refused on purpose, canary rollouts promoted and halted); faults
//! on a schedule (a replica killed -9, the etcd leader killed, the relay's upstream link cut, a
//! relay killed, an etcd member paused past the election timeout); and checks, continuously and
//! at the end: convergence, nothing refused ever served, no stream ended but by its process
//! killed, a relay whose link is cut on its other upstream, no resend after a failover, no leak.
//! See BENCHMARKS.md's soak section.

pub mod client;
pub mod procs;
pub mod proxy;
pub mod push;
mod report;

pub use self::report::summary;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use self::client::{ClientSpec, ClientState, Event, Via};
use self::procs::{free_port, sample, Etcd, Proc, Role, Sample};
use self::proxy::Proxy;
use self::push::{PushKind, PushResult, Pusher, CYCLE, PREFIX};

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

/// The relay's upstream list, from one place: relay `j` is given these addresses (comma-joined
/// into `--upstream`): its links to every replica (`links[k]` leads to replica `k`), the one to
/// its own replica (`j`) first.
fn relay_upstreams(j: usize, links: &[Proxy]) -> Vec<String> {
    (0..links.len())
        .map(|k| links[(j + k) % links.len()].addr.clone())
        .collect()
}

/// The upstream streams a relay has on each of its links now, by replica (`links[k]` leads to
/// replica `k`), from its `xdsd_relay_upstream{address="..."}` series.
fn relay_on(metrics: &str, links: &[Proxy]) -> Vec<usize> {
    links
        .iter()
        .map(|l| {
            metric(
                metrics,
                &format!(r#"xdsd_relay_upstream{{address="{}"}}"#, l.addr),
            ) as usize
        })
        .collect()
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    ReplicaKill,
    EtcdLeaderKill,
    LinkCut,
    RelayKill,
    EtcdPause,
}

const FAULTS: [FaultKind; 5] = [
    FaultKind::ReplicaKill,
    FaultKind::EtcdLeaderKill,
    FaultKind::LinkCut,
    FaultKind::RelayKill,
    FaultKind::EtcdPause,
];

#[derive(Debug, Clone, serde::Serialize)]
struct Fault {
    kind: FaultKind,
    target: String,
    /// Seconds since the start.
    at_s: f64,
    restored_s: Option<f64>,
    #[serde(skip)]
    started: Instant,
    #[serde(skip)]
    restored: Option<Instant>,
    /// Streams whose end it explains: (via, process index).
    #[serde(skip)]
    explains: Vec<(Via, usize)>,
    survived: bool,
    note: String,
}

#[derive(Debug, Clone, serde::Serialize)]
struct Violation {
    /// Seconds since the start.
    at_s: f64,
    invariant: &'static str,
    process: String,
    stream: String,
    detail: String,
}

/// A change the replicas accepted (a good marker in etcd).
struct Accepted {
    marker: u32,
    at: Instant,
    phase: String,
}

/// Pending actions of the fault schedule.
enum Action {
    RestartReplica(usize, usize),
    RestartRelay(usize, usize),
    RestartEtcd(usize, usize),
    Resume(usize, usize),
    /// Restore relay `j`'s link to replica `k` (fault `f`): (j, k, f).
    Restore(usize, usize, usize),
    /// Check that relay `j` left replica `k` after its link was cut (fault `f`): (j, k, f).
    CheckFailover(usize, usize, usize),
    Rebalance,
    /// Send every relay back to its own replica.
    RelaysHome,
    /// Restore every link.
    LinksBack,
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

    fn broken(
        &mut self,
        at: Instant,
        invariant: &'static str,
        process: String,
        stream: String,
        detail: String,
    ) {
        let v = Violation {
            at_s: self.secs(at),
            invariant,
            process,
            stream,
            detail,
        };
        eprintln!(
            "[soak] INVARIANT BROKEN at {:.1}s: {} ({}; {}): {}",
            v.at_s, v.invariant, v.process, v.stream, v.detail
        );
        self.violations.push(v);
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

    /// The phase a moment belongs to.
    fn phase_at(&self, at: Instant) -> String {
        if at < self.warmup_end {
            return "warm-up".into();
        }
        if at >= self.settle_start {
            return "settle".into();
        }
        for f in self.faults.iter().rev() {
            let end = f.restored.map(|r| r + GRACE);
            if at >= f.started && end.is_none_or(|e| at < e) {
                return format!(
                    "fault: {}",
                    serde_json::to_value(f.kind)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default()
                );
            }
        }
        "steady".into()
    }

    fn on_event(&mut self, e: Event) {
        match e {
            Event::Holds { client, marker, at } => {
                let Some(c) = self.by_id.get(&client).cloned() else {
                    return;
                };
                if Marker::of(marker) != Marker::Good {
                    return;
                }
                let from = self.counted.get(&client).copied().unwrap_or(0);
                if marker < from && !c.spec.canary {
                    self.broken(
                        at,
                        "went back",
                        via_name(
                            c.spec.via,
                            c.spec.targets
                                [c.on.load(Ordering::Relaxed).min(c.spec.targets.len() - 1)],
                        ),
                        c.spec.node.clone(),
                        format!("held change {from}, then was sent the older change {marker}"),
                    );
                }
                if marker <= from {
                    return;
                }
                for a in &self.accepted {
                    if a.marker > from && a.marker <= marker && a.at >= c.joined {
                        let ms = at.saturating_duration_since(a.at).as_secs_f64() * 1000.0;
                        self.latencies.entry(a.phase.clone()).or_default().push(ms);
                    }
                }
                self.counted.insert(client, marker);
            }
            Event::Ended {
                client,
                via,
                target,
                at,
                error,
            } => {
                self.ends += 1;
                let explained = self.faults.iter().any(|f| {
                    f.explains.contains(&(via, target))
                        && at + Duration::from_millis(500) >= f.started
                        && f.restored.is_none_or(|r| at <= r + GRACE)
                });
                if !explained {
                    let node = self
                        .by_id
                        .get(&client)
                        .map(|c| c.spec.node.clone())
                        .unwrap_or_default();
                    self.broken(at, "stream ended", via_name(via, target), node, error);
                }
            }
            Event::Resent {
                client,
                via,
                target,
                at,
                what,
            } => {
                self.resends += 1;
                let node = self
                    .by_id
                    .get(&client)
                    .map(|c| c.spec.node.clone())
                    .unwrap_or_default();
                self.broken(
                    at,
                    "resent after a failover",
                    via_name(via, target),
                    node,
                    format!("sent {what} again, which it said it held when it reconnected"),
                );
            }
            Event::Forbidden {
                client,
                via,
                target,
                at,
                marker,
            } => {
                let node = self
                    .by_id
                    .get(&client)
                    .map(|c| c.spec.node.clone())
                    .unwrap_or_default();
                let what = match Marker::of(marker) {
                    Marker::Poison => "a non-canary was sent a canary's poison (the rollout's gate let it through)",
                    _ => "was sent a state the replicas must refuse",
                };
                self.broken(
                    at,
                    "refused state served",
                    via_name(via, target),
                    node,
                    format!("{what}: marker {marker}"),
                );
            }
            Event::Nacked => self.nacks += 1,
            Event::Connected { via, target } => {
                let t = self.secs(Instant::now());
                self.opened
                    .entry(via_name(via, target))
                    .or_default()
                    .push(t);
            }
        }
    }

    /// Every live client behind the last accepted change for longer than the bound.
    fn check_stuck(&mut self, now: Instant) {
        let Some(last) = self.accepted.last() else {
            return;
        };
        let (want, since) = (last.marker, last.at);
        let mut stuck = Vec::new();
        for c in &self.clients {
            if c.leave.load(Ordering::Relaxed) {
                continue;
            }
            let held = c.marker.load(Ordering::Relaxed);
            let from = since.max(c.joined);
            if held < want
                && now.saturating_duration_since(from) > self.opts.bound
                && self.stuck.get(&c.spec.id) != Some(&want)
            {
                stuck.push((c.clone(), held));
            }
        }
        for (c, held) in stuck {
            self.stuck.insert(c.spec.id, want);
            let on = c.on.load(Ordering::Relaxed);
            let process = if on == usize::MAX {
                format!(
                    "{} (not connected)",
                    via_name(c.spec.via, c.spec.targets[0])
                )
            } else {
                via_name(c.spec.via, c.spec.targets[on])
            };
            let secs = now
                .saturating_duration_since(since.max(c.joined))
                .as_secs_f64();
            self.broken(
                now,
                "converges",
                process,
                c.spec.node.clone(),
                format!(
                    "holds change {held}, {secs:.0} s after change {want} was accepted (bound {} s; {}, {})",
                    self.opts.bound.as_secs(),
                    if c.spec.delta { "delta" } else { "SotW" },
                    if c.spec.canary { "canary" } else { "stable" },
                ),
            );
        }
    }

    fn sample_all(&mut self) {
        let t = self.secs(Instant::now());
        let procs = self
            .replicas
            .iter()
            .chain(&self.relays)
            .chain(&self.etcd.members);
        let mut got = Vec::new();
        for p in procs {
            if let Some(s) = sample(p.pid) {
                got.push((p.name.clone(), p.starts, s));
            }
        }
        for (name, starts, s) in got {
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

    async fn restart(&mut self, role: Role, i: usize) -> anyhow::Result<()> {
        let p = match role {
            Role::Replica => &mut self.replicas[i],
            Role::Relay => &mut self.relays[i],
            Role::Etcd => &mut self.etcd.members[i],
        };
        p.spawn()?;
        if role != Role::Etcd {
            p.wait_listening(Duration::from_secs(30)).await?;
        }
        Ok(())
    }

    /// Starts fault number `n` of the schedule; returns the actions that end it.
    async fn inject(&mut self, n: usize) -> anyhow::Result<Vec<(Duration, Action)>> {
        let kind = FAULTS[n % FAULTS.len()];
        let round = n / FAULTS.len();
        let idx = self.faults.len();
        let mut explains = Vec::new();
        let (target, after) = match kind {
            FaultKind::ReplicaKill => {
                // Always replica-0: replica-1 lives the whole run, its leak figures over all of it.
                let i = KILLED;
                self.replicas[i].kill9().await?;
                explains.push((Via::Replica, i));
                (
                    self.replicas[i].name.clone(),
                    vec![(Duration::from_secs(2), Action::RestartReplica(i, idx))],
                )
            }
            FaultKind::EtcdLeaderKill => {
                let Some(i) = self.etcd.leader().await else {
                    anyhow::bail!("no etcd leader to kill");
                };
                self.etcd.members[i].kill9().await?;
                (
                    self.etcd.members[i].name.clone(),
                    vec![(Duration::from_secs(3), Action::RestartEtcd(i, idx))],
                )
            }
            FaultKind::LinkCut => {
                // The link relay j is on now: it must fail over to its other upstream, its
                // clients' streams kept (none is explained by this fault).
                let j = round % RELAYS;
                let k = self.relay_upstream(j).await.unwrap_or(j);
                self.links[j][k].cut();
                (
                    format!("relay-{j} -> replica-{k}"),
                    vec![
                        (Duration::from_secs(5), Action::CheckFailover(j, k, idx)),
                        (Duration::from_secs(6), Action::Restore(j, k, idx)),
                    ],
                )
            }
            FaultKind::RelayKill => {
                // Always relay-0: relay-1 lives the whole run (its link is cut in turn with relay-0's).
                let j = KILLED;
                self.relays[j].kill9().await?;
                explains.push((Via::Relay, j));
                (
                    self.relays[j].name.clone(),
                    vec![(Duration::from_secs(1), Action::RestartRelay(j, idx))],
                )
            }
            FaultKind::EtcdPause => {
                let i = self
                    .etcd
                    .leader()
                    .await
                    .unwrap_or(round % self.etcd.members.len());
                self.etcd.members[i].pause(true)?;
                (
                    format!("{} (SIGSTOP, the leader)", self.etcd.members[i].name),
                    vec![(Duration::from_secs(3), Action::Resume(i, idx))],
                )
            }
        };
        eprintln!(
            "[soak] {:.1}s fault {n}: {kind:?} {target}",
            self.secs(Instant::now())
        );
        self.faults.push(Fault {
            kind,
            target,
            at_s: self.secs(Instant::now()),
            restored_s: None,
            started: Instant::now(),
            restored: None,
            explains,
            survived: true,
            note: String::new(),
        });
        Ok(after)
    }

    async fn act(&mut self, a: Action) -> Option<(Duration, Action)> {
        let (fault, result) = match a {
            Action::RestartReplica(i, f) => (f, self.restart(Role::Replica, i).await),
            Action::RestartRelay(j, f) => (f, self.restart(Role::Relay, j).await),
            Action::RestartEtcd(i, f) => (f, self.restart(Role::Etcd, i).await),
            Action::Resume(i, f) => (f, self.etcd.members[i].pause(false)),
            Action::Restore(j, k, f) => {
                self.links[j][k].restore();
                (f, Ok(()))
            }
            Action::CheckFailover(j, k, f) => {
                let on = self.relay_upstream(j).await;
                if on.is_none_or(|on| on == k) {
                    let now = Instant::now();
                    let name = self.relays[j].name.clone();
                    self.broken(
                        now,
                        "a relay fails over",
                        name,
                        String::new(),
                        format!(
                            "5 s after its link to replica-{k} was cut (fault {f}), its upstream is {}",
                            match on {
                                Some(on) => format!("still replica-{on}"),
                                None => "none".to_owned(),
                            }
                        ),
                    );
                }
                return None;
            }
            Action::Rebalance => {
                for c in &self.clients {
                    let on = c.on.load(Ordering::Relaxed);
                    if on != 0 {
                        c.go_home.store(true, Ordering::Relaxed);
                    }
                }
                return None;
            }
            Action::RelaysHome => {
                // A relay stays on the upstream it failed over to: one away from its own
                // replica is sent home by a blink of the link it is on (it tries the next of
                // its two upstreams, its own), so that each replica ends with the upstream
                // streams it had after the warm-up.
                let mut after = None;
                for j in 0..RELAYS {
                    if let Some(k) = self.relay_upstream(j).await {
                        if k != j {
                            eprintln!("[soak] relay-{j} is on replica-{k}: sent home");
                            self.links[j][k].cut();
                            after = Some((Duration::from_secs(2), Action::LinksBack));
                        }
                    }
                }
                return after;
            }
            Action::LinksBack => {
                for l in self.links.iter().flatten() {
                    l.restore();
                }
                return None;
            }
        };
        let now = Instant::now();
        let secs = self.secs(now);
        if let Some(f) = self.faults.get_mut(fault) {
            f.restored = Some(now);
            f.restored_s = Some(secs);
            if let Err(e) = &result {
                f.note = format!("could not restore: {e:#}");
            }
        }
        if let Err(e) = result {
            let name = self
                .faults
                .get(fault)
                .map(|f| f.target.clone())
                .unwrap_or_default();
            self.broken(now, "fault restored", name, String::new(), format!("{e:#}"));
        }
        // Clients that failed over go back home (a load balancer's rebalance): each process
        // then serves the same streams as before the fault, for the leak checks.
        Some((Duration::from_secs(5), Action::Rebalance))
    }

    fn churn(&mut self, credit: &mut f64, per_tick: f64) {
        *credit += per_tick;
        while *credit >= 1.0 {
            *credit -= 1.0;
            let slot = self.rng.below(self.clients.len());
            let old = self.clients[slot].clone();
            old.leave.store(true, Ordering::Relaxed);
            self.left += 1;
            let s = &old.spec;
            let home = s.targets[0];
            self.spawn_client(slot, s.via, home, s.delta, s.canary_metadata);
        }
    }

    /// The replica relay `j`'s upstream stream is on now (its `xdsd_relay_upstream`), if it is
    /// on one.
    async fn relay_upstream(&self, j: usize) -> Option<usize> {
        let admin = self.relays[j].admin.as_ref()?;
        let m = http_get(admin, "/metrics").await.ok()?;
        relay_on(&m, &self.links[j]).iter().position(|n| *n > 0)
    }

    /// The server's own counts against what is live: stream records (GET /clients) of each
    /// replica and relay, the relays' pending names. Retried for a while: a closed stream is
    /// noticed by the server when its connection goes.
    async fn check_counts(&mut self) -> Value {
        let mut report = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            report.clear();
            let mut all_equal = true;
            // Upstream streams of relay j on replica k: relay_upstream[j][k].
            let mut relay_upstream = [[0usize; REPLICAS]; RELAYS];
            let mut relay_pending = [0f64; RELAYS];
            for (j, r) in self.relays.iter().enumerate() {
                if let Some(admin) = &r.admin {
                    if let Ok(m) = http_get(admin, "/metrics").await {
                        for (k, n) in relay_on(&m, &self.links[j]).into_iter().enumerate() {
                            relay_upstream[j][k] = n;
                        }
                        relay_pending[j] = metric(&m, "xdsd_relay_pending");
                    }
                }
            }
            for (role, procs) in [(Via::Replica, &self.replicas), (Via::Relay, &self.relays)] {
                for (i, p) in procs.iter().enumerate() {
                    let mut live = self
                        .clients
                        .iter()
                        .filter(|c| c.spec.via == role && !c.leave.load(Ordering::Relaxed))
                        .filter(|c| {
                            let on = c.on.load(Ordering::Relaxed);
                            on != usize::MAX && c.spec.targets[on] == i
                        })
                        .count();
                    if role == Via::Replica {
                        live += relay_upstream.iter().map(|on| on[i]).sum::<usize>();
                    }
                    let records = match &p.admin {
                        Some(a) => http_get(a, "/clients")
                            .await
                            .ok()
                            .and_then(|b| serde_json::from_str::<Value>(&b).ok())
                            .and_then(|v| v.as_array().map(|a| a.len())),
                        None => None,
                    };
                    let pending = if role == Via::Relay {
                        relay_pending[i]
                    } else {
                        0.0
                    };
                    if records != Some(live) || pending != 0.0 {
                        all_equal = false;
                    }
                    report.push((p.name.clone(), p.pid, records, live, pending));
                }
            }
            if all_equal || Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let now = Instant::now();
        let mut out = Vec::new();
        for (name, pid, records, live, pending) in report {
            if records != Some(live) {
                self.broken(
                    now,
                    "server counts equal what is live",
                    format!("{name} (pid {pid})"),
                    String::new(),
                    match records {
                        Some(n) => format!(
                            "holds {n} stream records (GET /clients), {live} streams are live"
                        ),
                        None => "GET /clients did not answer".into(),
                    },
                );
            }
            if pending != 0.0 {
                self.broken(
                    now,
                    "server counts equal what is live",
                    format!("{name} (pid {pid})"),
                    String::new(),
                    format!(
                        "{pending} names pending (xdsd_relay_pending) with nothing being fetched"
                    ),
                );
            }
            out.push(json!({"process": name, "pid": pid, "stream_records": records, "live_streams": live, "pending": pending}));
        }
        Value::Array(out)
    }

    /// Leak figures per process: growth from its warm-up value to the end, and the slopes.
    fn leaks(&mut self) -> Value {
        let mut out = serde_json::Map::new();
        let names: Vec<(String, Role, u32)> = self
            .replicas
            .iter()
            .chain(&self.relays)
            .chain(&self.etcd.members)
            .map(|p| (p.name.clone(), p.role, p.starts))
            .collect();
        let warmup_s = self.secs(self.warmup_end);
        let changes_at: Vec<f64> = self.accepted.iter().map(|a| self.secs(a.at)).collect();
        let now = Instant::now();
        for (name, role, starts) in names {
            let Some(samples) = self.samples.get(&name).cloned() else {
                continue;
            };
            let mine: Vec<&(f64, u32, Sample)> = samples.iter().filter(|s| s.1 == starts).collect();
            let Some(first) = mine.first() else {
                continue;
            };
            let base_at = warmup_s.max(first.0 + PROC_WARMUP.as_secs_f64());
            // Each value is the median of a few samples (one every 2 s), so that a client
            // caught between its old and new connection does not count: over 10 s from the
            // warm-up's end, and over the settle's last 20 s (every client home, no churn).
            let window = |from: f64, to: f64| {
                let w: Vec<&(f64, u32, Sample)> = mine
                    .iter()
                    .copied()
                    .filter(|s| s.0 >= from && s.0 < to)
                    .collect();
                let at = w.first().map(|s| s.0)?;
                Some((at, 0u32, median(&w)))
            };
            let settle_s = self.secs(self.settle_start);
            let base = window(base_at, base_at + 10.0);
            let end = window(settle_s + 10.0, f64::MAX).or_else(|| mine.last().map(|s| **s));
            let (Some(base), Some(end)) = (base, end) else {
                out.insert(
                    name.clone(),
                    json!({"role": role, "note": "restarted too late for a warm-up of its own"}),
                );
                continue;
            };
            let growth = |a: u64, b: u64| (b as f64 - a as f64) / (a.max(1) as f64);
            let rss_growth = growth(base.2.rss, end.2.rss);
            let fd_growth = growth(base.2.fds, end.2.fds);
            let thread_growth = growth(base.2.threads, end.2.threads);
            // Slopes over the samples after the baseline: RSS against streams opened on the
            // process, and against changes accepted.
            let after: Vec<&&(f64, u32, Sample)> = mine.iter().filter(|s| s.0 >= base.0).collect();
            let opened = self.opened.get(&name).cloned().unwrap_or_default();
            let xs_open: Vec<f64> = after
                .iter()
                .map(|s| opened.iter().filter(|t| **t <= s.0).count() as f64)
                .collect();
            let xs_change: Vec<f64> = after
                .iter()
                .map(|s| changes_at.iter().filter(|t| **t <= s.0).count() as f64)
                .collect();
            let ys: Vec<f64> = after.iter().map(|s| s.2.rss as f64).collect();
            let per_reconnect = slope(&xs_open, &ys);
            let per_change = slope(&xs_change, &ys);
            if role != Role::Etcd {
                for (what, g, b, e) in [
                    ("RSS", rss_growth, base.2.rss, end.2.rss),
                    ("open fds", fd_growth, base.2.fds, end.2.fds),
                    ("threads", thread_growth, base.2.threads, end.2.threads),
                ] {
                    if g > 0.05 {
                        self.broken(
                            now,
                            "no leak",
                            name.clone(),
                            String::new(),
                            format!("{what} grew {:.1} % from its warm-up value ({b} at {:.0} s) to the end ({e})", g * 100.0, base.0),
                        );
                    }
                }
            }
            out.insert(
                name.clone(),
                json!({
                    "role": role,
                    "incarnation": starts,
                    "warmup_at_s": base.0,
                    "rss_warmup": base.2.rss, "rss_end": end.2.rss, "rss_growth": rss_growth,
                    "fds_warmup": base.2.fds, "fds_end": end.2.fds, "fd_growth": fd_growth,
                    "threads_warmup": base.2.threads, "threads_end": end.2.threads, "thread_growth": thread_growth,
                    "rss_bytes_per_stream_opened": per_reconnect,
                    "rss_bytes_per_change": per_change,
                    "streams_opened": opened.iter().filter(|t| **t >= base.0).count(),
                    "held_to_bounds": role != Role::Etcd,
                }),
            );
        }
        Value::Object(out)
    }
}

/// Each field's median over the samples.
fn median(samples: &[&(f64, u32, Sample)]) -> Sample {
    let mid = |f: fn(&Sample) -> u64| {
        let mut v: Vec<u64> = samples.iter().map(|s| f(&s.2)).collect();
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or(0)
    };
    Sample {
        rss: mid(|s| s.rss),
        fds: mid(|s| s.fds),
        threads: mid(|s| s.threads),
    }
}

/// The least-squares slope of y against x (None without spread in x).
fn slope(xs: &[f64], ys: &[f64]) -> Option<f64> {
    let n = xs.len() as f64;
    if xs.len() < 3 {
        return None;
    }
    let mx = xs.iter().sum::<f64>() / n;
    let my = ys.iter().sum::<f64>() / n;
    let sxx: f64 = xs.iter().map(|x| (x - mx) * (x - mx)).sum();
    if sxx == 0.0 {
        return None;
    }
    let sxy: f64 = xs.iter().zip(ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    Some(sxy / sxx)
}

fn percentiles(v: &mut [f64]) -> Value {
    if v.is_empty() {
        return Value::Null;
    }
    v.sort_by(f64::total_cmp);
    let p = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    json!({"n": v.len(), "p50_ms": p(0.5), "p90_ms": p(0.9), "p99_ms": p(0.99), "max_ms": p(1.0)})
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
    // Replicas: fixed ports, so that a restart serves where its clients reconnect.
    let mut replicas = Vec::new();
    for i in 0..REPLICAS {
        let port = free_port()?;
        let admin = format!("127.0.0.1:{}", free_port()?);
        let args = vec![
            "serve".into(),
            "--etcd-endpoints".into(),
            etcd.endpoints(),
            "--etcd-prefix".into(),
            PREFIX.into(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--admin-listen".into(),
            admin.clone(),
            "--canary".into(),
            format!("metadata.{}=canary", client::COHORT_KEY),
            "--canary-soak".into(),
            "1s".into(),
            "--log-level".into(),
            "info".into(),
        ];
        let mut p = Proc::new(
            &format!("replica-{i}"),
            Role::Replica,
            &opts.xdsd_bin,
            args,
            &logs,
            port,
            Some(admin),
        );
        if opts.leak {
            p.env(LEAK_VAR, "1");
        }
        p.spawn()?;
        p.wait_listening(Duration::from_secs(60)).await?;
        replicas.push(p);
    }
    pusher.admins = replicas.iter().filter_map(|r| r.admin.clone()).collect();
    let mut links = Vec::new();
    for _ in 0..RELAYS {
        let mut mine = Vec::new();
        for r in &replicas {
            mine.push(Proxy::start(&r.addr()).await?);
        }
        links.push(mine);
    }
    let mut relays = Vec::new();
    for (j, mine) in links.iter().enumerate() {
        let port = free_port()?;
        let admin = format!("127.0.0.1:{}", free_port()?);
        let args = vec![
            "relay".into(),
            "--upstream".into(),
            relay_upstreams(j, mine).join(","),
            "--upstream-node-id".into(),
            format!("soak-relay-{j}"),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--admin-listen".into(),
            admin.clone(),
            "--log-level".into(),
            "info".into(),
        ];
        let mut p = Proc::new(
            &format!("relay-{j}"),
            Role::Relay,
            &opts.xdsd_bin,
            args,
            &logs,
            port,
            Some(admin),
        );
        p.spawn()?;
        p.wait_listening(Duration::from_secs(60)).await?;
        relays.push(p);
    }
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
                    soak.sample_all();
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
                        actions.push((now, Action::RelaysHome));
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
    soak.sample_all();
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

    #[test]
    fn slope_of_a_line_and_of_nothing() {
        let xs = [0.0, 1.0, 2.0, 3.0];
        let ys = [10.0, 12.0, 14.0, 16.0];
        assert_eq!(slope(&xs, &ys), Some(2.0));
        assert_eq!(slope(&[1.0, 1.0, 1.0], &[1.0, 2.0, 3.0]), None);
        assert_eq!(slope(&[1.0], &[1.0]), None);
    }

    #[test]
    fn percentiles_of_latencies() {
        let mut v: Vec<f64> = (1..=100).map(f64::from).collect();
        let p = percentiles(&mut v);
        assert_eq!(p["n"], 100);
        assert_eq!(p["max_ms"], 100.0);
        assert!(percentiles(&mut []).is_null());
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
