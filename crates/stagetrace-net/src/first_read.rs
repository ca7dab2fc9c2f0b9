//! [`FirstRead`]: a byte stream that remembers when the first byte of the
//! next message arrived: the first read that returned data since the last
//! [`FirstRead::take_first`]. The WebSocket server stamps a request's first byte
//! with it and the client a response's (`docs/clocks.md`: the transfers,
//! each measured on one clock, stay out of the offset estimate).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Wraps a stream; every read and write goes straight through.
#[derive(Debug)]
pub(crate) struct FirstRead<S> {
    inner: S,
    first: Option<Instant>,
}

impl<S> FirstRead<S> {
    pub(crate) fn new(inner: S) -> Self {
        FirstRead { inner, first: None }
    }

    /// When the first byte since the last call arrived (`None`: no byte
    /// since); the next byte read starts a new stamp.
    pub(crate) fn take_first(&mut self) -> Option<Instant> {
        self.first.take()
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for FirstRead<S> {
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

impl<S: AsyncWrite + Unpin> AsyncWrite for FirstRead<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
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
        let mut r = FirstRead::new(a);
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
    }
}
