//! The unary `Fetch*` methods of the per-type services (`FetchClusters`, `FetchEndpoints`...):
//! one `DiscoveryRequest` answered with the current state, like one REST poll that never waits
//! for a change. A fresh SotW session takes the request, exactly as the first request of a
//! per-type stream, and its response is the answer; nothing is kept afterwards.

use std::net::SocketAddr;
use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use tonic::Status;
use tracing::{debug, warn};

use super::conn::Access;
use super::context::ServerContext;
use super::observer::{Asked, OneShotDone, RequestSeen, StreamObserver};
use super::picker::{Held, Hold};
use super::status::status_of;
use crate::protocol::oneshot::{Answer, Pending};
use crate::protocol::session::{Session, SessionError};
use crate::protocol::sotw::{SotwMachine, SotwRequest, SotwResponse};
use crate::store::Snapshot;

/// Answers `request` to the per-type service of `type_url` with the store's current state: what
/// a stream of that service would send first for the same request (same resources, same
/// version). When that is nothing (no name asked for exists), an empty response with the version
/// of the type as the client sees it.
pub(crate) async fn fetch(
    ctx: &ServerContext,
    type_url: Arc<str>,
    peer: Option<SocketAddr>,
    access: &Access,
    request: &SotwRequest,
) -> Result<SotwResponse, Status> {
    let observers = ctx.observers.embedder();
    let one_shot = OneShot::new(ctx, observers);
    let version_of = |r: &SotwResponse| r.version_info.to_string();
    hold(ctx, &type_url, access, request, &one_shot, &version_of).await;
    let answer = settled_answer(ctx, type_url, access, request, &one_shot).await;
    let answer = answer.map_err(|e| {
        let status = e.status();
        if status.code() == tonic::Code::PermissionDenied {
            warn!(peer = ?peer, error = %crate::logsafe::shown(status.message()), "fetch refused");
        }
        status
    })?;
    debug!(
        peer = ?peer,
        node = %crate::logsafe::shown(answer.node_id()),
        type_url = %crate::logsafe::shown(&answer.response.type_url),
        version = %answer.response.version_info,
        resources = answer.response.len(),
        "fetch"
    );
    Ok(answer.response)
}

/// A one-shot request (`Fetch*`, a REST poll) in hand: its id, and the observers it is told
/// to. Dropped (answered, refused, or its caller gone, which drops the future that holds it),
/// it tells them [`OneShotDone`].
pub(crate) struct OneShot<'a> {
    id: u64,
    observers: &'a [Arc<dyn StreamObserver>],
}

impl<'a> OneShot<'a> {
    /// A new one-shot request, told to `observers`.
    pub(crate) fn new(ctx: &ServerContext, observers: &'a [Arc<dyn StreamObserver>]) -> Self {
        OneShot {
            id: ctx.next_stream_id(),
            observers,
        }
    }
}

impl Drop for OneShot<'_> {
    fn drop(&mut self) {
        let done = OneShotDone { one_shot: self.id };
        for observer in self.observers {
            observer.one_shot_done(&done);
        }
    }
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

/// The answer of a fresh per-type session to `request` (under the client's `access`), given the
/// store's state `snapshot` (with `observers`, the state once they took the request);
/// `observers` may refuse the request (they are told it as a request of stream 0: a one-shot
/// request has no stream). The answer's rules are
/// `protocol::oneshot`'s.
pub(crate) fn answer(
    ctx: &ServerContext,
    type_url: Arc<str>,
    access: &Access,
    request: &SotwRequest,
    snapshot: &Snapshot,
    observers: &[Arc<dyn StreamObserver>],
) -> Result<Answer, Refusal> {
    Ok(take(ctx, type_url, access, request, snapshot, (0, observers))?.answer(snapshot))
}

