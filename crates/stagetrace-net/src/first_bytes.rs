//! [`FirstBytes`]: a byte stream that remembers when the first byte of the
//! next message arrived (the first read that returned data since the last
//! [`FirstBytes::take_first`]) and when the first byte of the next message
//! left (the first write, stamped just before the call that took it). The
//! WebSocket server stamps a request's first byte with it, the client a
//! request's first byte out and a response's first byte in
//! (`docs/clocks.md`: what happens before the first byte leaves and after it
//! arrives, each measured on one clock, stays out of the offset estimate).

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
}

impl<S> FirstBytes<S> {
    pub(crate) fn new(inner: S) -> Self {
        FirstBytes {
            inner,
            first: None,
            first_write: None,
            written: None,
        }
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
    /// would be wasted).
    fn before_write(&self) -> Option<Instant> {
        self.first_write.is_none().then(Instant::now)
    }

    fn note_write(&mut self, before: Option<Instant>, r: &Poll<io::Result<usize>>) {
        if self.first_write.is_none() && matches!(r, Poll::Ready(Ok(n)) if *n > 0) {
            self.first_write = before;
            // One more clock read per message, not per write.
            self.written = before.map(|_| Instant::now());
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
}
