//! The command line: `xdsd`'s subcommands and their options (clap), and the parsers of their
//! values.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use tracing::info;
use xdsd_core::defaults::{
    DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_HELD_POLLS, DEFAULT_MAX_NAMES,
    DEFAULT_MAX_NAMES_PER_CONNECTION, DEFAULT_MAX_NAMES_TOTAL, DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_MAX_STREAMS_PER_CONNECTION, DEFAULT_REST_HOLD,
    MIN_MAX_REQUEST_BYTES, MIN_MAX_RESPONSE_BYTES,
};
use xdsd_core::rollout::{Cohort, GateConfig, Rollout, Selector};
use xdsd_core::store::{ReferenceMode, ReferencePolicy, Store};
use xdsd_source::FileFormat;

use crate::logs::LogFormat;
use crate::{admin, diff, etcd_args, get, history, push, relay, rollback, status, tls_args};

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
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
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
    /// With several --server, a replica that does not answer is listed UNREACHABLE with why,
    /// under what the others report.
    ///
    /// Exit status: 0 every server answered and every client synced, 1 not (a client not synced,
    /// a server unreachable while others answer, an error), 2 no server answered or a usage
    /// error.
    Status(status::StatusArgs),

    /// List the changes of an etcd prefix, newest first: who changed what, when and why.
    ///
    /// One line per change etcd still keeps (it forgets what it compacts: docs/etcd.md):
    /// revision, time, author and message (as `xdsd push --author/--message` recorded them),
    /// the resources added, changed and removed (+a ~c -r), and, when a gated rollout's record
    /// names the revision, the state it reached (soaking, promoted, halted, aborted). A write
    /// that did not come through `xdsd push` (etcdctl put) is a "direct write" with its keys
    /// (counted as keys). --output json prints the same rows as JSON.
    ///
    /// A resource directory (--resources) has no history of its own: keep it in git and use
    /// git log (exit 2).
    ///
    /// Exit status: 0 listed, 1 an etcd error, 2 usage error (or a directory).
    History(Box<history::HistoryArgs>),

    /// Show what changed between two revisions of an etcd prefix, resource by resource.
    ///
    /// FROM and TO are etcd revisions (see `xdsd history`); without them, the change before the
    /// latest one is compared with now, and FROM alone is compared with now. Each resource added,
    /// removed or changed is listed by type and name; a changed one is followed by a unified diff
    /// of its YAML as `xdsd render` writes it (proto field names, stable field order), so the
    /// diff reads as what Envoy gets, not as the keys' bytes. A key that does not parse at
    /// either revision is a warning naming it. A revision etcd compacted is refused, naming the
    /// oldest one still available.
    ///
    /// A resource directory (--resources) has no history of its own: use git diff (exit 2).
    ///
    /// Exit status: 0 shown, 1 an etcd error or a compacted revision, 2 usage error.
    Diff(Box<diff::DiffArgs>),

    /// Make an etcd prefix hold exactly what it held at revision REV again, as a new push.
    ///
    /// The state at REV is read and checked like any push (every key parses, the variant rules,
    /// the references as --references and --external-name say): a state that no longer passes
    /// is refused with its errors and nothing is written. Otherwise it is written as `xdsd push`
    /// writes a directory — one transaction guarded by the revision read, --dry-run and
    /// --confirm as for push — and recorded in the history as a rollback to REV (with
    /// --message, --author). A revision etcd compacted is refused, naming the oldest one still
    /// available.
    ///
    /// With a gated rollout running on the replicas, the rollback is a change like any other:
    /// the canaries get it first and it is promoted after the soak. --skip-canary promotes it at
    /// once (it writes the rollout record promoting the new revision): for when the canaries
    /// cannot judge it, e.g. the stable state itself is what is broken.
    ///
    /// A resource directory (--resources) has no history of its own: use git revert (exit 2).
    ///
    /// Exit status: 0 rolled back (or nothing to do), 1 a state that fails the checks, a
    /// compacted revision, a conflict with another writer, an etcd error or not confirmed
    /// (nothing written), 2 usage error.
    Rollback(Box<rollback::RollbackArgs>),
    /// Ask any xDS server what a node would be sent, print it as resource-file documents (or
    /// write it as a resource directory), then exit.
    ///
    /// Connects as --node (with --cluster, --node-metadata, and TP2 dynamic parameters from
    /// --param) over SotW (or --delta) on the aggregated service (or --per-type), subscribes to
    /// NAMEs of TYPE (none: the wildcard), and prints what the server sends as resource-file
    /// documents: "@type", "@constraints" for a variant, then the message in Envoy's proto3
    /// JSON/YAML (--output yaml: documents separated by ---; json: a list). Works against xdsd,
    /// go-control-plane, Istio, rust-control-plane or any xDS server. With --out DIR, one file
    /// per resource goes to DIR instead, such that `xdsd check --resources DIR` passes and `xdsd
    /// serve --resources DIR` serves the same resources: the way to move a control plane's config into
    /// resource files. See docs/client.md.
    ///
    /// Exit status: 0 every resource asked for received; 1 a NAME does not exist (the server
    /// said so, or did not send it within --timeout), nothing received within --timeout (the
    /// message says why: the connection, a rejected response), or another error; 2 usage
    /// error.
    Get(Box<get::GetArgs>),

    /// Stay subscribed to an xDS server and print one line per update, until Ctrl-C.
    ///
    /// The same options as `get`. Each line starts with the time (UTC), then the type and what
    /// happened: version=V added=… changed=…, removed=…, expired=… (a TTL passed),
    /// does-not-exist=NAME, rejected (a response the client NACKed, with why), connected,
    /// disconnected (it reconnects with backoff, resuming what it holds so nothing is resent).
    /// With --contents, the resources added or changed follow their line as resource-file
    /// documents.
    ///
    /// Exit status: 0 stopped by Ctrl-C, 1 an error, 2 usage error.
    Watch(Box<get::WatchArgs>),

    /// Relay an upstream xDS server to downstream clients: a caching xDS proxy (xRFC TP2).
    ///
    /// Downstream, the relay is xdsd: the same server, sessions and rules as `serve` (SotW and
    /// delta, ADS and per-type, REST and Fetch, TP2 variants, make-before-break, size caps, CSDS,
    /// the admin API of its own clients), with `serve`'s downstream options (the address, TLS
    /// and mutual TLS with node identity, limits, connection age, --ack-wait, REST polling, the
    /// admin API). Upstream, it is an xDS client of --upstream (any xDS server: xdsd, another
    /// relay, another control plane), over delta ADS by default. What a downstream client asks
    /// for (a type's wildcard, a name, a TP2 resource locator with its parameters) is subscribed
    /// upstream as such on first request and unsubscribed --linger after its last client left;
    /// --prefetch types are subscribed from the start. What the upstream sends is cached with its TP2 dynamic parameter constraints
    /// and TTL, and served with them; versions are derived from content, so two relays of one
    /// upstream answer the same versions and a client moving between them is resent nothing.
    /// A resource the relay cannot read (not of its type, its top level or name field malformed)
    /// is NACKed upstream and the last good one kept; its bytes are otherwise served as they came.
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
pub(crate) struct SourceArgs {
    /// Directory of resource files, read recursively.
    #[arg(long, value_name = "DIR", env = "XDSD_RESOURCES")]
    pub(crate) resources: PathBuf,

