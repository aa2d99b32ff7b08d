//! `xdsd`: the xDS management server binary. CLI, logs, and the wiring of a directory source to
//! the store and the gRPC server.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tracing::{error, info, warn};
use tracing_subscriber::EnvFilter;
use xdsd_core::protocol::session::{DEFAULT_MAX_NAMES, DEFAULT_MAX_RESPONSE_BYTES};
use xdsd_core::rollout::{Cohort, GateConfig, Rollout, Selector};
use xdsd_core::source::{ChangeSet, Feed, Rejection, Source, SourceEvent};
use xdsd_core::store::{ReferenceMode, ReferencePolicy, Store};
use xdsd_core::transport::grpc::{
    ServerOptions, XdsServer, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_HELD_POLLS,
    DEFAULT_MAX_NAMES_PER_CONNECTION, DEFAULT_MAX_NAMES_TOTAL, DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_MAX_STREAMS_PER_CONNECTION, DEFAULT_REST_HOLD, MIN_MAX_REQUEST_BYTES,
    MIN_MAX_RESPONSE_BYTES,
};
use xdsd_core::transport::metrics::Metrics;
use xdsd_etcd::{EtcdOptions, EtcdSource};
use xdsd_source::{Descriptors, DirectorySource, FileFormat};

use files::{FileUpdates, FileWriter};

mod etcd_args;
mod files;
mod load;
mod memory;
mod offline;
mod push;
mod relay;

mod admin;
#[cfg(test)]
mod readme_flags;
mod rest_json;
mod status;
mod tls_args;

/// An xDS management server for Envoy and proxyless gRPC clients.
///
/// xdsd serves listeners, routes, clusters, endpoints, secrets, runtime layers and any other
/// Envoy resource over the xDS gRPC protocol (ADS and the per-type services), from a directory
/// of YAML/JSON files that it watches for changes. `xdsd check` validates such a directory
/// without serving it; `xdsd render` writes it as the DiscoveryResponse files that Envoy's
/// filesystem subscriptions (path_config_source) read, and `xdsd serve --write-files` keeps such
/// files up to date while it serves. `xdsd status` shows which client has which version and who
/// NACKed what (from CSDS); the admin address serves the same as a status page.
#[derive(Parser, Debug)]
#[command(name = "xdsd", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve the resources of a directory (or of an etcd prefix) over xDS gRPC, and follow
    /// their changes.
    ///
    /// Every *.yaml, *.yml and *.json file under DIR (recursively) is read. Each resource is a
    /// mapping with an "@type" type URL followed by the message in Envoy's proto3 JSON/YAML
    /// form, exactly as Envoy's docs write them; a file may hold several (YAML documents
    /// separated by ---, a list, or a "resources:" list). ClusterLoadAssignments are named by
    /// cluster_name, everything else by name.
    ///
    /// A change to the directory is applied as a whole new state, atomically. A change with any
    /// error (bad YAML, unknown @type or field, duplicate name, and by default a reference to a
    /// resource that does not exist: see --references) is rejected whole, with an error naming
    /// the file, and the previous state keeps being served; so is a change that leaves no
    /// resources at all where some were served (a directory being deleted or replaced), unless
    /// --allow-empty. A bad directory at start-up is fatal. Each change is one log line: applied
    /// (INFO, with what changed) or rejected (ERROR, with every error).
    ///
    /// Envoy connects with an ADS or per-type gRPC config source pointing at --listen; see
    /// examples/basic for a complete setup. With --write-files, xdsd also writes the resources
    /// as DiscoveryResponse files for Envoy's path_config_source, at start and after each
    /// change (see `xdsd render --help` and docs/files.md).
    ///
    /// The --listen address also serves CSDS (ClientStatusDiscoveryService: each client's
    /// ACKed version per type, or its NACK with the error and the file of the rejected resource)
    /// and gRPC health; --admin-listen serves /healthz, /readyz, /clients, /config (what a node
    /// would be served) and /metrics. See
    /// docs/operating.md.
    ///
    /// With --tls-cert and --tls-key, the port serves TLS; with --client-ca too, mutual TLS,
    /// each client's node bound to its certificate's identity (docs/tls.md). Plaintext on an
    /// address other than loopback is logged as a warning at start.
    ///
    /// With --etcd-endpoints and --etcd-prefix instead of --resources, the resources are the keys
    /// under the prefix in etcd, each key holding exactly what a file holds (errors name the
    /// key), so that several xdsd replicas serve the same state (docs/etcd.md; write the keys
    /// with `xdsd push`). The changes of one etcd transaction are applied as one change; a key
    /// that does not parse is rejected by name and the last good state kept until it is fixed
    /// or deleted. While etcd cannot be reached xdsd keeps serving the last good state and is
    /// not ready (/readyz 503, gRPC health NOT_SERVING, xdsd_source_healthy 0); it reconnects and
    /// catches up. An etcd that cannot be read at start-up is fatal.
    ///
    /// SIGTERM or SIGINT stops xdsd: open streams end with UNAVAILABLE (clients reconnect), and
    /// it exits within about a second, closing any connection still open by then.
    ///
    /// Exit status: 0 stopped by a signal, 1 a failure (resources that do not load at start, an
    /// address in use), 2 usage error (bad arguments; neither or both of --resources and
    /// --etcd-endpoints).
    Serve(Box<ServeArgs>),

    /// Validate a resource directory exactly as `serve` would load it, then exit.
    ///
    /// The same loading code and the same rules as `serve` at start-up: file syntax, @type,
    /// every field through the Envoy descriptors, names, duplicates, variant rules, and the
    /// references between resources as --references and --external-name say. Every error is
    /// printed on stderr, one per line, naming the file, the resource and the field (with line
    /// and column where the parser gives them); when some files fail, the references and variant
    /// rules are still checked among the files that parsed, and a note names the files whose
    /// resources could not be checked. On success a summary of the resources per type goes to
    /// stdout.
    ///
    /// Exit status: 0 valid, 1 invalid, 2 usage error (bad arguments, DIR not a directory).
    Check(CheckArgs),

    /// Write a resource directory as DiscoveryResponse files for Envoy's filesystem
    /// subscriptions (path_config_source), then exit.
    ///
    /// The directory is loaded and checked as by `serve` (an invalid one writes nothing). Then
    /// one file per resource type and format goes to --out: listeners, routes, clusters,
    /// endpoints, secrets and runtime (always, with no resources when there are none), other
    /// types when there are some (scoped_routes, virtual_hosts, extension_configs, or the full
    /// message name), each with the extension of its format (.pb, .json, .yaml), by which Envoy
    /// chooses its parser. Each file is a DiscoveryResponse with version_info set to the type's
    /// version and every resource as an Any; JSON and YAML are the proto3 JSON mapping written
    /// through the Envoy descriptors. Files are replaced atomically (written next to the target,
    /// then renamed over it). --out must not be inside --resources.
    ///
    /// Point Envoy at a file with path_config_source; give it watched_directory (the directory
    /// of the files) so that it reloads when a file is replaced. Envoy reads a listeners or
    /// clusters file as a whole; its EDS, RDS, SDS and RTDS subscriptions take a file of exactly
    /// one resource. See docs/files.md.
    ///
    /// Exit status: 0 written, 1 invalid resources or a file not written, 2 usage error.
    Render(RenderArgs),

    /// Make an etcd prefix hold exactly a resource directory, for `xdsd serve --etcd-endpoints`
    /// replicas to serve, then exit.
    ///
    /// The directory is loaded and checked exactly as by `check` and `serve` (the same
    /// --references, --external-name and --max-file-bytes rules); if it is invalid, every
    /// error is printed and etcd is not touched. Otherwise the prefix is made to hold one key
    /// per resource file, the key being the prefix followed by the file's path relative to DIR
    /// with '/' separators (clusters/web.yaml under /xdsd/ is /xdsd/clusters/web.yaml), its
    /// value the file's bytes: new and changed files are put, keys without a file are deleted,
    /// all in one etcd transaction guarded by the revision read (plus the marker key
    /// <PREFIX>.push), so that the replicas apply the push as one change and a concurrent push
    /// or writer makes this one fail, writing nothing, instead of interleaving. Each key put or
    /// deleted is printed, then a summary; --dry-run prints what would be written and writes
    /// nothing; --confirm asks before writing. See docs/etcd.md.
    ///
    /// Exit status: 0 pushed (or nothing to do), 1 invalid resources, a conflict with another
    /// writer, an etcd error or a push not confirmed (nothing written), 2 usage error.
    Push(Box<push::PushArgs>),

    /// Show which client has which version, and who NACKed what and why (a CSDS client).
    ///
    /// Asks a CSDS server (ClientStatusDiscoveryService: xdsd serves it on its --listen
    /// address; any other CSDS server works too) for its clients. Without NODE: one line per
    /// client (node id, cluster, user agent) with, per type, SYNCED (it ACKed the last response),
    /// STALE (a response awaits its answer), NACKED (it rejected the last response) or NOT SENT,
    /// with a short version; the NACKED and STALE rows first, then each NACK's message and the
    /// files of the rejected resources, then a summary line (`12 clients: 11 synced, 1 NACKED`).
    /// With NODE: that client's types, versions, NACKs and every resource it was sent.
    ///
    /// With --wait, asks again until every client is synced or --timeout passes: what a deploy
    /// pipeline runs after a change. Colours only on a terminal (and not with NO_COLOR).
    ///
    /// Exit status: 0 every client synced, 1 not (or an error), 2 usage error.
    Status(status::StatusArgs),

    /// Relay an upstream xDS server to downstream clients: a caching xDS proxy (xRFC TP2).
    ///
    /// Downstream, the relay is xdsd: the same server, sessions and rules as `serve` (SotW and
    /// delta, ADS and per-type, REST and Fetch, TP2 variants, make-before-break, size caps, CSDS,
    /// the admin API of its own clients). Upstream, it is an xDS client of --upstream (any xDS
    /// server: xdsd, another relay, another control plane), over delta ADS by default. A type a
    /// downstream client asks for is subscribed upstream (the wildcard) on first request and
    /// unsubscribed --linger after its last client left; --prefetch types are subscribed from
    /// the start. What the upstream sends is cached with its TP2 dynamic parameter constraints
    /// and TTL, and served with them; versions are derived from content, so two relays of one
    /// upstream answer the same versions and a client moving between them is resent nothing.
    /// A resource the relay cannot decode is NACKed upstream and the last good one kept.
    ///
    /// While the upstream is unreachable, the relay keeps serving its cache to existing and new
    /// clients (no downstream stream ends for it) and reconnects with backoff; it is ready
    /// (/readyz) while it holds a cache: alert on the upstream instead. See docs/relay.md.
    ///
    /// Exit status: 0 stopped by a signal, 1 a failure (an address in use, an unusable
    /// --upstream), 2 usage error.
    Relay(Box<relay::RelayArgs>),
}

