//! Incremental xDS over real gRPC on loopback, and what it costs compared with SotW: counts of
//! resources sent, never times.

use std::collections::HashMap;

use envoy_types::pb::envoy::service::cluster::v3::cluster_discovery_service_client::ClusterDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;
use xdsd_core::store::Change;
use xdsd_core::types::{CLUSTER, CLUSTER_LOAD_ASSIGNMENT};

use crate::support::{label, labelled, node, protocol_tests, Mode, Server, WAIT};

struct Delta {
    node: &'static str,
    tx: mpsc::Sender<DeltaDiscoveryRequest>,
    responses: Streaming<DeltaDiscoveryResponse>,
}

async fn delta(server: &Server) -> Delta {
    delta_as(server, "delta-test").await
}

async fn delta_as(server: &Server, node: &'static str) -> Delta {
    let (tx, rx) = mpsc::channel(16);
    let responses = AggregatedDiscoveryServiceClient::new(server.channel.clone())
        .delta_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    Delta {
        node,
        tx,
        responses,
    }
}

impl Delta {
    async fn send(&self, request: DeltaDiscoveryRequest) {
        self.tx
            .send(DeltaDiscoveryRequest {
                node: node(self.node, ""),
                ..request
            })
            .await
            .unwrap();
    }

    async fn subscribe(&self, type_url: &str, names: &[&str]) {
        self.send(DeltaDiscoveryRequest {
            type_url: type_url.into(),
            resource_names_subscribe: names.iter().map(|n| n.to_string()).collect(),
            ..Default::default()
        })
        .await
    }

    async fn ack(&self, r: &DeltaDiscoveryResponse) {
        self.send(DeltaDiscoveryRequest {
            type_url: r.type_url.clone(),
            response_nonce: r.nonce.clone(),
            ..Default::default()
        })
        .await
    }

    async fn recv(&mut self) -> DeltaDiscoveryResponse {
        tokio::time::timeout(WAIT, self.responses.message())
            .await
            .expect("a response in time")
            .expect("a response, not an error")
            .expect("an open stream")
    }
}

fn names(r: &DeltaDiscoveryResponse) -> Vec<&str> {
    r.resources.iter().map(|r| r.name.as_str()).collect()
}

async fn delta_ads_subscribe_update_remove_and_missing_names(mode: Mode) {
    let server = Server::start_in(mode).await;
    server.put(CLUSTER, "c1", "c1");
    server.put(CLUSTER_LOAD_ASSIGNMENT, "c1", "e1");
    let mut s = delta(&server).await;

    s.subscribe(CLUSTER, &[]).await; // legacy wildcard
    let r = s.recv().await;
    assert_eq!(r.type_url, CLUSTER);
    assert_eq!(names(&r), ["c1"]);
    let res = &r.resources[0];
    assert!(!res.version.is_empty());
    assert_eq!(label(&res.resource.as_ref().unwrap().value), "c1");
    assert_eq!(res.resource.as_ref().unwrap().type_url, CLUSTER);
    assert!(!r.system_version_info.is_empty() && !r.nonce.is_empty());
    s.ack(&r).await;

    s.subscribe(CLUSTER_LOAD_ASSIGNMENT, &["c1", "ghost"]).await;
    let r = s.recv().await;
    assert_eq!(names(&r), ["c1"]);
    assert_eq!(
        r.removed_resources,
        ["ghost"],
        "a missing name is reported at once"
    );
    s.ack(&r).await;

    server.put(CLUSTER, "c2", "c2");
    let r = s.recv().await;
    assert_eq!(names(&r), ["c2"], "only the new cluster");
    s.ack(&r).await;

    server
        .store
        .apply([Change::Remove {
            type_url: CLUSTER.into(),
            name: "c1".into(),
        }])
        .unwrap();
    let r = s.recv().await;
    assert!(r.resources.is_empty());
    assert_eq!(r.removed_resources, ["c1"]);
    server.stop().await;
}

