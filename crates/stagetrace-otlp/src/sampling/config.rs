//! [`TailSampling`]: what the user sets on the builder.

use std::time::Duration;

use stagetrace_schema::Figure;

/// Calls of one kind the rolling p99 is computed over.
pub(super) const DEFAULT_P99_WINDOW: usize = 1000;
/// Calls of a kind seen before its p99 is trusted (a p99 of ten calls is their maximum).
pub(super) const DEFAULT_P99_MIN_CALLS: usize = 100;

/// Which calls the exporter sends as traces when it samples at the source
/// ([`OtlpBuilder::tail_sampling`](crate::OtlpBuilder::tail_sampling)).
///
/// A call is kept when any criterion holds, checked in this order (the
/// first that holds is the one counted):
///
/// 1. it failed (`failed: true`) — on by default;
/// 2. it missed its deadline (`deadline_miss: true`) — on by default;
/// 3. one of its figures is over a threshold given with
///    [`keep_above`](Self::keep_above);
/// 4. its `e2e` is above the rolling p99 of its kind (the last
///    [`p99_window`](Self::p99_window) calls of that kind, once at least
///    100 were seen) — on by default;
/// 5. the random sample: each remaining call with probability `p`, at most
///    `per_second` a second on average (a token bucket over the records'
///    own timestamps, burst of `max(1, per_second)`), from a seeded
///    generator so that a run can be replayed — 1 %, at most 1 a second by
///    default.
///
/// The rest is dropped before the export queue and counted.
///
/// ```
/// use std::time::Duration;
/// use stagetrace_schema::Figure;
/// use stagetrace_otlp::{OtlpExporter, TailSampling};
///
/// let sampling = TailSampling::new()
///     .keep_above(Figure::Infer, Duration::from_millis(40))
///     .random(0.01, 0.5);
/// let builder = OtlpExporter::builder().tail_sampling(sampling);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct TailSampling {
    pub(super) failed: bool,
    pub(super) deadline_misses: bool,
    pub(super) above_p99: bool,
    pub(super) p99_window: usize,
    pub(super) p99_min_calls: usize,
    pub(super) thresholds: Vec<(Figure, i64)>,
    pub(super) probability: f64,
    pub(super) per_second: f64,
    pub(super) seed: u64,
}

impl Default for TailSampling {
    fn default() -> Self {
        TailSampling {
            failed: true,
            deadline_misses: true,
            above_p99: true,
            p99_window: DEFAULT_P99_WINDOW,
            p99_min_calls: DEFAULT_P99_MIN_CALLS,
            thresholds: Vec::new(),
            probability: 0.01,
            per_second: 1.0,
            seed: 0x5eed_57a6_e7ac_e000,
        }
    }
}

impl TailSampling {
    /// The default criteria: failed, deadline missed, above the rolling p99
    /// of the kind, and a 1 % random sample of at most 1 call a second.
    pub fn new() -> Self {
        Self::default()
    }

    /// Keep every failed call (default on).
    pub fn keep_failed(mut self, on: bool) -> Self {
        self.failed = on;
        self
    }

    /// Keep every call that missed its deadline (default on; needs the
    /// layer's `target_hz`).
    pub fn keep_deadline_misses(mut self, on: bool) -> Self {
        self.deadline_misses = on;
        self
    }

    /// Keep every call whose `e2e` is above the rolling p99 of its kind
    /// (default on). Periodic spikes on more than 1 % of the calls become the
    /// p99 themselves: give them a [`keep_above`](Self::keep_above) threshold.
    pub fn keep_above_p99(mut self, on: bool) -> Self {
        self.above_p99 = on;
        self
    }

    /// How many of a kind's latest calls its p99 is taken over (default
    /// 1000, at least 100). Memory: 8 bytes per call per kind (at most 32
    /// kinds are told apart; the others share one window).
    pub fn p99_window(mut self, calls: usize) -> Self {
        self.p99_window = calls.max(DEFAULT_P99_MIN_CALLS);
        self
    }

    /// Keep every call whose `figure` is above `limit` (strictly). May be
    /// given for several figures; a second one for the same figure replaces
    /// the first.
    pub fn keep_above(mut self, figure: Figure, limit: Duration) -> Self {
        let ns = i64::try_from(limit.as_nanos()).unwrap_or(i64::MAX);
        self.thresholds.retain(|(f, _)| *f != figure);
        self.thresholds.push((figure, ns));
        self
    }

    /// The random sample of the calls no criterion kept: each with
    /// `probability` (0 to 1), at most `per_second` a second on average
    /// (0: none). Default 1 %, 1 a second.
    pub fn random(mut self, probability: f64, per_second: f64) -> Self {
        self.probability = if probability.is_finite() {
            probability.clamp(0.0, 1.0)
        } else {
            0.0
        };
        self.per_second = if per_second.is_finite() {
            per_second.max(0.0)
        } else {
            0.0
        };
        self
    }

    /// The random sample's seed: the same seed over the same records keeps
    /// the same calls.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
}
