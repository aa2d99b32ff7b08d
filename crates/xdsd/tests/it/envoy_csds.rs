//! Operating xdsd with a real Envoy 1.40 connected over ADS: CSDS on the xDS address (a tonic
//! client) and the admin API (`/healthz`, `/readyz`, `/clients`, `/metrics`) show Envoy ACKing
//! everything, then NACKing a cluster it refuses (with Envoy's error and the file the cluster came
//! from), then ACKing again once the file is removed.

use std::time::Duration;

use crate::support::scenario::{
    basic_resources, dynamic_bootstrap, envoy_rejected_cluster_yaml, Transport,
};
use crate::support::{
    http_get, unique_name, wait_for_body, Envoy, Upstream, Xdsd, CLUSTER, DEADLINE, ENDPOINTS,
    LISTENER, ROUTE,
};
use envoy_types::pb::envoy::admin::v3::ClientResourceStatus;
use envoy_types::pb::envoy::r#type::matcher::v3::string_matcher::MatchPattern;
use envoy_types::pb::envoy::r#type::matcher::v3::{NodeMatcher, StringMatcher};
use envoy_types::pb::envoy::service::status::v3::client_config::GenericXdsConfig;
use envoy_types::pb::envoy::service::status::v3::client_status_discovery_service_client::ClientStatusDiscoveryServiceClient;
use envoy_types::pb::envoy::service::status::v3::ClientStatusRequest;
use tokio::time::{sleep, Instant};

/// The CDS entries of the client `node_id` once `done` holds for them; panics after DEADLINE
/// with the last answer.
async fn cds_until(
    xdsd: &Xdsd,
    node_id: &str,
    done: impl Fn(&[GenericXdsConfig]) -> bool,
    what: &str,
) -> Vec<GenericXdsConfig> {
    let mut csds = ClientStatusDiscoveryServiceClient::connect(xdsd.url())
        .await
        .expect("a connection to xdsd");
    let request = ClientStatusRequest {
        node_matchers: vec![NodeMatcher {
            node_id: Some(StringMatcher {
                match_pattern: Some(MatchPattern::Exact(node_id.into())),
                ignore_case: false,
            }),
            node_metadatas: vec![],
        }],
        exclude_resource_contents: true,
        ..Default::default()
    };
    let deadline = Instant::now() + DEADLINE;
    loop {
        let answer = csds
            .fetch_client_status(request.clone())
            .await
            .expect("CSDS answers")
            .into_inner();
        assert!(answer.config.len() <= 1, "one client per node: {answer:?}");
        let cds: Vec<GenericXdsConfig> = answer
            .config
            .iter()
            .flat_map(|c| &c.generic_xds_configs)
            .filter(|g| g.type_url == CLUSTER)
            .cloned()
            .collect();
        if !cds.is_empty() && done(&cds) {
            let types: Vec<&str> = answer.config[0]
                .generic_xds_configs
                .iter()
                .map(|g| &*g.type_url)
                .collect();
            for t in [LISTENER, ROUTE, CLUSTER, ENDPOINTS] {
                assert!(types.contains(&t), "CSDS lists {t}: {types:?}");
            }
            return cds;
        }
        assert!(
            Instant::now() < deadline,
            "CSDS never showed {what}: {answer:?}\nxdsd log:\n{}",
            xdsd.log.text()
        );
        sleep(Duration::from_millis(100)).await;
    }
}

fn all(status: ClientResourceStatus) -> impl Fn(&[GenericXdsConfig]) -> bool {
    move |cds| cds.iter().all(|g| g.client_status == status as i32)
}

