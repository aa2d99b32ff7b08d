//! xRFC TP2 dynamic parameters and dynamic parameter constraints.
//!
//! A subscription carries [`ParamSet`] (key/value pairs); each variant of a resource carries
//! [`Constraints`] (a boolean formula over those pairs). This module evaluates a formula against
//! a parameter set, decides exactly whether two formulas can match the same parameter set
//! ([`overlap`]), and checks TP2's rules for the variants of one resource name
//! ([`check_variants`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::single_constraint::ConstraintType;
use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::{
    ConstraintList, SingleConstraint, Type,
};
use envoy_types::pb::envoy::service::discovery::v3::DynamicParameterConstraints;
use prost::Message;

/// Deepest accepted nesting of constraint messages; the outermost message is at depth 1.
pub const MAX_DEPTH: usize = 32;
/// Most constraint messages accepted in one formula, the outermost included.
pub const MAX_NODES: usize = 1024;
/// Most distinct keys one formula may mention.
pub const MAX_KEYS: usize = 32;

// ---------------------------------------------------------------------------------------------
// ParamSet

/// The dynamic parameters of a subscription: key -> value, sorted by key.
///
/// A set is shared, not copied, when cloned: a client's parameters are kept by its session, its
/// CSDS record and the store's watch index, once per stream. It is one allocation of its pairs
/// in key order (a tree's node took half a kilobyte for a node's two or three parameters); the
/// empty set holds none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ParamSet(Option<Arc<[(String, String)]>>);

impl ParamSet {
    /// An empty parameter set.
    pub fn new() -> Self {
        Self::default()
    }

    fn pairs(&self) -> &[(String, String)] {
        self.0.as_deref().unwrap_or_default()
    }

    fn find(&self, key: &str) -> Result<usize, usize> {
        self.pairs().binary_search_by(|(k, _)| k.as_str().cmp(key))
    }

    fn set_pairs(&mut self, pairs: Vec<(String, String)>) {
        // One form for the empty set, so that equal sets compare and hash equal.
        self.0 = (!pairs.is_empty()).then(|| pairs.into());
    }

    /// The value of `key`, if the set has it.
    pub fn get(&self, key: &str) -> Option<&str> {
        let i = self.find(key).ok()?;
        Some(self.pairs()[i].1.as_str())
    }

    /// Sets `key` to `value`, replacing any earlier value. The set is copied: build a set of
    /// many pairs by collecting them.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) {
        let (key, value) = (key.into(), value.into());
        let mut pairs = self.pairs().to_vec();
        match self.find(&key) {
            Ok(i) => pairs[i].1 = value,
            Err(i) => pairs.insert(i, (key, value)),
        }
        self.set_pairs(pairs);
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        let i = self.find(key).ok()?;
        let mut pairs = self.pairs().to_vec();
        let (_, value) = pairs.remove(i);
        self.set_pairs(pairs);
        Some(value)
    }

    /// The pairs, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pairs().iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// How many keys the set has.
    pub fn len(&self) -> usize {
        self.pairs().len()
    }

    /// Whether the set has no keys.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    fn contains_key(&self, key: &str) -> bool {
        self.find(key).is_ok()
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for ParamSet {
    /// A later pair of the same key replaces an earlier one.
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let map: BTreeMap<String, String> = iter
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        let mut set = ParamSet::new();
        set.set_pairs(map.into_iter().collect());
        set
    }
}

/// Whether a key or value must be quoted to read back unambiguously in `{k=v, ...}` form.
fn needs_quotes(s: &str) -> bool {
    s.is_empty()
        || s.chars().any(|c| {
            matches!(c, '=' | ',' | '{' | '}' | '"' | '\'')
                || c.is_whitespace()
                || c.escape_debug().nth(1).is_some()
        })
}

fn write_atom(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    if needs_quotes(s) {
        write!(f, "{s:?}")
    } else {
        f.write_str(s)
    }
}

