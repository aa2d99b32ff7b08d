//! The admin API's `GET /config?node=ID&contents=1` on a real xdsd: each resource the node would
//! be served, with its message in proto3 JSON (the variant its metadata picks); without
//! `contents`, names and versions only.

use serde_json::Value;

use crate::support::{http_get, ResourceDir, Xdsd, CLUSTER, ENDPOINTS};

fn resources() -> ResourceDir {
    let dir = ResourceDir::new();
    for (env, timeout) in [("prod", "1.5s"), ("dev", "7s")] {
        dir.write(
            &format!("cluster-{env}.yaml"),
            &format!(
                "\"@type\": {CLUSTER}\n\"@match\": {{ env: {env} }}\nname: backend\ntype: EDS\n\
                 connect_timeout: {timeout}\neds_cluster_config: {{ eds_config: {{ ads: {{}} }} }}\n"
            ),
        );
    }
    dir.write(
        "endpoints.yaml",
        &format!(
            "\"@type\": {ENDPOINTS}\ncluster_name: backend\nendpoints:\n- lb_endpoints:\n  - \
             endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: 8080 }} }} }}\n"
        ),
    );
    dir
}

/// GET `path` on the admin API: status and body.
async fn get(xdsd: &Xdsd, path: &str) -> (u16, String) {
    let port = xdsd.admin_port().await;
    let response = http_get(("127.0.0.1", port), path, "localhost")
        .await
        .expect("the admin API answers");
    (response.status, response.body)
}

/// The resources of `type_url` in a `/config` answer.
fn resources_of<'a>(config: &'a Value, type_url: &str) -> &'a Vec<Value> {
    config["types"]
        .as_array()
        .and_then(|types| types.iter().find(|t| t["type_url"] == type_url))
        .and_then(|t| t["resources"].as_array())
        .unwrap_or_else(|| panic!("no {type_url} in {config}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_with_contents_shows_each_resource_as_proto3_json() {
    let dir = resources();
    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    // metadata={"env":"prod"}, URL-encoded
    let prod = "/config?node=edge-1&metadata=%7B%22env%22%3A%22prod%22%7D";

    let (status, body) = get(&xdsd, &format!("{prod}&contents=1")).await;
    assert_eq!(status, 200, "{body}");
    let config: Value = serde_json::from_str(&body).expect("JSON");
    let clusters = resources_of(&config, CLUSTER);
    assert_eq!(clusters.len(), 1, "{config}");
    let cluster = &clusters[0]["contents"];
    assert_eq!(cluster["@type"], CLUSTER, "{config}");
    assert_eq!(cluster["name"], "backend", "{config}");
    assert_eq!(cluster["type"], "EDS", "{config}");
    assert_eq!(
        cluster["connectTimeout"], "1.500s",
        "the prod variant: {config}"
    );
    let endpoints = &resources_of(&config, ENDPOINTS)[0]["contents"];
    assert_eq!(endpoints["clusterName"], "backend", "{config}");
    assert_eq!(
        endpoints["endpoints"][0]["lbEndpoints"][0]["endpoint"]["address"]["socketAddress"]
            ["portValue"],
        8080,
        "{config}"
    );

    // Another node's variant.
    let dev = "/config?node=edge-2&metadata=%7B%22env%22%3A%22dev%22%7D&contents=1";
    let (status, body) = get(&xdsd, dev).await;
    assert_eq!(status, 200, "{body}");
    let config: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(
        resources_of(&config, CLUSTER)[0]["contents"]["connectTimeout"],
        "7s",
        "{config}"
    );

    // Without contents (or contents=0): names and versions only.
    for path in [prod.to_string(), format!("{prod}&contents=0")] {
        let (status, body) = get(&xdsd, &path).await;
        assert_eq!(status, 200, "{body}");
        let config: Value = serde_json::from_str(&body).expect("JSON");
        let cluster = &resources_of(&config, CLUSTER)[0];
        assert_eq!(cluster["name"], "backend", "{config}");
        assert!(cluster.get("contents").is_none(), "{config}");
    }

    let (status, body) = get(&xdsd, &format!("{prod}&contents=yes")).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("contents"), "{body}");
}

