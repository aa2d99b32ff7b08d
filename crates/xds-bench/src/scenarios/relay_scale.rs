//! S12: a relay at scale. `xdsd relay` holding N EDS names (100,000 by default) on one upstream
//! stream, `--s12-streams` (10) delta ADS streams behind it, each holding every name (CDS
//! wildcard + EDS by name); against the same streams on the direct path (xdsd-dir), in the same
//! run: the first sync, each one-resource change's convergence (the first change after the sync
//! among them), and the CPU per change of the relay against the direct xdsd's.
//!
//! Before the sync, each side's server is **idle holding the load**: the direct xdsd once it
//! read the files, the relay once it took in its prefetch of the upstream's load (no more than
//! [`IDLE_CPU`] in an [`IDLE_WINDOW`]), so that the first sync of either side is the clients'
//! alone: "a relay holding N names", as the direct xdsd holds them (until stop 67 the clients
//! came 200 ms after the upstream had the files, while the relay was still taking them in).
//!
//! Between the sync and the changes, the **sync's tail**: the server's CPU from the moment the
//! last stream synced until it is idle, and how long that took, reported on its own; the
//! changes start once the server is idle, so that work still done for the sync is never
//! counted as the changes'.

use super::*;

use std::collections::VecDeque;
use std::time::Instant;

/// A server is idle once it used at most [`IDLE_CPU`] seconds of CPU over this window.
const IDLE_WINDOW: Duration = Duration::from_millis(500);
/// See [`IDLE_WINDOW`]: two clock ticks of `/proc`'s 10 ms.
const IDLE_CPU: f64 = 0.02;
/// How long S12 waits for the server to become idle (before the sync, after it) at most.
pub(super) const IDLE_WAIT: Duration = Duration::from_secs(120);

/// The sync's tail of session `s`: the server's CPU seconds from the last stream synced until
/// it became idle, and the time that took (`None`: not idle within [`IDLE_WAIT`]).
async fn sync_tail(s: &Session) -> (f64, Option<Duration>) {
    idle(&s.proc, s.synced_at, s.synced_cpu_s).await
}

/// Waits until the server of `proc` is idle from `(since, cpu)` on (its clock and CPU then):
/// the CPU seconds it used until then and how long that took (`None`: not idle within
/// [`IDLE_WAIT`], and the CPU until then).
pub(super) async fn idle(proc: &Proc, since: Instant, cpu: f64) -> (f64, Option<Duration>) {
    let mut samples: VecDeque<(Instant, f64)> = VecDeque::new();
    samples.push_back((since, cpu));
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = Instant::now();
        let used = proc.cpu_seconds();
        samples.push_back((now, used));
        // The oldest sample still at least a window back: the window's start.
        while samples.len() > 2 && now.duration_since(samples[1].0) >= IDLE_WINDOW {
            samples.pop_front();
        }
        let (start, start_cpu) = samples[0];
        if now.duration_since(start) >= IDLE_WINDOW && used - start_cpu <= IDLE_CPU {
            return (start_cpu - cpu, Some(start.duration_since(since)));
        }
        if now.duration_since(since) >= IDLE_WAIT {
            return (used - cpu, None);
        }
    }
}

/// The relay's extra arguments in S12: its upstream constrains nothing, and the relay is told
/// so (`--upstream-keys=`, as an operator who runs that upstream would), so the clients' node
/// cluster (`xds-bench`, as every Envoy presents one) opens no upstream stream of its own for
/// their wildcards: one upstream stream, the scenario's. `XDS_BENCH_RELAY_ARGS` set in the
/// bench's environment replaces it (`XDS_BENCH_RELAY_ARGS=' '`: a relay not told, whose
/// clients' CDS and LDS wildcards are fetched on their parameter set's stream).
const S12_RELAY_ARGS: &str = "--upstream-keys=";

