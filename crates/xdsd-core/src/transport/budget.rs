//! Bytes held for requests still being received. A gRPC message is buffered whole before it is
//! decoded, so a client that sends most of a large message and stops holds that much of xdsd's
//! memory; many streams (or connections) doing so would hold it many times. Each stream's request
//! body is metered: the bytes of its unfinished message are charged to its connection's budget
//! and to the server's, and given back when the message is complete or the stream ends. A
//! message that would go over either budget ends its stream with RESOURCE_EXHAUSTED.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::Frame;
use tonic::Status;
use tracing::warn;

/// Bytes charged against a limit.
#[derive(Debug, Default)]
pub(crate) struct Budget {
    used: AtomicUsize,
    /// Whether a breach was logged (once per connection, once per run of breaches of the
    /// server's budget).
    warned: AtomicBool,
}

impl Budget {
    /// Charges `n` unless that goes over `limit`.
    pub(crate) fn take(&self, n: usize, limit: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|&total| total <= limit)
            })
            .is_ok()
    }

    pub(crate) fn give(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::AcqRel);
    }

    /// Bytes charged now.
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

/// Where a stream's unfinished request bytes are charged, and the limits.
#[derive(Clone)]
pub(crate) struct Charges {
    pub(crate) connection: Arc<Budget>,
    pub(crate) connection_limit: usize,
    pub(crate) server: Arc<Budget>,
    pub(crate) server_limit: usize,
}

/// Where the gRPC framing of a request body stands.
#[derive(Debug, Default)]
struct Framing {
    /// Bytes of the current message's 5-byte header seen so far.
    header: [u8; 5],
    header_len: usize,
    /// Bytes of the current message's body still to come.
    remaining: usize,
}

impl Framing {
    /// Takes in `data`; returns the bytes of the message unfinished at its end (header
    /// included), counting from `before` at its start.
    fn feed(&mut self, mut data: &[u8], before: usize) -> usize {
        let mut unfinished = before;
        while !data.is_empty() {
            if self.header_len < 5 {
                let n = (5 - self.header_len).min(data.len());
                self.header[self.header_len..self.header_len + n].copy_from_slice(&data[..n]);
                self.header_len += n;
                data = &data[n..];
                unfinished += n;
                if self.header_len == 5 {
                    let len = u32::from_be_bytes([
                        self.header[1],
                        self.header[2],
                        self.header[3],
                        self.header[4],
                    ]);
                    self.remaining = len as usize;
                }
            } else {
                let n = self.remaining.min(data.len());
                self.remaining -= n;
                data = &data[n..];
                unfinished += n;
            }
            if self.header_len == 5 && self.remaining == 0 {
                // The message is complete: it is decoded at once, nothing of it stays.
                self.header_len = 0;
                unfinished = 0;
            }
        }
        unfinished
    }
}

/// A request body whose unfinished message is charged to [`Charges`].
pub(crate) struct Metered<B> {
    inner: B,
    charges: Charges,
    framing: Framing,
    /// Bytes charged now: the unfinished message's.
    held: usize,
    peer: Option<std::net::SocketAddr>,
}

impl<B> Metered<B> {
    pub(crate) fn new(inner: B, charges: Charges, peer: Option<std::net::SocketAddr>) -> Self {
        Metered {
            inner,
            charges,
            framing: Framing::default(),
            held: 0,
            peer,
        }
    }

    fn release(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        self.charges.connection.give(n);
        self.charges.server.give(n);
        self.held -= n;
    }

    /// Charges `n` more bytes, or says which budget they would go over.
    fn charge(&mut self, n: usize) -> Result<(), Status> {
        let c = &self.charges;
        if !c.connection.take(n, c.connection_limit) {
            if !c.connection.warned.swap(true, Ordering::Relaxed) {
                warn!(peer = ?self.peer, limit = c.connection_limit, "a connection's unfinished requests reached their limit (--max-buffered-request-bytes): ending its streams that send more (logged once per connection)");
            }
            return Err(Status::resource_exhausted(format!(
                "this connection's unfinished requests hold {} bytes, and this one would take \
                 more than the {} a connection may (its max buffered request bytes)",
                c.connection.used(),
                c.connection_limit
            )));
        }
        if !c.server.take(n, c.server_limit) {
            c.connection.give(n);
            if !c.server.warned.swap(true, Ordering::Relaxed) {
                warn!(limit = c.server_limit, "unfinished requests of all connections reached their limit (--max-buffered-request-bytes-total): ending streams that send more until some finish");
            }
            return Err(Status::resource_exhausted(format!(
                "the server holds {} bytes of unfinished requests, and this one would take more \
                 than the {} it holds at most (its max buffered request bytes in total)",
                c.server.used(),
                c.server_limit
            )));
        }
        if c.server.used() < c.server_limit / 2 {
            c.server.warned.store(false, Ordering::Relaxed);
        }
        self.held += n;
        Ok(())
    }
}

