//! VHDS: a RouteConfiguration that enables `vhds` has its virtual hosts served on demand, one
//! VirtualHost resource each, instead of inline. Each is named `<route config>/<virtual host>`
//! (the resource, and the VirtualHost message in it) and aliased `<route config>/<domain>` for
//! each of its domains, which is how Envoy asks for the virtual host of a domain it has not seen
//! yet. Each remembers its route configuration ([`Resource::parent`]), so that the hosts of a
//! route configuration are told apart from those of another whose name starts the same.
//!
//! [`Resource::parent`]: super::Resource::parent

use bytes::Bytes;
use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
use prost::Message;

/// A virtual host taken out of its route configuration.
pub(crate) struct DerivedHost {
    pub(crate) name: String,
    pub(crate) aliases: Vec<String>,
    pub(crate) value: Bytes,
}

/// For a VHDS route configuration: the route configuration without its virtual hosts (what RDS
/// serves) and the virtual hosts (what VHDS serves). `None` when the route configuration does
/// not use VHDS, or does not decode (it is then served as it is).
pub(crate) fn split(route_configuration: &Bytes) -> Option<(Bytes, Vec<DerivedHost>)> {
    let mut route = RouteConfiguration::decode(route_configuration.clone()).ok()?;
    route.vhds.as_ref()?;
    let hosts = std::mem::take(&mut route.virtual_hosts)
        .into_iter()
        .map(|mut host| {
            // Envoy keys a virtual host it takes from VHDS by the name in the message: the
            // resource's name, as its own VHDS tests send them.
            host.name = host_prefix(&route.name) + &host.name;
            DerivedHost {
                aliases: host
                    .domains
                    .iter()
                    .map(|d| host_prefix(&route.name) + d)
                    .collect(),
                value: host.encode_to_vec().into(),
                name: host.name,
            }
        })
        .collect();
    Some((route.encode_to_vec().into(), hosts))
}

/// Names of the virtual hosts of route configuration `route` start with this.
pub(crate) fn host_prefix(route: &str) -> String {
    format!("{route}/")
}
