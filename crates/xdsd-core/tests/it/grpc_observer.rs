//! Stream observers over real gRPC on loopback: each event of a stream reaches them in order
//! (opened, request, response sent, ACK, NACK, closed), and a refused request ends its stream
//! with the observer's status before anything is sent; a `Fetch*` call is refused the same way.
//! The server's own record of each client (what CSDS shows) is built from the same events: an
//! embedder's observer that keeps what it is told ends up with the same record. An observer is
//! told what each request asks (names, locators, the wildcard), SotW and delta.

use std::sync::Arc;

use envoy_types::pb::envoy::service::cluster::v3::cluster_discovery_service_client::ClusterDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Status, Streaming};
use xdsd_core::types::CLUSTER;
use xdsd_core::RequestKind;
use xdsd_core::{
    Acked, Nacked, RequestSeen, ResponseSent, Store, StreamClosed, StreamObserver, StreamOpened,
    XdsServer,
};

use crate::support::{cds_answer, connect, input, node, Server, WAIT};

/// Records every event as a line, and refuses the requests of nodes other than `alpha`.
struct Recorder(mpsc::UnboundedSender<String>);

impl StreamObserver for Recorder {
    fn stream_opened(&self, e: &StreamOpened<'_>) {
        let _ = self.0.send(format!(
            "{} opened {:?} {:?}",
            e.stream, e.flavor, e.type_url
        ));
    }

    fn request(&self, e: &RequestSeen<'_>) -> Result<(), Status> {
        let node = e.node.map(|n| n.id.as_str()).unwrap_or("");
        let kind = match e.kind {
            RequestKind::Initial => "initial",
            RequestKind::Ack { .. } => "ack",
            RequestKind::Nack { .. } => "nack",
            RequestKind::Update => "update",
            RequestKind::Stale { .. } => "stale",
            _ => "other",
        };
        let _ = self
            .0
            .send(format!("{} request {node} {} {kind}", e.stream, e.type_url));
        if node == "alpha" {
            Ok(())
        } else {
            Err(Status::permission_denied(format!("unknown node {node:?}")))
        }
    }

    fn response_sent(&self, e: &ResponseSent<'_>) {
        let _ = self.0.send(format!(
            "{} response {} {} v={} nonce={} resources={}",
            e.stream, e.node_id, e.type_url, e.version, e.nonce, e.resources
        ));
    }

    fn acked(&self, e: &Acked<'_>) {
        let _ = self
            .0
            .send(format!("{} ack {} nonce={}", e.stream, e.type_url, e.nonce));
    }

    fn nacked(&self, e: &Nacked<'_>) {
        let _ = self.0.send(format!(
            "{} nack {} v={} nonce={} {}",
            e.stream,
            e.type_url,
            e.version.map_or("-", |v| &**v),
            e.nonce,
            e.message
        ));
    }

    fn stream_closed(&self, e: &StreamClosed<'_>) {
        let _ = self.0.send(format!(
            "{} closed {} {:?}",
            e.stream,
            e.node_id,
            e.status.map(|s| s.code())
        ));
    }
}

async fn next(events: &mut mpsc::UnboundedReceiver<String>) -> String {
    tokio::time::timeout(WAIT, events.recv())
        .await
        .expect("an event in time")
        .expect("the observer is alive")
}

fn request(id: &str, last: Option<&DiscoveryResponse>, error: Option<&str>) -> DiscoveryRequest {
    cds_answer(node(id, ""), last, error)
}

