//! The benchmark peer: an xDS server built the way a user of `rust-control-plane` builds one
//! (its snapshot `Cache` behind its `Service`), driven by `xds-bench` through the same line
//! protocol as the bench's own server kinds (see `crates/xds-bench/src/control.rs`):
//!
//! * stdout, once: `listening <addr>`
//! * stdin `load <file>`: replace every resource with those of the record file; answers
//!   `ok <accepted_ns> <done_ns>`
//! * stdin `set <type_url> <name> <hex value>`: set one resource; answers `ok <accepted_ns>`
//! * stdin `nodes <n>`: the clients' node ids are `xds-bench-0` … `xds-bench-<n-1>`; answers
//!   `ok <accepted_ns>`
//! * stdin EOF or `quit`: exit.
//!
//! Times are CLOCK_MONOTONIC nanoseconds, comparable with the load generator's.
//!
//! The cache keeps one snapshot per node id and looks it up on every request, so every update is
//! set for every node, as its users (and go-control-plane's) do. One node id shared by every
//! client would be cheaper but loses updates in rust-control-plane 0.1.2: a stream cancels its
//! fired watch by slab index when the client ACKs, and by then the slot may hold another
//! stream's new watch of the same node (BENCHMARKS.md has the details).

use std::collections::HashMap;
use std::io::Read;
use std::sync::Arc;

use data_plane_api::envoy::config::cluster::v3::Cluster;
use data_plane_api::envoy::config::endpoint::v3::ClusterLoadAssignment;
use data_plane_api::envoy::config::listener::v3::Listener;
use data_plane_api::envoy::config::route::v3::RouteConfiguration;
use data_plane_api::envoy::service::discovery::v3::aggregated_discovery_service_server::AggregatedDiscoveryServiceServer;
use prost::Message;
use rust_control_plane::cache::Cache;
use rust_control_plane::service::common::Service;
use rust_control_plane::snapshot::{type_url, Resource, Resources, Snapshot};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const NODE_PREFIX: &str = "xds-bench-";

fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn decode(type_url: &str, value: &[u8]) -> Result<Resource, String> {
    let err = |e: prost::DecodeError| format!("{type_url}: {e}");
    Ok(match type_url {
        type_url::CLUSTER => Resource::Cluster(Cluster::decode(value).map_err(err)?),
        type_url::ENDPOINT => {
            Resource::Endpoint(ClusterLoadAssignment::decode(value).map_err(err)?)
        }
        type_url::LISTENER => Resource::Listener(Listener::decode(value).map_err(err)?),
        type_url::ROUTE => Resource::Route(RouteConfiguration::decode(value).map_err(err)?),
        other => return Err(format!("the peer does not handle {other}")),
    })
}

/// Reads the record file written by xds-bench: (u32 LE length, bytes) × (type, name, value).
fn read_records(path: &str) -> Result<Vec<(String, String, Vec<u8>)>, String> {
    let mut data = Vec::new();
    std::fs::File::open(path)
        .and_then(|mut f| f.read_to_end(&mut data))
        .map_err(|e| format!("{path}: {e}"))?;
    let mut out = Vec::new();
    let mut at = 0usize;
    let field = |at: &mut usize| -> Result<Vec<u8>, String> {
        let len_bytes = data.get(*at..*at + 4).ok_or("truncated record file")?;
        let len = u32::from_le_bytes(len_bytes.try_into().unwrap()) as usize;
        let bytes = data
            .get(*at + 4..*at + 4 + len)
            .ok_or("truncated record file")?
            .to_vec();
        *at += 4 + len;
        Ok(bytes)
    };
    while at < data.len() {
        let t = String::from_utf8(field(&mut at)?).map_err(|e| e.to_string())?;
        let n = String::from_utf8(field(&mut at)?).map_err(|e| e.to_string())?;
        let v = field(&mut at)?;
        out.push((t, n, v));
    }
    Ok(out)
}

fn unhex(s: &str) -> Result<Vec<u8>, String> {
    if s.len() % 2 != 0 {
        return Err("odd hex length".into());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|e| e.to_string()))
        .collect()
}

