//! [`Arrival`]: the request body as the handler reads it, stamping the
//! receive time when its end is read (`docs/protocol.md`: the whole request
//! has arrived) — and read ahead by the layer while the request waits for
//! its handler, so a request that waits (a concurrency limit, a busy pool)
//! is stamped when it came in, not when a handler got to it.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Buf;
use http_body::{Body, Frame, SizeHint};

use super::timer::RequestTimer;
use crate::watched::{Watch, Watched};

/// Most bytes one waiting request is read ahead: tonic's default largest
/// message (4 MiB). A bigger request is stamped when its handler reads the
/// rest.
pub(crate) const MAX_AHEAD_PER_REQUEST: usize = 4 << 20;

/// Most bytes read ahead across every waiting request of one layer: the
/// memory the stamps may cost, whatever the number of waiting streams.
/// Beyond it a waiting request is left in HTTP/2's own buffers (its
/// arrival then stamped when its handler reads it, as without read-ahead).
pub(crate) const MAX_AHEAD_TOTAL: usize = 64 << 20;

/// The bytes read ahead and not yet handed to a handler, across one
/// layer's requests.
#[derive(Debug, Default)]
pub(crate) struct AheadBudget {
    held: AtomicUsize,
}

impl AheadBudget {
    /// Room for more: below `MAX_AHEAD_TOTAL` (one frame may go past it).
    fn has_room(&self) -> bool {
        self.held.load(Ordering::Relaxed) < MAX_AHEAD_TOTAL
    }

    fn take(&self, n: usize) {
        self.held.fetch_add(n, Ordering::Relaxed);
    }

    fn give_back(&self, n: usize) {
        self.held.fetch_sub(n, Ordering::Relaxed);
    }

    /// Bytes held now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }
}

/// A request body that tells its [`RequestTimer`] when each data frame and
/// the end arrive. tonic reads a unary request to its end (trailers
/// included) before the handler runs; a streaming handler reads it as it
/// goes. While the request waits for the service inside the layer to be
/// ready, [`ServerLayer`](crate::tower::ServerLayer) reads it ahead (bounded:
/// `MAX_AHEAD_PER_REQUEST`, `MAX_AHEAD_TOTAL`) and the handler then
/// reads those frames first, unchanged.
pub struct Arrival<B: Body> {
    /// Frames read ahead, in order, not yet handed on.
    ahead: VecDeque<Result<Frame<B::Data>, B::Error>>,
    /// Data bytes in `ahead` (taken from `budget`).
    held: usize,
    /// The body ended (or failed) while read ahead: nothing after `ahead`.
    done: bool,
    budget: Arc<AheadBudget>,
    body: Watched<B, ArrivalStamps>,
}

impl<B: Body> fmt::Debug for Arrival<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Arrival")
            .field("ahead", &self.ahead.len())
            .field("held", &self.held)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

/// What an [`Arrival`] stamps: its request's timer.
#[derive(Debug)]
pub struct ArrivalStamps {
    timer: RequestTimer,
}

impl ArrivalStamps {
    /// `body`, stamping into `timer` as it is read.
    pub(crate) fn body<B: Body>(
        body: B,
        timer: RequestTimer,
        budget: Arc<AheadBudget>,
    ) -> Arrival<B> {
        Arrival {
            ahead: VecDeque::new(),
            held: 0,
            done: false,
            budget,
            body: Watched::new(body, ArrivalStamps { timer }),
        }
    }
}

impl<D, E> Watch<D, E> for ArrivalStamps {
    fn saw(&mut self, frame: &mut Option<Result<Frame<D>, E>>, ended: bool) {
        match frame {
            Some(Ok(f)) if f.is_data() => {
                self.timer.data_arrived();
                // The request is whole once its last data frame is read.
                if ended {
                    self.timer.received_now();
                }
            }
            // Trailers, or the end: nothing more comes.
            Some(Ok(_)) | None => self.timer.received_now(),
            Some(Err(_)) => {}
        }
    }
}

fn data_len<D: Buf, E>(frame: &Result<Frame<D>, E>) -> usize {
    frame
        .as_ref()
        .ok()
        .and_then(Frame::data_ref)
        .map_or(0, Buf::remaining)
}

