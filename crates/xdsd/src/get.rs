//! `xdsd get` and `xdsd watch`: an xDS client (the `xdsd-client` crate) that asks any xDS server
//! what a node would be sent, prints it as resource-file documents (through the directory
//! source's descriptors, `xdsd_source::render_resource_document`), writes it as a resource
//! directory (`--out`), or follows it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use envoy_types::pb::envoy::config::core::v3::node::UserAgentVersionType;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
use envoy_types::pb::xds::core::v3::ContextParams;
use prost::Message;
use xdsd_client::{types, Config, Event, Flavor, Options, Params, Resource, Tls, XdsClient};
use xdsd_core::xdstp::{self, XdstpName};
use xdsd_source::{render_resource_document, Descriptors, FileFormat};

mod args;
pub(crate) use args::{
    authority_key_value, authority_param_sets, key_value, with_authorities, ClientArgs, GetArgs,
    WatchArgs,
};
use args::{with_authority_params, ALL};

/// The types `get` with no TYPE (or `all`) subscribes to by wildcard; the others are fetched by
/// name as the resources held reference them.
const ROOTS: [&str; 2] = [types::LISTENER, types::CLUSTER];

/// The types a walk from [`ROOTS`] may reach (as `xdsd_core::store::references` finds them).
const REACHED: [&str; 5] = [
    types::LISTENER,
    types::ROUTE_CONFIGURATION,
    types::CLUSTER,
    types::CLUSTER_LOAD_ASSIGNMENT,
    types::SECRET,
];

/// What the commands need from the options.
struct Plan {
    /// The type asked for; `None` for every listener and cluster and what they reference.
    type_url: Option<String>,
    /// The names asked for, xdstp names (and glob collections) canonical.
    names: Vec<String>,
    options: Options,
    config: Config,
    params: NameParams,
}

/// The TP2 parameters each name is asked with: its authority's (`--param-for`), else
/// `--param`'s.
struct NameParams {
    global: Params,
    /// The client's options, whose authorities say which name is whose.
    options: Options,
}

impl NameParams {
    fn of(&self, name: &str) -> &Params {
        self.options
            .authority_for(name)
            .and_then(|a| self.options.authority_params.get(a))
            .unwrap_or(&self.global)
    }
}

fn plan(args: &ClientArgs) -> anyhow::Result<Plan> {
    // Resolved by clap (`type_url`).
    let type_url = args.kind.clone().filter(|k| k != ALL);
    if type_url.is_none() && !args.names.is_empty() {
        anyhow::bail!(
            "NAME {:?} needs a TYPE: without one (or with all) every listener and cluster is \
             fetched, with what they reference",
            args.names[0]
        );
    }
    let names = args
        .names
        .iter()
        .map(|name| canonical_name(type_url.as_deref(), name))
        .collect::<anyhow::Result<Vec<String>>>()?;
    let params: Params = args.params.iter().cloned().collect();
    let mut node = Node {
        id: args.node.clone(),
        cluster: args.cluster.clone().unwrap_or_default(),
        user_agent_name: "xdsd-get".into(),
        user_agent_version_type: Some(UserAgentVersionType::UserAgentVersion(
            env!("CARGO_PKG_VERSION").into(),
        )),
        ..Default::default()
    };
    if !args.node_metadata.is_empty() {
        let fields = args
            .node_metadata
            .iter()
            .map(|(k, v)| {
                let value = Value {
                    kind: Some(Kind::StringValue(v.clone())),
                };
                (k.clone(), value)
            })
            .collect();
        node.metadata = Some(Struct { fields });
    }
    if !params.is_empty() {
        let fetched = match &type_url {
            Some(type_url) => vec![type_url.as_str()],
            None => REACHED.to_vec(),
        };
        for type_url in fetched {
            node.dynamic_parameters.insert(
                type_url.to_owned(),
                ContextParams {
                    params: params.clone().into_iter().collect(),
                },
            );
        }
    }
    let mut config = Config::new(node);
    config.flavor = if args.delta {
        Flavor::Delta
    } else {
        Flavor::Sotw
    };
    config.ads = !args.per_type;
    config.does_not_exist_timeout = args.timeout;
    let mut options =
        Options::with_servers(args.server.iter().cloned()).context("--server names no server")?;
    options = with_authorities(options, &args.server_for);
    options = with_authority_params(options, &args.param_for);
    options.connect_timeout = args.timeout.min(Duration::from_secs(10));
    if args.tls_ca.is_some() || args.tls_cert.is_some() {
        let read = |flag: &str, path: &Path| {
            std::fs::read(path)
                .with_context(|| format!("{flag} {}: cannot read it", path.display()))
        };
        let mut tls = Tls::default();
        if let Some(ca) = &args.tls_ca {
            tls.ca_pem = Some(read("--tls-ca", ca)?);
        }
        if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
            tls.identity = Some((read("--tls-cert", cert)?, read("--tls-key", key)?));
        }
        options.tls = Some(tls);
    }
    Ok(Plan {
        type_url,
        names,
        params: NameParams {
            global: params,
            options: options.clone(),
        },
        options,
        config,
    })
}

