use std::sync::mpsc;
use std::time::Duration;

use xdsd_source::{watch_directory, ParsedResource, SourceError};

use crate::directory::{cluster_yaml, write};
use crate::support::descriptors;

// Generous: the machine may be busy building; only ordering is asserted, never timing.
const WAIT: Duration = Duration::from_secs(10);

type Load = Result<Vec<ParsedResource>, SourceError>;

/// Waits for a reload that satisfies `done`, skipping intermediate states (a write can be seen
/// half-done by one reload and complete by the next).
fn wait_for(rx: &mpsc::Receiver<Load>, what: &str, mut done: impl FnMut(&Load) -> bool) -> Load {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let remaining = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(remaining) {
            Ok(load) if done(&load) => return load,
            Ok(_) => continue,
            Err(_) => panic!("no reload with {what} within {WAIT:?}"),
        }
    }
}

fn names(load: &Load) -> Vec<String> {
    match load {
        Ok(resources) => resources.iter().map(|r| r.name.clone()).collect(),
        Err(_) => Vec::new(),
    }
}

#[test]
fn reports_changes_errors_and_fixes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    write(&dir, "a.yaml", &cluster_yaml("a"));

    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let watch = watch_directory(descriptors(), dir.clone(), move |load| {
        let _ = tx.lock().unwrap().send(load);
    })
    .unwrap();

    write(&dir, "sub/b.yaml", &cluster_yaml("b"));
    let load = wait_for(&rx, "a and b", |l| names(l) == ["a", "b"]);
    assert!(load.is_ok());

    write(
        &dir,
        "broken.yaml",
        "\"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\nname: c\nbogus: 1\n",
    );
    let load = wait_for(&rx, "an error", |l| l.is_err());
    let text = load.unwrap_err().to_string();
    assert!(
        text.contains("broken.yaml") && text.contains("bogus"),
        "{text}"
    );

    write(&dir, "broken.yaml", &cluster_yaml("c"));
    wait_for(&rx, "a, c and b", |l| names(l) == ["a", "c", "b"]).unwrap();

    // Editors that save by writing a temporary file and renaming it over the original.
    write(&dir, ".a.yaml.tmp", &cluster_yaml("a2"));
    std::fs::rename(dir.join(".a.yaml.tmp"), dir.join("a.yaml")).unwrap();
    wait_for(&rx, "a2", |l| names(l) == ["a2", "c", "b"]).unwrap();

    std::fs::remove_dir_all(dir.join("sub")).unwrap();
    wait_for(&rx, "b removed", |l| names(l) == ["a2", "c"]).unwrap();

    drop(watch);
    // After the guard is gone, the callback (and its sender) are dropped too.
    write(&dir, "late.yaml", &cluster_yaml("late"));
    loop {
        match rx.recv_timeout(WAIT) {
            Ok(_) => continue, // a reload already under way when the guard dropped
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => panic!("watch thread still alive after drop"),
        }
    }
}

#[test]
fn a_burst_of_writes_is_one_reload_or_a_few() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let _watch = watch_directory(descriptors(), dir.clone(), move |load| {
        let _ = tx.lock().unwrap().send(load);
    })
    .unwrap();

    for i in 0..20 {
        write(
            &dir,
            &format!("c{i:02}.yaml"),
            &cluster_yaml(&format!("c{i:02}")),
        );
    }
    let load = wait_for(&rx, "all 20", |l| names(l).len() == 20);
    assert!(load.is_ok());
    // No assertion on the number of reloads: coalescing depends on scheduling.
}

#[test]
fn watching_a_missing_directory_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let err = watch_directory(descriptors(), tmp.path().join("missing"), |_| {}).unwrap_err();
    // Said once, as a missing directory (not notify's "No path was found." twice).
    assert!(
        matches!(&err, SourceError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
        "{err:?}"
    );
    assert!(err.to_string().contains("missing"), "{err}");
    assert!(
        err.to_string().ends_with(": the directory does not exist"),
        "{err}"
    );
}

