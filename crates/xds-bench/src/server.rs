//! The server processes the harness starts (`xds-bench server --kind xdsd|limit`): each listens
//! on 127.0.0.1 (port from the OS) and obeys a line protocol on stdin, the same as bench-peer's:
//!
//! * stdout, once: `listening <addr>`
//! * `load <file>`: replace every resource with those of the record file (see
//!   `config::write_records`); answers `ok <accepted_ns> <done_ns>`
//! * `set <type_url> <name> <hex value> [<group>]`: set one resource (with a group: its variant
//!   for the parameter `env == group`, S6); answers `ok <accepted_ns>`
//! * `nodes <n>`: the clients' node ids will be `xds-bench-0` … (only the peer needs to know);
//!   answers `ok <accepted_ns>`
//! * `coalesce`: (the limit, before any stream opens) coalesce changes per stream instead of
//!   pushing each one (S5's floor, see `coalesced_stream`); answers `ok <accepted_ns>`
//! * `promote`: (xdsd's binary, with `--canary`) promote the gated rollout's candidate now,
//!   through the admin API (`POST /rollout/promote`, replica 0's with replicas); answers
//!   `ok <accepted_ns>`, read just before the request
//! * `quit` or EOF: exit.
//!
//! `accepted_ns` is CLOCK_MONOTONIC when the server read the command: convergence is measured
//! from there to the client's receipt, on the same clock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::single_constraint::ConstraintType;
use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::{
    SingleConstraint, Type,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DynamicParameterConstraints, Resource as DeltaResource,
};
use envoy_types::pb::google::protobuf::Any;
use prost::Message;
use futures::FutureExt;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::{broadcast, mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::server::{Grpc, NamedService, StreamingService};
use tonic::{Request, Response, Status, Streaming};
use xdsd_core::params::Constraints;
use xdsd_core::store::{Change, ResourceInput, Store};
use xdsd_core::XdsServer;

use crate::client::{Kind, DELTA_PATH, SOTW_PATH};
use crate::config::{read_records, Record, GROUP_KEY};
use crate::now_ns;
use crate::wire::{self, fields, RawCodec, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ServerKind {
    /// xdsd-core's `XdsServer` over its `Store`, through the library API.
    Xdsd,
    /// The bare-transport limit: pre-encoded responses pushed with no xDS logic.
    Limit,
    /// The xdsd binary serving a directory of resource files (see `dirsrc.rs`).
    XdsdDir,
    /// The xdsd binary serving an etcd prefix (see `etcdsrc.rs`).
    XdsdEtcd,
    /// The xdsd binary serving a directory with relays in front of it (see `dirsrc.rs`).
    XdsdRelay,
}

pub fn unhex(s: &str) -> anyhow::Result<Vec<u8>> {
    anyhow::ensure!(s.len().is_multiple_of(2), "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| Ok(u8::from_str_radix(&s[i..i + 2], 16)?))
        .collect()
}

/// A line of the harness's control protocol on a server process's stdin.
pub enum Command<'a> {
    /// Replace everything with the records in this file.
    Load(&'a str),
    /// Set one resource: type URL, name, encoded message, group of a variant.
    Set(&'a str, &'a str, Vec<u8>, Option<&'a str>),
    /// A clock reading (answered with a timestamp).
    Nodes,
    /// The limit: coalesce changes per stream from now on.
    Coalesce,
    /// xdsd-etcd: kill (SIGKILL) replica N, as a crashed replica.
    Kill(usize),
    /// xdsd's binary: promote the gated rollout's candidate now (S8).
    Promote,
    /// xdsd's binary: the response bytes it sent so far (S10, S11).
    Sent,
    Quit,
}

impl<'a> Command<'a> {
    pub fn parse(line: &'a str) -> anyhow::Result<Command<'a>> {
        let mut words = line.split_whitespace();
        Ok(match words.next() {
            Some("load") => Command::Load(
                words
                    .next()
                    .ok_or_else(|| anyhow::anyhow!("load: no path"))?,
            ),
            Some("set") => {
                let (Some(t), Some(n), Some(v)) = (words.next(), words.next(), words.next()) else {
                    anyhow::bail!("bad set line: {line}");
                };
                Command::Set(t, n, unhex(v)?, words.next())
            }
            Some("nodes") => Command::Nodes,
            Some("coalesce") => Command::Coalesce,
            Some("kill") => Command::Kill(
                words
                    .next()
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| anyhow::anyhow!("kill: no replica number"))?,
            ),
            Some("promote") => Command::Promote,
            Some("sent") => Command::Sent,
            Some("quit") => Command::Quit,
            _ => anyhow::bail!("unknown command: {line}"),
        })
    }
}

pub fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push_str(&format!("{x:02x}"));
    }
    s
}

/// What a server kind does with the commands.
trait Target {
    fn load(&self, records: Vec<Record>) -> anyhow::Result<()>;
    fn set(
        &self,
        type_url: &str,
        name: &str,
        value: Bytes,
        group: Option<&str>,
    ) -> anyhow::Result<()>;

    /// Coalesce changes per stream (S5). xdsd always does; the limit does from now on.
    fn coalesce(&self) -> anyhow::Result<()> {
        Ok(())
    }

    /// Sets resources that arrived together: one at a time unless the server can commit them
    /// as one change.
    fn set_all(&self, sets: Vec<Set>) -> anyhow::Result<()> {
        for s in sets {
            self.set(&s.type_url, &s.name, s.value, s.group.as_deref())?;
        }
        Ok(())
    }
}

/// A `set` command, owned.
struct Set {
    type_url: String,
    name: String,
    value: Bytes,
    group: Option<String>,
}

/// Most `set` commands committed together.
const MAX_BATCH: usize = 4096;

/// The constraints of group `group`'s variant: `GROUP_KEY == group`.
pub fn group_constraints(group: &str) -> anyhow::Result<Constraints> {
    Ok(Constraints::new(DynamicParameterConstraints {
        r#type: Some(Type::Constraint(SingleConstraint {
            key: GROUP_KEY.into(),
            constraint_type: Some(ConstraintType::Value(group.into())),
        })),
    })?)
}