/// `{env=prod, version=v1}`; a key or value holding `=`, `,`, braces, quotes, whitespace or
/// characters that are not printable (or that is empty) is written quoted and escaped.
impl fmt::Display for ParamSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, (k, v)) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write_atom(f, k)?;
            f.write_str("=")?;
            write_atom(f, v)?;
        }
        f.write_str("}")
    }
}

// ---------------------------------------------------------------------------------------------
// Constraints

/// Why a `DynamicParameterConstraints` was refused. Paths name fields as the proto does, from
/// the outermost message, e.g. `and_constraints[1].not_constraints.constraint`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConstraintError {
    /// The bytes are not a `DynamicParameterConstraints`.
    #[error("cannot decode DynamicParameterConstraints: {0}")]
    Decode(String),
    /// A single constraint names no key.
    #[error("dynamic parameter constraint at `{path}` has an empty key")]
    EmptyKey {
        /// Where in the formula.
        path: String,
    },
    /// A single constraint sets neither `value` nor `exists`.
    #[error(
        "dynamic parameter constraint at `{path}` (key {key:?}) sets neither `value` nor `exists`"
    )]
    NoMatcher {
        /// Where in the formula.
        path: String,
        /// Its key.
        key: String,
    },
    /// Messages nest deeper than [`MAX_DEPTH`].
    #[error("dynamic parameter constraints nest deeper than {max} levels (at `{path}`)")]
    TooDeep {
        /// Where in the formula.
        path: String,
        /// The limit.
        max: usize,
    },
    /// The formula has more than [`MAX_NODES`] messages.
    #[error(
        "dynamic parameter constraints have more than {max} nodes (limit reached at `{path}`)"
    )]
    TooManyNodes {
        /// Where in the formula.
        path: String,
        /// The limit.
        max: usize,
    },
    /// The formula mentions more than [`MAX_KEYS`] distinct keys.
    #[error("dynamic parameter constraints mention more than {max} distinct keys (key {key:?} at `{path}`)")]
    TooManyKeys {
        /// Where in the formula.
        path: String,
        /// The key over the limit.
        key: String,
        /// The limit.
        max: usize,
    },
}

/// The formula, checked and stripped down for evaluation.
#[derive(Clone)]
enum Node {
    /// A message with its `type` unset.
    True,
    Value {
        key: String,
        value: String,
    },
    Exists {
        key: String,
    },
    And(Vec<Node>),
    Or(Vec<Node>),
    Not(Box<Node>),
}

impl Node {
    fn matches(&self, params: &ParamSet) -> bool {
        match self {
            Node::True => true,
            Node::Value { key, value } => params.get(key) == Some(value.as_str()),
            Node::Exists { key } => params.contains_key(key),
            Node::And(children) => children.iter().all(|c| c.matches(params)),
            Node::Or(children) => children.iter().any(|c| c.matches(params)),
            Node::Not(inner) => !inner.matches(params),
        }
    }
}

/// A validated `DynamicParameterConstraints`: well formed and within [`MAX_DEPTH`],
/// [`MAX_NODES`] and [`MAX_KEYS`]. Two are equal (and hash alike) when their encodings are.
#[derive(Clone)]
pub struct Constraints {
    proto: DynamicParameterConstraints,
    encoded: Bytes,
    keys: BTreeSet<String>,
    root: Node,
}

enum Seg {
    And(usize),
    Or(usize),
    Not,
    Constraint,
}

/// Walks a proto once: validates it, counts it and builds the [`Node`] tree.
struct Builder {
    path: Vec<Seg>,
    nodes: usize,
    keys: BTreeSet<String>,
}

impl Builder {
    fn path(&self) -> String {
        if self.path.is_empty() {
            return "(root)".to_string();
        }
        let mut out = String::new();
        for (i, seg) in self.path.iter().enumerate() {
            if i > 0 {
                out.push('.');
            }
            match seg {
                Seg::And(n) => out.push_str(&format!("and_constraints[{n}]")),
                Seg::Or(n) => out.push_str(&format!("or_constraints[{n}]")),
                Seg::Not => out.push_str("not_constraints"),
                Seg::Constraint => out.push_str("constraint"),
            }
        }
        out
    }

