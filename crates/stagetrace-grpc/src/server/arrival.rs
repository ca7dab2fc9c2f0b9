//! [`Arrival`]: the request body as the handler reads it, stamping the
//! receive time when its end is read (`docs/protocol.md`: the whole request
//! has arrived).

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use http_body::{Body, Frame, SizeHint};

use super::timer::RequestTimer;

/// A request body that tells its [`RequestTimer`] when each data frame and
/// the end arrive. tonic reads a unary request to its end (trailers
/// included) before the handler runs; a streaming handler reads it as it
/// goes.
#[derive(Debug)]
pub struct Arrival<B> {
    inner: B,
    timer: RequestTimer,
}

impl<B> Arrival<B> {
    pub(crate) fn new(inner: B, timer: RequestTimer) -> Self {
        Arrival { inner, timer }
    }
}

impl<B> Body for Arrival<B>
where
    B: Body + Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let frame = ready!(Pin::new(&mut this.inner).poll_frame(cx));
        match &frame {
            Some(Ok(f)) if f.is_data() => {
                this.timer.data_arrived();
                // HTTP/2 ends a stream with a flag on its last frame: the
                // request is whole once that frame is read.
                if this.inner.is_end_stream() {
                    this.timer.received_now();
                }
            }
            // Trailers, or the end: nothing more comes.
            Some(Ok(_)) | None => this.timer.received_now(),
            Some(Err(_)) => {}
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
