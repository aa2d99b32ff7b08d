//! The gRPC server: ADS and every per-type discovery service, routed to stream drivers that
//! write pre-encoded responses (see `wire`).

use std::convert::Infallible;
use std::future::{ready, Future};
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto::Builder as ConnectionBuilder;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio_stream::StreamExt;
use tonic::body::Body;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic::server::{ClientStreamingService, Grpc, NamedService};
use tonic::service::Routes;
use tonic::transport::server::Connected;
use tonic::{Request, Response, Status, Streaming};
use tonic_prost::ProstCodec;
use tracing::{debug, warn};

use super::body::{self, ResponseBody};
use super::budget::Metered;
use super::clients::ClientStatus;
use super::conn::{self, Closable, ConnInfo, ConnectionAge, WithConnInfo};
use super::context::ServerContext;
use super::fetch;
use super::observer::StreamObserver;
use super::picker::{PickStore, Picked, StorePicker};
use super::requests::Requests;
use super::rest::JsonCodec;
use super::stats::{StreamCounters, StreamStatus};
use super::status::{self, status_of_read_error};
use super::stream::{self, Protocol};
use super::tls::{TlsError, TlsOptions, TlsState};
use super::wire::SotwWire;
use crate::metrics::Metrics;
use crate::protocol::delta::DeltaMachine;
use crate::protocol::sotw::{SotwMachine, SotwRequest};
use crate::ready::Readiness;
use crate::store::Store;
use crate::types::{ADS_SERVICE, PER_TYPE_SERVICES};

pub use super::options::{
    ServerOptions, DEFAULT_MAX_BUFFERED_REQUEST_BYTES, DEFAULT_MAX_BUFFERED_REQUEST_BYTES_TOTAL,
    DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_CONNECTION_AGE_GRACE, DEFAULT_MAX_HELD_POLLS,
    DEFAULT_MAX_NAMES_PER_CONNECTION, DEFAULT_MAX_NAMES_TOTAL, DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_MAX_STREAMS_PER_CONNECTION, DEFAULT_PREFACE_TIMEOUT, DEFAULT_REST_HOLD,
    MIN_MAX_REQUEST_BYTES, MIN_MAX_RESPONSE_BYTES, SHUTDOWN_GRACE,
};
use super::options::{MAX_LOCAL_ERROR_RESETS, MAX_PENDING_RESETS};

/// Builds an [`XdsServer`] (see [`XdsServer::builder`]). Every setting may be given in any
/// order: the server is made once, by [`XdsServerBuilder::build`].
#[must_use = "a builder does nothing until it is built"]
pub struct XdsServerBuilder {
    store: Store,
    options: ServerOptions,
    metrics: Option<Metrics>,
    rest: Option<Arc<dyn JsonCodec>>,
    tls: Option<TlsOptions>,
    picker: Option<Arc<dyn StorePicker>>,
    observers: Vec<Arc<dyn StreamObserver>>,
}

impl XdsServerBuilder {
    /// The server's options (limits, session, REST polling); [`ServerOptions::default`] if not
    /// given.
    pub fn options(mut self, options: ServerOptions) -> Self {
        self.options = options;
        self
    }

    /// Counts into `metrics` (e.g. one the program also counts its source's loads in) instead
    /// of metrics of its own.
    pub fn metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Serves REST-JSON polling (`POST /v3/discovery:clusters`, …; docs/rest.md) beside
    /// the gRPC services, on the same address: HTTP/1.1 and HTTP/2 requests with a JSON body go
    /// to REST, gRPC ones to the gRPC services. `codec` converts the JSON (the binary's uses the
    /// Envoy descriptors); the admin API's `/config?contents=1` writes resources with it too.
    pub fn rest_json(mut self, codec: Arc<dyn JsonCodec>) -> Self {
        self.rest = Some(codec);
        self
    }

    /// Serves TLS (mutual TLS with a client CA; see [`TlsOptions`]) on the port
    /// [`XdsServer::serve`] serves: the files are read by [`XdsServerBuilder::build`], which
    /// fails if they do not load.
    pub fn tls(mut self, options: TlsOptions) -> Self {
        self.tls = Some(options);
        self
    }

    /// Lets `picker` pick the store each client reads (its default store is the server's), and
    /// observe every stream: what [`XdsServerBuilder::rollout`] gives (`crate::rollout`).
    pub(crate) fn picker(mut self, picker: Arc<dyn StorePicker>) -> Self {
        self.store = picker.default_store().clone();
        self.picker = Some(picker);
        self
    }

