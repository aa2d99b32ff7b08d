//! etcd as an [`xdsd_core::source::Source`]: **a key is a file**. Every key under the prefix
//! holds exactly what a resource file holds (YAML or JSON, one or more documents, `"@type"`,
//! `"@constraints"`, `"@ttl"`), parsed by the same code as a file ([`xdsd_source::parse_text`]):
//! a key ending in `.json` is JSON, any other YAML (which reads JSON too). Errors and origins name
//! the full key (`/xdsd/clusters.yaml (resource #2)`).
//!
//! The prefix is read once at a revision, then watched from the next one; the changes of one etcd
//! revision (one transaction) are one change set, holding every key's resources. A key that does
//! not parse (or cannot be a resource at all) makes that revision's change a rejection naming
//! it, and every later one until the key is fixed or deleted, as a directory with a bad file
//! does: the last good state keeps being served. A compaction past the watch's revision reads
//! everything anew. etcd lost and found again is reported as the source's health.

use std::collections::BTreeMap;
use std::path::Path;

use bytes::Bytes;
use xdsd_core::source::{ChangeSet, Rejection, Source, SourceEvent};
use xdsd_source::{
    check_duplicates, parse_text, rejection, resource_inputs, Descriptors, Format, ParsedResource,
};

use crate::{Etcd, EtcdOptions, Event, KeyChange, Snapshot, Watch};

/// What one key holds: its resources, or every problem with it (each naming the key).
type Parsed = Result<Vec<ParsedResource>, Vec<String>>;

/// The keys of a prefix in etcd, loaded and then watched.
pub struct EtcdSource {
    options: EtcdOptions,
    descriptors: Descriptors,
    /// Every resource key (its suffix after the prefix), parsed.
    keys: BTreeMap<String, Parsed>,
    watch: Option<Watch>,
    /// Kept for the life of the watch (the connection it uses); before the first load, one
    /// given to it ([`EtcdSource::with_connection`]).
    etcd: Option<Etcd>,
    /// The past revision the first load reads at ([`EtcdSource::starting_at`]).
    start_at: Option<i64>,
}

impl EtcdSource {
    /// The prefix and etcd of `options`; nothing is read before [`Source::load`].
    pub fn new(descriptors: Descriptors, options: EtcdOptions) -> EtcdSource {
        EtcdSource {
            options,
            descriptors,
            keys: BTreeMap::new(),
            watch: None,
            etcd: None,
            start_at: None,
        }
    }

    /// Reads and watches through `etcd`, a connection made for something else on the same
    /// options (the gated rollout's shared state), rather than a connection of its own.
    pub fn with_connection(mut self, etcd: Etcd) -> EtcdSource {
        self.etcd = Some(etcd);
        self
    }

    /// Loads the prefix as it was at `revision` (a past one), then follows every change after
    /// it: what a replica does when it takes up a rollout in flight. When etcd compacted that
    /// revision away, loads the latest one instead (logged at WARN).
    pub fn starting_at(mut self, revision: i64) -> EtcdSource {
        self.start_at = Some(revision);
        self
    }

    /// What the prefix held at `revision` (read through `etcd`), as one change: the stable state
    /// of a rollout a replica takes up.
    pub async fn read_at(&self, etcd: &Etcd, revision: i64) -> Result<ChangeSet, StartError> {
        let snapshot = etcd.read_at(revision).await.map_err(StartError::Etcd)?;
        let mut reader = EtcdSource::new(self.descriptors.clone(), self.options.clone());
        reader.replace(snapshot);
        reader
            .change_set(revision, Vec::new())
            .map_err(StartError::Rejected)
    }

    /// The full key of a suffix: what errors and origins name.
    fn full_key(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.options.prefix())
    }

    /// Parses what `suffix` holds.
    fn parse(&self, suffix: &str, value: &Bytes) -> Parsed {
        let key = self.full_key(suffix);
        parse_value(&self.descriptors, &key, value)
    }

    /// Replaces every key with those of `snapshot`.
    fn replace(&mut self, snapshot: Snapshot) {
        let mut keys = BTreeMap::new();
        for (suffix, value) in &snapshot.entries {
            keys.insert(suffix.clone(), self.parse(suffix, value));
        }
        for (suffix, reason) in &snapshot.rejected {
            let key = self.full_key(suffix);
            keys.insert(suffix.clone(), Err(vec![format!("{key}: {reason}")]));
        }
        self.keys = keys;
    }

    /// Applies one key's change.
    fn apply(&mut self, change: KeyChange) {
        match change {
            KeyChange::Put { key, value } => {
                let parsed = self.parse(&key, &value);
                self.keys.insert(key, parsed);
            }
            KeyChange::Delete { key } => {
                self.keys.remove(&key);
            }
            KeyChange::Rejected { key, reason } => {
                let full = self.full_key(&key);
                self.keys
                    .insert(key, Err(vec![format!("{full}: {reason}")]));
            }
        }
    }

    /// What the prefix holds now: every key's resources, or every problem of every key.
    fn change_set(&self, revision: i64, origins: Vec<String>) -> Result<ChangeSet, Rejection> {
        let mut errors = Vec::new();
        let mut resources = Vec::new();
        for parsed in self.keys.values() {
            match parsed {
                Ok(list) => resources.extend(list.iter().cloned()),
                Err(messages) => errors.extend(messages.iter().cloned()),
            }
        }
        if !errors.is_empty() {
            return Err(Rejection::new(errors));
        }
        check_duplicates(&resources).map_err(|e| rejection(&e))?;
        Ok(ChangeSet::all(resource_inputs(resources)?)
            .with_origins(origins)
            .with_revision(revision))
    }

    fn event(&self, revision: i64, origins: Vec<String>) -> SourceEvent {
        match self.change_set(revision, origins) {
            Ok(change) => SourceEvent::Change(change),
            Err(rejected) => SourceEvent::Rejected(rejected),
        }
    }
}

