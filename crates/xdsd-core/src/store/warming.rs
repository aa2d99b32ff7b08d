//! What a client must be sent again when a resource changes, even if unchanged itself. Envoy
//! finishes warming an updated EDS cluster only when it receives a ClusterLoadAssignment for it
//! after the update, whether or not the endpoints changed (the spec's Envoy-specific note on
//! resource warming): so a changed Cluster carries the name of its ClusterLoadAssignment.

use std::sync::Arc;

use envoy_types::pb::envoy::config::cluster::v3::cluster::DiscoveryType;
use prost::encoding::{decode_key, decode_varint, skip_field, DecodeContext, WireType};

use super::wire::read_string_field;
use crate::types::{CLUSTER, CLUSTER_LOAD_ASSIGNMENT};

/// (type URL, name) of the resources to resend after `value` (of `type_url`) changed.
pub(crate) fn dependents(type_url: &str, name: &str, value: &[u8]) -> Vec<(Arc<str>, Arc<str>)> {
    if type_url != CLUSTER {
        return Vec::new();
    }
    match eds_service(value) {
        Some(service) => {
            let service = if service.is_empty() { name } else { service };
            vec![(Arc::from(CLUSTER_LOAD_ASSIGNMENT), Arc::from(service))]
        }
        None => Vec::new(),
    }
}

// Cluster's field numbers.
const TYPE: u32 = 2;
const EDS_CLUSTER_CONFIG: u32 = 3;
const CLUSTER_TYPE: u32 = 38;
// EdsClusterConfig's.
const SERVICE_NAME: u32 = 2;

/// For an EDS cluster (`type: EDS`), its `eds_cluster_config.service_name` (empty when not
/// set); `None` for any other cluster, or bytes that do not read. Read field by field as
/// `Cluster::decode` takes them (the last of the `cluster_discovery_type` oneof's fields wins,
/// `eds_cluster_config`'s occurrences merge), without decoding the rest of the cluster: a
/// relay takes 100,000 clusters in at once.
fn eds_service(value: &[u8]) -> Option<&str> {
    let mut buf = value;
    let mut eds = false;
    let mut service = "";
    while !buf.is_empty() {
        let (tag, wire_type) = decode_key(&mut buf).ok()?;
        match tag {
            TYPE => {
                if wire_type != WireType::Varint {
                    return None;
                }
                let t = decode_varint(&mut buf).ok()?;
                eds = t as i32 == DiscoveryType::Eds as i32;
            }
            CLUSTER_TYPE => {
                eds = false;
                skip_field(wire_type, tag, &mut buf, DecodeContext::default()).ok()?;
            }
            EDS_CLUSTER_CONFIG => {
                if wire_type != WireType::LengthDelimited {
                    return None;
                }
                let len = usize::try_from(decode_varint(&mut buf).ok()?).ok()?;
                if len > buf.len() {
                    return None;
                }
                let (config, rest) = buf.split_at(len);
                if let Some(name) = read_string_field(config, SERVICE_NAME).ok()? {
                    service = name;
                }
                buf = rest;
            }
            _ => skip_field(wire_type, tag, &mut buf, DecodeContext::default()).ok()?,
        }
    }
    eds.then_some(service)
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::cluster::v3::cluster::{
        ClusterDiscoveryType, CustomClusterType, EdsClusterConfig,
    };
    use envoy_types::pb::envoy::config::cluster::v3::Cluster;
    use prost::Message;

    /// What the full decode says: the rule `eds_service` reads without it.
    fn decoded(value: &[u8]) -> Option<String> {
        let cluster = Cluster::decode(value).ok()?;
        match cluster.cluster_discovery_type {
            Some(ClusterDiscoveryType::Type(t)) if t == DiscoveryType::Eds as i32 => Some(
                cluster
                    .eds_cluster_config
                    .map(|c| c.service_name)
                    .unwrap_or_default(),
            ),
            _ => None,
        }
    }

    fn cluster(kind: Option<ClusterDiscoveryType>, service: Option<&str>) -> Vec<u8> {
        Cluster {
            name: "c".into(),
            cluster_discovery_type: kind,
            eds_cluster_config: service.map(|s| EdsClusterConfig {
                service_name: s.into(),
                ..Default::default()
            }),
            ..Default::default()
        }
        .encode_to_vec()
    }

    #[test]
    fn a_clusters_eds_service_is_read_field_by_field_as_the_full_decode_reads_it() {
        let eds = Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32));
        let custom = Some(ClusterDiscoveryType::ClusterType(CustomClusterType {
            name: "x".into(),
            ..Default::default()
        }));
        let mut cases = vec![
            cluster(eds.clone(), Some("svc")),
            cluster(eds.clone(), Some("")),
            cluster(eds.clone(), None),
            cluster(
                Some(ClusterDiscoveryType::Type(DiscoveryType::Static as i32)),
                None,
            ),
            cluster(custom.clone(), Some("svc")),
            cluster(None, Some("svc")),
        ];
        // The oneof's last field wins; `eds_cluster_config`'s occurrences merge.
        let mut last_custom = cluster(eds.clone(), Some("a"));
        last_custom.extend(cluster(custom, None));
        let mut merged = cluster(eds.clone(), Some("a"));
        merged.extend(cluster(None, Some("b")));
        let mut kept = cluster(eds, Some("a"));
        kept.extend(cluster(None, Some("")));
        cases.extend([last_custom, merged, kept]);
        for value in &cases {
            assert_eq!(
                eds_service(value).map(str::to_owned),
                decoded(value),
                "{value:?}"
            );
        }
        assert_eq!(
            dependents(CLUSTER, "c", &cases[2]),
            vec![(Arc::from(CLUSTER_LOAD_ASSIGNMENT), Arc::from("c"))]
        );
        assert_eq!(
            dependents(CLUSTER, "c", &cases[0]),
            vec![(Arc::from(CLUSTER_LOAD_ASSIGNMENT), Arc::from("svc"))]
        );
    }
}
