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

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use stagetrace_schema::Figure;

use crate::record::CallRecord;
use crate::summary::DeadlineObs;

/// Longest a record waits for the next answer. A loop slower than this
/// (one call every two seconds) gets its records without the send wait.
pub(crate) const HOLD_MAX: Duration = Duration::from_secs(2);

/// Most records queued behind a held one; beyond it the oldest is released
/// (memory stays bounded whatever the peers and the call rate).
pub(crate) const MAX_HELD: usize = 1024;

/// Most peers remembered as not sending the figure.
const MAX_SILENT: usize = 64;

/// A converted call on its way to the summaries and sinks.
#[derive(Debug)]
pub(crate) struct Ready {
    pub(crate) rec: CallRecord,
    pub(crate) start: Instant,
    pub(crate) end: Instant,
    pub(crate) obs: Option<DeadlineObs>,
}

#[derive(Debug)]
struct Entry {
    /// The peer whose next answer completes it; `None` once complete.
    waits_for: Option<String>,
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

/// Records in call order, the oldest possibly waiting for its peer's next
/// answer. Records leave in the order they came (the files keep call
/// order): a complete one waits behind an incomplete one before it.
#[derive(Debug, Default)]
pub(crate) struct Held {
    queue: VecDeque<Entry>,
    /// Peers whose answers carry no `prev_tx_wait_ns` (learnt from their
    /// second answer).
    silent: Vec<String>,
}

impl Held {
    /// Takes one converted call; returns, in order, the records now complete.
    pub(crate) fn admit(&mut self, ready: Ready, answer: Answer<'_>, now: Instant) -> Vec<Ready> {
        let peer = answer.peer.filter(|_| answer.answered);
        if let Some(peer) = peer {
            self.complete(peer, answer.prev_tx_wait_ns);
        }
        // A failed call (no answer) does not wait: the server's next answer
        // still speaks of the response before, the one held.
        let waits_for = peer
            .filter(|p| !self.silent.iter().any(|s| s == p))
            .map(str::to_owned);
        self.queue.push_back(Entry {
            waits_for,
            since: now,
            ready,
        });
        let mut out = Vec::new();
        while self.queue.len() > MAX_HELD {
            if let Some(e) = self.queue.pop_front() {
                out.push(e.ready);
            }
        }
        self.pop_complete(&mut out);
        out
    }

    /// The newest record of `peer` still waiting gets the wait its peer's
    /// next answer brought; an answer without one marks the peer silent.
    fn complete(&mut self, peer: &str, prev_tx_wait_ns: Option<u64>) {
        let Some(e) = self
            .queue
            .iter_mut()
            .rev()
            .find(|e| e.waits_for.as_deref() == Some(peer))
        else {
            return;
        };
        e.waits_for = None;
        match prev_tx_wait_ns {
            Some(w) => e
                .ready
                .rec
                .set(Figure::ServerTxWait, i64::try_from(w).unwrap_or(i64::MAX)),
            None => {
                if self.silent.len() >= MAX_SILENT {
                    self.silent.remove(0);
                }
                self.silent.push(peer.to_owned());
            }
        }
    }

    fn pop_complete(&mut self, out: &mut Vec<Ready>) {
        while self.queue.front().is_some_and(|e| e.waits_for.is_none()) {
            if let Some(e) = self.queue.pop_front() {
                out.push(e.ready);
            }
        }
    }

    /// Records whose wait passed [`HOLD_MAX`] (released without the
    /// figure), with the complete ones behind them.
    pub(crate) fn expired(&mut self, now: Instant) -> Vec<Ready> {
        let mut out = Vec::new();
        for e in &mut self.queue {
            if now.saturating_duration_since(e.since) >= HOLD_MAX {
                e.waits_for = None;
            }
        }
        self.pop_complete(&mut out);
        out
    }

    /// Every held record (the worker stops).
    pub(crate) fn release_all(&mut self) -> Vec<Ready> {
        self.queue.drain(..).map(|e| e.ready).collect()
    }

    /// Records held now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.queue.len()
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
    fn a_failed_call_waits_behind_the_held_record_which_the_next_answer_completes() {
        let mut h = Held::default();
        let t = Instant::now();
        assert!(h.admit(ready(0), answer("a", None), t).is_empty());
        let failed = Answer {
            peer: Some("a"),
            answered: false,
            prev_tx_wait_ns: None,
        };
        // Call order is kept: the failed call waits behind call 0.
        assert!(h.admit(ready(1), failed, t).is_empty());
        let out = h.admit(ready(2), answer("a", Some(3)), t);
        assert_eq!(seqs(&out), vec![0, 1]);
        assert_eq!(out[0].rec.figures.get(Figure::ServerTxWait), Some(3));
        assert_eq!(out[1].rec.figures.get(Figure::ServerTxWait), None);
    }

    #[test]
    fn records_leave_in_call_order_across_peers_and_calls_without_a_server() {
        let mut h = Held::default();
        let t = Instant::now();
        let none = Answer::default();
        assert!(h.admit(ready(0), answer("a", None), t).is_empty());
        assert!(h.admit(ready(1), none, t).is_empty());
        assert!(h.admit(ready(2), answer("b", None), t).is_empty());
        assert_eq!(
            seqs(&h.admit(ready(3), answer("a", Some(1)), t)),
            vec![0, 1]
        );
        assert_eq!(seqs(&h.admit(ready(4), answer("b", Some(2)), t)), vec![2]);
        assert_eq!(seqs(&h.release_all()), vec![3, 4]);
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
            released += h.admit(ready(i as u64), answer(name, None), t).len();
        }
        assert_eq!(h.len(), MAX_HELD);
        assert_eq!(released, MAX_HELD);
    }
}
