//! The HTTP body of a stream's responses, written from the store's shared bytes: each response
//! the stream driver hands over becomes gRPC message chunks ([`Chunks`]), made one at a time as
//! HTTP/2 asks for them (small ones handed over together gathered into one chunk), and the
//! stream ends with its status in the trailers. tonic's own encoder would copy each whole
//! response into a buffer per stream first: a client that stops reading would then pin a copy
//! of a response as large as the whole configuration.

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{ready, Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue};
use http_body::Frame;
use tonic::Status;

use super::wire::{Chunks, Pieces, CHUNK_BYTES, MERGE_BELOW};

/// How many computed responses wait for the body at most: a change that owes two responses (a
/// Cluster, and the endpoints Envoy warms it with) hands both over in one turn of the driver
/// (with one, the second waited for the body to take the first: one more wake-up of the stream
/// per change). Beyond them the next response is computed only when one was taken, so a slow
/// client holds at most the one being written and two computed responses plus its coalesced
/// dirty names (and one response in flight per type waits for its ACK anyway).
const ROOM: usize = 2;

/// The body is gone (the client reset the stream, or the body ended): nothing handed over will
/// be written.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Gone;

/// What a stream's driver and its body share: the responses waiting to be written, in two slots
/// kept for the stream's life (no node allocated and freed per response, as a channel's queue
/// would, nor a box per response), the status the driver ends with, and each side's waker.
struct Shared<R> {
    state: Mutex<State<R>>,
}

struct State<R> {
    /// The responses waiting, oldest first: `slots[head]`, then the other.
    slots: [Option<R>; ROOM],
    head: usize,
    len: usize,
    /// The status the driver ended the stream with, written once the responses before it were.
    status: Option<Status>,
    /// The driver handed over its status, or was dropped: nothing more comes.
    ended: bool,
    /// The body ended or was dropped: nothing handed over is written.
    closed: bool,
    /// The body, waiting for a response.
    body: Option<Waker>,
    /// The driver, waiting for room.
    driver: Option<Waker>,
}

impl<R> Shared<R> {
    fn state(&self) -> MutexGuard<'_, State<R>> {
        // A poisoned lock only means a thread panicked holding it; the slots are still valid.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Registers `cx`'s waker in `slot`, unless the one there wakes the same task already.
fn register(slot: &mut Option<Waker>, cx: &Context<'_>) {
    match slot {
        Some(waker) if waker.will_wake(cx.waker()) => {}
        _ => *slot = Some(cx.waker().clone()),
    }
}

/// The driver's end, handing responses to its body ([`channel`]).
pub(crate) struct Sender<R> {
    shared: Arc<Shared<R>>,
}

/// The body's end ([`channel`]).
pub(crate) struct Receiver<R> {
    shared: Arc<Shared<R>>,
}

/// The hand-over from a stream's driver to its body: room for [`ROOM`] computed responses, then
/// the status the stream ends with. The driver waits for room, never for the body to take what
/// it handed over (that would wake the driver once more per response).
pub(crate) fn channel<R>() -> (Sender<R>, Receiver<R>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            slots: [None, None],
            head: 0,
            len: 0,
            status: None,
            ended: false,
            closed: false,
            body: None,
            driver: None,
        }),
    });
    (
        Sender {
            shared: shared.clone(),
        },
        Receiver { shared },
    )
}

