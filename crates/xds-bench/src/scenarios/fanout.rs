//! The scenarios on one server's fan-out: S1 (with S3 and S4 from its sessions), S2 large
//! state, S5 change rate, S6 parameter groups, S7 a directory of many files. The machinery
//! they share with the later scenarios (sessions, rounds, rows) is the parent module's.

use super::*;

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

/// Above this many (node, cluster) pairs the peer's per-node snapshots do not fit in memory.
const PEER_MAX_NODE_CLUSTERS: usize = 2_000_000;

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
