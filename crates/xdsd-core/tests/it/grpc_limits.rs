//! Sizes over real gRPC on loopback: requests far above gRPC's usual 4 MiB are accepted up to the
//! server's limit; a request over it, or one that is not a request at all, ends its stream with
//! the status that says so.

use std::collections::HashMap;

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;
use xdsd_core::defaults::DEFAULT_MAX_REQUEST_BYTES;
use xdsd_core::types::{CLUSTER, CLUSTER_LOAD_ASSIGNMENT};
use xdsd_core::ServerOptions;

use crate::support::{node, raw_stream, Server, ADS_DELTA, ADS_SOTW, WAIT};

const MIB: usize = 1024 * 1024;

/// An EDS resource name of the length of a long real one (about 90 bytes), unique per `i`.
fn long_name(i: usize) -> String {
    format!("outbound|8080||service-{i:07}.a-namespace-of-some-length.svc.cluster.local.example-suffix-xx")
}

/// How many [`long_name`]s make a SotW request of about `bytes`.
fn names_for(bytes: usize) -> usize {
    // Each name is a length-delimited field: the name, a tag and a 1-byte length.
    bytes / (long_name(0).len() + 2)
}

/// A SotW EDS request naming `count` long names, and `extra` names at the front.
fn eds_request(extra: &[&str], count: usize) -> DiscoveryRequest {
    DiscoveryRequest {
        node: node("limits-test", "test"),
        type_url: CLUSTER_LOAD_ASSIGNMENT.into(),
        resource_names: extra
            .iter()
            .map(|n| n.to_string())
            .chain((0..count).map(long_name))
            .collect(),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_5_mib_request_is_accepted_by_default() {
    let server = Server::start().await;
    server.set(CLUSTER_LOAD_ASSIGNMENT, "a", b"endpoints-of-a");
    server.set(CLUSTER_LOAD_ASSIGNMENT, "b", b"endpoints-of-b");
    let request = eds_request(&["a", "b"], names_for(5 * MIB) + 100);
    assert!(
        request.encoded_len() > 5 * MIB,
        "the request is over 5 MiB: {}",
        request.encoded_len()
    );
    let (tx, rx) = mpsc::channel(1);
    tx.send(request).await.unwrap();
    let mut responses = AggregatedDiscoveryServiceClient::new(server.channel.clone())
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let r: DiscoveryResponse = tokio::time::timeout(WAIT, responses.message())
        .await
        .expect("a response in time")
        .expect("a response, not an error")
        .expect("an open stream");
    let values: Vec<&[u8]> = r.resources.iter().map(|a| a.value.as_slice()).collect();
    assert_eq!(values, [b"endpoints-of-a".as_slice(), b"endpoints-of-b"]);
    server.stop().await;
}

#[tokio::test]
async fn a_delta_reconnect_with_100k_initial_resource_versions_is_accepted_by_default() {
    let server = Server::start().await;
    server.set(CLUSTER, "kept", b"kept");
    let kept_version = {
        let snapshot = server.store.snapshot();
        snapshot
            .resource(CLUSTER, "kept")
            .unwrap()
            .version()
            .to_string()
    };
    // A wildcard CDS client that held 100,000 clusters, of which only `kept` still exists.
    let mut initial: HashMap<String, String> = (0..100_000)
        .map(|i| (long_name(i), format!("{i:016x}")))
        .collect();
    initial.insert("kept".into(), kept_version);
    let request = DeltaDiscoveryRequest {
        node: node("limits-test", "test"),
        type_url: CLUSTER.into(),
        initial_resource_versions: initial,
        ..Default::default()
    };
    let size = request.encoded_len();
    assert!(
        size > 10 * MIB && size < DEFAULT_MAX_REQUEST_BYTES,
        "100,000 initial versions take {size} bytes"
    );
    let (tx, rx) = mpsc::channel(4);
    tx.send(request).await.unwrap();
    let mut responses = AggregatedDiscoveryServiceClient::new(server.channel.clone())
        .max_decoding_message_size(64 * MIB)
        .delta_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    // Every vanished cluster is reported removed, `kept` is not resent; in as many responses
    // as the server makes of it, each acknowledged.
    let mut removed = 0;
    while removed < 100_000 {
        let r: DeltaDiscoveryResponse = tokio::time::timeout(WAIT, responses.message())
            .await
            .expect("a response in time")
            .expect("a response, not an error")
            .expect("an open stream");
        assert!(r.resources.is_empty(), "`kept` is unchanged: not resent");
        assert!(!r.removed_resources.iter().any(|n| n == "kept"));
        removed += r.removed_resources.len();
        tx.send(DeltaDiscoveryRequest {
            type_url: CLUSTER.into(),
            response_nonce: r.nonce,
            ..Default::default()
        })
        .await
        .unwrap();
    }
    assert_eq!(removed, 100_000);
    server.stop().await;
}

#[tokio::test]
async fn a_request_over_the_limit_ends_the_stream_with_resource_exhausted() {
    let server = Server::start_with(ServerOptions::default().max_request_bytes(MIB)).await;
    let request = eds_request(&[], names_for(MIB) + 100);
    assert!(request.encoded_len() > MIB);
    let mut s = raw_stream::<DiscoveryResponse>(&server.channel, ADS_SOTW).await;
    s.send(request.encode_to_vec()).await;
    let status = s.recv_status().await;
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains(&format!("{MIB} bytes")),
        "the message names the limit: {status:?}"
    );

    // Under the limit, the same stream shape is served.
    server.set(CLUSTER_LOAD_ASSIGNMENT, "a", b"endpoints-of-a");
    let mut s = raw_stream::<DiscoveryResponse>(&server.channel, ADS_SOTW).await;
    s.send(eds_request(&["a"], names_for(MIB) - 100).encode_to_vec())
        .await;
    let r = tokio::time::timeout(WAIT, s.responses.message())
        .await
        .expect("a response in time")
        .expect("a response, not an error")
        .expect("an open stream");
    assert_eq!(r.resources.len(), 1);
    server.stop().await;
}

#[tokio::test]
async fn garbage_bytes_end_the_stream_with_invalid_argument() {
    let server = Server::start().await;
    // 0xff...: a field with the invalid wire type 7.
    let garbage = vec![0xff_u8; 64];
    let mut s = raw_stream::<DiscoveryResponse>(&server.channel, ADS_SOTW).await;
    s.send(garbage.clone()).await;
    let status = s.recv_status().await;
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().contains("not a valid DiscoveryRequest"),
        "{status:?}"
    );

    let mut s = raw_stream::<DeltaDiscoveryResponse>(&server.channel, ADS_DELTA).await;
    s.send(garbage).await;
    let status = s.recv_status().await;
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        status
            .message()
            .contains("not a valid DeltaDiscoveryRequest"),
        "{status:?}"
    );

    // A well-formed request after all is still served on a new stream.
    server.set(CLUSTER, "c", b"c");
    let mut s = raw_stream::<DiscoveryResponse>(&server.channel, ADS_SOTW).await;
    s.send(
        DiscoveryRequest {
            node: node("limits-test", "test"),
            type_url: CLUSTER.into(),
            ..Default::default()
        }
        .encode_to_vec(),
    )
    .await;
    let r = tokio::time::timeout(WAIT, s.responses.message())
        .await
        .expect("a response in time")
        .expect("a response, not an error")
        .expect("an open stream");
    assert_eq!(r.resources.len(), 1);
    server.stop().await;
}

