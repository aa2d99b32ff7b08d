//! A gated rollout's state as a type: what `GET /rollout` and `Rollout::status_json` say in
//! their `state` field, read once here, so that a test compares variants, not strings, and a
//! state the tests do not know fails loudly instead of never matching.

use serde_json::Value;

/// Where a gated rollout is (its `state` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RolloutState {
    /// No candidate: every client has the stable state (`idle`).
    Idle,
    /// A candidate is with the canaries, its soak not over (`soaking`).
    Soaking,
    /// The soak is over but too few canaries ACKed (`waiting for canaries`).
    WaitingForCanaries,
    /// A canary NACKed the candidate (`halted`).
    Halted,
}

impl RolloutState {
    /// The state a rollout's JSON names; panics, showing the JSON, when it names none.
    #[track_caller]
    pub fn of(rollout: &Value) -> RolloutState {
        match rollout["state"].as_str() {
            Some("idle") => RolloutState::Idle,
            Some("soaking") => RolloutState::Soaking,
            Some("waiting for canaries") => RolloutState::WaitingForCanaries,
            Some("halted") => RolloutState::Halted,
            _ => panic!("no rollout state known to the tests in: {rollout:#}"),
        }
    }
}

/// Whether `rollout` is in `state`: for the predicates of the tests' waits.
#[track_caller]
pub fn is(rollout: &Value, state: RolloutState) -> bool {
    RolloutState::of(rollout) == state
}
