//! Which etcd revision each replica serves, for the status page's last changes and
//! `GET /history`'s `served`: this replica (its `ServerHandle::served`) and the peers `--peers`
//! names, each asked over CSDS (`FetchClientStatus` for no client: its answer's
//! `xdsd_core::csds::SERVED_METADATA`). A peer's host name is resolved at each read, and each of
//! its addresses is a replica (a Kubernetes headless Service names every pod); this replica
//! among them is recognised by its `Served::server` and shown once.
//!
//! A replica serves the change (a history row) with the latest revision at or before its own:
//! its revision is the last change of the prefix it committed (or the revision it loaded at,
//! which may be later than any change of the prefix). A replica whose change is not the latest
//! one is behind: it refused a later change, or has not received it yet.

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::r#type::matcher::v3::string_matcher::MatchPattern;
use envoy_types::pb::envoy::r#type::matcher::v3::{NodeMatcher, StringMatcher};
use envoy_types::pb::envoy::service::status::v3::client_status_discovery_service_client::ClientStatusDiscoveryServiceClient;
use envoy_types::pb::envoy::service::status::v3::ClientStatusRequest;
use serde_json::{json, Value};
use tokio::sync::Mutex;
use xdsd_core::csds::Served;
use xdsd_core::ServerHandle;

/// How long a peer may take to answer.
const PEER_TIMEOUT: Duration = Duration::from_secs(2);

/// How long the peers' answers are reused (the status page reloads every 5 s).
const REUSE: Duration = Duration::from_secs(2);

/// The most peers asked (a host name may resolve to many).
pub const MAX_PEERS: usize = 64;

/// One replica and what it serves, or why that is not known.
#[derive(Debug, Clone)]
pub struct Replica {
    /// `this replica`, or the address asked.
    pub name: String,
    /// What it serves, or why it could not be asked.
    pub served: Result<Served, String>,
}

/// This replica and its peers.
pub struct Replicas {
    handle: ServerHandle,
    peers: Vec<String>,
    last: Mutex<Option<(Instant, Vec<Replica>)>>,
}

impl Replicas {
    /// This replica (`handle`'s server) and the peers at `peers` (host:port, or http:// or
    /// https:// URLs).
    pub fn new(handle: ServerHandle, peers: Vec<String>) -> Replicas {
        Replicas {
            handle,
            peers,
            last: Mutex::new(None),
        }
    }

    /// The revision this replica serves (see `ServerHandle::served`).
    pub fn this_revision(&self) -> Option<i64> {
        self.handle.served().revision
    }

    /// This replica, then each peer (in the order named; the answers of the peers reused for
    /// [`REUSE`]).
    pub async fn all(&self) -> Vec<Replica> {
        let this = self.handle.served();
        let mut out = vec![Replica {
            name: "this replica".into(),
            served: Ok(this.clone()),
        }];
        if self.peers.is_empty() {
            return out;
        }
        let mut last = self.last.lock().await;
        let peers = match &*last {
            Some((at, peers)) if at.elapsed() < REUSE => peers.clone(),
            _ => {
                let peers = ask_peers(&self.peers).await;
                *last = Some((Instant::now(), peers.clone()));
                peers
            }
        };
        out.extend(
            peers
                .into_iter()
                .filter(|p| !p.served.as_ref().is_ok_and(|s| s.server == this.server)),
        );
        out
    }
}

/// Every address of `peers` (a host name resolved to each of its addresses), at most
/// [`MAX_PEERS`], asked at once.
async fn ask_peers(peers: &[String]) -> Vec<Replica> {
    let mut addresses: Vec<String> = Vec::new();
    let mut failed: Vec<Replica> = Vec::new();
    for peer in peers {
        if peer.contains("://") {
            addresses.push(peer.clone());
            continue;
        }
        match tokio::time::timeout(PEER_TIMEOUT, tokio::net::lookup_host(peer.as_str())).await {
            Ok(Ok(found)) => {
                let mut found: Vec<String> = found.map(|a| a.to_string()).collect();
                found.sort();
                found.dedup();
                addresses.extend(found);
            }
            Ok(Err(e)) => failed.push(Replica {
                name: peer.clone(),
                served: Err(format!("cannot resolve it: {e}")),
            }),
            Err(_) => failed.push(Replica {
                name: peer.clone(),
                served: Err("cannot resolve it in time".into()),
            }),
        }
    }
    addresses.dedup();
    addresses.truncate(MAX_PEERS);
    let mut asked = tokio::task::JoinSet::new();
    for (at, address) in addresses.iter().enumerate() {
        let address = address.clone();
        asked.spawn(async move {
            let served = tokio::time::timeout(PEER_TIMEOUT, ask(&address))
                .await
                .unwrap_or_else(|_| Err(format!("no answer within {PEER_TIMEOUT:?}")));
            (at, address, served)
        });
    }
    let mut out: Vec<(usize, Replica)> = Vec::new();
    while let Some(joined) = asked.join_next().await {
        if let Ok((at, name, served)) = joined {
            out.push((at, Replica { name, served }));
        }
    }
    out.sort_by_key(|(at, _)| *at);
    out.into_iter().map(|(_, r)| r).chain(failed).collect()
}

