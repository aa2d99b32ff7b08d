//! LEDS (#57) with the files of `examples/leds`: Envoy 1.40 over delta ADS with a cluster whose
//! endpoints are a glob collection of `LbEndpoint` resources (xRFC TP1), each its own file named
//! by `"@name": xdstp://...`. The example's upstream ports (8080, 8081), listener port and xDS
//! port are rewritten to the test's own; everything else is the example as shipped.
//!
//! 1. With member `backend-1` alone (upstream A): Envoy subscribes to the glob on its ADS
//!    stream, xdsd answers with the one member, and traffic reaches A.
//! 2. Member `backend-2` (upstream B) is added and `backend-1` deleted: traffic moves to B and
//!    stays there; A takes no more requests.

use crate::support::{
    http_get, repo_root, unique_name, wait_for_body, Envoy, ResourceDir, Upstream, Xdsd, DEADLINE,
};
use tokio::time::{sleep, Duration, Instant};

/// A file of `examples/leds` with the example's ports rewritten to the test's.
fn example(path: &str, a: u16, b: u16) -> String {
    std::fs::read_to_string(repo_root().join("examples/leds").join(path))
        .unwrap_or_else(|e| panic!("examples/leds/{path}: {e}"))
        .replace("port_value: 8080", &format!("port_value: {a}"))
        .replace("port_value: 8081", &format!("port_value: {b}"))
        .replace("port_value: 10000", "port_value: 0")
}

/// xdsd's `push` lines of LbEndpoint resources after `mark`.
fn pushes(xdsd: &Xdsd, mark: usize) -> Vec<String> {
    xdsd.log.matching_since(mark, |l| {
        l.contains(" push ")
            && l.contains("type_url=type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint")
    })
}

/// Polls until `n` responses in a row come from `expected`; panics after [`DEADLINE`].
async fn wait_only(port: u16, expected: &str, n: usize, context: impl Fn() -> String) {
    let deadline = Instant::now() + DEADLINE;
    let mut run = 0;
    let mut last = String::new();
    while run < n {
        match http_get(("127.0.0.1", port), "/", "example.test").await {
            Ok(r) if r.status == 200 && r.body == expected => run += 1,
            Ok(r) => {
                run = 0;
                last = format!("{} {:?}", r.status, r.body);
            }
            Err(e) => {
                run = 0;
                last = e.to_string();
            }
        }
        if Instant::now() >= deadline {
            panic!(
                "not {n} responses in a row from {expected}; last {last}\n{}",
                context()
            );
        }
        if run == 0 {
            sleep(Duration::from_millis(100)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_takes_the_leds_example_over_delta_ads_and_follows_its_members() {
    let upstream_a = Upstream::start("upstream-a").await;
    let upstream_b = Upstream::start("upstream-b").await;
    let (a, b) = (upstream_a.port, upstream_b.port);
    let dir = ResourceDir::new();
    for file in [
        "listener.yaml",
        "route.yaml",
        "cluster.yaml",
        "endpoints.yaml",
    ] {
        dir.write(file, &example(&format!("resources/{file}"), a, b));
    }
    dir.write(
        "backend-1.yaml",
        &example("resources/endpoints/backend-1.yaml", a, b),
    );

    let xdsd = Xdsd::start_with_args(&dir.path(), &["--log-level", "debug"]).await;
    xdsd.expect_loaded_since(0).await;
    let bootstrap = example("envoy.yaml", a, b)
        .replace("port_value: 18000", &format!("port_value: {}", xdsd.port))
        .replace("port_value: 9901", "port_value: 0")
        .replace(
            "id: example-envoy-leds",
            &format!("id: {}", unique_name("leds")),
        );
    let envoy = Envoy::start(&bootstrap).await;
    let port = envoy.listener_port("listener_0").await;
    let context = || format!("xdsd log:\n{}", xdsd.log.text());

    // 1. The one member: upstream A.
    wait_for_body(port, "upstream-a", context).await;
    let members = pushes(&xdsd, 0);
    assert!(
        members.iter().any(|l| l.contains("resources=1 removed=0")),
        "xdsd pushed Envoy the one member of the glob on its ADS stream: {members:#?}"
    );

    // 2. backend-2 (B) added, backend-1 (A) deleted: traffic moves to B and stays there.
    let mark = xdsd.log.mark();
    dir.write(
        "backend-2.yaml",
        &example("resources/endpoints/backend-2.yaml", a, b),
    );
    dir.remove("backend-1.yaml");
    xdsd.expect_loaded_since(mark).await;
    wait_only(port, "upstream-b", 10, context).await;
    let hits_a = upstream_a.hits();
    wait_only(port, "upstream-b", 10, context).await;
    assert_eq!(
        upstream_a.hits(),
        hits_a,
        "A, removed, takes no more requests"
    );
    drop(envoy);
}
