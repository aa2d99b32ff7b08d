//! Hash maps keyed by resource names and stream ids, with foldhash: these maps are on the
//! per-request and per-push paths, where SipHash was a third of the server's instructions.

/// A `HashMap` with foldhash.
pub type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
/// A `HashSet` with foldhash.
pub type HashSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;
