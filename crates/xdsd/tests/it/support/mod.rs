//! Shared harness for xdsd's integration tests: runs the real `xdsd` binary, a real Envoy, tiny
//! HTTP upstreams, the Python gRPC helpers and a tonic xDS client, all on 127.0.0.1 with ports
//! chosen by the OS.
//!
//! Every child process is started with `kill_on_drop` and killed explicitly when its handle is
//! dropped. When a test panics, the handles print the logs they captured so the failure can be
//! understood from `cargo test` output alone.
//!
//! Include with `mod support;` from a test file.
#![allow(dead_code)]

pub mod ads;
pub mod relay;
pub mod scenario;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout, Instant};

/// How long any wait in the harness may take before the test fails. Generous on purpose: the
/// machine is small and shared; waits are polls that return as soon as the condition holds.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// Poll interval of the waits.
const POLL: Duration = Duration::from_millis(100);

/// Type URLs of the resources the tests use.
pub const LISTENER: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
pub const ROUTE: &str = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";
pub const CLUSTER: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
pub const ENDPOINTS: &str = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";

/// A name unique to this test process and call, e.g. `node-12345-3`.
pub fn unique_name(prefix: &str) -> String {
    format!("{prefix}-{}-{}", std::process::id(), next_counter())
}

/// A gRPC client's node: an id unique to the test run, made from `prefix`, in cluster `tests`.
pub fn client_node(prefix: &str) -> Option<envoy_types::pb::envoy::config::core::v3::Node> {
    Some(envoy_types::pb::envoy::config::core::v3::Node {
        id: unique_name(prefix),
        cluster: "tests".into(),
        ..Default::default()
    })
}

fn next_counter() -> u32 {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    COUNTER.fetch_add(1, Ordering::Relaxed)
}

/// The repository root (the workspace root).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

// ---------------------------------------------------------------------------------------------
// Captured output of a child process
// ---------------------------------------------------------------------------------------------

/// The lines a child process wrote to one of its pipes, collected by a background task for as
/// long as the pipe is open. Cheap to clone.
#[derive(Clone, Default)]
pub struct Log {
    lines: Arc<Mutex<Vec<String>>>,
    closed: Arc<std::sync::atomic::AtomicBool>,
    /// Woken at each line and when the pipe closes: what the waits wait on.
    grew: Arc<tokio::sync::Notify>,
}