/// Kubernetes updates a ConfigMap volume by writing a new hidden directory and swapping the
/// `..data` symlink; the visible files are symlinks through `..data` and never change.
#[cfg(unix)]
#[test]
fn sees_configmap_style_symlink_swaps() {
    use std::os::unix::fs::symlink;

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    write(&dir, "..v1/c.yaml", &cluster_yaml("v1"));
    symlink("..v1", dir.join("..data")).unwrap();
    symlink("..data/c.yaml", dir.join("c.yaml")).unwrap();
    let initial = xdsd_source::load_directory(&descriptors(), &dir).unwrap();
    assert_eq!(names(&Ok(initial)), ["v1"]);

    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let _watch = watch_directory(descriptors(), dir.clone(), move |load| {
        let _ = tx.lock().unwrap().send(load);
    })
    .unwrap();

    write(&dir, "..v2/c.yaml", &cluster_yaml("v2"));
    symlink("..v2", dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    std::fs::remove_dir_all(dir.join("..v1")).unwrap();
    wait_for(&rx, "v2", |l| names(l) == ["v2"]).unwrap();
}

#[test]
fn the_guard_can_be_dropped_from_the_callback() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let slot = std::sync::Arc::new(std::sync::Mutex::new(None));
    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let in_callback = slot.clone();
    let watch = watch_directory(descriptors(), dir.clone(), move |_| {
        let guard = in_callback.lock().unwrap().take();
        drop(guard);
        let _ = tx.lock().unwrap().send(());
    })
    .unwrap();
    *slot.lock().unwrap() = Some(watch);

    write(&dir, "a.yaml", &cluster_yaml("a"));
    rx.recv_timeout(WAIT).expect("a callback");
    // The thread ends by itself once the callback has dropped the guard.
    loop {
        match rx.recv_timeout(WAIT) {
            Ok(()) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => panic!("watch thread did not stop"),
        }
    }
}

