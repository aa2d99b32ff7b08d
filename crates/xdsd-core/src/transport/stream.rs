//! Drives the session of one gRPC stream, SotW or incremental: ADS (any type, chosen per request)
//! or a per-type service (one fixed type). A loop: requests and store changes into the session,
//! its responses out, and the store told what the stream watches. The rules are in
//! `protocol::session`.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use futures::task::AtomicWaker;
use tonic::body::Body as RequestBody;
use tonic::Status;
use tracing::{debug, info, warn};

use super::body;
use super::budget::{Metered, NameCharge};
use super::conn::Access;
use super::context::ServerContext;
use super::fanout::Observed;
use super::observer::{
    Acked, Asked, Flavor, Nacked, RequestSeen, ResponseSent, Sent, StreamClosed, StreamOpened,
};
use super::options::SHUTDOWN_GRACE;
use super::picker::{Held, Hold};
use super::requests::{Boxed, Requests};
use super::status::{status_of, status_of_read_error};
use super::wire::{Body, DeltaWire, Pieces, SotwWire};
use crate::logsafe::shown;
use crate::protocol::delta::{DeltaMachine, DeltaResponse};
use crate::protocol::session::{Handled, Machine, Session};
use crate::protocol::sotw::{SotwMachine, SotwResponse};
use crate::protocol::RequestKind;
use crate::store::{Store, Watcher};
use envoy_types::pb::envoy::config::core::v3::Node;
use prost::Message as _;

/// A protocol flavor (SotW or delta; "variant" is xRFC TP2's word for a resource's versions by
/// parameters) as gRPC carries it: its machine, and how its requests and responses are
/// encoded.
pub(crate) trait Protocol:
    Machine<Request = Self::Message, Response: Pieces + Send + Unpin + 'static>
{
    /// The request message's name, for errors.
    const REQUEST: &'static str;
    /// SotW or delta, as observers are told.
    const FLAVOR: Flavor;
    type Message: prost::Message + Default + Send + 'static;
    type Wire: prost::Message + From<Self::Response> + Send + 'static;

    /// The response's version, as observers are told it.
    fn version(response: &Self::Response) -> &Arc<str>;
    /// The response, as the server's own observers are told it.
    fn sent(response: &Self::Response) -> Sent<'_>;
    /// The version a request says the client holds (SotW's `version_info`; "" for delta).
    fn held_version(request: &Self::Message) -> &str;
    /// What a request asks, as observers are told it; `wildcard` as the session found it.
    fn asked(request: &Self::Message, wildcard: Option<bool>) -> Asked<'_>;
    /// What a (re)subscribing request says its client holds of its type: SotW's `version_info`
    /// of a request that answers no response, delta's `initial_resource_versions`.
    fn held(request: &Self::Message) -> Option<Held<'_>>;
}

impl Protocol for SotwMachine {
    const REQUEST: &'static str = "DiscoveryRequest";
    const FLAVOR: Flavor = Flavor::Sotw;
    type Message = crate::protocol::sotw::SotwRequest;
    type Wire = SotwWire;

    fn version(response: &SotwResponse) -> &Arc<str> {
        &response.version_info
    }

    fn sent(response: &SotwResponse) -> Sent<'_> {
        Sent::Sotw(response)
    }

    fn held_version(request: &crate::protocol::sotw::SotwRequest) -> &str {
        request.version_info.as_str()
    }

    fn asked(request: &crate::protocol::sotw::SotwRequest, wildcard: Option<bool>) -> Asked<'_> {
        Asked::sotw(request, wildcard)
    }

    fn held(request: &crate::protocol::sotw::SotwRequest) -> Option<Held<'_>> {
        let version = request.version_info.as_str();
        (request.response_nonce.as_str().is_empty() && !version.is_empty())
            .then_some(Held::Version(version))
    }
}

impl Protocol for DeltaMachine {
    const REQUEST: &'static str = "DeltaDiscoveryRequest";
    const FLAVOR: Flavor = Flavor::Delta;
    type Message = crate::protocol::delta::DeltaRequest;
    type Wire = DeltaWire;

    fn version(response: &DeltaResponse) -> &Arc<str> {
        &response.system_version_info
    }