impl Log {
    /// Starts draining `reader` into a new `Log`.
    pub fn drain<R: AsyncRead + Unpin + Send + 'static>(reader: R) -> Log {
        let log = Log::default();
        let sink = log.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(reader).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                sink.push(line);
            }
            sink.closed.store(true, Ordering::SeqCst);
            sink.grew.notify_waiters();
        });
        log
    }

    fn push(&self, line: String) {
        self.lock().push(line);
        self.grew.notify_waiters();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        // A panic while holding this lock cannot leave the vector inconsistent.
        self.lines
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// All lines so far.
    pub fn lines(&self) -> Vec<String> {
        self.lock().clone()
    }

    /// The number of lines so far: a mark to pass to [`Log::wait_for_since`] so that only lines
    /// written after this point count.
    pub fn mark(&self) -> usize {
        self.lock().len()
    }

    /// All lines so far, joined with newlines.
    pub fn text(&self) -> String {
        self.lines().join("\n")
    }

    /// Whether the process closed the pipe (usually: it exited).
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Lines after `mark` that satisfy `pred`.
    pub fn matching_since(&self, mark: usize, pred: impl Fn(&str) -> bool) -> Vec<String> {
        self.lock()
            .iter()
            .skip(mark)
            .filter(|l| pred(l))
            .cloned()
            .collect()
    }

    /// Waits up to `within` for a line satisfying `pred`, anywhere in the log.
    pub async fn wait_for(
        &self,
        pred: impl Fn(&str) -> bool,
        within: Duration,
    ) -> Result<String, String> {
        self.wait_for_since(0, pred, within).await
    }

    /// Waits up to `within` for a line after `mark` satisfying `pred` and returns it. The error
    /// says why it gave up (deadline or closed pipe).
    pub async fn wait_for_since(
        &self,
        mark: usize,
        pred: impl Fn(&str) -> bool,
        within: Duration,
    ) -> Result<String, String> {
        self.wait_until(
            mark,
            |lines| lines.iter().find(|l| pred(l)).cloned(),
            within,
        )
        .await
    }

    /// Waits up to `within` for the process to close its output (every line of it read);
    /// returns whether it did.
    pub async fn wait_closed(&self, within: Duration) -> bool {
        let _ = self.wait_until(0, |_| None::<()>, within).await;
        self.is_closed()
    }

    /// Waits up to `within` until `seen`, given the lines after `mark`, returns something, and
    /// returns it: woken by each new line, not polled. The error says why it gave up (deadline
    /// or closed pipe).
    pub async fn wait_until<T>(
        &self,
        mark: usize,
        seen: impl Fn(&[String]) -> Option<T>,
        within: Duration,
    ) -> Result<T, String> {
        let deadline = Instant::now() + within;
        loop {
            // Registered before the lines are read, so a line pushed after the read wakes it.
            let grew = self.grew.notified();
            tokio::pin!(grew);
            grew.as_mut().enable();
            // Read `closed` before the lines: a line pushed before the pipe closed is then seen.
            let closed = self.is_closed();
            let found = {
                let lines = self.lock();
                seen(lines.get(mark..).unwrap_or_default())
            };
            if let Some(found) = found {
                return Ok(found);
            }
            if closed {
                return Err("the process closed its output".to_string());
            }
            if tokio::time::timeout_at(deadline, grew).await.is_err() {
                return Err(format!("no such line within {within:?}"));
            }
        }
    }

    /// Waits for a line after `mark` containing every one of `needles`; panics with the whole log
    /// when there is none within [`DEADLINE`].
    pub async fn expect_line_since(&self, mark: usize, needles: &[&str], what: &str) -> String {
        match self
            .wait_for_since(mark, |l| needles.iter().all(|n| l.contains(n)), DEADLINE)
            .await
        {
            Ok(line) => line,
            Err(why) => panic!(
                "expected {what}: a log line containing {needles:?} ({why}). Log:\n{}",
                self.text()
            ),
        }
    }
}

/// Whether a log line names node `id` as `node=ID` (or `node="ID"`, tracing's debug form).
pub fn names_node(line: &str, id: &str) -> bool {
    line.contains(&format!("node={id}")) || line.contains(&format!("node=\"{id}\""))
}

/// The value of field `key` in a tracing log line (`key=value`, or `key="value"` unquoted), found
/// by token rather than by position. Values with spaces are not supported.
pub fn log_field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace().find_map(|token| {
        let (k, v) = token.split_once('=')?;
        (k == key).then(|| v.trim_matches('"'))
    })
}

/// Kills `child` now (SIGKILL) and reaps it without blocking for long.
fn kill_now(child: &mut Child) {
    let _ = child.start_kill();
    let _ = child.try_wait();
}

