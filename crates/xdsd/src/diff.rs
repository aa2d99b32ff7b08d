//! `xdsd diff`: what changed between two revisions of an etcd prefix, per resource (added,
//! removed, changed), a changed resource shown as a unified diff of its YAML as `render` writes
//! it; and the comparison of two states of the keys that `push` and `rollback` record as names.

use std::collections::BTreeMap;
use std::process::ExitCode;

use bytes::Bytes;
use prost::encoding::{encode_key, encode_varint, WireType};
use prost_reflect::{DynamicMessage, SerializeOptions};
use xdsd_etcd::{Etcd, EtcdError, Names, PushNote, Snapshot};
use xdsd_source::{
    discovery_response_bytes, render_discovery_response, Descriptors, FileFormat, ParsedResource,
};

use crate::etcd_args::EtcdArgs;
use crate::history::{directory_has_no_history, etcd_failure, runtime, write_out};
use crate::offline::{descriptors, finish, usage, Failure};

#[derive(clap::Args, Debug)]
pub(crate) struct DiffArgs {
    /// The revision to compare from (default: the change before the latest one).
    #[arg(value_name = "FROM")]
    from: Option<i64>,

    /// The revision to compare to (default: now).
    #[arg(value_name = "TO")]
    to: Option<i64>,

    /// Lines of context around each change in a resource's diff.
    #[arg(long, value_name = "N", default_value_t = 3)]
    context: usize,

    #[command(flatten)]
    etcd: EtcdArgs,

    /// A resource directory has no history of its own: keep it in git and use `git diff`.
    #[arg(long, value_name = "DIR", env = "XDSD_RESOURCES", hide_env = true)]
    resources: Option<std::path::PathBuf>,
}

/// `xdsd diff`.
pub(crate) fn diff(args: DiffArgs) -> ExitCode {
    finish("diff", run(&args))
}

fn run(args: &DiffArgs) -> Result<(), Failure> {
    if args.resources.is_some() && !args.etcd.given() {
        return Err(directory_has_no_history("diff"));
    }
    let options = args
        .etcd
        .options(xdsd_etcd::DEFAULT_MAX_VALUE_BYTES)
        .map_err(usage)?;
    let descriptors = descriptors()?;
    runtime()?.block_on(async {
        let etcd = Etcd::connect(&options).await.map_err(etcd_failure)?;
        let from = match args.from {
            Some(from) => from,
            None => {
                let history = etcd.history(2).await.map_err(etcd_failure)?;
                match history.changes.as_slice() {
                    [_, before, ..] => before.revision,
                    [only] => only.revision - 1,
                    [] => {
                        println!("no change in etcd's history of {}", options.prefix());
                        return Ok(());
                    }
                }
            }
        };
        let old = read_at(&etcd, from).await?;
        let new = match args.to {
            Some(to) => read_at(&etcd, to).await?,
            None => etcd.read().await.map_err(etcd_failure)?,
        };
        let (old_set, new_set) = (
            Resources::of(&descriptors, options.prefix(), &old),
            Resources::of(&descriptors, options.prefix(), &new),
        );
        for (revision, set) in [(old.revision, &old_set), (new.revision, &new_set)] {
            for error in &set.errors {
                eprintln!("warning: at revision {revision}: {error}");
            }
        }
        let mut out = format!(
            "{} revision {} → {}\n",
            options.prefix(),
            old.revision,
            new.revision
        );
        let changes = compare(&old_set, &new_set);
        if changes.is_empty() {
            out.push_str("no resource changed\n");
        }
        for change in &changes {
            match change {
                Compared::Added(id) => {
                    out.push_str(&format!("added    {}\n", id.label(&descriptors)))
                }
                Compared::Removed(id) => {
                    out.push_str(&format!("removed  {}\n", id.label(&descriptors)))
                }
                Compared::Changed(id, old, new) => {
                    out.push_str(&format!("changed  {}\n", id.label(&descriptors)));
                    out.push_str(&unified(old, new, args.context));
                }
            }
        }
        write_out(&out);
        Ok(())
    })
}

