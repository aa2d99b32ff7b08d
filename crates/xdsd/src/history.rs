//! `xdsd history`: the changes of an etcd prefix as etcd keeps them, newest first — revision,
//! time, author, message, `+added ~changed -removed`, and the gated-rollout state each reached —
//! and the same rows as JSON ([`rows`], for `--output json` and the admin API's `GET /history`).

use std::process::ExitCode;

use serde_json::{json, Value};
use xdsd_etcd::{Change, Etcd, EtcdError, History, Names};

use crate::etcd_args::EtcdArgs;
use crate::offline::{finish, usage, Failure, INVALID, USAGE};

/// How many changes `history` lists without `--limit`.
pub(crate) const DEFAULT_LIMIT: u64 = 20;

#[derive(clap::Args, Debug)]
pub(crate) struct HistoryArgs {
    /// List at most N changes (the newest).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_LIMIT,
          value_parser = clap::value_parser!(u64).range(1..=xdsd_etcd::MAX_HISTORY as u64))]
    limit: u64,

    /// text: one line per change; json: one array of objects (the rows of the admin API's
    /// GET /history).
    #[arg(long, value_name = "FORMAT", default_value = "text")]
    output: Output,

    #[command(flatten)]
    etcd: EtcdArgs,

    /// A resource directory has no history of its own: keep it in git and use `git log`.
    #[arg(long, value_name = "DIR", env = "XDSD_RESOURCES", hide_env = true)]
    resources: Option<std::path::PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Output {
    Text,
    Json,
}

/// `xdsd history`.
pub(crate) fn history(args: HistoryArgs) -> ExitCode {
    finish("history", run(&args))
}

fn run(args: &HistoryArgs) -> Result<(), Failure> {
    if args.resources.is_some() && !args.etcd.given() {
        return Err(directory_has_no_history("history"));
    }
    let options = args
        .etcd
        .options(xdsd_etcd::DEFAULT_MAX_VALUE_BYTES)
        .map_err(usage)?;
    let limit = usize::try_from(args.limit).unwrap_or(xdsd_etcd::MAX_HISTORY);
    runtime()?.block_on(async {
        let etcd = Etcd::connect(&options).await.map_err(etcd_failure)?;
        match args.output {
            Output::Json => {
                let rows = rows(&etcd, limit).await.map_err(etcd_failure)?;
                write_out(&format!("{rows:#}\n"));
            }
            Output::Text => {
                let history = etcd.history(limit).await.map_err(etcd_failure)?;
                write_out(&text(&history, limit, options.prefix()));
            }
        }
        Ok(())
    })
}

/// The history of the prefix of `etcd` as JSON rows, newest first, at most `limit`: what
/// `history --output json` prints, for the admin API's `GET /history`.
pub(crate) async fn rows(etcd: &Etcd, limit: usize) -> Result<Value, EtcdError> {
    let history = etcd.history(limit).await?;
    Ok(Value::Array(json_rows(&history)))
}

fn names_json(names: &Names) -> Value {
    json!({"count": names.count, "first": names.first})
}

fn json_rows(history: &History) -> Vec<Value> {
    history
        .changes
        .iter()
        .map(|change| {
            let (added, changed, removed) = counts(change);
            let mut row = json!({
                "revision": change.revision,
                "kind": kind(change),
                "added": names_json(added),
                "changed": names_json(changed),
                "removed": names_json(removed),
                "keys": change.keys.total(),
                "rollout": change.rollout,
            });
            if let Some(push) = &change.push {
                row["unix_ms"] = json!(push.unix_ms);
                row["author"] = json!(push.note.author);
                row["message"] = json!(push.note.message);
                row["read_revision"] = json!(push.read_revision);
                if let Some(to) = push.note.rollback_to {
                    row["rollback_to"] = json!(to);
                }
            }
            row
        })
        .collect()
}

/// `push`, `rollback` or `direct write`.
fn kind(change: &Change) -> &'static str {
    match &change.push {
        None => "direct write",
        Some(push) if push.note.rollback_to.is_some() => "rollback",
        Some(_) => "push",
    }
}

/// What a row counts: the resource names a push noted, else the keys written.
fn counts(change: &Change) -> (&Names, &Names, &Names) {
    match &change.push {
        Some(push) if push.noted => (&push.note.added, &push.note.changed, &push.note.removed),
        _ => (
            &change.keys.added,
            &change.keys.changed,
            &change.keys.removed,
        ),
    }
}

