//! What the sans-I/O machine costs per resource, with no server, socket or other process: a
//! response of N endpoint resources (ClusterLoadAssignment, by name), the same again unchanged,
//! then one-resource updates, then ACKs, then subscriptions, each step's CPU time (this thread's,
//! `CLOCK_THREAD_CPUTIME_ID`) per resource. BENCHMARKS.md, "Stop 66".
//!
//! `cargo run --release -p xdsd-client --example cost -- [--names 10000,40000,100000]
//! [--flavor sotw|delta|both] [--updates 2000] [--wildcard]`; `--wildcard` subscribes `*` rather
//! than the N names (as a relay does), so that the response's resources settle no subscription.
//!
//! Instruction counts, load-independent: run it under callgrind with the steps as the only
//! functions collected, e.g. `valgrind --tool=callgrind --collect-atstart=no
//! --toggle-collect='cost::step_*' --callgrind-out-file=/tmp/cost.cg target/release/examples/cost
//! --names 40000 --flavor delta` and `callgrind_annotate --inclusive=yes /tmp/cost.cg | grep
//! step_`; each step's count divided by its resources (printed) is its instructions per resource.

use std::time::Instant;

use envoy_types::pb::envoy::config::core::v3::SocketAddress;
use envoy_types::pb::envoy::config::core::v3::{address, socket_address, Address, Node};
use envoy_types::pb::envoy::config::endpoint::v3::{
    lb_endpoint, ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryResponse, DiscoveryResponse, Resource as WireResource,
};
use envoy_types::pb::google::protobuf::Any;
use prost::Message;
use xdsd_client::types::CLUSTER_LOAD_ASSIGNMENT;
use xdsd_client::{Client, Config, Event, Flavor};

/// This thread's CPU time so far, in nanoseconds.
fn cpu_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call to write.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } == 0;
    assert!(ok, "CLOCK_THREAD_CPUTIME_ID");
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn name(i: usize) -> String {
    format!("cluster-{i:06}")
}

/// A ClusterLoadAssignment of one endpoint, as S12 serves (`port` tells versions apart).
fn body(i: usize, port: u32) -> Any {
    let endpoint = LbEndpoint {
        host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
            address: Some(Address {
                address: Some(address::Address::SocketAddress(SocketAddress {
                    address: format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255),
                    port_specifier: Some(socket_address::PortSpecifier::PortValue(port)),
                    ..Default::default()
                })),
            }),
            ..Default::default()
        })),
        ..Default::default()
    };
    Any {
        type_url: CLUSTER_LOAD_ASSIGNMENT.to_owned(),
        value: ClusterLoadAssignment {
            cluster_name: name(i),
            endpoints: vec![LocalityLbEndpoints {
                lb_endpoints: vec![endpoint],
                ..Default::default()
            }],
            ..Default::default()
        }
        .encode_to_vec(),
    }
}

