//! Federation (xRFC TP1 authorities): which connection a name is subscribed on.

/// The authority of an `xdstp://AUTHORITY/...` name, as written (may be empty); `None` for a
/// name that is not xdstp.
pub(crate) fn of(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("xdstp://")?;
    Some(rest.split(['/', '?']).next().unwrap_or(rest))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_names_authority_is_what_comes_between_the_scheme_and_the_path() {
        assert_eq!(
            super::of("xdstp://a.example/envoy.config.cluster.v3.Cluster/c1"),
            Some("a.example")
        );
        assert_eq!(
            super::of("xdstp:///envoy.config.cluster.v3.Cluster/c1"),
            Some("")
        );
        assert_eq!(super::of("c1"), None);
        assert_eq!(super::of("*"), None);
    }
}
