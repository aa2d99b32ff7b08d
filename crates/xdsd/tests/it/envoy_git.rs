//! The resource directory kept in git, as users keep it: `git checkout -- listener.yaml` unlinks
//! the file and writes a new one. xdsd takes the removal and the re-creation as one change, so a
//! real Envoy under a request loop through the listener never has it removed: no request fails.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::support::scenario::{basic_resources, dynamic_bootstrap, Transport};
use crate::support::{http_get, unique_name, wait_for_body, Envoy, Upstream, Xdsd, DEADLINE};

/// Runs `git args...` in `repo`; panics with its output when it fails.
fn git(repo: &Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .current_dir(repo)
        .args([
            "-c",
            "user.name=xdsd-test",
            "-c",
            "user.email=xdsd-test@localhost",
        ])
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Requests through Envoy's listener one after another, each on a new connection, counting
/// those answered by the upstream and those that failed, until told to stop.
struct RequestLoop {
    ok: Arc<AtomicUsize>,
    failed: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<String>>,
}

impl RequestLoop {
    fn start(port: u16, upstream: &str) -> RequestLoop {
        let ok = Arc::new(AtomicUsize::new(0));
        let failed = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let upstream = upstream.to_owned();
        let task = tokio::spawn({
            let (ok, failed, stop) = (ok.clone(), failed.clone(), stop.clone());
            async move {
                let mut failures = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    match http_get(("127.0.0.1", port), "/", "localhost").await {
                        Ok(r) if r.status == 200 && r.body.contains(&upstream) => {
                            ok.fetch_add(1, Ordering::SeqCst);
                        }
                        other => {
                            failed.fetch_add(1, Ordering::SeqCst);
                            if failures.len() < 10 {
                                failures.push(format!("{other:?}"));
                            }
                        }
                    }
                }
                failures
            }
        });
        RequestLoop {
            ok,
            failed,
            stop,
            task,
        }
    }

    /// Waits until `more` requests more have been answered; panics as soon as one failed.
    async fn wait_for_answers(&self, more: usize) {
        let want = self.ok.load(Ordering::SeqCst) + more;
        let deadline = tokio::time::Instant::now() + DEADLINE;
        while self.ok.load(Ordering::SeqCst) < want {
            let failed = self.failed.load(Ordering::SeqCst);
            assert_eq!(failed, 0, "requests through the listener failed");
            assert!(
                tokio::time::Instant::now() < deadline,
                "the request loop stalled: {} answered, {} failed",
                self.ok.load(Ordering::SeqCst),
                self.failed.load(Ordering::SeqCst)
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    async fn stop(self) -> (usize, usize, Vec<String>) {
        self.stop.store(true, Ordering::SeqCst);
        let failures = self.task.await.expect("the request loop ends");
        (
            self.ok.load(Ordering::SeqCst),
            self.failed.load(Ordering::SeqCst),
            failures,
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_checkout_of_the_listener_file_never_removes_the_listener() {
    let upstream = Upstream::start("upstream-git").await;
    let dir = basic_resources(Transport::Ads, upstream.port);
    // The repository holds the resource directory (as a project's `resources/` is).
    let repo = dir.path().parent().expect("a parent").to_path_buf();
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "resources"]);
    git(&repo, &["commit", "-q", "-m", "resources"]);

    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    let node_id = unique_name("envoy-git");
    let envoy = Envoy::start(&dynamic_bootstrap(&node_id, xdsd.port, Transport::Ads)).await;
    let port = envoy.listener_port("listener_0").await;
    wait_for_body(port, "upstream-git", || {
        format!("xdsd log:\n{}", xdsd.log.text())
    })
    .await;
    let removed_before = envoy.stat("listener_manager.listener_removed").await;

    let requests = RequestLoop::start(port, "upstream-git");
    requests.wait_for_answers(20).await;
    for _ in 0..8 {
        // The file's time changed (as an edit reverted would): git then restores it, by
        // unlinking it and writing a new file. xdsd sees the touch too: it is let settle first,
        // so that the checkout is a change of its own.
        let mark = xdsd.log.mark();
        let touched = std::process::Command::new("touch")
            .args(["-d", "2001-01-01"])
            .arg(dir.file("listener.yaml"))
            .status()
            .expect("touch runs");
        assert!(touched.success());
        xdsd.log
            .expect_line_since(
                mark,
                &["reloaded resource directory"],
                "the touch to be reloaded",
            )
            .await;
        let mark = xdsd.log.mark();
        git(&repo, &["checkout", "--", "resources/listener.yaml"]);
        xdsd.log
            .expect_line_since(
                mark,
                &["reloaded resource directory"],
                "the checkout to be reloaded",
            )
            .await;
        requests.wait_for_answers(20).await;
    }
    let (ok, failed, failures) = requests.stop().await;
    assert_eq!(
        failed,
        0,
        "{failed} of {} requests failed (first: {failures:?})\nxdsd log:\n{}",
        ok + failed,
        xdsd.log.text()
    );
    assert_eq!(
        envoy.stat("listener_manager.listener_removed").await,
        removed_before,
        "Envoy removed a listener"
    );
    assert_eq!(
        envoy.listener_port("listener_0").await,
        port,
        "the listener is the one it was"
    );
    assert!(
        xdsd.log
            .matching_since(0, |l| l.contains("-Listener"))
            .is_empty(),
        "xdsd pushed a listener removal:\n{}",
        xdsd.log.text()
    );
}
