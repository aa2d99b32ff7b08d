//! The resources directory as hostile input, through the real binary: a YAML alias bomb and a
//! file over `--max-file-bytes` are rejected naming the file, the last good state is still
//! served, and xdsd's memory does not grow with what the files would expand to; a FIFO with a
//! resource file's name, or a file its writer holds open, holds back only itself.

use crate::support::ads::{self, AdsStream};
use crate::support::{unique_name, ResourceDir, Xdsd, CLUSTER};

fn cluster_file(name: &str) -> String {
    format!("\"@type\": {CLUSTER}\nname: {name}\ntype: STATIC\nconnect_timeout: 1s\n")
}

/// What xdsd may grow by while refusing the alias bomb: the 4,000,000 nodes the expansion budget
/// lets it build before refusing (about 250 MiB of JSON values), far below the 10^8 nodes (several
/// GiB) that took all memory before the budget.
const BOMB_GROWTH_KIB: u64 = 384 * 1024;

/// What xdsd may grow by while refusing a 64 MiB file under a 16 MiB limit: it is refused by its
/// size, before it is read.
const BIG_FILE_GROWTH_KIB: u64 = 4 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alias_bomb_and_an_oversized_file_are_rejected_with_memory_bounded() {
    let dir = ResourceDir::new();
    dir.write("c.yaml", &cluster_file("c"));
    let xdsd = Xdsd::start_with_args(
        &dir.path(),
        &["--log-level", "debug", "--max-file-bytes", "16MiB"],
    )
    .await;
    xdsd.expect_loaded_since(0).await;
    let mut stream = AdsStream::open(&xdsd.url(), &unique_name("hostile"), CLUSTER, &[])
        .await
        .expect("an ADS stream to xdsd");
    assert_eq!(ads::names(&stream.recv().await.expect("CDS")), ["c"]);
    let before = xdsd.rss_kib();

    // 10,000 aliases of a 10,000-item list: 10^8 nodes from a 140 KB file.
    let items = vec!["xxxxxxxx"; 10_000].join(", ");
    let refs = vec!["*a"; 10_000].join(", ");
    let bomb = format!(
        "{}metadata:\n  filter_metadata:\n    x:\n      a: &a [{items}]\n      b: [{refs}]\n",
        cluster_file("bomb")
    );
    let mark = xdsd.log.mark();
    dir.write("bomb.yaml", &bomb);
    let rejected = xdsd
        .log
        .expect_line_since(mark, &["change rejected", "bomb.yaml"], "the bomb rejected")
        .await;
    assert!(rejected.contains("nodes"), "{rejected}");
    let after_bomb = xdsd.rss_kib();
    dir.remove("bomb.yaml");

    // A 64 MiB file, four times --max-file-bytes.
    let mark = xdsd.log.mark();
    let big = format!("{}# {}\n", cluster_file("big"), "x".repeat(64 << 20));
    dir.write("big.yaml", &big);
    drop(big);
    let rejected = xdsd
        .log
        .expect_line_since(
            mark,
            &["change rejected", "big.yaml"],
            "the big file rejected",
        )
        .await;
    assert!(rejected.contains("larger than"), "{rejected}");
    let after_big = xdsd.rss_kib();

    println!(
        "xdsd RSS: {before} KiB before, {after_bomb} KiB after the alias bomb, {after_big} KiB after the 64 MiB file"
    );
    assert!(
        after_bomb.saturating_sub(before) < BOMB_GROWTH_KIB,
        "the alias bomb grew xdsd from {before} to {after_bomb} KiB"
    );
    assert!(
        after_big.saturating_sub(after_bomb) < BIG_FILE_GROWTH_KIB,
        "the big file grew xdsd from {after_bomb} to {after_big} KiB"
    );
    // The last good state is still what clients get: a new stream gets `c` alone.
    let mut fresh = AdsStream::open(&xdsd.url(), &unique_name("hostile"), CLUSTER, &[])
        .await
        .expect("an ADS stream to xdsd");
    assert_eq!(ads::names(&fresh.recv().await.expect("CDS")), ["c"]);
}

/// The log lines after `mark` that say a change's outcome.
fn outcomes_since(xdsd: &Xdsd, mark: usize) -> Vec<String> {
    xdsd.log
        .text()
        .lines()
        .skip(mark)
        .filter(|l| {
            l.contains("resources loaded")
                || l.contains("resources unchanged")
                || l.contains("change rejected")
        })
        .map(str::to_owned)
        .collect()
}

/// Through the real binary: a FIFO named `fifo.yaml` and a writer holding `held.yaml` open half
/// written do not hold back a rename of another file, which is applied at once without the half;
/// the held file is applied when closed; an edit with `sed -i` is one outcome line.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_being_written_or_a_fifo_holds_back_only_itself() {
    use std::io::Write;
    use std::time::{Duration, Instant};
    let dir = ResourceDir::new();
    dir.write("held.yaml", &cluster_file("old"));
    let xdsd = Xdsd::start_with_args(&dir.path(), &["--log-level", "info"]).await;
    xdsd.expect_loaded_since(0).await;

    let made = std::process::Command::new("mkfifo")
        .arg(dir.file("fifo.yaml"))
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    let mut held = std::fs::File::create(dir.file("held.yaml")).expect("open held.yaml");
    held.write_all(format!("{}---\n", cluster_file("half")).as_bytes())
        .expect("write");
    held.flush().expect("flush");

    let mark = xdsd.log.mark();
    let renamed = Instant::now();
    dir.write("new.yaml", &cluster_file("new"));
    let line = xdsd
        .log
        .expect_line_since(mark, &["resources loaded", "Cluster \"new\""], "the rename")
        .await;
    let took = renamed.elapsed();
    assert!(
        !line.contains("half"),
        "the half-written file applied: {line}"
    );
    assert!(
        took < Duration::from_millis(2500),
        "held back by the FIFO or the open file: {took:?}"
    );

    let mark = xdsd.log.mark();
    held.write_all(cluster_file("rest").as_bytes())
        .expect("write");
    drop(held);
    xdsd.log
        .expect_line_since(
            mark,
            &["resources loaded", "Cluster \"half\"", "Cluster \"rest\""],
            "the held file, once closed",
        )
        .await;

    for round in 1..=5 {
        let mark = xdsd.log.mark();
        let sed = std::process::Command::new("sed")
            .args(["-i", &format!("s/name: new.*/name: new{round}/")])
            .arg(dir.file("new.yaml"))
            .status()
            .expect("sed runs");
        assert!(sed.success());
        xdsd.log
            .expect_line_since(
                mark,
                &["resources loaded", &format!("Cluster \"new{round}\"")],
                "the edit",
            )
            .await;
        let marker = format!("m{round}");
        dir.write("m.yaml", &cluster_file(&marker));
        xdsd.log
            .expect_line_since(
                mark,
                &["resources loaded", &format!("Cluster \"{marker}\"")],
                "the next change",
            )
            .await;
        let outcomes = outcomes_since(&xdsd, mark);
        assert_eq!(
            outcomes.len(),
            2,
            "round {round}: one line for the edit, one for the next change: {outcomes:#?}"
        );
    }
}
