use std::collections::HashSet;
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

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
    let files = resource_files(dir)?;
    let mut resources = Vec::new();
    let mut errors = Vec::new();
    for file in &files {
        let text = match read_bounded(file, limits.max_file_bytes) {
            Ok(text) => text,
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
        match parse_file(descriptors, file, &text) {
            Ok(parsed) => resources.extend(parsed),
            Err(error) => errors.push(error),
        }
    }
    if let Err(error) = check_duplicates(&resources) {
        errors.push(error);
    }
    match SourceError::from_list(errors) {
        Some(error) => Err(error),
        None => Ok(resources),
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
