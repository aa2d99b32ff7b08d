//! The soak's checks: convergence (a stream stuck behind the last accepted change), nothing
//! refused served, no stream ended but by its process killed, no resend after a failover; at
//! the end, the servers' counts against what is live and the leak figures; each broken
//! invariant recorded with the time, process and stream.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::client::{Event, Via};
use super::procs::{Role, Sample};
use super::topology::relay_on;
use super::{http_get, metric, via_name, Marker, Soak, GRACE, PROC_WARMUP, RELAYS, REPLICAS};

#[derive(Debug, Clone, serde::Serialize)]
pub(super) struct Violation {
    /// Seconds since the start.
    pub(super) at_s: f64,
    pub(super) invariant: &'static str,
    pub(super) process: String,
    pub(super) stream: String,
    pub(super) detail: String,
}

impl Soak {
    pub(super) fn broken(
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

    pub(super) fn on_event(&mut self, e: Event) {
        match e {
            Event::Holds { client, marker, at } => {
                let Some(c) = self.by_id.get(&client).cloned() else {
                    return;
                };
                if Marker::of(marker) != Marker::Good {
                    return;
                }
                let from = self.counted.get(&client).copied().unwrap_or(0);
                if let Some(detail) = went_back(from, marker, c.spec.canary) {
                    self.broken(
                        at,
                        "went back",
                        via_name(
                            c.spec.via,
                            c.spec.targets
                                [c.on.load(Ordering::Relaxed).min(c.spec.targets.len() - 1)],
                        ),
                        c.spec.node.clone(),
                        detail,
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
    pub(super) fn check_stuck(&mut self, now: Instant) {
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

    /// The server's own counts against what is live: stream records (GET /clients) of each
    /// replica and relay, the relays' pending names. Retried for a while: a closed stream is
    /// noticed by the server when its connection goes.
    pub(super) async fn check_counts(&mut self) -> Value {
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
    pub(super) fn leaks(&mut self) -> Value {
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
        // While a fault and its grace last, streams are away from home (clients and relays
        // failed over): a warm-up value read then is not comparable with the end's.
        let busy: Vec<(f64, f64)> = self
            .faults
            .iter()
            .map(|f| {
                (
                    f.at_s,
                    f.restored_s.unwrap_or(f64::MAX) + GRACE.as_secs_f64(),
                )
            })
            .collect();
        for (name, role, starts) in names {
            let Some(samples) = self.samples.get(&name).cloned() else {
                continue;
            };
            let mine: Vec<&(f64, u32, Sample)> = samples.iter().filter(|s| s.1 == starts).collect();
            let Some(first) = mine.first() else {
                continue;
            };
            let base_at = quiet_window(
                warmup_s.max(first.0 + PROC_WARMUP.as_secs_f64()),
                BASE_WINDOW_S,
                &busy,
            );
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
            let base = window(base_at, base_at + BASE_WINDOW_S);
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
            let heap_growth = growth(base.2.heap, end.2.heap);
            let fd_growth = growth(base.2.fds, end.2.fds);
            let thread_growth = growth(base.2.threads, end.2.threads);
            // What the process holds beyond its allocations (free pages the allocator keeps,
            // code, stacks): how much more at the end than after the warm-up. Reported beside
            // `--release-memory`'s slack, not held to it: the release thread measures from what
            // it held after its last release, which may sit above the warm-up (pages it cannot
            // return); the RSS bound holds what no allocation accounts for.
            let held = |s: &Sample| s.rss.saturating_sub(s.heap) as i64;
            let held_growth = held(&end.2) - held(&base.2);
            let held_bound = allocator_slack(end.2.heap);
            // Slopes over the samples after the baseline: RSS and heap in use against streams
            // opened on the process, and against changes accepted.
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
            let heaps: Vec<f64> = after.iter().map(|s| s.2.heap as f64).collect();
            let heap_per_reconnect = slope(&xs_open, &heaps);
            let heap_per_change = slope(&xs_change, &heaps);
            let heap_known = base.2.heap > 0 && end.2.heap > 0;
            if role != Role::Etcd {
                for (what, g, b, e) in leak_bounds(&base.2, &end.2) {
                    self.broken(
                        now,
                        "no leak",
                        name.clone(),
                        String::new(),
                        format!("{what} grew {:.1} % from its warm-up value ({b} at {:.0} s) to the end ({e})", g * 100.0, base.0),
                    );
                }
            }
            out.insert(
                name.clone(),
                json!({
                    "role": role,
                    "incarnation": starts,
                    "warmup_at_s": base.0,
                    "rss_warmup": base.2.rss, "rss_end": end.2.rss, "rss_growth": rss_growth,
                    "heap_warmup": base.2.heap, "heap_end": end.2.heap,
                    "heap_growth": if heap_known { json!(heap_growth) } else { Value::Null },
                    "held_beyond_heap_growth_bytes": if heap_known { json!(held_growth) } else { Value::Null },
                    "held_beyond_heap_bound_bytes": if heap_known { json!(held_bound) } else { Value::Null },
                    "fds_warmup": base.2.fds, "fds_end": end.2.fds, "fd_growth": fd_growth,
                    "threads_warmup": base.2.threads, "threads_end": end.2.threads, "thread_growth": thread_growth,
                    "rss_bytes_per_stream_opened": per_reconnect,
                    "rss_bytes_per_change": per_change,
                    "heap_bytes_per_stream_opened": if heap_known { json!(heap_per_reconnect) } else { Value::Null },
                    "heap_bytes_per_change": if heap_known { json!(heap_per_change) } else { Value::Null },
                    "streams_opened": opened.iter().filter(|t| **t >= base.0).count(),
                    "held_to_bounds": role != Role::Etcd,
                }),
            );
        }
        Value::Object(out)
    }
}

/// What `--release-memory` lets the allocator keep beyond the allocations before it gives
/// pages back (xdsd's `memory.rs`: 1 MiB, or a 32nd of the heap in use when more).
fn allocator_slack(heap: u64) -> u64 {
    (1u64 << 20).max(heap / 32)
}

/// The leak bounds a replica's or relay's figures at the end break, against its warm-up
/// values: (what, growth, warm-up value, end value) for each more than 5 % above: the resident
/// size (the bound), and where the process reports it the heap in use (what its
/// allocations hold: a leak shows there first, whatever the allocator keeps); open fds;
/// threads.
fn leak_bounds(base: &Sample, end: &Sample) -> Vec<(&'static str, f64, u64, u64)> {
    let growth = |a: u64, b: u64| (b as f64 - a as f64) / (a.max(1) as f64);
    let heap = (base.heap > 0 && end.heap > 0).then_some(("heap in use", base.heap, end.heap));
    [
        ("RSS", base.rss, end.rss),
        ("open fds", base.fds, end.fds),
        ("threads", base.threads, end.threads),
    ]
    .into_iter()
    .chain(heap)
    .map(|(what, b, e)| (what, growth(b, e), b, e))
    .filter(|(_, g, _, _)| *g > 0.05)
    .collect()
}

/// How long the window a warm-up value is the median of lasts, in seconds.
const BASE_WINDOW_S: f64 = 10.0;

/// The earliest start at or after `from` of a window `len` long that meets none of the `busy`
/// intervals (each fault from its start to its grace's end).
fn quiet_window(from: f64, len: f64, busy: &[(f64, f64)]) -> f64 {
    let mut at = from;
    while let Some(end) = busy
        .iter()
        .filter(|(s, e)| *s < at + len && *e > at)
        .map(|(_, e)| *e)
        .reduce(f64::max)
    {
        at = end;
    }
    at
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
        heap: mid(|s| s.heap),
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

/// A stream outside the cohort that held good change `held` (the newest it was sent) and is sent
/// the older good change `sent` went back (e.g. a replica that had not heard of a promotion
/// yet serving its stable state to a client that held the promoted change): what the violation
/// says. A canary may go back (a halt rolls it back), so it is not held to it.
fn went_back(held: u32, sent: u32, canary: bool) -> Option<String> {
    (sent < held && !canary)
        .then(|| format!("held change {held}, then was sent the older change {sent}"))
}

pub(super) fn percentiles(v: &mut [f64]) -> Value {
    if v.is_empty() {
        return Value::Null;
    }
    v.sort_by(f64::total_cmp);
    let p = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    json!({"n": v.len(), "p50_ms": p(0.5), "p90_ms": p(0.9), "p99_ms": p(0.99), "max_ms": p(1.0)})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_outside_the_cohort_sent_an_older_change_than_it_held_went_back() {
        assert_eq!(
            went_back(197, 196, false).as_deref(),
            Some("held change 197, then was sent the older change 196")
        );
        assert_eq!(went_back(197, 197, false), None, "the same change again");
        assert_eq!(went_back(196, 197, false), None, "a newer change");
        assert_eq!(went_back(0, 5, false), None, "its first change");
        assert_eq!(
            went_back(197, 196, true),
            None,
            "a canary rolled back by a halt"
        );
    }

    #[test]
    fn a_warm_up_window_skips_the_faults_it_would_meet() {
        let busy = [(20.0, 31.0), (35.0, 41.0), (60.0, 70.0)];
        assert_eq!(quiet_window(5.0, 10.0, &busy), 5.0, "before every fault");
        assert_eq!(
            quiet_window(15.0, 10.0, &busy),
            41.0,
            "past two faults too close"
        );
        assert_eq!(quiet_window(45.0, 10.0, &busy), 45.0, "between two");
        assert_eq!(quiet_window(55.0, 10.0, &[(60.0, f64::MAX)]), f64::MAX);
    }

    const MIB: u64 = 1 << 20;

    fn at(rss_mib: u64, heap_mib: u64, fds: u64) -> Sample {
        Sample {
            rss: rss_mib * MIB,
            fds,
            threads: 7,
            heap: heap_mib * MIB,
        }
    }

    #[test]
    fn the_leak_bound_holds_the_resident_size_and_the_heap_in_use() {
        // RSS +7 % with the heap flat: the allocator kept freed pages that --release-memory
        // should have given back: the bound is the RSS.
        let broken = leak_bounds(&at(54, 20, 50), &at(58, 20, 50));
        assert_eq!(broken.len(), 1, "{broken:?}");
        assert_eq!(broken[0].0, "RSS");
        // Within 5 %: nothing.
        assert!(leak_bounds(&at(54, 20, 50), &at(56, 20, 50)).is_empty());
        // The heap +10 %, RSS flat (it had the pages already): a leak.
        let broken = leak_bounds(&at(54, 20, 50), &at(54, 22, 50));
        assert_eq!(broken.len(), 1, "{broken:?}");
        assert_eq!(broken[0].0, "heap in use");
        // fds are held as before.
        assert_eq!(
            leak_bounds(&at(54, 20, 50), &at(54, 20, 53))[0].0,
            "open fds"
        );
        // A process that does not report its heap is held by its RSS.
        assert_eq!(leak_bounds(&at(54, 0, 50), &at(58, 0, 50))[0].0, "RSS");
    }

    #[test]
    fn the_allocator_may_keep_what_release_memory_lets_it() {
        assert_eq!(allocator_slack(20 * MIB), MIB);
        assert_eq!(allocator_slack(96 * MIB), 3 * MIB);
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
}
