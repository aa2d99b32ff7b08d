//! A stream's requests, read from its HTTP body as gRPC messages. A message that arrives whole
//! in one DATA frame (nearly every xDS request) is decoded from that frame's bytes as they are;
//! only a message split across frames is gathered in a buffer, which is let go once the message
//! is whole. An idle stream holds no buffer (tonic's reader keeps one per stream, the size of
//! the largest request it read).

use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use tokio_stream::Stream;
use tonic::Status;

use super::status;

/// The 5-byte gRPC message header: a compression flag and the length.
const HEADER: usize = 5;

/// The messages of `B`, each decoded as an `M` named `what` in errors, at most `limit` bytes.
pub(crate) struct Requests<B, M> {
    body: B,
    /// What is left of the last DATA frame, when no message is being gathered.
    frame: Bytes,
    /// The start of a message whose end has not arrived.
    gathering: BytesMut,
    limit: usize,
    what: &'static str,
    ended: bool,
    /// The box of the last request the stream's loop handled, emptied, for the next one
    /// ([`Requests::recycle`]).
    spare: Option<Box<M>>,
    message: PhantomData<fn() -> M>,
}

impl<B, M> Requests<B, M> {
    pub(crate) fn new(body: B, what: &'static str, limit: usize) -> Requests<B, M> {
        Requests {
            body,
            frame: Bytes::new(),
            gathering: BytesMut::new(),
            limit,
            what,
            ended: false,
            spare: None,
            message: PhantomData,
        }
    }
}

/// The length of the message starting `buf`, once its header is there; errors as tonic's reader
/// gives them (`status::status_of_read_error` maps them for the client).
fn message_len(buf: &[u8], limit: usize) -> Result<Option<usize>, Status> {
    let Some(header) = buf.get(..HEADER) else {
        return Ok(None);
    };
    match header[0] {
        0 => {}
        1 => {
            return Err(Status::internal(
                "protocol error: received a compressed message, and this server takes none",
            ))
        }
        flag => {
            return Err(Status::internal(format!(
                "protocol error: received message with invalid compression flag: {flag} (valid flags are 0 and 1)"
            )))
        }
    }
    let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
    if len > limit {
        return Err(Status::out_of_range(format!(
            "Error, decoded message length too large: found {len} bytes, the limit is: {limit} bytes"
        )));
    }
    Ok(Some(len))
}

impl<B, M> Requests<B, M> {
    /// The next whole message's bytes, if one is there.
    fn take(&mut self) -> Result<Option<Bytes>, Status> {
        if self.gathering.is_empty() {
            if let Some(len) = message_len(&self.frame, self.limit)? {
                if self.frame.len() >= HEADER + len {
                    let message = self.frame.slice(HEADER..HEADER + len);
                    self.frame.advance(HEADER + len);
                    if self.frame.is_empty() {
                        // An empty slice still holds what it was cut from: the connection's
                        // read buffer, kilobytes that every idle stream would keep.
                        self.frame = Bytes::new();
                    }
                    return Ok(Some(message));
                }
            }
            if self.frame.is_empty() {
                return Ok(None);
            }
        }
        // Part of a message: gathered until it is whole.
        self.gathering.extend_from_slice(&self.frame);
        self.frame = Bytes::new();
        let Some(len) = message_len(&self.gathering, self.limit)? else {
            return Ok(None);
        };
        if self.gathering.len() < HEADER + len {
            return Ok(None);
        }
        self.gathering.advance(HEADER);
        let message = self.gathering.split_to(len).freeze();
        // What came after it is read as a frame of its own; the buffer goes with the message
        // (an empty remainder is dropped: it would keep the buffer alive).
        let rest = std::mem::take(&mut self.gathering);
        if !rest.is_empty() {
            self.frame = rest.freeze();
        }
        Ok(Some(message))
    }
}

