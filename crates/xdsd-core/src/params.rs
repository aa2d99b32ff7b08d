//! TEMPORARY placeholder with the agreed API (replaced by the real module).
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use bytes::Bytes;
use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::single_constraint::ConstraintType;
use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::Type;
use envoy_types::pb::envoy::service::discovery::v3::DynamicParameterConstraints;
use prost::Message;

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ParamSet(BTreeMap<String, String>);
impl ParamSet {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(|s| s.as_str())
    }
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.0.insert(key.into(), value.into());
    }
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for ParamSet {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(i: I) -> Self {
        ParamSet(i.into_iter().map(|(k, v)| (k.into(), v.into())).collect())
    }
}
impl fmt::Display for ParamSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}
#[derive(Clone)]
pub struct Constraints {
    proto: DynamicParameterConstraints,
    encoded: Bytes,
    keys: BTreeSet<String>,
}
impl PartialEq for Constraints {
    fn eq(&self, o: &Self) -> bool {
        self.encoded == o.encoded
    }
}
impl Eq for Constraints {}
impl std::hash::Hash for Constraints {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.encoded.hash(h)
    }
}
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConstraintError {
    #[error("bad: {0}")]
    Bad(String),
}
fn keys_of(c: &DynamicParameterConstraints, out: &mut BTreeSet<String>) {
    match &c.r#type {
        None => {}
        Some(Type::Constraint(s)) => {
            out.insert(s.key.clone());
        }
        Some(Type::OrConstraints(l)) | Some(Type::AndConstraints(l)) => {
            for x in &l.constraints {
                keys_of(x, out)
            }
        }
        Some(Type::NotConstraints(x)) => keys_of(x, out),
    }
}
fn eval(c: &DynamicParameterConstraints, p: &ParamSet) -> bool {
    match &c.r#type {
        None => true,
        Some(Type::Constraint(s)) => match &s.constraint_type {
            Some(ConstraintType::Value(v)) => p.get(&s.key) == Some(v.as_str()),
            Some(ConstraintType::Exists(_)) => p.get(&s.key).is_some(),
            None => false,
        },
        Some(Type::OrConstraints(l)) => l.constraints.iter().any(|x| eval(x, p)),
        Some(Type::AndConstraints(l)) => l.constraints.iter().all(|x| eval(x, p)),
        Some(Type::NotConstraints(x)) => !eval(x, p),
    }
}
impl Constraints {
    pub fn new(proto: DynamicParameterConstraints) -> Result<Constraints, ConstraintError> {
        let mut keys = BTreeSet::new();
        keys_of(&proto, &mut keys);
        Ok(Constraints {
            encoded: proto.encode_to_vec().into(),
            proto,
            keys,
        })
    }
    pub fn decode(bytes: &[u8]) -> Result<Constraints, ConstraintError> {
        Constraints::new(
            DynamicParameterConstraints::decode(bytes)
                .map_err(|e| ConstraintError::Bad(e.to_string()))?,
        )
    }
    pub fn matches(&self, params: &ParamSet) -> bool {
        eval(&self.proto, params)
    }
    pub fn keys(&self) -> &BTreeSet<String> {
        &self.keys
    }
    pub fn proto(&self) -> &DynamicParameterConstraints {
        &self.proto
    }
    pub fn encoded(&self) -> &Bytes {
        &self.encoded
    }
}
impl fmt::Debug for Constraints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.proto)
    }
}
impl fmt::Display for Constraints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.proto)
    }
}
pub fn overlap(_a: Option<&Constraints>, _b: Option<&Constraints>) -> Option<ParamSet> {
    None
}
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum VariantError {
    DifferentKeys {
        first: usize,
        second: usize,
        first_keys: BTreeSet<String>,
        second_keys: BTreeSet<String>,
    },
    Overlap {
        first: usize,
        second: usize,
        witness: ParamSet,
    },
}
pub fn check_variants(_variants: &[Option<&Constraints>]) -> Result<(), VariantError> {
    Ok(())
}
