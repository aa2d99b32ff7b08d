//! `xdsd check` and `xdsd render`: load a directory as `serve` does, report, write files, exit.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::process::ExitCode;

use xdsd_core::store::{Dangling, Store, StoreError, UpdateSummary, MAX_LISTED};
use xdsd_core::types;
use xdsd_source::{Descriptors, SourceError};

use crate::files::{check_outside, file_stem, FileWriter};
use crate::load::{commit, load_into, LoadError, Loaded};
use crate::{file_formats, CheckArgs, RenderArgs, SourceArgs};

/// Exit status of invalid resources (or files not written).
pub(crate) const INVALID: u8 = 1;
/// Exit status of a usage error: bad arguments, a directory that is not one.
pub(crate) const USAGE: u8 = 2;

/// An error that ends the command with `status`, printed as `xdsd <command>: <message>`.
pub(crate) struct Failure {
    pub(crate) status: u8,
    pub(crate) message: String,
}

pub(crate) fn usage(message: impl Into<String>) -> Failure {
    Failure {
        status: USAGE,
        message: message.into(),
    }
}

pub(crate) fn finish(command: &str, result: Result<(), Failure>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("xdsd {command}: {}", failure.message);
            ExitCode::from(failure.status)
        }
    }
}

/// `--resources` must name a directory; anything else is a usage error.
pub(crate) fn resources_dir(source: &SourceArgs) -> Result<&Path, Failure> {
    let dir = source.resources.as_path();
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => Ok(dir),
        Ok(_) => Err(usage(format!(
            "--resources {}: not a directory",
            dir.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(usage(format!(
            "--resources {}: the directory does not exist",
            dir.display()
        ))),
        Err(e) => Err(usage(format!("--resources {}: {e}", dir.display()))),
    }
}

pub(crate) fn descriptors() -> Result<Descriptors, Failure> {
    Descriptors::envoy().map_err(|e| Failure {
        status: INVALID,
        message: format!("loading the Envoy proto descriptors: {e}"),
    })
}

/// Loads the directory into a new store with the reference policy of the arguments, printing
/// every error on stderr (one per line) when it is invalid, and each dangling reference as a
/// warning in `--references warn`.
pub(crate) fn load(
    source: &SourceArgs,
    descriptors: &Descriptors,
) -> Result<(Store, Loaded), Failure> {
    let dir = resources_dir(source)?;
    let store = Store::with_reference_policy(source.reference_policy());
    match load_into(descriptors, dir, &source.limits(), &store) {
        Ok(loaded) => {
            print_dangling(&loaded.summary);
            Ok((store, loaded))
        }
        Err(e) => Err(invalid(dir, &e)),
    }
}

fn invalid(dir: &Path, e: &LoadError) -> Failure {
    let messages = e.messages();
    for message in &messages {
        eprintln!("error: {message}");
    }
    if let Some(hint) = e.hint() {
        eprintln!("hint: {hint}");
    }
    let count = match messages.len() {
        1 => "1 error".to_owned(),
        n => format!("{n} errors"),
    };
    Failure {
        status: INVALID,
        message: format!("{}: {count}", dir.display()),
    }
}

/// `check` of a directory with file errors: prints them, then checks the store's rules
/// (references, variants) among the resources of the files that parsed (the first of a
/// duplicated name), prints those errors too, and names the files whose resources could not be
/// checked.
fn check_the_rest(
    source: &SourceArgs,
    descriptors: &Descriptors,
    dir: &Path,
    cache: &xdsd_source::DirectoryCache,
    error: &SourceError,
) -> Failure {
    let errors = error.errors();
    let unchecked: BTreeSet<&Path> = errors.iter().filter_map(|e| file_of(e)).collect();
    // As LoadError::Source lists them.
    let mut messages: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    let mut seen = HashSet::new();
    let parsed: Vec<_> = cache
        .resources()
        .into_iter()
        .filter(|r| r.constraints.is_some() || seen.insert((r.type_url.clone(), r.name.clone())))
        .collect();
    let count = parsed.len();
    // What the files in error meant to define: a reference to one of those is not a second error
    // (the typo is the first), it is said as such.
    let declared = declared_in(descriptors, &unchecked, &errors, &source.limits());
    let store = Store::with_reference_policy(source.reference_policy());
    let mut hint = None;
    let mut in_failed = Vec::new();
    match commit(&store, parsed) {
        Ok(mut loaded) => {
            let (failed, rest) = std::mem::take(&mut loaded.summary.dangling)
                .into_iter()
                .partition(|d| declared.contains_key(&target(d)));
            in_failed = failed;
            loaded.summary.dangling = rest;
            print_dangling(&loaded.summary);
        }
        Err(LoadError::Store(StoreError::DanglingReferences(list))) => {
            let (failed, rest): (Vec<Dangling>, Vec<Dangling>) = list
                .into_iter()
                .partition(|d| declared.contains_key(&target(d)));
            in_failed = failed;
            if !rest.is_empty() {
                let rest = suggest_from(rest, &declared);
                let e = LoadError::Store(StoreError::DanglingReferences(rest));
                messages.extend(e.messages());
                hint = e.hint();
            }
        }
        Err(e) => {
            messages.extend(e.messages());
            hint = e.hint();
        }
    }
    for message in &messages {
        eprintln!("error: {message}");
    }
    if let Some(hint) = hint {
        eprintln!("hint: {hint}");
    }
    for d in in_failed.iter().take(MAX_LISTED) {
        let (type_url, name) = target(d);
        let file = declared
            .get(&(type_url.clone(), name.clone()))
            .map(|f| f.display().to_string())
            .unwrap_or_default();
        eprintln!(
            "note: {} {name:?}, which {} refers to, is in {file}, which failed above: not a \
             second error",
            file_stem_of(&type_url),
            referrer(d),
        );
    }
    if in_failed.len() > MAX_LISTED {
        eprintln!(
            "note: {} more references to resources of the files that failed",
            in_failed.len() - MAX_LISTED
        );
    }
    let files: Vec<String> = unchecked.iter().map(|f| f.display().to_string()).collect();
    eprintln!(
        "note: references and variants were checked among the {count} resources of the files that \
         parsed; the resources of {} could not be checked (a reference to one of them is a note \
         when its name can be read from the file, else it counts as missing here)",
        match files.len() {
            0 => "the files in error".to_owned(),
            _ => files.join(", "),
        }
    );
    Failure {
        status: INVALID,
        message: format!(
            "{}: {}",
            dir.display(),
            match messages.len() {
                1 => "1 error".to_owned(),
                n => format!("{n} errors"),
            }
        ),
    }
}

/// `dangling` with a name the files in error declare suggested where the store had none near
/// (`backnd` when `backend` is in a file that failed): the name can be read, so it is said.
fn suggest_from(
    mut dangling: Vec<Dangling>,
    declared: &HashMap<(String, String), std::path::PathBuf>,
) -> Vec<Dangling> {
    for d in dangling.iter_mut().take(MAX_LISTED) {
        if d.suggestion.is_some() {
            continue;
        }
        let names: Vec<std::sync::Arc<str>> = declared
            .keys()
            .filter(|(type_url, _)| type_url == d.reference.type_url)
            .map(|(_, name)| std::sync::Arc::from(name.as_str()))
            .collect();
        d.suggestion = xdsd_core::store::nearest(&d.reference.name, names.iter());
    }
    dangling
}

/// The (type URL, name) a dangling reference names.
fn target(d: &Dangling) -> (String, String) {
    (
        d.reference.type_url.to_owned(),
        d.reference.name.to_string(),
    )
}

/// The message name of a type URL: `Cluster`.
fn file_stem_of(type_url: &str) -> &str {
    type_url.rsplit(['.', '/']).next().unwrap_or(type_url)
}

/// The resource a dangling reference is from, and its field: `routes.yaml (resource #1):
/// RouteConfiguration "local" field virtual_hosts[0].routes[0].route.cluster`.
fn referrer(d: &Dangling) -> String {
    let origin = d
        .origin
        .as_deref()
        .map(|o| format!("{o}: "))
        .unwrap_or_default();
    format!(
        "{origin}{} {:?} field {}",
        file_stem_of(&d.type_url),
        &*d.name,
        d.reference.field
    )
}

/// The (type URL, name) of each resource the files in error meant to define, with the file: read
/// leniently from each file (at most `--max-file-bytes` of it), and from the errors that name
/// their resource.
fn declared_in(
    descriptors: &Descriptors,
    files: &BTreeSet<&Path>,
    errors: &[&SourceError],
    limits: &xdsd_source::Limits,
) -> HashMap<(String, String), std::path::PathBuf> {
    let mut out = HashMap::new();
    for error in errors {
        if let SourceError::Resource { resource, .. } = error {
            let type_url = resource
                .type_url
                .as_deref()
                .and_then(|t| descriptors.message_for_type_url(t))
                .map(|desc| xdsd_source::type_url_of(&desc));
            if let (Some(type_url), Some(name)) = (type_url, &resource.name) {
                out.insert((type_url, name.clone()), resource.file.clone());
            }
        }
    }
    for file in files {
        let small =
            std::fs::metadata(file).is_ok_and(|m| m.is_file() && m.len() <= limits.max_file_bytes);
        let Some(text) = small.then(|| std::fs::read_to_string(file).ok()).flatten() else {
            continue;
        };
        for key in xdsd_source::declared_names(descriptors, file, &text) {
            out.entry(key).or_insert_with(|| file.to_path_buf());
        }
    }
    out
}

/// The file an error of the source is about, when it is one file's.
fn file_of<'a>(error: &&'a SourceError) -> Option<&'a Path> {
    match error {
        SourceError::Io { path, .. } => Some(path),
        SourceError::File { file, .. } => Some(file),
        SourceError::Resource { resource, .. } => Some(&resource.file),
        _ => None,
    }
}

