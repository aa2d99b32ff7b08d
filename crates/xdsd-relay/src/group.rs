//! Which upstream stream a downstream client's demand goes to, and the node that stream
//! presents.
//!
//! Upstream the relay is always an xRFC TP2 client: each upstream stream presents one set of
//! dynamic parameters (`node.dynamic_parameters`, for every type it carries) and subscribes
//! plain names, so that a TP2 server selects each name's variant by those parameters and names
//! it with its constraints (which the relay caches and passes on), and a server without TP2
//! ignores the parameters and answers the names. A downstream client's parameters for a type
//! are derived exactly as the server derives them ([`ClientNode::params_for`]: its dynamic
//! parameters for the type, else the top-level string fields of its metadata and its cluster),
//! and its demand goes to the stream of that parameter set; a resource locator's demand goes to
//! the stream of the locator's own parameters, as a plain name. So the relay fetches what each
//! client's parameters select, whatever way the client gives them.
//!
//! By default the streams are shared by every client of a parameter set, presenting the
//! relay's own node. With `--aggregate-by cluster` (or `node`) the streams are per distinct
//! node cluster (or node id) and parameter set, presenting the first such node seen, for
//! upstreams that vary contents by node.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::{Locality, Node};
use envoy_types::pb::google::protobuf::Struct;
use envoy_types::pb::xds::core::v3::ContextParams as DynamicParameters;
use prost::Message;
use xdsd_core::params::ParamSet;
use xdsd_core::types;
use xdsd_core::ClientNode;

/// Dynamic parameters, as the xDS client takes them.
pub type Params = BTreeMap<String, String>;

/// How downstream clients are grouped into upstream streams (`--aggregate-by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AggregateBy {
    /// One stream per distinct parameter set.
    #[default]
    None,
    /// One stream per node cluster and parameter set.
    Cluster,
    /// One stream per node id and parameter set.
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

/// The nodes a stream is shared by.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Partition {
    /// Every node (the stream presents the relay's own node).
    All,
    /// The nodes of one cluster.
    Cluster(String),
    /// One node id.
    Node(String),
}

/// One upstream stream: the nodes it serves, the dynamic parameters it presents, and, for a
/// type the relay does not know to present parameters for ahead of time (not one of
/// [`types::WELL_KNOWN`]), that one type.
///
/// A shared handle: every want of a group carries one, and the relay's table compares and
/// clones wants per name (a stream subscribing 100,000 names), so a clone is a reference count
/// and a comparison of two handles of one group is a pointer's, else one comparison of a
/// canonical encoding (not of the parameter map key by key). Read its parts as fields
/// (`group.partition`, `group.params`, `group.type_url`).
#[derive(Clone)]
pub struct GroupKey(Arc<Group>);

/// What a [`GroupKey`] names.
#[derive(Debug)]
pub struct Group {
    /// The nodes it serves.
    pub partition: Partition,
    /// The dynamic parameters it presents for every type it carries.
    pub params: Params,
    /// The one type it carries, when that is not a well-known type.
    pub type_url: Option<String>,
    /// Its identity: the parts above encoded without ambiguity (each part's length before
    /// it), what equality and order read.
    id: Box<[u8]>,
    /// A digest of `id`, made once: what hashing reads (every want is hashed with its group's,
    /// several times per name a stream subscribes).
    digest: u64,
}

impl std::ops::Deref for GroupKey {
    type Target = Group;

    fn deref(&self) -> &Group {
        &self.0
    }
}

impl fmt::Debug for GroupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupKey")
            .field("partition", &self.partition)
            .field("params", &self.params)
            .field("type_url", &self.type_url)
            .finish()
    }
}

impl PartialEq for GroupKey {
    fn eq(&self, other: &GroupKey) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || (self.digest == other.digest && self.id == other.id)
    }
}

impl Eq for GroupKey {}

