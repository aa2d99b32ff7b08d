use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use notify::event::{AccessKind, AccessMode, MetadataKind, ModifyKind};
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};

use crate::dir::{DirectoryCache, Limits};
use crate::{Descriptors, ParsedResource, SourceError};

/// Quiet time that ends a burst of changes (an editor's save, a `cp -r`, a ConfigMap swap).
pub const DEBOUNCE: Duration = Duration::from_millis(100);
/// A directory that never stays quiet still gets reloaded this often (unless a file written in
/// place is still open: see [`OPEN_WRITE_BOUND`]).
pub const MAX_DELAY: Duration = Duration::from_secs(2);
/// The longest a file written in place is held at its last good content while its writer keeps
/// it open (the rest of the directory is applied meanwhile): a writer that keeps a file open
/// longer has what it wrote so far applied then (and the rest when it closes the file or writes
/// again). On Linux the watcher is told when a writer closes a file
/// it wrote (`IN_CLOSE_WRITE`); elsewhere, in-place writes wait for [`DEBOUNCE`] of quiet only.
pub const OPEN_WRITE_BOUND: Duration = Duration::from_secs(5);

/// Whether the platform's watcher reports a writer closing a file it wrote.
const CLOSE_REPORTED: bool = cfg!(target_os = "linux");

enum Message {
    Event(notify::Result<Event>),
    /// The consumer's cache, synced with what it committed ([`DirectoryWatch::start_from`]).
    Cache(Box<DirectoryCache>),
    Stop,
}

/// Keeps a directory watched; dropping it stops the watcher and its reload thread.
pub struct DirectoryWatch {
    dir: PathBuf,
    stop: mpsc::Sender<Message>,
    thread: Option<JoinHandle<()>>,
}

impl DirectoryWatch {
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Hands the reload thread the consumer's own load of the directory, for a watch started
    /// with [`WatchOptions::cache_from_consumer`]: the cache the consumer committed (marked with
    /// [`DirectoryCache::committed`]). Changes seen since the watch started are reloaded from
    /// it, and the first reload commits only the names they changed. Ignored by other watches.
    pub fn start_from(&self, cache: DirectoryCache) {
        let _ = self.stop.send(Message::Cache(Box::new(cache)));
    }
}

impl std::fmt::Debug for DirectoryWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectoryWatch")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl Drop for DirectoryWatch {
    fn drop(&mut self) {
        // The reload thread owns the watcher: it drops it when it stops.
        let _ = self.stop.send(Message::Stop);
        if let Some(thread) = self.thread.take() {
            // Dropped from inside on_load: joining our own thread would deadlock; it exits
            // once the callback returns and it sees Stop.
            if thread.thread().id() != thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}

/// Watches `dir` recursively and, after each change, reloads the whole directory and calls
/// `on_load` with the new full set or the error. The initial state is the caller's
/// `load_directory`; only changes are reported (call it after starting the watch to not miss a
/// change made in between).
///
/// A change that is complete when it is seen is applied at once: a file renamed into place
/// (written elsewhere first, as `mv`, editors that save by renaming, and deploy tools do) and
/// Kubernetes' ConfigMap update (files written under a `..`-prefixed directory, then the `..data`
/// symlink swapped by a rename). A file written in place may be seen half-written, so such a
/// change waits until its writer closed the file and the directory was quiet for [`DEBOUNCE`]
/// (at most [`MAX_DELAY`] in all). While a writer keeps a file open (at most
/// [`OPEN_WRITE_BOUND`]), that file holds back only itself: the rest of the directory is applied
/// as it would be without it, the file at its last good content (left out if it is new; with
/// [`WatchOptions::incremental`] off there is no last content to hold, and the whole change
/// waits for it). A FIFO, socket or device with a resource file's name holds nothing back.
/// A removal may be the first of many (`rm -rf`, `rsync --delete`, a branch switch) or be
/// followed by the file created anew (`git checkout -- file` unlinks the file and writes a new
/// one): it waits for [`DEBOUNCE`] of quiet too, so that a burst of removals, and a removal
/// with the re-creation that follows it, is one change.
///
/// The directory itself is watched, not its files, so renames and symlink swaps are seen.
/// `on_load` runs on a dedicated thread.
pub fn watch_directory(
    descriptors: Descriptors,
    dir: PathBuf,
    on_load: impl Fn(Result<Vec<ParsedResource>, SourceError>) + Send + 'static,
) -> Result<DirectoryWatch, SourceError> {
    watch_directory_with(descriptors, dir, WatchOptions::default(), on_load)
}

/// How a directory is watched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct WatchOptions {
    /// The quiet time in-place writes wait for ([`DEBOUNCE`]).
    pub debounce: Duration,
    /// What each file may take.
    pub limits: Limits,
    /// Reloads re-read and re-parse only the files that changed ([`DirectoryCache`]); off, every
    /// reload reads and parses every file.
    pub incremental: bool,
    /// The consumer loads the directory into a [`DirectoryCache`] itself and hands it over
    /// ([`DirectoryWatch::start_from`]); until then the reload thread keeps the events it sees.
    /// Off, the reload thread parses the directory again at start, and its first reload replaces
    /// the consumer's state whole (it does not know what the consumer loaded).
    pub cache_from_consumer: bool,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            debounce: DEBOUNCE,
            limits: Limits::default(),
            incremental: true,
            cache_from_consumer: false,
        }
    }
}

