use super::*;

const EP: &str = "type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint";

fn canon(name: &str) -> String {
    XdstpName::parse(name)
        .map(|n| n.to_string())
        .unwrap_or_else(|e| format!("error: {e}"))
}

#[test]
fn only_names_starting_with_xdstp_are_parsed() {
    assert!(is_xdstp("xdstp://a/T/x"));
    assert!(is_xdstp("XDSTP:x"));
    assert!(!is_xdstp("xdst"));
    assert!(!is_xdstp("cluster-a"));
    assert!(canonical("cluster-a?b=1&a=2").is_none());
}

#[test]
fn scheme_is_xdstp_and_two_slashes() {
    assert_eq!(XdstpName::parse("xdstp:a/T/x"), Err(XdstpError::Scheme));
    assert_eq!(XdstpName::parse("XDSTP://a/T/x"), Err(XdstpError::Scheme));
}

#[test]
fn authority_may_be_empty_type_and_id_may_not() {
    let n = XdstpName::parse("xdstp:///envoy.config.endpoint.v3.LbEndpoint/c1/e1").unwrap();
    assert_eq!(n.authority(), "");
    assert_eq!(n.resource_type(), "envoy.config.endpoint.v3.LbEndpoint");
    assert_eq!(n.id(), "c1/e1");
    assert_eq!(XdstpName::parse("xdstp://a"), Err(XdstpError::NoType));
    assert_eq!(XdstpName::parse("xdstp://a//x"), Err(XdstpError::EmptyType));
    assert_eq!(XdstpName::parse("xdstp://a/T"), Err(XdstpError::NoId));
    assert_eq!(XdstpName::parse("xdstp://a/T/"), Err(XdstpError::NoId));
    assert!(matches!(
        XdstpName::parse("xdstp://a/T/x//y"),
        Err(XdstpError::EmptySegment(_))
    ));
    assert!(matches!(
        XdstpName::parse("xdstp://a/T/x/"),
        Err(XdstpError::EmptySegment(_))
    ));
}

#[test]
fn type_segment_must_be_the_resources_type() {
    let n = XdstpName::parse("xdstp://a/envoy.config.cluster.v3.Cluster/c").unwrap();
    assert!(n.check_type(EP).is_err());
    assert_eq!(
        XdstpName::parse_resource("xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c/e", EP)
            .map(|n| n.to_string()),
        Ok("xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c/e".to_owned())
    );
}

#[test]
fn context_parameters_are_sorted() {
    assert_eq!(
        canon("xdstp://a/T/x?b=2&a=1&c=3"),
        "xdstp://a/T/x?a=1&b=2&c=3"
    );
    assert_eq!(canon("xdstp://a/T/x?"), "xdstp://a/T/x");
    let n = XdstpName::parse("xdstp://a/T/x?b=2&a=1").unwrap();
    assert_eq!(n.params().collect::<Vec<_>>(), vec![("a", "1"), ("b", "2")]);
    assert_eq!(n, XdstpName::parse("xdstp://a/T/x?a=1&b=2").unwrap());
}

#[test]
fn duplicate_parameter_keys_are_an_error() {
    assert_eq!(
        XdstpName::parse("xdstp://a/T/x?a=1&b=2&a=3"),
        Err(XdstpError::DuplicateParam("a".into()))
    );
    assert_eq!(
        XdstpName::parse("xdstp://a/T/x?a=1&%61=3"),
        Err(XdstpError::DuplicateParam("a".into()))
    );
}

#[test]
fn a_parameter_is_key_equals_value() {
    assert!(matches!(
        XdstpName::parse("xdstp://a/T/x?a"),
        Err(XdstpError::BadParam(_))
    ));
    assert!(matches!(
        XdstpName::parse("xdstp://a/T/x?=1"),
        Err(XdstpError::BadParam(_))
    ));
    assert_eq!(canon("xdstp://a/T/x?a="), "xdstp://a/T/x?a=");
}

#[test]
fn percent_encoding_is_normalized() {
    // Hex digits in upper case; unreserved characters decoded.
    assert_eq!(canon("xdstp://a/T/x%2fy"), "xdstp://a/T/x%2Fy");
    assert_eq!(canon("xdstp://a/T/%78"), "xdstp://a/T/x");
    assert_eq!(canon("xdstp://a%2Db/T/x?k=%7e"), "xdstp://a-b/T/x?k=~");
    assert!(matches!(
        XdstpName::parse("xdstp://a/T/x%2"),
        Err(XdstpError::BadPercent(_))
    ));
    assert!(matches!(
        XdstpName::parse("xdstp://a/T/x%zz"),
        Err(XdstpError::BadPercent(_))
    ));
}

#[test]
fn characters_rfc_3986_does_not_allow_must_be_encoded() {
    assert_eq!(
        XdstpName::parse("xdstp://a/T/x y"),
        Err(XdstpError::BadChar {
            ch: ' ',
            part: "id"
        })
    );
    assert_eq!(
        XdstpName::parse("xdstp://a/T/é"),
        Err(XdstpError::BadChar {
            ch: 'é',
            part: "id"
        })
    );
    assert!(XdstpName::parse("xdstp://a b/T/x").is_err());
    assert!(XdstpName::parse("xdstp://a/T/x?k=<v>").is_err());
}