/// One side of S12: the direct path (xdsd-dir) or through one relay (xdsd-relay).
async fn side(ctx: &mut Ctx, server: Server, spec: &ConfigSpec, streams: usize) -> Row {
    let row = new_row(ctx, "S12", server, true, streams, spec.clusters);
    progress(&format!(
        "S12 {} names={} streams={streams}",
        server.name(),
        spec.clusters
    ));
    crate::control::set_relays(1);
    crate::control::set_relay_args(S12_RELAY_ARGS);
    let n = ctx.plan.rounds;
    let tracked = (0..n.min(spec.clusters))
        .map(config::cluster_name)
        .collect();
    let fleet = fleet_for(&row, spec, true, Kind::Eds, tracked);
    let mut s = match open(ctx, server, spec, fleet, row.clone()).await {
        Ok(s) => s,
        Err(e) => {
            crate::control::set_relay_args("");
            return failed_row(row, &e);
        }
    };
    let mut changes = Vec::new();
    let mut tail = "none".to_owned();
    if s.row.note.is_empty() {
        let (cpu, took) = sync_tail(&s).await;
        s.proc.phase("idle").await;
        tail = match took {
            Some(t) => format!(
                "{:.0} ms of CPU over {:.0} ms",
                cpu * 1e3,
                t.as_secs_f64() * 1e3
            ),
            None => format!(
                "{:.0} ms of CPU, not idle after {} s",
                cpu * 1e3,
                IDLE_WAIT.as_secs()
            ),
        };
        s.row.tail_cpu_s = Some(cpu);
    }
    if s.row.note.is_empty() {
        let mut marker = INITIAL_MARKER;
        let make = |i, m| config::load_assignment(spec, i, m);
        match rounds(ctx, &mut s, Kind::Eds, make, n, &mut marker).await {
            Ok(c) => changes = c,
            Err(e) => s.row.note = format!("failed: {e:#}"),
        }
    }
    let (mut row, results) = close(s).await;
    crate::control::set_relay_args("");
    fill_latencies(&mut row, &changes, &results);
    let (last, _, _) = latencies(&changes, &results);
    let first = match last.first() {
        Some(Some(ns)) => format!("{:.1} ms", *ns as f64 / 1e6),
        Some(None) => "never".to_owned(),
        None => "none".to_owned(),
    };
    let sync = row
        .sync_ms
        .map(|p| format!("{:.0} ms", p.max))
        .unwrap_or_else(|| "none".to_owned());
    let facts = format!(
        "S12: synced (last stream) in {sync}, sync CPU {:.2} s; the sync's tail (from the last stream synced until idle) {tail}; first change after the sync (and its tail) {first}",
        row.sync_cpu_s
    );
    row.note = if row.note.is_empty() {
        facts
    } else {
        format!("{facts}; {}", row.note)
    };
    row
}

/// S12 at `names` names, `--s12-pairs` times: each pair's direct row, then its relayed one with
/// its ratios to the direct; the pairs alternate which side runs first (a host that slows down
/// or speeds up over a run weighs on both sides alike), and with more than one pair the last
/// relayed row also gives the median of the pairs' first-sync ratios (one pair's ratio moves
/// with the host as much as with the relay: stop 77 measured the direct path's own sync
/// between 1,579 and 2,790 ms from run to run).
pub async fn s12(ctx: &mut Ctx, names: usize) -> Vec<Row> {
    let spec = ConfigSpec {
        clusters: names,
        endpoints: 1,
        listeners: 1,
        routes: 1,
        seed: ctx.plan.seed,
    };
    let streams = ctx.plan.s12_streams;
    let pairs = ctx.plan.s12_pairs.max(1);
    let mut rows = Vec::new();
    let mut syncs = Vec::new();
    for pair in 0..pairs {
        let order = if pair % 2 == 0 {
            [Server::XdsdDir, Server::XdsdRelay]
        } else {
            [Server::XdsdRelay, Server::XdsdDir]
        };
        let mut direct = None;
        let mut relayed = None;
        for server in order {
            let row = side(ctx, server, &spec, streams).await;
            match server {
                Server::XdsdDir => direct = Some(row),
                _ => relayed = Some(row),
            }
        }
        let (Some(direct), Some(mut relayed)) = (direct, relayed) else {
            continue;
        };
        relayed.note = format!("{}; {}", relayed.note, ratios(&direct, &relayed));
        if pairs > 1 {
            let first = if pair % 2 == 0 { "direct" } else { "relay" };
            relayed.note = format!(
                "{}; pair {} of {pairs} ({first} first)",
                relayed.note,
                pair + 1
            );
        }
        syncs.push(first_sync_ratio(&direct, &relayed));
        rows.push(direct);
        rows.push(relayed);
    }
    if pairs > 1 {
        if let Some(last) = rows.last_mut() {
            last.note = format!("{}; {}", last.note, median_of_pairs(&syncs));
        }
    }
    rows
}

