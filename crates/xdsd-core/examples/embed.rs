//! Embedding xdsd-core: a source of one's own (in memory) fed to the store through a `Feed`,
//! readiness that follows the source, and an observer that refuses nodes it does not know.
//! `cargo run -p xdsd-core --example embed` serves on 127.0.0.1:18000 until Ctrl-C; the tests
//! (`tests/it/embed.rs`) run the same pieces and ask as a known node (served, then sent a change)
//! and as an unknown one (PERMISSION_DENIED).

use std::collections::HashSet;
use std::sync::Arc;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use prost::Message as _;
use tokio::sync::mpsc;
use tonic::Status;
use xdsd_core::types::CLUSTER;
use xdsd_core::{ChangeSet, Feed, Rejection, RequestSeen, ResourceInput, Source, SourceEvent};
use xdsd_core::{Store, StreamObserver, XdsServer};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Resources held in memory: a first set, then each change sent on a channel.
pub struct Memory(pub Vec<ResourceInput>, pub mpsc::Receiver<ChangeSet>);

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
pub struct KnownNodes(pub HashSet<String>);

impl StreamObserver for KnownNodes {
    fn request(&self, seen: &RequestSeen<'_>) -> Result<(), Status> {
        match seen.node {
            Some(node) if self.0.contains(&node.id) => Ok(()),
            _ => Err(Status::permission_denied("unknown node")),
        }
    }
}

/// A server of what `source` holds, ready while the source can be read, serving the `known`
/// nodes only.
pub async fn server(mut source: Memory, known: HashSet<String>) -> Result<XdsServer, Error> {
    let store = Store::new();
    let feed = Feed::new(store.clone());
    feed.first_load(&mut source).await?;
    let server = XdsServer::builder(store)
        .observer(Arc::new(KnownNodes(known)))
        .build()?;
    tokio::spawn(feed.ready(server.handle().readiness()).follow(source));
    Ok(server)
}

/// A cluster named `name`, as the store takes it.
pub fn cluster(name: &str) -> ResourceInput {
    let cluster = Cluster {
        name: name.into(),
        ..Default::default()
    };
    ResourceInput::new(CLUSTER, name, cluster.encode_to_vec().into())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    // Changes would be sent on `_changes`.
    let (_changes, rx) = mpsc::channel(1);
    let source = Memory(vec![cluster("backend")], rx);
    let server = server(source, HashSet::from(["edge-1".to_string()])).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:18000").await?;
    let ctrl_c = async { tokio::signal::ctrl_c().await.unwrap_or(()) };
    Ok(server.serve(listener, ctrl_c).await?)
}
