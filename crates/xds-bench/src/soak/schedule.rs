//! The soak's schedule: the faults in turn (a replica killed -9, the etcd leader killed, a
//! relay's link to the replica it is on cut, a relay killed, the etcd leader paused), the actions
//! that end them, the clients' churn, and the phase a moment belongs to.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::client::Via;
use super::procs::Role;
use super::{Soak, GRACE, KILLED, RELAYS};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    ReplicaKill,
    EtcdLeaderKill,
    LinkCut,
    RelayKill,
    EtcdPause,
}

pub(super) const FAULTS: [FaultKind; 5] = [
    FaultKind::ReplicaKill,
    FaultKind::EtcdLeaderKill,
    FaultKind::LinkCut,
    FaultKind::RelayKill,
    FaultKind::EtcdPause,
];

#[derive(Debug, Clone, serde::Serialize)]
pub(super) struct Fault {
    pub(super) kind: FaultKind,
    pub(super) target: String,
    /// Seconds since the start.
    pub(super) at_s: f64,
    pub(super) restored_s: Option<f64>,
    #[serde(skip)]
    pub(super) started: Instant,
    #[serde(skip)]
    pub(super) restored: Option<Instant>,
    /// Streams whose end it explains: (via, process index).
    #[serde(skip)]
    pub(super) explains: Vec<(Via, usize)>,
    pub(super) survived: bool,
    pub(super) note: String,
}

/// Pending actions of the fault schedule.
pub(super) enum Action {
    RestartReplica(usize, usize),
    RestartRelay(usize, usize),
    RestartEtcd(usize, usize),
    Resume(usize, usize),
    /// Restore relay `j`'s link to replica `k` (fault `f`): (j, k, f).
    Restore(usize, usize, usize),
    /// Check that relay `j` left replica `k` after its link was cut (fault `f`): (j, k, f).
    CheckFailover(usize, usize, usize),
    Rebalance,
    /// Send every relay back to its own replica.
    RelaysHome,
    /// Restore every link.
    LinksBack,
}

impl Soak {
    /// The phase a moment belongs to.
    pub(super) fn phase_at(&self, at: Instant) -> String {
        if at < self.warmup_end {
            return "warm-up".into();
        }
        if at >= self.settle_start {
            return "settle".into();
        }
        for f in self.faults.iter().rev() {
            let end = f.restored.map(|r| r + GRACE);
            if at >= f.started && end.is_none_or(|e| at < e) {
                return format!(
                    "fault: {}",
                    serde_json::to_value(f.kind)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default()
                );
            }
        }
        "steady".into()
    }

    pub(super) async fn restart(&mut self, role: Role, i: usize) -> anyhow::Result<()> {
        let p = match role {
            Role::Replica => &mut self.replicas[i],
            Role::Relay => &mut self.relays[i],
            Role::Etcd => &mut self.etcd.members[i],
        };
        p.spawn()?;
        if role != Role::Etcd {
            p.wait_listening(Duration::from_secs(30)).await?;
        }
        Ok(())
    }

    /// Starts fault number `n` of the schedule; returns the actions that end it.
    pub(super) async fn inject(&mut self, n: usize) -> anyhow::Result<Vec<(Duration, Action)>> {
        let kind = FAULTS[n % FAULTS.len()];
        let round = n / FAULTS.len();
        let idx = self.faults.len();
        let mut explains = Vec::new();
        let (target, after) = match kind {
            FaultKind::ReplicaKill => {
                // Always replica-0: replica-1 lives the whole run, its leak figures over all of it.
                let i = KILLED;
                self.replicas[i].kill9().await?;
                explains.push((Via::Replica, i));
                (
                    self.replicas[i].name.clone(),
                    vec![(Duration::from_secs(2), Action::RestartReplica(i, idx))],
                )
            }
            FaultKind::EtcdLeaderKill => {
                let Some(i) = self.etcd.leader().await else {
                    anyhow::bail!("no etcd leader to kill");
                };
                self.etcd.members[i].kill9().await?;
                (
                    self.etcd.members[i].name.clone(),
                    vec![(Duration::from_secs(3), Action::RestartEtcd(i, idx))],
                )
            }
            FaultKind::LinkCut => {
                // The link relay j is on now: it must fail over to its other upstream, its
                // clients' streams kept (none is explained by this fault).
                let j = round % RELAYS;
                // The replica most of its upstream streams are on (its own if none).
                let k = match self.relay_upstreams_on(j).await {
                    Some(on) if on.iter().any(|n| *n > 0) => {
                        (0..on.len()).max_by_key(|k| (on[*k], *k == j)).unwrap_or(j)
                    }
                    _ => j,
                };
                self.links[j][k].cut();
                (
                    format!("relay-{j} -> replica-{k}"),
                    vec![
                        (Duration::from_secs(5), Action::CheckFailover(j, k, idx)),
                        (Duration::from_secs(6), Action::Restore(j, k, idx)),
                    ],
                )
            }
            FaultKind::RelayKill => {
                // Always relay-0: relay-1 lives the whole run (its link is cut in turn with relay-0's).
                let j = KILLED;
                self.relays[j].kill9().await?;
                explains.push((Via::Relay, j));
                (
                    self.relays[j].name.clone(),
                    vec![(Duration::from_secs(1), Action::RestartRelay(j, idx))],
                )
            }
            FaultKind::EtcdPause => {
                let i = self
                    .etcd
                    .leader()
                    .await
                    .unwrap_or(round % self.etcd.members.len());
                self.etcd.members[i].pause(true)?;
                (
                    format!("{} (SIGSTOP, the leader)", self.etcd.members[i].name),
                    vec![(Duration::from_secs(3), Action::Resume(i, idx))],
                )
            }
        };
        eprintln!(
            "[soak] {:.1}s fault {n}: {kind:?} {target}",
            self.secs(Instant::now())
        );
        self.faults.push(Fault {
            kind,
            target,
            at_s: self.secs(Instant::now()),
            restored_s: None,
            started: Instant::now(),
            restored: None,
            explains,
            survived: true,
            note: String::new(),
        });
        Ok(after)
    }