impl<B, M> Requests<B, M>
where
    B: http_body::Body<Data = Bytes, Error = Status> + Unpin,
{
    /// The next message, decoded by `decode`; an error ends the requests.
    fn poll_message<T>(
        &mut self,
        cx: &mut Context<'_>,
        decode: impl FnOnce(Bytes) -> Result<T, prost::DecodeError>,
    ) -> Poll<Option<Result<T, Status>>> {
        loop {
            if self.ended {
                return Poll::Ready(None);
            }
            match self.take() {
                Ok(Some(message)) => {
                    let decoded = decode(message).map_err(|e| status::undecodable(self.what, &e));
                    return Poll::Ready(Some(decoded));
                }
                Ok(None) => {}
                Err(error) => {
                    self.ended = true;
                    return Poll::Ready(Some(Err(error)));
                }
            }
            match ready!(Pin::new(&mut self.body).poll_frame(cx)) {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.frame = data;
                    }
                }
                Some(Err(error)) => {
                    self.ended = true;
                    return Poll::Ready(Some(Err(error)));
                }
                None => {
                    self.ended = true;
                    if self.gathering.is_empty() && self.frame.is_empty() {
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(Some(Err(Status::internal(
                        "Unexpected EOF decoding stream.",
                    ))));
                }
            }
        }
    }
}

/// A request as a stream's loop takes it: the message and the error boxed, so that what the
/// loop moves from the read to the session is a pointer (a decoded request is some 300
/// bytes, a status some 180, each copied at every hand-over).
pub(crate) type Boxed<M> = Result<Box<M>, Box<Status>>;

impl<B, M> Requests<B, M>
where
    B: http_body::Body<Data = Bytes, Error = Status> + Unpin,
    M: prost::Message + Default,
{
    /// The next request, decoded in its box (see [`Boxed`]): the one the last request came in,
    /// when the loop gave it back ([`Requests::recycle`]), else a new one.
    pub(crate) fn poll_boxed(&mut self, cx: &mut Context<'_>) -> Poll<Option<Boxed<M>>> {
        let mut spare = self.spare.take();
        let polled = self.poll_message(cx, |message| {
            let mut request = spare.take().unwrap_or_default();
            request.merge(message)?;
            Ok(request)
        });
        // Not taken: nothing was read.
        self.spare = spare;
        polled.map(|polled| polled.map(|read| read.map_err(Box::new)))
    }

    /// Gives back the box of a request the loop has handled, for the next request to be
    /// decoded in: emptied now (nothing of the request is kept, not the received frame it was
    /// read from), kept until then (one allocation and one free less per request, for one
    /// empty request's room per stream).
    pub(crate) fn recycle(&mut self, mut request: Box<M>) {
        request.clear();
        self.spare = Some(request);
    }
}

