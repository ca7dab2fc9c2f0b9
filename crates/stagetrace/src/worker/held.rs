//! Records held back for one call, so the server's send wait can reach
//! them (`docs/architecture.md` §4, "The server's send wait").
//!
//! A response cannot carry the wait before its own write: the server only
//! knows it after the write. It sends it in the *next* response on the
//! connection (`prev_tx_wait_ns`, as openpi's `prev_total_ms`), so the
//! record of call N is complete only when call N+1's response is in. The
//! worker holds the newest answered record per peer until the peer's next
//! answer comes, or [`HOLD_MAX`] passes, or the worker stops. A peer whose
//! second answer carries no such figure does not send it: its records pass
//! straight through from then on, so a server without it delays only its
//! first record, by one call. A record released without a next answer
//! simply lacks `server_tx_wait_ms`: absent, never 0.

use std::time::{Duration, Instant};

use stagetrace_schema::Figure;

use crate::record::CallRecord;
use crate::summary::DeadlineObs;

/// Longest a record waits for the next answer. A loop slower than this
/// (one call every two seconds) gets its records without the send wait.
pub(crate) const HOLD_MAX: Duration = Duration::from_secs(2);

/// Most peers whose records are held at once; beyond it the oldest held
/// record is released (memory stays bounded whatever the peers).
pub(crate) const MAX_HELD: usize = 64;

/// A converted call on its way to the summaries and sinks.
#[derive(Debug)]
pub(crate) struct Ready {
    pub(crate) rec: CallRecord,
    pub(crate) start: Instant,
    pub(crate) end: Instant,
    pub(crate) obs: Option<DeadlineObs>,
}

#[derive(Debug)]
struct Pending {
    peer: String,
    since: Instant,
    ready: Ready,
}

/// What one call says about its peer's send waits.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Answer<'a> {
    /// The server the call went to (`""` for the only one); `None` when the
    /// call had no transport span.
    pub(crate) peer: Option<&'a str>,
    /// The server answered with timing (its response came).
    pub(crate) answered: bool,
    /// The server's wait before writing its previous response, ns.
    pub(crate) prev_tx_wait_ns: Option<u64>,
}

/// The held records, one per peer at most.
#[derive(Debug, Default)]
pub(crate) struct Held {
    pending: Vec<Pending>,
    /// Peers whose answers carry no `prev_tx_wait_ns` (learnt from their
    /// second answer).
    silent: Vec<String>,
}

impl Held {
    /// Takes one converted call; returns, in order, the records now complete.
    pub(crate) fn admit(&mut self, ready: Ready, answer: Answer<'_>, now: Instant) -> Vec<Ready> {
        let mut out = Vec::new();
        let Some(peer) = answer.peer else {
            out.push(ready);
            return out;
        };
        if !answer.answered {
            // No response came (a failed call): the server's next answer
            // still speaks of the response before, the one held.
            out.push(ready);
            return out;
        }
        if let Some(i) = self.pending.iter().position(|p| p.peer == peer) {
            let mut prev = self.pending.swap_remove(i).ready;
            match answer.prev_tx_wait_ns {
                Some(w) => prev
                    .rec
                    .set(Figure::ServerTxWait, i64::try_from(w).unwrap_or(i64::MAX)),
                None => {
                    if self.silent.len() >= MAX_HELD {
                        self.silent.remove(0);
                    }
                    self.silent.push(peer.to_owned());
                }
            }
            out.push(prev);
        }
        if !self.silent.iter().any(|p| p == peer) {
            if self.pending.len() >= MAX_HELD {
                if let Some(oldest) = (0..self.pending.len()).min_by_key(|&i| self.pending[i].since)
                {
                    out.push(self.pending.swap_remove(oldest).ready);
                }
            }
            self.pending.push(Pending {
                peer: peer.to_owned(),
                since: now,
                ready,
            });
        } else {
            out.push(ready);
        }
        out
    }

