//! The per-call stacked stage timeline of a group in the HTML report, with
//! outlier rounds marked.

use std::fmt::Write as _;

use stagetrace_schema::Figure;

use super::{color, legend, svg_open, y_axis, H, MB, ML, MR, MT, W};
use crate::analysis::{Analysis, GroupData, GroupReport};
use crate::figures;
use crate::format::fmt_ms;
use crate::load::Dataset;

/// Columns of the timeline (calls beyond this share a column; it shows its slowest call).
const COLUMNS: usize = 900;

/// Writes the group's timeline: one column per call (the slowest of the
/// calls sharing a column), its stages stacked; `suffix` makes its id
/// unique.
pub(super) fn plot(s: &mut String, a: &Analysis<'_>, g: &GroupData, r: &GroupReport, suffix: &str) {
    let ds = a.run;
    let has = |f: Figure| !g.sorted(f).is_empty();
    let stack = figures::stacked(has);
    let calls = &g.calls;
    svg_open(
        s,
        &format!("timeline-plot{suffix}"),
        "per-call stage timeline",
    );
    if calls.is_empty() {
        let _ = writeln!(s, "</svg>");
        return;
    }
    let cols = calls.len().min(COLUMNS);
    let chosen = columns(ds, g, r, cols);
    let ymax = chosen
        .iter()
        .map(|(i, _)| {
            let stacked: f64 = stack.iter().map(|m| ds.value(*m, *i).unwrap_or(0.0)).sum();
            stacked.max(e2e(ds, *i))
        })
        .fold(0.0, f64::max);
    let top = y_axis(s, ymax.max(1e-3) * 1.08, "ms per call");
    bars(s, ds, &stack, &chosen, top);
    time_axis(s, ds, calls, cols);
    legend(s, &stack);
    let _ = writeln!(s, "</svg>");
}

/// The group's calls cut into `cols` columns: per column the slowest call
/// (by `e2e`), and whether any call in it is an outlier.
fn columns(ds: &Dataset, g: &GroupData, r: &GroupReport, cols: usize) -> Vec<(usize, bool)> {
    let calls = &g.calls;
    // Per column: the slowest call.
    let mut chosen: Vec<(usize, bool)> = Vec::with_capacity(cols);
    let per = calls.len() as f64 / cols as f64;
    let is_outlier = |i: usize| -> bool {
        Figure::ALL.iter().any(|f| {
            g.thresholds[f.index()]
                .is_some_and(|thr| f.is_call_time() && ds.value(*f, i).is_some_and(|v| v > thr))
        })
    };
    for c in 0..cols {
        let from = (c as f64 * per) as usize;
        let to = (((c + 1) as f64 * per) as usize).clamp(from + 1, calls.len());
        let mut best = calls[from] as usize;
        let mut any_out = false;
        for &i in &calls[from..to] {
            let i = i as usize;
            if e2e(ds, i) > e2e(ds, best) {
                best = i;
            }
            if r.outliers.count > 0 && !any_out {
                any_out = is_outlier(i);
            }
        }
        chosen.push((best, any_out));
    }
    chosen
}

/// One stacked bar of the `stack` stages per chosen call, on a y axis up
/// to `top` ms; a column holding an outlier gets a marker over its bar.
fn bars(s: &mut String, ds: &Dataset, stack: &[Figure], chosen: &[(usize, bool)], top: f64) {
    let cw = (W - ML - MR) / chosen.len() as f64;
    let py = |v: f64| MT + (H - MT - MB) * (1.0 - v / top);
    for (c, (i, out)) in chosen.iter().enumerate() {
        let x = ML + c as f64 * cw;
        let mut acc = 0.0;
        for m in stack {
            let v = ds.value(*m, *i).unwrap_or(0.0).max(0.0);
            if v <= 0.0 {
                continue;
            }
            let (y1, y0) = (py(acc + v), py(acc));
            let _ = write!(
                s,
                "<rect x=\"{x:.2}\" y=\"{y1:.2}\" width=\"{:.2}\" height=\"{:.2}\" fill=\"{}\"/>",
                cw.max(0.5),
                (y0 - y1).max(0.2),
                color(*m)
            );
            acc += v;
        }
        if *out {
            let y = py(acc.max(e2e(ds, *i))) - 4.0;
            let _ = write!(
                s,
                "<path class=\"outlier\" d=\"M{:.1},{:.1} l-4,-7 h8 z\" fill=\"#d00\"><title>seq {} e2e {}</title></path>",
                x + cw / 2.0,
                y,
                ds.seq(*i),
                fmt_ms(e2e(ds, *i))
            );
        }
        s.push('\n');
    }
}

/// The timeline's x axis: seconds since the first call at five ticks, and
/// its caption.
fn time_axis(s: &mut String, ds: &Dataset, calls: &[u32], cols: usize) {
    let t0 = ds.ts_unix_ms(calls[0] as usize);
    for k in 0..=4 {
        let f = k as f64 / 4.0;
        let x = ML + (W - ML - MR) * f;
        let call = calls[((calls.len() - 1) as f64 * f) as usize] as usize;
        let _ = writeln!(
            s,
            "<text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{:.1} s</text>",
            H - MB + 18.0,
            (ds.ts_unix_ms(call) - t0) / 1000.0
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">time since the first steady call ({} calls in {} columns)</text>",
        (ML + W - MR) / 2.0,
        H - 8.0,
        calls.len(),
        cols
    );
}

/// Call `i`'s `e2e` in ms, 0 when it has none.
fn e2e(ds: &Dataset, i: usize) -> f64 {
    ds.value(Figure::E2e, i).unwrap_or(0.0)
}