/// [`answer`] from the store the client reads, once the names it asks for that the store has
/// pending (asked for elsewhere by the source, a relay's upstream, not answered yet) resolved,
/// or their time passed: a one-shot client is not told first that such a name does not exist.
/// The state is read again after the observers were told the request (a relay's declares its
/// names pending then).
pub(crate) async fn settled_answer(
    ctx: &ServerContext,
    type_url: Arc<str>,
    access: &Access,
    request: &SotwRequest,
    one_shot: &OneShot<'_>,
) -> Result<Answer, Refusal> {
    let store = ctx.store_for(&request.node_raw);
    let observers = (one_shot.id, one_shot.observers);
    let taken = take(ctx, type_url, access, request, &store.snapshot(), observers)?;
    let mut snapshot = store.snapshot();
    if taken.waits_until(&snapshot).is_none() {
        return Ok(taken.answer(&snapshot));
    }
    let mut watcher = store.watcher();
    taken.watch(&mut watcher);
    let mut shutdown = ctx.shutdown.clone();
    loop {
        // Read again once changes are watched: none slips between the two.
        snapshot = store.snapshot();
        let Some(until) = taken.waits_until(&snapshot) else {
            break;
        };
        tokio::select! {
            _ = watcher.changed() => {
                watcher.take_changes();
            }
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(until)) => {
                snapshot = store.snapshot();
                break;
            }
            _ = shutdown.wait_for(|down| *down) => break,
        }
    }
    Ok(taken.answer(&snapshot))
}

/// Before a one-shot request (`Fetch*`, a REST poll) is answered: when its `version_info` is
/// the version (`version_of` its answer) it would be given from a state the picker holds back
/// from it (a gated rollout's candidate, which another replica may have promoted), the answer
/// waits first, as a stream's does (`Stream::hold`), or until xdsd shuts down: else the client
/// would be answered with an older state. The picker bounds the wait.
pub(crate) async fn hold(
    ctx: &ServerContext,
    type_url: &Arc<str>,
    access: &Access,
    request: &SotwRequest,
    one_shot: &OneShot<'_>,
    version_of: &(dyn Fn(&SotwResponse) -> String + Sync),
) {
    let Some(picker) = ctx.picker.as_ref() else {
        return;
    };
    let version = request.version_info.as_str();
    if version.is_empty() {
        return;
    }
    let of = |snapshot: &Snapshot| {
        answer(ctx, type_url.clone(), access, request, snapshot, &[])
            .ok()
            .map(|a| version_of(&a.response))
    };
    let Some(wait) = picker.hold(Hold {
        stream: one_shot.id,
        store: &ctx.store_for(&request.node_raw),
        node: Some(&request.node_raw[..]).filter(|n| !n.is_empty()),
        client: None,
        type_url,
        held: Held::Answer { version, of: &of },
    }) else {
        return;
    };
    let mut shutdown = ctx.shutdown.clone();
    tokio::select! {
        () = wait => {}
        _ = shutdown.wait_for(|down| *down) => {}
    }
}

/// A fresh per-type session's take of `request` (under the client's `access`), given the
/// store's state `snapshot`, once `observers` were told it as the one-shot request `one_shot`
/// (and did not refuse it).
fn take(
    ctx: &ServerContext,
    type_url: Arc<str>,
    access: &Access,
    request: &SotwRequest,
    snapshot: &Snapshot,
    (one_shot, observers): (u64, &[Arc<dyn StreamObserver>]),
) -> Result<Pending, Refusal> {
    let mut session: Session<SotwMachine> =
        Session::with_options(Some(type_url), ctx.options.session.clone());
    access.apply(&mut session);
    let pending = Pending::new(session, request, snapshot).map_err(Refusal::Session)?;
    let seen = RequestSeen {
        stream: 0,
        one_shot,
        node: pending.session().shared_node(),
        identified: pending.handled().identified,
        type_url: &pending.handled().type_url,
        unknown_type: pending.handled().unknown_type,
        kind: &pending.handled().kind,
        // A one-shot answer is the whole state, whatever the client holds.
        held_version: "",
        held_resources: 0,
        asked: Asked::sotw(request, pending.handled().change.wildcard),
    };
    for observer in observers {
        observer.request(&seen).map_err(Refusal::Observer)?;
    }
    Ok(pending)
}

/// What a client with `node` would be served of each type the store holds, subscribing to
/// everything (wildcard): per type, the version and the resources (the variants its parameters
/// pick). For the admin API's `GET /config`.
pub(crate) fn preview(ctx: &ServerContext, node: &Node) -> Result<Vec<SotwResponse>, Status> {
    // What the store holds: a name pending (a relay's, asked upstream) holds back no type here.
    let snapshot = ctx
        .store_for(&prost::Message::encode_to_vec(node))
        .snapshot()
        .without_pending();
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
