//! From records to figures and verdicts: per-stage distributions, baseline
//! comparison, outlier rounds, shape, periodicity, gap, verdicts.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::json;

use crate::load::{Dataset, F_DEADLINE_MISS, F_HAS_DEADLINE};
use crate::metric::{Metric, METRIC_COUNT};
use crate::stats::{self, MannWhitney, RatioCi, Shift, Summary};

/// Version tag of the `--json` document.
pub const REPORT_SCHEMA: &str = "stagetrace-report/1";

/// The `kind` name of the group that pools every kind (only present when
/// the input has more than one kind).
pub const ALL_KINDS: &str = "*";

/// Tuning of the analysis. The defaults are the documented rules.
#[derive(Clone, Copy, Debug)]
pub struct AnalyzeOptions {
    /// Seed of the bootstrap (reports are reproducible).
    pub seed: u64,
    /// Outlier rule: a value stands out above `median + k · 1.4826 · MAD`.
    pub outlier_k: f64,
    /// Significance level of each shape test.
    pub alpha: f64,
    /// Most outlier rounds listed per group (all are counted).
    pub max_listed_outliers: usize,
}

impl Default for AnalyzeOptions {
    fn default() -> Self {
        AnalyzeOptions {
            seed: 0x5eed_57a9e,
            outlier_k: 5.0,
            alpha: 1e-3,
            max_listed_outliers: 200,
        }
    }
}

/// Fewest values a shape or periodicity test runs on.
const MIN_N: usize = 20;
/// Fewest separate spike events for a periodicity claim.
const MIN_EVENTS: usize = 5;
/// Most spike events the periodicity search looks at (more is not "spikes").
const MAX_EVENTS: usize = 5_000;
/// Longest period searched for (ms).
const MAX_PERIOD_MS: f64 = 120_000.0;

/// The whole report (`--json` prints exactly this).
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// [`REPORT_SCHEMA`].
    pub schema: &'static str,
    /// What was read.
    pub inputs: Inputs,
    /// The baseline that was read, when `--baseline` was given.
    pub baseline: Option<Inputs>,
    /// One group per `kind` (plus `"*"` pooling all kinds when there are several).
    pub groups: Vec<GroupReport>,
    /// Every group's verdicts, most important first.
    pub verdicts: Vec<Verdict>,
}

/// Files read and what the reader met.
#[derive(Clone, Debug, Serialize)]
pub struct Inputs {
    /// Paths as given.
    pub files: Vec<String>,
    /// Records read (all kinds, warm-up and failed included).
    pub records: u64,
    /// Lines read.
    pub lines: u64,
    /// Corrupt lines skipped under `--skip-bad`.
    pub skipped_bad: u64,
    /// Files whose last line was cut short.
    pub truncated_files: Vec<String>,
    /// Failure reasons of failed calls with their counts.
    pub errors: Vec<ErrorCount>,
    /// Reader warnings, one sentence each.
    pub warnings: Vec<String>,
}

/// One failure reason.
#[derive(Clone, Debug, Serialize)]
pub struct ErrorCount {
    /// The record's `error` text.
    pub error: String,
    /// How many calls failed so.
    pub count: u64,
}

/// Everything about one `kind`.
#[derive(Clone, Debug, Serialize)]
pub struct GroupReport {
    /// The request kind (`"*"` for all kinds pooled).
    pub kind: String,
    /// Records of this kind.
    pub calls: u64,
    /// Calls in the steady-state figures (neither warm-up nor failed).
    pub steady: u64,
    /// Warm-up calls kept out of the figures.
    pub warmup_excluded: u64,
    /// Failed calls kept out of the figures.
    pub failed: u64,
    /// Wall time of the first steady call (ms since the epoch).
    pub start_unix_ms: f64,
    /// Wall time of the last steady call (ms since the epoch).
    pub end_unix_ms: f64,
    /// Call rate, completion jitter, deadlines.
    pub rate: Rate,
    /// Per-stage distributions (ms), keyed by stage name.
    pub stages: BTreeMap<&'static str, Summary>,
    /// Per-stage comparison with the baseline, keyed by stage name.
    pub baseline: BTreeMap<&'static str, StageVsBaseline>,
    /// Rounds that stand out.
    pub outliers: Outliers,
    /// Periodicity of each stage's spikes (stages with enough spikes).
    pub periodicity: Vec<Periodicity>,
    /// How the e2e variance splits over the stages and the gap.
    pub gap: Option<GapReport>,
    /// What batching, caching and stale-action dropping did (absent when no
    /// record of the group says).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mitigations: Option<Mitigations>,
    /// This group's verdicts.
    pub verdicts: Vec<Verdict>,
}

/// The records' `batch_size`, `cache` and `stale_dropped`, over the group's
/// calls except warm-up ones (failed calls included: a dropped stale action
/// fails its call).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Mitigations {
    /// Calls whose record names the server batch they ran in.
    pub batched_calls: u64,
    /// Their mean `batch_size` (`null` without batched calls).
    pub mean_batch: Option<f64>,
    /// Calls answered from the server's result cache.
    pub cache_hits: u64,
    /// Calls the cache missed (the model ran).
    pub cache_misses: u64,
    /// hits / (hits + misses) (`null` without a cache).
    pub cache_hit_rate: Option<f64>,
    /// Calls that dropped at least one stale action chunk.
    pub stale_calls: u64,
    /// Action chunks dropped as stale, summed.
    pub stale_dropped: u64,
}

