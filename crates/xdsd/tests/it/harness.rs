//! Tests of the test harness itself, without xdsd: when these fail, the environment (Envoy,
//! Python, grpcio) is broken, not xdsd.

use crate::support::{
    listener_port_from_json, parse_http_response, parse_port_after, scenario, unique_name,
    wait_for_body, Envoy, PyGrpcServer, Upstream,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_with_a_static_bootstrap_proxies_to_an_upstream() {
    let upstream = Upstream::start("upstream-a").await;
    let envoy = Envoy::start(&scenario::static_bootstrap(
        &unique_name("static-node"),
        upstream.port,
    ))
    .await;
    let port = envoy.listener_port("static_listener").await;
    wait_for_body(port, "upstream-a", String::new).await;
    assert!(upstream.hits() >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_grpc_client_calls_python_server_on_a_plain_target() {
    let server = PyGrpcServer::start("server-a").await;
    let target = format!("127.0.0.1:{}", server.port);
    let out = crate::support::run_python_client(
        &["--target", &target, "--calls", "2", "--expect", "server-a"],
        &[],
    )
    .await;
    assert!(
        out.status.success(),
        "grpc_client.py failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        out.stdout,
        out.stderr
    );
    assert_eq!(out.stdout.matches("response: server-a").count(), 2);
    assert_eq!(server.calls().len(), 2, "the server logged both calls");
}

#[test]
fn parses_ports_from_log_lines_and_admin_json() {
    assert_eq!(
        parse_port_after(
            "2024-01-01T00:00:00Z  INFO xdsd: xDS gRPC server listening on 127.0.0.1:4567",
            "xDS gRPC server listening on "
        ),
        Some(4567)
    );
    let json = r#"{"listener_statuses":[{"name":"l","local_address":{"socket_address":{"address":"127.0.0.1","port_value":1234}}}]}"#;
    assert_eq!(listener_port_from_json(json, "l"), Some(1234));
    assert_eq!(listener_port_from_json(json, "m"), None);
}

#[test]
fn parses_chunked_http_responses() {
    let raw =
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
    let resp = parse_http_response(raw).expect("parses");
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body, "abcde");
}
