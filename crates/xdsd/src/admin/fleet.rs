//! The fleet at a glance: a CSDS answer (`ClientStatusResponse`, from xdsd or any CSDS server)
//! read as one row per client and one state per type — `SYNCED`, `STALE`, `NACKED` or
//! `NOT SENT` — the way `xdsd status` prints it and the admin status page shows it.
//!
//! Only what CSDS carries is read: the node, and per type and resource the config and client
//! status, the version and the error state. xdsd's CSDS names the files of a NACKed response's
//! resources at the end of the error's details (`message [from file (resource #1), ...]`, see
//! `csds::nack_details`); they are split off as the NACK's origins.

use envoy_types::pb::envoy::admin::v3::ClientResourceStatus;
use envoy_types::pb::envoy::service::status::v3::client_config::GenericXdsConfig;
use envoy_types::pb::envoy::service::status::v3::{ClientConfig, ConfigStatus};
use serde_json::{json, Value};

use xdsd_core::types;

/// Where a client stands with one type, worst last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TypeState {
    /// It ACKed the last response it was sent.
    Synced,
    /// Nothing sent yet of a type it asked for.
    NotSent,
    /// A response awaits its ACK (or the client's answer is not known).
    Stale,
    /// It rejected the last response.
    Nacked,
}

impl TypeState {
    /// The state as shown: `SYNCED`, `NOT SENT`, `STALE`, `NACKED`.
    pub fn as_str(self) -> &'static str {
        match self {
            TypeState::Synced => "SYNCED",
            TypeState::NotSent => "NOT SENT",
            TypeState::Stale => "STALE",
            TypeState::Nacked => "NACKED",
        }
    }

    /// The state of one CSDS entry.
    pub fn of(g: &GenericXdsConfig) -> TypeState {
        let config = ConfigStatus::try_from(g.config_status).unwrap_or(ConfigStatus::Unknown);
        let client = ClientResourceStatus::try_from(g.client_status)
            .unwrap_or(ClientResourceStatus::Unknown);
        if client == ClientResourceStatus::Nacked || config == ConfigStatus::Error {
            TypeState::Nacked
        } else if config == ConfigStatus::NotSent {
            TypeState::NotSent
        } else if config == ConfigStatus::Stale {
            TypeState::Stale
        } else if config == ConfigStatus::Synced || client == ClientResourceStatus::Acked {
            TypeState::Synced
        } else {
            TypeState::Stale
        }
    }
}

/// A client's NACK of a type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NackInfo {
    /// The client's message.
    pub message: String,
    /// The files (or keys) of the rejected resources, when the server names them.
    pub origins: Vec<String>,
    /// The version rejected.
    pub version: String,
}

/// One resource a client was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceRow {
    /// Its name.
    pub name: String,
    /// The version of the response it came in that the client runs (ACKed); the resource's own
    /// version when known (CSDS has no field for it: `xdsd status --admin` reads it from xdsd's
    /// admin API).
    pub version: String,
    /// Whether `version` is the resource's own (read from the admin API), not its response's.
    pub own_version: bool,
    /// The client's state for it.
    pub state: TypeState,
    /// The file (or key) it came from, when known (from xdsd's admin API, as the version).
    pub origin: String,
}

impl ResourceRow {
    /// Its version, labelled: `version V` (its own) or `in response V` (the response's, all
    /// CSDS says), cut to 8 characters when `short`.
    pub fn version_text(&self, short: bool) -> String {
        let version = if short {
            short_version(&self.version)
        } else {
            &self.version
        };
        match (self.version.is_empty(), self.own_version) {
            (true, _) => String::new(),
            (false, true) => format!("version {version}"),
            (false, false) => format!("in response {version}"),
        }
    }
}

/// One type of one client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeRow {
    /// The type URL.
    pub type_url: String,
    /// The client's state for the type.
    pub state: TypeState,
    /// The version the client runs (its last ACKed), empty when none.
    pub version: String,
    /// Its last NACK, when it stands.
    pub nack: Option<NackInfo>,
    /// The resources it was sent.
    pub resources: Vec<ResourceRow>,
}

