//! Whether a figure's spikes recur with a period: spike events, their
//! intervals, and the autocorrelation of the binned spike series.

use stagetrace_schema::Figure;

use super::group::GroupData;
use super::options::MIN_N;
use super::report::Periodicity;
use crate::load::Dataset;
use crate::stats;

/// Fewest separate spike events for a periodicity claim.
const MIN_EVENTS: usize = 5;
/// Most spike events the periodicity search looks at (more is not "spikes").
const MAX_EVENTS: usize = 5_000;
/// Longest period searched for (ms).
const MAX_PERIOD_MS: f64 = 120_000.0;

/// The periodicity of every analysed figure's spikes over a group's calls
/// (figures with too few or too many spike events are left out).
pub(super) fn periodicities(ds: &Dataset, g: &GroupData) -> Vec<Periodicity> {
    let times: Vec<f64> = g.calls.iter().map(|&i| ds.ts[i as usize]).collect();
    let mut gaps: Vec<f32> = times.windows(2).map(|w| (w[1] - w[0]) as f32).collect();
    let call_dt = if gaps.is_empty() {
        1.0
    } else {
        let mid = gaps.len() / 2;
        let (_, v, _) = gaps.select_nth_unstable_by(mid, f32::total_cmp);
        f64::from(*v).max(1e-3)
    };
    super::analysed()
        .filter_map(|m| periodicity(ds, g, &times, call_dt, m))
        .collect()
}

/// The periodicity of `f`'s spikes over a group's calls (`times`: their
/// wall times; `call_dt`: the typical time between calls), when it has
/// enough of them.
fn periodicity(
    ds: &Dataset,
    g: &GroupData,
    times: &[f64],
    call_dt: f64,
    f: Figure,
) -> Option<Periodicity> {
    let thr = g.spike_thresholds[f.index()]?;
    if times.len() < MIN_N {
        return None;
    }
    let (events, event_calls) = spike_events(&ds.columns[f.index()], g, times, call_dt, thr);
    if events.len() < MIN_EVENTS || events.len() > MAX_EVENTS {
        return None;
    }
    let mut isi: Vec<f32> = events.windows(2).map(|w| (w[1] - w[0]) as f32).collect();
    stats::sort_f32(&mut isi);
    let (isi_med, isi_mad) = stats::median_mad(&isi);
    let every_nth = every_nth_call(&event_calls);
    let on_clock = on_a_clock(&isi, isi_med);
    let fund = fundamental(&events, times, call_dt)?;
    let acf_lag_ms = fund.lag_ms;
    let near: Vec<f32> = isi
        .iter()
        .copied()
        .filter(|d| (f64::from(*d) - acf_lag_ms).abs() <= 0.2 * acf_lag_ms)
        .collect();
    let isi_on_period = near.len() as f64 / isi.len() as f64;
    // An exact pattern is periodic whatever the autocorrelation says: the
    // ACF of a sparse series can stay under its threshold (a few missed or
    // doubled spikes, a short run) while every interval says the period.
    let exact = every_nth.is_some() || on_clock;
    let significant =
        exact || (fund.acf >= fund.threshold && isi_on_period >= 0.3 && near.len() >= 3);
    let period_ms = if exact {
        isi_med
    } else if near.is_empty() {
        acf_lag_ms
    } else {
        stats::quantile(&near, 0.5)
    };
    Some(Periodicity {
        stage: f.name(),
        spikes: events.len() as u64,
        isi_median_s: isi_med / 1000.0,
        isi_cv: 1.4826 * isi_mad / isi_med.max(1e-9),
        acf_lag_s: acf_lag_ms / 1000.0,
        acf: fund.acf,
        acf_threshold: fund.threshold,
        isi_on_period,
        significant,
        period_s: significant.then_some(period_ms / 1000.0),
        period_calls: every_nth,
        event_calls: event_calls.iter().map(|&k| g.calls[k]).collect(),
    })
}

/// Spike events of one figure's column: its spiking calls, runs of
/// adjacent spiking calls merged; (wall times, indices among the group's
/// calls).
fn spike_events(
    col: &[f32],
    g: &GroupData,
    times: &[f64],
    call_dt: f64,
    thr: f64,
) -> (Vec<f64>, Vec<usize>) {
    let mut events: Vec<f64> = Vec::new();
    let mut event_calls: Vec<usize> = Vec::new();
    let mut last_spike = f64::NEG_INFINITY;
    for (k, &i) in g.calls.iter().enumerate() {
        let v = col.get(i as usize).copied().unwrap_or(f32::NAN);
        if v.is_nan() || f64::from(v) <= thr {
            continue;
        }
        let t = times[k];
        if t - last_spike > 1.5 * call_dt {
            events.push(t);
            event_calls.push(k);
        }
        last_spike = t;
    }
    (events, event_calls)
}