/// Sends SIGTERM to a running child (via `kill(1)`, so the tests need no libc binding).
pub fn send_sigterm(child: &Child) -> Result<(), String> {
    let pid = child.id().ok_or("the process has already exited")?;
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .map_err(|e| format!("cannot run kill: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("kill -TERM {pid} failed: {status}"))
    }
}

// ---------------------------------------------------------------------------------------------
// A resource directory with atomic writes
// ---------------------------------------------------------------------------------------------

/// A temporary directory holding `resources/` (the directory xdsd watches) and `staging/` (where
/// files are written before being renamed into `resources/`, so the watcher never sees a
/// half-written file).
pub struct ResourceDir {
    root: tempfile::TempDir,
}

impl ResourceDir {
    pub fn new() -> ResourceDir {
        let root = tempfile::Builder::new()
            .prefix("xdsd-test-")
            .tempdir()
            .expect("cannot create a temporary directory");
        std::fs::create_dir(root.path().join("resources")).expect("cannot create resources/");
        std::fs::create_dir(root.path().join("staging")).expect("cannot create staging/");
        ResourceDir { root }
    }

    /// The directory to give to `xdsd serve --resources`.
    pub fn path(&self) -> PathBuf {
        self.root.path().join("resources")
    }

    /// The path of `name` in the resource directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.path().join(name)
    }

    /// Writes `contents` to `resources/<name>` atomically (write to staging, then rename).
    pub fn write(&self, name: &str, contents: &str) {
        let staged = self
            .root
            .path()
            .join("staging")
            .join(format!("{}-{name}", next_counter()));
        std::fs::write(&staged, contents)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", staged.display()));
        std::fs::rename(&staged, self.file(name))
            .unwrap_or_else(|e| panic!("cannot rename into {}: {e}", self.file(name).display()));
    }

    /// Removes `resources/<name>`.
    pub fn remove(&self, name: &str) {
        std::fs::remove_file(self.file(name))
            .unwrap_or_else(|e| panic!("cannot remove {}: {e}", self.file(name).display()));
    }
}

impl Default for ResourceDir {
    fn default() -> Self {
        ResourceDir::new()
    }
}

// ---------------------------------------------------------------------------------------------
// xdsd
// ---------------------------------------------------------------------------------------------

/// A running `xdsd serve` with its stderr captured.
pub struct Xdsd {
    child: Child,
    /// The gRPC port xdsd listens on (127.0.0.1).
    pub port: u16,
    /// xdsd's stderr.
    pub log: Log,
}

impl Xdsd {
    /// Starts `xdsd serve --resources DIR --listen 127.0.0.1:0 --log-level debug` and waits for
    /// its "listening" line.
    pub async fn start(resources: &Path) -> Xdsd {
        Xdsd::start_with_args(resources, &["--log-level", "debug"]).await
    }

    /// Like [`Xdsd::start`] with other extra arguments after the mandatory ones.
    pub async fn start_with_args(resources: &Path, extra: &[&str]) -> Xdsd {
        Xdsd::start_on(resources, "127.0.0.1:0", extra).await
    }

    /// Starts `xdsd serve --resources DIR --listen LISTEN EXTRA...` and waits for its
    /// "listening" line; panics with the log when it does not come.
    pub async fn start_on(resources: &Path, listen: &str, extra: &[&str]) -> Xdsd {
        Xdsd::try_start_on(resources, listen, extra)
            .await
            .unwrap_or_else(|why| panic!("{why}"))
    }

    /// Like [`Xdsd::start_on`], but returns why xdsd did not start (for example, the port of
    /// `listen` is not free yet) instead of panicking.
    pub async fn try_start_on(
        resources: &Path,
        listen: &str,
        extra: &[&str],
    ) -> Result<Xdsd, String> {
        let source = [std::ffi::OsStr::new("--resources"), resources.as_os_str()];
        Xdsd::try_start_from(&source, listen, extra, &[]).await
    }

    /// Starts `xdsd serve --etcd-endpoints ENDPOINT --etcd-prefix PREFIX --listen 127.0.0.1:0
    /// --log-level debug EXTRA...` and waits for its "listening" line.
    pub async fn start_etcd(endpoint: &str, prefix: &str, extra: &[&str]) -> Xdsd {
        Xdsd::start_etcd_with_env(endpoint, prefix, extra, &[]).await
    }

    /// [`Xdsd::start_etcd`] with these variables in its environment.
    pub async fn start_etcd_with_env(
        endpoint: &str,
        prefix: &str,
        extra: &[&str],
        envs: &[(&str, &str)],
    ) -> Xdsd {
        let source = [
            "--etcd-endpoints",
            endpoint,
            "--etcd-prefix",
            prefix,
            "--log-level",
            "debug",
        ]
        .map(std::ffi::OsStr::new);
        Xdsd::try_start_from(&source, "127.0.0.1:0", extra, envs)
            .await
            .unwrap_or_else(|why| panic!("{why}"))
    }

