//! `xds-bench`: a load generator and side-by-side benchmark of xdsd against the bare-transport
//! limit and a rust-control-plane peer. See BENCHMARKS.md for the scenarios and how to run them.

mod client;
mod config;
mod control;
mod dirsrc;
mod etcdsrc;
mod report;
mod scenarios;
mod server;
mod soak;
mod wire;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::ConfigSpec;
use crate::control::Server;
use crate::scenarios::{Ctx, Plan};

/// CLOCK_MONOTONIC in nanoseconds: the same clock in the load generator and the server
/// processes, so convergence is measured across them.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[derive(Parser)]
#[command(
    name = "xds-bench",
    about = "Benchmarks xdsd against the transport limit and a peer"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Runs one server process for the harness (internal).
    #[command(hide = true)]
    Server {
        #[arg(long, value_enum)]
        kind: server::ServerKind,
        /// xdsd-dir: the xdsd binary.
        #[arg(long)]
        xdsd_bin: Option<PathBuf>,
        /// xdsd-dir: the resource directory to create and serve.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

#[derive(Args, Clone)]
struct RunArgs {
    /// Small sizes, a few seconds in all (what CI runs).
    #[arg(long)]
    quick: bool,
    /// Servers to measure, comma-separated: xdsd, xdsd-dir, xdsd-etcd, xdsd-relay, limit, peer (default:
    /// xdsd, limit and, with --peer-bin, peer). xdsd-dir is the xdsd binary serving a directory
    /// of resource files, changed by renaming a file into place; xdsd-etcd the xdsd binary
    /// serving an etcd prefix (an etcd of its own, XDSD_ETCD or /usr/bin/etcd), changed by
    /// putting a key; xdsd-relay xdsd-dir with `xdsd relay`s in front of it, the clients connected
    /// to the relays (S11: ten of them; one otherwise). All three need --xdsd-bin; xdsd-etcd runs
    /// two replicas, the connections split between them.
    #[arg(long, value_delimiter = ',')]
    servers: Vec<String>,
    /// The bench-peer binary (built from bench-peer/, a separate cargo workspace).
    #[arg(long)]
    peer_bin: Option<PathBuf>,
    /// The xdsd binary, for the xdsd-dir server (`cargo build --release -p xdsd`).
    #[arg(long, default_value = "target/release/xdsd")]
    xdsd_bin: PathBuf,
    /// Scenarios to run, comma-separated: s1 (with s3, s4), s2, s5, s6, s7 (xdsd-dir only), s8
    /// (S1 through a gated rollout, --canary 10%: the binary's servers only, not by default), s9
    /// (xdsd-etcd: replica A killed, its clients reconnect to B; not by default), s10 (S1
    /// through one `xdsd relay` against the direct path, with the upstream's bytes per change;
    /// needs --xdsd-bin; not by default), s11 (--s11-relays relays × --s11-streams streams behind
    /// one xdsd, a change to every stream; needs --xdsd-bin; not by default), s12 (a relay
    /// holding --s12-names EDS names on one upstream stream, --s12-streams delta streams behind
    /// it, against the direct path; needs --xdsd-bin; not by default), s13 (LEDS: a cluster of
    /// --s13-endpoints endpoints held by --s13-streams delta streams, one endpoint added, as a
    /// glob collection against one ClusterLoadAssignment and a one-endpoint one's change; xdsd
    /// in process; not by default), s14 (a request letting go of one name and subscribing one
    /// on a delta stream holding --s14-names names, against one holding 1,000: a subscription
    /// costs what it changes; xdsd in process; not by default), soak (3 etcd, 2
    /// replicas, 2 relays, churn and faults for --soak-duration, checked all along; needs
    /// --xdsd-bin and etcd; exits 1 when an invariant broke; not by default).
    #[arg(long, value_delimiter = ',', default_value = "s1,s2,s5,s6,s7")]
    scenarios: Vec<String>,
    /// Where to write results.json, results.md and s1.svg.
    #[arg(long, default_value = "target/bench")]
    out: PathBuf,
    /// S1 (and S3/S4) stream counts, comma-separated.
    #[arg(long, value_delimiter = ',')]
    s1_streams: Vec<usize>,
    /// S1's (and S3/S4's) modes, comma-separated, run in this order at each stream count: sotw
    /// (every stream SotW ADS), delta (every stream delta ADS; the limit pushes in its delta
    /// mode).
    #[arg(long, value_delimiter = ',', default_value = "sotw,delta")]
    s1_modes: Vec<String>,
    /// Changes per S1 (and S6) measurement: 30 by default, 3 with --quick (S2 and S7 take at
    /// most 5). Each point's percentiles are of these changes: with 10, the p50 of the same
    /// point moved by 20 % between runs.
    #[arg(long)]
    rounds: Option<usize>,
    /// S2 stream count.
    #[arg(long)]
    s2_streams: Option<usize>,
    /// S2's modes, comma-separated, run in this order at each cluster count: sotw, delta.
    #[arg(long, value_delimiter = ',', default_value = "sotw,delta")]
    s2_modes: Vec<String>,
    /// S2 cluster counts, comma-separated.
    #[arg(long, value_delimiter = ',')]
    s2_clusters: Vec<usize>,
    /// Changes per S2 measurement (default 5, 2 with --quick, or --rounds if fewer). A p50 of 5
    /// changes of about 20 ms moved by 2x between runs on a quiet host (BENCHMARKS.md, stop 65):
    /// comparisons of delta S2 across builds want 25 or more.
    #[arg(long)]
    s2_rounds: Option<usize>,
    /// S5 stream count.
    #[arg(long)]
    s5_streams: Option<usize>,
    /// S5 offered change rates per second, comma-separated.
    #[arg(long, value_delimiter = ',')]
    s5_rates: Vec<u32>,
    /// S5 seconds per rate.
    #[arg(long)]
    s5_secs: Option<f64>,
    /// S6 stream counts, comma-separated (each split into --s6-groups groups).
    #[arg(long, value_delimiter = ',')]
    s6_streams: Vec<usize>,
    /// S6 parameter groups.
    #[arg(long, default_value_t = 10)]
    s6_groups: usize,
    /// S7 directory sizes in files, comma-separated (xdsd-dir only).
    #[arg(long, value_delimiter = ',')]
    s7_files: Vec<usize>,
    /// S10 stream counts, comma-separated (default: 1000 and 10000; 20 and 50 with --quick).
    #[arg(long, value_delimiter = ',')]
    s10_streams: Vec<usize>,
    /// S11 relays behind one xdsd.
    #[arg(long, default_value_t = 10)]
    s11_relays: usize,
    /// S11 streams per relay (default: 1000; 10 with --quick).
    #[arg(long)]
    s11_streams: Option<usize>,
    /// S12 names (clusters, each with its EDS), comma-separated (default: 100000; 2000 with
    /// --quick).
    #[arg(long, value_delimiter = ',')]
    s12_names: Vec<usize>,
    /// S12 delta streams behind the relay (and on the direct path).
    #[arg(long, default_value_t = 10)]
    s12_streams: usize,
    /// S12 pairs of a direct side and a relayed one, alternating which runs first; with more
    /// than one, the median of their first-sync ratios is given too (default: 3; 1 with
    /// --quick).
    #[arg(long)]
    s12_pairs: Option<usize>,
    /// S13 (LEDS) delta streams (default: 1000; 50 with --quick).
    #[arg(long)]
    s13_streams: Option<usize>,
    /// S13 endpoints of the cluster every stream holds.
    #[arg(long, default_value_t = 10_000)]
    s13_endpoints: usize,
    /// S13 changes per side (one endpoint added each), the sides' changes interleaved; LEDS's
    /// ratios to the others are read on each side's CPU and convergence summed over them.
    #[arg(long, default_value_t = 40)]
    s13_changes: usize,
    /// S14: the names the larger of its two delta streams holds (default: 100000; 2000 with
    /// --quick; the other holds 1000).
    #[arg(long)]
    s14_names: Option<usize>,
    /// S14: requests on each stream (one name let go of, one subscribed, each).
    #[arg(long, default_value_t = 200)]
    s14_requests: usize,
    /// ADS streams per HTTP/2 connection.
    #[arg(long)]
    streams_per_connection: Option<usize>,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// The soak's length (e.g. 3m, 60m, 1h; at least 2m): warm-up, faults, then 30 s of settle.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    soak_duration: std::time::Duration,
    /// The soak's streams (half direct to the replicas, half through the relays).
    #[arg(long, default_value_t = 160)]
    soak_streams: usize,
    /// The soak's convergence bound: a live stream behind the last accepted change longer fails.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    soak_bound: std::time::Duration,
    /// The soak's churn: the fraction of the streams replaced per minute.
    #[arg(long, default_value_t = 0.05)]
    soak_churn: f64,
    /// The soak's interval between changes.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    soak_push_interval: std::time::Duration,
    /// Test only: start the replicas with xdsd's leak switch (every closed stream's record kept),
    /// to show the soak's checks fail.
    #[arg(long, hide = true)]
    soak_leak: bool,
}

/// `90s`, `3m`, `1h`, or seconds.
fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let (n, unit) = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map(|i| s.split_at(i))
        .unwrap_or((s, "s"));
    let n: f64 = n
        .parse()
        .map_err(|_| format!("not a duration: {s:?} (e.g. 90s, 3m, 1h)"))?;
    let secs = match unit {
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("not a duration: {s:?} (e.g. 90s, 3m, 1h)")),
    };
    Ok(std::time::Duration::from_secs_f64(secs))
}

