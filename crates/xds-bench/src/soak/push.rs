//! The soak's changes: `xdsd push` of a generated resource directory at a steady rate, some bad on
//! purpose (pushed with `--references off`, or written straight to etcd: the replicas must refuse
//! them), some a canary's poison (valid, but NACKed by the canaries: the rollout must halt). After
//! each, the marker etcd holds is read back: that, not push's exit status, says what was written.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use etcd_client::Client;
use serde_json::{json, Value};
use xdsd_core::types::{CLUSTER, CLUSTER_LOAD_ASSIGNMENT, LISTENER};

use super::{http_get, Marker, MARKER_CLUSTER, POISON_BASE, REFUSED_BASE};

/// The etcd prefix the replicas serve.
pub const PREFIX: &str = "/soak/";

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PushKind {
    /// A valid change, pushed: every client must get it.
    Good,
    /// A listener naming a route configuration that does not exist, pushed with
    /// `--references off`: refused by the replicas.
    BadReferences,
    /// A key that does not parse, put straight into etcd: refused by the replicas.
    BadDirect,
    /// A valid change the canaries NACK: the rollout halts, no other client gets it.
    Poison,
}

/// The cycle of changes: mostly good, one of each bad kind and a poison in ten.
pub const CYCLE: [PushKind; 10] = [
    PushKind::Good,
    PushKind::Good,
    PushKind::Good,
    PushKind::BadReferences,
    PushKind::Good,
    PushKind::Good,
    PushKind::BadDirect,
    PushKind::Good,
    PushKind::Good,
    PushKind::Poison,
];

#[derive(Debug)]
pub struct PushResult {
    pub kind: PushKind,
    pub marker: u32,
    pub at: Instant,
    /// Whether the write reached etcd (the marker read back is this change's).
    pub written: bool,
    pub note: String,
}

pub struct Pusher {
    pub xdsd_bin: PathBuf,
    pub dir: PathBuf,
    pub endpoints: String,
    pub etcd: Client,
    pub clusters: usize,
    /// The replicas' admin APIs (GET /rollout).
    pub admins: Vec<String>,
}

const HCM: &str = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";

pub fn cluster_name(i: usize) -> String {
    format!("soak-{i:02}")
}

fn cluster(i: usize) -> Value {
    json!({
        "@type": CLUSTER,
        "name": cluster_name(i),
        "type": "EDS",
        "connect_timeout": "1s",
        "eds_cluster_config": {"eds_config": {"ads": {}, "resource_api_version": "V3"}},
    })
}

fn load_assignment(i: usize, weight: u32, marker: u32) -> Value {
    let mut cla = json!({
        "@type": CLUSTER_LOAD_ASSIGNMENT,
        "cluster_name": cluster_name(i),
        "endpoints": [{"lb_endpoints": [{
            "endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 8000 + i}}},
            "load_balancing_weight": weight,
        }]}],
    });
    if marker > 0 {
        cla["policy"] = json!({"overprovisioning_factor": marker});
    }
    cla
}