/// A NAME as it is asked for: an xdstp name (or glob collection) checked and canonical, its
/// type segment TYPE's; any other name as it is.
fn canonical_name(type_url: Option<&str>, name: &str) -> anyhow::Result<String> {
    if !xdstp::is_xdstp(name) {
        return Ok(name.to_owned());
    }
    let parsed = XdstpName::parse(name)
        .and_then(|n| match type_url {
            Some(t) => n.check_type(t).map(|()| n),
            None => Ok(n),
        })
        .map_err(|e| anyhow::anyhow!("NAME {name:?} is a malformed xdstp name: {e}"))?;
    Ok(parsed.as_str().to_owned())
}

fn subscribe(client: &XdsClient, type_url: &str, names: &[String], params: &NameParams) {
    if names.is_empty() {
        // The legacy wildcard (naming nothing): every server knows it; some older ones (such
        // as rust-control-plane 0.1.2) take an explicit `*` for a name.
        client.subscribe_legacy_wildcard(type_url);
        return;
    }
    let mut plain = Vec::new();
    for name in names {
        let params = params.of(name);
        if params.is_empty() {
            plain.push(name.clone());
        } else {
            client.subscribe_locator(type_url, name, params.clone());
        }
    }
    if !plain.is_empty() {
        client.subscribe(type_url, plain);
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// What the client holds, by type URL, name and encoded constraints.
type Held = BTreeMap<(String, String, Vec<u8>), Resource>;

fn held_key(r: &Resource) -> (String, String, Vec<u8>) {
    (
        r.type_url.clone(),
        r.name.clone(),
        r.constraints
            .as_ref()
            .map(Message::encode_to_vec)
            .unwrap_or_default(),
    )
}

/// Whether `held` has a resource of `type_url` that a subscription to `name` gets (its name or
/// an alias, or a member of the glob collection `name`).
fn holds(held: &Held, type_url: &str, name: &str) -> bool {
    let glob = xdstp::glob_parts(name);
    held.iter().any(|((t, _, _), r)| {
        t == type_url
            && (r.names().any(|n| n == name)
                || glob.is_some_and(|(prefix, query)| xdstp::is_member(prefix, query, &r.name)))
    })
}

/// What `get` asks for: types by wildcard, and names by type (those given, or those the
/// resources held reference); and what the server said.
#[derive(Default)]
struct Asked {
    wildcards: BTreeSet<String>,
    names: BTreeMap<String, BTreeSet<String>>,
    /// The types the server answered (a response, or a name that does not exist).
    answered: BTreeSet<String>,
    /// (type URL, name) the server said do not exist.
    missing: BTreeSet<(String, String)>,
}

impl Asked {
    /// Every wildcard answered, every name held or said not to exist, every glob collection
    /// answered (the server sends its members with the type's first response; in delta, an
    /// empty one by its name in `removed_resources`).
    fn resolved(&self, held: &Held) -> bool {
        self.wildcards.iter().all(|t| self.answered.contains(t))
            && self.names.iter().all(|(t, names)| {
                names.iter().all(|n| {
                    holds(held, t, n)
                        || self.missing.contains(&(t.clone(), n.clone()))
                        || (xdstp::is_glob(n) && self.answered.contains(t))
                })
            })
    }

    /// The names asked for that the server did not send, by type (a glob collection without
    /// members is not one: [`Self::empty_globs`]).
    fn not_received<'a>(&'a self, held: &'a Held) -> Vec<(&'a str, &'a str)> {
        self.names
            .iter()
            .flat_map(|(t, names)| names.iter().map(move |n| (t.as_str(), n.as_str())))
            .filter(|(t, n)| !xdstp::is_glob(n) && !holds(held, t, n))
            .collect()
    }

    /// The glob collections asked for of which nothing is held.
    fn empty_globs<'a>(&'a self, held: &'a Held) -> Vec<(&'a str, &'a str)> {
        self.names
            .iter()
            .flat_map(|(t, names)| names.iter().map(move |n| (t.as_str(), n.as_str())))
            .filter(|(t, n)| xdstp::is_glob(n) && !holds(held, t, n))
            .collect()
    }
}

