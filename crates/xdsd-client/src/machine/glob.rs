//! Glob collections (xRFC TP1): `xdstp://AUTHORITY/TYPE/PATH/*` subscribes to every resource
//! directly under `PATH` with the same context parameters. The server sends each member under
//! its own name; the client takes a member for the glob that covers it, read from the names'
//! text (no parse: the server sends names canonical, and the client subscribes as it is told).

/// The scheme and the `//` that begin every xdstp name.
const SCHEME: &str = "xdstp://";

/// The glob collection `name` is a member of: the same authority, type and context parameters,
/// its last path segment replaced by `*`. `None` for a name that is not an xdstp name with an
/// id, and for a glob itself.
pub(super) fn collection_of(name: &str) -> Option<String> {
    let rest = name.strip_prefix(SCHEME)?;
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (_, after_authority) = path.split_once('/')?;
    let (_, id) = after_authority.split_once('/')?;
    let last = id.rsplit('/').next().unwrap_or(id);
    if id.is_empty() || last.is_empty() || last == "*" {
        return None;
    }
    let dir = &path[..path.len() - last.len()];
    let mut out = String::with_capacity(name.len() + 2);
    out.push_str(SCHEME);
    out.push_str(dir);
    out.push('*');
    if !query.is_empty() {
        out.push('?');
        out.push_str(query);
    }
    Some(out)
}

/// A glob's parts: the path up to and with the `/` before `*`, and its query (empty without
/// context parameters). `None` when `name` is not a glob collection.
pub(super) fn glob_parts(name: &str) -> Option<(&str, &str)> {
    let after_scheme = name.strip_prefix(SCHEME)?;
    let (path, query) = name.split_once('?').unwrap_or((name, ""));
    let prefix = path.strip_suffix('*')?;
    let in_path = after_scheme.split('?').next().unwrap_or(after_scheme);
    (prefix.ends_with('/') && in_path.matches('/').count() >= 2).then_some((prefix, query))
}

/// Whether the resource `name` is a member of the glob whose parts are `prefix` and `query`
/// ([`glob_parts`]).
pub(super) fn is_member(prefix: &str, query: &str, name: &str) -> bool {
    let Some(rest) = name.strip_prefix(prefix) else {
        return false;
    };
    let (id, params) = rest.split_once('?').unwrap_or((rest, ""));
    !id.is_empty() && !id.contains('/') && id != "*" && params == query
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_members_collection_is_its_path_with_star_and_its_parameters() {
        assert_eq!(
            collection_of("xdstp://a/T/c1/e1?k=v").as_deref(),
            Some("xdstp://a/T/c1/*?k=v")
        );
        assert_eq!(
            collection_of("xdstp://a/T/e1").as_deref(),
            Some("xdstp://a/T/*")
        );
        assert_eq!(
            collection_of("xdstp://a/T/c1/*"),
            None,
            "a glob is no member"
        );
        assert_eq!(collection_of("xdstp://a/T"), None);
        assert_eq!(collection_of("c1/e1"), None);
    }

    #[test]
    fn members_are_directly_under_the_globs_path_with_equal_parameters() {
        let (prefix, query) = glob_parts("xdstp://a/T/c1/*").unwrap();
        assert!(is_member(prefix, query, "xdstp://a/T/c1/e1"));
        assert!(!is_member(prefix, query, "xdstp://a/T/c1/sub/e1"));
        assert!(!is_member(prefix, query, "xdstp://a/T/c1/e1?k=v"));
        assert!(!is_member(prefix, query, "xdstp://a/T/c10/e1"));
        assert_eq!(glob_parts("xdstp://a/T/c1/e1"), None);
        assert_eq!(glob_parts("xdstp://a/*"), None);
        assert_eq!(
            glob_parts("xdstp://a/T/c1/*?k=v"),
            Some(("xdstp://a/T/c1/", "k=v"))
        );
    }
}