fn mitigations(ds: &Dataset, kind_idx: Option<usize>, pooled: bool) -> Option<Mitigations> {
    let mut m = Mitigations::default();
    let mut batch_sum = 0u64;
    for x in &ds.mitigated {
        let i = x.call as usize;
        if ds.is_warmup(i) || (!pooled && ds.kind.get(i).map(|k| usize::from(*k)) != kind_idx) {
            continue;
        }
        if x.batch > 0 {
            m.batched_calls += 1;
            batch_sum += u64::from(x.batch);
        }
        match x.cache_hit {
            Some(true) => m.cache_hits += 1,
            Some(false) => m.cache_misses += 1,
            None => {}
        }
        if x.stale > 0 {
            m.stale_calls += 1;
            m.stale_dropped += u64::from(x.stale);
        }
    }
    if m == Mitigations::default() {
        return None;
    }
    m.mean_batch = (m.batched_calls > 0).then(|| batch_sum as f64 / m.batched_calls as f64);
    let looked_up = m.cache_hits + m.cache_misses;
    m.cache_hit_rate = (looked_up > 0).then(|| m.cache_hits as f64 / looked_up as f64);
    Some(m)
}

/// Call rate and timing regularity.
#[derive(Clone, Debug, Serialize)]
pub struct Rate {
    /// Steady calls per second over the run.
    pub effective_hz: Option<f64>,
    /// `|Δ²t|` of call completions (ms): how unevenly calls finish.
    pub jitter: Option<Summary>,
    /// Deadline figures, when the records carry a target rate.
    pub deadline: Option<Deadline>,
}

/// Deadline misses against the target rate.
#[derive(Clone, Debug, Serialize)]
pub struct Deadline {
    /// Calls with a deadline.
    pub calls: u64,
    /// Calls that ended after their tick's deadline.
    pub misses: u64,
    /// `misses / calls`.
    pub miss_rate: f64,
    /// Lateness against the scheduled tick (ms), when recorded.
    pub late: Option<Summary>,
}

/// One stage against the baseline.
#[derive(Clone, Debug, Serialize)]
pub struct StageVsBaseline {
    /// Baseline distribution.
    pub baseline: Summary,
    /// Median ratio with its 95 % bootstrap interval.
    pub p50: RatioCi,
    /// p99 ratio with its 95 % bootstrap interval.
    pub p99: RatioCi,
    /// Location test.
    pub mann_whitney: MannWhitney,
    /// Hodges–Lehmann shift (ms) with its 95 % interval.
    pub shift: Shift,
    /// Smallest shift that counts as "the median moved" (ms).
    pub min_effect_ms: f64,
    /// Fraction of baseline values above the baseline p99.
    pub baseline_exceed: f64,
    /// Fraction of this run's values above the baseline p99.
    pub exceed: f64,
    /// One-sided p-value that the run exceeds the baseline p99 more often.
    pub exceed_p: f64,
    /// `"median_shift"`, `"faster"`, `"tail_only"` or `"steady"`.
    pub shape: &'static str,
}

/// Rounds that stand out.
#[derive(Clone, Debug, Serialize)]
pub struct Outliers {
    /// The rule in words.
    pub rule: String,
    /// Per-stage threshold (ms) above which a value stands out.
    pub thresholds: BTreeMap<&'static str, f64>,
    /// Rounds with at least one stage above its threshold.
    pub count: u64,
    /// The first rounds, in time order (at most the configured number).
    pub rounds: Vec<OutlierRound>,
}

/// One round that stands out.
#[derive(Clone, Debug, Serialize)]
pub struct OutlierRound {
    /// The record's `seq`.
    pub seq: u64,
    /// Wall time of the call (ms since the epoch).
    pub ts_unix_ms: f64,
    /// The same as UTC ISO-8601.
    pub time: String,
    /// The call's e2e (ms).
    pub e2e_ms: f64,
    /// Stages above their threshold.
    pub stages: Vec<OutlierStage>,
}

/// A stage value above its threshold.
#[derive(Clone, Debug, Serialize)]
pub struct OutlierStage {
    /// Stage name.
    pub stage: &'static str,
    /// The value (ms).
    pub value_ms: f64,
    /// The threshold it crossed (ms).
    pub threshold_ms: f64,
}

/// Whether one stage's spikes recur with a period.
#[derive(Clone, Debug, Serialize)]
pub struct Periodicity {
    /// Stage name.
    pub stage: &'static str,
    /// Spike events (adjacent spiking calls merged).
    pub spikes: u64,
    /// Median inter-spike interval (s).
    pub isi_median_s: f64,
    /// Robust spread of the inter-spike intervals (1.4826·MAD / median).
    pub isi_cv: f64,
    /// Lag of the autocorrelation peak (s).
    pub acf_lag_s: f64,
    /// Autocorrelation of the spike series at that lag.
    pub acf: f64,
    /// Level the autocorrelation had to clear (`max(0.25, 5/√bins)`).
    pub acf_threshold: f64,
    /// Fraction of inter-spike intervals within ±20 % of the period.
    pub isi_on_period: f64,
    /// True when the spikes recur with a period.
    pub significant: bool,
    /// The period (s) when significant.
    pub period_s: Option<f64>,
}

/// Share of the e2e variance each part explains (`cov(part, e2e) / var(e2e)`).
#[derive(Clone, Debug, Serialize)]
pub struct GapReport {
    /// Calls used.
    pub n: u64,
    /// e2e standard deviation (ms).
    pub e2e_stddev_ms: f64,
    /// e2e median (ms).
    pub e2e_median_ms: f64,
    /// Share per part (they sum to ≈ 1 when the parts add up to e2e).
    pub shares: BTreeMap<&'static str, f64>,
    /// Share of the gap (time no stage covers).
    pub gap_share: f64,
    /// Share of the observer's own cost (part of the gap).
    pub observer_share: f64,
    /// True when e2e jitters (σ ≥ 1 % of the median) and the gap explains ≥ half of it.
    pub unexplained: bool,
}