impl<R> Sender<R> {
    /// Hands `item` over once there is room for it (a response, or the ending status, each
    /// takes one), under one lock; `Err` when the body is gone.
    fn poll_hand(
        &mut self,
        cx: &mut Context<'_>,
        item: &mut Option<Next<R>>,
    ) -> Poll<Result<(), Gone>> {
        let waker = {
            let mut state = self.shared.state();
            if state.closed {
                return Poll::Ready(Err(Gone));
            }
            if state.len >= ROOM {
                register(&mut state.driver, cx);
                return Poll::Pending;
            }
            match item.take() {
                Some(Next::Response(response)) => {
                    let at = (state.head + state.len) % ROOM;
                    state.slots[at] = Some(response);
                    state.len += 1;
                }
                Some(Next::End(status)) => state.end(status),
                None => {}
            }
            state.body.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
        Poll::Ready(Ok(()))
    }

    /// Hands `response` to the body once there is room; `Err` when the body is gone. `Ok(true)`
    /// when it had to wait for room (the driver's time of its turn is past, see
    /// `stream::TurnClock`), `Ok(false)` when it went at once.
    pub(crate) async fn send(&mut self, response: R) -> Result<bool, Gone> {
        let mut item = Some(Next::Response(response));
        let mut waited = false;
        let handed = std::future::poll_fn(|cx| {
            let polled = self.poll_hand(cx, &mut item);
            waited |= polled.is_pending();
            polled
        })
        .await;
        handed.map(|()| waited)
    }

    /// Ends the stream with `status`, written after the responses handed over before it, once
    /// there is room for it as for a response; `Err` when the body is gone.
    pub(crate) async fn end(&mut self, status: Status) -> Result<(), Gone> {
        let mut item = Some(Next::End(Some(status)));
        std::future::poll_fn(|cx| self.poll_hand(cx, &mut item)).await
    }
}

impl<R> State<R> {
    /// The driver ends the stream (with `status`, or OK): nothing more comes. The first end
    /// counts.
    fn end(&mut self, status: Option<Status>) {
        if !self.ended {
            self.ended = true;
            self.status = status;
        }
    }
}

impl<R> Drop for Sender<R> {
    /// A driver gone without a status ends the stream with OK, after what it handed over.
    fn drop(&mut self) {
        let waker = {
            let mut state = self.shared.state();
            state.end(None);
            state.body.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// What the body takes next.
enum Next<R> {
    Response(R),
    /// The driver ended the stream: with this status, or OK when it ended without one.
    End(Option<Status>),
}

impl<R> Receiver<R> {
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Next<R>> {
        let (next, waker) = {
            let mut state = self.shared.state();
            let head = state.head;
            if let Some(response) = state.slots[head].take() {
                state.head = (head + 1) % ROOM;
                state.len -= 1;
                (Next::Response(response), state.driver.take())
            } else if state.ended {
                (Next::End(state.status.take()), None)
            } else {
                register(&mut state.body, cx);
                return Poll::Pending;
            }
        };
        if let Some(waker) = waker {
            waker.wake();
        }
        Poll::Ready(next)
    }

    /// Nothing more is taken: the driver's next hand-over fails, and what waits is dropped.
    fn close(&mut self) {
        let (slots, waker) = {
            let mut state = self.shared.state();
            state.closed = true;
            state.len = 0;
            (std::mem::take(&mut state.slots), state.driver.take())
        };
        // Dropped outside the lock.
        drop(slots);
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl<R> Drop for Receiver<R> {
    fn drop(&mut self) {
        self.close();
    }
}

/// A stream's response body: the responses its driver hands over, then the trailers.
pub(crate) struct ResponseBody<R> {
    responses: Receiver<R>,
    writing: Option<Chunks<R>>,
    /// The status that ends the stream, met while small messages were gathered into a chunk:
    /// written after it.
    owed_end: Option<Status>,
    ended: bool,
}

impl<R> ResponseBody<R> {
    pub(crate) fn new(responses: Receiver<R>) -> ResponseBody<R> {
        ResponseBody {
            responses,
            writing: None,
            owed_end: None,
            ended: false,
        }
    }
}

/// The trailers that end a stream with `status` (`grpc-status`, `grpc-message`).
fn trailers(status: &Status) -> HeaderMap {
    let mut map = HeaderMap::new();
    if status.add_header(&mut map).is_err() {
        // A message that cannot be a header value: the code alone.
        map.clear();
        map.insert("grpc-status", HeaderValue::from(status.code() as i32));
    }
    map
}

/// The room a chunk of gathered messages starts with (freed once HTTP/2 wrote it).
const GATHER_ROOM: usize = 1024;

/// The status that ends a stream whose driver ended it with `status`, or was gone without one.
fn ended_by(status: Option<Status>) -> Status {
    status.unwrap_or_else(|| Status::ok(""))
}

/// The status that ends a stream whose response of `len` bytes cannot be a gRPC message.
fn too_large(len: usize) -> Status {
    Status::resource_exhausted(format!(
        "a response of {len} bytes is over gRPC's 4 GiB message limit"
    ))
}

impl<R: Pieces> ResponseBody<R> {
    /// One chunk of `first`, a small message, and the small messages (each under
    /// [`MERGE_BELOW`]) handed over after it (a changed Cluster and the endpoints that warm
    /// it), up to [`CHUNK_BYTES`]: one HTTP/2 DATA frame and one allocation for them all. A
    /// larger message, or the end, met on the way is kept for the next poll.
    fn gather(&mut self, first: Chunks<R>, cx: &mut Context<'_>) -> Bytes {
        let mut buf = BytesMut::with_capacity(first.message_len().max(GATHER_ROOM));
        first.write_whole(&mut buf);
        while let Poll::Ready(next) = self.responses.poll_next(cx) {
            match next {
                Next::Response(response) => match Chunks::new(response) {
                    Ok(chunks)
                        if chunks.message_len() < MERGE_BELOW
                            && buf.len() + chunks.message_len() <= CHUNK_BYTES =>
                    {
                        chunks.write_whole(&mut buf);
                    }
                    Ok(chunks) => {
                        self.writing = Some(chunks);
                        break;
                    }
                    Err(len) => {
                        self.owed_end = Some(too_large(len));
                        break;
                    }
                },
                Next::End(status) => {
                    self.owed_end = Some(ended_by(status));
                    break;
                }
            }
        }
        buf.freeze()
    }
}

impl<R: Pieces + Send + Unpin + 'static> http_body::Body for ResponseBody<R> {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        loop {
            if let Some(writing) = &mut this.writing {
                if let Some(chunk) = writing.next_chunk() {
                    return Poll::Ready(Some(Ok(Frame::data(chunk))));
                }
                this.writing = None;
            }
            if this.ended {
                return Poll::Ready(None);
            }
            let status = match this.owed_end.take() {
                Some(status) => status,
                None => match ready!(this.responses.poll_next(cx)) {
                    Next::Response(response) => match Chunks::new(response) {
                        Ok(chunks) if chunks.message_len() < MERGE_BELOW => {
                            let chunk = this.gather(chunks, cx);
                            return Poll::Ready(Some(Ok(Frame::data(chunk))));
                        }
                        Ok(chunks) => {
                            this.writing = Some(chunks);
                            continue;
                        }
                        Err(len) => too_large(len),
                    },
                    Next::End(status) => ended_by(status),
                },
            };
            this.ended = true;
            this.responses.close();
            return Poll::Ready(Some(Ok(Frame::trailers(trailers(&status)))));
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended && self.writing.is_none()
    }
}

/// The response of a stream: gRPC headers and `body`.
pub(crate) fn response<R: Pieces + Send + Unpin + 'static>(
    body: ResponseBody<R>,
) -> http::Response<tonic::body::Body> {
    let mut response = http::Response::new(tonic::body::Body::new(body));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    response
}

#[cfg(test)]
mod tests {

    use envoy_types::pb::envoy::service::discovery::v3::{
        DeltaDiscoveryResponse, DiscoveryResponse,
    };
    use std::future::Future as _;

    use http_body_util::BodyExt;
    use prost::Message;

    use super::*;
    use crate::protocol::delta::DeltaResponse;
    use crate::protocol::sotw::{SotwResources, SotwResponse};
    use crate::store::{Resource, TypeSnapshot};
    use crate::types::CLUSTER;

    fn resource(name: &str, len: usize) -> Arc<Resource> {
        Arc::new(Resource::new(CLUSTER, name, Bytes::from(vec![b'x'; len])))
    }

    /// Collects a body: its data frames and its trailers, `responses` (then `end`) handed over
    /// as the body takes them.
    async fn collect<R: Pieces + Send + Unpin + 'static>(
        responses: Vec<R>,
        end: Option<Status>,
    ) -> (Vec<Bytes>, HeaderMap) {
        let (mut tx, rx) = channel();
        let driver = async move {
            for r in responses {
                tx.send(r).await.unwrap();
            }
            if let Some(status) = end {
                tx.end(status).await.unwrap();
            }
        };
        let read = async move { read_rest(&mut ResponseBody::new(rx)).await };
        futures::join!(driver, read).1
    }

    /// The rest of `body`: its data chunks, then its trailers.
    async fn read_rest<R: Pieces + Send + Unpin + 'static>(
        body: &mut ResponseBody<R>,
    ) -> (Vec<Bytes>, HeaderMap) {
        let mut chunks = Vec::new();
        let mut trailers = None;
        while let Some(frame) = body.frame().await {
            match frame.unwrap().into_data() {
                Ok(data) => chunks.push(data),
                Err(frame) => trailers = frame.into_trailers().ok(),
            }
        }
        (chunks, trailers.expect("trailers"))
    }