/// A sample's value in a metrics text, 0 when absent.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csds_and_the_admin_api_show_envoy_nacking_a_cluster_then_recovering() {
    let upstream = Upstream::start("upstream-a").await;
    let dir = basic_resources(Transport::Ads, upstream.port);
    let xdsd = Xdsd::start(&dir.path()).await;
    xdsd.expect_loaded_since(0).await;
    let admin = xdsd.admin_port().await;
    let get = |path: &'static str| async move {
        http_get(("127.0.0.1", admin), path, "xdsd")
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"))
    };
    assert_eq!(get("/healthz").await.status, 200);
    assert_eq!(get("/readyz").await.status, 200);

    let node_id = unique_name("envoy-csds");
    let envoy = Envoy::start(&dynamic_bootstrap(&node_id, xdsd.port, Transport::Ads)).await;
    let port = envoy.listener_port("listener_0").await;
    wait_for_body(port, "upstream-a", || {
        format!("xdsd log:\n{}", xdsd.log.text())
    })
    .await;
    let acked = cds_until(&xdsd, &node_id, all(ClientResourceStatus::Acked), "ACKED").await;
    assert_eq!(acked.len(), 1);
    assert_eq!(acked[0].name, "service");
    assert!(!acked[0].version_info.is_empty());

    // A cluster Envoy refuses.
    let mark = xdsd.log.mark();
    dir.write("broken.yaml", &envoy_rejected_cluster_yaml("broken"));
    xdsd.expect_loaded_since(mark).await;
    let nacked = cds_until(&xdsd, &node_id, all(ClientResourceStatus::Nacked), "NACKED").await;
    let names: Vec<&str> = nacked.iter().map(|g| &*g.name).collect();
    assert!(names.contains(&"broken"), "{names:?}");
    let error = nacked[0].error_state.as_ref().expect("the NACK's details");
    assert!(
        error.details.contains("broken") && error.details.contains("broken.yaml"),
        "Envoy's error and the file: {error:?}"
    );
    assert!(!error.version_info.is_empty());
    assert_eq!(
        nacked[0].version_info, acked[0].version_info,
        "Envoy still runs the version it ACKed"
    );

    let clients: serde_json::Value =
        serde_json::from_str(&get("/clients").await.body).expect("JSON");
    let client = clients
        .as_array()
        .and_then(|a| a.iter().find(|c| c["node"]["id"] == node_id.as_str()))
        .unwrap_or_else(|| panic!("Envoy in /clients: {clients}"));
    assert_eq!(client["service"], "ADS");
    assert_eq!(client["node"]["user_agent_name"], "envoy");
    let cds = client["types"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["type_url"] == CLUSTER))
        .expect("CDS in /clients");
    assert_eq!(cds["status"], "NACKED");
    let origins = cds["last_nack"]["origins"].to_string();
    assert!(origins.contains("broken.yaml"), "{cds}");
    assert!(cds["last_nack"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("broken")));

    let metrics = get("/metrics").await;
    assert_eq!(metrics.status, 200);
    let text = metrics.body;
    let cds_label = format!("{{type_url=\"{CLUSTER}\"}}");
    assert!(
        sample(&text, &format!("xdsd_nacks_total{cds_label}")) >= 1.0,
        "{text}"
    );
    assert!(
        sample(&text, &format!("xdsd_acks_total{cds_label}")) >= 1.0,
        "{text}"
    );
    assert!(
        sample(&text, "xdsd_reloads_total{result=\"applied\"}") >= 1.0,
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "xdsd_connected_streams{flavor=\"sotw\",service=\"ads\"}"
        ),
        1.0,
        "{text}"
    );
    assert_eq!(
        sample(&text, &format!("xdsd_resources{cds_label}")),
        2.0,
        "{text}"
    );

    // Fixed: ACKED again, no error.
    let mark = xdsd.log.mark();
    dir.remove("broken.yaml");
    xdsd.expect_loaded_since(mark).await;
    let fixed = cds_until(
        &xdsd,
        &node_id,
        all(ClientResourceStatus::Acked),
        "ACKED again",
    )
    .await;
    assert!(fixed.iter().all(|g| g.error_state.is_none()), "{fixed:?}");

    drop(envoy);
}
