//! `DiscoveryResponse` files for Envoy's filesystem subscriptions (`path_config_source`): one
//! file per type and format (`clusters.yaml`, `listeners.pb`, ...), each replaced atomically (a
//! temporary file in the same directory renamed over the target, the move Envoy's watcher
//! reacts to), and only when its type changed. See docs/files.md.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use anyhow::Context as _;
use tracing::{error, info};
use xdsd_core::params::ParamSet;
use xdsd_core::store::{Snapshot, Store, View};
use xdsd_core::types;
use xdsd_source::{discovery_response_bytes, render_discovery_response, Descriptors, FileFormat};

/// Types whose files are always written (with no resources when the store has none), so that a
/// bootstrap can point at them before the directory holds any: Envoy reads an empty listeners
/// file as "no listeners", but a missing file as an error.
const ALWAYS: [&str; 6] = [
    types::LISTENER,
    types::ROUTE_CONFIGURATION,
    types::CLUSTER,
    types::CLUSTER_LOAD_ASSIGNMENT,
    types::SECRET,
    types::RUNTIME,
];

/// How long a round waits, after writing the files of the types others refer to (secrets,
/// clusters, endpoints), before it writes those of the types that refer to them (listeners,
/// routes, the rest). Envoy reloads every file of a `watched_directory` at each move into it, in
/// no set order: a new listener file read before the new clusters file is applied is rejected
/// (a listener's inline route to an unknown cluster) and stays rejected until the next change.
/// The pause lets Envoy apply the first files, while the others still hold the old state.
pub const SETTLE: Duration = Duration::from_millis(500);

/// Whether other types refer to this one: its files go first, then [`SETTLE`].
fn is_referred_to(type_url: &str) -> bool {
    matches!(
        type_url,
        types::SECRET | types::CLUSTER | types::CLUSTER_LOAD_ASSIGNMENT
    )
}

/// The file name of a type without its extension: `listeners`, `routes`, `clusters`,
/// `endpoints`, `secrets`, `runtime`, `scoped_routes`, `virtual_hosts`, `extension_configs`; any
/// other type by its full message name (`envoy.config.rbac.v3.RBAC`), each character that is not
/// a letter, digit, `.`, `_` or `-` replaced by `_`.
pub fn file_stem(type_url: &str) -> String {
    let known = match type_url {
        types::LISTENER => "listeners",
        types::ROUTE_CONFIGURATION => "routes",
        types::SCOPED_ROUTE_CONFIGURATION => "scoped_routes",
        types::VIRTUAL_HOST => "virtual_hosts",
        types::CLUSTER => "clusters",
        types::CLUSTER_LOAD_ASSIGNMENT => "endpoints",
        types::SECRET => "secrets",
        types::RUNTIME => "runtime",
        types::TYPED_EXTENSION_CONFIG => "extension_configs",
        _ => "",
    };
    if !known.is_empty() {
        return known.to_owned();
    }
    let message = type_url.rsplit_once('/').map_or(type_url, |(_, m)| m);
    let mut stem: String = message
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    // Never a hidden file (the temporary files are), never empty.
    if stem.is_empty() || stem.starts_with('.') {
        stem.insert(0, '_');
    }
    stem
}

/// `<stem>.<extension>`.
pub fn file_name(type_url: &str, format: FileFormat) -> String {
    format!("{}.{}", file_stem(type_url), format.extension())
}

/// The files of one type written in one round.
#[derive(Debug)]
pub struct TypeWritten {
    pub type_url: String,
    pub version: String,
    pub resources: usize,
    pub files: Vec<PathBuf>,
}

/// What one round of writing did.
#[derive(Debug, Default)]
pub struct Round {
    pub written: Vec<TypeWritten>,
    /// One per file that could not be rendered or written.
    pub errors: Vec<anyhow::Error>,
}