/// With a long quiet time for in-place writes: a rename into place (and a Kubernetes-style
/// symlink swap) is applied long before it would allow, an in-place write only after it.
#[test]
fn an_atomic_rename_is_applied_at_once_and_an_in_place_write_waits_for_quiet() {
    const QUIET: Duration = Duration::from_secs(4);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    write(&dir, "a.yaml", &cluster_yaml("a"));
    // A ConfigMap volume as Kubernetes lays it out, before the watch starts.
    #[cfg(unix)]
    {
        let k8s = dir.join("cm");
        write(&k8s, "..2026_1/c.yaml", &cluster_yaml("c"));
        std::os::unix::fs::symlink("..2026_1", k8s.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/c.yaml", k8s.join("c.yaml")).unwrap();
    }
    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let options = xdsd_source::WatchOptions::default().debounce(QUIET);
    let _watch =
        xdsd_source::watch_directory_with(descriptors(), dir.clone(), options, move |load| {
            let _ = tx.lock().unwrap().send((std::time::Instant::now(), load));
        })
        .unwrap();

    // Written beside, renamed into place: whole when seen.
    write(&dir, ".b.yaml.tmp", &cluster_yaml("b"));
    let renamed = std::time::Instant::now();
    std::fs::rename(dir.join(".b.yaml.tmp"), dir.join("b.yaml")).unwrap();
    let (at, load) = rx.recv_timeout(WAIT).expect("the rename is applied");
    assert_eq!(
        names(&load)
            .iter()
            .filter(|n| *n != "c")
            .collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert!(
        at.duration_since(renamed) < QUIET / 2,
        "applied at once, not after the quiet time: {:?}",
        at.duration_since(renamed)
    );

    // Written in place: it may be half-written, so it waits for quiet.
    let written = std::time::Instant::now();
    write(&dir, "a.yaml", &cluster_yaml("a2"));
    let (at, load) = rx.recv_timeout(WAIT).expect("the write is applied");
    assert_eq!(
        names(&load)
            .iter()
            .filter(|n| *n != "c")
            .collect::<Vec<_>>(),
        ["a2", "b"]
    );
    assert!(
        at.duration_since(written) >= QUIET,
        "an in-place write waits for quiet: applied after {:?}",
        at.duration_since(written)
    );

    // Kubernetes' atomic writer: files under a new `..<timestamp>` directory, then the `..data`
    // symlink swapped by a rename; the visible name is a symlink through `..data`.
    #[cfg(unix)]
    {
        let k8s = dir.join("cm");
        write(&k8s, "..2026_2/c.yaml", &cluster_yaml("c2"));
        std::os::unix::fs::symlink("..2026_2", k8s.join("..data_tmp")).unwrap();
        let swapped = std::time::Instant::now();
        std::fs::rename(k8s.join("..data_tmp"), k8s.join("..data")).unwrap();
        let (at, load) = rx.recv_timeout(WAIT).expect("the swap is applied");
        assert!(
            names(&load).contains(&"c2".to_owned()),
            "{:?}",
            names(&load)
        );
        assert!(
            at.duration_since(swapped) < QUIET / 2,
            "a symlink swap is applied at once: {:?}",
            at.duration_since(swapped)
        );
    }
}

/// A directory deleted and created again, or replaced by a rename, is watched again: its
/// changes keep being picked up.
#[test]
fn a_directory_deleted_and_recreated_or_replaced_is_watched_again() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("resources");
    write(&dir, "a.yaml", &cluster_yaml("a"));
    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let _watch = watch_directory(descriptors(), dir.clone(), move |load| {
        let _ = tx.lock().unwrap().send(load);
    })
    .unwrap();

    // Deleted: reported as an error (the last good state is the caller's to keep).
    std::fs::remove_dir_all(&dir).unwrap();
    let gone = wait_for(&rx, "an error for the missing directory", |l| l.is_err());
    assert!(gone.is_err());
    // Created again: loaded, and its later changes seen.
    write(&dir, "b.yaml", &cluster_yaml("b"));
    wait_for(&rx, "b", |l| names(l) == ["b"]).unwrap();
    write(&dir, "c.yaml", &cluster_yaml("c"));
    wait_for(&rx, "b and c", |l| names(l) == ["b", "c"]).unwrap();

    // Replaced by a rename (a deploy that swaps the whole directory): the new one is watched.
    let next = tmp.path().join("next");
    write(&next, "d.yaml", &cluster_yaml("d"));
    std::fs::rename(&dir, tmp.path().join("old")).unwrap();
    std::fs::rename(&next, &dir).unwrap();
    wait_for(&rx, "d", |l| names(l) == ["d"]).unwrap();
    write(&dir, "e.yaml", &cluster_yaml("e"));
    wait_for(&rx, "d and e", |l| names(l) == ["d", "e"]).unwrap();
}

#[test]
fn a_watch_handed_the_consumers_load_reloads_only_what_changed_since() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    write(&dir, "a.yaml", &cluster_yaml("a"));
    write(&dir, "b.yaml", &cluster_yaml("b"));
    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let options = xdsd_source::WatchOptions::default().cache_from_consumer(true);
    let watch =
        xdsd_source::watch_directory_updates(descriptors(), dir.clone(), options, move |cache| {
            let update = cache.map(|c| {
                let names: Vec<String> = c.changes().names.into_iter().map(|(_, n)| n).collect();
                (c.is_synced(), names, c.resource_count())
            });
            let _ = tx.lock().unwrap().send(update.map_err(|e| e.to_string()));
            true
        })
        .unwrap();
    // The consumer's own load; a change made after the watch started, before the hand-over, is
    // reloaded from it.
    let mut cache = xdsd_source::DirectoryCache::default();
    cache
        .rescan(&descriptors(), &dir, &xdsd_source::Limits::default())
        .unwrap();
    cache.committed();
    write(&dir, ".c.yaml.tmp", &cluster_yaml("c"));
    std::fs::rename(dir.join(".c.yaml.tmp"), dir.join("c.yaml")).unwrap();
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "nothing is reloaded before the consumer's load is handed over"
    );
    watch.start_from(cache);
    let (synced, changed, count) = rx
        .recv_timeout(WAIT)
        .expect("the change made before the hand-over is reloaded")
        .expect("no error");
    assert!(
        synced,
        "the first reload is incremental: the consumer holds the handed load"
    );
    assert_eq!(
        changed,
        ["c"],
        "only what changed since the consumer's load"
    );
    assert_eq!(count, 3);
    write(
        &dir,
        ".a.yaml.tmp",
        &cluster_yaml("a").replace("name: a", "name: a2"),
    );
    std::fs::rename(dir.join(".a.yaml.tmp"), dir.join("a.yaml")).unwrap();
    let (synced, changed, _) = rx.recv_timeout(WAIT).expect("reloaded").expect("no error");
    assert!(synced);
    assert_eq!(changed, ["a", "a2"], "a went away, a2 came");
}

