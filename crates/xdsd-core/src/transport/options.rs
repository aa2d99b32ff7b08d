//! The options of an xDS server ([`ServerOptions`]) and their defaults and bounds. Their own
//! module so that the server (`grpc`) and what it drives (`context`, `stream`, `admin`) read them
//! without depending on each other.

use std::time::Duration;

use crate::protocol::session::SessionOptions;

/// The largest request a stream accepts by default: 32 MiB.
///
/// Requests are small except for two that list a client's whole subscription: a SotW request
/// repeats every subscribed name (an Envoy with 100,000 EDS clusters sends 100,000 names on each
/// EDS ACK), and a delta client reconnecting sends `initial_resource_versions`, a name and a
/// version for every resource it holds. With names of up to ~100 bytes, 100,000 names take about
/// 10 MB and 100,000 initial versions about 12 MB (17 MB with 64-character versions from another
/// server): 32 MiB holds either with room for longer names. gRPC's usual 4 MiB would end such a
/// client's stream on every reconnect.
///
/// A request is held whole while it is decoded, so a client can make xdsd hold about three times
/// this (the bytes, and the decoded names) for as long as one request takes.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 32 * 1024 * 1024;

/// The smallest request size limit [`ServerOptions::max_request_bytes`] takes: an Envoy's first
/// request carries its node (metadata, extensions, features), several KiB.
pub const MIN_MAX_REQUEST_BYTES: usize = 64 * 1024;

/// The smallest response size limit [`ServerOptions::max_response_bytes`] takes.
pub const MIN_MAX_RESPONSE_BYTES: usize = 16 * 1024;

/// Options of an [`XdsServer`](super::grpc::XdsServer): made with [`ServerOptions::default`] and its setters, which
/// keep each value within its bounds, and given to [`XdsServerBuilder::options`](super::grpc::XdsServerBuilder::options).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerOptions {
    /// The largest request (one gRPC message) a stream accepts. A larger one ends its stream
    /// with RESOURCE_EXHAUSTED; see [`DEFAULT_MAX_REQUEST_BYTES`].
    pub(crate) max_request_bytes: usize,
    /// How each stream's session serves its client (response size, ordering).
    pub(crate) session: SessionOptions,
    /// REST-JSON polling: how long a poll whose version is current is held for a change before
    /// it is answered `304 Not Modified` (zero: answered at once). See [`DEFAULT_REST_HOLD`].
    pub(crate) rest_hold: Duration,
    /// REST-JSON polling: how many polls are held at once; the others are answered at once.
    pub(crate) max_held_polls: usize,
    /// Connections [`XdsServer::serve`](super::grpc::XdsServer::serve) keeps open at once; a connection over it is closed at
    /// once (and logged). See [`DEFAULT_MAX_CONNECTIONS`].
    pub(crate) max_connections: usize,
    /// Streams (and calls) one HTTP/2 connection may have open at once; see
    /// [`DEFAULT_MAX_STREAMS_PER_CONNECTION`].
    pub(crate) max_streams_per_connection: u32,
    /// How long a new connection has to send the start of its first request (after its TLS
    /// handshake, if any); see [`DEFAULT_PREFACE_TIMEOUT`] and [`PREFACE_BYTES`](super::tls::PREFACE_BYTES).
    pub(crate) preface_timeout: Duration,
    /// Serve secrets (SDS) over plaintext connections from other hosts. Off by default: such a
    /// connection's requests for secrets fail with PERMISSION_DENIED (TLS connections, and
    /// plaintext ones from a loopback address, are served).
    pub(crate) allow_plaintext_secrets: bool,
    /// The bytes one connection's unfinished requests may hold at once (messages being
    /// received, all its streams together); a stream whose message would go over it ends with
    /// RESOURCE_EXHAUSTED. See [`DEFAULT_MAX_BUFFERED_REQUEST_BYTES`].
    pub(crate) max_buffered_request_bytes: usize,
    /// The same for all connections together; see [`DEFAULT_MAX_BUFFERED_REQUEST_BYTES_TOTAL`].
    pub(crate) max_buffered_request_bytes_total: usize,
    /// Resource names the streams of one connection may subscribe to together; a request that
    /// goes over it ends its stream with RESOURCE_EXHAUSTED. See [`DEFAULT_MAX_NAMES_PER_CONNECTION`].
    pub(crate) max_names_per_connection: usize,
    /// The same for all streams of the server; see [`DEFAULT_MAX_NAMES_TOTAL`].
    pub(crate) max_names_total: usize,
    /// How long [`XdsServer::serve`](super::grpc::XdsServer::serve) keeps a connection (gRPC's MAX_CONNECTION_AGE); `None`
    /// (the default): as long as its client does. Each connection's age is this ± 10 %
    /// (random), so that connections opened together do not all go together. Once it is
    /// reached, the connection is told to go away (HTTP/2 GOAWAY: no new streams, the open ones
    /// go on); [`ServerOptions::max_connection_age_grace`] later, its streams still open end
    /// with UNAVAILABLE and the connection is closed, so that its clients reconnect, possibly to
    /// another replica. xDS streams last as long as their client, so in practice the grace is
    /// what ends them.
    pub(crate) max_connection_age: Option<Duration>,
    /// How long a connection past its [`ServerOptions::max_connection_age`] keeps its open
    /// streams; see [`DEFAULT_MAX_CONNECTION_AGE_GRACE`].
    pub(crate) max_connection_age_grace: Duration,
}

