//! A bad change to the resource directory is rejected whole: xdsd logs an ERROR naming the file,
//! and clients keep getting the last good configuration (a stream open across the change gets
//! nothing new, a new stream gets exactly the old resources). A good change afterwards is applied
//! and pushed.

use crate::support::ads::{self, AdsStream};
use crate::support::{unique_name, ResourceDir, Xdsd, CLUSTER, DEADLINE};

fn cluster_yaml(name: &str) -> String {
    format!(
        "\"@type\": {CLUSTER}
name: {name}
type: STATIC
connect_timeout: 1s
"
    )
}

/// A bad change: `files` are written (in order) into the directory, then removed again.
struct BadCase {
    what: &'static str,
    files: Vec<(&'static str, String)>,
    /// A file name the ERROR line must contain (any one of them).
    named: Vec<&'static str>,
}

fn bad_cases() -> Vec<BadCase> {
    vec![
        BadCase {
            what: "malformed YAML",
            files: vec![(
                "malformed.yaml",
                "\"@type\": [unclosed\nname: : x\n  - {".to_string(),
            )],
            named: vec!["malformed.yaml"],
        },
        BadCase {
            what: "malformed JSON",
            files: vec![(
                "malformed.json",
                format!("{{\"@type\": \"{CLUSTER}\", \"name\": \"j\","),
            )],
            named: vec!["malformed.json"],
        },
        BadCase {
            what: "unknown @type",
            files: vec![(
                "unknown-type.yaml",
                "\"@type\": type.googleapis.com/envoy.config.cluster.v3.NoSuchMessage\nname: y\n"
                    .to_string(),
            )],
            named: vec!["unknown-type.yaml"],
        },
        BadCase {
            what: "duplicate name across two files",
            files: vec![("duplicate.yaml", cluster_yaml("x"))],
            named: vec!["duplicate.yaml"],
        },
        BadCase {
            what: "unknown field",
            files: vec![(
                "unknown-field.yaml",
                format!("{}no_such_field: 1\n", cluster_yaml("y")),
            )],
            named: vec!["unknown-field.yaml"],
        },
        BadCase {
            what: "a good document followed by a bad one in one file",
            files: vec![(
                "half-good.yaml",
                format!(
                    "{}---\n\"@type\": {CLUSTER}\nname: w\nbogus_field: true\n",
                    cluster_yaml("z")
                ),
            )],
            named: vec!["half-good.yaml"],
        },
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_changes_are_rejected_whole_and_the_last_good_config_stays_served() {
    let dir = ResourceDir::new();
    dir.write("cluster-x.yaml", &cluster_yaml("x"));
    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;

    // A stream that stays open through every change.
    let node = unique_name("bad-dir-node");
    let mut watcher = AdsStream::open(&xdsd.url(), &node, CLUSTER, &[])
        .await
        .expect("an ADS stream to xdsd");
    let good = watcher.recv().await.expect("the first CDS response");
    assert_eq!(good.type_url, CLUSTER);
    assert_eq!(ads::names(&good), ["x"]);
    watcher
        .request(CLUSTER, &[], Some(&good))
        .await
        .expect("ACK the first CDS response");

    for case in bad_cases() {
        let mark = xdsd.log.mark();
        for (name, contents) in &case.files {
            dir.write(name, contents);
        }
        let rejected = xdsd
            .log
            .wait_for_since(
                mark,
                |l| l.contains("rejected") && case.named.iter().any(|n| l.contains(n)),
                DEADLINE,
            )
            .await
            .unwrap_or_else(|why| {
                panic!(
                    "{}: expected an ERROR line with `rejected` and one of {:?} ({why}). Log:\n{}",
                    case.what,
                    case.named,
                    xdsd.log.text()
                )
            });
        assert!(
            rejected.contains("ERROR"),
            "{}: the rejection is an ERROR: {rejected}",
            case.what
        );
        let after_rejection = xdsd.log.mark();

        // A new stream gets exactly the last good config.
        let resp = ads::fetch(&xdsd.url(), &unique_name("fresh-node"), CLUSTER, &[])
            .await
            .unwrap_or_else(|e| panic!("{}: CDS on a new stream: {e}", case.what));
        assert_eq!(ads::names(&resp), ["x"], "{}: served clusters", case.what);
        assert_eq!(
            resp.resources, good.resources,
            "{}: the very same cluster bytes as before",
            case.what
        );
        assert_eq!(
            resp.version_info, good.version_info,
            "{}: the version did not change",
            case.what
        );

        let loaded = xdsd
            .log
            .matching_since(after_rejection, |l| l.contains("resources loaded"));
        assert!(
            loaded.is_empty(),
            "{}: nothing was loaded after the rejection: {loaded:?}",
            case.what
        );

        for (name, _) in &case.files {
            dir.remove(name);
        }
    }

    // The open stream got no new state from any of the bad changes (or from their removal).
    match watcher.recv_within(std::time::Duration::from_secs(1)).await {
        Err(e) if e.starts_with("no response") => {}
        Err(e) => panic!("the open stream failed: {e}"),
        Ok(resp) => {
            assert_eq!(
                resp.resources, good.resources,
                "the open stream was pushed different clusters"
            );
            watcher
                .request(CLUSTER, &[], Some(&resp))
                .await
                .expect("ACK");
        }
    }

    // A good change is applied and pushed.
    let mark = xdsd.log.mark();
    dir.write("cluster-y.yaml", &cluster_yaml("y"));
    xdsd.expect_loaded_since(mark).await;
    let pushed = loop {
        let resp = watcher
            .recv()
            .await
            .expect("a CDS push after the good change");
        if ads::names(&resp) != ["x"] {
            break resp;
        }
        // A response with the unchanged state (allowed, if pointless): ACK and keep waiting.
        watcher
            .request(CLUSTER, &[], Some(&resp))
            .await
            .expect("ACK");
    };
    assert_eq!(ads::names(&pushed), ["x", "y"]);
    assert_ne!(pushed.version_info, good.version_info, "a new version");
    let fresh = ads::fetch(&xdsd.url(), &unique_name("fresh-node"), CLUSTER, &[])
        .await
        .expect("CDS on a new stream after the good change");
    assert_eq!(ads::names(&fresh), ["x", "y"]);

    let nacks = xdsd.log.matching_since(0, |l| l.contains("NACK"));
    assert!(nacks.is_empty(), "no client NACKed: {nacks:#?}");
}