/// A conclusion in plain language, with a machine-readable code.
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    /// `median_shift`, `faster`, `tail_only`, `periodic`, `unexplained_gap`,
    /// `deadline_misses`, `no_steady_calls` or `steady`.
    pub code: &'static str,
    /// The request kind it is about.
    pub kind: String,
    /// The stage it names (`null` for `steady`).
    pub stage: Option<&'static str>,
    /// `client`, `transport`, `server` or `call`.
    pub group: Option<&'static str>,
    /// The sentence shown to people.
    pub text: String,
    /// The numbers behind it (fields depend on `code`, see docs/report.md).
    pub evidence: serde_json::Value,
}

/// Per-group working data the renderers need (not serialised).
#[derive(Debug)]
pub struct GroupData {
    /// Kind name.
    pub kind: String,
    /// Steady calls (indices into the dataset), in time order.
    pub calls: Vec<u32>,
    /// Sorted values per metric (empty when the records lack it).
    pub sorted: Vec<Vec<f32>>,
    /// Outlier-round threshold per metric.
    pub thresholds: [Option<f64>; METRIC_COUNT],
    /// Spike threshold per metric (periodicity): the robust rule alone.
    pub spike_thresholds: [Option<f64>; METRIC_COUNT],
}

impl GroupData {
    /// Sorted values of one metric.
    pub fn sorted(&self, m: Metric) -> &[f32] {
        self.sorted.get(m.index()).map_or(&[], Vec::as_slice)
    }
}

/// A report plus what the renderers need to draw it.
#[derive(Debug)]
pub struct Analysis<'a> {
    /// The figures and verdicts.
    pub report: Report,
    /// The run.
    pub run: &'a Dataset,
    /// Working data per group of the run (same order as `report.groups`).
    pub groups: Vec<GroupData>,
    /// Working data per group of the baseline, by kind.
    pub baseline_groups: Vec<GroupData>,
}

pub(crate) fn inputs_of(ds: &Dataset) -> Inputs {
    Inputs {
        files: ds.files.iter().map(|p| p.display().to_string()).collect(),
        records: ds.len() as u64,
        lines: ds.notes.lines,
        skipped_bad: ds.notes.skipped,
        truncated_files: ds
            .notes
            .truncated
            .iter()
            .map(|p| p.display().to_string())
            .collect(),
        errors: ds
            .errors
            .iter()
            .map(|(e, c)| ErrorCount {
                error: e.clone(),
                count: *c,
            })
            .collect(),
        warnings: ds.notes.warnings(),
    }
}

/// Splits a dataset into per-kind groups of steady calls (plus `"*"` when
/// there are several kinds).
pub fn group_data(ds: &Dataset) -> Vec<GroupData> {
    let nk = ds.kinds.len();
    let mut per_kind: Vec<Vec<u32>> = vec![Vec::new(); nk];
    let mut all: Vec<u32> = Vec::with_capacity(ds.len());
    for i in 0..ds.len() {
        if ds.is_warmup(i) || ds.is_failed(i) {
            continue;
        }
        let k = usize::from(ds.kind[i]);
        per_kind[k].push(i as u32);
        all.push(i as u32);
    }
    let by_time = |v: &mut Vec<u32>| {
        let ts = |i: &u32| ds.ts[*i as usize];
        // Records are written in call order: usually nothing to do.
        if !v.windows(2).all(|w| ts(&w[0]) <= ts(&w[1])) {
            v.sort_by(|a, b| ts(a).total_cmp(&ts(b)));
        }
    };
    let mut out = Vec::new();
    for (k, mut calls) in per_kind.into_iter().enumerate() {
        by_time(&mut calls);
        out.push(make_group(ds, ds.kinds[k].clone(), calls));
    }
    if nk > 1 {
        by_time(&mut all);
        out.push(make_group(ds, ALL_KINDS.to_string(), all));
    }
    out
}

fn make_group(ds: &Dataset, kind: String, calls: Vec<u32>) -> GroupData {
    let sorted = Metric::ALL
        .iter()
        .map(|m| {
            let col = &ds.columns[m.index()];
            let mut v: Vec<f32> = calls
                .iter()
                .map(|&i| col[i as usize])
                .filter(|v| !v.is_nan())
                .collect();
            stats::sort_f32(&mut v);
            v
        })
        .collect();
    GroupData {
        kind,
        calls,
        sorted,
        thresholds: [None; METRIC_COUNT],
        spike_thresholds: [None; METRIC_COUNT],
    }
}

/// Analyses a run, optionally against a baseline (idle) run.
pub fn analyze<'a>(
    run: &'a Dataset,
    baseline: Option<&Dataset>,
    opts: &AnalyzeOptions,
) -> Analysis<'a> {
    let mut groups = group_data(run);
    let baseline_groups = baseline.map(group_data).unwrap_or_default();
    let mut reports = Vec::new();
    let mut verdicts = Vec::new();
    for g in groups.iter_mut() {
        let base = baseline_groups.iter().find(|b| b.kind == g.kind);
        let r = analyze_group(run, g, base, opts);
        verdicts.extend(r.verdicts.iter().cloned());
        reports.push(r);
    }
    verdicts.sort_by_key(|v| verdict_rank(v.code));
    let report = Report {
        schema: REPORT_SCHEMA,
        inputs: inputs_of(run),
        baseline: baseline.map(inputs_of),
        groups: reports,
        verdicts,
    };
    Analysis {
        report,
        run,
        groups,
        baseline_groups,
    }
}

fn verdict_rank(code: &str) -> u8 {
    match code {
        "median_shift" => 0,
        "tail_only" => 1,
        "periodic" => 2,
        "unexplained_gap" => 3,
        "deadline_misses" => 4,
        "faster" => 5,
        "no_steady_calls" => 6,
        _ => 7,
    }
}