    /// `xdsd serve SOURCE... --listen LISTEN EXTRA...`, once it logged its "listening" line.
    async fn try_start_from(
        source: &[&std::ffi::OsStr],
        listen: &str,
        extra: &[&str],
        envs: &[(&str, &str)],
    ) -> Result<Xdsd, String> {
        let bin = env!("CARGO_BIN_EXE_xdsd");
        let mut child = Command::new(bin)
            .arg("serve")
            .args(source)
            .args(["--listen", listen])
            .args(extra)
            .env("NO_COLOR", "1")
            // Tests run side by side: the admin API on a free port (unless `extra` says
            // otherwise).
            .env("XDSD_ADMIN_LISTEN", "127.0.0.1:0")
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
        let stderr = child.stderr.take().expect("stderr is piped");
        let log = Log::drain(stderr);
        let marker = "xDS gRPC server listening on ";
        let line = match log.wait_for(|l| l.contains(marker), DEADLINE).await {
            Ok(line) => line,
            Err(why) => {
                kill_now(&mut child);
                return Err(format!(
                    "xdsd did not log {marker:?} ({why}); exit status {:?}. Log:\n{}",
                    child.try_wait(),
                    log.text()
                ));
            }
        };
        let Some(port) = parse_port_after(&line, marker) else {
            kill_now(&mut child);
            return Err(format!("cannot parse the port from xdsd's line {line:?}"));
        };
        Ok(Xdsd { child, port, log })
    }

    /// The port of xdsd's admin API (from its "admin API listening" line).
    pub async fn admin_port(&self) -> u16 {
        let marker = "admin API listening on http://";
        let line = self
            .log
            .expect_line_since(0, &[marker], "xdsd to start its admin API")
            .await;
        parse_port_after(&line, marker)
            .unwrap_or_else(|| panic!("cannot parse the admin port from {line:?}"))
    }

