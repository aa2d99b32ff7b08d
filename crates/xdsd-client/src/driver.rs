//! The tokio driver: the machine over one tonic connection, reconnecting with exponential
//! backoff and jitter, TLS and mutual TLS through rustls, events out as a stream.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher as _, Hasher as _};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::constraints::Params;
use crate::machine::{Client, Config, Event, Flavor, Request, SubscribeError, Validator};
use crate::types;

/// The largest response read by default (a big fleet's clusters fit).
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

/// TLS to the server.
#[derive(Debug, Clone, Default)]
pub struct Tls {
    /// PEM CA certificate(s) to verify the server with (else the built-in roots, if any).
    pub ca_pem: Option<Vec<u8>>,
    /// Mutual TLS: the client's PEM certificate chain and private key.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    /// The name to verify the server's certificate against, when not the address's host.
    pub domain: Option<String>,
}

/// Where and how the driver connects.
#[derive(Debug, Clone)]
pub struct Options {
    /// The server: `host:port`, or an `http://` or `https://` URL.
    pub server: String,
    /// More servers of the same content (replicas of one control plane), each as `server`:
    /// when a connection is lost or cannot be made, the next one is tried (after `server`, the
    /// first of these; after the last, `server` again), after the same backoff. The client
    /// resumes on it as on a reconnect (`version_info`, `initial_resource_versions`), so what
    /// it holds is not sent again when the server's versions are the same. Empty by default.
    pub fallback_servers: Vec<String>,
    /// TLS, when set (an `https://` server without it uses the built-in roots).
    pub tls: Option<Tls>,
    /// How long one connection attempt may take.
    pub connect_timeout: Duration,
    /// The first wait before reconnecting; doubled after each failure up to `max_backoff`,
    /// each wait drawn at random between half and all of it (jitter).
    pub initial_backoff: Duration,
    /// The longest wait before reconnecting.
    pub max_backoff: Duration,
    /// The largest response read: a bigger one ends the stream.
    pub max_response_bytes: usize,
    /// Federation (xRFC TP1 authorities, gRFC A47): the servers of each authority, the first
    /// tried first and the others as `fallback_servers`. A name `xdstp://AUTHORITY/...` whose
    /// authority is here is subscribed on a connection to that authority's servers; every other
    /// name (other authorities, names that are not xdstp, the wildcard) on `server`. Empty by
    /// default: one connection. See [`Options::with_authority`].
    pub authorities: std::collections::BTreeMap<String, Vec<String>>,
    /// xRFC TP2 "Client Configuration": the dynamic parameters of each authority, one set per
    /// authority. An authority here has a connection of its own (to its servers in
    /// `authorities`, else to `server` and its fallbacks, beside the default connection), whose
    /// node presents this set as its `dynamic_parameters` for every type (every type
    /// [`types::ALIASES`] names, LEDS's, and every type the node's own map names), in place of the
    /// node's: its names' plain subscriptions are the variants of this set. Every other name
    /// presents the node's set. Empty by default. See [`Options::with_authority_params`].
    pub authority_params: std::collections::BTreeMap<String, Params>,
    /// Which server each client started with these options (or a clone of them) is connected
    /// to now: shared by the clones, read by whoever reports it (a relay's metrics).
    pub connected: ServerConnections,
}

/// How many clients are connected to each server now (a client counts from the moment the
/// server accepts its stream until that connection is lost). Cheap to clone: clones share the
/// counts.
#[derive(Debug, Clone, Default)]
pub struct ServerConnections(Arc<Mutex<BTreeMap<String, u64>>>);

impl ServerConnections {
    /// The clients connected to `server` now.
    pub fn on(&self, server: &str) -> u64 {
        self.lock().get(server).copied().unwrap_or(0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, u64>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts one client on `server` until the returned guard is dropped.
    fn connect(&self, server: &str) -> OnServer {
        *self.lock().entry(server.to_owned()).or_default() += 1;
        OnServer {
            counts: self.clone(),
            server: server.to_owned(),
        }
    }
}

/// One client counted on a server (see [`ServerConnections`]) while it lives.
struct OnServer {
    counts: ServerConnections,
    server: String,
}

impl Drop for OnServer {
    fn drop(&mut self) {
        let mut counts = self.counts.lock();
        if let Some(n) = counts.get_mut(&self.server) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&self.server);
            }
        }
    }
}

