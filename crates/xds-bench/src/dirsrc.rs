//! The `xdsd-dir` server kind: the real `xdsd` binary serving a directory of resource files,
//! changed the way a user changes it.
//!
//! `xds-bench server --kind xdsd-dir --xdsd-bin BIN --dir DIR` is an adapter that speaks the
//! harness's line protocol (see `server.rs`) and turns each command into files:
//!
//! * it starts `BIN serve --resources DIR --listen 127.0.0.1:0`, reads `xDS gRPC server
//!   listening on ADDR` from its log, and prints `listening ADDR PID` with xdsd's pid, so the
//!   harness reads CPU time and memory from xdsd's /proc entry, not the adapter's;
//! * `load`: writes one JSON file per resource (Envoy proto3 JSON with `"@type"`, see
//!   docs/resource-files.md) and waits for xdsd to log the reload with that many resources;
//! * `set`: writes the resource's file into a staging directory next to DIR (outside the watch),
//!   then renames it over the old file. `accepted_ns` is taken just before the rename: the
//!   user's action. Convergence thus includes the watcher's debounce (100 ms of quiet) and the
//!   reload of the whole directory, as a user sees it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use envoy_types::pb::envoy::config::cluster::v3::{cluster, Cluster};
use envoy_types::pb::envoy::config::core::v3::{address, config_source, socket_address};
use envoy_types::pb::envoy::config::core::v3::{Address, ConfigSource};
use envoy_types::pb::envoy::config::endpoint::v3::{lb_endpoint, ClusterLoadAssignment};
use envoy_types::pb::envoy::config::listener::v3::{filter, Listener};
use envoy_types::pb::envoy::config::route::v3::{
    route, route_action, route_match, RouteConfiguration,
};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager, http_filter, HttpConnectionManager,
};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use prost::Message;
use serde_json::{json, Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::watch;
use xdsd_core::types::{CLUSTER, CLUSTER_LOAD_ASSIGNMENT, LISTENER, ROUTE_CONFIGURATION};

use crate::config::{read_records, GROUP_KEY};
use crate::now_ns;
use crate::server::Command;

const HCM: &str = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";

fn duration(d: &Option<PbDuration>) -> Option<Value> {
    d.as_ref().map(|d| {
        if d.nanos == 0 {
            json!(format!("{}s", d.seconds))
        } else {
            json!(format!("{}.{:09}s", d.seconds, d.nanos))
        }
    })
}

fn config_source(c: &Option<ConfigSource>) -> anyhow::Result<Value> {
    let c = c
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("no config source"))?;
    let mut m = Map::new();
    match &c.config_source_specifier {
        Some(config_source::ConfigSourceSpecifier::Ads(_)) => {
            m.insert("ads".into(), json!({}));
        }
        other => anyhow::bail!("config source {other:?} not handled"),
    }
    if c.resource_api_version == 2 {
        m.insert("resource_api_version".into(), json!("V3"));
    }
    Ok(Value::Object(m))
}

fn address(a: &Option<Address>) -> anyhow::Result<Value> {
    match a.as_ref().and_then(|a| a.address.as_ref()) {
        Some(address::Address::SocketAddress(s)) => {
            let port = match s.port_specifier {
                Some(socket_address::PortSpecifier::PortValue(p)) => p,
                _ => anyhow::bail!("named ports not handled"),
            };
            Ok(json!({"socket_address": {"address": s.address, "port_value": port}}))
        }
        other => anyhow::bail!("address {other:?} not handled"),
    }
}