fn plan(a: &RunArgs) -> anyhow::Result<Plan> {
    let q = a.quick;
    let servers = if a.servers.is_empty() {
        if a.peer_bin.is_some() {
            vec![Server::Xdsd, Server::Limit, Server::Peer]
        } else {
            vec![Server::Xdsd, Server::Limit]
        }
    } else {
        a.servers
            .iter()
            .map(|s| Server::parse(s))
            .collect::<anyhow::Result<_>>()?
    };
    let or = |v: &Vec<usize>, quick: &[usize], full: &[usize]| {
        if !v.is_empty() {
            v.clone()
        } else if q {
            quick.to_vec()
        } else {
            full.to_vec()
        }
    };
    Ok(Plan {
        quick: q,
        servers,
        scenarios: a.scenarios.clone(),
        streams_per_connection: a.streams_per_connection.unwrap_or(if q { 10 } else { 100 }),
        seed: a.seed,
        s1_streams: or(&a.s1_streams, &[20, 50], &[1000, 2500, 5000, 10_000]),
        s1_delta: modes("S1", &a.s1_modes)?,
        s1_config: ConfigSpec {
            clusters: if q { 10 } else { 100 },
            endpoints: if q { 2 } else { 4 },
            listeners: if q { 2 } else { 4 },
            routes: if q { 2 } else { 4 },
            seed: a.seed,
        },
        rounds: a.rounds.unwrap_or(if q { 3 } else { 30 }),
        s2_streams: a.s2_streams.unwrap_or(if q { 20 } else { 1000 }),
        s2_clusters: or(&a.s2_clusters, &[50, 200], &[1000, 10_000]),
        s2_delta: modes("S2", &a.s2_modes)?,
        s2_rounds: a
            .s2_rounds
            .or(a.rounds.map(|r| r.min(5)))
            .unwrap_or(if q { 2 } else { 5 }),
        s5_streams: a.s5_streams.unwrap_or(if q { 20 } else { 1000 }),
        s5_rates: if !a.s5_rates.is_empty() {
            a.s5_rates.clone()
        } else if q {
            vec![50, 100]
        } else {
            vec![250, 500, 1000, 2000]
        },
        s5_secs: a.s5_secs.unwrap_or(if q { 1.0 } else { 5.0 }),
        s6_streams: or(&a.s6_streams, &[50], &[10_000]),
        s6_groups: a.s6_groups,
        s7_files: or(&a.s7_files, &[200], &[20_000]),
        s10_streams: or(&a.s10_streams, &[20, 50], &[1000, 10_000]),
        s11_relays: a.s11_relays,
        s11_streams: a.s11_streams.unwrap_or(if q { 10 } else { 1000 }),
        s12_names: or(&a.s12_names, &[2000], &[100_000]),
        s12_streams: a.s12_streams,
        s12_pairs: a.s12_pairs.unwrap_or(if q { 1 } else { 3 }).max(1),
        s13_streams: a.s13_streams.unwrap_or(if q { 50 } else { 1000 }),
        s13_endpoints: a.s13_endpoints,
        s13_changes: a.s13_changes.max(1),
        s14_names: a.s14_names.unwrap_or(if q { 2000 } else { 100_000 }),
        s14_requests: a.s14_requests.max(1),
        sync_timeout_s: if q { 30 } else { 180 },
        change_timeout_s: if q { 15 } else { 60 },
    })
}