    #[command(flatten)]
    pub(crate) rules: RuleArgs,
}

impl SourceArgs {
    /// What each resource file may take.
    pub(crate) fn limits(&self) -> xdsd_source::Limits {
        self.rules.limits()
    }

    pub(crate) fn reference_policy(&self) -> ReferencePolicy {
        self.rules.reference_policy()
    }
}

/// The rules resources are checked by, wherever they come from: shared by every command.
#[derive(clap::Args, Debug)]
pub(crate) struct RuleArgs {
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
    pub(crate) references: References,

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
    pub(crate) external_names: Vec<(String, String)>,

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
    pub(crate) max_file_bytes: usize,
}

impl RuleArgs {
    /// What each resource file may take.
    pub(crate) fn limits(&self) -> xdsd_source::Limits {
        xdsd_source::Limits::default().max_file_bytes(self.max_file_bytes as u64)
    }
}

#[derive(clap::Args, Debug)]
pub(crate) struct CheckArgs {
    #[command(flatten)]
    pub(crate) source: SourceArgs,
}

#[derive(clap::Args, Debug)]
pub(crate) struct RenderArgs {
    #[command(flatten)]
    pub(crate) source: SourceArgs,

    /// Directory to write the files into (created if missing; must not be inside --resources).
    #[arg(long, value_name = "DIR", env = "XDSD_RENDER_OUT")]
    pub(crate) out: PathBuf,