/// How long a connection past its max age keeps its open streams by default: time for a
/// response on its way to arrive and be acknowledged.
pub const DEFAULT_MAX_CONNECTION_AGE_GRACE: Duration = Duration::from_secs(10);

/// The jitter of [`ServerOptions::max_connection_age`]: each connection's age is drawn within
/// this fraction either side of it (gRPC's 10 %).
pub(crate) const MAX_CONNECTION_AGE_JITTER: f64 = 0.1;

/// Names one connection's streams may subscribe to by default: a client that multiplexes many
/// streams on one connection (a caching proxy; xds-bench's S2 puts 100 streams of 10,000 names
/// each on a connection) with headroom, 20 times the per-stream limit; about 100 bytes each.
pub const DEFAULT_MAX_NAMES_PER_CONNECTION: usize =
    20 * crate::protocol::session::DEFAULT_MAX_NAMES;

/// Names all streams may subscribe to by default: 10,000 proxies subscribed to 5,000 names each.
pub const DEFAULT_MAX_NAMES_TOTAL: usize = 50_000_000;

/// Unfinished request bytes one connection may hold by default: twice the largest request, so
/// that an Envoy reconnecting with a large subscription on two streams of one connection is
/// taken, while 100 streams that each send most of a large message and stop are not (they held
/// 433 MiB before this limit).
pub const DEFAULT_MAX_BUFFERED_REQUEST_BYTES: usize = 2 * DEFAULT_MAX_REQUEST_BYTES;

/// Unfinished request bytes all connections may hold by default. Requests are decoded as soon
/// as they are whole, so in a healthy fleet this is far above what is in flight: a 10,000-proxy
/// fleet reconnecting at once sends a few KiB to a few MiB each, over seconds.
pub const DEFAULT_MAX_BUFFERED_REQUEST_BYTES_TOTAL: usize = 512 * 1024 * 1024;

/// How long a new connection has to start its first request by default: far more than any client
/// on a working network needs, and short enough that connections opened and left silent go away
/// (before the preface, HTTP/2 keepalive cannot tell a dead peer).
pub const DEFAULT_PREFACE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections open at once by default: five per proxy of a 10,000-proxy fleet. Each costs a file
/// descriptor and its HTTP/2 state (tens of KiB).
pub const DEFAULT_MAX_CONNECTIONS: usize = 50_000;

/// Streams per HTTP/2 connection by default. An Envoy opens one (ADS) or one per type; a caching
/// proxy in front of many clients opens more. gRPC's HTTP/2 has no limit of its own.
pub const DEFAULT_MAX_STREAMS_PER_CONNECTION: u32 = 1_000;

