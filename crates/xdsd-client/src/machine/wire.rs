//! The wire: a response's resources decoded (a plain `Any` or the `Resource` wrapper, a
//! heartbeat), and the next request of a type built from its state (SotW and delta).

use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DiscoveryRequest, Resource as WireResource, ResourceLocator,
    ResourceName,
};
use envoy_types::pb::google::protobuf::Any;
use envoy_types::pb::google::rpc::Status;
use prost::Message;

use super::{
    canonical_owned, HeldKey, Key, Resource, TypeState, Wildcard, RESOURCE_WRAPPER, WILDCARD,
};

/// A resource, or a heartbeat of one (no body: renews the TTL of the version named), or the
/// answer to names asked by alias that no resource has (no body, the aliases set: on-demand
/// VHDS's "not found", which Envoy waits for).
pub(super) enum Received {
    Resource(Resource),
    Absent {
        names: Vec<String>,
    },
    Heartbeat {
        key: HeldKey,
        version: String,
        ttl: Option<Duration>,
    },
}

/// The `name` field (number 1) of an xDS resource message: `name` of Listener, Cluster,
/// RouteConfiguration, Secret, Runtime…, `cluster_name` of ClusterLoadAssignment.
#[derive(Clone, PartialEq, Message)]
struct Named {
    #[prost(string, tag = "1")]
    name: String,
}

pub(super) fn decode_sotw(type_url: &str, version: &str, any: Any) -> Result<Received, String> {
    if any.type_url == RESOURCE_WRAPPER {
        let wire = WireResource::decode(any.value.as_slice())
            .map_err(|e| format!("a Resource wrapper does not decode: {e}"))?;
        return decode_wrapper(type_url, version, wire);
    }
    if any.type_url != type_url {
        return Err(format!(
            "a resource of type {} in a response of type {type_url}",
            any.type_url
        ));
    }
    let name = Named::decode(any.value.as_slice())
        .map_err(|e| format!("a resource's name does not decode: {e}"))?
        .name;
    if name.is_empty() {
        return Err("a resource has no name".to_owned());
    }
    Ok(Received::Resource(Resource {
        type_url: type_url.to_owned(),
        name: canonical_owned(name),
        aliases: Vec::new(),
        version: version.to_owned(),
        body: any,
        constraints: None,
        ttl: None,
    }))
}

/// A `Resource` wrapper (delta's resources, SotW's wrapped ones); `version` is the response's,
/// for a wrapper without its own.
pub(super) fn decode_wrapper(
    type_url: &str,
    version: &str,
    wire: WireResource,
) -> Result<Received, String> {
    let (name, constraints) = match wire.resource_name {
        Some(ResourceName {
            name,
            dynamic_parameter_constraints,
        }) if !name.is_empty() => (name, dynamic_parameter_constraints),
        _ => (wire.name, None),
    };
    // A server may spell an xdstp name otherwise than the client asked (xRFC TP1): the
    // client's names are canonical, so are the names it takes.
    let name = canonical_owned(name);
    let ttl = wire
        .ttl
        .map(|d| Duration::new(d.seconds.max(0) as u64, d.nanos.max(0) as u32));
    let resource_version = if wire.version.is_empty() {
        version.to_owned()
    } else {
        wire.version
    };
    let Some(body) = wire.resource else {
        if !wire.aliases.is_empty() {
            let mut names = wire.aliases;
            if !name.is_empty() && !names.contains(&name) {
                names.push(name);
            }
            return Ok(Received::Absent { names });
        }
        if name.is_empty() {
            return Err("a heartbeat names no resource".to_owned());
        }
        let key = (
            name,
            constraints
                .as_ref()
                .map(Message::encode_to_vec)
                .unwrap_or_default(),
        );
        return Ok(Received::Heartbeat {
            key,
            version: resource_version,
            ttl,
        });
    };
    if body.type_url != type_url {
        return Err(format!(
            "a resource of type {} in a response of type {type_url}",
            body.type_url
        ));
    }
    let name = if name.is_empty() {
        Named::decode(body.value.as_slice())
            .map_err(|e| format!("a resource's name does not decode: {e}"))?
            .name
    } else {
        name
    };
    if name.is_empty() {
        return Err("a resource has no name".to_owned());
    }
    Ok(Received::Resource(Resource {
        type_url: type_url.to_owned(),
        name,
        aliases: wire.aliases,
        version: resource_version,
        body,
        constraints,
        ttl,
    }))
}