/// The names `resources` reference (the walk of `xdsd_core::store::references`) that are
/// neither asked for nor of a type subscribed by wildcard: what to subscribe to next.
fn new_references<'a>(
    asked: &Asked,
    resources: impl Iterator<Item = &'a Resource>,
) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for r in resources {
        for reference in xdsd_core::store::references(&r.type_url, &r.body.value) {
            let type_url = reference.type_url;
            if asked.wildcards.contains(type_url)
                || asked
                    .names
                    .get(type_url)
                    .is_some_and(|n| n.contains(&*reference.name))
            {
                continue;
            }
            out.entry(type_url.to_owned())
                .or_default()
                .insert(reference.name.to_string());
        }
    }
    out
}

/// The references of `held` to names of a wildcard type that the server did not send: a
/// listener's route to a cluster that does not exist.
fn dangling_in_wildcards(asked: &Asked, held: &Held) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for r in held.values() {
        for reference in xdsd_core::store::references(&r.type_url, &r.body.value) {
            let type_url = reference.type_url;
            if asked.wildcards.contains(type_url) && !holds(held, type_url, &reference.name) {
                out.insert((type_url.to_owned(), reference.name.to_string()));
            }
        }
    }
    out
}

/// Runs `xdsd get`: 0 with every resource asked for, 1 otherwise.
pub(crate) fn get(args: GetArgs) -> ExitCode {
    if args.client.kind.as_deref().is_none_or(|k| k == ALL) && !args.client.names.is_empty() {
        eprintln!(
            "xdsd get: NAME {:?} needs a TYPE: without one (or with all) every listener and \
             cluster is fetched, with what they reference",
            args.client.names[0]
        );
        return ExitCode::from(2);
    }
    let result = runtime().and_then(|rt| rt.block_on(run_get(&args)));
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("xdsd get: {}", crate::error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

async fn run_get(args: &GetArgs) -> anyhow::Result<bool> {
    let c = &args.client;
    let plan = plan(c)?;
    let descriptors = Descriptors::envoy().context("loading the Envoy descriptors")?;
    let (client, mut events) = XdsClient::start(plan.options, plan.config, None)?;
    // With a TYPE: it, by wildcard or by NAME. Without: the roots by wildcard, then what they
    // reference, transitively.
    let walk = plan.type_url.is_none();
    let mut asked = Asked::default();
    match &plan.type_url {
        Some(type_url) if plan.names.is_empty() => {
            asked.wildcards.insert(type_url.clone());
        }
        Some(type_url) => {
            asked
                .names
                .insert(type_url.clone(), plan.names.iter().cloned().collect());
        }
        None => asked.wildcards.extend(ROOTS.map(str::to_owned)),
    }
    for type_url in &asked.wildcards {
        subscribe(&client, type_url, &[], &plan.params);
    }
    for (type_url, names) in &asked.names {
        let names: Vec<String> = names.iter().cloned().collect();
        subscribe(&client, type_url, &names, &plan.params);
    }
    let mut held = Held::new();
    let mut last_problem: Option<String> = None;
    let mut connected = false;
    // Servers that could not be reached before any connection: once each of them has failed,
    // waiting out the timeout would not change it.
    let mut unreachable = 0;
    let deadline = tokio::time::Instant::now() + c.timeout;
    let done = loop {
        if !asked.answered.is_empty() && asked.resolved(&held) {
            break true;
        }
        let event = match tokio::time::timeout_at(deadline, events.next()).await {
            Ok(Some(event)) => event,
            Ok(None) | Err(_) => break false,
        };
        match event {
            Event::Update(u) => {
                asked.answered.insert(u.type_url.clone());
                let fresh: Vec<Resource> = u.added.into_iter().chain(u.changed).collect();
                if walk {
                    for (type_url, names) in new_references(&asked, fresh.iter()) {
                        let list: Vec<String> = names.iter().cloned().collect();
                        subscribe(&client, &type_url, &list, &plan.params);
                        asked.names.entry(type_url).or_default().extend(names);
                    }
                }
                for r in fresh {
                    held.insert(held_key(&r), r);
                }
            }
            Event::Removed {
                type_url, names, ..
            } => held.retain(|(t, n, _), _| *t != type_url || !names.contains(n)),
            Event::DoesNotExist { type_url, name } => {
                asked.answered.insert(type_url.clone());
                asked.missing.insert((type_url, name));
            }
            Event::Rejected { reason, .. } => {
                last_problem = Some(format!("a response was rejected: {reason}"));
            }
            Event::Disconnected { reason } => {
                // Before any connection: the server cannot be reached (refused, no route, a
                // TLS handshake that failed). Once every server has failed so, waiting out the
                // timeout would not change it.
                if !connected {
                    unreachable += 1;
                    if unreachable >= c.server.len() + c.server_for.len() {
                        anyhow::bail!(reason);
                    }
                    last_problem = Some(reason);
                    continue;
                }
                if let Some(code) = fatal_status(&reason) {
                    anyhow::bail!(
                        "{} refused the stream with {code}, which asking again cannot change ({reason})",
                        c.server.join(",")
                    );
                }
                last_problem = Some(reason);
            }
            Event::Connected => connected = true,
            // A wildcard's answer is what its updates brought.
            Event::WildcardAnswered { .. } => {}
        }
    };
    drop(client);
    // Named resources the server never answered for (a SotW server may say nothing of names
    // it does not have) do not exist; with nothing asked by name, silence is an error.
    let answered = !asked.answered.is_empty();
    if !done && !answered && (!connected || asked.names.is_empty()) {
        let mut message = format!(
            "nothing received from {} in {:?}",
            c.server.join(","),
            c.timeout
        );
        if let Some(p) = last_problem {
            message.push_str(&format!(" ({p})"));
        }
        anyhow::bail!(message);
    }
    let mut not_received: BTreeSet<(String, String)> = asked
        .not_received(&held)
        .into_iter()
        .map(|(t, n)| (t.to_owned(), n.to_owned()))
        .collect();
    if walk {
        not_received.extend(dangling_in_wildcards(&asked, &held));
    }
    match &args.out {
        Some(dir) => write_dir(&descriptors, c.output.format(), dir, &held)?,
        None => print_resources(&descriptors, c.output.format(), held.values())?,
    }
    for type_url in &asked.wildcards {
        if !held.keys().any(|(t, _, _)| t == type_url) {
            eprintln!(
                "xdsd get: {} sent no {} resource (it has none for node {:?})",
                c.server.join(","),
                short_type(type_url),
                c.node
            );
        }
    }
    for (type_url, glob) in asked.empty_globs(&held) {
        eprintln!(
            "xdsd get: {} collection {glob:?} has no members on {}",
            short_type(type_url),
            c.server.join(",")
        );
    }
    for (type_url, name) in &not_received {
        let referenced = if walk { ", which is referenced," } else { "" };
        eprintln!(
            "xdsd get: {} {name:?}{referenced} does not exist on {}",
            short_type(type_url),
            c.server.join(",")
        );
    }
    Ok(not_received.is_empty())
}

/// gRPC statuses that asking again cannot change: the server refused this client (its
/// credentials, its node) or does not serve this call.
const FATAL_STATUSES: [&str; 4] = [
    "PermissionDenied",
    "Unauthenticated",
    "Unimplemented",
    "InvalidArgument",
];

/// The status a stream ended with, when the client's reason for a disconnection names one of
/// [`FATAL_STATUSES`] (`the stream ended with PermissionDenied: ...`, as `xdsd_client` says it).
fn fatal_status(reason: &str) -> Option<&'static str> {
    let rest = reason.strip_prefix("the stream ended with ")?;
    let code = rest.split(':').next().unwrap_or(rest).trim();
    FATAL_STATUSES.into_iter().find(|fatal| *fatal == code)
}

/// The resources as one resource file: YAML documents separated by `---`, or a JSON list.
fn print_resources<'a>(
    descriptors: &Descriptors,
    format: FileFormat,
    resources: impl Iterator<Item = &'a Resource>,
) -> anyhow::Result<()> {
    let mut out = Vec::new();
    let mut documents = Vec::new();
    for r in resources {
        documents.push(document(descriptors, format, r)?);
    }
    match format {
        FileFormat::Json if documents.is_empty() => out.extend_from_slice(b"[]\n"),
        FileFormat::Json => {
            // A list of the documents, each indented one level as a list element is.
            out.extend_from_slice(b"[\n");
            for (i, d) in documents.iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(b",\n");
                }
                for (j, line) in d.trim_ascii_end().split(|b| *b == b'\n').enumerate() {
                    if j > 0 {
                        out.push(b'\n');
                    }
                    out.extend_from_slice(b"  ");
                    out.extend_from_slice(line);
                }
            }
            out.extend_from_slice(b"\n]\n");
        }
        _ => {
            for (i, d) in documents.iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(b"---\n");
                }
                out.extend_from_slice(d);
            }
        }
    }
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&out).context("writing to stdout")?;
    stdout.flush().context("writing to stdout")
}

