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

/// xdsd's own crates: a bare `--log-level` applies to them (the binary, the server, the
/// sources, the relay and the xDS client that `get`, `watch` and the relay speak through).
/// Named one by one, though a target directive matches by prefix (`xdsd=debug` alone reaches
/// `xdsd_relay`): the list says what is meant, and stays right if the binary is renamed.
const OWN_CRATES: [&str; 6] = [
    "xdsd",
    "xdsd_core",
    "xdsd_source",
    "xdsd_etcd",
    "xdsd_relay",
    "xdsd_client",
];

/// The filter `--log-level` stands for: a bare level for xdsd's own crates, libraries (HTTP/2
/// frames at debug) at info at most; a filter with targets taken as it is.
fn filter(level: &str) -> anyhow::Result<EnvFilter> {
    let directives = match level.parse::<tracing::Level>() {
        Ok(l) => {
            let libraries = std::cmp::min(l, tracing::Level::INFO);
            let mut directives = libraries.to_string();
            for name in OWN_CRATES {
                directives.push_str(&format!(",{name}={l}"));
            }
            directives
        }
        Err(_) => {
            check_directives(level)?;
            level.to_owned()
        }
    };
    EnvFilter::try_new(&directives).with_context(|| format!("invalid --log-level {level:?}"))
}

pub(crate) fn init_logs(level: &str, format: LogFormat) -> anyhow::Result<()> {
    let filter = filter(level)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    /// Whether `--log-level level` lets a `at` event of target `target` through.
    fn enabled(level: &str, target: &'static str, at: tracing::Level) -> bool {
        let subscriber = tracing_subscriber::registry().with(filter(level).expect("a filter"));
        tracing::subscriber::with_default(subscriber, || {
            // `enabled!` needs its target and level as constants: one call site per pair.
            use tracing::Level;
            match (target, at) {
                ("xdsd_relay::source", Level::DEBUG) => {
                    tracing::enabled!(target: "xdsd_relay::source", Level::DEBUG)
                }
                ("xdsd_client::driver", Level::DEBUG) => {
                    tracing::enabled!(target: "xdsd_client::driver", Level::DEBUG)
                }
                ("xdsd_core::transport", Level::DEBUG) => {
                    tracing::enabled!(target: "xdsd_core::transport", Level::DEBUG)
                }
                ("h2::codec", Level::DEBUG) => tracing::enabled!(target: "h2::codec", Level::DEBUG),
                ("h2::codec", Level::INFO) => tracing::enabled!(target: "h2::codec", Level::INFO),
                other => panic!("no call site for {other:?}"),
            }
        })
    }

    #[test]
    fn a_bare_log_level_raises_every_crate_of_xdsd_the_relay_and_the_client_included() {
        use tracing::Level;
        for target in [
            "xdsd_relay::source",
            "xdsd_client::driver",
            "xdsd_core::transport",
        ] {
            assert!(enabled("debug", target, Level::DEBUG), "{target} at debug");
            assert!(!enabled("info", target, Level::DEBUG), "{target} at info");
        }
        // Libraries stay at info at most.
        assert!(!enabled("debug", "h2::codec", Level::DEBUG));
        assert!(enabled("debug", "h2::codec", Level::INFO));
    }
}
