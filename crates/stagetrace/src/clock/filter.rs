//! One peer's NTP clock filter: the minimum-delay sample of a sliding
//! window and an anchor beyond it, drift by regression on each direction's
//! minima, clock steps detected and the window reset.

use std::collections::VecDeque;
use std::time::Duration;

use super::anchor::duration_ns;
use super::fit::line_fit;
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
/// The noise of one exchange's stamps at the path's floor, ns: clock reads
/// and stamp placement. It keeps the drift fit's weights finite.
const THETA_NOISE_NS: f64 = 20_000.0;
/// Buckets needed before drift is estimated.
const MIN_DRIFT_POINTS: usize = 5;
/// Time span the drift buckets must cover before drift is estimated, s.
const MIN_DRIFT_SPAN_S: f64 = 5.0;

/// The drift fit: the frequency error and its bounds (fractions).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Drift {
    slope: f64,
    /// What the record states (`drift_err_ppm`) and an offset's bound
    /// grows by with age.
    bound: f64,
    /// The narrower bound of the weighted fit alone, for choosing between
    /// an older and a newer sample: the stated bound also covers the plain
    /// mean of the two directions' lines, which a one-way change tilts by
    /// half, and ageing the anchor by that would give it up to the very
    /// asymmetric exchanges it is kept against.
    choice_bound: f64,
}

/// One drift bucket: the smallest value of each one-way quantity, with the
/// client time it was seen at. `up = t1 − t0 = offset + uplink` and
/// `down = t2 − t3 = offset − downlink` (ns): each follows the offset plus a
/// delay that only queueing raises, so the bucket minima of each trace the
/// offset over time, each on one direction of the path.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Bucket {
    up: OneWay,
    down: OneWay,
}

/// A bucket's minimum on one direction: when (client time), the value, and
/// the δ of the exchange it came from.
#[derive(Clone, Copy, Debug, PartialEq)]
struct OneWay {
    at: u64,
    value: f64,
    delta: f64,
}

impl Bucket {
    fn of(s: &Sample) -> Bucket {
        let one = |value| OneWay {
            at: s.at,
            value,
            delta: s.delta,
        };
        Bucket {
            up: one(s.theta + s.delta / 2.0),
            down: one(s.theta - s.delta / 2.0),
        }
    }

    fn add(&mut self, s: &Sample) {
        let b = Bucket::of(s);
        // Smallest uplink: the lowest `up`; smallest downlink: the highest `down`.
        if b.up.value < self.up.value {
            self.up = b.up;
        }
        if b.down.value > self.down.value {
            self.down = b.down;
        }
    }
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
    /// ± bound on `drift_ppm`: the one-way fits' standard error times the
    /// Student-t factor that gives ± 3σ's coverage with that few buckets
    /// (9.2 with 5, 4.3 with 10, 3.0 with many), combined over the two
    /// directions when they agree; at least 2 ppm.
    pub drift_err_ppm: Option<f64>,
    /// True when the estimate rests on the current sample alone because it
    /// disagrees with the window (a suspected clock step not yet confirmed).
    pub own_sample: bool,
    /// True when this sample confirmed a clock step and reset the window.
    pub step: bool,
}