/// Writes the files of a store's snapshots into a directory, remembering what it wrote.
#[derive(Debug)]
pub struct FileWriter {
    dir: PathBuf,
    formats: Vec<FileFormat>,
    descriptors: Descriptors,
    /// The version each type's files were last written with, all formats succeeding.
    written: HashMap<String, String>,
    settle: Duration,
}

impl FileWriter {
    /// `formats` in the order given, each once.
    pub fn new(dir: PathBuf, formats: &[FileFormat], descriptors: Descriptors) -> FileWriter {
        let mut seen = BTreeSet::new();
        let formats = formats
            .iter()
            .copied()
            .filter(|f| seen.insert(*f))
            .collect();
        FileWriter {
            dir,
            formats,
            descriptors,
            written: HashMap::new(),
            settle: SETTLE,
        }
    }

    /// Another pause than [`SETTLE`] between the two groups of types.
    #[cfg(test)]
    pub fn with_settle(mut self, settle: Duration) -> FileWriter {
        self.settle = settle;
        self
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes the files of every type whose content differs from what this writer last wrote
    /// (all of them the first time): the types of [`ALWAYS`], those of the snapshot, and those
    /// written before and since emptied (written again with no resources). Types go in the order
    /// an ADS stream pushes them, and when the round wrote secrets, clusters or endpoints, it
    /// waits [`SETTLE`] before the listeners, routes and other types that refer to them. A type
    /// whose files fail is tried again at the next round.
    ///
    /// A name with variants is written as a client without parameters sees it (see
    /// docs/files.md).
    pub fn write_changed(&mut self, snapshot: &Snapshot) -> Round {
        let mut type_urls: BTreeSet<(u8, String)> = BTreeSet::new();
        let mut add = |url: &str| {
            type_urls.insert((types::push_rank(url), url.to_owned()));
        };
        ALWAYS.iter().for_each(|url| add(url));
        snapshot.types().for_each(|t| add(t.type_url()));
        self.written.keys().for_each(|url| add(url));

        let mut round = Round::default();
        let mut referred_written = false;
        let mut settled = false;
        for (_, type_url) in type_urls {
            let view = match snapshot.get(&type_url) {
                Some(t) => t.view(&ParamSet::new()),
                None => Arc::new(View::empty(type_url.as_str().into())),
            };
            let version = view.version().to_string();
            if self.written.get(&type_url) == Some(&version) {
                continue;
            }
            if is_referred_to(&type_url) {
                referred_written = true;
            } else if referred_written && !settled {
                std::thread::sleep(self.settle);
                settled = true;
            }
            // A type without a name field (LEDS's LbEndpoint, named by `"@name": xdstp://...`):
            // each resource in the `Resource` wrapper, which carries its name.
            let unnamed = self
                .descriptors
                .message_for_type_url(&type_url)
                .is_some_and(|d| xdsd_source::name_field(&d).is_none());
            let wrapped: Vec<Vec<u8>> = if unnamed {
                view.iter()
                    .map(|r| wrapped_entry(r.delta_bytes()))
                    .collect()
            } else {
                Vec::new()
            };
            let response = if unnamed {
                discovery_response_bytes(&version, &type_url, wrapped.iter().map(Vec::as_slice))
            } else {
                discovery_response_bytes(
                    &version,
                    &type_url,
                    view.iter().map(|r| r.any_bytes().as_ref()),
                )
            };
            let mut files = Vec::new();
            let mut failed = false;
            for &format in &self.formats {
                let path = self.dir.join(file_name(&type_url, format));
                let result = render_discovery_response(&self.descriptors, format, &response)
                    .with_context(|| format!("cannot render {}", path.display()))
                    .and_then(|bytes| write_atomically(&path, &bytes));
                match result {
                    Ok(()) => files.push(path),
                    Err(e) => {
                        failed = true;
                        round.errors.push(e);
                    }
                }
            }
            if !failed {
                self.written.insert(type_url.clone(), version.clone());
            }
            if !files.is_empty() {
                round.written.push(TypeWritten {
                    type_url,
                    version,
                    resources: view.len(),
                    files,
                });
            }
        }
        round
    }
}

/// Replaces `path` with `bytes` in one step: written to a hidden temporary file in the same
/// directory, flushed, then renamed over `path`. A reader sees the old file or the new one,
/// never a part, and Envoy's watcher sees the rename.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{} has no file name", path.display()))?;
    let temporary = path.with_file_name(format!(".{name}.tmp"));
    let result = (|| -> std::io::Result<()> {
        let mut file = fs::File::create(&temporary)?;
        file.write_all(bytes)?;
        file.sync_data()?;
        fs::rename(&temporary, path)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&temporary);
        return Err(e).with_context(|| format!("cannot write {}", path.display()));
    }
    Ok(())
}