impl<B, M> Stream for Requests<B, M>
where
    B: http_body::Body<Data = Bytes, Error = Status> + Unpin,
    M: prost::Message + Default,
{
    type Item = Result<M, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_message(cx, M::decode)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
    use http_body::Frame;
    use prost::Message;
    use tokio_stream::StreamExt;
    use tonic::Code;

    use super::*;

    /// A body that yields the given frames, then ends.
    struct Frames(VecDeque<Result<Bytes, Status>>);

    impl http_body::Body for Frames {
        type Data = Bytes;
        type Error = Status;

        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
            Poll::Ready(self.get_mut().0.pop_front().map(|f| f.map(Frame::data)))
        }
    }

    fn request(version: &str) -> DiscoveryRequest {
        DiscoveryRequest {
            version_info: version.into(),
            resource_names: vec!["a".into(), "b".into()],
            type_url: "t".into(),
            ..Default::default()
        }
    }

    fn framed(m: &impl Message) -> Vec<u8> {
        let body = m.encode_to_vec();
        let mut out = vec![0];
        out.extend_from_slice(&(body.len() as u32).to_be_bytes());
        out.extend_from_slice(&body);
        out
    }

    async fn read(frames: Vec<Vec<u8>>, limit: usize) -> Vec<Result<DiscoveryRequest, Status>> {
        let frames = frames.into_iter().map(|f| Ok(Bytes::from(f))).collect();
        Requests::<_, DiscoveryRequest>::new(Frames(frames), "DiscoveryRequest", limit)
            .collect()
            .await
    }

    #[tokio::test]
    async fn messages_are_read_whatever_the_frames_cut_them_into() {
        let messages: Vec<DiscoveryRequest> = (0..4).map(|i| request(&i.to_string())).collect();
        let stream: Vec<u8> = messages.iter().flat_map(framed).collect();
        // Every way of cutting the stream in two, and one byte per frame.
        for cut in 0..=stream.len() {
            let frames = vec![stream[..cut].to_vec(), stream[cut..].to_vec()];
            let read: Vec<DiscoveryRequest> = read(frames, 1024)
                .await
                .into_iter()
                .map(|r| r.expect("a request"))
                .collect();
            assert_eq!(read, messages, "cut at {cut}");
        }
        let bytes = stream.iter().map(|b| vec![*b]).collect();
        let read: Vec<DiscoveryRequest> = read(bytes, 1024)
            .await
            .into_iter()
            .map(|r| r.expect("a request"))
            .collect();
        assert_eq!(read, messages);
    }

    #[tokio::test]
    async fn a_message_over_the_limit_is_refused_from_its_header() {
        let big = framed(&request(&"v".repeat(100)));
        // Only the header arrives: the length alone refuses it.
        let read = read(vec![big[..HEADER].to_vec()], 50).await;
        assert_eq!(read.len(), 1);
        let error = read[0].as_ref().expect_err("refused");
        assert_eq!(error.code(), Code::OutOfRange);
        assert!(
            error.message().contains("the limit is: 50 bytes"),
            "{error:?}"
        );
    }

    #[tokio::test]
    async fn a_message_cut_short_by_the_end_of_the_stream_is_an_error() {
        let m = framed(&request("1"));
        let read = read(vec![m[..m.len() - 1].to_vec()], 1024).await;
        assert_eq!(read.len(), 1);
        assert_eq!(read[0].as_ref().expect_err("cut").code(), Code::Internal);
    }

    #[tokio::test]
    async fn a_compressed_or_badly_flagged_message_is_an_error() {
        for flag in [1u8, 7] {
            let mut m = framed(&request("1"));
            m[0] = flag;
            let read = read(vec![m], 1024).await;
            assert_eq!(read.len(), 1, "flag {flag}");
            assert_eq!(read[0].as_ref().expect_err("flag").code(), Code::Internal);
        }
    }

    #[tokio::test]
    async fn an_undecodable_message_is_invalid_argument() {
        let garbage = [0u8, 0, 0, 0, 2, 0xff, 0xff];
        let read = read(vec![garbage.to_vec()], 1024).await;
        let error = read[0].as_ref().expect_err("undecodable");
        assert_eq!(error.code(), Code::InvalidArgument);
    }

    #[tokio::test]
    async fn no_buffer_is_kept_once_a_split_message_is_whole() {
        let m = framed(&request("1"));
        let frames: VecDeque<Result<Bytes, Status>> = [m[..3].to_vec(), m[3..].to_vec()]
            .into_iter()
            .map(|f| Ok(Bytes::from(f)))
            .collect();
        let mut requests =
            Requests::<_, DiscoveryRequest>::new(Frames(frames), "DiscoveryRequest", 1024);
        let first = requests.next().await.expect("one").expect("a request");
        assert_eq!(first, request("1"));
        assert_eq!(requests.gathering.capacity(), 0);
        assert!(requests.frame.is_empty());
        assert!(requests.next().await.is_none());
    }

    #[tokio::test]
    async fn an_idle_stream_holds_nothing_of_the_frames_it_read() {
        let m = framed(&request("1"));
        let frame = Bytes::from(m);
        let mut requests = Requests::<_, DiscoveryRequest>::new(
            Frames(VecDeque::from([Ok(frame.clone())])),
            "DiscoveryRequest",
            1024,
        );
        let first = requests.next().await.expect("one").expect("a request");
        assert_eq!(first, request("1"));
        drop(first);
        let mut frame = frame;
        assert!(
            frame.is_unique(),
            "the reader let go of the frame once its message was read"
        );
        frame.clear();
        assert!(requests.next().await.is_none());
    }

    /// The requests of `frames` as the stream's loop reads them: each decoded in its box,
    /// given back once handled when `recycle`; and the address of each box.
    async fn read_boxed<M: prost::Message + Default + Clone>(
        frames: Vec<Bytes>,
        recycle: bool,
    ) -> Vec<(M, usize)> {
        let frames = frames.into_iter().map(Ok).collect();
        let mut requests = Requests::<_, M>::new(Frames(frames), "M", 1 << 20);
        let mut read = Vec::new();
        while let Some(request) = std::future::poll_fn(|cx| requests.poll_boxed(cx)).await {
            let request = request.expect("a request");
            let at = &*request as *const M as usize;
            read.push(((*request).clone(), at));
            if recycle {
                requests.recycle(request);
            }
        }
        read
    }

    /// `messages` framed, read afresh and through one recycled box: the same requests, each
    /// after the first decoded in the first one's box. Then a box given back keeps nothing of
    /// its request: emptied (`spare` checks what else it must not keep), not holding the frame
    /// it was read from (the requests read first hold slices of the same frames).
    async fn a_recycled_box_reads_as_afresh<P, M>(messages: &[P], spare: impl FnOnce(&M))
    where
        P: Message,
        M: Message + Default + Clone + PartialEq + std::fmt::Debug,
    {
        let frames: Vec<Bytes> = messages.iter().map(|m| Bytes::from(framed(m))).collect();
        let afresh = read_boxed::<M>(frames.clone(), false).await;
        let recycled = read_boxed::<M>(frames.clone(), true).await;
        assert_eq!(afresh.len(), messages.len());
        for (i, ((fresh, _), (again, _))) in afresh.iter().zip(&recycled).enumerate() {
            assert_eq!(again, fresh, "request {i}");
            assert_eq!(*again, M::decode(&frames[i][HEADER..]).unwrap());
        }
        assert!(
            recycled.windows(2).all(|w| w[0].1 == w[1].1),
            "every request after the first was decoded in the first one's box"
        );
        drop((afresh, recycled));
        let frame = frames.into_iter().next().expect("a frame");
        let mut requests =
            Requests::<_, M>::new(Frames(VecDeque::from([Ok(frame.clone())])), "M", 1 << 20);
        let first = std::future::poll_fn(|cx| requests.poll_boxed(cx))
            .await
            .expect("one")
            .expect("a request");
        requests.recycle(first);
        let kept = requests.spare.as_deref().expect("kept");
        assert_eq!(kept, &M::default(), "emptied");
        spare(kept);
        let mut frame = frame;
        assert!(frame.is_unique(), "the frame is not held by the spare box");
        frame.clear();
    }

    #[tokio::test]
    async fn a_request_decoded_in_the_box_of_the_last_one_is_the_request_decoded_afresh() {
        use crate::protocol::delta::DeltaRequest;
        use envoy_types::pb::envoy::config::core::v3::Node;
        use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
        use envoy_types::pb::google::rpc::Status as RpcStatus;
        // Each request sets fields the next lacks: nothing of one may show in the next.
        let messages = [
            DeltaDiscoveryRequest {
                node: Some(Node {
                    id: "n".into(),
                    ..Default::default()
                }),
                type_url: "t".into(),
                resource_names_subscribe: vec!["a".into(), "b".into()],
                initial_resource_versions: [("a".to_string(), "1".to_string())].into(),
                ..Default::default()
            },
            DeltaDiscoveryRequest {
                type_url: "t".into(),
                response_nonce: "1".into(),
                resource_names_unsubscribe: vec!["b".into()],
                error_detail: Some(RpcStatus {
                    code: 3,
                    message: "bad".into(),
                    details: Vec::new(),
                }),
                ..Default::default()
            },
            DeltaDiscoveryRequest {
                type_url: "t".into(),
                response_nonce: "2".into(),
                ..Default::default()
            },
            DeltaDiscoveryRequest::default(),
        ];
        a_recycled_box_reads_as_afresh::<_, DeltaRequest>(&messages, |_| ()).await;
    }

    #[tokio::test]
    async fn a_sotw_request_decoded_in_the_box_of_the_last_one_is_the_request_decoded_afresh() {
        use crate::protocol::sotw::SotwRequest;
        use envoy_types::pb::envoy::config::core::v3::Node;
        use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, ResourceLocator};
        use envoy_types::pb::google::rpc::Status as RpcStatus;
        // Each request sets fields the next lacks: nothing of one may show in the next.
        let messages = [
            DiscoveryRequest {
                version_info: "3".into(),
                node: Some(Node {
                    id: "n".into(),
                    ..Default::default()
                }),
                resource_names: vec!["a".into(), "b".into()],
                resource_locators: vec![ResourceLocator {
                    name: "c".into(),
                    dynamic_parameters: [("env".to_string(), "prod".to_string())].into(),
                }],
                type_url: "t".into(),
                ..Default::default()
            },
            DiscoveryRequest {
                type_url: "t".into(),
                response_nonce: "1".into(),
                resource_names: vec!["a".into()],
                error_detail: Some(RpcStatus {
                    code: 3,
                    message: "bad".into(),
                    details: Vec::new(),
                }),
                ..Default::default()
            },
            DiscoveryRequest {
                version_info: "4".into(),
                type_url: "t".into(),
                response_nonce: "2".into(),
                ..Default::default()
            },
            DiscoveryRequest::default(),
        ];
        // Nor the room of its locators.
        a_recycled_box_reads_as_afresh::<_, SotwRequest>(&messages, |spare| {
            assert_eq!(spare.resource_locators.capacity(), 0, "no room kept")
        })
        .await;
    }

    #[test]
    fn a_delta_request_emptied_is_a_default_one_with_no_room_of_what_it_held() {
        use crate::protocol::delta::DeltaRequest;
        use envoy_types::pb::envoy::service::discovery::v3::{
            DeltaDiscoveryRequest, ResourceLocator,
        };
        let versions: std::collections::HashMap<String, String> = (0..100)
            .map(|i| (format!("n{i}"), "1".to_string()))
            .collect();
        let locator = ResourceLocator {
            name: "c".into(),
            dynamic_parameters: [("env".to_string(), "prod".to_string())].into(),
        };
        let mut request = DeltaRequest::from(DeltaDiscoveryRequest {
            type_url: "t".into(),
            resource_names_subscribe: vec!["a".into()],
            resource_names_unsubscribe: vec!["b".into()],
            initial_resource_versions: versions,
            response_nonce: "1".into(),
            resource_locators_subscribe: vec![locator.clone()],
            resource_locators_unsubscribe: vec![locator],
            ..Default::default()
        });
        request.clear();
        assert_eq!(request, DeltaRequest::default());
        assert_eq!(request.initial_resource_versions.capacity(), 0);
        assert_eq!(request.resource_locators_subscribe.capacity(), 0);
        assert_eq!(request.resource_locators_unsubscribe.capacity(), 0);
    }

    #[tokio::test]
    async fn a_body_error_is_passed_on_and_ends_the_stream() {
        let frames = VecDeque::from([Err(Status::unavailable("reset")), Ok(Bytes::new())]);
        let read: Vec<_> =
            Requests::<_, DiscoveryRequest>::new(Frames(frames), "DiscoveryRequest", 1024)
                .collect()
                .await;
        assert_eq!(read.len(), 1);
        assert_eq!(
            read[0].as_ref().expect_err("error").code(),
            Code::Unavailable
        );
    }
}
