//! Synthetic configurations: C clusters (EDS) with E endpoints each, L listeners and R route
//! configurations, deterministic from a seed. Every resource the benchmark changes carries a
//! *marker* (a `UInt32Value` at a fixed field path) so that a client can tell which version of it
//! arrived without decoding more than a few fields: see [`MARKER_PATH_CLA`] and
//! [`MARKER_PATH_CLUSTER`].

use bytes::Bytes;
use envoy_types::pb::envoy::config::cluster::v3::{cluster, Cluster};
use envoy_types::pb::envoy::config::core::v3::{
    address, config_source, socket_address, AggregatedConfigSource, ApiVersion, ConfigSource,
    SocketAddress,
};
use envoy_types::pb::envoy::config::endpoint::v3::{
    cluster_load_assignment, lb_endpoint, ClusterLoadAssignment, Endpoint, LbEndpoint,
    LocalityLbEndpoints,
};
use envoy_types::pb::envoy::config::listener::v3::{filter, Filter, FilterChain, Listener};
use envoy_types::pb::envoy::config::route::v3::{
    route, route_action, route_match, Route, RouteAction, RouteConfiguration, RouteMatch,
    VirtualHost,
};
use envoy_types::pb::envoy::extensions::filters::http::router::v3::Router;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager, http_filter, HttpConnectionManager, HttpFilter, Rds,
};
use envoy_types::pb::google::protobuf::{Any, Duration, UInt32Value};
use prost::Message;
use xdsd_core::types::{CLUSTER, CLUSTER_LOAD_ASSIGNMENT, LISTENER, ROUTE_CONFIGURATION};

/// Field path of the marker in a ClusterLoadAssignment: `policy.overprovisioning_factor.value`.
pub const MARKER_PATH_CLA: &[u32] = &[4, 3, 1];
/// Field path of the marker in a Cluster: `per_connection_buffer_limit_bytes.value`.
pub const MARKER_PATH_CLUSTER: &[u32] = &[5, 1];
/// Markers of the initial configuration; changes use markers above it.
pub const INITIAL_MARKER: u32 = 1;

#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct ConfigSpec {
    pub clusters: usize,
    pub endpoints: usize,
    pub listeners: usize,
    pub routes: usize,
    pub seed: u64,
}

/// One resource: type URL, name and encoded message; for a variant (S6), the value of
/// [`GROUP_KEY`] it is for (its constraints are `GROUP_KEY == group`).
#[derive(Debug, Clone)]
pub struct Res {
    pub type_url: &'static str,
    pub name: String,
    pub value: Bytes,
    pub group: Option<String>,
}

/// The node metadata field (a TP2 parameter for Envoy) that puts S6's clients in groups.
pub const GROUP_KEY: &str = "env";

/// The value of [`GROUP_KEY`] of group `g`.
pub fn group_value(g: usize) -> String {
    format!("g{g}")
}

/// One record of a record file: type URL, name, encoded message, and the group of a variant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub type_url: String,
    pub name: String,
    pub value: Bytes,
    pub group: Option<String>,
}

/// A small deterministic generator (SplitMix64): the same seed gives the same configuration.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

pub fn cluster_name(i: usize) -> String {
    format!("cluster-{i:05}")
}

pub fn route_name(i: usize) -> String {
    format!("route-{i:03}")
}

fn ads() -> ConfigSource {
    ConfigSource {
        config_source_specifier: Some(config_source::ConfigSourceSpecifier::Ads(
            AggregatedConfigSource {},
        )),
        resource_api_version: ApiVersion::V3 as i32,
        ..Default::default()
    }
}

fn socket(ip: String, port: u32) -> envoy_types::pb::envoy::config::core::v3::Address {
    envoy_types::pb::envoy::config::core::v3::Address {
        address: Some(address::Address::SocketAddress(SocketAddress {
            address: ip,
            port_specifier: Some(socket_address::PortSpecifier::PortValue(port)),
            ..Default::default()
        })),
    }
}