/// Logs a round: one INFO line per type written, one ERROR line per failed file.
pub fn log_round(round: &Round, generation: u64) {
    for t in &round.written {
        let files: Vec<String> = t
            .files
            .iter()
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        info!(
            type_url = %t.type_url,
            version = %t.version,
            resources = t.resources,
            generation,
            files = %files.join(","),
            "wrote discovery response files"
        );
    }
    for e in &round.errors {
        error!("{e:#}; the previous file stays in place, xdsd keeps serving");
    }
}

/// Asks the thread of [`PendingUpdates::start`] for a round after a change of the store. Cheap to
/// clone; requests made while a round runs are served by one more round.
#[derive(Clone, Debug)]
pub struct FileUpdates {
    changes: mpsc::Sender<()>,
}

/// The other end of [`FileUpdates`], until its thread starts.
#[derive(Debug)]
pub struct PendingUpdates {
    requests: mpsc::Receiver<()>,
}

/// A channel of write requests: its sender can be handed out before the writer has written the
/// initial files and its thread is started.
pub fn file_updates() -> (FileUpdates, PendingUpdates) {
    let (changes, requests) = mpsc::channel();
    (FileUpdates { changes }, PendingUpdates { requests })
}

impl FileUpdates {
    /// The store changed: write the files of the types that changed.
    pub fn changed(&self) {
        let _ = self.changes.send(());
    }
}

impl PendingUpdates {
    /// Starts the thread that writes the files of `store` with `writer` (which has written the
    /// initial files) at each request; it ends when every [`FileUpdates`] is dropped.
    pub fn start(self, store: Store, mut writer: FileWriter) -> anyhow::Result<()> {
        let requests = self.requests;
        std::thread::Builder::new()
            .name("xdsd-files".into())
            .spawn(move || {
                while requests.recv().is_ok() {
                    while requests.try_recv().is_ok() {}
                    let snapshot = store.snapshot();
                    log_round(&writer.write_changed(&snapshot), snapshot.generation());
                }
            })
            .context("cannot start the thread that writes the files")?;
        Ok(())
    }
}

/// Fails when `out` is `resources` or inside it: xdsd would read its own JSON and YAML files as
/// resources. `resources` must exist; `out` need not yet (checked before it is created).
pub fn check_outside(out: &Path, resources: &Path) -> anyhow::Result<()> {
    let out_real = resolve(out)?;
    let resources_real = fs::canonicalize(resources)
        .with_context(|| format!("cannot resolve {}", resources.display()))?;
    if out_real.starts_with(&resources_real) {
        anyhow::bail!(
            "the output directory {} is inside the resources directory {}: xdsd would read its \
             own files as resources; choose a directory outside it",
            out.display(),
            resources.display()
        );
    }
    Ok(())
}

/// `path` with its longest existing ancestor resolved (symbolic links, `..`) and the rest
/// appended as written.
fn resolve(path: &Path) -> anyhow::Result<PathBuf> {
    let absolute =
        std::path::absolute(path).with_context(|| format!("cannot resolve {}", path.display()))?;
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    loop {
        match fs::canonicalize(existing) {
            Ok(real) => return Ok(rest.iter().rev().fold(real, |p, c| p.join(c))),
            Err(e) => match (existing.parent(), existing.file_name()) {
                (Some(parent), Some(name)) => {
                    rest.push(name.to_os_string());
                    existing = parent;
                }
                _ => return Err(e).with_context(|| format!("cannot resolve {}", path.display())),
            },
        }
    }
}