#[test]
fn processing_directives_are_not_part_of_a_name() {
    assert_eq!(
        XdstpName::parse("xdstp://a/T/x#alt=y"),
        Err(XdstpError::Directive)
    );
}

#[test]
fn glob_is_a_last_segment_star() {
    let g = XdstpName::parse("xdstp://a/T/c1/*?b=1&a=2").unwrap();
    assert!(g.is_glob());
    assert_eq!(g.to_string(), "xdstp://a/T/c1/*?a=2&b=1");
    assert!(XdstpName::parse("xdstp://a/T/*").unwrap().is_glob());
    assert!(!XdstpName::parse("xdstp://a/T/c1/x*").unwrap().is_glob());
    assert!(matches!(
        XdstpName::parse("xdstp://a/T/*/x"),
        Err(XdstpError::InnerGlob(_))
    ));
    let glob = format!("xdstp://a/{}/c1/*", EP.trim_start_matches(TYPE_URL_PREFIX));
    assert_eq!(
        XdstpName::parse_resource(&glob, EP),
        Err(XdstpError::GlobAsResource)
    );
}

#[test]
fn collection_is_the_parent_path_with_the_same_parameters() {
    let n = XdstpName::parse("xdstp://a/T/c1/e1?z=1&y=2").unwrap();
    assert_eq!(n.collection(), "xdstp://a/T/c1/*?y=2&z=1");
    // Not recursive: a resource two levels down is in the deeper collection only.
    assert_eq!(
        collection_of("xdstp://a/T/c1/sub/e1").as_deref(),
        Some("xdstp://a/T/c1/sub/*")
    );
    assert_eq!(
        collection_of("xdstp://a/T/e1").as_deref(),
        Some("xdstp://a/T/*")
    );
    assert_eq!(
        collection_of("xdstp://a/T/c1/*").as_deref(),
        Some("xdstp://a/T/c1/*")
    );
    assert_eq!(collection_of("plain"), None);
}

#[test]
fn canonical_is_none_for_names_already_canonical() {
    assert!(canonical("xdstp://a/T/x?a=1&b=2").is_none());
    assert_eq!(
        canonical("xdstp://a/T/x?b=2&a=1").as_deref(),
        Some("xdstp://a/T/x?a=1&b=2")
    );
    assert!(canonical("xdstp://a/T/x?a=1&a=2").is_none());
}

#[test]
fn glob_members_are_direct_children_with_equal_parameters() {
    let (prefix, query) = glob_parts("xdstp://a/T/c1/*?k=v").unwrap();
    assert_eq!((prefix, query), ("xdstp://a/T/c1/", "k=v"));
    assert!(is_member(prefix, query, "xdstp://a/T/c1/e1?k=v"));
    assert!(!is_member(prefix, query, "xdstp://a/T/c1/e1"));
    assert!(!is_member(prefix, query, "xdstp://a/T/c1/e1?k=w"));
    assert!(!is_member(prefix, query, "xdstp://a/T/c1/sub/e1?k=v"));
    assert!(!is_member(prefix, query, "xdstp://a/T/c10/e1?k=v"));
    let (prefix, query) = glob_parts("xdstp://a/T/c1/*").unwrap();
    assert!(is_member(prefix, query, "xdstp://a/T/c1/e1"));
    assert!(!is_member(prefix, query, "xdstp://a/T/c1/e1?k=v"));
    assert!(glob_parts("xdstp://a/T/*").is_some());
    assert!(glob_parts("xdstp://a/*").is_none());
    assert!(glob_parts("xdstp://a/T/c1/x*").is_none());
    assert!(glob_parts("c1/*").is_none());
}

#[test]
fn a_collection_looked_at_in_the_threads_buffer_is_the_one_collection_of_builds() {
    for name in [
        "xdstp://a/T/c1/e1?k=v",
        "xdstp://a/T/c1/sub/e1",
        "xdstp://a/T/e1",
        "xdstp://a/T/c1/*",
        "xdstp://a/T",
        "plain",
    ] {
        assert_eq!(
            with_collection_of(name, str::to_owned),
            collection_of(name),
            "{name}"
        );
    }
    // Called again while the buffer is taken: the same answers.
    let nested = with_collection_of("xdstp://a/T/c1/e1", |outer| {
        (
            outer.to_owned(),
            with_collection_of("xdstp://a/T/c2/e1?z=1", str::to_owned),
        )
    });
    assert_eq!(
        nested,
        Some((
            "xdstp://a/T/c1/*".to_owned(),
            Some("xdstp://a/T/c2/*?z=1".to_owned())
        ))
    );
    assert!(is_member_rest("", "e1") && !is_member_rest("", "sub/e1"));
    assert!(is_member_rest("k=v", "e1?k=v") && !is_member_rest("", "e1?k=v"));
}
