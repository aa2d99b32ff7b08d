//! S13: LEDS (xRFC TP1 glob collections, #57). A cluster of `--s13-endpoints` endpoints (10,000)
//! held by every one of `--s13-streams` delta ADS streams (1,000; 50 with --quick), one endpoint
//! added, three ways in the same run and process:
//!
//! - `leds`: the endpoints are `LbEndpoint` members of one glob collection, each stream
//!   subscribed to the glob: each is sent the one new member;
//! - `eds`: the same endpoints as one ClusterLoadAssignment, each stream subscribed to it: each
//!   is sent the whole assignment again;
//! - `eds-1`: a one-endpoint ClusterLoadAssignment that changes (the floor of a change).
//!
//! The server is xdsd-core's `XdsServer` over its `Store` in this process (as `--servers xdsd`),
//! the clients raw delta streams; the three sides are open at once and make `--s13-changes`
//! changes (40) each, in rounds: each round one change per side, leds and eds-1 next to each
//! other (alternating which comes first), then eds, 1 s after the syncs. A change's convergence
//! is from the store's commit to the last stream having it; bytes what every stream received per
//! change (the encoded responses). A change's CPU is the process's (server and clients), read to
//! the nanosecond, from its commit to 200 ms after its last stream had it (the ACKs taken).
//!
//! The reading the bound is taken on ([`Ratio`]): the side's **CPU summed over all its
//! changes** against the other's (equal counts: the ratio of their mean CPU per change). A
//! change is some 30 ms of CPU on a host shared with other work, each change's reading off by
//! tens of percent either way; interleaved change by change the host's busier spells fall on
//! both sides alike, and summed over 40 changes the reading's own spread is a few percent. The
//! medians, and the median of the rounds' own ratios, are reported beside it. The sync fails only
//! when it stalls (no stream takes a resource for the sync deadline), not when it is slow: on a
//! loaded host 10 million members to 1,000 streams may take minutes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use envoy_types::pb::envoy::config::core::v3::{address, socket_address, Address, SocketAddress};
use envoy_types::pb::envoy::config::endpoint::v3::{
    lb_endpoint, ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints,
};
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use xdsd_core::store::{Change, ResourceInput, Store};
use xdsd_core::XdsServer;

use super::*;

const LB_ENDPOINT: &str = "type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint";
const CLA: &str = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
const GLOB: &str = "xdstp://bench/envoy.config.endpoint.v3.LbEndpoint/big/*";

