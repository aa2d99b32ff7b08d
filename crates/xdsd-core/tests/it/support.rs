//! An in-process xdsd on 127.0.0.1 (port chosen by the OS), a tonic channel to it, and a raw
//! gRPC client that sends any bytes as a request.
//!
//! The protocol suites whose rules a client sees (SotW, delta, TP2 variants, Fetch) run each
//! test twice ([`protocol_tests!`]): against the server alone ([`Mode::Direct`]) and through an
//! in-process `xdsd relay` in front of it ([`Mode::Relay`]: upstream xdsd -> relay -> the test's
//! client), with the same body. A test changes the upstream's store ([`Server::store`],
//! [`Server::set`]) and talks to the server its clients reach ([`Server::channel`]).

#![allow(dead_code)]

use std::marker::PhantomData;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codec::{BufferSettings, Codec, EncodeBuf, Encoder};
use tonic::transport::Channel;
use tonic::{Status, Streaming};
use tonic_prost::ProstCodec;
use xdsd_core::store::{Change, ReferencePolicy, ResourceInput, Store};
use xdsd_core::{
    Feed, PickStore, ServerHandle, ServerOptions, StreamCounters, StreamStatus, XdsServer,
};

pub const WAIT: Duration = Duration::from_secs(20);

/// How a protocol test reaches the server whose rules it checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The test's client talks to the server.
    Direct,
    /// The test's client talks to a relay of the server (`xdsd relay`'s source and observer in
    /// front of an ordinary server, as the binary wires them), which subscribes upstream what
    /// its clients ask for, on one upstream stream, nothing prefetched.
    Relay,
    /// As [`Mode::Relay`] with `--aggregate-by node`: an upstream stream per downstream node,
    /// presenting that node (its metadata, for an upstream that selects by it).
    RelayByNode,
    /// As [`Mode::Relay`] with `--upstream-keys env,version` (the keys the TP2 suites'
    /// constraints read): wildcards and names not received yet fetched by those keys only.
    RelayDeclaredKeys,
}

/// The keys [`Mode::RelayDeclaredKeys`] declares.
pub const DECLARED_KEYS: [&str; 2] = ["env", "version"];

/// Runs protocol tests written as `async fn name(mode: Mode)`, one `#[tokio::test]` each
/// (multi-threaded: a relay's first request may wait in place for its upstream's answer), in
/// modules named after the mode: `direct::name` for every test; `relay::name` for those listed
/// `through_a_relay` or `through_both_relays` (so `cargo test -p xdsd-core --test it relay`
/// runs every suite through a relay); `relay_by_node::name` for those listed `relay_by_node` or
/// `through_both_relays` (a relay with `--aggregate-by node`, which must be as transparent);
/// `relay_declared_keys::name` for those listed `relay_declared_keys` (a relay told the keys the
/// upstream's constraints read, [`Mode::RelayDeclaredKeys`]). A test left out of `relay` says
/// why where it is listed.
macro_rules! protocol_tests {
    (
        through_a_relay: [$($both:ident),* $(,)?],
        direct_only: [$($direct:ident),* $(,)?]
        $(, relay_by_node: [$($by_node:ident),* $(,)?])?
        $(, through_both_relays: [$($all:ident),* $(,)?])?
        $(, relay_declared_keys: [$($declared:ident),* $(,)?])? $(,)?
    ) => {
        mod direct {
            $($crate::support::protocol_tests!(@test Direct $both);)*
            $($crate::support::protocol_tests!(@test Direct $direct);)*
            $($($crate::support::protocol_tests!(@test Direct $by_node);)*)?
            $($($crate::support::protocol_tests!(@test Direct $all);)*)?
        }
        mod relay {
            $($crate::support::protocol_tests!(@test Relay $both);)*
            $($($crate::support::protocol_tests!(@test Relay $all);)*)?
        }
        mod relay_by_node {
            $($($crate::support::protocol_tests!(@test RelayByNode $by_node);)*)?
            $($($crate::support::protocol_tests!(@test RelayByNode $all);)*)?
        }
        mod relay_declared_keys {
            $($($crate::support::protocol_tests!(@test RelayDeclaredKeys $declared);)*)?
        }
    };
    (@test $mode:ident $name:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            super::$name($crate::support::Mode::$mode).await
        }
    };
}
pub(crate) use protocol_tests;