impl Options {
    /// Plaintext to `server`, with the default timeouts and bounds.
    pub fn new(server: impl Into<String>) -> Options {
        Options {
            server: server.into(),
            fallback_servers: Vec::new(),
            tls: None,
            connect_timeout: Duration::from_secs(10),
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            authorities: Default::default(),
            authority_params: Default::default(),
            connected: ServerConnections::default(),
        }
    }

    /// These options with `authority`'s names served by `servers` (the first, then the others
    /// in turn as fallbacks): see [`Options::authorities`]. `servers` empty: the authority is
    /// served by `server`, as any other.
    pub fn with_authority<S: Into<String>>(
        mut self,
        authority: impl Into<String>,
        servers: impl IntoIterator<Item = S>,
    ) -> Options {
        let servers: Vec<String> = servers.into_iter().map(Into::into).collect();
        let authority = authority.into();
        if servers.is_empty() {
            self.authorities.remove(&authority);
        } else {
            self.authorities.insert(authority, servers);
        }
        self
    }

    /// These options with `authority`'s names presenting the TP2 dynamic parameters `params`
    /// on a connection of their own: see [`Options::authority_params`].
    pub fn with_authority_params(
        mut self,
        authority: impl Into<String>,
        params: Params,
    ) -> Options {
        self.authority_params.insert(authority.into(), params);
        self
    }

    /// Plaintext to the first of `servers`, then each of the others in turn when a connection
    /// is lost ([`Options::fallback_servers`]); `None` when `servers` is empty.
    pub fn with_servers<S: Into<String>>(servers: impl IntoIterator<Item = S>) -> Option<Options> {
        let mut servers = servers.into_iter().map(Into::into);
        let mut options = Options::new(servers.next()?);
        options.fallback_servers = servers.collect();
        Some(options)
    }

    /// The authority whose connection of its own serves `name`: the authority of an
    /// `xdstp://AUTHORITY/...` name, compared canonically (xRFC TP1: `b%2Eexample` is
    /// `b.example`), when it has servers ([`Options::authorities`]) or parameters
    /// ([`Options::authority_params`]) here; `None` for every other name (other authorities,
    /// names that are not xdstp, the wildcard), which the default connection serves. The one rule of which
    /// connection a name goes to: the driver routes by it, and a relay names its upstream by it.
    pub fn authority_for(&self, name: &str) -> Option<&str> {
        if self.authorities.is_empty() && self.authority_params.is_empty() {
            return None;
        }
        let authority = crate::authority::of(name)?;
        self.authorities
            .get_key_value(authority.as_ref())
            .filter(|(_, servers)| !servers.is_empty())
            .map(|(key, _)| key.as_str())
            .or_else(|| {
                self.authority_params
                    .get_key_value(authority.as_ref())
                    .map(|(key, _)| key.as_str())
            })
    }

    /// The server `name` is subscribed on first: its authority's first server
    /// ([`Options::authority_for`]), or `server`.
    pub fn server_for(&self, name: &str) -> &str {
        self.authority_for(name)
            .and_then(|a| self.authorities.get(a))
            .and_then(|servers| servers.first())
            .map_or(&self.server, String::as_str)
    }

    /// Every server, in the order they are tried: `server`, then the fallbacks.
    pub fn servers(&self) -> impl Iterator<Item = &str> + '_ {
        std::iter::once(self.server.as_str())
            .chain(self.fallback_servers.iter().map(String::as_str))
    }
}

/// Why the driver could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The server is not an address.
    #[error("{0:?} is not a server address: {1}")]
    Address(String, String),
    /// TLS could not be set up.
    #[error("TLS: {0}")]
    Tls(String),
}

mod connections;

type Command = Box<dyn FnOnce(&mut Client) + Send>;

/// The handle of a running driver: changes its subscriptions; dropping it (and the
/// [`Events`]) stops the driver. With [`Options::authorities`] (or
/// [`Options::authority_params`]), one connection (and machine) per such authority besides the
/// default's: each name is subscribed on its authority's ([`Options::authority_for`]),
/// and the events of all of them come out of the one [`Events`].
#[derive(Clone)]
pub struct XdsClient {
    /// Each connection's commands, and which one a name goes to.
    routes: connections::Routes,
}