/// Metrics that get shape, outlier and periodicity analysis: every metric
/// but lateness, which is a deadline figure rather than a stage.
fn analysed() -> impl Iterator<Item = Metric> {
    Metric::ALL.into_iter().filter(|m| *m != Metric::Late)
}

fn analyze_group(
    ds: &Dataset,
    g: &mut GroupData,
    base: Option<&GroupData>,
    opts: &AnalyzeOptions,
) -> GroupReport {
    let pooled = g.kind == ALL_KINDS;
    let kind_idx = ds.kinds.iter().position(|k| *k == g.kind);
    let (mut calls, mut warm, mut failed) = (0u64, 0u64, 0u64);
    for i in 0..ds.len() {
        if !pooled && Some(usize::from(ds.kind[i])) != kind_idx {
            continue;
        }
        calls += 1;
        if ds.is_warmup(i) {
            warm += 1;
        } else if ds.is_failed(i) {
            failed += 1;
        }
    }
    let mut stages = BTreeMap::new();
    for m in Metric::ALL {
        if let Some(s) = Summary::of_sorted(g.sorted(m)) {
            stages.insert(m.name(), s);
        }
    }
    let first = g.calls.first().map_or(f64::NAN, |&i| ds.ts[i as usize]);
    let last = g.calls.last().map_or(f64::NAN, |&i| ds.ts[i as usize]);
    let rate = rate(ds, g);

    // Spikes: above median + k·MAD of the reference (the baseline when given,
    // and then above its p99 too). Outlier rounds: that and above the
    // reference's p99 (the run's own without a baseline), so the list holds
    // the rounds that really stand out.
    let mut thresholds = BTreeMap::new();
    for m in analysed() {
        let reference = base.map_or(g.sorted(m), |b| b.sorted(m));
        if reference.len() < MIN_N || g.sorted(m).is_empty() {
            continue;
        }
        let (med, mad) = stats::median_mad(reference);
        let sigma = (1.4826 * mad).max(1e-3 * med.abs()).max(1e-3);
        let robust = med + opts.outlier_k * sigma;
        let thr = robust.max(stats::quantile(reference, 0.99));
        g.spike_thresholds[m.index()] = Some(if base.is_some() { thr } else { robust });
        g.thresholds[m.index()] = Some(thr);
        thresholds.insert(m.name(), thr);
    }
    let rule = if base.is_some() {
        format!(
            "value > baseline median + {}·1.4826·MAD and > baseline p99",
            opts.outlier_k
        )
    } else {
        format!(
            "value > run median + {}·1.4826·MAD and > run p99 (no baseline given)",
            opts.outlier_k
        )
    };
    let outliers = outliers(ds, g, rule, thresholds, opts);

    let mut vs = BTreeMap::new();
    if let Some(b) = base {
        if !pooled {
            for m in analysed() {
                if let Some(s) = vs_baseline(b.sorted(m), g.sorted(m), opts) {
                    vs.insert(m.name(), s);
                }
            }
        }
    }
    let periodicity = if pooled {
        Vec::new()
    } else {
        let times: Vec<f64> = g.calls.iter().map(|&i| ds.ts[i as usize]).collect();
        let mut gaps: Vec<f32> = times.windows(2).map(|w| (w[1] - w[0]) as f32).collect();
        let call_dt = if gaps.is_empty() {
            1.0
        } else {
            let mid = gaps.len() / 2;
            let (_, v, _) = gaps.select_nth_unstable_by(mid, f32::total_cmp);
            f64::from(*v).max(1e-3)
        };
        analysed()
            .filter_map(|m| periodicity(ds, g, &times, call_dt, m))
            .collect()
    };
    let gap = if pooled { None } else { gap(ds, g) };
    let mut report = GroupReport {
        kind: g.kind.clone(),
        calls,
        steady: g.calls.len() as u64,
        warmup_excluded: warm,
        failed,
        start_unix_ms: first,
        end_unix_ms: last,
        rate,
        stages,
        baseline: vs,
        outliers,
        periodicity,
        gap,
        mitigations: mitigations(ds, kind_idx, pooled),
        verdicts: Vec::new(),
    };
    if !pooled {
        report.verdicts = verdicts(&report, base.is_some());
    }
    report
}

fn rate(ds: &Dataset, g: &GroupData) -> Rate {
    let n = g.calls.len();
    let effective_hz = match (g.calls.first(), g.calls.last()) {
        (Some(&a), Some(&b)) if n > 1 => {
            let span = ds.ts[b as usize] - ds.ts[a as usize];
            (span > 0.0).then(|| (n - 1) as f64 / (span / 1000.0))
        }
        _ => None,
    };
    let e2e = &ds.columns[Metric::E2e.index()];
    let mut done: Vec<f64> = g
        .calls
        .iter()
        .map(|&i| ds.ts[i as usize] + f64::from(e2e[i as usize]))
        .collect();
    done.sort_unstable_by(f64::total_cmp);
    let mut d2: Vec<f32> = done
        .windows(3)
        .map(|w| (w[2] - 2.0 * w[1] + w[0]).abs() as f32)
        .collect();
    stats::sort_f32(&mut d2);
    let jitter = Summary::of_sorted(&d2);
    let (mut with, mut misses) = (0u64, 0u64);
    for &i in &g.calls {
        let f = ds.flags[i as usize];
        if f & F_HAS_DEADLINE != 0 {
            with += 1;
            if f & F_DEADLINE_MISS != 0 {
                misses += 1;
            }
        }
    }
    let late = Summary::of_sorted(g.sorted(Metric::Late));
    let deadline = (with > 0 || late.is_some()).then(|| Deadline {
        calls: with,
        misses,
        miss_rate: if with > 0 {
            misses as f64 / with as f64
        } else {
            0.0
        },
        late,
    });
    Rate {
        effective_hz,
        jitter,
        deadline,
    }
}

