//! Which upstream stream a downstream client's demand goes to, and the node that stream
//! presents.
//!
//! By default every downstream client shares one upstream stream, presenting the relay's own
//! node: xRFC TP2 selects variants by dynamic parameters, not by node. A client that subscribes
//! with dynamic parameters of its own (its node's `dynamic_parameters` for a type) has them
//! presented upstream on a stream of their own, one per distinct set, so that the upstream
//! selects the variants it needs (a wildcard follows one set of parameters). With
//! `--aggregate-by cluster` (or `node`) there is one upstream stream per distinct node cluster
//! (or node id), presenting the first such node seen, for upstreams that vary contents by node.

use std::collections::BTreeMap;
use std::fmt;

use envoy_types::pb::envoy::config::core::v3::{Locality, Node};
use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
use envoy_types::pb::xds::core::v3::ContextParams as DynamicParameters;
use xdsd_core::types;
use xdsd_core::ClientNode;

/// Dynamic parameters, as the xDS client takes them.
pub type Params = BTreeMap<String, String>;

/// The node parameter a node's cluster is matched by (xdsd's derived parameters).
const NODE_CLUSTER_PARAM: &str = "xds.node.cluster";

/// How downstream clients are grouped into upstream streams (`--aggregate-by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AggregateBy {
    /// One stream for all (plus one per distinct set of explicit dynamic parameters).
    #[default]
    None,
    /// One stream per node cluster.
    Cluster,
    /// One stream per node id.
    Node,
}

impl std::str::FromStr for AggregateBy {
    type Err = String;

    fn from_str(s: &str) -> Result<AggregateBy, String> {
        match s {
            "none" => Ok(AggregateBy::None),
            "cluster" => Ok(AggregateBy::Cluster),
            "node" => Ok(AggregateBy::Node),
            _ => Err(format!("{s:?} is not one of none, cluster, node")),
        }
    }
}

/// One upstream stream.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GroupKey {
    /// The shared stream, presenting the relay's node.
    Default,
    /// The stream of clients that subscribe with these dynamic parameters.
    Params(Params),
    /// The stream of one node cluster.
    Cluster(String),
    /// The stream of one node id.
    Node(String),
}

impl fmt::Display for GroupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GroupKey::Default => f.write_str("shared"),
            GroupKey::Params(p) => {
                f.write_str("parameters {")?;
                for (i, (k, v)) in p.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{k}={v}")?;
                }
                f.write_str("}")
            }
            GroupKey::Cluster(c) => write!(f, "cluster {c:?}"),
            GroupKey::Node(n) => write!(f, "node {n:?}"),
        }
    }
}

/// The group of a downstream request for `type_url` from `node` (none yet: the shared one).
pub fn group_of(by: AggregateBy, node: Option<&ClientNode>, type_url: &str) -> GroupKey {
    let Some(node) = node else {
        return GroupKey::Default;
    };
    match by {
        AggregateBy::Cluster => GroupKey::Cluster(node.cluster.clone()),
        AggregateBy::Node => GroupKey::Node(node.id.clone()),
        AggregateBy::None => match node.dynamic_parameters.get(type_url) {
            Some(set) if !set.is_empty() => GroupKey::Params(
                set.iter()
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect(),
            ),
            _ => GroupKey::Default,
        },
    }
}