/// 6,000 endpoint resources of 1 KiB: an initial sync of about 6 MB.
fn six_megabytes(server: &Server) -> Vec<String> {
    let names: Vec<String> = (0..6000).map(|i| format!("cla-{i:05}")).collect();
    let body = vec![b'e'; 1024];
    server
        .store
        .apply(names.iter().map(|n| {
            xdsd_core::store::Change::Set(crate::support::input(CLUSTER_LOAD_ASSIGNMENT, n, &body))
        }))
        .unwrap();
    names
}

#[tokio::test]
async fn a_6_mb_delta_sync_reaches_a_client_with_grpcs_default_4_mib_limit_in_parts() {
    let server = Server::start().await;
    let names = six_megabytes(&server);
    let (tx, rx) = mpsc::channel(4);
    tx.send(DeltaDiscoveryRequest {
        node: node("limits-test", "test"),
        type_url: CLUSTER_LOAD_ASSIGNMENT.into(),
        resource_names_subscribe: vec!["*".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    // The client keeps tonic's default 4 MiB receive limit.
    let mut responses = AggregatedDiscoveryServiceClient::new(server.channel.clone())
        .delta_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let mut got: Vec<String> = Vec::new();
    let mut parts = 0;
    while got.len() < names.len() {
        let r: DeltaDiscoveryResponse = tokio::time::timeout(WAIT, responses.message())
            .await
            .expect("a response in time")
            .expect("a response under the client's limit")
            .expect("an open stream");
        assert!(r.encoded_len() <= MIB, "parts stay under the default 1 MiB");
        parts += 1;
        got.extend(r.resources.into_iter().map(|r| r.name));
    }
    assert!(parts >= 6, "6 MB in parts of at most 1 MiB: {parts}");
    got.sort();
    assert_eq!(got, names);
    server.stop().await;
}

#[tokio::test]
async fn a_6_mb_sotw_endpoints_response_reaches_a_client_with_grpcs_default_4_mib_limit_in_parts() {
    let server = Server::start_with(ServerOptions::default().max_response_bytes(2 * MIB)).await;
    let names = six_megabytes(&server);
    let (tx, rx) = mpsc::channel(4);
    tx.send(DiscoveryRequest {
        node: node("limits-test", "test"),
        type_url: CLUSTER_LOAD_ASSIGNMENT.into(),
        resource_names: names.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut responses = AggregatedDiscoveryServiceClient::new(server.channel.clone())
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let mut got = 0;
    let mut versions: Vec<String> = Vec::new();
    while got < names.len() {
        let r: DiscoveryResponse = tokio::time::timeout(WAIT, responses.message())
            .await
            .expect("a response in time")
            .expect("a response under the client's limit")
            .expect("an open stream");
        assert!(
            r.encoded_len() <= 2 * MIB,
            "parts stay under the configured 2 MiB"
        );
        got += r.resources.len();
        versions.push(r.version_info);
    }
    assert_eq!(got, names.len());
    let last = versions.pop().unwrap();
    assert!(versions.len() >= 2, "6 MB in parts of at most 2 MiB");
    for (i, v) in versions.iter().enumerate() {
        assert_eq!(*v, format!("{last}-part-{}", i + 1));
    }
    server.stop().await;
}

/// A served CDS stream on a connection of its own, kept open while the value lives.
type OpenStream = (
    mpsc::Sender<DiscoveryRequest>,
    tonic::Streaming<DiscoveryResponse>,
);

/// One CDS stream on its own connection to `addr`: the open stream once it was answered, or why
/// it was not.
async fn cds_on_new_connection(addr: std::net::SocketAddr) -> Result<OpenStream, String> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| e.to_string())?
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let (tx, rx) = mpsc::channel(1);
    tx.send(DiscoveryRequest {
        node: node("limits-test", "test"),
        type_url: CLUSTER.into(),
        ..Default::default()
    })
    .await
    .map_err(|e| e.to_string())?;
    let mut responses = AggregatedDiscoveryServiceClient::new(channel)
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .map_err(|e| e.to_string())?
        .into_inner();
    tokio::time::timeout(std::time::Duration::from_secs(5), responses.message())
        .await
        .map_err(|_| "no response in time".to_owned())?
        .map_err(|e| e.to_string())?
        .ok_or_else(|| "the stream ended".to_owned())?;
    Ok((tx, responses))
}

#[tokio::test]
async fn connections_over_the_limit_are_closed_and_the_others_served() {
    let server = Server::start_with(ServerOptions::default().max_connections(3)).await;
    server.set(CLUSTER, "c", b"c");
    // The test server's own channel holds one connection; two more fit.
    let first = cds_on_new_connection(server.addr).await;
    assert!(first.is_ok(), "{:?}", first.err());
    let second = cds_on_new_connection(server.addr).await;
    assert!(second.is_ok(), "{:?}", second.err());
    let refused = cds_on_new_connection(server.addr).await;
    assert!(refused.is_err(), "the fourth connection is refused");
    // The connections already open are still served.
    let (tx, rx) = mpsc::channel(1);
    tx.send(DiscoveryRequest {
        node: node("limits-test", "test"),
        type_url: CLUSTER.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut open = AggregatedDiscoveryServiceClient::new(server.channel.clone())
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let r = tokio::time::timeout(WAIT, open.message()).await.unwrap();
    assert!(matches!(r, Ok(Some(_))), "{r:?}");
}

/// Reads from `tcp` until the server closes it (end of stream or an error): `true`, or `false`
/// if it is still open after `WAIT`.
async fn closed_by_server(tcp: &mut tokio::net::TcpStream) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 1024];
    let closed = async {
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                // The server's own SETTINGS, say: keep reading.
                Ok(_) => continue,
            }
        }
    };
    tokio::time::timeout(WAIT, closed).await.is_ok()
}

#[tokio::test]
async fn a_connection_that_does_not_start_a_request_in_time_is_closed_and_the_others_served() {
    use tokio::io::AsyncWriteExt;
    let server = Server::start_with(
        ServerOptions::default().preface_timeout(std::time::Duration::from_millis(200)),
    )
    .await;
    server.set(CLUSTER, "c", b"c");
    // Silent.
    let mut silent = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    // Half a preface, then nothing.
    let mut stalled = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    stalled.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    assert!(
        closed_by_server(&mut silent).await,
        "a silent connection is closed"
    );
    assert!(
        closed_by_server(&mut stalled).await,
        "a stalled preface is closed"
    );
    // A client that speaks (the test server's channel, connected before, and a new one) is
    // served, also after the timeout.
    let open = cds_on_new_connection(server.addr).await;
    assert!(open.is_ok(), "{:?}", open.err());
    // A silent connection opened after it is closed at its own preface timeout: by then the
    // timeout of the connection that spoke has passed too.
    let mut later = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    assert!(
        closed_by_server(&mut later).await,
        "a silent connection is closed"
    );
    let (tx, mut responses) = open.unwrap();
    server.set(CLUSTER, "d", b"d");
    let r = tokio::time::timeout(WAIT, responses.message())
        .await
        .unwrap();
    assert!(matches!(r, Ok(Some(_))), "{r:?}");
    drop(tx);
    server.stop().await;
}

/// A stream on `channel` (its own HTTP/2 stream) whose request body is what the returned sender
/// sends, raw: gRPC framing included, so that a message can be cut short. Returns the sender and
/// the response, once its headers came.
async fn raw_body_stream(
    channel: &tonic::transport::Channel,
) -> (
    mpsc::Sender<Result<http_body::Frame<bytes::Bytes>, tonic::Status>>,
    tokio::task::JoinHandle<http::Response<tonic::body::Body>>,
) {
    use tower_service::Service;
    let (tx, rx) = mpsc::channel(4);
    let body = http_body_util::StreamBody::new(ReceiverStream::new(rx));
    let request = http::Request::builder()
        .method("POST")
        .uri(format!("http://localhost{ADS_SOTW}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(tonic::body::Body::new(body))
        .unwrap();
    let mut channel = channel.clone();
    let response = tokio::spawn(async move {
        std::future::poll_fn(|cx| channel.poll_ready(cx))
            .await
            .unwrap();
        channel.call(request).await.unwrap()
    });
    (tx, response)
}

/// The gRPC status a raw stream's response ends with (its trailers), or `None` if it did not end
/// within a moment.
async fn ended_with(response: http::Response<tonic::body::Body>) -> Option<tonic::Status> {
    use http_body_util::BodyExt;
    let mut body = response.into_body();
    let read = async {
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        return tonic::Status::from_header_map(&trailers);
                    }
                }
                Err(status) => return Some(status),
            }
        }
        None
    };
    tokio::time::timeout(std::time::Duration::from_secs(2), read)
        .await
        .ok()
        .flatten()
}