/// UTC ISO-8601 with milliseconds for a Unix time in ms.
pub fn iso_time(unix_ms: f64) -> String {
    if !unix_ms.is_finite() || unix_ms < 0.0 {
        return String::from("-");
    }
    let total_ms = unix_ms.round() as i64;
    let ms = total_ms.rem_euclid(1000);
    let secs = total_ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        sod / 3600,
        sod / 60 % 60,
        sod % 60
    )
}

fn outliers(
    ds: &Dataset,
    g: &GroupData,
    rule: String,
    thresholds: BTreeMap<&'static str, f64>,
    opts: &AnalyzeOptions,
) -> Outliers {
    let mut count = 0u64;
    let mut rounds = Vec::new();
    for &i in &g.calls {
        let i = i as usize;
        let mut hit = Vec::new();
        for m in Metric::ALL.into_iter().filter(|m| m.is_call_time()) {
            let Some(thr) = g.thresholds[m.index()] else {
                continue;
            };
            let v = ds.columns[m.index()][i];
            if !v.is_nan() && f64::from(v) > thr {
                hit.push(OutlierStage {
                    stage: m.name(),
                    value_ms: f64::from(v),
                    threshold_ms: thr,
                });
            }
        }
        if hit.is_empty() {
            continue;
        }
        count += 1;
        if rounds.len() < opts.max_listed_outliers {
            rounds.push(OutlierRound {
                seq: ds.seq[i],
                ts_unix_ms: ds.ts[i],
                time: iso_time(ds.ts[i]),
                e2e_ms: f64::from(ds.columns[Metric::E2e.index()][i]),
                stages: hit,
            });
        }
    }
    Outliers {
        rule,
        thresholds,
        count,
        rounds,
    }
}

fn vs_baseline(base: &[f32], run: &[f32], opts: &AnalyzeOptions) -> Option<StageVsBaseline> {
    if base.len() < MIN_N || run.len() < MIN_N {
        return None;
    }
    let b = Summary::of_sorted(base)?;
    let p50 = stats::quantile_ratio(base, run, 0.5, opts.seed)?;
    let p99 = stats::quantile_ratio(base, run, 0.99, opts.seed)?;
    let mw = stats::mann_whitney(base, run)?;
    let shift = stats::hodges_lehmann(base, run)?;
    let (med, mad) = stats::median_mad(base);
    let min_effect = (0.25 * 1.4826 * mad).max(0.01 * med.abs()).max(1e-3);
    let (be, re, ep) = stats::exceedance(base, run, b.p99);
    let located = mw.p < opts.alpha
        && shift.estimate.abs() >= min_effect
        && (shift.lo > 0.0 || shift.hi < 0.0);
    let floor = 0.5 / base.len() as f64;
    // The baseline p99 is itself an estimate: a steep tail can put 2 % of a
    // twin run above it. The p99 must also move by a meaningful amount.
    let tail_effect = (0.5 * 1.4826 * mad).max(0.05 * b.p99.abs()).max(1e-3);
    let tail_up = ep < opts.alpha
        && re >= 2.0 * be.max(floor)
        && p99.lo > 1.0
        && p99.after - p99.before >= tail_effect;
    let shape = if located && shift.estimate > 0.0 {
        "median_shift"
    } else if located {
        "faster"
    } else if tail_up {
        "tail_only"
    } else {
        "steady"
    };
    Some(StageVsBaseline {
        baseline: b,
        p50,
        p99,
        mann_whitney: mw,
        shift,
        min_effect_ms: min_effect,
        baseline_exceed: be,
        exceed: re,
        exceed_p: ep,
        shape,
    })
}

fn periodicity(
    ds: &Dataset,
    g: &GroupData,
    times: &[f64],
    call_dt: f64,
    m: Metric,
) -> Option<Periodicity> {
    let thr = g.spike_thresholds[m.index()]?;
    let col = &ds.columns[m.index()];
    if times.len() < MIN_N {
        return None;
    }
    // Spike events: spiking calls, with runs of adjacent spiking calls merged.
    let mut events: Vec<f64> = Vec::new();
    let mut last_spike = f64::NEG_INFINITY;
    for (k, &i) in g.calls.iter().enumerate() {
        let v = col[i as usize];
        if v.is_nan() || f64::from(v) <= thr {
            continue;
        }
        let t = times[k];
        if t - last_spike > 1.5 * call_dt {
            events.push(t);
        }
        last_spike = t;
    }
    if events.len() < MIN_EVENTS || events.len() > MAX_EVENTS {
        return None;
    }
    let mut isi: Vec<f32> = events.windows(2).map(|w| (w[1] - w[0]) as f32).collect();
    stats::sort_f32(&mut isi);
    let (isi_med, isi_mad) = stats::median_mad(&isi);
    let isi_cv = 1.4826 * isi_mad / isi_med.max(1e-9);

    // Autocorrelation of the binned spike series, from pair distances
    // (the series is sparse: cost grows with spikes, not with calls).
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
        let l = lag as f64;
        (c - (n - l) * mean * mean) / denom
    };
    // Smooth over ±1 bin so a jittered period still shows as one peak.
    let smooth = |lag: usize| r(lag - 1) + r(lag) + r(lag + 1);
    let min_lag = 3usize;
    let mut best = (0usize, f64::NEG_INFINITY);
    for lag in min_lag..max_lag {
        let s = smooth(lag);
        if s > best.1 {
            best = (lag, s);
        }
    }
    // The fundamental: the first lag reaching 60 % of the best peak.
    let mut fund = best;
    for lag in min_lag..best.0 {
        let s = smooth(lag);
        if s >= 0.6 * best.1 && s >= smooth(lag - 1) && s >= smooth(lag + 1) {
            fund = (lag, s);
            break;
        }
    }
    let acf = fund.1.min(1.0);
    let acf_threshold = (5.0 * 3f64.sqrt() / n.sqrt()).max(0.25);
    let acf_lag_ms = fund.0 as f64 * bin;
    let near: Vec<f32> = isi
        .iter()
        .copied()
        .filter(|d| (f64::from(*d) - acf_lag_ms).abs() <= 0.2 * acf_lag_ms)
        .collect();
    let isi_on_period = near.len() as f64 / isi.len() as f64;
    let significant = acf >= acf_threshold && isi_on_period >= 0.3 && near.len() >= 3;
    let period_ms = if near.is_empty() {
        acf_lag_ms
    } else {
        stats::quantile(&near, 0.5)
    };
    Some(Periodicity {
        stage: m.name(),
        spikes: events.len() as u64,
        isi_median_s: isi_med / 1000.0,
        isi_cv,
        acf_lag_s: acf_lag_ms / 1000.0,
        acf,
        acf_threshold,
        isi_on_period,
        significant,
        period_s: significant.then_some(period_ms / 1000.0),
    })
}

