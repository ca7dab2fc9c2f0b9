//! [`Arrival`]: the request body as the handler reads it, stamping the
//! receive time when its end is read (`docs/protocol.md`: the whole request
//! has arrived).

use http_body::Frame;

use super::timer::RequestTimer;
use crate::watched::{Watch, Watched};

/// A request body that tells its [`RequestTimer`] when each data frame and
/// the end arrive. tonic reads a unary request to its end (trailers
/// included) before the handler runs; a streaming handler reads it as it
/// goes.
pub type Arrival<B> = Watched<B, ArrivalStamps>;

/// What an [`Arrival`] stamps: its request's timer.
#[derive(Debug)]
pub struct ArrivalStamps {
    timer: RequestTimer,
}

impl ArrivalStamps {
    /// `body`, stamping into `timer` as it is read.
    pub(crate) fn body<B>(body: B, timer: RequestTimer) -> Arrival<B> {
        Watched::new(body, ArrivalStamps { timer })
    }
}

impl<D, E> Watch<D, E> for ArrivalStamps {
    fn saw(&mut self, frame: &Option<Result<Frame<D>, E>>, ended: bool) {
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
