//! `xdsd get`'s and `xdsd watch`'s arguments (clap), and the parsing of `--server-for`,
//! `--param-for` (the relay's `--upstream-for` and `--param-for` too) and TYPE.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use xdsd_client::{types, Options, Params};
use xdsd_source::FileFormat;

/// The options `get` and `watch` share; each has an environment variable, `XDSD_GET_*` for
/// both commands (as `status` has `XDSD_STATUS_*`).
#[derive(clap::Args, Debug)]
pub(crate) struct ClientArgs {
    /// The resource type: listener, route, cluster, endpoints, secret, runtime, scoped-route,
    /// virtual-host, extension-config (or a plural, or lds, rds, cds, eds, sds, rtds, ecds), or a
    /// type URL. get: `all` or none for every listener and cluster and what they reference
    /// (routes, endpoints, secrets, transitively): what `--out DIR` needs for `xdsd check` to
    /// pass on DIR.
    #[arg(value_name = "TYPE", value_parser = type_url)]
    pub(crate) kind: Option<String>,

    /// The resources to ask for; none: every resource of TYPE (the wildcard).
    #[arg(value_name = "NAME")]
    pub(crate) names: Vec<String>,

    /// The xDS server: host:port, or an http:// or https:// URL. Several, comma-separated or
    /// repeated: replicas of one control plane, the next tried when one cannot be reached or is
    /// lost (resuming without a resend).
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "127.0.0.1:18000",
        env = "XDSD_GET_SERVER",
        value_delimiter = ','
    )]
    pub(crate) server: Vec<String>,

    /// Federation (xRFC TP1 authorities): the names `xdstp://AUTHORITY/...` (and glob
    /// collections) of AUTHORITY are asked of ADDR, every other name (and the wildcard) of
    /// --server. Repeatable, comma-separated in the variable; an AUTHORITY given several ADDRs
    /// has them as replicas, tried in turn. AUTHORITY is compared canonically (xRFC TP1).
    #[arg(
        long = "server-for",
        value_name = "AUTHORITY=ADDR",
        value_parser = key_value,
        env = "XDSD_GET_SERVER_FOR",
        value_delimiter = ','
    )]
    pub(crate) server_for: Vec<(String, String)>,

    /// The node id to ask as.
    #[arg(
        long,
        value_name = "ID",
        default_value = "xdsd-get",
        env = "XDSD_GET_NODE"
    )]
    pub(crate) node: String,

    /// The node's cluster.
    #[arg(long, value_name = "CLUSTER", env = "XDSD_GET_CLUSTER")]
    pub(crate) cluster: Option<String>,

    /// A string field of the node's metadata, for servers that choose by it (xdsd matches
    /// variants against these). Repeatable (the variable holds one).
    #[arg(
        long = "node-metadata",
        value_name = "KEY=VALUE",
        value_parser = key_value,
        env = "XDSD_GET_NODE_METADATA"
    )]
    pub(crate) node_metadata: Vec<(String, String)>,

    /// A dynamic parameter (xRFC TP2): sent in the node's dynamic_parameters for TYPE, and with
    /// each NAME as a resource locator. Repeatable (the variable holds one). A variant comes with its "@constraints".
    #[arg(
        long = "param",
        value_name = "KEY=VALUE",
        value_parser = key_value,
        env = "XDSD_GET_PARAM"
    )]
    pub(crate) params: Vec<(String, String)>,

    /// xRFC TP2's per-authority parameters: a dynamic parameter of AUTHORITY's names (the
    /// `xdstp://AUTHORITY/...` names and glob collections), in place of --param's for them.
    /// AUTHORITY's names are asked on a connection of their own (to its --server-for ADDR, else
    /// to --server) whose node presents AUTHORITY's parameters for every type, and each of its
    /// NAMEs is a resource locator with them. Repeatable (the variable holds one); AUTHORITY
    /// ends at the last `:` before KEY (`xds.example:443:env=prod`).
    #[arg(
        long = "param-for",
        value_name = "AUTHORITY:KEY=VALUE",
        value_parser = authority_key_value,
        env = "XDSD_GET_PARAM_FOR"
    )]
    pub(crate) param_for: Vec<(String, (String, String))>,

    /// Speak incremental (delta) xDS rather than State of the World.
    #[arg(long, env = "XDSD_GET_DELTA")]
    pub(crate) delta: bool,

    /// Use TYPE's own service rather than the aggregated one (ADS).
    #[arg(long, env = "XDSD_GET_PER_TYPE")]
    pub(crate) per_type: bool,

    /// How resources are printed: yaml or json (resource-file documents).
    #[arg(
        long,
        value_name = "FORMAT",
        value_enum,
        default_value = "yaml",
        env = "XDSD_GET_OUTPUT"
    )]
    pub(crate) output: Output,

    /// get: how long to wait for the resources (a NAME not sent by then does not exist; a server
    /// that cannot be connected to fails at once); watch: how long a NAME may go unanswered
    /// before it is reported as not existing (watch keeps reconnecting).
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "10s",
        value_parser = crate::parse_duration,
        env = "XDSD_GET_TIMEOUT"
    )]
    pub(crate) timeout: Duration,

    /// PEM CA certificate(s) to verify the server's certificate with: connects over TLS.
    #[arg(long, value_name = "FILE", env = "XDSD_GET_TLS_CA")]
    pub(crate) tls_ca: Option<PathBuf>,

    /// PEM client certificate for mutual TLS (with --tls-key).
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_key",
        env = "XDSD_GET_TLS_CERT"
    )]
    pub(crate) tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert.
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_cert",
        env = "XDSD_GET_TLS_KEY"
    )]
    pub(crate) tls_key: Option<PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Output {
    Yaml,
    Json,
}

