//! Cheap monotonic timestamps for the hot path.
//!
//! On x86_64, when the kernel itself uses the TSC as its clocksource (so the
//! TSC is invariant and synchronised across cores), a stamp is one `rdtsc`
//! (~10 ns in a VM, less than half of `clock_gettime`); elsewhere it is
//! `Instant` nanoseconds since a process epoch. The worker turns stamps back
//! into `Instant`s and nanoseconds with a [`Calibration`] measured against the
//! monotonic clock, so every figure still rests on the monotonic clock.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A point on the hot-path clock (TSC ticks or ns since [`epoch`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(crate) struct Stamp(pub(crate) u64);

impl Stamp {
    /// Ticks from `earlier` to `self` (0 if `earlier` is later).
    #[inline]
    pub(crate) fn ticks_since(self, earlier: Stamp) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

const UNKNOWN: u8 = 0;
const TSC: u8 = 1;
const INSTANT: u8 = 2;

static SOURCE: AtomicU8 = AtomicU8::new(UNKNOWN);

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Decide once which clock stamps use; called when a layer is built.
pub(crate) fn init() -> bool {
    let _ = epoch();
    let tsc = cfg!(target_arch = "x86_64")
        && std::env::var_os("STAGETRACE_NO_TSC").is_none()
        && std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .is_ok_and(|s| s.trim() == "tsc");
    let _ = SOURCE.compare_exchange(
        UNKNOWN,
        if tsc { TSC } else { INSTANT },
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    SOURCE.load(Ordering::Relaxed) == TSC
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn rdtsc() -> u64 {
    // SAFETY: `rdtsc` exists on every x86_64 CPU and has no side effects.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn rdtsc() -> u64 {
    instant_ns()
}

fn instant_ns() -> u64 {
    Instant::now()
        .saturating_duration_since(epoch())
        .as_nanos()
        .min(u128::from(u64::MAX)) as u64
}

/// Now, on the hot-path clock.
#[inline]
pub(crate) fn now() -> Stamp {
    if SOURCE.load(Ordering::Relaxed) == TSC {
        Stamp(rdtsc())
    } else {
        Stamp(instant_ns())
    }
}

/// Converts stamps to the monotonic clock. Measured by the worker: a 20 ms
/// baseline at start, lengthened (and so sharpened) on every [`refine`](Self::refine).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Calibration {
    base: Stamp,
    base_instant: Instant,
    ns_per_tick: f64,
}

impl Calibration {
    /// A placeholder until [`measure`](Self::measure) runs on the worker.
    pub(crate) fn unmeasured() -> Self {
        let (base, base_instant) = pair();
        Calibration {
            base,
            base_instant,
            ns_per_tick: 1.0,
        }
    }

    /// Measure (blocks for 20 ms when stamps are TSC ticks).
    pub(crate) fn measure() -> Self {
        let (base, base_instant) = pair();
        if SOURCE.load(Ordering::Relaxed) != TSC {
            return Calibration {
                base,
                base_instant,
                ns_per_tick: 1.0,
            };
        }
        std::thread::sleep(Duration::from_millis(20));
        let mut c = Calibration {
            base,
            base_instant,
            ns_per_tick: 1.0,
        };
        c.refine();
        c
    }

    /// Re-measure the rate over the whole time since the base.
    pub(crate) fn refine(&mut self) {
        if SOURCE.load(Ordering::Relaxed) != TSC {
            return;
        }
        let (s, i) = pair();
        let ticks = s.ticks_since(self.base);
        let ns = i.saturating_duration_since(self.base_instant).as_nanos() as f64;
        if ticks > 0 && ns > 0.0 {
            self.ns_per_tick = ns / ticks as f64;
        }
    }

    /// A tick count as nanoseconds.
    #[inline]
    pub(crate) fn ns(&self, ticks: u64) -> u64 {
        (ticks as f64 * self.ns_per_tick).round() as u64
    }

    /// A stamp as an `Instant`.
    pub(crate) fn instant(&self, s: Stamp) -> Instant {
        if s >= self.base {
            self.base_instant + Duration::from_nanos(self.ns(s.0 - self.base.0))
        } else {
            let back = Duration::from_nanos(self.ns(self.base.0 - s.0));
            self.base_instant
                .checked_sub(back)
                .unwrap_or(self.base_instant)
        }
    }
}

/// A stamp and an `Instant` read together: the stamp between two
/// `Instant`s, from the tightest of a few tries (a preempted try is wide).
fn pair() -> (Stamp, Instant) {
    let mut best: Option<(Duration, Stamp, Instant)> = None;
    for _ in 0..5 {
        let a = Instant::now();
        let s = now();
        let b = Instant::now();
        let width = b.saturating_duration_since(a);
        if best.is_none_or(|(w, _, _)| width < w) {
            best = Some((width, s, a + width / 2));
        }
    }
    match best {
        Some((_, s, i)) => (s, i),
        None => (now(), Instant::now()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn calibrated_stamps_agree_with_instant() {
        init();
        let cal = Calibration::measure();
        let (s0, i0) = pair();
        std::thread::sleep(Duration::from_millis(30));
        let (s1, i1) = pair();
        let by_stamp = cal.ns(s1.ticks_since(s0)) as f64;
        let by_instant = i1.duration_since(i0).as_nanos() as f64;
        // Within 0.1 % + 20 µs of read jitter.
        assert!(
            (by_stamp - by_instant).abs() < by_instant * 1e-3 + 20_000.0,
            "{by_stamp} vs {by_instant}"
        );
        let back = cal.instant(s1);
        let err = if back > i1 { back - i1 } else { i1 - back };
        assert!(err < Duration::from_micros(100), "{err:?}");
    }
}
