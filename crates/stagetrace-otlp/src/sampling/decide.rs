//! The decision for one finished call, and its counters.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use stagetrace::record::CallRecord;
use stagetrace_schema::Figure;

use super::bucket::{Rng, TokenBucket};
use super::config::TailSampling;
use super::rolling::RollingP99;

/// Why a call was kept (the first criterion that held).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeepReason {
    /// The call failed.
    Failed,
    /// The call ended after its tick's deadline.
    DeadlineMiss,
    /// A figure was over the user's threshold for it.
    Threshold,
    /// `e2e` above the rolling p99 of the call's kind.
    AboveP99,
    /// The rate-limited random sample.
    Random,
    /// Not judged: another thread was deciding at that moment (the exporter
    /// never waits on the app's thread), so the call is kept.
    Unjudged,
}

/// What tail sampling decided so far (totals since the exporter was built).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleStats {
    /// Calls kept as traces, all reasons: the sum of the fields below but `dropped`.
    pub kept: u64,
    /// Calls no criterion kept: never queued, never exported.
    pub dropped: u64,
    /// Kept because they failed.
    pub failed: u64,
    /// Kept because they missed their deadline.
    pub deadline_miss: u64,
    /// Kept because a figure was over its threshold.
    pub threshold: u64,
    /// Kept because `e2e` was above the rolling p99 of their kind.
    pub above_p99: u64,
    /// Kept by the random sample.
    pub random: u64,
    /// Kept unjudged (another thread was deciding).
    pub unjudged: u64,
}

impl fmt::Display for SampleStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tail sampling: {} of {} calls kept ({} failed, {} deadline misses, {} over a \
             threshold, {} above p99, {} random, {} unjudged), {} dropped",
            self.kept,
            self.kept + self.dropped,
            self.failed,
            self.deadline_miss,
            self.threshold,
            self.above_p99,
            self.random,
            self.unjudged,
            self.dropped
        )
    }
}

/// The decisions so far, shared by the exporter's handles.
#[derive(Debug, Default)]
pub(crate) struct SampleCounters {
    failed: AtomicU64,
    deadline_miss: AtomicU64,
    threshold: AtomicU64,
    above_p99: AtomicU64,
    random: AtomicU64,
    unjudged: AtomicU64,
    dropped: AtomicU64,
}

impl SampleCounters {
    pub(crate) fn count(&self, decision: Option<KeepReason>) {
        let c = match decision {
            Some(KeepReason::Failed) => &self.failed,
            Some(KeepReason::DeadlineMiss) => &self.deadline_miss,
            Some(KeepReason::Threshold) => &self.threshold,
            Some(KeepReason::AboveP99) => &self.above_p99,
            Some(KeepReason::Random) => &self.random,
            Some(KeepReason::Unjudged) => &self.unjudged,
            None => &self.dropped,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> SampleStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut s = SampleStats {
            kept: 0,
            dropped: get(&self.dropped),
            failed: get(&self.failed),
            deadline_miss: get(&self.deadline_miss),
            threshold: get(&self.threshold),
            above_p99: get(&self.above_p99),
            random: get(&self.random),
            unjudged: get(&self.unjudged),
        };
        s.kept = s.failed + s.deadline_miss + s.threshold + s.above_p99 + s.random + s.unjudged;
        s
    }

    /// `(name, total)` pairs for the summary's `sink_counters`:
    /// `otlp.sample.kept` (every kept call) and `otlp.sample.dropped`, then
    /// the kept calls by reason.
    pub(crate) fn counters(&self) -> [(&'static str, u64); 8] {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let by_reason = [
            ("otlp.sample.failed", get(&self.failed)),
            ("otlp.sample.deadline_miss", get(&self.deadline_miss)),
            ("otlp.sample.threshold", get(&self.threshold)),
            ("otlp.sample.above_p99", get(&self.above_p99)),
            ("otlp.sample.random", get(&self.random)),
            ("otlp.sample.unjudged", get(&self.unjudged)),
        ];
        let kept = by_reason.iter().map(|(_, v)| v).sum();
        [
            ("otlp.sample.kept", kept),
            ("otlp.sample.dropped", get(&self.dropped)),
            by_reason[0],
            by_reason[1],
            by_reason[2],
            by_reason[3],
            by_reason[4],
            by_reason[5],
        ]
    }
}

/// The sampler's state: per-kind p99s, the bucket, the generator.
pub(crate) struct Sampler {
    cfg: TailSampling,
    p99: RollingP99,
    bucket: TokenBucket,
    rng: Rng,
}

impl Sampler {
    pub(crate) fn new(cfg: TailSampling) -> Self {
        Sampler {
            p99: RollingP99::new(cfg.p99_window, cfg.p99_min_calls),
            bucket: TokenBucket::new(cfg.per_second),
            rng: Rng::new(cfg.seed),
            cfg,
        }
    }