fn print_dangling(summary: &UpdateSummary) {
    for d in summary.dangling.iter().take(MAX_LISTED) {
        eprintln!("warning: a reference to a resource that does not exist: {d}");
    }
    if summary.dangling.len() > MAX_LISTED {
        eprintln!(
            "warning: {} more references to resources that do not exist",
            summary.dangling.len() - MAX_LISTED
        );
    }
}

/// `xdsd check`.
pub fn check(args: CheckArgs) -> ExitCode {
    finish("check", run_check(&args))
}

fn run_check(args: &CheckArgs) -> Result<(), Failure> {
    let descriptors = descriptors()?;
    // As `load` (and `serve`'s start) does, keeping the cache: when some files fail, the store's
    // rules are still checked among the files that parsed.
    let dir = resources_dir(&args.source)?;
    let store = Store::with_reference_policy(args.source.reference_policy());
    let mut cache = xdsd_source::DirectoryCache::default();
    if let Err(e) = cache.rescan(&descriptors, dir, &args.source.limits()) {
        return Err(check_the_rest(&args.source, &descriptors, dir, &cache, &e));
    }
    let loaded = commit(&store, cache.resources()).map_err(|e| invalid(dir, &e))?;
    print_dangling(&loaded.summary);
    let snapshot = store.snapshot();
    println!(
        "{}: valid, {} resources",
        args.source.resources.display(),
        loaded.resources
    );
    // Per type as served (a VHDS route configuration's virtual hosts counted apart), in push
    // order.
    let mut per_type: BTreeMap<(u8, &str), (usize, usize)> = BTreeMap::new();
    for t in snapshot.types() {
        per_type.insert(
            (types::push_rank(t.type_url()), t.type_url()),
            (t.iter().count(), t.len()),
        );
    }
    for ((_, type_url), (resources, names)) in per_type {
        let variants = if resources == names {
            String::new()
        } else {
            format!(" ({names} names)")
        };
        println!(
            "  {:<18} {resources:>6}{variants}{}  {type_url}",
            type_label(type_url),
            in_collections(&snapshot, type_url)
        );
    }
    Ok(())
}