/// Why the state at a past revision could not be read.
#[derive(Debug)]
pub enum StartError {
    /// etcd could not be read (or compacted that revision away: [`EtcdError::Compacted`]).
    Etcd(crate::EtcdError),
    /// What the prefix held then does not load.
    Rejected(Rejection),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Etcd(e) => write!(f, "{e}"),
            StartError::Rejected(r) => write!(f, "{r}"),
        }
    }
}

impl std::error::Error for StartError {}

/// Reads the prefix at `revision`, or at the latest one when etcd compacted it.
async fn read_at_or_latest(
    etcd: &Etcd,
    options: &EtcdOptions,
    revision: i64,
) -> Result<Snapshot, crate::EtcdError> {
    match etcd.read_at(revision).await {
        Err(crate::EtcdError::Compacted { .. }) => {
            tracing::warn!(
                prefix = %options.prefix(),
                revision,
                "etcd compacted the revision of the rollout in flight away: loading the latest \
                 revision instead"
            );
            etcd.read().await
        }
        read => read,
    }
}

/// Keys looked at on either side of the prefix when it holds none.
const NEIGHBOURS: i64 = 256;

/// Says (at WARN) that the prefix holds no resource: naming it, and, when it holds no key at all
/// (a typo: `/xds/` for `/xdsd/`), the prefix nearest to it that does ([`nearest_prefix`]).
async fn warn_empty(etcd: &Etcd) {
    let prefix = etcd.options().prefix();
    match nearest_prefix(etcd).await {
        Some(Nearest::Holds) => tracing::warn!(
            prefix = %prefix,
            "the etcd prefix {prefix} holds no resources (`xdsd push` writes a directory there)"
        ),
        Some(Nearest::Elsewhere(nearest)) => tracing::warn!(
            prefix = %prefix,
            nearest = %nearest,
            "the etcd prefix {prefix} holds no keys; the nearest prefix that does is {nearest} \
             (a typo in --etcd-prefix?)"
        ),
        Some(Nearest::Nowhere) => tracing::warn!(
            prefix = %prefix,
            "the etcd prefix {prefix} holds no keys, and etcd holds none near it (`xdsd push` \
             writes a directory there)"
        ),
        None => tracing::warn!(
            prefix = %prefix,
            "the etcd prefix {prefix} holds no resources"
        ),
    }
}

/// Where keys are, for a prefix without resources.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Nearest {
    /// The prefix holds keys, none of them a resource (the `.push` marker of a push that
    /// emptied it, the `.rollout` record).
    Holds,
    /// The prefix holds no key; this one (a directory of existing keys: `/xdsd/`, `/a/b/`) is
    /// the nearest to it that does, by edits (a typo), then by how many keys it holds.
    Elsewhere(String),
    /// No key near the prefix (in key order) is under a prefix of its shape.
    Nowhere,
}

/// For a prefix that holds no resource: whether it holds keys at all, and if not, the nearest
/// prefix that does among the directories of the keys next to it in key order ([`NEIGHBOURS`] on
/// each side: a typo sorts near what it misspells). `None` when etcd could not be read.
async fn nearest_prefix(etcd: &Etcd) -> Option<Nearest> {
    use etcd_client::{GetOptions, SortOrder, SortTarget};
    let inner = &etcd.inner;
    let prefix = inner.options.prefix.as_str();
    let what = || format!("looking for keys near prefix {prefix}");
    let mut kv = inner.kv.clone();
    let after = GetOptions::new()
        .with_from_key()
        .with_keys_only()
        .with_limit(NEIGHBOURS);
    let before = GetOptions::new()
        .with_range(prefix.as_bytes().to_vec())
        .with_sort(SortTarget::Key, SortOrder::Descend)
        .with_keys_only()
        .with_limit(NEIGHBOURS);
    let after = etcd
        .call(what, kv.get(prefix, Some(after)))
        .await
        .ok()?
        .ok()?;
    let before = etcd
        .call(what, kv.get(vec![0u8], Some(before)))
        .await
        .ok()?
        .ok()?;
    let keys: Vec<&str> = after
        .kvs()
        .iter()
        .chain(before.kvs())
        .filter_map(|kv| std::str::from_utf8(kv.key()).ok())
        .collect();
    if keys.iter().any(|k| k.starts_with(prefix)) {
        return Some(Nearest::Holds);
    }
    Some(nearest_of(prefix, &keys))
}