impl PartialOrd for GroupKey {
    fn partial_cmp(&self, other: &GroupKey) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for GroupKey {
    fn cmp(&self, other: &GroupKey) -> std::cmp::Ordering {
        if Arc::ptr_eq(&self.0, &other.0) {
            return std::cmp::Ordering::Equal;
        }
        self.id.cmp(&other.id)
    }
}

impl std::hash::Hash for GroupKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.digest);
    }
}

impl GroupKey {
    /// The stream of every node with no parameters (the one `--prefetch` subscribes on).
    pub fn shared() -> GroupKey {
        GroupKey::of(Partition::All, Params::new(), types::CLUSTER)
    }

    /// The stream of `partition` presenting `params` for `type_url`.
    pub fn of(partition: Partition, params: Params, type_url: &str) -> GroupKey {
        let type_url = (!types::WELL_KNOWN.contains(&type_url)).then(|| type_url.to_owned());
        GroupKey::new(partition, params, type_url)
    }

    fn new(partition: Partition, params: Params, type_url: Option<String>) -> GroupKey {
        let mut id = Vec::new();
        let mut part = |tag: u8, text: &str| {
            id.push(tag);
            id.extend_from_slice(&(text.len() as u64).to_be_bytes());
            id.extend_from_slice(text.as_bytes());
        };
        match &partition {
            Partition::All => part(0, ""),
            Partition::Cluster(c) => part(1, c),
            Partition::Node(n) => part(2, n),
        }
        for (k, v) in &params {
            part(3, k);
            part(4, v);
        }
        if let Some(t) = &type_url {
            part(5, t);
        }
        let digest = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            id.hash(&mut h);
            h.finish()
        };
        GroupKey(Arc::new(Group {
            partition,
            params,
            type_url,
            id: id.into(),
            digest,
        }))
    }

    /// The stream of the same nodes presenting `params` instead (a resource locator's).
    pub fn with_params(&self, params: Params) -> GroupKey {
        GroupKey::new(self.partition.clone(), params, self.type_url.clone())
    }

    /// The stream of the same nodes presenting only its parameters of `keys` (the keys a
    /// name's variants constrain), or `None` when it presents no other (nothing to narrow).
    pub fn narrowed(&self, keys: &std::collections::BTreeSet<String>) -> Option<GroupKey> {
        if self.params.keys().all(|k| keys.contains(k)) {
            return None;
        }
        let params = self
            .params
            .iter()
            .filter(|(k, _)| keys.contains(*k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Some(GroupKey::new(
            self.partition.clone(),
            params,
            self.type_url.clone(),
        ))
    }

    /// The parameters it presents, as the store's parameter set.
    pub fn param_set(&self) -> ParamSet {
        self.params
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }
}

impl fmt::Display for GroupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.partition {
            Partition::All => f.write_str("shared")?,
            Partition::Cluster(c) => write!(f, "cluster {c:?}")?,
            Partition::Node(n) => write!(f, "node {n:?}")?,
        }
        f.write_str(" {")?;
        for (i, (k, v)) in self.params.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{k}={v}")?;
        }
        f.write_str("}")?;
        if let Some(t) = &self.type_url {
            write!(f, " for {t}")?;
        }
        Ok(())
    }
}