    /// Records held longer than [`HOLD_MAX`], released without the figure.
    pub(crate) fn expired(&mut self, now: Instant) -> Vec<Ready> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.pending.len() {
            if now.saturating_duration_since(self.pending[i].since) >= HOLD_MAX {
                out.push(self.pending.swap_remove(i).ready);
            } else {
                i += 1;
            }
        }
        out.sort_by_key(|r| r.rec.seq);
        out
    }

    /// Every held record (the worker stops).
    pub(crate) fn release_all(&mut self) -> Vec<Ready> {
        let mut out: Vec<Ready> = self.pending.drain(..).map(|p| p.ready).collect();
        out.sort_by_key(|r| r.rec.seq);
        out
    }

    /// Records held now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(seq: u64) -> Ready {
        let now = Instant::now();
        Ready {
            rec: CallRecord {
                seq,
                ..CallRecord::default()
            },
            start: now,
            end: now,
            obs: None,
        }
    }

    fn answer(peer: &str, prev: Option<u64>) -> Answer<'_> {
        Answer {
            peer: Some(peer),
            answered: true,
            prev_tx_wait_ns: prev,
        }
    }

    fn seqs(v: &[Ready]) -> Vec<u64> {
        v.iter().map(|r| r.rec.seq).collect()
    }

    #[test]
    fn the_next_answer_gives_the_previous_record_its_send_wait() {
        let mut h = Held::default();
        let t = Instant::now();
        // The first answer names no earlier send: nothing is known yet.
        assert_eq!(
            seqs(&h.admit(ready(0), answer("a", Some(0)), t)),
            Vec::<u64>::new()
        );
        let out = h.admit(ready(1), answer("a", Some(7_000_000)), t);
        assert_eq!(seqs(&out), vec![0]);
        assert_eq!(
            out[0].rec.figures.get(Figure::ServerTxWait),
            Some(7_000_000)
        );
        let out = h.release_all();
        assert_eq!(seqs(&out), vec![1]);
        assert_eq!(out[0].rec.figures.get(Figure::ServerTxWait), None);
    }

    #[test]
    fn a_server_that_never_sends_the_figure_delays_only_its_first_record() {
        let mut h = Held::default();
        let t = Instant::now();
        assert!(h.admit(ready(0), answer("a", None), t).is_empty());
        assert_eq!(seqs(&h.admit(ready(1), answer("a", None), t)), vec![0, 1]);
        for seq in 2..5 {
            assert_eq!(seqs(&h.admit(ready(seq), answer("a", None), t)), vec![seq]);
        }
        assert_eq!(h.len(), 0);
    }

    #[test]
    fn a_failed_call_leaves_the_held_record_for_the_next_answer() {
        let mut h = Held::default();
        let t = Instant::now();
        h.admit(ready(0), answer("a", Some(0)), t);
        let failed = Answer {
            peer: Some("a"),
            answered: false,
            prev_tx_wait_ns: None,
        };
        assert_eq!(seqs(&h.admit(ready(1), failed, t)), vec![1]);
        let out = h.admit(ready(2), answer("a", Some(3)), t);
        assert_eq!(seqs(&out), vec![0]);
        assert_eq!(out[0].rec.figures.get(Figure::ServerTxWait), Some(3));
    }

    #[test]
    fn peers_are_held_apart_and_released_after_the_bound() {
        let mut h = Held::default();
        let t = Instant::now();
        h.admit(ready(0), answer("a", Some(0)), t);
        h.admit(ready(1), answer("b", Some(0)), t);
        assert_eq!(h.len(), 2);
        assert!(h.expired(t + HOLD_MAX / 2).is_empty());
        let out = h.expired(t + HOLD_MAX);
        assert_eq!(seqs(&out), vec![0, 1]);
        assert!(out
            .iter()
            .all(|r| r.rec.figures.get(Figure::ServerTxWait).is_none()));
    }

    #[test]
    fn memory_stays_bounded_with_many_peers() {
        let mut h = Held::default();
        let t = Instant::now();
        let names: Vec<String> = (0..(MAX_HELD * 2)).map(|i| format!("p{i}")).collect();
        let mut released = 0;
        for (i, name) in names.iter().enumerate() {
            released += h.admit(ready(i as u64), answer(name, Some(0)), t).len();
        }
        assert_eq!(h.len(), MAX_HELD);
        assert_eq!(released, MAX_HELD);
    }
}
