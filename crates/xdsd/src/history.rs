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

fn text(history: &History, limit: usize, prefix: &str) -> String {
    let mut out = String::new();
    if history.changes.is_empty() {
        out.push_str(&format!(
            "no change of {prefix} in etcd's history (revisions {} to {})\n",
            history.oldest, history.current
        ));
    }
    for change in &history.changes {
        let (added, changed, removed) = counts(change);
        let mut line = format!(
            "{:>8}  {:<20}  ",
            change.revision,
            change
                .push
                .as_ref()
                .filter(|p| p.unix_ms > 0)
                .map(|p| crate::utc::seconds_of_unix_ms(p.unix_ms))
                .unwrap_or_else(|| "-".into()),
        );
        let what = match &change.push {
            None => {
                let keys: Vec<&str> = [added, changed, removed]
                    .iter()
                    .flat_map(|n| n.first.iter().map(String::as_str))
                    .collect();
                format!("direct write  {}", keys.join(", "))
            }
            Some(push) => {
                let author = if push.note.author.is_empty() {
                    "-"
                } else {
                    &push.note.author
                };
                let message = match (push.note.rollback_to, push.note.message.as_str()) {
                    (Some(to), "") => format!("rollback to {to}"),
                    (Some(to), m) => format!("rollback to {to}: {m}"),
                    (None, m) => m.to_string(),
                };
                format!("{author}  {}", first_line(&message))
            }
        };
        line.push_str(&what);
        line.push_str(&format!(
            "  +{} ~{} -{}",
            added.count, changed.count, removed.count
        ));
        if let Some(state) = change.rollout {
            line.push_str(&format!("  [{state}]"));
        }
        out.push_str(&line);
        out.push('\n');
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

/// `$USER@hostname` (either part left out when unknown): who a push is by, by default.
pub(crate) fn default_author() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
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
