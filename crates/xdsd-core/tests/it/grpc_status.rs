//! Operating a server, over real connections on loopback: CSDS (Fetch and Stream) and gRPC health
//! on the xDS address with tonic clients, and the admin HTTP API (`/healthz`, `/readyz`,
//! `/clients`, `/metrics`) with a plain HTTP/1.1 client, while a tonic xDS client connects, is
//! pushed resources, ACKs, NACKs and goes away.

use std::collections::BTreeMap;
use std::time::Duration;

use envoy_types::pb::envoy::admin::v3::ClientResourceStatus;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::r#type::matcher::v3::string_matcher::MatchPattern;
use envoy_types::pb::envoy::r#type::matcher::v3::{NodeMatcher, StringMatcher};
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::envoy::service::status::v3::client_status_discovery_service_client::ClientStatusDiscoveryServiceClient;
use envoy_types::pb::envoy::service::status::v3::{
    ClientStatusRequest, ClientStatusResponse, ConfigStatus,
};
use envoy_types::pb::google::rpc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use xdsd_core::store::Change;
use xdsd_core::types::CLUSTER;

use crate::support::{label, labelled, protocol_tests, Mode, Server, WAIT};

const ORIGIN: &str = "clusters.yaml (resource #1)";

/// Sets cluster "c1", labelled `label`, from [`ORIGIN`].
fn set_cluster(server: &Server, label: &str) {
    server
        .store
        .apply([Change::Set(
            labelled(CLUSTER, "c1", label).with_origin(ORIGIN),
        )])
        .unwrap();
}

struct Ads {
    tx: mpsc::Sender<DiscoveryRequest>,
    responses: Streaming<DiscoveryResponse>,
}

