//! One peer's NTP clock filter: the minimum-delay sample of a sliding
//! window, drift by regression, clock steps detected and the window reset.

use std::collections::VecDeque;
use std::time::Duration;

use super::anchor::duration_ns;
use super::sample::{diff, NtpSample};

/// Tuning of the [`OffsetFilter`]; the defaults suit control loops from
/// 1 Hz to 1 kHz.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FilterConfig {
    /// Samples kept for the minimum-delay choice.
    pub window_samples: usize,
    /// Oldest sample kept for the minimum-delay choice.
    pub window: Duration,
    /// Width of one drift bucket (its minimum-delay sample feeds the drift
    /// regression).
    pub drift_bucket: Duration,
    /// Buckets kept for the drift regression.
    pub drift_buckets: usize,
    /// Frequency error assumed before drift can be estimated, ppm.
    pub default_drift_ppm: f64,
    /// Extra tolerance before a sample counts as a clock step.
    pub step_margin: Duration,
    /// Consecutive, mutually consistent off-track samples that confirm a step.
    pub step_confirm: usize,
}

impl Default for FilterConfig {
    fn default() -> Self {
        FilterConfig {
            window_samples: 64,
            window: Duration::from_secs(30),
            drift_bucket: Duration::from_secs(1),
            drift_buckets: 64,
            default_drift_ppm: 50.0,
            step_margin: Duration::from_millis(1),
            step_confirm: 2,
        }
    }
}

/// The largest frequency error believed from a regression, ppm; beyond it
/// the fit is noise (or the peer's clock is broken) and is not used.
const MAX_DRIFT_PPM: f64 = 500.0;
/// Floor on the drift-rate uncertainty once drift is estimated, ppm.
const MIN_DRIFT_ERR_PPM: f64 = 2.0;
/// The noise of one θ at the path's floor, ns: clock reads and stamp
/// placement. It keeps the drift fit's weights finite and a floor sample
/// from counting infinitely more than one a few µs above it.
const THETA_NOISE_NS: f64 = 20_000.0;
/// Buckets needed before drift is estimated.
const MIN_DRIFT_POINTS: usize = 5;
/// Time span the drift buckets must cover before drift is estimated, s.
const MIN_DRIFT_SPAN_S: f64 = 5.0;

/// Standard errors a ± bound spans for the coverage of ± 3σ (99.73 %,
/// two-sided) when σ itself is estimated from a fit with `df` degrees of
/// freedom: Student's t quantile. With few drift buckets 3 standard errors
/// cover far less (about 94 % with 5 buckets); between tabulated values the
/// smaller `df`'s (larger) factor is used, so the bound never covers less.
fn coverage_factor(df: usize) -> f64 {
    // (df, t_{0.99865}(df))
    const TABLE: [(usize, f64); 13] = [
        (1, 235.8),
        (2, 19.21),
        (3, 9.22),
        (4, 6.62),
        (5, 5.51),
        (6, 4.90),
        (7, 4.53),
        (8, 4.28),
        (10, 3.96),
        (12, 3.76),
        (16, 3.54),
        (20, 3.42),
        (30, 3.27),
    ];
    if df >= 60 {
        // Down to 3.0 as df grows: 3.13 never covers less.
        return 3.13;
    }
    TABLE
        .iter()
        .rev()
        .find(|(d, _)| *d <= df)
        .map_or(TABLE[0].1, |(_, t)| *t)
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Sample {
    /// Client time of the sample (t3), ns since the epoch.
    at: u64,
    theta: f64,
    delta: f64,
}

/// What the filter says the offset is at one moment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OffsetEstimate {
    /// Server − client offset, ns.
    pub offset_ns: f64,
    /// ± bound on `offset_ns`: δ of the sample used / 2, plus drift since it.
    pub err_ns: f64,
    /// Delay δ of the sample used, ns.
    pub delay_ns: f64,
    /// Frequency error (server clock rate − client clock rate), ppm, once
    /// enough samples span enough time.
    pub drift_ppm: Option<f64>,
    /// ± bound on `drift_ppm`: the larger of the weighted fit's standard
    /// error times the Student-t factor that gives ± 3σ's coverage with
    /// that few buckets (9.2 with 5, 4.3 with 10, 3.0 with many) and the
    /// worst tilt the samples' excess delays allow; at least 2 ppm.
    pub drift_err_ppm: Option<f64>,
    /// True when the estimate rests on the current sample alone because it
    /// disagrees with the window (a suspected clock step not yet confirmed).
    pub own_sample: bool,
    /// True when this sample confirmed a clock step and reset the window.
    pub step: bool,
}

/// One peer's NTP clock filter: minimum-delay sample over a sliding window
/// (count and time), drift by regression over per-bucket minimum-delay
/// samples, and step detection (a sample far outside the window's bound,
/// confirmed by the next ones, resets the window).
///
/// Why it works: for any sample, the true offset lies within
/// `θ ± δ/2` as long as both one-way delays are non-negative. The sample with
/// the smallest δ has the tightest bound; drift widens it with age.
#[derive(Clone, Debug)]
pub struct OffsetFilter {
    cfg: FilterConfig,
    window: VecDeque<Sample>,
    /// (bucket index, minimum-delay sample of that bucket), oldest first.
    buckets: VecDeque<(u64, Sample)>,
    pending: Vec<Sample>,
    steps: u64,
    outliers: u64,
    invalid: u64,
}

