//! The random sample's two parts: a seeded generator (SplitMix64: tiny, no
//! dependency, the same sequence on every platform) and a token bucket
//! timed by the records themselves, so that the same records give the same
//! sample whatever the machine's load (and a test knows the count).

/// SplitMix64.
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Self {
        Rng(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// `true` with probability `p` (exactly never at 0, always at 1).
    pub(super) fn chance(&mut self, p: f64) -> bool {
        if p >= 1.0 {
            return true;
        }
        if p <= 0.0 {
            return false;
        }
        // 53 random bits as a float in [0, 1).
        let x = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        x < p
    }
}

/// Tokens refill at `per_second`, up to `burst`; time is the records' own
/// (ns since the Unix epoch), never the exporter's clock. A record older
/// than the last one (out of order, a wall-clock step back) refills nothing.
/// Tokens are counted in billionths, in integers, so that a refill adds up
/// exactly (a float sum of 0.01s may fall short of 1 token).
pub(super) struct TokenBucket {
    /// Billionths of a token per ns = tokens per second.
    per_second: f64,
    burst: u64,
    tokens: u64,
    last_ns: Option<u64>,
}

const ONE: u64 = 1_000_000_000;

impl TokenBucket {
    /// Starts full (`burst` = `max(1, per_second)`).
    pub(super) fn new(per_second: f64) -> Self {
        // `per_second` is finite: `TailSampling::random` sees to it.
        let burst = (per_second.clamp(1.0, 1e9) * ONE as f64) as u64;
        TokenBucket {
            per_second: per_second.min(1e9),
            burst,
            tokens: if per_second > 0.0 { burst } else { 0 },
            last_ns: None,
        }
    }

    /// Takes one token at time `now_ns` if there is one.
    pub(super) fn take(&mut self, now_ns: u64) -> bool {
        match self.last_ns {
            Some(last) if now_ns > last => {
                let refill = ((now_ns - last) as f64 * self.per_second) as u64;
                self.tokens = self.tokens.saturating_add(refill).min(self.burst);
                self.last_ns = Some(now_ns);
            }
            Some(_) => {}
            None => self.last_ns = Some(now_ns),
        }
        if self.tokens >= ONE {
            self.tokens -= ONE;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn the_bucket_gives_burst_then_its_rate() {
        // 2 a second, burst 2: offered one call every 10 ms for 10 s.
        let mut b = TokenBucket::new(2.0);
        let taken = (0..1000u64).filter(|i| b.take(i * S / 100)).count();
        // 2 at start, then one per 0.5 s of the 9.99 s that follow.
        assert_eq!(taken, 2 + 19);
    }

    #[test]
    fn a_zero_rate_takes_nothing_and_time_going_back_refills_nothing() {
        let mut b = TokenBucket::new(0.0);
        assert!(!(0..100u64).any(|i| b.take(i * S)));
        let mut b = TokenBucket::new(1.0);
        assert!(b.take(10 * S));
        assert!(!b.take(5 * S));
        assert!(!b.take(10 * S));
        assert!(b.take(11 * S));
    }

    #[test]
    fn the_generator_is_seeded() {
        let draws = |seed| {
            let mut r = Rng::new(seed);
            (0..64).map(|_| r.chance(0.5)).collect::<Vec<_>>()
        };
        assert_eq!(draws(7), draws(7));
        assert_ne!(draws(7), draws(8));
        let mut r = Rng::new(1);
        assert!((0..1000).all(|_| r.chance(1.0)));
        assert!(!(0..1000).any(|_| r.chance(0.0)));
    }
}
