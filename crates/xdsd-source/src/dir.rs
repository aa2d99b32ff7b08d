use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::parse::{parse_file, Format};
use crate::{Descriptors, ParsedResource, SourceError};

/// Loads and validates every `*.yaml`, `*.yml` and `*.json` file under `dir`, recursively, in
/// sorted path order. Hidden entries (`.name`) and editor leftovers are skipped; so are files
/// with other extensions.
///
/// Every bad file is reported (as [`SourceError::Multiple`] when there are several), and so is
/// every pair of resources with the same type URL and name, so one reload shows all problems.
pub fn load_directory(
    descriptors: &Descriptors,
    dir: &Path,
) -> Result<Vec<ParsedResource>, SourceError> {
    load_directory_with(descriptors, dir, &Limits::default())
}

/// The largest resource file read by default: 32 MiB, several times the largest real resource
/// files (a ClusterLoadAssignment of 100,000 endpoints is about 10 MB of YAML).
pub const DEFAULT_MAX_FILE_BYTES: u64 = 32 * 1024 * 1024;

/// What one resource file may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// A larger file is an error naming it (the directory is rejected, the last good state kept).
    pub max_file_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
        }
    }
}

impl Limits {
    pub fn max_file_bytes(mut self, bytes: u64) -> Self {
        self.max_file_bytes = bytes;
        self
    }
}

/// [`load_directory`] under other [`Limits`].
pub fn load_directory_with(
    descriptors: &Descriptors,
    dir: &Path,
    limits: &Limits,
) -> Result<Vec<ParsedResource>, SourceError> {
    DirectoryCache::default().load(descriptors, dir, limits)
}

/// The parsed files of a directory, kept between its loads, so that a change costs what changed.
///
/// [`DirectoryCache::rescan`] lists the whole tree and re-reads only the files whose identity,
/// size or modification or change time differ from the last load; of those, only the files whose
/// content (SHA-256) changed are parsed again. [`DirectoryCache::reload_paths`] looks only at the
/// paths a watcher's events name (a file, or a directory whose subtree is listed), plus the
/// resource files that are symbolic links (their target may change without an event naming
/// them): a one-file change costs that file and the resources it held, whatever the size of the
/// directory. A tree with a symbolic link to a directory, a load after a failed listing, and a
/// cache never loaded are listed whole instead.
///
/// Either way the outcome is exactly what [`load_directory_with`] gives for the directory as it
/// is: an index of which files define each (type URL, name) decides duplicates over the whole
/// directory by re-deciding only the names the changed files held before and after, and the
/// errors of files that did not change are kept with them.
///
/// What changed since the state the consumer last committed ([`DirectoryCache::committed`]) is
/// kept as a set of (type URL, name): [`DirectoryCache::changes`] gives them with what they are
/// now, so that a consumer applies only those.
///
/// File times are coarse (a few milliseconds on Linux): a file written twice within one tick,
/// to the same size, keeps its stamp. So a stamp is trusted only once it is older than
/// [`DEFAULT_RACY_WINDOW`]; a file changed more recently is read and hashed when it is looked at.
#[derive(Debug)]
pub struct DirectoryCache {
    files: BTreeMap<Arc<Path>, Cached>,
    /// Where each (type URL, name) is defined among the files that parse: in file order.
    index: HashMap<Key, Vec<Occurrence>>,
    /// Names defined more than once without constraints.
    duplicated: BTreeSet<Key>,
    /// Files whose content is an error (kept with them in `files`).
    broken: BTreeSet<Arc<Path>>,
    /// Files that could not be read at their last attempt, with the error: tried again at every
    /// load.
    unreadable: BTreeMap<PathBuf, SourceError>,
    /// Resource files that are symbolic links: looked at on every load.
    links: BTreeSet<Arc<Path>>,
    /// A directory of the tree is a symbolic link: every load lists the whole tree.
    dir_links: bool,
    /// The next load lists the whole tree (never loaded, or its last listing failed).
    must_rescan: bool,
    /// Names whose resources changed since the last commit.
    dirty: HashSet<Key>,
    /// The consumer holds what the cache held at its last commit (false: give it everything).
    synced: bool,
    /// Resources of the files that parse.
    resources: usize,
    racy: std::time::Duration,
    /// Files read and files parsed by the last load.
    read: usize,
    parsed: usize,
    /// Files a writer still holds open ([`DirectoryCache::hold`]): not read; what is cached of
    /// them is kept, and one never read is left out.
    held: HashSet<PathBuf>,
}