    /// `http://127.0.0.1:PORT`, for gRPC clients.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:PORT`.
    pub fn authority(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Waits for an INFO `resources loaded` line after `mark`.
    pub async fn expect_loaded_since(&self, mark: usize) -> String {
        self.log
            .expect_line_since(mark, &["resources loaded"], "xdsd to load the resources")
            .await
    }

    /// xdsd's resident memory (VmRSS of /proc/PID/status), in KiB.
    pub fn rss_kib(&self) -> u64 {
        let pid = self.child.id().expect("xdsd is running");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_else(|e| panic!("cannot read xdsd's /proc status: {e}"));
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no VmRSS in xdsd's /proc status:\n{status}"))
    }

    /// Kills xdsd at once (SIGKILL: no graceful shutdown) and waits until it is gone.
    pub async fn kill9(&mut self) {
        let _ = self.child.start_kill();
        let _ = timeout(DEADLINE, self.child.wait()).await;
    }

    /// Whether xdsd is still running (it has not exited, crashed or been killed).
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends SIGTERM, without waiting for xdsd to exit.
    pub fn sigterm(&self) {
        send_sigterm(&self.child).expect("cannot send SIGTERM to xdsd");
    }

    /// Sends SIGTERM and waits for the exit status.
    pub async fn terminate(&mut self) -> ExitStatus {
        self.sigterm();
        self.exit_status().await
    }

    /// Waits for xdsd to exit (after [`Xdsd::sigterm`]).
    pub async fn exit_status(&mut self) -> ExitStatus {
        match timeout(DEADLINE, self.child.wait()).await {
            Ok(Ok(status)) => status,
            Ok(Err(e)) => panic!("waiting for xdsd failed: {e}"),
            Err(_) => panic!(
                "xdsd did not exit within {DEADLINE:?} after SIGTERM. Log:\n{}",
                self.log.text()
            ),
        }
    }
}

impl Drop for Xdsd {
    fn drop(&mut self) {
        kill_now(&mut self.child);
        if std::thread::panicking() {
            eprintln!(
                "----- xdsd stderr -----\n{}\n----- end xdsd -----",
                self.log.text()
            );
        }
    }
}

/// Parses the port of `HOST:PORT` following `marker` in `line`.
pub fn parse_port_after(line: &str, marker: &str) -> Option<u16> {
    let rest = &line[line.find(marker)? + marker.len()..];
    // In a JSON log line the address ends the message string.
    let addr = rest.split_whitespace().next()?.split('"').next()?;
    addr.rsplit_once(':')?.1.parse().ok()
}

// ---------------------------------------------------------------------------------------------
// Envoy
// ---------------------------------------------------------------------------------------------

/// The Envoy binary from `XDSD_ENVOY`; panics with instructions when it is not set.
pub fn envoy_binary() -> PathBuf {
    match std::env::var_os("XDSD_ENVOY") {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => panic!(
            "XDSD_ENVOY is not set: run the tests with `scripts/test` (it installs Envoy into \
             .cache/ and sets XDSD_ENVOY and XDSD_PYTHON), or set XDSD_ENVOY to an Envoy 1.40 binary"
        ),
    }
}

/// A running Envoy with its admin port known and its stderr captured.
pub struct Envoy {
    child: Child,
    /// Envoy's admin port on 127.0.0.1.
    pub admin_port: u16,
    /// Envoy's stderr.
    pub log: Log,
    _dir: tempfile::TempDir,
}

impl Envoy {
    /// Starts Envoy with `bootstrap` (YAML, whose admin must listen on 127.0.0.1 port 0; see
    /// [`scenario::ADMIN`]) and waits until it wrote its admin address.
    pub async fn start(bootstrap: &str) -> Envoy {
        let dir = tempfile::Builder::new()
            .prefix("xdsd-envoy-")
            .tempdir()
            .expect("cannot create a temporary directory");
        let config = dir.path().join("envoy.yaml");
        std::fs::write(&config, bootstrap).expect("cannot write the Envoy bootstrap");
        let admin_path = dir.path().join("admin-address");
        // Shared memory and the domain socket of hot restart are keyed by the base id, one per
        // Envoy on this machine: Envoy picks a free one (a counted one wrapped after 64 Envoys
        // in one test binary and met one still running: "unable to bind domain socket").
        let bin = envoy_binary();
        let mut child = Command::new(&bin)
            .arg("-c")
            .arg(&config)
            .arg("--use-dynamic-base-id")
            .args(["--concurrency", "1"])
            .arg("--admin-address-path")
            .arg(&admin_path)
            .args(["--log-level", "info"])
            .args(["--component-log-level", "upstream:debug,config:debug"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start Envoy {}: {e}", bin.display()));
        let log = Log::drain(child.stderr.take().expect("stderr is piped"));
        let deadline = Instant::now() + DEADLINE;
        let admin_port = loop {
            let text = std::fs::read_to_string(&admin_path).unwrap_or_default();
            if let Some(port) = text
                .trim()
                .rsplit_once(':')
                .and_then(|(_, p)| p.parse::<u16>().ok())
            {
                break port;
            }
            if let Ok(Some(status)) = child.try_wait() {
                // Its last lines: read until it closed its output.
                log.wait_closed(Duration::from_secs(2)).await;
                panic!("Envoy exited early with {status}. Log:\n{}", log.text());
            }
            if Instant::now() >= deadline {
                kill_now(&mut child);
                panic!(
                    "Envoy did not write its admin address within {DEADLINE:?}. Log:\n{}",
                    log.text()
                );
            }
            sleep(POLL).await;
        };
        Envoy {
            child,
            admin_port,
            log,
            _dir: dir,
        }
    }

    /// GET on the admin endpoint.
    pub async fn admin_get(&self, path: &str) -> std::io::Result<HttpResponse> {
        http_get(("127.0.0.1", self.admin_port), path, "localhost").await
    }

    /// Polls `/listeners?format=json` until the listener `name` has a bound port and returns it.
    pub async fn listener_port(&self, name: &str) -> u16 {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let last = match self.admin_get("/listeners?format=json").await {
                Ok(resp) if resp.status == 200 => {
                    if let Some(port) = listener_port_from_json(&resp.body, name) {
                        return port;
                    }
                    resp.body
                }
                Ok(resp) => format!("status {}: {}", resp.status, resp.body),
                Err(e) => format!("error: {e}"),
            };
            if Instant::now() >= deadline {
                panic!(
                    "Envoy has no bound listener {name:?} after {DEADLINE:?}; last /listeners: \
                     {last}\nEnvoy log:\n{}",
                    self.log.text()
                );
            }
            sleep(POLL).await;
        }
    }

    /// The admin `/config_dump` (for debugging output).
    pub async fn config_dump(&self) -> String {
        match self.admin_get("/config_dump").await {
            Ok(resp) => resp.body,
            Err(e) => format!("(config_dump failed: {e})"),
        }
    }

    /// The text readouts of the admin `/stats` whose names match `filter` (a regex), as
    /// (name, value without its quotes).
    pub async fn text_stats(&self, filter: &str) -> Vec<(String, String)> {
        let Ok(resp) = self.admin_get(&format!("/stats?filter={filter}")).await else {
            return Vec::new();
        };
        resp.body
            .lines()
            .filter_map(|l| {
                let (k, v) = l.split_once(": ")?;
                let v = v.trim().strip_prefix('"')?.strip_suffix('"')?;
                Some((k.trim().to_owned(), v.to_owned()))
            })
            .collect()
    }

    /// The value of one counter or gauge from the admin `/stats`, if present.
    pub async fn stat(&self, name: &str) -> Option<u64> {
        let resp = self
            .admin_get(&format!("/stats?filter=^{name}$"))
            .await
            .ok()?;
        resp.body.lines().find_map(|l| {
            let (k, v) = l.split_once(": ")?;
            (k.trim() == name).then(|| v.trim().parse().ok())?
        })
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        kill_now(&mut self.child);
        if std::thread::panicking() {
            eprintln!(
                "----- Envoy stderr -----\n{}\n----- end Envoy -----",
                self.log.text()
            );
        }
    }
}

/// Finds the bound port of listener `name` in the admin `/listeners?format=json` output.
pub fn listener_port_from_json(body: &str, name: &str) -> Option<u16> {
    let json: serde_json::Value = serde_json::from_str(body).ok()?;
    json.get("listener_statuses")?
        .as_array()?
        .iter()
        .filter(|l| l.get("name").and_then(|n| n.as_str()) == Some(name))
        .find_map(|l| {
            let port = l
                .pointer("/local_address/socket_address/port_value")?
                .as_u64()?;
            u16::try_from(port).ok().filter(|p| *p != 0)
        })
}

// ---------------------------------------------------------------------------------------------
// HTTP upstreams and a tiny HTTP/1.1 client
// ---------------------------------------------------------------------------------------------

/// An HTTP/1.1 server on 127.0.0.1:0 that answers every request with 200 and its own name as the
/// body (keep-alive supported). Stops when dropped.
pub struct Upstream {
    pub name: String,
    pub port: u16,
    hits: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Upstream {
    pub async fn start(name: &str) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("cannot bind an upstream on 127.0.0.1:0");
        let port = listener
            .local_addr()
            .expect("upstream has a local address")
            .port();
        let hits = Arc::new(AtomicUsize::new(0));
        let body = name.to_string();
        let counter = hits.clone();
        let task = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serve_http_connection(socket, body.clone(), counter.clone()));
            }
        });
        Upstream {
            name: name.to_string(),
            port,
            hits,
            task,
        }
    }

    /// How many requests this upstream answered.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve_http_connection(mut socket: TcpStream, body: String, hits: Arc<AtomicUsize>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        // Requests carry no body (GET), so one request ends at the blank line.
        while find_subslice(&buf, b"\r\n\r\n").is_none() {
            match socket.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let end = find_subslice(&buf, b"\r\n\r\n").map_or(buf.len(), |i| i + 4);
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        buf.drain(..end);
        hits.fetch_add(1, Ordering::SeqCst);
        let close = head.contains("connection: close");
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n{}\r\n{body}",
            body.len(),
            if close { "connection: close\r\n" } else { "" }
        );
        if socket.write_all(response.as_bytes()).await.is_err() || close {
            return;
        }
    }
}

