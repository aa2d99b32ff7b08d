//! The HTTP body of a stream's responses, written from the store's shared bytes: each response
//! the stream driver hands over becomes gRPC message chunks ([`Chunks`]), made one at a time as
//! HTTP/2 asks for them, and the stream ends with its status in the trailers. tonic's own
//! encoder would copy each whole response into a buffer per stream first: a client that stops
//! reading would then pin a copy of a response as large as the whole configuration.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use futures::channel::mpsc;
use futures::StreamExt as _;
use http::{HeaderMap, HeaderValue};
use http_body::Frame;
use tonic::Status;

use super::wire::{Chunks, Pieces};

/// What a stream's driver hands to its body: a response, or the status the stream ends with.
/// Boxed, so that the channel's node for the one in flight is small.
pub(crate) type Item<R> = Box<Result<R, Status>>;
/// The driver's end of the channel to its body. The channel holds two items (the driver hands
/// over a third response once the body took the first); it is futures' rather than tokio's,
/// whose idle channel keeps a block of 32 slots, about 800 bytes per stream against 250 (futures'
/// keeps no slots: a node per item queued).
pub(crate) type Sender<R> = mpsc::Sender<Item<R>>;

/// A channel from a stream's driver to its body, holding two items: a change that owes two
/// responses (a Cluster, and the endpoints Envoy warms it with) hands both over in one turn of
/// the driver (with one, the second waited for the body to take the first: one more wake-up of
/// the stream per change). Beyond them the next response is computed only when one was taken,
/// so a slow client holds at most the one being written and two computed responses plus its
/// coalesced dirty names (and one response in flight per type waits for its ACK anyway).
pub(crate) fn channel<R>() -> (Sender<R>, mpsc::Receiver<Item<R>>) {
    // Room for `1 + the number of senders` (one) items.
    mpsc::channel(1)
}

/// Hands `item` to the body once the channel has room; `Err` when the body is gone. Does not
/// wait for the body to take `item` itself (a sink's `send` would, waking the driver once more
/// per response).
pub(crate) async fn send<R>(tx: &mut Sender<R>, item: Item<R>) -> Result<(), mpsc::SendError> {
    std::future::poll_fn(|cx| tx.poll_ready(cx)).await?;
    tx.start_send(item)
}

/// A stream's response body: the responses received on a channel, then the trailers.
pub(crate) struct ResponseBody<R> {
    responses: mpsc::Receiver<Item<R>>,
    writing: Option<Chunks<R>>,
    ended: bool,
}

impl<R> ResponseBody<R> {
    pub(crate) fn new(responses: mpsc::Receiver<Item<R>>) -> ResponseBody<R> {
        ResponseBody {
            responses,
            writing: None,
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
            let status = match ready!(this.responses.poll_next_unpin(cx)).map(|item| *item) {
                Some(Ok(response)) => match Chunks::new(response) {
                    Ok(chunks) => {
                        this.writing = Some(chunks);
                        continue;
                    }
                    Err(len) => Status::resource_exhausted(format!(
                        "a response of {len} bytes is over gRPC's 4 GiB message limit"
                    )),
                },
                Some(Err(status)) => status,
                // The driver ended the stream without an error.
                None => Status::ok(""),
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
    use std::sync::Arc;

    use envoy_types::pb::envoy::service::discovery::v3::{
        DeltaDiscoveryResponse, DiscoveryResponse,
    };
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

    /// Collects a body: its data frames and its trailers.
    async fn collect<R: Pieces + Send + Unpin + 'static>(
        responses: Vec<R>,
        end: Option<Status>,
    ) -> (Vec<Bytes>, HeaderMap) {
        use futures::SinkExt as _;
        let (mut tx, rx) = mpsc::channel(responses.len() + 1);
        for r in responses {
            tx.send(Box::new(Ok(r))).await.unwrap();
        }
        if let Some(status) = end {
            tx.send(Box::new(Err(status))).await.unwrap();
        }
        drop(tx);
        let mut body = ResponseBody::new(rx);
        let mut chunks = Vec::new();
        let mut trailers = None;
        while let Some(frame) = body.frame().await {
            let frame = frame.unwrap();
            match frame.into_data() {
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

    #[tokio::test]
    async fn the_driver_hands_over_two_responses_and_a_third_once_the_body_took_one() {
        use futures::FutureExt as _;
        let (mut tx, rx) = channel::<SotwResponse>();
        let response = |n| Box::new(Ok(sotw(SotwResources::Some(Default::default()), n)));
        assert!(
            send(&mut tx, response(1)).now_or_never().is_some(),
            "the first goes at once"
        );
        assert!(
            send(&mut tx, response(2)).now_or_never().is_some(),
            "so does the second (a Cluster and the endpoints that warm it, in one turn)"
        );
        let mut pending = Box::pin(send(&mut tx, response(3)));
        assert!(
            (&mut pending).now_or_never().is_none(),
            "the third waits for the body"
        );
        let mut body = ResponseBody::new(rx);
        let frame = body.frame().await.expect("a frame").expect("data");
        assert!(frame.is_data(), "the first response is written");
        assert!(
            pending.now_or_never().expect("taken").is_ok(),
            "then the third goes"
        );
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
            resources: vec![resource("a", 10), resource("b", 5_000)],
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