/// Streams a client may reset before they are even served, and streams the server may reset for
/// a client's errors, per connection, before the connection is closed (HTTP/2 "rapid reset"
/// floods: without them one connection made 20,000 such streams).
pub(crate) const MAX_PENDING_RESETS: usize = 100;
pub(crate) const MAX_LOCAL_ERROR_RESETS: usize = 1_024;

/// How long a REST poll is held by default: under the 1 s `request_timeout` Envoy gives a REST
/// config source by default, so that a default Envoy never times a held poll out. Raise it with
/// Envoy's `request_timeout` for longer polls.
pub const DEFAULT_REST_HOLD: Duration = Duration::from_millis(800);

/// How many REST polls are held at once by default.
pub const DEFAULT_MAX_HELD_POLLS: usize = 10_000;

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            session: SessionOptions::default(),
            rest_hold: DEFAULT_REST_HOLD,
            max_held_polls: DEFAULT_MAX_HELD_POLLS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_streams_per_connection: DEFAULT_MAX_STREAMS_PER_CONNECTION,
            preface_timeout: DEFAULT_PREFACE_TIMEOUT,
            allow_plaintext_secrets: false,
            max_buffered_request_bytes: DEFAULT_MAX_BUFFERED_REQUEST_BYTES,
            max_buffered_request_bytes_total: DEFAULT_MAX_BUFFERED_REQUEST_BYTES_TOTAL,
            max_names_per_connection: DEFAULT_MAX_NAMES_PER_CONNECTION,
            max_names_total: DEFAULT_MAX_NAMES_TOTAL,
            max_connection_age: None,
            max_connection_age_grace: DEFAULT_MAX_CONNECTION_AGE_GRACE,
        }
    }
}

impl ServerOptions {
    /// The largest request (one gRPC message) a stream accepts. A larger one ends its stream with
    /// RESOURCE_EXHAUSTED; see [`DEFAULT_MAX_REQUEST_BYTES`]. At least [`MIN_MAX_REQUEST_BYTES`]: a
    /// smaller value is raised to it.
    pub fn max_request_bytes(mut self, bytes: usize) -> Self {
        self.max_request_bytes = bytes.max(MIN_MAX_REQUEST_BYTES);
        self
    }

    /// Sets [`SessionOptions::max_response_bytes`] (at least [`MIN_MAX_RESPONSE_BYTES`]).
    pub fn max_response_bytes(mut self, bytes: usize) -> Self {
        self.session.max_response_bytes = bytes.max(MIN_MAX_RESPONSE_BYTES);
        self
    }

    /// Sets [`SessionOptions::max_names`]: the resource names one stream may subscribe to.
    pub fn max_names_per_stream(mut self, names: usize) -> Self {
        self.session.max_names = names;
        self
    }

    /// Sets `per_connection`, the bytes one connection's unfinished requests may hold at once (messages
    /// being received, all its streams together); a stream whose message would go over it ends with
    /// RESOURCE_EXHAUSTED. See [`DEFAULT_MAX_BUFFERED_REQUEST_BYTES`]. And `total`: the same for
    /// all connections together; see [`DEFAULT_MAX_BUFFERED_REQUEST_BYTES_TOTAL`].
    pub fn max_buffered_request_bytes(mut self, per_connection: usize, total: usize) -> Self {
        self.max_buffered_request_bytes = per_connection;
        self.max_buffered_request_bytes_total = total;
        self
    }

    /// Sets `per_connection`, the resource names the streams of one connection may subscribe to
    /// together; a request that goes over it ends its stream with RESOURCE_EXHAUSTED. See
    /// [`DEFAULT_MAX_NAMES_PER_CONNECTION`]. And `total`: the same for all streams of the server;
    /// see [`DEFAULT_MAX_NAMES_TOTAL`].
    pub fn max_names(mut self, per_connection: usize, total: usize) -> Self {
        self.max_names_per_connection = per_connection;
        self.max_names_total = total;
        self
    }

    /// Serve secrets (SDS) over plaintext connections from other hosts. Off by default: such a
    /// connection's requests for secrets fail with PERMISSION_DENIED (TLS connections, and
    /// plaintext ones from a loopback address, are served).
    pub fn allow_plaintext_secrets(mut self, allow: bool) -> Self {
        self.allow_plaintext_secrets = allow;
        self
    }

