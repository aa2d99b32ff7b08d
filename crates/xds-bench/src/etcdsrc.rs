//! The `xdsd-etcd` server kind: the real `xdsd` binary serving an etcd prefix, changed the way a
//! user changes it (a key written to etcd).
//!
//! `xds-bench server --kind xdsd-etcd --xdsd-bin BIN --dir DIR` starts its own single-node etcd
//! (`XDSD_ETCD`, else `/usr/bin/etcd`) on 127.0.0.1 with ports from the OS and its data in DIR,
//! then [`REPLICAS`] replicas `BIN serve --etcd-endpoints URL --etcd-prefix /bench/` (the clients'
//! connections go to each in turn; CPU and memory are the first replica's), and speaks the
//! harness's line protocol like `dirsrc.rs`:
//!
//! * `load`: writes one key per resource (the JSON a file would hold, named as the file would
//!   be), what is referred to first, in transactions of at most 100 puts (each state xdsd can see
//!   is valid), deletes the other keys, and waits for every replica to log the reload with that
//!   many resources;
//! * `set`: puts the resource's key. `accepted_ns` is taken just before the put: the user's
//!   action. Convergence thus includes etcd's commit, its watch and xdsd's parse of the key and
//!   commit of the revision.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use etcd_client::{Client, GetOptions, Txn, TxnOp};
use tokio::sync::watch;

use crate::dirsrc::{
    document, file_name, records_in_reference_order, serve_commands, start_xdsd, wait_reloaded,
    Binary, Reloads,
};
use crate::now_ns;

/// The prefix the resources are written under.
const PREFIX: &str = "/bench/";

/// Puts per transaction when loading (etcd's default limit is 128 operations).
const BATCH: usize = 100;

fn etcd_binary() -> PathBuf {
    match std::env::var_os("XDSD_ETCD") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from("/usr/bin/etcd"),
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Starts a single-node etcd with its data in `dir`, and a client of it once it answers.
async fn start_etcd(dir: &Path) -> anyhow::Result<(tokio::process::Child, String, Client)> {
    let client_url = format!("http://127.0.0.1:{}", free_port()?);
    let peer_url = format!("http://127.0.0.1:{}", free_port()?);
    let mut cmd = tokio::process::Command::new(etcd_binary());
    cmd.arg("--name=bench")
        .arg(format!("--data-dir={}", dir.join("etcd").display()))
        .arg(format!("--listen-client-urls={client_url}"))
        .arg(format!("--advertise-client-urls={client_url}"))
        .arg(format!("--listen-peer-urls={peer_url}"))
        .arg(format!("--initial-advertise-peer-urls={peer_url}"))
        .arg(format!("--initial-cluster=bench={peer_url}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    crate::dirsrc::die_with_parent(&mut cmd);
    let child = cmd
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot start {}: {e}", etcd_binary().display()))?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(mut client) = Client::connect([client_url.as_str()], None).await {
            if client.get("/", None).await.is_ok() {
                return Ok((child, client_url, client));
            }
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "etcd did not answer in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

struct Adapter {
    client: Client,
    /// The replicas' processes.
    children: Vec<tokio::process::Child>,
    /// Each replica's reloads (a killed replica's removed).
    reloads: Vec<watch::Receiver<Reloads>>,
}

impl Binary for Adapter {
    /// Puts the resource's key; returns CLOCK_MONOTONIC just before the put.
    async fn put(
        &mut self,
        type_url: &str,
        name: &str,
        value: &[u8],
        group: Option<&str>,
    ) -> anyhow::Result<u64> {
        let json = document(type_url, value, group)?;
        let key = format!("{PREFIX}{}", file_name(type_url, name, group));
        let accepted = now_ns();
        self.client.put(key, json, None).await?;
        Ok(accepted)
    }

    /// Makes the prefix hold exactly the records, and waits for xdsd to have loaded them.
    async fn load(&mut self, path: &Path) -> anyhow::Result<u64> {
        let records = records_in_reference_order(path)?;
        let before: Vec<Reloads> = self.reloads.iter().map(|r| *r.borrow()).collect();
        let accepted = now_ns();
        let mut keep = std::collections::HashSet::new();
        let mut ops = Vec::new();
        for r in &records {
            let group = r.group.as_deref();
            let key = format!("{PREFIX}{}", file_name(&r.type_url, &r.name, group));
            ops.push(TxnOp::put(
                key.clone(),
                document(&r.type_url, &r.value, group)?,
                None,
            ));
            keep.insert(key);
        }
        let existing = self
            .client
            .get(
                PREFIX,
                Some(GetOptions::new().with_prefix().with_keys_only()),
            )
            .await?;
        let mut removed = false;
        for kv in existing.kvs() {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            if !keep.contains(&key) {
                ops.push(TxnOp::delete(key, None));
                removed = true;
            }
        }
        let want = records.len() as u64;
        if records.is_empty() && !removed && before.iter().all(|b| b.last_count == Some(0)) {
            return Ok(accepted);
        }
        let mut ops = ops.into_iter().peekable();
        while ops.peek().is_some() {
            let batch: Vec<TxnOp> = ops.by_ref().take(BATCH).collect();
            self.client.txn(Txn::new().and_then(batch)).await?;
        }
        for (reloads, before) in self.reloads.iter_mut().zip(before) {
            wait_reloaded(reloads, before, want).await?;
        }
        Ok(accepted)
    }

    /// A crashed replica: its clients reconnect to the other.
    async fn kill(&mut self, i: usize) -> anyhow::Result<()> {
        let child = self
            .children
            .get_mut(i)
            .ok_or_else(|| anyhow::anyhow!("kill: no replica {i}"))?;
        child.start_kill()?;
        child.wait().await?;
        self.reloads.remove(i);
        Ok(())
    }
}

/// How many replicas of xdsd serve the prefix: the clients' connections go to each in turn.
pub const REPLICAS: usize = 2;

pub async fn run(xdsd_bin: &Path, dir: &Path) -> anyhow::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    let (mut etcd, url, client) = start_etcd(dir).await?;
    let source =
        ["--etcd-endpoints", url.as_str(), "--etcd-prefix", PREFIX].map(std::ffi::OsStr::new);
    let mut replicas = Vec::with_capacity(REPLICAS);
    for _ in 0..REPLICAS {
        replicas.push(start_xdsd(xdsd_bin, &source).await?);
    }
    // CPU time and memory are read from the first replica (each serves half the streams).
    let addrs: Vec<String> = replicas.iter().map(|r| r.addr.clone()).collect();
    let pid = replicas[0].pid;
    // Replica 0 promotes (S8); the other follows the shared record.
    let admin = replicas[0].admin.clone();
    let mut adapter = Adapter {
        client,
        children: Vec::new(),
        reloads: Vec::new(),
    };
    for r in replicas {
        adapter.children.push(r.child);
        adapter.reloads.push(r.reloads);
    }
    serve_commands(&mut adapter, &addrs.join(","), pid, &admin).await?;
    for mut child in adapter.children {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
    let _ = etcd.start_kill();
    let _ = etcd.wait().await;
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}