async fn run(a: RunArgs) -> anyhow::Result<()> {
    control::raise_fd_limit();
    let plan = plan(&a)?;
    if plan.servers.contains(&Server::Peer) {
        anyhow::ensure!(
            a.peer_bin.is_some(),
            "the peer needs --peer-bin (see scripts/bench)"
        );
    }
    let soaks = plan
        .scenarios
        .iter()
        .any(|s| s.eq_ignore_ascii_case("soak"));
    let relayed = soaks
        || plan.scenarios.iter().any(|s| {
            ["s10", "s11", "s12"]
                .iter()
                .any(|x| s.eq_ignore_ascii_case(x))
        });
    let xdsd_bin = if relayed || plan.servers.iter().any(|s| s.runs_the_binary()) {
        let bin = std::fs::canonicalize(&a.xdsd_bin).map_err(|e| {
            anyhow::anyhow!(
                "xdsd-dir needs the xdsd binary at {} ({e}): cargo build --release -p xdsd, or --xdsd-bin",
                a.xdsd_bin.display()
            )
        })?;
        Some(bin)
    } else {
        None
    };
    std::fs::create_dir_all(&a.out)?;
    let scratch = scenarios::scratch_dir(&a.out);
    std::fs::create_dir_all(&scratch)?;
    let machine = control::machine();
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let t0 = std::time::Instant::now();
    let mut ctx = Ctx::new(plan.clone(), a.peer_bin.clone(), xdsd_bin.clone(), scratch);
    let rows = scenarios::run_all(&mut ctx).await;
    let soak = match (soaks, xdsd_bin) {
        (true, Some(bin)) => {
            anyhow::ensure!(
                a.soak_duration >= std::time::Duration::from_secs(120),
                "--soak-duration must be at least 2m (warm-up, faults, settle)"
            );
            Some(
                soak::run(soak::SoakOptions {
                    duration: a.soak_duration,
                    streams: a.soak_streams.max(8),
                    bound: a.soak_bound,
                    churn_per_minute: a.soak_churn,
                    push_every: a.soak_push_interval,
                    leak: a.soak_leak,
                    xdsd_bin: bin,
                    out: a.out.clone(),
                    seed: a.seed,
                })
                .await?,
            )
        }
        _ => None,
    };
    let table = report::markdown(&rows);
    let command: Vec<String> = std::env::args().collect();
    let mut json = serde_json::json!({
        "started_unix": started,
        "seconds": t0.elapsed().as_secs_f64(),
        "command": command.join(" "),
        "machine": machine,
        "plan": plan,
        "rows": rows,
    });
    if let Some(s) = &soak {
        json["faults_injected"] = s["faults_injected"].clone();
        json["invariants_broken"] = s["invariants_broken"].clone();
        json["soak"] = s.clone();
    }
    std::fs::write(
        a.out.join("results.json"),
        serde_json::to_string_pretty(&json)?,
    )?;
    std::fs::write(a.out.join("results.md"), &table)?;
    std::fs::write(a.out.join("s1.svg"), report::svg(&rows))?;
    println!(
        "## xds-bench {} ({} s; {} × {}, {} GiB)\n",
        if plan.quick { "quick" } else { "full" },
        t0.elapsed().as_secs(),
        machine.nproc,
        machine.cpu_model,
        machine.mem_gib
    );
    println!("{table}");
    eprintln!(
        "[xds-bench] wrote {}/results.json, results.md, s1.svg",
        a.out.display()
    );
    if let Some(s) = &soak {
        println!("{}", soak::summary(s));
        if s["passed"] != serde_json::Value::Bool(true) {
            anyhow::bail!(
                "the soak failed: {} invariant(s) broken (listed above and in {}/results.json)",
                s["invariants_broken"]["count"],
                a.out.display()
            );
        }
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match cli.command {
        Some(Command::Server {
            kind: server::ServerKind::XdsdDir,
            xdsd_bin,
            dir,
        }) => {
            let (Some(bin), Some(dir)) = (xdsd_bin, dir) else {
                anyhow::bail!("--kind xdsd-dir needs --xdsd-bin and --dir");
            };
            rt.block_on(dirsrc::run(&bin, &dir, 0))
        }
        Some(Command::Server {
            kind: server::ServerKind::XdsdRelay,
            xdsd_bin,
            dir,
        }) => {
            let (Some(bin), Some(dir)) = (xdsd_bin, dir) else {
                anyhow::bail!("--kind xdsd-relay needs --xdsd-bin and --dir");
            };
            rt.block_on(dirsrc::run(&bin, &dir, dirsrc::relays_wanted()))
        }
        Some(Command::Server {
            kind: server::ServerKind::XdsdEtcd,
            xdsd_bin,
            dir,
        }) => {
            let (Some(bin), Some(dir)) = (xdsd_bin, dir) else {
                anyhow::bail!("--kind xdsd-etcd needs --xdsd-bin and --dir");
            };
            rt.block_on(etcdsrc::run(&bin, &dir))
        }
        Some(Command::Server { kind, .. }) => rt.block_on(server::run(kind)),
        None => rt.block_on(run(cli.run)),
    }
}

/// A scenario's modes from the command line: `sotw` is `false`, `delta` is `true`.
fn modes(scenario: &str, names: &[String]) -> anyhow::Result<Vec<bool>> {
    names
        .iter()
        .map(|m| match m.as_str() {
            "sotw" => Ok(false),
            "delta" => Ok(true),
            other => anyhow::bail!("unknown {scenario} mode {other:?} (sotw, delta)"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("3m"), Ok(Duration::from_secs(180)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        assert!(parse_duration("3 weeks").is_err());
        assert!(parse_duration("m").is_err());
    }
}