/// A relay's own parts while it serves (absent for [`Mode::Direct`]).
struct Relayed {
    /// The relay's store: what it serves downstream (with `--aggregate-by`, to clients without
    /// a node).
    store: Store,
    /// The store the relay serves a node from (encoded): its partition's with
    /// `--aggregate-by`, else none (the relay's store).
    picker: Arc<dyn PickStore>,
    upstream_stop: Option<tokio::sync::oneshot::Sender<()>>,
    upstream_task: tokio::task::JoinHandle<()>,
    feed: tokio::task::JoinHandle<()>,
    /// The relay's upstream server.
    upstream: ServerHandle,
}

pub struct Server {
    /// The store whose content the test's clients are served: the server's, or with a relay,
    /// its upstream's.
    pub store: Store,
    /// Where the test's clients connect: the server, or the relay.
    pub addr: SocketAddr,
    pub channel: Channel,
    /// The handle of the server the clients reach (with a relay, the relay's own server).
    pub handle: ServerHandle,
    streams: Box<dyn Fn() -> (Vec<StreamStatus>, StreamCounters) + Send + Sync>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    relayed: Option<Relayed>,
}

/// How long a relay's first request waits for its upstream's answer in these tests.
const RELAY_UPSTREAM_WAIT: Duration = Duration::from_secs(10);

impl Server {
    pub async fn start() -> Server {
        Server::start_with(ServerOptions::default()).await
    }

    pub async fn start_with(options: ServerOptions) -> Server {
        let store = Store::new();
        let server = XdsServer::builder(store.clone())
            .options(options)
            .build()
            .expect("a server without TLS builds");
        Server::serve(store, server).await
    }

    /// A server reached as `mode` says.
    pub async fn start_in(mode: Mode) -> Server {
        Server::start_with_in(ServerOptions::default(), mode).await
    }

    /// A server reached as `mode` says; `options` are those of the server the clients reach
    /// (with a relay, the relay's downstream options; its upstream has the defaults).
    pub async fn start_with_in(options: ServerOptions, mode: Mode) -> Server {
        let by = match mode {
            Mode::Direct => return Server::start_with(options).await,
            Mode::Relay | Mode::RelayDeclaredKeys => xdsd_relay::AggregateBy::None,
            Mode::RelayByNode => xdsd_relay::AggregateBy::Node,
        };
        let upstream_store = Store::new();
        let upstream = XdsServer::builder(upstream_store.clone())
            .build()
            .expect("a server without TLS builds");
        let upstream_handle = upstream.handle();
        let (upstream_addr, upstream_stop, upstream_task) = spawn_serve(upstream).await;

        let node = envoy_types::pb::envoy::config::core::v3::Node {
            id: "relay-under-test".into(),
            ..Default::default()
        };
        let mut relay = xdsd_relay::RelayOptions::new(
            xdsd_client::Options::new(upstream_addr.to_string()),
            node,
        );
        relay.aggregate_by = by;
        if mode == Mode::RelayDeclaredKeys {
            relay.upstream_keys = Some(DECLARED_KEYS.iter().map(|k| k.to_string()).collect());
        }
        relay.first_wait = RELAY_UPSTREAM_WAIT;
        relay.upstream.initial_backoff = Duration::from_millis(50);
        relay.upstream.max_backoff = Duration::from_millis(500);
        let (mut source, observer, _metrics) = xdsd_relay::relay(relay);
        // As `xdsd relay` sets it up: no reference checks, an upstream emptied is followed.
        let relay_store = Store::with_reference_policy(ReferencePolicy::off());
        let feed = Feed::new(relay_store.clone()).allow_empty(true);
        feed.first_load(&mut source)
            .await
            .expect("the relay's first load");
        let feed = tokio::spawn(feed.follow(source));
        let observer = Arc::new(observer);
        let server = XdsServer::builder(relay_store.clone())
            .options(options)
            .observer(observer.clone())
            .store_picker(observer.clone())
            .build()
            .expect("a server without TLS builds");
        let mut server = Server::serve(upstream_store, server).await;
        server.relayed = Some(Relayed {
            store: relay_store,
            picker: observer,
            upstream_stop: Some(upstream_stop),
            upstream_task,
            feed,
            upstream: upstream_handle,
        });
        server
    }

    /// Through a relay, how many streams its upstream server has open (the relay's upstream
    /// streams); `None` without a relay.
    pub fn upstream_streams(&self) -> Option<usize> {
        Some(self.relayed.as_ref()?.upstream.streams().len())
    }