/// Starts a watch of `dir` with the default options; its loads come on the receiver.
fn watch(dir: &std::path::Path) -> (xdsd_source::DirectoryWatch, mpsc::Receiver<Load>) {
    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let watch = watch_directory(descriptors(), dir.to_path_buf(), move |load| {
        let _ = tx.lock().unwrap().send(load);
    })
    .unwrap();
    (watch, rx)
}

/// Waits for a load with exactly `want`, checking every load before it with `allowed`.
fn every_load_until(
    rx: &mpsc::Receiver<Load>,
    want: &[String],
    allowed: impl Fn(&Load) -> bool,
) -> Vec<Vec<String>> {
    let mut seen = Vec::new();
    let _ = wait_for(rx, "the final state", |load| {
        seen.push(names(load));
        assert!(
            allowed(load),
            "a state no client may see (an error: {}); loads so far: {seen:?}",
            load.is_err()
        );
        names(load) == want
    });
    seen
}

/// Removes the files `names` name, as `rm -rf` does on a busy machine or a slow disk (or
/// `rsync --delete`): one by one, a few milliseconds apart.
fn remove_one_by_one(dir: &std::path::Path, names: &[String]) {
    for name in names {
        std::fs::remove_file(dir.join(format!("{name}.yaml"))).unwrap();
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `rm -rf` of the files of a directory, file by file, then the files written again a second
/// later: the removals are settled together, so no load holds some of the files and not others.
#[test]
fn a_directory_emptied_file_by_file_and_refilled_is_never_served_half_empty() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("resources");
    let all: Vec<String> = (0..20).map(|i| format!("c{i:02}")).collect();
    for name in &all {
        write(&dir, &format!("{name}.yaml"), &cluster_yaml(name));
    }
    let (_watch, rx) = watch(&dir);
    remove_one_by_one(&dir, &all);
    // A second later (a branch switch, an unpacked archive).
    std::thread::sleep(Duration::from_secs(1));
    for name in &all {
        write(&dir, &format!("{name}.yaml"), &cluster_yaml(name));
    }
    // All of them, or none: never a part.
    let seen = every_load_until(&rx, &all, |load| {
        let n = names(load).len();
        load.is_err() || n == 0 || n == all.len()
    });
    assert!(!seen.is_empty());
}

/// The same with the directory itself removed (`rm -rf resources/`) and created again.
#[test]
fn a_directory_removed_whole_and_recreated_is_never_served_half_empty() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("resources");
    let all: Vec<String> = (0..20).map(|i| format!("c{i:02}")).collect();
    for name in &all {
        write(&dir, &format!("{name}.yaml"), &cluster_yaml(name));
    }
    let (_watch, rx) = watch(&dir);
    remove_one_by_one(&dir, &all);
    std::fs::remove_dir(&dir).unwrap();
    std::thread::sleep(Duration::from_secs(1));
    for name in &all {
        write(&dir, &format!("{name}.yaml"), &cluster_yaml(name));
    }
    every_load_until(&rx, &all, |load| {
        let n = names(load).len();
        load.is_err() || n == 0 || n == all.len()
    });
}

/// What `git checkout -- file` does: the file unlinked, then created anew and written. The
/// removal and the re-creation are one change: no load is without the file's resource.
#[test]
fn a_file_unlinked_and_created_anew_is_never_served_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("resources");
    write(&dir, "a.yaml", &cluster_yaml("a"));
    write(&dir, "listener.yaml", &cluster_yaml("l0"));
    let (_watch, rx) = watch(&dir);
    for round in 1..=8 {
        std::fs::remove_file(dir.join("listener.yaml")).unwrap();
        let name = format!("l{round}");
        write(&dir, "listener.yaml", &cluster_yaml(&name));
        let want = vec!["a".to_owned(), name];
        every_load_until(&rx, &want, |load| {
            load.as_ref()
                .is_ok_and(|l| l.len() == 2 && l.iter().any(|r| r.name.starts_with('l')))
        });
    }
}

/// The text of a file holding two clusters.
fn two_documents(first: &str, second: &str) -> (String, String) {
    (
        format!("{}---\n", cluster_yaml(first)),
        cluster_yaml(second),
    )
}