/// Envoy proto3 JSON of one resource the synthetic configuration holds (see `config.rs`), with
/// its `"@type"`: every field the generator sets, and an error for anything else.
pub fn to_json(type_url: &str, value: &[u8]) -> anyhow::Result<Value> {
    Ok(match type_url {
        CLUSTER => {
            let c = Cluster::decode(value)?;
            let kind = match c.cluster_discovery_type {
                Some(cluster::ClusterDiscoveryType::Type(t)) => {
                    cluster::DiscoveryType::try_from(t)?.as_str_name()
                }
                _ => anyhow::bail!("cluster type not handled"),
            };
            let mut m = Map::new();
            m.insert("@type".into(), json!(type_url));
            m.insert("name".into(), json!(c.name));
            m.insert("type".into(), json!(kind));
            if let Some(e) = &c.eds_cluster_config {
                let mut eds = Map::new();
                eds.insert("eds_config".into(), config_source(&e.eds_config)?);
                if !e.service_name.is_empty() {
                    eds.insert("service_name".into(), json!(e.service_name));
                }
                m.insert("eds_cluster_config".into(), Value::Object(eds));
            }
            if let Some(d) = duration(&c.connect_timeout) {
                m.insert("connect_timeout".into(), d);
            }
            if let Some(v) = c.per_connection_buffer_limit_bytes {
                m.insert("per_connection_buffer_limit_bytes".into(), json!(v.value));
            }
            Value::Object(m)
        }
        CLUSTER_LOAD_ASSIGNMENT => {
            let cla = ClusterLoadAssignment::decode(value)?;
            let mut localities = Vec::new();
            for l in &cla.endpoints {
                let mut eps = Vec::new();
                for e in &l.lb_endpoints {
                    let Some(lb_endpoint::HostIdentifier::Endpoint(ep)) = &e.host_identifier else {
                        anyhow::bail!("endpoint kind not handled");
                    };
                    let mut m = Map::new();
                    m.insert("endpoint".into(), json!({"address": address(&ep.address)?}));
                    if let Some(w) = e.load_balancing_weight {
                        m.insert("load_balancing_weight".into(), json!(w.value));
                    }
                    eps.push(Value::Object(m));
                }
                let mut m = Map::new();
                m.insert("lb_endpoints".into(), Value::Array(eps));
                if let Some(w) = l.load_balancing_weight {
                    m.insert("load_balancing_weight".into(), json!(w.value));
                }
                localities.push(Value::Object(m));
            }
            let mut m = Map::new();
            m.insert("@type".into(), json!(type_url));
            m.insert("cluster_name".into(), json!(cla.cluster_name));
            m.insert("endpoints".into(), Value::Array(localities));
            if let Some(f) = cla.policy.and_then(|p| p.overprovisioning_factor) {
                m.insert("policy".into(), json!({"overprovisioning_factor": f.value}));
            }
            Value::Object(m)
        }
        LISTENER => {
            let l = Listener::decode(value)?;
            let mut chains = Vec::new();
            for fc in &l.filter_chains {
                let mut filters = Vec::new();
                for f in &fc.filters {
                    let Some(filter::ConfigType::TypedConfig(any)) = &f.config_type else {
                        anyhow::bail!("filter without typed_config");
                    };
                    anyhow::ensure!(any.type_url == HCM, "filter {} not handled", any.type_url);
                    let hcm = HttpConnectionManager::decode(&any.value[..])?;
                    let Some(http_connection_manager::RouteSpecifier::Rds(rds)) =
                        &hcm.route_specifier
                    else {
                        anyhow::bail!("HCM without RDS not handled");
                    };
                    let mut http_filters = Vec::new();
                    for h in &hcm.http_filters {
                        let Some(http_filter::ConfigType::TypedConfig(any)) = &h.config_type else {
                            anyhow::bail!("HTTP filter without typed_config");
                        };
                        // The router's config is empty; other filters are not generated.
                        anyhow::ensure!(any.value.is_empty(), "HTTP filter config not handled");
                        http_filters
                            .push(json!({"name": h.name, "typed_config": {"@type": any.type_url}}));
                    }
                    filters.push(json!({
                        "name": f.name,
                        "typed_config": {
                            "@type": HCM,
                            "stat_prefix": hcm.stat_prefix,
                            "rds": {
                                "config_source": config_source(&rds.config_source)?,
                                "route_config_name": rds.route_config_name,
                            },
                            "http_filters": http_filters,
                        },
                    }));
                }
                chains.push(json!({ "filters": filters }));
            }
            json!({
                "@type": type_url,
                "name": l.name,
                "address": address(&l.address)?,
                "filter_chains": chains,
            })
        }
        ROUTE_CONFIGURATION => {
            let rc = RouteConfiguration::decode(value)?;
            let mut vhosts = Vec::new();
            for vh in &rc.virtual_hosts {
                let mut routes = Vec::new();
                for r in &vh.routes {
                    let prefix = match r.r#match.as_ref().and_then(|m| m.path_specifier.as_ref()) {
                        Some(route_match::PathSpecifier::Prefix(p)) => p,
                        _ => anyhow::bail!("route match not handled"),
                    };
                    let cluster = match &r.action {
                        Some(route::Action::Route(a)) => match &a.cluster_specifier {
                            Some(route_action::ClusterSpecifier::Cluster(c)) => c,
                            _ => anyhow::bail!("route target not handled"),
                        },
                        _ => anyhow::bail!("route action not handled"),
                    };
                    routes
                        .push(json!({"match": {"prefix": prefix}, "route": {"cluster": cluster}}));
                }
                vhosts.push(json!({"name": vh.name, "domains": vh.domains, "routes": routes}));
            }
            json!({"@type": type_url, "name": rc.name, "virtual_hosts": vhosts})
        }
        other => anyhow::bail!("the xdsd-dir kind does not write {other}"),
    })
}

