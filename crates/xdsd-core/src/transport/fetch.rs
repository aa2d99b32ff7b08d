//! The unary `Fetch*` methods of the per-type services (`FetchClusters`, `FetchEndpoints`...):
//! one `DiscoveryRequest` answered with the current state, like one REST poll that never waits
//! for a change. A fresh SotW session takes the request, exactly as the first request of a
//! per-type stream, and its response is the answer; nothing is kept afterwards.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use tonic::Status;
use tracing::{debug, warn};

use super::context::ServerContext;
use super::observer::{RequestSeen, StreamObserver};
use super::status::status_of;
use super::tls::Access;
use crate::params::ParamSet;

use crate::protocol::session::{Session, SessionError};
use crate::protocol::sotw::{SotwRequest, SotwResources, SotwResponse, SotwSubscription};
use crate::protocol::{Nonce, SubscriptionChange, Text};
use crate::store::{Encoding, Snapshot, View};

/// Answers `request` to the per-type service of `type_url` with the store's current state: what
/// a stream of that service would send first for the same request (same resources, same
/// version). When that is nothing (no name asked for exists), an empty response with the version
/// of the type as the client sees it.
pub(crate) fn fetch(
    ctx: &ServerContext,
    type_url: Arc<str>,
    peer: Option<SocketAddr>,
    access: &Access,
    request: &SotwRequest,
) -> Result<SotwResponse, Status> {
    let snapshot = ctx.store_for(&request.node_raw).snapshot();
    let observers = ctx.observers.embedder();
    let answer = answer(ctx, type_url, access, request, &snapshot, observers).map_err(|e| {
        let status = e.status();
        if status.code() == tonic::Code::PermissionDenied {
            warn!(peer = ?peer, error = %crate::logsafe::shown(status.message()), "fetch refused");
        }
        status
    })?;
    debug!(
        peer = ?peer,
        node = %crate::logsafe::shown(&answer.node),
        type_url = %crate::logsafe::shown(&answer.response.type_url),
        version = %answer.response.version_info,
        resources = answer.response.len(),
        "fetch"
    );
    Ok(answer.response)
}

/// Why a one-shot request (`Fetch*`, a REST poll) is not answered.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// The session's rules refused it.
    Session(SessionError),
    /// An observer refused it, with this status.
    Observer(Status),
}

impl Refusal {
    /// The gRPC status it is answered with (see `status`).
    pub(crate) fn status(&self) -> Status {
        match self {
            Refusal::Session(e) => status_of(e),
            Refusal::Observer(status) => status.clone(),
        }
    }
}

/// What a fresh session answers to one request.
pub(crate) struct Answer {
    pub(crate) response: SotwResponse,
    /// The names (and wildcard) the request subscribes to: what a client that waits for a change
    /// of its answer watches.
    pub(crate) change: SubscriptionChange,
    pub(crate) node: String,
}

/// The answer of a fresh per-type session to `request` (under the client's `access`), given the
/// store's state `snapshot`; `observers` may refuse the request (they are told it as a request
/// of stream 0: a one-shot request has no stream).
pub(crate) fn answer(
    ctx: &ServerContext,
    type_url: Arc<str>,
    access: &Access,
    request: &SotwRequest,
    snapshot: &Snapshot,
    observers: &[Arc<dyn StreamObserver>],
) -> Result<Answer, Refusal> {
    let mut session: Session<SotwSubscription> =
        Session::with_options(Some(type_url.clone()), ctx.options.session.clone());
    access.apply(&mut session);
    // The answer is the whole state for the request, whatever version the caller has (a stream
    // would send nothing to a client that has the current version).
    let handled = if request.version_info.is_empty() {
        session.handle_request(request, snapshot)
    } else {
        let mut fresh = request.clone();
        fresh.version_info = Text::default();
        session.handle_request(&fresh, snapshot)
    }
    .map_err(Refusal::Session)?;
    let seen = RequestSeen {
        stream: 0,
        node: session.shared_node(),
        identified: handled.identified,
        type_url: &handled.type_url,
        unknown_type: handled.unknown_type,
        kind: &handled.kind,
    };
    for observer in observers {
        observer.request(&seen).map_err(Refusal::Observer)?;
    }
    let now = Instant::now();
    let mut response: Option<SotwResponse> = None;
    // A response the session splits in parts goes out as one.
    while let Some((_, part)) = session.poll_response(snapshot, now) {
        response = Some(match response {
            Some(whole) => concatenate(whole, part),
            None => part,
        });
    }
    let params = session
        .node()
        .map(|n| n.params_for(&type_url).clone())
        .unwrap_or_default();
    let response = response.unwrap_or_else(|| empty(type_url, &params, snapshot));
    Ok(Answer {
        response,
        change: handled.change,
        node: session.node_id().to_owned(),
    })
}

