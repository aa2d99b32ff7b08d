//! Incremental reloads (`DirectoryCache`): after any sequence of file writes, rewrites of the
//! same bytes, renames, deletions and edits that break a file or duplicate a name, a load that
//! reuses what it parsed before gives exactly what a full load of the directory gives — the same
//! resources in the same order, or the same errors. Randomized (proptest; `XDSD_FUZZ_CASES`).

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use xdsd_source::{load_directory_with, DirectoryCache, Limits, ParsedResource};

const FILES: [&str; 6] = [
    "a.yaml",
    "b.yaml",
    "c.json",
    "sub/d.yaml",
    "sub/e.yml",
    "sub/deep/f.yaml",
];

/// Makes every written file a different size, so that even a write within one tick of the file
/// clock changes its stamp (the cache under test trusts stamps at once: no racy window).
static PADDING: AtomicUsize = AtomicUsize::new(0);

fn content(kind: u8, name: u8, path: &str) -> String {
    let pad = "p".repeat(PADDING.fetch_add(1, Ordering::Relaxed) % 4096);
    let json = path.ends_with(".json");
    match (kind, json) {
        (0, false) => format!(
            "# {pad}\n\"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\nname: c{name}\ntype: STATIC\nconnect_timeout: 1s\n"
        ),
        (0, true) => format!(
            "{{\"@type\": \"type.googleapis.com/envoy.config.cluster.v3.Cluster\", \"name\": \"c{name}\", \"connect_timeout\": \"1s\", \"alt_stat_name\": \"{pad}\"}}"
        ),
        (1, false) => format!(
            "# {pad}\n\"@type\": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment\ncluster_name: c{name}\n---\n\"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\nname: x{name}\nconnect_timeout: 2s\n"
        ),
        (1, true) => format!(
            "{{\"@type\": \"type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment\", \"cluster_name\": \"c{name}\", \"policy\": {{\"overprovisioning_factor\": {}}}}}",
            100 + pad.len()
        ),
        // A field that does not exist.
        (2, false) => format!(
            "# {pad}\n\"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\nname: c{name}\nno_such_field: 1\n"
        ),
        // Not YAML (nor JSON).
        _ => format!("{{{{ [ {pad}"),
    }
}

#[derive(Debug, Clone)]
enum Op {
    Write {
        file: usize,
        kind: u8,
        name: u8,
    },
    /// The same bytes written again: a new modification time, the same content.
    Rewrite {
        file: usize,
    },
    Rename {
        from: usize,
        to: usize,
    },
    Delete {
        file: usize,
    },
    /// `sub` (and all in it) renamed to one of [`DIRS`].
    RenameDir {
        to: usize,
    },
    DeleteDir,
    /// Let the clock move on, so that stamps are older than the writes that follow.
    Wait,
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            5 => (0..FILES.len(), 0..4u8, 0..3u8).prop_map(|(file, kind, name)| Op::Write { file, kind, name }),
            2 => (0..FILES.len()).prop_map(|file| Op::Rewrite { file }),
            2 => (0..FILES.len(), 0..FILES.len()).prop_map(|(from, to)| Op::Rename { from, to }),
            2 => (0..FILES.len()).prop_map(|file| Op::Delete { file }),
            1 => Just(Op::Wait),
        ],
        1..24,
    )
}

fn apply(dir: &Path, op: &Op) {
    let path = |i: usize| dir.join(FILES[i]);
    match op {
        Op::Write { file, kind, name } => {
            let p = path(*file);
            std::fs::create_dir_all(p.parent().expect("a parent")).expect("mkdir");
            std::fs::write(&p, content(*kind, *name, FILES[*file])).expect("written");
        }
        Op::Rewrite { file } => {
            if let Ok(bytes) = std::fs::read(path(*file)) {
                std::fs::write(path(*file), bytes).expect("rewritten");
            }
        }
        Op::Rename { from, to } => {
            if path(*from).exists() {
                std::fs::create_dir_all(path(*to).parent().expect("a parent")).expect("mkdir");
                std::fs::rename(path(*from), path(*to)).expect("renamed");
            }
        }
        Op::Delete { file } => {
            let _ = std::fs::remove_file(path(*file));
        }
        Op::RenameDir { to } => {
            let target = dir.join(DIRS[*to]);
            let _ = std::fs::remove_dir_all(&target);
            let _ = std::fs::rename(dir.join("sub"), target);
        }
        Op::DeleteDir => {
            let _ = std::fs::remove_dir_all(dir.join("sub"));
        }
        Op::Wait => std::thread::sleep(Duration::from_millis(15)),
    }
}