impl Default for OffsetFilter {
    fn default() -> Self {
        OffsetFilter::new(FilterConfig::default())
    }
}

impl OffsetFilter {
    /// An empty filter.
    pub fn new(cfg: FilterConfig) -> Self {
        let cfg = FilterConfig {
            window_samples: cfg.window_samples.max(1),
            drift_buckets: cfg.drift_buckets.max(MIN_DRIFT_POINTS),
            step_confirm: cfg.step_confirm.max(1),
            drift_bucket: cfg.drift_bucket.max(Duration::from_millis(1)),
            ..cfg
        };
        OffsetFilter {
            cfg,
            window: VecDeque::with_capacity(cfg.window_samples),
            buckets: VecDeque::with_capacity(cfg.drift_buckets),
            pending: Vec::with_capacity(cfg.step_confirm),
            steps: 0,
            outliers: 0,
            invalid: 0,
        }
    }

    /// Clock steps detected so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Off-track samples that were not confirmed as a step.
    pub fn outliers(&self) -> u64 {
        self.outliers
    }

    /// Samples rejected outright (negative delay: the server's total exceeds
    /// the client's roundtrip).
    pub fn invalid(&self) -> u64 {
        self.invalid
    }

    /// Samples in the window.
    pub fn len(&self) -> usize {
        self.window.len()
    }

    /// True before the first valid sample (and right after a reset).
    pub fn is_empty(&self) -> bool {
        self.window.is_empty()
    }

    /// Feed one sample; returns the estimate to use for that call, `None`
    /// when the sample is invalid and no earlier estimate exists.
    pub fn add(&mut self, s: NtpSample) -> Option<OffsetEstimate> {
        let sample = Sample {
            at: s.t3,
            theta: s.offset_ns(),
            delta: s.delay_ns(),
        };
        if !(sample.delta >= 0.0 && sample.theta.is_finite()) {
            self.invalid += 1;
            return self.estimate_at(s.t3);
        }
        // After a pause longer than the window, old samples say too little
        // to judge this one against: start afresh rather than see a step.
        let window_ns = duration_ns(self.cfg.window);
        self.window
            .retain(|w| sample.at.saturating_sub(w.at) <= window_ns);
        let Some(pred) = self.estimate_at(sample.at) else {
            self.push(sample);
            return Some(self.own(sample, false));
        };
        let margin = duration_ns(self.cfg.step_margin) as f64;
        let off_track =
            (sample.theta - pred.offset_ns).abs() > sample.delta / 2.0 + pred.err_ns + margin;
        if !off_track {
            self.outliers += self.pending.len() as u64;
            self.pending.clear();
            self.push(sample);
            return self.estimate_at(sample.at);
        }
        // Off track: keep only pending samples that agree with this one.
        let rate = self.cfg.default_drift_ppm * 1e-6;
        let before = self.pending.len();
        self.pending.retain(|p| {
            let age = diff(sample.at, p.at).abs();
            (p.theta - sample.theta).abs()
                <= p.delta / 2.0 + sample.delta / 2.0 + rate * age + margin
        });
        self.outliers += (before - self.pending.len()) as u64;
        self.pending.push(sample);
        if self.pending.len() < self.cfg.step_confirm {
            return Some(self.own(sample, false));
        }
        self.steps += 1;
        self.window.clear();
        self.buckets.clear();
        for p in std::mem::take(&mut self.pending) {
            self.push(p);
        }
        self.estimate_at(sample.at)
            .map(|e| OffsetEstimate { step: true, ..e })
    }

    fn own(&self, s: Sample, step: bool) -> OffsetEstimate {
        OffsetEstimate {
            offset_ns: s.theta,
            err_ns: s.delta / 2.0,
            delay_ns: s.delta,
            drift_ppm: None,
            drift_err_ppm: None,
            own_sample: true,
            step,
        }
    }

    fn push(&mut self, s: Sample) {
        let window_ns = duration_ns(self.cfg.window);
        self.window.push_back(s);
        while self.window.len() > self.cfg.window_samples
            || self
                .window
                .front()
                .is_some_and(|f| s.at.saturating_sub(f.at) > window_ns)
        {
            self.window.pop_front();
        }
        let width = duration_ns(self.cfg.drift_bucket).max(1);
        let idx = s.at / width;
        match self.buckets.back_mut() {
            Some((b, best)) if *b == idx => {
                if s.delta < best.delta {
                    *best = s;
                }
            }
            // A sample older than the newest bucket (client clock moved
            // back) only updates the window.
            Some((b, _)) if *b > idx => {}
            _ => self.buckets.push_back((idx, s)),
        }
        let span = self.cfg.drift_buckets as u64;
        while self.buckets.len() > self.cfg.drift_buckets
            || self
                .buckets
                .front()
                .is_some_and(|(b, _)| idx.saturating_sub(*b) >= span)
        {
            self.buckets.pop_front();
        }
    }