/// Where the resources come from and the rules they are checked by: shared by `check`,
/// `render` and `push`.
#[derive(clap::Args, Debug)]
struct SourceArgs {
    /// Directory of resource files, read recursively.
    #[arg(long, value_name = "DIR", env = "XDSD_RESOURCES")]
    resources: PathBuf,

    #[command(flatten)]
    rules: RuleArgs,
}

impl SourceArgs {
    /// What each resource file may take.
    fn limits(&self) -> xdsd_source::Limits {
        self.rules.limits()
    }

    fn reference_policy(&self) -> ReferencePolicy {
        self.rules.reference_policy()
    }
}

/// The rules resources are checked by, wherever they come from: shared by every command.
#[derive(clap::Args, Debug)]
struct RuleArgs {
    /// What to do with a reference to a resource that does not exist (a listener's RDS route
    /// configuration, a route's cluster, an EDS cluster's endpoints, an SDS secret): "strict"
    /// rejects the change and keeps serving the last good state (a bad directory at start-up is
    /// fatal); "warn" applies it and logs each dangling reference; "off" does not check. Envoy
    /// itself accepts a route to a missing cluster and answers 503, hence strict by default.
    #[arg(
        long,
        value_name = "MODE",
        default_value = "strict",
        env = "XDSD_REFERENCES"
    )]
    references: References,

    /// A resource the clients get elsewhere than from xdsd (e.g. a static cluster of Envoy's
    /// bootstrap, such as the xDS cluster itself): references to it are not dangling. TYPE is
    /// cluster, route, listener, endpoints, secret or a full type URL. Repeatable; the variable
    /// takes a comma-separated list.
    #[arg(
        long = "external-name",
        value_name = "TYPE:NAME",
        env = "XDSD_EXTERNAL_NAMES",
        value_delimiter = ',',
        value_parser = parse_external_name
    )]
    external_names: Vec<(String, String)>,

    /// The largest resource file read, in bytes (or with a KiB/MiB suffix): a larger one is an
    /// error naming it (the change is rejected, the last good state kept). YAML files are also
    /// refused when their aliases expand to more than 4,000,000 nodes.
    #[arg(
        long,
        value_name = "BYTES",
        default_value = "32MiB",
        value_parser = parse_bytes,
        env = "XDSD_MAX_FILE_BYTES"
    )]
    max_file_bytes: usize,
}