/// The history as a table: a header, then one row per change, newest first. The message is
/// the last column (its width varies most), then the rollout state when any change has one.
fn text(history: &History, limit: usize, prefix: &str) -> String {
    let mut out = String::new();
    if history.changes.is_empty() {
        out.push_str(&format!(
            "no change of {prefix} in etcd's history (revisions {} to {})\n",
            history.oldest, history.current
        ));
    }
    let rollouts = history.changes.iter().any(|c| c.rollout.is_some());
    let mut header: Vec<String> = ["REVISION", "TIME (UTC)", "AUTHOR", "CHANGES", "MESSAGE"]
        .map(String::from)
        .into();
    if rollouts {
        header.push("ROLLOUT".into());
    }
    let mut rows = vec![header];
    for change in &history.changes {
        let (added, changed, removed) = counts(change);
        let time = change
            .push
            .as_ref()
            .filter(|p| p.unix_ms > 0)
            .map(|p| crate::utc::seconds_of_unix_ms(p.unix_ms))
            .unwrap_or_else(|| "-".into());
        let (author, message) = match &change.push {
            None => {
                let keys: Vec<&str> = [added, changed, removed]
                    .iter()
                    .flat_map(|n| n.first.iter().map(String::as_str))
                    .collect();
                (
                    "-".to_string(),
                    format!("direct write: {}", keys.join(", ")),
                )
            }
            Some(push) => {
                let author = if push.note.author.is_empty() {
                    "-".to_string()
                } else {
                    first_line(&push.note.author).to_string()
                };
                let message = match (push.note.rollback_to, push.note.message.as_str()) {
                    (Some(to), "") => format!("rollback to {to}"),
                    (Some(to), m) => format!("rollback to {to}: {}", first_line(m)),
                    (None, m) => first_line(m).to_string(),
                };
                (author, message)
            }
        };
        let mut row = vec![
            change.revision.to_string(),
            time,
            author,
            format!("+{} ~{} -{}", added.count, changed.count, removed.count),
            message,
        ];
        if rollouts {
            row.push(change.rollout.map(|s| s.to_string()).unwrap_or_default());
        }
        rows.push(row);
    }
    if !history.changes.is_empty() {
        out.push_str(&table(&rows));
    }
    if !history.more && history.changes.len() < limit && history.oldest > 1 {
        out.push_str(&format!(
            "(etcd compacted the history before revision {}: older changes are gone; see \
             docs/etcd.md to keep more)\n",
            history.oldest
        ));
    }
    out
}

/// `rows` as aligned columns two spaces apart, the first right-aligned (a number), each line
/// without trailing spaces.
fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (cell, &width))| {
                if i == 0 {
                    format!("{cell:>width$}")
                } else {
                    format!("{cell:<width$}")
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}

/// Writes `text` to standard output; a reader that went away (`xdsd history | head`) is no
/// error.
pub(crate) fn write_out(text: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// `history`, `diff` and `rollback` on a directory: exit 2, saying to use git.
pub(crate) fn directory_has_no_history(command: &str) -> Failure {
    let git = match command {
        "history" => "git log",
        "diff" => "git diff",
        _ => "git revert",
    };
    Failure {
        status: USAGE,
        message: format!(
            "a resource directory (--resources) has no history of its own: keep the directory in \
             git and use `{git}`; `xdsd {command}` reads the history of an etcd prefix \
             (--etcd-endpoints, --etcd-prefix)"
        ),
    }
}

/// An etcd error as the command's failure.
pub(crate) fn etcd_failure(e: EtcdError) -> Failure {
    Failure {
        status: INVALID,
        message: e.to_string(),
    }
}

/// The async runtime of one command.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure {
            status: INVALID,
            message: format!("cannot start the async runtime: {e}"),
        })
}

/// `$USER@hostname` (either part left out when unknown): who a push is by, by default. Without
/// `USER` and `LOGNAME` (containers, CI, systemd units), the system's name of the effective user.
pub(crate) fn default_author() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .filter(|u| !u.is_empty())
        .or_else(system_user)
        .unwrap_or_default();
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that much.
    let host = if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        String::new()
    };
    match (user.is_empty(), host.is_empty()) {
        (false, false) => format!("{user}@{host}"),
        (false, true) => user,
        (true, false) => format!("@{host}"),
        (true, true) => "unknown".into(),
    }
}

/// The name the system's user database gives the effective user, if any.
fn system_user() -> Option<String> {
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: an all-zero passwd is a valid value for getpwuid_r to fill in.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; getpwuid_r writes at most buf.len() bytes
    // into buf and points pwd's strings into it.
    let status = unsafe {
        libc::getpwuid_r(
            libc::geteuid(),
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut found,
        )
    };
    if status != 0 || found.is_null() || pwd.pw_name.is_null() {
        return None;
    }
    // SAFETY: on success pw_name points at a NUL-terminated string inside buf.
    let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) };
    let name = name.to_string_lossy().into_owned();
    (!name.is_empty()).then_some(name)
}
