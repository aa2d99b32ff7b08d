//! Output: markdown tables (with the ratios computed from the same run), the JSON of a run and an
//! SVG chart of S1 convergence time against the number of streams.

use std::fmt::Write as _;

use crate::scenarios::{Pct, Row};

fn ms(p: &Option<Pct>) -> [String; 4] {
    match p {
        Some(p) => [p.p50, p.p90, p.p99, p.max].map(fmt_ms),
        None => ["–".into(), "–".into(), "–".into(), "–".into()],
    }
}

fn fmt_ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "–".into(),
    }
}

fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

fn find<'a>(
    rows: &'a [Row],
    scenario: &str,
    server: &str,
    mode: &str,
    key: usize,
) -> Option<&'a Row> {
    rows.iter().find(|r| {
        r.scenario == scenario
            && r.server == server
            && r.mode == mode
            && (r.streams == key || r.clusters == key || r.rate == Some(key as u32))
    })
}

/// S5's row of `server` at offered rate `rate` (`find` would also take a row whose stream
/// count equals the rate).
fn find_rate<'a>(rows: &'a [Row], server: &str, rate: u32) -> Option<&'a Row> {
    rows.iter()
        .find(|r| r.scenario == "S5" && r.server == server && r.rate == Some(rate))
}

/// Whether the row's server process was started with its clients (not a row that says "not
/// supported" or "not run"): S3 and S4 have nothing to show of the others.
fn opened(r: &Row) -> bool {
    r.rss_base_kib > 0 || r.synced > 0
}

fn p50(r: Option<&Row>) -> Option<f64> {
    r.and_then(|r| r.conv_ms.map(|p| p.p50))
}

fn note(r: &Row) -> String {
    let mut n = r.note.clone();
    if r.errors > 0 {
        if !n.is_empty() {
            n.push_str("; ");
        }
        let _ = write!(
            n,
            "{} client errors (first: {})",
            r.errors,
            r.error_samples.first().map(String::as_str).unwrap_or("")
        );
    }
    if r.missing > 0 {
        if !n.is_empty() {
            n.push_str("; ");
        }
        let _ = write!(n, "{} deliveries missing", r.missing);
    }
    n.replace('|', "\\|")
}

