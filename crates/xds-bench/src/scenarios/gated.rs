//! S8 and S9: changes through a gated rollout (a canary cohort, then the promotion).

use super::*;

/// S8: S1 through a gated rollout (`--canary 10%`, a soak of an hour): each change goes to the
/// canary cohort, and only to it (checked: no client outside the cohort has it); once every
/// canary has it, the bench promotes it (`POST /rollout/promote`, replica 0's with replicas) and
/// waits for every client. The cohort's convergence is from the change (to the last canary), the
/// promotion's from the promote request (to the last client outside the cohort): the row's
/// convergence, to compare with S1's.
pub async fn s8(ctx: &mut Ctx, server: Server, streams: usize) -> Row {
    let spec = ctx.plan.s1_config;
    let row = new_row(ctx, "S1", server, false, streams, spec.clusters);
    progress(&format!("S8 {} streams={streams}", server.name()));
    let id = |i: usize| format!("{}{i}", crate::client::NODE_PREFIX);
    let (canaries, others): (Vec<usize>, Vec<usize>) =
        (0..streams).partition(|i| in_cohort(S8_CANARY, &id(*i)));
    if canaries.is_empty() {
        // Every change would wait for a canary (docs/rollouts.md): nothing to measure.
        let mut row = row;
        row.note = format!(
            "S8 gated: not run, none of the {streams} nodes falls in the {S8_CANARY} cohort"
        );
        return row;
    }
    let tracked = (0..spec.clusters).map(config::cluster_name).collect();
    let fleet = fleet_for(&row, &spec, false, Kind::Eds, tracked);
    ctx.xdsd_args = ["--canary", S8_CANARY, "--canary-soak", "60m"]
        .map(String::from)
        .to_vec();
    let opened = open(ctx, server, &spec, fleet, row.clone()).await;
    ctx.xdsd_args.clear();
    let mut s = match opened {
        Ok(s) => s,
        Err(e) => return failed_row(row, &e),
    };
    let mut changes = Vec::new();
    let mut promotions = Vec::new();
    if s.row.note.is_empty() {
        let make = |i, m| config::load_assignment(&spec, i, m);
        if let Err(e) = gated_rounds(
            ctx,
            &mut s,
            &canaries,
            &others,
            make,
            &mut changes,
            &mut promotions,
        )
        .await
        {
            s.row.note = format!("failed: {e:#}");
        }
    }
    let (mut row, results) = close(s).await;
    fill_latencies(&mut row, &promotions, &results);
    let of = |clients: &[usize]| clients.iter().map(|i| &results[*i]).collect::<Vec<_>>();
    let last = |changes: &[(u32, u32, u64)], of: &[&ClientResult]| {
        pct(latencies_of(changes, of).0.into_iter().flatten().collect())
    };
    row.canary_ms = last(&changes, &of(&canaries));
    row.promoted_ms = last(&promotions, &of(&others));
    // The row's convergence: the promotion's, to the clients outside the cohort.
    row.conv_ms = row.promoted_ms;
    let p = |x: &Option<Pct>| {
        x.map(|p| format!("p50 {:.1} ms, p99 {:.1} ms", p.p50, p.p99))
            .unwrap_or_else(|| "–".into())
    };
    let gated = format!(
        "S8 gated: --canary {S8_CANARY}, promoted through the admin API once every canary had the \
         change; the cohort ({} streams) converged {} from the change, the promotion to the \
         others ({} streams) {} from the promote request (the row's)",
        canaries.len(),
        p(&row.canary_ms),
        others.len(),
        p(&row.promoted_ms)
    );
    row.note = if row.note.is_empty() {
        gated
    } else {
        format!("{gated}; {}", row.note)
    };
    row
}

