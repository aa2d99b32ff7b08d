//! Drives the state machines of one gRPC stream, SotW or incremental: ADS (any type, chosen per
//! request) or a per-type service (one fixed type).

use crate::hash::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;

use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tonic::{Status, Streaming};
use tracing::{debug, info, warn};

use super::grpc::ServerContext;
use super::stats::StreamEntry;
use super::wire::{DeltaWire, SotwWire};
use crate::protocol::delta::{DeltaResponse, DeltaSubscription};
use crate::protocol::sotw::{SotwRequest, SotwResponse, SotwSubscription};
use crate::protocol::{NodeIdentity, NonceGen, RequestKind, SubscriptionChange};
use crate::store::{Resource, Store, TypeSnapshot, Watcher};
use crate::types;

/// What the stream driver needs of a protocol variant's per-type state machine.
pub(crate) trait Variant: Send + 'static {
    type Request: prost::Message + Default + Send + 'static;
    type Response: Send;
    type Wire: prost::Message + From<Self::Response> + Send + 'static;
    /// For logs.
    const NAME: &'static str;

    fn new(type_url: Arc<str>) -> Self;
    /// (id, cluster) of the request's node, if it carries one.
    fn node(request: &Self::Request) -> Option<(&str, &str)>;
    fn type_url(request: &Self::Request) -> &str;
    fn handle_request(
        &mut self,
        request: &Self::Request,
        current: Option<&Arc<TypeSnapshot>>,
    ) -> (RequestKind, SubscriptionChange);
    fn mark_changed(&mut self, names: &HashSet<Arc<str>>);
    fn has_pending(&self) -> bool;
    fn poll_response(
        &mut self,
        current: Option<&Arc<TypeSnapshot>>,
        nonces: &mut NonceGen,
    ) -> Option<Self::Response>;
    /// (version, resources, removed names, nonce) of a response, for logs.
    fn describe(response: &Self::Response) -> (&str, usize, usize, &str);
    /// How many resources a reconnecting client says it already has.
    fn initial_versions(request: &Self::Request) -> usize;
    /// The resources of a response that are new or changed for the client.
    fn updated(response: &Self::Response) -> &[Arc<Resource>];
    /// Sends `name` again with the next response, changed or not, if it is subscribed.
    fn resend(&mut self, name: &Arc<str>);
}

impl Variant for SotwSubscription {
    type Request = SotwRequest;
    type Response = SotwResponse;
    type Wire = SotwWire;
    const NAME: &'static str = "SotW";

    fn new(type_url: Arc<str>) -> Self {
        SotwSubscription::new(type_url)
    }
    fn node(request: &SotwRequest) -> Option<(&str, &str)> {
        request
            .node
            .as_ref()
            .map(|n| (n.id.as_str(), n.cluster.as_str()))
    }
    fn type_url(request: &SotwRequest) -> &str {
        &request.type_url
    }
    fn handle_request(
        &mut self,
        request: &SotwRequest,
        current: Option<&Arc<TypeSnapshot>>,
    ) -> (RequestKind, SubscriptionChange) {
        SotwSubscription::handle_request(self, request, current)
    }
    fn mark_changed(&mut self, names: &HashSet<Arc<str>>) {
        SotwSubscription::mark_changed(self, names)
    }
    fn has_pending(&self) -> bool {
        SotwSubscription::has_pending(self)
    }
    fn poll_response(
        &mut self,
        current: Option<&Arc<TypeSnapshot>>,
        nonces: &mut NonceGen,
    ) -> Option<SotwResponse> {
        SotwSubscription::poll_response(self, current, nonces)
    }
    fn describe(r: &SotwResponse) -> (&str, usize, usize, &str) {
        (&r.version_info, r.len(), 0, &r.nonce)
    }
    fn initial_versions(_: &SotwRequest) -> usize {
        0
    }
    fn updated(r: &SotwResponse) -> &[Arc<Resource>] {
        &r.updated
    }
    fn resend(&mut self, name: &Arc<str>) {
        SotwSubscription::resend(self, name)
    }
}

