//! Embedding xdsd-core: a source of one's own (in memory) fed to the store through a `Feed`, and
//! an observer that refuses nodes it does not know. `cargo run -p xdsd-core --example embed`
//! serves on 127.0.0.1:18000 until Ctrl-C; `-- --self-test` serves on a free loopback port, asks
//! as a known node (served, then sent a change) and as an unknown one (PERMISSION_DENIED), and
//! exits 0 when both are answered so (`scripts/test` runs it).

use std::collections::HashSet;
use std::sync::Arc;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient as Ads;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use prost::Message as _;
use tokio::sync::mpsc;
use tonic::{Code, Status, Streaming};
use xdsd_core::{ChangeSet, Feed, Rejection, RequestSeen, ResourceInput, Source, SourceEvent};
use xdsd_core::{Store, StreamObserver, XdsServer};

const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
type Error = Box<dyn std::error::Error + Send + Sync>;

/// Resources held in memory: a first set, then each change sent on a channel.
struct Memory(Vec<ResourceInput>, mpsc::Receiver<ChangeSet>);

impl Source for Memory {
    fn describe(&self) -> String {
        "memory".into()
    }
    async fn load(&mut self) -> Result<ChangeSet, Rejection> {
        Ok(ChangeSet::all(std::mem::take(&mut self.0)))
    }
    async fn next(&mut self) -> Option<SourceEvent> {
        self.1.recv().await.map(SourceEvent::Change)
    }
}

/// Serves only the nodes it knows: authorization is an observer's `request`.
struct KnownNodes(HashSet<String>);

impl StreamObserver for KnownNodes {
    fn request(&self, seen: &RequestSeen<'_>) -> Result<(), Status> {
        match seen.node {
            Some(node) if self.0.contains(&node.id) => Ok(()),
            _ => Err(Status::permission_denied("unknown node")),
        }
    }
}

fn cluster(name: &str) -> ResourceInput {
    let cluster = Cluster {
        name: name.into(),
        ..Default::default()
    };
    ResourceInput::new(CDS, name, cluster.encode_to_vec().into())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let self_test = std::env::args().any(|a| a == "--self-test");
    let store = Store::new();
    let (changes, rx) = mpsc::channel(1);
    let mut source = Memory(vec![cluster("backend")], rx);
    let feed = Feed::new(store.clone());
    feed.first_load(&mut source).await?;
    tokio::spawn(feed.follow(source));
    let server = XdsServer::builder(store)
        .observer(Arc::new(KnownNodes(HashSet::from(["edge-1".to_string()]))))
        .build()?;
    let listener = tokio::net::TcpListener::bind(match self_test {
        true => "127.0.0.1:0",
        false => "127.0.0.1:18000",
    })
    .await?;
    let addr = listener.local_addr()?;
    if !self_test {
        return Ok(server
            .serve(listener, async {
                tokio::signal::ctrl_c().await.unwrap_or(())
            })
            .await?);
    }
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve(listener, async { stopped.await.unwrap_or(()) }));
    let (tx, mut known) = ask(addr, "edge-1").await?;
    expect(names(next(&mut known).await?), &["backend"])?;
    changes
        .send(ChangeSet::all(vec![cluster("backend"), cluster("canary")]))
        .await?;
    expect(names(next(&mut known).await?), &["backend", "canary"])?;
    let refused = match ask(addr, "intruder").await {
        Ok((_tx, mut unknown)) => next(&mut unknown).await.err(),
        Err(status) => Some(status),
    };
    if refused.as_ref().map(Status::code) != Some(Code::PermissionDenied) {
        return Err(format!("an unknown node was not refused: {refused:?}").into());
    }
    drop(tx);
    let _ = stop.send(());
    serving.await??;
    println!("self-test passed: edge-1 served, intruder refused");
    Ok(())
}

/// An ADS stream to `addr` whose first request asks for every cluster as `node`.
async fn ask(
    addr: std::net::SocketAddr,
    node: &str,
) -> Result<(mpsc::Sender<DiscoveryRequest>, Streaming<DiscoveryResponse>), Status> {
    let (tx, rx) = mpsc::channel(1);
    let node = Some(Node {
        id: node.into(),
        ..Default::default()
    });
    let request = DiscoveryRequest {
        node,
        type_url: CDS.into(),
        ..Default::default()
    };
    tx.try_send(request)
        .map_err(|e| Status::internal(e.to_string()))?;
    let connected = Ads::connect(format!("http://{addr}")).await;
    let mut client = connected.map_err(|e| Status::unavailable(e.to_string()))?;
    let stream =
        client.stream_aggregated_resources(tokio_stream::wrappers::ReceiverStream::new(rx));
    Ok((tx, stream.await?.into_inner()))
}

async fn next(stream: &mut Streaming<DiscoveryResponse>) -> Result<DiscoveryResponse, Status> {
    let wait = tokio::time::timeout(std::time::Duration::from_secs(10), stream.message());
    let answer = wait
        .await
        .map_err(|_| Status::deadline_exceeded("no answer in 10 s"))?;
    answer?.ok_or_else(|| Status::unavailable("the stream ended"))
}

fn names(response: DiscoveryResponse) -> Vec<String> {
    let decoded = response
        .resources
        .iter()
        .map(|any| Cluster::decode(&*any.value).map(|c| c.name));
    decoded.collect::<Result<_, _>>().unwrap_or_default()
}

fn expect(got: Vec<String>, want: &[&str]) -> Result<(), Error> {
    match got == want {
        true => Ok(()),
        false => Err(format!("got clusters {got:?}, expected {want:?}").into()),
    }
}
