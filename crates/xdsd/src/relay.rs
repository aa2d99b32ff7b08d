//! `xdsd relay`: a caching xDS proxy in front of any xDS server (the `xdsd-relay` crate as the
//! source of the store that an ordinary xdsd server serves).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use envoy_types::pb::envoy::config::core::v3::Node;
use tracing::info;
use xdsd_core::source::{Feed, Source};
use xdsd_core::store::{ReferencePolicy, Store};
use xdsd_core::Metrics;
use xdsd_core::XdsServer;
use xdsd_relay::{relay, AggregateBy, RelayOptions};
use xdsd_source::Descriptors;

use crate::{parse_duration, serve_downstream};

/// `xdsd relay`'s arguments.
#[derive(clap::Args, Debug)]
pub(crate) struct RelayArgs {
    /// The upstream xDS server: host:port, http://host:port or https://host:port (TLS with the
    /// system's roots, or --upstream-tls-ca). Several, comma-separated or repeated: replicas of
    /// one control plane, the next tried when one is lost, resuming without a resend.
    #[arg(
        long,
        value_name = "ADDR",
        env = "XDSD_UPSTREAM",
        value_delimiter = ',',
        required = true
    )]
    upstream: Vec<String>,

    /// Federation (xRFC TP1 authorities, gRFC A47): the names `xdstp://AUTHORITY/...` (and glob
    /// collections) of AUTHORITY are subscribed upstream of ADDR, every other name (and the
    /// wildcard) of --upstream, so that one relay serves its clients the resources of several
    /// control planes. Repeatable, comma-separated in the variable; an AUTHORITY given several
    /// ADDRs has them as replicas, tried in turn. AUTHORITY is compared as the canonical name
    /// writes it. The --upstream-tls-* options apply to every upstream.
    #[arg(
        long = "upstream-for",
        value_name = "AUTHORITY=ADDR",
        value_parser = crate::get::key_value,
        env = "XDSD_UPSTREAM_FOR",
        value_delimiter = ','
    )]
    upstream_for: Vec<(String, String)>,

    /// xRFC TP2's per-authority parameters ("Client Configuration"): a dynamic parameter of
    /// AUTHORITY's names (`xdstp://AUTHORITY/...` names and glob collections). Each client's
    /// plain name of AUTHORITY is fetched upstream on a stream presenting AUTHORITY's
    /// parameters, in place of the client's own (its node's dynamic parameters, metadata,
    /// cluster), and served to the client as the variant they select: every client of the relay
    /// is given the same variant of AUTHORITY's names. A client's resource locator keeps its own
    /// parameters; the names of other authorities, and names that are not xdstp, the client's.
    /// Repeatable, comma-separated in the variable; AUTHORITY ends at the last `:` before KEY
    /// (`xds.example:443:env=prod`) and is compared as the canonical name writes it.
    #[arg(
        long = "param-for",
        value_name = "AUTHORITY:KEY=VALUE",
        value_parser = crate::get::authority_key_value,
        env = "XDSD_PARAM_FOR",
        value_delimiter = ','
    )]
    param_for: Vec<(String, (String, String))>,

    /// PEM CA certificate(s) to verify the upstream's certificate with (TLS to the upstream).
    #[arg(long, value_name = "FILE", env = "XDSD_UPSTREAM_TLS_CA")]
    upstream_tls_ca: Option<PathBuf>,

    /// PEM certificate chain the relay presents to the upstream (mutual TLS), with
    /// --upstream-tls-key.
    #[arg(
        long,
        value_name = "FILE",
        requires = "upstream_tls_key",
        env = "XDSD_UPSTREAM_TLS_CERT"
    )]
    upstream_tls_cert: Option<PathBuf>,

    /// PEM private key of --upstream-tls-cert.
    #[arg(
        long,
        value_name = "FILE",
        requires = "upstream_tls_cert",
        env = "XDSD_UPSTREAM_TLS_KEY"
    )]
    upstream_tls_key: Option<PathBuf>,

    /// The node id the relay presents upstream (default: xdsd-relay-<hostname>).
    #[arg(long, value_name = "ID", env = "XDSD_UPSTREAM_NODE_ID")]
    upstream_node_id: Option<String>,

    /// The protocol spoken upstream, always over ADS: delta (incremental: a change costs what
    /// changed, a reconnect resends nothing) or sotw, for an upstream that only speaks State of
    /// the World.
    #[arg(
        long,
        value_name = "delta|sotw",
        default_value = "delta",
        env = "XDSD_UPSTREAM_PROTOCOL"
    )]
    upstream_protocol: UpstreamProtocol,

    /// How downstream clients share upstream streams. Every upstream stream presents one
    /// parameter set as its node's dynamic_parameters (xRFC TP2), derived from the clients as
    /// the server derives it (their dynamic parameters for the type, else the top-level string
    /// fields of their metadata and their cluster), so that each client gets the variants its
    /// parameters select. none: one stream per distinct parameter set, presenting the relay's
    /// node; a name whose variants' keys the relay knows is fetched with the client's parameters
    /// of those keys only, so clients that differ in keys no constraint reads (a pod name in
    /// the metadata) share a stream. cluster (or node): one per distinct node cluster (or node id) and parameter set,
    /// presenting the first such node seen (its cluster, metadata, locality), for an upstream
    /// that varies what it serves by node without TP2 constraints; each cluster (or node) is
    /// then served from a store of its own, never another's content, and a stream whose first
    /// request carries no node is refused (INVALID_ARGUMENT).
    #[arg(
        long,
        value_name = "none|cluster|node",
        default_value = "none",
        env = "XDSD_AGGREGATE_BY"
    )]
    aggregate_by: AggregateBy,

    /// Every key the upstream's TP2 constraints read, comma-separated, when you know them (an
    /// upstream under your control): "" (an empty value) says it reads none. With
    /// --aggregate-by none a client's wildcards, glob collections and names the relay has not
    /// received yet are then fetched with its parameters of these keys only, so clients that
    /// differ in other parameters (each Envoy's node cluster, a pod name in the metadata)
    /// share one upstream stream and are answered from what it holds; unset (the default), a
    /// client's wildcard is fetched with its whole parameter set, on a stream of its own
    /// (docs/relay.md, "Declared keys"). A key the upstream's constraints read left out
    /// makes the relay fetch without it, and its clients may be sent a variant that is not
    /// theirs: a variant received constraining such a key is logged (ERROR).
    #[arg(long, value_name = "KEYS", env = "XDSD_UPSTREAM_KEYS")]
    upstream_keys: Option<String>,

    /// How long an upstream subscription outlives its last downstream client (e.g. 30s, 5m),
    /// so that a client that reconnects or flaps does not churn the upstream.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "30s",
        value_parser = parse_duration,
        env = "XDSD_LINGER"
    )]
    linger: Duration,

    /// Types subscribed upstream from the start and for good (on the shared stream of clients
    /// without parameters — no string metadata, no cluster; names as `xdsd get` takes them:
    /// listeners, clusters, routes, endpoints, secrets, runtime, or type URLs; comma-separated,
    /// or "none"): such a client's first request for them is answered from the cache, not while
    /// the relay waits for the upstream, and the relay is ready once the upstream answered them.
    /// So is a client with parameters, for the names whose variants constrain none of its keys
    /// (the relay narrows a name's parameters to those its variants constrain), and for its
    /// wildcards when --upstream-keys names none of its keys. Other types are
    /// subscribed when a client first asks. Only with --aggregate-by none: the other groupings
    /// have no stream before their first client.
    #[arg(
        long,
        value_name = "TYPES",
        default_value = "listeners,clusters,routes,endpoints",
        value_delimiter = ',',
        env = "XDSD_PREFETCH"
    )]
    prefetch: Vec<String>,

    /// How long the relay waits at start for the upstream to answer the prefetched types before
    /// it serves what it has (not ready, /readyz 503, until the upstream answers); and how long a
    /// name or type a client asks for that the upstream has not answered yet is held pending,
    /// its clients not told that it does not exist, before they are answered with what the
    /// relay has (the upstream streams' does-not-exist timer too, and the longest a wildcard
    /// waits for an upstream response that can be told to answer it: docs/relay.md).
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "10s",
        value_parser = parse_duration,
        env = "XDSD_UPSTREAM_WAIT"
    )]
    upstream_wait: Duration,

    /// How many names (or types) the relay may hold pending at once, its clients waiting for
    /// the upstream's answer rather than told the names do not exist: past it, a name a client
    /// asks for is answered as if the relay had asked nothing (logged at WARN). Each costs a
    /// few hundred bytes while it waits; raise it for clients that subscribe more names at once.
    #[arg(
        long,
        value_name = "N",
        default_value_t = xdsd_relay::DEFAULT_MAX_PENDING,
        env = "XDSD_MAX_PENDING"
    )]
    max_pending: usize,

    // The downstream side, `serve`'s own options: the xDS address, TLS, limits, pacing, REST
    // polling, the admin API (of the relay's own downstream clients).
    #[command(flatten)]
    downstream: crate::DownstreamArgs,

    // Logging, as `serve`'s.
    #[command(flatten)]
    pub(crate) log: crate::LogArgs,
}

