//! The verdict: each level's stages against the baseline (bootstrap
//! intervals on the p50 and p99 ratios, a tail-exceedance test), a CUSUM
//! change-point over windowed p90 to time each move, then the first stage to
//! move, the stages it dragged along, what the resources did, and the next
//! step (DESIGN section 7).

use serde::Serialize;
use stagetrace_analyze::stats::{self, RatioCi};

use crate::plan::{FactorKind, VerdictSpec};
use crate::sampler::ResourceSample;

/// The figures compared, in call order; the last two are derived.
pub const COMPONENTS: [&str; 9] = [
    "capture", "uplink", "queue", "infer", "downlink", "dispatch", "gap", "net", "e2e",
];
/// Index of `e2e`.
pub(crate) const E2E: usize = 8;
/// Index of `gap`.
#[cfg(test)]
pub(crate) const GAP: usize = 6;

/// One call as the verdict sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Obs {
    pub(crate) ts_ms: f64,
    pub(crate) phase: usize,
    pub(crate) settling: bool,
    pub(crate) failed: bool,
    /// Values in `COMPONENTS` order, NaN when the record lacks the figure.
    pub(crate) vals: [f32; 9],
}

/// A phase of the run on the timeline.
#[derive(Clone, Debug, Serialize)]
pub struct PhaseSpan {
    /// `"warmup"`, `"baseline"` or `"level"`.
    pub phase: String,
    /// 0 for warm-up and baseline, 1.. for the levels.
    pub level: usize,
    /// Human label ("baseline", "delay 20 ms").
    pub label: String,
    /// Start, ms since the Unix epoch.
    pub start_unix_ms: f64,
    /// Calls starting before this are settling and left out.
    pub settle_until_unix_ms: f64,
    /// End (ms since the Unix epoch; the run's end for the last phase).
    pub end_unix_ms: f64,
    /// Calls counted in the statistics.
    pub calls: u64,
    /// Calls left out (settling, straddling a change, failed).
    pub excluded_calls: u64,
}

/// One figure at one level against the baseline.
#[derive(Clone, Debug, Serialize)]
pub struct ComponentResult {
    /// Calls at this level with the figure.
    pub n: usize,
    /// Median, ms.
    pub p50: f64,
    /// 90th percentile, ms.
    pub p90: f64,
    /// 99th percentile, ms.
    pub p99: f64,
    /// p50 ratio to the baseline with a 95 % bootstrap interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p50_ratio: Option<RatioCi>,
    /// p99 ratio to the baseline with a 95 % bootstrap interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99_ratio: Option<RatioCi>,
    /// Share of calls above the baseline's p99 + the p99 threshold: (baseline, level, p).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tail_exceedance: Option<(f64, f64, f64)>,
    /// The figure got slower beyond noise and thresholds.
    pub moved: bool,
    /// `"median"` (the whole stage slower) or `"tail"` (a few calls held up), when moved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shape: Option<&'static str>,
    /// When the CUSUM over windowed p90 first left the baseline (ms since the epoch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change_unix_ms: Option<f64>,
}

/// Resource figures of one phase (means over its samples).
#[derive(Clone, Debug, Default, Serialize)]
pub struct ResourceSummary {
    /// Samples in the phase.
    pub samples: usize,
    /// Mean busy share of all cores, percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_total_pct: Option<f64>,
    /// The busiest core's mean busy share, percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_max_core_pct: Option<f64>,
    /// Mean CPU pressure (some), percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psi_cpu_some_pct: Option<f64>,
    /// Mean CPU of the target's threads, percent of one core.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_cpu_pct: Option<f64>,
    /// Mean run-queue wait of the target's threads, ms per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_delay_ms_per_s: Option<f64>,
    /// Mean involuntary context switches per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ctx_involuntary_per_s: Option<f64>,
    /// Mean voluntary context switches per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ctx_voluntary_per_s: Option<f64>,
    /// TCP retransmits during the phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_retrans: Option<u64>,
    /// The busiest GPU's mean utilisation, percent (feature `nvml`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_util_pct: Option<f64>,
    /// Throttle reasons that held a GPU's clocks down during the phase
    /// (power, thermal, hardware slowdown, sync boost; not idling).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpu_throttle: Vec<&'static str>,
    /// `"saturated"` or `"idle"`.
    pub state: &'static str,
}

