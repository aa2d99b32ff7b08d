//! Bursts of watch events settled per file: whether what a burst names is whole (applied at
//! once) or may still be written (held until its writer closes it, or for
//! [`super::OPEN_WRITE_BOUND`]), and which events count at all.

use std::path::{Path, PathBuf};
use std::time::Instant;

use notify::event::{AccessKind, AccessMode, MetadataKind, ModifyKind};
use notify::{Event, EventKind};

use super::{CLOSE_REPORTED, OPEN_WRITE_BOUND};
/// The most paths a burst keeps: past it, the whole tree is listed.
const MAX_BURST_PATHS: usize = 262_144;

/// What a burst of events changed: whether it is complete (applied at once) or may still be
/// written (applied once its files are closed and the directory is quiet).
#[derive(Debug, Default)]
pub(super) struct Burst {
    /// Files written in place and not (yet) renamed elsewhere: possibly half-written.
    writing: std::collections::HashMap<PathBuf, Writing>,
    /// Resource paths removed (or renamed away): more removals, or the file created anew, may
    /// follow.
    removed: bool,
    /// A rename into place, or another change that is whole when seen.
    whole: bool,
    /// Something that cannot be told complete (a rescan, an unknown event).
    pub(super) unknown: bool,
    /// The watched directory itself was removed or renamed away.
    pub(super) root_gone: bool,
    /// The paths the events name (at most [`MAX_BURST_PATHS`]).
    pub(super) paths: std::collections::HashSet<PathBuf>,
    /// Events were missed, or cannot be told by their paths: the whole tree is listed.
    pub(super) rescan: bool,
    /// The renames seen renamed away from the directory (their trackers): their arrival, seen
    /// within it, is followed by the rename's own event, which the burst waits for.
    renamed_from: std::collections::HashSet<usize>,
    /// When the burst first had something to apply besides the files held open.
    pub(super) started: Option<Instant>,
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

    pub(super) fn add(&mut self, event: &notify::Result<Event>, dir: &Path) {
        self.add_event(event, dir);
        self.mark_started();
    }

    /// Starts the burst's clock once it has something to apply.
    pub(super) fn mark_started(&mut self) {
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
    pub(super) fn complete(&self) -> bool {
        self.whole
            && self.renamed_from.is_empty()
            && self.writing.len() == self.open_count
            && !self.removed
            && !self.unknown
    }

    /// Something to read besides the files held open.
    pub(super) fn pending(&self) -> bool {
        self.rescan || self.unknown || self.paths.len() > self.open_count
    }

    /// A file written in place may still be open for writing.
    pub(super) fn open(&self) -> bool {
        self.open_count > 0
    }

    /// The files held open.
    pub(super) fn open_paths(&self) -> std::collections::HashSet<PathBuf> {
        self.writing
            .iter()
            .filter(|(_, w)| matches!(w, Writing::Open(_)))
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// When the first file held open reaches [`OPEN_WRITE_BOUND`] (or a little earlier).
    pub(super) fn next_bound(&self) -> Option<Instant> {
        if self.open_count == 0 {
            return None;
        }
        self.earliest.map(|e| e + OPEN_WRITE_BOUND)
    }

    /// The files held open past [`OPEN_WRITE_BOUND`] at `now` are read as they are. Looks at the
    /// files only when the earliest may have reached it.
    pub(super) fn expire(&mut self, now: Instant) {
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
    pub(super) fn holding_on(&self) -> Burst {
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
    pub(super) fn overlaps(&self, later: &Burst) -> bool {
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

pub(super) fn is_relevant(event: &notify::Result<Event>) -> bool {
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