/// A writer that writes half of a two-document file, pauses with the file open, then writes the
/// rest and closes it: the file is applied when it is closed, never half.
#[test]
fn an_in_place_write_is_applied_when_its_writer_closes_the_file() {
    use std::io::Write;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("resources");
    let (head, tail) = two_documents("a", "b");
    write(&dir, "both.yaml", &format!("{head}{tail}"));
    let (_watch, rx) = watch(&dir);

    let (head, tail) = two_documents("a2", "b");
    let mut file = std::fs::File::create(dir.join("both.yaml")).unwrap();
    file.write_all(head.as_bytes()).unwrap();
    file.flush().unwrap();
    // A slow writer: a second with half the file written and the file open.
    std::thread::sleep(Duration::from_secs(1));
    file.write_all(tail.as_bytes()).unwrap();
    drop(file);
    let seen = every_load_until(&rx, &["a2".to_owned(), "b".to_owned()], |load| {
        names(load).contains(&"b".to_owned())
    });
    assert!(!seen.is_empty());
}

/// A writer that keeps the file open past [`xdsd_source::OPEN_WRITE_BOUND`] has what it wrote
/// applied then, and the rest when it closes the file.
#[test]
fn a_file_kept_open_is_applied_after_the_bound_and_again_when_closed() {
    use std::io::Write;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("resources");
    write(&dir, "both.yaml", &cluster_yaml("a"));
    let (_watch, rx) = watch(&dir);

    let (head, tail) = two_documents("a2", "b");
    let started = std::time::Instant::now();
    let mut file = std::fs::File::create(dir.join("both.yaml")).unwrap();
    file.write_all(head.as_bytes()).unwrap();
    file.flush().unwrap();
    let load = rx
        .recv_timeout(xdsd_source::OPEN_WRITE_BOUND + WAIT)
        .expect("applied after the bound");
    assert_eq!(names(&load), ["a2"]);
    assert!(
        started.elapsed() >= xdsd_source::OPEN_WRITE_BOUND,
        "applied after {:?}, before the bound",
        started.elapsed()
    );
    file.write_all(tail.as_bytes()).unwrap();
    drop(file);
    wait_for(&rx, "the whole file", |l| names(l) == ["a2", "b"]).unwrap();
}

/// A file that cannot be a resource file, kept open by its writer in the directory (a log, a
/// temporary file), does not hold back a change.
#[test]
fn a_non_resource_file_kept_open_holds_nothing_back() {
    use std::io::Write;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("resources");
    write(&dir, "a.yaml", &cluster_yaml("a"));
    let (_watch, rx) = watch(&dir);
    let mut log = std::fs::File::create(dir.join("notes.log")).unwrap();
    log.write_all(b"written, and kept open\n").unwrap();
    log.flush().unwrap();
    let started = std::time::Instant::now();
    write(tmp.path(), "b.yaml", &cluster_yaml("b"));
    std::fs::rename(tmp.path().join("b.yaml"), dir.join("b.yaml")).unwrap();
    wait_for(&rx, "a and b", |l| names(l) == ["a", "b"]).unwrap();
    assert!(
        started.elapsed() < xdsd_source::OPEN_WRITE_BOUND,
        "held back by the open log: {:?}",
        started.elapsed()
    );
    drop(log);
}

/// A log written line by line in the directory (not a resource file) reloads nothing: the
/// first load is the next real change.
#[test]
fn a_log_written_in_the_directory_reloads_nothing() {
    use std::io::Write;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("resources");
    write(&dir, "a.yaml", &cluster_yaml("a"));
    let mut log = std::fs::File::create(dir.join("xdsd.log")).unwrap();
    let (_watch, rx) = watch(&dir);
    for line in 0..5 {
        writeln!(log, "line {line}").unwrap();
        log.flush().unwrap();
        // Longer than the debounce: each line would be a burst of its own.
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    write(tmp.path(), "b.yaml", &cluster_yaml("b"));
    std::fs::rename(tmp.path().join("b.yaml"), dir.join("b.yaml")).unwrap();
    let next = rx.recv_timeout(WAIT).expect("a load");
    assert_eq!(names(&next), ["a", "b"], "a load before b's");
}

/// A FIFO with a resource file's name (`fifo.yaml`): no writer ever closes it, and it holds
/// nothing to load, so it holds nothing back: a rename of another file is applied at once.
#[cfg(unix)]
#[test]
fn a_fifo_named_like_a_resource_file_holds_nothing_back() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("resources");
    write(&dir, "a.yaml", &cluster_yaml("a"));
    let (_watch, rx) = watch(&dir);
    let made = std::process::Command::new("mkfifo")
        .arg(dir.join("fifo.yaml"))
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    write(tmp.path(), "b.yaml", &cluster_yaml("b"));
    let started = std::time::Instant::now();
    std::fs::rename(tmp.path().join("b.yaml"), dir.join("b.yaml")).unwrap();
    wait_for(&rx, "a and b", |l| names(l) == ["a", "b"]).unwrap();
    assert!(
        started.elapsed() < xdsd_source::OPEN_WRITE_BOUND / 2,
        "held back by the FIFO: {:?}",
        started.elapsed()
    );
}

