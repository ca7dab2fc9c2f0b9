//! Precise waits that stand in for a simulated stage's cost: sleep until
//! just before the deadline, then spin, so a simulated 12 ms model costs
//! 12 ms to within microseconds rather than whatever the OS timer adds.

use std::time::{Duration, Instant};

/// How long before a deadline a precise wait stops sleeping and starts to
/// spin. OS timers (and tokio's, which rounds to whole milliseconds) wake up
/// to ~1 ms late, so a plain sleep would stretch every simulated stage by a
/// random amount; sleeping until `deadline - SPIN` and spinning the rest
/// lands on the deadline within microseconds.
pub(crate) const SPIN: Duration = Duration::from_micros(1500);

/// What a precise wait does in its final spin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spin {
    /// Busy-wait without yielding. On a busy machine a yield can hand the
    /// core away for a whole scheduler slice; use this when nothing else of
    /// the caller's own traffic needs the core while one stage spins.
    Hot,
    /// Leave the core to threads that share it (other stages of the same
    /// pipeline, an experiment's CPU load) for all but the last
    /// `HOT_TAIL`: short sleeps on the OS's high-resolution timer, then a
    /// hot spin. Not `sched_yield` in a loop: beside a CPU-bound thread one
    /// yield hands the core away for a whole scheduler slice (1.5–3 ms),
    /// which stretched a simulated 8 ms model to 11.5 ms on a loaded
    /// machine, while a thread woken from a sleep is run at once.
    Yielding,
}

/// `v` milliseconds as a [`Duration`] (a simulated stage's cost): negative
/// and NaN count as zero, a value too large for a `Duration` as
/// [`Duration::MAX`].
pub fn ms(v: f64) -> Duration {
    Duration::try_from_secs_f64(v.max(0.0) / 1e3).unwrap_or(Duration::MAX)
}

/// The part of a [`Spin::Yielding`] wait spent spinning: more than the OS
/// timer's usual lateness (its 50 µs slack plus the wake-up), so the last
/// sleep ends before the deadline.
pub(crate) const HOT_TAIL: Duration = Duration::from_micros(150);

/// Waits until `deadline` without a timer's lateness (returns at once if it
/// has passed): a busy-wait, or for [`Spin::Yielding`] short sleeps until
/// [`HOT_TAIL`] before it and a busy-wait for the rest.
pub(crate) fn spin_until(deadline: Instant, spin: Spin) {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        let left = deadline - now;
        if spin == Spin::Yielding && left > HOT_TAIL {
            std::thread::sleep(left - HOT_TAIL);
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Blocks the thread until `deadline`: sleeps until [`SPIN`] before it,
/// then spins the rest (see [`SPIN`] for why).
pub(crate) fn sleep_until_precise_blocking(deadline: Instant, spin: Spin) {
    let now = Instant::now();
    if deadline > now + SPIN {
        std::thread::sleep(deadline - now - SPIN);
    }
    spin_until(deadline, spin);
}

/// Async version of [`sleep_until_precise_blocking`]: a tokio sleep until
/// [`SPIN`] before `deadline`, then a spin that holds the executor thread
/// for at most about [`SPIN`] plus the timer's lateness.
pub(crate) async fn sleep_until_precise(deadline: Instant, spin: Spin) {
    if deadline > Instant::now() + SPIN {
        tokio::time::sleep_until((deadline - SPIN).into()).await;
    }
    spin_until(deadline, spin);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ms_converts_and_saturates() {
        assert_eq!(ms(12.5), Duration::from_micros(12_500));
        assert_eq!(ms(-3.0), Duration::ZERO);
        assert_eq!(ms(f64::NAN), Duration::ZERO);
        assert_eq!(ms(f64::INFINITY), Duration::MAX);
    }

    #[test]
    fn precise_sleeps_do_not_return_early() {
        for spin in [Spin::Hot, Spin::Yielding] {
            let deadline = Instant::now() + Duration::from_millis(3);
            sleep_until_precise_blocking(deadline, spin);
            assert!(Instant::now() >= deadline);
        }
    }

    #[tokio::test]
    async fn async_precise_sleep_does_not_return_early() {
        for spin in [Spin::Hot, Spin::Yielding] {
            let deadline = Instant::now() + Duration::from_millis(3);
            sleep_until_precise(deadline, spin).await;
            assert!(Instant::now() >= deadline);
        }
    }
}
