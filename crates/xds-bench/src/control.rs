//! The harness side of the server processes: spawn one, drive it through its line protocol
//! (see `server.rs`), and read its CPU time and memory from /proc, so that the figures are the
//! server's alone.

use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::server::hex;

/// Which server a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Server {
    /// xdsd-core through the library API, in its own process.
    Xdsd,
    /// The xdsd binary serving a watched directory, changed by renaming files into it.
    XdsdDir,
    /// The xdsd binary serving an etcd prefix, changed by putting a key.
    XdsdEtcd,
    /// The xdsd binary serving a directory (as `XdsdDir`) with `xdsd relay`s in front of it:
    /// the clients connect to the relays (S10, S11).
    XdsdRelay,
    /// The bare-transport limit.
    Limit,
    /// rust-control-plane (bench-peer).
    Peer,
}

impl Server {
    pub fn name(self) -> &'static str {
        match self {
            Server::Xdsd => "xdsd",
            Server::XdsdDir => "xdsd-dir",
            Server::XdsdEtcd => "xdsd-etcd",
            Server::XdsdRelay => "xdsd-relay",
            Server::Limit => "limit",
            Server::Peer => "peer",
        }
    }
    pub fn parse(s: &str) -> anyhow::Result<Server> {
        Ok(match s {
            "xdsd" => Server::Xdsd,
            "xdsd-dir" => Server::XdsdDir,
            "xdsd-etcd" => Server::XdsdEtcd,
            "xdsd-relay" => Server::XdsdRelay,
            "limit" => Server::Limit,
            "peer" => Server::Peer,
            _ => anyhow::bail!(
                "unknown server {s:?} (xdsd, xdsd-dir, xdsd-etcd, xdsd-relay, limit, peer)"
            ),
        })
    }
    /// Whether it is the xdsd binary behind an adapter (`dirsrc.rs`, `etcdsrc.rs`).
    pub fn runs_the_binary(self) -> bool {
        matches!(self, Server::XdsdDir | Server::XdsdEtcd | Server::XdsdRelay)
    }
    pub fn supports_delta(self) -> bool {
        self != Server::Peer
    }
}

/// How many `xdsd relay`s the next xdsd-relay server starts in front of its xdsd (S11: 10).
static RELAYS: AtomicUsize = AtomicUsize::new(1);

/// Sets how many relays the next xdsd-relay server starts (the scenarios run one at a time).
pub fn set_relays(n: usize) {
    RELAYS.store(n.max(1), Ordering::Relaxed);
}

/// Extra `xdsd relay` arguments for the next xdsd-relay server's relays (S12: what its
/// upstream's constraints read), unless the bench's environment sets
/// [`crate::dirsrc::RELAY_ARGS_VAR`] itself (even empty), which then reaches the relays as it is.
static RELAY_ARGS: std::sync::Mutex<&'static str> = std::sync::Mutex::new("");

/// Sets the extra arguments of the next xdsd-relay server's relays (see [`RELAY_ARGS`]).
pub fn set_relay_args(args: &'static str) {
    *RELAY_ARGS.lock().unwrap_or_else(|p| p.into_inner()) = args;
}

pub struct Proc {
    child: Child,
    pub pid: u32,
    pub addr: String,
    pub stdin: ChildStdin,
    pub lines: Lines<BufReader<ChildStdout>>,
}

