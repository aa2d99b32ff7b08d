//! The soak's topology: 2 `xdsd serve` replicas on the etcd members, and 2 `xdsd relay`s each
//! given both replicas (`--upstream A,B`, its own first), each replica through a TCP proxy of its
//! own (the links the soak cuts); which replica a relay is on, from its `xdsd_relay_upstream`.

use std::time::Duration;

use super::procs::{free_port, Proc, Role};
use super::proxy::Proxy;
use super::push::PREFIX;
use super::{client, http_get, metric, Soak, SoakOptions, LEAK_VAR, RELAYS, REPLICAS};

/// The relay's upstream list, from one place: relay `j` is given these addresses (comma-joined
/// into `--upstream`): its links to every replica (`links[k]` leads to replica `k`), the one to
/// its own replica (`j`) first.
fn relay_upstreams(j: usize, links: &[Proxy]) -> Vec<String> {
    (0..links.len())
        .map(|k| links[(j + k) % links.len()].addr.clone())
        .collect()
}

/// The upstream streams a relay has on each of its links now, by replica (`links[k]` leads to
/// replica `k`), from its `xdsd_relay_upstream{address="..."}` series.
pub(super) fn relay_on(metrics: &str, links: &[Proxy]) -> Vec<usize> {
    links
        .iter()
        .map(|l| {
            metric(
                metrics,
                &format!(r#"xdsd_relay_upstream{{address="{}"}}"#, l.addr),
            ) as usize
        })
        .collect()
}

/// Starts the replicas (on the etcd `endpoints`), each relay's links to them and the relays:
/// (replicas, links, relays), `links[j][k]` leading relay `j` to replica `k`.
pub(super) async fn start(
    opts: &SoakOptions,
    endpoints: &str,
    logs: &std::path::Path,
) -> anyhow::Result<(Vec<Proc>, Vec<Vec<Proxy>>, Vec<Proc>)> {
    // Replicas: fixed ports, so that a restart serves where its clients reconnect.
    let mut replicas = Vec::new();
    for i in 0..REPLICAS {
        let port = free_port()?;
        let admin = format!("127.0.0.1:{}", free_port()?);
        let args = vec![
            "serve".into(),
            "--etcd-endpoints".into(),
            endpoints.to_owned(),
            "--etcd-prefix".into(),
            PREFIX.into(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--admin-listen".into(),
            admin.clone(),
            "--canary".into(),
            format!("metadata.{}=canary", client::COHORT_KEY),
            "--canary-soak".into(),
            "1s".into(),
            "--log-level".into(),
            "info".into(),
        ];
        let mut p = Proc::new(
            &format!("replica-{i}"),
            Role::Replica,
            &opts.xdsd_bin,
            args,
            logs,
            port,
            Some(admin),
        );
        if opts.leak {
            p.env(LEAK_VAR, "1");
        }
        p.spawn()?;
        p.wait_listening(Duration::from_secs(60)).await?;
        replicas.push(p);
    }
    let mut links = Vec::new();
    for _ in 0..RELAYS {
        let mut mine = Vec::new();
        for r in &replicas {
            mine.push(Proxy::start(&r.addr()).await?);
        }
        links.push(mine);
    }
    let mut relays = Vec::new();
    for (j, mine) in links.iter().enumerate() {
        let port = free_port()?;
        let admin = format!("127.0.0.1:{}", free_port()?);
        let args = vec![
            "relay".into(),
            "--upstream".into(),
            relay_upstreams(j, mine).join(","),
            "--upstream-node-id".into(),
            format!("soak-relay-{j}"),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--admin-listen".into(),
            admin.clone(),
            "--log-level".into(),
            "info".into(),
        ];
        let mut p = Proc::new(
            &format!("relay-{j}"),
            Role::Relay,
            &opts.xdsd_bin,
            args,
            logs,
            port,
            Some(admin),
        );
        p.spawn()?;
        p.wait_listening(Duration::from_secs(60)).await?;
        relays.push(p);
    }
    Ok((replicas, links, relays))
}

impl Soak {
    /// Relay `j`'s upstream streams on each replica now (its `xdsd_relay_upstream`; a relay
    /// has one per group of its clients, each failing over on its own); `None` when its
    /// metrics do not answer.
    pub(super) async fn relay_upstreams_on(&self, j: usize) -> Option<Vec<usize>> {
        let admin = self.relays[j].admin.as_ref()?;
        let m = http_get(admin, "/metrics").await.ok()?;
        Some(relay_on(&m, &self.links[j]))
    }
}
