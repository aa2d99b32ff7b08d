//! The soak's plot: RSS and open fds of every process over time (soak.svg), the faults marked.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::procs::Sample;

const COLORS: [&str; 4] = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"];

/// Three panels (RSS and heap in use in MiB, open fds) against seconds since the start; one line per process
/// (etcd's grey and dashed: reported, not held to the bounds), a red tick per fault, a dotted
/// line at the end of the warm-up.
pub fn svg(
    samples: &HashMap<String, Vec<(f64, u32, Sample)>>,
    faults: &[(f64, String)],
    warmup_s: f64,
) -> String {
    let mut names: Vec<&String> = samples.keys().collect();
    names.sort();
    let (w, panel_h, l, r, t, gap) = (900.0, 260.0, 70.0, 150.0, 30.0, 60.0);
    let h = t + panel_h * 3.0 + gap * 2.0 + 40.0;
    let xmax = samples
        .values()
        .flat_map(|v| v.iter().map(|s| s.0))
        .fold(1.0, f64::max);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    type Pick = fn(&Sample) -> f64;
    let panels: [(&str, Pick); 3] = [
        ("RSS (MiB)", |x: &Sample| x.rss as f64 / 1048576.0),
        ("heap in use (MiB; xdsd processes)", |x: &Sample| {
            x.heap as f64 / 1048576.0
        }),
        ("open fds", |x: &Sample| x.fds as f64),
    ];
    for (p, (label, pick)) in panels.iter().enumerate() {
        let top = t + p as f64 * (panel_h + gap);
        let bottom = top + panel_h;
        let ymax = samples
            .values()
            .flat_map(|v| v.iter().map(|x| pick(&x.2)))
            .fold(1.0, f64::max)
            * 1.1;
        let xs = |x: f64| l + x / xmax * (w - l - r);
        let ys = |y: f64| bottom - y / ymax * panel_h;
        let _ = writeln!(
            s,
            r#"<line x1="{l}" y1="{bottom}" x2="{}" y2="{bottom}" stroke="black"/><line x1="{l}" y1="{top}" x2="{l}" y2="{bottom}" stroke="black"/>"#,
            w - r
        );
        let _ = writeln!(
            s,
            r#"<text x="{l}" y="{}" font-weight="bold">{label}</text>"#,
            top - 8.0
        );
        for k in 0..=4 {
            let y = ymax * k as f64 / 4.0;
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" text-anchor="end">{y:.0}</text>"#,
                l - 6.0,
                ys(y) + 4.0
            );
        }
        for k in 0..=5 {
            let x = xmax * k as f64 / 5.0;
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" text-anchor="middle">{x:.0} s</text>"#,
                xs(x),
                bottom + 16.0
            );
        }
        let _ = writeln!(
            s,
            r#"<line x1="{0}" y1="{top}" x2="{0}" y2="{bottom}" stroke="gray" stroke-dasharray="2,3"/>"#,
            xs(warmup_s)
        );
        for (at, _) in faults {
            let _ = writeln!(
                s,
                r#"<line x1="{0}" y1="{1}" x2="{0}" y2="{bottom}" stroke="red" stroke-width="1"/>"#,
                xs(*at),
                bottom - 8.0
            );
        }
        let mut color = 0;
        for (n, name) in names.iter().enumerate() {
            let etcd = name.starts_with("etcd");
            let stroke = if etcd {
                "#999999"
            } else {
                let c = COLORS[color % COLORS.len()];
                color += 1;
                c
            };
            let dash = if etcd {
                r#" stroke-dasharray="4,3""#
            } else {
                ""
            };
            let pts: Vec<String> = samples[*name]
                .iter()
                .map(|x| format!("{:.1},{:.1}", xs(x.0), ys(pick(&x.2))))
                .collect();
            let _ = writeln!(
                s,
                r#"<polyline fill="none" stroke="{stroke}" stroke-width="1.5"{dash} points="{}"/>"#,
                pts.join(" ")
            );
            if p == 0 {
                let ly = t + 14.0 * n as f64;
                let _ = writeln!(
                    s,
                    r#"<line x1="{0}" y1="{ly}" x2="{1}" y2="{ly}" stroke="{stroke}" stroke-width="2"{dash}/><text x="{2}" y="{3}">{name}</text>"#,
                    w - r + 10.0,
                    w - r + 30.0,
                    w - r + 35.0,
                    ly + 4.0
                );
            }
        }
    }
    let _ = writeln!(
        s,
        r#"<text x="{l}" y="{}">red ticks: faults injected; dotted: end of the warm-up</text>"#,
        h - 10.0
    );
    s.push_str("</svg>\n");
    s
}

