use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::parse::{check_duplicates, parse_file, Format};
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

/// The parsed files of a directory, kept between its loads: a load re-reads only the files whose
/// identity, size or modification time changed, and re-parses only those whose content changed
/// too (a file touched but not changed costs a read and a hash). The result is exactly what
/// [`load_directory_with`] gives for the directory as it is: every file is listed and checked
/// for changes, and duplicates and errors are decided over all of them each time.
///
/// File times are coarse (a few milliseconds on Linux): a file written twice within one tick,
/// to the same size, keeps its stamp. So a stamp is trusted only once it is older than
/// [`DEFAULT_RACY_WINDOW`]; a file changed more recently is read and hashed on every load.
#[derive(Debug)]
pub struct DirectoryCache {
    files: HashMap<PathBuf, Cached>,
    racy: std::time::Duration,
    /// Files read and files parsed by the last load.
    read: usize,
    parsed: usize,
}

/// How old a file's modification and change times must be for its stamp to be trusted.
pub const DEFAULT_RACY_WINDOW: std::time::Duration = std::time::Duration::from_secs(2);

impl Default for DirectoryCache {
    fn default() -> Self {
        DirectoryCache {
            files: HashMap::new(),
            racy: DEFAULT_RACY_WINDOW,
            read: 0,
            parsed: 0,
        }
    }
}

#[derive(Debug)]
struct Cached {
    stamp: FileStamp,
    digest: [u8; 32],
    parsed: Vec<ParsedResource>,
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

impl DirectoryCache {
    /// Loads `dir` as [`load_directory_with`] does, reusing what is cached of files that did not
    /// change, and keeps what it parsed for the next load.
    pub fn load(
        &mut self,
        descriptors: &Descriptors,
        dir: &Path,
        limits: &Limits,
    ) -> Result<Vec<ParsedResource>, SourceError> {
        let settled_before = std::time::SystemTime::now()
            .checked_sub(self.racy)
            .unwrap_or(std::time::UNIX_EPOCH);
        self.read = 0;
        self.parsed = 0;
        let files = resource_files(dir)?;
        let mut resources = Vec::new();
        let mut errors = Vec::new();
        let mut kept = HashMap::with_capacity(files.len());
        for file in &files {
            let stamp = match fs::metadata(file) {
                Ok(meta) => stamp_of(&meta),
                // Deleted between listing and reading: the watcher will report the deletion.
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(source) => {
                    errors.push(SourceError::Io {
                        path: file.clone(),
                        source,
                    });
                    continue;
                }
            };
            if let Some(cached) = self.files.get(file) {
                if cached.stamp == stamp && stamp.settled(settled_before) {
                    if let Some(cached) = self.files.remove(file) {
                        resources.extend(cached.parsed.iter().cloned());
                        kept.insert(file.clone(), cached);
                        continue;
                    }
                }
            }
            let text = match read_bounded(file, limits.max_file_bytes) {
                Ok(text) => text,
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(source) => {
                    errors.push(SourceError::Io {
                        path: file.clone(),
                        source,
                    });
                    continue;
                }
            };
            self.read += 1;
            let digest: [u8; 32] = Sha256::digest(text.as_bytes()).into();
            let previous = self.files.remove(file);
            let parsed = match previous.filter(|c| c.digest == digest) {
                // Touched, not changed.
                Some(cached) => cached.parsed,
                None => {
                    self.parsed += 1;
                    match parse_file(descriptors, file, &text) {
                        Ok(parsed) => parsed,
                        Err(error) => {
                            errors.push(error);
                            continue;
                        }
                    }
                }
            };
            resources.extend(parsed.iter().cloned());
            kept.insert(
                file.clone(),
                Cached {
                    stamp,
                    digest,
                    parsed,
                },
            );
        }
        // Files gone since the last load are forgotten.
        self.files = kept;
        if let Err(error) = check_duplicates(&resources) {
            errors.push(error);
        }
        match SourceError::from_list(errors) {
            Some(error) => Err(error),
            None => Ok(resources),
        }
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
    let io_error = |path: &Path, source| SourceError::Io {
        path: path.to_path_buf(),
        source,
    };
    let meta = fs::metadata(dir).map_err(|e| io_error(dir, e))?;
    if !meta.is_dir() {
        return Err(io_error(
            dir,
            std::io::Error::new(ErrorKind::NotADirectory, "not a directory"),
        ));
    }
    let mut files = Vec::new();
    let mut visited = HashSet::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        let canonical = fs::canonicalize(&current).map_err(|e| io_error(&current, e))?;
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
            let meta = match fs::metadata(&path) {
                Ok(meta) => meta,
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    tracing::debug!(path = %path.display(), "skipping vanished file or dangling symlink");
                    continue;
                }
                Err(e) => return Err(io_error(&path, e)),
            };
            if meta.is_dir() {
                pending.push(path);
            } else if meta.is_file() && Format::of(&path).is_some() {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}