    fn sent(response: &DeltaResponse) -> Sent<'_> {
        Sent::Delta(response)
    }

    fn held_version(_: &crate::protocol::delta::DeltaRequest) -> &str {
        ""
    }

    fn asked(request: &crate::protocol::delta::DeltaRequest, wildcard: Option<bool>) -> Asked<'_> {
        Asked::delta(request, wildcard)
    }

    fn held(request: &crate::protocol::delta::DeltaRequest) -> Option<Held<'_>> {
        let versions = &request.initial_resource_versions;
        (!versions.is_empty()).then_some(Held::Resources(versions))
    }
}

pub(crate) type Sender<V> = body::Sender<<V as Machine>::Response>;

/// Why `flush` stopped before sending everything owed.
enum Halt {
    /// The client is gone.
    Gone,
    /// The server is shutting down.
    ShuttingDown,
    /// The subscription grew past a names budget (a glob collection's members added).
    Limit(Status),
}

/// The status of a stream ended by the server's shutdown, or by its connection's max age.
fn shutting_down(ctx: &ServerContext) -> Status {
    if *ctx.shutdown.borrow() {
        Status::unavailable("xdsd is shutting down")
    } else {
        Status::unavailable("the connection reached its max age (--max-connection-age): reconnect")
    }
}

/// How long a stream waits to hand over the status it ends with. A client that stopped reading
/// never takes it (HTTP/2 flow control holds back what was sent before), and the stream must end
/// all the same.
const FINAL_STATUS_WAIT: Duration = SHUTDOWN_GRACE;

/// The deadline a stream's timer is made with, before its session has one: never reached (the
/// timer is polled only while the session has a deadline).
const IDLE_TIMER: Duration = Duration::from_secs(365 * 24 * 3600);

/// How many requests a stream's loop takes in one turn when they are there already, before it
/// sends what they made owed: bounded, so that a client that keeps writing does not hold back
/// the store's changes (the loop takes requests and changes in turns).
const REQUESTS_PER_TURN: usize = 4;

/// What woke a stream's loop.
enum Event<M> {
    /// The server shuts down, or the connection is past its max age.
    Down,
    /// The client's next request; `None` when it ended its side.
    Request(Option<Boxed<M>>),
    /// The store changed something the stream watches.
    Changed,
    /// The session's deadline (`Session::poll_timeout`) came.
    Timeout,
}

/// One thing a stream's loop waits on, polled only when it may be ready: through a waker of its
/// own, which records that it fired before it wakes the stream's task. A wake-up of the task
/// polls what woke it rather than everything the stream waits on (a poll of the shutdown's two
/// watches takes two locks, a read of the request body the HTTP/2 connection's).
struct Gate {
    state: Arc<GateState>,
    /// `state` as a waker, made once.
    waker: Waker,
}

struct GateState {
    /// Its waker fired since it was last polled (or it was never polled).
    fired: AtomicBool,
    /// The stream's task, woken when it fires.
    task: AtomicWaker,
}

impl Wake for GateState {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.fired.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl Gate {
    fn new() -> Gate {
        let state = Arc::new(GateState {
            fired: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        let waker = Waker::from(state.clone());
        Gate { state, waker }
    }

    /// `poll`, with the gate's own waker, if it fired since the last poll (or was opened);
    /// else pending. Either way the task (`cx`) is woken when it fires.
    fn poll<T>(
        &self,
        cx: &mut Context<'_>,
        poll: impl FnOnce(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        // Registered before the flag is read: a wake in between is not lost.
        self.state.task.register(cx.waker());
        if !self.state.fired.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        poll(&mut Context::from_waker(&self.waker))
    }

    /// The next `poll` polls, fired or not (what it gates may be ready without waking anyone).
    fn open(&self) {
        self.state.fired.store(true, Ordering::Release);
    }
}

/// A future polled only once its waker fired (see [`Gate`]).
struct Gated<F> {
    gate: Gate,
    future: F,
}

impl<F> Gated<F> {
    fn new(future: F) -> Gated<F> {
        Gated {
            gate: Gate::new(),
            future,
        }
    }
}

impl<F: Future + Unpin> Future for Gated<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let future = &mut this.future;
        this.gate.poll(cx, |cx| Pin::new(future).poll(cx))
    }
}

/// The time of one turn of a stream's loop: read when first asked, and shared by every ACK and
/// response of the turn (a turn takes a change or a few requests and sends what they owe, some
/// microseconds of work); read again after anything that waited. Every ACK read the clock twice
/// and every response once or twice, for times a turn apart at most.
#[derive(Debug, Default)]
struct TurnClock(Option<Instant>);

impl TurnClock {
    /// The turn's time: the clock read now if it was not yet this turn.
    fn now(&mut self) -> Instant {
        *self.0.get_or_insert_with(Instant::now)
    }