    /// Lets `picker` pick the store each client reads (`None`: this server's store), for a
    /// program that serves groups of clients from stores of their own (`xdsd relay
    /// --aggregate-by`). A stream reads the store picked at its first request with a node; a
    /// one-shot request (`Fetch*`, REST), the one picked by its node. Not with a gated rollout,
    /// which picks its canaries' store: the last of the two given is used.
    pub fn store_picker(mut self, picker: Arc<dyn PickStore>) -> Self {
        self.picker = Some(Arc::new(Picked {
            default: self.store.clone(),
            picker,
        }));
        self
    }

    /// Adds an observer of every stream (see [`StreamObserver`]); observers are called in the
    /// order they were added, and the first to refuse a request ends its stream. The server's
    /// own observers (the record of each client that CSDS and [`ServerHandle::clients`] show,
    /// the stream metrics, a rollout's canaries) are told each event first, and a request once
    /// every added observer accepted it.
    pub fn observer(mut self, observer: Arc<dyn StreamObserver>) -> Self {
        self.observers.push(observer);
        self
    }

    /// The server; an error when TLS's files do not load.
    pub fn build(self) -> Result<XdsServer, TlsError> {
        let tls = match self.tls {
            Some(options) => Some(Arc::new(TlsState::load(options)?)),
            None => None,
        };
        let (shutdown, rx) = watch::channel(false);
        let metrics = self.metrics.unwrap_or_default();
        let mut ctx = ServerContext::new(self.store, self.options, rx, metrics.clone());
        if let Some(tls) = &tls {
            tls.set_metrics(metrics.clone());
        }
        if let Some(picker) = &self.picker {
            picker.set_metrics(metrics);
        }
        ctx.set_observers(self.picker, self.observers.into());
        Ok(XdsServer {
            ctx: Arc::new(ctx),
            shutdown,
            rest: self.rest,
            tls,
        })
    }
}

/// An xDS gRPC server over a [`Store`]: every SotW and incremental discovery service, and the
/// unary `Fetch*` methods of the per-type services (the current state, answered at once).
pub struct XdsServer {
    ctx: Arc<ServerContext>,
    shutdown: watch::Sender<bool>,
    /// REST-JSON polling, when a JSON codec was given.
    rest: Option<Arc<dyn JsonCodec>>,
    /// TLS on the port [`XdsServer::serve`] serves.
    tls: Option<Arc<TlsState>>,
}

impl XdsServer {
    /// Starts building a server over `store`: set its options, TLS, metrics, REST-JSON codec,
    /// rollout and observers in any order, then [`XdsServerBuilder::build`].
    pub fn builder(store: Store) -> XdsServerBuilder {
        XdsServerBuilder {
            store,
            options: ServerOptions::default(),
            metrics: None,
            rest: None,
            tls: None,
            picker: None,
            observers: Vec::new(),
        }
    }

    /// The TLS options, when TLS is on.
    pub fn tls(&self) -> Option<&TlsOptions> {
        self.tls.as_deref().map(TlsState::options)
    }

    /// The server's options.
    pub fn options(&self) -> &ServerOptions {
        &self.ctx.options
    }

    /// The gRPC routes of every discovery service, to mount in a `tonic` server of your own.
    pub fn routes(&self) -> Routes {
        let svc = XdsService {
            ctx: self.ctx.clone(),
        };
        let mut routes = Routes::new(Named::<Ads>::new(svc.clone()));
        macro_rules! add {
            ($($kind:ident),*) => { $( routes = routes.add_service(Named::<$kind>::new(svc.clone())); )* };
        }
        add!(Lds, Rds, Srds, Vhds, Cds, Eds, Sds, Rtds);
        routes = routes
            .add_service(super::csds::service(self.ctx.clone()))
            .add_service(super::health::service(self.ctx.clone()));
        match &self.rest {
            Some(codec) => Routes::from(
                routes
                    .into_axum_router()
                    .merge(super::rest::routes(self.ctx.clone(), codec.clone())),
            ),
            None => routes,
        }
    }

    /// Reads the stream counters, clients, metrics and readiness, also after `serve` took the
    /// server.
    pub fn handle(&self) -> ServerHandle {
        ServerHandle {
            ctx: self.ctx.clone(),
            json: self.rest.clone(),
        }
    }