    fn message(
        &mut self,
        msg: &DynamicParameterConstraints,
        depth: usize,
    ) -> Result<Node, ConstraintError> {
        if depth > MAX_DEPTH {
            return Err(ConstraintError::TooDeep {
                path: self.path(),
                max: MAX_DEPTH,
            });
        }
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(ConstraintError::TooManyNodes {
                path: self.path(),
                max: MAX_NODES,
            });
        }
        let node = match &msg.r#type {
            None => Node::True,
            Some(Type::Constraint(single)) => {
                self.path.push(Seg::Constraint);
                let node = self.single(single)?;
                self.path.pop();
                node
            }
            Some(Type::AndConstraints(list)) => Node::And(self.list(list, depth, Seg::And)?),
            Some(Type::OrConstraints(list)) => Node::Or(self.list(list, depth, Seg::Or)?),
            Some(Type::NotConstraints(inner)) => {
                self.path.push(Seg::Not);
                let node = self.message(inner, depth + 1)?;
                self.path.pop();
                Node::Not(Box::new(node))
            }
        };
        Ok(node)
    }

    fn list(
        &mut self,
        list: &ConstraintList,
        depth: usize,
        seg: fn(usize) -> Seg,
    ) -> Result<Vec<Node>, ConstraintError> {
        let mut out = Vec::with_capacity(list.constraints.len().min(MAX_NODES));
        for (i, child) in list.constraints.iter().enumerate() {
            self.path.push(seg(i));
            out.push(self.message(child, depth + 1)?);
            self.path.pop();
        }
        Ok(out)
    }

    fn single(&mut self, single: &SingleConstraint) -> Result<Node, ConstraintError> {
        if single.key.is_empty() {
            return Err(ConstraintError::EmptyKey { path: self.path() });
        }
        let node = match &single.constraint_type {
            None => {
                return Err(ConstraintError::NoMatcher {
                    path: self.path(),
                    key: single.key.clone(),
                })
            }
            Some(ConstraintType::Value(value)) => Node::Value {
                key: single.key.clone(),
                value: value.clone(),
            },
            Some(ConstraintType::Exists(_)) => Node::Exists {
                key: single.key.clone(),
            },
        };
        if !self.keys.contains(&single.key) {
            if self.keys.len() == MAX_KEYS {
                return Err(ConstraintError::TooManyKeys {
                    path: self.path(),
                    key: single.key.clone(),
                    max: MAX_KEYS,
                });
            }
            self.keys.insert(single.key.clone());
        }
        Ok(node)
    }
}

impl Constraints {
    /// Validates `proto`: every single constraint has a key and a `value` or `exists`, and the
    /// formula stays within [`MAX_DEPTH`], [`MAX_NODES`] and [`MAX_KEYS`].
    pub fn new(proto: DynamicParameterConstraints) -> Result<Constraints, ConstraintError> {
        let mut builder = Builder {
            path: Vec::new(),
            nodes: 0,
            keys: BTreeSet::new(),
        };
        let root = builder.message(&proto, 1)?;
        let encoded = Bytes::from(proto.encode_to_vec());
        Ok(Constraints {
            proto,
            encoded,
            keys: builder.keys,
            root,
        })
    }

    /// Decodes a protobuf-encoded `DynamicParameterConstraints` and validates it as
    /// [`Constraints::new`] does.
    pub fn decode(bytes: &[u8]) -> Result<Constraints, ConstraintError> {
        let proto = DynamicParameterConstraints::decode(bytes)
            .map_err(|e| ConstraintError::Decode(e.to_string()))?;
        Constraints::new(proto)
    }

    /// Whether `params` satisfies the formula. Keys the formula does not mention are ignored.
    pub fn matches(&self, params: &ParamSet) -> bool {
        self.root.matches(params)
    }

    /// Every key the formula mentions, wherever it appears.
    pub fn keys(&self) -> &BTreeSet<String> {
        &self.keys
    }

    /// The proto this was built from.
    pub fn proto(&self) -> &DynamicParameterConstraints {
        &self.proto
    }