/// The soak's section of the bench's printed report (markdown).
pub fn summary(v: &serde_json::Value) -> String {
    let mut s = String::new();
    let passed = v["passed"].as_bool().unwrap_or(false);
    let _ = writeln!(
        s,
        "## Soak: {} ({} s, {} streams{})\n",
        if passed { "passed" } else { "FAILED" },
        v["duration_s"],
        v["streams"],
        if v["leak_switch"].as_bool() == Some(true) {
            ", leak switch on"
        } else {
            ""
        }
    );
    let _ = writeln!(
        s,
        "Faults injected {}, survived {}; changes accepted {}; clients replaced {}; streams ended {}; resends {}; canary NACKs {}.\n",
        v["faults_injected"],
        v["faults_survived"],
        v["changes_accepted"],
        v["clients_replaced"],
        v["streams_ended"],
        v["resends"],
        v["canary_nacks"]
    );
    let _ = writeln!(
        s,
        "| phase | changes×streams | p50 ms | p90 ms | p99 ms | max ms |"
    );
    let _ = writeln!(s, "| --- | ---: | ---: | ---: | ---: | ---: |");
    if let Some(m) = v["convergence"].as_object() {
        for (phase, p) in m {
            let f = |k: &str| {
                p[k].as_f64()
                    .map(|x| format!("{x:.0}"))
                    .unwrap_or("–".into())
            };
            let _ = writeln!(
                s,
                "| {phase} | {} | {} | {} | {} | {} |",
                p["n"],
                f("p50_ms"),
                f("p90_ms"),
                f("p99_ms"),
                f("max_ms")
            );
        }
    }
    let _ = writeln!(
        s,
        "\n| process | RSS warm-up → end (MiB) | rss_growth | heap in use (MiB) | heap_growth | fds | fd_growth | threads | heap bytes/stream opened | heap bytes/change |"
    );
    let _ = writeln!(
        s,
        "| --- | --- | ---: | --- | ---: | --- | ---: | --- | ---: | ---: |"
    );
    if let Some(m) = v["processes"].as_object() {
        for (name, p) in m {
            if p.get("note").is_some() {
                let _ = writeln!(
                    s,
                    "| {name} | {} | | | | | | | | |",
                    p["note"].as_str().unwrap_or("")
                );
                continue;
            }
            let mib = |k: &str| p[k].as_f64().unwrap_or(0.0) / 1048576.0;
            let pct = |k: &str| {
                p[k].as_f64()
                    .map(|x| format!("{:+.1} %", x * 100.0))
                    .unwrap_or("–".into())
            };
            let num = |k: &str| {
                p[k].as_f64()
                    .map(|x| format!("{x:.0}"))
                    .unwrap_or("–".into())
            };
            let _ = writeln!(
                s,
                "| {name}{} | {:.1} → {:.1} | {} | {:.1} → {:.1} | {} | {} → {} | {} | {} → {} | {} | {} |",
                if p["held_to_bounds"].as_bool() == Some(false) {
                    " (reported)"
                } else {
                    ""
                },
                mib("rss_warmup"),
                mib("rss_end"),
                pct("rss_growth"),
                mib("heap_warmup"),
                mib("heap_end"),
                pct("heap_growth"),
                p["fds_warmup"],
                p["fds_end"],
                pct("fd_growth"),
                p["threads_warmup"],
                p["threads_end"],
                num("heap_bytes_per_stream_opened"),
                num("heap_bytes_per_change"),
            );
        }
    }
    if let Some(list) = v["invariants_broken"]["list"].as_array() {
        if !list.is_empty() {
            let _ = writeln!(s, "\nInvariants broken ({}):\n", list.len());
            for b in list.iter().take(30) {
                let _ = writeln!(
                    s,
                    "- {:.1} s: **{}** — {} {} — {}",
                    b["at_s"].as_f64().unwrap_or(0.0),
                    b["invariant"].as_str().unwrap_or(""),
                    b["process"].as_str().unwrap_or(""),
                    b["stream"].as_str().unwrap_or(""),
                    b["detail"].as_str().unwrap_or("")
                );
            }
            if list.len() > 30 {
                let _ = writeln!(s, "- … {} more in results.json", list.len() - 30);
            }
        }
    }
    s
}