fn delta_response(
    nonce: usize,
    items: impl Iterator<Item = (usize, u32)>,
) -> DeltaDiscoveryResponse {
    DeltaDiscoveryResponse {
        system_version_info: format!("v{nonce}"),
        type_url: CLUSTER_LOAD_ASSIGNMENT.to_owned(),
        nonce: format!("n{nonce}"),
        resources: items
            .map(|(i, port)| WireResource {
                name: name(i),
                version: format!("{port}"),
                resource: Some(body(i, port)),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn sotw_response(nonce: usize, items: impl Iterator<Item = (usize, u32)>) -> DiscoveryResponse {
    DiscoveryResponse {
        version_info: format!("v{nonce}"),
        type_url: CLUSTER_LOAD_ASSIGNMENT.to_owned(),
        nonce: format!("n{nonce}"),
        resources: items.map(|(i, port)| body(i, port)).collect(),
        ..Default::default()
    }
}

enum Response {
    Sotw(DiscoveryResponse),
    Delta(DeltaDiscoveryResponse),
}

fn response(flavor: Flavor, nonce: usize, items: impl Iterator<Item = (usize, u32)>) -> Response {
    match flavor {
        Flavor::Sotw => Response::Sotw(sotw_response(nonce, items)),
        Flavor::Delta => Response::Delta(delta_response(nonce, items)),
    }
}

/// Takes a response in and reads its events, as a driver does (the events dropped, as a user
/// that took what it needs drops them). Returns the resources the events carried.
fn take(client: &mut Client, now: Instant, r: Response) -> usize {
    match r {
        Response::Sotw(r) => client.handle_sotw(now, r),
        Response::Delta(r) => client.handle_delta(now, r),
    }
    let mut n = 0;
    while let Some(event) = client.poll_event() {
        if let Event::Update(u) = &event {
            n += u.added.len() + u.changed.len();
        }
        if let Event::Rejected { reason, .. } = &event {
            panic!("rejected: {reason}");
        }
    }
    n
}

#[inline(never)]
fn step_subscribe(client: &mut Client, names: &[String]) {
    client
        .subscribe(CLUSTER_LOAD_ASSIGNMENT, names)
        .expect("within the limits");
}

#[inline(never)]
fn step_first_request(client: &mut Client, now: Instant) {
    std::hint::black_box(4);
    let r = client.poll_request(now).expect("a first request");
    std::hint::black_box(r);
}

// Each step's body its own (`black_box` of its own constant), so that no two are folded into
// one function and callgrind tells them apart.
#[inline(never)]
fn step_load(client: &mut Client, now: Instant, r: Response) -> usize {
    std::hint::black_box(1);
    take(client, now, r)
}

#[inline(never)]
fn step_ack(client: &mut Client, now: Instant) {
    std::hint::black_box(3);
    let r = client.poll_request(now).expect("an ACK");
    std::hint::black_box(r);
}

#[inline(never)]
fn step_update(client: &mut Client, now: Instant, r: Response) -> usize {
    std::hint::black_box(2);
    take(client, now, r)
}

#[inline(never)]
fn step_resend(client: &mut Client, now: Instant, r: Response) -> usize {
    std::hint::black_box(5);
    take(client, now, r)
}

#[inline(never)]
fn step_subscribe_one(client: &mut Client, now: Instant, name: &str) {
    client
        .subscribe(CLUSTER_LOAD_ASSIGNMENT, [name])
        .expect("within the limits");
    let r = client.poll_request(now).expect("a request");
    std::hint::black_box(r);
}

struct Row {
    flavor: &'static str,
    n: usize,
    subscribe_ns: f64,
    first_request_ns: f64,
    load_ns: f64,
    load_ack_ns: f64,
    resend_ns: f64,
    update_ns: f64,
    ack_ns: f64,
    subscribe_one_ns: f64,
}

fn run(flavor: Flavor, n: usize, updates: usize, wildcard: bool) -> Row {
    let now = Instant::now();
    let mut config = Config::new(Node {
        id: "cost".into(),
        ..Default::default()
    });
    config.flavor = flavor;
    let mut client = Client::new(config);
    client.connected();
    while client.poll_event().is_some() {}
    let names: Vec<String> = if wildcard {
        vec!["*".to_owned()]
    } else {
        (0..n).map(name).collect()
    };

    let t = cpu_ns();
    step_subscribe(&mut client, &names);
    let subscribe_ns = (cpu_ns() - t) as f64 / n as f64;
    let t = cpu_ns();
    step_first_request(&mut client, now);
    let first_request_ns = (cpu_ns() - t) as f64 / n as f64;

    let load = response(flavor, 0, (0..n).map(|i| (i, 1)));
    let t = cpu_ns();
    let got = step_load(&mut client, now, load);
    let load_ns = (cpu_ns() - t) as f64 / n as f64;
    assert_eq!(got, n, "the load's resources reported");
    let t = cpu_ns();
    step_ack(&mut client, now);
    let load_ack_ns = (cpu_ns() - t) as f64;

    // The load sent again, unchanged (as a full-state SotW response resends what did not
    // change): nothing reported.
    let again = response(flavor, updates + 1, (0..n).map(|i| (i, 1)));
    let t = cpu_ns();
    let got = step_resend(&mut client, now, again);
    let resend_ns = (cpu_ns() - t) as f64 / n as f64;
    assert_eq!(got, 0, "nothing reported");
    step_ack(&mut client, now);

    // One-resource updates, each followed by its ACK; built beforehand.
    let batch: Vec<Response> = (0..updates)
        .map(|u| {
            response(
                flavor,
                u + 1,
                std::iter::once(((u * 7919) % n, 2 + u as u32)),
            )
        })
        .collect();
    let (mut update_cpu, mut ack_cpu) = (0, 0);
    for r in batch {
        let t = cpu_ns();
        let got = step_update(&mut client, now, r);
        let t2 = cpu_ns();
        step_ack(&mut client, now);
        ack_cpu += cpu_ns() - t2;
        update_cpu += t2 - t;
        assert_eq!(got, 1, "an update reported");
    }
    let extra: Vec<String> = (n..n + updates).map(name).collect();
    let t = cpu_ns();
    for e in &extra {
        step_subscribe_one(&mut client, now, e);
    }
    let subscribe_one_ns = (cpu_ns() - t) as f64 / updates as f64;
    Row {
        flavor: match flavor {
            Flavor::Sotw => "SotW",
            Flavor::Delta => "delta",
        },
        n,
        subscribe_ns,
        first_request_ns,
        load_ns,
        load_ack_ns,
        resend_ns,
        update_ns: update_cpu as f64 / updates as f64,
        ack_ns: ack_cpu as f64 / updates as f64,
        subscribe_one_ns,
    }
}

fn main() {
    let mut sizes = vec![10_000, 40_000, 100_000];
    let mut flavors = vec![Flavor::Delta, Flavor::Sotw];
    let mut updates = 2_000;
    let mut wildcard = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--wildcard" {
            wildcard = true;
            continue;
        }
        let value = args.next().unwrap_or_default();
        match arg.as_str() {
            "--names" => {
                sizes = value
                    .split(',')
                    .map(|s| s.parse().expect("--names: numbers, comma-separated"))
                    .collect()
            }
            "--flavor" => {
                flavors = match value.as_str() {
                    "sotw" => vec![Flavor::Sotw],
                    "delta" => vec![Flavor::Delta],
                    _ => vec![Flavor::Delta, Flavor::Sotw],
                }
            }
            "--updates" => updates = value.parse().expect("--updates: a number"),
            other => panic!("unknown argument {other:?}"),
        }
    }
    println!(
        "| flavor | names | subscribe (ns/name) | first request (ns/name) | response of N (ns/resource) | its ACK (µs) | N again, unchanged (ns/resource) | one-resource update (ns) | its ACK (ns) | subscribe one + request (ns) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for &flavor in &flavors {
        for &n in &sizes {
            let r = run(flavor, n, updates.min(n), wildcard);
            println!(
                "| {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |",
                r.flavor,
                r.n,
                r.subscribe_ns,
                r.first_request_ns,
                r.load_ns,
                r.load_ack_ns / 1000.0,
                r.resend_ns,
                r.update_ns,
                r.ack_ns,
                r.subscribe_one_ns
            );
        }
    }
}