/// The resources as the peer keeps them between updates, with a version counter per type.
#[derive(Default)]
struct State {
    types: HashMap<String, HashMap<String, Resource>>,
    versions: HashMap<String, u64>,
}

impl State {
    fn snapshot(&self) -> Snapshot {
        let mut snapshot = Snapshot::new();
        for (t, items) in &self.types {
            let mut resources = Resources::new(self.versions.get(t).copied().unwrap_or(0).to_string());
            resources.items = items.clone();
            snapshot.insert(t.clone(), resources);
        }
        snapshot
    }

    fn bump(&mut self, t: &str) {
        *self.versions.entry(t.to_owned()).or_default() += 1;
    }
}

/// Sets the current snapshot for every node, as `Cache::set_snapshot` wants it.
async fn publish(cache: &Cache, nodes: &[String], state: &State) {
    let snapshot = state.snapshot();
    for node in nodes {
        cache.set_snapshot(node, snapshot.clone()).await;
    }
}

async fn control(cache: Arc<Cache>) -> Result<(), String> {
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut stdout = tokio::io::stdout();
    let mut state = State::default();
    let mut nodes: Vec<String> = Vec::new();
    while let Some(line) = lines.next_line().await.map_err(|e| e.to_string())? {
        let accepted = now_ns();
        let mut words = line.split_whitespace();
        let reply = match words.next() {
            Some("load") => {
                let path = words.next().ok_or("load needs a path")?;
                let records = read_records(path)?;
                let mut types: HashMap<String, HashMap<String, Resource>> = HashMap::new();
                for (t, n, v) in records {
                    let r = decode(&t, &v)?;
                    types.entry(t).or_default().insert(n, r);
                }
                let all: Vec<String> = types.keys().chain(state.types.keys()).cloned().collect();
                state.types = types;
                for t in all {
                    state.bump(&t);
                }
                publish(&cache, &nodes, &state).await;
                format!("ok {accepted} {}\n", now_ns())
            }
            Some("set") => {
                let (t, n, v) = match (words.next(), words.next(), words.next()) {
                    (Some(t), Some(n), Some(v)) => (t, n, v),
                    _ => return Err(format!("bad set line: {line}")),
                };
                let r = decode(t, &unhex(v)?)?;
                state.types.entry(t.to_owned()).or_default().insert(n.to_owned(), r);
                state.bump(t);
                publish(&cache, &nodes, &state).await;
                format!("ok {accepted}\n")
            }
            Some("nodes") => {
                let n: usize = words
                    .next()
                    .and_then(|n| n.parse().ok())
                    .ok_or("nodes needs a count")?;
                nodes = (0..n).map(|i| format!("{NODE_PREFIX}{i}")).collect();
                format!("ok {accepted}\n")
            }
            Some("quit") => break,
            _ => return Err(format!("unknown command: {line}")),
        };
        stdout.write_all(reply.as_bytes()).await.map_err(|e| e.to_string())?;
        stdout.flush().await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[tokio::main]
async fn main() {
    let listen = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:0".into());
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .unwrap_or_else(|e| panic!("bind {listen}: {e}"));
    let addr = listener.local_addr().unwrap();
    // `ads = false`: with `true`, rust-control-plane 0.1.2 never answers an initial wildcard
    // request (its ADS consistency check holds it until the next snapshot).
    let cache = Arc::new(Cache::new(false));
    let service = Service::new(cache.clone());
    // TCP_NODELAY as `Server::serve(addr)` would set it (`tcp_nodelay` on the builder is ignored
    // with an incoming stream): without it, Nagle's algorithm delays responses by ~40 ms.
    let incoming = tonic::transport::server::TcpIncoming::from_listener(listener, true, None)
        .expect("listener");
    let server = tonic::transport::Server::builder()
        .add_service(AggregatedDiscoveryServiceServer::new(service))
        .serve_with_incoming(incoming);
    let server = tokio::spawn(server);
    println!("listening {addr}");
    if let Err(e) = control(cache).await {
        eprintln!("xds-bench-peer: {e}");
        std::process::exit(2);
    }
    server.abort();
}
