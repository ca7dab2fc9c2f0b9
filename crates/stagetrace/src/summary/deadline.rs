//! Deadlines against `target_hz`: each call's scheduled tick, lateness,
//! skipped ticks and completion jitter.

use std::time::{Duration, Instant};

/// A call that starts this long after the previous one ended was paced: the
/// loop slept until its tick. Catch-up calls after a stall start right after
/// the previous one and never move the ticks.
const PACED_GAP: Duration = Duration::from_millis(1);

/// What the deadline tracker says about one call.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct DeadlineObs {
    /// Completion − deadline, ns (negative = slack).
    pub(crate) late_ns: i64,
    /// Ticks skipped before this call's tick.
    pub(crate) skipped: u64,
    /// |Δ²t| of completions, ns, from the third call on.
    pub(crate) jitter_ns: Option<u64>,
}

/// Assigns each call its scheduled tick without coordinated omission.
///
/// Ticks are `origin + k·period`, `origin` = the first call's start, moved
/// earlier when a paced call (one the loop slept before: it started more
/// than [`PACED_GAP`] after the previous call ended) starts less than half a
/// period before the tick it is due on, or less than [`PACED_GAP`] before a
/// later one the loop skipped ahead to after a stall — a loop that slept
/// wakes at its tick or after it, never before: the loop's ticks are then
/// earlier than the first call's start said (that call started late). A call
/// belongs to the last tick at or before its start: a call that started late
/// is measured from its tick, not from when it got round to starting, and
/// ticks no call started in are skipped (counted apart). A second call in an
/// already served tick — a loop catching up after a stall, or running faster
/// than its target — is measured against that same tick: never against a
/// future one, which would put every later call ticks ahead, with a lateness
/// of minus several periods that hides real misses. So `late` ≥ −period.
#[derive(Debug)]
pub(crate) struct DeadlineTracker {
    period_ns: u64,
    origin: Option<Instant>,
    last_tick: Option<u64>,
    ends: [Option<Instant>; 2],
}

impl DeadlineTracker {
    pub(crate) fn new(target_hz: f64) -> Self {
        DeadlineTracker {
            period_ns: (1e9 / target_hz).round().max(1.0) as u64,
            origin: None,
            last_tick: None,
            ends: [None, None],
        }
    }

    pub(crate) fn period_ns(&self) -> u64 {
        self.period_ns
    }

