//! `xdsd rollback REV`: make an etcd prefix hold exactly what it held at revision REV, as a new
//! push — checked like any push, guarded by the revision read, recorded as a rollback to REV.

use std::process::ExitCode;

use xdsd_core::store::Store;
use xdsd_etcd::Etcd;

use crate::diff::read_at;
use crate::etcd_args::EtcdArgs;
use crate::history::{directory_has_no_history, runtime};
use crate::offline::{descriptors, finish, usage, Failure, INVALID};
use crate::push::{check_note, etcd_failure, write, How, RecordArgs};
use crate::RuleArgs;

#[derive(clap::Args, Debug)]
pub(crate) struct RollbackArgs {
    /// The revision whose state the prefix is to hold again (see `xdsd history`).
    #[arg(value_name = "REV")]
    revision: i64,

    #[command(flatten)]
    record: RecordArgs,

    /// Print what would be put and deleted; write nothing.
    #[arg(long, conflicts_with = "confirm")]
    dry_run: bool,

    /// Print what would be put and deleted, then ask: write only if standard input answers y or
    /// yes (anything else writes nothing and exits 1).
    #[arg(long)]
    confirm: bool,

    /// With a gated rollout running on the replicas, promote the rollback at once instead of
    /// soaking it with the canaries: the replicas serve it to every client as soon as it reaches
    /// them. For when the canaries cannot judge it (the stable state is the one that is broken,
    /// or the canaries are down); otherwise let the gate check the rollback like any change.
    #[arg(long)]
    skip_canary: bool,

    #[command(flatten)]
    rules: RuleArgs,

    #[command(flatten)]
    etcd: EtcdArgs,

    /// A resource directory has no history of its own: keep it in git and use `git revert`.
    #[arg(long, value_name = "DIR", env = "XDSD_RESOURCES", hide_env = true)]
    resources: Option<std::path::PathBuf>,
}

/// `xdsd rollback`.
pub(crate) fn rollback(args: RollbackArgs) -> ExitCode {
    finish("rollback", run(&args))
}

fn run(args: &RollbackArgs) -> Result<(), Failure> {
    if args.resources.is_some() && !args.etcd.given() {
        return Err(directory_has_no_history("rollback"));
    }
    if args.revision < 1 {
        return Err(usage(format!(
            "REV {}: an etcd revision is 1 or more",
            args.revision
        )));
    }
    let max = args.rules.max_file_bytes;
    let options = args.etcd.options(max).map_err(usage)?;
    let note = args.record.note(Some(args.revision));
    check_note(&note)?;
    let descriptors = descriptors()?;
    runtime()?.block_on(async {
        let etcd = Etcd::connect(&options).await.map_err(etcd_failure)?;
        let then = read_at(&etcd, args.revision).await?;
        if then.entries.is_empty() && then.rejected.is_empty() {
            return Err(Failure {
                status: INVALID,
                message: format!(
                    "the prefix {} held no keys at revision {}: a rollback to it would remove \
                     every resource; nothing was written",
                    options.prefix(),
                    args.revision
                ),
            });
        }
        check(
            &descriptors,
            options.prefix(),
            &then,
            &args.rules,
            args.revision,
        )?;
        let how = How {
            dry_run: args.dry_run,
            confirm: args.confirm,
            what: "that state",
        };
        let written = write(&options, &descriptors, then.entries, &how, note).await?;
        match written {
            Some(revision) if args.skip_canary => {
                etcd.promote_now(revision).await.map_err(etcd_failure)?;
                println!(
                    "rolled back to revision {} at revision {revision}, promoted at once \
                     (--skip-canary)",
                    args.revision
                );
            }
            Some(revision) => println!(
                "rolled back to revision {} at revision {revision}",
                args.revision
            ),
            None => {}
        }
        Ok(())
    })
}

/// The state at `revision` checked as a push checks a directory: every key parses, no
/// duplicate, the variant and reference rules of `rules`. Every error printed; nothing is
/// written when there is one.
fn check(
    descriptors: &xdsd_source::Descriptors,
    prefix: &str,
    snapshot: &xdsd_etcd::Snapshot,
    rules: &RuleArgs,
    revision: i64,
) -> Result<(), Failure> {
    let mut errors = Vec::new();
    let mut resources = Vec::new();
    for (key, value) in &snapshot.entries {
        match xdsd_etcd::parse_value(descriptors, &format!("{prefix}{key}"), value) {
            Ok(list) => resources.extend(list),
            Err(list) => errors.extend(list),
        }
    }
    for (key, reason) in &snapshot.rejected {
        errors.push(format!("{prefix}{key}: {reason}"));
    }
    if errors.is_empty() {
        if let Err(e) = xdsd_source::check_duplicates(&resources) {
            errors.extend(e.errors().iter().map(|e| e.to_string()));
        }
    }
    if errors.is_empty() {
        let store = Store::with_reference_policy(rules.reference_policy());
        if let Err(e) = crate::load::commit(&store, resources) {
            errors.extend(e.messages());
            if let Some(hint) = e.hint() {
                errors.push(format!("hint: {hint}"));
            }
        }
    }
    if errors.is_empty() {
        return Ok(());
    }
    for error in &errors {
        eprintln!("error: {error}");
    }
    Err(Failure {
        status: INVALID,
        message: format!(
            "the state at revision {revision} does not pass the checks of a push ({} errors): \
             nothing was written",
            errors.len()
        ),
    })
}
