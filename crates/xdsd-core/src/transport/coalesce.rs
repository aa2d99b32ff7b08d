//! Writes to one connection gathered into few system calls.
//!
//! A change wakes every stream watching it; each stream hands its response to HTTP/2, which
//! wakes the connection's task, and tokio runs a task just woken next on the same core. So a
//! connection wrote each stream's response as it came, one system call per stream, and the
//! client read each with its own `read`: about one system call per stream and change on each
//! side, a fifth of xdsd's time and more of the client's. Three things gather them:
//! - the store wakes the streams of one connection one after another (`WatchIndex::notify`);
//! - [`Coalesced`] keeps the small writes of a turn of the connection's task and, at its first
//!   flush, lets the tasks already queued run first (it wakes its own task and returns
//!   `Pending`, which tokio takes as a yield), so the connection's other streams add their
//!   responses meanwhile; not while tasks wait in the runtime's global queue
//!   ([`runtime_keeps_up`]);
//! - it tells h2 it takes no vectored writes, so h2 copies data frames of up to 1 KiB into its
//!   own buffer and writes a turn's frames together, instead of flushing after each frame of
//!   256 bytes or more (`is_write_vectored`).
//!
//! Large writes go out at once, after what is kept, in one vectored write. A connection that is
//! alone costs one extra turn of its task per write. S1 at 10,000 streams on 100 connections:
//! about 3,000 system calls per change instead of 10,000, and a third less CPU.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Writes at least this long are not copied: they go out after what is kept.
const DIRECT_BYTES: usize = 4 * 1024;
/// The most a connection keeps; past it, what is kept is written before more is taken.
const MAX_KEPT_BYTES: usize = 64 * 1024;
/// A buffer larger than this is given back once written (idle connections hold none).
const KEEP_CAPACITY: usize = 4 * 1024;

/// Whether a connection may yield before it writes: not when tasks wait in the runtime's
/// global queue. Under sustained load (S5's churn) the workers' own queues overflow into it,
/// and a connection task that yielded could wait there behind thousands of streams, holding
/// its writes and the requests it reads: convergence went from about 150 ms to seconds. Then
/// the connection writes at once, as every task that wakes it is queued anyway.
fn runtime_keeps_up() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|runtime| runtime.metrics().global_queue_depth() == 0)
}

/// A connection whose small writes are kept until its next flush, and whose flush first lets
/// the tasks already queued run once.
pub(crate) struct Coalesced<T> {
    io: T,
    /// Bytes taken and not yet written: `kept[written..]`.
    kept: Vec<u8>,
    written: usize,
    /// Whether the flush under way already yielded once.
    yielded: bool,
}

impl<T> Coalesced<T> {
    pub(crate) fn new(io: T) -> Coalesced<T> {
        Coalesced {
            io,
            kept: Vec::new(),
            written: 0,
            yielded: false,
        }
    }

    pub(crate) fn get_ref(&self) -> &T {
        &self.io
    }

    fn pending(&self) -> usize {
        self.kept.len() - self.written
    }

