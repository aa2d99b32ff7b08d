//! The client's node as the rules need it ([`ClientNode`]), read from the `Node` a client sends,
//! with the bounds on what it may send. Its own module so that the session and the identity
//! rules both use it without depending on each other.

use std::collections::BTreeMap;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::google::protobuf::value::Kind;

use super::error::SessionError;
use crate::params::ParamSet;

/// The parameter key under which a node's `cluster` is available to constraints, for clients
/// that send no dynamic parameters (see docs/variants.md).
pub const NODE_CLUSTER_PARAM: &str = "xds.node.cluster";

/// Parameters one set may have: from a locator, the node's dynamic parameters or its metadata.
pub const MAX_PARAMS: usize = 128;

/// Length of one parameter key or value.
pub const MAX_PARAM_LEN: usize = 1024;

/// Type URLs one session may subscribe to.
pub const MAX_TYPES: usize = 256;

/// The client feature of clients that take per-resource TTLs (spec "TTL").
pub const FEATURE_RESOURCE_TTL: &str = "xds.config.supports-resource-ttl";

/// The client feature of clients that take resources wrapped in `Resource` in SotW responses, as
/// Envoy spells it; [`FEATURE_RESOURCE_IN_SOTW_ALT`] is accepted too.
pub const FEATURE_RESOURCE_IN_SOTW: &str = "xds.config.resource-in-sotw";
/// The other spelling of [`FEATURE_RESOURCE_IN_SOTW`] (the xDS spec's), accepted the same.
pub const FEATURE_RESOURCE_IN_SOTW_ALT: &str = "xds.config.supports-resource-in-sotw";

/// The client's node, as the rules need it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientNode {
    /// The node's `id`.
    pub id: String,
    /// The node's `cluster`.
    pub cluster: String,
    /// The node's `user_agent_name` (`envoy`, `grpc-go`, ...).
    pub user_agent_name: String,
    /// `user_agent_version`, or the semantic version of `user_agent_build_version`.
    pub user_agent_version: String,
    /// The node's `client_features`.
    pub client_features: Vec<String>,
    /// (region, zone, sub_zone) when the node has a locality.
    pub locality: Option<(String, String, String)>,
    /// Parameters for clients that send no dynamic parameters: every top-level string field of
    /// `metadata`, and the cluster under [`NODE_CLUSTER_PARAM`].
    pub derived: ParamSet,
    /// `dynamic_parameters`: per type URL.
    pub dynamic_parameters: BTreeMap<String, ParamSet>,
    /// The node's `metadata` as sent, encoded (empty when none): nested fields included, for a
    /// relay that presents a client's node upstream (`--aggregate-by cluster|node`).
    pub metadata: Vec<u8>,
}

/// A node's user agent version, whichever way it gives it ("" when it does not).
pub fn user_agent_version(node: &Node) -> String {
    use envoy_types::pb::envoy::config::core::v3::node::UserAgentVersionType;
    match &node.user_agent_version_type {
        Some(UserAgentVersionType::UserAgentVersion(v)) => v.clone(),
        Some(UserAgentVersionType::UserAgentBuildVersion(b)) => b
            .version
            .as_ref()
            .map(|v| format!("{}.{}.{}", v.major_number, v.minor_number, v.patch))
            .unwrap_or_default(),
        None => String::new(),
    }
}

impl ClientNode {
    /// Reads what xdsd uses of a `Node`; bounded like every parameter set.
    pub fn from_node(node: &Node) -> Result<ClientNode, SessionError> {
        // Collected in one go, before the bound is checked: a node may send any number of
        // fields, and a set copies itself on each insert.
        let strings = node.metadata.iter().flat_map(|m| &m.fields);
        let strings = strings.filter_map(|(k, v)| match &v.kind {
            Some(Kind::StringValue(s)) => Some((k.as_str(), s.as_str())),
            _ => None,
        });
        // The cluster last: it wins over a metadata field of the same key.
        let cluster =
            (!node.cluster.is_empty()).then_some((NODE_CLUSTER_PARAM, node.cluster.as_str()));
        let derived: ParamSet = strings.chain(cluster).collect();
        check_params("the node's metadata", &derived)?;
        let mut dynamic_parameters = BTreeMap::new();
        for (type_url, params) in &node.dynamic_parameters {
            let set: ParamSet = params
                .params
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            check_params(
                &format!("the node's dynamic_parameters for {type_url}"),
                &set,
            )?;
            dynamic_parameters.insert(type_url.clone(), set);
        }
        if dynamic_parameters.len() > MAX_TYPES {
            return Err(SessionError::Limit {
                what: "type URLs in the node's dynamic_parameters",
                limit: MAX_TYPES,
            });
        }
        Ok(ClientNode {
            id: node.id.clone(),
            cluster: node.cluster.clone(),
            user_agent_name: node.user_agent_name.clone(),
            user_agent_version: user_agent_version(node),
            client_features: node.client_features.clone(),
            locality: node
                .locality
                .as_ref()
                .map(|l| (l.region.clone(), l.zone.clone(), l.sub_zone.clone())),
            derived,
            dynamic_parameters,
            metadata: node
                .metadata
                .as_ref()
                .map(prost::Message::encode_to_vec)
                .unwrap_or_default(),
        })
    }

    /// Whether the client advertises a feature in `client_features`.
    pub fn has_feature(&self, feature: &str) -> bool {
        self.client_features.iter().any(|f| f == feature)
    }

    /// Whether the client takes TTLs: it advertises [`FEATURE_RESOURCE_TTL`], or it is Envoy,
    /// which honours TTLs (delta, and SotW `Resource` wrappers) without advertising the feature.
    pub fn takes_ttl(&self) -> bool {
        self.has_feature(FEATURE_RESOURCE_TTL) || self.user_agent_name == "envoy"
    }

    /// Whether the client takes resources wrapped in `Resource` in SotW responses: it advertises
    /// [`FEATURE_RESOURCE_IN_SOTW`] (or [`FEATURE_RESOURCE_IN_SOTW_ALT`]), or it is Envoy, which
    /// takes them (since 1.17) but sends no client features on its SotW streams.
    pub fn takes_sotw_wrappers(&self) -> bool {
        self.has_feature(FEATURE_RESOURCE_IN_SOTW)
            || self.has_feature(FEATURE_RESOURCE_IN_SOTW_ALT)
            || self.user_agent_name == "envoy"
    }

    /// The parameters of a subscription to `type_url` by plain name: the node's dynamic
    /// parameters for that type, else the parameters derived from the node.
    pub fn params_for(&self, type_url: &str) -> &ParamSet {
        self.dynamic_parameters
            .get(type_url)
            .unwrap_or(&self.derived)
    }
}

pub(crate) fn check_params(what: &str, params: &ParamSet) -> Result<(), SessionError> {
    if params.len() > MAX_PARAMS {
        return Err(SessionError::BadParameters {
            what: what.to_owned(),
            detail: format!("{} parameters, at most {MAX_PARAMS}", params.len()),
        });
    }
    if let Some((k, _)) = params
        .iter()
        .find(|(k, v)| k.len() > MAX_PARAM_LEN || v.len() > MAX_PARAM_LEN)
    {
        let shown: String = k.chars().take(40).collect();
        return Err(SessionError::BadParameters {
            what: what.to_owned(),
            detail: format!(
                "parameter {shown:?}…: keys and values are at most {MAX_PARAM_LEN} bytes"
            ),
        });
    }
    Ok(())
}