impl RuleArgs {
    /// What each resource file may take.
    fn limits(&self) -> xdsd_source::Limits {
        xdsd_source::Limits::default().max_file_bytes(self.max_file_bytes as u64)
    }
}

#[derive(clap::Args, Debug)]
struct CheckArgs {
    #[command(flatten)]
    source: SourceArgs,
}

#[derive(clap::Args, Debug)]
struct RenderArgs {
    #[command(flatten)]
    source: SourceArgs,

    /// Directory to write the files into (created if missing; must not be inside --resources).
    #[arg(long, value_name = "DIR", env = "XDSD_RENDER_OUT")]
    out: PathBuf,

    /// File format: pb (binary protobuf), json (proto3 JSON) or yaml. Repeatable, or
    /// comma-separated, to write several; each format has its own extension.
    #[arg(
        long,
        value_name = "FORMAT",
        default_value = "yaml",
        value_delimiter = ',',
        env = "XDSD_RENDER_FORMAT"
    )]
    format: Vec<OutputFormat>,
}

#[derive(clap::Args, Debug)]
struct ServeArgs {
    /// Directory of resource files, read recursively and watched for changes. Either this or
    /// --etcd-endpoints (with --etcd-prefix).
    #[arg(long, value_name = "DIR", env = "XDSD_RESOURCES")]
    resources: Option<PathBuf>,

    #[command(flatten)]
    rules: RuleArgs,

    #[command(flatten)]
    etcd: etcd_args::EtcdArgs,

    #[command(flatten)]
    tls: Box<tls_args::TlsArgs>,

    #[command(flatten)]
    rollout: RolloutArgs,