pub fn markdown(rows: &[Row]) -> String {
    let mut out = String::new();
    let s1: Vec<&Row> = rows.iter().filter(|r| r.scenario == "S1").collect();
    if !s1.is_empty() {
        out.push_str(
            "### S1 fan-out: one ClusterLoadAssignment changes, every stream watches it\n\n",
        );
        out.push_str("Convergence = from the server accepting the change to the last client having it, per change (ms). Mode: every stream SotW ADS, or every stream delta ADS (the limit in its delta mode); ratios are to the limit in the same mode.\n\n");
        out.push_str("| server | mode | streams | conns | p50 | p90 | p99 | max | changes | CPU ms/change | KiB sent/change | xdsd ÷ limit (p50) | peer ÷ xdsd (p50) | notes |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        for r in &s1 {
            let [a, b, c, d] = ms(&r.conv_ms);
            let (vs_limit, vs_peer) = if r.server.starts_with("xdsd") {
                (
                    ratio(
                        p50(Some(r)),
                        p50(find(rows, "S1", "limit", &r.mode, r.streams)),
                    ),
                    ratio(
                        p50(find(rows, "S1", "peer", &r.mode, r.streams)),
                        p50(Some(r)),
                    ),
                )
            } else {
                ("".into(), "".into())
            };
            let per = r.changes.max(1) as f64;
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {a} | {b} | {c} | {d} | {} | {:.1} | {:.0} | {vs_limit} | {vs_peer} | {} |",
                r.server, r.mode, r.streams, r.connections, r.changes,
                r.change_cpu_s * 1e3 / per, r.bytes as f64 / 1024.0 / per, note(r)
            );
        }
        out.push('\n');
    }
    let relayed: Vec<&Row> = rows
        .iter()
        .filter(|r| ["S10", "S11", "S12"].contains(&r.scenario.as_str()))
        .collect();
    if !relayed.is_empty() {
        out.push_str(
            "### S10, S11, S12 through relays: S1's change, the clients behind `xdsd relay`s (S12: a relay holding N EDS names, the first sync and the ratios to the direct path in its notes)

",
        );
        out.push_str("Convergence = from the change written to the last client having it, per change (ms); CPU is the first relay's (S10's xdsd-dir: xdsd's), KiB sent what the clients received; the upstream's bytes per change are in the notes.

");
        out.push_str("| scenario | server | streams | conns | p50 | p90 | p99 | max | changes | CPU ms/change | KiB sent/change | notes |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        for r in &relayed {
            let [a, b, c, d] = ms(&r.conv_ms);
            let per = r.changes.max(1) as f64;
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {a} | {b} | {c} | {d} | {} | {:.1} | {:.0} | {} |",
                r.scenario,
                r.server,
                r.streams,
                r.connections,
                r.changes,
                r.change_cpu_s * 1e3 / per,
                r.bytes as f64 / 1024.0 / per,
                note(r)
            );
        }
        out.push('\n');
    }
    let s13: Vec<&Row> = rows.iter().filter(|r| r.scenario == "S13").collect();
    if !s13.is_empty() {
        out.push_str("### S13 LEDS: one endpoint added to a cluster every stream holds, as a glob collection (leds), as one ClusterLoadAssignment (eds) and as a one-endpoint ClusterLoadAssignment's change (eds-1)\n\nThe sides' changes interleaved, one per side in each round. Convergence = from the commit to the last stream having it (ms): the median and the max of the side's changes; CPU = the bench process's (server and clients, read to the nanosecond) from each commit to 200 ms after its last stream had it (its ACKs taken), the mean per change (the medians in the notes); bytes what the streams received per change; in leds's notes its ratios to the others, of each side's changes summed (where the issue's 1.15x is read), with the median of the rounds' own ratios and the ratio of the medians.\n\n");
        out.push_str("| mode | streams | changes | convergence p50 ms | convergence max ms | client p50 | client p99 | CPU ms/change | KiB sent/change | notes |\n|---|---|---|---|---|---|---|---|---|---|\n");
        for r in &s13 {
            let [conv50, _, _, conv] = ms(&r.conv_ms);
            let [p50, _, p99, _] = ms(&r.client_ms);
            let _ = writeln!(
                out,
                "| {} | {} | {} | {conv50} | {conv} | {p50} | {p99} | {:.1} | {:.1} | {} |",
                r.mode,
                r.streams,
                r.changes,
                r.change_cpu_s * 1e3 / r.changes.max(1) as f64,
                r.bytes as f64 / 1024.0,
                note(r)
            );
        }
        out.push('\n');
    }
    let s14: Vec<&Row> = rows.iter().filter(|r| r.scenario == "S14").collect();
    if !s14.is_empty() {
        out.push_str("### S14 a subscription costs what it changes: one name let go of and one subscribed, on a delta stream holding N names and on one holding 1,000\n\nThe two streams' requests take turns. Time = from a request's send to the response bringing its new name (ms); CPU = the bench process's (server and client, read to the nanosecond) over the same span, the mean per request; in the larger stream's notes its ratios to the smaller one's, summed over the requests (~1x when a request costs what it names).\n\n");
        out.push_str("| mode | requests | sync ms | p50 ms | p90 ms | max ms | CPU us/request | notes |\n|---|---|---|---|---|---|---|---|\n");
        for r in &s14 {
            let [p50, p90, _, max] = ms(&r.conv_ms);
            let [sync, _, _, _] = ms(&r.sync_ms);
            let _ = writeln!(
                out,
                "| {} | {} | {sync} | {p50} | {p90} | {max} | {:.1} | {} |",
                r.mode,
                r.changes,
                r.change_cpu_s * 1e6 / r.changes.max(1) as f64,
                note(r)
            );
        }
        out.push('\n');
    }
    let s2: Vec<&Row> = rows.iter().filter(|r| r.scenario == "S2").collect();
    if !s2.is_empty() {
        out.push_str("### S2 large state: one Cluster changes; SotW resends every cluster, delta only the changed one\n\n");
        out.push_str("| server | mode | streams | clusters | p50 | p90 | p99 | max | changes | CPU ms/change | KiB sent/change | xdsd ÷ limit (p50) | peer ÷ xdsd (p50) | initial sync max (ms) | sync CPU s | RSS/stream (KiB) | notes |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        for r in &s2 {
            let [a, b, c, d] = ms(&r.conv_ms);
            let (vs_limit, vs_peer) = if r.server.starts_with("xdsd") {
                (
                    ratio(
                        p50(Some(r)),
                        p50(find(rows, "S2", "limit", &r.mode, r.clusters)),
                    ),
                    ratio(
                        p50(find(rows, "S2", "peer", &r.mode, r.clusters)),
                        p50(Some(r)),
                    ),
                )
            } else {
                ("".into(), "".into())
            };
            let per = r.changes.max(1) as f64;
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {a} | {b} | {c} | {d} | {} | {:.1} | {:.1} | {vs_limit} | {vs_peer} | {} | {:.2} | {:.0} | {} |",
                r.server, r.mode, r.streams, r.clusters, r.changes,
                r.change_cpu_s * 1e3 / per, r.bytes as f64 / 1024.0 / per,
                r.sync_ms.map(|p| fmt_ms(p.max)).unwrap_or_else(|| "–".into()),
                r.sync_cpu_s, r.rss_per_stream_kib, note(r)
            );
        }
        out.push('\n');
    }
    if !s1.is_empty() {
        out.push_str("### S3 idle memory: server RSS per connected, synced, idle stream (S1 configuration)\n\n");
        out.push_str("| server | mode | streams | RSS loaded (MiB) | RSS with streams (MiB) | KiB per stream | xdsd ÷ limit |\n|---|---|---|---|---|---|---|\n");
        for r in s1.iter().filter(|r| opened(r)) {
            let vs = if r.server.starts_with("xdsd") {
                let l = find(rows, "S1", "limit", &r.mode, r.streams).map(|l| l.rss_per_stream_kib);
                ratio(Some(r.rss_per_stream_kib), l)
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {:.1} | {vs} |",
                r.server,
                r.mode,
                r.streams,
                mib(r.rss_base_kib),
                mib(r.rss_idle_kib),
                r.rss_per_stream_kib
            );
        }
        out.push('\n');
        out.push_str("### S4 connect storm: every client connects at once; time from the first connect to each client's complete initial sync (ms)\n\n");
        out.push_str("| server | mode | streams | synced | p50 | p90 | p99 | max | errors | server CPU s | KiB received/stream | peak RSS (MiB) | xdsd ÷ limit (max) | peer ÷ xdsd (max) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        for r in s1.iter().filter(|r| opened(r)) {
            let [a, b, c, d] = ms(&r.sync_ms);
            let mx = |r: Option<&Row>| r.and_then(|r| r.sync_ms.map(|p| p.max));
            let (vs_limit, vs_peer) = if r.server.starts_with("xdsd") {
                (
                    ratio(
                        mx(Some(r)),
                        mx(find(rows, "S1", "limit", &r.mode, r.streams)),
                    ),
                    ratio(
                        mx(find(rows, "S1", "peer", &r.mode, r.streams)),
                        mx(Some(r)),
                    ),
                )
            } else {
                ("".into(), "".into())
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {}/{} | {a} | {b} | {c} | {d} | {} | {:.2} | {:.1} | {} | {vs_limit} | {vs_peer} |",
                r.server, r.mode, r.streams, r.synced, r.streams, r.errors, r.sync_cpu_s,
                r.sync_bytes as f64 / 1024.0 / r.streams.max(1) as f64, mib(r.rss_peak_kib)
            );
        }
        out.push('\n');
    }
    let s5: Vec<&Row> = rows.iter().filter(|r| r.scenario == "S5").collect();
    if !s5.is_empty() {
        out.push_str("### S5 churn: endpoint changes at a steady offered rate, 1 of C clusters at random each\n\n");
        out.push_str("Convergence per change (ms); a later change of the same cluster delivers the earlier ones.\n\n");
        out.push_str("| server | streams | offered/s | accepted/s | changes | p50 | p90 | p99 | max | client p50 | CPU s | responses | xdsd ÷ limit (p99) | peer ÷ xdsd (p99) | notes |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        for r in &s5 {
            let [a, b, c, d] = ms(&r.conv_ms);
            let p99 = |r: Option<&Row>| r.and_then(|r| r.conv_ms.map(|p| p.p99));
            let rate = r.rate.unwrap_or(0) as usize;
            let (vs_limit, vs_peer) = if r.server.starts_with("xdsd") {
                (
                    ratio(p99(Some(r)), p99(find_rate(rows, "limit", rate as u32))),
                    ratio(p99(find_rate(rows, "peer", rate as u32)), p99(Some(r))),
                )
            } else {
                ("".into(), "".into())
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {a} | {b} | {c} | {d} | {} | {:.2} | {} | {vs_limit} | {vs_peer} | {} |",
                r.server, r.streams, rate,
                r.achieved_rate.map(|x| format!("{x:.0}")).unwrap_or_else(|| "–".into()),
                r.changes,
                r.client_ms.map(|p| fmt_ms(p.p50)).unwrap_or_else(|| "–".into()),
                r.change_cpu_s, r.responses, note(r)
            );
        }
        out.push('\n');
    }
    let s6: Vec<&Row> = rows.iter().filter(|r| r.scenario == "S6").collect();
    if !s6.is_empty() {
        out.push_str("### S6 variant groups: streams in parameter groups by node metadata; one group's variant of a ClusterLoadAssignment changes

");
        out.push_str("Convergence = from the server accepting the change to the last stream of the changed group having it (ms). \"other groups\" = responses the streams of the other groups received during the changes (must be 0). ÷ S1 = against S1 with the same server and streams in this run (S1: every stream gets every change).

");
        out.push_str("| server | streams | groups | p50 | p90 | p99 | max | changes | other groups | CPU ms/change | CPU ÷ S1 | RSS with streams (MiB) | RSS ÷ S1 | KiB per stream | notes |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        for r in &s6 {
            let [a, b, c, d] = ms(&r.conv_ms);
            let per = r.changes.max(1) as f64;
            let cpu = |r: &Row| r.change_cpu_s * 1e3 / r.changes.max(1) as f64;
            let s1 = find(rows, "S1", &r.server, "sotw", r.streams).filter(|s| s.changes > 0);
            let ran = r.changes > 0;
            let _ =
                writeln!(
                out,
                "| {} | {} | {} | {a} | {b} | {c} | {d} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.server,
                r.streams,
                r.groups,
                r.changes,
                r.other_responses.map(|n| n.to_string()).unwrap_or_else(|| "–".into()),
                if ran { format!("{:.1}", r.change_cpu_s * 1e3 / per) } else { "–".into() },
                if ran { ratio(Some(cpu(r)), s1.map(cpu)) } else { "–".into() },
                if ran { mib(r.rss_idle_kib) } else { "–".into() },
                if ran {
                    ratio(Some(r.rss_idle_kib as f64), s1.map(|s| s.rss_idle_kib as f64))
                } else {
                    "–".into()
                },
                if ran { format!("{:.1}", r.rss_per_stream_kib) } else { "–".into() },
                note(r)
            );
        }
        out.push('\n');
    }
    let s7: Vec<&Row> = rows.iter().filter(|r| r.scenario == "S7").collect();
    if !s7.is_empty() {
        out.push_str("### S7 one-file change: a directory of N resource files; one endpoints file is renamed into place per change

");
        out.push_str("The xdsd binary (xdsd-dir), incremental reloads against `--reload full` in this run. Convergence = from the rename to the last of 10 streams having the change (ms).

");
        out.push_str("| server | reload | files | streams | p50 | p90 | p99 | max | changes | CPU ms/change | CPU ÷ full | p50 ÷ full | notes |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        for r in &s7 {
            let [a, b, c, d] = ms(&r.conv_ms);
            let cpu = |r: &Row| r.change_cpu_s * 1e3 / r.changes.max(1) as f64;
            let full = rows
                .iter()
                .find(|f| f.scenario == "S7" && f.mode == "full" && f.clusters == r.clusters)
                .filter(|f| f.changes > 0);
            let ran = r.changes > 0;
            let (cpu_ratio, p50_ratio) = if r.mode == "full" || !ran {
                ("".to_owned(), "".to_owned())
            } else {
                (
                    ratio(Some(cpu(r)), full.map(cpu)),
                    ratio(p50(Some(r)), p50(full)),
                )
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {a} | {b} | {c} | {d} | {} | {} | {cpu_ratio} | {p50_ratio} | {} |",
                r.server,
                r.mode,
                r.clusters,
                r.streams,
                r.changes,
                if ran { format!("{:.0}", cpu(r)) } else { "–".into() },
                note(r)
            );
        }
        out.push('\n');
    }
    out
}

/// A line chart of S1 median convergence time against streams, one line per server.
pub fn svg(rows: &[Row]) -> String {
    type Series<'a> = (&'a str, &'a str, Vec<(f64, f64)>);
    let series: Vec<Series> = [
        ("xdsd", "#1f77b4"),
        ("xdsd-dir", "#9467bd"),
        ("xdsd-etcd", "#ff7f0e"),
        ("limit", "#2ca02c"),
        ("peer", "#d62728"),
    ]
    .into_iter()
    .map(|(name, color)| {
        let mut pts: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| r.scenario == "S1" && r.mode == "sotw" && r.server == name)
            .filter_map(|r| r.conv_ms.map(|p| (r.streams as f64, p.p50)))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        (name, color, pts)
    })
    .filter(|s| !s.2.is_empty())
    .collect();
    let (w, h, l, r, t, b) = (720.0, 420.0, 70.0, 130.0, 40.0, 60.0);
    let xmax = series
        .iter()
        .flat_map(|s| &s.2)
        .map(|p| p.0)
        .fold(1.0, f64::max);
    let ymax_raw = series
        .iter()
        .flat_map(|s| &s.2)
        .map(|p| p.1)
        .fold(0.001, f64::max);
    let ymax = nice(ymax_raw);
    let xs = |x: f64| l + x / xmax * (w - l - r);
    let ys = |y: f64| h - b - y / ymax * (h - t - b);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="14">S1: median time for one endpoint change to reach every stream</text>"#,
        w / 2.0
    );
    for i in 0..=5 {
        let y = ymax * i as f64 / 5.0;
        let _ = writeln!(
            s,
            r##"<line x1="{l}" x2="{0}" y1="{1}" y2="{1}" stroke="#ddd"/><text x="{2}" y="{3}" text-anchor="end">{4}</text>"##,
            w - r,
            ys(y),
            l - 6.0,
            ys(y) + 4.0,
            fmt_ms(y)
        );
    }
    let mut ticks: Vec<f64> = series
        .iter()
        .flat_map(|s| s.2.iter().map(|p| p.0))
        .collect();
    ticks.sort_by(f64::total_cmp);
    ticks.dedup();
    for x in ticks {
        let _ = writeln!(
            s,
            r##"<line x1="{0}" x2="{0}" y1="{1}" y2="{2}" stroke="#eee"/><text x="{0}" y="{3}" text-anchor="middle">{4}</text>"##,
            xs(x),
            t,
            h - b,
            h - b + 16.0,
            x as u64
        );
    }
    let _ = writeln!(
        s,
        r#"<line x1="{l}" x2="{l}" y1="{t}" y2="{0}" stroke="black"/><line x1="{l}" x2="{1}" y1="{0}" y2="{0}" stroke="black"/>"#,
        h - b,
        w - r
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">ADS streams (SotW)</text>"#,
        (l + w - r) / 2.0,
        h - 18.0
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(18,{}) rotate(-90)" text-anchor="middle">convergence p50 (ms)</text>"#,
        (t + h - b) / 2.0
    );
    for (i, (name, color, pts)) in series.iter().enumerate() {
        let path: Vec<String> = pts
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", xs(*x), ys(*y)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            path.join(" ")
        );
        for (x, y) in pts {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{color}"/>"#,
                xs(*x),
                ys(*y)
            );
        }
        let ly = t + 20.0 + i as f64 * 20.0;
        let _ = writeln!(
            s,
            r#"<line x1="{}" x2="{}" y1="{ly}" y2="{ly}" stroke="{color}" stroke-width="3"/><text x="{}" y="{}">{name}</text>"#,
            w - r + 12.0,
            w - r + 36.0,
            w - r + 42.0,
            ly + 4.0
        );
    }
    s.push_str("</svg>\n");
    s
}