/// The directory of `keys` nearest to `prefix`: fewest edits, then most keys, then first in
/// key order.
fn nearest_of(prefix: &str, keys: &[&str]) -> Nearest {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for key in keys {
        for (i, c) in key.char_indices() {
            // A directory of the prefix's shape: it ends in `/` when the prefix does.
            if (c == '/' || !prefix.ends_with('/')) && i + c.len_utf8() < key.len() {
                *counts.entry(&key[..i + c.len_utf8()]).or_default() += 1;
            }
        }
    }
    counts
        .into_iter()
        .filter(|(candidate, _)| *candidate != prefix && candidate.len() > 1)
        .min_by_key(|(candidate, count)| {
            (strsim::osa_distance(prefix, candidate), usize::MAX - count)
        })
        .map_or(Nearest::Nowhere, |(candidate, _)| {
            Nearest::Elsewhere(candidate.to_owned())
        })
}

/// Parses a key's value as a resource file named `key`: JSON when the key ends in `.json` (in
/// any letter case), else YAML (which reads JSON too).
pub fn parse_value(descriptors: &Descriptors, key: &str, value: &[u8]) -> Parsed {
    let Ok(text) = std::str::from_utf8(value) else {
        return Err(vec![format!(
            "{key}: not UTF-8 text (a key holds what a resource file holds: YAML or JSON)"
        )]);
    };
    let format = if key.to_ascii_lowercase().ends_with(".json") {
        Format::Json
    } else {
        Format::Yaml
    };
    parse_text(descriptors, Path::new(key), format, text)
        .map_err(|e| e.errors().iter().map(|e| e.to_string()).collect())
}

impl Source for EtcdSource {
    fn describe(&self) -> String {
        format!(
            "etcd {} prefix {}",
            self.options.endpoints().join(","),
            self.options.prefix()
        )
    }

    fn kind(&self) -> &'static str {
        "etcd prefix"
    }

    /// Reads the prefix at one revision and starts watching from the next: no change falls
    /// between them.
    async fn load(&mut self) -> Result<ChangeSet, Rejection> {
        let given = self.etcd.take();
        let (options, start_at) = (&self.options, self.start_at);
        let read = async {
            let etcd = match given {
                Some(etcd) => etcd,
                None => Etcd::connect(options).await?,
            };
            let snapshot = match start_at {
                None => etcd.read().await?,
                Some(revision) => read_at_or_latest(&etcd, options, revision).await?,
            };
            Ok::<_, crate::EtcdError>((etcd, snapshot))
        };
        let (etcd, snapshot) = read
            .await
            .map_err(|e| Rejection::new(vec![e.to_string()]))?;
        let revision = snapshot.revision;
        if snapshot.entries.is_empty() && snapshot.rejected.is_empty() {
            warn_empty(&etcd).await;
        }
        self.replace(snapshot);
        self.watch = Some(etcd.watch(revision));
        self.etcd = Some(etcd);
        self.change_set(revision, Vec::new())
    }

    async fn next(&mut self) -> Option<SourceEvent> {
        let event = self.watch.as_mut()?.next().await?;
        Some(match event {
            Event::Revision { revision, changes } => {
                let origins: Vec<String> = changes.iter().map(|c| self.full_key(c.key())).collect();
                for change in changes {
                    self.apply(change);
                }
                self.event(revision, origins)
            }
            Event::Resync(snapshot) => {
                let revision = snapshot.revision;
                self.replace(snapshot);
                self.event(
                    revision,
                    vec![format!("{} (read again)", self.options.prefix())],
                )
            }
            Event::Health { healthy, reason } => SourceEvent::Health { healthy, reason },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{nearest_of, Nearest};

    /// A prefix with a typo (`/xds/` for `/xdsd/`) is told the prefix it misspells, before a
    /// prefix farther off that holds more keys.
    #[test]
    fn the_nearest_prefix_is_the_one_fewest_edits_away() {
        let keys = [
            "/registry/a",
            "/registry/b",
            "/registry/c",
            "/xdsd/clusters.yaml",
            "/xdsd/sub/routes.yaml",
        ];
        assert_eq!(
            nearest_of("/xds/", &keys),
            Nearest::Elsewhere("/xdsd/".into())
        );
        assert_eq!(
            nearest_of("/registri/", &keys),
            Nearest::Elsewhere("/registry/".into())
        );
        assert_eq!(nearest_of("/xds/", &[]), Nearest::Nowhere);
    }
}