    pub(crate) fn observe(&mut self, start: Instant, end: Instant) -> DeadlineObs {
        let mut origin = *self.origin.get_or_insert(start);
        let paced = self.ends[1].is_some_and(|e| start > e + PACED_GAP);
        if let (true, Some(last)) = (paced, self.last_tick) {
            // The tick boundary at or after the start: the due tick, or
            // after a stall a later one the loop skipped ahead to. Before the
            // due tick a start is early by up to half a period (the first
            // call may have started that late); before a later tick only by
            // what the origin is still off once paced calls have set it,
            // under PACED_GAP — more is a late wake for the tick before.
            let since = start.saturating_duration_since(origin).as_nanos();
            let period = u128::from(self.period_ns);
            let due = u128::from(last) + 1;
            let next = since.div_ceil(period).max(due);
            let limit = if next == due {
                period / 2
            } else {
                PACED_GAP.as_nanos().min(period / 2)
            };
            let early = next * period - since.min(next * period);
            if early > 0 && early < limit {
                if let Some(o) = u64::try_from(early)
                    .ok()
                    .and_then(|e| origin.checked_sub(Duration::from_nanos(e)))
                {
                    origin = o;
                    self.origin = Some(o);
                }
            }
        }
        let floor = (start.saturating_duration_since(origin).as_nanos()
            / u128::from(self.period_ns))
        .min(u128::from(u64::MAX)) as u64;
        let tick = floor;
        let skipped = match self.last_tick {
            Some(last) if floor > last + 1 => floor - last - 1,
            _ => 0,
        };
        self.last_tick = Some(self.last_tick.map_or(tick, |last| last.max(tick)));
        let deadline_ns = (u128::from(tick) + 1) * u128::from(self.period_ns);
        let end_ns = if end >= origin {
            end.duration_since(origin).as_nanos() as i128
        } else {
            -(origin.duration_since(end).as_nanos() as i128)
        };
        let late_ns =
            (end_ns - deadline_ns as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64;
        let jitter_ns = match self.ends {
            [Some(e0), Some(e1)] => {
                let d1 = signed_ns(e0, e1);
                let d2 = signed_ns(e1, end);
                Some((d2 - d1).unsigned_abs().min(u128::from(u64::MAX)) as u64)
            }
            _ => None,
        };
        self.ends = [self.ends[1], Some(end)];
        DeadlineObs {
            late_ns,
            skipped,
            jitter_ns,
        }
    }
}

fn signed_ns(a: Instant, b: Instant) -> i128 {
    if b >= a {
        b.duration_since(a).as_nanos() as i128
    } else {
        -(a.duration_since(b).as_nanos() as i128)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_tracker_counts_skipped_ticks_and_lateness() {
        let t0 = Instant::now();
        let mut d = DeadlineTracker::new(100.0); // 10 ms ticks
        let ms = |x: u64| t0 + Duration::from_millis(x);
        // tick 0: ends at 4 ms → 6 ms early
        let a = d.observe(ms(0), ms(4));
        assert_eq!(a.late_ns, -6_000_000);
        // tick 1: starts late at 13, ends at 25 → 5 ms late
        let b = d.observe(ms(13), ms(25));
        assert_eq!((b.late_ns, b.skipped), (5_000_000, 0));
        // the loop fell behind: starts at 41 (tick 4): ticks 2 and 3 were skipped
        let c = d.observe(ms(41), ms(44));
        assert_eq!((c.late_ns, c.skipped), (-6_000_000, 2));
        // jitter = |(44-25) - (25-4)| = 2 ms
        assert_eq!(c.jitter_ns, Some(2_000_000));
    }

    /// The first call starts 3 ms late (the origin), the loop's ticks are
    /// on time from then on: after the first paced call the ticks move to
    /// the loop's, and no on-time call is read as a miss.
    #[test]
    fn a_late_first_call_does_not_make_every_call_late() {
        let t0 = Instant::now();
        let mut d = DeadlineTracker::new(1000.0 / 33.0);
        let at = |x: u64| t0 + Duration::from_micros(x);
        let first = d.observe(at(3_000), at(23_000));
        assert_eq!(first.late_ns, -13_000_000);
        for k in 1..20u64 {
            let o = d.observe(at(33_000 * k), at(33_000 * k + 20_000));
            assert_eq!((o.late_ns, o.skipped), (-13_000_000, 0), "call {k}");
        }
    }

    /// A loop at 33 ms stalls once (119 ms), catches up back to back, runs
    /// on time, stalls again: the caught-up calls are measured against the
    /// ticks they started in, lateness never goes below −period, and a later
    /// late call is a miss. (The old rule, "the later of the tick after the
    /// previous call's and the last tick before the start", assigned the
    /// catch-up calls future ticks and then read every on-time call
    /// −66 ms late: one stall hid every later miss.)
    #[test]
    fn a_stall_and_its_catch_up_do_not_hide_later_misses() {
        let t0 = Instant::now();
        let mut d = DeadlineTracker::new(1000.0 / 33.0);
        let period = d.period_ns() as i64;
        let at = |x: u64| t0 + Duration::from_millis(x);
        let mut calls: Vec<(u64, u64)> = (0..10).map(|k| (33 * k, 33 * k + 20)).collect();
        // Tick 10 stalls: 119 ms. Then ticks 11–13 are served back to back.
        calls.push((330, 449));
        calls.extend([(449, 469), (469, 489), (489, 509)]);
        // On time again from tick 16 (528 ms), one call 5 ms late at tick 20.
        calls.extend((16..30).map(|k| (33 * k, 33 * k + if k == 20 { 38 } else { 20 })));
        // A second stall at tick 30 and a loop that skips to tick 34.
        calls.push((990, 1_100));
        calls.extend((34..40).map(|k| (33 * k, 33 * k + 20)));
        let mut misses = 0;
        let mut skipped = 0;
        for (k, (start, end)) in calls.iter().enumerate() {
            let o = d.observe(at(*start), at(*end));
            assert!(o.late_ns >= -period, "call {k}: late {} ns", o.late_ns);
            misses += u64::from(o.late_ns > 0);
            skipped += o.skipped;
            if *start >= 528 && *start < 990 {
                // Back on schedule: late by the call's own time past its tick.
                let tick_start = (*start / 33) * 33;
                let want = (*end as i64 - tick_start as i64 - 33) * 1_000_000;
                assert!((o.late_ns - want).abs() < 1_000_000, "call {k}: {o:?}");
            }
        }
        // Late: the stalled call (449 > 363), the first catch-up call (tick
        // 13: 469 > 462), the second call in tick 14 (509 > 495), tick 20's
        // call (698 > 693) and the second stall (1100 > 1023).
        assert_eq!(misses, 5, "misses");
        // Ticks 11–12 (the catch-up started in tick 13), 15 (no call started
        // in 495–528) and 31–33.
        assert_eq!(skipped, 2 + 1 + 3, "skipped");
    }

    /// After a stall the loop sleeps to a later tick and wakes a little
    /// after it, but sooner than its first call started after its origin:
    /// that call belongs to the tick the loop slept to, not the one before
    /// (which made it +2 ms late instead of 8 ms early, and hid a skipped
    /// tick, once in five runs beside busy loops).
    #[test]
    fn a_paced_call_after_a_stall_belongs_to_the_tick_it_woke_for() {
        let t0 = Instant::now();
        let mut d = DeadlineTracker::new(100.0); // 10 ms ticks
        let us = |x: u64| t0 + Duration::from_micros(x);
        // The loop's ticks are at 0, 10, 20 … ms; its first call started
        // 3 ms late (the tracker's first origin), the next ones 1 ms late.
        d.observe(us(3_000), us(5_000));
        d.observe(us(11_000), us(13_000));
        // A 25 ms stall on tick 2; the loop skips ticks 3 and 4 and sleeps
        // until tick 5 (50 ms), waking 0.5 ms after it.
        d.observe(us(21_000), us(46_000));
        let after = d.observe(us(50_500), us(52_500));
        // Tick 5: deadline 60 ms (the origin now 0.5 ms after the loop's).
        assert_eq!(after.skipped, 2);
        assert_eq!(after.late_ns, 52_500_000 - 60_500_000);
    }
}
