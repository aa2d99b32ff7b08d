//! The soak's processes (etcd members, xdsd replicas, relays): started, killed -9, paused and
//! restarted with the same command and ports, and sampled (RSS, open fds, threads) from /proc.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use etcd_client::Client;

/// What a process is, for the checks (etcd is reported, not held to the leak bounds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Etcd,
    Replica,
    Relay,
}

/// One process of the topology, restartable with the same command.
pub struct Proc {
    pub name: String,
    pub role: Role,
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    log: PathBuf,
    child: Option<tokio::process::Child>,
    pub pid: u32,
    /// When the current incarnation started.
    pub started: Instant,
    /// Incarnations so far (1 after the first start).
    pub starts: u32,
    /// The port it serves on (xDS, or etcd's client port): the same after a restart.
    pub port: u16,
    /// Its admin API (`127.0.0.1:PORT`), for xdsd's processes.
    pub admin: Option<String>,
}

pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl Proc {
    pub fn new(
        name: &str,
        role: Role,
        program: &Path,
        args: Vec<String>,
        logs: &Path,
        port: u16,
        admin: Option<String>,
    ) -> Proc {
        Proc {
            name: name.to_owned(),
            role,
            program: program.to_path_buf(),
            args,
            env: Vec::new(),
            log: logs.join(format!("{name}.log")),
            child: None,
            pid: 0,
            started: Instant::now(),
            starts: 0,
            port,
            admin,
        }
    }

    pub fn env(&mut self, key: &str, value: &str) {
        self.env.push((key.to_owned(), value.to_owned()));
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Starts (or restarts) the process, its output appended to its log.
    pub fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .kill_on_drop(true);
        crate::dirsrc::die_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot start {}: {e}", self.program.display()))?;
        self.pid = child.id().ok_or_else(|| anyhow::anyhow!("no pid"))?;
        self.child = Some(child);
        self.started = Instant::now();
        self.starts += 1;
        Ok(())
    }

    /// kill -9, and reaps it.
    pub async fn kill9(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.start_kill()?;
            child.wait().await?;
        }
        Ok(())
    }

    /// SIGSTOP (`true`) or SIGCONT.
    pub fn pause(&self, stop: bool) -> anyhow::Result<()> {
        let sig = if stop { libc::SIGSTOP } else { libc::SIGCONT };
        // SAFETY: kill(2) on the pid of a child we own.
        let r = unsafe { libc::kill(self.pid as libc::pid_t, sig) };
        anyhow::ensure!(r == 0, "kill({}, {sig}) failed", self.pid);
        Ok(())
    }

    /// Whether it exited on its own (a crash): its status, if so.
    pub fn exited(&mut self) -> Option<String> {
        let child = self.child.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            _ => None,
        }
    }

    /// Waits until its port accepts connections (at most `within`).
    pub async fn wait_listening(&mut self, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        loop {
            if tokio::net::TcpStream::connect(self.addr()).await.is_ok() {
                return Ok(());
            }
            if let Some(status) = self.exited() {
                anyhow::bail!(
                    "{} exited at start ({status}): see {}",
                    self.name,
                    self.log.display()
                );
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "{} did not listen on {} in {within:?}: see {}",
                self.name,
                self.addr(),
                self.log.display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }
}

/// One reading of a process's resources.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Sample {
    pub rss: u64,
    pub fds: u64,
    pub threads: u64,
    /// What the process's allocator has handed out and not taken back
    /// (`xdsd_heap_in_use_bytes` on its admin API; 0 where it does not say: etcd).
    pub heap: u64,
}

/// RSS (bytes), open fds and threads of `pid`, from /proc.
pub fn sample(pid: u32) -> Option<Sample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    let rss = field("VmRSS:")? * 1024;
    let threads = field("Threads:")?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some(Sample {
        rss,
        fds,
        threads,
        heap: 0,
    })
}

/// A 3-member etcd cluster on 127.0.0.1.
pub struct Etcd {
    pub members: Vec<Proc>,
    pub urls: Vec<String>,
}

fn etcd_binary() -> PathBuf {
    match std::env::var_os("XDSD_ETCD") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from("/usr/bin/etcd"),
    }
}

impl Etcd {
    pub async fn start(dir: &Path, logs: &Path, members: usize) -> anyhow::Result<Etcd> {
        let mut ports = Vec::new();
        for _ in 0..members {
            ports.push((free_port()?, free_port()?));
        }
        let cluster: Vec<String> = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("etcd-{i}=http://127.0.0.1:{peer}"))
            .collect();
        let mut procs = Vec::new();
        for (i, (client, peer)) in ports.iter().enumerate() {
            let name = format!("etcd-{i}");
            let args = vec![
                format!("--name={name}"),
                format!("--data-dir={}", dir.join(&name).display()),
                format!("--listen-client-urls=http://127.0.0.1:{client}"),
                format!("--advertise-client-urls=http://127.0.0.1:{client}"),
                format!("--listen-peer-urls=http://127.0.0.1:{peer}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"),
                format!("--initial-cluster={}", cluster.join(",")),
                "--initial-cluster-state=new".into(),
                "--initial-cluster-token=xds-bench-soak".into(),
                // The history the replicas' rollouts read back (docs/rollouts.md): kept.
                "--auto-compaction-retention=0".into(),
                "--log-level=warn".into(),
            ];
            let mut p = Proc::new(&name, Role::Etcd, &etcd_binary(), args, logs, *client, None);
            p.spawn()?;
            procs.push(p);
        }
        let urls: Vec<String> = ports
            .iter()
            .map(|(c, _)| format!("http://127.0.0.1:{c}"))
            .collect();
        let etcd = Etcd {
            members: procs,
            urls,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if etcd.leader().await.is_some() {
                return Ok(etcd);
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "etcd's {members} members elected no leader in 60 s (see {})",
                logs.display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn endpoints(&self) -> String {
        self.urls.join(",")
    }

    /// The member that says it leads, if one answers in time.
    pub async fn leader(&self) -> Option<usize> {
        for (i, url) in self.urls.iter().enumerate() {
            let status = async {
                let opts = etcd_client::ConnectOptions::new()
                    .with_connect_timeout(Duration::from_millis(500))
                    .with_timeout(Duration::from_millis(500));
                let mut c = Client::connect([url.as_str()], Some(opts)).await.ok()?;
                c.status().await.ok()
            };
            let Ok(Some(s)) = tokio::time::timeout(Duration::from_secs(1), status).await else {
                continue;
            };
            if s.header().map(|h| h.member_id()) == Some(s.leader()) {
                return Some(i);
            }
        }
        None
    }

    /// A client of every member.
    pub async fn client(&self) -> anyhow::Result<Client> {
        let opts = etcd_client::ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(Duration::from_secs(5));
        Ok(Client::connect(&self.urls, Some(opts)).await?)
    }
}