impl<B> Drop for Metered<B> {
    fn drop(&mut self) {
        let held = self.held;
        self.release(held);
    }
}

impl<B> http_body::Body for Metered<B>
where
    B: http_body::Body<Data = Bytes, Error = Status> + Unpin,
{
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        let frame = match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            other => return other,
        };
        if let Some(data) = frame.data_ref() {
            let unfinished = this.framing.feed(data, this.held);
            if unfinished > this.held {
                if let Err(status) = this.charge(unfinished - this.held) {
                    return Poll::Ready(Some(Err(status)));
                }
            } else {
                let done = this.held - unfinished;
                this.release(done);
            }
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The resource names a stream's session subscribes to, charged to its connection and to the
/// server as the subscription grows, given back as it shrinks and when the stream ends.
pub(crate) struct NameCharge {
    connection: Arc<Budget>,
    connection_limit: usize,
    server: Arc<Budget>,
    server_limit: usize,
    held: usize,
}

impl NameCharge {
    pub(crate) fn new(
        connection: Arc<Budget>,
        connection_limit: usize,
        server: Arc<Budget>,
        server_limit: usize,
    ) -> NameCharge {
        NameCharge {
            connection,
            connection_limit,
            server,
            server_limit,
            held: 0,
        }
    }

    /// Brings the charge to `names`; an error (RESOURCE_EXHAUSTED) if that goes over a limit.
    pub(crate) fn set(&mut self, names: usize) -> Result<(), Status> {
        // Most requests (ACKs) leave the subscription as it was: no shared counter is touched.
        if names == self.held {
            return Ok(());
        }
        if names < self.held {
            let n = self.held - names;
            self.connection.give(n);
            self.server.give(n);
            self.held = names;
            return Ok(());
        }
        let n = names - self.held;
        if !self.connection.take(n, self.connection_limit) {
            return Err(Status::resource_exhausted(format!(
                "the streams of this connection subscribe to more than {} resource names \
                 together (the server's max names per connection)",
                self.connection_limit
            )));
        }
        if !self.server.take(n, self.server_limit) {
            self.connection.give(n);
            if !self.server.warned.swap(true, Ordering::Relaxed) {
                warn!(limit = self.server_limit, "the streams of all connections subscribe to as many resource names as the server takes (--max-names-total): refusing larger subscriptions");
            }
            return Err(Status::resource_exhausted(format!(
                "the server's streams subscribe to {} resource names together, and this \
                 subscription would take them past {} (the server's max names in total)",
                self.server.used(),
                self.server_limit
            )));
        }
        self.held = names;
        Ok(())
    }
}

impl Drop for NameCharge {
    fn drop(&mut self) {
        let _ = self.set(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(len: usize) -> Vec<u8> {
        let mut m = vec![0u8];
        m.extend_from_slice(&(len as u32).to_be_bytes());
        m.extend(std::iter::repeat_n(7u8, len));
        m
    }

    #[test]
    fn only_the_unfinished_message_is_counted_across_frames() {
        let mut f = Framing::default();
        let two = [message(10), message(3)].concat();
        assert_eq!(f.feed(&two, 0), 0, "two whole messages");
        let big = message(100);
        assert_eq!(f.feed(&big[..2], 0), 2, "part of a header");
        assert_eq!(f.feed(&big[2..50], 2), 50);
        assert_eq!(f.feed(&big[50..], 50), 0, "complete");
        // The end of one message and the start of the next in one frame.
        let mut joined = message(4);
        joined.extend_from_slice(&message(20)[..8]);
        assert_eq!(f.feed(&joined[..3], 0), 3);
        assert_eq!(f.feed(&joined[3..], 3), 8);
        let mut fresh = Framing::default();
        assert_eq!(
            fresh.feed(&message(0), 0),
            0,
            "an empty message is complete at its header"
        );
    }

    #[test]
    fn a_budget_refuses_what_goes_over_its_limit_and_takes_it_back() {
        let b = Budget::default();
        assert!(b.take(60, 100));
        assert!(!b.take(41, 100));
        assert_eq!(b.used(), 60);
        b.give(60);
        assert!(b.take(100, 100));
    }
}