/// The limit has no variants.
fn no_group(group: Option<&str>) -> anyhow::Result<()> {
    anyhow::ensure!(
        group.is_none(),
        "the limit server has no variants (resource for group {group:?})"
    );
    Ok(())
}

pub async fn run(kind: ServerKind) -> anyhow::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let target: Arc<dyn Target + Send + Sync> = match kind {
        ServerKind::Xdsd => {
            let store = Store::new();
            let server = XdsServer::builder(store.clone()).build()?;
            tokio::spawn(async move {
                // XDS_BENCH_XDSD_NODELAY=1: serve xdsd's routes on sockets with TCP_NODELAY, to
                // measure what `XdsServer::serve` loses by not setting it (tonic ignores the
                // builder's `tcp_nodelay` for an incoming stream).
                let r = if std::env::var_os("XDS_BENCH_XDSD_NODELAY").is_some() {
                    tonic::transport::Server::builder()
                        .add_routes(server.routes())
                        .serve_with_incoming(
                            tonic::transport::server::TcpIncoming::from(listener)
                                .with_nodelay(Some(true)),
                        )
                        .await
                } else {
                    server.serve(listener, std::future::pending()).await
                };
                if let Err(e) = r {
                    eprintln!("xds-bench server: {e}");
                    std::process::exit(3);
                }
            });
            Arc::new(XdsdTarget(store))
        }
        ServerKind::XdsdDir => anyhow::bail!("xdsd-dir runs through dirsrc::run"),
        ServerKind::XdsdEtcd => anyhow::bail!("xdsd-etcd runs through etcdsrc::run"),
        ServerKind::XdsdRelay => anyhow::bail!("xdsd-relay runs through dirsrc::run"),
        ServerKind::Limit => {
            let limit = Arc::new(Limit::new());
            let svc = LimitService(limit.clone());
            tokio::spawn(async move {
                let r = tonic::transport::Server::builder()
                    .add_service(svc)
                    .serve_with_incoming(
                        tonic::transport::server::TcpIncoming::from(listener)
                            .with_nodelay(Some(true)),
                    )
                    .await;
                if let Err(e) = r {
                    eprintln!("xds-bench server: {e}");
                    std::process::exit(3);
                }
            });
            limit
        }
    };
    let mut stdout = tokio::io::stdout();
    stdout
        .write_all(format!("listening {addr}\n").as_bytes())
        .await?;
    stdout.flush().await?;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    // A line read while collecting a batch that is not a `set`: handled next.
    let mut held: Option<String> = None;
    loop {
        let line = match held.take() {
            Some(line) => line,
            None => match lines.next_line().await? {
                Some(line) => line,
                None => break,
            },
        };
        let accepted = now_ns();
        let reply = match Command::parse(&line)? {
            Command::Load(path) => {
                target.load(read_records(path.as_ref())?)?;
                format!("ok {accepted} {}\n", now_ns())
            }
            Command::Set(t, n, v, g) => {
                // Changes that arrived together (already read, in the buffer) are committed
                // together, as an application embedding the store would.
                let mut sets = vec![Set {
                    type_url: t.to_owned(),
                    name: n.to_owned(),
                    value: v.into(),
                    group: g.map(str::to_owned),
                }];
                while sets.len() < MAX_BATCH {
                    let Some(next) = lines.next_line().now_or_never() else {
                        break;
                    };
                    let Some(next) = next? else { break };
                    match Command::parse(&next)? {
                        Command::Set(t, n, v, g) => sets.push(Set {
                            type_url: t.to_owned(),
                            name: n.to_owned(),
                            value: v.into(),
                            group: g.map(str::to_owned),
                        }),
                        _ => {
                            held = Some(next);
                            break;
                        }
                    }
                }
                let count = sets.len();
                target.set_all(sets)?;
                format!("ok {accepted}\n").repeat(count)
            }
            Command::Nodes => format!("ok {accepted}\n"),
            Command::Coalesce => {
                target.coalesce()?;
                format!("ok {accepted}\n")
            }
            Command::Kill(_) => anyhow::bail!("kill: only xdsd-etcd has replicas"),
            Command::Promote => anyhow::bail!("promote: only xdsd's binary runs a gated rollout"),
            Command::Sent => anyhow::bail!("sent: only xdsd's binary is counted"),
            Command::Quit => break,
        };
        stdout.write_all(reply.as_bytes()).await?;
        stdout.flush().await?;
    }
    Ok(())
}

