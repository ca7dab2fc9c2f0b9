//! [`WithTrailer`]: a response body that adds entries to the trailers the
//! inner body ends with (tonic's `grpc-status` frame), so the server's
//! timing reaches the robot with the reply it times.
//!
//! gRPC carries a `-bin` metadata value base64-encoded on the HTTP/2 wire;
//! the entries are added through tonic's `MetadataMap`, which encodes them.

use http::HeaderMap;
use http_body::Frame;

use crate::watched::{Watch, Watched};

/// `inner`, with what `add` puts into its trailers (sent as the trailers
/// when the inner body ends without any). `add` runs when the trailers are
/// due, and sees the inner ones (`grpc-status`): the timing is complete only
/// then. The response body of [`ServerService`](crate::tower::ServerService).
pub type WithTrailer<B, F> = Watched<B, AddTrailer<F>>;

/// `body`, with what `add` puts into its trailers.
pub(crate) fn with_trailer<B, F>(body: B, add: F) -> WithTrailer<B, F> {
    Watched::new(body, AddTrailer { add: Some(add) })
}

/// The watch of a [`WithTrailer`] body: adds to the trailers when they
/// pass, or sends its own when the body ends without.
pub struct AddTrailer<F> {
    add: Option<F>,
}

impl<F> std::fmt::Debug for AddTrailer<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddTrailer")
            .field("trailers_due", &self.add.is_some())
            .finish()
    }
}

impl<D, E, F> Watch<D, E> for AddTrailer<F>
where
    F: FnOnce(&mut HeaderMap),
{
    fn saw(&mut self, frame: &mut Option<Result<Frame<D>, E>>, _ended: bool) {
        match frame {
            Some(Ok(f)) => {
                if let Some(map) = f.trailers_mut() {
                    if let Some(add) = self.add.take() {
                        add(map);
                    }
                }
            }
            Some(Err(_)) => {}
            None => {
                // The inner body ended without trailers: send ours alone.
                if let Some(add) = self.add.take() {
                    let mut map = HeaderMap::new();
                    add(&mut map);
                    if !map.is_empty() {
                        *frame = Some(Ok(Frame::trailers(map)));
                    }
                }
            }
        }
    }

    fn adds_at_end(&self) -> bool {
        self.add.is_some()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http::HeaderValue;
    use http_body::Body;
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
        let body = with_trailer(Box::pin(inner), add_x);
        let collected = body.collect().await.unwrap();
        let trailers = collected.trailers().cloned().unwrap();
        assert_eq!(trailers.get("grpc-status").unwrap(), "0");
        assert_eq!(trailers.get("x-bin").unwrap(), "AQI");
        assert_eq!(collected.to_bytes(), Bytes::from_static(b"hi"));
    }

    #[tokio::test]
    async fn a_body_without_trailers_gets_ours_alone() {
        let body = with_trailer(Empty::<Bytes>::new(), add_x);
        assert!(!body.is_end_stream());
        let collected = body.collect().await.unwrap();
        assert_eq!(collected.trailers().unwrap().len(), 1);
    }
}
