//! `xdsd relay` as a child process, and a server reached directly or through a relay
//! ([`Served`]), for the tests whose rules hold either way (the same body run for both).

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use super::{http_get, parse_port_after, Log, Xdsd, DEADLINE};

/// How a test reaches the server whose rules it checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `xdsd serve`.
    Direct,
    /// `xdsd relay` (defaults: everything it is asked pulled through one upstream stream, the
    /// usual types prefetched) in front of `xdsd serve`.
    Relay,
    /// `xdsd relay --aggregate-by node` (an upstream stream and a store per node id, nothing
    /// prefetched) in front of `xdsd serve`.
    RelayByNode,
}

/// `xdsd serve` of a directory, reached directly or through an `xdsd relay` of it.
pub struct Served {
    /// The server of the resources (with a relay, its upstream).
    pub xdsd: Xdsd,
    /// The relay in front of it, if any.
    pub relay: Option<Relay>,
}

impl Served {
    /// `xdsd serve --resources DIR` with `extra` (with a relay: the relay's, the server's
    /// own at their defaults and `--log-level debug`).
    pub async fn start(resources: &Path, extra: &[&str], mode: Mode) -> Served {
        match mode {
            Mode::Direct => {
                let extra: Vec<&str> = if extra.contains(&"--log-level") {
                    extra.to_vec()
                } else {
                    [&["--log-level", "debug"], extra].concat()
                };
                Served {
                    xdsd: Xdsd::start_with_args(resources, &extra).await,
                    relay: None,
                }
            }
            Mode::Relay | Mode::RelayByNode => {
                let xdsd = Xdsd::start(resources).await;
                let by_node: &[&str] = match mode {
                    Mode::RelayByNode => &["--aggregate-by", "node"],
                    _ => &[],
                };
                let extra = [extra, by_node].concat();
                let relay = Relay::start(&format!("127.0.0.1:{}", xdsd.port), &extra).await;
                Served {
                    xdsd,
                    relay: Some(relay),
                }
            }
        }
    }

    /// The xDS (and REST) port the clients reach.
    pub fn port(&self) -> u16 {
        match &self.relay {
            Some(relay) => relay.port,
            None => self.xdsd.port,
        }
    }

    /// The log of the server the clients reach.
    pub fn log(&self) -> &Log {
        match &self.relay {
            Some(relay) => &relay.log,
            None => &self.xdsd.log,
        }
    }

    /// `http://127.0.0.1:PORT` of the server the clients reach, for gRPC clients.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port())
    }

    /// The admin API's port of the server the clients reach.
    pub async fn admin_port(&self) -> u16 {
        match &self.relay {
            Some(relay) => relay.admin_port().await,
            None => self.xdsd.admin_port().await,
        }
    }
}

/// Each test `async fn name(mode: Mode)` named run against `xdsd serve` (`direct::name`) and
/// through `xdsd relay` (`relay::name`): the same rules hold for a client of either. Listed
/// after `both_groupings:`, also through `xdsd relay --aggregate-by node`
/// (`relay_by_node::name`).
macro_rules! direct_and_relayed {
    (both_groupings: $($name:ident),* $(,)?) => {
        $crate::support::relay::direct_and_relayed!($($name),*);
        mod relay_by_node {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                super::$name($crate::support::relay::Mode::RelayByNode).await
            })*
        }
    };
    ($($name:ident),* $(,)?) => {
        mod direct {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                super::$name($crate::support::relay::Mode::Direct).await
            })*
        }
        mod relay {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                super::$name($crate::support::relay::Mode::Relay).await
            })*
        }
    };
}
pub(crate) use direct_and_relayed;

/// A running `xdsd relay` with its stderr captured.
pub struct Relay {
    child: Child,
    /// The downstream gRPC port (127.0.0.1).
    pub port: u16,
    /// Its stderr.
    pub log: Log,
}

impl Relay {
    /// `xdsd relay --upstream UPSTREAM --listen 127.0.0.1:0 --linger 1s EXTRA...` (with
    /// `--log-level debug` unless EXTRA sets it), once it logged its "listening" line.
    pub async fn start(upstream: &str, extra: &[&str]) -> Relay {
        let bin = env!("CARGO_BIN_EXE_xdsd");
        let level: &[&str] = if extra.contains(&"--log-level") {
            &[]
        } else {
            &["--log-level", "debug"]
        };
        let mut child = Command::new(bin)
            .args(["relay", "--upstream", upstream, "--listen", "127.0.0.1:0"])
            .args(["--linger", "1s"])
            .args(level)
            .args(extra)
            .env("NO_COLOR", "1")
            .env("XDSD_ADMIN_LISTEN", "127.0.0.1:0")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
        let log = Log::drain(child.stderr.take().expect("stderr is piped"));
        let marker = "xDS gRPC relay listening on ";
        let line = match log.wait_for(|l| l.contains(marker), DEADLINE).await {
            Ok(line) => line,
            Err(why) => {
                let _ = child.start_kill();
                panic!(
                    "the relay did not log {marker:?} ({why}). Log:\n{}",
                    log.text()
                );
            }
        };
        let port = parse_port_after(&line, marker)
            .unwrap_or_else(|| panic!("cannot parse the port from {line:?}"));
        Relay { child, port, log }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn authority(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The port of the relay's admin API.
    pub async fn admin_port(&self) -> u16 {
        let marker = "admin API listening on http://";
        let line = self
            .log
            .expect_line_since(0, &[marker], "the relay to start its admin API")
            .await;
        parse_port_after(&line, marker)
            .unwrap_or_else(|| panic!("cannot parse the admin port from {line:?}"))
    }

    /// `GET path` on the relay's admin API: status and body.
    pub async fn admin(&self, path: &str) -> (u16, String) {
        let port = self.admin_port().await;
        let resp = http_get(("127.0.0.1", port), path, "localhost")
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        (resp.status, resp.body)
    }

    /// The value of the metric line `series` of the relay's `/metrics`.
    pub async fn metric(&self, series: &str) -> Option<f64> {
        let (status, body) = self.admin("/metrics").await;
        assert_eq!(status, 200, "GET /metrics: {body}");
        body.lines().find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
                .and_then(|rest| rest.trim().parse().ok())
        })
    }

    /// Waits until the relay's metric `series` reads `value`.
    pub async fn wait_metric(&self, series: &str, value: f64) {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let now = self.metric(series).await;
            if now == Some(value) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the relay's {series} stayed {now:?}, not {value}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The status of `GET /readyz` on the relay's admin API.
    pub async fn readyz(&self) -> u16 {
        self.admin("/readyz").await.0
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        if std::thread::panicking() {
            eprintln!(
                "----- relay stderr -----\n{}\n----- end relay -----",
                self.log.text()
            );
        }
    }
}
