//! A run split into per-kind groups of steady calls, and the figures read
//! straight off a group's calls: what was read, the call rate and
//! deadlines, what the mitigations did.

use stagetrace_schema::{Figure, FIGURE_COUNT};

use super::report::{Deadline, ErrorCount, Inputs, Mitigations, Rate, ALL_KINDS};
use crate::load::{Dataset, HopFig, F_DEADLINE_MISS, F_HAS_DEADLINE};
use crate::stats::{self, Distribution};

/// Per-group working data the renderers need (not serialised).
#[derive(Debug)]
pub struct GroupData {
    /// Kind name.
    pub kind: String,
    /// Steady calls (indices into the dataset), in time order.
    pub calls: Vec<u32>,
    /// Sorted values per figure (indexed by [`Figure::index`], in ms;
    /// empty when the records lack it).
    pub sorted: Vec<Vec<f32>>,
    /// Outlier-round threshold per figure.
    pub thresholds: [Option<f64>; FIGURE_COUNT],
    /// Spike threshold per figure (periodicity): the robust rule alone.
    pub spike_thresholds: [Option<f64>; FIGURE_COUNT],
    /// Sorted values per hop of the `hops` array, per [`HopFig`] (ms;
    /// empty without gateways).
    pub hop_sorted: Vec<[Vec<f32>; HopFig::ALL.len()]>,
}

impl GroupData {
    /// Sorted values of `fig` on `hop` (0: robot → first gateway), ms.
    pub fn hop_sorted(&self, hop: usize, fig: HopFig) -> &[f32] {
        self.hop_sorted
            .get(hop)
            .map_or(&[], |l| l[fig.index()].as_slice())
    }

    /// Sorted values of one figure (ms).
    pub fn sorted(&self, f: Figure) -> &[f32] {
        self.sorted.get(f.index()).map_or(&[], Vec::as_slice)
    }
}

/// What was read, as the report states it.
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
    // Columns the analysis does not read are empty, and so are their sorts.
    let sorted = ds
        .columns
        .iter()
        .map(|col| {
            let mut v: Vec<f32> = calls
                .iter()
                .filter_map(|&i| col.get(i as usize).copied())
                .filter(|v| !v.is_nan())
                .collect();
            stats::sort_f32(&mut v);
            v
        })
        .collect();
    let sorted_of = |value: &dyn Fn(usize) -> Option<f64>| {
        let mut v: Vec<f32> = calls
            .iter()
            .filter_map(|&i| value(i as usize))
            .map(|x| x as f32)
            .collect();
        stats::sort_f32(&mut v);
        v
    };
    let hop_sorted = (0..ds.hop_count())
        .map(|hop| std::array::from_fn(|k| sorted_of(&|i| ds.hop_value(hop, HopFig::ALL[k], i))))
        .collect();
    GroupData {
        kind,
        calls,
        sorted,
        hop_sorted,
        thresholds: [None; FIGURE_COUNT],
        spike_thresholds: [None; FIGURE_COUNT],
    }
}

/// What the mitigations did over a group's calls (`None` when no record says).
pub(super) fn mitigations(
    ds: &Dataset,
    kind_idx: Option<usize>,
    pooled: bool,
) -> Option<Mitigations> {
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

/// Call rate, completion jitter and deadlines of a group.
pub(super) fn rate(ds: &Dataset, g: &GroupData) -> Rate {
    rate_of(ds, &g.calls)
}

/// Call rate, completion jitter and deadlines of some calls (indices into
/// `ds`, in time order): a group's, or one robot's of a fleet — never the
/// merged robots', whose interleaved calls make neither a rate nor a jitter.
pub(super) fn rate_of(ds: &Dataset, calls: &[u32]) -> Rate {
    let n = calls.len();
    let effective_hz = match (calls.first(), calls.last()) {
        (Some(&a), Some(&b)) if n > 1 => {
            let span = ds.ts[b as usize] - ds.ts[a as usize];
            (span > 0.0).then(|| (n - 1) as f64 / (span / 1000.0))
        }
        _ => None,
    };
    let e2e = |i: u32| ds.value(Figure::E2e, i as usize).unwrap_or(f64::NAN);
    let mut done: Vec<f64> = calls.iter().map(|&i| ds.ts[i as usize] + e2e(i)).collect();
    done.sort_unstable_by(f64::total_cmp);
    let mut d2: Vec<f32> = done
        .windows(3)
        .map(|w| (w[2] - 2.0 * w[1] + w[0]).abs() as f32)
        .collect();
    stats::sort_f32(&mut d2);
    let jitter = Distribution::of_sorted(&d2);
    let (mut with, mut misses) = (0u64, 0u64);
    for &i in calls {
        let f = ds.flags[i as usize];
        if f & F_HAS_DEADLINE != 0 {
            with += 1;
            if f & F_DEADLINE_MISS != 0 {
                misses += 1;
            }
        }
    }
    let mut late: Vec<f32> = calls
        .iter()
        .filter_map(|&i| ds.value(Figure::Late, i as usize))
        .map(|v| v as f32)
        .collect();
    stats::sort_f32(&mut late);
    let late = Distribution::of_sorted(&late);
    let deadline = (with > 0 || late.is_some()).then(|| Deadline {
        calls: with,
        misses,
        miss_rate: if with > 0 {
            misses as f64 / with as f64
        } else {
            0.0
        },
        late,
        cause: None,
    });
    Rate {
        effective_hz,
        jitter,
        deadline,
    }
}
