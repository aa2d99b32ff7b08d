//! Node identity bound to a client certificate: which nodes (ids or clusters) the identity of an
//! mTLS client may claim. No I/O: the TLS transport reads the identity from the certificate (see
//! `transport::tls`), the session checks the node of the first request against these rules
//! ([`Session::bind_identity`](super::session::Session::bind_identity)).
//!
//! Without rules, the default applies: the node id must equal the identity, or the identity's
//! last `/`-separated segment (`spiffe://example.org/ns/prod/sa/envoy-1` may be node
//! `envoy-1`). With rules (`IDENTITY=NODE`), a node is allowed when one rule matches both: see
//! [`NodeIdentityRule`].

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use super::node::ClientNode;

/// A pattern where `*` stands for any run of characters (none included); every other character
/// stands for itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob(String);

impl Glob {
    /// A pattern (`*` for any run of characters).
    pub fn new(pattern: impl Into<String>) -> Glob {
        Glob(pattern.into())
    }

    /// Whether `text` matches the whole pattern. Linear in `text` times the pattern's length.
    pub fn matches(&self, text: &str) -> bool {
        let (p, t) = (self.0.as_bytes(), text.as_bytes());
        let (mut pi, mut ti) = (0, 0);
        // The last `*` seen, and where in `text` it is tried to end.
        let mut star: Option<(usize, usize)> = None;
        while ti < t.len() {
            if pi < p.len() && p[pi] == b'*' {
                star = Some((pi, ti));
                pi += 1;
            } else if pi < p.len() && p[pi] == t[ti] {
                pi += 1;
                ti += 1;
            } else if let Some((sp, st)) = star {
                // Let the `*` take one more character, and try again after it.
                star = Some((sp, st + 1));
                pi = sp + 1;
                ti = st + 1;
            } else {
                return false;
            }
        }
        p[pi..].iter().all(|&c| c == b'*')
    }
}

impl fmt::Display for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What part of the node a rule matches.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Claim {
    /// The node id.
    Node(Glob),
    /// The node's cluster (`cluster:PATTERN`).
    Cluster(Glob),
}

/// One rule, written `IDENTITY=NODE` or `IDENTITY=cluster:CLUSTER`: a client whose certificate
/// identity matches `IDENTITY` may claim a node whose id matches `NODE` (or whose cluster
/// matches `CLUSTER`). Both are [`Glob`]s. The first `=` splits the two, so the identity pattern
/// has none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeIdentityRule {
    /// The identities it applies to.
    pub identity: Glob,
    /// The nodes (or clusters) they may claim.
    pub claim: Claim,
}

impl NodeIdentityRule {
    /// Whether `identity` may claim `node` under this rule.
    pub fn allows(&self, identity: &str, node: &ClientNode) -> bool {
        self.identity.matches(identity)
            && match &self.claim {
                Claim::Node(id) => id.matches(&node.id),
                Claim::Cluster(cluster) => cluster.matches(&node.cluster),
            }
    }
}

impl FromStr for NodeIdentityRule {
    type Err = String;

    fn from_str(rule: &str) -> Result<Self, String> {
        let (identity, claim) = rule.split_once('=').ok_or_else(|| {
            format!("{rule:?} is not IDENTITY=NODE or IDENTITY=cluster:CLUSTER (patterns with *)")
        })?;
        if identity.is_empty() || claim.is_empty() {
            return Err(format!(
                "{rule:?}: both the identity and the node pattern must be given"
            ));
        }
        let claim = match claim.strip_prefix("cluster:") {
            Some("") => return Err(format!("{rule:?}: cluster: needs a pattern")),
            Some(cluster) => Claim::Cluster(Glob::new(cluster)),
            None => Claim::Node(Glob::new(claim)),
        };
        Ok(NodeIdentityRule {
            identity: Glob::new(identity),
            claim,
        })
    }
}

impl fmt::Display for NodeIdentityRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.claim {
            Claim::Node(id) => write!(f, "{}={id}", self.identity),
            Claim::Cluster(cluster) => write!(f, "{}=cluster:{cluster}", self.identity),
        }
    }
}

/// Which nodes each identity may claim: the rules, or the default rule when there are none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeIdentityRules {
    rules: Vec<NodeIdentityRule>,
}

impl NodeIdentityRules {
    /// The default rule only: the node id is the identity or its last `/`-separated segment.
    pub fn default_rule() -> NodeIdentityRules {
        NodeIdentityRules::default()
    }

