//! Deadlines against `target_hz`: each call's scheduled tick, lateness,
//! skipped ticks and completion jitter.

use std::time::Instant;

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
/// Ticks are `origin + k·period`, `origin` = the first call's start. A call
/// belongs to the later of (the tick after the previous call's) and (the last
/// tick at or before its start): a loop running behind is measured from the
/// tick it should have served, and ticks it skipped count as misses.
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
        let origin = *self.origin.get_or_insert(start);
        let floor = (start.saturating_duration_since(origin).as_nanos()
            / u128::from(self.period_ns))
        .min(u128::from(u64::MAX)) as u64;
        let (tick, skipped) = match self.last_tick {
            Some(last) if floor > last + 1 => (floor, floor - last - 1),
            Some(last) => (last + 1, 0),
            None => (floor, 0),
        };
        self.last_tick = Some(tick);
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
    use std::time::Duration;

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
}