/// `--upstream-protocol`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum UpstreamProtocol {
    Delta,
    Sotw,
}

impl RelayArgs {
    fn options(&self) -> anyhow::Result<RelayOptions> {
        let mut upstream = crate::get::with_authorities(
            xdsd_client::Options::with_servers(self.upstream.iter().cloned())
                .context("--upstream names no server")?,
            &self.upstream_for,
        );
        if self.upstream_tls_ca.is_some() || self.upstream_tls_cert.is_some() {
            let read = |p: &PathBuf, flag: &str| {
                std::fs::read(p).with_context(|| format!("{flag} {}", p.display()))
            };
            let ca_pem = self
                .upstream_tls_ca
                .as_ref()
                .map(|p| read(p, "--upstream-tls-ca"))
                .transpose()?;
            let identity = match (&self.upstream_tls_cert, &self.upstream_tls_key) {
                (Some(c), Some(k)) => Some((
                    read(c, "--upstream-tls-cert")?,
                    read(k, "--upstream-tls-key")?,
                )),
                _ => None,
            };
            upstream.tls = Some(xdsd_client::Tls {
                ca_pem,
                identity,
                domain: None,
            });
        }
        let node = Node {
            id: self
                .upstream_node_id
                .clone()
                .unwrap_or_else(|| format!("xdsd-relay-{}", hostname())),
            user_agent_name: "xdsd-relay".into(),
            user_agent_version_type: Some(
                envoy_types::pb::envoy::config::core::v3::node::UserAgentVersionType::UserAgentVersion(
                    env!("CARGO_PKG_VERSION").into(),
                ),
            ),
            ..Default::default()
        };
        let mut prefetch = Vec::new();
        for name in &self.prefetch {
            if name.is_empty() || name.eq_ignore_ascii_case("none") {
                continue;
            }
            let url = xdsd_client::types::resolve(name)
                .with_context(|| format!("--prefetch: {name:?} is not a type"))?;
            prefetch.push(url);
        }
        let mut options = RelayOptions::new(upstream, node);
        options.flavor = match self.upstream_protocol {
            UpstreamProtocol::Delta => xdsd_client::Flavor::Delta,
            UpstreamProtocol::Sotw => xdsd_client::Flavor::Sotw,
        };
        options.aggregate_by = self.aggregate_by;
        options.linger = self.linger;
        // The shared stream serves only --aggregate-by none.
        if self.aggregate_by == AggregateBy::None {
            options.prefetch = prefetch;
        }
        options.first_wait = self.upstream_wait;
        options.max_pending = self.max_pending;
        options.authority_params = crate::get::authority_param_sets(&self.param_for);
        if let Some(keys) = &self.upstream_keys {
            if self.aggregate_by != AggregateBy::None {
                anyhow::bail!(
                    "--upstream-keys applies to --aggregate-by none only (the other groupings present each node upstream and narrow nothing)"
                );
            }
            options.upstream_keys = Some(upstream_keys(keys)?);
        }
        Ok(options)
    }
}