    /// A new turn, or a wait: the next `now` reads the clock.
    fn reset(&mut self) {
        self.0 = None;
    }
}

struct Stream<V> {
    id: u64,
    /// Its subscribed names, charged to its connection and the server.
    names: NameCharge,
    /// What the server's observers keep of it (its client's record, a rollout's canary).
    observed: Observed,
    ctx: Arc<ServerContext>,
    session: Session<V>,
    watcher: Watcher,
    /// The store it reads: the server's, or a gated rollout's canary store for a canary.
    store: Store,
    /// Its connection (the watcher's group).
    connection: u64,
    /// Its answer was held once already ([`Stream::hold`]): never again.
    held: bool,
    /// The time of the loop's turn.
    clock: TurnClock,
}

/// A stream's driver: the stream is opened (its session, watcher and record made) when this is
/// called, and served by the future it returns. The future captures the stream's state in place
/// (an `async fn` would hold its arguments twice: as given, and as moved into its body).
pub(crate) fn run<V: Protocol>(
    ctx: Arc<ServerContext>,
    fixed: Option<Arc<str>>,
    peer: Option<SocketAddr>,
    access: Access,
    mut requests: Requests<Metered<RequestBody>, V::Message>,
    mut tx: Sender<V>,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let mut shutdown = ctx.shutdown.clone();
    let mut retired = access.retired.clone();
    let ended = access.retired.clone();
    let id = ctx.next_stream_id();
    let identity = access.identity();
    info!(stream = id, peer = ?peer, identity = ?identity, service = fixed.as_deref().unwrap_or("ADS"), flavor = V::NAME, "stream opened");
    let opened = StreamOpened {
        stream: id,
        peer,
        identity,
        type_url: fixed.as_deref(),
        flavor: V::FLAVOR,
    };
    let observed = ctx.observers.stream_opened(&opened);
    let mut s: Stream<V> = Stream {
        id,
        names: ctx.name_charge(access.names.clone()),
        observed,
        watcher: ctx.store.watcher_in(access.connection),
        session: Session::with_options(fixed, ctx.options.session.clone()),
        store: ctx.store.clone(),
        connection: access.connection,
        held: false,
        clock: TurnClock::default(),
        ctx,
    };
    access.apply(&mut s.session);
    async move {
        let ctx = s.ctx.clone();
        let s = &mut s;
        // The server's shutdown, awaited by one future for the stream's whole life (one made at
        // every turn of the loop and at every response cost as much as the rest of the turn's
        // bookkeeping). Once it is ready the stream ends: it is never polled again.
        // Or its connection's end, past its max age (see `ServerOptions::max_connection_age`).
        // Polled only once it fired (`Gated`): a poll of the two watches takes two locks.
        let down = async move {
            let retiring = async move {
                let gone = match retired.as_mut() {
                    Some(retired) => retired.wait_for(|r| *r).await.is_err(),
                    None => true,
                };
                if gone {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                _ = shutdown.wait_for(|down| *down) => {}
                () = retiring => {}
            }
        };
        tokio::pin!(down);
        let mut down = Gated::new(down);
        // The client's requests, read when its body's waker fired (a read takes the HTTP/2
        // connection's lock) or while they keep coming.
        let reading = Gate::new();
        // One timer for the stream's life, moved to the session's next deadline when it changes
        // (to a later one, as after each response, it only updates the timer's entry: a timer
        // made at each turn was registered and deregistered with the runtime's timers each
        // time). Polled only while the session has a deadline.
        let timer = tokio::time::sleep_until(tokio::time::Instant::now() + IDLE_TIMER);
        tokio::pin!(timer);
        // Which of requests and changes is looked at first, taking turns (as `select!` draws
        // its first branch): neither a client that keeps writing nor a store that keeps
        // changing holds the other back.
        let mut requests_first = false;
        let ending: Result<(), Status> = 'serve: loop {
            let deadline = s.session.poll_timeout().map(tokio::time::Instant::from_std);
            if let Some(at) = deadline {
                // Moved only to an earlier deadline, or once it fired: each response moves the
                // session's to a later one (its ACK wait), and a timer's move takes the runtime's
                // timer lock. A timer that fires before the session's deadline wakes the loop
                // once for nothing (`handle_timeout` does only what is due), then moves.
                if at < timer.deadline() || (at != timer.deadline() && timer.is_elapsed()) {
                    timer.as_mut().reset(at);
                }
            }
            requests_first = !requests_first;
            let event = {
                let watcher = &s.watcher;
                std::future::poll_fn(|cx| {
                    if Pin::new(&mut down).poll(cx).is_ready() {
                        return Poll::Ready(Event::Down);
                    }
                    let mut read = |cx: &mut Context<'_>| {
                        let polled = reading.poll(cx, |cx| requests.poll_boxed(cx));
                        if polled.is_ready() {
                            // More may be there already: read again next time.
                            reading.open();
                        }
                        polled.map(Event::Request)
                    };
                    if requests_first {
                        if let Poll::Ready(event) = read(cx) {
                            return Poll::Ready(event);
                        }
                    }
                    if watcher.poll_changed(cx).is_ready() {
                        return Poll::Ready(Event::Changed);
                    }
                    if !requests_first {
                        if let Poll::Ready(event) = read(cx) {
                            return Poll::Ready(event);
                        }
                    }
                    if deadline.is_some() && timer.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Event::Timeout);
                    }
                    Poll::Pending
                })
                .await
            };
            let mut drain = false;
            s.clock.reset();
            match event {
                Event::Down => break Err(shutting_down(&ctx)),
                Event::Request(Some(Ok(request))) => {
                    if s.hold_until_ready(&request, &mut down).await {
                        break Err(shutting_down(&ctx));
                    }
                    if let Err(status) = s.on_request(&request) {
                        break Err(status);
                    }
                    requests.recycle(request);
                    drain = true;
                }
                Event::Request(Some(Err(error))) => break s.read_failed(&error),
                Event::Request(None) => break Ok(()),
                Event::Changed => s.session.take_changes_from(&s.watcher),
                Event::Timeout => {
                    let now = s.clock.now();
                    s.session.handle_timeout_watched(now, &s.watcher)
                }
            }
            // Requests the connection has already read are taken in the same turn, a few at
            // most (the ACK of each type a push sent): one flush and one mute for them all.
            let mut taken = 1;
            while drain && taken < REQUESTS_PER_TURN {
                let polled = std::future::poll_fn(|cx| {
                    Poll::Ready(reading.poll(cx, |cx| requests.poll_boxed(cx)))
                })
                .await;
                let Poll::Ready(request) = polled else {
                    break;
                };
                // More may be there already: read again next time.
                reading.open();
                match request {
                    Some(Ok(request)) => {
                        if s.hold_until_ready(&request, &mut down).await {
                            break 'serve Err(shutting_down(&ctx));
                        }
                        if let Err(status) = s.on_request(&request) {
                            break 'serve Err(status);
                        }
                        requests.recycle(request);
                    }
                    Some(Err(error)) => break 'serve s.read_failed(&error),
                    None => break 'serve Ok(()),
                }
                taken += 1;
            }
            match s.flush(&mut tx, &mut down).await {
                Ok(()) => {}
                Err(Halt::Gone) => break Ok(()),
                Err(Halt::ShuttingDown) => break Err(shutting_down(&ctx)),
                Err(Halt::Limit(status)) => break Err(status),
            }
            // A limit broken by a change (a glob collection grown past the names budget).
            if let Some(error) = s.session.take_breach() {
                break Err(status_of(&error));
            }
            // Types whose response waits for the client's answer: their changes wait without
            // waking the stream, until the answer (or the wait's end) comes.
            s.session.mute_waiting(&mut s.watcher);
        };
        if let Err(status) = &ending {
            let retiring = ended.as_ref().is_some_and(|r| *r.borrow());
            // Every stream ends at shutdown, and every stream of a connection past its max age:
            // that is no client's fault, and not worth a warning each.
            if *ctx.shutdown.borrow() || retiring {
                info!(stream = s.id, node = %shown(s.session.node_id()), code = ?status.code(), reason = %shown(status.message()), "ending stream");
            } else {
                warn!(stream = s.id, node = %shown(s.session.node_id()), code = ?status.code(), reason = %shown(status.message()), "ending stream");
            }
            if tokio::time::timeout(FINAL_STATUS_WAIT, tx.end(status.clone()))
                .await
                .is_err()
            {
                debug!(stream = s.id, node = %shown(s.session.node_id()), "the client does not read: ending without a status");
            }
        }
        let closed = StreamClosed {
            stream: s.id,
            node_id: s.session.node_id(),
            status: ending.as_ref().err(),
        };
        ctx.observers.stream_closed(&mut s.observed, &closed);
        info!(stream = s.id, node = %shown(s.session.node_id()), "stream closed");
    }
}

