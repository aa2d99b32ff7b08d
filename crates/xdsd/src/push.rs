//! `xdsd push`: check a resource directory as `serve` would load it, then make an etcd prefix
//! hold exactly its files, in one transaction guarded by the revision read.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Component, Path};
use std::process::ExitCode;

use bytes::Bytes;
use xdsd_etcd::{Etcd, EtcdError, EtcdOptions, PushNote, MAX_AUTHOR_BYTES, MAX_MESSAGE_BYTES};
use xdsd_source::Descriptors;

use crate::etcd_args::EtcdArgs;
use crate::history::default_author;
use crate::offline::{descriptors, finish, load, resources_dir, usage, Failure, INVALID};
use crate::SourceArgs;

#[derive(clap::Args, Debug)]
pub(crate) struct PushArgs {
    #[command(flatten)]
    source: SourceArgs,

    #[command(flatten)]
    etcd: EtcdArgs,

    /// Print what would be put and deleted; write nothing.
    #[arg(long, conflicts_with = "confirm")]
    dry_run: bool,

    /// Print what would be put and deleted, then ask: write only if standard input answers y or
    /// yes (anything else writes nothing and exits 1). The write is still guarded by the
    /// revision read before the question: a change made by anyone meanwhile makes it a conflict.
    #[arg(long)]
    confirm: bool,

    #[command(flatten)]
    record: RecordArgs,
}

/// Who pushes and why, recorded with the push for `xdsd history`.
#[derive(clap::Args, Debug)]
pub(crate) struct RecordArgs {
    /// Why: recorded with the push (at most 4096 bytes) and shown by `xdsd history`.
    #[arg(long, value_name = "TEXT", env = "XDSD_PUSH_MESSAGE")]
    pub(crate) message: Option<String>,

    /// Who: recorded with the push (at most 256 bytes); by default $USER@hostname (the system's
    /// user name when USER and LOGNAME are unset).
    #[arg(long, value_name = "NAME", env = "XDSD_PUSH_AUTHOR")]
    pub(crate) author: Option<String>,
}

impl RecordArgs {
    /// The note of a push, without its names yet.
    pub(crate) fn note(&self, rollback_to: Option<i64>) -> PushNote {
        PushNote {
            author: self.author.clone().unwrap_or_else(default_author),
            message: self.message.clone().unwrap_or_default(),
            rollback_to,
            ..PushNote::default()
        }
    }
}

/// `xdsd push`.
pub(crate) fn push(args: PushArgs) -> ExitCode {
    finish("push", run(&args))
}

fn invalid(message: impl Into<String>) -> Failure {
    Failure {
        status: INVALID,
        message: message.into(),
    }
}

fn run(args: &PushArgs) -> Result<(), Failure> {
    let max = args.source.rules.max_file_bytes;
    let options = args.etcd.options(max).map_err(usage)?;
    let note = args.record.note(None);
    check_note(&note)?;
    let dir = resources_dir(&args.source)?;
    // The bytes pushed are the bytes checked: read before and after the check, compared.
    let before = read_files(dir, max)?;
    let descriptors = descriptors()?;
    load(&args.source, &descriptors)?;
    let after = read_files(dir, max)?;
    if before != after {
        return Err(invalid(format!(
            "{}: changed while it was being checked; nothing was pushed (run it again)",
            dir.display()
        )));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| invalid(format!("cannot start the async runtime: {e}")))?;
    let how = How {
        dry_run: args.dry_run,
        confirm: args.confirm,
        what: "the directory",
    };
    runtime
        .block_on(write(&options, &descriptors, before, &how, note))
        .map(|_| ())
}

/// A message or author over its limit: a usage error, before anything is read.
pub(crate) fn check_note(note: &PushNote) -> Result<(), Failure> {
    for (flag, text, max) in [
        ("--message", &note.message, MAX_MESSAGE_BYTES),
        ("--author", &note.author, MAX_AUTHOR_BYTES),
    ] {
        if text.len() > max {
            return Err(usage(format!(
                "{flag} is {} bytes, over the limit of {max} bytes",
                text.len()
            )));
        }
    }
    Ok(())
}

