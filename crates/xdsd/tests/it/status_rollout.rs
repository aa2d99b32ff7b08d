//! `xdsd status` and the status page during a gated rollout (issue #45), with real Envoys
//! (`--canary cluster=canary`): the rollout's state, which client is a canary and which state
//! each holds; exit 1 until the change reached the whole fleet; `--wait` waits for the promotion
//! and fails at once on a halt, naming the node and its message; after `POST /rollout/abort` the
//! source holds a change nothing serves, and `status`, `/rollout` and the page say so. An empty
//! cohort is said in the log and on `/rollout`.

use crate::envoy_rollout::{bootstrap_in, post, rollout, through, wait_rollout};
use crate::status_cli::{describe, stdout, xdsd_status};
use crate::support::scenario::{basic_resources, endpoints_yaml, static_cluster_yaml, Transport};
use crate::support::{http_get, unique_name, wait_for_body, Envoy, Upstream, Xdsd, DEADLINE};
use xdsd_testsupport::rollout::{is, RolloutState};

/// The line of `text` that names `node`, under the rollout's header.
fn holds_line<'a>(text: &'a str, node: &str) -> &'a str {
    let rollout = text
        .split_once("\nrollout ")
        .map(|(_, r)| r)
        .unwrap_or_else(|| panic!("a rollout section: {text}"));
    rollout
        .lines()
        .find(|l| l.contains(node))
        .unwrap_or_else(|| panic!("a line for {node}: {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_a_gated_rollout_waits_for_its_promotion_and_fails_at_once_on_a_halt() {
    let a = Upstream::start("upstream-a").await;
    let b = Upstream::start("upstream-b").await;
    let transport = Transport::Ads;
    let dir = basic_resources(transport, a.port);
    let xdsd = Xdsd::start_with_args(
        &dir.path(),
        &["--canary", "cluster=canary", "--canary-soak", "3s"],
    )
    .await;
    xdsd.expect_loaded_since(0).await;
    let admin = xdsd.admin_port().await;
    let canary_id = unique_name("canary-envoy");
    let prod_id = unique_name("prod-envoy");
    let canary = Envoy::start(&bootstrap_in(&canary_id, "canary", xdsd.port, transport)).await;
    let prod = Envoy::start(&bootstrap_in(&prod_id, "prod", xdsd.port, transport)).await;
    let (cport, pport) = (
        canary.listener_port("listener_0").await,
        prod.listener_port("listener_0").await,
    );
    let log = || format!("xdsd log:\n{}", xdsd.log.text());
    wait_for_body(cport, "upstream-a", log).await;
    wait_for_body(pport, "upstream-a", log).await;
    let idle = xdsd_status(&xdsd, &["--wait", "--timeout", "30s"]).await;
    assert_eq!(idle.status.code(), Some(0), "{}", describe(&idle));
    assert!(
        stdout(&idle).contains("\nrollout idle"),
        "{}",
        describe(&idle)
    );

    // `--server` at an HTTP endpoint: xdsd's admin API, Envoy's admin.
    for (what, port) in [
        ("xdsd's admin API", admin),
        ("Envoy's admin", prod.admin_port),
    ] {
        let output = crate::status_cli::status_at(&format!("127.0.0.1:{port}"), &[]).await;
        let err = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{what}: {}",
            describe(&output)
        );
        assert!(
            err.contains("HTTP endpoint, not xDS gRPC") && err.contains("--listen"),
            "{what}: {}",
            describe(&output)
        );
    }

    // 1. A change soaks with the canary: status shows it and exits 1.
    let mark = xdsd.log.mark();
    dir.write("endpoints.yaml", &endpoints_yaml("service", b.port));
    xdsd.expect_loaded_since(mark).await;
    wait_for_body(cport, "upstream-b", log).await;
    let soaking = xdsd_status(&xdsd, &[]).await;
    let text = stdout(&soaking);
    assert_eq!(soaking.status.code(), Some(1), "{}", describe(&soaking));
    assert!(
        text.contains("\nrollout soaking: candidate generation"),
        "{text}"
    );
    assert!(
        text.contains("the change has not reached the whole fleet"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("  EDS: stable ") && l.contains(", candidate ")),
        "the changed type with its stable and candidate versions: {text}"
    );
    let line = holds_line(&text, &canary_id);
    assert!(
        line.contains("canary") && line.ends_with("holds candidate"),
        "{text}"
    );
    let line = holds_line(&text, &prod_id);
    assert!(
        !line.contains("canary") && line.ends_with("holds stable"),
        "{text}"
    );
    assert_eq!(
        through(pport).await,
        "upstream-a",
        "prod waits for the promotion"
    );
    // The page says the same.
    let page = http_get(("127.0.0.1", admin), "/?refresh=0", "localhost")
        .await
        .expect("GET /")
        .body;
    assert!(
        page.contains(&canary_id) && page.contains("holds candidate"),
        "{page}"
    );

    // 2. --wait waits for the promotion.
    let promoted = xdsd_status(&xdsd, &["--wait", "--timeout", "60s"]).await;
    let text = stdout(&promoted);
    assert_eq!(promoted.status.code(), Some(0), "{}", describe(&promoted));
    assert!(text.contains("\nrollout idle"), "{text}");
    assert!(
        holds_line(&text, &prod_id).ends_with("holds stable"),
        "{text}"
    );
    assert_eq!(through(pport).await, "upstream-b", "prod has the change");

    // 3. A change the canary NACKs: --wait fails at once (not after its timeout) with the node
    // and Envoy's message.
    dir.write("bad.yaml", &static_cluster_yaml("bad", 70000));
    wait_rollout(admin, "the halt", |r| is(r, RolloutState::Halted)).await;
    let halted = tokio::time::timeout(
        DEADLINE,
        xdsd_status(&xdsd, &["--wait", "--timeout", "600s"]),
    )
    .await
    .expect("--wait returns at once on a halt");
    let err = String::from_utf8_lossy(&halted.stderr).into_owned();
    assert_eq!(halted.status.code(), Some(1), "{}", describe(&halted));
    assert!(
        err.contains(&format!("the rollout halted: {canary_id} NACKed CDS: "))
            && (err.contains("70000") || err.contains("port")),
        "{}",
        describe(&halted)
    );
    assert!(
        stdout(&halted).contains("  halted: "),
        "{}",
        describe(&halted)
    );

    // 4. Aborted: the source holds a change no client is served.
    let (code, body) = post(admin, "/rollout/abort").await;
    assert_eq!(code, 200, "{body}");
    let after = rollout(admin).await;
    assert_eq!(RolloutState::of(&after), RolloutState::Idle, "{after:#}");
    let held = after["held_change"]["message"].as_str().unwrap_or_default();
    assert!(held.contains("the source holds a change"), "{after:#}");
    let aborted = xdsd_status(&xdsd, &["--wait", "--timeout", "600s"]).await;
    assert_eq!(aborted.status.code(), Some(1), "{}", describe(&aborted));
    assert!(
        String::from_utf8_lossy(&aborted.stderr).contains("the source holds a change"),
        "{}",
        describe(&aborted)
    );
    let page = http_get(("127.0.0.1", admin), "/?refresh=0", "localhost")
        .await
        .expect("GET /")
        .body;
    assert!(page.contains("the source holds a change"), "{page}");
    // A next change of the source ends it.
    dir.remove("bad.yaml");
    wait_rollout(admin, "the held change gone", |r| {
        r.get("held_change").is_none()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_cohort_is_said_in_the_log_and_on_rollout() {
    let dir = basic_resources(Transport::Ads, 9);
    let xdsd = Xdsd::start_with_args(&dir.path(), &["--canary", "cluster=nobody"]).await;
    xdsd.expect_loaded_since(0).await;
    let admin = xdsd.admin_port().await;
    let mark = xdsd.log.mark();
    dir.write("endpoints.yaml", &endpoints_yaml("service", 10));
    xdsd.log
        .expect_line_since(
            mark,
            &[
                "no connected client is in the canary cohort",
                "cluster=nobody",
            ],
            "the empty cohort in the log",
        )
        .await;
    let r = wait_rollout(admin, "soaking", |r| !is(r, RolloutState::Idle)).await;
    let empty = r["cohort_empty"].as_str().unwrap_or_default();
    assert!(
        empty.contains("no connected client is in the cohort (cluster=nobody)"),
        "{r:#}"
    );
}
