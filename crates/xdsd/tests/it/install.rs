//! The Dockerfile and the Kubernetes example name the binary, flags, variables and ports that
//! `xdsd serve --help` and the README name. (Building the image needs a container engine, which
//! the tests do not have: `docker build -t xdsd .`.)

use std::process::Command;

use crate::support::repo_root;

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo_root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn serve_help() -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_xdsd"))
        .args(["serve", "--help"])
        .output()
        .expect("xdsd runs");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The words of `text` that start with `prefix` and go on with `[A-Z_]` or `[a-z-]`.
fn words(text: &str, prefix: &str) -> Vec<String> {
    let mut out: Vec<String> = text
        .match_indices(prefix)
        .map(|(i, _)| {
            text[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
                .collect::<String>()
        })
        .filter(|w| w[prefix.len()..].starts_with(|c: char| c.is_ascii_alphabetic()))
        .collect();
    out.sort();
    out.dedup();
    out
}

#[test]
fn the_dockerfile_and_the_kubernetes_example_match_the_binary_and_the_readme() {
    let help = serve_help();
    let readme = read("README.md");
    let dockerfile = read("Dockerfile");
    let kubernetes = read("examples/kubernetes/xdsd.yaml");

    assert!(dockerfile.contains("cargo build --release --locked -p xdsd"));
    assert!(dockerfile.contains("/src/target/release/xdsd /usr/local/bin/xdsd"));
    assert!(dockerfile.contains("ENTRYPOINT [\"/usr/local/bin/xdsd\"]"));
    assert!(dockerfile.contains("USER 10001"), "not root");
    for variable in words(&dockerfile, "XDSD_") {
        assert!(
            help.contains(&variable),
            "{variable} of the Dockerfile is not in --help"
        );
        assert!(
            readme.contains(&variable),
            "{variable} of the Dockerfile is not in the README"
        );
    }
    let args: Vec<String> = words(&kubernetes, "--");
    assert!(!args.is_empty());
    for flag in &args {
        assert!(
            help.contains(flag.as_str()),
            "{flag} of the Kubernetes example is not in --help"
        );
        assert!(
            readme.contains(flag.as_str()),
            "{flag} of the Kubernetes example is not in the README"
        );
    }
    // The ports: gRPC 18000 (the default --listen), admin 18001 (the default --admin-listen).
    assert!(
        help.contains("0.0.0.0:18000") && help.contains("127.0.0.1:18001"),
        "{help}"
    );
    for text in [&dockerfile, &kubernetes] {
        assert!(text.contains("18000") && text.contains("18001"));
    }
    assert!(
        kubernetes.contains("image: xdsd:latest") && dockerfile.contains("docker build -t xdsd .")
    );
}