/// A temporary directory, and what a load of it needs, with an empty cache that trusts file
/// stamps at once.
struct Setup {
    tmp: tempfile::TempDir,
    descriptors: xdsd_source::Descriptors,
    limits: Limits,
    cache: DirectoryCache,
}

fn setup() -> Setup {
    Setup {
        tmp: tempfile::tempdir().expect("a temporary directory"),
        descriptors: crate::support::descriptors(),
        limits: Limits::default(),
        cache: DirectoryCache::with_racy_window(Duration::ZERO),
    }
}

/// Resources by (type URL, name), each name's in order: what a consumer holds.
type ByKey = std::collections::BTreeMap<(String, String), Vec<ParsedResource>>;

fn by_key(resources: impl IntoIterator<Item = ParsedResource>) -> ByKey {
    let mut out = ByKey::default();
    for r in resources {
        out.entry((r.type_url.clone(), r.name.clone()))
            .or_default()
            .push(r);
    }
    out
}

/// After `op`, the incremental and the full load both failed, alike (when both succeed, each
/// test compares what it compares).
fn same_errors<T, U>(
    incremental: &Result<T, xdsd_source::SourceError>,
    full: &Result<U, xdsd_source::SourceError>,
    op: &Op,
) -> Result<(), TestCaseError> {
    match (incremental, full) {
        (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string(), "after {:?}", op),
        _ => prop_assert!(
            false,
            "after {:?}: incremental {:?}, full {:?}",
            op,
            incremental.is_ok(),
            full.is_ok()
        ),
    }
    Ok(())
}

fn config() -> ProptestConfig {
    let cases = std::env::var("XDSD_FUZZ_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(64);
    ProptestConfig {
        cases,
        max_shrink_iters: 128,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn an_incremental_reload_ends_in_the_state_a_full_reload_gives(ops in ops()) {
        let Setup { tmp, descriptors, limits, mut cache } = setup();
        let dir = tmp.path();
        for op in &ops {
            apply(dir, op);
            let incremental = cache.load(&descriptors, dir, &limits);
            let full = load_directory_with(&descriptors, dir, &limits);
            match (&incremental, &full) {
                (Ok(a), Ok(b)) => prop_assert_eq!(a, b, "after {:?}", op),
                _ => same_errors(&incremental, &full, op)?,
            }
        }
    }
}

#[test]
fn only_the_files_that_changed_are_read_and_parsed() {
    let Setup {
        tmp,
        descriptors,
        limits,
        mut cache,
    } = setup();
    let dir = tmp.path();
    for (i, file) in ["a.yaml", "b.yaml", "c.yaml"].iter().enumerate() {
        std::fs::write(dir.join(file), content(0, i as u8, file)).expect("written");
    }
    let first = cache.load(&descriptors, dir, &limits).expect("loads");
    assert_eq!(cache.last_load(), (3, 3));
    assert_eq!(
        cache.load(&descriptors, dir, &limits).expect("loads"),
        first
    );
    assert_eq!(cache.last_load(), (0, 0), "nothing changed: nothing read");
    // The same bytes again: read (its stamp changed) and hashed, not parsed.
    let bytes = std::fs::read(dir.join("b.yaml")).expect("read");
    std::fs::write(dir.join("b.yaml"), bytes).expect("rewritten");
    assert_eq!(
        cache.load(&descriptors, dir, &limits).expect("loads"),
        first
    );
    assert_eq!(cache.last_load(), (1, 0));
    // One file broken: only it is parsed, and the error names it alone.
    std::fs::write(dir.join("b.yaml"), content(3, 0, "b.yaml")).expect("written");
    let error = cache
        .load(&descriptors, dir, &limits)
        .expect_err("b.yaml is broken");
    assert_eq!(cache.last_load(), (1, 1));
    assert!(error.to_string().contains("b.yaml"), "{error}");
    assert!(!error.to_string().contains("a.yaml"), "{error}");
    // Fixed, and a file renamed: each read and parsed once; the rest reused.
    std::fs::write(dir.join("b.yaml"), content(0, 1, "b.yaml")).expect("written");
    std::fs::rename(dir.join("c.yaml"), dir.join("d.yaml")).expect("renamed");
    cache.load(&descriptors, dir, &limits).expect("loads");
    assert_eq!(cache.last_load(), (2, 2));
    assert_eq!(cache.len(), 3);
}

/// The paths a watcher's events name for an operation: the file (or the directory created for
/// it), both ends of a rename, the file or directory deleted.
fn touched(dir: &Path, op: &Op, existed: &dyn Fn(&Path) -> bool) -> Vec<std::path::PathBuf> {
    let path = |i: usize| dir.join(FILES[i]);
    // The topmost directory of `p` that did not exist, else `p`.
    let created = |p: std::path::PathBuf| {
        let mut top = p.clone();
        for a in p.ancestors().skip(1) {
            if a == dir || existed(a) {
                break;
            }
            top = a.to_path_buf();
        }
        top
    };
    match op {
        Op::Write { file, .. } | Op::Rewrite { file } => vec![created(path(*file))],
        Op::Rename { from, to } => vec![path(*from), created(path(*to))],
        Op::Delete { file } => vec![path(*file)],
        Op::RenameDir { to } => vec![dir.join("sub"), dir.join(DIRS[*to])],
        Op::DeleteDir => vec![dir.join("sub")],
        Op::Wait => Vec::new(),
    }
}

proptest! {
    #![proptest_config(config())]

    /// The watcher's way: only the paths the events name are looked at, and the consumer
    /// applies only the names that changed; both end where a full load does.
    #[test]
    fn an_event_driven_reload_ends_in_the_state_a_full_reload_gives(ops in ops_with_dirs()) {
        let Setup { tmp, descriptors, limits, mut cache } = setup();
        let dir = tmp.path();
        cache.rescan(&descriptors, dir, &limits).expect("an empty directory loads");
        // What a consumer holds: every resource by (type URL, name), from the last commit.
        let mut held = ByKey::default();
        for op in &ops {
            let before: std::collections::HashSet<std::path::PathBuf> = walkdirs(dir);
            apply(dir, op);
            let paths = touched(dir, op, &|p: &Path| before.contains(p));
            let incremental = cache.reload_paths(&descriptors, dir, &limits, &paths);
            let full = load_directory_with(&descriptors, dir, &limits);
            match (&incremental, &full) {
                (Ok(()), Ok(b)) => {
                    prop_assert_eq!(&cache.resources(), b, "after {:?}", op);
                    if cache.is_synced() {
                        let changes = cache.changes();
                        for name in &changes.names {
                            held.remove(name);
                        }
                        // Every resource of a changed name comes with the changes.
                        held.extend(by_key(changes.resources));
                    } else {
                        held = by_key(cache.resources());
                    }
                    cache.committed();
                    prop_assert_eq!(&held, &by_key(b.iter().cloned()), "after {:?}", op);
                }
                _ => same_errors(&incremental, &full, op)?,
            }
        }
    }
}

/// Every directory under `dir`.
fn walkdirs(dir: &Path) -> std::collections::HashSet<std::path::PathBuf> {
    let mut out = std::collections::HashSet::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.insert(e.path());
                pending.push(e.path());
            }
        }
    }
    out
}