impl<V: Protocol> Stream<V> {
    /// How the stream ends after reading its client's requests failed: with the status the
    /// error calls for, or without one (the client went away).
    fn read_failed(&self, error: &Status) -> Result<(), Status> {
        match status_of_read_error(error, self.ctx.options.max_request_bytes) {
            Some(status) => Err(status),
            None => {
                debug!(stream = self.id, node = %shown(self.session.node_id()), %error, "stream read failed");
                Ok(())
            }
        }
    }

    fn on_request(&mut self, request: &V::Message) -> Result<(), Status> {
        if self.session.node().is_none() {
            self.pick_store(<V as Machine>::node(request));
        }
        let snapshot = self.store.snapshot();
        // The watcher is told what the request watches before the next snapshot is read, so no
        // change can slip between the two (the contract is `protocol::watching`'s).
        let handled = self
            .session
            .handle_request_watched(request, &snapshot, &mut self.watcher)
            .map_err(|e| status_of(&e))?;
        let seen = RequestSeen {
            stream: self.id,
            one_shot: 0,
            node: self.session.shared_node(),
            identified: handled.identified,
            type_url: &handled.type_url,
            unknown_type: handled.unknown_type,
            kind: &handled.kind,
            held_version: match handled.kind {
                RequestKind::Initial => V::held_version(request),
                _ => "",
            },
            held_resources: match handled.kind {
                RequestKind::Initial => handled.initial_versions,
                _ => 0,
            },
            asked: Asked {
                repeats: handled.change.repeated,
                ..V::asked(request, handled.change.wildcard)
            },
        };
        self.ctx.observers.request(&mut self.observed, &seen)?;
        self.names.set(self.session.subscribed_names())?;
        self.log(&handled);
        self.tell_answer(&handled);
        Ok(())
    }