/// A resource's type URL and name.
type Key = (String, String);

/// One definition of a name: its file and its position there.
#[derive(Debug, Clone)]
struct Occurrence {
    file: Arc<Path>,
    position: usize,
    constrained: bool,
}

/// How old a file's modification and change times must be for its stamp to be trusted.
pub const DEFAULT_RACY_WINDOW: std::time::Duration = std::time::Duration::from_secs(2);

impl Default for DirectoryCache {
    fn default() -> Self {
        DirectoryCache {
            files: BTreeMap::new(),
            index: HashMap::new(),
            duplicated: BTreeSet::new(),
            broken: BTreeSet::new(),
            unreadable: BTreeMap::new(),
            links: BTreeSet::new(),
            dir_links: false,
            must_rescan: true,
            dirty: HashSet::new(),
            synced: false,
            resources: 0,
            racy: DEFAULT_RACY_WINDOW,
            read: 0,
            parsed: 0,
            held: HashSet::new(),
        }
    }
}

#[derive(Debug)]
struct Cached {
    stamp: FileStamp,
    digest: [u8; 32],
    outcome: Result<Vec<ParsedResource>, SourceError>,
    /// The directory entry is a symbolic link.
    link: bool,
}

/// What tells that a file may have changed without reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    len: u64,
    modified: Option<std::time::SystemTime>,
    /// The inode's last change (content or metadata).
    changed: Option<std::time::SystemTime>,
    #[cfg(unix)]
    inode: (u64, u64),
}

impl FileStamp {
    /// Whether both times are before `before` (and known).
    fn settled(&self, before: std::time::SystemTime) -> bool {
        [self.modified, self.changed]
            .iter()
            .all(|t| t.is_some_and(|t| t < before))
    }
}

fn stamp_of(meta: &fs::Metadata) -> FileStamp {
    #[cfg(unix)]
    use std::os::unix::fs::MetadataExt;
    #[cfg(unix)]
    let changed = u64::try_from(meta.ctime()).ok().map(|secs| {
        std::time::UNIX_EPOCH
            + std::time::Duration::new(secs, u32::try_from(meta.ctime_nsec()).unwrap_or(0))
    });
    #[cfg(not(unix))]
    let changed = None;
    FileStamp {
        len: meta.len(),
        modified: meta.modified().ok(),
        changed,
        #[cfg(unix)]
        inode: (meta.dev(), meta.ino()),
    }
}

/// The names a reload changed and what they are now: for each (type URL, name), every resource
/// (variant) the directory defines for it, in file order; a name without any was removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// (type URL, name), sorted.
    pub names: Vec<(String, String)>,
    pub resources: Vec<ParsedResource>,
}

/// What one load needs at hand.
struct Pass<'a> {
    descriptors: &'a Descriptors,
    limits: &'a Limits,
    settled_before: std::time::SystemTime,
}

impl DirectoryCache {
    /// Loads `dir` as [`load_directory_with`] does (listing it whole), reusing what is cached of
    /// files that did not change, and keeps what it parsed for the next load.
    pub fn load(
        &mut self,
        descriptors: &Descriptors,
        dir: &Path,
        limits: &Limits,
    ) -> Result<Vec<ParsedResource>, SourceError> {
        self.rescan(descriptors, dir, limits)?;
        Ok(self.resources())
    }

    fn pass<'a>(&mut self, descriptors: &'a Descriptors, limits: &'a Limits) -> Pass<'a> {
        self.read = 0;
        self.parsed = 0;
        Pass {
            descriptors,
            limits,
            settled_before: std::time::SystemTime::now()
                .checked_sub(self.racy)
                .unwrap_or(std::time::UNIX_EPOCH),
        }
    }

    /// Lists the whole tree and brings the cache up to date with it; the directory's errors, as
    /// a full load reports them, or nothing.
    pub fn rescan(
        &mut self,
        descriptors: &Descriptors,
        dir: &Path,
        limits: &Limits,
    ) -> Result<(), SourceError> {
        let pass = self.pass(descriptors, limits);
        let walk = match check_root(dir).and_then(|()| walk(dir, dir)) {
            Ok(walk) => walk,
            Err(error) => {
                self.must_rescan = true;
                return Err(error);
            }
        };
        self.must_rescan = false;
        self.dir_links = walk.dir_links;
        self.relist(&pass, None, walk.files);
        self.outcome()
    }