/// The start of a gRPC message that claims `len` bytes, and `sent` of them.
fn partial_message(len: u32, sent: usize) -> bytes::Bytes {
    let mut m = vec![0u8];
    m.extend_from_slice(&len.to_be_bytes());
    m.extend(std::iter::repeat_n(0x0a, sent));
    m.into()
}

#[tokio::test]
async fn unfinished_requests_are_bounded_per_connection_and_in_total() {
    const MIB: usize = 1024 * 1024;
    let server = Server::start_with(
        ServerOptions::default().max_buffered_request_bytes(2 * MIB + MIB / 2, 4 * MIB),
    )
    .await;
    server.set(CLUSTER, "c", b"c");
    let first = crate::support::connect(server.addr).await;
    // Three streams each send 1 MiB of a 3.9 MB message and stop: the third would take the
    // connection past 2.5 MiB.
    let mut streams = Vec::new();
    for _ in 0..3 {
        let (tx, response) = raw_body_stream(&first).await;
        tx.send(Ok(http_body::Frame::data(partial_message(3_900_000, MIB))))
            .await
            .unwrap();
        streams.push((tx, response));
    }
    let mut statuses = Vec::new();
    for (_, response) in &mut streams {
        let response = response.await.unwrap();
        statuses.push(ended_with(response).await);
    }
    let refused: Vec<_> = statuses.iter().flatten().collect();
    assert_eq!(refused.len(), 1, "{statuses:?}");
    assert_eq!(refused[0].code(), Code::ResourceExhausted);
    assert!(
        refused[0].message().contains("this connection"),
        "{}",
        refused[0].message()
    );

    // Another connection: its first 1 MiB fits in the total (2 + 1 MiB held), its second would
    // take the server past 4 MiB.
    let second = crate::support::connect(server.addr).await;
    let mut more = Vec::new();
    for _ in 0..2 {
        let (tx, response) = raw_body_stream(&second).await;
        tx.send(Ok(http_body::Frame::data(partial_message(3_900_000, MIB))))
            .await
            .unwrap();
        more.push((tx, response));
    }
    let mut statuses = Vec::new();
    for (_, response) in &mut more {
        statuses.push(ended_with(response.await.unwrap()).await);
    }
    let refused: Vec<_> = statuses.iter().flatten().collect();
    assert_eq!(refused.len(), 1, "{statuses:?}");
    assert_eq!(refused[0].code(), Code::ResourceExhausted);
    assert!(
        refused[0].message().contains("the server holds"),
        "{}",
        refused[0].message()
    );

    // A well-behaved client on a connection of its own is served meanwhile.
    let open = cds_on_new_connection(server.addr).await;
    assert!(open.is_ok(), "{:?}", open.err());
    // The stalled streams give their bytes back when they end: then a new one fits again.
    drop(streams);
    drop(more);
    drop(first);
    drop(second);
    // Their ends are seen only by a new stream being let in: it is refused at once while the
    // bytes are still held, and tried again on that refusal until it fits.
    let third = crate::support::connect(server.addr).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    let _kept = loop {
        let (tx, response) = raw_body_stream(&third).await;
        tx.send(Ok(http_body::Frame::data(partial_message(
            3_900_000,
            2 * MIB,
        ))))
        .await
        .unwrap();
        match ended_with(response.await.unwrap()).await {
            None => break tx,
            Some(status) => assert!(
                status.code() == Code::ResourceExhausted && tokio::time::Instant::now() < deadline,
                "2 MiB never fit once the others were gone: {status:?}"
            ),
        }
    };
    server.stop().await;
}