/// S8's rounds: a change to the canaries, checked not to reach the others, then promoted.
/// `changes` gets (tracked, marker, accepted), `promotions` (tracked, marker, promote request).
async fn gated_rounds(
    ctx: &Ctx,
    s: &mut Session,
    canaries: &[usize],
    others: &[usize],
    make: impl Fn(usize, u32) -> Res,
    changes: &mut Vec<(u32, u32, u64)>,
    promotions: &mut Vec<(u32, u32, u64)>,
) -> anyhow::Result<()> {
    let tracked = s.fleet.shared.spec().tracked.len();
    let timeout = Duration::from_secs(ctx.plan.change_timeout_s);
    let cpu0 = s.proc.cpu_seconds();
    let client0 = self_cpu_seconds();
    let bytes0 = s.fleet.shared.bytes.load(Ordering::Relaxed);
    let resp0 = s.fleet.shared.responses.load(Ordering::Relaxed);
    let mut marker = INITIAL_MARKER;
    for r in 0..ctx.plan.rounds {
        let id = (r % tracked) as u32;
        marker += 1;
        let res = make(id as usize, marker);
        let accepted = s
            .proc
            .set(res.type_url, &res.name, &res.value, res.group.as_deref())
            .await?;
        changes.push((id, marker, accepted));
        anyhow::ensure!(
            s.fleet
                .wait_clients_marker(canaries, id, marker, timeout)
                .await,
            "round {r}: not every canary had the change in {} s",
            ctx.plan.change_timeout_s
        );
        let leaked = s.fleet.shared.clients_at_least(others, id, marker);
        anyhow::ensure!(
            leaked == 0,
            "round {r}: {leaked} clients outside the cohort had the change before its promotion"
        );
        let promoted = s.proc.promote().await?;
        promotions.push((id, marker, promoted));
        anyhow::ensure!(
            s.fleet.wait_marker(id, marker, timeout).await,
            "round {r}: not every client had the promoted change in {} s",
            ctx.plan.change_timeout_s
        );
        // Let the ACKs land before the next change.
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    s.row.change_cpu_s = s.proc.cpu_seconds() - cpu0;
    s.row.client_cpu_s = self_cpu_seconds() - client0;
    s.row.bytes = s.fleet.shared.bytes.load(Ordering::Relaxed) - bytes0;
    s.row.responses = s.fleet.shared.responses.load(Ordering::Relaxed) - resp0;
    Ok(())
}

/// Whether the node `id` is in the cohort `selector` picks (as xdsd decides it).
pub(super) fn in_cohort(selector: &str, id: &str) -> bool {
    let node = envoy_types::pb::envoy::config::core::v3::Node {
        id: id.into(),
        ..Default::default()
    };
    match (
        xdsd_core::rollout::Selector::parse(selector),
        xdsd_core::ClientNode::from_node(&node),
    ) {
        (Ok(selector), Ok(node)) => selector.matches(&node),
        _ => false,
    }
}

/// S9 replica failover (xdsd-etcd: two replicas): S1's clients synced across both replicas,
/// then replica A is killed (SIGKILL); each of its clients reconnects to replica B asking, as
/// Envoy does, for what it holds with the versions it has. Counted: the clients that reconnected
/// and the resources they were sent again (both replicas are at the same etcd revision: 0
/// expected); then S1's rounds, whose convergence is to every client, the moved ones included.
pub async fn s9(ctx: &mut Ctx, server: Server, streams: usize) -> Row {
    let spec = ctx.plan.s1_config;
    let row = new_row(ctx, "S1", server, false, streams, spec.clusters);
    if server != Server::XdsdEtcd {
        let mut row = row;
        row.note = "S9 failover: not run (only xdsd-etcd runs replicas)".into();
        return row;
    }
    progress(&format!("S9 {} streams={streams}", server.name()));
    let tracked = (0..spec.clusters).map(config::cluster_name).collect();
    let mut fleet = fleet_for(&row, &spec, false, Kind::Eds, tracked);
    fleet.failover = true;
    let mut s = match open(ctx, server, &spec, fleet, row.clone()).await {
        Ok(s) => s,
        Err(e) => return failed_row(row, &e),
    };
    let mut changes = Vec::new();
    let mut failover = String::new();
    if s.row.note.is_empty() {
        // The connections alternate between the replicas: replica A holds the even ones.
        let conns = s.row.connections.max(1);
        let on_a = (0..streams).filter(|i| (i % conns) % 2 == 0).count();
        let killed = crate::now_ns();
        let outcome = async {
            s.proc.kill(0).await?;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            while s.fleet.shared.reconnected.load(Ordering::Relaxed) < on_a {
                anyhow::ensure!(
                    tokio::time::Instant::now() < deadline,
                    "{} of {on_a} clients reconnected in 60 s",
                    s.fleet.shared.reconnected.load(Ordering::Relaxed)
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let moved_ms = (crate::now_ns() - killed) as f64 / 1e6;
            // What the other replica answers to a reconnect comes at once; wait for it.
            tokio::time::sleep(Duration::from_secs(2)).await;
            let resent = s.fleet.shared.resent.load(Ordering::Relaxed);
            anyhow::Ok(format!(
                "S9 failover: replica A killed, {on_a} streams reconnected to B in {moved_ms:.0} ms, resources resent: {resent}; the rounds below are after it"
            ))
        };
        match outcome.await {
            Ok(text) => failover = text,
            Err(e) => s.row.note = format!("failed: {e:#}"),
        }
        if s.row.note.is_empty() {
            let mut marker = INITIAL_MARKER;
            let make = |i, m| config::load_assignment(&spec, i, m);
            match rounds(ctx, &mut s, Kind::Eds, make, ctx.plan.rounds, &mut marker).await {
                Ok(c) => changes = c,
                Err(e) => s.row.note = format!("failed: {e:#}"),
            }
        }
    }
    let (mut row, results) = close(s).await;
    fill_latencies(&mut row, &changes, &results);
    row.note = if row.note.is_empty() {
        failover
    } else {
        format!("{failover}; {}", row.note)
    };
    row
}