    /// Brings the cache up to date with a listing of `scope` (`None`: the whole tree): cached
    /// files it no longer shows are forgotten, what it failed to read before is forgotten too,
    /// and each listed file is visited.
    fn relist(&mut self, pass: &Pass<'_>, scope: Option<&Path>, files: Vec<Found>) {
        let listed: HashSet<&Path> = files.iter().map(|f| f.path.as_path()).collect();
        let gone: Vec<Arc<Path>> = match scope {
            Some(scope) => self
                .under(scope)
                .filter(|p| !listed.contains(&**p))
                .collect(),
            None => self
                .files
                .keys()
                .filter(|p| !listed.contains(&***p))
                .cloned()
                .collect(),
        };
        for path in gone {
            self.set_file(&path, None);
        }
        match scope {
            Some(scope) => self.unreadable.retain(|p, _| !p.starts_with(scope)),
            None => self.unreadable.clear(),
        }
        for found in files {
            self.visit(pass, found);
        }
    }

    /// Brings the cache up to date after changes to `paths` (what a watcher's events name:
    /// files, or directories whose subtree is listed again), looking at nothing else but the
    /// resource files that are symbolic links and the files that could not be read. Paths
    /// outside `dir` and hidden ones are not resource files and are skipped. The directory's
    /// errors, as a full load reports them, or nothing.
    ///
    /// Lists the whole tree instead ([`DirectoryCache::rescan`]) when the cache was never loaded,
    /// when its last listing failed, when a path is `dir` itself, and when the tree holds a
    /// symbolic link to a directory.
    pub fn reload_paths(
        &mut self,
        descriptors: &Descriptors,
        dir: &Path,
        limits: &Limits,
        paths: &[PathBuf],
    ) -> Result<(), SourceError> {
        if self.must_rescan || self.dir_links {
            return self.rescan(descriptors, dir, limits);
        }
        if let Err(error) = check_root(dir) {
            self.must_rescan = true;
            return Err(error);
        }
        let mut scopes: Vec<PathBuf> = Vec::with_capacity(paths.len() + self.links.len());
        for path in paths {
            let Ok(relative) = path.strip_prefix(dir) else {
                continue;
            };
            if relative.as_os_str().is_empty() {
                return self.rescan(descriptors, dir, limits);
            }
            let loadable = relative
                .components()
                .all(|c| c.as_os_str().to_str().is_some_and(|n| !is_ignored_name(n)));
            if loadable {
                scopes.push(path.clone());
            }
        }
        scopes.extend(self.links.iter().map(|p| p.to_path_buf()));
        scopes.extend(self.unreadable.keys().cloned());
        scopes.sort();
        scopes.dedup();
        // A path under another one is looked at with it.
        let mut outer: Vec<PathBuf> = Vec::with_capacity(scopes.len());
        for scope in scopes {
            if !outer.last().is_some_and(|o| scope.starts_with(o)) {
                outer.push(scope);
            }
        }
        let pass = self.pass(descriptors, limits);
        for scope in outer {
            self.unreadable.remove(&scope);
            let link = fs::symlink_metadata(&scope).is_ok_and(|m| m.file_type().is_symlink());
            match fs::metadata(&scope) {
                Ok(meta) if meta.is_dir() => {
                    if link {
                        // A link to a directory: listed whole from now on.
                        return self.rescan(descriptors, dir, limits);
                    }
                    let walk = match walk(dir, &scope) {
                        Ok(walk) if !walk.dir_links => walk,
                        _ => return self.rescan(descriptors, dir, limits),
                    };
                    self.relist(&pass, Some(&scope), walk.files);
                }
                Ok(meta) if meta.is_file() && Format::of(&scope).is_some() => {
                    let inside: Vec<Arc<Path>> =
                        self.under(&scope).filter(|p| **p != *scope).collect();
                    for path in inside {
                        self.set_file(&path, None);
                    }
                    self.unreadable
                        .retain(|p, _| !p.starts_with(&scope) || *p == scope);
                    self.visit(
                        &pass,
                        Found {
                            path: scope,
                            meta,
                            link,
                        },
                    );
                }
                // Gone, or no longer a resource file (nor a directory).
                Ok(_) => self.forget_under(&scope),
                Err(e) if e.kind() == ErrorKind::NotFound => self.forget_under(&scope),
                // What a listing would stop at: the whole tree is listed, as a full load does.
                Err(_) => return self.rescan(descriptors, dir, limits),
            }
        }
        self.outcome()
    }