/// What a resource's file holds: its JSON; a variant (`group`) gets `"@match": {GROUP_KEY:
/// group}`.
pub(crate) fn document(
    type_url: &str,
    value: &[u8],
    group: Option<&str>,
) -> anyhow::Result<Vec<u8>> {
    let mut doc = to_json(type_url, value)?;
    if let (Some(g), Value::Object(m)) = (group, &mut doc) {
        m.insert("@match".into(), json!({ GROUP_KEY: g }));
    }
    Ok(serde_json::to_vec_pretty(&doc)?)
}

/// The file a resource lives in: one per resource (variant), named by its kind, name and group.
pub(crate) fn file_name(type_url: &str, name: &str, group: Option<&str>) -> String {
    let kind = match type_url {
        CLUSTER => "cds",
        CLUSTER_LOAD_ASSIGNMENT => "eds",
        LISTENER => "lds",
        ROUTE_CONFIGURATION => "rds",
        _ => "other",
    };
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    match group {
        Some(g) => format!("{kind}-{safe}@{g}.json"),
        None => format!("{kind}-{safe}.json"),
    }
}

/// What xdsd's log says about reloads: the number of reload outcomes seen so far, and the
/// resource count of the last successful one.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Reloads {
    pub(crate) seen: u64,
    pub(crate) last_count: Option<u64>,
    pub(crate) rejected: u64,
}

/// Waits until xdsd logged a reload after `before` with `want` resources (rejections, of states
/// seen while the source was being written, are waited out); at most 300 s.
pub(crate) async fn wait_reloaded(
    reloads: &mut watch::Receiver<Reloads>,
    before: Reloads,
    want: u64,
) -> anyhow::Result<()> {
    let outcome = {
        let wait = reloads.wait_for(|r| r.seen > before.seen && r.last_count == Some(want));
        tokio::time::timeout(Duration::from_secs(300), wait)
            .await
            .map(|loaded| loaded.is_ok())
    };
    match outcome {
        Ok(true) => Ok(()),
        Ok(false) => anyhow::bail!("xdsd exited"),
        Err(_) => anyhow::bail!(
            "xdsd did not reload {want} resources in 300 s ({} reloads rejected meanwhile, see its log)",
            reloads.borrow().rejected - before.rejected
        ),
    }
}