    /// File format: pb (binary protobuf), json (proto3 JSON) or yaml. Repeatable, or
    /// comma-separated, to write several; each format has its own extension.
    #[arg(
        long,
        value_name = "FORMAT",
        default_value = "yaml",
        value_delimiter = ',',
        env = "XDSD_RENDER_FORMAT"
    )]
    pub(crate) format: Vec<OutputFormat>,
}

#[derive(clap::Args, Debug)]
pub(crate) struct ServeArgs {
    /// Directory of resource files, read recursively and watched for changes. Either this or
    /// --etcd-endpoints (with --etcd-prefix).
    #[arg(long, value_name = "DIR", env = "XDSD_RESOURCES")]
    pub(crate) resources: Option<PathBuf>,

    #[command(flatten)]
    pub(crate) rules: RuleArgs,

    #[command(flatten)]
    pub(crate) etcd: etcd_args::EtcdArgs,

    #[command(flatten)]
    pub(crate) rollout: RolloutArgs,

    #[command(flatten)]
    pub(crate) downstream: DownstreamArgs,

    #[command(flatten)]
    pub(crate) log: LogArgs,

    /// Also write the resources as DiscoveryResponse files for Envoy's filesystem subscriptions
    /// into DIR (as `xdsd render` does): at start, then after each change, only the files of
    /// the types that changed, each replaced atomically (a temporary file renamed over it);
    /// secrets, clusters and endpoints first, then, half a second later, the listeners and
    /// routes that may refer to them.
    /// Envoy's path_config_source needs watched_directory set to DIR to see the changes. A
    /// file that cannot be written is logged as an error and xdsd keeps serving; it is tried
    /// again at the next change. DIR is created if missing and must not be inside --resources.
    #[arg(long, value_name = "DIR", env = "XDSD_WRITE_FILES")]
    pub(crate) write_files: Option<PathBuf>,

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
    pub(crate) write_format: Vec<OutputFormat>,

    /// Apply a change that leaves no resources at all where some were served. Off by default:
    /// such a change is far more often a directory being deleted or replaced (rm -rf, a branch
    /// switch, an unpacked archive, rsync --delete) than an empty configuration meant for the
    /// fleet, so it is rejected like any bad change (the last good state kept, logged at ERROR)
    /// and xdsd stays ready. A source that is empty at start is served as it is, with a warning.
    #[arg(long, env = "XDSD_ALLOW_EMPTY")]
    pub(crate) allow_empty: bool,

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
    pub(crate) reload: ReloadMode,

    /// With an etcd prefix: the xDS addresses (host:port) of the other replicas, separated by
    /// commas (this replica may be among them: it is recognised). A host name stands for each of
    /// its addresses (a Kubernetes headless Service names every pod). The status page and GET
    /// /history ask each over CSDS which etcd revision it serves, and mark each change with the
    /// replicas serving it, those behind the latest change marked as such. Plaintext, or TLS
    /// verified with the system's roots for an https:// URL.
    #[arg(long, value_name = "ADDR", env = "XDSD_PEERS", value_delimiter = ',')]
    pub(crate) peers: Vec<String>,
}

/// How a long-running command (`serve`, `relay`) logs.
#[derive(clap::Args, Debug)]
pub(crate) struct LogArgs {
    /// Log level (error, warn, info, debug, trace) or a tracing filter such as
    /// "info,xdsd_core=debug". Pushes and ACKs are logged at debug, NACKs at warn.
    #[arg(long, value_name = "LEVEL", default_value = "info", env = "XDSD_LOG")]
    pub(crate) log_level: String,