impl TypeRow {
    /// The versions of the type, labelled, as every view shows them: the one the client runs
    /// (`01234567`); with a NACK standing, the one rejected and the one still run (`rejected
    /// fedcba98, accepted 01234567`, or `, none accepted`). Cut to 8 characters when `short`.
    pub fn versions(&self, short: bool) -> String {
        let cut = |v: &'_ str| -> String {
            if short {
                short_version(v).to_owned()
            } else {
                v.to_owned()
            }
        };
        match self.nack.as_ref().filter(|n| !n.version.is_empty()) {
            Some(n) if self.version.is_empty() => {
                format!("rejected {}, none accepted", cut(&n.version))
            }
            Some(n) => format!(
                "rejected {}, accepted {}",
                cut(&n.version),
                cut(&self.version)
            ),
            None => cut(&self.version),
        }
    }
}

/// One client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientRow {
    /// The node id.
    pub id: String,
    /// The node's cluster.
    pub cluster: String,
    /// The client's user agent and its version ("envoy 1.40.0", "gRPC Go 1.70.0").
    pub agent: String,
    /// Each type it asked for.
    pub types: Vec<TypeRow>,
}

impl ClientRow {
    /// Its worst type's state (SYNCED with no types).
    pub fn state(&self) -> TypeState {
        self.types
            .iter()
            .map(|t| t.state)
            .max()
            .unwrap_or(TypeState::Synced)
    }

    /// Its row of `type_url`, if it asked for it.
    pub fn type_row(&self, type_url: &str) -> Option<&TypeRow> {
        self.types.iter().find(|t| t.type_url == type_url)
    }
}

/// The short name of a type ("CDS"), or the last part of its URL.
pub fn short_type(type_url: &str) -> &str {
    match type_url {
        types::LISTENER => "LDS",
        types::ROUTE_CONFIGURATION => "RDS",
        types::SCOPED_ROUTE_CONFIGURATION => "SRDS",
        types::VIRTUAL_HOST => "VHDS",
        types::CLUSTER => "CDS",
        types::CLUSTER_LOAD_ASSIGNMENT => "EDS",
        types::LB_ENDPOINT => "LEDS",
        types::SECRET => "SDS",
        types::RUNTIME => "RTDS",
        types::TYPED_EXTENSION_CONFIG => "ECDS",
        other => other.rsplit(['.', '/']).next().unwrap_or(other),
    }
}

/// The order types are shown in: the well-known ones in xDS order, then the others by URL.
fn type_rank(type_url: &str) -> (usize, &str) {
    let rank = types::WELL_KNOWN
        .iter()
        .position(|t| *t == type_url)
        .unwrap_or(types::WELL_KNOWN.len());
    (rank, type_url)
}

/// A version cut to its first 8 characters.
pub fn short_version(version: &str) -> &str {
    match version.char_indices().nth(8) {
        Some((at, _)) => &version[..at],
        None => version,
    }
}

/// Splits xdsd's `message [from a, b]` details into the message and the origins.
pub fn split_details(details: &str) -> (String, Vec<String>) {
    if let Some(at) = details.rfind(" [from ") {
        if let Some(list) = details[at + 7..].strip_suffix(']') {
            let origins = list
                .split(", ")
                .filter(|o| !o.is_empty())
                .map(str::to_owned)
                .collect();
            return (details[..at].to_owned(), origins);
        }
    }
    (details.to_owned(), Vec::new())
}