impl std::fmt::Debug for XdsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdsClient").finish_non_exhaustive()
    }
}

/// The driver's events, as a [`futures_core::Stream`](tokio_stream::Stream); it ends when the
/// driver stops.
#[derive(Debug)]
pub struct Events {
    inner: mpsc::Receiver<Vec<Event>>,
    /// What is left of the last batch taken.
    batch: std::collections::VecDeque<Event>,
}

impl Events {
    /// The next event; `None` once the driver stopped.
    pub async fn next(&mut self) -> Option<Event> {
        std::future::poll_fn(|cx| self.poll_event(cx)).await
    }

    /// The next events that came together — a response's updates, removals and the names it
    /// says do not exist, or a connection's change —, whole: a cache that applies them at once
    /// never holds a response half applied. `None` once the driver stopped.
    pub async fn next_batch(&mut self) -> Option<Vec<Event>> {
        if !self.batch.is_empty() {
            return Some(self.batch.drain(..).collect());
        }
        self.inner.recv().await
    }

    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        loop {
            if let Some(event) = self.batch.pop_front() {
                return Poll::Ready(Some(event));
            }
            match self.inner.poll_recv(cx) {
                Poll::Ready(Some(batch)) => self.batch.extend(batch),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl tokio_stream::Stream for Events {
    type Item = Event;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        self.poll_event(cx)
    }
}

/// Sends what the machine has to tell, in one batch; whether the events' receiver is still
/// there.
async fn flush_events(client: &mut Client, events: &mpsc::Sender<Vec<Event>>) -> bool {
    let batch: Vec<Event> = std::iter::from_fn(|| client.poll_event()).collect();
    batch.is_empty() || events.send(batch).await.is_ok()
}

impl XdsClient {
    /// Starts a driver on the current tokio runtime for a machine set up by `config`, with
    /// `validator` checking each resource received. Subscribe through the handle (before or after
    /// the connection is up: subscriptions are sent on every connection).
    pub fn start(
        options: Options,
        config: Config,
        validator: Option<Validator>,
    ) -> Result<(XdsClient, Events), StartError> {
        // Every connection's endpoints first: an address that is not one fails the start.
        let connections = connections::plan(&options, &config);
        let mut planned = Vec::with_capacity(connections.len());
        for connections::Planned {
            authority,
            options,
            config,
        } in connections
        {
            let endpoints = options
                .servers()
                .map(|server| Ok((server.to_owned(), endpoint(&options, server)?)))
                .collect::<Result<Vec<_>, StartError>>()?;
            planned.push((authority, options, config, endpoints));
        }
        let (event_tx, inner) = mpsc::channel(1024);
        let mut commands = None;
        let mut authorities = std::collections::BTreeMap::new();
        // One validator for every connection's machine.
        let mut validator = validator;
        let shared = match (&validator, planned.len()) {
            (Some(_), 2..) => validator
                .take()
                .map(|v| std::sync::Arc::new(std::sync::Mutex::new(v))),
            _ => None,
        };
        for (authority, options, config, endpoints) in planned {
            let mut client = Client::new(config);
            if let Some(v) = validator.take() {
                client.set_validator(v);
            } else if let Some(shared) = &shared {
                let shared = shared.clone();
                client.set_validator(Box::new(move |r| match shared.lock() {
                    Ok(mut v) => v(r),
                    Err(_) => Err("the validator panicked".to_owned()),
                }));
            }
            let (tx, command_rx) = mpsc::unbounded_channel();
            tokio::spawn(run(
                options,
                endpoints,
                client,
                command_rx,
                event_tx.clone(),
            ));
            match authority {
                Some(authority) => {
                    authorities.insert(authority, tx);
                }
                None => commands = Some(tx),
            }
        }
        let commands = commands.expect("the default connection is planned first");
        Ok((
            XdsClient {
                routes: connections::Routes::new(options, commands, authorities),
            },
            Events {
                inner,
                batch: std::collections::VecDeque::new(),
            },
        ))
    }

    fn send(&self, command: Command) {
        // A stopped driver has nothing to change.
        let _ = self.routes.default().send(command);
    }

    /// The connection that serves `name`: its authority's, or the default.
    fn route(&self, name: &str) -> &mpsc::UnboundedSender<Command> {
        self.routes.route(name)
    }

    /// Subscribes to `names` of `type_url` (`*`: the wildcard). Names past the client's limits
    /// are refused with an [`Event::Rejected`] of version `""`. Each name goes to its
    /// authority's connection ([`Options::authorities`]).
    pub fn subscribe(&self, type_url: &str, names: Vec<String>) {
        let mut by_route: Vec<(&mpsc::UnboundedSender<Command>, Vec<String>)> = Vec::new();
        for name in names {
            let route = self.route(&name);
            match by_route.iter_mut().find(|(r, _)| r.same_channel(route)) {
                Some((_, list)) => list.push(name),
                None => by_route.push((route, vec![name])),
            }
        }
        for (route, names) in by_route {
            let type_url = type_url.to_owned();
            // A stopped driver has nothing to change.
            let _ = route.send(Box::new(move |client: &mut Client| {
                let result = client.subscribe(&type_url, &names);
                refused(client, &type_url, result);
            }));
        }
    }

    /// Subscribes to every resource of `type_url` the legacy way (naming nothing).
    pub fn subscribe_legacy_wildcard(&self, type_url: &str) {
        let type_url = type_url.to_owned();
        self.send(Box::new(move |client: &mut Client| {
            let result = client.subscribe_legacy_wildcard(&type_url);
            refused(client, &type_url, result);
        }));
    }

    /// Subscribes to `name` with dynamic parameters (a TP2 resource locator).
    pub fn subscribe_locator(&self, type_url: &str, name: &str, params: Params) {
        let route = self.route(name);
        let (type_url, name) = (type_url.to_owned(), name.to_owned());
        let _ = route.send(Box::new(move |client: &mut Client| {
            let result = client.subscribe_locator(&type_url, &name, params);
            refused(client, &type_url, result);
        }));
    }

    /// Ends the subscription to `name` (`*`: the wildcard) of `type_url`.
    pub fn unsubscribe(&self, type_url: &str, name: &str) {
        let route = self.route(name);
        let (type_url, name) = (type_url.to_owned(), name.to_owned());
        let _ = route.send(Box::new(move |client: &mut Client| {
            client.unsubscribe(&type_url, &name)
        }));
    }

    /// Ends the subscription to `name` with dynamic parameters `params` (a TP2 resource
    /// locator, as [`XdsClient::subscribe_locator`] made it); the other locators and the plain
    /// name of `name` stay subscribed.
    pub fn unsubscribe_locator(&self, type_url: &str, name: &str, params: Params) {
        let route = self.route(name);
        let (type_url, name) = (type_url.to_owned(), name.to_owned());
        let _ = route.send(Box::new(move |client: &mut Client| {
            client.unsubscribe_locator(&type_url, &name, params)
        }));
    }
}

fn refused(client: &mut Client, type_url: &str, result: Result<(), SubscribeError>) {
    if let Err(e) = result {
        client.push_event(Event::Rejected {
            type_url: type_url.to_owned(),
            version: String::new(),
            reason: e.to_string(),
        });
    }
}

fn endpoint(options: &Options, server: &str) -> Result<Endpoint, StartError> {
    let tls = options.tls.as_ref();
    let url = if server.contains("://") {
        server.to_owned()
    } else if tls.is_some() {
        format!("https://{server}")
    } else {
        format!("http://{server}")
    };
    let mut endpoint = Endpoint::from_shared(url.clone())
        .map_err(|e| StartError::Address(server.to_owned(), e.to_string()))?
        .connect_timeout(options.connect_timeout)
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(20));
    if tls.is_some() || url.starts_with("https://") {
        let mut config = ClientTlsConfig::new().with_enabled_roots();
        if let Some(tls) = tls {
            if let Some(ca) = &tls.ca_pem {
                config = config.ca_certificate(Certificate::from_pem(ca));
            }
            if let Some((cert, key)) = &tls.identity {
                config = config.identity(Identity::from_pem(cert, key));
            }
            if let Some(domain) = &tls.domain {
                config = config.domain_name(domain.clone());
            }
        }
        endpoint = endpoint
            .tls_config(config)
            .map_err(|e| StartError::Tls(e.to_string()))?;
    }
    Ok(endpoint)
}

/// A wait drawn at random between half and all of `backoff`.
fn jittered(backoff: Duration) -> Duration {
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let half = backoff / 2;
    half + half.mul_f64((random % 10_000) as f64 / 10_000.0)
}

/// What a stream's reader hands the loop.
enum Incoming {
    /// The server accepted the stream (its response headers).
    Accepted,
    Sotw(DiscoveryResponse),
    Delta(DeltaDiscoveryResponse),
    /// The stream ended, and why.
    Ended(String),
}

enum Outbound {
    Sotw(mpsc::UnboundedSender<DiscoveryRequest>),
    Delta(mpsc::UnboundedSender<DeltaDiscoveryRequest>),
}

/// Why one connection's loop returned.
enum Exit {
    /// The handle and the events were dropped: stop.
    Stop,
    /// The connection ended; `healthy` if a response was received on it.
    Lost { reason: String, healthy: bool },
}

async fn run(
    options: Options,
    endpoints: Vec<(String, Endpoint)>,
    mut client: Client,
    mut commands: mpsc::UnboundedReceiver<Command>,
    events: mpsc::Sender<Vec<Event>>,
) {
    let mut backoff = options.initial_backoff;
    // The server tried next: the first, then each in turn after a loss.
    let mut next = 0;
    loop {
        let Some((server, endpoint)) = endpoints.get(next) else {
            return;
        };
        next = (next + 1) % endpoints.len();
        let exit = match endpoint.connect().await {
            Ok(channel) => {
                client.stream_up();
                let exit = connection(
                    &options,
                    server,
                    channel,
                    &mut client,
                    &mut commands,
                    &events,
                )
                .await;
                if let Exit::Lost { reason, .. } = &exit {
                    client.disconnected(reason.clone());
                }
                exit
            }
            Err(e) => {
                let reason = format!("cannot connect to {server}: {}", chain(&e));
                if events
                    .send(vec![Event::Disconnected {
                        reason: reason.clone(),
                    }])
                    .await
                    .is_err()
                {
                    return;
                }
                Exit::Lost {
                    reason,
                    healthy: false,
                }
            }
        };
        match exit {
            Exit::Stop => return,
            Exit::Lost { healthy, .. } => {
                if healthy {
                    backoff = options.initial_backoff;
                }
                // Flush the machine's events (Disconnected) before waiting.
                if !flush_events(&mut client, &events).await {
                    return;
                }
                if !wait_to_reconnect(jittered(backoff), &mut client, &mut commands, &events).await
                {
                    return;
                }
                backoff = (backoff * 2).min(options.max_backoff);
            }
        }
    }
}

/// Waits `wait` before the next connection attempt, taking in the subscriptions changed
/// meanwhile. Whether to go on: not once the handle and the events are both dropped.
async fn wait_to_reconnect(
    wait: Duration,
    client: &mut Client,
    commands: &mut mpsc::UnboundedReceiver<Command>,
    events: &mpsc::Sender<Vec<Event>>,
) -> bool {
    let wait = tokio::time::sleep(wait);
    tokio::pin!(wait);
    // A closed channel of commands is ready at once, every time: once the handle is gone it
    // is not polled again (polling it in a loop spun until the wait's end).
    let mut commands_open = true;
    loop {
        tokio::select! {
            _ = &mut wait => return true,
            command = commands.recv(), if commands_open => match command {
                Some(command) => command(client),
                None => commands_open = false,
            },
            _ = events.closed() => return false,
        }
    }
}

/// An error and its causes, `: `-separated, each said once: a cause whose text its error
/// already ends with (hyper's `tcp connect error` under tonic's, an I/O error repeated) is
/// left out.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        let parts: Vec<&str> = text.split(": ").collect();
        // The most leading parts of the cause that `out` already ends with.
        let said = (1..=parts.len())
            .rev()
            .find(|&k| {
                let head = parts[..k].join(": ");
                out == head || out.ends_with(&format!(": {head}"))
            })
            .unwrap_or(0);
        for part in &parts[said..] {
            out.push_str(": ");
            out.push_str(part);
        }
        source = s.source();
    }
    out
}