/// Cluster `i` with marker `marker`.
pub fn cluster(spec: &ConfigSpec, i: usize, marker: u32) -> Res {
    let mut rng = Rng::new(spec.seed ^ (i as u64).wrapping_mul(31));
    let c = Cluster {
        name: cluster_name(i),
        cluster_discovery_type: Some(cluster::ClusterDiscoveryType::Type(
            cluster::DiscoveryType::Eds as i32,
        )),
        eds_cluster_config: Some(cluster::EdsClusterConfig {
            eds_config: Some(ads()),
            service_name: String::new(),
        }),
        connect_timeout: Some(Duration {
            seconds: 1 + rng.below(5) as i64,
            nanos: 0,
        }),
        per_connection_buffer_limit_bytes: Some(UInt32Value { value: marker }),
        ..Default::default()
    };
    Res {
        type_url: CLUSTER,
        name: c.name.clone(),
        value: c.encode_to_vec().into(),
        group: None,
    }
}

/// The endpoints of cluster `i` with marker `marker`. The marker also moves one endpoint's port,
/// as a real endpoint change would.
pub fn load_assignment(spec: &ConfigSpec, i: usize, marker: u32) -> Res {
    let mut rng = Rng::new(spec.seed ^ 0x5EED ^ (i as u64).wrapping_mul(131));
    let lb_endpoints = (0..spec.endpoints.max(1))
        .map(|e| {
            let ip = format!(
                "10.{}.{}.{}",
                rng.below(256),
                rng.below(256),
                1 + rng.below(254)
            );
            let port = if e == 0 {
                1024 + (marker % 60_000)
            } else {
                8000 + rng.below(1000) as u32
            };
            LbEndpoint {
                host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
                    address: Some(socket(ip, port)),
                    ..Default::default()
                })),
                load_balancing_weight: Some(UInt32Value { value: 1 }),
                ..Default::default()
            }
        })
        .collect();
    let cla = ClusterLoadAssignment {
        cluster_name: cluster_name(i),
        endpoints: vec![LocalityLbEndpoints {
            lb_endpoints,
            load_balancing_weight: Some(UInt32Value { value: 1 }),
            ..Default::default()
        }],
        policy: Some(cluster_load_assignment::Policy {
            overprovisioning_factor: Some(UInt32Value { value: marker }),
            ..Default::default()
        }),
        ..Default::default()
    };
    Res {
        type_url: CLUSTER_LOAD_ASSIGNMENT,
        name: cla.cluster_name.clone(),
        value: cla.encode_to_vec().into(),
        group: None,
    }
}

fn any<M: Message + prost::Name>(m: &M) -> Any {
    Any {
        type_url: M::type_url(),
        value: m.encode_to_vec(),
    }
}