fn field(line: &str, key: &str) -> Option<u64> {
    let at = line.find(&format!("{key}="))? + key.len() + 1;
    line[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

struct Adapter {
    dir: PathBuf,
    staging: PathBuf,
    reloads: watch::Receiver<Reloads>,
    serial: AtomicU64,
}

impl Binary for Adapter {
    /// Writes `value` as the resource's file: staged outside the watched directory, then renamed
    /// into place. Returns CLOCK_MONOTONIC just before the rename.
    /// A variant (`group`) gets `"@match": {GROUP_KEY: group}` and a file of its own.
    async fn put(
        &mut self,
        type_url: &str,
        name: &str,
        value: &[u8],
        group: Option<&str>,
    ) -> anyhow::Result<u64> {
        let json = document(type_url, value, group)?;
        let file = file_name(type_url, name, group);
        let n = self.serial.fetch_add(1, Ordering::Relaxed);
        let staged = self.staging.join(format!("{n}-{file}"));
        std::fs::write(&staged, json)?;
        let accepted = now_ns();
        std::fs::rename(&staged, self.dir.join(file))?;
        Ok(accepted)
    }

    /// Replaces the directory's resources and waits for xdsd to have reloaded them.
    async fn load(&mut self, path: &Path) -> anyhow::Result<u64> {
        let records = records_in_reference_order(path)?;
        let before = *self.reloads.borrow();
        let mut keep = std::collections::HashSet::new();
        let mut accepted = None;
        for r in &records {
            let group = r.group.as_deref();
            let a = self.put(&r.type_url, &r.name, &r.value, group).await?;
            accepted.get_or_insert(a);
            keep.insert(file_name(&r.type_url, &r.name, group));
        }
        let mut removed = false;
        for e in std::fs::read_dir(&self.dir)? {
            let e = e?;
            if !keep.contains(e.file_name().to_string_lossy().as_ref()) {
                std::fs::remove_file(e.path())?;
                removed = true;
            }
        }
        let want = records.len() as u64;
        if records.is_empty() && !removed && before.last_count == Some(0) {
            return Ok(accepted.unwrap_or_else(now_ns));
        }
        // A reload that lists the directory while it is being written can see a file without one
        // written before it (a listing is not a snapshot): xdsd rejects that state, keeps the
        // last good one and the next reload sees the rest. So rejections are waited out here;
        // only the whole directory loaded ends the wait.
        wait_reloaded(&mut self.reloads, before, want).await?;
        Ok(accepted.unwrap_or_else(now_ns))
    }
}

/// Extra arguments of `xdsd serve`, space-separated (set by the harness, e.g. for S7's
/// `--reload full`).
pub const XDSD_ARGS_VAR: &str = "XDS_BENCH_XDSD_ARGS";

/// Extra arguments of `xdsd relay`, space-separated (e.g. S12's `--upstream-keys=`, which
/// the harness sets).
pub const RELAY_ARGS_VAR: &str = "XDS_BENCH_RELAY_ARGS";

/// How many relays the xdsd-relay kind starts (set by the harness, `control::set_relays`).
pub const RELAYS_VAR: &str = "XDS_BENCH_RELAYS";

/// The relays [`RELAYS_VAR`] asks for: 1 when unset or unreadable.
pub fn relays_wanted() -> usize {
    std::env::var(RELAYS_VAR)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1usize)
        .max(1)
}

/// Serves the directory `dir` with xdsd; with `relays` > 0, starts that many `xdsd relay`s in
/// front of it (the xdsd-relay kind) and hands the harness their addresses (the clients'
/// connections go to each in turn) and the first relay's pid (its CPU time and memory are the
/// row's); `sent` still reads the xdsd that serves the directory, the relays' upstream.
pub async fn run(xdsd_bin: &Path, dir: &Path, relays: usize) -> anyhow::Result<()> {
    let staging = dir.with_extension("staging");
    for d in [dir, &staging] {
        if d.exists() {
            std::fs::remove_dir_all(d)?;
        }
        std::fs::create_dir_all(d)?;
    }
    let xdsd = start_xdsd(xdsd_bin, &["--resources".as_ref(), dir.as_os_str()]).await?;
    let mut child = xdsd.child;
    let admin = xdsd.admin;
    let mut adapter = Adapter {
        dir: dir.to_path_buf(),
        staging: staging.clone(),
        reloads: xdsd.reloads,
        serial: AtomicU64::new(0),
    };
    let mut started = Vec::with_capacity(relays);
    for _ in 0..relays {
        started.push(start_relay(xdsd_bin, &xdsd.addr).await?);
    }
    let (addrs, pid) = match started.first() {
        Some((_, _, pid)) => {
            let addrs: Vec<&str> = started.iter().map(|(_, a, _)| a.as_str()).collect();
            (addrs.join(","), *pid)
        }
        None => (xdsd.addr.clone(), xdsd.pid),
    };
    serve_commands(&mut adapter, &addrs, pid, &admin).await?;
    for (mut relay, _, _) in started {
        let _ = relay.start_kill();
        let _ = relay.wait().await;
    }
    let _ = child.start_kill();
    let _ = child.wait().await;
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(&staging);
    Ok(())
}

/// What an adapter between the harness's control protocol and xdsd's binary (the directory's,
/// etcd's) does with the commands that differ between them; [`serve_commands`] does the rest.
pub(crate) trait Binary {
    /// Replaces every resource with the records of `path`; returns when xdsd has them, with the
    /// clock just before the first write.
    async fn load(&mut self, path: &Path) -> anyhow::Result<u64>;

    /// Sets one resource (group `group`'s variant, if any); returns the clock just before the
    /// write.
    async fn put(
        &mut self,
        type_url: &str,
        name: &str,
        value: &[u8],
        group: Option<&str>,
    ) -> anyhow::Result<u64>;

    /// Kills replica `i` (SIGKILL), as a crashed replica.
    async fn kill(&mut self, i: usize) -> anyhow::Result<()> {
        anyhow::bail!("kill {i}: only xdsd-etcd has replicas")
    }
}

/// Tells the harness `listening <addrs> <pid>`, then answers its commands until `quit` or EOF;
/// `promote` goes to the admin API at `admin`.
pub(crate) async fn serve_commands(
    adapter: &mut impl Binary,
    addrs: &str,
    pid: u32,
    admin: &str,
) -> anyhow::Result<()> {
    let mut stdout = tokio::io::stdout();
    stdout
        .write_all(format!("listening {addrs} {pid}\n").as_bytes())
        .await?;
    stdout.flush().await?;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        let now = now_ns();
        let reply = match Command::parse(&line)? {
            Command::Load(path) => {
                let accepted = adapter.load(path.as_ref()).await?;
                format!("ok {accepted} {}\n", now_ns())
            }
            Command::Set(t, n, v, g) => format!("ok {}\n", adapter.put(t, n, &v, g).await?),
            // xdsd coalesces on its own.
            Command::Nodes | Command::Coalesce => format!("ok {now}\n"),
            Command::Kill(i) => {
                adapter.kill(i).await?;
                format!("ok {now}\n")
            }
            Command::Promote => format!("ok {}\n", promote(admin).await?),
            Command::Sent => format!("ok {}\n", sent_bytes(admin).await?),
            Command::Quit => break,
        };
        stdout.write_all(reply.as_bytes()).await?;
        stdout.flush().await?;
    }
    Ok(())
}