fn lb_endpoint(i: usize) -> LbEndpoint {
    LbEndpoint {
        host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
            address: Some(Address {
                address: Some(address::Address::SocketAddress(SocketAddress {
                    address: format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255),
                    port_specifier: Some(socket_address::PortSpecifier::PortValue(8080)),
                    ..Default::default()
                })),
            }),
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn member(i: usize) -> ResourceInput {
    ResourceInput::new(
        LB_ENDPOINT,
        format!("xdstp://bench/envoy.config.endpoint.v3.LbEndpoint/big/ep{i}"),
        lb_endpoint(i).encode_to_vec().into(),
    )
}

fn assignment(name: &str, endpoints: std::ops::Range<usize>) -> ResourceInput {
    let cla = ClusterLoadAssignment {
        cluster_name: name.into(),
        endpoints: vec![LocalityLbEndpoints {
            lb_endpoints: endpoints.map(lb_endpoint).collect(),
            ..Default::default()
        }],
        ..Default::default()
    };
    ResourceInput::new(CLA, name, cla.encode_to_vec().into())
}

/// One stream: subscribes, waits for its first `expect` resources (the sync, maybe in several
/// responses, each counted in `taken`), then reports (time, bytes) of each later response.
async fn stream(
    channel: tonic::transport::Channel,
    type_url: &'static str,
    name: String,
    expect: usize,
    taken: Arc<AtomicUsize>,
    synced: mpsc::Sender<Instant>,
    seen: mpsc::Sender<(Instant, usize)>,
) -> anyhow::Result<()> {
    let (tx, rx) = mpsc::channel(4);
    tx.send(DeltaDiscoveryRequest {
        type_url: type_url.into(),
        node: Some(envoy_types::pb::envoy::config::core::v3::Node {
            id: "xds-bench-leds".into(),
            ..Default::default()
        }),
        resource_names_subscribe: vec![name],
        ..Default::default()
    })
    .await?;
    let mut responses = AggregatedDiscoveryServiceClient::new(channel)
        .max_decoding_message_size(usize::MAX)
        .delta_aggregated_resources(ReceiverStream::new(rx))
        .await?
        .into_inner();
    let mut held = 0usize;
    while let Some(r) = responses.message().await? {
        let at = Instant::now();
        let bytes = r.encoded_len();
        tx.send(DeltaDiscoveryRequest {
            type_url: type_url.into(),
            response_nonce: r.nonce.clone(),
            ..Default::default()
        })
        .await?;
        if held < expect {
            held += r.resources.len();
            taken.fetch_add(r.resources.len(), Ordering::Relaxed);
            if held >= expect {
                let _ = synced.send(at).await;
            }
        } else {
            let _ = seen.send((at, bytes)).await;
        }
    }
    Ok(())
}

/// One side, open: its store and server, its streams synced, and what its changes measured so
/// far. The three sides are open at once and take their changes in turn (leds, eds, eds-1,
/// leds, ...), so that a busier spell of the shared host falls on all three alike.
struct Side {
    row: Row,
    streams: usize,
    store: Store,
    seen: mpsc::Receiver<(Instant, usize)>,
    tasks: Vec<tokio::task::JoinHandle<anyhow::Result<()>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    serving: Option<tokio::task::JoinHandle<()>>,
    change_timeout: Duration,
    lasts: Vec<u64>,
    client_ns: Vec<u64>,
    bytes: u64,
    cpus: Vec<f64>,
    sync_note: String,
    failed: Option<anyhow::Error>,
}

impl Side {
    /// The store set up by `load`, `streams` streams subscribed to `name` of `type_url`, synced.
    async fn open(
        ctx: &Ctx,
        mode: &str,
        type_url: &'static str,
        name: &str,
        expect: usize,
        load: Vec<ResourceInput>,
    ) -> Side {
        let streams = ctx.plan.s13_streams;
        let mut row = new_row(ctx, "S13", Server::Xdsd, true, streams, 1);
        row.mode = mode.into();
        progress(&format!("S13 {mode} streams={streams}"));
        let (_, seen) = mpsc::channel(1);
        let mut side = Side {
            row,
            streams,
            store: Store::new(),
            seen,
            tasks: Vec::new(),
            stop: None,
            serving: None,
            change_timeout: Duration::from_secs(ctx.plan.change_timeout_s),
            lasts: Vec::new(),
            client_ns: Vec::new(),
            bytes: 0,
            cpus: Vec::new(),
            sync_note: String::new(),
            failed: None,
        };
        if let Err(e) = side.start(ctx, type_url, name, expect, load).await {
            side.failed = Some(e);
        }
        side
    }

    async fn start(
        &mut self,
        ctx: &Ctx,
        type_url: &'static str,
        name: &str,
        expect: usize,
        load: Vec<ResourceInput>,
    ) -> anyhow::Result<()> {
        let streams = self.streams;
        let rss0 = crate::control::status_kib(std::process::id(), "VmRSS:").unwrap_or(0);
        self.store.replace_all(load)?;
        let server = XdsServer::builder(self.store.clone()).build()?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        self.stop = Some(stop_tx);
        self.serving = Some(tokio::spawn(async move {
            let _ = server
                .serve(listener, async {
                    let _ = stop_rx.await;
                })
                .await;
        }));
        let channels = crate::client::connect(&addr.to_string(), connections(ctx, streams)).await?;
        let (synced_tx, mut synced_rx) = mpsc::channel(streams);
        let (seen_tx, seen_rx) = mpsc::channel(streams);
        self.seen = seen_rx;
        let taken = Arc::new(AtomicUsize::new(0));
        let sync_start = Instant::now();
        let sync_cpu0 = crate::control::self_cpu_seconds_exact();
        for i in 0..streams {
            self.tasks.push(tokio::spawn(stream(
                channels[i % channels.len()].clone(),
                type_url,
                name.to_owned(),
                expect,
                taken.clone(),
                synced_tx.clone(),
                seen_tx.clone(),
            )));
        }
        let sync_ms = sync(
            streams,
            &mut synced_rx,
            &taken,
            sync_start,
            Duration::from_secs(ctx.plan.sync_timeout_s),
        )
        .await?;
        self.row.synced = sync_ms.len();
        self.row.sync_ms = pct(sync_ms);
        self.row.sync_cpu_s = crate::control::self_cpu_seconds_exact() - sync_cpu0;
        let rss = crate::control::status_kib(std::process::id(), "VmRSS:").unwrap_or(0);
        self.sync_note = format!(
            "synced in {:.1} s, RSS +{} MiB after the sync",
            sync_start.elapsed().as_secs_f64(),
            rss.saturating_sub(rss0) / 1024
        );
        // Let the sync's tail (the first responses' ACKs, what the clients still decode) pass:
        // a change measured in it counts the sync's work (10,000 members per stream for LEDS).
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok(())
    }

    /// Applies `change`, waits until every stream has it and its ACKs landed: its convergence
    /// (its last stream's), its CPU, its bytes.
    async fn change(&mut self, change: ResourceInput) {
        if self.failed.is_some() {
            return;
        }
        if let Err(e) = self.measure(change).await {
            self.failed = Some(e);
        }
    }

    async fn measure(&mut self, change: ResourceInput) -> anyhow::Result<()> {
        // Outside the CPU read: under callgrind, a hook that dumps the counts here and after
        // the change counts each side's changes alone.
        let pid = std::process::id();
        crate::control::phase_hook(&format!("s13-{}-start", self.row.mode), pid).await;
        let cpu0 = crate::control::self_cpu_seconds_exact();
        let start = Instant::now();
        self.store.apply([Change::Set(change)])?;
        let mut last = 0;
        for _ in 0..self.streams {
            let (at, b) = tokio::time::timeout(self.change_timeout, self.seen.recv())
                .await?
                .ok_or_else(|| anyhow::anyhow!("a stream ended before the change"))?;
            let ns = at.saturating_duration_since(start).as_nanos() as u64;
            last = last.max(ns);
            self.client_ns.push(ns);
            self.bytes += b as u64;
        }
        self.lasts.push(last);
        // The ACKs of this change land before the next (and count in its CPU).
        tokio::time::sleep(Duration::from_millis(200)).await;
        self.cpus
            .push(crate::control::self_cpu_seconds_exact() - cpu0);
        crate::control::phase_hook(&format!("s13-{}-end", self.row.mode), pid).await;
        Ok(())
    }

    /// Stops the side: its row, with the convergence (the median and max of its changes') and
    /// the CPU and bytes per change.
    async fn close(mut self) -> Row {
        for t in &self.tasks {
            t.abort();
        }
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(serving) = self.serving.take() {
            let _ = serving.await;
        }
        let mut row = self.row;
        if let Some(e) = self.failed {
            return failed_row(row, &e);
        }
        let (streams, count) = (self.streams, self.lasts.len());
        let mut cpus = self.cpus.clone();
        let cpu: f64 = cpus.iter().sum();
        cpus.sort_by(f64::total_cmp);
        row.change_cpus_s = Some(self.cpus);
        row.change_conv_ms = Some(self.lasts.iter().map(|ns| *ns as f64 / 1e6).collect());
        row.conv_ms = pct(self.lasts);
        row.client_ms = pct(self.client_ns);
        row.changes = count;
        row.change_cpu_s = cpu;
        row.bytes = self.bytes / count.max(1) as u64;
        row.responses = (streams * count) as u64;
        row.note = format!(
            "{:.0} bytes per stream and change, {count} changes (the sides' changes interleaved); CPU per change mean {:.1} ms, median {:.1} (min {:.1}, max {:.1}); {}",
            self.bytes as f64 / (streams * count).max(1) as f64,
            cpu / count.max(1) as f64 * 1e3,
            median(&cpus) * 1e3,
            cpus.first().copied().unwrap_or(0.0) * 1e3,
            cpus.last().copied().unwrap_or(0.0) * 1e3,
            self.sync_note,
        );
        row.change_cpu_median_s = Some(median(&cpus));
        row
    }
}

/// Waits for `streams` streams to sync: the time each took from `start`. Fails when the sync
/// stalls (no stream took a resource for `stall`) or a stream ends, not when it is slow: its
/// work (streams x members) is the bench's to choose, and a loaded host stretches it.
async fn sync(
    streams: usize,
    synced: &mut mpsc::Receiver<Instant>,
    taken: &AtomicUsize,
    start: Instant,
    stall: Duration,
) -> anyhow::Result<Vec<u64>> {
    let mut times = Vec::with_capacity(streams);
    let mut progress = (taken.load(Ordering::Relaxed), Instant::now());
    let look = (stall / 4).min(Duration::from_secs(1));
    while times.len() < streams {
        match tokio::time::timeout(look, synced.recv()).await {
            Ok(Some(at)) => times.push(at.saturating_duration_since(start).as_nanos() as u64),
            Ok(None) => anyhow::bail!("a stream ended before its sync"),
            Err(_) => {
                let now = taken.load(Ordering::Relaxed);
                if now != progress.0 {
                    progress = (now, Instant::now());
                } else if progress.1.elapsed() > stall {
                    anyhow::bail!(
                        "the sync stalled: no stream took a resource for {} s ({} of {streams} synced, {now} resources taken)",
                        stall.as_secs(),
                        times.len()
                    );
                }
            }
        }
    }
    Ok(times)
}

/// How one side's changes compare with another's, from their per-change figures (CPU or
/// convergence) taken in the same rounds, in order.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Ratio {
    /// The sums over the rounds both sides measured: the ratio of their means. The reading the
    /// issue's bound is taken on: every change counts, and a busier spell of the host that
    /// falls on one round falls on both sides of it.
    summed: f64,
    /// The median of the rounds' own ratios (each side's change against the other's in the same
    /// round).
    rounds_median: f64,
    /// The ratio of the sides' median changes (the reading of stops 62-66).
    medians: f64,
}

