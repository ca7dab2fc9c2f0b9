//! The control loop's fixed-rate schedule.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::wait::{sleep_until_precise, Spin};

/// The control loop's fixed-rate schedule: call `seq` is due at
/// `start + seq / hz`, so a late call does not shift the ones after it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pacer {
    start: Instant,
    period: Duration,
    hz: f64,
}

impl Pacer {
    /// A schedule starting now; `None` unless `hz` is a finite rate above 0
    /// with a representable period.
    pub fn new(hz: f64) -> Option<Pacer> {
        if !(hz.is_finite() && hz > 0.0) {
            return None;
        }
        let period = Duration::try_from_secs_f64(1.0 / hz).ok()?;
        Some(Pacer {
            start: Instant::now(),
            period,
            hz,
        })
    }

    /// When call `seq` is due.
    pub fn due(&self, seq: u64) -> Instant {
        self.start + self.period.mul_f64(seq as f64)
    }

    /// `seq`, or — when its tick is more than four periods past (a long
    /// pause or stall) — the first call still due, so that missed ticks are
    /// skipped rather than fired back to back.
    pub fn skip_missed(&self, seq: u64) -> u64 {
        let now = Instant::now();
        if now > self.due(seq) + self.period * 4 {
            (now.duration_since(self.start).as_secs_f64() * self.hz).ceil() as u64
        } else {
            seq
        }
    }

    /// Wait until call `seq` is due (see `wait::sleep_until_precise`).
    pub fn wait(&self, seq: u64, spin: Spin) -> impl Future<Output = ()> {
        sleep_until_precise(self.due(seq), spin)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn pacer_keeps_its_schedule_and_skips_a_stall() {
        assert!(Pacer::new(0.0).is_none());
        assert!(Pacer::new(f64::NAN).is_none());
        assert!(Pacer::new(f64::INFINITY).is_none());
        let p = Pacer::new(1000.0).unwrap();
        assert_eq!(p.due(10) - p.due(0), Duration::from_millis(10));
        assert_eq!(p.skip_missed(0), 0);
        std::thread::sleep(Duration::from_millis(20));
        // 20 ms late at 1 kHz: the next due call is at least number 20.
        assert!(p.skip_missed(0) >= 20, "{}", p.skip_missed(0));
        assert_eq!(p.skip_missed(1_000_000), 1_000_000);
    }
}