    /// These rules; none means the default rule.
    pub fn new(rules: impl IntoIterator<Item = NodeIdentityRule>) -> NodeIdentityRules {
        NodeIdentityRules {
            rules: rules.into_iter().collect(),
        }
    }

    /// The rules, in order.
    pub fn rules(&self) -> &[NodeIdentityRule] {
        &self.rules
    }

    /// Whether a client of certificate identity `identity` may be `node`. An empty identity (a
    /// certificate that names none) may claim nothing.
    pub fn allows(&self, identity: &str, node: &ClientNode) -> bool {
        if identity.is_empty() {
            return false;
        }
        if self.rules.is_empty() {
            let last = identity.rsplit('/').next().unwrap_or(identity);
            return !node.id.is_empty() && (node.id == identity || node.id == last);
        }
        self.rules.iter().any(|r| r.allows(identity, node))
    }
}

/// A client's certificate identity and the rules its node is checked against.
#[derive(Debug, Clone)]
pub struct IdentityBinding {
    /// The certificate's identity.
    pub identity: Arc<str>,
    /// The rules its node is checked against.
    pub rules: Arc<NodeIdentityRules>,
}

impl IdentityBinding {
    /// Whether the identity may claim `node`.
    pub fn allows(&self, node: &ClientNode) -> bool {
        self.rules.allows(&self.identity, node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, cluster: &str) -> ClientNode {
        ClientNode {
            id: id.into(),
            cluster: cluster.into(),
            ..ClientNode::default()
        }
    }

    #[test]
    fn globs_match_whole_strings_with_stars_for_any_run() {
        let g = Glob::new("spiffe://example.org/ns/*/sa/envoy");
        assert!(g.matches("spiffe://example.org/ns/prod/sa/envoy"));
        assert!(g.matches("spiffe://example.org/ns//sa/envoy"));
        assert!(!g.matches("spiffe://example.org/ns/prod/sa/envoy2"));
        assert!(!g.matches("spiffe://example.org/ns/prod/sa/envo"));
        assert!(Glob::new("*").matches(""));
        assert!(Glob::new("node-*").matches("node-"));
        assert!(Glob::new("a*b*c").matches("axxbyyc"));
        assert!(Glob::new("a*b*c").matches("abcbc"));
        assert!(!Glob::new("a*b*c").matches("acb"));
        assert!(!Glob::new("exact").matches("exactly"));
        assert!(Glob::new("**x").matches("yyx"));
    }

    #[test]
    fn the_default_rule_takes_the_identity_or_its_last_segment() {
        let rules = NodeIdentityRules::default_rule();
        let id = "spiffe://example.org/ns/prod/sa/envoy-1";
        assert!(rules.allows(id, &node("envoy-1", "")));
        assert!(rules.allows(id, &node(id, "")));
        assert!(!rules.allows(id, &node("envoy-2", "")));
        assert!(!rules.allows(id, &node("prod", "")));
        assert!(rules.allows("envoy-1.example.org", &node("envoy-1.example.org", "")));
        // A trailing slash leaves an empty segment, which no node id equals.
        assert!(!rules.allows("spiffe://example.org/", &node("", "c")));
        assert!(!rules.allows("", &node("", "")));
    }

    #[test]
    fn rules_parse_and_allow_nodes_or_clusters() {
        let rule: NodeIdentityRule = "spiffe://example.org/ns/*/sa/envoy=node-*"
            .parse()
            .expect("a rule");
        assert_eq!(
            rule.to_string(),
            "spiffe://example.org/ns/*/sa/envoy=node-*"
        );
        let by_cluster: NodeIdentityRule = "*.example.org=cluster:edge".parse().expect("a rule");
        let rules = NodeIdentityRules::new([rule, by_cluster]);
        assert!(rules.allows("spiffe://example.org/ns/a/sa/envoy", &node("node-1", "")));
        assert!(!rules.allows("spiffe://example.org/ns/a/sa/other", &node("node-1", "")));
        assert!(rules.allows("gw.example.org", &node("anything", "edge")));
        assert!(!rules.allows("gw.example.org", &node("anything", "core")));
        // Rules replace the default rule.
        assert!(!rules.allows("node-1", &node("node-1", "")));
        for bad in ["no-equals", "=node", "id=", "id=cluster:"] {
            assert!(bad.parse::<NodeIdentityRule>().is_err(), "{bad}");
        }
    }
}
