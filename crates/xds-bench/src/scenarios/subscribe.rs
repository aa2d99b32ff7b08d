//! S14: a subscription costs what it changes (#56). Two delta ADS streams against xdsd-core's
//! `XdsServer` over its `Store` in this process (as `--servers xdsd`): one holding 1,000
//! ClusterLoadAssignments by name, one holding `--s14-names` (100,000; 2,000 with --quick), of
//! a store of three times as many (so that neither holds most of the type, which the server
//! watches as a whole).
//! Then `--s14-requests` requests on each (200), the two streams taking turns (which goes first
//! alternating), each request letting go of the name the stream's last request subscribed and
//! subscribing a new one, as Envoy's EDS subscription follows its clusters. A request's time is
//! from its send to the response that brings the new name (its ACK sent after); its CPU, the
//! process's (server and client) over the same span, read to the nanosecond.
//!
//! The large stream's requests over the small one's: ~1x when a request costs the names it
//! names; before stop 79, a delta request that named something copied every name the stream
//! held twice (and a stream letting go of a name counted its keys' parameter sets again), so
//! the ratio grew with what the stream held.

use std::time::Instant;

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use xdsd_core::store::Store;
use xdsd_core::XdsServer;

use super::*;

const CLA: &str = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";

/// The smaller stream's names: the baseline.
const SMALL: usize = 1_000;

/// The store holds this many times the names the larger stream holds.
const TYPE_TIMES: usize = 3;

fn name(i: usize) -> String {
    format!("s14-{i:07}")
}

/// One stream: what it sends, what it receives, the nonce of its last response.
struct Stream {
    row: Row,
    tx: mpsc::Sender<DeltaDiscoveryRequest>,
    rx: tonic::Streaming<DeltaDiscoveryResponse>,
    nonce: String,
    /// The name its last request subscribed (let go of by the next).
    last: Option<String>,
    ns: Vec<u64>,
    cpus: Vec<f64>,
}

impl Stream {
    /// Opens a stream on `channel` subscribed to the first `held` names and waits until it
    /// holds them all (each response ACKed).
    async fn open(
        ctx: &Ctx,
        channel: tonic::transport::Channel,
        held: usize,
        timeout: Duration,
    ) -> anyhow::Result<Stream> {
        let mut row = new_row(ctx, "S14", Server::Xdsd, true, 1, held);
        row.mode = format!("holding {held}");
        let (tx, rx) = mpsc::channel(4);
        tx.send(DeltaDiscoveryRequest {
            type_url: CLA.into(),
            node: Some(envoy_types::pb::envoy::config::core::v3::Node {
                id: format!("xds-bench-s14-{held}"),
                ..Default::default()
            }),
            resource_names_subscribe: (0..held).map(name).collect(),
            ..Default::default()
        })
        .await?;
        let start = Instant::now();
        let rx = AggregatedDiscoveryServiceClient::new(channel)
            .max_decoding_message_size(usize::MAX)
            .delta_aggregated_resources(ReceiverStream::new(rx))
            .await?
            .into_inner();
        let mut s = Stream {
            row,
            tx,
            rx,
            nonce: String::new(),
            last: None,
            ns: Vec::new(),
            cpus: Vec::new(),
        };
        let mut got = 0;
        while got < held {
            got += s.next(timeout).await?.resources.len();
        }
        s.row.synced = 1;
        s.row.sync_ms = pct(vec![start.elapsed().as_nanos() as u64]);
        Ok(s)
    }

    /// The next response, ACKed.
    async fn next(&mut self, timeout: Duration) -> anyhow::Result<DeltaDiscoveryResponse> {
        let r = tokio::time::timeout(timeout, self.rx.message())
            .await
            .map_err(|_| anyhow::anyhow!("no response within {timeout:?}"))??
            .ok_or_else(|| anyhow::anyhow!("the stream ended"))?;
        self.nonce = r.nonce.clone();
        self.tx
            .send(DeltaDiscoveryRequest {
                type_url: CLA.into(),
                response_nonce: r.nonce.clone(),
                ..Default::default()
            })
            .await?;
        Ok(r)
    }

