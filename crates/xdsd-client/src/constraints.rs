//! xRFC TP2: whether a set of dynamic parameters matches a variant's constraints.

use std::collections::BTreeMap;

use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::single_constraint::ConstraintType;
use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::Type;
use envoy_types::pb::envoy::service::discovery::v3::DynamicParameterConstraints;

/// Dynamic parameters: key/value pairs a client subscribes with (xRFC TP2).
pub type Params = BTreeMap<String, String>;

/// Whether `params` match `constraints`: a key's exact value, a key's presence, and AND, OR and
/// NOT of those. Constraints with no type match everything (an empty AND).
pub fn matches(constraints: &DynamicParameterConstraints, params: &Params) -> bool {
    match &constraints.r#type {
        None => true,
        Some(Type::Constraint(single)) => match &single.constraint_type {
            Some(ConstraintType::Value(value)) => params.get(&single.key) == Some(value),
            Some(ConstraintType::Exists(_)) => params.contains_key(&single.key),
            // A constraint that says nothing of its key matches no parameters.
            None => false,
        },
        Some(Type::OrConstraints(list)) => list.constraints.iter().any(|c| matches(c, params)),
        Some(Type::AndConstraints(list)) => list.constraints.iter().all(|c| matches(c, params)),
        Some(Type::NotConstraints(inner)) => !matches(inner, params),
    }
}