fn bad_listener() -> Value {
    json!({
        "@type": LISTENER,
        "name": "soak-bad",
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": 10000}},
        "filter_chains": [{"filters": [{
            "name": "envoy.filters.network.http_connection_manager",
            "typed_config": {
                "@type": HCM,
                "stat_prefix": "soak",
                "rds": {
                    "config_source": {"ads": {}, "resource_api_version": "V3"},
                    "route_config_name": "soak-no-such-route",
                },
                "http_filters": [{"name": "envoy.filters.http.router", "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}],
            },
        }]}],
    })
}

/// The key of the marker cluster's ClusterLoadAssignment.
pub fn marker_key() -> String {
    format!("{PREFIX}endpoints/{MARKER_CLUSTER}.json")
}

impl Pusher {
    /// Writes the directory for change `serial` with `marker` (and the bad listener).
    fn write_dir(&self, serial: u32, marker: u32, bad: bool) -> anyhow::Result<()> {
        if self.dir.exists() {
            std::fs::remove_dir_all(&self.dir)?;
        }
        for d in ["clusters", "endpoints", "listeners"] {
            std::fs::create_dir_all(self.dir.join(d))?;
        }
        // One other assignment's weight moves with every change, besides the marker.
        let moved = 1 + (serial as usize % (self.clusters - 1).max(1));
        for i in 0..self.clusters {
            let name = cluster_name(i);
            let weight = if i == moved { 1 + serial % 100 } else { 1 };
            let m = if i == 0 { marker } else { 0 };
            std::fs::write(
                self.dir.join("clusters").join(format!("{name}.json")),
                serde_json::to_vec_pretty(&cluster(i))?,
            )?;
            std::fs::write(
                self.dir.join("endpoints").join(format!("{name}.json")),
                serde_json::to_vec_pretty(&load_assignment(i, weight, m))?,
            )?;
        }
        if bad {
            std::fs::write(
                self.dir.join("listeners").join("soak-bad.json"),
                serde_json::to_vec_pretty(&bad_listener())?,
            )?;
        }
        Ok(())
    }

    async fn push(&self, serial: u32, extra: &[&str]) -> anyhow::Result<()> {
        let mut cmd = tokio::process::Command::new(&self.xdsd_bin);
        cmd.arg("push")
            .arg("--resources")
            .arg(&self.dir)
            .args(["--etcd-endpoints", &self.endpoints, "--etcd-prefix", PREFIX])
            .args(["--author", "xds-bench-soak"])
            .args(["--message", &format!("soak change {serial}")])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
            .await
            .map_err(|_| anyhow::anyhow!("xdsd push took over 30 s"))??;
        anyhow::ensure!(
            out.status.success(),
            "xdsd push: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(())
    }

    /// The marker etcd holds now.
    pub async fn etcd_marker(&mut self) -> anyhow::Result<u32> {
        let mut last = None;
        for _ in 0..5 {
            let got =
                tokio::time::timeout(Duration::from_secs(5), self.etcd.get(marker_key(), None))
                    .await;
            match got {
                Ok(Ok(r)) => {
                    let Some(kv) = r.kvs().first() else {
                        anyhow::bail!("etcd has no {}", marker_key());
                    };
                    let v: Value = serde_json::from_slice(kv.value())?;
                    return Ok(v["policy"]["overprovisioning_factor"].as_u64().unwrap_or(0) as u32);
                }
                Ok(Err(e)) => last = Some(e.to_string()),
                Err(_) => last = Some("timed out".into()),
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        anyhow::bail!("cannot read {} from etcd: {last:?}", marker_key())
    }

    /// The replicas' rollout states (GET /rollout `state`), those that answer.
    pub async fn rollout_states(&self) -> Vec<String> {
        let mut states = Vec::new();
        for a in &self.admins {
            if let Ok(body) = http_get(a, "/rollout").await {
                if let Ok(v) = serde_json::from_str::<Value>(&body) {
                    states.push(v["state"].as_str().unwrap_or_default().to_owned());
                }
            }
        }
        states
    }

    /// Waits (at most `within`) until `done` holds of every answering replica's rollout state.
    pub async fn wait_rollout(&self, within: Duration, done: impl Fn(&str) -> bool) -> bool {
        let deadline = Instant::now() + within;
        loop {
            let states = self.rollout_states().await;
            if !states.is_empty() && states.iter().all(|s| done(s)) {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Makes change `serial` of `kind`.
    pub async fn change(&mut self, serial: u32, kind: PushKind) -> PushResult {
        let marker = match kind {
            PushKind::Good => serial,
            PushKind::BadReferences | PushKind::BadDirect => REFUSED_BASE + serial,
            PushKind::Poison => POISON_BASE + serial,
        };
        debug_assert!(matches!(
            (kind, Marker::of(marker)),
            (PushKind::Good, Marker::Good)
                | (PushKind::Poison, Marker::Poison)
                | (
                    PushKind::BadReferences | PushKind::BadDirect,
                    Marker::Refused
                )
        ));
        let at = Instant::now();
        let wrote: anyhow::Result<()> = async {
            match kind {
                PushKind::Good | PushKind::Poison => {
                    self.write_dir(serial, marker, false)?;
                    self.push(serial, &[]).await
                }
                PushKind::BadReferences => {
                    self.write_dir(serial, marker, true)?;
                    self.push(serial, &["--references", "off"]).await
                }
                PushKind::BadDirect => {
                    let doc = json!({
                        "@type": CLUSTER_LOAD_ASSIGNMENT,
                        "cluster_name": MARKER_CLUSTER,
                        "no_such_field": true,
                        "policy": {"overprovisioning_factor": marker},
                    });
                    let value = serde_json::to_vec(&doc)?;
                    let urls: Vec<String> = self.endpoints.split(',').map(str::to_owned).collect();
                    on_any_member(&urls, 3, |url| put_on(url, value.clone())).await
                }
            }
        }
        .await;
        let note = match &wrote {
            Ok(()) => String::new(),
            Err(e) => format!("{e:#}"),
        };
        // What etcd holds decides: a push that timed out may have been written.
        let written = match self.etcd_marker().await {
            Ok(m) => m == marker,
            Err(_) => wrote.is_ok(),
        };
        PushResult {
            kind,
            marker,
            at,
            written,
            note,
        }
    }
}

/// Runs `attempt` on each etcd member in turn (`urls`), for at most `rounds` rounds, until one
/// succeeds: a write of the bench's own (a bad change on purpose) must not be lost because the
/// member a client of all three picked is the one killed or paused. Its put is idempotent (the
/// same key and value), so one that timed out but was written may be written again.
async fn on_any_member<T, F, Fut>(
    urls: &[String],
    rounds: usize,
    mut attempt: F,
) -> anyhow::Result<T>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let mut failed = Vec::new();
    for round in 0..rounds {
        for url in urls {
            match attempt(url.clone()).await {
                Ok(t) => return Ok(t),
                Err(e) => failed.push(format!("{url}: {e:#}")),
            }
        }
        if round + 1 < rounds {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    anyhow::bail!("no etcd member took the write: {}", failed.join("; "))
}

/// Puts the marker key straight into the etcd member at `url` (a client of that member alone).
async fn put_on(url: String, value: Vec<u8>) -> anyhow::Result<()> {
    let opts = etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_millis(1000))
        .with_timeout(Duration::from_secs(3));
    let put = async {
        let mut c = Client::connect([url.as_str()], Some(opts)).await?;
        c.put(marker_key(), value, None).await?;
        anyhow::Ok(())
    };
    tokio::time::timeout(Duration::from_secs(5), put)
        .await
        .map_err(|_| anyhow::anyhow!("etcd put timed out"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_direct_write_goes_to_the_next_member_when_one_is_down() {
        let urls: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let mut tried = Vec::new();
        let got = on_any_member(&urls, 3, |url| {
            tried.push(url.clone());
            async move {
                if url == "a" {
                    anyhow::bail!("connection refused")
                }
                Ok(url)
            }
        })
        .await;
        assert_eq!(got.ok().as_deref(), Some("b"));
        assert_eq!(tried, ["a", "b"]);
    }

    #[tokio::test]
    async fn a_direct_write_that_no_member_takes_fails_naming_each() {
        let urls: Vec<String> = ["a", "b"].map(String::from).to_vec();
        let mut calls = 0;
        let got: anyhow::Result<()> = on_any_member(&urls, 2, |url| {
            calls += 1;
            async move { anyhow::bail!("{url} down") }
        })
        .await;
        assert_eq!(calls, 4, "two rounds of two members");
        let e = format!("{:#}", got.err().map(|e| e.to_string()).unwrap_or_default());
        assert!(e.contains("a: a down") && e.contains("b: b down"), "{e}");
    }
}