impl WatchOptions {
    pub fn debounce(mut self, debounce: Duration) -> Self {
        self.debounce = debounce;
        self
    }

    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets [`WatchOptions::incremental`].
    pub fn incremental(mut self, on: bool) -> Self {
        self.incremental = on;
        self
    }

    /// Sets [`WatchOptions::cache_from_consumer`] (only for incremental watches).
    pub fn cache_from_consumer(mut self, on: bool) -> Self {
        self.cache_from_consumer = on;
        self
    }
}

/// [`watch_directory`] with other [`WatchOptions`].
pub fn watch_directory_with(
    descriptors: Descriptors,
    dir: PathBuf,
    options: WatchOptions,
    on_load: impl Fn(Result<Vec<ParsedResource>, SourceError>) + Send + 'static,
) -> Result<DirectoryWatch, SourceError> {
    watch_directory_updates(descriptors, dir, options, move |result| {
        on_load(result.map(DirectoryCache::resources));
        true
    })
}

/// What a reload hands over: the cache, up to date with the directory and without errors (it
/// says what changed since the last commit, [`DirectoryCache::changes`], or holds everything,
/// [`DirectoryCache::resources`], when the consumer is not synced yet), or the directory's errors.
pub type Reloaded<'a> = Result<&'a DirectoryCache, SourceError>;

/// [`watch_directory_with`] for a consumer that applies only what changed: `on_update` gets the
/// cache after each reload and returns whether it committed it (then the next reload's changes
/// start from it; otherwise they include these too). The first reload is not synced
/// ([`DirectoryCache::is_synced`]): the consumer's state is replaced whole.
///
/// A reload looks only at the paths the events of a burst name ([`DirectoryCache::reload_paths`])
/// and lists the whole tree ([`DirectoryCache::rescan`]) after events were missed (a queue
/// overflow, an error, an event without paths) and when the directory itself was replaced.
pub fn watch_directory_updates(
    descriptors: Descriptors,
    dir: PathBuf,
    options: WatchOptions,
    on_update: impl for<'a> Fn(Reloaded<'a>) -> bool + Send + 'static,
) -> Result<DirectoryWatch, SourceError> {
    let (tx, rx) = mpsc::channel();
    let events = tx.clone();
    // A directory that does not exist is said as such, once, not as notify's "No path was found."
    let watch_error = |source: notify::Error| match source.kind {
        notify::ErrorKind::PathNotFound => SourceError::Io {
            path: dir.clone(),
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "the directory does not exist",
            ),
        },
        _ => SourceError::Watch {
            path: dir.clone(),
            source,
        },
    };
    let mut watcher = notify::recommended_watcher(move |event| {
        let _ = events.send(Message::Event(event));
    })
    .map_err(watch_error)?;
    let identity = identity(&dir);
    watcher
        .watch(&dir, RecursiveMode::Recursive)
        .map_err(watch_error)?;

    let thread_dir = dir.clone();
    let mut watched = Watched {
        watcher,
        identity,
        gone: false,
        lost: false,
    };
    let thread = thread::Builder::new()
        .name("xdsd-source-watch".into())
        .spawn(move || {
            reload_loop(
                &rx,
                &mut watched,
                &descriptors,
                &thread_dir,
                options,
                &on_update,
            )
        })
        .map_err(|source| SourceError::Io {
            path: dir.clone(),
            source,
        })?;
    tracing::info!(dir = %dir.display(), "watching resource directory");
    Ok(DirectoryWatch {
        dir,
        stop: tx,
        thread: Some(thread),
    })
}

