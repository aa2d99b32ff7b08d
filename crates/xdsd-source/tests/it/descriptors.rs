use std::path::PathBuf;
use std::process::Command;

use envoy_types::pb::envoy::config::cluster::v3::{cluster, Cluster};
use envoy_types::pb::envoy::config::core::v3::{
    address, socket_address, Address, Metadata, SocketAddress,
};
use envoy_types::pb::envoy::config::endpoint::v3::{
    lb_endpoint, ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints,
};
use envoy_types::pb::google::protobuf::{Duration, UInt32Value};
use prost::Message;
use prost_reflect::DynamicMessage;
use xdsd_source::{Descriptors, ENVOY_DESCRIPTOR_SET, ENVOY_TYPES_VERSION};

/// The envoy-types package cargo resolved for this crate: (version, its types.bin).
fn envoy_types_package() -> (String, PathBuf) {
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let output = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--manifest-path",
            manifest,
        ])
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let packages: Vec<_> = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["name"] == "envoy-types")
        .collect();
    assert_eq!(packages.len(), 1, "exactly one envoy-types in the build");
    let version = packages[0]["version"].as_str().unwrap().to_owned();
    let manifest_path = PathBuf::from(packages[0]["manifest_path"].as_str().unwrap());
    let bin = manifest_path
        .parent()
        .unwrap()
        .join("src/generated/types.bin");
    (version, bin)
}

#[test]
fn embedded_descriptor_set_is_the_one_envoy_types_ships() {
    let (version, bin) = envoy_types_package();
    assert_eq!(
        version, ENVOY_TYPES_VERSION,
        "envoy-types was bumped: run crates/xdsd-source/descriptors/update.sh"
    );
    let shipped = std::fs::read(&bin).unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
    assert!(
        shipped == ENVOY_DESCRIPTOR_SET,
        "{} differs from the committed copy: run crates/xdsd-source/descriptors/update.sh",
        bin.display()
    );
}

#[test]
fn descriptors_are_cached_and_complete() {
    let a = Descriptors::envoy().unwrap();
    let b = Descriptors::envoy().unwrap();
    assert_eq!(a.pool(), b.pool());
    for name in [
        "envoy.config.listener.v3.Listener",
        "envoy.config.route.v3.RouteConfiguration",
        "envoy.config.route.v3.ScopedRouteConfiguration",
        "envoy.config.route.v3.VirtualHost",
        "envoy.config.cluster.v3.Cluster",
        "envoy.config.endpoint.v3.ClusterLoadAssignment",
        "envoy.extensions.transport_sockets.tls.v3.Secret",
        "envoy.service.runtime.v3.Runtime",
        "envoy.config.core.v3.TypedExtensionConfig",
        "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "envoy.extensions.filters.http.router.v3.Router",
        "google.protobuf.Duration",
    ] {
        assert!(
            a.pool().get_message_by_name(name).is_some(),
            "{name} missing"
        );
    }
}

/// The pool's view of a message agrees with envoy-types' generated code, byte for byte.
#[test]
fn cluster_round_trips_through_the_pool() {
    let cluster = Cluster {
        name: "backend".into(),
        connect_timeout: Some(Duration {
            seconds: 2,
            nanos: 500_000_000,
        }),
        cluster_discovery_type: Some(cluster::ClusterDiscoveryType::Type(
            cluster::DiscoveryType::StrictDns as i32,
        )),
        lb_policy: cluster::LbPolicy::RingHash as i32,
        per_connection_buffer_limit_bytes: Some(UInt32Value { value: 32768 }),
        metadata: Some(Metadata::default()),
        load_assignment: Some(ClusterLoadAssignment {
            cluster_name: "backend".into(),
            endpoints: vec![LocalityLbEndpoints {
                lb_endpoints: vec![LbEndpoint {
                    host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
                        address: Some(Address {
                            address: Some(address::Address::SocketAddress(SocketAddress {
                                address: "10.0.0.1".into(),
                                port_specifier: Some(socket_address::PortSpecifier::PortValue(443)),
                                ..Default::default()
                            })),
                        }),
                        ..Default::default()
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    let bytes = cluster.encode_to_vec();

    let descriptors = Descriptors::envoy().unwrap();
    let desc = descriptors
        .pool()
        .get_message_by_name("envoy.config.cluster.v3.Cluster")
        .unwrap();
    let dynamic = DynamicMessage::decode(desc, bytes.as_slice()).unwrap();
    assert_eq!(dynamic.encode_to_vec(), bytes);
    // Nothing was left as unknown fields, i.e. the pool knew every field envoy-types wrote.
    assert_eq!(
        Cluster::decode(dynamic.encode_to_vec().as_slice()).unwrap(),
        cluster
    );
}