async fn open(
    addr: std::net::SocketAddr,
) -> (mpsc::Sender<DiscoveryRequest>, Streaming<DiscoveryResponse>) {
    let (tx, rx) = mpsc::channel(4);
    let responses = AggregatedDiscoveryServiceClient::new(connect(addr).await)
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    (tx, responses)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_see_each_event_of_a_stream_and_a_refusal_ends_it_with_their_status() {
    let store = Store::new();
    store.replace_all([input(CLUSTER, "c", b"1")]).unwrap();
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let server = XdsServer::builder(store.clone())
        .observer(Arc::new(Recorder(events_tx)))
        .build()
        .expect("a server without TLS builds");
    let server = Server::serve(store.clone(), server).await;
    let addr = server.addr;

    // A known node: served, and each of its events observed in order.
    let (tx, mut responses) = open(addr).await;
    tx.send(request("alpha", None, None)).await.unwrap();
    let first = tokio::time::timeout(WAIT, responses.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let opened = next(&mut events).await;
    let id = opened.split(' ').next().unwrap().to_string();
    assert_eq!(opened, format!("{id} opened Sotw None"));
    assert_eq!(
        next(&mut events).await,
        format!("{id} request alpha {CLUSTER} initial")
    );
    assert_eq!(
        next(&mut events).await,
        format!(
            "{id} response alpha {CLUSTER} v={} nonce={} resources=1",
            first.version_info, first.nonce
        )
    );
    tx.send(request("alpha", Some(&first), Some("bad cluster")))
        .await
        .unwrap();
    assert_eq!(
        next(&mut events).await,
        format!("{id} request alpha {CLUSTER} nack")
    );
    assert_eq!(
        next(&mut events).await,
        format!(
            "{id} nack {CLUSTER} v={} nonce={} bad cluster",
            first.version_info, first.nonce
        )
    );
    store.replace_all([input(CLUSTER, "c", b"2")]).unwrap();
    let second = tokio::time::timeout(WAIT, responses.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(next(&mut events).await.starts_with(&format!(
        "{id} response alpha {CLUSTER} v={}",
        second.version_info
    )));
    tx.send(request("alpha", Some(&second), None))
        .await
        .unwrap();
    assert_eq!(
        next(&mut events).await,
        format!("{id} request alpha {CLUSTER} ack")
    );
    assert_eq!(
        next(&mut events).await,
        format!("{id} ack {CLUSTER} nonce={}", second.nonce)
    );
    drop(tx);
    assert_eq!(next(&mut events).await, format!("{id} closed alpha None"));

    // An unknown node: refused with the observer's status, and sent nothing before it.
    let (tx, mut responses) = open(addr).await;
    tx.send(request("mallory", None, None)).await.unwrap();
    let status = tokio::time::timeout(WAIT, responses.message())
        .await
        .expect("an answer in time")
        .expect_err("the stream is refused");
    assert_eq!(status.code(), Code::PermissionDenied);
    assert_eq!(status.message(), "unknown node \"mallory\"");
    let opened = next(&mut events).await;
    let id = opened.split(' ').next().unwrap().to_string();
    assert_eq!(
        next(&mut events).await,
        format!("{id} request mallory {CLUSTER} initial")
    );
    assert_eq!(
        next(&mut events).await,
        format!("{id} closed mallory Some(PermissionDenied)")
    );

    // A one-shot Fetch is told as a request of stream 0, and refused the same way.
    let mut cds = ClusterDiscoveryServiceClient::new(connect(addr).await);
    let fetched = cds
        .fetch_clusters(request("alpha", None, None))
        .await
        .expect("a known node's fetch is answered")
        .into_inner();
    assert_eq!(fetched.resources.len(), 1);
    assert_eq!(
        next(&mut events).await,
        format!("0 request alpha {CLUSTER} initial")
    );
    let status = cds
        .fetch_clusters(request("mallory", None, None))
        .await
        .expect_err("an unknown node's fetch is refused");
    assert_eq!(status.code(), Code::PermissionDenied);
    assert_eq!(
        next(&mut events).await,
        format!("0 request mallory {CLUSTER} initial")
    );

    server.stop().await;
}

/// What an embedder's observer keeps of the events: what the server's record of a client is
/// built from.
#[derive(Debug)]
enum Seen {
    Sent {
        stream: u64,
        version: String,
        nonce: String,
        names: Vec<String>,
        resources: usize,
        generation: u64,
    },
    Ack {
        stream: u64,
        nonce: String,
    },
    Nack {
        stream: u64,
        nonce: String,
        version: Option<String>,
        message: String,
    },
    Closed {
        stream: u64,
    },
}

struct Mirror(mpsc::UnboundedSender<Seen>);

impl StreamObserver for Mirror {
    fn response_sent(&self, e: &ResponseSent<'_>) {
        let _ = self.0.send(Seen::Sent {
            stream: e.stream,
            version: e.version.to_string(),
            nonce: e.nonce.to_string(),
            names: e.carried().map(|r| r.name().to_string()).collect(),
            resources: e.resources,
            generation: e.generation,
        });
    }

    fn acked(&self, e: &Acked<'_>) {
        let _ = self.0.send(Seen::Ack {
            stream: e.stream,
            nonce: e.nonce.to_string(),
        });
    }

    fn nacked(&self, e: &Nacked<'_>) {
        let _ = self.0.send(Seen::Nack {
            stream: e.stream,
            nonce: e.nonce.to_string(),
            version: e.version.map(|v| v.to_string()),
            message: e.message.to_string(),
        });
    }

    fn stream_closed(&self, e: &StreamClosed<'_>) {
        let _ = self.0.send(Seen::Closed { stream: e.stream });
    }
}

async fn seen(events: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
    tokio::time::timeout(WAIT, events.recv())
        .await
        .expect("an event in time")
        .expect("the observer is alive")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_record_of_a_client_that_csds_shows_is_what_an_observer_is_told() {
    let store = Store::new();
    store
        .replace_all([input(CLUSTER, "a", b"1"), input(CLUSTER, "b", b"1")])
        .unwrap();
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let server = XdsServer::builder(store.clone())
        .observer(Arc::new(Mirror(events_tx)))
        .build()
        .expect("a server without TLS builds");
    let stats = server.handle();
    let server = Server::serve(store.clone(), server).await;
    let addr = server.addr;
    // The server's own observers are told each event before the embedder's: once this observer
    // has an event, the record has it too.
    let record = |stream: u64| {
        let client = stats
            .clients()
            .into_iter()
            .find(|c| c.stream == stream)
            .expect("the stream's client is on record");
        assert_eq!(client.types.len(), 1, "one type requested");
        (client.types[0].clone(), client.counters)
    };

    let (tx, mut responses) = open(addr).await;
    tx.send(request("alpha", None, None)).await.unwrap();
    let first = tokio::time::timeout(WAIT, responses.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let Seen::Sent {
        stream,
        version,
        nonce,
        names,
        resources,
        generation,
    } = seen(&mut events).await
    else {
        panic!("the first response is the first event")
    };
    assert_eq!((&version, &nonce), (&first.version_info, &first.nonce));
    assert_eq!(names, ["a", "b"]);
    assert_eq!(resources, 2);
    assert_eq!(generation, store.snapshot().generation());
    let (t, _) = record(stream);
    let sent = t.last_sent.as_ref().expect("a response on record");
    assert_eq!((&*sent.version, sent.nonce.as_str()), (&*version, &*nonce));
    let kept: Vec<&str> = sent.resources.iter().map(|r| &**r.name()).collect();
    assert_eq!(kept, names);
    assert!(t.pending, "the response awaits its answer");

    tx.send(request("alpha", Some(&first), Some("b is bad")))
        .await
        .unwrap();
    let Seen::Nack {
        stream: nacked,
        nonce,
        version,
        message,
    } = seen(&mut events).await
    else {
        panic!("a NACK")
    };
    assert_eq!(nacked, stream);
    let (t, _) = record(stream);
    let nack = t.last_nack.as_ref().expect("a NACK on record");
    assert_eq!(nack.nonce, nonce);
    assert_eq!(nack.version.as_deref(), version.as_deref());
    assert_eq!(nack.message, message);
    assert!(t.nacked && !t.pending);

    store.replace_all([input(CLUSTER, "a", b"2")]).unwrap();
    let second = tokio::time::timeout(WAIT, responses.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let Seen::Sent {
        version,
        names,
        resources: resources_2,
        generation,
        ..
    } = seen(&mut events).await
    else {
        panic!("the second response")
    };
    assert_eq!(version, second.version_info);
    assert_eq!(names, ["a"]);
    assert_eq!(generation, store.snapshot().generation());
    tx.send(request("alpha", Some(&second), None))
        .await
        .unwrap();
    let Seen::Ack {
        stream: acked,
        nonce,
    } = seen(&mut events).await
    else {
        panic!("an ACK")
    };
    assert_eq!((acked, &nonce), (stream, &second.nonce));
    let (t, counters) = record(stream);
    let ack = t.last_ack.as_ref().expect("an ACK on record");
    assert_eq!((ack.nonce.as_str(), &*ack.version), (&*nonce, &*version));
    assert!(!t.nacked && !t.pending);
    assert_eq!(
        (
            counters.responses,
            counters.resources,
            counters.acks,
            counters.nacks
        ),
        (2, (resources + resources_2) as u64, 1, 1)
    );

    drop(tx);
    let Seen::Closed { stream: closed } = seen(&mut events).await else {
        panic!("the stream's end")
    };
    assert_eq!(closed, stream);
    assert!(
        stats.clients().iter().all(|c| c.stream != stream),
        "a closed stream's client is no longer on record"
    );
    let totals = stats.totals();
    assert_eq!((totals.responses, totals.acks, totals.nacks), (2, 1, 1));

    server.stop().await;
}

/// Records what each request asks: `whole names -unsubscribed locators wildcard repeats`.
struct AskedRecorder(mpsc::UnboundedSender<String>);

impl StreamObserver for AskedRecorder {
    fn request(&self, e: &RequestSeen<'_>) -> Result<(), Status> {
        let a = &e.asked;
        let locators: Vec<String> = a
            .locators()
            .iter()
            .map(|l| {
                let mut params: Vec<_> = l.dynamic_parameters.iter().collect();
                params.sort();
                format!("{}{params:?}", l.name)
            })
            .collect();
        let _ = self.0.send(format!(
            "whole={} names={:?} unsubscribed={:?} locators={locators:?} wildcard={:?} repeats={}",
            a.is_whole(),
            a.names().collect::<Vec<_>>(),
            a.unsubscribed_names().collect::<Vec<_>>(),
            a.wildcard(),
            a.repeats(),
        ));
        Ok(())
    }
}

#[tokio::test]
async fn an_observer_is_told_the_names_locators_and_wildcard_each_request_asks() {
    use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, ResourceLocator};
    let store = Store::new();
    store.replace_all([input(CLUSTER, "c", b"1")]).unwrap();
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let server = XdsServer::builder(store.clone())
        .observer(Arc::new(AskedRecorder(events_tx)))
        .build()
        .expect("a server without TLS builds");
    let server = Server::serve(store.clone(), server).await;

    // SotW: the whole list, each time; a first request naming nothing is the legacy wildcard.
    let (tx, mut responses) = open(server.addr).await;
    tx.send(request("alpha", None, None)).await.unwrap();
    let first = tokio::time::timeout(WAIT, responses.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        next(&mut events).await,
        "whole=true names=[] unsubscribed=[] locators=[] wildcard=Some(true) repeats=false"
    );
    let mut named = request("alpha", Some(&first), None);
    named.resource_names = vec!["a".into(), "b".into()];
    tx.send(named.clone()).await.unwrap();
    assert_eq!(
        next(&mut events).await,
        r#"whole=true names=["a", "b"] unsubscribed=[] locators=[] wildcard=Some(false) repeats=false"#
    );
    // The ACK of its answer states the same list: the session says it repeats (an observer
    // that keeps the stream's subscription has nothing to read); a list changed again does not.
    let answer = tokio::time::timeout(WAIT, responses.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    named.version_info = answer.version_info.clone();
    named.response_nonce = answer.nonce.clone();
    tx.send(named.clone()).await.unwrap();
    assert_eq!(
        next(&mut events).await,
        r#"whole=true names=["a", "b"] unsubscribed=[] locators=[] wildcard=None repeats=true"#
    );
    named.resource_names = vec!["a".into()];
    tx.send(named).await.unwrap();
    assert_eq!(
        next(&mut events).await,
        r#"whole=true names=["a"] unsubscribed=[] locators=[] wildcard=None repeats=false"#
    );

    // Delta: what a request adds and removes, with its locators.
    let (dtx, rx) = mpsc::channel(4);
    let mut delta = AggregatedDiscoveryServiceClient::new(connect(server.addr).await)
        .delta_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    dtx.send(DeltaDiscoveryRequest {
        node: node("beta", ""),
        type_url: CLUSTER.into(),
        resource_names_subscribe: vec!["*".into(), "a".into()],
        resource_locators_subscribe: vec![ResourceLocator {
            name: "c".into(),
            dynamic_parameters: [("env".to_owned(), "prod".to_owned())].into(),
        }],
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(
        next(&mut events).await,
        r#"whole=false names=["*", "a"] unsubscribed=[] locators=["c[(\"env\", \"prod\")]"] wildcard=Some(true) repeats=false"#
    );
    let sent = tokio::time::timeout(WAIT, delta.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    dtx.send(DeltaDiscoveryRequest {
        type_url: CLUSTER.into(),
        response_nonce: sent.nonce,
        resource_names_unsubscribe: vec!["a".into(), "*".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(
        next(&mut events).await,
        r#"whole=false names=[] unsubscribed=["a", "*"] locators=[] wildcard=Some(false) repeats=false"#
    );
    drop((tx, dtx));
    server.stop().await;
}
