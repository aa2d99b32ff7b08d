use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use notify::{Event, RecommendedWatcher, RecursiveMode, Watcher};

use crate::dir::{DirectoryCache, Limits};
use crate::{Descriptors, ParsedResource, SourceError};

mod burst;

use burst::{is_relevant, Burst};

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