    /// Address for the xDS gRPC server. Port 0 picks a free port (logged at start).
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "0.0.0.0:18000",
        env = "XDSD_LISTEN"
    )]
    listen: SocketAddr,

    /// Log level (error, warn, info, debug, trace) or a tracing filter such as
    /// "info,xdsd_core=debug". Pushes and ACKs are logged at debug, NACKs at warn.
    #[arg(long, value_name = "LEVEL", default_value = "info", env = "XDSD_LOG")]
    log_level: String,

    /// Log format: "text" (one line per event) or "json" (one JSON object per line, with the
    /// event's fields, for log collectors).
    #[arg(
        long,
        value_name = "FORMAT",
        default_value = "text",
        env = "XDSD_LOG_FORMAT"
    )]
    log_format: LogFormat,

    /// Also write the resources as DiscoveryResponse files for Envoy's filesystem subscriptions
    /// into DIR (as `xdsd render` does): at start, then after each change, only the files of
    /// the types that changed, each replaced atomically (a temporary file renamed over it);
    /// secrets, clusters and endpoints first, then, half a second later, the listeners and
    /// routes that may refer to them.
    /// Envoy's path_config_source needs watched_directory set to DIR to see the changes. A
    /// file that cannot be written is logged as an error and xdsd keeps serving; it is tried
    /// again at the next change. DIR is created if missing and must not be inside --resources.
    #[arg(long, value_name = "DIR", env = "XDSD_WRITE_FILES")]
    write_files: Option<PathBuf>,

    /// Format of the --write-files files: pb, json or yaml. Repeatable, or comma-separated, to
    /// write several.
    #[arg(
        long,
        value_name = "FORMAT",
        default_value = "yaml",
        value_delimiter = ',',
        env = "XDSD_WRITE_FORMAT",
        requires = "write_files"
    )]
    write_format: Vec<OutputFormat>,

    /// The largest request xdsd accepts, in bytes (or with a KiB/MiB suffix). A larger request
    /// ends its stream with RESOURCE_EXHAUSTED. The default, 32 MiB, holds an Envoy's request
    /// naming 100,000 EDS clusters or a delta reconnect with 100,000 initial resource versions
    /// (each about 10-17 MB); gRPC's usual 4 MiB would refuse them. At least 64 KiB.
    #[arg(
        long,
        value_name = "BYTES",
        default_value = "32MiB",
        value_parser = request_bytes,
        env = "XDSD_MAX_REQUEST_BYTES"
    )]
    max_request_bytes: usize,

    /// The bytes one connection's unfinished requests may hold at once (messages still being
    /// received, all its streams together; a request is decoded and let go as soon as it is
    /// whole). A stream whose message would go over it ends with RESOURCE_EXHAUSTED. The default
    /// is twice --max-request-bytes' default.
    #[arg(
        long,
        value_name = "BYTES",
        default_value = "64MiB",
        value_parser = parse_bytes,
        env = "XDSD_MAX_BUFFERED_REQUEST_BYTES"
    )]
    max_buffered_request_bytes: usize,

    /// The same bound for all connections together: a burst of clients that each send most of a
    /// large request and stop takes at most this much memory.
    #[arg(
        long,
        value_name = "BYTES",
        default_value = "512MiB",
        value_parser = parse_bytes,
        env = "XDSD_MAX_BUFFERED_REQUEST_BYTES_TOTAL"
    )]
    max_buffered_request_bytes_total: usize,

    /// The largest response xdsd sends, in bytes (or with a KiB/MiB suffix). A larger delta
    /// response, or SotW response of any type but listeners, clusters and scoped routes, goes out
    /// in parts: each part has its own nonce, and SotW parts before the last carry the version
    /// "<version>-part-<n>". Those three must go whole in SotW (every response holds them all):
    /// one over the limit is sent anyway, with a warning. The default, 1 MiB, stays
    /// well under the 4 MiB that gRPC clients accept by default. At least 16 KiB.
    #[arg(
        long,
        value_name = "BYTES",
        default_value = "1MiB",
        value_parser = response_bytes,
        env = "XDSD_MAX_RESPONSE_BYTES"
    )]
    max_response_bytes: usize,

    /// Make-before-break ordering on aggregated (ADS) streams, on or off. On: a route
    /// configuration, virtual host or listener whose new content points at a cluster the client
    /// was not sent yet is held until that cluster and its endpoints were sent, and clusters and
    /// endpoints removed while routes still pointed at them are removed only after the client
    /// ACKed the routes that stopped pointing at them (each hold lasts 5 s at most). A change that
    /// adds a cluster, moves a route to it and removes the old cluster then loses no request.
    /// Off: every change goes out as soon as it is loaded; Envoy may then take the new route
    /// before the new cluster is ready, or drop the old cluster while routes still send to it, and
    /// answers 503 in between. Keep it on; off only spares the wait (up to 5 s) for a client that
    /// rejects a cluster or takes its endpoints elsewhere, and serves to compare. Streams of the
    /// per-type services are never ordered against each other.
    #[arg(
        long,
        value_name = "on|off",
        default_value = "on",
        env = "XDSD_MAKE_BEFORE_BREAK"
    )]
    make_before_break: OnOff,

    /// How long a type's next response on a stream waits for the client's ACK or NACK of the
    /// last one (e.g. 5s, 500ms; 0 sends without waiting). One response in flight per type:
    /// what changes meanwhile goes out together once the client answered, so a client that
    /// applies configuration slower than it changes gets the latest state when it is ready for
    /// it rather than every state in between, queued. Envoy and gRPC clients answer every
    /// response at once; a client that never answers gets a response per this period. The rest
    /// of a response split at --max-response-bytes does not wait.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "5s",
        value_parser = parse_duration,
        env = "XDSD_ACK_WAIT"
    )]
    ack_wait: Duration,

    /// Return the memory a burst freed to the system once the burst is over. After a thousand
    /// clients sync at once, a change goes out to all of them or streams close, the allocator
    /// (glibc) keeps the pages it used, as much again as the streams themselves hold; on, a
    /// thread reads the resident size and the allocator's bytes in use five times a second and,
    /// once the resident size stops growing and what it holds beyond the bytes in use stands
    /// 4 MiB (or an eighth of the bytes in use) above what it held after the last release,
    /// returns every free page (at most once a second; the allocator's figures and the release
    /// walk its free chunks, and each is paced by what it took, to about 2 % of a core at
    /// most). Off: the pages stay with the process, to be used again. Only with glibc on
    /// Linux; elsewhere it does nothing.
    #[arg(
        long,
        value_name = "on|off",
        default_value = "on",
        env = "XDSD_RELEASE_MEMORY"
    )]
    release_memory: OnOff,

    /// Connections open at once; a new connection over the limit is closed at once (logged once
    /// per run of refusals). The default allows five per proxy of a 10,000-proxy fleet.
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_MAX_CONNECTIONS,
        env = "XDSD_MAX_CONNECTIONS"
    )]
    max_connections: usize,

    /// Streams (and calls) one HTTP/2 connection may have open at once; a client's further
    /// streams wait until one ends. An Envoy opens one (ADS) or one per type.
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_MAX_STREAMS_PER_CONNECTION,
        env = "XDSD_MAX_STREAMS_PER_CONNECTION"
    )]
    max_streams_per_connection: u32,

    /// How long a new connection has to send the start of its first request (the HTTP/2
    /// preface and first SETTINGS frame, or an HTTP/1.1 request line), counted after its TLS
    /// handshake; a connection that stays silent or trickles is closed then.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "10s",
        value_parser = parse_duration,
        env = "XDSD_PREFACE_TIMEOUT"
    )]
    preface_timeout: Duration,

    /// Close each connection once it is this old (e.g. 30m; ± 10 % random jitter, so that
    /// connections opened together do not go together; default: never): it is sent an HTTP/2
    /// GOAWAY (no new streams), and after --max-connection-age-grace its streams still open end
    /// with UNAVAILABLE and it is closed. Clients then reconnect, possibly to another replica
    /// behind the same address, and are resent nothing they hold: several replicas spread
    /// their clients again after a scale-out or a restart.
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = parse_duration,
        env = "XDSD_MAX_CONNECTION_AGE"
    )]
    max_connection_age: Option<Duration>,

    /// How long a connection past --max-connection-age keeps its open streams (xDS streams
    /// last as long as their client, so this is when they end).
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "10s",
        value_parser = parse_duration,
        env = "XDSD_MAX_CONNECTION_AGE_GRACE"
    )]
    max_connection_age_grace: Duration,

    /// The resource names one stream may subscribe to, all types together; more ends that
    /// stream with RESOURCE_EXHAUSTED. The default is twice an Envoy with 100,000 EDS clusters;
    /// each name costs the stream about 100 bytes.
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_MAX_NAMES,
        env = "XDSD_MAX_NAMES_PER_STREAM"
    )]
    max_names_per_stream: usize,

    /// The resource names the streams of one connection may subscribe to together; a request
    /// over it ends its stream with RESOURCE_EXHAUSTED. The default is 20 streams at
    /// --max-names-per-stream: room for clients that multiplex many streams on a connection.
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_MAX_NAMES_PER_CONNECTION,
        env = "XDSD_MAX_NAMES_PER_CONNECTION"
    )]
    max_names_per_connection: usize,

    /// The resource names all streams may subscribe to together (10,000 proxies with 5,000 names
    /// each by default); a request over it ends its stream with RESOURCE_EXHAUSTED.
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_MAX_NAMES_TOTAL,
        env = "XDSD_MAX_NAMES_TOTAL"
    )]
    max_names_total: usize,

    /// REST-JSON polling (POST /v3/discovery:clusters etc., on the --listen address): how long a
    /// poll whose version is current is held for a change before it is answered 304 Not
    /// Modified (e.g. 800ms, 30s; 0 answers at once). The default stays under the 1 s
    /// request_timeout Envoy gives a REST config source: raise both together.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "800ms",
        value_parser = parse_duration,
        env = "XDSD_REST_HOLD"
    )]
    rest_hold: Duration,

    /// REST-JSON polling: how many polls are held at once; the others are answered at once.
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_MAX_HELD_POLLS,
        env = "XDSD_MAX_HELD_POLLS"
    )]
    max_held_polls: usize,

    /// Apply a change that leaves no resources at all where some were served. Off by default:
    /// such a change is far more often a directory being deleted or replaced (rm -rf, a branch
    /// switch, an unpacked archive, rsync --delete) than an empty configuration meant for the
    /// fleet, so it is rejected like any bad change (the last good state kept, logged at ERROR)
    /// and xdsd stays ready. A source that is empty at start is served as it is, with a warning.
    #[arg(long, env = "XDSD_ALLOW_EMPTY")]
    allow_empty: bool,

    /// Address of the admin HTTP API (GET /healthz, /readyz, /clients, /config?node=ID, with
    /// &contents=1 the resources as proto3 JSON, /metrics; see docs/operating.md), or "off".
    /// Loopback by default: /clients shows every client's node.
    /// Port 0 picks a free port (logged at start).
    #[arg(
        long,
        value_name = "ADDR|off",
        default_value = admin::DEFAULT_ADMIN_LISTEN,
        value_parser = admin::parse_admin_listen,
        env = "XDSD_ADMIN_LISTEN"
    )]
    admin_listen: admin::AdminListen,

    /// Serve the admin API over TLS with the certificate and key of --tls-cert/--tls-key
    /// (read again when they change, as for the xDS port); with --client-ca, its clients must
    /// present a certificate that CA signed. Without it the admin API is plaintext HTTP, and a
    /// non-loopback --admin-listen logs a warning.
    #[arg(long, requires = "tls_cert", env = "XDSD_ADMIN_TLS")]
    admin_tls: bool,

    /// How a change of the directory is loaded. incremental: only the paths the watcher's events
    /// name are looked at, only files whose size, times or inode changed are read again, only
    /// those whose content changed are parsed again, and only the names they held are committed
    /// (duplicates and references decided as a full load would); after missed events the whole
    /// directory is listed again. full: every file is read, parsed and committed on every
    /// change, as a fallback or to compare.
    #[arg(
        long,
        value_name = "incremental|full",
        default_value = "incremental",
        env = "XDSD_RELOAD"
    )]
    reload: ReloadMode,
}