/// The prefix at `revision`; a compacted one refused naming the oldest etcd still has.
pub(crate) async fn read_at(etcd: &Etcd, revision: i64) -> Result<Snapshot, Failure> {
    if revision < 1 {
        return Ok(Snapshot {
            revision,
            ..Snapshot::default()
        });
    }
    match etcd.read_at(revision).await {
        Ok(snapshot) => Ok(snapshot),
        Err(EtcdError::Compacted { .. }) => {
            let oldest = etcd.oldest_revision().await.map_err(etcd_failure)?;
            Err(Failure {
                status: crate::offline::INVALID,
                message: format!(
                    "revision {revision} is no longer in etcd's history (compacted): the oldest \
                     revision available is {oldest} (`xdsd history` lists the changes since; \
                     docs/etcd.md says how to keep more)"
                ),
            })
        }
        Err(e) => match etcd.history(1).await {
            // A revision etcd has not reached: said so, with where the prefix and etcd are.
            Ok(history) if revision > history.current => {
                let last = match history.changes.first() {
                    Some(change) => format!(
                        "the prefix {} last changed at revision {}",
                        etcd.options().prefix(),
                        change.revision
                    ),
                    None => format!(
                        "the prefix {} has no change in etcd's history",
                        etcd.options().prefix()
                    ),
                };
                Err(Failure {
                    status: crate::offline::INVALID,
                    message: format!(
                        "revision {revision} does not exist yet: {last}, and etcd's current \
                         revision is {} (`xdsd history` lists the changes)",
                        history.current
                    ),
                })
            }
            _ => Err(etcd_failure(e)),
        },
    }
}

/// Which resource: type URL, name, and the constraints of a variant.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Id {
    type_url: String,
    name: String,
    constraints: Option<Bytes>,
}

impl Id {
    /// `Cluster/web`, a variant followed by its constraints as JSON.
    pub(crate) fn label(&self, descriptors: &Descriptors) -> String {
        let short = self.type_url.rsplit('.').next().unwrap_or(&self.type_url);
        let mut out = format!("{short}/{}", self.name);
        if let Some(constraints) = &self.constraints {
            out.push(' ');
            out.push_str(&constraints_json(descriptors, constraints));
        }
        out
    }
}

/// A variant's constraints as compact JSON (its bytes' length when they do not decode).
fn constraints_json(descriptors: &Descriptors, bytes: &[u8]) -> String {
    const CONSTRAINTS: &str = "envoy.service.discovery.v3.DynamicParameterConstraints";
    let decoded = descriptors
        .pool()
        .get_message_by_name(CONSTRAINTS)
        .and_then(|desc| DynamicMessage::decode(desc, bytes).ok())
        .and_then(|message| {
            let mut out = Vec::new();
            let mut serializer = serde_json::Serializer::new(&mut out);
            let options = SerializeOptions::new().use_proto_field_name(true);
            message
                .serialize_with_options(&mut serializer, &options)
                .ok()?;
            String::from_utf8(out).ok()
        });
    decoded.unwrap_or_else(|| format!("(constraints of {} bytes)", bytes.len()))
}

/// Every resource of a state of the keys, as text to compare and show.
#[derive(Debug, Default)]
pub(crate) struct Resources {
    by_id: BTreeMap<Id, String>,
    /// Keys that do not parse (their resources are not in `by_id`).
    pub(crate) errors: Vec<String>,
}

impl Resources {
    /// The resources of every key of `snapshot` (keys that do not parse are errors).
    pub(crate) fn of(descriptors: &Descriptors, prefix: &str, snapshot: &Snapshot) -> Resources {
        let mut out = Resources::default();
        for (key, value) in &snapshot.entries {
            out.add(descriptors, prefix, key, value);
        }
        for (key, reason) in &snapshot.rejected {
            out.errors.push(format!("{prefix}{key}: {reason}"));
        }
        out
    }

    /// Adds the resources of one key.
    pub(crate) fn add(&mut self, descriptors: &Descriptors, prefix: &str, key: &str, value: &[u8]) {
        match xdsd_etcd::parse_value(descriptors, &format!("{prefix}{key}"), value) {
            Ok(resources) => {
                for resource in resources {
                    let text = yaml(descriptors, &resource);
                    self.by_id.insert(
                        Id {
                            type_url: resource.type_url,
                            name: resource.name,
                            constraints: resource.constraints,
                        },
                        text,
                    );
                }
            }
            Err(errors) => self.errors.extend(errors),
        }
    }
}