/// A type's label in `check`'s summary: its file name (`clusters`), `lb_endpoints` for LEDS's
/// `LbEndpoint` (its full message name would not fit the column).
fn type_label(type_url: &str) -> String {
    if type_url == types::LB_ENDPOINT {
        "lb_endpoints".to_owned()
    } else {
        file_stem(type_url)
    }
}

/// For LEDS's `LbEndpoint`: in how many glob collections its resources are (" in 2
/// collections"); nothing for other types.
fn in_collections(snapshot: &xdsd_core::store::Snapshot, type_url: &str) -> String {
    if type_url != types::LB_ENDPOINT {
        return String::new();
    }
    let collections: std::collections::BTreeSet<String> = snapshot
        .get(type_url)
        .into_iter()
        .flat_map(|t| t.iter())
        .filter_map(|r| xdsd_core::xdstp::collection_of(r.name()))
        .collect();
    match collections.len() {
        1 => " in 1 collection".to_owned(),
        n => format!(" in {n} collections"),
    }
}

/// `xdsd render`.
pub fn render(args: RenderArgs) -> ExitCode {
    finish("render", run_render(&args))
}

fn run_render(args: &RenderArgs) -> Result<(), Failure> {
    let resources = resources_dir(&args.source)?;
    let out = args.out.as_path();
    check_outside(out, resources).map_err(|e| usage(format!("{e:#}")))?;
    std::fs::create_dir_all(out)
        .map_err(|e| usage(format!("--out {}: cannot create it: {e}", out.display())))?;
    let descriptors = descriptors()?;
    let (store, _) = load(&args.source, &descriptors)?;
    let snapshot = store.snapshot();
    let mut writer = FileWriter::new(out.to_path_buf(), &file_formats(&args.format), descriptors);
    let round = writer.write_changed(&snapshot);
    for t in &round.written {
        for file in &t.files {
            println!(
                "{}  {} resources, version {}, {}",
                file.display(),
                t.resources,
                t.version,
                t.type_url
            );
        }
    }
    if round.errors.is_empty() {
        return Ok(());
    }
    for e in &round.errors {
        eprintln!("error: {e:#}");
    }
    Err(Failure {
        status: INVALID,
        message: format!(
            "{}: {} files not written",
            out.display(),
            round.errors.len()
        ),
    })
}
