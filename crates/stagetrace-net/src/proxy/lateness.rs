//! How late the proxy itself released its chunks: the time from a chunk's
//! release (its arrival plus the delay to inject) to its write. The proxy is
//! a process of ours on the host's cores: on a busy host it wakes late, and
//! that lateness is delay the host added, not the network asked for.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Buckets of the lateness histogram: bucket k holds [2^(k−1), 2^k) µs
/// (bucket 0: under 1 µs), the last one everything from 2^22 µs (4 s) on.
const BUCKETS: usize = 24;

/// Lock-free counters of the release lateness, shared by the writers.
#[derive(Debug, Default)]
pub(super) struct Lateness {
    chunks: AtomicU64,
    sum_ns: AtomicU64,
    max_ns: AtomicU64,
    buckets: [AtomicU64; BUCKETS],
}

/// The proxy's own release lateness so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyLateness {
    /// Chunks released.
    pub chunks: u64,
    /// Mean lateness, ns.
    pub mean_ns: u64,
    /// 99th percentile, ns: the upper end of its power-of-two bucket, so
    /// never below the truth and at most twice it.
    pub p99_ns: u64,
    /// Largest, ns.
    pub max_ns: u64,
}

impl Lateness {
    /// A chunk left `late` after its release.
    pub(super) fn add(&self, late: Duration) {
        let ns = u64::try_from(late.as_nanos()).unwrap_or(u64::MAX);
        self.chunks.fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
        self.max_ns.fetch_max(ns, Ordering::Relaxed);
        let us = ns / 1000;
        let k = (u64::BITS - us.leading_zeros()) as usize;
        self.buckets[k.min(BUCKETS - 1)].fetch_add(1, Ordering::Relaxed);
    }

    /// The figures so far.
    pub(super) fn snapshot(&self) -> ProxyLateness {
        let chunks = self.chunks.load(Ordering::Relaxed);
        if chunks == 0 {
            return ProxyLateness::default();
        }
        let max_ns = self.max_ns.load(Ordering::Relaxed);
        let rank = chunks - chunks / 100;
        let mut seen = 0;
        let mut p99_ns = max_ns;
        for (k, b) in self.buckets.iter().enumerate() {
            seen += b.load(Ordering::Relaxed);
            if seen >= rank {
                // Bucket k's upper end: 2^k µs.
                p99_ns = (1u64 << k).saturating_mul(1000).min(max_ns);
                break;
            }
        }
        ProxyLateness {
            chunks,
            mean_ns: self.sum_ns.load(Ordering::Relaxed) / chunks,
            p99_ns,
            max_ns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_p99_is_the_bucket_above_the_truth_and_the_mean_exact() {
        let l = Lateness::default();
        for _ in 0..990 {
            l.add(Duration::from_micros(10));
        }
        for _ in 0..10 {
            l.add(Duration::from_micros(3000));
        }
        let s = l.snapshot();
        assert_eq!(s.chunks, 1000);
        assert_eq!(s.mean_ns, (990 * 10_000 + 10 * 3_000_000) / 1000);
        // The 990th chunk is in [8, 16) µs.
        assert_eq!(s.p99_ns, 16_000);
        assert_eq!(s.max_ns, 3_000_000);
        assert_eq!(Lateness::default().snapshot(), ProxyLateness::default());
    }
}