fn nice(v: f64) -> f64 {
    let mag = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if v <= m * mag {
            return m * mag;
        }
    }
    10.0 * mag
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s5(server: &str, rate: u32, p99: f64) -> Row {
        Row {
            scenario: "S5".into(),
            server: server.into(),
            mode: "sotw".into(),
            streams: 1000,
            rate: Some(rate),
            conv_ms: Some(Pct {
                n: 1,
                p50: p99,
                p90: p99,
                p99,
                max: p99,
            }),
            ..Default::default()
        }
    }

    fn s1(server: &str, mode: &str, p50: f64) -> Row {
        Row {
            scenario: "S1".into(),
            server: server.into(),
            mode: mode.into(),
            streams: 1000,
            synced: 1000,
            conv_ms: Some(Pct {
                n: 1,
                p50,
                p90: p50,
                p99: p50,
                max: p50,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn an_s1_delta_ratio_is_to_the_limit_s_delta_row() {
        let rows = [
            s1("xdsd", "sotw", 30.0),
            s1("limit", "sotw", 20.0),
            s1("xdsd", "delta", 40.0),
            s1("limit", "delta", 50.0),
        ];
        let md = markdown(&rows);
        let line = md
            .lines()
            .find(|l| l.starts_with("| xdsd | delta | 1000 |"))
            .expect("the xdsd delta row");
        assert!(line.contains("| 0.80× |"), "{line}");
        let line = md
            .lines()
            .find(|l| l.starts_with("| xdsd | sotw | 1000 |"))
            .expect("the xdsd SotW row");
        assert!(line.contains("| 1.50× |"), "{line}");
    }

    #[test]
    fn an_s5_ratio_is_to_the_limit_s_row_of_the_same_rate_not_of_the_same_stream_count() {
        let rows = [
            s5("xdsd", 250, 150.0),
            s5("xdsd", 1000, 200.0),
            s5("limit", 250, 100.0),
            s5("limit", 1000, 160.0),
        ];
        let md = markdown(&rows);
        let line = md
            .lines()
            .find(|l| l.starts_with("| xdsd | 1000 | 1000 |"))
            .expect("the xdsd row at 1,000/s");
        assert!(line.contains("| 1.25× |"), "{line}");
    }
}