/// Gated rollouts: `--canary`, `--canary-min`, `--canary-soak`.
#[derive(clap::Args, Debug)]
struct RolloutArgs {
    /// Roll each change out to a canary cohort first: SELECTOR is cluster=NAME (the node's
    /// cluster), node=GLOB (its id, * for any run), metadata.KEY=VALUE (a string field of its
    /// metadata) or N% (a stable hash of its id: the same node is in or out on every connection
    /// and replica). Repeatable (any selector picks); the variable takes them separated by
    /// spaces. A change goes at once to the connected canaries, every other client stays on the
    /// last promoted (stable) state; it is promoted once --canary-min canaries ACKed every type
    /// it touched and --canary-soak passed with no NACK, and halted (canaries rolled back) on a
    /// canary's NACK. GET /rollout on the admin API shows it, POST /rollout/promote and
    /// /rollout/abort act on it (docs/rollouts.md). With replicas on etcd, the decisions are
    /// shared under the prefix (<prefix>.rollout): a halt or promotion on one replica is followed
    /// by all, and a replica starting serves the stable state they share. Without it every change
    /// goes to every client.
    #[arg(
        long = "canary",
        value_name = "SELECTOR",
        env = "XDSD_CANARY",
        value_delimiter = ' ',
        value_parser = parse_selector
    )]
    canary: Vec<Selector>,

    /// Canary clients that must have ACKed every type a change touched before it is promoted.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        env = "XDSD_CANARY_MIN",
        requires = "canary"
    )]
    canary_min: usize,

    /// How long a change stays with the canaries, with no NACK, before it is promoted.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "60s",
        value_parser = parse_duration,
        env = "XDSD_CANARY_SOAK",
        requires = "canary"
    )]
    canary_soak: Duration,
}

impl RolloutArgs {
    /// The rollout of `store`'s changes, when a cohort is given.
    fn rollout(&self, store: &Store) -> Option<Arc<Rollout>> {
        if self.canary.is_empty() {
            return None;
        }
        let config = GateConfig::default()
            .min_canaries(self.canary_min)
            .soak(self.canary_soak);
        info!(
            cohort = %self.canary.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(" "),
            min = self.canary_min,
            soak = ?self.canary_soak,
            "gated rollouts: each change goes to the canary cohort first"
        );
        Some(Rollout::new(
            Cohort::new(self.canary.clone()),
            config,
            store.clone(),
        ))
    }
}

/// A `--canary` selector.
fn parse_selector(text: &str) -> Result<Selector, String> {
    Selector::parse(text)
}

/// `--reload`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum ReloadMode {
    Incremental,
    Full,
}

/// `--make-before-break`, `--release-memory`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum OnOff {
    On,
    Off,
}

/// `--format`, `--write-format`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum OutputFormat {
    Pb,
    Json,
    Yaml,
}

impl OutputFormat {
    fn file_format(self) -> FileFormat {
        match self {
            OutputFormat::Pb => FileFormat::Pb,
            OutputFormat::Json => FileFormat::Json,
            OutputFormat::Yaml => FileFormat::Yaml,
        }
    }
}

fn file_formats(formats: &[OutputFormat]) -> Vec<FileFormat> {
    formats.iter().map(|f| f.file_format()).collect()
}

/// `--references`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum References {
    Strict,
    Warn,
    Off,
}

impl RuleArgs {
    fn reference_policy(&self) -> ReferencePolicy {
        let mode = match self.references {
            References::Strict => ReferenceMode::Strict,
            References::Warn => ReferenceMode::Warn,
            References::Off => ReferenceMode::Off,
        };
        self.external_names
            .iter()
            .fold(ReferencePolicy::new(mode), |policy, (type_url, name)| {
                policy.with_external(type_url, name)
            })
    }
}

/// `TYPE:NAME` of `--external-name`: (type URL, name).
fn parse_external_name(value: &str) -> Result<(String, String), String> {
    use xdsd_core::types;
    let Some((kind, name)) = value.split_once(':') else {
        return Err("expected TYPE:NAME, e.g. cluster:xds_cluster".to_owned());
    };
    if name.is_empty() {
        return Err("the NAME of TYPE:NAME is empty".to_owned());
    }
    let type_url = match kind {
        "cluster" => types::CLUSTER.to_owned(),
        "route" => types::ROUTE_CONFIGURATION.to_owned(),
        "listener" => types::LISTENER.to_owned(),
        "endpoints" => types::CLUSTER_LOAD_ASSIGNMENT.to_owned(),
        "secret" => types::SECRET.to_owned(),
        // Served under type.googleapis.com/, whatever the prefix (as in resource files).
        url if types::is_well_formed(url) => match url.rsplit_once('/') {
            Some((_, message)) => format!("{}{message}", types::TYPE_URL_PREFIX),
            None => url.to_owned(),
        },
        other => {
            return Err(format!(
                "unknown TYPE {other:?}: one of cluster, route, listener, endpoints, secret, \
                 or a type URL such as type.googleapis.com/envoy.config.cluster.v3.Cluster"
            ))
        }
    };
    Ok((type_url, name.to_owned()))
}

/// A size in bytes: a number, optionally followed by KiB or MiB.
fn parse_bytes(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, ""),
    };
    let unit = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1024,
        "MiB" => 1024 * 1024,
        other => return Err(format!("unknown unit {other:?}: use bytes, KiB or MiB")),
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(|| format!("{text:?} is not a size (e.g. 33554432 or 32MiB)"))
}

/// A duration: a number with a unit (`800ms`, `30s`, `2m`), or 0.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let at = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(at);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 800ms, 30s, 2m)"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => n
            .checked_mul(60)
            .map(Duration::from_secs)
            .ok_or_else(|| format!("{text:?} is too long")),
        "" if n == 0 => Ok(Duration::ZERO),
        _ => Err(format!("{text:?}: give a unit, ms, s or m (e.g. 800ms)")),
    }
}