/// Makes `cmd`'s process die with this one (SIGKILL when the adapter goes): xdsd or etcd must
/// not outlive an adapter that is killed.
pub(crate) fn die_with_parent(cmd: &mut tokio::process::Command) {
    // SAFETY: prctl is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

/// `POST /rollout/promote` to the admin API at `admin` (`host:port`): the gated rollout's
/// candidate, if any, goes to every client now. Returns the clock just before the request.
pub(crate) async fn promote(admin: &str) -> anyhow::Result<u64> {
    use tokio::io::AsyncReadExt;
    let mut tcp = tokio::net::TcpStream::connect(admin).await?;
    let at = now_ns();
    tcp.write_all(
        b"POST /rollout/promote HTTP/1.1\r\nhost: xdsd\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
    )
    .await?;
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).await?;
    let answer = String::from_utf8_lossy(&answer);
    let status = answer.lines().next().unwrap_or_default();
    // 409: no candidate (the first resources after an empty start go to everyone at once).
    anyhow::ensure!(
        status.starts_with("HTTP/1.1 200") || status.starts_with("HTTP/1.1 409"),
        "POST /rollout/promote: {status}"
    );
    Ok(at)
}

/// `GET /metrics` of the admin API at `admin` (`host:port`): the sum of
/// `xdsd_response_bytes_total` over its types, the bytes of every response xdsd sent.
pub(crate) async fn sent_bytes(admin: &str) -> anyhow::Result<u64> {
    use tokio::io::AsyncReadExt;
    let mut tcp = tokio::net::TcpStream::connect(admin).await?;
    tcp.write_all(b"GET /metrics HTTP/1.1\r\nhost: xdsd\r\nconnection: close\r\n\r\n")
        .await?;
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).await?;
    let answer = String::from_utf8_lossy(&answer);
    let status = answer.lines().next().unwrap_or_default();
    anyhow::ensure!(status.starts_with("HTTP/1.1 200"), "GET /metrics: {status}");
    Ok(response_bytes(&answer))
}