fn gap(ds: &Dataset, g: &GroupData) -> Option<GapReport> {
    let e2e_col = &ds.columns[Metric::E2e.index()];
    let e2e: Vec<f64> = g
        .calls
        .iter()
        .map(|&i| f64::from(e2e_col[i as usize]))
        .collect();
    if e2e.len() < MIN_N {
        return None;
    }
    let has = |m: Metric| !g.sorted(m).is_empty();
    let mut parts: Vec<Metric> = vec![Metric::Capture];
    if has(Metric::Uplink) && has(Metric::Downlink) {
        parts.extend([Metric::Uplink, Metric::Downlink]);
        if has(Metric::Server) {
            parts.push(Metric::Server);
        } else {
            parts.extend([Metric::Queue, Metric::Infer]);
        }
    } else if has(Metric::Net) && has(Metric::Server) {
        parts.extend([Metric::Net, Metric::Server]);
    } else if has(Metric::Roundtrip) {
        parts.push(Metric::Roundtrip);
    } else {
        parts.extend([Metric::Queue, Metric::Infer]);
    }
    parts.extend([Metric::Dispatch, Metric::Gap]);
    let (_, var) = stats::mean_var(e2e.iter().copied());
    if var.is_nan() || var <= 0.0 {
        return None;
    }
    let series = |m: Metric| -> Vec<f64> {
        let col = &ds.columns[m.index()];
        g.calls
            .iter()
            .map(|&i| {
                let v = col[i as usize];
                if v.is_nan() {
                    0.0
                } else {
                    f64::from(v)
                }
            })
            .collect()
    };
    let mut shares = BTreeMap::new();
    for m in parts.iter().copied().filter(|m| has(*m)) {
        shares.insert(m.name(), stats::covariance(&series(m), &e2e) / var);
    }
    for m in [Metric::Queue, Metric::Infer, Metric::Observer] {
        if has(m) && !shares.contains_key(m.name()) {
            shares.insert(m.name(), stats::covariance(&series(m), &e2e) / var);
        }
    }
    let gap_share = shares.get("gap").copied().unwrap_or(0.0);
    let observer_share = shares.get("observer").copied().unwrap_or(0.0);
    let sd = var.sqrt();
    let median = stats::quantile(g.sorted(Metric::E2e), 0.5);
    Some(GapReport {
        n: e2e.len() as u64,
        e2e_stddev_ms: sd,
        e2e_median_ms: median,
        shares,
        gap_share,
        observer_share,
        unexplained: has(Metric::Gap) && sd >= 0.01 * median && gap_share >= 0.5,
    })
}

fn advice(m: Metric) -> &'static str {
    match m {
        Metric::Infer | Metric::Queue | Metric::Server => {
            "inference is the bottleneck: limit concurrency, queue with timeouts, then batch"
        }
        Metric::Uplink | Metric::Downlink | Metric::Roundtrip | Metric::Net => {
            "look at bandwidth, frame size and retransmits (compress or lower the frame rate; retries only hide jitter)"
        }
        Metric::Dispatch => {
            "look at the executor queue, the bus, a control period blocked by the last action (merge commands, drop stale actions)"
        }
        Metric::Capture => "look at the camera driver, frame buffering and exposure settings",
        Metric::Gap | Metric::Observer | Metric::E2e | Metric::Late => {
            "look at client scheduling, memory reclamation, logging, or the observer"
        }
    }
}

/// Keeps a derived figure's verdict only when none of its parts carries the same code.
fn dedupe(flagged: &[Metric]) -> Vec<Metric> {
    flagged
        .iter()
        .copied()
        .filter(|m| !m.parts().iter().any(|p| flagged.contains(p)))
        .collect()
}

fn fmt_p(p: f64) -> String {
    if p < 1e-300 {
        "<1e-300".to_string()
    } else if p < 1e-3 {
        format!("{p:.1e}")
    } else {
        format!("{p:.3}")
    }
}

fn fmt_ms(v: f64) -> String {
    crate::render::fmt_ms(v)
}