impl Ratio {
    fn of(a: &[f64], b: &[f64]) -> Option<Ratio> {
        let n = a.len().min(b.len());
        if n == 0 {
            return None;
        }
        let (a, b) = (&a[..n], &b[..n]);
        let div = |x: f64, y: f64| x / y.max(1e-12);
        let sorted = |xs: Vec<f64>| {
            let mut xs = xs;
            xs.sort_by(f64::total_cmp);
            median(&xs)
        };
        Some(Ratio {
            summed: div(a.iter().sum(), b.iter().sum()),
            rounds_median: sorted(a.iter().zip(b).map(|(x, y)| div(*x, *y)).collect()),
            medians: div(sorted(a.to_vec()), sorted(b.to_vec())),
        })
    }
}

impl std::fmt::Display for Ratio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.2}x summed (the rounds' median {:.2}x, the medians' {:.2}x)",
            self.summed, self.rounds_median, self.medians
        )
    }
}

const LEDS: usize = 0;
const EDS: usize = 1;
const ONE: usize = 2;

/// The order of the sides' changes in round `i` (from 1): LEDS and the one-endpoint change next
/// to each other, taking turns at coming first (after the last round's whole assignment, the
/// heaviest change), then the whole assignment.
fn round(i: usize) -> [usize; 3] {
    if i % 2 == 1 {
        [LEDS, ONE, EDS]
    } else {
        [ONE, LEDS, EDS]
    }
}