/// `--upstream-keys`' keys: comma-separated, none for an empty value.
fn upstream_keys(text: &str) -> anyhow::Result<std::collections::BTreeSet<String>> {
    let mut keys = std::collections::BTreeSet::new();
    for key in text.split(',').map(str::trim) {
        if key.is_empty() {
            if text.trim().is_empty() {
                continue;
            }
            anyhow::bail!("--upstream-keys {text:?}: an empty key");
        }
        keys.insert(key.to_owned());
    }
    Ok(keys)
}

/// `--param-for`'s sets as the server's parameter sets.
fn server_authority_params(
    param_for: &[(String, (String, String))],
) -> std::collections::BTreeMap<String, xdsd_core::params::ParamSet> {
    crate::get::authority_param_sets(param_for)
        .into_iter()
        .map(|(authority, set)| {
            let set = set.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            (authority, set)
        })
        .collect()
}

/// This machine's name, for the default node id.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// `xdsd relay`: logs, the runtime, the relay; the exit status.
pub(crate) fn main(args: RelayArgs) -> std::process::ExitCode {
    if let Err(e) = args.log.init() {
        eprintln!("xdsd: {e:#}");
        return std::process::ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{}", crate::error_chain(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// Runs the relay until SIGTERM or SIGINT.
async fn run(args: RelayArgs) -> anyhow::Result<()> {
    let listeners = args.downstream.bind().await?;
    let relay_options = args.options()?;

    // The relay holds what its clients asked for, not a whole graph: references are the
    // upstream's business.
    let store = Store::with_reference_policy(ReferencePolicy::off());
    let metrics = Metrics::new();
    crate::memory::add_metrics(&metrics);
    // An upstream that removes everything is followed: the relay mirrors it.
    let feed = Feed::new(store.clone())
        .metrics(metrics.clone())
        .allow_empty(true);
    let upstream = relay_options.upstream.clone();
    let (mut source, observer, relay_metrics) = relay(relay_options);
    // Which of --upstream A,B the upstream streams are on: xdsd_relay_upstream{address}.
    relay_metrics.follow_upstream(&upstream);
    feed.first_load(&mut source)
        .await
        .with_context(|| format!("cannot start the relay of {}", source.describe()))?;
    args.downstream.start_releasing_memory();

    let addr = listeners
        .0
        .local_addr()
        .context("reading the bound address")?;
    info!(upstream = %args.upstream.join(","), "xDS gRPC relay listening on {addr}");
    args.downstream.tls.log(addr);
    // The server matches an authority's names with the set the relay fetches them with.
    let options = args
        .downstream
        .server_options()
        .authority_params(server_authority_params(&args.param_for));
    let descriptors = Descriptors::envoy().context("loading the Envoy proto descriptors")?;
    // The observer also picks each client's store: with `--aggregate-by cluster|node`, its
    // group's own.
    let observer = Arc::new(observer);
    let server = XdsServer::builder(store)
        .metrics(metrics)
        .observer(observer.clone())
        .store_picker(observer);
    let downstream = args.downstream.downstream(listeners, None, Vec::new());
    let source: Box<dyn xdsd_core::DynSource> = Box::new(source);
    serve_downstream(
        server,
        options,
        &descriptors,
        &args.downstream.tls,
        downstream,
        feed,
        source,
    )
    .await?;
    info!(
        upstream_connected = relay_metrics.upstream_connected(),
        cache_entries = relay_metrics.cache_entries(),
        "stopped"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser;

    use crate::{Cli, Command, OnOff};

    /// `serve`'s downstream options, each with a value other than its default.
    const DOWNSTREAM: &[&str] = &[
        "--listen",
        "127.0.0.1:0",
        "--max-names-per-stream",
        "7",
        "--max-names-per-connection",
        "8",
        "--max-names-total",
        "9",
        "--max-streams-per-connection",
        "10",
        "--max-connection-age",
        "30m",
        "--max-connection-age-grace",
        "3s",
        "--preface-timeout",
        "2s",
        "--max-buffered-request-bytes",
        "1MiB",
        "--rest-hold",
        "1s",
        "--max-held-polls",
        "11",
        "--ack-wait",
        "0",
        "--make-before-break",
        "off",
        "--release-memory",
        "off",
    ];

    #[test]
    fn relay_takes_every_downstream_option_of_serve_through_the_same_struct() {
        let parse = |command: &[&str]| {
            let args = command.iter().chain(DOWNSTREAM);
            match Cli::try_parse_from(args).map(|cli| cli.command) {
                Ok(Command::Relay(relay)) => relay.downstream,
                Ok(Command::Serve(serve)) => serve.downstream,
                Ok(other) => panic!("parsed as another command: {other:?}"),
                Err(e) => panic!("{command:?} does not parse: {e}"),
            }
        };
        let relay = parse(&["xdsd", "relay", "--upstream", "127.0.0.1:1"]);
        let serve = parse(&["xdsd", "serve", "--resources", "dir"]);
        for args in [relay, serve] {
            assert_eq!(args.max_names_per_stream, 7);
            assert_eq!(args.max_names_per_connection, 8);
            assert_eq!(args.max_names_total, 9);
            assert_eq!(args.max_streams_per_connection, 10);
            assert_eq!(args.max_connection_age, Some(Duration::from_secs(1800)));
            assert_eq!(args.max_connection_age_grace, Duration::from_secs(3));
            assert_eq!(args.preface_timeout, Duration::from_secs(2));
            assert_eq!(args.max_buffered_request_bytes, 1024 * 1024);
            assert_eq!(args.rest_hold, Duration::from_secs(1));
            assert_eq!(args.max_held_polls, 11);
            assert_eq!(args.ack_wait, Duration::ZERO);
            assert_eq!(args.make_before_break, OnOff::Off);
            assert_eq!(args.release_memory, OnOff::Off);
        }
    }

    #[test]
    fn relay_takes_several_upstreams_tried_in_turn() {
        let Ok(Command::Relay(relay)) = Cli::try_parse_from([
            "xdsd",
            "relay",
            "--upstream",
            "10.0.0.1:18000,10.0.0.2:18000",
            "--upstream",
            "10.0.0.3:18000",
        ])
        .map(|cli| cli.command) else {
            panic!("parses as relay");
        };
        let upstream = relay.options().expect("options").upstream;
        assert_eq!(
            upstream.servers().collect::<Vec<_>>(),
            ["10.0.0.1:18000", "10.0.0.2:18000", "10.0.0.3:18000"]
        );
    }

    /// `xdsd relay` with `extra` after `--upstream`: its options, or why not.
    fn relay_options(extra: &[&str]) -> anyhow::Result<xdsd_relay::RelayOptions> {
        let mut argv = vec!["xdsd", "relay", "--upstream", "10.0.0.1:18000"];
        argv.extend_from_slice(extra);
        let Ok(Command::Relay(relay)) = Cli::try_parse_from(argv).map(|cli| cli.command) else {
            panic!("parses as relay");
        };
        relay.options()
    }

    #[test]
    fn relay_upstream_keys_are_declared_none_when_empty_and_refused_with_a_grouping_by_node() {
        let keys = |extra: &[&str]| relay_options(extra).map(|o| o.upstream_keys);
        assert_eq!(keys(&[]).expect("options"), None, "not declared by default");
        assert_eq!(
            keys(&["--upstream-keys="]).expect("options"),
            Some(Default::default()),
            "an empty value: the upstream reads no key"
        );
        assert_eq!(
            keys(&["--upstream-keys", "env, version,env"]).expect("options"),
            Some(["env".to_owned(), "version".to_owned()].into())
        );
        let empty = keys(&["--upstream-keys", "env,,version"]).expect_err("an empty key");
        assert!(format!("{empty:#}").contains("an empty key"), "{empty:#}");
        let by_node = keys(&["--upstream-keys", "env", "--aggregate-by", "node"])
            .expect_err("refused with --aggregate-by node");
        assert!(
            format!("{by_node:#}").contains("--aggregate-by none only"),
            "{by_node:#}"
        );
    }

    #[test]
    fn relay_upstream_for_maps_each_authority_to_its_servers() {
        let Ok(Command::Relay(relay)) = Cli::try_parse_from([
            "xdsd",
            "relay",
            "--upstream",
            "10.0.0.1:18000",
            "--upstream-for",
            "a.example=10.0.0.2:18000",
            "--upstream-for",
            "b.example=10.0.0.3:18000,a.example=10.0.0.4:18000",
        ])
        .map(|cli| cli.command) else {
            panic!("parses as relay");
        };
        let upstream = relay.options().expect("options").upstream;
        assert_eq!(upstream.servers().collect::<Vec<_>>(), ["10.0.0.1:18000"]);
        assert_eq!(
            upstream.authorities,
            [
                (
                    "a.example".to_owned(),
                    vec!["10.0.0.2:18000".to_owned(), "10.0.0.4:18000".to_owned()]
                ),
                ("b.example".to_owned(), vec!["10.0.0.3:18000".to_owned()]),
            ]
            .into()
        );
        assert!(Cli::try_parse_from([
            "xdsd",
            "relay",
            "--upstream",
            "10.0.0.1:18000",
            "--upstream-for",
            "10.0.0.2:18000",
        ])
        .is_err());
    }

    #[test]
    fn relay_param_for_gives_each_authority_its_set_for_the_relay_and_its_server() {
        let Ok(Command::Relay(relay)) = Cli::try_parse_from([
            "xdsd",
            "relay",
            "--upstream",
            "10.0.0.1:18000",
            "--param-for",
            "a.example:env=prod",
            "--param-for",
            "b.example:443:zone=z1,a.example:tier=gold",
        ])
        .map(|cli| cli.command) else {
            panic!("parses as relay");
        };
        let sets = relay.options().expect("options").authority_params;
        let set = |pairs: &[(&str, &str)]| -> xdsd_client::Params {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(
            sets,
            [
                (
                    "a.example".to_owned(),
                    set(&[("env", "prod"), ("tier", "gold")])
                ),
                ("b.example:443".to_owned(), set(&[("zone", "z1")])),
            ]
            .into()
        );
        let server = super::server_authority_params(&relay.param_for);
        assert_eq!(server.len(), 2);
        assert_eq!(
            server["a.example"],
            [("env", "prod"), ("tier", "gold")].into_iter().collect()
        );
        assert!(Cli::try_parse_from([
            "xdsd",
            "relay",
            "--upstream",
            "10.0.0.1:18000",
            "--param-for",
            "env=prod",
        ])
        .is_err());
    }

    #[test]
    fn relay_takes_downstream_tls_with_node_identity_and_the_admin_api_over_tls() {
        let args = [
            "xdsd",
            "relay",
            "--upstream",
            "127.0.0.1:1",
            "--tls-cert",
            "cert.pem",
            "--tls-key",
            "key.pem",
            "--client-ca",
            "ca.pem",
            "--node-identity",
            "spiffe://example/*=cluster:edge",
            "--admin-tls",
        ];
        let Ok(Command::Relay(relay)) = Cli::try_parse_from(args).map(|cli| cli.command) else {
            panic!("relay parses");
        };
        assert!(relay.downstream.admin_tls);
        assert!(relay.downstream.tls.client_ca.is_some());
    }
}