fn find_subslice(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A response of [`http_get`].
#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: String,
    pub body: String,
}

/// One `GET path` over a new HTTP/1.1 connection with `Connection: close`; at most 10 s.
pub async fn http_get(
    addr: impl tokio::net::ToSocketAddrs,
    path: &str,
    host: &str,
) -> std::io::Result<HttpResponse> {
    let io_timeout = |_| std::io::Error::new(std::io::ErrorKind::TimedOut, "HTTP GET timed out");
    timeout(Duration::from_secs(10), async {
        let mut stream = TcpStream::connect(addr).await?;
        let request = format!("GET {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        parse_http_response(&raw)
    })
    .await
    .map_err(io_timeout)?
}

pub fn parse_http_response(raw: &[u8]) -> std::io::Result<HttpResponse> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let split = find_subslice(raw, b"\r\n\r\n").ok_or_else(|| bad("no end of headers"))?;
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("no status code"))?;
    let mut body = raw[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body).ok_or_else(|| bad("bad chunked body"))?;
    }
    Ok(HttpResponse {
        status,
        headers: head,
        body: String::from_utf8_lossy(&body).to_string(),
    })
}

fn dechunk(mut data: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = find_subslice(data, b"\r\n")?;
        let size_text = std::str::from_utf8(&data[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(data.get(..size)?);
        data = data.get(size + 2..)?;
    }
}

/// Polls `GET /` on `127.0.0.1:port` until the body is `expected` (status 200) and returns the
/// number of attempts; panics with the observed responses after [`DEADLINE`].
pub async fn wait_for_body(port: u16, expected: &str, context: impl Fn() -> String) -> usize {
    wait_for_body_at(port, "/", expected, context).await
}

/// Like [`wait_for_body`] for `GET path`.
pub async fn wait_for_body_at(
    port: u16,
    path: &str,
    expected: &str,
    context: impl Fn() -> String,
) -> usize {
    let deadline = Instant::now() + DEADLINE;
    let mut attempts = 0;
    let mut seen = String::new();
    loop {
        attempts += 1;
        match http_get(("127.0.0.1", port), path, "example.test").await {
            Ok(resp) if resp.status == 200 && resp.body == expected => return attempts,
            Ok(resp) => {
                let _ = write!(seen, "[{} {:?}] ", resp.status, truncate(&resp.body, 120));
            }
            Err(e) => {
                let _ = write!(seen, "[error {e}] ");
            }
        }
        if Instant::now() >= deadline {
            panic!(
                "no 200 {expected:?} from 127.0.0.1:{port}{path} within {DEADLINE:?} ({attempts} \
                 attempts); last responses: {}\n{}",
                truncate_tail(&seen, 2000),
                context()
            );
        }
        sleep(Duration::from_millis(200)).await;
    }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

fn truncate_tail(s: &str, max: usize) -> &str {
    let skip = s.chars().count().saturating_sub(max);
    match s.char_indices().nth(skip) {
        Some((i, _)) => &s[i..],
        None => s,
    }
}

// ---------------------------------------------------------------------------------------------
// Python helpers
// ---------------------------------------------------------------------------------------------

/// The Python interpreter from `XDSD_PYTHON`; panics with instructions when it is not set.
pub fn python_binary() -> PathBuf {
    match std::env::var_os("XDSD_PYTHON") {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => panic!(
            "XDSD_PYTHON is not set: run the tests with `scripts/test` (it installs grpcio into \
             .cache/venv and sets XDSD_PYTHON), or set XDSD_PYTHON to a python with grpcio 1.85"
        ),
    }
}

/// The path of a helper program in `tests/python/`.
pub fn python_helper(name: &str) -> PathBuf {
    repo_root().join("tests/python").join(name)
}

/// `tests/python/grpc_server.py`: a gRPC server on 127.0.0.1:0 answering every unary call with
/// its name.
pub struct PyGrpcServer {
    child: Child,
    pub name: String,
    pub port: u16,
    /// The server's stdout (one line per call served) and stderr, interleaved by line.
    pub log: Log,
    pub stderr: Log,
}

impl PyGrpcServer {
    pub async fn start(name: &str) -> PyGrpcServer {
        let python = python_binary();
        let script = python_helper("grpc_server.py");
        let mut child = Command::new(&python)
            .arg(&script)
            .args(["--name", name])
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {} {}: {e}",
                    python.display(),
                    script.display()
                )
            });
        let log = Log::drain(child.stdout.take().expect("stdout is piped"));
        let stderr = Log::drain(child.stderr.take().expect("stderr is piped"));
        let marker = "listening on 127.0.0.1:";
        let line = match log.wait_for(|l| l.contains(marker), DEADLINE).await {
            Ok(line) => line,
            Err(why) => {
                kill_now(&mut child);
                panic!(
                    "grpc_server.py did not print {marker:?} ({why}). stdout:\n{}\nstderr:\n{}",
                    log.text(),
                    stderr.text()
                );
            }
        };
        let port = parse_port_after(&line, "listening on ")
            .unwrap_or_else(|| panic!("cannot parse the port from {line:?}"));
        PyGrpcServer {
            child,
            name: name.to_string(),
            port,
            log,
            stderr,
        }
    }

    /// Lines the server printed for calls it served.
    pub fn calls(&self) -> Vec<String> {
        self.log.matching_since(0, |l| l.starts_with("served "))
    }
}