impl Output {
    pub(crate) fn format(self) -> FileFormat {
        match self {
            Output::Yaml => FileFormat::Yaml,
            Output::Json => FileFormat::Json,
        }
    }
}

#[derive(clap::Args, Debug)]
pub(crate) struct GetArgs {
    #[command(flatten)]
    pub(crate) client: ClientArgs,

    /// Write one resource file per resource into DIR (created if missing) rather than print
    /// them. With no TYPE (or all): every listener and cluster and what they reference, so that
    /// `xdsd check --resources DIR` passes on it and `xdsd serve --resources DIR` serves the same
    /// resources.
    #[arg(long, value_name = "DIR", env = "XDSD_GET_OUT")]
    pub(crate) out: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub(crate) struct WatchArgs {
    #[command(flatten)]
    pub(crate) client: ClientArgs,

    /// Print the resources added or changed after each update line.
    #[arg(long, env = "XDSD_WATCH_CONTENTS")]
    pub(crate) contents: bool,
}

/// TYPE `all`: the listeners and clusters and what they reference.
pub(crate) const ALL: &str = "all";

/// TYPE as a type URL, or [`ALL`] (a usage error, status 2, when it is neither).
pub(crate) fn type_url(text: &str) -> Result<String, String> {
    if text.eq_ignore_ascii_case(ALL) {
        return Ok(ALL.to_owned());
    }
    types::resolve(text).ok_or_else(|| {
        let aliases: Vec<&str> = types::ALIASES.iter().map(|(a, _)| *a).collect();
        format!("one of {}, or a type URL (get: or all)", aliases.join(", "))
    })
}

/// `options` with each authority of the AUTHORITY=ADDR `pairs` (`--server-for`, the relay's
/// `--upstream-for`; an authority given several times has each of its addresses, in order)
/// asked of its own servers.
pub(crate) fn with_authorities(mut options: Options, pairs: &[(String, String)]) -> Options {
    let mut authorities: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (authority, addr) in pairs {
        authorities
            .entry(authority.as_str())
            .or_default()
            .push(addr.clone());
    }
    for (authority, servers) in authorities {
        options = options.with_authority(authority, servers);
    }
    options
}

/// `options` with each authority of the AUTHORITY:KEY=VALUE `params` (`--param-for`)
/// presenting its own TP2 parameter set ([`Options::with_authority_params`]).
pub(crate) fn with_authority_params(
    mut options: Options,
    params: &[(String, (String, String))],
) -> Options {
    for (authority, set) in authority_param_sets(params) {
        options = options.with_authority_params(authority, set);
    }
    options
}

/// The parameter set of each authority of the AUTHORITY:KEY=VALUE `params` (`--param-for`,
/// the relay's too).
pub(crate) fn authority_param_sets(
    params: &[(String, (String, String))],
) -> BTreeMap<String, Params> {
    let mut sets: BTreeMap<String, Params> = BTreeMap::new();
    for (authority, (key, value)) in params {
        sets.entry(authority.clone())
            .or_default()
            .insert(key.clone(), value.clone());
    }
    sets
}

/// `AUTHORITY:KEY=VALUE`: the value after the first `=`, the authority before the last `:`
/// ahead of it (an authority may carry a port).
pub(crate) fn authority_key_value(text: &str) -> Result<(String, (String, String)), String> {
    let bad = || format!("{text:?} is not AUTHORITY:KEY=VALUE");
    let (left, value) = text.split_once('=').ok_or_else(bad)?;
    let (authority, key) = left.rsplit_once(':').ok_or_else(bad)?;
    if key.is_empty() {
        return Err(bad());
    }
    Ok((authority.to_owned(), (key.to_owned(), value.to_owned())))
}

pub(crate) fn key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("{text:?} is not KEY=VALUE")),
    }
}