/// One level against the baseline.
#[derive(Clone, Debug, Serialize)]
pub struct LevelResult {
    /// 1-based level number.
    pub level: usize,
    /// Label of the level.
    pub label: String,
    /// Every figure, by name.
    pub components: std::collections::BTreeMap<&'static str, ComponentResult>,
    /// Resources during the level.
    pub resources: ResourceSummary,
}

/// The answer.
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    /// The stage that moved first (`"gap"` when no stage moved but the
    /// unexplained time did), absent when nothing moved.
    pub first_stage: Option<&'static str>,
    /// The level it moved at (1-based).
    pub first_level: Option<usize>,
    /// That level's label.
    pub first_level_label: Option<String>,
    /// When it moved (ms since the epoch), from the change-point test.
    pub first_change_unix_ms: Option<f64>,
    /// Its shape: `"median"` or `"tail"`.
    pub shape: Option<&'static str>,
    /// Stages that moved with it or later: (stage, level).
    pub dragged: Vec<(&'static str, usize)>,
    /// Stages that stayed flat through every level.
    pub flat: Vec<&'static str>,
    /// Whether e2e moved at some level.
    pub e2e_moved: bool,
    /// `"saturated"` or `"idle"` at the first level that moved.
    pub resources: Option<&'static str>,
    /// What the resources say.
    pub resource_note: Option<String>,
    /// Period of the spikes (s), when the first mover is a tail of periodic spikes.
    pub spike_period_s: Option<f64>,
    /// The next step (DESIGN section 7).
    pub next_step: String,
    /// The verdict in a sentence or three.
    pub summary: String,
}

/// Thresholds resolved against the baseline.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Thresholds {
    /// Smallest p50 shift that counts, ms.
    pub min_p50_ms: f64,
    /// Smallest p99 shift that counts, ms.
    pub min_p99_ms: f64,
}

fn column(obs: &[Obs], phase: usize, c: usize) -> Vec<f32> {
    let mut v: Vec<f32> = obs
        .iter()
        .filter(|o| o.phase == phase && !o.settling && !o.failed)
        .map(|o| o.vals[c])
        .filter(|v| v.is_finite())
        .collect();
    v.sort_unstable_by(f32::total_cmp);
    v
}

/// The full analysis: per-level results and the verdict.
pub(crate) fn analyze(
    phases: &[PhaseSpan],
    obs: &[Obs],
    samples: &[(usize, ResourceSample)],
    spec: &VerdictSpec,
    factor: FactorKind,
) -> (
    Thresholds,
    Option<ResourceSummary>,
    Vec<LevelResult>,
    Verdict,
) {
    let Some(base_idx) = phases.iter().position(|p| p.phase == "baseline") else {
        return (
            Thresholds {
                min_p50_ms: f64::NAN,
                min_p99_ms: f64::NAN,
            },
            None,
            Vec::new(),
            nothing("the run ended before the baseline"),
        );
    };
    let base: Vec<Vec<f32>> = (0..COMPONENTS.len())
        .map(|c| column(obs, base_idx, c))
        .collect();
    let e2e_p50 = stats::quantile(&base[E2E], 0.5);
    let e2e_p50 = if e2e_p50.is_finite() { e2e_p50 } else { 0.0 };
    let th = Thresholds {
        min_p50_ms: spec.min_p50_ms.unwrap_or((0.05 * e2e_p50).max(0.5)),
        min_p99_ms: spec.min_p99_ms.unwrap_or((0.10 * e2e_p50).max(2.0)),
    };
    let base_res = resources(samples, base_idx);
    let split = !base[1].is_empty() || !base[4].is_empty();

    let mut levels = Vec::new();
    for (pi, p) in phases
        .iter()
        .enumerate()
        .filter(|(_, p)| p.phase == "level")
    {
        let mut components = std::collections::BTreeMap::new();
        for (c, name) in COMPONENTS.iter().enumerate() {
            let lv = column(obs, pi, c);
            if lv.is_empty() {
                continue;
            }
            let seed = 0x5eed ^ ((p.level as u64) << 8) ^ c as u64;
            let r = compare(&base[c], &lv, &th, seed);
            let change = if r.moved {
                cusum_change(obs, base_idx, pi, c, &th)
            } else {
                None
            };
            components.insert(
                *name,
                ComponentResult {
                    change_unix_ms: change,
                    ..r
                },
            );
        }
        levels.push(LevelResult {
            level: p.level,
            label: p.label.clone(),
            components,
            resources: resources(samples, pi).unwrap_or_default(),
        });
    }

    let verdict = decide(&levels, phases, obs, split, factor, base_res.as_ref());
    (th, base_res, levels, verdict)
}

