//! Keys under the prefix: which are resources, and their names.

/// The end of the range of keys starting with `prefix`: `prefix` with its last byte below 0xff
/// incremented (trailing 0xff bytes dropped); `\0` (no end) when there is no such byte.
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// What a key under the prefix is.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Key {
    /// A resource key, named by its suffix.
    Resource(String),
    /// A reserved key (last segment starting with `.`): ignored.
    Reserved,
    /// A key that cannot be a resource: its suffix (lossy) and why.
    Invalid(String, &'static str),
}

/// Whether a key suffix is reserved: its last `/`-separated segment starts with `.`.
pub(crate) fn is_reserved(suffix: &str) -> bool {
    suffix
        .rsplit('/')
        .next()
        .is_some_and(|last| last.starts_with('.'))
}

/// Classifies the full etcd `key`, which starts with `prefix` (etcd only returns such keys for
/// the prefix's range; anything else is invalid).
pub(crate) fn classify(prefix: &[u8], key: &[u8]) -> Key {
    let Some(suffix) = key.strip_prefix(prefix) else {
        return Key::Invalid(
            String::from_utf8_lossy(key).into_owned(),
            "the key is outside the prefix",
        );
    };
    match std::str::from_utf8(suffix) {
        Err(_) => Key::Invalid(
            String::from_utf8_lossy(suffix).into_owned(),
            "the key is not UTF-8",
        ),
        Ok("") => Key::Invalid(String::new(), "the key is the prefix itself (no name)"),
        Ok(s) if is_reserved(s) => Key::Reserved,
        Ok(s) => Key::Resource(s.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_of_a_prefix_ends_at_its_last_byte_incremented() {
        assert_eq!(prefix_end(b"/xdsd/"), b"/xdsd0".to_vec());
        assert_eq!(prefix_end(b"a\xff\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff"), vec![0]);
    }

    #[test]
    fn keys_whose_last_segment_starts_with_a_dot_are_reserved() {
        let p = b"/x/";
        assert_eq!(classify(p, b"/x/.push"), Key::Reserved);
        assert_eq!(classify(p, b"/x/a/.hidden"), Key::Reserved);
        assert_eq!(classify(b"/x", b"/x.push"), Key::Reserved);
        assert_eq!(
            classify(p, b"/x/.d/a.yaml"),
            Key::Resource(".d/a.yaml".into())
        );
        assert_eq!(classify(p, b"/x/a.yaml"), Key::Resource("a.yaml".into()));
        assert!(matches!(classify(p, b"/x/"), Key::Invalid(..)));
        assert!(matches!(classify(p, b"/x/\xff"), Key::Invalid(..)));
    }
}
