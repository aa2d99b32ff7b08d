//! The rollout's state shared between replicas: one [`Record`] of the latest decision, kept by a
//! [`SharedState`] (etcd, under the prefix, for `xdsd serve --etcd-...`; nothing for a
//! directory, whose rollout is the process's own). The gate stays sans-I/O: the record is written
//! through the trait and what other replicas wrote comes back through
//! [`super::Rollout::adopt`].

use serde_json::{json, Value};

use super::{bounded, Decision, Halt, MAX_MESSAGE_BYTES, MAX_NODE_BYTES};
use crate::store::MAX_LISTED;

/// The key (after the prefix) of the record in a shared source: reserved (its last segment starts
/// with `.`), so never read as a resource.
pub const RECORD_KEY: &str = ".rollout";

/// What the record says of its candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordState {
    /// The candidate is with the canaries.
    Soaking,
    /// The candidate was promoted: it is the stable state.
    Promoted,
    /// A canary NACKed the candidate: the canaries are back on the stable state.
    Halted,
    /// An operator dropped the candidate (and cleared a halt of it).
    Aborted,
}

impl RecordState {
    /// Its name in the record: `soaking`, `promoted`, `halted`, `aborted`.
    pub fn name(self) -> &'static str {
        match self {
            RecordState::Soaking => "soaking",
            RecordState::Promoted => "promoted",
            RecordState::Halted => "halted",
            RecordState::Aborted => "aborted",
        }
    }

    /// How far a candidate got: a record replaces another about the same candidate only when it
    /// got further (a decision over soaking, an abort over a halt), so that the first decision
    /// wins.
    fn rank(self) -> u8 {
        match self {
            RecordState::Soaking => 0,
            RecordState::Promoted | RecordState::Halted => 1,
            RecordState::Aborted => 2,
        }
    }
}

/// The latest decision of the rollout, shared by every replica of one source.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Record {
    /// The source revision of the stable state.
    pub stable_revision: i64,
    /// The source revision of the candidate (for a promotion, the stable revision).
    pub candidate_revision: i64,
    /// What became of the candidate.
    pub state: RecordState,
    /// Why it halted, when it did (the node, type, version, message and origins, as `GET
    /// /rollout` shows them; `generation` is the deciding replica's own and is not shared).
    pub halt: Option<Box<Halt>>,
}

impl Record {
    /// A record of `state` of the candidate `candidate_revision`, the stable state being
    /// `stable_revision`.
    pub fn new(stable_revision: i64, candidate_revision: i64, state: RecordState) -> Record {
        Record {
            stable_revision,
            candidate_revision,
            state,
            halt: None,
        }
    }

    /// With the halt's reason.
    pub fn with_halt(mut self, halt: Box<Halt>) -> Record {
        self.halt = Some(halt);
        self
    }

    /// The revision a replica starting now loads the source at (the rest comes as changes):
    /// the candidate's.
    pub fn load_revision(&self) -> i64 {
        self.candidate_revision.max(self.stable_revision)
    }

    /// What a replica adopting the record does about its candidate (none for a soak).
    pub fn decision(&self) -> Option<Decision> {
        match self.state {
            RecordState::Soaking => None,
            RecordState::Promoted => Some(Decision::Promoted),
            RecordState::Aborted => Some(Decision::Aborted),
            RecordState::Halted => Some(Decision::Halted(self.halt.clone().unwrap_or_else(|| {
                Box::new(Halt {
                    generation: 0,
                    node: String::new(),
                    type_url: String::new(),
                    version: String::new(),
                    message: "halted on another replica (no reason recorded)".into(),
                    origins: Vec::new(),
                })
            }))),
        }
    }

    /// Whether this record should replace `current`: it is about a later candidate, or the same
    /// candidate got further (see [`RecordState`]). (Stable revisions are not compared: replicas
    /// that started apart know the same stable state by different revisions.)
    pub fn supersedes(&self, current: &Record) -> bool {
        (self.candidate_revision, self.state.rank())
            > (current.candidate_revision, current.state.rank())
    }

    /// As JSON: `{"stable_revision":S,"candidate_revision":R,"state":"halted","halt":{...}}`.
    pub fn to_json(&self) -> Value {
        let mut out = json!({
            "stable_revision": self.stable_revision,
            "candidate_revision": self.candidate_revision,
            "state": self.state.name(),
        });
        if let Some(halt) = &self.halt {
            out["halt"] = halt.to_json();
        }
        out
    }

    /// Reads a record written by [`Record::to_json`] (by this or another replica); what it
    /// holds is kept bounded.
    pub fn parse(bytes: &[u8]) -> Result<Record, String> {
        let value: Value =
            serde_json::from_slice(bytes).map_err(|e| format!("not a rollout record: {e}"))?;
        let revision = |field: &str| {
            value[field]
                .as_i64()
                .filter(|r| *r >= 0)
                .ok_or_else(|| format!("the rollout record has no {field}"))
        };
        let state = match value["state"].as_str() {
            Some("soaking") => RecordState::Soaking,
            Some("promoted") => RecordState::Promoted,
            Some("halted") => RecordState::Halted,
            Some("aborted") => RecordState::Aborted,
            other => return Err(format!("the rollout record's state {other:?} is unknown")),
        };
        let text = |v: &Value, max: usize| bounded(v.as_str().unwrap_or("").to_owned(), max);
        let halt = value.get("halt").filter(|h| h.is_object()).map(|h| {
            Box::new(Halt {
                generation: 0,
                node: text(&h["node"], MAX_NODE_BYTES),
                type_url: text(&h["type_url"], MAX_NODE_BYTES),
                version: text(&h["version"], MAX_NODE_BYTES),
                message: text(&h["message"], MAX_MESSAGE_BYTES),
                origins: h["origins"]
                    .as_array()
                    .map(|list| {
                        list.iter()
                            .take(MAX_LISTED)
                            .map(|o| text(o, MAX_MESSAGE_BYTES))
                            .collect()
                    })
                    .unwrap_or_default(),
            })
        });
        Ok(Record {
            stable_revision: revision("stable_revision")?,
            candidate_revision: revision("candidate_revision")?,
            state,
            halt,
        })
    }
}

/// Where the record is shared (etcd for replicas on an etcd prefix).
pub trait SharedState: Send + Sync {
    /// Writes `record` for every replica, unless the shared record is already as far or further
    /// ([`Record::supersedes`]). Must not block: the write happens in the background, the
    /// latest record replacing one not written yet.
    fn publish(&self, record: Record);

    /// Reads the shared record again now rather than when a watch brings it (a client holds a
    /// candidate another replica may have promoted: see [`super::Rollout`]'s held answers);
    /// what it holds comes back through [`super::Rollout::adopt`]. Must not block, and must
    /// coalesce: calls while a read is under way are answered by one read after it, so that
    /// many clients make one read. (Nothing to read for a state that is not shared.)
    fn refresh(&self) {}
}

impl Halt {
    /// What halted a rollout, as JSON (a record's `halt`, and `GET /rollout`'s with its
    /// generation and revision): the node, the type, the version, the client's message, the
    /// origins of the resources it rejected.
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "node": self.node,
            "type_url": self.type_url,
            "version": self.version,
            "message": self.message,
            "origins": self.origins,
        })
    }
}
