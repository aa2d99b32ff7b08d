//! Drives the SotW state machines of one gRPC stream: ADS (any type, chosen per request) or a
//! per-type service (one fixed type).

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tonic::{Status, Streaming};
use tracing::{debug, info, warn};

use super::grpc::ServerContext;
use super::wire::SotwWire;
use crate::protocol::sotw::SotwSubscription;
use crate::protocol::{NodeIdentity, NonceGen, RequestKind};
use crate::store::{Store, Watcher};
use crate::types;

struct SotwStream {
    id: u64,
    store: Store,
    fixed: Option<Arc<str>>,
    node: NodeIdentity,
    nonces: NonceGen,
    watcher: Watcher,
    subs: HashMap<Arc<str>, SotwSubscription>,
    /// Types this stream asked for that xdsd has no resources of: warned about once each.
    warned: HashSet<Arc<str>>,
}

pub(crate) async fn run(
    ctx: Arc<ServerContext>,
    fixed: Option<Arc<str>>,
    peer: Option<SocketAddr>,
    mut requests: Streaming<DiscoveryRequest>,
    tx: mpsc::Sender<Result<SotwWire, Status>>,
) {
    let mut shutdown = ctx.shutdown.clone();
    let mut s = SotwStream {
        id: ctx.next_stream_id(),
        store: ctx.store.clone(),
        watcher: ctx.store.watcher(),
        fixed,
        node: NodeIdentity::default(),
        nonces: NonceGen::default(),
        subs: HashMap::new(),
        warned: HashSet::new(),
    };
    let service = s.fixed.as_deref().unwrap_or("ADS");
    info!(stream = s.id, peer = ?peer, service, "SotW stream opened");
    let ending: Result<(), Status> = loop {
        tokio::select! {
            _ = shutdown.wait_for(|down| *down) => break Err(Status::unavailable("xdsd is shutting down")),
            request = requests.next() => match request {
                Some(Ok(request)) => {
                    if let Err(status) = s.on_request(request) {
                        break Err(status);
                    }
                }
                Some(Err(status)) => {
                    debug!(stream = s.id, node = s.node.id(), %status, "stream read failed");
                    break Ok(());
                }
                None => break Ok(()),
            },
            _ = s.watcher.changed() => s.on_store_change(),
        }
        if s.flush(&tx).await.is_err() {
            break Ok(());
        }
    };
    if let Err(status) = ending {
        warn!(stream = s.id, node = s.node.id(), code = ?status.code(), message = status.message(), "ending stream");
        let _ = tx.send(Err(status)).await;
    }
    info!(stream = s.id, node = s.node.id(), "SotW stream closed");
}

impl SotwStream {
    fn on_request(&mut self, request: DiscoveryRequest) -> Result<(), Status> {
        let first = self.node.node().is_none();
        self.node
            .check(request.node.as_ref())
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        if first && self.node.node().is_some() {
            info!(stream = self.id, node = self.node.id(), "node identified");
        }
        let snapshot = self.store.snapshot();
        let type_url: Arc<str> = match &self.fixed {
            Some(t) if request.type_url.is_empty() || request.type_url == **t => t.clone(),
            Some(t) => {
                return Err(Status::invalid_argument(format!(
                    "this service serves {t}; the request is for {}",
                    request.type_url
                )))
            }
            None if request.type_url.is_empty() => {
                return Err(Status::invalid_argument(
                    "a DiscoveryRequest on an aggregated stream must set type_url",
                ))
            }
            None => match self.subs.get_key_value(request.type_url.as_str()) {
                Some((t, _)) => t.clone(),
                None => snapshot
                    .intern_type(&request.type_url)
                    .unwrap_or_else(|| request.type_url.as_str().into()),
            },
        };
        let current = snapshot.get(&type_url);
        if current.is_none() && self.warned.insert(type_url.clone()) {
            warn!(
                stream = self.id,
                node = self.node.id(),
                type_url = %type_url,
                "xdsd has no resources of this type; serving it as an empty type"
            );
        }
        let sub = self
            .subs
            .entry(type_url.clone())
            .or_insert_with(|| SotwSubscription::new(type_url.clone()));
        let (kind, change) = sub.handle_request(&request, |n| {
            current
                .and_then(|t| t.intern(n))
                .unwrap_or_else(|| n.into())
        });
        match &kind {
            RequestKind::Initial => {
                debug!(stream = self.id, node = self.node.id(), type_url = %type_url, names = request.resource_names.len(), "subscribe")
            }
            RequestKind::Ack { nonce } => {
                debug!(stream = self.id, node = self.node.id(), type_url = %type_url, %nonce, version = %request.version_info, "ACK")
            }
            RequestKind::Nack {
                nonce,
                rejected_version,
                message,
            } => warn!(
                stream = self.id,
                node = self.node.id(),
                type_url = %type_url,
                nonce = %nonce,
                rejected_version = rejected_version.as_deref().unwrap_or(""),
                error = %message,
                "NACK"
            ),
            RequestKind::Update => {
                debug!(stream = self.id, node = self.node.id(), type_url = %type_url, "subscription update")
            }
            RequestKind::Stale { nonce } => {
                debug!(stream = self.id, node = self.node.id(), type_url = %type_url, %nonce, "stale request ignored")
            }
        }
        // Register before the next snapshot is read, so no change can slip between the two.
        if let Some(on) = change.wildcard {
            self.watcher.set_wildcard(&type_url, on);
        }
        self.watcher.unwatch(&type_url, &change.removed);
        self.watcher.watch(&type_url, &change.added);
        Ok(())
    }

    fn on_store_change(&mut self) {
        for (type_url, names) in self.watcher.take_changes() {
            if let Some(sub) = self.subs.get_mut(&type_url) {
                sub.mark_changed(&names);
            }
        }
    }

    /// Sends every response owed, types in make-before-break order. Err: the client is gone.
    async fn flush(&mut self, tx: &mpsc::Sender<Result<SotwWire, Status>>) -> Result<(), ()> {
        let mut pending: Vec<Arc<str>> = self
            .subs
            .values()
            .filter(|s| s.has_pending())
            .map(|s| s.type_url().clone())
            .collect();
        if pending.is_empty() {
            return Ok(());
        }
        pending.sort_by(|a, b| (types::push_rank(a), a).cmp(&(types::push_rank(b), b)));
        let snapshot = self.store.snapshot();
        for type_url in pending {
            let Some(sub) = self.subs.get_mut(&type_url) else {
                continue;
            };
            if let Some(response) = sub.poll_response(snapshot.get(&type_url), &mut self.nonces) {
                debug!(
                    stream = self.id,
                    node = self.node.id(),
                    type_url = %type_url,
                    version = %response.version_info,
                    resources = response.len(),
                    nonce = %response.nonce,
                    "push"
                );
                tx.send(Ok(response.into())).await.map_err(|_| ())?;
            }
        }
        Ok(())
    }
}
