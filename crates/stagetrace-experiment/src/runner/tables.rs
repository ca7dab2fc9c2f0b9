//! The run's figures as the report shows them: the baseline table, the
//! timeline of windowed p90 with the resource tracks, and the live line.

use std::collections::BTreeMap;

use stagetrace_analyze::stats;
use stagetrace_schema::Figure;
use stagetrace_schema::FIGURE_COUNT;

use super::tag::State;
use crate::figures;
use crate::report::Timeline;
use crate::verdict::{column, Obs};

/// Baseline distributions (ms) per compared figure: n, p50, p90, p99.
pub(crate) fn baseline_table(st: &State) -> BTreeMap<&'static str, [f64; 4]> {
    let mut t = BTreeMap::new();
    let Some(bi) = st.phases.iter().position(|p| p.phase == "baseline") else {
        return t;
    };
    for f in figures::compared() {
        let v = column(&st.obs, bi, f);
        if v.is_empty() {
            continue;
        }
        t.insert(
            f.name(),
            [
                v.len() as f64,
                stats::quantile(&v, 0.5),
                stats::quantile(&v, 0.9),
                stats::quantile(&v, 0.99),
            ],
        );
    }
    t
}

/// Windowed p90 per drawn figure (0.5 s windows) and the resource tracks.
pub(crate) fn timeline(st: &State) -> Timeline {
    let t0 = st
        .phases
        .iter()
        .find(|p| p.phase == "baseline")
        .or(st.phases.first())
        .map_or(0.0, |p| p.start_unix_ms);
    let mut windows: BTreeMap<i64, Vec<&Obs>> = BTreeMap::new();
    for o in st.obs.iter().filter(|o| !o.failed && o.ts_ms >= t0) {
        windows
            .entry(((o.ts_ms - t0) / 500.0).floor() as i64)
            .or_default()
            .push(o);
    }
    let windows = windows
        .into_iter()
        .map(|(w, obs)| {
            let mut vals = [f64::NAN; FIGURE_COUNT];
            for f in figures::finest() {
                let mut col: Vec<f32> = obs
                    .iter()
                    .map(|o| o.get(f))
                    .filter(|v| v.is_finite())
                    .collect();
                col.sort_unstable_by(f32::total_cmp);
                vals[f.index()] = stats::quantile(&col, 0.9);
            }
            (w as f64 * 0.5, vals)
        })
        .collect();
    let nan = f64::NAN;
    let resources = st
        .samples
        .iter()
        .filter(|(_, s)| s.ts_unix_ms >= t0)
        .map(|(_, s)| {
            (
                (s.ts_unix_ms - t0) / 1e3,
                [
                    s.cpu_total_pct.unwrap_or(nan),
                    s.psi_cpu_some_pct.unwrap_or(nan),
                    s.run_delay_ms_per_s.map_or(nan, |v| v / 10.0),
                    s.target_cpu_pct.unwrap_or(nan),
                    s.gpus
                        .iter()
                        .filter_map(|g| g.util_gpu_pct)
                        .reduce(f64::max)
                        .unwrap_or(nan),
                ],
            )
        })
        .collect();
    Timeline {
        t0_unix_ms: t0,
        windows,
        resources,
    }
}

/// The live line: p50/p99 of each figure in the current phase — the ones
/// that make up the call, and the whole call.
pub(crate) fn live_message(st: &State, pi: usize) -> String {
    let mut parts = Vec::new();
    for f in figures::compared().filter(|f| figures::is_finest(*f) || *f == Figure::E2e) {
        let mut v: Vec<f32> = st
            .obs
            .iter()
            .rev()
            .take_while(|o| o.phase == pi)
            .filter(|o| o.counts() && o.get(f).is_finite())
            .map(|o| o.get(f))
            .collect();
        if v.is_empty() {
            continue;
        }
        v.sort_unstable_by(f32::total_cmp);
        parts.push(format!(
            "{f} {:.1}/{:.1}",
            stats::quantile(&v, 0.5),
            stats::quantile(&v, 0.99)
        ));
    }
    if parts.is_empty() {
        "waiting for calls".into()
    } else {
        format!("p50/p99 ms: {}", parts.join("  "))
    }
}