/// The relayed row's first sync over the direct one's (`None`: either did not sync).
fn first_sync_ratio(direct: &Row, relayed: &Row) -> Option<f64> {
    let (d, r) = (direct.sync_ms?, relayed.sync_ms?);
    Some(r.max / d.max.max(f64::MIN_POSITIVE))
}

/// What the pairs' first-sync ratios say together: their median, and each in order.
fn median_of_pairs(ratios: &[Option<f64>]) -> String {
    let each: Vec<String> = ratios
        .iter()
        .map(|r| r.map_or_else(|| "none".to_owned(), |r| format!("{r:.2}x")))
        .collect();
    let mut synced: Vec<f64> = ratios.iter().flatten().copied().collect();
    if synced.len() < ratios.len() || synced.is_empty() {
        return format!(
            "first sync over {} alternated pairs: no median, a pair did not sync ({})",
            ratios.len(),
            each.join(", ")
        );
    }
    synced.sort_by(f64::total_cmp);
    format!(
        "first sync over {} alternated pairs: median {:.2}x the direct path's ({})",
        ratios.len(),
        median(&synced),
        each.join(", ")
    )
}

/// The relayed row against the direct one: first sync, convergence (p50 and max, and the
/// target: within 1.5x, or direct + 10 ms), CPU per change.
fn ratios(direct: &Row, relayed: &Row) -> String {
    let ratio = |r: f64, d: f64| r / d.max(f64::MIN_POSITIVE);
    let mut out = Vec::new();
    if let Some(first) = first_sync_ratio(direct, relayed) {
        out.push(format!("first sync {first:.2}x the direct path's"));
    }
    if let (Some(d), Some(r)) = (direct.conv_ms, relayed.conv_ms) {
        let bound = (d.max * 1.5).max(d.max + 10.0);
        out.push(format!(
            "convergence p50 {:.2}x, max {:.2}x the direct path's (max {:.1} ms against a bound of {bound:.1} ms)",
            ratio(r.p50, d.p50),
            ratio(r.max, d.max),
            r.max
        ));
    }
    if let (Some(d), Some(r)) = (direct.tail_cpu_s, relayed.tail_cpu_s) {
        out.push(format!(
            "the sync's tail: relay CPU {:.0} ms against the direct xdsd's {:.0} ms",
            r * 1e3,
            d * 1e3
        ));
    }
    if direct.changes > 0 && relayed.changes > 0 {
        let d = direct.change_cpu_s / direct.changes as f64;
        let r = relayed.change_cpu_s / relayed.changes as f64;
        out.push(cpu_per_change(r, d));
    }
    out.join("; ")
}

/// The relay's CPU per change against the direct xdsd's (seconds each). A process's CPU is
/// read in clock ticks (10 ms), so over a few changes the direct xdsd's may read as none: the
/// ratio is then said to be undefined, not printed as a quotient of a rounding.
fn cpu_per_change(relay: f64, direct: f64) -> String {
    let against = if direct * 1e3 < 0.005 {
        "the direct xdsd's read as 0.00 ms (below the CPU clock's tick over these changes: no ratio)"
            .to_owned()
    } else {
        format!(
            "{:.2}x the direct xdsd's ({:.2} ms)",
            relay / direct,
            direct * 1e3
        )
    };
    format!("relay CPU per change {:.2} ms, {against}", relay * 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_the_pairs_first_syncs_is_the_middle_one_or_none_if_a_pair_did_not_sync() {
        assert_eq!(
            median_of_pairs(&[Some(1.55), Some(0.71), Some(1.08)]),
            "first sync over 3 alternated pairs: median 1.08x the direct path's (1.55x, 0.71x, 1.08x)"
        );
        assert!(median_of_pairs(&[Some(1.0), Some(2.0)]).contains("median 1.50x"));
        let none = median_of_pairs(&[Some(1.2), None, Some(1.1)]);
        assert!(
            none.contains("no median") && none.contains("none"),
            "{none}"
        );
    }

    #[test]
    fn a_direct_cpu_per_change_read_as_none_gives_no_ratio() {
        let none = cpu_per_change(0.010, 0.0);
        assert!(none.contains("no ratio"), "{none}");
        assert!(!none.contains("x the"), "{none}");
        let some = cpu_per_change(0.010, 0.005);
        assert_eq!(
            some,
            "relay CPU per change 10.00 ms, 2.00x the direct xdsd's (5.00 ms)"
        );
    }
}