    /// Log format: "text" (one line per event) or "json" (one JSON object per line, with the
    /// event's fields, for log collectors).
    #[arg(
        long,
        value_name = "FORMAT",
        default_value = "text",
        env = "XDSD_LOG_FORMAT"
    )]
    pub(crate) log_format: LogFormat,
}

impl LogArgs {
    /// Starts logging as asked.
    pub(crate) fn init(&self) -> anyhow::Result<()> {
        crate::init_logs(&self.log_level, self.log_format)
    }
}

/// What a server of xDS clients takes, `serve` and `relay` alike: where it listens, TLS and
/// mutual TLS with the node bound to the client's identity, the limits on what clients may make
/// it hold, connection age, the push order and pacing, REST polling, the allocator's release of
/// a burst's memory, and the admin API.
#[derive(clap::Args, Debug)]
pub(crate) struct DownstreamArgs {
    /// Address for the xDS gRPC server. Port 0 picks a free port (logged at start).
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "0.0.0.0:18000",
        env = "XDSD_LISTEN"
    )]
    pub(crate) listen: SocketAddr,

    #[command(flatten)]
    pub(crate) tls: Box<tls_args::TlsArgs>,

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
    pub(crate) max_request_bytes: usize,

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
    pub(crate) max_buffered_request_bytes: usize,

    /// The same bound for all connections together: a burst of clients that each send most of a
    /// large request and stop takes at most this much memory.
    #[arg(
        long,
        value_name = "BYTES",
        default_value = "512MiB",
        value_parser = parse_bytes,
        env = "XDSD_MAX_BUFFERED_REQUEST_BYTES_TOTAL"
    )]
    pub(crate) max_buffered_request_bytes_total: usize,

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
    pub(crate) max_response_bytes: usize,

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
    pub(crate) make_before_break: OnOff,

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
    pub(crate) ack_wait: Duration,

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
    pub(crate) release_memory: OnOff,

    /// Connections open at once; a new connection over the limit is closed at once (logged once
    /// per run of refusals). The default allows five per proxy of a 10,000-proxy fleet.
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_MAX_CONNECTIONS,
        env = "XDSD_MAX_CONNECTIONS"
    )]
    pub(crate) max_connections: usize,

    /// Streams (and calls) one HTTP/2 connection may have open at once; a client's further
    /// streams wait until one ends. An Envoy opens one (ADS) or one per type.
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_MAX_STREAMS_PER_CONNECTION,
        env = "XDSD_MAX_STREAMS_PER_CONNECTION"
    )]
    pub(crate) max_streams_per_connection: u32,

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
    pub(crate) preface_timeout: Duration,

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
    pub(crate) max_connection_age: Option<Duration>,

    /// How long a connection past --max-connection-age keeps its open streams (xDS streams
    /// last as long as their client, so this is when they end).
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "10s",
        value_parser = parse_duration,
        env = "XDSD_MAX_CONNECTION_AGE_GRACE"
    )]
    pub(crate) max_connection_age_grace: Duration,

    /// The resource names one stream may subscribe to, all types together; more ends that
    /// stream with RESOURCE_EXHAUSTED. The default is twice an Envoy with 100,000 EDS clusters;
    /// each name costs the stream about 100 bytes.
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_MAX_NAMES,
        env = "XDSD_MAX_NAMES_PER_STREAM"
    )]
    pub(crate) max_names_per_stream: usize,

    /// The resource names the streams of one connection may subscribe to together; a request
    /// over it ends its stream with RESOURCE_EXHAUSTED. The default is 20 streams at
    /// --max-names-per-stream: room for clients that multiplex many streams on a connection.
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_MAX_NAMES_PER_CONNECTION,
        env = "XDSD_MAX_NAMES_PER_CONNECTION"
    )]
    pub(crate) max_names_per_connection: usize,

    /// The resource names all streams may subscribe to together (10,000 proxies with 5,000 names
    /// each by default); a request over it ends its stream with RESOURCE_EXHAUSTED.
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_MAX_NAMES_TOTAL,
        env = "XDSD_MAX_NAMES_TOTAL"
    )]
    pub(crate) max_names_total: usize,

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
    pub(crate) rest_hold: Duration,

    /// REST-JSON polling: how many polls are held at once; the others are answered at once.
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_MAX_HELD_POLLS,
        env = "XDSD_MAX_HELD_POLLS"
    )]
    pub(crate) max_held_polls: usize,

    /// Address of the admin HTTP API (GET /healthz, /readyz, /clients, /config?node=ID, with
    /// &contents=1 the resources as proto3 JSON, /metrics, on an etcd prefix /history (the rows
    /// of `xdsd history --output json`); with --canary GET /rollout and POST
    /// /rollout/promote, /rollout/abort; see docs/operating.md), or "off". A relay's is that of
    /// its own downstream clients.
    /// Loopback by default: /clients shows every client's node.
    /// Port 0 picks a free port (logged at start).
    #[arg(
        long,
        value_name = "ADDR|off",
        default_value = admin::DEFAULT_ADMIN_LISTEN,
        value_parser = admin::parse_admin_listen,
        env = "XDSD_ADMIN_LISTEN"
    )]
    pub(crate) admin_listen: admin::AdminListen,

    /// Serve the admin API over TLS with the certificate and key of --tls-cert/--tls-key
    /// (read again when they change, as for the xDS port); with --client-ca, its clients must
    /// present a certificate that CA signed. Without it the admin API is plaintext HTTP, and a
    /// non-loopback --admin-listen logs a warning.
    #[arg(long, requires = "tls_cert", env = "XDSD_ADMIN_TLS")]
    pub(crate) admin_tls: bool,
}