impl Drop for PyGrpcServer {
    fn drop(&mut self) {
        kill_now(&mut self.child);
        if std::thread::panicking() {
            eprintln!(
                "----- grpc_server.py {} stdout -----\n{}\n----- stderr -----\n{}\n----- end -----",
                self.name,
                self.log.text(),
                self.stderr.text()
            );
        }
    }
}

/// What `tests/python/grpc_client.py` did.
#[derive(Debug)]
pub struct PyClientOutput {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `tests/python/grpc_client.py ARGS` with extra environment variables and waits for it
/// (at most [`DEADLINE`] plus a margin; it is killed after that).
pub async fn run_python_client(args: &[&str], envs: &[(&str, &str)]) -> PyClientOutput {
    let python = python_binary();
    let script = python_helper("grpc_client.py");
    let mut cmd = Command::new(&python);
    cmd.arg(&script)
        .args(args)
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let child = cmd.spawn().unwrap_or_else(|e| {
        panic!(
            "cannot start {} {}: {e}",
            python.display(),
            script.display()
        )
    });
    match timeout(DEADLINE + Duration::from_secs(15), child.wait_with_output()).await {
        Ok(Ok(out)) => PyClientOutput {
            status: out.status,
            stdout: String::from_utf8_lossy(&out.stdout).to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).to_string(),
        },
        Ok(Err(e)) => panic!("waiting for grpc_client.py failed: {e}"),
        Err(_) => panic!("grpc_client.py did not finish in time (it was killed)"),
    }
}

/// A gRPC health client of xdsd's port.
pub async fn health_client(
    xdsd: &Xdsd,
) -> tonic_health::pb::health_client::HealthClient<tonic::transport::Channel> {
    let channel = tonic::transport::Endpoint::from_shared(xdsd.url())
        .expect("a URL")
        .connect()
        .await
        .expect("connected to xdsd");
    tonic_health::pb::health_client::HealthClient::new(channel)
}