    /// Before a request is handled: waits out its hold ([`Stream::hold`]), if it has one, or
    /// the server's shutdown, whichever comes first. True if the shutdown came first (the
    /// stream ends; the request is not handled).
    async fn hold_until_ready(
        &mut self,
        request: &V::Message,
        down: &mut (impl Future + Unpin),
    ) -> bool {
        let Some(wait) = self.hold(request) else {
            return false;
        };
        self.clock.reset();
        tokio::select! {
            () = wait => false,
            _ = down => true,
        }
    }

    /// Before a request that says what its client holds is handled: what the stream's answer
    /// must wait for first, once per stream at most (a gated rollout's client outside the
    /// cohort that holds the candidate's versions: see `rollout`; the wait is the picker's
    /// to bound).
    fn hold(&mut self, request: &V::Message) -> Option<Pin<Box<dyn Future<Output = ()> + Send>>> {
        let picker = self.ctx.picker.as_ref()?;
        if self.held {
            return None;
        }
        let held = V::held(request)?;
        // A per-type service's request may leave the type out: it is the service's.
        let type_url = match (
            <V as Machine>::request_type_url(request).as_str(),
            self.session.fixed_type(),
        ) {
            ("", Some(fixed)) => &**fixed,
            (type_url, _) => type_url,
        };
        let node = Some(<V as Machine>::node(request))
            .filter(|n| self.session.node().is_none() && !n.is_empty());
        let wait = picker.hold(Hold {
            stream: self.id,
            store: &self.store,
            node,
            client: self.session.node(),
            type_url,
            held,
        })?;
        self.held = true;
        Some(wait)
    }