fn request_bytes(text: &str) -> Result<usize, String> {
    let bytes = parse_bytes(text)?;
    if bytes < MIN_MAX_REQUEST_BYTES {
        return Err(format!("at least {MIN_MAX_REQUEST_BYTES} bytes (64KiB)"));
    }
    Ok(bytes)
}

/// `--max-response-bytes`.
fn response_bytes(text: &str) -> Result<usize, String> {
    let bytes = parse_bytes(text)?;
    if bytes < MIN_MAX_RESPONSE_BYTES {
        return Err(format!("at least {MIN_MAX_RESPONSE_BYTES} bytes (16KiB)"));
    }
    Ok(bytes)
}

// The defaults in `--help` are the library's.
const _: () = assert!(DEFAULT_MAX_REQUEST_BYTES == 32 * 1024 * 1024);
const _: () = assert!(DEFAULT_MAX_RESPONSE_BYTES == 1024 * 1024);
const _: () = assert!(MIN_MAX_RESPONSE_BYTES == 16 * 1024);
const _: () = assert!(DEFAULT_REST_HOLD.as_millis() == 800);

/// An error and its causes, one after the other, each said once: a cause whose message already
/// ends the text (an error that shows its source in its own message) is not repeated.
fn error_chain(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let message = cause.to_string();
        if text.ends_with(&message) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&message);
    }
    text
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => {
            let from = match args.from() {
                Ok(from) => from,
                Err(e) => {
                    eprintln!("xdsd serve: {e}");
                    return ExitCode::from(2);
                }
            };
            if let Err(e) = init_logs(&args.log_level, args.log_format) {
                eprintln!("xdsd: {e:#}");
                return ExitCode::from(2);
            }
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(rt) => rt,
                Err(e) => {
                    error!("cannot start the async runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(serve(*args, from)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    error!("{}", error_chain(&e));
                    ExitCode::FAILURE
                }
            }
        }
        Command::Check(args) => offline::check(args),
        Command::Render(args) => offline::render(args),
        Command::Push(args) => push::push(*args),
        Command::Status(args) => status::run(args),
        Command::Relay(args) => relay::main(*args),
    }
}

/// `--log-format`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum LogFormat {
    Text,
    Json,
}

fn init_logs(level: &str, format: LogFormat) -> anyhow::Result<()> {
    // A bare level applies to xdsd's own crates; libraries (HTTP/2 frames at debug) stay at info
    // at most. A filter with targets is taken as it is.
    let directives = match level.parse::<tracing::Level>() {
        Ok(l) => {
            let libraries = std::cmp::min(l, tracing::Level::INFO);
            format!("{libraries},xdsd={l},xdsd_core={l},xdsd_source={l},xdsd_etcd={l}")
        }
        Err(_) => {
            check_directives(level)?;
            level.to_owned()
        }
    };
    let filter = EnvFilter::try_new(&directives)
        .with_context(|| format!("invalid --log-level {level:?}"))?;
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = match format {
        // Colour codes would garble logs collected from a pipe or a file.
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).try_init(),
        LogFormat::Json => logs.json().with_ansi(false).try_init(),
    };
    installed.map_err(|e| anyhow::anyhow!("cannot set up logging: {e}"))
}

/// A filter's directives are levels or `target=level`: a bare word that is not a level
/// (`verbose`) would be read as a target name and silence every log, so it is refused.
fn check_directives(filter: &str) -> anyhow::Result<()> {
    for directive in filter.split(',').map(str::trim) {
        if !directive.contains('=') && directive.parse::<tracing::Level>().is_err() {
            anyhow::bail!(
                "invalid --log-level {filter:?}: {directive:?} is neither a level (error, warn, info, debug, trace) nor a target=level directive"
            );
        }
    }
    Ok(())
}

/// Where `serve` reads its resources.
enum ResourcesFrom {
    Directory(PathBuf),
    Etcd(Box<EtcdOptions>),
}

impl ServeArgs {
    /// The source the arguments name: exactly one of a directory and an etcd prefix.
    fn from(&self) -> Result<ResourcesFrom, String> {
        match (&self.resources, self.etcd.given()) {
            (Some(_), true) => Err(
                "--resources and --etcd-endpoints are exclusive: serve either a directory or an \
                 etcd prefix (XDSD_RESOURCES and XDSD_ETCD_ENDPOINTS count too)"
                    .into(),
            ),
            (None, false) => Err(
                "no resources: give --resources DIR, or --etcd-endpoints URL[,URL...] with \
                 --etcd-prefix PREFIX"
                    .into(),
            ),
            (Some(dir), false) => {
                if self.etcd.etcd_prefix.is_some() {
                    return Err("--etcd-prefix needs --etcd-endpoints".into());
                }
                Ok(ResourcesFrom::Directory(dir.clone()))
            }
            (None, true) => self
                .etcd
                .options(self.rules.max_file_bytes)
                .map(|options| ResourcesFrom::Etcd(Box::new(options))),
        }
    }
}

/// With replicas on etcd, the rollout's state is shared under the prefix (`<prefix>.rollout`):
/// a replica starting takes up the rollout in flight (the stable state as the record says, the
/// source loaded at the record's candidate revision), then shares its decisions and follows the
/// others'.
async fn share_rollout(
    rollout: &Arc<Rollout>,
    mut source: EtcdSource,
    options: &EtcdOptions,
) -> anyhow::Result<EtcdSource> {
    let etcd = xdsd_etcd::Etcd::connect(options)
        .await
        .context("cannot connect to etcd for the rollout's shared state")?;
    let (resume, after) = xdsd_etcd::rollout::resume(&etcd, &source)
        .await
        .context("cannot read the rollout's shared state")?;
    if let Some(resume) = resume {
        source = source.starting_at(resume.record.load_revision());
        rollout
            .resume_from(resume.record, resume.stable)
            .context("cannot load the rollout's stable state")?;
    }
    // One connection for both: the source reads and watches through it too.
    let source = source.with_connection(etcd.clone());
    let shared = xdsd_etcd::rollout::SharedRollout::start(etcd, rollout.clone(), after);
    rollout.share(Arc::new(shared));
    Ok(source)
}

/// The source `serve` follows: a directory or an etcd prefix, behind one serve path.
enum AnySource {
    Directory(DirectorySource),
    Etcd(EtcdSource),
}

impl Source for AnySource {
    fn describe(&self) -> String {
        match self {
            AnySource::Directory(s) => s.describe(),
            AnySource::Etcd(s) => s.describe(),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            AnySource::Directory(s) => s.kind(),
            AnySource::Etcd(s) => s.kind(),
        }
    }