    /// The gRPC messages in `bytes`.
    fn messages(bytes: &[u8]) -> Vec<&[u8]> {
        let mut out = Vec::new();
        let mut rest = bytes;
        while !rest.is_empty() {
            assert_eq!(rest[0], 0, "not compressed");
            let len = u32::from_be_bytes(rest[1..5].try_into().unwrap()) as usize;
            out.push(&rest[5..5 + len]);
            rest = &rest[5 + len..];
        }
        out
    }

    fn sotw(resources: SotwResources, nonce: u64) -> SotwResponse {
        SotwResponse {
            type_url: CLUSTER.into(),
            version_info: "v1".into(),
            nonce: crate::protocol::Nonce::from(nonce),
            resources,
            encoding: Default::default(),
            updated: Default::default(),
            oversized: None,
            control_plane: true,
        }
    }

    fn empty(n: u64) -> SotwResponse {
        sotw(SotwResources::Some(Default::default()), n)
    }

    #[tokio::test]
    async fn the_driver_hands_over_two_responses_and_a_third_once_the_body_took_one() {
        use futures::FutureExt as _;
        let (mut tx, rx) = channel::<SotwResponse>();
        assert_eq!(
            tx.send(empty(1)).now_or_never(),
            Some(Ok(false)),
            "the first goes at once, without a wait"
        );
        assert_eq!(
            tx.send(empty(2)).now_or_never(),
            Some(Ok(false)),
            "so does the second (a Cluster and the endpoints that warm it, in one turn)"
        );
        let mut pending = Box::pin(tx.send(empty(3)));
        assert!(
            (&mut pending).now_or_never().is_none(),
            "the third waits for the body"
        );
        let mut body = ResponseBody::new(rx);
        let frame = body.frame().await.expect("a frame").expect("data");
        assert!(frame.is_data(), "the first response is written");
        assert_eq!(
            pending.now_or_never(),
            Some(Ok(true)),
            "then the third goes, and says it waited"
        );
    }