    /// Frequency error by weighted least squares of θ over time on the
    /// buckets' minimum-δ samples: (slope as a fraction, its ± bound).
    ///
    /// Why weighted by the excess delay, not cut at a multiple of the best
    /// δ: a sample's θ is off the true offset by half the difference of its
    /// two one-way delays. At the path's minimum both are at their floor, so
    /// the error is a constant (the path's fixed asymmetry) that does not
    /// tilt the line; what tilts it is the delay a sample carries *above* the
    /// floor, `e = δ − δmin`, which bounds its θ error by `e/2`. A cut at
    /// `2·δmin` lets a 10 ms path's samples in with 10 ms of queueing on one
    /// side (a loaded host), so each is weighted by `1 / (e/2 + σ)²` instead:
    /// a floor sample counts fully, one that waited 1 ms counts ~2500× less.
    ///
    /// The bound is the larger of two: the fit's standard error times
    /// [`coverage_factor`] (the stamps' random noise), and the worst case of
    /// every sample's θ off by its full `e/2` in the direction that tilts
    /// the slope most (`Σ |∂slope/∂θᵢ| · eᵢ/2`), which holds however a
    /// loaded host delays one side.
    fn drift(&self) -> Option<(f64, f64)> {
        let pts = || self.buckets.iter().map(|(_, s)| s);
        let n = pts().count();
        let newest = self.buckets.back()?.1.at;
        let first = pts().next()?.at;
        if n < MIN_DRIFT_POINTS || diff(newest, first) / 1e9 < MIN_DRIFT_SPAN_S {
            return None;
        }
        let min_delta = pts().map(|s| s.delta).fold(f64::INFINITY, f64::min);
        let excess = |s: &Sample| (s.delta - min_delta).max(0.0);
        // The floor sample's own θ noise: at least the stamps' noise, and
        // when the buckets' minima sit far apart (few calls per bucket, a
        // path that never reaches its floor), half their median excess.
        let mut excesses: Vec<f64> = pts().map(excess).collect();
        excesses.sort_by(f64::total_cmp);
        let floor_noise = (excesses[excesses.len() / 2] / 2.0).max(THETA_NOISE_NS);
        let weight = |s: &Sample| (excess(s) / 2.0 + floor_noise).powi(-2);
        let x = |s: &Sample| diff(s.at, newest);
        let (sw, swx, swy) = pts().fold((0.0, 0.0, 0.0), |(sw, swx, swy), s| {
            let w = weight(s);
            (sw + w, swx + w * x(s), swy + w * s.theta)
        });
        let (mx, my) = (swx / sw, swy / sw);
        let (sxx, sxy) = pts().fold((0.0, 0.0), |(sxx, sxy), s| {
            let (w, dx) = (weight(s), x(s) - mx);
            (sxx + w * dx * dx, sxy + w * dx * (s.theta - my))
        });
        if sxx <= 0.0 {
            return None;
        }
        let slope = sxy / sxx;
        let rss = pts().fold(0.0, |acc, s| {
            let r = s.theta - (my + slope * (x(s) - mx));
            acc + weight(s) * r * r
        });
        let statistical = coverage_factor(n - 2) * (rss / (n as f64 - 2.0) / sxx).sqrt();
        let worst_case = pts().fold(0.0, |acc, s| {
            acc + (weight(s) * (x(s) - mx) / sxx).abs() * excess(s) / 2.0
        });
        let bound = statistical + worst_case;
        (slope.is_finite() && slope.abs() <= MAX_DRIFT_PPM * 1e-6).then_some((slope, bound))
    }

    /// The offset at client time `at` (ns since the epoch): the window's
    /// minimum-δ sample, moved along the drift; `None` when the window is
    /// empty.
    pub fn estimate_at(&self, at: u64) -> Option<OffsetEstimate> {
        // Minimum δ; among equals the newest.
        let best = self
            .window
            .iter()
            .rev()
            .fold(None::<&Sample>, |b, s| match b {
                Some(b) if b.delta <= s.delta => Some(b),
                _ => Some(s),
            })?;
        let age = diff(at, best.at);
        let drift = self.drift();
        let (slope, rate) = match drift {
            Some((slope, bound)) => (slope, bound.max(MIN_DRIFT_ERR_PPM * 1e-6)),
            None => (0.0, self.cfg.default_drift_ppm * 1e-6),
        };
        Some(OffsetEstimate {
            offset_ns: best.theta + slope * age,
            err_ns: best.delta / 2.0 + rate * age.abs(),
            delay_ns: best.delta,
            drift_ppm: drift.map(|(s, _)| s * 1e6),
            drift_err_ppm: drift.map(|_| rate * 1e6),
            own_sample: false,
            step: false,
        })
    }
}

// ---------------------------------------------------------------------------
// Stitching
// ---------------------------------------------------------------------------