/// How often the watched directory is checked to still be the one watched: a directory deleted
/// and created again, or replaced by a rename, is a new directory that the old watch does not
/// see.
pub const RECHECK: Duration = Duration::from_secs(1);

/// The watch of the directory, owned by the reload thread so that it can watch again.
struct Watched {
    watcher: RecommendedWatcher,
    /// What the directory was when it was watched (`None`: it did not exist).
    identity: Option<(u64, u64)>,
    /// The directory's loss was reported.
    gone: bool,
    /// The watched directory itself was removed or renamed away: watch `dir` again even if it
    /// looks the same (a directory created again may reuse the inode).
    lost: bool,
}

/// The directory's device and inode (existence elsewhere than on Unix).
fn identity(dir: &Path) -> Option<(u64, u64)> {
    let meta = std::fs::metadata(dir).ok()?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        Some((meta.dev(), meta.ino()))
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        Some((0, 0))
    }
}

impl Watched {
    /// Checks that the watched directory is the one at `dir`; when it was replaced, watches the
    /// new one. True when the directory must be loaded again (it came back).
    fn recheck(&mut self, dir: &Path, on_load: &dyn Fn(Reloaded<'_>) -> bool) -> bool {
        let now = identity(dir);
        // Nothing to do: the same directory, or still none (its loss already reported).
        let unchanged = now == self.identity && !self.lost;
        if unchanged && (now.is_some() || self.gone) {
            return false;
        }
        self.lost = false;
        match now {
            None => {
                if !self.gone {
                    self.gone = true;
                    tracing::error!(
                        dir = %dir.display(),
                        "the resource directory is gone: keeping the last good resources, and watching for it to come back"
                    );
                    let _ = on_load(Err(SourceError::Io {
                        path: dir.to_path_buf(),
                        source: std::io::Error::new(
                            std::io::ErrorKind::NotFound,
                            "the resource directory is gone",
                        ),
                    }));
                }
                self.identity = None;
                false
            }
            Some(id) => {
                let _ = self.watcher.unwatch(dir);
                match self.watcher.watch(dir, RecursiveMode::Recursive) {
                    Ok(()) => {
                        self.identity = Some(id);
                        self.gone = false;
                        tracing::warn!(
                            dir = %dir.display(),
                            "the resource directory was replaced or came back: watching the new one and reloading"
                        );
                        true
                    }
                    Err(error) => {
                        tracing::error!(dir = %dir.display(), "cannot watch the resource directory again, retrying: {error}");
                        false
                    }
                }
            }
        }
    }
}

fn reload_loop(
    rx: &mpsc::Receiver<Message>,
    watched: &mut Watched,
    descriptors: &Descriptors,
    dir: &Path,
    options: WatchOptions,
    on_load: &dyn Fn(Reloaded<'_>) -> bool,
) {
    let debounce = options.debounce;
    // What is parsed of each file, so that a change re-reads and re-parses only the files that
    // changed. Filled now, while the program makes its own first load, so that the first change
    // is already incremental.
    let mut cache = DirectoryCache::default();
    // A burst carried over: events that came while the directory was being read, and the files
    // held open by their writers (held at their last good content).
    let mut carried: Option<Burst> = None;
    // A file held open is held at what the cache last read of it; without a cache kept between
    // reloads (not incremental) there is nothing to hold it at: the reload waits for it.
    let holding = options.incremental;
    if options.incremental && options.cache_from_consumer {
        // The consumer's own load, once it committed it: the events seen meanwhile are the
        // first burst (the files they name may have changed after the consumer read them).
        let mut meanwhile = Burst::default();
        let mut seen = false;
        loop {
            match rx.recv() {
                Ok(Message::Cache(handed)) => {
                    cache = *handed;
                    break;
                }
                Ok(Message::Event(event)) if is_relevant(&event) => {
                    meanwhile.add(&event, dir);
                    seen = true;
                }
                Ok(Message::Event(_)) => {}
                Ok(Message::Stop) | Err(_) => return,
            }
        }
        if seen {
            carried = Some(meanwhile);
        }
    } else if options.incremental {
        let _ = cache.rescan(descriptors, dir, &options.limits);
    }
    loop {
        let mut burst = match carried.take() {
            Some(carried) => carried,
            None => {
                // Wait for the first relevant event of a burst, checking now and then that the
                // directory watched is still the one at `dir`.
                let mut burst = Burst::default();
                loop {
                    match rx.recv_timeout(RECHECK) {
                        Ok(Message::Event(event)) if is_relevant(&event) => {
                            burst.add(&event, dir);
                            break;
                        }
                        // A cache handed over late or twice: the thread's own is as recent.
                        Ok(Message::Event(_) | Message::Cache(_)) => continue,
                        Err(RecvTimeoutError::Timeout) => {
                            if watched.recheck(dir, on_load) {
                                burst.unknown = true;
                                burst.rescan = true;
                                burst.mark_started();
                                break;
                            }
                        }
                        Ok(Message::Stop) | Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
                burst
            }
        };
        // The burst ends when what it changed, besides the files held open, is whole (at once)
        // or quiet (after DEBOUNCE without an event), or at the latest MAX_DELAY after it
        // started. A file held open waits for its writer to close it, or for OPEN_WRITE_BOUND;
        // meanwhile the rest of the directory is applied without it (`holding`).
        let mut quiet_until = Instant::now() + debounce;
        loop {
            burst.expire(Instant::now());
            let ready = burst.pending() && (holding || !burst.open());
            let next = if ready && burst.complete() {
                // Events already queued belong to the same burst.
                match rx.try_recv() {
                    Ok(message) => Ok(message),
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => return,
                }
            } else {
                let mut until = if ready { Some(quiet_until) } else { None };
                if let Some(bound) = burst.next_bound() {
                    until = Some(until.map_or(bound, |u| u.min(bound)));
                }
                let message = match until {
                    Some(until) => rx.recv_timeout(until.saturating_duration_since(Instant::now())),
                    // Nothing to apply, nothing held: a burst that came to nothing.
                    None if !burst.pending() => break,
                    None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                };
                match message {
                    Ok(message) => Ok(message),
                    Err(RecvTimeoutError::Timeout) => {
                        burst.expire(Instant::now());
                        let ready = burst.pending() && (holding || !burst.open());
                        if ready && Instant::now() >= quiet_until {
                            break;
                        }
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            };
            match next {
                Ok(Message::Event(event)) if is_relevant(&event) => {
                    burst.add(&event, dir);
                    let overdue = burst.started.is_some_and(|s| s.elapsed() >= MAX_DELAY);
                    if overdue && (holding || !burst.open()) {
                        break;
                    }
                    quiet_until = Instant::now() + debounce;
                }
                Ok(Message::Event(_) | Message::Cache(_)) => {}
                Ok(Message::Stop) => return,
                Err(()) => {}
            }
        }
        if !burst.pending() {
            carried = burst.open().then(|| burst.holding_on());
            continue;
        }
        if burst.root_gone {
            watched.lost = true;
            // Watch the directory now at `dir` (if any) before reading it: none of its changes
            // are missed.
            watched.recheck(dir, on_load);
        }
        // Events name paths under the absolute path of the directory; the cache, as a full
        // load, under `dir` as given.
        let absolute = std::env::current_dir()
            .map(|cwd| cwd.join(dir))
            .unwrap_or_else(|_| dir.to_path_buf());
        let as_given = |p: &PathBuf| match p.strip_prefix(&absolute) {
            Ok(relative) if dir.is_relative() => dir.join(relative),
            _ => p.clone(),
        };
        // The files held open keep what the cache last read of them; the rest is read.
        let held = burst.open_paths();
        cache.hold(held.iter().map(as_given).collect());
        burst.paths.retain(|p| !held.contains(p));
        let result = if !options.incremental {
            cache = DirectoryCache::default();
            cache.rescan(descriptors, dir, &options.limits)
        } else if burst.rescan {
            cache.rescan(descriptors, dir, &options.limits)
        } else {
            let paths: Vec<PathBuf> = burst.paths.iter().map(as_given).collect();
            cache.reload_paths(descriptors, dir, &options.limits, &paths)
        };
        cache.hold(Default::default());
        // A directory is read file by file: one that changed meanwhile may have been read half
        // old, half new (a route from after the change, the cluster it needs from before). Such
        // a read is not applied; the files changed meanwhile are read again (within MAX_DELAY
        // of the burst's start: a directory that never stops changing is still loaded). Changes
        // to other files than those read are taken by the next reload, which starts at once:
        // what was read is as it was when the read started. The files held open are carried.
        let mut during = burst.holding_on();
        let mut changed = false;
        loop {
            match rx.try_recv() {
                Ok(Message::Event(event)) if is_relevant(&event) => {
                    during.add(&event, dir);
                    changed = true;
                }
                Ok(Message::Event(_) | Message::Cache(_)) => {}
                Ok(Message::Stop) | Err(mpsc::TryRecvError::Disconnected) => return,
                Err(mpsc::TryRecvError::Empty) => break,
            }
        }
        if changed
            && burst.overlaps(&during)
            && burst.started.is_some_and(|s| s.elapsed() < MAX_DELAY)
        {
            tracing::debug!(dir = %dir.display(), "the directory changed while it was read: reading it again");
            during.started = burst.started;
            carried = Some(during);
            continue;
        }
        if changed || during.open() {
            carried = Some(during);
        }
        // The consumer logs the outcome (committed or rejected) once; these are for debugging.
        match &result {
            Ok(()) => tracing::debug!(
                dir = %dir.display(),
                resources = cache.resource_count(),
                files = cache.len(),
                read = cache.last_load().0,
                parsed = cache.last_load().1,
                atomic = burst.complete(),
                "reloaded resource directory"
            ),
            Err(error) => tracing::debug!(
                dir = %dir.display(),
                "resource directory has errors: {error}"
            ),
        }
        match result {
            Ok(()) => {
                if on_load(Ok(&cache)) {
                    cache.committed();
                }
            }
            Err(error) => {
                let _ = on_load(Err(error));
            }
        }
    }
}

/// The most paths a burst keeps: past it, the whole tree is listed.
const MAX_BURST_PATHS: usize = 262_144;

/// What a burst of events changed: whether it is complete (applied at once) or may still be
/// written (applied once its files are closed and the directory is quiet).
#[derive(Debug, Default)]
struct Burst {
    /// Files written in place and not (yet) renamed elsewhere: possibly half-written.
    writing: std::collections::HashMap<PathBuf, Writing>,
    /// Resource paths removed (or renamed away): more removals, or the file created anew, may
    /// follow.
    removed: bool,
    /// A rename into place, or another change that is whole when seen.
    whole: bool,
    /// Something that cannot be told complete (a rescan, an unknown event).
    unknown: bool,
    /// The watched directory itself was removed or renamed away.
    root_gone: bool,
    /// The paths the events name (at most [`MAX_BURST_PATHS`]).
    paths: std::collections::HashSet<PathBuf>,
    /// Events were missed, or cannot be told by their paths: the whole tree is listed.
    rescan: bool,
    /// The renames seen renamed away from the directory (their trackers): their arrival, seen
    /// within it, is followed by the rename's own event, which the burst waits for.
    renamed_from: std::collections::HashSet<usize>,
    /// When the burst first had something to apply besides the files held open.
    started: Option<Instant>,
    /// How many of `writing` are [`Writing::Open`] (each of their paths is in `paths`, unless
    /// the burst lists the whole tree), and a time no later than the earliest of them opened:
    /// so that what a burst waits for is told without a walk of its files at every event.
    open_count: usize,
    earliest: Option<Instant>,
}

/// Where a file written in place is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writing {
    /// Its writer may still have it open (written, not closed since), since then: held at its
    /// last good content until closed, or for [`OPEN_WRITE_BOUND`].
    Open(Instant),
    /// Open past [`OPEN_WRITE_BOUND`]: read as it is (and again when its writer closes it).
    Overdue,
    /// Closed by its writer: whole once the directory is quiet.
    Closed,
}

impl Burst {
    /// Sets (or, with `None`, forgets) where the file at `path` is, keeping the counts.
    fn set_writing(&mut self, path: &Path, new: Option<Writing>) {
        let old = match new {
            Some(writing) => self.writing.insert(path.to_path_buf(), writing),
            None => self.writing.remove(path),
        };
        if matches!(old, Some(Writing::Open(_))) {
            self.open_count -= 1;
        }
        if let Some(Writing::Open(since)) = new {
            self.open_count += 1;
            self.earliest = Some(self.earliest.map_or(since, |e| e.min(since)));
        }
    }

    fn add(&mut self, event: &notify::Result<Event>, dir: &Path) {
        self.add_event(event, dir);
        self.mark_started();
    }

    /// Starts the burst's clock once it has something to apply.
    fn mark_started(&mut self) {
        if self.started.is_none() && self.pending() {
            self.started = Some(Instant::now());
        }
    }

    fn add_event(&mut self, event: &notify::Result<Event>, dir: &Path) {
        use notify::event::{CreateKind, RemoveKind, RenameMode};
        let Ok(event) = event else {
            self.unknown = true;
            self.rescan = true;
            return;
        };
        if event.paths.is_empty() {
            self.rescan = true;
        } else if !self.rescan {
            self.paths.extend(event.paths.iter().cloned());
            if self.paths.len() > MAX_BURST_PATHS {
                self.rescan = true;
                self.paths = Default::default();
            }
        }
        let root = event.paths.first().is_some_and(|p| p == dir);
        if root
            && matches!(
                event.kind,
                EventKind::Remove(_)
                    | EventKind::Modify(ModifyKind::Name(RenameMode::From | RenameMode::Both))
            )
        {
            self.root_gone = true;
            self.rescan = true;
        }
        if event.need_rescan() {
            self.unknown = true;
            self.rescan = true;
            return;
        }
        match event.kind {
            // `rename(from, to)`: what was written at `from` is now whole at `to`.
            EventKind::Modify(ModifyKind::Name(RenameMode::Both)) => {
                if let Some(from) = event.paths.first() {
                    self.set_writing(from, None);
                }
                if let Some(tracker) = event.attrs.tracker() {
                    self.renamed_from.remove(&tracker);
                }
                self.whole = true;
            }
            // Renamed away: not whole on its own (the burst waits for quiet); its `Both` event,
            // when it was renamed within the directory, follows and makes the burst whole.
            EventKind::Modify(ModifyKind::Name(RenameMode::From)) => {
                for path in &event.paths {
                    self.set_writing(path, None);
                }
                if let Some(tracker) = event.attrs.tracker() {
                    self.renamed_from.insert(tracker);
                }
            }
            // Renamed into place. Within the directory (its `From` seen: `sed -i`, an editor's
            // temporary file) the rename's `Both` event follows at once: the burst waits for it,
            // or it would be a reload of its own that changes nothing. From elsewhere, whole.
            EventKind::Modify(ModifyKind::Name(RenameMode::To)) => {
                let within = event
                    .attrs
                    .tracker()
                    .is_some_and(|t| self.renamed_from.contains(&t));
                if !within {
                    self.whole = true;
                }
            }
            EventKind::Modify(ModifyKind::Name(_)) => self.whole = true,
            EventKind::Remove(kind @ (RemoveKind::File | RemoveKind::Folder | RemoveKind::Any)) => {
                for path in &event.paths {
                    if kind == RemoveKind::File {
                        self.set_writing(path, None);
                    } else {
                        let under: Vec<PathBuf> = self
                            .writing
                            .keys()
                            .filter(|p| p.starts_with(path))
                            .cloned()
                            .collect();
                        for p in under {
                            self.set_writing(&p, None);
                        }
                    }
                }
                // Kubernetes removes its old staging directory after the swap: nothing visible.
                if event.paths.iter().all(|p| is_staging(p)) {
                    self.whole = true;
                } else {
                    self.removed = true;
                }
            }
            // A directory appearing is whole (the files written into it come as their own
            // events), except Kubernetes' staging directory: nothing is visible until its swap.
            EventKind::Create(CreateKind::Folder) => {
                if !event.paths.iter().all(|p| is_staging(p)) {
                    self.whole = true;
                }
            }
            // Written and closed: whole once the directory is quiet.
            EventKind::Access(AccessKind::Close(AccessMode::Write)) => {
                for path in &event.paths {
                    if may_be_written(path) {
                        self.set_writing(path, Some(Writing::Closed));
                    }
                }
            }
            EventKind::Create(_) | EventKind::Modify(ModifyKind::Data(_) | ModifyKind::Any) => {
                for path in &event.paths {
                    if !may_be_written(path) {
                        continue;
                    }
                    // A symbolic link is whole when it appears: no writer closes it. What is not
                    // a regular file (a FIFO, a socket, a device) holds nothing to load and is
                    // never closed by a writer of a file: whole too.
                    let created = matches!(event.kind, EventKind::Create(_));
                    let link = created
                        && std::fs::symlink_metadata(path)
                            .is_ok_and(|m| m.file_type().is_symlink());
                    let special = std::fs::metadata(path).is_ok_and(|m| !m.is_file());
                    if link || special {
                        self.whole = true;
                        continue;
                    }
                    // Open (again) unless it already is, or is read as it is (overdue).
                    let closed = self.writing.get(path).is_none_or(|w| *w == Writing::Closed);
                    if closed {
                        let writing = if CLOSE_REPORTED {
                            Writing::Open(Instant::now())
                        } else {
                            Writing::Closed
                        };
                        self.set_writing(path, Some(writing));
                    }
                }
            }
            EventKind::Modify(ModifyKind::Metadata(_)) => {}
            _ => self.unknown = true,
        }
    }

    /// Whole when seen, but for the files held open: applied without waiting for quiet.
    fn complete(&self) -> bool {
        self.whole
            && self.renamed_from.is_empty()
            && self.writing.len() == self.open_count
            && !self.removed
            && !self.unknown
    }

    /// Something to read besides the files held open.
    fn pending(&self) -> bool {
        self.rescan || self.unknown || self.paths.len() > self.open_count
    }

    /// A file written in place may still be open for writing.
    fn open(&self) -> bool {
        self.open_count > 0
    }

    /// The files held open.
    fn open_paths(&self) -> std::collections::HashSet<PathBuf> {
        self.writing
            .iter()
            .filter(|(_, w)| matches!(w, Writing::Open(_)))
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// When the first file held open reaches [`OPEN_WRITE_BOUND`] (or a little earlier).
    fn next_bound(&self) -> Option<Instant> {
        if self.open_count == 0 {
            return None;
        }
        self.earliest.map(|e| e + OPEN_WRITE_BOUND)
    }

    /// The files held open past [`OPEN_WRITE_BOUND`] at `now` are read as they are. Looks at the
    /// files only when the earliest may have reached it.
    fn expire(&mut self, now: Instant) {
        if self.next_bound().is_some_and(|bound| now >= bound) {
            let mut earliest: Option<Instant> = None;
            let mut expired = 0;
            for writing in self.writing.values_mut() {
                if let Writing::Open(since) = *writing {
                    if now >= since + OPEN_WRITE_BOUND {
                        *writing = Writing::Overdue;
                        expired += 1;
                    } else {
                        earliest = Some(earliest.map_or(since, |e| e.min(since)));
                    }
                }
            }
            self.open_count -= expired;
            self.earliest = earliest;
        }
        self.mark_started();
    }

    /// The next burst: the files this one held open, still held.
    fn holding_on(&self) -> Burst {
        let mut next = Burst::default();
        for (path, writing) in &self.writing {
            if matches!(writing, Writing::Open(_)) {
                next.set_writing(path, Some(*writing));
                next.paths.insert(path.clone());
            }
        }
        next
    }

    /// Whether `later` may have changed what this burst read: a path of one is (under) a path
    /// of the other, or either lists the whole tree.
    fn overlaps(&self, later: &Burst) -> bool {
        let within = |a: &Burst, b: &Burst| {
            a.paths
                .iter()
                .any(|p| p.ancestors().any(|q| b.paths.contains(q)))
        };
        self.rescan || later.rescan || within(self, later) || within(later, self)
    }
}

/// Whether a file written at `path` may be loaded as it is written: a resource file's name,
/// not under Kubernetes' staging directory. Other files (a temporary file renamed into place
/// later, a log another program keeps open in the directory) do not hold a change back.
fn may_be_written(path: &Path) -> bool {
    let loadable_name = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|name| !crate::dir::is_ignored_name(name));
    loadable_name && crate::parse::Format::of(path).is_some() && !is_staging(path)
}

/// Files Kubernetes writes under a `..<timestamp>` directory before it swaps the `..data`
/// symlink to it (its atomic writer): not seen by xdsd until the swap, which is a rename.
fn is_staging(path: &Path) -> bool {
    path.components().any(|c| {
        c.as_os_str()
            .to_str()
            .is_some_and(|name| name.starts_with("..") && name.len() > 2)
    })
}

fn is_relevant(event: &notify::Result<Event>) -> bool {
    let event = match event {
        Ok(event) => event,
        Err(error) => {
            // Missed events (e.g. a queue overflow) are only safe to handle by reloading.
            tracing::warn!("watch error, reloading: {error}");
            return true;
        }
    };
    if event.need_rescan() {
        return true;
    }
    match event.kind {
        // Our own reads show up as opens; only a close after writing matters.
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => {}
        EventKind::Access(_) => return false,
        EventKind::Modify(ModifyKind::Metadata(MetadataKind::AccessTime)) => return false,
        _ => {}
    }
    // A file that can never be a resource file (a log, notes) written in place: nothing to
    // load, and a log kept in the directory would otherwise reload it on every line. Its
    // creation, renames and removal still count (a temporary file renamed into place).
    if matches!(
        event.kind,
        EventKind::Modify(ModifyKind::Data(_))
            | EventKind::Access(AccessKind::Close(AccessMode::Write))
    ) && !event.paths.is_empty()
        && event
            .paths
            .iter()
            .all(|path| crate::parse::Format::of(path).is_none())
    {
        return false;
    }
    // Editor swap and backup files change constantly while editing and are never loaded.
    // Hidden paths do count: Kubernetes updates a ConfigMap by swapping `..data`.
    event.paths.is_empty()
        || event.paths.iter().any(|path| {
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            !is_editor_scratch(name)
        })
}

fn is_editor_scratch(name: &str) -> bool {
    name.ends_with('~')
        || name.ends_with(".swp")
        || name.ends_with(".swx")
        || (name.starts_with('#') && name.ends_with('#'))
}

#[cfg(test)]
mod tests {
    use notify::event::{ModifyKind, RenameMode};
    use notify::{Event, EventKind};

    use super::Burst;

    fn rename(mode: RenameMode, tracker: usize, paths: &[&str]) -> notify::Result<Event> {
        let mut event = Event::new(EventKind::Modify(ModifyKind::Name(mode))).set_tracker(tracker);
        for path in paths {
            event = event.add_path(path.into());
        }
        Ok(event)
    }

    /// A rename within the directory comes as `From`, `To`, then `Both`: the burst is whole
    /// once `Both` came, not at `To` (a reload between them would be followed by a second one
    /// for `Both`, which changes nothing).
    #[test]
    fn a_rename_within_the_directory_is_whole_at_its_both_event() {
        let dir = std::path::Path::new("/d");
        let mut burst = Burst::default();
        burst.add(&rename(RenameMode::From, 7, &["/d/sedAb12"]), dir);
        assert!(!burst.complete());
        burst.add(&rename(RenameMode::To, 7, &["/d/a.yaml"]), dir);
        assert!(!burst.complete(), "whole before the rename's Both event");
        burst.add(
            &rename(RenameMode::Both, 7, &["/d/sedAb12", "/d/a.yaml"]),
            dir,
        );
        assert!(burst.complete());
    }

    fn written(kind: EventKind, path: &str) -> notify::Result<Event> {
        Ok(Event::new(kind).add_path(path.into()))
    }

    /// A file its writer holds open is held: alone it is nothing to apply, beside a whole
    /// change it does not keep that change from being applied at once; once closed, or past
    /// [`super::OPEN_WRITE_BOUND`], it is to be read.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_file_held_open_holds_back_only_itself() {
        use notify::event::{AccessKind, AccessMode, DataChange};
        let dir = std::path::Path::new("/d");
        let modify = EventKind::Modify(ModifyKind::Data(DataChange::Any));
        let mut burst = Burst::default();
        burst.add(&written(modify, "/d/c2.yaml"), dir);
        assert!(burst.open() && !burst.pending(), "nothing to apply yet");
        burst.add(&rename(RenameMode::To, 3, &["/d/c1.yaml"]), dir);
        assert!(
            burst.pending() && burst.complete(),
            "the rename is applied at once"
        );
        assert_eq!(burst.open_paths().len(), 1);

        let mut held = burst.holding_on();
        assert!(held.open() && !held.pending());
        let close = EventKind::Access(AccessKind::Close(AccessMode::Write));
        held.add(&written(close, "/d/c2.yaml"), dir);
        assert!(!held.open() && held.pending(), "closed: to be read");

        let mut kept = burst.holding_on();
        let bound = kept.next_bound().expect("a bound");
        kept.expire(bound);
        assert!(
            !kept.open() && kept.pending(),
            "past the bound: read as it is"
        );
        kept.add(&written(modify, "/d/c2.yaml"), dir);
        assert!(
            !kept.open(),
            "written again past the bound: still read as it is"
        );
    }

    /// A file renamed in from elsewhere has no `From` in the directory: whole at `To`.
    #[test]
    fn a_rename_from_elsewhere_is_whole_at_its_to_event() {
        let dir = std::path::Path::new("/d");
        let mut burst = Burst::default();
        burst.add(&rename(RenameMode::To, 9, &["/d/a.yaml"]), dir);
        assert!(burst.complete());
    }
}