/// A writer holds `c2.yaml` open half written while `c1.yaml` is renamed into place: the rename
/// is applied at once with `c2.yaml` as it was before its writer opened it (its last good
/// content), never its half; `c2.yaml` is applied whole when its writer closes it.
#[test]
fn a_file_held_open_holds_back_only_itself() {
    use std::io::Write;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("resources");
    write(&dir, "c2.yaml", &cluster_yaml("old"));
    let (_watch, rx) = watch(&dir);
    // A first change, so that the watch has read the directory before the writer opens c2.yaml.
    write(tmp.path(), "c0.yaml", &cluster_yaml("c0"));
    std::fs::rename(tmp.path().join("c0.yaml"), dir.join("c0.yaml")).unwrap();
    wait_for(&rx, "c0", |l| names(l) == ["c0", "old"]).unwrap();

    let (head, tail) = two_documents("half", "rest");
    let mut file = std::fs::File::create(dir.join("c2.yaml")).unwrap();
    file.write_all(head.as_bytes()).unwrap();
    file.flush().unwrap();

    write(tmp.path(), "c1.yaml", &cluster_yaml("c1"));
    let renamed = std::time::Instant::now();
    std::fs::rename(tmp.path().join("c1.yaml"), dir.join("c1.yaml")).unwrap();
    let load = rx.recv_timeout(WAIT).expect("the rename is applied");
    assert_eq!(
        names(&load),
        ["c0", "c1", "old"],
        "c1 with c2.yaml's last good content"
    );
    assert!(
        renamed.elapsed() < xdsd_source::OPEN_WRITE_BOUND / 2,
        "the rename waited for the open file: {:?}",
        renamed.elapsed()
    );

    file.write_all(tail.as_bytes()).unwrap();
    drop(file);
    let load = rx
        .recv_timeout(WAIT)
        .expect("c2.yaml is applied once closed");
    assert_eq!(names(&load), ["c0", "c1", "half", "rest"]);
}

/// `sed -i` writes a temporary file beside the one it edits and renames it over it: one edit,
/// one reload. After each edit the next load is the next change's, not a second one for the
/// edit (the rename's events come in two parts that a reload must not split).
#[cfg(unix)]
#[test]
fn an_edit_with_sed_in_place_is_one_reload() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("resources");
    write(&dir, "a.yaml", &cluster_yaml("a0"));
    let (_watch, rx) = watch(&dir);
    for round in 1..=10 {
        let sed = std::process::Command::new("sed")
            .args(["-i", &format!("s/name: a{}/name: a{round}/", round - 1)])
            .arg(dir.join("a.yaml"))
            .status()
            .expect("sed runs");
        assert!(sed.success());
        let edited = format!("a{round}");
        let mut want = vec![edited.clone()];
        if round > 1 {
            want.push(format!("m{}", round - 1));
        }
        let load = rx.recv_timeout(WAIT).expect("the edit is applied");
        assert_eq!(names(&load), want, "round {round}");
        // The next change: the next load is its own, not a second one for sed's edit.
        let marker = format!("m{round}");
        write(tmp.path(), "m.yaml", &cluster_yaml(&marker));
        std::fs::rename(tmp.path().join("m.yaml"), dir.join("m.yaml")).unwrap();
        let next = rx.recv_timeout(WAIT).expect("a load");
        assert_eq!(
            names(&next),
            [edited.as_str(), marker.as_str()],
            "round {round}: a second load for the edit"
        );
    }
}
