//! [`WithTrailer`]: a response body that adds entries to the trailers the
//! inner body ends with (tonic's `grpc-status` frame), so the server's
//! timing reaches the robot with the reply it times.
//!
//! gRPC carries a `-bin` metadata value base64-encoded on the HTTP/2 wire;
//! the entries are added through tonic's `MetadataMap`, which encodes them.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};

/// `inner`, with what `add` puts into its trailers (sent as the trailers
/// when the inner body ends without any). `add` runs when the trailers are
/// due, and sees the inner ones (`grpc-status`): the timing is complete only
/// then. The response body of [`ServerService`](crate::tower::ServerService).
pub struct WithTrailer<B, F> {
    inner: B,
    add: Option<F>,
}

impl<B, F> std::fmt::Debug for WithTrailer<B, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WithTrailer")
            .field("trailers_due", &self.add.is_some())
            .finish_non_exhaustive()
    }
}

impl<B, F> WithTrailer<B, F>
where
    F: FnOnce(&mut HeaderMap),
{
    pub(crate) fn new(inner: B, add: F) -> Self {
        WithTrailer {
            inner,
            add: Some(add),
        }
    }
}

impl<B, F> Body for WithTrailer<B, F>
where
    B: Body + Unpin,
    F: FnOnce(&mut HeaderMap) + Unpin,
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
                    if let Some(add) = this.add.take() {
                        add(map);
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Some(Err(e)) => Poll::Ready(Some(Err(e))),
            None => {
                // The inner body ended without trailers: send ours alone.
                let Some(add) = this.add.take() else {
                    return Poll::Ready(None);
                };
                let mut map = HeaderMap::new();
                add(&mut map);
                Poll::Ready((!map.is_empty()).then(|| Ok(Frame::trailers(map))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.add.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http::HeaderValue;
    use http_body_util::{BodyExt, Empty, Full};

    fn add_x(map: &mut HeaderMap) {
        map.insert("x-bin", HeaderValue::from_static("AQI"));
    }

    #[tokio::test]
    async fn an_entry_joins_the_inner_trailers() {
        let mut status = HeaderMap::new();
        status.insert("grpc-status", HeaderValue::from_static("0"));
        let inner =
            Full::new(Bytes::from_static(b"hi")).with_trailers(async move { Some(Ok(status)) });
        let body = WithTrailer::new(Box::pin(inner), add_x);
        let collected = body.collect().await.unwrap();
        let trailers = collected.trailers().cloned().unwrap();
        assert_eq!(trailers.get("grpc-status").unwrap(), "0");
        assert_eq!(trailers.get("x-bin").unwrap(), "AQI");
        assert_eq!(collected.to_bytes(), Bytes::from_static(b"hi"));
    }

    #[tokio::test]
    async fn a_body_without_trailers_gets_ours_alone() {
        let body = WithTrailer::new(Empty::<Bytes>::new(), add_x);
        assert!(!body.is_end_stream());
        let collected = body.collect().await.unwrap();
        assert_eq!(collected.trailers().unwrap().len(), 1);
    }
}