fn nothing(why: &str) -> Verdict {
    Verdict {
        first_stage: None,
        first_level: None,
        first_level_label: None,
        first_change_unix_ms: None,
        shape: None,
        dragged: Vec::new(),
        flat: Vec::new(),
        e2e_moved: false,
        resources: None,
        resource_note: None,
        spike_period_s: None,
        next_step: "run the plan again with more calls per level".into(),
        summary: why.to_owned(),
    }
}

fn compare(base: &[f32], lv: &[f32], th: &Thresholds, seed: u64) -> ComponentResult {
    let mut r = ComponentResult {
        n: lv.len(),
        p50: stats::quantile(lv, 0.5),
        p90: stats::quantile(lv, 0.9),
        p99: stats::quantile(lv, 0.99),
        p50_ratio: None,
        p99_ratio: None,
        tail_exceedance: None,
        moved: false,
        shape: None,
        change_unix_ms: None,
    };
    if base.len() < 5 || lv.len() < 5 {
        return r;
    }
    r.p50_ratio = stats::quantile_ratio(base, lv, 0.5, seed);
    r.p99_ratio = stats::quantile_ratio(base, lv, 0.99, seed);
    let b99 = stats::quantile(base, 0.99);
    let ex = stats::exceedance(base, lv, b99 + th.min_p99_ms);
    r.tail_exceedance = Some(ex);
    let median = r
        .p50_ratio
        .is_some_and(|q| q.lo > 1.0 && q.after - q.before >= th.min_p50_ms && q.ratio >= 1.10);
    let tail = r
        .p99_ratio
        .is_some_and(|q| q.lo > 1.0 && q.after - q.before >= th.min_p99_ms && q.ratio >= 1.25)
        || (ex.2 < 0.001 && ex.1 >= 0.02 && ex.1 >= 3.0 * ex.0);
    r.moved = median || tail;
    r.shape = if median {
        Some("median")
    } else if tail {
        Some("tail")
    } else {
        None
    };
    r
}

/// One-sided CUSUM over windowed p90, from the first level up to `upto`,
/// against the baseline's windows: when did the figure leave the baseline?
fn cusum_change(
    obs: &[Obs],
    base_idx: usize,
    upto: usize,
    c: usize,
    th: &Thresholds,
) -> Option<f64> {
    let series = |keep: &dyn Fn(usize) -> bool| -> Vec<(f64, f32)> {
        obs.iter()
            .filter(|o| keep(o.phase) && !o.settling && !o.failed && o.vals[c].is_finite())
            .map(|o| (o.ts_ms, o.vals[c]))
            .collect()
    };
    let base = series(&|p| p == base_idx);
    let after = series(&|p| p > base_idx && p <= upto);
    let w = (base.len() / 8).clamp(5, 15);
    let windows = |s: &[(f64, f32)]| -> Vec<(f64, f64)> {
        s.chunks(w)
            .filter(|ch| ch.len() * 2 >= w)
            .map(|ch| {
                let mut v: Vec<f32> = ch.iter().map(|x| x.1).collect();
                v.sort_unstable_by(f32::total_cmp);
                (ch[0].0, stats::quantile(&v, 0.9))
            })
            .collect()
    };
    let bw = windows(&base);
    if bw.len() < 3 {
        return None;
    }
    let mut bv: Vec<f32> = bw.iter().map(|x| x.1 as f32).collect();
    bv.sort_unstable_by(f32::total_cmp);
    let (mu, mad) = stats::median_mad(&bv);
    let sigma = (1.4826 * mad).max(0.05).max(0.02 * mu.abs());
    let k = (0.5 * sigma).max(0.5 * th.min_p50_ms);
    let h = (4.0 * sigma).max(2.0 * th.min_p50_ms);
    let mut s = 0.0f64;
    let mut start: Option<f64> = None;
    for (ts, x) in windows(&after) {
        let next = (s + x - mu - k).max(0.0);
        if s == 0.0 && next > 0.0 {
            start = Some(ts);
        }
        if next == 0.0 {
            start = None;
        }
        s = next;
        if s > h {
            return start.or(Some(ts));
        }
    }
    None
}

