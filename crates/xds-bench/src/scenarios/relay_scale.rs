//! S12: a relay at scale. `xdsd relay` holding N EDS names (100,000 by default) on one upstream
//! stream, `--s12-streams` (10) delta ADS streams behind it, each holding every name (CDS
//! wildcard + EDS by name); against the same streams on the direct path (xdsd-dir), in the same
//! run: the first sync, each one-resource change's convergence (the first change after the sync
//! among them: rounds start as soon as every stream is synced), and the CPU per change of the
//! relay against the direct xdsd's.

use super::*;

/// One side of S12: the direct path (xdsd-dir) or through one relay (xdsd-relay).
async fn side(ctx: &mut Ctx, server: Server, spec: &ConfigSpec, streams: usize) -> Row {
    let row = new_row(ctx, "S12", server, true, streams, spec.clusters);
    progress(&format!(
        "S12 {} names={} streams={streams}",
        server.name(),
        spec.clusters
    ));
    crate::control::set_relays(1);
    let n = ctx.plan.rounds;
    let tracked = (0..n.min(spec.clusters))
        .map(config::cluster_name)
        .collect();
    let fleet = fleet_for(&row, spec, true, Kind::Eds, tracked);
    let mut s = match open(ctx, server, spec, fleet, row.clone()).await {
        Ok(s) => s,
        Err(e) => return failed_row(row, &e),
    };
    let mut changes = Vec::new();
    if s.row.note.is_empty() {
        let mut marker = INITIAL_MARKER;
        let make = |i, m| config::load_assignment(spec, i, m);
        match rounds(ctx, &mut s, Kind::Eds, make, n, &mut marker).await {
            Ok(c) => changes = c,
            Err(e) => s.row.note = format!("failed: {e:#}"),
        }
    }
    let (mut row, results) = close(s).await;
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
        "S12: synced (last stream) in {sync}, sync CPU {:.2} s; first change after the sync {first}",
        row.sync_cpu_s
    );
    row.note = if row.note.is_empty() {
        facts
    } else {
        format!("{facts}; {}", row.note)
    };
    row
}

/// S12 at `names` names: the direct row, then the relayed one with its ratios to the direct.
pub async fn s12(ctx: &mut Ctx, names: usize) -> Vec<Row> {
    let spec = ConfigSpec {
        clusters: names,
        endpoints: 1,
        listeners: 1,
        routes: 1,
        seed: ctx.plan.seed,
    };
    let streams = ctx.plan.s12_streams;
    let mut rows = Vec::new();
    for server in [Server::XdsdDir, Server::XdsdRelay] {
        rows.push(side(ctx, server, &spec, streams).await);
    }
    if let [direct, relayed] = &mut rows[..] {
        relayed.note = format!("{}; {}", relayed.note, ratios(direct, relayed));
    }
    rows
}

/// The relayed row against the direct one: first sync, convergence (p50 and max, and the
/// target: within 1.5x, or direct + 10 ms), CPU per change.
fn ratios(direct: &Row, relayed: &Row) -> String {
    let ratio = |r: f64, d: f64| r / d.max(f64::MIN_POSITIVE);
    let mut out = Vec::new();
    if let (Some(d), Some(r)) = (direct.sync_ms, relayed.sync_ms) {
        out.push(format!(
            "first sync {:.2}x the direct path's",
            ratio(r.max, d.max)
        ));
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
    if direct.changes > 0 && relayed.changes > 0 {
        let d = direct.change_cpu_s / direct.changes as f64;
        let r = relayed.change_cpu_s / relayed.changes as f64;
        out.push(format!(
            "relay CPU per change {:.2} ms, {:.2}x the direct xdsd's ({:.2} ms)",
            r * 1e3,
            ratio(r, d),
            d * 1e3
        ));
    }
    out.join("; ")
}
