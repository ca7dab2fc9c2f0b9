//! [`WithTrailer`]: a response body that adds one entry to the trailers
//! the inner body ends with (tonic's `grpc-status` frame), so the server's
//! timing reaches the robot with the reply it times.
//!
//! gRPC carries a `-bin` metadata value base64-encoded on the HTTP/2 wire;
//! tonic's `MetadataMap` does that only at its own level, so the entry is
//! encoded here.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use base64::Engine;
use http::{HeaderMap, HeaderName, HeaderValue};
use http_body::{Body, Frame, SizeHint};

/// `inner`, with `(name, value)` added to its trailers (or sent as the
/// trailers when the inner body ends without any). `value` is computed
/// when the trailers are due: the timing is complete only then.
pub(crate) struct WithTrailer<B, F> {
    inner: B,
    name: HeaderName,
    value: Option<F>,
}

impl<B, F> WithTrailer<B, F>
where
    F: FnOnce() -> Option<Vec<u8>>,
{
    pub(crate) fn new(inner: B, name: HeaderName, value: F) -> Self {
        WithTrailer {
            inner,
            name,
            value: Some(value),
        }
    }

    /// Adds the entry to `map`, once.
    fn add_to(&mut self, map: &mut HeaderMap) {
        let Some(bytes) = self.value.take().and_then(|f| f()) else {
            return;
        };
        let text = base64::engine::general_purpose::STANDARD_NO_PAD.encode(bytes);
        if let Ok(v) = HeaderValue::from_str(&text) {
            map.insert(self.name.clone(), v);
        }
    }
}

impl<B, F> Body for WithTrailer<B, F>
where
    B: Body + Unpin,
    F: FnOnce() -> Option<Vec<u8>> + Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
            Some(Ok(mut frame)) => {
                if let Some(map) = frame.trailers_mut() {
                    this.add_to(map);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Some(Err(e)) => Poll::Ready(Some(Err(e))),
            None => {
                // The inner body ended without trailers: send ours alone.
                if this.value.is_none() {
                    return Poll::Ready(None);
                }
                let mut map = HeaderMap::new();
                this.add_to(&mut map);
                Poll::Ready((!map.is_empty()).then(|| Ok(Frame::trailers(map))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.value.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