pub fn listener(spec: &ConfigSpec, i: usize) -> Res {
    let hcm = HttpConnectionManager {
        stat_prefix: format!("listener_{i}"),
        route_specifier: Some(http_connection_manager::RouteSpecifier::Rds(Rds {
            config_source: Some(ads()),
            route_config_name: route_name(i % spec.routes.max(1)),
        })),
        http_filters: vec![HttpFilter {
            name: "envoy.filters.http.router".into(),
            config_type: Some(http_filter::ConfigType::TypedConfig(
                any(&Router::default()),
            )),
            ..Default::default()
        }],
        ..Default::default()
    };
    let l = Listener {
        name: format!("listener-{i:03}"),
        address: Some(socket("0.0.0.0".into(), 10_000 + i as u32)),
        filter_chains: vec![FilterChain {
            filters: vec![Filter {
                name: "envoy.filters.network.http_connection_manager".into(),
                config_type: Some(filter::ConfigType::TypedConfig(any(&hcm))),
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    Res {
        type_url: LISTENER,
        name: l.name.clone(),
        value: l.encode_to_vec().into(),
        group: None,
    }
}

/// Route configuration `i`: one virtual host per ten clusters, each routing a prefix to a cluster.
pub fn route_configuration(spec: &ConfigSpec, i: usize) -> Res {
    let mut rng = Rng::new(spec.seed ^ 0x2017E ^ i as u64);
    let routes = (0..4)
        .map(|r| Route {
            r#match: Some(RouteMatch {
                path_specifier: Some(route_match::PathSpecifier::Prefix(format!("/svc{r}/"))),
                ..Default::default()
            }),
            action: Some(route::Action::Route(RouteAction {
                cluster_specifier: Some(route_action::ClusterSpecifier::Cluster(cluster_name(
                    rng.below(spec.clusters),
                ))),
                ..Default::default()
            })),
            ..Default::default()
        })
        .collect();
    let rc = RouteConfiguration {
        name: route_name(i),
        virtual_hosts: vec![VirtualHost {
            name: format!("vh-{i}"),
            domains: vec!["*".into()],
            routes,
            ..Default::default()
        }],
        ..Default::default()
    };
    Res {
        type_url: ROUTE_CONFIGURATION,
        name: rc.name.clone(),
        value: rc.encode_to_vec().into(),
        group: None,
    }
}

/// The whole initial configuration.
pub fn generate(spec: &ConfigSpec) -> Vec<Res> {
    let mut out = Vec::with_capacity(spec.clusters * 2 + spec.listeners + spec.routes);
    for i in 0..spec.clusters {
        out.push(cluster(spec, i, INITIAL_MARKER));
        out.push(load_assignment(spec, i, INITIAL_MARKER));
    }
    for i in 0..spec.listeners {
        out.push(listener(spec, i));
    }
    for i in 0..spec.routes.min(spec.listeners.max(1)) {
        out.push(route_configuration(spec, i));
    }
    out
}

/// S6's configuration: `generate`'s, except that every cluster and every ClusterLoadAssignment
/// has one variant per group (`GROUP_KEY == group_value(g)`, `groups` of them), each with
/// endpoints of its own. Listeners and route configurations stay unconstrained.
pub fn generate_groups(spec: &ConfigSpec, groups: usize) -> Vec<Res> {
    // What is referred to comes first, as in `generate` (xdsd-dir's directory is written in this
    // order, and xdsd may reload it half-written).
    let mut out = Vec::new();
    for i in 0..spec.clusters {
        for g in 0..groups {
            out.push(group_load_assignment(spec, g, i, INITIAL_MARKER));
        }
    }
    for i in 0..spec.clusters {
        for g in 0..groups {
            out.push(group_cluster(spec, g, i, INITIAL_MARKER));
        }
    }
    out.extend(
        generate(spec)
            .into_iter()
            .filter(|r| r.type_url != CLUSTER && r.type_url != CLUSTER_LOAD_ASSIGNMENT),
    );
    out
}

/// Group `g`'s variant of cluster `i`.
pub fn group_cluster(spec: &ConfigSpec, g: usize, i: usize, marker: u32) -> Res {
    Res {
        group: Some(group_value(g)),
        ..cluster(&group_spec(spec, g), i, marker)
    }
}

/// Group `g`'s variant of the endpoints of cluster `i` (endpoints of the group's own).
pub fn group_load_assignment(spec: &ConfigSpec, g: usize, i: usize, marker: u32) -> Res {
    Res {
        group: Some(group_value(g)),
        ..load_assignment(&group_spec(spec, g), i, marker)
    }
}

fn group_spec(spec: &ConfigSpec, g: usize) -> ConfigSpec {
    ConfigSpec {
        seed: spec.seed ^ ((g as u64 + 1) << 40),
        ..*spec
    }
}

/// Route configurations the listeners refer to (the ones `generate` emits).
pub fn referenced_routes(spec: &ConfigSpec) -> usize {
    if spec.listeners == 0 {
        0
    } else {
        spec.routes.min(spec.listeners).max(1)
    }
}

/// The record file the server processes load: (u32 LE length, bytes) × (type, name, value).
/// A variant's name field is `name`, NUL, then its group (`GROUP_KEY`'s value): resource names
/// never contain NUL. S6 files, the only ones with variants, are never given to the peer.
pub fn write_records(path: &std::path::Path, resources: &[Res]) -> std::io::Result<()> {
    let mut buf = Vec::new();
    for r in resources {
        let name = match &r.group {
            Some(g) => format!("{}\0{g}", r.name),
            None => r.name.clone(),
        };
        for field in [r.type_url.as_bytes(), name.as_bytes(), &r.value[..]] {
            buf.extend_from_slice(&(field.len() as u32).to_le_bytes());
            buf.extend_from_slice(field);
        }
    }
    std::fs::write(path, buf)
}

pub fn read_records(path: &std::path::Path) -> anyhow::Result<Vec<Record>> {
    let data = std::fs::read(path)?;
    let mut out = Vec::new();
    let mut at = 0usize;
    let field = |at: &mut usize| -> anyhow::Result<&[u8]> {
        let len = data
            .get(*at..*at + 4)
            .ok_or_else(|| anyhow::anyhow!("truncated record file"))?;
        let len = u32::from_le_bytes(len.try_into()?) as usize;
        let bytes = data
            .get(*at + 4..*at + 4 + len)
            .ok_or_else(|| anyhow::anyhow!("truncated record file"))?;
        *at += 4 + len;
        Ok(bytes)
    };
    while at < data.len() {
        let type_url = String::from_utf8(field(&mut at)?.to_vec())?;
        let name = String::from_utf8(field(&mut at)?.to_vec())?;
        let value = Bytes::copy_from_slice(field(&mut at)?);
        let (name, group) = match name.split_once('\0') {
            Some((n, g)) => (n.to_owned(), Some(g.to_owned())),
            None => (name, None),
        };
        out.push(Record {
            type_url,
            name,
            value,
            group,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::marker;

    #[test]
    fn deterministic_and_marked() {
        let spec = ConfigSpec {
            clusters: 3,
            endpoints: 2,
            listeners: 2,
            routes: 1,
            seed: 7,
        };
        let a = generate(&spec);
        let b = generate(&spec);
        assert_eq!(a.len(), 3 * 2 + 2 + 1);
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.value, y.value);
        }
        let cla = load_assignment(&spec, 1, 4242);
        assert_eq!(marker(&cla.value, MARKER_PATH_CLA), Some(4242));
        let decoded = ClusterLoadAssignment::decode(cla.value.clone()).unwrap();
        assert_eq!(decoded.cluster_name, "cluster-00001");
        let c = cluster(&spec, 2, 77);
        assert_eq!(marker(&c.value, MARKER_PATH_CLUSTER), Some(77));
    }

    #[test]
    fn groups_have_variants_of_their_own_and_records_keep_them() {
        let spec = ConfigSpec {
            clusters: 2,
            endpoints: 2,
            listeners: 1,
            routes: 1,
            seed: 7,
        };
        let all = generate_groups(&spec, 3);
        assert_eq!(all.len(), 2 * 2 * 3 + 1 + 1);
        let a = group_load_assignment(&spec, 0, 1, 1);
        let b = group_load_assignment(&spec, 1, 1, 1);
        assert_eq!(a.name, b.name);
        assert_ne!(a.value, b.value, "each group has endpoints of its own");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.rec");
        write_records(&path, &all).unwrap();
        let back = read_records(&path).unwrap();
        assert_eq!(back.len(), all.len());
        for (r, b) in all.iter().zip(&back) {
            assert_eq!(
                (r.type_url, &r.name, &r.value, &r.group),
                (&*b.type_url, &b.name, &b.value, &b.group)
            );
        }
    }
}