async fn connection(
    options: &Options,
    server: &str,
    channel: Channel,
    client: &mut Client,
    commands: &mut mpsc::UnboundedReceiver<Command>,
    events: &mpsc::Sender<Vec<Event>>,
) -> Exit {
    let (in_tx, mut in_rx) = mpsc::channel::<Incoming>(16);
    let mut readers = JoinSet::new();
    let mut streams: HashMap<String, Outbound> = HashMap::new();
    let mut healthy = false;
    // Counted on `server` once it accepts the stream, until this connection's end.
    let mut accepted: Option<OnServer> = None;
    let mut commands_open = true;
    loop {
        while let Some(request) = client.poll_request(std::time::Instant::now()) {
            let key = if client.config().ads {
                String::new()
            } else {
                request.type_url().to_owned()
            };
            if !streams.contains_key(&key) {
                match open(
                    options,
                    &channel,
                    client,
                    &key,
                    &request,
                    &mut readers,
                    &in_tx,
                ) {
                    Ok(out) => {
                        streams.insert(key.clone(), out);
                    }
                    Err(reason) => {
                        return Exit::Lost { reason, healthy };
                    }
                }
            }
            let sent = match (streams.get(&key), request) {
                (Some(Outbound::Sotw(tx)), Request::Sotw(r)) => tx.send(r).is_ok(),
                (Some(Outbound::Delta(tx)), Request::Delta(r)) => tx.send(r).is_ok(),
                _ => false,
            };
            if !sent {
                return Exit::Lost {
                    reason: "the stream ended".to_owned(),
                    healthy,
                };
            }
        }
        if !flush_events(client, events).await {
            return Exit::Stop;
        }
        let deadline = client.poll_timeout().map(Instant::from_std);
        let timer = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            incoming = in_rx.recv() => match incoming {
                Some(Incoming::Accepted) => {
                    if accepted.is_none() {
                        accepted = Some(options.connected.connect(server));
                        client.push_event(Event::Connected);
                    }
                }
                Some(Incoming::Sotw(r)) => {
                    healthy = true;
                    client.handle_sotw(std::time::Instant::now(), r);
                }
                Some(Incoming::Delta(r)) => {
                    healthy = true;
                    client.handle_delta(std::time::Instant::now(), r);
                }
                Some(Incoming::Ended(reason)) => return Exit::Lost { reason, healthy },
                None => return Exit::Lost { reason: "the streams ended".to_owned(), healthy },
            },
            command = commands.recv(), if commands_open => match command {
                Some(command) => {
                    command(client);
                    // The others already sent, before anything is sent: subscriptions made
                    // together go out in one request (and are answered in one response).
                    while let Ok(command) = commands.try_recv() {
                        command(client);
                    }
                }
                None => commands_open = false,
            },
            _ = events.closed() => return Exit::Stop,
            _ = timer => client.handle_timeout(std::time::Instant::now()),
        }
    }
}