/// One client of a CSDS answer as a row.
pub fn client_row(config: &ClientConfig) -> ClientRow {
    let node = config.node.clone().unwrap_or_default();
    let version = xdsd_core::clients::user_agent_version(&node);
    let agent = [node.user_agent_name.as_str(), version.as_str()]
        .iter()
        .filter(|s| !s.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join(" ");
    let mut types: Vec<TypeRow> = Vec::new();
    for g in &config.generic_xds_configs {
        let state = TypeState::of(g);
        let at = match types.iter().position(|t| t.type_url == g.type_url) {
            Some(at) => at,
            None => {
                types.push(TypeRow {
                    type_url: g.type_url.clone(),
                    state,
                    version: g.version_info.clone(),
                    nack: None,
                    resources: Vec::new(),
                });
                types.len() - 1
            }
        };
        let t = &mut types[at];
        t.state = t.state.max(state);
        if t.version.is_empty() {
            t.version = g.version_info.clone();
        }
        if t.nack.is_none() && state == TypeState::Nacked {
            if let Some(e) = &g.error_state {
                let (message, origins) = split_details(&e.details);
                t.nack = Some(NackInfo {
                    message,
                    origins,
                    version: e.version_info.clone(),
                });
            }
        }
        if !g.name.is_empty() {
            t.resources.push(ResourceRow {
                name: g.name.clone(),
                version: g.version_info.clone(),
                own_version: false,
                state,
                origin: String::new(),
            });
        }
    }
    types.sort_by(|a, b| type_rank(&a.type_url).cmp(&type_rank(&b.type_url)));
    ClientRow {
        id: node.id,
        cluster: node.cluster,
        agent,
        types,
    }
}

/// Every client of a CSDS answer, NACKED first, then STALE, NOT SENT and SYNCED, each by id.
pub fn client_rows(configs: &[ClientConfig]) -> Vec<ClientRow> {
    let mut rows: Vec<ClientRow> = configs.iter().map(client_row).collect();
    rows.sort_by(|a, b| b.state().cmp(&a.state()).then_with(|| a.id.cmp(&b.id)));
    rows
}

/// The types any of `rows` has, in display order.
pub fn columns(rows: &[ClientRow]) -> Vec<String> {
    let mut all: Vec<String> = Vec::new();
    for r in rows {
        for t in &r.types {
            if !all.contains(&t.type_url) {
                all.push(t.type_url.clone());
            }
        }
    }
    all.sort_by(|a, b| type_rank(a).cmp(&type_rank(b)));
    all
}

/// How many clients are in each state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    /// Clients counted.
    pub clients: usize,
    /// Those synced.
    pub synced: usize,
    /// Those with a NACK standing.
    pub nacked: usize,
    /// Those with a response awaiting its answer.
    pub stale: usize,
    /// Those sent nothing yet.
    pub not_sent: usize,
}

impl Summary {
    /// Counts `rows`.
    pub fn of<'a>(rows: impl IntoIterator<Item = &'a ClientRow>) -> Summary {
        let mut s = Summary::default();
        for r in rows {
            s.clients += 1;
            match r.state() {
                TypeState::Synced => s.synced += 1,
                TypeState::Nacked => s.nacked += 1,
                TypeState::Stale => s.stale += 1,
                TypeState::NotSent => s.not_sent += 1,
            }
        }
        s
    }

    /// Every client synced (true with none).
    pub fn all_synced(&self) -> bool {
        self.synced == self.clients
    }

    /// `12 clients: 11 synced, 1 NACKED`.
    pub fn line(&self) -> String {
        let noun = if self.clients == 1 {
            "client"
        } else {
            "clients"
        };
        let mut parts = vec![format!("{} synced", self.synced)];
        for (n, what) in [
            (self.nacked, "NACKED"),
            (self.stale, "STALE"),
            (self.not_sent, "NOT SENT"),
        ] {
            if n > 0 {
                parts.push(format!("{n} {what}"));
            }
        }
        format!("{} {noun}: {}", self.clients, parts.join(", "))
    }
}

/// The rows as `xdsd status --output json` writes them.
pub fn rows_json(rows: &[ClientRow]) -> Value {
    let summary = Summary::of(rows);
    json!({
        "clients": rows.iter().map(row_json).collect::<Vec<_>>(),
        "summary": {
            "clients": summary.clients,
            "synced": summary.synced,
            "nacked": summary.nacked,
            "stale": summary.stale,
            "not_sent": summary.not_sent,
        },
    })
}

