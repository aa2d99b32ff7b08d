//! `xdsd watch` against a real xdsd (the binary): one line per update, a change and a removal
//! seen, `--contents`, ended by Ctrl-C.

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

use crate::get::{serving, CLUSTERS};
use crate::support::{Xdsd, DEADLINE};

struct Watch {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Watch {
    fn start(server: &Xdsd, extra: &[&str]) -> Watch {
        let addr = format!("127.0.0.1:{}", server.port);
        let mut child = Command::new(env!("CARGO_BIN_EXE_xdsd"))
            .args(["watch", "--server", &addr])
            .args(extra)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("xdsd watch runs");
        let stdout = child.stdout.take().expect("stdout");
        Watch {
            child,
            lines: BufReader::new(stdout).lines(),
        }
    }

    /// The next line that contains `needle`, the others skipped (and returned, for messages).
    async fn line_with(&mut self, needle: &str) -> (String, Vec<String>) {
        let mut skipped = Vec::new();
        let found = tokio::time::timeout(DEADLINE, async {
            while let Ok(Some(line)) = self.lines.next_line().await {
                if line.contains(needle) {
                    return Some(line);
                }
                skipped.push(line);
            }
            None
        })
        .await;
        match found {
            Ok(Some(line)) => (line, skipped),
            _ => panic!("no line with {needle:?}; before it: {skipped:#?}"),
        }
    }

    /// Ctrl-C: the watch ends with status 0.
    async fn interrupt(mut self) {
        let pid = self.child.id().expect("running");
        let status = std::process::Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
        let exit = tokio::time::timeout(DEADLINE, self.child.wait())
            .await
            .expect("exits in time")
            .expect("exit status");
        assert!(exit.success(), "{exit}");
    }
}

const ALPHA_CHANGED: &str = r#"
"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
name: alpha
connect_timeout: 5s
"#;

async fn watch_prints_a_line_per_update(extra: &[&str]) {
    let dir = serving(&[("clusters.yaml", CLUSTERS)]);
    let server = Xdsd::start(&dir.path()).await;
    let mut watch = Watch::start(&server, extra);
    let (line, _) = watch.line_with("connected to").await;
    assert!(
        line.starts_with("20"),
        "the line starts with the time: {line}"
    );
    let (line, _) = watch.line_with("added=").await;
    assert!(
        line.contains("cluster version=") && line.contains("added=alpha,beta"),
        "{line}"
    );
    dir.write("clusters.yaml", ALPHA_CHANGED);
    let (line, skipped) = watch.line_with("changed=").await;
    assert!(line.contains("changed=alpha"), "{line}");
    // SotW clusters are full state: beta left out is beta removed; delta says so.
    let removal = match skipped.iter().find(|l| l.contains("removed=")) {
        Some(line) => line.clone(),
        None => watch.line_with("removed=").await.0,
    };
    assert!(
        removal.contains("cluster version=") && removal.contains("removed=beta"),
        "{removal}"
    );
    watch.interrupt().await;
}

#[tokio::test]
async fn watch_sotw_prints_a_line_per_update() {
    watch_prints_a_line_per_update(&["cluster"]).await;
}

#[tokio::test]
async fn watch_delta_prints_a_line_per_update() {
    watch_prints_a_line_per_update(&["--delta", "cluster"]).await;
}

#[tokio::test]
async fn watch_contents_prints_the_resources_after_their_line() {
    let dir = serving(&[("clusters.yaml", CLUSTERS)]);
    let server = Xdsd::start(&dir.path()).await;
    let mut watch = Watch::start(&server, &["--contents", "cluster", "beta"]);
    watch.line_with("added=beta").await;
    let (line, _) = watch.line_with("name:").await;
    assert_eq!(line, "name: \"beta\"");
    watch.line_with("lb_policy: \"RING_HASH\"").await;
    watch.interrupt().await;
}

#[tokio::test]
async fn watch_against_rust_control_plane_sees_a_change() {
    use prost::Message as _;
    use xdsd_testsupport::peer::{Peer, PEER_NODE};
    let Some(mut peer) = Peer::start().await else {
        return;
    };
    let cluster = |seconds: i64| {
        envoy_types::pb::envoy::config::cluster::v3::Cluster {
            name: "alpha".into(),
            connect_timeout: Some(envoy_types::pb::google::protobuf::Duration {
                seconds,
                nanos: 0,
            }),
            ..Default::default()
        }
        .encode_to_vec()
    };
    let cds = xdsd_client::types::CLUSTER;
    peer.set(cds, "alpha", &cluster(1)).await;
    let mut child = Command::new(env!("CARGO_BIN_EXE_xdsd"))
        .args([
            "watch",
            "--server",
            &peer.addr,
            "--node",
            PEER_NODE,
            "--contents",
            "cluster",
        ])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("xdsd watch runs");
    let stdout = child.stdout.take().expect("stdout");
    let mut watch = Watch {
        child,
        lines: BufReader::new(stdout).lines(),
    };
    watch.line_with("added=alpha").await;
    watch.line_with("connect_timeout: \"1s\"").await;
    peer.set(cds, "alpha", &cluster(7)).await;
    watch.line_with("changed=alpha").await;
    watch.line_with("connect_timeout: \"7s\"").await;
    watch.interrupt().await;
}

#[tokio::test]
async fn watch_a_glob_collection_reports_its_members_added_and_removed() {
    use crate::get::{lb_endpoint, LB, LB_C1};
    let dir = serving(&[("e1.yaml", &lb_endpoint("e1", 8001))]);
    let server = Xdsd::start(&dir.path()).await;
    let glob = format!("{LB_C1}/*");
    let mut watch = Watch::start(&server, &["--delta", LB, &glob]);
    let (line, _) = watch.line_with("added=").await;
    assert!(line.contains(&format!("added={LB_C1}/e1")), "{line}");
    dir.write("e2.yaml", &lb_endpoint("e2", 8002));
    let (line, _) = watch.line_with("added=").await;
    assert!(line.contains(&format!("added={LB_C1}/e2")), "{line}");
    dir.remove("e1.yaml");
    let (line, _) = watch.line_with("removed=").await;
    assert!(line.contains(&format!("removed={LB_C1}/e1")), "{line}");
    watch.interrupt().await;
}
