//! `xdsd`: the xDS management server binary. `main` parses the command line (`cli`) and runs
//! the subcommand: `serve` (`serve`, with `logs`), `check` and `render` (`offline`), `push`,
//! `status`, `history`, `diff`, `rollback` (etcd's history), `get` and `watch` (an xDS client),
//! `relay` (a caching xDS proxy).

use std::process::ExitCode;

use clap::Parser;
use tracing::error;

pub(crate) use cli::*;
pub(crate) use logs::*;
pub(crate) use serve::*;

mod cli;
mod logs;
mod serve;

mod diff;
mod etcd_args;
mod files;
mod get;
mod history;
mod load;
mod memory;
mod offline;
mod push;
mod relay;
mod rollback;

mod admin;
#[cfg(test)]
mod readme_flags;
mod rest_json;
mod status;
mod tls_args;
mod utc;

/// An error and its causes, one after the other, each said once: a cause whose message already
/// ends the text (an error that shows its source in its own message) is not repeated.
fn error_chain(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let message = cause.to_string();
        if text.ends_with(&message) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&message);
    }
    text
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => {
            let from = match args.from() {
                Ok(from) => from,
                Err(e) => {
                    eprintln!("xdsd serve: {e}");
                    return ExitCode::from(2);
                }
            };
            if let Err(e) = args.log.init() {
                eprintln!("xdsd: {e:#}");
                return ExitCode::from(2);
            }
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(rt) => rt,
                Err(e) => {
                    error!("cannot start the async runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(serve(*args, from)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    error!("{}", error_chain(&e));
                    ExitCode::FAILURE
                }
            }
        }
        Command::Check(args) => offline::check(args),
        Command::Render(args) => offline::render(args),
        Command::Push(args) => push::push(*args),
        Command::Status(args) => status::run(args),
        Command::History(args) => history::history(*args),
        Command::Diff(args) => diff::diff(*args),
        Command::Rollback(args) => rollback::rollback(*args),
        Command::Get(args) => get::get(*args),
        Command::Watch(args) => get::watch(*args),
        Command::Relay(args) => relay::main(*args),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::time::Duration;

    #[test]
    fn an_unknown_log_level_is_an_error_not_silence() {
        assert!(check_directives("verbose").is_err());
        assert!(check_directives("info,verbose").is_err());
        assert!(check_directives("info,xdsd_core=debug").is_ok());
        assert!(check_directives("warn").is_ok());
    }

    #[test]
    fn serve_takes_a_directory_or_an_etcd_prefix_not_both_nor_neither() {
        if std::env::var_os("XDSD_RESOURCES").is_some()
            || std::env::var_os("XDSD_ETCD_ENDPOINTS").is_some()
        {
            return;
        }
        let from = |args: &[&str]| {
            let args = ["xdsd", "serve"].iter().chain(args);
            match Cli::try_parse_from(args).map(|cli| cli.command) {
                Ok(Command::Serve(args)) => args.from(),
                other => panic!("not serve: {other:?}"),
            }
        };
        let etcd = [
            "--etcd-endpoints",
            "http://127.0.0.1:2379,http://127.0.0.1:2380",
        ];
        assert!(matches!(
            from(&["--resources", "dir"]),
            Ok(ResourcesFrom::Directory(_))
        ));
        match from(&[etcd[0], etcd[1], "--etcd-prefix", "/xdsd"]) {
            Ok(ResourcesFrom::Etcd(options)) => {
                assert_eq!(options.endpoints().len(), 2);
                assert_eq!(options.prefix(), "/xdsd/", "a final / added");
            }
            _ => panic!("etcd"),
        }
        let both = from(&[
            "--resources",
            "dir",
            etcd[0],
            etcd[1],
            "--etcd-prefix",
            "/x/",
        ]);
        assert!(matches!(both, Err(e) if e.contains("exclusive")));
        assert!(matches!(from(&[]), Err(e) if e.contains("no resources")));
        assert!(matches!(from(&[etcd[0], etcd[1]]), Err(e) if e.contains("--etcd-prefix")));
        assert!(
            matches!(from(&["--etcd-prefix", "/", etcd[0], etcd[1]]), Err(e) if e.contains("whole"))
        );
    }

    #[test]
    fn durations_take_a_unit() {
        assert_eq!(parse_duration("800ms"), Ok(Duration::from_millis(800)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("30").is_err());
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("99999999999999999999m").is_err());
    }

    #[test]
    fn sizes_are_bytes_or_kib_or_mib() {
        assert_eq!(parse_bytes("65536"), Ok(65536));
        assert_eq!(parse_bytes("64KiB"), Ok(65536));
        assert_eq!(parse_bytes("32MiB"), Ok(32 * 1024 * 1024));
        assert_eq!(parse_bytes("1 MiB"), Ok(1024 * 1024));
        assert!(parse_bytes("32MB").is_err());
        assert!(parse_bytes("MiB").is_err());
        assert!(parse_bytes("99999999999999999999MiB").is_err());
        assert!(request_bytes("1KiB").is_err());
    }

    #[test]
    fn make_before_break_and_release_memory_are_on_by_default_and_take_on_or_off() {
        for (flag, env, field) in [
            (
                "--make-before-break",
                "XDSD_MAKE_BEFORE_BREAK",
                (|a: &ServeArgs| a.downstream.make_before_break) as fn(&ServeArgs) -> OnOff,
            ),
            ("--release-memory", "XDSD_RELEASE_MEMORY", |a| {
                a.downstream.release_memory
            }),
        ] {
            let serve = |extra: &[&str]| {
                let args = ["xdsd", "serve", "--resources", "dir"].iter().chain(extra);
                match Cli::try_parse_from(args).map(|cli| cli.command) {
                    Ok(Command::Serve(args)) => Ok(field(&args)),
                    Ok(other) => panic!("parsed as another command: {other:?}"),
                    Err(e) => Err(e.kind()),
                }
            };
            // (Unless the variable is set in the test's environment.)
            if std::env::var_os(env).is_none() {
                assert_eq!(serve(&[]), Ok(OnOff::On), "{flag}");
            }
            assert_eq!(serve(&[flag, "off"]), Ok(OnOff::Off), "{flag}");
            assert_eq!(serve(&[flag, "on"]), Ok(OnOff::On), "{flag}");
            assert_eq!(
                serve(&[flag, "maybe"]),
                Err(clap::error::ErrorKind::InvalidValue),
                "{flag}"
            );
        }
    }

    #[test]
    fn formats_repeat_or_take_commas_and_write_format_needs_write_files() {
        let parse = |args: &[&str]| Cli::try_parse_from(args).map(|cli| cli.command);
        let Ok(Command::Render(render)) = parse(&[
            "xdsd",
            "render",
            "--resources",
            "r",
            "--out",
            "o",
            "--format",
            "pb,json",
            "--format",
            "yaml",
        ]) else {
            panic!("render parses");
        };
        assert_eq!(
            render.format,
            [OutputFormat::Pb, OutputFormat::Json, OutputFormat::Yaml]
        );
        let Ok(Command::Render(render)) =
            parse(&["xdsd", "render", "--resources", "r", "--out", "o"])
        else {
            panic!("render parses");
        };
        assert_eq!(render.format, [OutputFormat::Yaml], "YAML by default");
        if std::env::var_os("XDSD_WRITE_FILES").is_none() {
            let e = parse(&["xdsd", "serve", "--resources", "r", "--write-format", "pb"])
                .expect_err("--write-format alone");
            assert_eq!(e.kind(), clap::error::ErrorKind::MissingRequiredArgument);
        }
        let Ok(Command::Serve(serve)) = parse(&[
            "xdsd",
            "serve",
            "--resources",
            "r",
            "--write-files",
            "o",
            "--write-format",
            "json",
        ]) else {
            panic!("serve parses");
        };
        assert_eq!(serve.write_format, [OutputFormat::Json]);
        let e = parse(&[
            "xdsd",
            "render",
            "--resources",
            "r",
            "--out",
            "o",
            "--format",
            "xml",
        ])
        .expect_err("an unknown format");
        assert_eq!(e.kind(), clap::error::ErrorKind::InvalidValue);
    }
}
