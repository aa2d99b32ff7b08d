//! Logging: `--log-level` (a level, or tracing directives, checked) and `--log-format`.

use std::io::IsTerminal;

use anyhow::Context;
use tracing_subscriber::EnvFilter;

/// `--log-format`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

pub(crate) fn init_logs(level: &str, format: LogFormat) -> anyhow::Result<()> {
    // A bare level applies to xdsd's own crates; libraries (HTTP/2 frames at debug) stay at info
    // at most. A filter with targets is taken as it is.
    let directives = match level.parse::<tracing::Level>() {
        Ok(l) => {
            let libraries = std::cmp::min(l, tracing::Level::INFO);
            format!("{libraries},xdsd={l},xdsd_core={l},xdsd_source={l},xdsd_etcd={l}")
        }
        Err(_) => {
            check_directives(level)?;
            level.to_owned()
        }
    };
    let filter = EnvFilter::try_new(&directives)
        .with_context(|| format!("invalid --log-level {level:?}"))?;
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = match format {
        // Colour codes would garble logs collected from a pipe or a file.
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).try_init(),
        LogFormat::Json => logs.json().with_ansi(false).try_init(),
    };
    installed.map_err(|e| anyhow::anyhow!("cannot set up logging: {e}"))
}

/// A filter's directives are levels or `target=level`: a bare word that is not a level
/// (`verbose`) would be read as a target name and silence every log, so it is refused.
pub(crate) fn check_directives(filter: &str) -> anyhow::Result<()> {
    for directive in filter.split(',').map(str::trim) {
        if !directive.contains('=') && directive.parse::<tracing::Level>().is_err() {
            anyhow::bail!(
                "invalid --log-level {filter:?}: {directive:?} is neither a level (error, warn, info, debug, trace) nor a target=level directive"
            );
        }
    }
    Ok(())
}