    /// The nonces of the gRPC messages in `chunks`, in order.
    fn nonces(chunks: &[Bytes]) -> Vec<String> {
        let bytes: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
        messages(&bytes)
            .into_iter()
            .map(|m| DiscoveryResponse::decode(m).unwrap().nonce)
            .collect()
    }

    #[tokio::test]
    async fn the_ending_status_waits_for_room_and_goes_after_the_responses_before_it() {
        use futures::FutureExt as _;
        let (mut tx, rx) = channel::<SotwResponse>();
        tx.send(empty(1)).now_or_never().unwrap().unwrap();
        tx.send(empty(2)).now_or_never().unwrap().unwrap();
        let mut end = Box::pin(tx.end(Status::permission_denied("no")));
        assert!(
            (&mut end).now_or_never().is_none(),
            "the status takes room as a response does"
        );
        let mut body = ResponseBody::new(rx);
        let mut chunks = vec![body.frame().await.unwrap().unwrap().into_data().unwrap()];
        end.now_or_never().expect("room").unwrap();
        let (rest, trailers) = read_rest(&mut body).await;
        chunks.extend(rest);
        assert_eq!(nonces(&chunks), ["1", "2"], "both written, in order");
        assert_eq!(trailers.get("grpc-status").unwrap(), "7");
        assert!(http_body::Body::is_end_stream(&body));
        drop(body);
        assert_eq!(
            tx.send(empty(3)).now_or_never(),
            Some(Err(Gone)),
            "nothing goes after the end"
        );
    }