/// A resource as `render` writes it in YAML (proto field names, defaults left out), with its
/// `@ttl` when it has one.
fn yaml(descriptors: &Descriptors, resource: &ParsedResource) -> String {
    let mut any = Vec::new();
    for (number, bytes) in [
        (1, resource.type_url.as_bytes()),
        (2, resource.value.as_ref()),
    ] {
        encode_key(number, WireType::LengthDelimited, &mut any);
        encode_varint(bytes.len() as u64, &mut any);
        any.extend_from_slice(bytes);
    }
    let response = discovery_response_bytes("", "", [any.as_slice()]);
    let mut text = match render_discovery_response(descriptors, FileFormat::Yaml, &response) {
        Ok(rendered) => resource_item(&String::from_utf8_lossy(&rendered)),
        Err(e) => format!("# cannot be written as YAML: {e}\n"),
    };
    if let Some(ttl) = resource.ttl {
        text.push_str(&format!("'@ttl': {}s\n", ttl.as_secs_f64()));
    }
    text
}

/// The one item of the `resources:` list of a rendered `DiscoveryResponse`, unindented.
fn resource_item(rendered: &str) -> String {
    let mut lines = rendered
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("- "));
    let Some(first) = lines.next() else {
        return String::new();
    };
    let indent = first.len() - first.trim_start().len() + 2;
    let mut out = format!("{}\n", &first[indent..]);
    for line in lines {
        let cut = line.len() - line.trim_start_matches(' ').len();
        out.push_str(&line[cut.min(indent)..]);
        out.push('\n');
    }
    out
}

/// What became of one resource.
#[derive(Debug)]
pub(crate) enum Compared<'a> {
    Added(&'a Id),
    Removed(&'a Id),
    /// With its text before and after.
    Changed(&'a Id, &'a str, &'a str),
}

/// Every resource added, removed or changed from `old` to `new`, in type URL and name order.
pub(crate) fn compare<'a>(old: &'a Resources, new: &'a Resources) -> Vec<Compared<'a>> {
    let mut out = Vec::new();
    for (id, text) in &old.by_id {
        match new.by_id.get(id) {
            None => out.push(Compared::Removed(id)),
            Some(now) if now != text => out.push(Compared::Changed(id, text, now)),
            Some(_) => {}
        }
    }
    for id in new.by_id.keys() {
        if !old.by_id.contains_key(id) {
            out.push(Compared::Added(id));
        }
    }
    out.sort_by(|a, b| id_of(a).cmp(id_of(b)));
    out
}

fn id_of<'a>(c: &Compared<'a>) -> &'a Id {
    match c {
        Compared::Added(id) | Compared::Removed(id) | Compared::Changed(id, ..) => id,
    }
}

/// The names a change from `current` to `desired` (key → value) adds, changes and removes,
/// for a push's note. Only the keys that differ are parsed: the others hold the same resources
/// on both sides.
pub(crate) fn note_names(
    descriptors: &Descriptors,
    prefix: &str,
    current: &BTreeMap<String, Bytes>,
    desired: &BTreeMap<String, Bytes>,
) -> PushNote {
    let (mut old, mut new) = (Resources::default(), Resources::default());
    for (key, value) in current {
        if desired.get(key) != Some(value) {
            old.add(descriptors, prefix, key, value);
        }
    }
    for (key, value) in desired {
        if current.get(key) != Some(value) {
            new.add(descriptors, prefix, key, value);
        }
    }
    let mut note = PushNote::default();
    let add = |names: &mut Names, id: &Id| names.add(&id.label(descriptors));
    for change in compare(&old, &new) {
        match change {
            Compared::Added(id) => add(&mut note.added, id),
            Compared::Removed(id) => add(&mut note.removed, id),
            Compared::Changed(id, ..) => add(&mut note.changed, id),
        }
    }
    note
}