/// A client's row as JSON (the admin API's `/clients`).
pub fn row_json(r: &ClientRow) -> Value {
    json!({
        "id": r.id,
        "cluster": r.cluster,
        "agent": r.agent,
        "state": r.state().as_str(),
        "types": r.types.iter().map(|t| json!({
            "type_url": t.type_url,
            "type": short_type(&t.type_url),
            "state": t.state.as_str(),
            "version": t.version,
            "nack": t.nack.as_ref().map(|n| json!({
                "message": n.message,
                "origins": n.origins,
                "version": n.version,
            })),
            "resources": t.resources.iter().map(|res| json!({
                "name": res.name,
                "version": res.version,
                "state": res.state.as_str(),
                "origin": (!res.origin.is_empty()).then_some(&res.origin),
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

/// One replica (a server asked) and what it says it serves (its CSDS answer's
/// `xdsd_core::csds::SERVED_METADATA`; `None` from a server that is not xdsd).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaView {
    /// How it was reached: the address asked.
    pub name: String,
    /// What it serves.
    pub served: Option<xdsd_core::csds::Served>,
}

/// Which of `replicas` are behind: they serve an earlier revision than the latest any of them
/// serves, and other resources (replicas that loaded at different revisions of etcd but hold
/// the same resources are not behind: their states' digests are equal). A replica that says no
/// revision is never behind.
pub fn behind(replicas: &[ReplicaView]) -> Vec<bool> {
    let latest = replicas
        .iter()
        .filter_map(|r| r.served.as_ref())
        .filter(|s| s.revision.is_some())
        .max_by_key(|s| s.revision);
    replicas
        .iter()
        .map(|r| match (r.served.as_ref(), latest) {
            (Some(s), Some(latest)) => {
                s.revision.is_some_and(|rev| Some(rev) < latest.revision)
                    && (s.digest.is_empty() || s.digest != latest.digest)
            }
            _ => false,
        })
        .collect()
}

/// A gated rollout as the fleet view reads it: from `GET /rollout`'s JSON, which xdsd's CSDS
/// also carries in its answer's metadata (`xdsd-rollout-bin`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RolloutView {
    /// `idle`, `soaking`, `waiting for canaries` or `halted`.
    pub state: String,
    /// The stable state's generation.
    pub stable_generation: u64,
    /// The candidate's generation, while there is one.
    pub candidate_generation: Option<u64>,
    /// The stable state's version of each type.
    pub stable_versions: std::collections::BTreeMap<String, String>,
    /// The candidate's version of each type, while there is one.
    pub candidate_versions: std::collections::BTreeMap<String, String>,
    /// The node ids of the connected canaries.
    pub canaries: Vec<String>,
    /// Seconds of soak left, while soaking.
    pub soak_left_seconds: Option<f64>,
    /// The halt, when a canary NACKed the candidate: its node, type URL and message.
    pub halt: Option<(String, String, String)>,
    /// Said when no connected client is in the cohort.
    pub cohort_empty: Option<String>,
    /// Said after an abort: the source holds a change no client is served.
    pub held_change: Option<String>,
}

/// Which state of a gated rollout a client holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holds {
    /// Every type the rollout changes at the stable state's version.
    Stable,
    /// Every type the rollout changes at the candidate's version.
    Candidate,
    /// Some of each, or versions of neither.
    Mixed,
}

impl Holds {
    /// `stable`, `candidate`, `mixed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Holds::Stable => "stable",
            Holds::Candidate => "candidate",
            Holds::Mixed => "mixed",
        }
    }
}

impl RolloutView {
    /// Reads `GET /rollout`'s JSON; `None` when it is not a rollout's.
    pub fn from_json(json: &Value) -> Option<RolloutView> {
        let state = json.get("state")?.as_str()?.to_owned();
        let versions = |v: &Value| -> std::collections::BTreeMap<String, String> {
            v.as_object()
                .into_iter()
                .flatten()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        };
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        Some(RolloutView {
            state,
            stable_generation: json["stable"]["generation"].as_u64().unwrap_or(0),
            candidate_generation: json["candidate"]["generation"].as_u64(),
            stable_versions: versions(&json["stable"]["versions"]),
            candidate_versions: versions(&json["candidate"]["versions"]),
            canaries: json["canaries"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["node"].as_str().map(str::to_owned))
                .collect(),
            soak_left_seconds: json["soak_left_seconds"].as_f64(),
            halt: json
                .get("halt")
                .filter(|h| h.is_object())
                .map(|h| (text(&h["node"]), text(&h["type_url"]), text(&h["message"]))),
            cohort_empty: json["cohort_empty"].as_str().map(str::to_owned),
            held_change: json["held_change"]["message"].as_str().map(str::to_owned),
        })
    }

    /// The change reached the whole fleet: no candidate, no halt, no change held back.
    pub fn done(&self) -> bool {
        self.state == "idle" && self.halt.is_none() && self.held_change.is_none()
    }

    /// Nothing will move on its own: halted, or a change held back after an abort.
    pub fn stuck(&self) -> bool {
        self.halt.is_some() || self.held_change.is_some()
    }

    /// The types the candidate changes, each with its stable and candidate versions ("" where
    /// one has no such type).
    pub fn changed_types(&self) -> Vec<(&str, &str, &str)> {
        let mut out: Vec<(&str, &str, &str)> = Vec::new();
        if self.candidate_generation.is_none() {
            return out;
        }
        let types: std::collections::BTreeSet<&String> = self
            .stable_versions
            .keys()
            .chain(self.candidate_versions.keys())
            .collect();
        for t in types {
            let s = self.stable_versions.get(t).map_or("", String::as_str);
            let c = self.candidate_versions.get(t).map_or("", String::as_str);
            if s != c {
                out.push((t.as_str(), s, c));
            }
        }
        out.sort_by(|a, b| type_rank(a.0).cmp(&type_rank(b.0)));
        out
    }

    /// Whether `node` is a connected canary.
    pub fn is_canary(&self, node: &str) -> bool {
        self.canaries.iter().any(|c| c == node)
    }

    /// Which state `row` holds, by the versions it runs of the types the candidate changes
    /// (every type with no candidate).
    pub fn holds(&self, row: &ClientRow) -> Holds {
        let (mut stable, mut candidate, mut other) = (0, 0, 0);
        for t in &row.types {
            let s = self.stable_versions.get(&t.type_url);
            let c = self.candidate_versions.get(&t.type_url);
            if self.candidate_generation.is_some() && c == s {
                continue;
            }
            if c == Some(&t.version) {
                candidate += 1;
            } else if s == Some(&t.version) {
                stable += 1;
            } else {
                other += 1;
            }
        }
        match (stable, candidate, other) {
            (_, 0, 0) => Holds::Stable,
            (0, _, 0) => Holds::Candidate,
            _ => Holds::Mixed,
        }
    }

    /// One line: `rollout soaking: candidate generation 7 (stable 6), 1 canary, 3s of soak left`.
    pub fn line(&self) -> String {
        let mut out = format!("rollout {}", self.state);
        match self.candidate_generation {
            Some(c) => out.push_str(&format!(
                ": candidate generation {c} (stable {})",
                self.stable_generation
            )),
            None => out.push_str(&format!(": stable generation {}", self.stable_generation)),
        }
        let n = self.canaries.len();
        out.push_str(&format!(", {n} canar{}", if n == 1 { "y" } else { "ies" }));
        if let Some(left) = self.soak_left_seconds {
            out.push_str(&format!(", {left:.0}s of soak left"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::admin::v3::UpdateFailureState;
    use envoy_types::pb::envoy::config::core::v3::Node;

    fn entry(
        type_url: &str,
        name: &str,
        config: ConfigStatus,
        client: ClientResourceStatus,
    ) -> GenericXdsConfig {
        GenericXdsConfig {
            type_url: type_url.into(),
            name: name.into(),
            version_info: "0123456789abcdef".into(),
            config_status: config as i32,
            client_status: client as i32,
            ..Default::default()
        }
    }

    fn client(id: &str, entries: Vec<GenericXdsConfig>) -> ClientConfig {
        ClientConfig {
            node: Some(Node {
                id: id.into(),
                ..Default::default()
            }),
            generic_xds_configs: entries,
            ..Default::default()
        }
    }

    #[test]
    fn a_nack_is_the_types_state_with_its_message_and_origins_and_sorts_first() {
        let mut nacked = entry(
            types::CLUSTER,
            "broken",
            ConfigStatus::Error,
            ClientResourceStatus::Nacked,
        );
        nacked.error_state = Some(UpdateFailureState {
            details: "port 70000 out of range [from c/broken.yaml (resource #1), x.yaml]".into(),
            version_info: "fedcba98".into(),
            ..Default::default()
        });
        let ok = entry(
            types::CLUSTER,
            "service",
            ConfigStatus::Synced,
            ClientResourceStatus::Acked,
        );
        let rows = client_rows(&[
            client("a-synced", vec![ok.clone()]),
            client("b-nacked", vec![ok, nacked]),
            client(
                "c-stale",
                vec![entry(
                    types::LISTENER,
                    "",
                    ConfigStatus::Stale,
                    ClientResourceStatus::Requested,
                )],
            ),
        ]);
        let ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["b-nacked", "c-stale", "a-synced"]);
        let cds = rows[0].type_row(types::CLUSTER).unwrap();
        assert_eq!(cds.state, TypeState::Nacked);
        let nack = cds.nack.as_ref().unwrap();
        assert_eq!(nack.message, "port 70000 out of range");
        assert_eq!(nack.origins, ["c/broken.yaml (resource #1)", "x.yaml"]);
        assert_eq!(cds.resources.len(), 2);
        let summary = Summary::of(&rows);
        assert_eq!(summary.line(), "3 clients: 1 synced, 1 NACKED, 1 STALE");
        assert!(!summary.all_synced());
        assert_eq!(columns(&rows), [types::LISTENER, types::CLUSTER]);
    }

    fn replica(name: &str, revision: Option<i64>, digest: &str) -> ReplicaView {
        ReplicaView {
            name: name.into(),
            served: xdsd_core::csds::Served::from_json(&json!({
                "revision": revision, "generation": 1, "digest": digest, "server": name,
            })),
        }
    }

    #[test]
    fn a_replica_is_behind_when_it_serves_an_earlier_revision_with_other_resources() {
        let replicas = [
            replica("a", Some(42), "d2"),
            replica("b", Some(40), "d1"),
            replica("c", Some(41), "d2"),
            replica("d", None, ""),
            ReplicaView {
                name: "not xdsd".into(),
                served: None,
            },
        ];
        assert_eq!(behind(&replicas), [false, true, false, false, false]);
        assert_eq!(behind(&replicas[3..]), [false, false]);
    }

    #[test]
    fn details_without_origins_are_the_message() {
        assert_eq!(split_details("bad"), ("bad".to_owned(), vec![]));
        assert_eq!(short_version("0123456789"), "01234567");
        assert_eq!(short_type("type.googleapis.com/foo.v1.Thing"), "Thing");
    }

    #[test]
    fn a_client_holds_the_candidate_the_stable_state_or_a_mix_by_the_types_the_candidate_changes() {
        let rollout = RolloutView::from_json(&json!({
            "state": "soaking",
            "stable": {"generation": 4, "versions": {"cds": "s1", "lds": "l1"}},
            "candidate": {"generation": 5, "versions": {"cds": "c1", "lds": "l1"}},
            "canaries": [{"node": "a"}],
        }))
        .expect("a rollout");
        let row = |cds: &str| ClientRow {
            id: "x".into(),
            cluster: String::new(),
            agent: String::new(),
            types: [("cds", cds), ("lds", "l1"), ("eds", "e9")]
                .iter()
                .map(|(t, v)| TypeRow {
                    type_url: (*t).into(),
                    state: TypeState::Synced,
                    version: (*v).into(),
                    nack: None,
                    resources: vec![],
                })
                .collect(),
        };
        assert_eq!(rollout.holds(&row("c1")), Holds::Candidate);
        assert_eq!(rollout.holds(&row("s1")), Holds::Stable);
        assert_eq!(rollout.holds(&row("zz")), Holds::Mixed);
        assert!(rollout.is_canary("a") && !rollout.is_canary("x"));
        assert_eq!(rollout.changed_types(), vec![("cds", "s1", "c1")]);
        assert!(!rollout.done() && !rollout.stuck());
        let held = RolloutView::from_json(&json!({
            "state": "idle",
            "held_change": {"message": "held"},
        }))
        .expect("a rollout");
        assert!(!held.done() && held.stuck());
    }
}