    /// The protobuf encoding of [`Constraints::proto`]; the same formula always encodes to the
    /// same bytes.
    pub fn encoded(&self) -> &Bytes {
        &self.encoded
    }
}

impl PartialEq for Constraints {
    fn eq(&self, other: &Self) -> bool {
        self.encoded == other.encoded
    }
}

impl Eq for Constraints {}

impl std::hash::Hash for Constraints {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.encoded.hash(state);
    }
}

fn write_proto(f: &mut fmt::Formatter<'_>, msg: &DynamicParameterConstraints) -> fmt::Result {
    match &msg.r#type {
        None => f.write_str("{}"),
        Some(Type::Constraint(single)) => {
            write!(f, "{{constraint:{{key:{:?}", single.key)?;
            match &single.constraint_type {
                Some(ConstraintType::Value(value)) => write!(f, " value:{value:?}")?,
                Some(ConstraintType::Exists(_)) => f.write_str(" exists:{}")?,
                None => {}
            }
            f.write_str("}}")
        }
        Some(Type::AndConstraints(list)) => write_list(f, "and_constraints", list),
        Some(Type::OrConstraints(list)) => write_list(f, "or_constraints", list),
        Some(Type::NotConstraints(inner)) => {
            f.write_str("{not_constraints:")?;
            write_proto(f, inner)?;
            f.write_str("}")
        }
    }
}

fn write_list(f: &mut fmt::Formatter<'_>, field: &str, list: &ConstraintList) -> fmt::Result {
    write!(f, "{{{field}:[")?;
    for (i, child) in list.constraints.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write_proto(f, child)?;
    }
    f.write_str("]}")
}

/// Compact text proto, as TP2 writes it:
/// `{and_constraints:[{constraint:{key:"env" value:"prod"}}, {not_constraints:{constraint:{key:"version" exists:{}}}}]}`.
/// A message with no `type` is `{}`.
impl fmt::Display for Constraints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_proto(f, &self.proto)
    }
}

impl fmt::Debug for Constraints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Constraints(")?;
        write_proto(f, &self.proto)?;
        f.write_str(")")
    }
}

// ---------------------------------------------------------------------------------------------
// Overlap

/// A formula over numbered keys and, per key, numbered values: what the overlap search runs on.
enum Lit {
    True,
    Value(usize, usize),
    Exists(usize),
    And(Vec<Lit>),
    Or(Vec<Lit>),
    Not(Box<Lit>),
}

/// The state of one key in a partial assignment.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Slot {
    Unassigned,
    Absent,
    /// The key's n-th mentioned value.
    Value(usize),
    /// A value neither formula mentions for this key.
    Other,
}

/// Three-valued result; `Unknown` carries the smallest unassigned key that can still decide it.
#[derive(Clone, Copy)]
enum Tri {
    False,
    True,
    Unknown(usize),
}

impl Lit {
    /// Kleene evaluation under a partial assignment. A known result stays the same however the
    /// unassigned keys are filled in; an unknown one depends only on keys it can reach through
    /// unknown subformulas, and reports the smallest of them.
    fn eval(&self, slots: &[Slot]) -> Tri {
        match self {
            Lit::True => Tri::True,
            Lit::Value(key, value) => match slots[*key] {
                Slot::Unassigned => Tri::Unknown(*key),
                Slot::Value(v) if v == *value => Tri::True,
                _ => Tri::False,
            },
            Lit::Exists(key) => match slots[*key] {
                Slot::Unassigned => Tri::Unknown(*key),
                Slot::Absent => Tri::False,
                _ => Tri::True,
            },
            Lit::And(children) => {
                let mut acc = Tri::True;
                for child in children {
                    match child.eval(slots) {
                        Tri::False => return Tri::False,
                        Tri::True => {}
                        Tri::Unknown(k) => acc = merge_unknown(acc, k),
                    }
                }
                acc
            }
            Lit::Or(children) => {
                let mut acc = Tri::False;
                for child in children {
                    match child.eval(slots) {
                        Tri::True => return Tri::True,
                        Tri::False => {}
                        Tri::Unknown(k) => acc = merge_unknown(acc, k),
                    }
                }
                acc
            }
            Lit::Not(inner) => match inner.eval(slots) {
                Tri::False => Tri::True,
                Tri::True => Tri::False,
                unknown => unknown,
            },
        }
    }
}