    /// Ends every open stream with UNAVAILABLE (clients reconnect elsewhere or later). A stream
    /// whose client stopped reading gives up the response it was sending, waits up to
    /// [`SHUTDOWN_GRACE`] for the client to take the status, and ends without it after that.
    /// The connections stay open: [`XdsServer::serve`] closes its own, a server of your own
    /// mounting [`XdsServer::routes`] closes its.
    pub fn end_streams(&self) {
        let _ = self.shutdown.send(true);
    }

    /// Serves on `listener` until `signal` completes, then shuts down and returns.
    ///
    /// Each connection is served until its client closes it, or until its
    /// [`ServerOptions::max_connection_age`] (± 10 %) and grace are over.
    ///
    /// On shutdown, the listener is closed, every open stream ends with UNAVAILABLE ("xdsd is
    /// shutting down"; clients reconnect elsewhere or later) and every connection is told to go
    /// away (HTTP/2 GOAWAY). The connections that are still open [`SHUTDOWN_GRACE`] later, such
    /// as one whose client stopped reading (HTTP/2 flow control then holds back what xdsd
    /// sends), are closed: `serve` returns within about that long after `signal`, whatever the
    /// clients do.
    pub async fn serve(
        self,
        listener: TcpListener,
        signal: impl Future<Output = ()>,
    ) -> Result<(), tonic::transport::Error> {
        let routes = self.routes().prepare();
        let shutdown = self.shutdown;
        // Flips when the grace period is over: every connection still open then is closed.
        let (close, closing) = watch::channel(false);
        // Flips on the shutdown signal: every connection is told to go away. Each connection
        // holds a receiver until it is closed, so that `serve` can wait for them all.
        let (draining, drain) = watch::channel(false);
        if let Some(tls) = &self.tls {
            tls.set_http1(self.rest.is_some());
        }
        let options = &self.ctx.options;
        let max_connections = options.max_connections.min(Semaphore::MAX_PERMITS);
        let connections = Arc::new(Semaphore::new(max_connections));
        // Whether the latest connection was refused: the refusals of one run are logged once.
        let mut full = false;
        let mut builder = ConnectionBuilder::new(TokioExecutor::new());
        if self.rest.is_none() {
            // REST-JSON polls may come over HTTP/1.1; gRPC is HTTP/2 only.
            builder = builder.http2_only();
        }
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(options.max_streams_per_connection)
            .max_pending_accept_reset_streams(MAX_PENDING_RESETS)
            .max_local_error_reset_streams(MAX_LOCAL_ERROR_RESETS)
            // Detect dead peers, so their streams and memory go away.
            .keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(10));
        builder.http1().timer(TokioTimer::new());
        let builder = Arc::new(builder);
        let age = ConnectionAge {
            age: options.max_connection_age,
            grace: options.max_connection_age_grace,
            seed: std::collections::hash_map::RandomState::new(),
        };
        let incoming = conn::incoming(listener, self.tls.clone(), options.preface_timeout);
        tokio::pin!(signal);
        {
            // Dropped when the loop ends: that closes the listener.
            let mut incoming = incoming;
            loop {
                let io = tokio::select! {
                    () = &mut signal => break,
                    accepted = incoming.next() => match accepted {
                        Some(Ok(io)) => io,
                        Some(Err(error)) => {
                            debug!(%error, "accepting a connection failed");
                            continue;
                        }
                        None => break,
                    },
                };
                let permit = match connections.clone().try_acquire_owned() {
                    Ok(permit) => {
                        full = false;
                        permit
                    }
                    // Closed at once (dropped); logged once per run of refusals.
                    Err(_) => {
                        if !std::mem::replace(&mut full, true) {
                            warn!(
                                limit = max_connections,
                                "connection limit reached (--max-connections): refusing new connections until some close"
                            );
                        }
                        continue;
                    }
                };
                let io = Closable::new(io, closing.clone(), permit);
                let service = WithConnInfo {
                    routes: routes.clone(),
                    info: io.connect_info(),
                };
                tokio::spawn(conn::serve_connection(
                    builder.clone(),
                    io,
                    service,
                    drain.clone(),
                    age.of(),
                ));
            }
        }
        // Every stream ends with UNAVAILABLE, every connection is told to go away; those still
        // open after the grace period are closed.
        let _ = shutdown.send(true);
        let _ = draining.send(true);
        drop(drain);
        if tokio::time::timeout(SHUTDOWN_GRACE, draining.closed())
            .await
            .is_err()
        {
            close.send_replace(true);
            draining.closed().await;
        }
        Ok(())
    }
}