    async fn load(&mut self) -> Result<ChangeSet, Rejection> {
        match self {
            AnySource::Directory(s) => s.load().await,
            AnySource::Etcd(s) => s.load().await,
        }
    }

    async fn next(&mut self) -> Option<SourceEvent> {
        match self {
            AnySource::Directory(s) => s.next().await,
            AnySource::Etcd(s) => s.next().await,
        }
    }

    fn committed(&mut self, ok: bool) {
        match self {
            AnySource::Directory(s) => s.committed(ok),
            AnySource::Etcd(s) => s.committed(ok),
        }
    }
}

async fn serve(args: ServeArgs, from: ResourcesFrom) -> anyhow::Result<()> {
    // Both ports first: a second xdsd with the same flags fails here, before it loads or serves
    // anything.
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| bind_error(e, args.listen, "--listen"))?;
    let admin_listener = admin::bind(args.admin_listen).await?;

    let descriptors = Descriptors::envoy().context("loading the Envoy proto descriptors")?;
    let store = Store::with_reference_policy(args.rules.reference_policy());
    let mut files = match &args.write_files {
        Some(out) => {
            if let ResourcesFrom::Directory(dir) = &from {
                files::check_outside(out, dir)?;
            }
            std::fs::create_dir_all(out)
                .with_context(|| format!("--write-files {}: cannot create it", out.display()))?;
            let writer = FileWriter::new(
                out.clone(),
                &file_formats(&args.write_format),
                descriptors.clone(),
            );
            let (updates, pending) = files::file_updates();
            Some((writer, updates, pending))
        }
        None => None,
    };
    let metrics = Metrics::new();
    let mut feed = Feed::new(store.clone())
        .metrics(metrics.clone())
        .allow_empty(args.allow_empty);
    let rollout = args.rollout.rollout(&store);
    if let Some(rollout) = &rollout {
        feed = feed.rollout(rollout.clone());
    }
    if let Some((_, updates, _)) = &files {
        let updates: FileUpdates = updates.clone();
        feed = feed.on_applied(move |_| updates.changed());
    }
    let mut source = match from {
        ResourcesFrom::Directory(dir) => AnySource::Directory(
            DirectorySource::new(descriptors.clone(), dir, args.rules.limits())
                .incremental(args.reload == ReloadMode::Incremental),
        ),
        ResourcesFrom::Etcd(options) => {
            let mut source = EtcdSource::new(descriptors.clone(), (*options).clone());
            if let Some(rollout) = &rollout {
                source = share_rollout(rollout, source, &options).await?;
            }
            AnySource::Etcd(source)
        }
    };
    feed.first_load(&mut source)
        .await
        .with_context(|| format!("cannot load resources from {}", source.describe()))?;
    // The first files, before serving; later ones from the writer's thread.
    if let Some((writer, _, _)) = files.as_mut() {
        let snapshot = store.snapshot();
        files::log_round(&writer.write_changed(&snapshot), snapshot.generation());
    }
    // What parsing the descriptors and the first load left behind is returned before serving.
    if args.release_memory == OnOff::On {
        memory::start();
    }
    if let Some((writer, _, pending)) = files {
        info!(
            dir = %writer.dir().display(),
            "writing discovery response files after each change"
        );
        pending.start(store.clone(), writer)?;
    }

    let addr = listener.local_addr().context("reading the bound address")?;
    info!("xDS gRPC server listening on {addr}");
    args.tls.log(addr);

    let make_before_break = args.make_before_break == OnOff::On;
    if !make_before_break {
        warn!(
            "make-before-break ordering is off: a change that moves traffic between clusters may \
             fail requests while clients apply it"
        );
    }
    let options = ServerOptions::default()
        .max_request_bytes(args.max_request_bytes)
        .max_response_bytes(args.max_response_bytes)
        .max_names_per_stream(args.max_names_per_stream)
        .max_names(args.max_names_per_connection, args.max_names_total)
        .max_connections(args.max_connections)
        .max_streams_per_connection(args.max_streams_per_connection)
        .preface_timeout(args.preface_timeout)
        .max_connection_age(args.max_connection_age, args.max_connection_age_grace)
        .max_buffered_request_bytes(
            args.max_buffered_request_bytes,
            args.max_buffered_request_bytes_total,
        )
        .allow_plaintext_secrets(args.tls.allow_plaintext_secrets)
        .make_before_break(make_before_break)
        .ack_wait(args.ack_wait);
    let options = options
        .rest_hold(args.rest_hold)
        .max_held_polls(args.max_held_polls);
    let rest = rest_json::DescriptorJson::new(&descriptors)?;
    let mut server = XdsServer::builder(store)
        .options(options)
        .metrics(metrics)
        .rest_json(Arc::new(rest));
    if let Some(rollout) = rollout {
        server = server.rollout(rollout.clone());
        tokio::spawn(rollout.run());
    }
    if let Some(tls) = args.tls.options() {
        server = server.tls(tls).context("cannot set up TLS")?;
    }
    let server = server.build();
    // Ready (gRPC health, /readyz) while the source is healthy.
    let handle = server.stats_handle();
    let described = source.describe();
    tokio::spawn(feed.ready(handle.clone()).follow(source));
    let admin_tls = match (args.admin_tls, args.tls.options()) {
        (true, Some(options)) => Some(options),
        _ => None,
    };
    let admin = admin::start(admin_listener, admin_tls, handle, described)?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut serving = tokio::spawn(server.serve(listener, async move {
        let _ = stopped.await;
    }));
    tokio::select! {
        result = &mut serving => {
            return match result {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(e).context("the gRPC server failed"),
                Err(e) => Err(e).context("the gRPC server task failed"),
            };
        }
        signal = shutdown_signal() => info!("{signal} received: shutting down, ending open streams"),
    }
    let _ = stop.send(());
    // `serve` returns within its grace period (SHUTDOWN_GRACE), also when a client stopped
    // reading.
    match serving.await {
        Ok(Ok(())) => info!("stopped"),
        Ok(Err(e)) => warn!("the gRPC server ended with an error while stopping: {e}"),
        Err(e) => warn!("the gRPC server task ended abnormally while stopping: {e}"),
    }
    if let Some(admin) = admin {
        admin.stop().await;
    }
    Ok(())
}

/// A listening address that cannot be bound, with the flag that sets it.
pub(crate) fn bind_error(e: std::io::Error, addr: SocketAddr, flag: &str) -> anyhow::Error {
    let why = match e.kind() {
        std::io::ErrorKind::AddrInUse => format!(
            "{addr} is already in use (another xdsd, or another program, listens there): give \
             {flag} another address, or port 0 for any free port"
        ),
        std::io::ErrorKind::AddrNotAvailable => {
            format!("{addr} is not an address of this machine: give {flag} one of its addresses")
        }
        _ => format!("{e}"),
    };
    anyhow::anyhow!("cannot listen on {addr} ({flag}): {why}")
}