async fn one_changed_cluster_of_10000_sends_one_resource_on_delta_and_all_on_sotw(mode: Mode) {
    const N: usize = 10_000;
    let server = Server::start_in(mode).await;
    server
        .store
        .replace_all(
            (0..N).map(|i| labelled(CLUSTER, &format!("cluster-{i:05}"), &format!("v1-{i}"))),
        )
        .unwrap();

    let mut d = delta(&server).await;
    d.subscribe(CLUSTER, &[]).await;
    let initial = d.recv().await;
    assert_eq!(initial.resources.len(), N);
    d.ack(&initial).await;

    let (tx, rx) = mpsc::channel(4);
    let mut sotw: Streaming<DiscoveryResponse> =
        ClusterDiscoveryServiceClient::new(server.channel.clone())
            .stream_clusters(ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
    tx.send(DiscoveryRequest {
        node: node("sotw", ""),
        ..Default::default()
    })
    .await
    .unwrap();
    let first = tokio::time::timeout(WAIT, sotw.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.resources.len(), N);
    tx.send(DiscoveryRequest {
        response_nonce: first.nonce.clone(),
        version_info: first.version_info.clone(),
        ..Default::default()
    })
    .await
    .unwrap();

    server.put(CLUSTER, "cluster-04242", "v2");
    let changed = d.recv().await;
    assert_eq!(
        names(&changed),
        ["cluster-04242"],
        "delta sends exactly the changed cluster"
    );
    assert!(changed.removed_resources.is_empty());
    let full = tokio::time::timeout(WAIT, sotw.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(full.resources.len(), N, "SotW CDS sends the full state");
    server.stop().await;
}

async fn reconnect_with_initial_resource_versions_resends_only_what_changed(mode: Mode) {
    let server = Server::start_in(mode).await;
    for name in ["same", "changes", "goes"] {
        server.put(CLUSTER, name, name);
    }
    let mut s = delta(&server).await;
    s.subscribe(CLUSTER, &["*"]).await;
    let r = s.recv().await;
    let versions: HashMap<String, String> = r
        .resources
        .iter()
        .map(|r| (r.name.clone(), r.version.clone()))
        .collect();
    drop(s);

    // While the client is away: one changes, one goes, one comes.
    server.put(CLUSTER, "changes", "changed");
    server.put(CLUSTER, "new", "new");
    server
        .store
        .apply([Change::Remove {
            type_url: CLUSTER.into(),
            name: "goes".into(),
        }])
        .unwrap();
    // The client comes back to a server that has the changes (with a relay, once it has them).
    for name in ["changes", "new", "goes"] {
        server
            .relayed_for(node("delta-test", "").as_ref(), CLUSTER, name)
            .await;
    }

    let mut s = delta(&server).await;
    s.send(DeltaDiscoveryRequest {
        type_url: CLUSTER.into(),
        resource_names_subscribe: vec!["*".into()],
        initial_resource_versions: versions,
        ..Default::default()
    })
    .await;
    let r = s.recv().await;
    assert_eq!(
        names(&r),
        ["changes", "new"],
        "unchanged 'same' is not resent"
    );
    assert_eq!(r.removed_resources, ["goes"]);
    server.stop().await;
}

async fn a_client_that_never_reads_neither_stalls_others_nor_queues_without_bound(mode: Mode) {
    const OTHERS: usize = 100;
    const UPDATES: usize = 1_000;
    let server = Server::start_in(mode).await;
    // Big enough that the slow client's HTTP/2 window fills long before the updates end.
    let payload = |i: usize| {
        let mut v = format!("update-{i:06}-").into_bytes();
        v.resize(16 * 1024, b'x');
        v
    };
    server.set(CLUSTER_LOAD_ASSIGNMENT, "hot", &payload(0));

    let slow = delta_as(&server, "slow").await;
    slow.subscribe(CLUSTER_LOAD_ASSIGNMENT, &["hot"]).await;
    // `slow.responses` is never read from here on.

    let mut others = Vec::new();
    for _ in 0..OTHERS {
        let mut c = delta(&server).await;
        c.subscribe(CLUSTER_LOAD_ASSIGNMENT, &["hot"]).await;
        let r = c.recv().await;
        c.ack(&r).await;
        others.push(c);
    }
    let readers: Vec<_> = others
        .into_iter()
        .map(|mut c| {
            tokio::spawn(async move {
                let last = format!("update-{:06}-", UPDATES);
                loop {
                    let r = c.recv().await;
                    c.ack(&r).await;
                    let value = &r.resources[0].resource.as_ref().unwrap().value;
                    if value.starts_with(last.as_bytes()) {
                        return;
                    }
                }
            })
        })
        .collect();
    for i in 1..=UPDATES {
        server.set(CLUSTER_LOAD_ASSIGNMENT, "hot", &payload(i));
        if i % 50 == 0 {
            tokio::task::yield_now().await;
        }
    }
    for reader in readers {
        tokio::time::timeout(WAIT * 3, reader)
            .await
            .expect("every reading client converges to the last update")
            .unwrap();
    }
    let streams = server.streams();
    let slow_stream = streams
        .iter()
        .find(|s| s.node == "slow")
        .expect("the slow stream is still open");
    let sent = slow_stream.counters.responses;
    // The slow stream got only what its transport window could take (plus the one response
    // computed and waiting), not one response per update: pending updates coalesce.
    assert!(
        sent < (UPDATES / 4) as u64,
        "the non-reading stream was sent {sent} of {UPDATES} updates"
    );
    drop(slow);
    server.stop().await;
}

async fn vhds_delta_virtual_hosts_serves_a_virtual_host_by_domain_alias(mode: Mode) {
    use envoy_types::pb::envoy::config::core::v3::ConfigSource;
    use envoy_types::pb::envoy::config::route::v3::{RouteConfiguration, Vhds, VirtualHost};
    use envoy_types::pb::envoy::service::route::v3::virtual_host_discovery_service_client::VirtualHostDiscoveryServiceClient;
    use prost::Message;
    use xdsd_core::types::{ROUTE_CONFIGURATION, VIRTUAL_HOST};

    let server = Server::start_in(mode).await;
    let rc = RouteConfiguration {
        name: "local_route".into(),
        virtual_hosts: vec![VirtualHost {
            name: "backend".into(),
            domains: vec!["backend.example".into()],
            ..Default::default()
        }],
        vhds: Some(Vhds {
            config_source: Some(ConfigSource::default()),
        }),
        ..Default::default()
    };
    server.set(ROUTE_CONFIGURATION, "local_route", &rc.encode_to_vec());

    let (tx, rx) = mpsc::channel(4);
    let mut vhds = VirtualHostDiscoveryServiceClient::new(server.channel.clone())
        .delta_virtual_hosts(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(DeltaDiscoveryRequest {
        node: node("vhds", ""),
        type_url: VIRTUAL_HOST.into(),
        resource_names_subscribe: vec![
            "local_route/backend.example".into(),
            "local_route/nope.example".into(),
        ],
        ..Default::default()
    })
    .await
    .unwrap();
    let r = tokio::time::timeout(WAIT, vhds.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    // The known domain's virtual host, under its name; the unknown domain's alias as a resource
    // with no body (what Envoy's on-demand VHDS waits for), not a removal.
    assert_eq!(
        names(&r),
        ["local_route/backend", "local_route/nope.example"]
    );
    assert_eq!(r.resources[0].aliases, ["local_route/backend.example"]);
    let host =
        VirtualHost::decode(r.resources[0].resource.as_ref().unwrap().value.as_slice()).unwrap();
    assert_eq!(host.domains, ["backend.example"]);
    assert_eq!(host.name, "local_route/backend");
    assert_eq!(r.resources[1].aliases, ["local_route/nope.example"]);
    assert!(r.resources[1].resource.is_none());
    assert!(r.removed_resources.is_empty());
    server.stop().await;
}

async fn delta_streams_with_the_same_first_subscription_each_change_only_their_own(mode: Mode) {
    let server = Server::start_in(mode).await;
    let all = server.set_named(CLUSTER_LOAD_ASSIGNMENT, "same", 100);
    let list: Vec<&str> = all.iter().map(|n| n.as_str()).collect();
    let mut streams = Vec::new();
    for _ in 0..3 {
        let mut s = delta(&server).await;
        s.subscribe(CLUSTER_LOAD_ASSIGNMENT, &list).await;
        let r = s.recv().await;
        let mut got: Vec<&str> = names(&r);
        got.sort_unstable();
        assert_eq!(got, list, "every subscribed name");
        s.ack(&r).await;
        streams.push(s);
    }
    // The second unsubscribes from one name, then subscribes to one more.
    streams[1]
        .send(DeltaDiscoveryRequest {
            type_url: CLUSTER_LOAD_ASSIGNMENT.into(),
            resource_names_unsubscribe: vec!["same-000".into()],
            ..Default::default()
        })
        .await;
    server.put(CLUSTER_LOAD_ASSIGNMENT, "late", "late");
    streams[1]
        .subscribe(CLUSTER_LOAD_ASSIGNMENT, &["late"])
        .await;
    let r = streams[1].recv().await;
    assert_eq!(names(&r), ["late"]);
    streams[1].ack(&r).await;
    server.put(CLUSTER_LOAD_ASSIGNMENT, "same-000", "same-000 v2");
    server.put(CLUSTER_LOAD_ASSIGNMENT, "late", "late v2");
    for (i, s) in streams.iter_mut().enumerate() {
        let want: &[&str] = if i == 1 { &["late"] } else { &["same-000"] };
        let r = s.recv().await;
        assert_eq!(names(&r), want, "stream {i}");
        s.ack(&r).await;
    }
    server.stop().await;
}

protocol_tests! {
    through_a_relay: [],
    direct_only: [
        // How the server's own transport treats a client that stops reading: the relay's
        // downstream is that same server, and a relay coalesces the upstream's changes anyway.
        a_client_that_never_reads_neither_stalls_others_nor_queues_without_bound,
    ],
    // The protocol's rules hold through a relay in either grouping.
    relay_by_node: [],
    through_both_relays: [
        delta_ads_subscribe_update_remove_and_missing_names,
        one_changed_cluster_of_10000_sends_one_resource_on_delta_and_all_on_sotw,
        reconnect_with_initial_resource_versions_resends_only_what_changed,
        delta_streams_with_the_same_first_subscription_each_change_only_their_own,
        vhds_delta_virtual_hosts_serves_a_virtual_host_by_domain_alias,
    ],
}