fn merge_unknown(acc: Tri, key: usize) -> Tri {
    match acc {
        Tri::Unknown(k) => Tri::Unknown(k.min(key)),
        _ => Tri::Unknown(key),
    }
}

/// The keys of both formulas, sorted, each with the values mentioned for it, sorted.
struct Table<'a> {
    keys: Vec<&'a str>,
    values: Vec<Vec<&'a str>>,
}

impl<'a> Table<'a> {
    fn new(roots: &[&'a Node]) -> Self {
        fn collect<'a>(node: &'a Node, out: &mut BTreeMap<&'a str, BTreeSet<&'a str>>) {
            match node {
                Node::True => {}
                Node::Value { key, value } => {
                    out.entry(key).or_default().insert(value);
                }
                Node::Exists { key } => {
                    out.entry(key).or_default();
                }
                Node::And(children) | Node::Or(children) => {
                    children.iter().for_each(|c| collect(c, out))
                }
                Node::Not(inner) => collect(inner, out),
            }
        }
        let mut map = BTreeMap::new();
        for root in roots {
            collect(root, &mut map);
        }
        let (keys, values) = map
            .into_iter()
            .map(|(k, vs)| (k, vs.into_iter().collect()))
            .unzip();
        Table { keys, values }
    }

    fn lower(&self, node: &Node) -> Lit {
        // Every key and value was collected from this node, so the searches find them; the
        // fallbacks only keep this total.
        let key_index = |key: &str| self.keys.binary_search(&key).unwrap_or(usize::MAX);
        match node {
            Node::True => Lit::True,
            Node::Value { key, value } => {
                let k = key_index(key);
                match self
                    .values
                    .get(k)
                    .map(|vs| vs.binary_search(&value.as_str()))
                {
                    Some(Ok(v)) => Lit::Value(k, v),
                    _ => Lit::Not(Box::new(Lit::True)),
                }
            }
            Node::Exists { key } => match key_index(key) {
                usize::MAX => Lit::Not(Box::new(Lit::True)),
                k => Lit::Exists(k),
            },
            Node::And(children) => Lit::And(children.iter().map(|c| self.lower(c)).collect()),
            Node::Or(children) => Lit::Or(children.iter().map(|c| self.lower(c)).collect()),
            Node::Not(inner) => Lit::Not(Box::new(self.lower(inner))),
        }
    }

    /// A value for `key` that neither formula mentions: `other`, `other-1`, `other-2`, ...
    fn fresh_value(&self, key: usize) -> String {
        let mentioned = &self.values[key];
        (0..)
            .map(|n| {
                if n == 0 {
                    "other".to_string()
                } else {
                    format!("other-{n}")
                }
            })
            .find(|candidate| mentioned.binary_search(&candidate.as_str()).is_err())
            .unwrap_or_default()
    }
}

/// Depth-first search over the keys still able to decide a formula, smallest first, trying for
/// each: each mentioned value, absent, then an unmentioned value. Returns whether `slots` now
/// satisfies every formula (keys left unassigned do not matter).
fn search(lits: &[Lit], table: &Table<'_>, slots: &mut [Slot]) -> bool {
    let mut next: Option<usize> = None;
    for lit in lits {
        match lit.eval(slots) {
            Tri::False => return false,
            Tri::True => {}
            Tri::Unknown(k) => next = Some(next.map_or(k, |n| n.min(k))),
        }
    }
    let Some(key) = next else {
        return true;
    };
    let choices = (0..table.values[key].len())
        .map(Slot::Value)
        .chain([Slot::Absent, Slot::Other]);
    for choice in choices {
        slots[key] = choice;
        if search(lits, table, slots) {
            return true;
        }
    }
    slots[key] = Slot::Unassigned;
    false
}