/// How long a diff of one resource may search for the smallest edit (Myers' algorithm, the
/// `similar` crate); past it, a correct but longer diff is shown.
const DIFF_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// A unified diff of `old` and `new` (`---`/`+++`, then hunks with `context` lines around each
/// change, every line indented two spaces and each hunk's ranges written `start,len`), or nothing
/// when they are equal.
pub(crate) fn unified(old: &str, new: &str, context: usize) -> String {
    use similar::{ChangeTag, TextDiff};
    let diff = TextDiff::configure()
        .timeout(DIFF_TIMEOUT)
        .diff_lines(old, new);
    let hunks = diff.grouped_ops(context);
    if hunks.is_empty() {
        return String::new();
    }
    let mut out = String::from("  --- before\n  +++ after\n");
    for ops in hunks {
        let (Some(first), Some(last)) = (ops.first(), ops.last()) else {
            continue;
        };
        let range = |start: usize, end: usize| {
            let len = end - start;
            format!("{},{len}", if len == 0 { start } else { start + 1 })
        };
        out.push_str(&format!(
            "  @@ -{} +{} @@\n",
            range(first.old_range().start, last.old_range().end),
            range(first.new_range().start, last.new_range().end)
        ));
        for op in &ops {
            for change in diff.iter_changes(op) {
                let mark = match change.tag() {
                    ChangeTag::Equal => ' ',
                    ChangeTag::Delete => '-',
                    ChangeTag::Insert => '+',
                };
                let line = change.value();
                out.push_str(&format!(
                    "  {mark}{}\n",
                    line.strip_suffix('\n').unwrap_or(line)
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unified_diff_shows_the_changed_line_with_its_context() {
        let old = "a\nb\nc\nd\ne\nf\ng\nh\n";
        let new = "a\nb\nc\nd\nE\nf\ng\nh\n";
        assert_eq!(
            unified(old, new, 2),
            "  --- before\n  +++ after\n  @@ -3,5 +3,5 @@\n   c\n   d\n  -e\n  +E\n   f\n   g\n"
        );
        assert_eq!(unified(old, old, 3), "");
    }

    #[test]
    fn changes_far_apart_are_separate_hunks_and_near_ones_one() {
        let old: String = (0..20).map(|i| format!("line{i}\n")).collect();
        let new = old
            .replace("line2\n", "two\n")
            .replace("line17\n", "seventeen\n");
        let diff = unified(&old, &new, 1);
        assert_eq!(diff.matches("@@ -").count(), 2, "{diff}");
        let new = old.replace("line2\n", "two\n").replace("line4\n", "four\n");
        let diff = unified(&old, &new, 1);
        assert_eq!(diff.matches("@@ -").count(), 1, "{diff}");
    }

    #[test]
    fn lines_added_at_the_end_and_removed_at_the_start() {
        let diff = unified("x\ny\n", "y\nz\n", 3);
        assert!(diff.contains("  -x\n   y\n  +z\n"), "{diff}");
        assert!(diff.contains("@@ -1,2 +1,2 @@"), "{diff}");
        let diff = unified("", "new\n", 3);
        assert!(diff.contains("@@ -0,0 +1,1 @@\n  +new\n"), "{diff}");
    }

    #[test]
    fn a_resource_is_rendered_as_yaml_with_stable_field_order() {
        let descriptors = Descriptors::envoy().expect("descriptors");
        let yaml_text = "\"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\nname: web\nconnect_timeout: 1s\ntype: STATIC\n";
        let mut set = Resources::default();
        set.add(&descriptors, "/x/", "a.yaml", yaml_text.as_bytes());
        assert!(set.errors.is_empty(), "{:?}", set.errors);
        let (id, text) = set.by_id.iter().next().expect("one resource");
        assert_eq!(id.label(&descriptors), "Cluster/web");
        assert_eq!(
            text,
            "\"@type\": \"type.googleapis.com/envoy.config.cluster.v3.Cluster\"\nname: \"web\"\n\
             type: \"STATIC\"\nconnect_timeout: \"1s\"\n"
        );
    }

    #[test]
    fn a_push_names_what_it_adds_changes_and_removes_and_a_resource_moved_to_another_key_is_not_a_change(
    ) {
        let descriptors = Descriptors::envoy().expect("descriptors");
        let cluster = |name: &str, timeout: &str| {
            format!(
                "\"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\nname: {name}\n\
                 connect_timeout: {timeout}\n"
            )
        };
        let keys = |pairs: &[(&str, String)]| -> BTreeMap<String, Bytes> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), Bytes::from(v.clone())))
                .collect()
        };
        let current = keys(&[
            ("a.yaml", cluster("a", "1s")),
            ("b.yaml", cluster("b", "1s")),
            ("c.yaml", cluster("c", "1s")),
            ("same.yaml", cluster("same", "1s")),
        ]);
        let desired = keys(&[
            ("a.yaml", cluster("a", "2s")),
            ("moved.yaml", cluster("b", "1s")),
            ("d.yaml", cluster("d", "1s")),
            ("same.yaml", cluster("same", "1s")),
        ]);
        let note = note_names(&descriptors, "/x/", &current, &desired);
        assert_eq!(note.added.first, ["Cluster/d"]);
        assert_eq!(note.changed.first, ["Cluster/a"]);
        assert_eq!(note.removed.first, ["Cluster/c"]);
    }
}