/// A handle on a server, also after `serve` took it: its stream counters, its clients, its
/// metrics, and its readiness.
#[derive(Clone)]
pub struct ServerHandle {
    ctx: Arc<ServerContext>,
    /// The server's [`XdsServerBuilder::rest_json`] codec, which the admin API's
    /// `/config?contents=1` writes resources with.
    json: Option<Arc<dyn JsonCodec>>,
}

impl ServerHandle {
    pub(crate) fn context(&self) -> &ServerContext {
        &self.ctx
    }

    /// The server's [`XdsServerBuilder::rest_json`] codec, if it was given one: what writes a
    /// resource in proto3 JSON.
    pub fn json_codec(&self) -> Option<&dyn JsonCodec> {
        self.json.as_deref()
    }

    /// The store's current snapshot (with a gated rollout, the stable store's).
    pub fn snapshot(&self) -> Arc<crate::store::Snapshot> {
        self.ctx.store.snapshot()
    }

    /// What a client with `node` would be served, subscribing to everything, of each type but
    /// virtual hosts (asked for by name only): one State-of-the-World answer per type, in type
    /// URL order, from the store that node reads (a gated rollout's canary store for its cohort).
    /// An error for a node the session refuses (its parameters out of bounds).
    pub fn preview(
        &self,
        node: &envoy_types::pb::envoy::config::core::v3::Node,
    ) -> Result<Vec<crate::protocol::sotw::SotwResponse>, tonic::Status> {
        super::fetch::preview(&self.ctx, node)
    }

    /// Every connected client (one per stream), by stream id: its node, and where it stands
    /// with each type it requested (last response, ACK, NACK).
    pub fn clients(&self) -> Vec<ClientStatus> {
        self.ctx.streams.clients()
    }

    /// What the server serves: the source revision of its state (a gated rollout's stable and
    /// candidate revisions), a digest of it, as its CSDS answers carry it
    /// ([`crate::csds::SERVED_METADATA`]).
    pub fn served(&self) -> super::csds::Served {
        super::csds::served(&self.ctx, None)
    }

    /// The server's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.ctx.streams.metrics
    }

    /// The metrics in the Prometheus (OpenMetrics) text format.
    pub fn metrics_text(&self) -> String {
        self.ctx.streams.metrics.encode(&self.ctx.store.snapshot())
    }

    /// Whether the server reports itself serving: ready (see [`ServerHandle::readiness`]) and
    /// not shutting down. gRPC health checks and the admin API's `/readyz` answer this.
    pub fn serving(&self) -> bool {
        self.ctx.serving()
    }

    /// Whether the server is shutting down.
    pub fn shutting_down(&self) -> bool {
        *self.ctx.shutdown.borrow()
    }

    /// Whether the server reports itself ready (it does from the start), to set: a program that
    /// starts serving before its first load can report NOT_SERVING until then, and a
    /// [`crate::Feed::ready`] sets it from its source's health.
    pub fn readiness(&self) -> Readiness {
        self.ctx.ready.clone()
    }

    /// What each open stream has been sent so far.
    pub fn streams(&self) -> Vec<StreamStatus> {
        self.ctx.streams.list()
    }

    /// Totals over every stream this server has had, open or closed.
    pub fn totals(&self) -> StreamCounters {
        self.ctx.streams.totals()
    }
}

/// One tower service for every discovery method; `Named` gives it each gRPC service name.
#[derive(Clone)]
struct XdsService {
    ctx: Arc<ServerContext>,
}

type BoxFuture = Pin<Box<dyn Future<Output = Result<http::Response<Body>, Infallible>> + Send>>;

impl XdsService {
    fn route(&self, path: &str) -> Option<Method> {
        let (service, method) = path.strip_prefix('/')?.split_once('/')?;
        if service == ADS_SERVICE {
            return match method {
                "StreamAggregatedResources" => Some(Method::Sotw(None)),
                "DeltaAggregatedResources" => Some(Method::Delta(None)),
                _ => None,
            };
        }
        let (_, type_url) = PER_TYPE_SERVICES.iter().find(|(s, _)| *s == service)?;
        let type_url = Arc::from(*type_url);
        if method.starts_with("Delta") {
            return Some(Method::Delta(Some(type_url)));
        }
        // VHDS has no SotW variant, streamed or fetched.
        if service == Vhds::NAME {
            return None;
        }
        if method.starts_with("Stream") {
            return Some(Method::Sotw(Some(type_url)));
        }
        if method.starts_with("Fetch") {
            return Some(Method::Fetch(type_url));
        }
        None
    }
}