    #[tokio::test]
    async fn small_messages_handed_over_together_go_out_as_one_chunk_a_large_one_apart() {
        use futures::FutureExt as _;
        let (mut tx, rx) = channel::<SotwResponse>();
        tx.send(empty(1)).now_or_never().unwrap().unwrap();
        tx.send(empty(2)).now_or_never().unwrap().unwrap();
        let mut body = ResponseBody::new(rx);
        let data =
            |frame: Option<Result<Frame<Bytes>, Status>>| match frame.unwrap().unwrap().into_data()
            {
                Ok(data) => data,
                Err(_) => panic!("data"),
            };
        let first = data(body.frame().await);
        assert_eq!(
            nonces(std::slice::from_ref(&first)),
            ["1", "2"],
            "one chunk, both messages, in order"
        );
        // A small one, then one too large to gather: the small one's chunk, then the large
        // one's own chunks, then the status.
        let large = resource("large", MERGE_BELOW);
        tx.send(empty(3)).now_or_never().unwrap().unwrap();
        tx.send(sotw(SotwResources::Some(vec![large].into()), 4))
            .now_or_never()
            .unwrap()
            .unwrap();
        let third = data(body.frame().await);
        assert_eq!(nonces(std::slice::from_ref(&third)), ["3"]);
        tx.end(Status::permission_denied("no"))
            .now_or_never()
            .expect("room")
            .unwrap();
        let (rest, trailers) = read_rest(&mut body).await;
        assert!(rest.len() >= 2, "the large one in chunks of its own");
        assert_eq!(nonces(&rest), ["4"]);
        assert_eq!(trailers.get("grpc-status").unwrap(), "7");
    }

    #[tokio::test]
    async fn a_driver_gone_without_a_status_ends_the_stream_ok_after_what_it_handed_over() {
        use futures::FutureExt as _;
        let (mut tx, rx) = channel::<SotwResponse>();
        tx.send(empty(1)).now_or_never().unwrap().unwrap();
        drop(tx);
        let (chunks, trailers) = read_rest(&mut ResponseBody::new(rx)).await;
        assert_eq!(nonces(&chunks), ["1"]);
        assert_eq!(trailers.get("grpc-status").unwrap(), "0");
    }

