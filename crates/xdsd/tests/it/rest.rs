//! REST-JSON polling on xdsd's --listen address: answers, long polling (held until a change,
//! else 304 Not Modified), bad input as 4xx with a JSON body, and a real Envoy 1.40 with
//! `api_type: REST` for LDS, RDS, CDS and EDS. Each test runs against `xdsd serve` and again
//! through an `xdsd relay` of it, in the default grouping and with `--aggregate-by node`
//! (`direct::`, `relay::` and `relay_by_node::`).

use std::time::{Duration, Instant};

use crate::support::relay::{direct_and_relayed, Mode, Served};
use crate::support::scenario::{
    eds_cluster_yaml_from, endpoints_yaml, listener_yaml_from, route_yaml, ADMIN,
};
use crate::support::{
    parse_http_response, unique_name, wait_for_body, Envoy, HttpResponse, Log, ResourceDir,
    Upstream, DEADLINE, ENDPOINTS,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `POST path` with `body` and `content_type` over HTTP/1.1 to xdsd; at most 30 s.
async fn post(port: u16, path: &str, content_type: &str, body: &[u8]) -> HttpResponse {
    let exchange = async {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await?;
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: xdsd\r\ncontent-type: {content_type}\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        parse_http_response(&raw)
    };
    tokio::time::timeout(Duration::from_secs(30), exchange)
        .await
        .expect("xdsd answers in time")
        .expect("an HTTP answer")
}

async fn poll(port: u16, path: &str, request: serde_json::Value) -> HttpResponse {
    post(
        port,
        path,
        "application/json",
        request.to_string().as_bytes(),
    )
    .await
}

fn json(r: &HttpResponse) -> serde_json::Value {
    serde_json::from_str(&r.body).unwrap_or_else(|e| panic!("not JSON ({e}): {r:?}"))
}

fn endpoints_dir() -> ResourceDir {
    let dir = ResourceDir::new();
    dir.write("a.yaml", &endpoints_yaml("a", 1001));
    dir.write("b.yaml", &endpoints_yaml("b", 1002));
    dir
}

async fn a_poll_is_answered_with_the_resources_as_proto3_json(mode: Mode) {
    let dir = endpoints_dir();
    let served = Served::start(&dir.path(), &[], mode).await;
    let r = poll(
        served.port(),
        "/v3/discovery:endpoints",
        serde_json::json!({ "node": { "id": "rest" }, "resourceNames": ["a"] }),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.headers.to_ascii_lowercase().contains("application/json"));
    let body = json(&r);
    assert_eq!(body["typeUrl"], ENDPOINTS);
    assert!(!body["versionInfo"].as_str().unwrap_or("").is_empty());
    let resources = body["resources"].as_array().unwrap();
    assert_eq!(resources.len(), 1, "only the name asked for: {body}");
    assert_eq!(resources[0]["@type"], ENDPOINTS);
    assert_eq!(resources[0]["clusterName"], "a");
    assert_eq!(
        resources[0]["endpoints"][0]["lbEndpoints"][0]["endpoint"]["address"]["socketAddress"]
            ["portValue"],
        1001
    );
    // The generic path serves the type the request names.
    let r = poll(
        served.port(),
        "/v3/discovery:resources",
        serde_json::json!({ "typeUrl": ENDPOINTS, "resourceNames": ["b"] }),
    )
    .await;
    assert_eq!(json(&r)["resources"][0]["clusterName"], "b", "{r:?}");
}

async fn a_current_poll_is_held_and_answered_304_when_nothing_it_asks_for_changes(mode: Mode) {
    let dir = endpoints_dir();
    let served = Served::start(&dir.path(), &["--rest-hold", "1s"], mode).await;
    let ask = |version: &str| serde_json::json!({ "versionInfo": version, "resourceNames": ["a"] });
    let first = poll(served.port(), "/v3/discovery:endpoints", ask("")).await;
    let version = json(&first)["versionInfo"].as_str().unwrap().to_owned();

    // A change to another resource of the type does not make "a" new.
    let mark = served.xdsd.log.mark();
    dir.write("b.yaml", &endpoints_yaml("b", 2002));
    served.xdsd.expect_loaded_since(mark).await;
    let start = Instant::now();
    let r = poll(served.port(), "/v3/discovery:endpoints", ask(&version)).await;
    let held = start.elapsed();
    assert_eq!(r.status, 304, "{r:?}");
    assert!(r.body.is_empty());
    assert!(
        held >= Duration::from_millis(900),
        "held for the hold time: {held:?}"
    );
}

async fn a_held_poll_is_answered_as_soon_as_what_it_asks_for_changes(mode: Mode) {
    let dir = endpoints_dir();
    let served = Served::start(
        &dir.path(),
        &["--rest-hold", "60s", "--log-level", "info,xdsd_core=debug"],
        mode,
    )
    .await;
    let ask = |version: &str| serde_json::json!({ "versionInfo": version, "resourceNames": ["a"] });
    let first = poll(served.port(), "/v3/discovery:endpoints", ask("")).await;
    let mark = served.log().mark();
    let version = json(&first)["versionInfo"].as_str().unwrap().to_owned();
    let port = served.port();
    let held = tokio::spawn(async move {
        let start = Instant::now();
        let r = poll(port, "/v3/discovery:endpoints", ask(&version)).await;
        (r, start.elapsed(), version)
    });
    // The change comes once the poll is held, not before it arrived.
    served
        .log()
        .expect_line_since(mark, &["REST poll held"], "the poll held")
        .await;
    dir.write("a.yaml", &endpoints_yaml("a", 3003));
    let (r, took, old) = held.await.unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    let body = json(&r);
    assert_ne!(body["versionInfo"], old.as_str());
    assert_eq!(
        body["resources"][0]["endpoints"][0]["lbEndpoints"][0]["endpoint"]["address"]
            ["socketAddress"]["portValue"],
        3003
    );
    assert!(
        took < Duration::from_secs(30),
        "answered on the change, not at the 60 s hold: {took:?}"
    );
}

/// A poll held longer than the relay's linger (1 s, `Relay::start`) keeps what it asks
/// subscribed upstream and served while it is held: the change it waits for reaches it, not a
/// removal the relay made when the linger ran out (#56: Envoy's REST polls through
/// `--aggregate-by node` were answered so between polls). Another poll, answered at once after
/// the held one began, shows the linger passed: the relay unsubscribes its name.
async fn a_poll_held_past_the_relays_linger_keeps_what_it_asks_subscribed(mode: Mode) {
    let dir = endpoints_dir();
    let served = Served::start(
        &dir.path(),
        &["--rest-hold", "60s", "--log-level", "info,xdsd_core=debug"],
        mode,
    )
    .await;
    let node = serde_json::json!({ "id": "poller", "cluster": "pollers" });
    let ask = |name: &str, version: &str| serde_json::json!({ "node": node, "versionInfo": version, "resourceNames": [name] });
    let first = poll(served.port(), "/v3/discovery:endpoints", ask("a", "")).await;
    assert_eq!(first.status, 200, "{first:?}");
    let version = json(&first)["versionInfo"].as_str().unwrap().to_owned();
    let mark = served.log().mark();
    let port = served.port();
    let held = {
        let request = ask("a", &version);
        tokio::spawn(async move { poll(port, "/v3/discovery:endpoints", request).await })
    };
    served
        .log()
        .expect_line_since(mark, &["REST poll held"], "the poll held")
        .await;
    // A poll of `b`, answered at once: once its linger is out, so is the held poll's.
    let other = poll(served.port(), "/v3/discovery:endpoints", ask("b", "")).await;
    assert_eq!(other.status, 200, "{other:?}");
    if let Some(relay) = &served.relay {
        relay
            .log
            .expect_line_since(
                mark,
                // (Through the default grouping, b is held on the shared stream, whose
                // prefetched wildcard brings it: nothing is unsubscribed upstream, the relay
                // says it no longer holds it.)
                &["no downstream client left", "name=b"],
                "the relay to unsubscribe the answered poll's name after the linger",
            )
            .await;
        let gone = relay.log.matching_since(mark, |l| {
            l.contains("no downstream client left") && l.contains("name=a")
        });
        assert!(
            gone.is_empty(),
            "the held poll's name stays subscribed: {gone:#?}\n{}",
            relay.log.text()
        );
    }
    assert!(
        !held.is_finished(),
        "the poll is still held (nothing changed)"
    );
    dir.write("a.yaml", &endpoints_yaml("a", 3003));
    let r = held.await.unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    let body = json(&r);
    assert_eq!(
        body["resources"][0]["endpoints"][0]["lbEndpoints"][0]["endpoint"]["address"]
            ["socketAddress"]["portValue"],
        3003,
        "the held poll is answered with the change: {body:#}\n{}",
        served.log().text()
    );
}

async fn bad_rest_input_is_a_4xx_with_a_json_error(mode: Mode) {
    let dir = endpoints_dir();
    let served = Served::start(&dir.path(), &["--max-request-bytes", "64KiB"], mode).await;
    let port = served.port();
    let cases: Vec<(&str, u16, HttpResponse)> = vec![
        (
            "malformed JSON",
            400,
            post(port, "/v3/discovery:clusters", "application/json", b"{").await,
        ),
        (
            "a field of the wrong type",
            400,
            post(
                port,
                "/v3/discovery:clusters",
                "application/json",
                br#"{"resourceNames": 7}"#,
            )
            .await,
        ),
        (
            "an unknown type path",
            404,
            post(port, "/v3/discovery:widgets", "application/json", b"{}").await,
        ),
        (
            "a wrong content type",
            415,
            post(port, "/v3/discovery:clusters", "text/plain", b"{}").await,
        ),
        (
            "a body over the limit",
            413,
            post(
                port,
                "/v3/discovery:clusters",
                "application/json",
                format!(r#"{{"versionInfo": "{}"}}"#, "x".repeat(100 * 1024)).as_bytes(),
            )
            .await,
        ),
        (
            "the generic path without a type",
            400,
            post(port, "/v3/discovery:resources", "application/json", b"{}").await,
        ),
    ];
    for (what, status, r) in cases {
        assert_eq!(r.status, status, "{what}: {r:?}");
        let body = json(&r);
        assert!(
            body["message"].as_str().is_some_and(|m| !m.is_empty()) && body["code"].is_number(),
            "{what}: a google.rpc.Status body: {body}"
        );
    }
    // xdsd still serves.
    let r = poll(port, "/v3/discovery:endpoints", serde_json::json!({})).await;
    assert_eq!(r.status, 200);
}

/// A misspelled field (`resourceName` for `resourceNames`) would make a named poll a wildcard
/// one: it is a 400 naming the field, and the same poll spelled right is answered.
async fn an_unknown_request_field_is_a_400_naming_it(mode: Mode) {
    let dir = endpoints_dir();
    let served = Served::start(&dir.path(), &[], mode).await;
    let typo = serde_json::json!({ "resourceName": ["a"] });
    let r = poll(served.port(), "/v3/discovery:endpoints", typo).await;
    assert_eq!(r.status, 400, "{r:?}");
    let body = json(&r);
    let message = body["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("unknown field `resourceName`") && body["code"] == 3,
        "the error names the field: {body}"
    );
    let right = serde_json::json!({ "resourceNames": ["a"] });
    let r = poll(served.port(), "/v3/discovery:endpoints", right).await;
    assert_eq!(r.status, 200, "{r:?}");
    let resources = json(&r)["resources"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(resources.len(), 1, "only the named one: {resources:?}");
}

/// A bootstrap whose LDS and CDS, and the resources' RDS and EDS, are REST polls of xdsd.
fn rest_bootstrap(node_id: &str, xds_port: u16) -> String {
    format!(
        "node:
  id: {node_id}
  cluster: xdsd-tests
{ADMIN}dynamic_resources:
  lds_config: {source}
  cds_config: {source}
static_resources:
  clusters:
  - name: xds_cluster
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: xds_cluster
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: {{ address: 127.0.0.1, port_value: {xds_port} }}
",
        source = REST_SOURCE
    )
}

/// Polls every 200 ms; xdsd holds a poll up to 2 s, under Envoy's 5 s request timeout.
const REST_SOURCE: &str = "{ resource_api_version: V3, api_config_source: { api_type: REST, \
    transport_api_version: V3, cluster_names: [xds_cluster], refresh_delay: 0.2s, \
    request_timeout: 5s } }";

fn rest_resources(upstream_port: u16) -> ResourceDir {
    let dir = ResourceDir::new();
    dir.write(
        "listener.yaml",
        &listener_yaml_from("rest_listener", "route_0", REST_SOURCE),
    );
    dir.write("route.yaml", &route_yaml("route_0", "service"));
    dir.write(
        "cluster.yaml",
        &eds_cluster_yaml_from("service", REST_SOURCE),
    );
    dir.write("endpoints.yaml", &endpoints_yaml("service", upstream_port));
    dir
}

/// Waits until each of the 4 types Envoy polls had a poll answered `304 Not Modified` since `mark`
/// (`log` of the server Envoy polls).
async fn held_once_per_type(log: &Log, mark: usize) {
    let held = log
        .wait_until(
            mark,
            |lines| {
                let types: std::collections::BTreeSet<&str> = lines
                    .iter()
                    .filter(|l| l.contains("REST poll: not modified"))
                    .filter_map(|l| crate::support::log_field(l, "type_url"))
                    .collect();
                (types.len() >= 4).then_some(())
            },
            DEADLINE,
        )
        .await;
    if let Err(why) = held {
        panic!(
            "the polls of 4 types were not all held since line {mark} ({why}):\n{}",
            log.text()
        );
    }
}

async fn envoy_over_rest_polling_routes_traffic_follows_a_change_and_is_held_while_nothing_changes(
    mode: Mode,
) {
    let a = Upstream::start("rest-a").await;
    let b = Upstream::start("rest-b").await;
    let dir = rest_resources(a.port);
    let served = Served::start(
        &dir.path(),
        &["--rest-hold", "2s", "--log-level", "info,xdsd_core=debug"],
        mode,
    )
    .await;
    let envoy = Envoy::start(&rest_bootstrap(&unique_name("rest"), served.port())).await;
    let port = envoy.listener_port("rest_listener").await;
    let xdsd = served.log();
    let log = || format!("log of the server Envoy polls:\n{}", xdsd.text());
    wait_for_body(port, "rest-a", log).await;

    // Nothing changes: Envoy keeps polling, every poll is held and answered 304; no answer
    // carries resources. Once each of the 4 types had a poll answered 304 (Envoy has everything),
    // each has another one held: no answer in between carries resources.
    held_once_per_type(xdsd, 0).await;
    let mark = xdsd.mark();
    held_once_per_type(xdsd, mark).await;
    let answered = xdsd.matching_since(mark, |l| l.contains("REST poll answered"));
    let held = xdsd.matching_since(mark, |l| l.contains("REST poll: not modified"));
    assert!(
        answered.is_empty(),
        "no unchanged resources go out while nothing changes: {answered:#?}"
    );
    assert!(
        held.len() >= 4,
        "Envoy's polls of the 4 types are held: {}\n{}",
        held.len(),
        log()
    );
    assert!(
        held.iter().all(|l| l
            .split("held_ms=")
            .nth(1)
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|ms| ms >= 1900)),
        "each for the hold time: {held:#?}"
    );

    // The endpoints move to B: the held EDS poll answers, traffic follows.
    let start = Instant::now();
    dir.write("endpoints.yaml", &endpoints_yaml("service", b.port));
    wait_for_body(port, "rest-b", log).await;
    eprintln!(
        "endpoint change reached Envoy over REST in {:?}",
        start.elapsed()
    );
}

direct_and_relayed!(
    both_groupings:
    a_poll_is_answered_with_the_resources_as_proto3_json,
    a_current_poll_is_held_and_answered_304_when_nothing_it_asks_for_changes,
    a_held_poll_is_answered_as_soon_as_what_it_asks_for_changes,
    a_poll_held_past_the_relays_linger_keeps_what_it_asks_subscribed,
    bad_rest_input_is_a_4xx_with_a_json_error,
    an_unknown_request_field_is_a_400_naming_it,
);

/// Envoy over REST, direct and through a relay in both groupings.
mod envoy {
    use super::*;

    crate::support::relay::direct_and_relayed!(
        both_groupings:
        envoy_over_rest_polling_routes_traffic_follows_a_change_and_is_held_while_nothing_changes,
    );
}
