//! What the relay checks of each resource the upstream sends before it caches it: a resource it
//! cannot decode is NACKed upstream with the reason, and the last good one kept (the client
//! keeps what it held before a rejected response).

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::TypedExtensionConfig;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use envoy_types::pb::envoy::config::route::v3::{
    RouteConfiguration, ScopedRouteConfiguration, VirtualHost,
};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::Secret;
use envoy_types::pb::envoy::service::runtime::v3::Runtime;
use prost::Message;
use xdsd_core::params::Constraints;
use xdsd_core::types;

/// Whether the relay can cache and serve `resource`: its body is of its type and decodes as
/// that message (for the Envoy types the relay knows; any other type is taken as it is), and
/// its dynamic parameter constraints are ones the store can match. `Err` is the NACK's reason.
pub fn check(resource: &xdsd_client::Resource) -> Result<(), String> {
    let what = format!("{} {:?}", resource.type_url, resource.name);
    if resource.body.type_url != resource.type_url {
        return Err(format!(
            "{what}: its body is a {} (the relay caches resources of the type asked)",
            resource.body.type_url
        ));
    }
    let body = resource.body.value.as_slice();
    let decoded = match resource.type_url.as_str() {
        types::LISTENER => Listener::decode(body).map(drop),
        types::ROUTE_CONFIGURATION => RouteConfiguration::decode(body).map(drop),
        types::SCOPED_ROUTE_CONFIGURATION => ScopedRouteConfiguration::decode(body).map(drop),
        types::VIRTUAL_HOST => VirtualHost::decode(body).map(drop),
        types::CLUSTER => Cluster::decode(body).map(drop),
        types::CLUSTER_LOAD_ASSIGNMENT => ClusterLoadAssignment::decode(body).map(drop),
        types::SECRET => Secret::decode(body).map(drop),
        types::RUNTIME => Runtime::decode(body).map(drop),
        types::TYPED_EXTENSION_CONFIG => TypedExtensionConfig::decode(body).map(drop),
        _ => Ok(()),
    };
    decoded.map_err(|e| format!("{what} does not decode: {e}"))?;
    if let Some(c) = &resource.constraints {
        Constraints::new(c.clone())
            .map_err(|e| format!("{what}: its dynamic parameter constraints: {e}"))?;
    }
    Ok(())
}

/// [`check`] as the xDS client's validator.
pub fn validator() -> xdsd_client::Validator {
    Box::new(check)
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::google::protobuf::Any;

    fn resource(type_url: &str, body_type: &str, value: Vec<u8>) -> xdsd_client::Resource {
        xdsd_client::Resource {
            type_url: type_url.into(),
            name: "c".into(),
            aliases: Vec::new(),
            version: "1".into(),
            body: Any {
                type_url: body_type.into(),
                value,
            },
            constraints: None,
            ttl: None,
        }
    }

    #[test]
    fn a_resource_the_relay_cannot_decode_is_refused_with_the_reason() {
        // A length-delimited field running past the end.
        let bad = resource(types::CLUSTER, types::CLUSTER, vec![0x0a, 0x05, b'c']);
        let reason = check(&bad).expect_err("refused");
        assert!(reason.contains("does not decode"), "{reason}");
        let good = Cluster {
            name: "c".into(),
            ..Default::default()
        };
        assert_eq!(
            check(&resource(
                types::CLUSTER,
                types::CLUSTER,
                good.encode_to_vec()
            )),
            Ok(())
        );
    }

    #[test]
    fn a_resource_whose_body_is_of_another_type_is_refused() {
        let r = resource(types::CLUSTER, types::LISTENER, Vec::new());
        assert!(check(&r).expect_err("refused").contains("its body is a"));
    }
}