/// One peer's NTP clock filter: minimum-delay sample over a sliding window
/// (count and time) and the tightest-bound sample kept beyond it, drift by
/// regression over per-bucket one-way minima, and step detection (a sample far outside the window's bound,
/// confirmed by the next ones, resets the window).
///
/// Why it works: for any sample, the true offset lies within
/// `θ ± δ/2` as long as both one-way delays are non-negative. The sample with
/// the smallest δ has the tightest bound; drift widens it with age.
#[derive(Clone, Debug)]
pub struct OffsetFilter {
    cfg: FilterConfig,
    window: VecDeque<Sample>,
    /// (bucket index, that bucket's one-way minima), oldest first.
    buckets: VecDeque<(u64, Bucket)>,
    pending: Vec<Sample>,
    /// The sample with the tightest bound seen since the last step, kept
    /// beyond the window while its bound, widened by the drift bound since,
    /// stays the tightest (see [`OffsetFilter::estimate_at`]).
    anchor: Option<Sample>,
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
            anchor: None,
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
        if self.window.is_empty() {
            self.anchor = None;
        }
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
        self.anchor = None;
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
            Some((b, bucket)) if *b == idx => bucket.add(&s),
            // A sample older than the newest bucket (client clock moved
            // back) only updates the window.
            Some((b, _)) if *b > idx => {}
            _ => self.buckets.push_back((idx, Bucket::of(&s))),
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
        let rate = Self::choice_rate(self.drift().as_ref(), self.cfg.default_drift_ppm);
        match self.anchor {
            Some(a) if a.delta / 2.0 + rate * diff(s.at, a.at).abs() < s.delta / 2.0 => {}
            _ => self.anchor = Some(s),
        }
    }

    /// The drift rate's bound that ages samples when one is chosen over
    /// another (a fraction): the fit's [`Drift::choice_bound`], at least
    /// [`MIN_DRIFT_ERR_PPM`]; the configured default before there is a fit.
    fn choice_rate(drift: Option<&Drift>, default_ppm: f64) -> f64 {
        match drift {
            Some(d) => d.choice_bound.max(MIN_DRIFT_ERR_PPM * 1e-6),
            None => default_ppm * 1e-6,
        }
    }

    /// Frequency error from the buckets' one-way minima: (slope as a
    /// fraction, its ± bound).
    ///
    /// Why each direction apart, not θ: θ is off the offset by half the
    /// difference of the two one-way delays, so a path that gets slower one
    /// way, or a loaded host that queues one side, moves θ and tilts a fit
    /// through it. The smallest uplink of each second traces the offset on
    /// the uplink alone (`t1 − t0` = offset + a delay at its floor), the
    /// smallest downlink on the downlink alone. Each gets a weighted
    /// least-squares line; when the two agree within their bounds they are
    /// combined (inverse-variance), when they do not, one direction changed
    /// during the fit and the line with the smaller bound — the steady
    /// direction — is the drift; either way the stated bound reaches the
    /// two lines' plain mean too ([`Drift::bound`]). A bound is the fit's standard error times
    /// [`coverage_factor`](super::fit::coverage_factor) of its degrees of freedom.
    fn drift(&self) -> Option<Drift> {
        let n = self.buckets.len();
        let newest = self.buckets.back()?.1.up.at;
        let first = self.buckets.front()?.1.up.at;
        if n < MIN_DRIFT_POINTS || diff(newest, first) / 1e9 < MIN_DRIFT_SPAN_S {
            return None;
        }
        // Each point is weighted by how far the δ of its exchange lies above
        // the buckets' best: a minimum taken from an exchange that queued
        // (on either side) may itself be off by that much. The floor noise
        // keeps the weights finite: at least the stamps' noise, and half
        // the median excess when the minima sit far apart (few calls per
        // bucket).
        let min_delta = self
            .buckets
            .iter()
            .flat_map(|(_, b)| [b.up.delta, b.down.delta])
            .fold(f64::INFINITY, f64::min);
        let mut excesses: Vec<f64> = self
            .buckets
            .iter()
            .flat_map(|(_, b)| [b.up.delta, b.down.delta])
            .map(|d| d - min_delta)
            .collect();
        excesses.sort_by(f64::total_cmp);
        let floor_noise = (excesses[excesses.len() / 2] / 2.0).max(THETA_NOISE_NS);
        let line = |pick: fn(&Bucket) -> OneWay| {
            let points: Vec<(f64, f64, f64)> = self
                .buckets
                .iter()
                .map(|(_, b)| pick(b))
                .map(|w| {
                    let e = (w.delta - min_delta).max(0.0) / 2.0;
                    (diff(w.at, newest), w.value, (e + floor_noise).powi(-2))
                })
                .collect();
            line_fit(&points)
        };
        let up = line(|b| b.up)?;
        let down = line(|b| b.down)?;
        // Two lines that agree can still each be tilted: a floor that
        // moves alike on both directions (a host warming up or calming
        // down) tilts the uplink line one way and the downlink line the
        // other, and only their mean cancels it. Loaded runs showed it
        // (uplink slopes 0.6–2.7 ppm low, downlink ones as much high, on 26
        // and 24 of 28 lines), and the weighted mean took the narrower
        // line's tilt whole: 202.3 ± 2.1 ppm against a truth of 200. Two
        // lines cannot tell that from a floor that moved on one direction
        // only (where the narrower line is the drift), so the estimate
        // leans on the narrower line and the stated bound reaches the plain
        // mean too: the distance to it plus the mean of the two bounds
        // (which covers the mean whatever the two errors' correlation).
        let mean = (up.0 + down.0) / 2.0;
        let mean_reach = |slope: f64| (slope - mean).abs() + (up.1 + down.1) / 2.0;
        let d = if (up.0 - down.0).abs() <= up.1 + down.1 {
            let (wu, wd) = (up.1.max(1e-12).powi(-2), down.1.max(1e-12).powi(-2));
            let weighted = (up.0 * wu + down.0 * wd) / (wu + wd);
            // Two lines further apart than their bounds explain (each a
            // bound of about 3σ) widen the combined bound by their
            // disagreement in σ (Birge's ratio): the bounds were too narrow.
            let apart_sigma = (up.0 - down.0).abs() * 3.0 / (up.1.powi(2) + down.1.powi(2)).sqrt();
            let weighted_bound = (wu + wd).sqrt().recip() * apart_sigma.max(1.0);
            Drift {
                slope: weighted,
                bound: weighted_bound.max(mean_reach(weighted)),
                choice_bound: weighted_bound,
            }
        } else {
            let (slope, bound) = if up.1 <= down.1 { up } else { down };
            Drift {
                slope,
                bound: bound.max(mean_reach(slope)),
                choice_bound: bound,
            }
        };
        (d.slope.is_finite() && d.slope.abs() <= MAX_DRIFT_PPM * 1e-6).then_some(d)
    }

    /// The offset at client time `at` (ns since the epoch): the sample
    /// with the tightest bound at `at` — the window's minimum-δ sample, or
    /// the anchor kept from before it — moved along the drift; `None` when
    /// the window is empty.
    ///
    /// Why the anchor: when one direction of the path gets slower (a
    /// downlink-only delay), every new exchange is asymmetric and its θ is
    /// off by half the change. Re-estimated from those exchanges alone, the
    /// offset would move by half the change and split a one-way change in
    /// two. The minimum-delay exchange from before, carried forward with
    /// the drift (its bound widened by the drift bound since, as NTP's
    /// clock filter does), does not move: the change shows in the direction
    /// it happened. It yields to a newer sample once that one's bound is
    /// tighter, and is dropped on a clock step.
    pub fn estimate_at(&self, at: u64) -> Option<OffsetEstimate> {
        // Minimum δ; among equals the newest.
        let newest_best = self
            .window
            .iter()
            .rev()
            .fold(None::<&Sample>, |b, s| match b {
                Some(b) if b.delta <= s.delta => Some(b),
                _ => Some(s),
            })?;
        let drift = self.drift();
        let (slope, rate) = match &drift {
            Some(d) => (d.slope, d.bound.max(MIN_DRIFT_ERR_PPM * 1e-6)),
            None => (0.0, self.cfg.default_drift_ppm * 1e-6),
        };
        let choice = Self::choice_rate(drift.as_ref(), self.cfg.default_drift_ppm);
        let bound_at = |s: &Sample| s.delta / 2.0 + choice * diff(at, s.at).abs();
        let best = match &self.anchor {
            Some(a) if bound_at(a) < bound_at(newest_best) => a,
            _ => newest_best,
        };
        let age = diff(at, best.at);
        Some(OffsetEstimate {
            offset_ns: best.theta + slope * age,
            err_ns: best.delta / 2.0 + rate * age.abs(),
            delay_ns: best.delta,
            drift_ppm: drift.map(|d| d.slope * 1e6),
            drift_err_ppm: drift.map(|_| rate * 1e6),
            own_sample: false,
            step: false,
        })
    }
}

// ---------------------------------------------------------------------------
// Stitching
// ---------------------------------------------------------------------------