/// `Some(type)` for a per-type service, `None` for ADS.
#[derive(Debug, PartialEq)]
enum Method {
    Sotw(Option<Arc<str>>),
    Delta(Option<Arc<str>>),
    /// The unary `Fetch*` of a per-type service.
    Fetch(Arc<str>),
}

fn streaming<V: Protocol>(
    ctx: Arc<ServerContext>,
    fixed: Option<Arc<str>>,
    req: http::Request<Body>,
) -> BoxFuture {
    let (peer, access) = conn::peer_of_http(req.extensions(), ctx.options.allow_plaintext_secrets);
    let limit = ctx.options.max_request_bytes;
    let charges = ctx.charges(req.extensions().get::<ConnInfo>());
    let requests = Requests::new(
        Metered::new(req.into_body(), charges, peer),
        V::REQUEST,
        limit,
    );
    let (tx, rx) = body::channel();
    tokio::spawn(stream::run::<V>(ctx, fixed, peer, access, requests, tx));
    Box::pin(ready(Ok(body::response(ResponseBody::<V::Response>::new(
        rx,
    )))))
}

fn fetching(ctx: Arc<ServerContext>, type_url: Arc<str>, req: http::Request<Body>) -> BoxFuture {
    let limit = ctx.options.max_request_bytes;
    let charges = ctx.charges(req.extensions().get::<ConnInfo>());
    let peer = req
        .extensions()
        .get::<ConnInfo>()
        .and_then(|c| c.remote_addr);
    let req = req.map(|body| Body::new(Metered::new(body, charges, peer)));
    let method = FetchMethod { ctx, type_url };
    Box::pin(async move {
        let mut grpc =
            Grpc::new(StreamCodec::<SotwMachine>(PhantomData)).max_decoding_message_size(limit);
        // A unary call, served as client streaming so that reading its request fails the way a
        // stream's does (see `status`), not with tonic's own codes.
        Ok(grpc.client_streaming(method, req).await)
    })
}

/// Starting size of a `Fetch` call's encode and decode buffers (streams use neither: their
/// requests are read by `requests.rs`, their responses written by `body.rs`). xDS requests and
/// most responses are far smaller than tonic's default of 8 KiB, and the buffers still grow for
/// a large one.
const STREAM_BUFFER_BYTES: usize = 1024;

/// prost encoding and decoding of a variant's messages (`Fetch`), with small buffers; a request
/// that does not decode is reported as the client's error (see `status`).
struct StreamCodec<V>(PhantomData<fn() -> V>);

impl<V: Protocol> Codec for StreamCodec<V> {
    type Encode = V::Wire;
    type Decode = V::Message;
    type Encoder = <ProstCodec<V::Wire, V::Message> as Codec>::Encoder;
    type Decoder = RequestDecoder<V>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<V::Wire, V::Message>::raw_encoder(buffer_settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        RequestDecoder(PhantomData)
    }
}

/// Decodes requests; tonic's own prost decoder reports a malformed message as an INTERNAL
/// (server) error, while it is the client's.
struct RequestDecoder<V>(PhantomData<fn() -> V>);

impl<V: Protocol> Decoder for RequestDecoder<V> {
    type Item = V::Message;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<V::Message>, Status> {
        <V::Message as prost::Message>::decode(buf)
            .map(Some)
            .map_err(|e| status::undecodable(V::REQUEST, &e))
    }

    fn buffer_settings(&self) -> BufferSettings {
        buffer_settings()
    }
}

fn buffer_settings() -> BufferSettings {
    BufferSettings::new(STREAM_BUFFER_BYTES, 32 * 1024)
}

impl tower_service::Service<http::Request<Body>> for XdsService {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        match self.route(req.uri().path()) {
            Some(Method::Sotw(fixed)) => streaming::<SotwMachine>(self.ctx.clone(), fixed, req),
            Some(Method::Delta(fixed)) => streaming::<DeltaMachine>(self.ctx.clone(), fixed, req),
            Some(Method::Fetch(type_url)) => fetching(self.ctx.clone(), type_url, req),
            None => Box::pin(ready(Ok(Status::unimplemented(format!(
                "xdsd does not implement {}",
                req.uri().path()
            ))
            .into_http()))),
        }
    }
}