fn verdicts(r: &GroupReport, has_baseline: bool) -> Vec<Verdict> {
    let mut out = Vec::new();
    let kind = r.kind.clone();
    if r.steady == 0 {
        return vec![Verdict {
            code: "no_steady_calls",
            kind,
            stage: None,
            group: None,
            text: format!(
                "no steady-state calls: all {} were warm-up ({}) or failed ({}); nothing to measure.",
                r.calls, r.warmup_excluded, r.failed
            ),
            evidence: json!({"calls": r.calls, "warmup": r.warmup_excluded, "failed": r.failed}),
        }];
    }
    let metric = |name: &str| Metric::from_name(name);
    for code in ["median_shift", "tail_only", "faster"] {
        let mut flagged: Vec<(f64, Metric)> = r
            .baseline
            .iter()
            .filter(|(_, s)| s.shape == code)
            .filter_map(|(n, s)| {
                let strength = if code == "tail_only" {
                    s.exceed_p
                } else {
                    s.mann_whitney.p
                };
                metric(n).map(|m| (strength, m))
            })
            .collect();
        // Strongest evidence first.
        flagged.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let flagged: Vec<Metric> = flagged.into_iter().map(|(_, m)| m).collect();
        for m in dedupe(&flagged) {
            let Some(s) = r.baseline.get(m.name()) else {
                continue;
            };
            let text = match code {
                "median_shift" => format!(
                    "{m} got slower as a whole: median {} → {} (×{:.2}, 95% CI {:.2}–{:.2}; Mann–Whitney p={}, shift {} [{}, {}]); p99 ×{:.2}. The whole stage is slower — {}.",
                    fmt_ms(s.p50.before), fmt_ms(s.p50.after), s.p50.ratio, s.p50.lo, s.p50.hi,
                    fmt_p(s.mann_whitney.p), fmt_ms(s.shift.estimate), fmt_ms(s.shift.lo), fmt_ms(s.shift.hi),
                    s.p99.ratio, advice(m)
                ),
                "tail_only" => format!(
                    "{m} has a longer tail with a flat median: p99 {} → {} (×{:.2}, 95% CI {:.2}–{:.2}), {:.1}% of calls above the baseline p99 (baseline {:.1}%, p={}), median ×{:.2} (shift {} within noise). A few requests are held up: queueing or contention — {}.",
                    fmt_ms(s.p99.before), fmt_ms(s.p99.after), s.p99.ratio, s.p99.lo, s.p99.hi,
                    100.0 * s.exceed, 100.0 * s.baseline_exceed, fmt_p(s.exceed_p), s.p50.ratio,
                    fmt_ms(s.shift.estimate), advice(m)
                ),
                _ => format!(
                    "{m} got faster: median {} → {} (×{:.2}, 95% CI {:.2}–{:.2}; Mann–Whitney p={}).",
                    fmt_ms(s.p50.before), fmt_ms(s.p50.after), s.p50.ratio, s.p50.lo, s.p50.hi,
                    fmt_p(s.mann_whitney.p)
                ),
            };
            out.push(Verdict {
                code,
                kind: kind.clone(),
                stage: Some(m.name()),
                group: Some(m.group()),
                text,
                evidence: json!({
                    "p50_before_ms": s.p50.before, "p50_after_ms": s.p50.after,
                    "p50_ratio": s.p50.ratio, "p50_ci": [s.p50.lo, s.p50.hi],
                    "p99_before_ms": s.p99.before, "p99_after_ms": s.p99.after,
                    "p99_ratio": s.p99.ratio, "p99_ci": [s.p99.lo, s.p99.hi],
                    "mann_whitney_p": s.mann_whitney.p, "shift_ms": s.shift.estimate,
                    "shift_ci_ms": [s.shift.lo, s.shift.hi],
                    "exceed": s.exceed, "baseline_exceed": s.baseline_exceed, "exceed_p": s.exceed_p,
                }),
            });
        }
    }
    let periodic: Vec<Metric> = r
        .periodicity
        .iter()
        .filter(|p| p.significant)
        .filter_map(|p| metric(p.stage))
        .collect();
    for m in dedupe(&periodic) {
        let Some(p) = r.periodicity.iter().find(|p| p.stage == m.name()) else {
            continue;
        };
        let period = p.period_s.unwrap_or(p.acf_lag_s);
        out.push(Verdict {
            code: "periodic",
            kind: kind.clone(),
            stage: Some(m.name()),
            group: Some(m.group()),
            text: format!(
                "{m} spikes recur every {period:.2} s ({} spikes; autocorrelation {:.2} at {:.2} s, {:.0}% of inter-spike intervals within ±20% of it): the signature of GC, timers or link renegotiation — find what runs every {period:.2} s.",
                p.spikes, p.acf, p.acf_lag_s, 100.0 * p.isi_on_period
            ),
            evidence: json!({
                "period_s": period, "spikes": p.spikes, "acf": p.acf,
                "acf_threshold": p.acf_threshold, "isi_median_s": p.isi_median_s,
                "isi_on_period": p.isi_on_period,
            }),
        });
    }
    let stage_moved = out.iter().any(|v| {
        matches!(v.code, "median_shift" | "tail_only")
            && !matches!(v.stage, Some("gap" | "observer" | "e2e"))
    });
    if let Some(gp) = &r.gap {
        if gp.unexplained && !stage_moved {
            // The gap's own shape verdicts say the same thing less well.
            out.retain(|v| {
                !(matches!(v.code, "median_shift" | "tail_only")
                    && matches!(v.stage, Some("gap" | "observer" | "e2e")))
            });
            let moved = r.baseline.get("gap").map_or(String::new(), |b| {
                format!(
                    " Against the baseline the gap went from median {} / p99 {} to {} / {}.",
                    fmt_ms(b.p50.before),
                    fmt_ms(b.p99.before),
                    fmt_ms(b.p50.after),
                    fmt_ms(b.p99.after)
                )
            });
            let who = if gp.observer_share >= 0.25 * gp.gap_share {
                "a large part of it is the observer's own cost"
            } else {
                "not the observer: look at client scheduling, memory reclamation, logging"
            };
            let steady = if has_baseline {
                "all stages are steady against the baseline"
            } else {
                "no stage explains it"
            };
            out.push(Verdict {
                code: "unexplained_gap",
                kind: kind.clone(),
                stage: Some("gap"),
                group: Some("call"),
                text: format!(
                    "e2e jitters (σ {} around a median of {}) but {steady}: the gap — time inside the call no stage covers — explains {:.0}% of the e2e variance, the observer's own cost {:.1}%; {who}.{moved}",
                    fmt_ms(gp.e2e_stddev_ms), fmt_ms(gp.e2e_median_ms),
                    100.0 * gp.gap_share, 100.0 * gp.observer_share
                ),
                evidence: json!({
                    "e2e_stddev_ms": gp.e2e_stddev_ms, "gap_share": gp.gap_share,
                    "observer_share": gp.observer_share, "shares": gp.shares,
                }),
            });
        }
    }
    if let Some(d) = &r.rate.deadline {
        if d.misses > 0 {
            out.push(Verdict {
                code: "deadline_misses",
                kind: kind.clone(),
                stage: Some("e2e"),
                group: Some("call"),
                text: format!(
                    "{} of {} calls ({:.2}%) missed their tick's deadline.",
                    d.misses,
                    d.calls,
                    100.0 * d.miss_rate
                ),
                evidence: json!({"misses": d.misses, "calls": d.calls, "miss_rate": d.miss_rate}),
            });
        }
    }
    if out.is_empty() {
        let text = if has_baseline {
            "steady: no stage moved against the baseline (median and tail tests), no periodic spikes, and the stages explain the e2e jitter.".to_string()
        } else {
            "steady: no periodic spikes and the stages explain the e2e jitter (give --baseline IDLE_FILES to test for median shifts and longer tails).".to_string()
        };
        out.push(Verdict {
            code: "steady",
            kind,
            stage: None,
            group: None,
            text,
            evidence: json!({}),
        });
    }
    out.sort_by_key(|v| verdict_rank(v.code));
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::{analyze, iso_time, AnalyzeOptions, ALL_KINDS};
    use crate::load::{Dataset, LoadOptions};
    use std::path::Path;

    #[test]
    fn mitigation_figures_per_kind_in_text_and_json() {
        // kind "a": batches of 4 and 2, a cache missing once then hitting
        // three times; kind "b": one stale drop of 2 chunks; a warm-up call
        // with a batch of 9 is left out.
        let lines = [
            r#"{"seq":0,"ts_unix_ms":1000,"kind":"a","e2e_ms":1,"warmup":true,"batch_size":9}"#,
            r#"{"seq":1,"ts_unix_ms":1010,"kind":"a","e2e_ms":1,"batch_size":4,"cache":"miss"}"#,
            r#"{"seq":2,"ts_unix_ms":1020,"kind":"a","e2e_ms":1,"batch_size":2,"cache":"hit"}"#,
            r#"{"seq":3,"ts_unix_ms":1030,"kind":"a","e2e_ms":1,"cache":"hit"}"#,
            r#"{"seq":4,"ts_unix_ms":1040,"kind":"a","e2e_ms":1,"cache":"hit"}"#,
            r#"{"seq":5,"ts_unix_ms":1050,"kind":"b","e2e_ms":1}"#,
            r#"{"seq":6,"ts_unix_ms":1060,"kind":"b","e2e_ms":1,"failed":true,"error":"stale action dropped","stale_dropped":2}"#,
        ]
        .join("\n");
        let ds =
            Dataset::load_reader(lines.as_bytes(), Path::new("m"), LoadOptions::default()).unwrap();
        let a = analyze(&ds, None, &AnalyzeOptions::default());
        let g = |k: &str| a.report.groups.iter().find(|g| g.kind == k).unwrap();
        let ma = g("a").mitigations.clone().unwrap();
        assert_eq!((ma.batched_calls, ma.mean_batch), (2, Some(3.0)));
        assert_eq!((ma.cache_hits, ma.cache_misses), (3, 1));
        assert_eq!(ma.cache_hit_rate, Some(0.75));
        assert_eq!((ma.stale_calls, ma.stale_dropped), (0, 0));
        let mb = g("b").mitigations.clone().unwrap();
        assert_eq!((mb.stale_calls, mb.stale_dropped), (1, 2));
        assert_eq!((mb.mean_batch, mb.cache_hit_rate), (None, None));
        let all = g(ALL_KINDS).mitigations.clone().unwrap();
        assert_eq!(
            (all.batched_calls, all.cache_hits, all.stale_dropped),
            (2, 3, 2)
        );
        let text = crate::render::text(&a.report);
        assert!(
            text.contains(
                "mitigations: batched 2 call(s), mean batch 3.00; cache 3 hit / 1 miss (75.0% hit)"
            ),
            "{text}"
        );
        assert!(
            text.contains("mitigations: 2 stale action(s) dropped in 1 call(s)"),
            "{text}"
        );
        let json = serde_json::to_value(&a.report).unwrap();
        assert_eq!(json["groups"][0]["mitigations"]["cache_hit_rate"], 0.75);
        // Runs without mitigations carry no such entry.
        let plain = Dataset::load_reader(
            r#"{"seq":0,"ts_unix_ms":1,"kind":"c","e2e_ms":1}"#.as_bytes(),
            Path::new("p"),
            LoadOptions::default(),
        )
        .unwrap();
        let p = analyze(&plain, None, &AnalyzeOptions::default());
        assert!(p.report.groups[0].mitigations.is_none());
        let pj = serde_json::to_value(&p.report).unwrap();
        assert!(pj["groups"][0].get("mitigations").is_none());
        assert!(!crate::render::text(&p.report).contains("mitigations:"));
    }

    #[test]
    fn iso_times() {
        assert_eq!(iso_time(0.0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_time(1_700_000_000_123.0), "2023-11-14T22:13:20.123Z");
        assert_eq!(iso_time(951_782_400_000.0), "2000-02-29T00:00:00.000Z");
    }
}