/// An EDS stream on `channel` subscribed to `names` names: `Ok` with the stream kept open once
/// answered, or the status it ended with.
async fn eds_names_on(
    channel: &tonic::transport::Channel,
    names: usize,
) -> Result<OpenStream, tonic::Status> {
    let (tx, rx) = mpsc::channel(1);
    tx.send(eds_request(&["a"], names - 1)).await.unwrap();
    let mut responses = AggregatedDiscoveryServiceClient::new(channel.clone())
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await?
        .into_inner();
    match tokio::time::timeout(WAIT, responses.message())
        .await
        .expect("an answer in time")
    {
        Ok(Some(_)) => Ok((tx, responses)),
        Ok(None) => Err(tonic::Status::unknown("ended without a status")),
        Err(status) => Err(status),
    }
}

#[tokio::test]
async fn subscribed_names_are_bounded_per_connection_and_in_total() {
    let server = Server::start_with(ServerOptions::default().max_names(5, 8)).await;
    server.set(CLUSTER_LOAD_ASSIGNMENT, "a", b"endpoints-of-a");
    let first = crate::support::connect(server.addr).await;
    let kept = eds_names_on(&first, 3).await.expect("3 names fit");
    let over = eds_names_on(&first, 3)
        .await
        .expect_err("6 on one connection");
    assert_eq!(over.code(), Code::ResourceExhausted);
    assert!(
        over.message().contains("this connection"),
        "{}",
        over.message()
    );
    // The refused stream gave its names back: 2 more still fit on the connection.
    let _two = eds_names_on(&first, 2).await.expect("5 on the connection");
    // Another connection: 3 fit (8 in all), one more name is over the total.
    let second = crate::support::connect(server.addr).await;
    let _three = eds_names_on(&second, 3).await.expect("8 in total");
    let over = eds_names_on(&second, 1).await.expect_err("9 in total");
    assert_eq!(over.code(), Code::ResourceExhausted);
    assert!(
        over.message().contains("the server's streams"),
        "{}",
        over.message()
    );
    // A stream that ends gives its names back. That is seen only by a new stream being let
    // in: refused at once while the names are still held, it is tried again on each refusal.
    drop(kept);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match eds_names_on(&second, 1).await {
            Ok(_) => break,
            Err(status) => assert!(
                status.code() == Code::ResourceExhausted && tokio::time::Instant::now() < deadline,
                "the names of an ended stream were not given back: {status:?}"
            ),
        }
    }
    server.stop().await;
}