fn document(
    descriptors: &Descriptors,
    format: FileFormat,
    r: &Resource,
) -> anyhow::Result<Vec<u8>> {
    let constraints = r.constraints.as_ref().map(Message::encode_to_vec);
    render_resource_document(
        descriptors,
        format,
        &r.body.type_url,
        &r.name,
        &r.body.value,
        constraints.as_deref(),
    )
    .with_context(|| format!("{} {:?}", short_type(&r.type_url), r.name))
}

/// `cluster` for the Cluster type URL; the message name for a type without an alias.
fn short_type(type_url: &str) -> &str {
    types::ALIASES
        .iter()
        .find(|(_, url)| *url == type_url)
        .map(|(alias, _)| *alias)
        .unwrap_or_else(|| type_url.rsplit('/').next().unwrap_or(type_url))
}

/// A file name from a resource name: letters, digits, `-`, `_` and `.` kept, anything else `_`.
fn file_stem(name: &str) -> String {
    let stem: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    stem.trim_start_matches('.').to_owned()
}

/// FNV-1a of `bytes`: a stable short tag for a variant's constraints in its file name.
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

/// One file per resource in `dir`: `<type>-<name>.<ext>`, a variant's named by its constraints
/// too (`<type>-<name>-<8 hex digits>.<ext>`), so that gets with other parameters into the same
/// directory add their variants; two names that make the same file name are told apart by
/// `-2`, `-3`, ….
fn write_dir(
    descriptors: &Descriptors,
    format: FileFormat,
    dir: &Path,
    held: &Held,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("--out {}", dir.display()))?;
    let mut used = BTreeSet::new();
    for r in held.values() {
        let mut base = format!("{}-{}", short_type(&r.type_url), file_stem(&r.name));
        if let Some(c) = &r.constraints {
            base.push_str(&format!("-{:08x}", fnv1a(&c.encode_to_vec())));
        }
        let mut stem = base.clone();
        let mut n = 1;
        while !used.insert(stem.clone()) {
            n += 1;
            stem = format!("{base}-{n}");
        }
        let path = dir.join(format!("{stem}.{}", format.extension()));
        let bytes = document(descriptors, format, r)?;
        let tmp = dir.join(format!(".{stem}.tmp"));
        std::fs::write(&tmp, &bytes).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))?;
    }
    eprintln!(
        "xdsd get: wrote {} to {}",
        count(held.len(), "resource file", "resource files"),
        dir.display()
    );
    Ok(())
}

