//! The percentile (HDR) and CDF plots of a kind: one curve per figure the
//! call's own time is made of, the baseline's dashed beneath.

use std::fmt::Write as _;

use stagetrace_schema::{Figure, Side};

use super::svg::{axes, legend, polyline_in, svg_open, y_axis, H, MB, ML, MR, MT, W};
use super::{host_toggles, palette::color};
use crate::analysis::GroupData;
use crate::axis::{self, trim_num};
use crate::figures;
use crate::stats;

/// Points per curve.
const CURVE_POINTS: usize = 400;

/// Figures drawn as curves: the call's own times present, in display order
/// (a stage's parts under it). A sum of stages on the server side
/// (`server`) is not drawn (its stages are), nor one on the transport side
/// (`roundtrip`, `net`) while the uplink/downlink split is there. A stage
/// with parts (`queue`, `infer`) is drawn, and so are its parts (`pre`,
/// `model`, `post`): curves of their own, never stacked on it (the timeline
/// stacks the stages alone, `figures::stacked`).
fn curves(g: &GroupData) -> Vec<Figure> {
    let split = Figure::Net.parts().iter().any(|p| !g.sorted(*p).is_empty());
    figures::display_order()
        .into_iter()
        .filter(|f| f.is_call_time() && !g.sorted(*f).is_empty())
        .filter(|f| {
            let sum = f.parts().iter().any(|p| p.is_stage());
            !(sum && (f.side() == Side::Server || (split && f.side() == Side::Transport)))
        })
        .collect()
}

/// Opens a plot's `div.plot`: the host figures' checkboxes, then the svg.
fn plot_open(s: &mut String, id: &str, title: &str, ms: &[Figure]) {
    let _ = writeln!(s, "<div class=\"plot\">");
    // The robot's host figures, then the server's (the host table's order).
    let host: Vec<Figure> = figures::host_rows()
        .into_iter()
        .filter(|f| ms.contains(f))
        .collect();
    host_toggles::checkboxes(s, id, &host);
    svg_open(s, id, title);
}

/// Each figure's curve (`curve` of its sorted values), the baseline's
/// dashed beneath, then the legend; closes the plot.
fn close_curves(
    s: &mut String,
    g: &GroupData,
    base: Option<&GroupData>,
    ms: &[Figure],
    curve: impl Fn(&[f32]) -> Vec<(f64, f64)>,
) {
    // A host figure's curve is hidden until its checkbox is ticked.
    let class = |m: Figure| {
        if m.is_host() {
            format!("host-curve c-{}", m.name())
        } else {
            String::new()
        }
    };
    if let Some(b) = base {
        for m in ms {
            let sorted = b.sorted(*m);
            if !sorted.is_empty() {
                let title = format!("baseline {m}");
                polyline_in(s, &curve(sorted), color(*m), true, &title, &class(*m));
            }
        }
    }
    for m in ms {
        polyline_in(
            s,
            &curve(g.sorted(*m)),
            color(*m),
            false,
            m.name(),
            &class(*m),
        );
    }
    let shown: Vec<Figure> = ms.iter().copied().filter(|m| !m.is_host()).collect();
    legend(s, &shown);
    let _ = writeln!(s, "</svg></div>");
}

/// The percentile plot: each figure's quantiles on a log 1/(1−q) axis.
pub(super) fn hdr_plot(s: &mut String, g: &GroupData, base: Option<&GroupData>, suffix: &str) {
    let ms = curves(g);
    let n = g.calls.len().max(2) as f64;
    let xmax = n.log10().clamp(1.0, 7.0);
    let mut ymax = 0f64;
    for m in &ms {
        ymax = ymax.max(stats::quantile(g.sorted(*m), 1.0));
        if let Some(b) = base {
            let v = stats::quantile(b.sorted(*m), 1.0);
            if v.is_finite() {
                ymax = ymax.max(v);
            }
        }
    }
    plot_open(
        s,
        &format!("hdr-plot{suffix}"),
        "latency by percentile",
        &ms,
    );
    let top = y_axis(s, ymax.max(1e-3), "latency (ms)");
    let px = |x: f64| ML + (W - ML - MR) * x / xmax;
    let py = |v: f64| MT + (H - MT - MB) * (1.0 - v / top);
    let mut k = 0.0;
    while k <= xmax + 1e-9 {
        let label = if k == 0.0 {
            "0%".to_string()
        } else {
            let q = 100.0 * (1.0 - 10f64.powf(-k));
            format!("{}%", trim_num((q * 1e4).round() / 1e4))
        };
        let x = px(k);
        let _ = writeln!(
            s,
            "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{MT}\" y2=\"{:.1}\" stroke=\"#eee\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{label}</text>",
            H - MB,
            H - MB + 18.0
        );
        k += 1.0;
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">percentile (log 1/(1−q) axis)</text>",
        (ML + W - MR) / 2.0,
        H - 8.0
    );
    let curve = |sorted: &[f32]| -> Vec<(f64, f64)> {
        let len = sorted.len().max(1) as f64;
        let xend = len.log10().min(xmax);
        (0..=CURVE_POINTS)
            .map(|i| {
                let x = xend * i as f64 / CURVE_POINTS as f64;
                let q = 1.0 - 10f64.powf(-x);
                (px(x), py(stats::quantile(sorted, q)))
            })
            .collect()
    };
    close_curves(s, g, base, &ms, curve);
}