const EP: &str = "type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint";
const C1: &str = "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1";

/// A delta stream to a server with `options` subscribed to the glob `C1/*` of one member; a
/// member added (sent), then another: the status the stream ends with.
async fn delta_glob_grown(options: ServerOptions) -> tonic::Status {
    let server = Server::start_with(options).await;
    server.set(EP, &format!("{C1}/e0"), b"e0");
    let mut s = raw_stream::<DeltaDiscoveryResponse>(&server.channel, ADS_DELTA).await;
    async fn next(
        s: &mut crate::support::RawStream<DeltaDiscoveryResponse>,
    ) -> DeltaDiscoveryResponse {
        tokio::time::timeout(WAIT, s.responses.message())
            .await
            .expect("a response in time")
            .expect("a response, not an error")
            .expect("an open stream")
    }
    s.send(
        DeltaDiscoveryRequest {
            type_url: EP.into(),
            node: node("n", "c"),
            resource_names_subscribe: vec![format!("{C1}/*")],
            ..Default::default()
        }
        .encode_to_vec(),
    )
    .await;
    let mut nonce = next(&mut s).await.nonce;
    for id in ["e1", "e2"] {
        s.send(
            DeltaDiscoveryRequest {
                type_url: EP.into(),
                response_nonce: nonce.clone(),
                ..Default::default()
            }
            .encode_to_vec(),
        )
        .await;
        server.set(EP, &format!("{C1}/{id}"), id.as_bytes());
        if id == "e1" {
            let r = next(&mut s).await;
            assert_eq!(r.resources[0].name, format!("{C1}/e1"));
            nonce = r.nonce;
        }
    }
    let status = s.recv_status().await;
    server.stop().await;
    status
}