fn mean(v: impl Iterator<Item = f64>) -> Option<f64> {
    let (mut n, mut sum) = (0usize, 0.0);
    for x in v.filter(|x| x.is_finite()) {
        n += 1;
        sum += x;
    }
    (n > 0).then(|| sum / n as f64)
}

fn resources(samples: &[(usize, ResourceSample)], phase: usize) -> Option<ResourceSummary> {
    let s: Vec<&ResourceSample> = samples
        .iter()
        .filter(|(p, _)| *p == phase)
        .map(|(_, s)| s)
        .collect();
    if s.is_empty() {
        return None;
    }
    let cores = s.iter().map(|x| x.cpu_pct.len()).max().unwrap_or(0);
    let max_core = (0..cores)
        .filter_map(|i| mean(s.iter().filter_map(|x| x.cpu_pct.get(i).copied())))
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
    let mut r = ResourceSummary {
        samples: s.len(),
        cpu_total_pct: mean(s.iter().filter_map(|x| x.cpu_total_pct)),
        cpu_max_core_pct: max_core,
        psi_cpu_some_pct: mean(s.iter().filter_map(|x| x.psi_cpu_some_pct)),
        target_cpu_pct: mean(s.iter().filter_map(|x| x.target_cpu_pct)),
        run_delay_ms_per_s: mean(s.iter().filter_map(|x| x.run_delay_ms_per_s)),
        ctx_involuntary_per_s: mean(s.iter().filter_map(|x| x.ctx_involuntary_per_s)),
        ctx_voluntary_per_s: mean(s.iter().filter_map(|x| x.ctx_voluntary_per_s)),
        tcp_retrans: {
            let v: Vec<u64> = s.iter().filter_map(|x| x.tcp_retrans).collect();
            (!v.is_empty()).then(|| v.iter().sum())
        },
        gpu_util_pct: {
            let gpus = s.iter().map(|x| x.gpus.len()).max().unwrap_or(0);
            (0..gpus)
                .filter_map(|i| {
                    mean(
                        s.iter()
                            .filter_map(|x| x.gpus.get(i).and_then(|g| g.util_gpu_pct)),
                    )
                })
                .reduce(f64::max)
        },
        gpu_throttle: {
            let mut t: Vec<&'static str> = s
                .iter()
                .flat_map(|x| x.gpus.iter().flat_map(|g| g.throttle.iter().copied()))
                .filter(|r| crate::gpu::is_limiting(r))
                .collect();
            t.sort_unstable();
            t.dedup();
            t
        },
        state: "idle",
    };
    // A GPU kept busy ≥ 90 % of the time is the bottleneck (GPU-bound).
    let saturated = r.gpu_util_pct.is_some_and(|v| v >= 90.0)
        || r.cpu_total_pct.is_some_and(|v| v >= 85.0)
        || r.cpu_max_core_pct.is_some_and(|v| v >= 95.0)
        || r.psi_cpu_some_pct.is_some_and(|v| v >= 40.0);
    r.state = if saturated { "saturated" } else { "idle" };
    Some(r)
}

