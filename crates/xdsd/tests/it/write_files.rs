//! `xdsd serve --write-files`: a file that cannot be written is logged as an ERROR and xdsd keeps
//! serving; the file is written at the next change once it can be. An output directory inside
//! the resources directory stops xdsd at start.

use std::process::Stdio;

use crate::support::{ads, unique_name, ResourceDir, Xdsd, CLUSTER, DEADLINE};

fn cluster_yaml(name: &str) -> String {
    format!("\"@type\": {CLUSTER}\nname: {name}\ntype: STATIC\nconnect_timeout: 1s\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_cannot_be_written_is_logged_and_serving_goes_on() {
    let dir = ResourceDir::new();
    dir.write("a.yaml", &cluster_yaml("a"));
    let out = tempfile::tempdir().expect("a temporary directory");
    // A non-empty directory where clusters.json goes: the rename over it fails.
    let blocker = out.path().join("clusters.json");
    std::fs::create_dir(&blocker).expect("mkdir");
    std::fs::write(blocker.join("x"), "x").expect("write");

    let out_arg = out.path().to_string_lossy().into_owned();
    let xdsd = Xdsd::start_with_args(
        &dir.path(),
        &["--write-files", &out_arg, "--write-format", "json,pb"],
    )
    .await;
    let error = xdsd
        .log
        .expect_line_since(0, &["ERROR", "clusters.json"], "the failed write")
        .await;
    assert!(error.contains("keeps serving"), "{error}");
    assert!(out.path().join("clusters.pb").is_file(), "the other format");
    assert!(
        out.path().join("listeners.json").is_file(),
        "the other types"
    );

    // Serving goes on.
    let resp = ads::fetch(&xdsd.url(), &unique_name("files-node"), CLUSTER, &[])
        .await
        .expect("CDS over ADS");
    assert_eq!(ads::names(&resp), ["a"]);

    // Once it can be, the file is written at the next change, with the new state.
    std::fs::remove_dir_all(&blocker).expect("rm");
    let mark = xdsd.log.mark();
    dir.write("b.yaml", &cluster_yaml("b"));
    xdsd.log
        .expect_line_since(
            mark,
            &["wrote discovery response files", "clusters.json"],
            "the clusters file written at the next change",
        )
        .await;
    let json = std::fs::read_to_string(&blocker).expect("clusters.json");
    let value: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    let names: Vec<&str> = value["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(names, ["a", "b"]);
    assert_ne!(
        value["version_info"],
        resp.version_info.as_str(),
        "the version of the new state"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_inside_the_resources_stops_xdsd_at_start() {
    let dir = ResourceDir::new();
    dir.write("a.yaml", &cluster_yaml("a"));
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_xdsd"))
        .args(["serve", "--listen", "127.0.0.1:0", "--resources"])
        .arg(dir.path())
        .arg("--write-files")
        .arg(dir.path().join("out"))
        .env("NO_COLOR", "1")
        .env("XDSD_ADMIN_LISTEN", "127.0.0.1:0")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(DEADLINE, run)
        .await
        .expect("xdsd exits by itself")
        .expect("xdsd runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("inside the resources directory"),
        "{stderr}"
    );
    assert!(!dir.path().join("out").exists(), "not created");
}