/// The sum of the `xdsd_response_bytes_total` samples of a Prometheus text exposition.
fn response_bytes(metrics: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("xdsd_response_bytes_total"))
        .filter_map(|l| l.rsplit(' ').next())
        .filter_map(|v| v.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

/// Spawns `cmd` (`what`, for the error) with its stderr piped for its log, killed with the
/// bench: its process, pid and stderr.
fn spawn_logged(
    mut cmd: tokio::process::Command,
    what: &str,
) -> anyhow::Result<(tokio::process::Child, u32, tokio::process::ChildStderr)> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    die_with_parent(&mut cmd);
    let mut child = cmd
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot start {what}: {e}"))?;
    let pid = child.id().ok_or_else(|| anyhow::anyhow!("no pid"))?;
    let stderr = child
        .stderr
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stderr"))?;
    Ok((child, pid, stderr))
}

/// A command to run the relays under (`valgrind --tool=callgrind`, BENCHMARKS.md stop 39), as
/// `XDS_BENCH_SERVER_WRAPPER` runs the bench's own server processes.
pub const RELAY_WRAPPER_VAR: &str = "XDS_BENCH_RELAY_WRAPPER";

/// A command to run the `xdsd serve` an adapter starts under (xdsd-dir, xdsd-etcd, the relays'
/// upstream).
pub const XDSD_WRAPPER_VAR: &str = "XDS_BENCH_XDSD_WRAPPER";

/// `bin`, run under the command of the environment variable `var` when it is set (its words:
/// the program, then its arguments, then `bin`).
fn wrapped(var: &str, bin: &Path) -> tokio::process::Command {
    let wrapper = std::env::var(var).unwrap_or_default();
    let mut words = wrapper.split_whitespace();
    match words.next() {
        Some(program) => {
            let mut cmd = tokio::process::Command::new(program);
            cmd.args(words).arg(bin);
            cmd
        }
        None => tokio::process::Command::new(bin),
    }
}