/// The same over SotW: the glob's members are sent with every change of its own.
async fn sotw_glob_grown(options: ServerOptions) -> tonic::Status {
    let server = Server::start_with(options).await;
    server.set(EP, &format!("{C1}/e0"), b"e0");
    let mut s = raw_stream::<DiscoveryResponse>(&server.channel, ADS_SOTW).await;
    async fn next(s: &mut crate::support::RawStream<DiscoveryResponse>) -> DiscoveryResponse {
        tokio::time::timeout(WAIT, s.responses.message())
            .await
            .expect("a response in time")
            .expect("a response, not an error")
            .expect("an open stream")
    }
    let request = |nonce: &str, version: &str| DiscoveryRequest {
        type_url: EP.into(),
        node: node("n", "c"),
        resource_names: vec![format!("{C1}/*")],
        response_nonce: nonce.into(),
        version_info: version.into(),
        ..Default::default()
    };
    s.send(request("", "").encode_to_vec()).await;
    let mut last = next(&mut s).await;
    assert_eq!(last.resources.len(), 1);
    for id in ["e1", "e2"] {
        s.send(request(&last.nonce, &last.version_info).encode_to_vec())
            .await;
        server.set(EP, &format!("{C1}/{id}"), id.as_bytes());
        if id == "e1" {
            last = next(&mut s).await;
            assert_eq!(last.resources.len(), 1, "the member added");
        }
    }
    let status = s.recv_status().await;
    server.stop().await;
    status
}

