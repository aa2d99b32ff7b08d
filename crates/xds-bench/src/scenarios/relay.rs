//! S10 and S11: fan-out through `xdsd relay` against the direct path.

use super::*;

/// S10, S11: S1's fan-out (one ClusterLoadAssignment changes per round) on `server`, with
/// `relays` relays in front of xdsd for xdsd-relay; besides the clients' figures, the bytes the
/// xdsd that reads the resources sent per change (its `xdsd_response_bytes_total`), to the
/// clients directly or to the relays: one response per relay, not per client, through relays.
async fn relayed(
    ctx: &mut Ctx,
    scenario: &str,
    server: Server,
    streams: usize,
    relays: usize,
) -> Row {
    let spec = ctx.plan.s1_config;
    let row = new_row(ctx, scenario, server, false, streams, spec.clusters);
    progress(&format!(
        "{scenario} {} streams={streams} relays={relays}",
        server.name()
    ));
    crate::control::set_relays(relays);
    let tracked = (0..spec.clusters).map(config::cluster_name).collect();
    let fleet = fleet_for(&row, &spec, false, Kind::Eds, tracked);
    let mut s = match open(ctx, server, &spec, fleet, row.clone()).await {
        Ok(s) => s,
        Err(e) => return failed_row(row, &e),
    };
    let mut changes = Vec::new();
    let mut upstream = String::new();
    if s.row.note.is_empty() {
        let measured = async {
            let sent0 = s.proc.sent_bytes().await?;
            let mut marker = INITIAL_MARKER;
            let make = |i, m| config::load_assignment(&spec, i, m);
            let n = ctx.plan.rounds;
            let c = rounds(ctx, &mut s, Kind::Eds, make, n, &mut marker).await?;
            // The relays' ACKs and anything still on its way upstream land before the count.
            tokio::time::sleep(Duration::from_millis(200)).await;
            let sent = s.proc.sent_bytes().await? - sent0;
            anyhow::Ok((c, sent))
        };
        match measured.await {
            Ok((c, sent)) => {
                let per_change = sent / (c.len().max(1) as u64);
                upstream = format!(
                    "{scenario}: {} relay(s); xdsd (the upstream) sent {per_change} bytes per change",
                    if server == Server::XdsdRelay { relays } else { 0 }
                );
                changes = c;
            }
            Err(e) => s.row.note = format!("failed: {e:#}"),
        }
    }
    let (mut row, results) = close(s).await;
    fill_latencies(&mut row, &changes, &results);
    crate::control::set_relays(1);
    row.note = match (upstream.is_empty(), row.note.is_empty()) {
        (_, true) => upstream,
        (true, false) => row.note,
        (false, false) => format!("{upstream}; {}", row.note),
    };
    row
}

/// S10: S1's fan-out through one relay against the direct path (xdsd-dir), in the same run, at
/// S10's stream counts: the convergence ratio of the two rows, and the upstream's bytes per
/// change (through the relay one response per change, not one per client).
pub async fn s10(ctx: &mut Ctx, streams: usize) -> Vec<Row> {
    let mut rows = Vec::new();
    for server in [Server::XdsdDir, Server::XdsdRelay] {
        rows.push(relayed(ctx, "S10", server, streams, 1).await);
    }
    let ratio = match &rows[..] {
        [direct, relayed] => direct
            .conv_ms
            .zip(relayed.conv_ms)
            .map(|(d, r)| r.p50 / d.p50.max(f64::MIN_POSITIVE)),
        _ => None,
    };
    if let (Some(ratio), Some(relayed)) = (ratio, rows.get_mut(1)) {
        relayed.note = format!(
            "{}; p50 convergence {ratio:.2}x the direct path's",
            relayed.note
        );
    }
    rows
}

/// S11: `s11_relays` relays × `s11_streams` streams each behind one xdsd, a change to every
/// stream (S1's round): convergence to the last stream of every relay, and the upstream's bytes
/// per change (one response per relay).
pub async fn s11(ctx: &mut Ctx) -> Row {
    let relays = ctx.plan.s11_relays.max(1);
    let streams = relays * ctx.plan.s11_streams;
    relayed(ctx, "S11", Server::XdsdRelay, streams, relays).await
}