impl Ads {
    async fn open(server: &Server, node: &str) -> Ads {
        let (tx, rx) = mpsc::channel(16);
        let responses = AggregatedDiscoveryServiceClient::new(server.channel.clone())
            .stream_aggregated_resources(ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        tx.send(DiscoveryRequest {
            node: Some(Node {
                id: node.into(),
                cluster: "test".into(),
                user_agent_name: "tester".into(),
                ..Default::default()
            }),
            type_url: CLUSTER.into(),
            ..Default::default()
        })
        .await
        .unwrap();
        Ads { tx, responses }
    }

    async fn recv(&mut self) -> DiscoveryResponse {
        tokio::time::timeout(WAIT, self.responses.message())
            .await
            .expect("a response in time")
            .expect("a response, not an error")
            .expect("an open stream")
    }

    async fn ack(&self, r: &DiscoveryResponse) {
        self.answer(r, &r.version_info, None).await
    }

    async fn nack(&self, r: &DiscoveryResponse, accepted: &str, message: &str) {
        self.answer(r, accepted, Some(message)).await
    }

    async fn answer(&self, r: &DiscoveryResponse, version: &str, error: Option<&str>) {
        self.tx
            .send(DiscoveryRequest {
                type_url: CLUSTER.into(),
                version_info: version.into(),
                response_nonce: r.nonce.clone(),
                error_detail: error.map(|m| rpc::Status {
                    code: 3,
                    message: m.into(),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .unwrap();
    }
}

async fn csds(server: &Server, request: ClientStatusRequest) -> ClientStatusResponse {
    ClientStatusDiscoveryServiceClient::new(server.channel.clone())
        .fetch_client_status(request)
        .await
        .expect("CSDS answers")
        .into_inner()
}

/// Waits until the client's CDS entry shows `status` (the server handles requests
/// asynchronously), and returns the response it was seen in.
async fn csds_until(server: &Server, status: ClientResourceStatus) -> ClientStatusResponse {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let r = csds(server, ClientStatusRequest::default()).await;
        let seen = r
            .config
            .first()
            .and_then(|c| c.generic_xds_configs.first())
            .map(|g| g.client_status);
        if seen == Some(status as i32) {
            return r;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "CSDS never showed {status:?}: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn node_id_matcher(pattern: MatchPattern) -> ClientStatusRequest {
    ClientStatusRequest {
        node_matchers: vec![NodeMatcher {
            node_id: Some(StringMatcher {
                match_pattern: Some(pattern),
                ignore_case: false,
            }),
            node_metadatas: vec![],
        }],
        ..Default::default()
    }
}

/// Through a relay, the relay's own CSDS records its clients: where a NACKed resource came from
/// is the relay's upstream.
async fn csds_follows_a_client_through_ack_nack_and_fix(mode: Mode) {
    let server = Server::start_in(mode).await;
    set_cluster(&server, "c1-v1");
    let mut ads = Ads::open(&server, "envoy-1").await;
    let first = ads.recv().await;

    let r = csds_until(&server, ClientResourceStatus::Requested).await;
    assert_eq!(r.config.len(), 1);
    let client = &r.config[0];
    let node = client.node.as_ref().expect("the client's node");
    assert_eq!(
        (&*node.id, &*node.cluster, &*node.user_agent_name),
        ("envoy-1", "test", "tester")
    );
    let cds = &client.generic_xds_configs[0];
    assert_eq!((&*cds.type_url, &*cds.name), (CLUSTER, "c1"));
    assert_eq!(cds.config_status, ConfigStatus::Stale as i32);
    let any = cds.xds_config.as_ref().expect("the resource's content");
    assert_eq!(label(&any.value), "c1-v1");

    ads.ack(&first).await;
    let r = csds_until(&server, ClientResourceStatus::Acked).await;
    let cds = &r.config[0].generic_xds_configs[0];
    assert_eq!(cds.version_info, first.version_info);
    assert_eq!(cds.config_status, ConfigStatus::Synced as i32);
    assert!(cds.error_state.is_none());

    // A change the client rejects.
    set_cluster(&server, "c1-v2");
    let bad = ads.recv().await;
    ads.nack(
        &bad,
        &first.version_info,
        "Error adding/updating cluster(s) c1: no way",
    )
    .await;
    let r = csds_until(&server, ClientResourceStatus::Nacked).await;
    let cds = &r.config[0].generic_xds_configs[0];
    assert_eq!(cds.config_status, ConfigStatus::Error as i32);
    assert_eq!(
        cds.version_info, first.version_info,
        "still on the ACKed version"
    );
    let error = cds.error_state.as_ref().expect("the NACK's details");
    assert_eq!(error.version_info, bad.version_info);
    assert!(error.details.contains("c1: no way"), "{error:?}");
    let origin = match mode {
        Mode::Direct => ORIGIN,
        Mode::Relay | Mode::RelayByNode | Mode::RelayDeclaredKeys => "upstream",
    };
    assert!(error.details.contains(origin), "{error:?}");
    assert!(error.last_update_attempt.is_some());

    // Streamed CSDS answers each request, with the same view.
    let (tx, rx) = mpsc::channel(4);
    let mut stream = ClientStatusDiscoveryServiceClient::new(server.channel.clone())
        .stream_client_status(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(ClientStatusRequest::default()).await.unwrap();
    let streamed = tokio::time::timeout(WAIT, stream.message())
        .await
        .expect("in time")
        .expect("an answer")
        .expect("open");
    assert_eq!(
        streamed.config[0].generic_xds_configs[0].client_status,
        ClientResourceStatus::Nacked as i32
    );

    // Fixed: ACKed again, the error gone.
    set_cluster(&server, "c1-v3");
    let fixed = ads.recv().await;
    ads.ack(&fixed).await;
    let r = csds_until(&server, ClientResourceStatus::Acked).await;
    let cds = &r.config[0].generic_xds_configs[0];
    assert_eq!(cds.version_info, fixed.version_info);
    assert!(cds.error_state.is_none());

    // Node matchers select clients; a regex is refused.
    let exact = csds(
        &server,
        node_id_matcher(MatchPattern::Exact("envoy-1".into())),
    )
    .await;
    assert_eq!(exact.config.len(), 1);
    let prefix = csds(
        &server,
        node_id_matcher(MatchPattern::Prefix("grpc-".into())),
    )
    .await;
    assert!(prefix.config.is_empty());
    let suffix = csds(&server, node_id_matcher(MatchPattern::Suffix("-1".into()))).await;
    assert_eq!(suffix.config.len(), 1);
    let regex = ClientStatusDiscoveryServiceClient::new(server.channel.clone())
        .fetch_client_status(node_id_matcher(MatchPattern::SafeRegex(Default::default())))
        .await
        .expect_err("regex matchers are refused");
    assert_eq!(regex.code(), tonic::Code::InvalidArgument);
    let excluded = csds(
        &server,
        ClientStatusRequest {
            exclude_resource_contents: true,
            ..Default::default()
        },
    )
    .await;
    assert!(excluded.config[0].generic_xds_configs[0]
        .xds_config
        .is_none());

    drop(ads);
    drop(tx);
    server.stop().await;
}

#[tokio::test]
async fn grpc_health_is_serving_until_shutdown() {
    let server = Server::start().await;
    let mut health = HealthClient::new(server.channel.clone());
    let check = |service: &str| HealthCheckRequest {
        service: service.into(),
    };
    let status = health.check(check("")).await.unwrap().into_inner().status;
    assert_eq!(status, ServingStatus::Serving as i32);
    let ads = "envoy.service.discovery.v3.AggregatedDiscoveryService";
    let status = health.check(check(ads)).await.unwrap().into_inner().status;
    assert_eq!(status, ServingStatus::Serving as i32);
    let unknown = health.check(check("no.such.Service")).await.unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound);

    let mut watch = health.watch(check("")).await.unwrap().into_inner();
    assert_eq!(next(&mut watch).await, Some(ServingStatus::Serving as i32));
    server.handle.readiness().set(false);
    assert_eq!(
        next(&mut watch).await,
        Some(ServingStatus::NotServing as i32)
    );
    let status = health.check(check("")).await.unwrap().into_inner().status;
    assert_eq!(status, ServingStatus::NotServing as i32);
    server.handle.readiness().set(true);
    assert_eq!(next(&mut watch).await, Some(ServingStatus::Serving as i32));

    // Shutting down: NOT_SERVING, then the watch ends.
    let stopping = tokio::spawn(server.stop());
    assert_eq!(
        next(&mut watch).await,
        Some(ServingStatus::NotServing as i32)
    );
    assert_eq!(next(&mut watch).await, None);
    stopping.await.unwrap();
}

async fn next(w: &mut Streaming<tonic_health::pb::HealthCheckResponse>) -> Option<i32> {
    tokio::time::timeout(WAIT, w.message())
        .await
        .expect("in time")
        .expect("no error")
        .map(|r| r.status)
}

/// Samples of an OpenMetrics text exposition, by name and labels; panics on anything the format
/// does not allow (a sample outside a declared family, a malformed line, no `# EOF` at the end).
fn parse_metrics(text: &str) -> BTreeMap<(String, String), f64> {
    let mut families: BTreeMap<String, String> = BTreeMap::new();
    let mut samples = BTreeMap::new();
    let mut eof = false;
    for line in text.lines() {
        assert!(!eof, "nothing may follow # EOF: {line:?}");
        if line == "# EOF" {
            eof = true;
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let (keyword, name) = (parts.next().unwrap(), parts.next().expect("a name"));
            match keyword {
                "TYPE" => {
                    let kind = parts.next().expect("a type");
                    assert!(
                        ["counter", "gauge", "histogram", "info", "unknown"].contains(&kind),
                        "{line}"
                    );
                    assert!(
                        families.insert(name.to_owned(), kind.to_owned()).is_none(),
                        "family {name} declared twice"
                    );
                }
                "HELP" | "UNIT" => {}
                other => panic!("unknown descriptor {other}: {line}"),
            }
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("a sample: name value");
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("not a number: {line}")),
        };
        let (name, labels) = match series.split_once('{') {
            Some((name, labels)) => {
                let labels = labels.strip_suffix('}').expect("closed labels");
                for pair in labels.split("\",").filter(|p| !p.is_empty()) {
                    let (k, v) = pair.split_once("=\"").expect("label=\"value\"");
                    assert!(
                        k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                        "{line}"
                    );
                    assert!(!v.contains('\n'), "{line}");
                }
                (name, labels.to_owned())
            }
            None => (series, String::new()),
        };
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "{line}"
        );
        let family = families
            .keys()
            .filter(|f| name.starts_with(f.as_str()))
            .max_by_key(|f| f.len())
            .unwrap_or_else(|| panic!("sample outside any declared family: {line}"));
        let suffix = &name[family.len()..];
        let allowed: &[&str] = match families[family].as_str() {
            "counter" => &["_total", "_created"],
            "histogram" => &["_bucket", "_count", "_sum", "_created"],
            "info" => &["_info"],
            _ => &[""],
        };
        assert!(
            allowed.contains(&suffix),
            "{name} in a {} family",
            families[family]
        );
        samples.insert((name.to_owned(), labels), value);
    }
    assert!(eof, "the exposition ends with # EOF");
    samples
}

fn sample(metrics: &BTreeMap<(String, String), f64>, name: &str, labels: &str) -> f64 {
    metrics
        .get(&(name.to_owned(), labels.to_owned()))
        .copied()
        .unwrap_or(0.0)
}

const CDS_LABEL: &str = "type_url=\"type.googleapis.com/envoy.config.cluster.v3.Cluster\"";
const ADS_SOTW: &str = "flavor=\"sotw\",service=\"ads\"";

#[tokio::test]
async fn a_handle_shows_clients_and_metrics_that_move() {
    let server = Server::start().await;
    set_cluster(&server, "c1-v1");
    assert!(server.handle.serving());
    assert!(server.handle.clients().is_empty());
    let before = parse_metrics(&server.handle.metrics_text());
    assert_eq!(sample(&before, "xdsd_connected_streams", ADS_SOTW), 0.0);
    assert_eq!(
        sample(&before, "xdsd_resources", CDS_LABEL),
        1.0,
        "{before:?}"
    );
    assert_eq!(
        sample(
            &before,
            "xdsd_build_info",
            &format!("version=\"{}\"", env!("CARGO_PKG_VERSION"))
        ),
        1.0
    );

    // Connect, get pushed, ACK; then a change NACKed.
    let mut ads = Ads::open(&server, "envoy-2").await;
    let first = ads.recv().await;
    ads.ack(&first).await;
    // (Once the ACK is in: an ACK that crosses the next push is stale.)
    csds_until(&server, ClientResourceStatus::Acked).await;
    set_cluster(&server, "c1-v2");
    let bad = ads.recv().await;
    ads.nack(
        &bad,
        &first.version_info,
        "Error adding/updating cluster(s) c1: nope",
    )
    .await;
    csds_until(&server, ClientResourceStatus::Nacked).await;

    let after = parse_metrics(&server.handle.metrics_text());
    assert_eq!(sample(&after, "xdsd_connected_streams", ADS_SOTW), 1.0);
    assert_eq!(sample(&after, "xdsd_streams_opened_total", ADS_SOTW), 1.0);
    assert_eq!(sample(&after, "xdsd_responses_total", CDS_LABEL), 2.0);
    assert_eq!(sample(&after, "xdsd_resources_sent_total", CDS_LABEL), 2.0);
    assert!(sample(&after, "xdsd_response_bytes_total", CDS_LABEL) > 10.0);
    assert_eq!(sample(&after, "xdsd_acks_total", CDS_LABEL), 1.0);
    assert_eq!(sample(&after, "xdsd_nacks_total", CDS_LABEL), 1.0);
    assert_eq!(
        sample(&after, "xdsd_push_ack_latency_seconds_count", CDS_LABEL),
        2.0
    );
    assert_eq!(
        sample(
            &after,
            "xdsd_push_ack_latency_seconds_bucket",
            &format!("le=\"+Inf\",{CDS_LABEL}")
        ),
        2.0,
        "{after:?}"
    );

    let clients = server.handle.clients();
    let client = &clients[0];
    assert_eq!(client.node.as_ref().map(|n| &*n.id), Some("envoy-2"));
    assert_eq!(client.flavor, "SotW");
    assert!(client.ads);
    assert!(client.peer.is_some_and(|p| p.ip().is_loopback()));
    let cds = &client.types[0];
    assert_eq!(&*cds.type_url, CLUSTER);
    assert_eq!(
        xdsd_core::clients::resource_status(cds),
        ClientResourceStatus::Nacked
    );
    assert_eq!(
        cds.last_ack.as_ref().map(|a| &*a.version),
        Some(first.version_info.as_str())
    );
    let nack = cds.last_nack.as_ref().expect("the NACK");
    assert_eq!(nack.version.as_deref(), Some(bad.version_info.as_str()));
    assert_eq!(nack.message, "Error adding/updating cluster(s) c1: nope");
    assert_eq!(nack.origins.first().map(|o| &**o), Some(ORIGIN));
    let sent = cds.last_sent.as_ref().expect("a response");
    let sent = sent.resources.iter().next().expect("a resource");
    assert_eq!(&**sent.name(), "c1");
    assert_eq!(sent.origin().map(|o| &**o), Some(ORIGIN));

    // Disconnect: the stream is no longer connected, the counters stay.
    drop(ads);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let m = parse_metrics(&server.handle.metrics_text());
        if sample(&m, "xdsd_connected_streams", ADS_SOTW) == 0.0 {
            assert_eq!(sample(&m, "xdsd_nacks_total", CDS_LABEL), 1.0);
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stream never closed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(server.handle.clients().is_empty());

    // Not ready: not serving.
    server.handle.readiness().set(false);
    assert!(!server.handle.serving());
    server.handle.readiness().set(true);
    server.stop().await;
}

#[tokio::test]
async fn a_delta_client_is_listed_with_its_resource_versions_and_counted_as_delta() {
    let server = Server::start().await;
    set_cluster(&server, "c1-v1");
    let (tx, rx) = mpsc::channel(4);
    let mut responses = AggregatedDiscoveryServiceClient::new(server.channel.clone())
        .delta_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(DeltaDiscoveryRequest {
        node: Some(Node {
            id: "delta-1".into(),
            ..Default::default()
        }),
        type_url: CLUSTER.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let first = tokio::time::timeout(WAIT, responses.message())
        .await
        .expect("in time")
        .expect("no error")
        .expect("open");
    tx.send(DeltaDiscoveryRequest {
        type_url: CLUSTER.into(),
        response_nonce: first.nonce.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    let r = csds_until(&server, ClientResourceStatus::Acked).await;
    let cds = &r.config[0].generic_xds_configs[0];
    assert_eq!(
        (&*cds.name, &*cds.version_info),
        ("c1", &*first.system_version_info)
    );

    let clients = server.handle.clients();
    let client = &clients[0];
    assert_eq!(client.flavor, "delta");
    let sent = client.types[0].last_sent.as_ref().expect("a response");
    let sent = sent.resources.iter().next().expect("a resource");
    assert_eq!(&**sent.name(), "c1");
    assert_eq!(&**sent.version(), first.resources[0].version.as_str());
    let metrics = parse_metrics(&server.handle.metrics_text());
    assert_eq!(
        sample(
            &metrics,
            "xdsd_connected_streams",
            "flavor=\"delta\",service=\"ads\""
        ),
        1.0
    );
    assert_eq!(sample(&metrics, "xdsd_acks_total", CDS_LABEL), 1.0);
    drop(tx);
    server.stop().await;
}

protocol_tests! {
    through_a_relay: [csds_follows_a_client_through_ack_nack_and_fix],
    // The others (gRPC health, the handle's records and metrics, a delta client's record) are
    // about the server's own bookkeeping, not rules a client sees, and run directly only
    // (plain tests above).
    direct_only: [],
}
