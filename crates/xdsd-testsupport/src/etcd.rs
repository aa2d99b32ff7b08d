//! A real etcd for the tests: started on 127.0.0.1 with ports from the OS and its own temporary
//! data directory, killed when dropped; its output is printed when a test fails.
//!
//! A port the OS called free may be taken before etcd binds it (by any connection's local port:
//! they come from the same range), so a start that etcd refuses with "address already in use"
//! is tried again on other ports (a restart, on the same ones a moment later).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::time::{sleep, timeout, Instant};
use xdsd_etcd::{Event, Watch};

/// How long any wait may take before the test fails (polls return as soon as they succeed).
pub const DEADLINE: Duration = Duration::from_secs(30);

/// The etcd binary: `XDSD_ETCD`, else `/usr/bin/etcd`; panics with instructions when neither is
/// there.
pub fn etcd_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("XDSD_ETCD").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    let default = PathBuf::from("/usr/bin/etcd");
    if default.exists() {
        return default;
    }
    panic!(
        "no etcd: run the tests with `scripts/test` (it installs the Debian package etcd-server \
         and sets XDSD_ETCD), or set XDSD_ETCD to an etcd 3.4+ binary"
    )
}

/// How many times a start refused for a port in use is tried.
const STARTS: usize = 5;

/// Why etcd did not come up: a port it was given was taken meanwhile.
struct PortTaken;

/// A port on 127.0.0.1 that was free a moment ago.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("a local address").port()
}

/// TLS for etcd's client port: server certificate, key and the CA of client certificates.
#[derive(Clone)]
pub struct ServerTls {
    /// The server certificate (PEM).
    pub cert: PathBuf,
    /// Its key (PEM).
    pub key: PathBuf,
    /// The CA that signs the client certificates etcd accepts (PEM).
    pub client_ca: PathBuf,
}

/// A running single-node etcd.
pub struct Etcd {
    child: Option<Child>,
    data: tempfile::TempDir,
    /// The client port on 127.0.0.1.
    pub client_port: u16,
    peer_port: u16,
    tls: Option<ServerTls>,
    extra: Vec<String>,
    log: Arc<Mutex<Vec<String>>>,
    /// Lines of the log before the current run.
    mark: usize,
}

impl Etcd {
    /// Starts etcd with its defaults and waits until it answers.
    pub async fn start() -> Etcd {
        Etcd::start_with(None, &[]).await
    }

    /// Starts etcd with TLS on the client port (and client certificates required) and `extra`
    /// flags, and waits until it answers (through TCP: a TLS etcd is checked by the test).
    pub async fn start_with(tls: Option<ServerTls>, extra: &[&str]) -> Etcd {
        let data = tempfile::Builder::new()
            .prefix("xdsd-etcd-")
            .tempdir()
            .expect("a temporary data directory");
        let mut etcd = Etcd {
            child: None,
            data,
            client_port: free_port(),
            peer_port: free_port(),
            tls,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            log: Arc::default(),
            mark: 0,
        };
        for attempt in 1..=STARTS {
            match etcd.spawn(etcd.client_port).await {
                Ok(()) => break,
                Err(PortTaken) if attempt < STARTS => {
                    etcd.client_port = free_port();
                    etcd.peer_port = free_port();
                }
                Err(PortTaken) => etcd.refused(),
            }
        }
        etcd
    }

    /// Fails the test: etcd refused every start for a port in use.
    fn refused(&self) -> ! {
        panic!(
            "etcd found its ports taken {STARTS} times. Log:\n{}",
            self.log_text()
        )
    }

    fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// The client URL.
    pub fn endpoint(&self) -> String {
        format!("{}://127.0.0.1:{}", self.scheme(), self.client_port)
    }

    /// Starts etcd on `client_port` and waits until it serves; `PortTaken` when it exits saying
    /// a port is in use.
    async fn spawn(&mut self, client_port: u16) -> Result<(), PortTaken> {
        let client = format!("{}://127.0.0.1:{client_port}", self.scheme());
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let mut command = Command::new(etcd_binary());
        command
            .arg("--name=n1")
            .arg(format!(
                "--data-dir={}",
                self.data.path().join("data").display()
            ))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=n1={peer}"))
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(tls) = &self.tls {
            command
                .arg(format!("--cert-file={}", tls.cert.display()))
                .arg(format!("--key-file={}", tls.key.display()))
                .arg(format!("--trusted-ca-file={}", tls.client_ca.display()))
                .arg("--client-cert-auth");
        }
        let mut child = command.spawn().expect("cannot start etcd");
        if let Some(out) = child.stdout.take() {
            drain(out, self.log.clone());
        }
        if let Some(err) = child.stderr.take() {
            drain(err, self.log.clone());
        }
        self.child = Some(child);
        self.wait_listening(client_port).await
    }

