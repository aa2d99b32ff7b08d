//! Runs the benchmark's quick mode against xdsd and the transport limit (not the peer, whose
//! build needs protoc), so that the harness keeps working. It checks what happened, never how
//! fast: every client synced and received every change, with no errors (S1 and S2 in SotW and in
//! delta); in S6 (variant groups),
//! the streams of the groups whose variant did not change received nothing.
//!
//! The `xdsd-dir` kind (the xdsd binary serving a watched directory) is not run here: it needs
//! the xdsd binary, which `cargo test -p xds-bench` does not build (`CARGO_BIN_EXE_*` exists only
//! for the crate's own binaries). Its JSON conversion is unit-tested in `src/dirsrc.rs`; run it
//! with `cargo build --release -p xdsd -p xds-bench && target/release/xds-bench --quick
//! --servers xdsd,xdsd-dir,limit --scenarios s1`. The same holds for `xdsd-etcd` (the binary on
//! an etcd prefix, with an etcd the adapter starts): `--servers xdsd-dir,xdsd-etcd`.

use std::process::Command;

#[test]
fn quick_mode_measures_xdsd_and_the_limit() {
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_xds-bench"))
        .args(["--quick", "--servers", "xdsd,limit", "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "xds-bench failed: {stderr}");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(stdout.contains("### S1 fan-out"), "{stdout}");

    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("results.json")).unwrap()).unwrap();
    let rows = json["rows"].as_array().unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for row in rows {
        let what = format!(
            "{} {} {} streams={} clusters={} rate={}",
            row["scenario"],
            row["server"],
            row["mode"],
            row["streams"],
            row["clusters"],
            row["rate"]
        );
        seen.insert((
            row["scenario"].as_str().unwrap().to_owned(),
            row["server"].as_str().unwrap().to_owned(),
            row["mode"].as_str().unwrap().to_owned(),
        ));
        let s6 = row["scenario"] == "S6";
        if s6 && row["server"] == "limit" {
            // The limit has no variants: S6 says so instead of running.
            assert!(
                row["note"].as_str().unwrap().starts_with("not run"),
                "{what}"
            );
            continue;
        }
        assert_eq!(row["note"], "", "{what}: {}", row["note"]);
        assert_eq!(row["errors"], 0, "{what}: {}", row["error_samples"]);
        assert_eq!(
            row["synced"], row["streams"],
            "{what}: not every client synced"
        );
        let changes = row["changes"].as_u64().unwrap();
        assert!(changes > 0, "{what}: no change measured");
        assert_eq!(row["missing"], 0, "{what}: some client missed a change");
        assert!(
            row["responses"].as_u64().unwrap() > 0,
            "{what}: no response during the changes"
        );
        assert!(
            row["bytes"].as_u64().unwrap() > 0,
            "{what}: no bytes during the changes"
        );
        assert_eq!(row["conv_ms"]["n"].as_u64().unwrap(), changes, "{what}");
        assert!(
            row["rss_idle_kib"].as_u64().unwrap() > 0,
            "{what}: no RSS read"
        );
        let streams = row["streams"].as_u64().unwrap();
        assert_eq!(row["sync_ms"]["n"].as_u64().unwrap(), streams, "{what}");
        // S6: a change is for one group's streams only (the quick size divides evenly).
        let receivers = if s6 {
            let groups = row["groups"].as_u64().unwrap();
            assert!(groups > 1 && streams % groups == 0, "{what}");
            assert_eq!(
                row["other_responses"], 0,
                "{what}: streams of groups whose variant did not change received responses"
            );
            streams / groups
        } else {
            streams
        };
        assert_eq!(
            row["client_ms"]["n"].as_u64().unwrap(),
            changes * receivers,
            "{what}: one latency per (client, change)"
        );
    }
    assert!(
        seen.contains(&("S6".into(), "xdsd".into(), "sotw".into())),
        "no S6 row for xdsd"
    );
    for scenario in ["S1", "S2", "S5"] {
        for server in ["xdsd", "limit"] {
            assert!(
                seen.iter().any(|(s, v, _)| s == scenario && v == server),
                "no {scenario} row for {server}"
            );
        }
    }
    for server in ["xdsd", "limit"] {
        // Delta fan-out is measured in S1 too, beside SotW (issue #50).
        for scenario in ["S1", "S2"] {
            assert!(
                seen.contains(&(scenario.into(), server.into(), "delta".into())),
                "no {scenario} delta row for {server}"
            );
        }
    }
    let svg = std::fs::read_to_string(out.path().join("s1.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.matches("<polyline").count() == 2,
        "{svg}"
    );
    assert!(std::fs::read_to_string(out.path().join("results.md"))
        .unwrap()
        .contains("### S5 churn"));
    assert!(std::fs::read_to_string(out.path().join("results.md"))
        .unwrap()
        .contains("### S6 variant groups"));
}