/// The CDF plot: the fraction of calls at or under each latency (a log
/// scale when the values span more than 20×).
pub(super) fn cdf_plot(s: &mut String, g: &GroupData, base: Option<&GroupData>, suffix: &str) {
    let ms = curves(g);
    let (lo, hi, log) = latency_range(g, &ms);
    plot_open(
        s,
        &format!("cdf-plot{suffix}"),
        "cumulative distribution",
        &ms,
    );
    fraction_axis(s);
    let tx = |v: f64| -> f64 {
        if log {
            (v.max(lo).ln() - lo.ln()) / (hi.ln() - lo.ln())
        } else {
            (v - lo) / (hi - lo)
        }
    };
    let px = |v: f64| ML + (W - ML - MR) * tx(v).clamp(0.0, 1.0);
    let py = |f: f64| MT + (H - MT - MB) * (1.0 - f);
    latency_axis(s, lo, hi, log, &px);
    let curve = |sorted: &[f32]| -> Vec<(f64, f64)> {
        (0..=CURVE_POINTS)
            .map(|i| {
                let f = i as f64 / CURVE_POINTS as f64;
                (px(stats::quantile(sorted, f)), py(f))
            })
            .collect()
    };
    close_curves(s, g, base, &ms, curve);
}

/// The CDF's x range over the figures drawn: (low, high, log scale); the
/// low end is 0 on a linear scale.
fn latency_range(g: &GroupData, ms: &[Figure]) -> (f64, f64, bool) {
    let (mut lo, mut hi) = (f64::INFINITY, 0f64);
    for m in ms {
        let v = g.sorted(*m);
        if let (Some(a), Some(b)) = (v.first(), v.last()) {
            lo = lo.min(f64::from(*a));
            hi = hi.max(f64::from(*b));
        }
    }
    if hi.is_nan() || hi <= 0.0 {
        hi = 1.0;
    }
    let log = lo > 0.0 && hi / lo > 20.0;
    let lo = if log { lo } else { 0.0 };
    (lo, hi, log)
}

/// The CDF's y axis: the fraction of calls, 0 to 1 in fifths.
fn fraction_axis(s: &mut String) {
    for i in 0..=5 {
        let f = i as f64 / 5.0;
        let y = MT + (H - MT - MB) * (1.0 - f);
        let _ = writeln!(
            s,
            "<line x1=\"{ML}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#eee\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{f:.1}</text>",
            W - MR,
            ML - 6.0,
            y + 4.0
        );
    }
    axes(s);
    let _ = writeln!(
        s,
        "<text x=\"14\" y=\"{:.1}\" transform=\"rotate(-90 14 {:.1})\" text-anchor=\"middle\">fraction of calls ≤ x</text>",
        (MT + H - MB) / 2.0,
        (MT + H - MB) / 2.0
    );
}

/// The CDF's x axis: latency ticks (1-2-5 steps on a log scale), placed by
/// `px`, and its label.
fn latency_axis(s: &mut String, lo: f64, hi: f64, log: bool, px: &dyn Fn(f64) -> f64) {
    let ticks = if log {
        axis::log125(lo, hi)
    } else {
        axis::spaced(lo, hi, 8)
    };
    for v in ticks {
        let x = px(v);
        let _ = writeln!(
            s,
            "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{MT}\" y2=\"{:.1}\" stroke=\"#eee\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            H - MB,
            H - MB + 18.0,
            trim_num(v)
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">latency (ms{})</text>",
        (ML + W - MR) / 2.0,
        H - 8.0,
        if log { ", log scale" } else { "" }
    );
}
