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
//! the clients raw delta streams; each side makes `--s13-changes` changes (5) one after the
//! other, 1 s after the sync; a change's convergence is from the store's commit to the last
//! stream having it, the side's the median of its changes', bytes what every stream received
//! per change (the encoded responses).

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
/// responses), then reports (time, bytes) of each later response.
async fn stream(
    channel: tonic::transport::Channel,
    type_url: &'static str,
    name: String,
    expect: usize,
    synced: mpsc::Sender<()>,
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
            if held >= expect {
                let _ = synced.send(()).await;
            }
        } else {
            let _ = seen.send((at, bytes)).await;
        }
    }
    Ok(())
}

/// One side: the store set up by `load`, `streams` streams subscribed to `name` of `type_url`,
/// then each of `changes` applied in turn, once every stream has the one before and a pause;
/// a row with their convergence (each change's: its last stream's; the row's conv. the median
/// and max of those) and the bytes per change.
async fn side(
    ctx: &Ctx,
    mode: &str,
    type_url: &'static str,
    name: &str,
    expect: usize,
    load: Vec<ResourceInput>,
    changes: Vec<ResourceInput>,
) -> Row {
    let streams = ctx.plan.s13_streams;
    let mut row = new_row(ctx, "S13", Server::Xdsd, true, streams, 1);
    row.mode = mode.into();
    progress(&format!("S13 {mode} streams={streams}"));
    let result: anyhow::Result<()> = async {
        let store = Store::new();
        store.replace_all(load)?;
        let server = XdsServer::builder(store.clone()).build()?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(async move {
            let _ = server
                .serve(listener, async {
                    let _ = stop_rx.await;
                })
                .await;
        });
        let channels = crate::client::connect(&addr.to_string(), connections(ctx, streams)).await?;
        let (synced_tx, mut synced_rx) = mpsc::channel(streams);
        let (seen_tx, mut seen_rx) = mpsc::channel(streams);
        let mut tasks = Vec::new();
        for i in 0..streams {
            tasks.push(tokio::spawn(stream(
                channels[i % channels.len()].clone(),
                type_url,
                name.to_owned(),
                expect,
                synced_tx.clone(),
                seen_tx.clone(),
            )));
        }
        let timeout = Duration::from_secs(ctx.plan.sync_timeout_s);
        for _ in 0..streams {
            tokio::time::timeout(timeout, synced_rx.recv())
                .await?
                .ok_or_else(|| anyhow::anyhow!("a stream ended before its first response"))?;
        }
        // Let the sync's tail (the first responses' ACKs, what the clients still decode) pass:
        // a change measured in it counts the sync's work (10,000 members per stream for LEDS).
        tokio::time::sleep(Duration::from_secs(1)).await;
        let count = changes.len();
        let mut client_ns = Vec::with_capacity(streams * count);
        let mut lasts = Vec::with_capacity(count);
        let mut bytes = 0u64;
        let change_timeout = Duration::from_secs(ctx.plan.change_timeout_s);
        let mut cpu = 0.0;
        for change in changes {
            let cpu0 = crate::control::self_cpu_seconds();
            let start = Instant::now();
            store.apply([Change::Set(change)])?;
            let mut last = 0;
            for _ in 0..streams {
                let (at, b) = tokio::time::timeout(change_timeout, seen_rx.recv())
                    .await?
                    .ok_or_else(|| anyhow::anyhow!("a stream ended before the change"))?;
                let ns = at.saturating_duration_since(start).as_nanos() as u64;
                last = last.max(ns);
                client_ns.push(ns);
                bytes += b as u64;
            }
            lasts.push(last);
            cpu += crate::control::self_cpu_seconds() - cpu0;
            // The ACKs of this change land before the next.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        row.conv_ms = pct(lasts);
        row.client_ms = pct(client_ns);
        row.changes = count;
        row.change_cpu_s = cpu;
        row.bytes = bytes / count.max(1) as u64;
        row.responses = (streams * count) as u64;
        row.note = format!(
            "{:.0} bytes per stream and change, {count} changes",
            bytes as f64 / (streams * count).max(1) as f64
        );
        for t in tasks {
            t.abort();
        }
        let _ = stop_tx.send(());
        let _ = serving.await;
        Ok(())
    }
    .await;
    if let Err(e) = result {
        row = failed_row(row, &e);
    }
    row
}

/// S13's three sides, and the ratios of LEDS to the others in LEDS's note.
pub async fn s13(ctx: &mut Ctx) -> Vec<Row> {
    let n = ctx.plan.s13_endpoints;
    let k = ctx.plan.s13_changes;
    let leds = side(
        ctx,
        "leds",
        LB_ENDPOINT,
        GLOB,
        n,
        (0..n).map(member).collect(),
        (n..n + k).map(member).collect(),
    )
    .await;
    let eds = side(
        ctx,
        "eds",
        CLA,
        "big",
        1,
        vec![assignment("big", 0..n)],
        (1..=k).map(|i| assignment("big", 0..n + i)).collect(),
    )
    .await;
    let one = side(
        ctx,
        "eds-1",
        CLA,
        "one",
        1,
        vec![assignment("one", 0..1)],
        (1..=k).map(|i| assignment("one", i..i + 1)).collect(),
    )
    .await;
    let mut leds = leds;
    // Each side's median change: one change is a single noisy figure.
    let conv = |r: &Row| r.conv_ms.as_ref().map(|p| p.p50);
    if let (Some(l), Some(e), Some(o)) = (conv(&leds), conv(&eds), conv(&one)) {
        leds.note = format!(
            "{}; median convergence {:.2}x EDS's, {:.2}x a one-endpoint EDS change's; CPU {:.2}x EDS's, {:.2}x the one-endpoint change's; bytes {:.4}x EDS's, {:.2}x the one-endpoint change's",
            leds.note,
            l / e.max(1e-9),
            l / o.max(1e-9),
            leds.change_cpu_s / eds.change_cpu_s.max(1e-9),
            leds.change_cpu_s / one.change_cpu_s.max(1e-9),
            leds.bytes as f64 / eds.bytes.max(1) as f64,
            leds.bytes as f64 / one.bytes.max(1) as f64,
        );
    }
    vec![leds, eds, one]
}