/// The parameters of `node` for `type_url`, as the server derives them.
pub fn params_of(node: &ClientNode, type_url: &str) -> Params {
    node.params_for(type_url)
        .iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// The group of a downstream request for `type_url` from `node` (none yet: the shared one).
pub fn group_of(by: AggregateBy, node: Option<&ClientNode>, type_url: &str) -> GroupKey {
    let Some(node) = node else {
        return GroupKey::of(Partition::All, Params::new(), type_url);
    };
    let partition = match by {
        AggregateBy::Cluster => Partition::Cluster(node.cluster.clone()),
        AggregateBy::Node => Partition::Node(node.id.clone()),
        AggregateBy::None => Partition::All,
    };
    GroupKey::of(partition, params_of(node, type_url), type_url)
}

/// The node a group's upstream stream presents. `relay` is the relay's own node; `first` the
/// first downstream node seen of the group (for `cluster` and `node` groups). Its dynamic
/// parameters are the group's, for every type the stream may carry.
pub fn upstream_node(group: &GroupKey, relay: &Node, first: Option<&ClientNode>) -> Node {
    let mut node = relay.clone();
    if let (Partition::Cluster(_) | Partition::Node(_), Some(first)) = (&group.partition, first) {
        if matches!(group.partition, Partition::Node(_)) {
            node.id = first.id.clone();
        }
        node.cluster = first.cluster.clone();
        // Its metadata as it sent it, nested fields included (what an upstream that varies
        // content by node may read); read back from the session's copy, which the session
        // decoded once already.
        node.metadata = if first.metadata.is_empty() {
            None
        } else {
            Struct::decode(first.metadata.as_slice()).ok()
        };
        node.locality = first
            .locality
            .as_ref()
            .map(|(region, zone, sub_zone)| Locality {
                region: region.clone(),
                zone: zone.clone(),
                sub_zone: sub_zone.clone(),
            });
    }
    let dynamic = DynamicParameters {
        params: group.params.clone().into_iter().collect(),
    };
    node.dynamic_parameters = match &group.type_url {
        Some(t) => [(t.clone(), dynamic)].into(),
        None => types::WELL_KNOWN
            .iter()
            .map(|t| ((*t).to_owned(), dynamic.clone()))
            .collect(),
    };
    node
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::google::protobuf::{value::Kind, Value};
    use envoy_types::pb::xds::core::v3::ContextParams as DynamicParameters;

    const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";

    fn key(partition: Partition, params: &[(&str, &str)], type_url: &str) -> GroupKey {
        let params = params
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        GroupKey::of(partition, params, type_url)
    }

    #[test]
    fn group_keys_are_equal_exactly_when_their_parts_are() {
        use std::collections::hash_map::DefaultHasher;
        use std::hash::{Hash, Hasher};
        let hash = |k: &GroupKey| {
            let mut h = DefaultHasher::new();
            k.hash(&mut h);
            h.finish()
        };
        let a = key(Partition::All, &[("env", "prod")], CDS);
        let b = key(Partition::All, &[("env", "prod")], CDS);
        assert_eq!(a, b, "made apart, the same parts");
        assert_eq!(a.cmp(&b), std::cmp::Ordering::Equal);
        assert_eq!(hash(&a), hash(&b));
        let different = [
            key(Partition::All, &[("env", "prodx")], CDS),
            key(Partition::All, &[("envp", "rod")], CDS),
            key(Partition::All, &[("env", ""), ("prod", "")], CDS),
            key(Partition::Cluster(String::new()), &[("env", "prod")], CDS),
            key(Partition::Node(String::new()), &[("env", "prod")], CDS),
            key(Partition::All, &[("env", "prod")], "type.example/Other"),
        ];
        for (i, d) in different.iter().enumerate() {
            assert_ne!(&a, d, "{d}");
            assert_ne!(a.cmp(d), std::cmp::Ordering::Equal, "{d}");
            for e in &different[i + 1..] {
                assert_ne!(d, e, "{d} vs {e}");
            }
        }
        assert_eq!(a.clone(), a, "a clone is the same group");
        assert_eq!(a.params.get("env").map(String::as_str), Some("prod"));
    }

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

    fn with_metadata(id: &str, pairs: &[(&str, &str)]) -> ClientNode {
        let node = Node {
            id: id.into(),
            metadata: Some(Struct {
                fields: pairs
                    .iter()
                    .map(|(k, v)| {
                        (
                            (*k).to_owned(),
                            Value {
                                kind: Some(Kind::StringValue((*v).to_owned())),
                            },
                        )
                    })
                    .collect(),
            }),
            ..Default::default()
        };
        ClientNode::from_node(&node).expect("a valid node")
    }

    #[test]
    fn clients_with_the_same_parameters_share_one_upstream_stream() {
        let a = client("a", "", &[]);
        let b = client("b", "", &[]);
        assert_eq!(
            group_of(AggregateBy::None, Some(&a), CDS),
            group_of(AggregateBy::None, Some(&b), CDS)
        );
        assert_eq!(group_of(AggregateBy::None, None, CDS), GroupKey::shared());
    }

    #[test]
    fn a_clients_parameters_are_derived_as_the_server_derives_them() {
        // Metadata only: its top-level strings and its cluster.
        let m = with_metadata("m", &[("env", "prod")]);
        let g = group_of(AggregateBy::None, Some(&m), CDS);
        assert_eq!(g.params, [("env".to_owned(), "prod".to_owned())].into());
        // Dynamic parameters for the type win over metadata; another type keeps the metadata's.
        let p = client("p", "edge", &[("env", "test")]);
        assert_eq!(
            group_of(AggregateBy::None, Some(&p), CDS).params,
            [("env".to_owned(), "test".to_owned())].into()
        );
        assert_eq!(
            group_of(AggregateBy::None, Some(&p), types::LISTENER).params,
            [(xdsd_core::NODE_CLUSTER_PARAM.to_owned(), "edge".to_owned())].into()
        );
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
    fn every_stream_presents_its_parameters_for_every_type_it_carries() {
        // Even the parameter set of none: the stream is a TP2 client, sent the constraints.
        let node = upstream_node(&GroupKey::shared(), &Node::default(), None);
        for t in types::WELL_KNOWN {
            assert!(node.dynamic_parameters[t].params.is_empty());
        }
        // A type the relay does not know has a stream of its own, presenting it.
        const OTHER: &str = "type.googleapis.com/example.Thing";
        let g = group_of(AggregateBy::None, Some(&client("a", "", &[])), OTHER);
        assert_eq!(g.type_url.as_deref(), Some(OTHER));
        let node = upstream_node(&g, &Node::default(), None);
        assert!(node.dynamic_parameters.contains_key(OTHER));
    }

    #[test]
    fn aggregate_by_cluster_presents_the_first_nodes_metadata_nested_fields_included() {
        let nested = Value {
            kind: Some(Kind::StructValue(Struct {
                fields: [(
                    "sha".to_owned(),
                    Value {
                        kind: Some(Kind::StringValue("abc".into())),
                    },
                )]
                .into(),
            })),
        };
        let metadata = Struct {
            fields: [
                (
                    "env".to_owned(),
                    Value {
                        kind: Some(Kind::StringValue("prod".into())),
                    },
                ),
                ("build".to_owned(), nested),
                (
                    "replicas".to_owned(),
                    Value {
                        kind: Some(Kind::NumberValue(3.0)),
                    },
                ),
            ]
            .into(),
        };
        let sent = Node {
            id: "a".into(),
            cluster: "edge".into(),
            metadata: Some(metadata.clone()),
            ..Default::default()
        };
        let a = ClientNode::from_node(&sent).expect("a valid node");
        for by in [AggregateBy::Cluster, AggregateBy::Node] {
            let g = group_of(by, Some(&a), CDS);
            let node = upstream_node(&g, &Node::default(), Some(&a));
            assert_eq!(node.metadata.as_ref(), Some(&metadata), "{by:?}");
        }
        // The shared stream presents the relay's own node, not a client's.
        let node = upstream_node(&GroupKey::shared(), &Node::default(), Some(&a));
        assert_eq!(node.metadata, None);
    }

    #[test]
    fn aggregate_by_cluster_presents_the_clusters_node() {
        let a = client("a", "edge", &[]);
        let g = group_of(AggregateBy::Cluster, Some(&a), CDS);
        assert_eq!(g.partition, Partition::Cluster("edge".into()));
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