    /// Lets go of the last name subscribed and subscribes `new`: the time until `new` came,
    /// and the process's CPU over it.
    async fn request(&mut self, new: String, timeout: Duration) -> anyhow::Result<()> {
        let cpu0 = crate::control::self_cpu_seconds_exact();
        let start = Instant::now();
        self.tx
            .send(DeltaDiscoveryRequest {
                type_url: CLA.into(),
                response_nonce: self.nonce.clone(),
                resource_names_subscribe: vec![new.clone()],
                resource_names_unsubscribe: self.last.take().into_iter().collect(),
                ..Default::default()
            })
            .await?;
        loop {
            let r = self.next(timeout).await?;
            if r.resources.iter().any(|x| x.name == new) {
                break;
            }
        }
        self.ns.push(start.elapsed().as_nanos() as u64);
        self.cpus
            .push(crate::control::self_cpu_seconds_exact() - cpu0);
        self.last = Some(new);
        Ok(())
    }

    /// Its row: the requests' times as the convergence, their CPU.
    fn close(mut self) -> (Row, Vec<f64>, Vec<f64>) {
        let count = self.ns.len();
        let times: Vec<f64> = self.ns.iter().map(|ns| *ns as f64 / 1e6).collect();
        self.row.conv_ms = pct(std::mem::take(&mut self.ns));
        self.row.changes = count;
        self.row.change_cpu_s = self.cpus.iter().sum();
        self.row.responses = count as u64;
        (self.row, times, self.cpus)
    }
}

/// S14: the small and the large stream's rows, the large one's notes with its ratios to the
/// small one's.
pub async fn s14(ctx: &mut Ctx) -> Vec<Row> {
    let large = ctx.plan.s14_names.max(SMALL);
    let requests = ctx.plan.s14_requests.max(1);
    progress(&format!(
        "S14 holding {SMALL} and {large}, {requests} requests"
    ));
    let mut row = new_row(ctx, "S14", Server::Xdsd, true, 2, large);
    match run(ctx, large, requests).await {
        Ok(rows) => rows,
        Err(e) => {
            row.mode = format!("holding {large}");
            vec![failed_row(row, &e)]
        }
    }
}

async fn run(ctx: &Ctx, large: usize, requests: usize) -> anyhow::Result<Vec<Row>> {
    let store = Store::new();
    let body = |i: usize| {
        use prost::Message as _;
        envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment {
            cluster_name: name(i),
            ..Default::default()
        }
        .encode_to_vec()
    };
    // Three times the names the larger stream holds: a stream holding most of a type is
    // watched as a whole (`protocol::dense`), one holding a third of it name by name, as an
    // Envoy holds the endpoints of its own clusters among a fleet's.
    store.replace_all(
        (0..TYPE_TIMES * large + requests)
            .map(|i| xdsd_core::store::ResourceInput::new(CLA, name(i), body(i).into())),
    )?;
    let server = XdsServer::builder(store.clone()).build()?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(async move {
        let _ = server
            .serve(listener, async {
                let _ = stopped.await;
            })
            .await;
    });
    let result = measure(ctx, &addr.to_string(), large, requests).await;
    let _ = stop.send(());
    let _ = serving.await;
    result
}

async fn measure(ctx: &Ctx, addr: &str, large: usize, requests: usize) -> anyhow::Result<Vec<Row>> {
    let timeout = Duration::from_secs(ctx.plan.sync_timeout_s);
    let channels = crate::client::connect(addr, 2).await?;
    let channel = |i: usize| channels[i % channels.len()].clone();
    let mut streams = [
        Stream::open(ctx, channel(0), SMALL, timeout).await?,
        Stream::open(ctx, channel(1), large, timeout).await?,
    ];
    // The sync's tail (its ACKs) passes before the first request.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let wait = Duration::from_secs(ctx.plan.change_timeout_s);
    for i in 0..requests {
        let new = name(large + i);
        let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        for s in order {
            streams[s].request(new.clone(), wait).await?;
        }
    }
    let [small, big] = streams;
    let (small, small_ms, small_cpu) = small.close();
    let (mut big, big_ms, big_cpu) = big.close();
    let ratio = |a: &[f64], b: &[f64]| {
        let sum = |x: &[f64]| x.iter().sum::<f64>();
        sum(a) / sum(b).max(1e-12)
    };
    big.note = format!(
        "a request (one name let go of, one subscribed) on a stream holding {large} names against one holding {SMALL}, {requests} each, taking turns: time {:.2}x summed (p50 {:.3} ms against {:.3}), CPU {:.2}x summed ({:.1} us against {:.1} us a request)",
        ratio(&big_ms, &small_ms),
        big.conv_ms.map_or(0.0, |p| p.p50),
        small.conv_ms.map_or(0.0, |p| p.p50),
        ratio(&big_cpu, &small_cpu),
        big.change_cpu_s / requests as f64 * 1e6,
        small.change_cpu_s / requests as f64 * 1e6,
    );
    Ok(vec![small, big])
}