    /// The cached files at or under `path`.
    fn under<'a>(&'a self, path: &'a Path) -> impl Iterator<Item = Arc<Path>> + 'a {
        self.files
            .range::<Path, _>((std::ops::Bound::Included(path), std::ops::Bound::Unbounded))
            .map(|(p, _)| p)
            .take_while(move |p| p.starts_with(path))
            .cloned()
    }

    fn forget_under(&mut self, path: &Path) {
        let gone: Vec<Arc<Path>> = self.under(path).collect();
        for file in gone {
            self.set_file(&file, None);
        }
        self.unreadable.retain(|p, _| !p.starts_with(path));
    }

    /// Brings one listed file up to date: read again unless its settled stamp is unchanged,
    /// parsed again only if its content changed.
    fn visit(&mut self, pass: &Pass<'_>, found: Found) {
        if self.held.contains(&found.path) {
            return;
        }
        let stamp = stamp_of(&found.meta);
        if let Some(cached) = self.files.get(found.path.as_path()) {
            if cached.stamp == stamp
                && stamp.settled(pass.settled_before)
                && cached.link == found.link
            {
                return;
            }
        }
        let text = match read_bounded(&found.path, pass.limits.max_file_bytes) {
            Ok(text) => text,
            // Deleted between listing and reading: the watcher will report the deletion.
            Err(e) if e.kind() == ErrorKind::NotFound => {
                self.forget_under(&found.path);
                return;
            }
            Err(source) => {
                self.forget_under(&found.path);
                let path = found.path;
                self.unreadable
                    .insert(path.clone(), SourceError::Io { path, source });
                return;
            }
        };
        self.read += 1;
        let digest: [u8; 32] = Sha256::digest(text.as_bytes()).into();
        if let Some(cached) = self.files.get_mut(found.path.as_path()) {
            if cached.digest == digest {
                // Touched, not changed.
                cached.stamp = stamp;
                if cached.link != found.link {
                    cached.link = found.link;
                    let path = self
                        .files
                        .get_key_value(found.path.as_path())
                        .map(|(p, _)| p.clone());
                    if let Some(path) = path {
                        if found.link {
                            self.links.insert(path);
                        } else {
                            self.links.remove(&path);
                        }
                    }
                }
                return;
            }
        }
        self.parsed += 1;
        let outcome = parse_file(pass.descriptors, &found.path, &text);
        let path: Arc<Path> = Arc::from(found.path.as_path());
        self.set_file(
            &path,
            Some(Cached {
                stamp,
                digest,
                outcome,
                link: found.link,
            }),
        );
    }

    /// Replaces what is cached of one file (`None`: forgets it), keeping the index, the
    /// duplicates and the changed names up to date.
    fn set_file(&mut self, path: &Arc<Path>, new: Option<Cached>) {
        let old = self.files.remove(path);
        if let (Some(Cached { outcome: Ok(a), .. }), Some(Cached { outcome: Ok(b), .. })) =
            (&old, &new)
        {
            if a == b {
                if let Some(new) = new {
                    self.files.insert(path.clone(), new);
                }
                return;
            }
        }
        let mut touched: Vec<Key> = Vec::new();
        if let Some(old) = old {
            self.broken.remove(path);
            self.links.remove(path);
            if let Ok(list) = old.outcome {
                self.resources -= list.len();
                for r in list {
                    let key = (r.type_url, r.name);
                    if let Some(occurrences) = self.index.get_mut(&key) {
                        occurrences.retain(|o| o.file != *path);
                        if occurrences.is_empty() {
                            self.index.remove(&key);
                        }
                    }
                    touched.push(key);
                }
            }
        }
        if let Some(new) = new {
            match &new.outcome {
                Ok(list) => {
                    self.resources += list.len();
                    for (position, r) in list.iter().enumerate() {
                        let key = (r.type_url.clone(), r.name.clone());
                        let occurrence = Occurrence {
                            file: path.clone(),
                            position,
                            constrained: r.constraints.is_some(),
                        };
                        let occurrences = self.index.entry(key.clone()).or_default();
                        let at = occurrences.partition_point(|o| {
                            (&o.file, o.position) < (&occurrence.file, occurrence.position)
                        });
                        occurrences.insert(at, occurrence);
                        touched.push(key);
                    }
                }
                Err(_) => {
                    self.broken.insert(path.clone());
                }
            }
            if new.link {
                self.links.insert(path.clone());
            }
            self.files.insert(path.clone(), new);
        }
        for key in touched {
            let plain = self
                .index
                .get(&key)
                .map_or(0, |o| o.iter().filter(|o| !o.constrained).count());
            if plain > 1 {
                self.duplicated.insert(key.clone());
            } else {
                self.duplicated.remove(&key);
            }
            self.dirty.insert(key);
        }
    }

