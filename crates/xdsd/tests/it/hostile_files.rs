//! The resources directory as hostile input, through the real binary: a YAML alias bomb and a
//! file over `--max-file-bytes` are rejected naming the file, the last good state is still
//! served, and xdsd's memory does not grow with what the files would expand to.

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
