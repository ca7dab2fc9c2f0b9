//! [`Watched`]: an HTTP body passed through while a [`Watch`] sees each
//! frame go by: the request body whose arrival a server's timer stamps
//! ([`Arrival`](crate::tower::Arrival)), the response body whose trailers a
//! client reads ([`ReadTrailers`](crate::tower::ReadTrailers)) and the one
//! whose trailers a server adds its timing to
//! ([`WithTrailer`](crate::tower::WithTrailer)).

use std::fmt;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use http_body::{Body, Frame, SizeHint};

/// What looks at the frames of a [`Watched`] body.
pub trait Watch<D, E> {
    /// `frame` was read (`None`: the body ended); `ended`: the body says
    /// nothing comes after it (HTTP/2 ends a stream with a flag on its last
    /// frame). A watch that adds to the body edits `frame` (a trailers
    /// frame in place of the end); one that only looks leaves it.
    fn saw(&mut self, frame: &mut Option<Result<Frame<D>, E>>, ended: bool);

    /// Whether the watch has a frame of its own still to give when the
    /// body ends (the body then does not say it ended); `false` unless it
    /// adds one.
    fn adds_at_end(&self) -> bool {
        false
    }
}

/// A body whose frames `W` sees as they pass.
pub struct Watched<B, W> {
    // Dropped before the body (fields drop in declaration order), as in
    // the `ReadTrailers` this replaced, whose own `Drop` ran first.
    watch: W,
    inner: B,
}

impl<B, W> Watched<B, W> {
    pub(crate) fn new(inner: B, watch: W) -> Self {
        Watched { inner, watch }
    }
}

impl<B, W: fmt::Debug> fmt::Debug for Watched<B, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watched")
            .field("watch", &self.watch)
            .finish_non_exhaustive()
    }
}

impl<B, W> Body for Watched<B, W>
where
    B: Body + Unpin,
    W: Watch<B::Data, B::Error> + Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let mut frame = ready!(Pin::new(&mut this.inner).poll_frame(cx));
        let ended = this.inner.is_end_stream();
        this.watch.saw(&mut frame, ended);
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        !self.watch.adds_at_end() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