impl Proc {
    /// Starts a server. `xdsd_dir` is (xdsd binary, resource directory) for `Server::XdsdDir`.
    pub async fn spawn(
        server: Server,
        peer_bin: Option<&Path>,
        xdsd_dir: Option<(&Path, &Path)>,
        xdsd_args: &[String],
        log: &Path,
    ) -> anyhow::Result<Proc> {
        let mut cmd = match server {
            Server::Peer => {
                Command::new(peer_bin.ok_or_else(|| anyhow::anyhow!("the peer needs --peer-bin"))?)
            }
            _ => {
                // XDS_BENCH_SERVER_WRAPPER: a command to run the server under, e.g.
                // `valgrind --tool=callgrind` (for BENCHMARKS.md's profile).
                let wrapper = std::env::var("XDS_BENCH_SERVER_WRAPPER").unwrap_or_default();
                let mut words = wrapper.split_whitespace();
                let mut c = match words.next() {
                    Some(w) => {
                        let mut c = Command::new(w);
                        c.args(words).arg(std::env::current_exe()?);
                        c
                    }
                    None => Command::new(std::env::current_exe()?),
                };
                c.args(["server", "--kind", server.name()]);
                if server.runs_the_binary() {
                    let (bin, dir) = xdsd_dir.ok_or_else(|| {
                        anyhow::anyhow!("{} needs the xdsd binary", server.name())
                    })?;
                    c.arg("--xdsd-bin").arg(bin).arg("--dir").arg(dir);
                    // Extra arguments of `xdsd serve`, for the adapter (see `dirsrc::run`).
                    c.env(crate::dirsrc::XDSD_ARGS_VAR, xdsd_args.join(" "));
                    // How many relays xdsd-relay starts (`set_relays`).
                    c.env(
                        crate::dirsrc::RELAYS_VAR,
                        RELAYS.load(Ordering::Relaxed).to_string(),
                    );
                    if std::env::var_os(crate::dirsrc::RELAY_ARGS_VAR).is_none() {
                        let args = *RELAY_ARGS.lock().unwrap_or_else(|p| p.into_inner());
                        c.env(crate::dirsrc::RELAY_ARGS_VAR, args);
                    }
                }
                c
            }
        };
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log)?)
            .kill_on_drop(true);
        let mut child = cmd.spawn()?;
        let pid = child.id().ok_or_else(|| anyhow::anyhow!("no pid"))?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| anyhow::anyhow!("no stdin"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
        let mut lines = BufReader::new(stdout).lines();
        let first = tokio::time::timeout(Duration::from_secs(120), lines.next_line())
            .await
            .map_err(|_| anyhow::anyhow!("{} did not start in 120 s", server.name()))??
            .ok_or_else(|| {
                anyhow::anyhow!("{} exited at start (see {})", server.name(), log.display())
            })?;
        let mut words = first
            .strip_prefix("listening ")
            .ok_or_else(|| anyhow::anyhow!("unexpected first line {first:?}"))?
            .split_whitespace();
        let addr = words
            .next()
            .ok_or_else(|| anyhow::anyhow!("unexpected first line {first:?}"))?
            .to_owned();
        // `listening ADDR PID`: the process that serves is not the one we started (xdsd-dir's
        // adapter starts xdsd); CPU time and memory are read from that one.
        let pid = match words.next() {
            Some(p) => p.parse()?,
            None => pid,
        };
        Ok(Proc {
            child,
            pid,
            addr,
            stdin,
            lines,
        })
    }

    async fn reply(&mut self) -> anyhow::Result<Vec<u64>> {
        let line = tokio::time::timeout(Duration::from_secs(300), self.lines.next_line())
            .await
            .map_err(|_| anyhow::anyhow!("server did not answer in 300 s"))??
            .ok_or_else(|| anyhow::anyhow!("server exited"))?;
        parse_ok(&line)
    }

    /// Replaces the server's resources with the record file; returns (accepted, done) times.
    pub async fn load(&mut self, records: &Path) -> anyhow::Result<(u64, u64)> {
        self.stdin
            .write_all(format!("load {}\n", records.display()).as_bytes())
            .await?;
        self.stdin.flush().await?;
        let r = self.reply().await?;
        Ok((r[0], *r.get(1).unwrap_or(&r[0])))
    }

    /// Tells the server the clients' node ids (`xds-bench-0` … `xds-bench-<n-1>`).
    pub async fn nodes(&mut self, n: usize) -> anyhow::Result<()> {
        self.command(&format!("nodes {n}\n")).await
    }

    /// xdsd-etcd: kills replica `i` (SIGKILL).
    pub async fn kill(&mut self, i: usize) -> anyhow::Result<()> {
        self.command(&format!("kill {i}\n")).await
    }

    /// Promotes a gated rollout's candidate now (xdsd's binary with `--canary`); returns the
    /// clock just before the request.
    pub async fn promote(&mut self) -> anyhow::Result<u64> {
        self.stdin.write_all(b"promote\n").await?;
        self.stdin.flush().await?;
        Ok(self.reply().await?[0])
    }

    /// The xdsd binary's servers: the bytes of the responses the xdsd that reads the resources
    /// sent so far (its `xdsd_response_bytes_total`): to its clients directly, or to the relays in
    /// front of it.
    pub async fn sent_bytes(&mut self) -> anyhow::Result<u64> {
        self.stdin.write_all(b"sent\n").await?;
        self.stdin.flush().await?;
        Ok(self.reply().await?[0])
    }

    /// Tells the limit to coalesce changes per stream (S5's floor); xdsd ignores it.
    pub async fn coalesce(&mut self) -> anyhow::Result<()> {
        self.command("coalesce\n").await
    }

    /// Sends one control line and waits for its `ok`.
    async fn command(&mut self, line: &str) -> anyhow::Result<()> {
        self.stdin.write_all(line.as_bytes()).await?;
        self.stdin.flush().await?;
        self.reply().await?;
        Ok(())
    }

    /// Sends a `set` (of group `group`'s variant, if any) without waiting for its answer.
    pub async fn send_set(
        &mut self,
        type_url: &str,
        name: &str,
        value: &[u8],
        group: Option<&str>,
    ) -> anyhow::Result<()> {
        let group = group.map(|g| format!(" {g}")).unwrap_or_default();
        self.stdin
            .write_all(format!("set {type_url} {name} {}{group}\n", hex(value)).as_bytes())
            .await?;
        self.stdin.flush().await?;
        Ok(())
    }

    /// Sets one resource (group `group`'s variant, if any); returns when the server accepted it.
    pub async fn set(
        &mut self,
        type_url: &str,
        name: &str,
        value: &[u8],
        group: Option<&str>,
    ) -> anyhow::Result<u64> {
        self.send_set(type_url, name, value, group).await?;
        Ok(self.reply().await?[0])
    }

    /// Runs the command of `XDS_BENCH_PHASE_HOOK`, if set, with `phase` and the server's pid as
    /// its last two arguments, and waits for it: with a server under callgrind
    /// (`XDS_BENCH_SERVER_WRAPPER`), `callgrind_control -d` there dumps the counts at the edges of
    /// a scenario's changes, so that a profile counts the changes alone (BENCHMARKS.md, stop 37).
    /// A hook that fails is reported, and the run goes on.
    pub async fn phase(&self, phase: &str) {
        phase_hook(phase, self.pid).await;
    }

    /// CPU seconds (user + system) the server process used so far.
    pub fn cpu_seconds(&self) -> f64 {
        cpu_seconds(self.pid).unwrap_or(0.0)
    }

    /// Resident memory in KiB (`VmRSS`), and the peak (`VmHWM`).
    pub fn rss_kib(&self) -> (u64, u64) {
        (
            status_kib(self.pid, "VmRSS:").unwrap_or(0),
            status_kib(self.pid, "VmHWM:").unwrap_or(0),
        )
    }

    /// Asks the server to exit, and kills it if it does not within 5 s.
    pub async fn stop(mut self) {
        let _ = self.stdin.write_all(b"quit\n").await;
        let _ = self.stdin.flush().await;
        drop(self.stdin);
        if tokio::time::timeout(Duration::from_secs(5), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

pub fn parse_ok(line: &str) -> anyhow::Result<Vec<u64>> {
    let rest = line
        .strip_prefix("ok ")
        .ok_or_else(|| anyhow::anyhow!("server answered {line:?}"))?;
    Ok(rest
        .split_whitespace()
        .map(|w| w.parse::<u64>())
        .collect::<Result<_, _>>()?)
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// utime + stime of a process, in seconds.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / clock_ticks())
}

pub fn self_cpu_seconds() -> f64 {
    cpu_seconds(std::process::id()).unwrap_or(0.0)
}

/// This process's CPU seconds to the nanosecond (`CLOCK_PROCESS_CPUTIME_ID`, the scheduler's
/// own account), where [`self_cpu_seconds`] counts clock ticks (10 ms each): a window of some
/// 30 ms of CPU read in ticks is off by up to a third.
pub fn self_cpu_seconds_exact() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the struct we own.
    if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) } != 0 {
        return self_cpu_seconds();
    }
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