/// Gated rollouts: `--canary`, `--canary-min`, `--canary-soak`.
#[derive(clap::Args, Debug)]
pub(crate) struct RolloutArgs {
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
    pub(crate) canary: Vec<Selector>,

    /// Canary clients that must have ACKed every type a change touched before it is promoted.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        env = "XDSD_CANARY_MIN",
        requires = "canary"
    )]
    pub(crate) canary_min: usize,

    /// How long a change stays with the canaries, with no NACK, before it is promoted.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "60s",
        value_parser = parse_duration,
        env = "XDSD_CANARY_SOAK",
        requires = "canary"
    )]
    pub(crate) canary_soak: Duration,
}

impl RolloutArgs {
    /// The rollout of `store`'s changes, when a cohort is given.
    pub(crate) fn rollout(&self, store: &Store) -> Option<Arc<Rollout>> {
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
pub(crate) fn parse_selector(text: &str) -> Result<Selector, String> {
    Selector::parse(text)
}

/// `--reload`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReloadMode {
    Incremental,
    Full,
}

/// `--make-before-break`, `--release-memory`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnOff {
    On,
    Off,
}

/// `--format`, `--write-format`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OutputFormat {
    Pb,
    Json,
    Yaml,
}

impl OutputFormat {
    pub(crate) fn file_format(self) -> FileFormat {
        match self {
            OutputFormat::Pb => FileFormat::Pb,
            OutputFormat::Json => FileFormat::Json,
            OutputFormat::Yaml => FileFormat::Yaml,
        }
    }
}

pub(crate) fn file_formats(formats: &[OutputFormat]) -> Vec<FileFormat> {
    formats.iter().map(|f| f.file_format()).collect()
}

/// `--references`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum References {
    Strict,
    Warn,
    Off,
}

impl RuleArgs {
    pub(crate) fn reference_policy(&self) -> ReferencePolicy {
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
pub(crate) fn parse_external_name(value: &str) -> Result<(String, String), String> {
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
pub(crate) fn parse_bytes(text: &str) -> Result<usize, String> {
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
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
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

pub(crate) fn request_bytes(text: &str) -> Result<usize, String> {
    let bytes = parse_bytes(text)?;
    if bytes < MIN_MAX_REQUEST_BYTES {
        return Err(format!("at least {MIN_MAX_REQUEST_BYTES} bytes (64KiB)"));
    }
    Ok(bytes)
}

/// `--max-response-bytes`.
pub(crate) fn response_bytes(text: &str) -> Result<usize, String> {
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