    fn resource_at(&self, occurrence: &Occurrence) -> Option<&ParsedResource> {
        match &self.files.get(&occurrence.file)?.outcome {
            Ok(list) => list.get(occurrence.position),
            Err(_) => None,
        }
    }

    /// The directory's errors as a full load gives them: each bad file's in path order, then
    /// every duplicate in the order of its later definition.
    fn outcome(&self) -> Result<(), SourceError> {
        let mut errors: BTreeMap<&Path, SourceError> = self
            .unreadable
            .iter()
            .map(|(p, e)| (p.as_path(), e.copy()))
            .collect();
        for path in &self.broken {
            if let Some(Cached {
                outcome: Err(error),
                ..
            }) = self.files.get(path)
            {
                errors.insert(path, error.copy());
            }
        }
        let mut duplicates: Vec<((&Path, usize), SourceError)> = Vec::new();
        for key in &self.duplicated {
            let Some(occurrences) = self.index.get(key) else {
                continue;
            };
            let mut plain = occurrences.iter().filter(|o| !o.constrained);
            let Some(first) = plain.next() else {
                continue;
            };
            let first_origin = self
                .resource_at(first)
                .map(|r| r.origin.clone())
                .unwrap_or_default();
            for later in plain {
                duplicates.push((
                    (&later.file, later.position),
                    SourceError::Duplicate {
                        type_url: key.0.clone(),
                        name: key.1.clone(),
                        first: first_origin.clone(),
                        second: self
                            .resource_at(later)
                            .map(|r| r.origin.clone())
                            .unwrap_or_default(),
                    },
                ));
            }
        }
        duplicates.sort_by(|a, b| a.0.cmp(&b.0));
        let list: Vec<SourceError> = errors
            .into_values()
            .chain(duplicates.into_iter().map(|(_, e)| e))
            .collect();
        match SourceError::from_list(list) {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// Every resource, in file order: what [`load_directory_with`] gives when the directory has
    /// no error.
    pub fn resources(&self) -> Vec<ParsedResource> {
        let mut out = Vec::with_capacity(self.resources);
        for cached in self.files.values() {
            if let Ok(list) = &cached.outcome {
                out.extend(list.iter().cloned());
            }
        }
        out
    }

    /// The names whose resources changed since the last [`DirectoryCache::committed`] (since
    /// the start, before the first), with every resource the directory now defines for them.
    pub fn changes(&self) -> Changes {
        let mut names: Vec<&Key> = self.dirty.iter().collect();
        names.sort();
        let mut resources = Vec::new();
        for key in &names {
            for occurrence in self.index.get(*key).into_iter().flatten() {
                if let Some(r) = self.resource_at(occurrence) {
                    resources.push(r.clone());
                }
            }
        }
        Changes {
            names: names.into_iter().cloned().collect(),
            resources,
        }
    }

    /// Whether the consumer holds the state of the last [`DirectoryCache::committed`]: when not
    /// (never committed), it takes [`DirectoryCache::resources`] whole rather than the changes.
    pub fn is_synced(&self) -> bool {
        self.synced
    }

    /// The consumer now holds what the cache holds: the changed names start afresh.
    pub fn committed(&mut self) {
        self.dirty.clear();
        self.synced = true;
    }

    /// The loads that follow do not read the files at `paths` (as the loads name them: under
    /// `dir` as given), whatever their stamp: what is cached of each is kept (its last good
    /// content), and one never read is left out, as if it were not there yet. For files whose
    /// writer still holds them open, possibly half written; an empty set ends the hold.
    pub fn hold(&mut self, paths: HashSet<PathBuf>) {
        self.held = paths;
    }

    /// Resources of the files that parse.
    pub fn resource_count(&self) -> usize {
        self.resources
    }

    /// A cache that trusts a file's stamp once it is `racy` old (see [`DEFAULT_RACY_WINDOW`]).
    pub fn with_racy_window(racy: std::time::Duration) -> DirectoryCache {
        DirectoryCache {
            racy,
            ..DirectoryCache::default()
        }
    }

    /// How many files the last load read, and how many of them it parsed (the others were
    /// unchanged: their parse was reused).
    pub fn last_load(&self) -> (usize, usize) {
        (self.read, self.parsed)
    }

    /// Files whose parse is kept.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

/// A file's text, refused when it is over `max` bytes (checked while reading, so a file that grows
/// meanwhile is refused too).
fn read_bounded(file: &Path, max: u64) -> std::io::Result<String> {
    use std::io::Read;
    let too_large = || {
        std::io::Error::new(
            ErrorKind::FileTooLarge,
            format!(
                "larger than {max} bytes, the most a resource file may have (--max-file-bytes)"
            ),
        )
    };
    let mut opened = fs::File::open(file)?;
    // Refused by its size before any of it is read; the bounded read below catches a file that
    // grows while it is read.
    if opened.metadata()?.len() > max {
        return Err(too_large());
    }
    let mut text = String::new();
    (&mut opened)
        .take(max.saturating_add(1))
        .read_to_string(&mut text)?;
    if text.len() as u64 > max {
        return Err(too_large());
    }
    Ok(text)
}

/// Names that editors and tools write next to the real files and that must never be loaded
/// (most also lack a resource extension; `foo.yaml~` does not).
pub fn is_ignored_name(name: &str) -> bool {
    name.starts_with('.')
        || name.ends_with('~')
        || name.ends_with(".swp")
        || name.ends_with(".swx")
        || (name.starts_with('#') && name.ends_with('#'))
}

/// The resource files under `dir`, sorted. Symlinks are followed (Kubernetes ConfigMap volumes
/// are made of them), each directory at most once.
pub fn resource_files(dir: &Path) -> Result<Vec<PathBuf>, SourceError> {
    check_root(dir)?;
    let mut files: Vec<PathBuf> = walk(dir, dir)?.files.into_iter().map(|f| f.path).collect();
    files.sort();
    Ok(files)
}

fn io_error(path: &Path, source: std::io::Error) -> SourceError {
    SourceError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// `dir` must be a directory.
fn check_root(dir: &Path) -> Result<(), SourceError> {
    let meta = fs::metadata(dir).map_err(|e| io_error(dir, e))?;
    if !meta.is_dir() {
        return Err(io_error(
            dir,
            std::io::Error::new(ErrorKind::NotADirectory, "not a directory"),
        ));
    }
    Ok(())
}

/// A resource file a walk found.
struct Found {
    path: PathBuf,
    /// Its metadata, symbolic links followed.
    meta: fs::Metadata,
    /// The directory entry is a symbolic link.
    link: bool,
}

struct Walk {
    /// Unsorted.
    files: Vec<Found>,
    /// A directory entry of the tree is a symbolic link to a directory.
    dir_links: bool,
}

/// The resource files under `from` (`dir` or a directory under it), symbolic links followed,
/// each directory at most once. A directory that vanishes while it is listed is skipped unless
/// it is `dir`.
fn walk(dir: &Path, from: &Path) -> Result<Walk, SourceError> {
    let mut files = Vec::new();
    let mut dir_links = false;
    let mut visited = HashSet::new();
    let mut pending = vec![from.to_path_buf()];
    while let Some(current) = pending.pop() {
        let canonical = match fs::canonicalize(&current) {
            Ok(canonical) => canonical,
            Err(e) if e.kind() == ErrorKind::NotFound && current != dir => continue,
            Err(e) => return Err(io_error(&current, e)),
        };
        if !visited.insert(canonical) {
            continue;
        }
        let entries = match fs::read_dir(&current) {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound && current != dir => continue,
            Err(e) => return Err(io_error(&current, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| io_error(&current, e))?;
            let path = entry.path();
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                tracing::debug!(path = %path.display(), "skipping non-UTF-8 file name");
                continue;
            };
            if is_ignored_name(&name) {
                continue;
            }
            let link = entry.file_type().is_ok_and(|t| t.is_symlink());
            let meta = match fs::metadata(&path) {
                Ok(meta) => meta,
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    tracing::debug!(path = %path.display(), "skipping vanished file or dangling symlink");
                    continue;
                }
                Err(e) => return Err(io_error(&path, e)),
            };
            if meta.is_dir() {
                dir_links |= link;
                pending.push(path);
            } else if meta.is_file() && Format::of(&path).is_some() {
                files.push(Found { path, meta, link });
            }
        }
    }
    Ok(Walk { files, dir_links })
}