    /// Serves `server` (built on `store`) on a loopback port the OS picks, until [`Server::stop`].
    pub async fn serve(store: Store, server: XdsServer) -> Server {
        let stats = server.handle();
        let handle = stats.clone();
        let (addr, stop, task) = spawn_serve(server).await;
        let channel = connect(addr).await;
        Server {
            store,
            addr,
            channel,
            handle,
            streams: Box::new(move || (stats.streams(), stats.totals())),
            stop: Some(stop),
            task,
            relayed: None,
        }
    }

    /// Waits until the server the clients reach holds what [`Server::store`] holds of resource
    /// `name` of `type_url` (every variant; absent from both counts): at once without a relay.
    /// For a rule about the state of the moment (a one-shot answer), not for pushes, which the
    /// test waits for as they come.
    pub async fn relayed(&self, type_url: &str, name: &str) {
        self.relayed_for(None, type_url, name).await;
    }

    /// [`Server::relayed`] in the store the relay serves `node` from (with `--aggregate-by`,
    /// its partition's: made once the node's first request reached the relay).
    pub async fn relayed_for(
        &self,
        node: Option<&envoy_types::pb::envoy::config::core::v3::Node>,
        type_url: &str,
        name: &str,
    ) {
        let Some(relayed) = &self.relayed else {
            return;
        };
        let store = node
            .and_then(|n| relayed.picker.store_for(&prost::Message::encode_to_vec(n)))
            .unwrap_or_else(|| relayed.store.clone());
        let held = |store: &Store| -> Vec<Bytes> {
            let snapshot = store.snapshot();
            let mut values: Vec<Bytes> = snapshot
                .types()
                .find(|t| &**t.type_url() == type_url)
                .map(|t| t.variants(name).iter().map(|r| r.value()).collect())
                .unwrap_or_default();
            values.sort();
            values
        };
        // The store has no change notice for a caller outside a session: polled.
        let deadline = tokio::time::Instant::now() + WAIT;
        while held(&store) != held(&self.store) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{type_url} {name:?} not relayed within {WAIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub fn set(&self, type_url: &str, name: &str, content: &[u8]) {
        self.store
            .apply([Change::Set(input(type_url, name, content))])
            .unwrap();
    }

    /// Sets resource `name` of `type_url` to the [`body`] of `label`.
    pub fn put(&self, type_url: &str, name: &str, label: &str) {
        self.set(type_url, name, &body(label));
    }

    /// Sets `count` resources of `type_url` named `<prefix>-000`, ... (each labelled with its
    /// name, [`body`]); returns their names in order.
    pub fn set_named(&self, type_url: &str, prefix: &str, count: usize) -> Vec<String> {
        let names: Vec<String> = (0..count).map(|i| format!("{prefix}-{i:03}")).collect();
        for n in &names {
            self.put(type_url, n, n);
        }
        names
    }

    pub fn streams(&self) -> Vec<StreamStatus> {
        (self.streams)().0
    }

    pub fn totals(&self) -> StreamCounters {
        (self.streams)().1
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(WAIT, self.task)
            .await
            .expect("serve returns in time after its shutdown signal")
            .unwrap();
        if let Some(mut relayed) = self.relayed.take() {
            relayed.feed.abort();
            if let Some(stop) = relayed.upstream_stop.take() {
                let _ = stop.send(());
            }
            tokio::time::timeout(WAIT, relayed.upstream_task)
                .await
                .expect("the upstream returns in time after its shutdown signal")
                .unwrap();
        }
    }
}

/// Serves `server` on a loopback port the OS picks: its address, its stop signal and its task.
async fn spawn_serve(
    server: XdsServer,
) -> (
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        server
            .serve(listener, async move {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    (addr, stop, task)
}

/// A resource body that holds `label` in field 1, a string in every Envoy type these tests
/// serve (a name): it decodes as any of them, as a relay, which decodes what it caches,
/// requires, and [`label`] reads it back.
pub fn body(label: &str) -> Vec<u8> {
    use prost::Message;
    envoy_types::pb::envoy::config::cluster::v3::Cluster {
        name: label.into(),
        ..Default::default()
    }
    .encode_to_vec()
}

/// The label of a [`body`].
pub fn label(body: &[u8]) -> String {
    use prost::Message;
    envoy_types::pb::envoy::config::cluster::v3::Cluster::decode(body)
        .map(|c| c.name)
        .unwrap_or_else(|e| panic!("not a labelled body ({e}): {body:?}"))
}

/// Resource `name` of `type_url` with the [`body`] of `label`.
pub fn labelled(type_url: &str, name: &str, label: &str) -> ResourceInput {
    input(type_url, name, &body(label))
}

/// A channel over a connection of its own to `addr`.
pub async fn connect(addr: SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// The constraint `env == value`.
pub fn env_constraint(
    value: &str,
) -> envoy_types::pb::envoy::service::discovery::v3::DynamicParameterConstraints {
    use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::single_constraint::ConstraintType;
    use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::{
        SingleConstraint, Type,
    };
    envoy_types::pb::envoy::service::discovery::v3::DynamicParameterConstraints {
        r#type: Some(Type::Constraint(SingleConstraint {
            key: "env".into(),
            constraint_type: Some(ConstraintType::Value(value.into())),
        })),
    }
}

/// A CDS request of `node` that answers `last`: its ACK, or its NACK with `error` (the first
/// request when there is no `last`).
pub fn cds_answer(
    node: Option<envoy_types::pb::envoy::config::core::v3::Node>,
    last: Option<&envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse>,
    error: Option<&str>,
) -> envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest {
    envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest {
        node,
        type_url: xdsd_core::types::CLUSTER.into(),
        version_info: match (last, error) {
            (Some(r), None) => r.version_info.clone(),
            _ => String::new(),
        },
        response_nonce: last.map(|r| r.nonce.clone()).unwrap_or_default(),
        error_detail: error.map(|m| envoy_types::pb::google::rpc::Status {
            code: 3,
            message: m.into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A node with `id` and `cluster` (empty: none).
pub fn node(id: &str, cluster: &str) -> Option<envoy_types::pb::envoy::config::core::v3::Node> {
    node_with_metadata(id, cluster, &[])
}

/// A node with `id`, `cluster` and `metadata` (top-level string fields).
pub fn node_with_metadata(
    id: &str,
    cluster: &str,
    metadata: &[(&str, &str)],
) -> Option<envoy_types::pb::envoy::config::core::v3::Node> {
    use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
    let fields = metadata.iter().map(|(k, v)| {
        let value = Value {
            kind: Some(Kind::StringValue(v.to_string())),
        };
        (k.to_string(), value)
    });
    Some(envoy_types::pb::envoy::config::core::v3::Node {
        id: id.into(),
        cluster: cluster.into(),
        metadata: (!metadata.is_empty()).then(|| Struct {
            fields: fields.collect(),
        }),
        ..Default::default()
    })
}

pub fn input(type_url: &str, name: &str, content: &[u8]) -> ResourceInput {
    ResourceInput::new(type_url, name, Bytes::copy_from_slice(content))
}

/// The ADS methods, for [`raw_stream`].
pub const ADS_SOTW: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources";
pub const ADS_DELTA: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources";

/// A stream whose requests are any bytes (each one gRPC message) and whose responses decode as
/// `R`: for requests no generated client would send.
pub struct RawStream<R> {
    pub tx: mpsc::Sender<Vec<u8>>,
    pub responses: Streaming<R>,
}

/// Opens `method` (e.g. [`ADS_SOTW`]) on `channel` with a raw request stream.
pub async fn raw_stream<R>(channel: &Channel, method: &'static str) -> RawStream<R>
where
    R: prost::Message + Default + Send + 'static,
{
    let (tx, rx) = mpsc::channel(4);
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.expect("the channel is ready");
    let responses = grpc
        .streaming(
            tonic::Request::new(ReceiverStream::new(rx)),
            http::uri::PathAndQuery::from_static(method),
            RawCodec::<R>(PhantomData),
        )
        .await
        .expect("the call starts")
        .into_inner();
    RawStream { tx, responses }
}

impl<R> RawStream<R> {
    pub async fn send(&self, request: Vec<u8>) {
        self.tx
            .send(request)
            .await
            .expect("the request stream is open");
    }

    /// The status the stream ends with; panics on a response or an OK end.
    pub async fn recv_status(&mut self) -> Status {
        match tokio::time::timeout(WAIT, self.responses.message())
            .await
            .expect("an answer in time")
        {
            Err(status) => status,
            Ok(other) => panic!("expected an error status, got {:?}", other.is_some()),
        }
    }
}

struct RawCodec<R>(PhantomData<fn() -> R>);

impl<R: prost::Message + Default + Send + 'static> Codec for RawCodec<R> {
    type Encode = Vec<u8>;
    type Decode = R;
    type Encoder = RawEncoder;
    type Decoder = <ProstCodec<R, R> as Codec>::Decoder;

    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstCodec::<R, R>::raw_decoder(BufferSettings::default())
    }
}

struct RawEncoder;

impl Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}
