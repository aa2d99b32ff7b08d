//! What a push records of itself in its marker (`<prefix>.push`, written in the push's own
//! transaction): who, why, when, and the names it added, changed and removed. Bounded both ways:
//! a note over the limits is refused before anything is sent, and a marker read back (anyone may
//! have written it) is cut to the same limits.

use serde_json::{json, Value};

use crate::EtcdError;

/// The longest message a push may record, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 4096;
/// The longest author a push may record, in bytes.
pub const MAX_AUTHOR_BYTES: usize = 256;
/// How many names of each kind (added, changed, removed) a record lists; the rest are counted.
pub const FIRST_NAMES: usize = 5;
/// The longest name listed, in bytes (longer ones are cut, ending in `…`).
pub const MAX_NAME_BYTES: usize = 512;

/// Names of one kind a change touched: how many, and the first [`FIRST_NAMES`] of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Names {
    /// How many.
    pub count: usize,
    /// The first few, in the order they were added.
    pub first: Vec<String>,
}

impl Names {
    /// Counts `name`, and lists it while fewer than [`FIRST_NAMES`] are listed.
    pub fn add(&mut self, name: &str) {
        self.count += 1;
        if self.first.len() < FIRST_NAMES {
            self.first.push(bounded(name, MAX_NAME_BYTES));
        }
    }

    fn to_json(&self) -> Value {
        json!({"count": self.count, "first": self.first})
    }

    fn parse(value: &Value) -> Names {
        Names {
            count: value["count"]
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or(0),
            first: value["first"]
                .as_array()
                .map(|list| {
                    list.iter()
                        .take(FIRST_NAMES)
                        .map(|n| bounded(n.as_str().unwrap_or(""), MAX_NAME_BYTES))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

/// Who pushed, why, and what (resource names): written in the marker of the push's transaction
/// ([`crate::Etcd::apply_push_noted`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PushNote {
    /// Who pushed (`xdsd push --author`, by default `$USER@hostname`).
    pub author: String,
    /// Why (`--message`); may be empty.
    pub message: String,
    /// The resources the push added.
    pub added: Names,
    /// The resources it changed.
    pub changed: Names,
    /// The resources it removed.
    pub removed: Names,
    /// For a rollback, the revision whose state it restores.
    pub rollback_to: Option<i64>,
}

impl PushNote {
    /// Refuses a message or an author over its limit (nothing is sent).
    pub(crate) fn check(&self) -> Result<(), EtcdError> {
        for (what, text, max) in [
            ("message", &self.message, MAX_MESSAGE_BYTES),
            ("author", &self.author, MAX_AUTHOR_BYTES),
        ] {
            if text.len() > max {
                return Err(EtcdError::Options(format!(
                    "the push's {what} is {} bytes, over the limit of {max} bytes",
                    text.len()
                )));
            }
        }
        Ok(())
    }

    /// The marker's value: the note with the revision the push read and the time.
    pub(crate) fn marker(&self, read_revision: i64, unix_ms: u64) -> Value {
        let mut out = json!({
            "read_revision": read_revision,
            "unix_ms": unix_ms,
            "author": self.author,
            "message": self.message,
            "added": self.added.to_json(),
            "changed": self.changed.to_json(),
            "removed": self.removed.to_json(),
        });
        if let Some(revision) = self.rollback_to {
            out["rollback_to"] = json!(revision);
        }
        out
    }
}

/// A push's marker read back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PushRecord {
    /// The revision the push read (its transaction was guarded by it).
    pub read_revision: i64,
    /// When it was written, in milliseconds since the Unix epoch (0: not recorded).
    pub unix_ms: u64,
    /// Whether the marker names who and what (a marker of an older xdsd, or one that does not
    /// read as JSON, holds only the revision or nothing).
    pub noted: bool,
    /// Who, why and what.
    pub note: PushNote,
}

impl PushRecord {
    /// Reads a marker's value; what does not read is an empty record (the revision is still a
    /// push).
    pub fn parse(bytes: &[u8]) -> PushRecord {
        let Ok(value) = serde_json::from_slice::<Value>(bytes) else {
            return PushRecord::default();
        };
        let text = |field: &str, max: usize| bounded(value[field].as_str().unwrap_or(""), max);
        PushRecord {
            read_revision: value["read_revision"].as_i64().unwrap_or(0),
            unix_ms: value["unix_ms"].as_u64().unwrap_or(0),
            noted: value.get("author").is_some(),
            note: PushNote {
                author: text("author", MAX_AUTHOR_BYTES),
                message: text("message", MAX_MESSAGE_BYTES),
                added: Names::parse(&value["added"]),
                changed: Names::parse(&value["changed"]),
                removed: Names::parse(&value["removed"]),
                rollback_to: value["rollback_to"].as_i64(),
            },
        }
    }
}

/// `text` cut to at most `max` bytes (on a character boundary), ending in `…` when cut.
fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut at = max;
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    format!("{}…", &text[..at])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_reads_back_from_its_marker() {
        let mut note = PushNote {
            author: "ana@build-7".into(),
            message: "raise the timeout".into(),
            rollback_to: Some(12),
            ..PushNote::default()
        };
        for name in ["a", "b", "c", "d", "e", "f", "g"] {
            note.added.add(name);
        }
        note.removed.add("Cluster/old");
        let marker = note.marker(41, 1_700_000_000_000).to_string();
        let record = PushRecord::parse(marker.as_bytes());
        assert_eq!(record.read_revision, 41);
        assert_eq!(record.unix_ms, 1_700_000_000_000);
        assert!(record.noted);
        assert_eq!(record.note, note);
        assert_eq!(record.note.added.count, 7);
        assert_eq!(record.note.added.first.len(), FIRST_NAMES);
    }

    #[test]
    fn a_marker_of_an_older_push_or_of_anyone_reads_bounded() {
        let old = PushRecord::parse(br#"{"read_revision":3,"unix_ms":5}"#);
        assert_eq!((old.read_revision, old.noted), (3, false));
        assert_eq!(PushRecord::parse(b"not json"), PushRecord::default());
        let long = "x".repeat(MAX_MESSAGE_BYTES * 2);
        let names: Vec<String> = (0..100).map(|i| format!("n{i}")).collect();
        let marker =
            json!({"author": "a", "message": long, "added": {"count": 100, "first": names}});
        let record = PushRecord::parse(marker.to_string().as_bytes());
        assert!(record.note.message.len() <= MAX_MESSAGE_BYTES + '…'.len_utf8());
        assert_eq!(record.note.added.first.len(), FIRST_NAMES);
    }

    #[test]
    fn a_message_over_the_limit_is_refused() {
        let note = PushNote {
            message: "m".repeat(MAX_MESSAGE_BYTES + 1),
            ..PushNote::default()
        };
        assert!(note.check().is_err());
        let note = PushNote {
            author: "a".repeat(MAX_AUTHOR_BYTES + 1),
            ..PushNote::default()
        };
        assert!(note.check().is_err());
    }
}