impl Variant for DeltaSubscription {
    type Request = DeltaDiscoveryRequest;
    type Response = DeltaResponse;
    type Wire = DeltaWire;
    const NAME: &'static str = "delta";

    fn new(type_url: Arc<str>) -> Self {
        DeltaSubscription::new(type_url)
    }
    fn node(request: &DeltaDiscoveryRequest) -> Option<(&str, &str)> {
        request
            .node
            .as_ref()
            .map(|n| (n.id.as_str(), n.cluster.as_str()))
    }
    fn type_url(request: &DeltaDiscoveryRequest) -> &str {
        &request.type_url
    }
    fn handle_request(
        &mut self,
        request: &DeltaDiscoveryRequest,
        current: Option<&Arc<TypeSnapshot>>,
    ) -> (RequestKind, SubscriptionChange) {
        DeltaSubscription::handle_request(self, request, current)
    }
    fn mark_changed(&mut self, names: &HashSet<Arc<str>>) {
        DeltaSubscription::mark_changed(self, names)
    }
    fn has_pending(&self) -> bool {
        DeltaSubscription::has_pending(self)
    }
    fn poll_response(
        &mut self,
        current: Option<&Arc<TypeSnapshot>>,
        nonces: &mut NonceGen,
    ) -> Option<DeltaResponse> {
        DeltaSubscription::poll_response(self, current, nonces)
    }
    fn describe(r: &DeltaResponse) -> (&str, usize, usize, &str) {
        (
            &r.system_version_info,
            r.resources.len(),
            r.removed.len(),
            &r.nonce,
        )
    }
    fn initial_versions(request: &DeltaDiscoveryRequest) -> usize {
        request.initial_resource_versions.len()
    }
    fn updated(r: &DeltaResponse) -> &[Arc<Resource>] {
        &r.resources
    }
    fn resend(&mut self, name: &Arc<str>) {
        DeltaSubscription::resend(self, name)
    }
}

struct Stream<V> {
    id: u64,
    stats: Arc<StreamEntry>,
    store: Store,
    fixed: Option<Arc<str>>,
    node: NodeIdentity,
    nonces: NonceGen,
    watcher: Watcher,
    subs: HashMap<Arc<str>, V>,
    /// Types this stream asked for that xdsd has no resources of: warned about once each.
    warned: HashSet<Arc<str>>,
}

pub(crate) type Sender<V> = mpsc::Sender<Result<<V as Variant>::Wire, Status>>;

pub(crate) async fn run<V: Variant>(
    ctx: Arc<ServerContext>,
    fixed: Option<Arc<str>>,
    peer: Option<SocketAddr>,
    mut requests: Streaming<V::Request>,
    tx: Sender<V>,
) {
    let mut shutdown = ctx.shutdown.clone();
    let id = ctx.next_stream_id();
    let mut s: Stream<V> = Stream {
        id,
        stats: ctx.streams.open(id, V::NAME),
        store: ctx.store.clone(),
        watcher: ctx.store.watcher(),
        fixed,
        node: NodeIdentity::default(),
        nonces: NonceGen::default(),
        subs: HashMap::default(),
        warned: HashSet::default(),
    };
    let service = s.fixed.as_deref().unwrap_or("ADS");
    info!(stream = s.id, peer = ?peer, service, variant = V::NAME, "stream opened");
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
                    debug!(stream = s.id, node = %s.node.id(), %status, "stream read failed");
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
        warn!(stream = s.id, node = %s.node.id(), code = ?status.code(), reason = status.message(), "ending stream");
        let _ = tx.send(Err(status)).await;
    }
    ctx.streams.close(s.id);
    info!(stream = s.id, node = %s.node.id(), "stream closed");
}