/// What `GET /config` refuses (moved with the admin API from the core's tests): no node, metadata
/// that is not a JSON object, a `contents` that is neither 1 nor 0; and a path the API does not
/// have is 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_refuses_a_request_without_a_node_or_with_bad_metadata() {
    let dir = resources();
    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    for path in [
        "/config",
        "/config?node=n&metadata=%5B1%5D",
        "/config?node=n&metadata=nope",
        "/config?node=n&contents=yes",
    ] {
        let (status, body) = get(&xdsd, path).await;
        assert_eq!(status, 400, "{path}: {body}");
    }
    assert_eq!(get(&xdsd, "/nothing").await.0, 404);
    assert_eq!(get(&xdsd, "/healthz").await.0, 200);
}

/// The admin API's start line lists the paths it serves, no more: serving a directory without
/// `--canary`, and relaying, there is no `/history` and no `/rollout`, and each answers 404
/// saying why in the words of that server (the relay has no `--resources` and no `--canary`).
/// Every JSON answer ends with a newline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_lists_what_it_serves_and_its_json_ends_with_a_newline() {
    use crate::support::relay::Relay;
    let dir = resources();
    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    let relay = Relay::start(&xdsd.authority(), &[]).await;
    let started = |log: &crate::support::Log| {
        log.lines()
            .into_iter()
            .find(|l| l.contains("admin API listening on http://"))
            .expect("the admin API's start line")
    };
    for (what, line) in [
        ("serve", started(&xdsd.log)),
        ("relay", {
            relay.admin_port().await;
            started(&relay.log)
        }),
    ] {
        assert!(
            line.contains("/clients, /config, /metrics")
                && !line.contains("/history")
                && !line.contains("/rollout"),
            "{what}: {line}"
        );
    }
    let port = xdsd.admin_port().await;
    // The relay, a client of xdsd, says its version as Envoy does (`status`'s AGENT).
    let deadline = tokio::time::Instant::now() + crate::support::DEADLINE;
    loop {
        let (_, body) = get(&xdsd, "/clients").await;
        let clients: Value = serde_json::from_str(&body).expect("JSON");
        let relay_node = clients
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| &c["node"])
            .find(|n| n["user_agent_name"] == "xdsd-relay");
        if let Some(node) = relay_node {
            assert_eq!(
                node["user_agent_version"],
                env!("CARGO_PKG_VERSION"),
                "{node}"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the relay never connected upstream: {body}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    for (what, answer) in [
        ("serve", get(&xdsd, "/history").await),
        ("relay", relay.admin("/history").await),
    ] {
        assert_eq!(answer.0, 404, "{what}: {}", answer.1);
        assert!(answer.1.contains("no history"), "{what}: {}", answer.1);
        assert!(answer.1.ends_with("}\n"), "{what}: {:?}", answer.1);
        if what == "relay" {
            assert!(
                !answer.1.contains("--resources") && answer.1.contains("upstream"),
                "{what}: {}",
                answer.1
            );
        }
    }
    for (what, answer) in [
        ("serve", get(&xdsd, "/rollout").await),
        ("relay", relay.admin("/rollout").await),
    ] {
        assert_eq!(answer.0, 404, "{what}: {}", answer.1);
        assert!(
            answer.1.contains("no gated rollout on this server")
                && !answer.1.contains("runs without --canary"),
            "{what}: {}",
            answer.1
        );
    }
    for path in [
        "/clients",
        "/config?node=n",
        "/config?node=n&contents=1",
        "/rollout",
    ] {
        let response = crate::support::http_get(("127.0.0.1", port), path, "localhost")
            .await
            .expect("the admin API answers");
        assert!(response.body.ends_with('\n'), "{path}: {:?}", response.body);
    }
}