impl<B> Arrival<B>
where
    B: Body + Unpin,
{
    /// Reads one more frame ahead (stamping it as it comes), if the bounds
    /// allow and one is there; `true` when one was read (try again),
    /// `false` when there is none now (the waker is registered), the body
    /// ended, or the bounds are reached.
    pub(crate) fn read_ahead(&mut self, cx: &mut Context<'_>) -> bool {
        if self.done || self.held >= MAX_AHEAD_PER_REQUEST || !self.budget.has_room() {
            return false;
        }
        match Pin::new(&mut self.body).poll_frame(cx) {
            Poll::Pending => false,
            Poll::Ready(None) => {
                self.done = true;
                false
            }
            Poll::Ready(Some(frame)) => {
                // An error ends the body: it is handed on in its place.
                self.done = frame.is_err();
                let n = data_len(&frame);
                self.held += n;
                self.budget.take(n);
                self.ahead.push_back(frame);
                !self.done
            }
        }
    }
}

// The frames held are never pinned (they are moved out whole): only the
// body needs to be Unpin, as the impls below require.
impl<B: Body + Unpin> Unpin for Arrival<B> {}

impl<B: Body> Drop for Arrival<B> {
    fn drop(&mut self) {
        self.budget.give_back(self.held);
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
        if let Some(frame) = this.ahead.pop_front() {
            let n = data_len(&frame);
            this.held -= n;
            this.budget.give_back(n);
            return Poll::Ready(Some(frame));
        }
        if this.done {
            return Poll::Ready(None);
        }
        Pin::new(&mut this.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.ahead.is_empty() && (self.done || self.body.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        if self.done {
            return SizeHint::with_exact(self.held as u64);
        }
        let rest = self.body.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower().saturating_add(self.held as u64));
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper.saturating_add(self.held as u64));
        }
        hint
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body_util::{BodyExt, StreamBody};
    use stagetrace_net::ServerClock;
    use std::time::Instant;

    type Frames = StreamBody<
        futures_util::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, std::io::Error>>>,
    >;

    fn body(chunks: &[&'static [u8]]) -> Frames {
        let frames: Vec<Result<Frame<Bytes>, std::io::Error>> = chunks
            .iter()
            .map(|c| Ok(Frame::data(Bytes::from_static(c))))
            .collect();
        StreamBody::new(futures_util::stream::iter(frames))
    }

    fn timer() -> RequestTimer {
        RequestTimer::new(Instant::now(), ServerClock::system(), false, None)
    }

    #[tokio::test]
    async fn frames_read_ahead_are_handed_on_unchanged_and_the_budget_returned() {
        let budget = Arc::new(AheadBudget::default());
        let mut b = ArrivalStamps::body(body(&[b"ab", b"cde"]), timer(), Arc::clone(&budget));
        let read = std::future::poll_fn(|cx| {
            let mut n = 0;
            while b.read_ahead(cx) {
                n += 1;
            }
            Poll::Ready(n)
        })
        .await;
        assert_eq!(read, 2);
        assert_eq!(budget.held(), 5);
        assert!(!b.is_end_stream() && b.size_hint().lower() >= 5);
        let all = b.collect().await.unwrap().to_bytes();
        assert_eq!(&all[..], b"abcde");
        assert_eq!(budget.held(), 0);
    }

    #[tokio::test]
    async fn a_body_dropped_with_frames_ahead_gives_their_bytes_back() {
        let budget = Arc::new(AheadBudget::default());
        let mut b = ArrivalStamps::body(body(&[b"abcd"]), timer(), Arc::clone(&budget));
        std::future::poll_fn(|cx| {
            while b.read_ahead(cx) {}
            Poll::Ready(())
        })
        .await;
        assert_eq!(budget.held(), 4);
        drop(b);
        assert_eq!(budget.held(), 0);
    }

    #[tokio::test]
    async fn nothing_is_read_ahead_past_the_layers_budget() {
        let budget = Arc::new(AheadBudget::default());
        budget.take(MAX_AHEAD_TOTAL);
        let mut b = ArrivalStamps::body(body(&[b"ab"]), timer(), Arc::clone(&budget));
        let read = std::future::poll_fn(|cx| Poll::Ready(b.read_ahead(cx))).await;
        assert!(!read);
        budget.give_back(MAX_AHEAD_TOTAL);
        // The handler still reads the whole body.
        assert_eq!(&b.collect().await.unwrap().to_bytes()[..], b"ab");
    }
}