/// A response with no resources, at the version of what a client with `params` sees of the type.
fn empty(type_url: Arc<str>, params: &ParamSet, snapshot: &Snapshot) -> SotwResponse {
    let version_info = match snapshot.get(&type_url) {
        Some(t) => t.view(params).version().clone(),
        None => View::empty(type_url.clone()).version().clone(),
    };
    SotwResponse {
        type_url,
        version_info,
        nonce: Nonce::default(),
        resources: SotwResources::Some(Default::default()),
        encoding: Encoding::default(),
        updated: Default::default(),
        oversized: None,
        control_plane: true,
    }
}

/// One response holding the resources of `first`, then those of `next`, at `next`'s version.
fn concatenate(mut first: SotwResponse, next: SotwResponse) -> SotwResponse {
    let mut resources = resource_list(first.resources);
    resources.extend(resource_list(next.resources));
    first.resources = SotwResources::Some(resources.into());
    first.updated = first
        .updated
        .iter()
        .chain(next.updated.iter())
        .cloned()
        .collect();
    first.version_info = next.version_info;
    first.nonce = next.nonce;
    first
}

fn resource_list(resources: SotwResources) -> Vec<Arc<crate::store::Resource>> {
    match resources {
        SotwResources::All(view) => view.iter().cloned().collect(),
        SotwResources::Some(list) => list.to_vec(),
    }
}

/// What a client with `node` would be served of each type the store holds, subscribing to
/// everything (wildcard): per type, the version and the resources (the variants its parameters
/// pick). For the admin API's `GET /config`.
pub(crate) fn preview(ctx: &ServerContext, node: &Node) -> Result<Vec<SotwResponse>, Status> {
    let snapshot = ctx
        .store_for(&prost::Message::encode_to_vec(node))
        .snapshot();
    let mut types: Vec<Arc<str>> = snapshot.types().map(|t| t.type_url().clone()).collect();
    types.sort();
    let mut answers = Vec::with_capacity(types.len());
    for type_url in types {
        // Virtual hosts are asked for by alias (VHDS): a wildcard names none of them.
        if *type_url == *crate::types::VIRTUAL_HOST {
            continue;
        }
        let request: SotwRequest = (&DiscoveryRequest {
            node: Some(node.clone()),
            type_url: type_url.to_string(),
            ..Default::default()
        })
            .into();
        let answer = answer(ctx, type_url, &Access::default(), &request, &snapshot, &[])
            .map_err(|e| e.status())?;
        answers.push(answer.response);
    }
    Ok(answers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Change, ResourceInput, Store};
    use crate::types::CLUSTER_LOAD_ASSIGNMENT;

    #[test]
    fn parts_concatenate_in_order_at_the_last_version() {
        let store = Store::new();
        let set = |n: &str| {
            Change::Set(ResourceInput::new(
                CLUSTER_LOAD_ASSIGNMENT,
                n,
                bytes::Bytes::from(n.as_bytes().to_vec()),
            ))
        };
        store.apply([set("a"), set("b")]).unwrap();
        let before = store.snapshot();
        store.apply([set("c")]).unwrap();
        let after = store.snapshot();
        let t = before.get(CLUSTER_LOAD_ASSIGNMENT).unwrap();
        let part = |resources, version: &str| SotwResponse {
            type_url: t.type_url().clone(),
            version_info: version.into(),
            nonce: Nonce::default(),
            resources,
            encoding: Encoding::default(),
            updated: Default::default(),
            oversized: None,
            control_plane: true,
        };
        let c = after.resource(CLUSTER_LOAD_ASSIGNMENT, "c").unwrap();
        let whole = concatenate(
            part(SotwResources::All(t.view(&ParamSet::new())), "1"),
            part(SotwResources::Some(vec![c.clone()].into()), "2"),
        );
        assert_eq!(
            whole.names().iter().map(|n| &**n).collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
        assert_eq!(&*whole.version_info, "2");
    }
}