    /// Marks `n` more kept bytes written; the buffer is emptied (or given back) once all are.
    fn advance(&mut self, n: usize) {
        self.written += n;
        if self.written >= self.kept.len() {
            self.written = 0;
            if self.kept.capacity() > KEEP_CAPACITY {
                self.kept = Vec::new();
            } else {
                self.kept.clear();
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> Coalesced<T> {
    /// Writes everything kept.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.pending() > 0 {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.kept[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.advance(n);
        }
        Poll::Ready(Ok(()))
    }

    /// Writes `bufs` (`total` bytes, at least one) after what is kept, in one vectored write
    /// where the connection takes them; returns how many bytes of `bufs` were written.
    fn poll_write_through(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        loop {
            let pending = self.pending();
            if pending == 0 {
                return Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
            }
            let mut slices = Vec::with_capacity(bufs.len() + 1);
            slices.push(IoSlice::new(&self.kept[self.written..]));
            slices.extend(bufs.iter().map(|b| IoSlice::new(b)));
            let n = ready!(Pin::new(&mut self.io).poll_write_vectored(cx, &slices))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.advance(n.min(pending));
            if n > pending {
                return Poll::Ready(Ok(n - pending));
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Coalesced<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Coalesced<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total == 0 {
            return Poll::Ready(Ok(0));
        }
        if total >= DIRECT_BYTES {
            return this.poll_write_through(cx, bufs);
        }
        if this.pending() + total > MAX_KEPT_BYTES {
            ready!(this.poll_drain(cx))?;
        }
        for b in bufs {
            this.kept.extend_from_slice(b);
        }
        Poll::Ready(Ok(total))
    }

    /// No, though it takes them: h2 writes a data frame's payload from the caller's buffer,
    /// chained after the frame's header, when it is over 256 bytes and the connection takes
    /// vectored writes (1 KiB otherwise), and it must write a chained frame before it takes the
    /// next frame: a flush per frame, and a system call per response. Told no, it copies the
    /// frames of up to 1 KiB (an endpoint update is a few hundred bytes) into its 16 KiB buffer,
    /// which it writes when full and at the end of its turn. Writes of a chained (larger) frame
    /// come as two calls, header and payload; the header is kept and goes out with the payload.
    fn is_write_vectored(&self) -> bool {
        false
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.pending() > 0 {
            if !this.yielded && runtime_keeps_up() {
                // Tokio queues a task that wakes itself behind the tasks already queued: the
                // other streams of this connection add their responses meanwhile.
                this.yielded = true;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            ready!(this.poll_drain(cx))?;
        }
        this.yielded = false;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// A connection that records each write it is given.
    #[derive(Default)]
    struct Recorder {
        writes: Vec<Vec<u8>>,
    }

    impl AsyncWrite for Recorder {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.get_mut().writes.push(buf.to_vec());
            Poll::Ready(Ok(buf.len()))
        }

        fn poll_write_vectored(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let all: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
            let n = all.len();
            self.get_mut().writes.push(all);
            Poll::Ready(Ok(n))
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn flush_now<T: AsyncWrite + Unpin>(c: &mut Coalesced<T>) -> Poll<io::Result<()>> {
        let waker = futures::task::noop_waker();
        Pin::new(c).poll_flush(&mut Context::from_waker(&waker))
    }

    #[tokio::test]
    async fn small_writes_before_a_flush_go_out_as_one_write_after_one_yield() {
        let mut c = Coalesced::new(Recorder::default());
        c.write_all(b"one ").await.unwrap();
        c.write_all(b"two").await.unwrap();
        assert!(c.get_ref().writes.is_empty(), "kept until the flush");
        assert!(flush_now(&mut c).is_pending(), "the first flush yields");
        c.write_all(b" three").await.unwrap();
        assert!(matches!(flush_now(&mut c), Poll::Ready(Ok(()))));
        assert_eq!(c.get_ref().writes, vec![b"one two three".to_vec()]);
        assert!(
            matches!(flush_now(&mut c), Poll::Ready(Ok(()))),
            "nothing kept: no yield"
        );
    }

    #[tokio::test]
    async fn a_connection_writes_at_once_while_tasks_wait_in_the_global_queue() {
        let runtime = tokio::runtime::Handle::current();
        let other = runtime.clone();
        // Spawned from outside the runtime: queued in its global queue until this test yields.
        std::thread::spawn(move || drop(other.spawn(async {})))
            .join()
            .unwrap();
        assert!(runtime.metrics().global_queue_depth() > 0);
        let mut c = Coalesced::new(Recorder::default());
        c.write_all(b"now").await.unwrap();
        assert!(matches!(flush_now(&mut c), Poll::Ready(Ok(()))), "no yield");
        assert_eq!(c.get_ref().writes, vec![b"now".to_vec()]);
    }

    #[tokio::test]
    async fn a_large_write_goes_out_at_once_after_what_is_kept() {
        let mut c = Coalesced::new(Recorder::default());
        c.write_all(b"head").await.unwrap();
        let large = vec![7u8; DIRECT_BYTES];
        c.write_all(&large).await.unwrap();
        let mut expected = b"head".to_vec();
        expected.extend_from_slice(&large);
        assert_eq!(c.get_ref().writes, vec![expected], "one vectored write");
        assert!(matches!(flush_now(&mut c), Poll::Ready(Ok(()))));
    }

    #[tokio::test]
    async fn a_connection_keeps_at_most_its_limit() {
        let mut c = Coalesced::new(Recorder::default());
        let piece = vec![1u8; DIRECT_BYTES - 1];
        let mut total = 0;
        while total <= MAX_KEPT_BYTES {
            c.write_all(&piece).await.unwrap();
            total += piece.len();
            assert!(c.pending() <= MAX_KEPT_BYTES);
        }
        assert!(
            !c.get_ref().writes.is_empty(),
            "written once the limit was reached"
        );
    }

    #[tokio::test]
    async fn shutdown_writes_what_is_kept_first() {
        let mut c = Coalesced::new(Recorder::default());
        c.write_all(b"last").await.unwrap();
        c.shutdown().await.unwrap();
        assert_eq!(c.get_ref().writes, vec![b"last".to_vec()]);
    }

    /// A connection that counts the writes that reach it.
    struct Counting<T> {
        io: T,
        writes: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    }

    impl<T: AsyncRead + Unpin> AsyncRead for Counting<T> {
        fn poll_read(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
        }
    }

    impl<T: AsyncWrite + Unpin> AsyncWrite for Counting<T> {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let this = self.get_mut();
            let written = Pin::new(&mut this.io).poll_write(cx, buf);
            if matches!(written, Poll::Ready(Ok(_))) {
                this.writes
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            written
        }

        fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.get_mut().io).poll_flush(cx)
        }

        fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
        }
    }

    /// Through h2 itself: responses of a few hundred bytes on many streams, handed over in one
    /// turn, leave in a few writes (one per frame when h2 chains payloads over 256 bytes).
    #[tokio::test]
    async fn h2_writes_the_small_responses_of_many_streams_together() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        const STREAMS: usize = 50;
        let (client_io, server_io) = tokio::io::duplex(1 << 20);
        let writes = Arc::new(AtomicUsize::new(0));
        let server_io = Coalesced::new(Counting {
            io: server_io,
            writes: writes.clone(),
        });
        let (done, finished) = tokio::sync::oneshot::channel::<()>();
        let counted = writes.clone();
        let server = tokio::spawn(async move {
            let mut conn = h2::server::handshake(server_io).await.unwrap();
            let mut responders = Vec::new();
            while responders.len() < STREAMS {
                let (_, respond) = conn.accept().await.unwrap().unwrap();
                responders.push(respond);
            }
            let before = counted.load(Ordering::Relaxed);
            for respond in &mut responders {
                let mut send = respond
                    .send_response(http::Response::new(()), false)
                    .unwrap();
                send.send_data(bytes::Bytes::from(vec![7u8; 300]), true)
                    .unwrap();
            }
            tokio::select! {
                _ = finished => {}
                _ = std::future::poll_fn(|cx| conn.poll_closed(cx)) => panic!("connection closed"),
            }
            counted.load(Ordering::Relaxed) - before
        });
        let (client, conn) = h2::client::handshake(client_io).await.unwrap();
        tokio::spawn(conn);
        let mut responses = Vec::new();
        let mut client = client;
        for _ in 0..STREAMS {
            client = client.ready().await.unwrap();
            let request = http::Request::post("http://xdsd/").body(()).unwrap();
            responses.push(client.send_request(request, true).unwrap().0);
        }
        for response in responses {
            let mut body = response.await.unwrap().into_body();
            let mut got = 0;
            while let Some(data) = body.data().await {
                got += data.unwrap().len();
            }
            assert_eq!(got, 300);
        }
        done.send(()).unwrap();
        let burst = server.await.unwrap();
        // 50 (at least one per frame) when h2 chains the payloads; here a buffer of h2's and the
        // end of its turn, and room for a control frame's write.
        assert!(
            burst <= STREAMS / 10,
            "{burst} writes for {STREAMS} responses handed over together"
        );
    }
}