    pub(super) async fn act(&mut self, a: Action) -> Option<(Duration, Action)> {
        let (fault, result) = match a {
            Action::RestartReplica(i, f) => (f, self.restart(Role::Replica, i).await),
            Action::RestartRelay(j, f) => (f, self.restart(Role::Relay, j).await),
            Action::RestartEtcd(i, f) => (f, self.restart(Role::Etcd, i).await),
            Action::Resume(i, f) => (f, self.etcd.members[i].pause(false)),
            Action::Restore(j, k, f) => {
                self.links[j][k].restore();
                (f, Ok(()))
            }
            Action::CheckFailover(j, k, f) => {
                // Every upstream stream of the relay off the cut link, and on the other.
                let on = self.relay_upstreams_on(j).await;
                let moved = on.as_ref().is_some_and(|on| {
                    on[k] == 0 && on.iter().enumerate().any(|(o, n)| o != k && *n > 0)
                });
                if !moved {
                    let now = Instant::now();
                    let name = self.relays[j].name.clone();
                    self.broken(
                        now,
                        "a relay fails over",
                        name,
                        String::new(),
                        format!(
                            "5 s after its link to replica-{k} was cut (fault {f}), its upstream streams by replica are {}",
                            match on {
                                Some(on) => format!("{on:?}"),
                                None => "unknown (its metrics did not answer)".to_owned(),
                            }
                        ),
                    );
                }
                return None;
            }
            Action::Rebalance => {
                for c in &self.clients {
                    let on = c.on.load(Ordering::Relaxed);
                    if on != 0 {
                        c.go_home.store(true, Ordering::Relaxed);
                    }
                }
                // The relays too: a restarted replica's warm-up value is read with the relays
                // where they are at the end (home), else a relay's upstream connections count
                // as that replica's growth.
                return Some((Duration::ZERO, Action::RelaysHome));
            }
            Action::RelaysHome => {
                // A relay stays on the upstream it failed over to: one away from its own
                // replica is sent home by a blink of the link it is on (it tries the next of
                // its two upstreams, its own), so that each replica holds the upstream streams
                // it had after the warm-up whenever no fault is under way.
                let mut after = None;
                for j in 0..RELAYS {
                    let on = self.relay_upstreams_on(j).await.unwrap_or_default();
                    for (k, n) in on.into_iter().enumerate() {
                        if k != j && n > 0 {
                            eprintln!("[soak] relay-{j} has {n} upstream stream(s) on replica-{k}: sent home");
                            self.links[j][k].cut();
                            after = Some((Duration::from_secs(2), Action::LinksBack));
                        }
                    }
                }
                return after;
            }
            Action::LinksBack => {
                for l in self.links.iter().flatten() {
                    l.restore();
                }
                return None;
            }
        };
        let now = Instant::now();
        let secs = self.secs(now);
        if let Some(f) = self.faults.get_mut(fault) {
            f.restored = Some(now);
            f.restored_s = Some(secs);
            if let Err(e) = &result {
                f.note = format!("could not restore: {e:#}");
            }
        }
        if let Err(e) = result {
            let name = self
                .faults
                .get(fault)
                .map(|f| f.target.clone())
                .unwrap_or_default();
            self.broken(now, "fault restored", name, String::new(), format!("{e:#}"));
        }
        // Clients that failed over go back home (a load balancer's rebalance): each process
        // then serves the same streams as before the fault, for the leak checks.
        Some((Duration::from_secs(5), Action::Rebalance))
    }

    pub(super) fn churn(&mut self, credit: &mut f64, per_tick: f64) {
        *credit += per_tick;
        while *credit >= 1.0 {
            *credit -= 1.0;
            let slot = self.rng.below(self.clients.len());
            let old = self.clients[slot].clone();
            old.leave.store(true, Ordering::Relaxed);
            self.left += 1;
            let s = &old.spec;
            let home = s.targets[0];
            self.spawn_client(slot, s.via, home, s.delta, s.canary_metadata);
        }
    }
}