/// Opens the stream `key` ("" for ADS, else a type URL) for `first`'s flavor: a reader task
/// makes the call and forwards each response.
fn open(
    options: &Options,
    channel: &Channel,
    client: &Client,
    key: &str,
    first: &Request,
    readers: &mut JoinSet<()>,
    in_tx: &mpsc::Sender<Incoming>,
) -> Result<Outbound, String> {
    let delta = client.config().flavor == Flavor::Delta;
    let (service, method) = if key.is_empty() {
        let method = if delta {
            "DeltaAggregatedResources"
        } else {
            "StreamAggregatedResources"
        };
        (types::ADS_SERVICE, method)
    } else {
        let Some((service, sotw, delta_method)) = types::per_type_service(key) else {
            return Err(format!(
                "{key} has no per-type service: subscribe to it over ADS"
            ));
        };
        let method = if delta {
            delta_method
        } else {
            sotw.ok_or_else(|| format!("{service} has no SotW method: use delta"))?
        };
        (service, method)
    };
    let path = http::uri::PathAndQuery::from_maybe_shared(format!("/{service}/{method}"))
        .map_err(|e| format!("gRPC path of {service}: {e}"))?;
    let max = options.max_response_bytes;
    Ok(match first {
        Request::Sotw(_) => {
            let (tx, rx) = mpsc::unbounded_channel();
            readers.spawn(read(
                channel.clone(),
                path,
                max,
                rx,
                in_tx.clone(),
                Incoming::Sotw,
            ));
            Outbound::Sotw(tx)
        }
        Request::Delta(_) => {
            let (tx, rx) = mpsc::unbounded_channel();
            readers.spawn(read(
                channel.clone(),
                path,
                max,
                rx,
                in_tx.clone(),
                Incoming::Delta,
            ));
            Outbound::Delta(tx)
        }
    })
}