pub fn status_kib(pid: u32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Raises the soft open-file limit to the hard limit.
pub fn raise_fd_limit() {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// The machine, for the report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Machine {
    pub nproc: usize,
    pub cpu_model: String,
    pub mem_gib: f64,
    pub kernel: String,
}

pub fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_owned())
        .unwrap_or_default();
    let mem_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<f64>().ok())
        })
        .unwrap_or(0.0);
    Machine {
        nproc: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        cpu_model,
        mem_gib: (mem_kib / 1024.0 / 1024.0 * 10.0).round() / 10.0,
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_owned(),
    }
}

/// Runs the command of `XDS_BENCH_PHASE_HOOK`, if set, with `phase` and `pid` as its last two
/// arguments, and waits for it (see [`Proc::phase`]; S13, whose server runs in the bench's
/// process, gives its own pid: its changes' counts alone, under callgrind).
pub async fn phase_hook(phase: &str, pid: u32) {
    let Ok(hook) = std::env::var("XDS_BENCH_PHASE_HOOK") else {
        return;
    };
    let mut words = hook.split_whitespace();
    let Some(program) = words.next() else {
        return;
    };
    let status = Command::new(program)
        .args(words)
        .arg(phase)
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .status()
        .await;
    if !matches!(&status, Ok(s) if s.success()) {
        eprintln!("[xds-bench] phase hook {hook:?} {phase}: {status:?}");
    }
}