/// A `google.protobuf.Any` holding `resource`, an encoded `envoy.service.discovery.v3.Resource`
/// (a `DiscoveryResponse.resources` entry that names its resource).
fn wrapped_entry(resource: &[u8]) -> Vec<u8> {
    use prost::Message as _;
    prost_types_any(xdsd_core::store::RESOURCE_WRAPPER, resource).encode_to_vec()
}

fn prost_types_any(type_url: &str, value: &[u8]) -> envoy_types::pb::google::protobuf::Any {
    envoy_types::pb::google::protobuf::Any {
        type_url: type_url.to_owned(),
        value: value.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xdsd_core::store::ResourceInput;

    fn store_with(yaml: &str) -> Store {
        let descriptors = Descriptors::envoy().expect("descriptors");
        let parsed = xdsd_source::parse_file(&descriptors, Path::new("r.yaml"), yaml)
            .unwrap_or_else(|e| panic!("{e}"));
        let store = Store::new();
        store
            .replace_all(
                parsed
                    .into_iter()
                    .map(|r| ResourceInput::new(r.type_url, r.name, r.value)),
            )
            .unwrap_or_else(|e| panic!("{e}"));
        store
    }

    fn cluster(name: &str) -> String {
        format!(
            "\"@type\": {}\nname: {name}\ntype: STATIC\nconnect_timeout: 1s\n",
            types::CLUSTER
        )
    }

    fn names_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn stems() {
        assert_eq!(file_stem(types::LISTENER), "listeners");
        assert_eq!(file_stem(types::CLUSTER_LOAD_ASSIGNMENT), "endpoints");
        assert_eq!(file_stem(types::RUNTIME), "runtime");
        assert_eq!(
            file_stem("type.googleapis.com/envoy.config.rbac.v3.RBAC"),
            "envoy.config.rbac.v3.RBAC"
        );
        assert_eq!(file_stem("example.com/a b/.x y"), "_.x_y");
        assert_eq!(file_name(types::CLUSTER, FileFormat::Pb), "clusters.pb");
    }

    #[test]
    fn writes_every_type_once_then_only_changed_types() {
        let out = tempfile::tempdir().expect("tempdir");
        let descriptors = Descriptors::envoy().expect("descriptors");
        let store = store_with(&cluster("a"));
        let settle = Duration::from_millis(100);
        let mut writer = FileWriter::new(
            out.path().to_path_buf(),
            &[FileFormat::Yaml, FileFormat::Pb, FileFormat::Yaml],
            descriptors,
        )
        .with_settle(settle);
        let round = writer.write_changed(&store.snapshot());
        assert!(round.errors.is_empty(), "{:?}", round.errors);
        // The listeners waited for the clusters and endpoints to settle.
        let modified = |name: &str| {
            fs::metadata(out.path().join(name))
                .and_then(|m| m.modified())
                .expect("mtime")
        };
        let waited = modified("listeners.yaml")
            .duration_since(modified("endpoints.pb"))
            .expect("listeners after endpoints");
        // File times are taken from a coarse clock (a few ms): two of them 100 ms apart can
        // read 99.99 ms apart.
        let tick = Duration::from_millis(10);
        assert!(waited + tick >= settle, "{waited:?}");
        assert_eq!(
            names_in(out.path()),
            [
                "clusters.pb",
                "clusters.yaml",
                "endpoints.pb",
                "endpoints.yaml",
                "listeners.pb",
                "listeners.yaml",
                "routes.pb",
                "routes.yaml",
                "runtime.pb",
                "runtime.yaml",
                "secrets.pb",
                "secrets.yaml",
            ]
        );
        // Secrets first, then clusters, endpoints, listeners, routes (push order).
        let order: Vec<&str> = round.written.iter().map(|t| &*t.type_url).collect();
        assert_eq!(
            order,
            [
                types::SECRET,
                types::CLUSTER,
                types::CLUSTER_LOAD_ASSIGNMENT,
                types::LISTENER,
                types::ROUTE_CONFIGURATION,
                types::RUNTIME
            ]
        );
        let clusters = fs::read_to_string(out.path().join("clusters.yaml")).expect("read");
        assert!(clusters.contains("name: \"a\""), "{clusters}");

        // Nothing changed: nothing written.
        assert!(writer.write_changed(&store.snapshot()).written.is_empty());

        // One cluster more: only the clusters files.
        store
            .replace_all(
                [cluster("a"), cluster("b")]
                    .iter()
                    .flat_map(|y| {
                        xdsd_source::parse_file(
                            &Descriptors::envoy().expect("descriptors"),
                            Path::new("r.yaml"),
                            y,
                        )
                        .unwrap_or_else(|e| panic!("{e}"))
                    })
                    .map(|r| ResourceInput::new(r.type_url, r.name, r.value)),
            )
            .expect("replace");
        let round = writer.write_changed(&store.snapshot());
        let changed: Vec<&str> = round.written.iter().map(|t| &*t.type_url).collect();
        assert_eq!(changed, [types::CLUSTER]);
        assert_eq!(round.written[0].resources, 2);

        // Everything removed: the clusters files are written again, empty.
        store.replace_all([]).expect("replace");
        let round = writer.write_changed(&store.snapshot());
        let changed: Vec<&str> = round.written.iter().map(|t| &*t.type_url).collect();
        assert_eq!(changed, [types::CLUSTER]);
        assert_eq!(round.written[0].resources, 0);
        let clusters = fs::read_to_string(out.path().join("clusters.yaml")).expect("read");
        assert!(!clusters.contains("resources"), "{clusters}");
        // No temporary file is left behind.
        assert!(names_in(out.path()).iter().all(|n| !n.starts_with('.')));
    }

    #[test]
    fn a_failed_write_is_reported_and_tried_again() {
        let out = tempfile::tempdir().expect("tempdir");
        let store = store_with(&cluster("a"));
        let mut writer = FileWriter::new(
            out.path().to_path_buf(),
            &[FileFormat::Json],
            Descriptors::envoy().expect("descriptors"),
        )
        .with_settle(Duration::ZERO);
        // A directory where the clusters file should go: the rename fails.
        fs::create_dir(out.path().join("clusters.json")).expect("mkdir");
        fs::write(out.path().join("clusters.json").join("x"), "x").expect("write");
        let round = writer.write_changed(&store.snapshot());
        assert_eq!(round.errors.len(), 1, "{:?}", round.errors);
        let message = format!("{:#}", round.errors[0]);
        assert!(message.contains("clusters.json"), "{message}");
        assert!(names_in(out.path()).iter().all(|n| !n.starts_with('.')));

        fs::remove_dir_all(out.path().join("clusters.json")).expect("rm");
        let round = writer.write_changed(&store.snapshot());
        assert!(round.errors.is_empty());
        let changed: Vec<&str> = round.written.iter().map(|t| &*t.type_url).collect();
        assert_eq!(changed, [types::CLUSTER]);
    }

    #[test]
    fn the_output_must_be_outside_the_resources() {
        let root = tempfile::tempdir().expect("tempdir");
        let resources = root.path().join("resources");
        let inside = resources.join("out");
        let outside = root.path().join("out");
        fs::create_dir_all(&inside).expect("mkdir");
        fs::create_dir_all(&outside).expect("mkdir");
        assert!(check_outside(&outside, &resources).is_ok());
        assert!(check_outside(&inside, &resources).is_err());
        assert!(check_outside(&resources, &resources).is_err());
        // Not created yet, and through `..`.
        assert!(check_outside(&root.path().join("new/deeper"), &resources).is_ok());
        assert!(check_outside(&resources.join("new/deeper"), &resources).is_err());
        assert!(check_outside(&outside.join("../resources/new"), &resources).is_err());
    }
}