/// The autocorrelation's fundamental period of a spike series.
struct Fundamental {
    /// Its lag (ms).
    lag_ms: f64,
    /// The (smoothed) autocorrelation there, at most 1.
    acf: f64,
    /// What it must reach to count: `max(0.25, 5·√3/√bins)`.
    threshold: f64,
}

/// The autocorrelation of the spike series binned at `call_dt`, from pair
/// distances (the series is sparse: cost grows with spikes, not with
/// calls), smoothed over ±1 bin so a jittered period still shows as one
/// peak; the fundamental is the first lag reaching 60 % of the best peak.
/// `None` when the run is too short for a lag of three bins.
fn fundamental(events: &[f64], times: &[f64], call_dt: f64) -> Option<Fundamental> {
    let t0 = times[0];
    let span = times[times.len() - 1] - t0;
    let bin = call_dt;
    let nbins = ((span / bin).floor() as usize + 1).max(2);
    let max_lag = (nbins / 2).min((MAX_PERIOD_MS / bin) as usize + 2);
    if max_lag < 3 {
        return None;
    }
    let ev_bins: Vec<usize> = events
        .iter()
        .map(|t| ((t - t0) / bin).floor() as usize)
        .collect();
    let mut pairs = vec![0f64; max_lag + 1];
    for (a, &ba) in ev_bins.iter().enumerate() {
        for &bb in &ev_bins[a + 1..] {
            let d = bb - ba;
            if d > max_lag {
                break;
            }
            pairs[d] += 1.0;
        }
    }
    let e = events.len() as f64;
    let n = nbins as f64;
    let mean = e / n;
    let denom = e - n * mean * mean; // Σx² − N·x̄² with x ∈ {0,1}
    if denom <= 0.0 {
        return None;
    }
    let r = |lag: usize| -> f64 {
        let c = pairs.get(lag).copied().unwrap_or(0.0);
        (c - (n - lag as f64) * mean * mean) / denom
    };
    let smooth = |lag: usize| r(lag - 1) + r(lag) + r(lag + 1);
    let min_lag = 3usize;
    let mut best = (0usize, f64::NEG_INFINITY);
    for lag in min_lag..max_lag {
        let s = smooth(lag);
        if s > best.1 {
            best = (lag, s);
        }
    }
    let mut fund = best;
    for lag in min_lag..best.0 {
        let s = smooth(lag);
        if s >= 0.6 * best.1 && s >= smooth(lag - 1) && s >= smooth(lag + 1) {
            fund = (lag, s);
            break;
        }
    }
    Some(Fundamental {
        lag_ms: fund.0 as f64 * bin,
        acf: fund.1.min(1.0),
        threshold: (5.0 * 3f64.sqrt() / n.sqrt()).max(0.25),
    })
}

/// Share of intervals that must follow an exact pattern for it to be one.
const EXACT_SHARE: f64 = 0.8;
/// How far an interval may stray from the median and still be "on a
/// clock": a timer's or a GC's period, not a random spacing.
const ON_CLOCK_TOLERANCE: f64 = 0.05;

/// `Some(n)` when the spike events fall on every `n`-th call (`n ≥ 2`): at
/// least [`EXACT_SHARE`] of the intervals, counted in calls, are exactly
/// the median one. Random spikes at 1–5 % have geometric intervals: a few
/// percent of them share any one value.
fn every_nth_call(event_calls: &[usize]) -> Option<u64> {
    let mut gaps: Vec<usize> = event_calls.windows(2).map(|w| w[1] - w[0]).collect();
    if gaps.len() + 1 < MIN_EVENTS {
        return None;
    }
    gaps.sort_unstable();
    let n = gaps[gaps.len() / 2];
    let on = gaps.iter().filter(|g| **g == n).count();
    (n >= 2 && on as f64 >= EXACT_SHARE * gaps.len() as f64).then_some(n as u64)
}

/// True when at least [`EXACT_SHARE`] of the inter-spike intervals (`isi`,
/// ms) lie within [`ON_CLOCK_TOLERANCE`] of their median: spikes on a fixed
/// period in seconds, whatever the call rate.
fn on_a_clock(isi: &[f32], isi_med: f64) -> bool {
    if isi.len() + 1 < MIN_EVENTS || isi_med <= 0.0 {
        return false;
    }
    let tol = ON_CLOCK_TOLERANCE * isi_med;
    let on = isi
        .iter()
        .filter(|d| (f64::from(**d) - isi_med).abs() <= tol)
        .count();
    on as f64 >= EXACT_SHARE * isi.len() as f64
}