pub(super) fn error_detail(nack: &Option<String>) -> Option<Status> {
    nack.as_ref().map(|message| Status {
        // INVALID_ARGUMENT, as Envoy sends.
        code: 3,
        message: message.clone(),
        details: Vec::new(),
    })
}

pub(super) fn sotw_request(
    type_url: &str,
    state: &TypeState,
    node: Option<Node>,
) -> DiscoveryRequest {
    let mut names: Vec<String> = state
        .subs
        .keys()
        .filter(|k| k.params.is_empty())
        .map(|k| k.name.clone())
        .collect();
    let locators: Vec<ResourceLocator> = state
        .subs
        .keys()
        .filter(|k| !k.params.is_empty())
        .map(Key::locator)
        .collect();
    let named = !names.is_empty() || !locators.is_empty();
    match state.wildcard() {
        Wildcard::Explicit => names.push(WILDCARD.to_owned()),
        Wildcard::Legacy if named => names.push(WILDCARD.to_owned()),
        _ => {}
    }
    DiscoveryRequest {
        version_info: state.version.clone(),
        node,
        resource_names: names,
        resource_locators: locators,
        type_url: type_url.to_owned(),
        response_nonce: state.nonce.clone(),
        error_detail: error_detail(&state.nack),
    }
}

pub(super) fn delta_request(
    type_url: &str,
    state: &TypeState,
    node: Option<Node>,
) -> DeltaDiscoveryRequest {
    let split = |keys: &mut dyn Iterator<Item = &Key>| {
        let mut names = Vec::new();
        let mut locators = Vec::new();
        for key in keys {
            if key.params.is_empty() {
                names.push(key.name.clone());
            } else {
                locators.push(key.locator());
            }
        }
        (names, locators)
    };
    let mut request = DeltaDiscoveryRequest {
        node,
        type_url: type_url.to_owned(),
        response_nonce: state.nonce.clone(),
        error_detail: error_detail(&state.nack),
        ..Default::default()
    };
    let wildcard = state.wildcard();
    if state.initial {
        let (mut names, locators) = split(&mut state.subs.keys());
        let named = !names.is_empty() || !locators.is_empty();
        if wildcard == Wildcard::Explicit || (wildcard == Wildcard::Legacy && named) {
            names.push(WILDCARD.to_owned());
        }
        request.resource_names_subscribe = names;
        request.resource_locators_subscribe = locators;
        request.initial_resource_versions = state
            .held
            .iter()
            .map(|h| (h.resource.name.clone(), h.resource.version.clone()))
            .collect();
    } else {
        let (mut names, locators) = split(&mut state.added.iter());
        let (mut gone, gone_locators) = split(&mut state.removed.iter());
        if state.wildcard_changed {
            match wildcard {
                Wildcard::Off => gone.push(WILDCARD.to_owned()),
                Wildcard::Explicit => names.push(WILDCARD.to_owned()),
                // The legacy wildcard can only be the first request's: later, it is `*`.
                Wildcard::Legacy => names.push(WILDCARD.to_owned()),
            }
        } else if wildcard == Wildcard::Legacy
            && !names.is_empty()
            && state.subs.len() == names.len()
        {
            // The first names of a legacy wildcard subscription: keep the wildcard explicitly.
            names.push(WILDCARD.to_owned());
        }
        request.resource_names_subscribe = names;
        request.resource_locators_subscribe = locators;
        request.resource_names_unsubscribe = gone;
        request.resource_locators_unsubscribe = gone_locators;
    }
    request
}
