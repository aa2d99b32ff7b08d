//! An in-process xdsd on 127.0.0.1 (port chosen by the OS), a tonic channel to it, and a raw
//! gRPC client that sends any bytes as a request.

#![allow(dead_code)]

use std::marker::PhantomData;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::{BufMut, Bytes};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codec::{BufferSettings, Codec, EncodeBuf, Encoder};
use tonic::transport::Channel;
use tonic::{Status, Streaming};
use tonic_prost::ProstCodec;
use xdsd_core::store::{Change, ResourceInput, Store};
use xdsd_core::{ServerHandle, ServerOptions, StreamCounters, StreamStatus, XdsServer};

pub const WAIT: Duration = Duration::from_secs(20);

pub struct Server {
    pub store: Store,
    pub addr: SocketAddr,
    pub channel: Channel,
    pub handle: ServerHandle,
    streams: Box<dyn Fn() -> (Vec<StreamStatus>, StreamCounters) + Send + Sync>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

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

    /// Serves `server` (built on `store`) on a loopback port the OS picks, until [`Server::stop`].
    pub async fn serve(store: Store, server: XdsServer) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let stats = server.handle();
        let handle = stats.clone();
        let task = tokio::spawn(async move {
            server
                .serve(listener, async move {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        let channel = connect(addr).await;
        Server {
            store,
            addr,
            channel,
            handle,
            streams: Box::new(move || (stats.streams(), stats.totals())),
            stop: Some(stop),
            task,
        }
    }

    pub fn set(&self, type_url: &str, name: &str, content: &[u8]) {
        self.store
            .apply([Change::Set(input(type_url, name, content))])
            .unwrap();
    }

    /// Sets `count` resources of `type_url` named `<prefix>-000`, ... (each its name as
    /// content); returns their names in order.
    pub fn set_named(&self, type_url: &str, prefix: &str, count: usize) -> Vec<String> {
        let names: Vec<String> = (0..count).map(|i| format!("{prefix}-{i:03}")).collect();
        for n in &names {
            self.set(type_url, n, n.as_bytes());
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
    }
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