/// The `--log-level` of the relays and `xdsd serve`s started: `XDS_BENCH_LOG_LEVEL` (a level or
/// filter directives, to see what a relay does per change), `info` by default.
fn log_level() -> String {
    std::env::var("XDS_BENCH_LOG_LEVEL").unwrap_or_else(|_| "info".to_owned())
}

/// Starts `xdsd relay --upstream UPSTREAM --listen 127.0.0.1:0` (and the extra arguments of
/// [`RELAY_ARGS_VAR`]; its log forwarded to ours) and waits for its address: its process,
/// address and pid.
async fn start_relay(
    xdsd_bin: &Path,
    upstream: &str,
) -> anyhow::Result<(tokio::process::Child, String, u32)> {
    let mut cmd = wrapped(RELAY_WRAPPER_VAR, xdsd_bin);
    cmd.args(["relay", "--upstream", upstream])
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "off"])
        .args(["--log-level", &log_level()])
        .args(
            std::env::var(RELAY_ARGS_VAR)
                .unwrap_or_default()
                .split_whitespace(),
        );
    let (child, pid, stderr) = spawn_logged(cmd, &format!("{} relay", xdsd_bin.display()))?;
    let (addr_tx, addr_rx) = tokio::sync::oneshot::channel::<String>();
    tokio::spawn(async move {
        let mut addr_tx = Some(addr_tx);
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            eprintln!("[relay {pid}] {line}");
            // `xDS gRPC relay listening on ADDR upstream=...`
            let addr = line
                .find("listening on ")
                .and_then(|at| line[at + "listening on ".len()..].split_whitespace().next());
            if let Some(addr) = addr {
                if let Some(tx) = addr_tx.take() {
                    let _ = tx.send(addr.to_owned());
                }
            }
        }
    });
    let addr = tokio::time::timeout(Duration::from_secs(60), addr_rx)
        .await
        .map_err(|_| anyhow::anyhow!("xdsd relay did not log its address in 60 s"))?
        .map_err(|_| anyhow::anyhow!("xdsd relay exited at start"))?;
    Ok((child, addr, pid))
}

/// A started `xdsd serve`: its process, pid, address, admin API address (`host:port`), and the
/// reloads its log reports.
pub(crate) struct Started {
    pub(crate) child: tokio::process::Child,
    pub(crate) pid: u32,
    pub(crate) addr: String,
    pub(crate) admin: String,
    pub(crate) reloads: watch::Receiver<Reloads>,
}

/// The records of `path`, what is referred to first (endpoints, clusters, route configurations,
/// listeners): xdsd may reload while they are being written (files renamed in, keys put in
/// batches), and every state it can see must have no dangling reference (it would reject it, and
/// the adapter stop).
pub(crate) fn records_in_reference_order(
    path: &Path,
) -> anyhow::Result<Vec<crate::config::Record>> {
    let mut records = read_records(path)?;
    let rank = |t: &str| match t {
        CLUSTER_LOAD_ASSIGNMENT => 0,
        CLUSTER => 1,
        ROUTE_CONFIGURATION => 2,
        _ => 3,
    };
    records.sort_by_key(|r| rank(&r.type_url));
    Ok(records)
}