fn decide(
    levels: &[LevelResult],
    phases: &[PhaseSpan],
    obs: &[Obs],
    split: bool,
    factor: FactorKind,
    base_res: Option<&ResourceSummary>,
) -> Verdict {
    // Candidates: the stages, the gap, and `net` only where no split exists.
    let candidate = |name: &str| -> bool {
        match name {
            "e2e" => false,
            "net" => !split,
            _ => true,
        }
    };
    let e2e_moved = levels
        .iter()
        .any(|l| l.components.get("e2e").is_some_and(|c| c.moved));
    let mut first: Option<(&LevelResult, &'static str, &ComponentResult)> = None;
    for l in levels {
        let mut movers: Vec<(&'static str, &ComponentResult)> = l
            .components
            .iter()
            .filter(|(n, c)| candidate(n) && c.moved)
            .map(|(n, c)| (*n, c))
            .collect();
        if movers.is_empty() {
            continue;
        }
        // A median move outranks a tail-only move: transient contention from
        // outside can lift a p99 for a while, not a median.
        if movers.iter().any(|(_, c)| c.shape == Some("median")) {
            movers.retain(|(_, c)| c.shape == Some("median"));
        }
        // Among moves of comparable size (at least half the largest shift),
        // the earliest change (1 s buckets from the level's start: moves
        // caused by the same change land together), then the largest.
        movers.sort_by(|a, b| abs_shift(b.1).total_cmp(&abs_shift(a.1)));
        let top = abs_shift(movers[0].1);
        movers.retain(|(_, c)| abs_shift(c) >= 0.5 * top);
        let level_start = phases
            .iter()
            .find(|p| p.phase == "level" && p.level == l.level)
            .map_or(0.0, |p| p.settle_until_unix_ms);
        let bucket = |c: &ComponentResult| {
            c.change_unix_ms
                .map_or(i64::MAX, |t| ((t - level_start) / 1000.0).floor() as i64)
        };
        movers.sort_by(|a, b| {
            bucket(a.1)
                .cmp(&bucket(b.1))
                .then_with(|| abs_shift(b.1).total_cmp(&abs_shift(a.1)))
        });
        let (n, c) = movers[0];
        first = Some((l, n, c));
        break;
    }
    let Some((fl, fname, fc)) = first else {
        let mut v = nothing(if e2e_moved {
            "e2e moved but no stage and not the gap beyond the thresholds: raise the levels or the calls per level"
        } else {
            "no stage moved at any level: the pipeline absorbs this factor over the range tried"
        });
        v.e2e_moved = e2e_moved;
        v.flat = COMPONENTS
            .iter()
            .copied()
            .filter(|n| candidate(n))
            .collect();
        v.next_step =
            "raise the factor further (or hold each level longer) to find where it bites".into();
        return v;
    };
    let mut dragged = Vec::new();
    for l in levels.iter().filter(|l| l.level >= fl.level) {
        for (n, c) in &l.components {
            if candidate(n) && c.moved && *n != fname && !dragged.iter().any(|(d, _)| d == n) {
                dragged.push((*n, l.level));
            }
        }
    }
    let flat: Vec<&'static str> = COMPONENTS
        .iter()
        .copied()
        .filter(|n| {
            candidate(n)
                && *n != fname
                && !dragged.iter().any(|(d, _)| d == n)
                && levels.iter().any(|l| l.components.contains_key(n))
        })
        .collect();

    let shape = fc.shape;
    let res = &fl.resources;
    let res_state = (res.samples > 0).then_some(res.state);
    let resource_note = (res.samples > 0).then(|| resource_note(res, base_res));
    let spike_period_s = (shape == Some("tail"))
        .then(|| spike_period(obs, phases, fl.level, fname))
        .flatten();

    let stage_step = match fname {
        "queue" | "infer" => "inference moved first under load: limit concurrency, queue with timeouts, then batching",
        "uplink" | "downlink" | "net" => "transport moved first: look at bandwidth, frame size and retransmits — compress or lower the frame rate; retries only hide jitter",
        "dispatch" => "dispatch moved first: the executor queue, the bus, or a control period blocked by the last action — merge commands, drop stale actions",
        "capture" => "capture moved first: the camera path (driver, exposure, copies) competes for the same resource",
        _ => "all stages flat but the calls took longer: client scheduling, memory reclamation (GC), logging, or the observer — the gap and the observer's own figures show it",
    };
    let shape_step = match shape {
        Some("median") => "the median rose: the whole stage got slower",
        Some("tail") => {
            "p99 rose with a flat median: a few requests are held up (queueing or contention)"
        }
        _ => "",
    };
    let res_step = match res_state {
        Some("saturated") => "resources saturated: capacity",
        Some(_) => "resources idle while slower: locks, queues, scheduling",
        None => "",
    };
    let next_step = [stage_step, shape_step, res_step]
        .iter()
        .filter(|s| !s.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join("; ");

    let ratio = fc
        .p50_ratio
        .filter(|_| shape == Some("median"))
        .or(fc.p99_ratio)
        .map(|q| {
            format!(
                "p{} {:.2} → {:.2} ms (×{:.2}, 95 % CI {:.2}–{:.2})",
                if q.q == 0.5 { "50" } else { "99" },
                q.before,
                q.after,
                q.ratio,
                q.lo,
                q.hi
            )
        })
        .unwrap_or_default();
    let mut summary = if fname == "gap" {
        format!(
            "all stages flat; the gap (time no stage explains) moved first, at level {} ({}): {ratio}.",
            fl.level, fl.label
        )
    } else {
        format!(
            "{fname} moved first, at level {} ({}): {ratio}.",
            fl.level, fl.label
        )
    };
    if let Some(p) = spike_period_s {
        summary.push_str(&format!(" Spikes repeat every {p:.2} s."));
    }
    if !dragged.is_empty() {
        let d: Vec<String> = dragged
            .iter()
            .map(|(n, l)| format!("{n} (level {l})"))
            .collect();
        summary.push_str(&format!(" Dragged along: {}.", d.join(", ")));
    }
    let flat_named: Vec<&str> = flat.iter().copied().filter(|n| *n != "net").collect();
    if !flat_named.is_empty() {
        summary.push_str(&format!(" Flat: {}.", flat_named.join(", ")));
    }
    if let Some(n) = &resource_note {
        summary.push_str(&format!(" {n}"));
    }
    let _ = factor;
    Verdict {
        first_stage: Some(fname),
        first_level: Some(fl.level),
        first_level_label: Some(fl.label.clone()),
        first_change_unix_ms: fc.change_unix_ms,
        shape,
        dragged,
        flat,
        e2e_moved,
        resources: res_state,
        resource_note,
        spike_period_s,
        next_step,
        summary,
    }
}

/// The shift in ms of the quantile that moved (p50 for a median move, p99 for a tail).
fn abs_shift(c: &ComponentResult) -> f64 {
    let q = if c.shape == Some("median") {
        c.p50_ratio
    } else {
        c.p99_ratio
    };
    q.map_or(0.0, |q| q.after - q.before)
}

fn resource_note(r: &ResourceSummary, base: Option<&ResourceSummary>) -> String {
    let f = |v: Option<f64>| v.map_or("–".to_owned(), |v| format!("{v:.0}"));
    let mut s = format!(
        "Resources {}: CPU {} % (busiest core {} %), CPU pressure {} %, target run-queue wait {} ms/s",
        r.state,
        f(r.cpu_total_pct),
        f(r.cpu_max_core_pct),
        f(r.psi_cpu_some_pct),
        r.run_delay_ms_per_s.map_or("–".into(), |v| format!("{v:.1}")),
    );
    if let Some(b) = base {
        s.push_str(&format!(
            " (baseline: CPU {} %, pressure {} %, wait {} ms/s)",
            f(b.cpu_total_pct),
            f(b.psi_cpu_some_pct),
            b.run_delay_ms_per_s
                .map_or("–".into(), |v| format!("{v:.1}"))
        ));
        if b.state == "saturated" {
            s.push_str("; the host was already busy in the baseline — contention from outside the experiment");
        }
    }
    if let Some(n) = r.tcp_retrans.filter(|n| *n > 0) {
        s.push_str(&format!("; {n} TCP retransmits"));
    }
    if let Some(g) = r.gpu_util_pct {
        s.push_str(&format!("; GPU {g:.0} %"));
        if g >= 90.0 {
            s.push_str(" (GPU-bound)");
        }
        if let Some(b) = base.and_then(|b| b.gpu_util_pct) {
            s.push_str(&format!(" (baseline {b:.0} %)"));
        }
    }
    if !r.gpu_throttle.is_empty() {
        s.push_str(&format!(
            "; GPU clocks throttled: {}",
            r.gpu_throttle.join(", ")
        ));
    }
    s.push('.');
    s
}

/// Median interval between the spikes of `name` in a level (≥ 3 spikes).
fn spike_period(obs: &[Obs], phases: &[PhaseSpan], level: usize, name: &str) -> Option<f64> {
    let c = COMPONENTS.iter().position(|n| *n == name)?;
    let pi = phases
        .iter()
        .position(|p| p.phase == "level" && p.level == level)?;
    let bi = phases.iter().position(|p| p.phase == "baseline")?;
    let base = column(obs, bi, c);
    let lv = column(obs, pi, c);
    let (med, _) = stats::median_mad(&base);
    let b99 = stats::quantile(&base, 0.99);
    let lvl99 = stats::quantile(&lv, 0.99);
    // Spikes: above the midpoint between the baseline's p99 and the level's p99.
    let thr = (b99.max(med) + lvl99) / 2.0;
    let ts: Vec<f64> = obs
        .iter()
        .filter(|o| o.phase == pi && !o.settling && !o.failed && f64::from(o.vals[c]) > thr)
        .map(|o| o.ts_ms)
        .collect();
    if ts.len() < 3 {
        return None;
    }
    let mut d: Vec<f32> = ts
        .windows(2)
        .map(|w| ((w[1] - w[0]) / 1e3) as f32)
        .collect();
    d.sort_unstable_by(f32::total_cmp);
    Some(stats::quantile(&d, 0.5))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn phase(phase: &str, level: usize, start: f64, end: f64) -> PhaseSpan {
        PhaseSpan {
            phase: phase.into(),
            level,
            label: format!("{phase} {level}"),
            start_unix_ms: start,
            settle_until_unix_ms: start,
            end_unix_ms: end,
            calls: 0,
            excluded_calls: 0,
        }
    }

    fn call(ts: f64, phase: usize, f: impl Fn(usize) -> f32) -> Obs {
        let mut vals = [f32::NAN; 9];
        for (c, v) in vals.iter_mut().enumerate() {
            *v = f(c);
        }
        Obs {
            ts_ms: ts,
            phase,
            settling: false,
            failed: false,
            vals,
        }
    }

    /// Synthetic ramp: uplink +8 ms at level 1, queue only at level 2.
    #[test]
    fn names_the_stage_that_moved_at_the_lowest_level() {
        let phases = vec![
            phase("baseline", 0, 0.0, 3000.0),
            phase("level", 1, 3000.0, 6000.0),
            phase("level", 2, 6000.0, 9000.0),
        ];
        let mut obs = Vec::new();
        let mut x = 1u32;
        for i in 0..270 {
            let ts = i as f64 * 1000.0 / 30.0 + 0.5;
            let p = (i / 90) as usize;
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let noise = (x >> 16) as f32 / 65536.0 * 0.3;
            obs.push(call(ts, p, |c| {
                let base = [2.0, 1.0, 0.05, 12.0, 1.0, 1.0, 0.1, 2.0, 17.0][c] + noise;
                match (c, p) {
                    (1, 1..) => base + 8.0,
                    (2, 2) => base + 10.0,
                    (7, 1..) => base + 8.0,
                    (8, 1..) => base + 8.0,
                    _ => base,
                }
            }));
        }
        let (_, _, levels, v) =
            analyze(&phases, &obs, &[], &VerdictSpec::default(), FactorKind::Net);
        assert_eq!(levels.len(), 2);
        assert_eq!(v.first_stage, Some("uplink"), "{v:?}");
        assert_eq!(v.first_level, Some(1));
        assert_eq!(v.shape, Some("median"));
        assert_eq!(v.dragged, vec![("queue", 2)]);
        assert!(v.flat.contains(&"infer") && v.flat.contains(&"gap"));
        let change = v.first_change_unix_ms.unwrap();
        assert!((3000.0..4500.0).contains(&change), "{change}");
        assert!(v.next_step.contains("transport"));
    }

    #[test]
    fn periodic_gap_spikes_with_flat_stages_name_the_gap() {
        let phases = vec![
            phase("baseline", 0, 0.0, 4000.0),
            phase("level", 1, 4000.0, 8000.0),
        ];
        let mut obs = Vec::new();
        for i in 0..240 {
            let ts = i as f64 * 1000.0 / 30.0 + 0.5;
            let p = (i / 120) as usize;
            let spike = p == 1 && i % 15 == 0;
            obs.push(call(ts, p, |c| {
                let j = (i % 7) as f32 * 0.03;
                match c {
                    GAP if spike => 40.0 + j,
                    E2E if spike => 57.0 + j,
                    _ => [2.0, 1.0, 0.05, 12.0, 1.0, 1.0, 0.1, 2.0, 17.0][c] + j,
                }
            }));
        }
        let (_, _, _, v) = analyze(
            &phases,
            &obs,
            &[],
            &VerdictSpec::default(),
            FactorKind::Pause,
        );
        assert_eq!(v.first_stage, Some("gap"), "{v:?}");
        assert_eq!(v.shape, Some("tail"));
        let period = v.spike_period_s.unwrap();
        assert!((period - 0.5).abs() < 0.05, "{period}");
        assert!(v.summary.starts_with("all stages flat"));
    }

    /// GPU samples: a busy GPU marks the phase saturated; limiting throttle
    /// reasons are named, idling is not throttling.
    #[test]
    fn gpu_util_saturates_and_throttling_is_reported() {
        use crate::gpu::{throttle_names, GpuSample};
        let sample = |phase: usize, util: [f64; 2], bits: u64| {
            let gpus = util
                .iter()
                .enumerate()
                .map(|(i, u)| GpuSample {
                    index: i as u32,
                    util_gpu_pct: Some(*u),
                    throttle: throttle_names(if i == 0 { bits } else { 0x1 }),
                    ..GpuSample::default()
                })
                .collect();
            (
                phase,
                ResourceSample {
                    cpu_total_pct: Some(20.0),
                    gpus,
                    ..ResourceSample::default()
                },
            )
        };
        let samples = vec![
            sample(0, [30.0, 5.0], 0x1),
            sample(0, [40.0, 5.0], 0x1),
            sample(1, [88.0, 5.0], 0x4),
            sample(1, [96.0, 5.0], 0x4 | 0x40),
            sample(2, [60.0, 5.0], 0x0),
            sample(2, [70.0, 5.0], 0x0),
        ];
        let base = resources(&samples, 0).unwrap();
        assert_eq!(base.state, "idle");
        assert_eq!(base.gpu_util_pct, Some(35.0));
        assert!(base.gpu_throttle.is_empty(), "gpu_idle is not throttling");
        let busy = resources(&samples, 1).unwrap();
        assert_eq!(busy.gpu_util_pct, Some(92.0));
        assert_eq!(busy.state, "saturated");
        assert_eq!(busy.gpu_throttle, ["hw_thermal_slowdown", "sw_power_cap"]);
        let note = resource_note(&busy, Some(&base));
        assert!(
            note.contains("GPU 92 % (GPU-bound) (baseline 35 %)"),
            "{note}"
        );
        assert!(
            note.contains("GPU clocks throttled: hw_thermal_slowdown, sw_power_cap"),
            "{note}"
        );
        let mid = resources(&samples, 2).unwrap();
        assert_eq!((mid.state, mid.gpu_util_pct), ("idle", Some(65.0)));
        // No GPU tracks: nothing GPU in the summary or its JSON.
        let plain = vec![(0, ResourceSample::default())];
        let r = resources(&plain, 0).unwrap();
        assert!(r.gpu_util_pct.is_none() && r.gpu_throttle.is_empty());
        let json = serde_json::to_string(&r).unwrap();
        assert!(!json.contains("gpu"), "{json}");
        assert!(!resource_note(&r, None).contains("GPU"));
    }
}