impl<V: Variant> Stream<V> {
    fn on_request(&mut self, request: V::Request) -> Result<(), Status> {
        let first = !self.node.is_known();
        self.node
            .check(V::node(&request))
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        if first && self.node.is_known() {
            info!(stream = self.id, node = %self.node.id(), "node identified");
            self.stats.set_node(self.node.id());
        }
        let snapshot = self.store.snapshot();
        let requested = V::type_url(&request);
        let type_url: Arc<str> = match &self.fixed {
            Some(t) if requested.is_empty() || requested == &**t => t.clone(),
            Some(t) => {
                return Err(Status::invalid_argument(format!(
                    "this service serves {t}; the request is for {requested}"
                )))
            }
            None if requested.is_empty() => {
                return Err(Status::invalid_argument(
                    "a request on an aggregated stream must set type_url",
                ))
            }
            None => match self.subs.get_key_value(requested) {
                Some((t, _)) => t.clone(),
                None => snapshot
                    .intern_type(requested)
                    .unwrap_or_else(|| requested.into()),
            },
        };
        let current = snapshot.get(&type_url);
        if current.is_none() && self.warned.insert(type_url.clone()) {
            warn!(
                stream = self.id,
                node = %self.node.id(),
                type_url = %type_url,
                "xdsd has no resources of this type; serving it as an empty type"
            );
        }
        let sub = self
            .subs
            .entry(type_url.clone())
            .or_insert_with(|| V::new(type_url.clone()));
        let (kind, change) = sub.handle_request(&request, current);
        let (stream, node) = (self.id, self.node.id());
        match &kind {
            RequestKind::Initial => debug!(
                stream,
                %node,
                type_url = %type_url,
                initial_versions = V::initial_versions(&request),
                "subscribe"
            ),
            RequestKind::Ack { nonce } => {
                self.stats.acked(true);
                debug!(stream, %node, type_url = %type_url, %nonce, "ACK")
            }
            RequestKind::Nack {
                nonce,
                rejected_version,
                message,
            } => {
                self.stats.acked(false);
                warn!(
                    stream,
                    %node,
                    type_url = %type_url,
                    nonce = %nonce,
                    rejected_version = rejected_version.as_deref().unwrap_or(""),
                    error = %message,
                    "NACK"
                )
            }
            RequestKind::Update => {
                debug!(stream, %node, type_url = %type_url, "subscription update")
            }
            RequestKind::Stale { nonce } => {
                debug!(stream, %node, type_url = %type_url, %nonce, "stale request ignored")
            }
        }
        // Registered before the next snapshot is read, so no change can slip between the two.
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
    async fn flush(&mut self, tx: &Sender<V>) -> Result<(), ()> {
        if !self.subs.values().any(|s| s.has_pending()) {
            return Ok(());
        }
        let mut order: Vec<Arc<str>> = self.subs.keys().cloned().collect();
        order.sort_by(|a, b| (types::push_rank(a), a).cmp(&(types::push_rank(b), b)));
        let snapshot = self.store.snapshot();
        for type_url in order {
            let Some(sub) = self.subs.get_mut(&type_url) else {
                continue;
            };
            let Some(response) = sub.poll_response(snapshot.get(&type_url), &mut self.nonces)
            else {
                continue;
            };
            let (version, resources, removed, nonce) = V::describe(&response);
            debug!(
                stream = self.id,
                node = %self.node.id(),
                type_url = %type_url,
                version,
                resources,
                removed,
                nonce,
                "push"
            );
            self.stats.sent(resources, removed);
            // A changed resource may need others sent again for the client to finish warming it
            // (an updated EDS cluster needs its endpoints): they come later in push order.
            for (dep_type, dep_name) in V::updated(&response).iter().flat_map(|r| r.dependents()) {
                if let Some(dep) = self.subs.get_mut(dep_type) {
                    dep.resend(dep_name);
                }
            }
            tx.send(Ok(response.into())).await.map_err(|_| ())?;
        }
        Ok(())
    }
}