    /// Before the first request with a node is handled: a canary of a gated rollout reads the
    /// canary store (and watches it) from then on. Which store the stream serves is the
    /// driver's to choose; what the rollout records of its canaries is its observer's
    /// (`rollout::observer`).
    fn pick_store(&mut self, node: &[u8]) {
        let Some(picker) = &self.ctx.picker else {
            return;
        };
        if node.is_empty() {
            return;
        }
        let store = picker.store_for(node);
        if store.same_as(&self.store) {
            return;
        }
        self.store = store;
        self.watcher = self.store.watcher_in(self.connection);
        let id = Node::decode(node).map(|n| n.id).unwrap_or_default();
        info!(stream = self.id, node = %shown(&id), "served the store picked for its node (a gated rollout's canary state, or a store picker's)");
    }

    fn log(&self, handled: &Handled) {
        let (stream, node, type_url) = (self.id, self.session.node_id(), &handled.type_url);
        if handled.identified {
            let client = self.session.node();
            let user_agent = client.map(|n| n.user_agent_name.as_str()).unwrap_or("");
            let features = client
                .map(|n| n.client_features.join(","))
                .unwrap_or_default();
            info!(stream, node = %shown(node), user_agent = %shown(user_agent), features = %shown(&features), "node identified");
        }
        if handled.unknown_type {
            warn!(stream, node = %shown(node), type_url = %shown(type_url), "xdsd has no resources of this type; serving it as an empty type");
        }
        match &handled.kind {
            RequestKind::Initial => debug!(
                stream,
                node = %shown(node),
                type_url = %shown(type_url),
                initial_versions = handled.initial_versions,
                "subscribe"
            ),
            RequestKind::Ack { nonce } => {
                debug!(stream, node = %shown(node), type_url = %shown(type_url), nonce = %shown(nonce), "ACK")
            }
            RequestKind::Nack {
                nonce,
                rejected_version,
                message,
            } => {
                warn!(
                    stream,
                    node = %shown(node),
                    type_url = %shown(type_url),
                    nonce = %shown(nonce),
                    rejected_version = %shown(rejected_version.as_deref().unwrap_or("")),
                    error = %shown(message),
                    "NACK"
                )
            }
            RequestKind::Update => {
                debug!(stream, node = %shown(node), type_url = %shown(type_url), "subscription update")
            }
            RequestKind::Stale { nonce } => {
                debug!(stream, node = %shown(node), type_url = %shown(type_url), nonce = %shown(nonce), "stale request ignored")
            }
        }
    }

    /// Tells the observers of an ACK or a NACK.
    fn tell_answer(&mut self, handled: &Handled) {
        let (stream, node_id, type_url) = (self.id, self.session.node_id(), &handled.type_url);
        match &handled.kind {
            RequestKind::Ack { nonce } => {
                let acked = Acked {
                    stream,
                    node_id,
                    type_url,
                    nonce,
                    at: self.clock.now(),
                };
                self.ctx.observers.acked(&mut self.observed, &acked);
            }
            RequestKind::Nack {
                nonce,
                rejected_version,
                message,
            } => {
                let nacked = Nacked {
                    stream,
                    node_id,
                    type_url,
                    version: rejected_version.as_ref(),
                    nonce,
                    message,
                    at: self.clock.now(),
                };
                self.ctx.observers.nacked(&mut self.observed, &nacked);
            }
            RequestKind::Initial | RequestKind::Update | RequestKind::Stale { .. } => {}
        }
    }