/// Where the `sub` directory may be renamed to: a visible name, or a hidden one (not loaded).
const DIRS: [&str; 2] = ["moved", ".hidden"];

fn ops_with_dirs() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            5 => (0..FILES.len(), 0..4u8, 0..3u8).prop_map(|(file, kind, name)| Op::Write { file, kind, name }),
            2 => (0..FILES.len()).prop_map(|file| Op::Rewrite { file }),
            2 => (0..FILES.len(), 0..FILES.len()).prop_map(|(from, to)| Op::Rename { from, to }),
            2 => (0..FILES.len()).prop_map(|file| Op::Delete { file }),
            1 => (0..DIRS.len()).prop_map(|to| Op::RenameDir { to }),
            1 => Just(Op::DeleteDir),
            1 => Just(Op::Wait),
        ],
        1..24,
    )
}

#[test]
fn a_change_no_event_names_is_found_by_a_rescan() {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let dir = tmp.path();
    let descriptors = crate::support::descriptors();
    let limits = Limits::default();
    std::fs::write(dir.join("a.yaml"), content(0, 1, "a.yaml")).expect("written");
    let mut cache = DirectoryCache::with_racy_window(Duration::ZERO);
    cache.rescan(&descriptors, dir, &limits).expect("loads");
    cache.committed();
    // Events were missed: a file appeared that no path names.
    std::fs::write(dir.join("b.yaml"), content(0, 2, "b.yaml")).expect("written");
    cache
        .reload_paths(&descriptors, dir, &limits, &[dir.join("a.yaml")])
        .expect("loads");
    assert_eq!(
        cache.resources().len(),
        1,
        "only the named paths are looked at"
    );
    // What the watcher does after a missed-events signal (a Rescan flag, an overflow, an error).
    cache.rescan(&descriptors, dir, &limits).expect("loads");
    assert_eq!(
        cache.resources(),
        load_directory_with(&descriptors, dir, &limits).expect("loads")
    );
    assert_eq!(
        cache.changes().names,
        [(
            "type.googleapis.com/envoy.config.cluster.v3.Cluster".to_owned(),
            "c2".to_owned()
        )]
    );
}
