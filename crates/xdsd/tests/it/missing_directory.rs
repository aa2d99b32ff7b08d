//! A misspelled `--resources`: `serve` and `check` both say once that the directory does not
//! exist, and exit (1 for `serve`, 2, a usage error, for `check`).

use std::process::{Command, Output, Stdio};
use std::time::Instant;

use crate::support::{ResourceDir, DEADLINE};

/// Runs xdsd to its exit (it must exit by itself, within DEADLINE).
fn run_to_exit(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_xdsd"))
        .args(args)
        .env_remove("XDSD_LISTEN")
        .env_remove("XDSD_ADMIN_LISTEN")
        .env_remove("XDSD_LOG")
        .env_remove("XDSD_LOG_FORMAT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("xdsd starts");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("xdsd can be waited for").is_some() {
            return child.wait_with_output().expect("xdsd's output");
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let out = child.wait_with_output().expect("xdsd's output");
            panic!(
                "xdsd {args:?} did not exit: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[track_caller]
fn assert_said_once(stderr: &str) {
    assert_eq!(
        stderr.matches("the directory does not exist").count(),
        1,
        "once, that the directory does not exist:\n{stderr}"
    );
    assert!(!stderr.contains("No path was found"), "{stderr}");
    assert!(!stderr.contains("os error"), "{stderr}");
}

#[test]
fn serve_says_once_that_a_misspelled_directory_does_not_exist() {
    let dir = ResourceDir::new();
    let missing = dir.path().join("resource");
    let missing = missing.to_str().expect("a UTF-8 temporary path");
    let out = run_to_exit(&[
        "serve",
        "--resources",
        missing,
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "off",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(missing), "names the directory:\n{stderr}");
    assert_said_once(&stderr);
}

#[test]
fn check_says_once_that_a_misspelled_directory_does_not_exist() {
    let dir = ResourceDir::new();
    let missing = dir.path().join("resource");
    let missing = missing.to_str().expect("a UTF-8 temporary path");
    let out = run_to_exit(&["check", "--resources", missing]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(missing), "names the directory:\n{stderr}");
    assert_said_once(&stderr);
}