struct XdsdTarget(Store);

impl Target for XdsdTarget {
    fn load(&self, records: Vec<Record>) -> anyhow::Result<()> {
        let inputs = records
            .into_iter()
            .map(|r| {
                let constraints = r.group.as_deref().map(group_constraints).transpose()?;
                Ok(ResourceInput::new(r.type_url, r.name, r.value).with_constraints(constraints))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        self.0.replace_all(inputs)?;
        Ok(())
    }

    fn set(
        &self,
        type_url: &str,
        name: &str,
        value: Bytes,
        group: Option<&str>,
    ) -> anyhow::Result<()> {
        let constraints = group.map(group_constraints).transpose()?;
        self.0.apply([Change::Set(
            ResourceInput::new(type_url, name, value).with_constraints(constraints),
        )])?;
        Ok(())
    }

    /// One store change for all of them: a burst costs one snapshot and wakes each stream once.
    fn set_all(&self, sets: Vec<Set>) -> anyhow::Result<()> {
        let changes = sets
            .into_iter()
            .map(|s| {
                let constraints = s.group.as_deref().map(group_constraints).transpose()?;
                Ok(Change::Set(
                    ResourceInput::new(s.type_url, s.name, s.value).with_constraints(constraints),
                ))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        self.0.apply(changes)?;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The bare-transport limit.

/// Resources of one kind, pre-encoded in both wire forms.
#[derive(Default, Clone)]
struct Encoded {
    /// `google.protobuf.Any` bytes by name (SotW `resources` elements).
    any: HashMap<String, Bytes>,
    /// `envoy.service.discovery.v3.Resource` bytes by name (delta `resources` elements).
    delta: HashMap<String, Bytes>,
    /// Every `resources` field of a SotW response carrying all of them, built once.
    all_sotw: Bytes,
}

impl Encoded {
    fn rebuild_all(&mut self) {
        let mut names: Vec<&String> = self.any.keys().collect();
        names.sort();
        let mut buf = Vec::new();
        for n in names {
            wire::put_bytes(&mut buf, 2, &self.any[n]);
        }
        self.all_sotw = buf.into();
    }
}

/// One change, encoded once and pushed as is to every stream of the variant.
struct Push {
    kind: Kind,
    sotw: Bytes,
    delta: Bytes,
}

/// A change in the coalescing limit's log: its type, name and both encodings.
struct Logged {
    kind: Kind,
    name: Arc<str>,
    any: Bytes,
    delta: Bytes,
}

/// A minimal ADS server: it answers a subscription with the pre-encoded resources and pushes the
/// same pre-encoded bytes to every stream subscribed to the changed type. No versions, no ACK
/// tracking, no per-name watch index: every benchmark client watches every resource of the type
/// that changes, so this is what any server must at least do for them.
pub struct Limit {
    data: RwLock<Arc<[Encoded; 4]>>,
    push: broadcast::Sender<Arc<Push>>,
    generation: AtomicU64,
    lagged: AtomicU64,
    /// After `coalesce`: changes are logged, in order, instead of pushed.
    coalescing: AtomicBool,
    log: RwLock<Vec<Logged>>,
    /// The log's length, watched by the streams with nothing in flight.
    logged: watch::Sender<usize>,
}

fn encode_resource(type_url: &str, name: &str, value: &Bytes, version: u64) -> (Bytes, Bytes) {
    let any = Any {
        type_url: type_url.into(),
        value: value.to_vec(),
    };
    let delta = DeltaResource {
        name: name.into(),
        version: version.to_string(),
        resource: Some(any.clone()),
        ..Default::default()
    };
    (any.encode_to_vec().into(), delta.encode_to_vec().into())
}

/// A `DiscoveryResponse` or a `DeltaDiscoveryResponse` (their version, resources, type URL and
/// nonce fields have the same numbers) around already encoded `resources` fields.
fn response(kind: Kind, version: &str, resources: &[u8], nonce: &str) -> Bytes {
    let mut buf = Vec::with_capacity(resources.len() + 120);
    wire::put_bytes(&mut buf, 1, version.as_bytes());
    buf.extend_from_slice(resources);
    wire::put_bytes(&mut buf, 4, kind.type_url().as_bytes());
    wire::put_bytes(&mut buf, 5, nonce.as_bytes());
    buf.into()
}

impl Limit {
    fn new() -> Limit {
        Limit {
            data: RwLock::new(Arc::new(Default::default())),
            push: broadcast::channel(16_384).0,
            generation: AtomicU64::new(1),
            lagged: AtomicU64::new(0),
            coalescing: AtomicBool::new(false),
            log: RwLock::new(Vec::new()),
            logged: watch::Sender::new(0),
        }
    }

    /// The coalescing limit's `set`: the resource replaced in place (no stream holds the data
    /// between its requests), the change appended to the log, the waiting streams told.
    fn set_coalesced(&self, kind: Kind, name: &str, any: Bytes, delta: Bytes) {
        let name: Arc<str> = name.into();
        let mut changed = vec![Logged {
            kind,
            name: name.clone(),
            any: any.clone(),
            delta: delta.clone(),
        }];
        {
            let mut guard = self.data.write().unwrap_or_else(|e| e.into_inner());
            let data = Arc::make_mut(&mut *guard);
            let e = &mut data[kind as usize];
            e.any.insert(name.to_string(), any);
            e.delta.insert(name.to_string(), delta);
            if matches!(kind, Kind::Cds | Kind::Lds) {
                e.rebuild_all();
            }
            // An updated cluster's endpoints are sent again, as xdsd does (see `set`).
            if kind == Kind::Cds {
                let eds = &data[Kind::Eds as usize];
                if let (Some(any), Some(delta)) = (eds.any.get(&*name), eds.delta.get(&*name)) {
                    changed.push(Logged {
                        kind: Kind::Eds,
                        name,
                        any: any.clone(),
                        delta: delta.clone(),
                    });
                }
            }
        }
        let mut log = self.log.write().unwrap_or_else(|e| e.into_inner());
        log.extend(changed);
        self.logged.send_replace(log.len());
    }

    fn current(&self) -> Arc<[Encoded; 4]> {
        self.data.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Target for Limit {
    fn coalesce(&self) -> anyhow::Result<()> {
        self.coalescing.store(true, Ordering::Relaxed);
        Ok(())
    }

    fn load(&self, records: Vec<Record>) -> anyhow::Result<()> {
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let mut data: [Encoded; 4] = Default::default();
        for r in records {
            no_group(r.group.as_deref())?;
            let (t, n, v) = (r.type_url, r.name, r.value);
            let kind = Kind::from_type_url(t.as_bytes())
                .ok_or_else(|| anyhow::anyhow!("the limit server does not handle {t}"))?;
            let (any, delta) = encode_resource(&t, &n, &v, generation);
            data[kind as usize].any.insert(n.clone(), any);
            data[kind as usize].delta.insert(n, delta);
        }
        for e in &mut data {
            e.rebuild_all();
        }
        *self.data.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(data);
        Ok(())
    }

    fn set(
        &self,
        type_url: &str,
        name: &str,
        value: Bytes,
        group: Option<&str>,
    ) -> anyhow::Result<()> {
        no_group(group)?;
        let kind = Kind::from_type_url(type_url.as_bytes())
            .ok_or_else(|| anyhow::anyhow!("the limit server does not handle {type_url}"))?;
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let (any, delta) = encode_resource(type_url, name, &value, generation);
        if self.coalescing.load(Ordering::Relaxed) {
            self.set_coalesced(kind, name, any, delta);
            return Ok(());
        }
        let mut guard = self.data.write().unwrap_or_else(|e| e.into_inner());
        let mut data: [Encoded; 4] = (**guard).clone();
        let e = &mut data[kind as usize];
        e.any.insert(name.into(), any.clone());
        e.delta.insert(name.into(), delta.clone());
        let full_state = matches!(kind, Kind::Cds | Kind::Lds);
        if full_state {
            e.rebuild_all();
        }
        let version = format!("v{generation}");
        let nonce = format!("p{generation}");
        let sotw_resources = if full_state {
            e.all_sotw.clone()
        } else {
            let mut b = Vec::new();
            wire::put_bytes(&mut b, 2, &any);
            b.into()
        };
        let mut delta_resources = Vec::new();
        wire::put_bytes(&mut delta_resources, 2, &delta);
        let push = Push {
            kind,
            sotw: response(kind, &version, &sotw_resources, &nonce),
            delta: response(kind, &version, &delta_resources, &nonce),
        };
        // An updated EDS cluster needs its endpoints again for Envoy to finish warming it; xdsd
        // sends them, so the limit pushes the same second response.
        let warm = (kind == Kind::Cds)
            .then(|| {
                let eds = &data[Kind::Eds as usize];
                let (any, delta) = (eds.any.get(name)?, eds.delta.get(name)?);
                let (mut s, mut d) = (Vec::new(), Vec::new());
                wire::put_bytes(&mut s, 2, any);
                wire::put_bytes(&mut d, 2, delta);
                Some(Push {
                    kind: Kind::Eds,
                    sotw: response(Kind::Eds, &version, &s, &nonce),
                    delta: response(Kind::Eds, &version, &d, &nonce),
                })
            })
            .flatten();
        *guard = Arc::new(data);
        drop(guard);
        let _ = self.push.send(Arc::new(push));
        if let Some(w) = warm {
            let _ = self.push.send(Arc::new(w));
        }
        Ok(())
    }
}

#[derive(Clone)]
struct LimitService(Arc<Limit>);

impl NamedService for LimitService {
    const NAME: &'static str = "envoy.service.discovery.v3.AggregatedDiscoveryService";
}

type BoxFuture = std::pin::Pin<
    Box<
        dyn std::future::Future<
                Output = Result<http::Response<tonic::body::Body>, std::convert::Infallible>,
            > + Send,
    >,
>;

impl tower_service::Service<http::Request<tonic::body::Body>> for LimitService {
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let delta = match req.uri().path() {
            SOTW_PATH => false,
            DELTA_PATH => true,
            other => {
                let status = Status::unimplemented(other.to_string());
                return Box::pin(async move { Ok(status.into_http()) });
            }
        };
        let method = LimitStream {
            limit: self.0.clone(),
            delta,
        };
        Box::pin(async move {
            let mut grpc = Grpc::new(RawCodec).max_decoding_message_size(usize::MAX);
            Ok(grpc.streaming(method, req).await)
        })
    }
}

struct LimitStream {
    limit: Arc<Limit>,
    delta: bool,
}

impl StreamingService<Bytes> for LimitStream {
    type Response = Bytes;
    type ResponseStream = ReceiverStream<Result<Bytes, Status>>;
    type Future = std::future::Ready<Result<Response<Self::ResponseStream>, Status>>;

    fn call(&mut self, request: Request<Streaming<Bytes>>) -> Self::Future {
        let (tx, rx) = mpsc::channel(1);
        let limit = self.limit.clone();
        if limit.coalescing.load(Ordering::Relaxed) {
            let logged = limit.logged.subscribe();
            tokio::spawn(coalesced_stream(
                limit,
                self.delta,
                request.into_inner(),
                logged,
                tx,
            ));
            return std::future::ready(Ok(Response::new(ReceiverStream::new(rx))));
        }
        let pushes = limit.push.subscribe();
        tokio::spawn(limit_stream(
            limit,
            self.delta,
            request.into_inner(),
            pushes,
            tx,
        ));
        std::future::ready(Ok(Response::new(ReceiverStream::new(rx))))
    }
}

async fn limit_stream(
    limit: Arc<Limit>,
    delta: bool,
    mut requests: Streaming<Bytes>,
    mut pushes: broadcast::Receiver<Arc<Push>>,
    tx: mpsc::Sender<Result<Bytes, Status>>,
) {
    let mut subscribed = [false; 4];
    let mut last_names = [0u64; 4];
    let mut nonce = 0u64;
    loop {
        let out = tokio::select! {
            req = requests.message() => match req {
                Ok(Some(req)) => {
                    match answer(&limit, delta, &req, &mut subscribed, &mut last_names, &mut nonce) {
                        Some((_, Some(b))) => b,
                        _ => continue,
                    }
                }
                _ => return,
            },
            push = pushes.recv() => match push {
                Ok(p) if subscribed[p.kind as usize] => if delta { p.delta.clone() } else { p.sotw.clone() },
                Ok(_) => continue,
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    limit.lagged.fetch_add(n, Ordering::Relaxed);
                    continue;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
        };
        if tx.send(Ok(out)).await.is_err() {
            return;
        }
    }
}

/// S5's floor: what any server that keeps up with churn must at least do. Each stream has at
/// most one response in flight per type; the names changed meanwhile are collected from the
/// limit's log and sent together, pre-encoded, when the client answers (ACK or new request).
/// A stream with nothing in flight waits for the log to grow; one with a response in flight is
/// not woken by changes at all. No versions, no ACK checking, no watch index, no variants.
async fn coalesced_stream(
    limit: Arc<Limit>,
    delta: bool,
    mut requests: Streaming<Bytes>,
    mut logged: watch::Receiver<usize>,
    tx: mpsc::Sender<Result<Bytes, Status>>,
) {
    let mut subscribed = [false; 4];
    let mut last_names = [0u64; 4];
    let mut nonce = 0u64;
    let mut in_flight = [false; 4];
    let mut cursor = *logged.borrow_and_update();
    // Per type: where in the log its changes since the last response are.
    let mut changed: [Vec<usize>; 4] = Default::default();
    loop {
        let idle = !in_flight.iter().any(|f| *f);
        tokio::select! {
            req = requests.message() => match req {
                Ok(Some(req)) => {
                    let Some((kind, out)) =
                        answer(&limit, delta, &req, &mut subscribed, &mut last_names, &mut nonce)
                    else {
                        continue;
                    };
                    in_flight[kind as usize] = false;
                    if let Some(b) = out {
                        if tx.send(Ok(b)).await.is_err() {
                            return;
                        }
                        in_flight[kind as usize] = true;
                    }
                }
                _ => return,
            },
            r = logged.changed(), if idle => if r.is_err() {
                return;
            },
        }
        let end = *logged.borrow_and_update();
        if end > cursor {
            let log = limit.log.read().unwrap_or_else(|e| e.into_inner());
            for (i, c) in log.iter().enumerate().take(end).skip(cursor) {
                if subscribed[c.kind as usize] {
                    changed[c.kind as usize].push(i);
                }
            }
            cursor = end;
        }
        for k in [Kind::Cds, Kind::Lds, Kind::Eds, Kind::Rds] {
            let news = &mut changed[k as usize];
            if in_flight[k as usize] || news.is_empty() {
                continue;
            }
            nonce += 1;
            let version = format!("v{}", limit.generation.load(Ordering::Relaxed));
            let mut out = Vec::new();
            wire::put_bytes(&mut out, 1, version.as_bytes());
            if !delta && matches!(k, Kind::Cds | Kind::Lds) {
                out.extend_from_slice(&limit.current()[k as usize].all_sotw);
            } else {
                let log = limit.log.read().unwrap_or_else(|e| e.into_inner());
                // The latest of each name: newest first, in name order, the first of each name.
                news.reverse();
                news.sort_by(|a, b| log[*a].name.cmp(&log[*b].name));
                news.dedup_by(|a, b| log[*a].name == log[*b].name);
                out.reserve(news.iter().map(|i| log[*i].any.len() + 8).sum::<usize>() + 120);
                for i in news.iter() {
                    let c = &log[*i];
                    wire::put_bytes(&mut out, 2, if delta { &c.delta } else { &c.any });
                }
            }
            news.clear();
            wire::put_bytes(&mut out, 4, k.type_url().as_bytes());
            wire::put_bytes(&mut out, 5, format!("c{nonce}").as_bytes());
            if tx.send(Ok(out.into())).await.is_err() {
                return;
            }
            in_flight[k as usize] = true;
        }
    }
}

/// The request's type, and the response to it if it subscribes to something new (ACKs are
/// answered with nothing).
fn answer(
    limit: &Limit,
    delta: bool,
    req: &[u8],
    subscribed: &mut [bool; 4],
    last_names: &mut [u64; 4],
    nonce: &mut u64,
) -> Option<(Kind, Option<Bytes>)> {
    let (type_tag, names_tag) = if delta { (2, 3) } else { (4, 3) };
    let mut kind = None;
    let mut names: Vec<&[u8]> = Vec::new();
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for (tag, v) in fields(req) {
        if let Value::Bytes(b) = v {
            if tag == type_tag {
                kind = Kind::from_type_url(b);
            } else if tag == names_tag {
                names.push(b);
                for x in b.iter().chain([&0u8]) {
                    hash = (hash ^ u64::from(*x)).wrapping_mul(0x100_0000_01b3);
                }
            }
        }
    }
    let kind = kind?;
    let k = kind as usize;
    let new_names = if delta {
        !names.is_empty()
    } else {
        hash != last_names[k]
    };
    if subscribed[k] && !new_names {
        return Some((kind, None));
    }
    subscribed[k] = true;
    last_names[k] = hash;
    let data = limit.current();
    let e = &data[k];
    *nonce += 1;
    let version = format!("v{}", limit.generation.load(Ordering::Relaxed));
    let nonce = format!("i{nonce}");
    let mut resources = Vec::new();
    if names.is_empty() {
        if delta {
            for d in e.delta.values() {
                wire::put_bytes(&mut resources, 2, d);
            }
            return Some((kind, Some(response(kind, &version, &resources, &nonce))));
        }
        return Some((kind, Some(response(kind, &version, &e.all_sotw, &nonce))));
    }
    let map = if delta { &e.delta } else { &e.any };
    for n in names {
        if let Some(b) = std::str::from_utf8(n).ok().and_then(|n| map.get(n)) {
            wire::put_bytes(&mut resources, 2, b);
        }
    }
    Some((kind, Some(response(kind, &version, &resources, &nonce))))
}