#[tokio::test]
async fn a_glob_member_added_past_the_names_limit_ends_the_delta_stream_with_resource_exhausted() {
    // Three names a stream: the glob and two members fit; a third member added later does not.
    let status = delta_glob_grown(ServerOptions::default().max_names_per_stream(3)).await;
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("subscribed resource names"),
        "{status:?}"
    );
}

#[tokio::test]
async fn a_glob_member_added_past_the_names_limit_ends_the_sotw_stream_with_resource_exhausted() {
    let status = sotw_glob_grown(ServerOptions::default().max_names_per_stream(3)).await;
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("subscribed resource names"),
        "{status:?}"
    );
}

#[tokio::test]
async fn a_glob_member_added_past_the_connection_names_limit_ends_the_stream_with_resource_exhausted(
) {
    // Three names a connection (and a hundred in all), delta and SotW alike.
    for status in [
        delta_glob_grown(ServerOptions::default().max_names(3, 100)).await,
        sotw_glob_grown(ServerOptions::default().max_names(3, 100)).await,
    ] {
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
        assert!(status.message().contains("this connection"), "{status:?}");
    }
}

#[tokio::test]
async fn a_glob_member_added_past_the_total_names_limit_ends_the_stream_with_resource_exhausted() {
    for status in [
        delta_glob_grown(ServerOptions::default().max_names(100, 3)).await,
        sotw_glob_grown(ServerOptions::default().max_names(100, 3)).await,
    ] {
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
        assert!(status.message().contains("the server's"), "{status:?}");
    }
}
