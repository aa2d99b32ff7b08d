//! Federation (xRFC TP1 authorities): which connection a name is subscribed on. The one rule,
//! [`Options::authority_for`](crate::Options::authority_for) and
//! [`Options::server_for`](crate::Options::server_for), which the driver's routing and a relay's
//! logs (`xdsd-relay`) both call.

use std::borrow::Cow;

/// The authority of an `xdstp://AUTHORITY/...` name, canonical (`b%2Eexample` is `b.example`;
/// may be empty); `None` for a name that is not xdstp. A malformed xdstp name's authority is
/// read from its text, as written: the server it goes to says what is wrong with it.
pub(crate) fn of(name: &str) -> Option<Cow<'_, str>> {
    if !xdsd_xdstp::is_xdstp(name) {
        return None;
    }
    if let Ok(parsed) = xdsd_xdstp::XdstpName::parse(name) {
        return Some(Cow::Owned(parsed.authority().to_owned()));
    }
    let rest = name.get(xdsd_xdstp::SCHEME.len()..)?;
    Some(Cow::Borrowed(rest.split(['/', '?']).next().unwrap_or(rest)))
}

#[cfg(test)]
mod tests {
    use crate::Options;

    #[test]
    fn a_names_authority_is_what_comes_between_the_scheme_and_the_path_canonically() {
        let of = |name| super::of(name).map(|a| a.into_owned());
        assert_eq!(
            of("xdstp://a.example/envoy.config.cluster.v3.Cluster/c1").as_deref(),
            Some("a.example")
        );
        assert_eq!(
            of("xdstp://a%2Eexample/envoy.config.cluster.v3.Cluster/c1").as_deref(),
            Some("a.example")
        );
        assert_eq!(
            of("xdstp:///envoy.config.cluster.v3.Cluster/c1").as_deref(),
            Some("")
        );
        assert_eq!(of("xdstp://a.example/T").as_deref(), Some("a.example"));
        assert_eq!(of("c1"), None);
        assert_eq!(of("*"), None);
    }

    #[test]
    fn an_xdstp_names_server_is_its_authoritys_first_and_every_other_name_the_default() {
        let options = Options::new("default:1")
            .with_authority("b.example", ["b:1", "b:2"])
            .with_authority("", ["empty:1"]);
        let server = |name| options.server_for(name);
        assert_eq!(
            server("xdstp://b.example/envoy.config.cluster.v3.Cluster/c1"),
            "b:1"
        );
        assert_eq!(
            server("xdstp://b%2eexample/envoy.config.cluster.v3.Cluster/c1?z=1"),
            "b:1",
            "the authority compared canonically"
        );
        assert_eq!(
            server("xdstp:///envoy.config.cluster.v3.Cluster/c1"),
            "empty:1"
        );
        assert_eq!(
            server("xdstp://c.example/envoy.config.cluster.v3.Cluster/c1"),
            "default:1"
        );
        assert_eq!(server("b.example"), "default:1");
        assert_eq!(server("*"), "default:1");
        assert_eq!(
            options.authority_for("xdstp://b%2Eexample/envoy.config.cluster.v3.Cluster/c1"),
            Some("b.example")
        );
        assert_eq!(options.authority_for("c1"), None);
        assert_eq!(Options::new("d").server_for("xdstp://b.example/T/c1"), "d");
    }
}
