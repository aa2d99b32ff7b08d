//! What the relay checks of each resource the upstream sends before it caches it: a resource it
//! cannot read (not of its type, its top level or name field malformed) is NACKed upstream with
//! the reason, and the last good one kept (the client keeps what it held before a rejected
//! response).

use xdsd_core::params::Constraints;
use xdsd_core::store::read_string_field;
use xdsd_core::types;

/// Whether the relay can cache and serve `resource` as it came: its body is of its type, and
/// (for the Envoy types the relay knows; any other type is taken as it is) its bytes are a
/// message whose name field, if any, reads — the top level of the message is read field by
/// field (`read_string_field`), not decoded: the relay serves the upstream's bytes as they
/// came, and a full decode of each resource was most of what taking a response in cost. Its
/// dynamic parameter constraints must be ones the store can match. `Err` is the NACK's reason,
/// naming the resource.
pub fn check(resource: &xdsd_client::Resource) -> Result<(), String> {
    let what = || format!("{} {:?}", resource.type_url, resource.name);
    if resource.body.type_url != resource.type_url {
        return Err(format!(
            "{}: its body is a {} (the relay caches resources of the type asked)",
            what(),
            resource.body.type_url
        ));
    }
    if names_by_field_1(&resource.type_url) {
        read_string_field(&resource.body.value, 1)
            .map_err(|e| format!("{} does not decode: {e}", what()))?;
    }
    // A TP2 server names an unconstrained variant with empty constraints: nothing to check.
    if let Some(c) = resource.constraints.as_ref().filter(|c| c.r#type.is_some()) {
        Constraints::new(c.clone())
            .map_err(|e| format!("{}: its dynamic parameter constraints: {e}", what()))?;
    }
    Ok(())
}

/// The Envoy types whose field 1 is their name (`cluster_name` of a ClusterLoadAssignment).
fn names_by_field_1(type_url: &str) -> bool {
    matches!(
        type_url,
        types::LISTENER
            | types::ROUTE_CONFIGURATION
            | types::SCOPED_ROUTE_CONFIGURATION
            | types::VIRTUAL_HOST
            | types::CLUSTER
            | types::CLUSTER_LOAD_ASSIGNMENT
            | types::SECRET
            | types::RUNTIME
            | types::TYPED_EXTENSION_CONFIG
    )
}

/// [`check`] as the xDS client's validator.
pub fn validator() -> xdsd_client::Validator {
    Box::new(check)
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::cluster::v3::Cluster;
    use envoy_types::pb::google::protobuf::Any;
    use prost::Message;

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

    #[test]
    fn a_resource_whose_name_field_is_not_a_string_is_refused_with_its_name_and_the_reason() {
        // Field 1 as a varint (key 0x08): no name can be read.
        let r = resource(types::CLUSTER, types::CLUSTER, vec![0x08, 0x01]);
        let reason = check(&r).expect_err("refused");
        assert!(reason.contains("\"c\""), "names the resource: {reason}");
        assert!(reason.contains("field 1"), "{reason}");
        // Field 1 not UTF-8.
        let r = resource(types::CLUSTER, types::CLUSTER, vec![0x0a, 0x01, 0xff]);
        let reason = check(&r).expect_err("refused");
        assert!(reason.contains("not UTF-8"), "{reason}");
    }

    #[test]
    fn a_resource_is_read_at_its_top_level_only_and_taken_as_it_came() {
        // A Cluster whose `eds_cluster_config` (field 3) holds bytes that are no message: the
        // relay does not look into it (it serves the bytes as they came; the full decode it
        // no longer makes would refuse it).
        let mut value = Cluster {
            name: "c".into(),
            ..Default::default()
        }
        .encode_to_vec();
        value.extend_from_slice(&[0x1a, 0x02, 0xff, 0xff]);
        assert!(Cluster::decode(value.as_slice()).is_err());
        assert_eq!(
            check(&resource(types::CLUSTER, types::CLUSTER, value)),
            Ok(())
        );
        // A type the relay does not know is taken as it is.
        let r = resource("type.example/Other", "type.example/Other", vec![0xff]);
        assert_eq!(check(&r), Ok(()));
    }

    #[test]
    fn empty_constraints_are_taken_and_constraints_the_store_cannot_match_are_refused() {
        use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::{
            single_constraint::ConstraintType, SingleConstraint, Type,
        };
        use envoy_types::pb::envoy::service::discovery::v3::DynamicParameterConstraints;
        let body = Cluster {
            name: "c".into(),
            ..Default::default()
        }
        .encode_to_vec();
        let mut r = resource(types::CLUSTER, types::CLUSTER, body);
        // What a TP2 server names an unconstrained variant with.
        r.constraints = Some(DynamicParameterConstraints::default());
        assert_eq!(check(&r), Ok(()));
        // A constraint on the empty key.
        r.constraints = Some(DynamicParameterConstraints {
            r#type: Some(Type::Constraint(SingleConstraint {
                key: String::new(),
                constraint_type: Some(ConstraintType::Value("v".into())),
            })),
        });
        let reason = check(&r).expect_err("refused");
        assert!(reason.contains("constraints"), "{reason}");
    }
}
