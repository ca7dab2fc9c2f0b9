//! How a direction is shaped: the one-way delay with its jitter, the
//! periodic stalls and the bandwidth limit.

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::Rng;

use super::config::{Jitter, LinkConfig, Stall};
use super::timer::PreciseTimer;

/// Longest one-way delay or stall applied (longer settings are capped).
const MAX_DELAY: Duration = Duration::from_secs(3600);

/// Delay plus jitter for one chunk, never negative, at most [`MAX_DELAY`].
pub(super) fn one_way(cfg: &LinkConfig, rng: &mut StdRng) -> Duration {
    let base = cfg.delay.as_secs_f64();
    let extra = match cfg.jitter {
        Jitter::None => 0.0,
        Jitter::Uniform(max) => {
            let m = max.as_secs_f64();
            if m > 0.0 {
                rng.random_range(-m..=m)
            } else {
                0.0
            }
        }
        Jitter::Normal(sd) => {
            // Box–Muller.
            let u1: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
            let u2: f64 = rng.random::<f64>();
            sd.as_secs_f64() * (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
        }
    };
    Duration::try_from_secs_f64((base + extra).max(0.0))
        .unwrap_or(cfg.delay)
        .min(MAX_DELAY)
}

/// Wait out the stall `stall` is in now, if any (stalls are timed from the
/// proxy's start, `started`).
pub(super) async fn wait_out_stall(stall: Stall, started: Instant, timer: &PreciseTimer) {
    if stall.every.is_zero() || stall.length.is_zero() {
        return;
    }
    let every = stall.every.as_nanos();
    let phase = started.elapsed().as_nanos() % every;
    let length = stall.length.min(stall.every).min(MAX_DELAY).as_nanos();
    if phase < length {
        let left = Duration::from_nanos(u64::try_from(length - phase).unwrap_or(0));
        timer.sleep_until(Instant::now() + left).await;
    }
}

/// A token bucket refilled at the configured rate; burst ≈ 10 ms of traffic
/// (between 1500 bytes and 64 KiB).
#[derive(Debug, Default)]
pub(super) struct TokenBucket {
    tokens: f64,
    last: Option<Instant>,
}

impl TokenBucket {
    /// Wait until some bytes may pass; returns how many (≤ `want`).
    pub(super) async fn take(&mut self, rate: u64, want: usize, timer: &PreciseTimer) -> usize {
        let rate_f = rate.max(1) as f64;
        let burst = (rate_f / 100.0).clamp(1500.0, 65536.0);
        // Pieces of a quarter burst: a late wake-up (up to 3/4 of the burst
        // time) keeps its tokens instead of losing them to the cap.
        let piece = (want as f64).min(burst / 4.0).max(1.0);
        loop {
            let now = Instant::now();
            let last = *self.last.get_or_insert(now);
            self.tokens =
                (self.tokens + now.duration_since(last).as_secs_f64() * rate_f).min(burst);
            self.last = Some(now);
            if self.tokens >= piece {
                self.tokens -= piece;
                return piece as usize;
            }
            let wait = (piece - self.tokens) / rate_f;
            timer
                .sleep_until(now + Duration::from_secs_f64(wait.min(60.0)))
                .await;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn one_way_never_negative_and_seeded() {
        let cfg = LinkConfig::delay(Duration::from_millis(1))
            .with_jitter(Jitter::Normal(Duration::from_millis(5)));
        let mut a = StdRng::seed_from_u64(1);
        let mut b = StdRng::seed_from_u64(1);
        let xs: Vec<Duration> = (0..1000).map(|_| one_way(&cfg, &mut a)).collect();
        let ys: Vec<Duration> = (0..1000).map(|_| one_way(&cfg, &mut b)).collect();
        assert_eq!(xs, ys);
        assert!(xs.iter().any(|d| d.is_zero()));
        let mean = xs.iter().map(Duration::as_secs_f64).sum::<f64>() / 1000.0;
        // A clipped normal N(1 ms, 5 ms) has a mean near 2.6 ms.
        assert!((0.0015..0.004).contains(&mean), "mean {mean}");
        let uni = LinkConfig::delay(Duration::from_millis(10))
            .with_jitter(Jitter::Uniform(Duration::from_millis(2)));
        let mut r = StdRng::seed_from_u64(2);
        for _ in 0..1000 {
            let d = one_way(&uni, &mut r);
            assert!(d >= Duration::from_millis(8) && d <= Duration::from_millis(12));
        }
    }
}
