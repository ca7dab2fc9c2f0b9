//! Simulation helpers shared by the built-in pipeline of an experiment and
//! by `stagetrace demo`: precise waits that stand in for a stage's cost,
//! a cheap deterministic pseudo-random source and the FNV-1a checksum the
//! simulated stages use as their "work" on the payload.
//!
//! Nothing here is cryptographic or statistically strong; it only has to be
//! deterministic, cheap and the same in both callers.

use std::time::{Duration, Instant};

/// How long before a deadline a precise wait stops sleeping and starts to
/// spin. OS timers (and tokio's, which rounds to whole milliseconds) wake up
/// to ~1 ms late, so a plain sleep would stretch every simulated stage by a
/// random amount; sleeping until `deadline - SPIN` and spinning the rest
/// lands on the deadline within microseconds.
pub const SPIN: Duration = Duration::from_micros(1500);

/// What a precise wait does in its final spin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spin {
    /// Busy-wait without yielding. On a busy machine a yield can hand the
    /// core away for a whole scheduler slice; use this when nothing else of
    /// the caller's own traffic needs the core while one stage spins.
    Hot,
    /// Busy-wait and yield the core on every round, so threads that share
    /// the core (other stages of the same pipeline) keep running, at the
    /// price of an occasional late wake-up.
    Yielding,
}

/// `v` milliseconds as a [`Duration`] (a simulated stage's cost): negative
/// and NaN count as zero, a value too large for a `Duration` as
/// [`Duration::MAX`].
pub fn ms(v: f64) -> Duration {
    Duration::try_from_secs_f64(v.max(0.0) / 1e3).unwrap_or(Duration::MAX)
}

/// Busy-waits until `deadline` (returns at once if it has passed).
pub fn spin_until(deadline: Instant, spin: Spin) {
    while Instant::now() < deadline {
        std::hint::spin_loop();
        if spin == Spin::Yielding {
            std::thread::yield_now();
        }
    }
}

/// Blocks the thread until `deadline`: sleeps until [`SPIN`] before it,
/// then spins the rest (see [`SPIN`] for why).
pub fn sleep_until_precise_blocking(deadline: Instant, spin: Spin) {
    let now = Instant::now();
    if deadline > now + SPIN {
        std::thread::sleep(deadline - now - SPIN);
    }
    spin_until(deadline, spin);
}

/// Async version of [`sleep_until_precise_blocking`]: a tokio sleep until
/// [`SPIN`] before `deadline`, then a spin that holds the executor thread
/// for at most about [`SPIN`] plus the timer's lateness.
pub async fn sleep_until_precise(deadline: Instant, spin: Spin) {
    if deadline > Instant::now() + SPIN {
        tokio::time::sleep_until((deadline - SPIN).into()).await;
    }
    spin_until(deadline, spin);
}

/// One step of Marsaglia's xorshift64 (13, 7, 17): advances `state` and
/// returns the new value. `state` must not be 0 (0 maps to 0 forever).
pub fn xorshift(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    x
}

/// Fills `buf` with [`xorshift`] output, 8 little-endian bytes per step
/// (the last step is cut to what fits).
pub fn fill_random(buf: &mut [u8], state: &mut u64) {
    for chunk in buf.chunks_mut(8) {
        let v = xorshift(state).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

/// `n` pseudo-random values in [-0.5, 0.5) derived from `seed` (a simulated
/// model's action chunk): the top 24 bits of each [`xorshift`] step, seeded
/// with `seed | 1` so a zero seed still works.
pub fn pseudo_actions(seed: u64, n: usize) -> Vec<f32> {
    let mut state = seed | 1;
    (0..n)
        .map(|_| (xorshift(&mut state) >> 40) as f32 / (1u64 << 24) as f32 - 0.5)
        .collect()
}

/// 64-bit FNV-1a over every `stride`-th byte of `data` (a stride of 0 counts
/// as 1): a checksum cheap enough to sample a large frame.
pub fn fnv1a_strided(data: &[u8], stride: usize) -> u64 {
    data.iter()
        .step_by(stride.max(1))
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
}

/// 64-bit FNV-1a over all of `data`.
pub fn fnv1a(data: &[u8]) -> u64 {
    fnv1a_strided(data, 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_reference_vectors() {
        // Published FNV-1a 64-bit test vectors.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(fnv1a_strided(b"fxoxoxbxaxrx", 2), fnv1a(b"foobar"));
        assert_eq!(fnv1a_strided(b"foobar", 0), fnv1a(b"foobar"));
    }

    #[test]
    fn xorshift_is_deterministic_and_fills_tails() {
        let mut a = 1u64;
        assert_eq!(xorshift(&mut a), 0x4082_2041);
        let mut s = 7u64;
        let mut buf = [0u8; 13];
        fill_random(&mut buf, &mut s);
        let mut t = 7u64;
        let first = xorshift(&mut t).to_le_bytes();
        let second = xorshift(&mut t).to_le_bytes();
        assert_eq!(buf[..8], first);
        assert_eq!(buf[8..], second[..5]);
        let v = pseudo_actions(0, 350);
        assert_eq!(v.len(), 350);
        assert!(v.iter().all(|x| (-0.5..0.5).contains(x)));
        assert_eq!(v, pseudo_actions(1, 350));
    }

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