/// What the xdsd at `address` serves, from its CSDS answer for no client.
async fn ask(address: &str) -> Result<Served, String> {
    let channel = crate::status::connect(address, &Default::default(), PEER_TIMEOUT)
        .await
        .map_err(|e| crate::error_chain(&e))?;
    let request = ClientStatusRequest {
        // No node has this id: the answer lists no client, only its metadata matters.
        node_matchers: vec![NodeMatcher {
            node_id: Some(StringMatcher {
                match_pattern: Some(MatchPattern::Exact("\u{0}xdsd-peer".into())),
                ignore_case: false,
            }),
            node_metadatas: vec![],
        }],
        exclude_resource_contents: true,
        ..Default::default()
    };
    let answer = ClientStatusDiscoveryServiceClient::new(channel)
        .fetch_client_status(request)
        .await
        .map_err(|s| format!("CSDS: {}: {}", s.code(), s.message()))?;
    crate::status::served_of(&answer)
        .ok_or_else(|| "its CSDS answer does not say what it serves (not xdsd?)".to_string())
}

/// One replica's mark on the history: the revision it serves, as what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// The revision served.
    pub revision: i64,
    /// The replica (and `canaries` for a gated rollout's candidate).
    pub label: String,
    /// Whether serving an earlier change than the latest is being behind (not for a rollout's
    /// stable state while its canaries are served a candidate).
    pub lags: bool,
}

/// The marks of `replicas` that know their revision: each one's, and its canaries' candidate.
pub fn marks(replicas: &[Replica]) -> Vec<Mark> {
    let mut out = Vec::new();
    for r in replicas {
        let Ok(served) = &r.served else { continue };
        if let Some(revision) = served.revision {
            out.push(Mark {
                revision,
                label: r.name.clone(),
                lags: served.candidate_revision.is_none(),
            });
        }
        if let Some(revision) = served.candidate_revision {
            out.push(Mark {
                revision,
                label: format!("{}: canaries", r.name),
                lags: false,
            });
        }
    }
    out
}

/// Which row of `rows` (a history, newest first) each mark serves: the first whose revision is
/// at or before the mark's; `None` when every row shown is later (the replica serves an older
/// change than those shown).
pub fn row_of(rows: &[Value], mark: &Mark) -> Option<usize> {
    rows.iter()
        .position(|row| row["revision"].as_i64().is_some_and(|r| r <= mark.revision))
}

/// `rows` with each one's `served`: the labels of the marks that serve it.
pub fn with_served(rows: Value, marks: &[Mark]) -> Value {
    let Value::Array(mut rows) = rows else {
        return rows;
    };
    let at: Vec<Option<usize>> = marks.iter().map(|m| row_of(&rows, m)).collect();
    for (i, row) in rows.iter_mut().enumerate() {
        let labels: Vec<&str> = marks
            .iter()
            .zip(&at)
            .filter(|(_, at)| **at == Some(i))
            .map(|(m, _)| m.label.as_str())
            .collect();
        row["served"] = json!(labels);
    }
    Value::Array(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(name: &str, revision: Option<i64>, candidate: Option<i64>) -> Replica {
        Replica {
            name: name.into(),
            served: Served::from_json(&json!({
                "revision": revision, "candidate_revision": candidate, "generation": 1,
                "digest": "d", "server": name,
            }))
            .ok_or_else(String::new),
        }
    }

    use crate::admin::page::replicas_table;

    #[test]
    fn each_replica_serves_the_latest_change_at_or_before_its_revision() {
        let rows = json!([{"revision": 12}, {"revision": 9}, {"revision": 5}]);
        let replicas = [
            replica("this replica", Some(14), None),
            replica("10.0.0.2:18000", Some(9), None),
            replica("10.0.0.3:18000", Some(3), None),
            replica("10.0.0.4:18000", Some(9), Some(12)),
            Replica {
                name: "10.0.0.5:18000".into(),
                served: Err("refused".into()),
            },
        ];
        let marks = marks(&replicas);
        let served = with_served(rows.clone(), &marks);
        assert_eq!(
            served[0]["served"],
            json!(["this replica", "10.0.0.4:18000: canaries"])
        );
        assert_eq!(
            served[1]["served"],
            json!(["10.0.0.2:18000", "10.0.0.4:18000"])
        );
        assert_eq!(served[2]["served"], json!([]));
        let Value::Array(rows) = rows else { panic!() };
        let mut out = String::new();
        replicas_table(&mut out, &replicas, &rows);
        assert!(
            out.contains("<td class=\"SYNCED\">the latest change, 12</td>"),
            "{out}"
        );
        assert!(
            out.contains("<td class=\"STALE\">change 9: behind, the latest change is 12</td>"),
            "{out}"
        );
        assert!(
            out.contains("a change older than those shown: behind"),
            "{out}"
        );
        assert!(
            out.contains("<td class=\"mono\">9 (canaries: 12)</td><td class=\"\">change 9</td>"),
            "a rollout's stable state is not behind its candidate: {out}"
        );
        assert!(out.contains("not known: refused"), "{out}");
    }
}