    /// Keep `rec` as a trace? `Some(why)` or `None` (drop). Every call,
    /// kept or not, enters its kind's p99 (failed and warm-up calls aside:
    /// they are not the kind's distribution).
    pub(crate) fn decide(&mut self, rec: &CallRecord) -> Option<KeepReason> {
        let failed = rec.failed == Some(true);
        let warmup = rec.warmup == Some(true);
        let above = if failed || warmup {
            false
        } else {
            self.p99.above_then_add(&rec.kind, rec.e2e_ns())
        };
        if self.cfg.failed && failed {
            return Some(KeepReason::Failed);
        }
        if self.cfg.deadline_misses && rec.deadline_miss == Some(true) {
            return Some(KeepReason::DeadlineMiss);
        }
        if self.over_threshold(rec) {
            return Some(KeepReason::Threshold);
        }
        if self.cfg.above_p99 && above {
            return Some(KeepReason::AboveP99);
        }
        // The generator is drawn for every remaining call, so a call's draw
        // does not depend on whether the bucket had a token.
        let drawn = self.rng.chance(self.cfg.probability);
        let end_ns = rec
            .ts_unix_ns
            .saturating_add(u64::try_from(rec.e2e_ns()).unwrap_or(0));
        if drawn && self.bucket.take(end_ns) {
            return Some(KeepReason::Random);
        }
        None
    }

    fn over_threshold(&self, rec: &CallRecord) -> bool {
        self.cfg
            .thresholds
            .iter()
            .any(|&(f, limit): &(Figure, i64)| rec.get(f).is_some_and(|v| v > limit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const MS: i64 = 1_000_000;

    fn call(seq: u64, e2e_ms: i64) -> CallRecord {
        let mut r = CallRecord {
            seq,
            ts_unix_ns: 1_764_000_000_000_000_000 + seq * 10_000_000,
            kind: "infer".into(),
            ..CallRecord::default()
        };
        r.set(Figure::E2e, e2e_ms * MS);
        r.set(Figure::Infer, e2e_ms * MS / 2);
        r
    }

    #[test]
    fn criteria_in_order_and_the_rest_dropped() {
        let mut s = Sampler::new(
            TailSampling::new()
                .random(0.0, 0.0)
                .keep_above(Figure::Infer, Duration::from_millis(30)),
        );
        let mut kept = Vec::new();
        for seq in 0..1000 {
            let mut r = call(seq, 20);
            if seq % 250 == 200 {
                r.set(Figure::E2e, 50 * MS); // a spike: above p99, infer 10 ms
            }
            if seq == 300 {
                r.failed = Some(true);
            }
            if seq == 301 {
                r.deadline_miss = Some(true);
            }
            if seq == 302 {
                r.set(Figure::Infer, 31 * MS);
            }
            if let Some(why) = s.decide(&r) {
                kept.push((seq, why));
            }
        }
        assert_eq!(
            kept,
            [
                (200, KeepReason::AboveP99),
                (300, KeepReason::Failed),
                (301, KeepReason::DeadlineMiss),
                (302, KeepReason::Threshold),
                (450, KeepReason::AboveP99),
                (700, KeepReason::AboveP99),
                (950, KeepReason::AboveP99),
            ]
        );
    }

    #[test]
    fn the_random_sample_is_the_seeded_draw_within_the_bucket() {
        let run = |seed| {
            let mut s = Sampler::new(
                TailSampling::new()
                    .keep_above_p99(false)
                    .random(0.25, 100.0)
                    .seed(seed),
            );
            (0..400)
                .filter(|&i| s.decide(&call(i, 20)).is_some())
                .collect::<Vec<_>>()
        };
        // The bucket (100/s at 100 calls/s) never runs dry: the sample is the
        // generator's draws alone, the same for the same seed.
        let mut rng = Rng::new(11);
        let expected: Vec<u64> = (0..400).filter(|_| rng.chance(0.25)).collect();
        assert_eq!(run(11), expected);
        assert_ne!(run(11), run(12));
        // At p = 1 the bucket alone decides: 1 a second, burst 1, calls every 10 ms for 4 s.
        let mut s = Sampler::new(TailSampling::new().keep_above_p99(false).random(1.0, 1.0));
        let kept: Vec<u64> = (0..400)
            .filter(|&i| s.decide(&call(i, 20)).is_some())
            .collect();
        assert_eq!(kept, [0, 100, 200, 300]);
    }

    #[test]
    fn counters_add_up() {
        let c = SampleCounters::default();
        c.count(Some(KeepReason::Random));
        c.count(Some(KeepReason::Failed));
        c.count(None);
        let m: std::collections::HashMap<_, _> = c.counters().into_iter().collect();
        assert_eq!(m["otlp.sample.kept"], 2);
        assert_eq!(m["otlp.sample.dropped"], 1);
        assert_eq!(m["otlp.sample.random"], 1);
    }
}
