//! rust-control-plane 0.1.2 as a server nobody here wrote: `bench-peer/` (its own cargo
//! workspace, needing protoc) built in release as `scripts/bench` builds it, started on
//! 127.0.0.1:0 and driven through its line protocol (`set`, `nodes`; see bench-peer/src/main.rs).
//! Its clients must be named `xds-bench-<i>` ([`PEER_NODE`] is the first).
//!
//! Used by xdsd-client's and xdsd's tests.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// The node id the peer serves.
pub const PEER_NODE: &str = "xds-bench-0";

/// How long a build of the peer may take (the first one compiles tonic 0.8 and its protos).
const BUILD: Duration = Duration::from_secs(1800);

/// A running rust-control-plane peer, killed when dropped.
pub struct Peer {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    /// Where it listens.
    pub addr: String,
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root")
}

fn protoc_present() -> bool {
    if std::env::var_os("PROTOC").is_some() {
        return true;
    }
    std::process::Command::new("protoc")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Peer {
    /// Builds and starts the peer; `None` (with a message on stderr) when protoc is absent.
    pub async fn start() -> Option<Peer> {
        if !protoc_present() {
            eprintln!(
                "SKIPPED: rust-control-plane (bench-peer/) needs protoc to build, and there is \
                 none (install it, or set PROTOC; scripts/install-deps does)"
            );
            return None;
        }
        let root = repo_root();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let build = Command::new(cargo)
            .args(["build", "--release", "--locked", "--manifest-path"])
            .arg(root.join("bench-peer/Cargo.toml"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .output();
        let built = tokio::time::timeout(BUILD, build)
            .await
            .expect("bench-peer builds in time")
            .expect("cargo runs");
        assert!(
            built.status.success(),
            "bench-peer does not build: {}",
            String::from_utf8_lossy(&built.stderr)
        );
        // Its stderr is the test's: rust-control-plane 0.1.2 logs a panic of the stream's task
        // when a client ends its stream (an unwrap on the end of the request stream); the
        // server goes on.
        let mut child = Command::new(root.join("bench-peer/target/release/xds-bench-peer"))
            .arg("127.0.0.1:0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("bench-peer starts");
        let stdin = child.stdin.take().expect("stdin");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("bench-peer says where it listens")
            .expect("stdout")
            .expect("a line");
        let addr = first
            .strip_prefix("listening ")
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
            .to_owned();
        let mut peer = Peer {
            child,
            stdin,
            lines,
            addr,
        };
        peer.command("nodes 1").await;
        Some(peer)
    }

    async fn command(&mut self, line: &str) {
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .expect("bench-peer reads");
        self.stdin.flush().await.expect("bench-peer reads");
        let answer = tokio::time::timeout(Duration::from_secs(30), self.lines.next_line())
            .await
            .expect("bench-peer answers")
            .expect("stdout")
            .expect("a line");
        assert!(answer.starts_with("ok"), "{line}: {answer}");
    }

    /// Sets the resource `name` of `type_url` (cluster, endpoints, listener or route) to
    /// `value`, the encoded message.
    pub async fn set(&mut self, type_url: &str, name: &str, value: &[u8]) {
        let hex: String = value.iter().map(|b| format!("{b:02x}")).collect();
        self.command(&format!("set {type_url} {name} {hex}")).await;
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}