async fn shutdown_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = tokio::signal::ctrl_c() => "SIGINT",
            },
            Err(e) => {
                warn!("cannot listen for SIGTERM ({e}); only SIGINT stops xdsd");
                let _ = tokio::signal::ctrl_c().await;
                "SIGINT"
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        "SIGINT"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_log_level_is_an_error_not_silence() {
        assert!(check_directives("verbose").is_err());
        assert!(check_directives("info,verbose").is_err());
        assert!(check_directives("info,xdsd_core=debug").is_ok());
        assert!(check_directives("warn").is_ok());
    }

    #[test]
    fn serve_takes_a_directory_or_an_etcd_prefix_not_both_nor_neither() {
        if std::env::var_os("XDSD_RESOURCES").is_some()
            || std::env::var_os("XDSD_ETCD_ENDPOINTS").is_some()
        {
            return;
        }
        let from = |args: &[&str]| {
            let args = ["xdsd", "serve"].iter().chain(args);
            match Cli::try_parse_from(args).map(|cli| cli.command) {
                Ok(Command::Serve(args)) => args.from(),
                other => panic!("not serve: {other:?}"),
            }
        };
        let etcd = [
            "--etcd-endpoints",
            "http://127.0.0.1:2379,http://127.0.0.1:2380",
        ];
        assert!(matches!(
            from(&["--resources", "dir"]),
            Ok(ResourcesFrom::Directory(_))
        ));
        match from(&[etcd[0], etcd[1], "--etcd-prefix", "/xdsd"]) {
            Ok(ResourcesFrom::Etcd(options)) => {
                assert_eq!(options.endpoints().len(), 2);
                assert_eq!(options.prefix(), "/xdsd/", "a final / added");
            }
            _ => panic!("etcd"),
        }
        let both = from(&[
            "--resources",
            "dir",
            etcd[0],
            etcd[1],
            "--etcd-prefix",
            "/x/",
        ]);
        assert!(matches!(both, Err(e) if e.contains("exclusive")));
        assert!(matches!(from(&[]), Err(e) if e.contains("no resources")));
        assert!(matches!(from(&[etcd[0], etcd[1]]), Err(e) if e.contains("--etcd-prefix")));
        assert!(
            matches!(from(&["--etcd-prefix", "/", etcd[0], etcd[1]]), Err(e) if e.contains("whole"))
        );
    }

    #[test]
    fn durations_take_a_unit() {
        assert_eq!(parse_duration("800ms"), Ok(Duration::from_millis(800)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("30").is_err());
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("99999999999999999999m").is_err());
    }

    #[test]
    fn sizes_are_bytes_or_kib_or_mib() {
        assert_eq!(parse_bytes("65536"), Ok(65536));
        assert_eq!(parse_bytes("64KiB"), Ok(65536));
        assert_eq!(parse_bytes("32MiB"), Ok(32 * 1024 * 1024));
        assert_eq!(parse_bytes("1 MiB"), Ok(1024 * 1024));
        assert!(parse_bytes("32MB").is_err());
        assert!(parse_bytes("MiB").is_err());
        assert!(parse_bytes("99999999999999999999MiB").is_err());
        assert!(request_bytes("1KiB").is_err());
    }

    #[test]
    fn make_before_break_and_release_memory_are_on_by_default_and_take_on_or_off() {
        for (flag, env, field) in [
            (
                "--make-before-break",
                "XDSD_MAKE_BEFORE_BREAK",
                (|a: &ServeArgs| a.make_before_break) as fn(&ServeArgs) -> OnOff,
            ),
            ("--release-memory", "XDSD_RELEASE_MEMORY", |a| {
                a.release_memory
            }),
        ] {
            let serve = |extra: &[&str]| {
                let args = ["xdsd", "serve", "--resources", "dir"].iter().chain(extra);
                match Cli::try_parse_from(args).map(|cli| cli.command) {
                    Ok(Command::Serve(args)) => Ok(field(&args)),
                    Ok(other) => panic!("parsed as another command: {other:?}"),
                    Err(e) => Err(e.kind()),
                }
            };
            // (Unless the variable is set in the test's environment.)
            if std::env::var_os(env).is_none() {
                assert_eq!(serve(&[]), Ok(OnOff::On), "{flag}");
            }
            assert_eq!(serve(&[flag, "off"]), Ok(OnOff::Off), "{flag}");
            assert_eq!(serve(&[flag, "on"]), Ok(OnOff::On), "{flag}");
            assert_eq!(
                serve(&[flag, "maybe"]),
                Err(clap::error::ErrorKind::InvalidValue),
                "{flag}"
            );
        }
    }

    #[test]
    fn formats_repeat_or_take_commas_and_write_format_needs_write_files() {
        let parse = |args: &[&str]| Cli::try_parse_from(args).map(|cli| cli.command);
        let Ok(Command::Render(render)) = parse(&[
            "xdsd",
            "render",
            "--resources",
            "r",
            "--out",
            "o",
            "--format",
            "pb,json",
            "--format",
            "yaml",
        ]) else {
            panic!("render parses");
        };
        assert_eq!(
            render.format,
            [OutputFormat::Pb, OutputFormat::Json, OutputFormat::Yaml]
        );
        let Ok(Command::Render(render)) =
            parse(&["xdsd", "render", "--resources", "r", "--out", "o"])
        else {
            panic!("render parses");
        };
        assert_eq!(render.format, [OutputFormat::Yaml], "YAML by default");
        if std::env::var_os("XDSD_WRITE_FILES").is_none() {
            let e = parse(&["xdsd", "serve", "--resources", "r", "--write-format", "pb"])
                .expect_err("--write-format alone");
            assert_eq!(e.kind(), clap::error::ErrorKind::MissingRequiredArgument);
        }
        let Ok(Command::Serve(serve)) = parse(&[
            "xdsd",
            "serve",
            "--resources",
            "r",
            "--write-files",
            "o",
            "--write-format",
            "json",
        ]) else {
            panic!("serve parses");
        };
        assert_eq!(serve.write_format, [OutputFormat::Json]);
        let e = parse(&[
            "xdsd",
            "render",
            "--resources",
            "r",
            "--out",
            "o",
            "--format",
            "xml",
        ])
        .expect_err("an unknown format");
        assert_eq!(e.kind(), clap::error::ErrorKind::InvalidValue);
    }
}