/// S13's three sides, open at once, their changes interleaved; the ratios of LEDS to the others
/// ([`Ratio`]) in LEDS's note.
pub async fn s13(ctx: &mut Ctx) -> Vec<Row> {
    let n = ctx.plan.s13_endpoints;
    let k = ctx.plan.s13_changes;
    let mut sides = [
        Side::open(
            ctx,
            "leds",
            LB_ENDPOINT,
            GLOB,
            n,
            (0..n).map(member).collect(),
        )
        .await,
        Side::open(ctx, "eds", CLA, "big", 1, vec![assignment("big", 0..n)]).await,
        Side::open(ctx, "eds-1", CLA, "one", 1, vec![assignment("one", 0..1)]).await,
    ];
    for i in 1..=k {
        for side in round(i) {
            let change = match side {
                LEDS => member(n + i - 1),
                EDS => assignment("big", 0..n + i),
                _ => assignment("one", i..i + 1),
            };
            sides[side].change(change).await;
        }
    }
    let [leds, eds, one] = sides;
    let (leds, eds, one) = (leds.close().await, eds.close().await, one.close().await);
    let mut leds = leds;
    let cpu = |a: &Row, b: &Row| {
        Ratio::of(
            a.change_cpus_s.as_deref().unwrap_or_default(),
            b.change_cpus_s.as_deref().unwrap_or_default(),
        )
    };
    let conv = |a: &Row, b: &Row| {
        Ratio::of(
            a.change_conv_ms.as_deref().unwrap_or_default(),
            b.change_conv_ms.as_deref().unwrap_or_default(),
        )
    };
    if let (Some(ce), Some(co), Some(ve), Some(vo)) = (
        cpu(&leds, &eds),
        cpu(&leds, &one),
        conv(&leds, &eds),
        conv(&leds, &one),
    ) {
        leds.note = format!(
            "{}; CPU per change {co} the one-endpoint change's, {ce} EDS's; convergence {vo} the one-endpoint change's, {ve} EDS's; bytes {:.4}x EDS's, {:.2}x the one-endpoint change's",
            leds.note,
            leds.bytes as f64 / eds.bytes.max(1) as f64,
            leds.bytes as f64 / one.bytes.max(1) as f64,
        );
    }
    vec![leds, eds, one]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_is_read_on_each_sides_changes_summed_so_that_every_change_counts() {
        // LEDS costs 20 % more in two changes of five: its medians say nothing of it.
        let leds = [30.0, 36.0, 30.0, 36.0, 30.0];
        let one = [30.0; 5];
        let r = Ratio::of(&leds, &one).expect("rounds");
        assert!((r.summed - 162.0 / 150.0).abs() < 1e-9, "{r:?}");
        assert_eq!(r.medians, 1.0);
        assert_eq!(r.rounds_median, 1.0);
    }

    #[test]
    fn a_round_is_read_against_the_same_round_of_the_other_side() {
        // The host busier in two rounds, for both sides of them: each round's own ratio is
        // 1.1x, whatever the round.
        let leds = [33.0, 66.0, 33.0, 66.0, 33.0];
        let one = [30.0, 60.0, 30.0, 60.0, 30.0];
        let r = Ratio::of(&leds, &one).expect("rounds");
        assert!((r.rounds_median - 1.1).abs() < 1e-9, "{r:?}");
        assert!((r.summed - 1.1).abs() < 1e-9, "{r:?}");
        // A side that failed midway is read on the rounds both measured.
        let r = Ratio::of(&leds, &one[..2]).expect("rounds");
        assert!((r.summed - 1.1).abs() < 1e-9, "{r:?}");
        assert_eq!(Ratio::of(&leds, &[]), None);
    }

    #[test]
    fn leds_and_the_one_endpoint_change_are_next_to_each_other_and_take_turns_at_coming_first() {
        let rounds: Vec<[usize; 3]> = (1..=40).map(round).collect();
        let first = |side| rounds.iter().filter(|r| r[0] == side).count();
        assert_eq!((first(LEDS), first(ONE)), (20, 20));
        for r in &rounds {
            assert_eq!(r[2], EDS, "the whole assignment last: {r:?}");
        }
        // Each round: one change per side.
        for r in &rounds {
            let mut sorted = *r;
            sorted.sort_unstable();
            assert_eq!(sorted, [LEDS, EDS, ONE]);
        }
    }

    #[tokio::test]
    async fn a_sync_slower_than_the_stall_bound_that_keeps_taking_resources_is_waited_for() {
        let (tx, mut rx) = mpsc::channel(1);
        let taken = Arc::new(AtomicUsize::new(0));
        let feed = taken.clone();
        tokio::spawn(async move {
            for _ in 0..10 {
                tokio::time::sleep(Duration::from_millis(60)).await;
                feed.fetch_add(1, Ordering::Relaxed);
            }
            let _ = tx.send(Instant::now()).await;
        });
        let start = Instant::now();
        let times = sync(1, &mut rx, &taken, start, Duration::from_millis(200))
            .await
            .expect("a sync that progresses is waited for");
        assert_eq!(times.len(), 1);
        assert!(
            start.elapsed() > Duration::from_millis(200),
            "slower than the bound"
        );
    }

    #[tokio::test]
    async fn a_sync_that_takes_nothing_for_the_stall_bound_fails_saying_so() {
        let (_tx, mut rx) = mpsc::channel(1);
        let taken = AtomicUsize::new(0);
        let err = sync(
            1,
            &mut rx,
            &taken,
            Instant::now(),
            Duration::from_millis(200),
        )
        .await
        .expect_err("a stalled sync fails");
        assert!(err.to_string().contains("stalled"), "{err}");
    }
}