/// Starts `xdsd serve SOURCE... --listen 127.0.0.1:0` (and the extra arguments of
/// [`XDSD_ARGS_VAR`]), forwarding its log to ours, and waits for its address.
pub(crate) async fn start_xdsd(
    xdsd_bin: &Path,
    source: &[&std::ffi::OsStr],
) -> anyhow::Result<Started> {
    let mut cmd = wrapped(XDSD_WRAPPER_VAR, xdsd_bin);
    cmd.arg("serve")
        .args(source)
        .args(["--listen", "127.0.0.1:0", "--log-level", &log_level()])
        // Replicas side by side: each admin API on a free port.
        .args(["--admin-listen", "127.0.0.1:0"])
        .args(
            std::env::var(XDSD_ARGS_VAR)
                .unwrap_or_default()
                .split_whitespace(),
        );
    let (child, pid, stderr) = spawn_logged(cmd, &xdsd_bin.display().to_string())?;
    let (addr_tx, addr_rx) = tokio::sync::oneshot::channel::<String>();
    let (admin_tx, admin_rx) = tokio::sync::oneshot::channel::<String>();
    let (reload_tx, reload_rx) = watch::channel(Reloads::default());
    // Forward xdsd's log to ours (the harness's log file) and follow its reloads.
    tokio::spawn(async move {
        let mut addr_tx = Some(addr_tx);
        let mut admin_tx = Some(admin_tx);
        let mut lines = BufReader::new(stderr).lines();
        let mut started = false;
        while let Ok(Some(line)) = lines.next_line().await {
            eprintln!("{line}");
            const ADMIN: &str = "admin API listening on http://";
            if let Some(at) = line.find(ADMIN) {
                let rest = &line[at + ADMIN.len()..];
                let end = rest.find([' ', '/']).unwrap_or(rest.len());
                if let Some(tx) = admin_tx.take() {
                    let _ = tx.send(rest[..end].to_owned());
                }
                continue;
            }
            if let Some(at) = line.find("listening on ") {
                if let Some(tx) = addr_tx.take() {
                    let _ = tx.send(line[at + "listening on ".len()..].trim().to_owned());
                }
                started = true;
                continue;
            }
            if !started {
                continue;
            }
            if line.contains("resources loaded") || line.contains("resources unchanged") {
                let count = field(&line, "resources");
                reload_tx.send_modify(|r| {
                    r.seen += 1;
                    r.last_count = count;
                });
            } else if line.contains("change rejected") {
                reload_tx.send_modify(|r| {
                    r.seen += 1;
                    r.rejected += 1;
                });
            }
        }
    });
    let addr = tokio::time::timeout(Duration::from_secs(60), addr_rx)
        .await
        .map_err(|_| anyhow::anyhow!("xdsd did not log its address in 60 s"))?
        .map_err(|_| anyhow::anyhow!("xdsd exited at start"))?;
    let admin = tokio::time::timeout(Duration::from_secs(60), admin_rx)
        .await
        .map_err(|_| anyhow::anyhow!("xdsd did not log its admin address in 60 s"))?
        .map_err(|_| anyhow::anyhow!("xdsd exited at start"))?;
    Ok(Started {
        child,
        pid,
        addr,
        admin,
        reloads: reload_rx,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{generate, ConfigSpec};

    #[test]
    fn every_generated_resource_has_json() {
        let spec = ConfigSpec {
            clusters: 3,
            endpoints: 2,
            listeners: 2,
            routes: 2,
            seed: 1,
        };
        for r in generate(&spec) {
            let j = to_json(r.type_url, &r.value).unwrap();
            assert_eq!(j["@type"], r.type_url);
        }
        let cla = crate::config::load_assignment(&spec, 1, 4242);
        let j = to_json(cla.type_url, &cla.value).unwrap();
        assert_eq!(j["policy"]["overprovisioning_factor"], 4242);
        assert_eq!(j["cluster_name"], "cluster-00001");
    }

    #[test]
    fn response_bytes_sum_every_type() {
        let metrics = "# HELP xdsd_response_bytes Bytes of the responses sent, by type URL.\n\
            xdsd_response_bytes_total{type_url=\"a\"} 1200\n\
            xdsd_response_bytes_total{type_url=\"b\"} 34\n\
            xdsd_responses_total{type_url=\"a\"} 7\n";
        assert_eq!(response_bytes(metrics), 1234);
    }

    #[test]
    fn log_fields() {
        let l = "2025-01-01T00:00:00Z  INFO xdsd: resources loaded resources=208 changed=1 generation=3";
        assert_eq!(field(l, "resources"), Some(208));
        assert_eq!(field(l, "generation"), Some(3));
    }
}