    /// Sends every response owed, unless the client goes away or the server shuts down first: a
    /// send to a client that stopped reading blocks (HTTP/2 flow control) until one of the two.
    async fn flush(
        &mut self,
        tx: &mut Sender<V>,
        down: &mut (impl Future + Unpin),
    ) -> Result<(), Halt> {
        if !self.session.has_pending() {
            return Ok(());
        }
        let snapshot = self.store.snapshot();
        loop {
            let now = self.clock.now();
            let Some((type_url, response)) = self.session.poll_response(&snapshot, now) else {
                break;
            };
            // A glob collection's members grown past the connection's or the server's names
            // budget (`--max-names-per-connection`, `--max-names-total`): the response that
            // would carry them is not sent, and the stream ends, as for a request past them.
            self.names
                .set(self.session.subscribed_names())
                .map_err(Halt::Limit)?;
            let (version, resources, removed, nonce) = V::describe(&response);
            debug!(
                stream = self.id,
                node = %shown(self.session.node_id()),
                type_url = %shown(&type_url),
                version,
                resources,
                removed,
                nonce = nonce.as_str(),
                "push"
            );
            if let Some(size) = V::oversized(&response) {
                warn!(
                    stream = self.id,
                    node = %shown(self.session.node_id()),
                    type_url = %shown(&type_url),
                    size,
                    limit = self.ctx.options.session.max_response_bytes,
                    "response over the size limit: listeners and clusters go out whole, and so does one resource larger than the limit; the client may refuse it (gRPC clients take 4 MiB by default)"
                );
            }
            let sent = ResponseSent {
                stream: self.id,
                node_id: self.session.node_id(),
                type_url: &type_url,
                version: V::version(&response),
                nonce: nonce.as_str(),
                resources,
                removed,
                bytes: response.body_len(),
                generation: snapshot.generation(),
                response: V::sent(&response),
                at: now,
            };
            self.ctx.observers.response_sent(&mut self.observed, &sent);
            let waited = tokio::select! {
                biased;
                _ = &mut *down => return Err(Halt::ShuttingDown),
                sent = tx.send(response) => sent.map_err(|_| Halt::Gone)?,
            };
            if waited {
                // The client read slowly: the next response's time is read again.
                self.clock.reset();
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::sync::Mutex;

    use super::*;

    /// A future that counts its polls, keeps the last waker it was given and is ready once
    /// `ready` is set.
    #[derive(Default)]
    struct Probe {
        polls: AtomicUsize,
        ready: AtomicBool,
        waker: Mutex<Option<Waker>>,
    }

    impl Probe {
        fn poll(&self, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::Relaxed);
            *self.waker.lock().unwrap() = Some(cx.waker().clone());
            if self.ready.load(Ordering::Relaxed) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        }

        fn fire(&self) {
            self.ready.store(true, Ordering::Relaxed);
            if let Some(waker) = self.waker.lock().unwrap().take() {
                waker.wake();
            }
        }

        fn polls(&self) -> usize {
            self.polls.load(Ordering::Relaxed)
        }
    }

    /// A waker that counts its wakes.
    #[derive(Default)]
    struct Task(AtomicUsize);

    impl Wake for Task {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_gate_polls_what_it_gates_once_at_first_then_only_when_it_fired_or_was_opened() {
        let task = Arc::new(Task::default());
        let waker = Waker::from(task.clone());
        let mut cx = Context::from_waker(&waker);
        let probe = Probe::default();
        let gate = Gate::new();
        assert!(gate.poll(&mut cx, |cx| probe.poll(cx)).is_pending());
        assert_eq!(probe.polls(), 1, "polled once, to register its waker");
        for _ in 0..3 {
            assert!(gate.poll(&mut cx, |cx| probe.poll(cx)).is_pending());
        }
        assert_eq!(probe.polls(), 1, "not polled again before it fired");
        gate.open();
        assert!(gate.poll(&mut cx, |cx| probe.poll(cx)).is_pending());
        assert_eq!(probe.polls(), 2, "polled once opened");
        probe.fire();
        assert_eq!(
            task.0.load(Ordering::Relaxed),
            1,
            "its firing woke the task"
        );
        assert!(gate.poll(&mut cx, |cx| probe.poll(cx)).is_ready());
        assert_eq!(probe.polls(), 3);
    }

    #[test]
    fn a_gated_future_wakes_the_task_that_polled_it_last() {
        let (first, second) = (Arc::new(Task::default()), Arc::new(Task::default()));
        let probe = Arc::new(Probe::default());
        let mut gated = Gated::new(Box::pin({
            let probe = probe.clone();
            std::future::poll_fn(move |cx| probe.poll(cx))
        }));
        let waker = Waker::from(first.clone());
        assert!(Pin::new(&mut gated)
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        let waker = Waker::from(second.clone());
        assert!(Pin::new(&mut gated)
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        assert_eq!(probe.polls(), 1);
        probe.fire();
        assert_eq!(first.0.load(Ordering::Relaxed), 0);
        assert_eq!(second.0.load(Ordering::Relaxed), 1);
        assert!(Pin::new(&mut gated)
            .poll(&mut Context::from_waker(&waker))
            .is_ready());
    }
}
