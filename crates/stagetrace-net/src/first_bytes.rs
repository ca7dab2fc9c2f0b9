//! [`FirstBytes`]: a byte stream that remembers when the first byte of the
//! next message arrived (the first read that returned data since the last
//! [`FirstBytes::take_first`]) and when the first byte of the next message
//! left (the first write, stamped just before the call that took it). The
//! WebSocket server stamps a request's first byte with it, the client a
//! request's first byte out and a response's first byte in
//! (`docs/clocks.md`: what happens before the first byte leaves and after it
//! arrives, each measured on one clock, stays out of the offset estimate).
//! The server also watches each response's writes
//! ([`FirstBytes::begin_send`]): the call of the last one is when the
//! server handed the kernel the whole response, the end of its own send
//! wait (`prev_tx_wait`, `docs/host.md`).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Wraps a stream; every read and write goes straight through.
#[derive(Debug)]
pub(crate) struct FirstBytes<S> {
    inner: S,
    first: Option<Instant>,
    first_write: Option<Instant>,
    /// The write that took the first byte returned (the kernel had it).
    written: Option<Instant>,
    /// The response being sent, when one is watched.
    send: Option<SendWatch>,
}

/// One response's writes, from [`FirstBytes::begin_send`] on.
#[derive(Clone, Copy, Debug, Default)]
struct SendWatch {
    /// The newest write that took bytes was called then (the clock read
    /// just before the call). Not its return: on one host the write wakes
    /// the reader, which can take the core before the writer's call
    /// returns, and a return stamp would count the reader's run as the
    /// writer's wait (measured: 1.5–2 ms on every other call of the demo,
    /// its downlink unchanged).
    last_call: Option<Instant>,
    /// A write found the socket's buffer full: from there the network sets
    /// the pace (flow control), so later returns are not the host's wait.
    paced: bool,
}

impl<S> FirstBytes<S> {
    pub(crate) fn new(inner: S) -> Self {
        FirstBytes {
            inner,
            first: None,
            first_write: None,
            written: None,
            send: None,
        }
    }

    /// Start watching the writes of one outgoing message (a server's
    /// response), forgetting any earlier one.
    pub(crate) fn begin_send(&mut self) {
        self.send = Some(SendWatch::default());
    }

    /// Stop watching: when the last write of the message watched since
    /// [`begin_send`](Self::begin_send) was called — the kernel was handed
    /// the whole message then — or, when a write had to wait for room in
    /// the socket's buffer, the call of the last write before that wait
    /// (what came after was paced by the network, not by this host).
    /// `None`: nothing was written, or nothing was watched.
    pub(crate) fn end_send(&mut self) -> Option<Instant> {
        self.send.take().and_then(|s| s.last_call)
    }

    /// When the first byte since the last call arrived (`None`: no byte
    /// since); the next byte read starts a new stamp.
    pub(crate) fn take_first(&mut self) -> Option<Instant> {
        self.first.take()
    }

    /// The wrapped stream.
    pub(crate) fn get_ref(&self) -> &S {
        &self.inner
    }

    /// When the first byte written since the last call left: a stamp taken
    /// just before the write that took it, so never after the byte left.
    pub(crate) fn take_first_write(&mut self) -> Option<Instant> {
        self.written = None;
        self.first_write.take()
    }

    /// When the write that took the first byte written since the last
    /// [`take_first_write`](Self::take_first_write) returned: the kernel
    /// had the byte by then. Read it before `take_first_write`, which
    /// clears it.
    pub(crate) fn written(&self) -> Option<Instant> {
        self.written
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for FirstBytes<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if this.first.is_none() && matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.first = Some(Instant::now());
        }
        r
    }
}

impl<S> FirstBytes<S> {
    /// The clock read before a write, only while the message's first write
    /// is still to come (a large frame takes many writes: one read each
    /// would be wasted) or a send is watched (a response is one or a few
    /// writes).
    fn before_write(&self) -> Option<Instant> {
        (self.first_write.is_none() || self.send.is_some()).then(Instant::now)
    }

    fn note_write(&mut self, before: Option<Instant>, r: &Poll<io::Result<usize>>) {
        let took = matches!(r, Poll::Ready(Ok(n)) if *n > 0);
        if self.first_write.is_none() && took {
            self.first_write = before;
            // One more clock read per message, not per write.
            self.written = before.map(|_| Instant::now());
        }
        if let Some(send) = &mut self.send {
            match r {
                Poll::Pending => send.paced = true,
                _ if took && !send.paced => send.last_call = before,
                _ => {}
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for FirstBytes<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let before = self.before_write();
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.note_write(before, &r);
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let before = self.before_write();
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.note_write(before, &r);
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn stamps_the_first_read_with_data_until_taken() {
        let (a, mut b) = tokio::io::duplex(64);
        let mut r = FirstBytes::new(a);
        assert_eq!(r.take_first(), None);
        let before = Instant::now();
        b.write_all(b"ab").await.unwrap();
        let mut buf = [0u8; 1];
        r.read_exact(&mut buf).await.unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
        r.read_exact(&mut buf).await.unwrap();
        let first = r.take_first().unwrap();
        // The first of the two reads, not the second.
        assert!(first >= before && first < before + std::time::Duration::from_millis(5));
        assert_eq!(r.take_first(), None);
        b.write_all(b"c").await.unwrap();
        r.read_exact(&mut buf).await.unwrap();
        assert!(r.take_first().unwrap() > first);
        // Writes: the stamp precedes the first write that took bytes.
        let before = Instant::now();
        r.write_all(b"xy").await.unwrap();
        let after = Instant::now();
        let written = r.written().unwrap();
        let w = r.take_first_write().unwrap();
        assert!(w >= before && w <= written && written <= after);
        assert_eq!(r.take_first_write(), None);
        assert_eq!(r.written(), None);
        // A message in two writes: the first write's return, not the last's.
        r.write_all(b"x").await.unwrap();
        let between = Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(5));
        r.write_all(b"y").await.unwrap();
        assert!(r.written().unwrap() <= between);
    }

    #[tokio::test]
    async fn a_watched_send_ends_at_its_last_write_or_where_the_buffer_filled() {
        let (a, mut b) = tokio::io::duplex(8);
        let mut w = FirstBytes::new(a);
        // Unwatched writes leave nothing to take.
        w.write_all(b"ab").await.unwrap();
        assert_eq!(w.end_send(), None);
        let mut sink = [0u8; 8];
        b.read_exact(&mut sink[..2]).await.unwrap();
        // Two writes with a pause between: the second's call.
        w.begin_send();
        w.write_all(b"abc").await.unwrap();
        std::thread::sleep(std::time::Duration::from_millis(3));
        let before_second = Instant::now();
        w.write_all(b"de").await.unwrap();
        let after = Instant::now();
        let end = w.end_send().unwrap();
        assert!(end >= before_second && end <= after, "{end:?}");
        assert_eq!(w.end_send(), None);
        b.read_exact(&mut sink[..5]).await.unwrap();
        // Sixteen bytes into an eight-byte pipe: the first write takes
        // eight, the next waits for the reader (the network's pace, not
        // the writer's): the send ends at the first write's call.
        w.begin_send();
        let reader = async {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            let read_at = Instant::now();
            let mut all = [0u8; 16];
            b.read_exact(&mut all).await.unwrap();
            read_at
        };
        let (wrote, read_at) = tokio::join!(w.write_all(&[7u8; 16]), reader);
        wrote.unwrap();
        let end = w.end_send().unwrap();
        assert!(end < read_at, "{end:?} {read_at:?}");
    }
}