    #[tokio::test]
    async fn a_body_gone_fails_the_driver_waiting_for_room_and_drops_what_waited() {
        use futures::FutureExt as _;
        let (mut tx, rx) = channel::<DeltaResponse>();
        let held = resource("held", 10);
        let response = |n| DeltaResponse {
            type_url: CLUSTER.into(),
            system_version_info: "v".into(),
            nonce: crate::protocol::Nonce::from(n),
            resources: vec![held.clone()].into(),
            whole: None,
            shared: None,
            removed: Vec::new(),
            removed_variants: Vec::new(),
            heartbeats: Vec::new(),
            unresolved: Vec::new(),
            encoding: Default::default(),
            oversized: None,
            control_plane: false,
        };
        tx.send(response(1)).now_or_never().unwrap().unwrap();
        tx.send(response(2)).now_or_never().unwrap().unwrap();
        assert_eq!(Arc::strong_count(&held), 3);
        let task = Arc::new(Woken::default());
        let waker = std::task::Waker::from(task.clone());
        let mut pending = Box::pin(tx.send(response(3)));
        assert!(pending
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        drop(rx);
        assert!(
            task.0.load(std::sync::atomic::Ordering::Relaxed),
            "the waiting driver is woken"
        );
        assert_eq!(
            pending.now_or_never(),
            Some(Err(Gone)),
            "and told the body is gone"
        );
        assert_eq!(
            Arc::strong_count(&held),
            1,
            "the responses that waited are dropped"
        );
    }

    /// A waker that records it was woken.
    #[derive(Default)]
    struct Woken(std::sync::atomic::AtomicBool);

    impl std::task::Wake for Woken {
        fn wake(self: Arc<Self>) {
            self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    #[tokio::test]
    async fn responses_are_written_as_grpc_messages_then_an_ok_status() {
        let small = resource("small", 10);
        let large = resource("large", 100_000);
        let list = vec![small.clone(), large.clone(), small.clone()];
        let all = TypeSnapshot::new(
            CLUSTER.into(),
            [
                (small.name().clone(), small.clone()),
                (large.name().clone(), large.clone()),
            ]
            .into_iter()
            .collect(),
        )
        .view(&crate::params::ParamSet::new());
        let (chunks, trailers) = collect(
            vec![
                sotw(SotwResources::Some(list.into()), 1),
                SotwResponse {
                    control_plane: false,
                    ..sotw(SotwResources::All(all), 2)
                },
            ],
            None,
        )
        .await;
        assert_eq!(trailers.get("grpc-status").unwrap(), "0");
        let bytes: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
        let decoded: Vec<DiscoveryResponse> = messages(&bytes)
            .into_iter()
            .map(|m| DiscoveryResponse::decode(m).unwrap())
            .collect();
        assert_eq!(decoded.len(), 2);
        assert_eq!(decoded[0].nonce, "1");
        assert_eq!(decoded[0].resources.len(), 3);
        assert_eq!(decoded[0].resources[1].value.len(), 100_000);
        assert_eq!(decoded[1].nonce, "2");
        assert_eq!(decoded[1].resources.len(), 2);
        assert!(decoded[0].control_plane.is_some());
        assert!(decoded[1].control_plane.is_none());
        // The large resource is not copied: it goes out as the store's own bytes.
        let shared = large.sotw_entry(Default::default());
        assert!(
            chunks.iter().any(|c| c.as_ptr() == shared.as_ptr()),
            "the large entry is a chunk of its own, shared"
        );
    }

    #[tokio::test]
    async fn a_delta_response_decodes_and_an_error_ends_the_stream_in_the_trailers() {
        let response = DeltaResponse {
            type_url: CLUSTER.into(),
            system_version_info: "v2".into(),
            nonce: crate::protocol::Nonce::from(9),
            resources: vec![resource("a", 10), resource("b", 5_000)].into(),
            removed: vec![Arc::from("gone")],
            whole: None,
            shared: None,
            removed_variants: Vec::new(),
            heartbeats: vec![resource("c", 1)],
            unresolved: vec![Arc::from("alias")],
            encoding: Default::default(),
            oversized: None,
            control_plane: true,
        };
        let unnamed = DeltaResponse {
            control_plane: false,
            ..response.clone()
        };
        let (chunks, trailers) = collect(
            vec![response, unnamed],
            Some(Status::permission_denied("no")),
        )
        .await;
        assert_eq!(trailers.get("grpc-status").unwrap(), "7");
        assert_eq!(trailers.get("grpc-message").unwrap(), "no");
        let bytes: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
        let messages = messages(&bytes);
        assert_eq!(messages.len(), 2);
        let second = DeltaDiscoveryResponse::decode(messages[1]).unwrap();
        assert!(second.control_plane.is_none());
        assert_eq!(second.removed_resources, ["gone"]);
        let decoded = DeltaDiscoveryResponse::decode(messages[0]).unwrap();
        assert_eq!(decoded.nonce, "9");
        assert_eq!(decoded.system_version_info, "v2");
        assert_eq!(decoded.removed_resources, ["gone"]);
        let names: Vec<&str> = decoded.resources.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "alias"]);
        assert!(decoded.control_plane.is_some());
    }

    #[tokio::test]
    async fn many_small_resources_are_coalesced_into_bounded_chunks() {
        let list: Vec<Arc<Resource>> = (0..2_000).map(|i| resource(&format!("r{i}"), 50)).collect();
        let (chunks, _) = collect(vec![sotw(SotwResources::Some(list.into()), 1)], None).await;
        assert!(
            chunks.len() > 1 && chunks.len() < 20,
            "{} chunks",
            chunks.len()
        );
        assert!(chunks
            .iter()
            .all(|c| c.len() <= super::super::wire::CHUNK_BYTES + COPY_SLACK));
        let bytes: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
        let decoded = DiscoveryResponse::decode(messages(&bytes)[0]).unwrap();
        assert_eq!(decoded.resources.len(), 2_000);
    }

    /// A chunk may go past the limit by the last small piece it took.
    const COPY_SLACK: usize = 1024;
}