/// `1 resource file`, `2 resource files`.
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Runs `xdsd watch` until Ctrl-C: 0 then, 1 on an error.
pub(crate) fn watch(args: WatchArgs) -> ExitCode {
    if args.client.kind.as_deref().is_none_or(|k| k == ALL) {
        eprintln!("xdsd watch: give a TYPE to watch (no TYPE, or all, is for get)");
        return ExitCode::from(2);
    }
    let result = runtime().and_then(|rt| rt.block_on(run_watch(&args)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xdsd watch: {}", crate::error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

async fn run_watch(args: &WatchArgs) -> anyhow::Result<()> {
    let c = &args.client;
    let plan = plan(c)?;
    let descriptors = Descriptors::envoy().context("loading the Envoy descriptors")?;
    let Some(type_url) = plan.type_url else {
        anyhow::bail!("give a TYPE to watch");
    };
    let (client, mut events) = XdsClient::start(plan.options, plan.config, None)?;
    subscribe(&client, &type_url, &plan.names, &plan.params);
    let kind = short_type(&type_url).to_owned();
    loop {
        let event = tokio::select! {
            event = events.next() => match event {
                Some(event) => event,
                None => anyhow::bail!("the client stopped"),
            },
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        let line = match &event {
            Event::Connected => match c.server.as_slice() {
                [one] => format!("connected to {one}"),
                several => format!("connected to one of {}", several.join(",")),
            },
            Event::Disconnected { reason } => format!("disconnected: {reason}"),
            Event::Update(u) => {
                let names = |list: &[Resource]| {
                    list.iter()
                        .map(|r| r.name.as_str())
                        .collect::<Vec<_>>()
                        .join(",")
                };
                let mut line = format!("{kind} version={}", u.version);
                if !u.added.is_empty() {
                    line.push_str(&format!(" added={}", names(&u.added)));
                }
                if !u.changed.is_empty() {
                    line.push_str(&format!(" changed={}", names(&u.changed)));
                }
                if u.added.is_empty() && u.changed.is_empty() {
                    line.push_str(" (no resources)");
                }
                line
            }
            Event::Removed {
                names,
                expired,
                version,
                ..
            } => format!(
                "{kind} version={version} {}={}",
                if *expired { "expired" } else { "removed" },
                names.join(",")
            ),
            Event::DoesNotExist { name, .. } => format!("{kind} does-not-exist={name}"),
            // Nothing changed: its updates are printed.
            Event::WildcardAnswered { .. } => continue,
            Event::Rejected {
                version, reason, ..
            } => format!("{kind} rejected version={version}: {reason}"),
        };
        let mut stdout = std::io::stdout().lock();
        writeln!(
            stdout,
            "{} {line}",
            crate::utc::rfc3339_millis(SystemTime::now())
        )
        .context("writing to stdout")?;
        if args.contents {
            if let Event::Update(u) = &event {
                drop(stdout);
                print_resources(
                    &descriptors,
                    c.output.format(),
                    u.added.iter().chain(&u.changed),
                )?;
                stdout = std::io::stdout().lock();
            }
        }
        stdout.flush().context("writing to stdout")?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<GetArgs, clap::error::ErrorKind> {
        use clap::Parser as _;
        let all = ["xdsd", "get"].iter().chain(args);
        match crate::Cli::try_parse_from(all).map(|cli| cli.command) {
            Ok(crate::Command::Get(args)) => Ok(*args),
            Ok(other) => panic!("parsed as another command: {other:?}"),
            Err(e) => Err(e.kind()),
        }
    }

    #[test]
    fn get_takes_type_aliases_names_and_key_values() {
        let args = parse(&[
            "eds",
            "a",
            "b",
            "--param",
            "env=prod",
            "--node-metadata",
            "k=v=w",
        ])
        .expect("valid");
        assert_eq!(
            args.client.kind.as_deref(),
            Some(types::CLUSTER_LOAD_ASSIGNMENT)
        );
        assert_eq!(args.client.names, vec!["a", "b"]);
        assert_eq!(args.client.params, vec![("env".into(), "prod".into())]);
        assert_eq!(args.client.node_metadata, vec![("k".into(), "v=w".into())]);
        assert_eq!(
            parse(&["clustr"]).err(),
            Some(clap::error::ErrorKind::ValueValidation)
        );
        assert!(parse(&["cluster", "--param", "novalue"]).is_err());
        assert!(
            parse(&["cluster", "--tls-cert", "c.pem"]).is_err(),
            "no key"
        );
        assert_eq!(parse(&[]).expect("no TYPE: all").client.kind, None);
        assert_eq!(
            parse(&["all"]).expect("all").client.kind.as_deref(),
            Some(ALL)
        );
    }

    #[test]
    fn param_for_takes_an_authority_with_a_port_and_asks_its_names_with_its_own_set() {
        let args = parse(&[
            "cluster",
            "xdstp://b.test/envoy.config.cluster.v3.Cluster/c1",
            "plain",
            "--param",
            "env=prod",
            "--param-for",
            "b.test:env=test",
            "--param-for",
            "b.test:zone=z1",
            "--param-for",
            "xds.example:443:k=v=w",
        ])
        .expect("valid");
        assert_eq!(
            args.client.param_for,
            vec![
                ("b.test".into(), ("env".into(), "test".into())),
                ("b.test".into(), ("zone".into(), "z1".into())),
                ("xds.example:443".into(), ("k".into(), "v=w".into())),
            ]
        );
        for bad in ["env=prod", "b.test:=x", "b.test:env"] {
            assert!(parse(&["cluster", "--param-for", bad]).is_err(), "{bad}");
        }
        let plan = plan(&args.client).expect("planned");
        let b: Params = [("env", "test"), ("zone", "z1")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into();
        assert_eq!(
            plan.params
                .of("xdstp://b.test/envoy.config.cluster.v3.Cluster/c1"),
            &b
        );
        assert_eq!(
            plan.params.of("plain"),
            &Params::from([("env".to_owned(), "prod".to_owned())])
        );
        assert_eq!(
            plan.options
                .authority_for("xdstp://b.test/envoy.config.cluster.v3.Cluster/c1"),
            Some("b.test"),
            "b.test's names have a connection of their own"
        );
    }

    #[test]
    fn a_status_that_asking_again_cannot_change_is_fatal_others_are_retried() {
        assert_eq!(
            fatal_status("the stream ended with PermissionDenied: node id x is not y"),
            Some("PermissionDenied")
        );
        assert_eq!(
            fatal_status("the stream ended with Unimplemented"),
            Some("Unimplemented")
        );
        assert_eq!(
            fatal_status("the stream ended with Unavailable: shutting down"),
            None
        );
        assert_eq!(fatal_status("cannot connect to 127.0.0.1:1: refused"), None);
        assert_eq!(fatal_status("the server ended the stream"), None);
    }

    #[test]
    fn file_stems_keep_safe_characters() {
        assert_eq!(file_stem("web.prod-1_a"), "web.prod-1_a");
        assert_eq!(file_stem("../etc/passwd"), "_etc_passwd");
        assert_eq!(file_stem("a b/c"), "a_b_c");
    }
}
