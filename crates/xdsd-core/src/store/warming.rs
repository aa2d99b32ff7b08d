//! What a client must be sent again when a resource changes, even if unchanged itself. Envoy
//! finishes warming an updated EDS cluster only when it receives a ClusterLoadAssignment for it
//! after the update, whether or not the endpoints changed (the spec's Envoy-specific note on
//! resource warming): so a changed Cluster carries the name of its ClusterLoadAssignment.

use std::sync::Arc;

use envoy_types::pb::envoy::config::cluster::v3::cluster::{ClusterDiscoveryType, DiscoveryType};
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use prost::Message;

use crate::types::{CLUSTER, CLUSTER_LOAD_ASSIGNMENT};

/// (type URL, name) of the resources to resend after `value` (of `type_url`) changed.
pub(crate) fn dependents(type_url: &str, name: &str, value: &[u8]) -> Vec<(Arc<str>, Arc<str>)> {
    if type_url != CLUSTER {
        return Vec::new();
    }
    let Ok(cluster) = Cluster::decode(value) else {
        return Vec::new();
    };
    let eds = matches!(
        cluster.cluster_discovery_type,
        Some(ClusterDiscoveryType::Type(t)) if t == DiscoveryType::Eds as i32
    );
    if !eds {
        return Vec::new();
    }
    let service = cluster
        .eds_cluster_config
        .as_ref()
        .map(|c| c.service_name.as_str())
        .filter(|s| !s.is_empty())
        .unwrap_or(name);
    vec![(Arc::from(CLUSTER_LOAD_ASSIGNMENT), Arc::from(service))]
}