/// Whether some parameter set matches both `a` and `b` (`None` matches everything). Exact:
/// returns such a set (a witness) or `None` when there is none. Keys whose state does not
/// matter are left out of the witness.
///
/// Only keys the formulas mention matter, and for each key only whether it is absent, which
/// mentioned value it has, or that it has some other value; the search explores those states
/// and prunes with partial evaluation. Worst-case time grows exponentially with the number of
/// keys, which [`MAX_KEYS`] bounds.
pub fn overlap(a: Option<&Constraints>, b: Option<&Constraints>) -> Option<ParamSet> {
    let roots: Vec<&Node> = [a, b].into_iter().flatten().map(|c| &c.root).collect();
    let table = Table::new(&roots);
    let lits: Vec<Lit> = roots.iter().map(|r| table.lower(r)).collect();
    let mut slots = vec![Slot::Unassigned; table.keys.len()];
    if !search(&lits, &table, &mut slots) {
        return None;
    }
    let mut witness = ParamSet::new();
    for (k, slot) in slots.iter().enumerate() {
        match slot {
            Slot::Unassigned | Slot::Absent => {}
            Slot::Value(v) => witness.insert(table.keys[k], table.values[k][*v]),
            Slot::Other => witness.insert(table.keys[k], table.fresh_value(k)),
        }
    }
    Some(witness)
}

// ---------------------------------------------------------------------------------------------
// Variants

/// A breach of TP2's rules for the variants of one resource name.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum VariantError {
    /// Two variants constrain different sets of keys.
    DifferentKeys {
        /// The first variant (its index).
        first: usize,
        /// The second variant (its index).
        second: usize,
        /// The keys the first constrains.
        first_keys: BTreeSet<String>,
        /// The keys the second constrains.
        second_keys: BTreeSet<String>,
    },
    /// `witness` matches both variants.
    Overlap {
        /// The first variant (its index).
        first: usize,
        /// The second variant (its index).
        second: usize,
        /// A parameter set both match.
        witness: ParamSet,
    },
}

fn write_keys(f: &mut fmt::Formatter<'_>, keys: &BTreeSet<String>) -> fmt::Result {
    f.write_str("{")?;
    for (i, key) in keys.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write_atom(f, key)?;
    }
    f.write_str("}")
}

impl fmt::Display for VariantError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VariantError::DifferentKeys {
                first,
                second,
                first_keys,
                second_keys,
            } => {
                write!(
                    f,
                    "variants {first} and {second} constrain different keys: "
                )?;
                write_keys(f, first_keys)?;
                f.write_str(" vs ")?;
                write_keys(f, second_keys)
            }
            VariantError::Overlap {
                first,
                second,
                witness,
            } => write!(
                f,
                "variants {first} and {second} overlap: both match {witness}"
            ),
        }
    }
}

impl std::error::Error for VariantError {}

/// The keys a variant constrains; none when unconstrained.
fn keys_of(c: Option<&Constraints>) -> &BTreeSet<String> {
    static NONE: BTreeSet<String> = BTreeSet::new();
    c.map_or(&NONE, Constraints::keys)
}

/// Checks TP2's rules for the variants of one resource name (`None` = unconstrained): all
/// constrain the same keys, and no parameter set matches two of them. Pairs are checked in order
/// ((0,1), (0,2), ..., (1,2), ...), keys before overlap; the first breach is returned.
pub fn check_variants(variants: &[Option<&Constraints>]) -> Result<(), VariantError> {
    for (first, a) in variants.iter().enumerate() {
        for (second, b) in variants.iter().enumerate().skip(first + 1) {
            let (first_keys, second_keys) = (keys_of(*a), keys_of(*b));
            if first_keys != second_keys {
                return Err(VariantError::DifferentKeys {
                    first,
                    second,
                    first_keys: first_keys.clone(),
                    second_keys: second_keys.clone(),
                });
            }
            if let Some(witness) = overlap(*a, *b) {
                return Err(VariantError::Overlap {
                    first,
                    second,
                    witness,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