    /// How long a new connection has to send the start of its first request (after its TLS
    /// handshake, if any); see [`DEFAULT_PREFACE_TIMEOUT`] and
    /// [`PREFACE_BYTES`](crate::defaults::PREFACE_BYTES).
    pub fn preface_timeout(mut self, timeout: Duration) -> Self {
        self.preface_timeout = timeout;
        self
    }

    /// Connections [`XdsServer::serve`](super::grpc::XdsServer::serve) keeps open at once; a
    /// connection over it is closed at once (and logged). See [`DEFAULT_MAX_CONNECTIONS`].
    pub fn max_connections(mut self, connections: usize) -> Self {
        self.max_connections = connections;
        self
    }

    /// Streams (and calls) one HTTP/2 connection may have open at once; see
    /// [`DEFAULT_MAX_STREAMS_PER_CONNECTION`]. At least 1.
    pub fn max_streams_per_connection(mut self, streams: u32) -> Self {
        self.max_streams_per_connection = streams.max(1);
        self
    }

    /// Sets `age` (`None` or zero: off) and `grace`. How long
    /// [`XdsServer::serve`](super::grpc::XdsServer::serve) keeps a connection (gRPC's
    /// MAX_CONNECTION_AGE); `None` (the default): as long as its client does. Each connection's age
    /// is this ± 10 % (random), so that connections opened together do not all go together. Once it
    /// is reached, the connection is told to go away (HTTP/2 GOAWAY: no new streams, the open ones
    /// go on); the grace later, its streams still open end with UNAVAILABLE and the connection is
    /// closed, so that its clients reconnect, possibly to another replica. xDS streams last as long
    /// as their client, so in practice the grace is what ends them. The grace: how long a
    /// connection past its age keeps its open streams; see [`DEFAULT_MAX_CONNECTION_AGE_GRACE`].
    pub fn max_connection_age(mut self, age: Option<Duration>, grace: Duration) -> Self {
        self.max_connection_age = age.filter(|age| !age.is_zero());
        self.max_connection_age_grace = grace;
        self
    }

    /// REST-JSON polling: how long a poll whose version is current is held for a change before it
    /// is answered `304 Not Modified` (zero: answered at once). See [`DEFAULT_REST_HOLD`].
    pub fn rest_hold(mut self, hold: Duration) -> Self {
        self.rest_hold = hold;
        self
    }

    /// REST-JSON polling: how many polls are held at once; the others are answered at once.
    pub fn max_held_polls(mut self, polls: usize) -> Self {
        self.max_held_polls = polls;
        self
    }

    /// Turns make-before-break ordering on aggregated streams on (the default) or off.
    pub fn make_before_break(mut self, on: bool) -> Self {
        self.session.make_before_break = on;
        self
    }

    /// Sets [`SessionOptions::ack_wait`]: how long a type's next response on a stream waits
    /// for the client's ACK or NACK of the last one (zero: no wait).
    pub fn ack_wait(mut self, wait: Duration) -> Self {
        self.session.ack_wait = wait;
        self
    }

    /// Sets [`SessionOptions::authority_params`]: the TP2 parameter set each authority's plain
    /// xdstp names are matched with, in place of the client's node's (a relay's
    /// `--param-for`).
    pub fn authority_params(
        mut self,
        params: std::collections::BTreeMap<String, crate::params::ParamSet>,
    ) -> Self {
        self.session.authority_params = std::sync::Arc::new(params);
        self
    }
}

/// How long [`XdsServer::serve`](super::grpc::XdsServer::serve) lets connections end on their own after its shutdown signal,
/// before it closes them; also how long a stream ended by [`XdsServer::end_streams`](super::grpc::XdsServer::end_streams) waits for
/// its client to take the final status. Streams end as soon as the signal comes, so a client
/// that reads takes its UNAVAILABLE well within this; only a client that stopped reading (or a
/// peer gone without a word) is cut off.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);