/// The node a group's upstream stream presents. `relay` is the relay's own node; `first` the
/// first downstream node seen of the group (for `cluster` and `node` groups).
pub fn upstream_node(group: &GroupKey, relay: &Node, first: Option<&ClientNode>) -> Node {
    match group {
        GroupKey::Default => relay.clone(),
        GroupKey::Params(params) => {
            let mut node = relay.clone();
            let dynamic = DynamicParameters {
                params: params.clone().into_iter().collect(),
            };
            // The set for every type: a stream of this group carries only the types its
            // clients asked with it.
            node.dynamic_parameters = types::WELL_KNOWN
                .iter()
                .map(|t| ((*t).to_owned(), dynamic.clone()))
                .collect();
            node
        }
        GroupKey::Cluster(_) | GroupKey::Node(_) => {
            let mut node = relay.clone();
            if let Some(first) = first {
                if matches!(group, GroupKey::Node(_)) {
                    node.id = first.id.clone();
                }
                node.cluster = first.cluster.clone();
                node.metadata = Some(Struct {
                    fields: first
                        .derived
                        .iter()
                        .filter(|(k, _)| *k != NODE_CLUSTER_PARAM)
                        .map(|(k, v)| {
                            (
                                k.to_owned(),
                                Value {
                                    kind: Some(Kind::StringValue(v.to_owned())),
                                },
                            )
                        })
                        .collect(),
                });
                node.locality = first
                    .locality
                    .as_ref()
                    .map(|(region, zone, sub_zone)| Locality {
                        region: region.clone(),
                        zone: zone.clone(),
                        sub_zone: sub_zone.clone(),
                    });
                node.dynamic_parameters = first
                    .dynamic_parameters
                    .iter()
                    .map(|(t, set)| {
                        (
                            t.clone(),
                            DynamicParameters {
                                params: set
                                    .iter()
                                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                                    .collect(),
                            },
                        )
                    })
                    .collect();
            }
            node
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::xds::core::v3::ContextParams as DynamicParameters;

    const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";

    fn client(id: &str, cluster: &str, params: &[(&str, &str)]) -> ClientNode {
        let mut node = Node {
            id: id.into(),
            cluster: cluster.into(),
            ..Default::default()
        };
        if !params.is_empty() {
            node.dynamic_parameters.insert(
                CDS.into(),
                DynamicParameters {
                    params: params
                        .iter()
                        .map(|(k, v)| ((*k).into(), (*v).into()))
                        .collect(),
                },
            );
        }
        ClientNode::from_node(&node).expect("a valid node")
    }

    #[test]
    fn clients_without_dynamic_parameters_share_one_upstream_stream() {
        let a = client("a", "edge", &[]);
        let b = client("b", "core", &[]);
        assert_eq!(
            group_of(AggregateBy::None, Some(&a), CDS),
            GroupKey::Default
        );
        assert_eq!(
            group_of(AggregateBy::None, Some(&b), CDS),
            GroupKey::Default
        );
        assert_eq!(group_of(AggregateBy::None, None, CDS), GroupKey::Default);
    }

    #[test]
    fn clients_with_dynamic_parameters_share_a_stream_per_distinct_set() {
        let a = client("a", "edge", &[("env", "prod")]);
        let b = client("b", "core", &[("env", "prod")]);
        let c = client("c", "core", &[("env", "dev")]);
        let ga = group_of(AggregateBy::None, Some(&a), CDS);
        assert_eq!(ga, group_of(AggregateBy::None, Some(&b), CDS));
        assert_ne!(ga, group_of(AggregateBy::None, Some(&c), CDS));
        let node = upstream_node(&ga, &Node::default(), Some(&a));
        assert_eq!(node.dynamic_parameters[CDS].params["env"], "prod");
    }

    #[test]
    fn aggregate_by_cluster_presents_the_clusters_node() {
        let a = client("a", "edge", &[]);
        let g = group_of(AggregateBy::Cluster, Some(&a), CDS);
        assert_eq!(g, GroupKey::Cluster("edge".into()));
        let relay = Node {
            id: "relay".into(),
            ..Default::default()
        };
        let node = upstream_node(&g, &relay, Some(&a));
        assert_eq!((node.id.as_str(), node.cluster.as_str()), ("relay", "edge"));
        let g = group_of(AggregateBy::Node, Some(&a), CDS);
        let node = upstream_node(&g, &relay, Some(&a));
        assert_eq!((node.id.as_str(), node.cluster.as_str()), ("a", "edge"));
    }
}