    /// Whether a line etcd printed in this run (after the mark) says `what`.
    fn said(&self, what: &[&str]) -> bool {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .skip(self.mark)
            .any(|l| what.iter().any(|w| l.contains(w)))
    }

    /// Waits until etcd accepts connections on `port` and says it serves clients; `PortTaken`
    /// when it exited saying a port is in use (its output read to the end, the mark moved past
    /// it).
    async fn wait_listening(&mut self, port: u16) -> Result<(), PortTaken> {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if self.said(&["serving client", "ready to serve client"])
                && tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .is_ok()
            {
                return Ok(());
            }
            let exited = match self.child.as_mut() {
                Some(child) => matches!(child.try_wait(), Ok(Some(_))),
                None => false,
            };
            if exited {
                // Its last lines may still be on their way through the pipes.
                sleep(Duration::from_millis(100)).await;
                if self.said(&["address already in use"]) {
                    self.kill().await;
                    return Err(PortTaken);
                }
                panic!("etcd exited while starting. Log:\n{}", self.log_text());
            }
            if Instant::now() >= deadline {
                panic!(
                    "etcd did not start within {DEADLINE:?}. Log:\n{}",
                    self.log_text()
                );
            }
            sleep(Duration::from_millis(50)).await;
        }
    }

    /// Kills etcd (SIGKILL) and waits until it is gone.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
        // Its output mentions serving clients: later starts look at lines after this mark.
        self.mark = self.log.lock().unwrap_or_else(|p| p.into_inner()).len();
    }

    /// Starts the killed etcd again on the same ports and data directory (tried again a moment
    /// later while a port is taken).
    pub async fn restart(&mut self) {
        for _ in 0..STARTS {
            if self.spawn(self.client_port).await.is_ok() {
                return;
            }
            sleep(Duration::from_millis(500)).await;
        }
        self.refused()
    }

    /// Starts the killed etcd again on the same data directory but another client port (so that
    /// a watcher of the usual one cannot reach it); returns that port's URL.
    pub async fn restart_elsewhere(&mut self) -> String {
        for _ in 0..STARTS {
            let port = free_port();
            if self.spawn(port).await.is_ok() {
                return format!("{}://127.0.0.1:{port}", self.scheme());
            }
        }
        self.refused()
    }

    /// A client of its usual endpoint.
    pub async fn client(&self) -> etcd_client::Client {
        client_of(&self.endpoint()).await
    }

    /// What etcd has printed so far, one line each.
    pub fn log_text(&self) -> String {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .join("\n")
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
        if std::thread::panicking() {
            eprintln!(
                "--- etcd log ---\n{}\n--- end of etcd log ---",
                self.log_text()
            );
        }
    }
}

fn drain<R: AsyncRead + Unpin + Send + 'static>(reader: R, log: Arc<Mutex<Vec<String>>>) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(reader).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            log.lock().unwrap_or_else(|p| p.into_inner()).push(line);
        }
    });
}

/// A plain client of `endpoint`.
pub async fn client_of(endpoint: &str) -> etcd_client::Client {
    etcd_client::Client::connect([endpoint], None)
        .await
        .expect("an etcd client")
}

/// Puts `key` = `value` and returns the revision written.
pub async fn put(client: &mut etcd_client::Client, key: &str, value: &str) -> i64 {
    let response = client.put(key, value, None).await.expect("put");
    response.header().expect("a header").revision()
}

/// The next event of `watch`, failing the test after [`DEADLINE`].
pub async fn next(watch: &mut Watch) -> Event {
    match timeout(DEADLINE, watch.next()).await {
        Ok(Some(event)) => event,
        Ok(None) => panic!("the watch's task ended"),
        Err(_) => panic!("no event within {DEADLINE:?}"),
    }
}

/// Options for `etcd` under `prefix`, with quick reconnections.
pub fn options(endpoint: &str, prefix: &str) -> xdsd_etcd::EtcdOptions {
    xdsd_etcd::EtcdOptions::new([endpoint], prefix)
        .with_backoff(Duration::from_millis(50), Duration::from_millis(500))
        .with_request_timeout(Duration::from_secs(10))
}

/// A revision event's changes as (key, Some(value) or None for a delete).
pub fn changes(event: &Event) -> (i64, Vec<(String, Option<String>)>) {
    match event {
        Event::Revision { revision, changes } => (
            *revision,
            changes
                .iter()
                .map(|c| match c {
                    xdsd_etcd::KeyChange::Put { key, value } => (
                        key.clone(),
                        Some(String::from_utf8_lossy(value).into_owned()),
                    ),
                    xdsd_etcd::KeyChange::Delete { key } => (key.clone(), None),
                    other => panic!("unexpected change {other:?}"),
                })
                .collect(),
        ),
        other => panic!("expected a revision, got {other:?}"),
    }
}