/// One stream: the call, then each response to the loop, then why it ended.
async fn read<Req, Resp>(
    channel: Channel,
    path: http::uri::PathAndQuery,
    max: usize,
    requests: mpsc::UnboundedReceiver<Req>,
    incoming: mpsc::Sender<Incoming>,
    wrap: fn(Resp) -> Incoming,
) where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    let reason: Result<(), String> = async {
        let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(max);
        grpc.ready()
            .await
            .map_err(|e| format!("the connection is not ready: {e}"))?;
        let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
        let response = grpc
            .streaming(
                tonic::Request::new(UnboundedReceiverStream::new(requests)),
                path,
                codec,
            )
            .await
            .map_err(|s| status_text(&s))?;
        if incoming.send(Incoming::Accepted).await.is_err() {
            return Err(String::new());
        }
        let mut inbound = response.into_inner();
        loop {
            match inbound.message().await {
                Ok(Some(message)) => {
                    if incoming.send(wrap(message)).await.is_err() {
                        return Err(String::new());
                    }
                }
                Ok(None) => return Err("the server ended the stream".to_owned()),
                Err(s) => return Err(status_text(&s)),
            }
        }
    }
    .await;
    if let Err(reason) = reason {
        let _ = incoming.send(Incoming::Ended(reason)).await;
    }
}