/// A unary `Fetch*` call: its one request answered with the current state (see `fetch`).
struct FetchMethod {
    ctx: Arc<ServerContext>,
    type_url: Arc<str>,
}

type FetchFuture = Pin<Box<dyn Future<Output = Result<Response<SotwWire>, Status>> + Send>>;

impl ClientStreamingService<SotwRequest> for FetchMethod {
    type Response = SotwWire;
    type Future = FetchFuture;

    fn call(&mut self, request: Request<Streaming<SotwRequest>>) -> Self::Future {
        let (peer, access) = conn::peer_of(&request, self.ctx.options.allow_plaintext_secrets);
        let (ctx, type_url) = (self.ctx.clone(), self.type_url.clone());
        Box::pin(async move {
            let limit = ctx.options.max_request_bytes;
            let request = match request.into_inner().message().await {
                Ok(Some(request)) => request,
                Ok(None) => return Err(status::no_request()),
                Err(error) => return Err(status_of_read_error(&error, limit).unwrap_or(error)),
            };
            fetch::fetch(&ctx, type_url, peer, &access, &request)
                .await
                .map(|r| Response::new(r.into()))
        })
    }
}

/// A gRPC service name, for routing.
trait ServiceName: Send + Sync + 'static {
    const NAME: &'static str;
}

macro_rules! service_names {
    ($($kind:ident = $name:literal),* $(,)?) => {
        $(
            struct $kind;
            impl ServiceName for $kind {
                const NAME: &'static str = $name;
            }
        )*
    };
}

service_names! {
    Ads = "envoy.service.discovery.v3.AggregatedDiscoveryService",
    Lds = "envoy.service.listener.v3.ListenerDiscoveryService",
    Rds = "envoy.service.route.v3.RouteDiscoveryService",
    Srds = "envoy.service.route.v3.ScopedRoutesDiscoveryService",
    Vhds = "envoy.service.route.v3.VirtualHostDiscoveryService",
    Cds = "envoy.service.cluster.v3.ClusterDiscoveryService",
    Eds = "envoy.service.endpoint.v3.EndpointDiscoveryService",
    Sds = "envoy.service.secret.v3.SecretDiscoveryService",
    Rtds = "envoy.service.runtime.v3.RuntimeDiscoveryService",
}

struct Named<K> {
    svc: XdsService,
    kind: PhantomData<fn() -> K>,
}

impl<K> Named<K> {
    fn new(svc: XdsService) -> Self {
        Named {
            svc,
            kind: PhantomData,
        }
    }
}

impl<K> Clone for Named<K> {
    fn clone(&self) -> Self {
        Named::new(self.svc.clone())
    }
}

impl<K: ServiceName> NamedService for Named<K> {
    const NAME: &'static str = K::NAME;
}

impl<K> tower_service::Service<http::Request<Body>> for Named<K> {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.svc.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        self.svc.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_per_type_service_name_is_routed() {
        let names = [
            Lds::NAME,
            Rds::NAME,
            Srds::NAME,
            Vhds::NAME,
            Cds::NAME,
            Eds::NAME,
            Sds::NAME,
            Rtds::NAME,
        ];
        for (service, _) in PER_TYPE_SERVICES {
            assert!(names.contains(service), "{service} has no route");
        }
        assert_eq!(Ads::NAME, ADS_SERVICE);
    }

    #[test]
    fn fetch_is_routed_for_every_per_type_service_but_vhds() {
        let (_shutdown, rx) = watch::channel(false);
        let svc = XdsService {
            ctx: Arc::new(ServerContext::new(
                Store::new(),
                ServerOptions::default(),
                rx,
                Metrics::new(),
            )),
        };
        let fetch = |path: &str| svc.route(path);
        assert_eq!(
            fetch("/envoy.service.cluster.v3.ClusterDiscoveryService/FetchClusters"),
            Some(Method::Fetch(crate::types::CLUSTER.into()))
        );
        assert_eq!(
            fetch("/envoy.service.runtime.v3.RuntimeDiscoveryService/FetchRuntime"),
            Some(Method::Fetch(crate::types::RUNTIME.into()))
        );
        assert_eq!(
            fetch("/envoy.service.route.v3.VirtualHostDiscoveryService/FetchVirtualHosts"),
            None
        );
        assert_eq!(
            fetch("/envoy.service.discovery.v3.AggregatedDiscoveryService/FetchAggregated"),
            None
        );
    }
}