/// Every resource file of `dir` as key suffix (its relative path, '/'-separated) → bytes. A
/// file over `max` bytes is read only up to the limit: the check refuses it.
fn read_files(dir: &Path, max: usize) -> Result<BTreeMap<String, Bytes>, Failure> {
    let files = xdsd_source::resource_files(dir).map_err(|e| invalid(e.to_string()))?;
    let mut out = BTreeMap::new();
    for path in files {
        let key = key_of(dir, &path)?;
        let mut bytes = Vec::new();
        std::fs::File::open(&path)
            .and_then(|file| {
                file.take(max.saturating_add(1) as u64)
                    .read_to_end(&mut bytes)
            })
            .map_err(|e| invalid(format!("{}: {e}", path.display())))?;
        out.insert(key, Bytes::from(bytes));
    }
    Ok(out)
}

/// The key suffix of `path` under `dir`: its relative path with '/' separators.
fn key_of(dir: &Path, path: &Path) -> Result<String, Failure> {
    let relative = path.strip_prefix(dir).unwrap_or(path);
    let mut parts = Vec::new();
    for component in relative.components() {
        match component {
            Component::Normal(part) => match part.to_str() {
                Some(part) => parts.push(part),
                None => {
                    return Err(invalid(format!(
                        "{}: the path is not UTF-8, so it cannot be an etcd key",
                        path.display()
                    )))
                }
            },
            _ => {
                return Err(invalid(format!(
                    "{}: not a path under {}",
                    path.display(),
                    dir.display()
                )))
            }
        }
    }
    Ok(parts.join("/"))
}

pub(crate) fn etcd_failure(e: EtcdError) -> Failure {
    let message = match e {
        EtcdError::Conflict { .. } => format!(
            "{e}. Another push (or another writer of the prefix) got there first; run the push \
             again to make the prefix hold this directory"
        ),
        e => format!("{e}; nothing was written"),
    };
    invalid(message)
}

/// How a push writes: `--dry-run`, `--confirm`, and what the prefix is made to hold (for the
/// messages).
pub(crate) struct How {
    pub(crate) dry_run: bool,
    pub(crate) confirm: bool,
    pub(crate) what: &'static str,
}

/// Makes the prefix hold exactly `desired` (read, compare, print, ask, write), `note` recorded
/// with the names it adds, changes and removes. Returns the revision written, if any.
pub(crate) async fn write(
    options: &EtcdOptions,
    descriptors: &Descriptors,
    desired: BTreeMap<String, Bytes>,
    how: &How,
    mut note: PushNote,
) -> Result<Option<i64>, Failure> {
    let (dry_run, confirm) = (how.dry_run, how.confirm);
    let prefix = options.prefix();
    let etcd = Etcd::connect(options).await.map_err(etcd_failure)?;
    let current = etcd.read().await.map_err(etcd_failure)?;
    let names = crate::diff::note_names(descriptors, prefix, &current.entries, &desired);
    (note.added, note.changed, note.removed) = (names.added, names.changed, names.removed);
    let plan = etcd.plan_push_on(&current, desired).map_err(etcd_failure)?;
    let would = if dry_run { "would " } else { "" };
    for (key, _) in &plan.puts {
        println!("{would}put {prefix}{key}");
    }
    for key in &plan.deletes {
        println!("{would}delete {prefix}{key}");
    }
    let counts = format!(
        "{} put, {} deleted, {} unchanged",
        plan.puts.len(),
        plan.deletes.len(),
        plan.unchanged
    );
    if dry_run {
        println!(
            "dry run: {counts} under {prefix} (read at etcd revision {}); nothing written",
            plan.revision
        );
        return Ok(None);
    }
    if plan.is_empty() {
        println!(
            "nothing to do: {prefix} already holds {} ({} keys, etcd revision {})",
            how.what, plan.unchanged, plan.revision
        );
        return Ok(None);
    }
    if confirm && !confirmed(&counts, prefix) {
        return Err(invalid("not confirmed: nothing was written"));
    }
    let revision = etcd
        .apply_push_noted(&plan, &note)
        .await
        .map_err(etcd_failure)?;
    println!(
        "pushed: {counts} under {prefix}, at etcd revision {revision} (resources: +{} ~{} -{})",
        note.added.count, note.changed.count, note.removed.count
    );
    Ok(Some(revision))
}

/// Asks on stdout, answers from stdin: y or yes.
fn confirmed(counts: &str, prefix: &str) -> bool {
    use std::io::Write as _;
    print!("write {counts} under {prefix}? [y/N] ");
    let _ = std::io::stdout().flush();
    let mut answer = String::new();
    // At most a line's worth: the answer is a word.
    match std::io::BufRead::read_line(&mut std::io::stdin().lock().take(256), &mut answer) {
        Ok(_) => matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes"),
        Err(_) => false,
    }
}