fn status_text(status: &tonic::Status) -> String {
    if status.message().is_empty() {
        format!("the stream ended with {:?}", status.code())
    } else {
        format!(
            "the stream ended with {:?}: {}",
            status.code(),
            status.message()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnect_waits_between_half_and_all_of_the_backoff() {
        let backoff = Duration::from_secs(8);
        let waits: Vec<Duration> = (0..64).map(|_| jittered(backoff)).collect();
        assert!(waits.iter().all(|w| *w >= backoff / 2 && *w <= backoff));
        assert!(
            waits.iter().any(|w| *w != waits[0]),
            "jitter: not every wait the same"
        );
    }

    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|l| l as _)
        }
    }

    fn layers(texts: &[&'static str]) -> Layer {
        texts
            .iter()
            .rev()
            .fold(None, |below, text| Some(Layer(text, below.map(Box::new))))
            .expect("a layer")
    }

    #[test]
    fn an_error_chain_says_each_cause_once() {
        let repeated = layers(&[
            "transport error",
            "tcp connect error",
            "tcp connect error: Connection refused",
            "Connection refused",
        ]);
        assert_eq!(
            chain(&repeated),
            "transport error: tcp connect error: Connection refused"
        );
        let distinct = layers(&["a", "b: c", "d"]);
        assert_eq!(chain(&distinct), "a: b: c: d");
    }

    /// The handle dropped while the events are read: the wait before reconnecting sleeps (it
    /// is polled when its timer fires, not in a loop on the closed channel of commands).
    #[tokio::test]
    async fn wait_to_reconnect_sleeps_once_the_handle_is_dropped() {
        use envoy_types::pb::envoy::config::core::v3::Node;
        let mut client = Client::new(Config::new(Node::default()));
        let (handle, mut commands) = mpsc::unbounded_channel::<Command>();
        drop(handle);
        let (events, _kept) = mpsc::channel(1);
        let wait = wait_to_reconnect(
            Duration::from_millis(50),
            &mut client,
            &mut commands,
            &events,
        );
        tokio::pin!(wait);
        let mut polls = 0;
        let outcome = std::future::poll_fn(|cx| {
            polls += 1;
            if polls > 100 {
                // Spinning: a sleeping wait is polled when its timer fires.
                return Poll::Ready(None);
            }
            std::future::Future::poll(wait.as_mut(), cx).map(Some)
        })
        .await;
        assert_eq!(outcome, Some(true), "the wait spun: polled {polls} times");
        assert!(polls <= 3, "polled {polls} times");
    }
}
