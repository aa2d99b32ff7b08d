//! The watched directory as an [`xdsd_core::source::Source`], and the conversion of parsed
//! resources into the store's inputs that every source shares.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};

use tokio::sync::mpsc;
use xdsd_core::params::Constraints;
use xdsd_core::source::{ChangeSet, Rejection, Source, SourceEvent};
use xdsd_core::store::ResourceInput;

use crate::dir::{DirectoryCache, Limits};
use crate::watch::{watch_directory_updates, DirectoryWatch, Reloaded, WatchOptions};
use crate::{Descriptors, ParsedResource, SourceError};

/// The store's inputs for parsed resources; a variant's constraints are checked here (an empty
/// key, a constraint with neither value nor exists, the size bounds), naming its resource.
pub fn resource_inputs(resources: Vec<ParsedResource>) -> Result<Vec<ResourceInput>, Rejection> {
    let mut errors = Vec::new();
    let mut out = Vec::with_capacity(resources.len());
    for r in resources {
        let constraints = match r
            .constraints
            .as_deref()
            .map(Constraints::decode)
            .transpose()
        {
            Ok(constraints) => constraints,
            Err(e) => {
                errors.push(format!(
                    "{} ({:?}): \"@constraints\": {e}",
                    r.origin, r.name
                ));
                continue;
            }
        };
        out.push(
            ResourceInput::new(r.type_url, r.name, r.value)
                .with_constraints(constraints)
                .with_ttl(r.ttl)
                .with_origin(r.origin),
        );
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(Rejection::new(errors))
    }
}

/// A source's errors as a rejection: one message per bad file or resource.
pub fn rejection(error: &SourceError) -> Rejection {
    Rejection::new(error.errors().iter().map(|e| e.to_string()).collect())
}

/// Whether a load's outcome says the directory is healthy: it is unless the directory itself
/// could not be read (gone, replaced by something unreadable, no permission). A change rejected
/// for its content leaves it healthy: every replica reading the same directory rejects it alike,
/// and each keeps serving the last good state.
fn healthy<T>(result: &Result<T, SourceError>, dir: &Path) -> bool {
    match result {
        Ok(_) => true,
        Err(e) => !e
            .errors()
            .iter()
            .any(|e| matches!(e, SourceError::Io { path, .. } if path == dir)),
    }
}

/// What the watch's thread hands over, with where to say whether a change was committed.
struct Reported {
    event: SourceEvent,
    reply: Option<SyncSender<bool>>,
}

/// A directory of resource files, loaded and then watched (see [`crate::watch_directory`]):
/// each change hands out only the names it changed.
pub struct DirectorySource {
    // (Dropped before the watch, whose thread may be waiting on them.)
    events: mpsc::Receiver<Reported>,
    reply: Option<SyncSender<bool>>,
    sender: Option<mpsc::Sender<Reported>>,
    first: Option<DirectoryCache>,
    watch: Option<DirectoryWatch>,
    descriptors: Descriptors,
    dir: PathBuf,
    limits: Limits,
    incremental: bool,
}

impl DirectorySource {
    /// The directory `dir`, its files read with `limits`.
    pub fn new(descriptors: Descriptors, dir: PathBuf, limits: Limits) -> DirectorySource {
        let (sender, events) = mpsc::channel(1);
        DirectorySource {
            events,
            reply: None,
            sender: Some(sender),
            first: None,
            watch: None,
            descriptors,
            dir,
            limits,
            incremental: true,
        }
    }

    /// Whether a change re-reads only the files that changed and commits only their names (on
    /// by default); off, every change reads every file and replaces everything.
    pub fn incremental(mut self, on: bool) -> DirectorySource {
        self.incremental = on;
        self
    }

    fn start_watch(&mut self) -> Result<(), SourceError> {
        let Some(sender) = self.sender.take() else {
            return Ok(());
        };
        let options = WatchOptions::default()
            .limits(self.limits)
            .incremental(self.incremental)
            .cache_from_consumer(self.incremental);
        let dir = self.dir.clone();
        let was_healthy = AtomicBool::new(true);
        let watch = watch_directory_updates(
            self.descriptors.clone(),
            self.dir.clone(),
            options,
            move |result: Reloaded<'_>| {
                let now = healthy(&result, &dir);
                if was_healthy.swap(now, Ordering::Relaxed) != now {
                    let reason = match &result {
                        Err(e) => e.to_string(),
                        Ok(_) => String::new(),
                    };
                    let event = SourceEvent::Health {
                        healthy: now,
                        reason,
                    };
                    let _ = sender.blocking_send(Reported { event, reply: None });
                }
                let event = match result.map_err(|e| rejection(&e)).and_then(change_set) {
                    Ok(change) => SourceEvent::Change(change),
                    Err(rejected) => SourceEvent::Rejected(rejected),
                };
                let (reply, committed) = sync_channel(1);
                let wants_reply = matches!(event, SourceEvent::Change(_));
                let reported = Reported {
                    event,
                    reply: wants_reply.then_some(reply),
                };
                if sender.blocking_send(reported).is_err() || !wants_reply {
                    return false;
                }
                committed.recv().unwrap_or(false)
            },
        )?;
        self.watch = Some(watch);
        Ok(())
    }
}

/// What a reload of the cache hands out: everything when the consumer is not synced yet, else
/// the names changed since its last commit.
fn change_set(cache: &DirectoryCache) -> Result<ChangeSet, Rejection> {
    if !cache.is_synced() {
        return Ok(ChangeSet::all(resource_inputs(cache.resources())?));
    }
    let changes = cache.changes();
    Ok(ChangeSet::names(
        changes.names,
        resource_inputs(changes.resources)?,
        cache.resource_count(),
    ))
}

impl Source for DirectorySource {
    fn describe(&self) -> String {
        format!("directory {}", self.dir.display())
    }

    fn kind(&self) -> &'static str {
        "directory"
    }

    /// Starts the watch first, so that no change falls between the load and the watch.
    async fn load(&mut self) -> Result<ChangeSet, Rejection> {
        self.start_watch().map_err(|e| rejection(&e))?;
        if self.incremental {
            // Parsed once: the watch reloads from this load what changes after its start.
            let mut cache = DirectoryCache::default();
            cache
                .rescan(&self.descriptors, &self.dir, &self.limits)
                .map_err(|e| rejection(&e))?;
            let change = ChangeSet::all(resource_inputs(cache.resources())?);
            self.first = Some(cache);
            Ok(change)
        } else {
            let resources = crate::load_directory_with(&self.descriptors, &self.dir, &self.limits)
                .map_err(|e| rejection(&e))?;
            Ok(ChangeSet::all(resource_inputs(resources)?))
        }
    }

    async fn next(&mut self) -> Option<SourceEvent> {
        let reported = self.events.recv().await?;
        self.reply = reported.reply;
        Some(reported.event)
    }

    fn committed(&mut self, ok: bool) {
        if let Some(mut cache) = self.first.take() {
            if ok {
                cache.committed();
                if let Some(watch) = &self.watch {
                    watch.start_from(cache);
                }
            }
        }
        if let Some(reply) = self.reply.take() {
            let _ = reply.send(ok);
        }
    }
}
