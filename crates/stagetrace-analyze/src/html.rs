//! The self-contained HTML report: inline SVG only (no script, no external
//! file): an HDR percentile plot on a log 1/(1−q) axis, a per-call stacked
//! stage timeline with outlier rounds marked, and a CDF, per kind.
//!
//! `timeline` draws the timeline; `hops` and `robots` the tables of the
//! gateways' hops and of the fleet's robots.

mod hops;
mod robots;
mod timeline;

use std::fmt::Write as _;

use stagetrace_schema::{Figure, Side};

use crate::analysis::{Analysis, GroupData, ALL_KINDS};
use crate::axis::{self, trim_num};
use crate::figures;
use crate::render;
use crate::stats;

const W: f64 = 1200.0;
const H: f64 = 420.0;
const ML: f64 = 70.0;
const MR: f64 = 150.0;
const MT: f64 = 30.0;
const MB: f64 = 50.0;
/// Points per curve.
const CURVE_POINTS: usize = 400;

/// A figure's colour on every plot. Exhaustive: a figure added to the
/// table needs its colour here.
fn color(f: Figure) -> &'static str {
    match f {
        Figure::Capture => "#8c564b",
        Figure::Uplink => "#1f77b4",
        Figure::Queue => "#bcbd22",
        Figure::Infer => "#2ca02c",
        Figure::Downlink => "#17becf",
        Figure::Dispatch => "#9467bd",
        // Shades of dispatch's purple: its two parts.
        Figure::ExecTx => "#c5b0d5",
        Figure::ExecWait => "#6a3d9a",
        Figure::ExecRelay => "#9e8ac0",
        Figure::ExecAck => "#dcd0e8",
        Figure::Roundtrip => "#7f7f7f",
        // Grey like the roundtrip it cuts: a black box, not a stage's colour.
        Figure::Ttfb => "#a5a5a5",
        Figure::Rx => "#6b9ac4",
        Figure::Server => "#98df8a",
        Figure::Net => "#aec7e8",
        Figure::Relay => "#c5b0d5",
        Figure::E2e => "#d62728",
        Figure::Gap => "#ff7f0e",
        Figure::Observer => "#e377c2",
        Figure::Late => "#c49c94",
        // Not drawn: the analysis does not read the clock figures.
        Figure::Offset => "#dbdb8d",
        Figure::SplitErr => "#c7c7c7",
        Figure::ExecOffset => "#e7e7a0",
        Figure::ExecErr => "#d9d9d9",
        // The hosts: dark for the robot, light for the server; what they
        // lacked (a core, the collector) in its own hue.
        Figure::RunWait => "#393b79",
        Figure::ServerRunWait => "#9c9ede",
        Figure::CpuStall => "#637939",
        Figure::ServerCpuStall => "#b5cf6b",
        Figure::Gc => "#8c6d31",
        Figure::ServerGc => "#e7ba52",
        Figure::RxWait => "#843c39",
        Figure::ServerRxWait => "#d6616b",
        // The robot's wait inside its own stages: the run wait's hue.
        Figure::CaptureRunWait => "#5254a3",
        Figure::DispatchRunWait => "#6b6ecf",
        Figure::TxWait => "#a55194",
        // The async shape: the chunk held for the robot's poll, and how far
        // ahead of the action queue running dry it came.
        Figure::PollWait => "#bcbd22",
        Figure::Margin => "#17becf",
        // Inference's parts: shades of infer's green.
        Figure::Pre => "#74c476",
        Figure::Model => "#006d2c",
        Figure::Post => "#a1d99b",
        Figure::Device => "#31a354",
        // Queue's parts: shades of its olive.
        Figure::AcceptWait => "#8c8c1c",
        Figure::LoopWait => "#dbdb5c",
        Figure::ServerTxWait => "#e7969c",
    }
}

/// Escapes text for HTML element content and attribute values: `&`, `<`,
/// `>` and `"`.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The host figures' curves are hidden until their checkbox (before the
/// plot, in the same `div.plot`) is ticked: plain HTML and CSS, no script.
fn host_toggle_css() -> String {
    let mut css =
        String::from(".host-curve{display:none}.plot label{margin-right:12px;font-size:12px}");
    for f in Figure::ALL.into_iter().filter(|f| f.is_host()) {
        let n = f.name();
        let _ = write!(
            css,
            ".plot input.h-{n}:checked~svg .c-{n}{{display:inline}}"
        );
    }
    css
}

/// The checkboxes that add the host figures' curves to a plot (none when
/// the run has no host figures); they precede the plot in its `div.plot`.
fn host_toggles(s: &mut String, id: &str, host: &[Figure]) {
    if host.is_empty() {
        return;
    }
    let _ = write!(
        s,
        "<div class=\"host-toggles\">add the hosts' figures (they overlap the stages, docs/host.md): "
    );
    // Inputs are siblings of the svg (the CSS rule needs it); each label
    // names its figure in the curve's colour.
    let _ = writeln!(s, "</div>");
    for f in host {
        let n = f.name();
        let _ = writeln!(
            s,
            "<input type=\"checkbox\" id=\"{id}-{n}\" class=\"h-{n}\"><label for=\"{id}-{n}\"><span style=\"color:{}\">■</span> {n}</label>",
            color(*f)
        );
    }
}

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

/// The whole HTML document.
pub fn html(a: &Analysis<'_>) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>stagetrace report</title>\n<style>\
body{{font-family:sans-serif;margin:24px;color:#222;max-width:1250px}}\
h1{{font-size:22px}}h2{{font-size:18px;margin-top:32px}}h3{{font-size:15px}}\
pre{{background:#f6f6f6;padding:8px;overflow-x:auto;font-size:12px}}\
li{{margin:6px 0}}code{{background:#eee;padding:0 3px}}svg{{background:#fff;border:1px solid #ddd}}\
table.robots{{border-collapse:collapse;font-size:13px}}table.robots td,table.robots th{{border:1px solid #ddd;padding:3px 8px;text-align:right}}\
table.robots td.differs{{background:#fdd;font-weight:bold}}tr.differs td:first-child{{background:#fdd;font-weight:bold}}\
{}</style></head><body>\n<h1>stagetrace report</h1>\n",
        host_toggle_css()
    );
    let _ = writeln!(
        s,
        "<p>{} record(s) from {}</p>",
        a.report.inputs.records,
        escape(&a.report.inputs.files.join(", "))
    );
    let _ = writeln!(s, "<h2>Verdict</h2>\n<ul id=\"verdicts\">");
    for v in &a.report.verdicts {
        let _ = writeln!(
            s,
            "<li><code>{}</code> [{}] {}</li>",
            escape(v.code),
            escape(&v.kind),
            escape(&v.text)
        );
    }
    let _ = writeln!(s, "</ul>");
    let order: Vec<String> = a.report.robots.iter().map(|r| r.name.clone()).collect();
    let mut n = 0usize;
    for (g, r) in a.groups.iter().zip(&a.report.groups) {
        if g.kind == ALL_KINDS && a.groups.len() > 1 {
            continue;
        }
        let suffix = if n == 0 {
            String::new()
        } else {
            format!("-{n}")
        };
        n += 1;
        let base = a.baseline_groups.iter().find(|b| b.kind == g.kind);
        let _ = writeln!(s, "<h2>kind \"{}\"</h2>", escape(&g.kind));
        let _ = writeln!(
            s,
            "<h3>Percentile spectrum (HDR){}</h3>",
            if base.is_some() {
                " — dashed: baseline"
            } else {
                ""
            }
        );
        hdr_plot(&mut s, g, base, &suffix);
        let _ = writeln!(
            s,
            "<h3>Per-call stages (stacked, time order; each column shows its slowest call; ▼ outlier round)</h3>"
        );
        timeline::plot(&mut s, a, g, r, &suffix);
        let _ = writeln!(s, "<h3>CDF</h3>");
        cdf_plot(&mut s, g, base, &suffix);
        hops::table(&mut s, r, &suffix);
        robots::table(&mut s, r, &order, &suffix);
    }
    let _ = writeln!(
        s,
        "<h2>Tables</h2>\n<pre>{}</pre>",
        escape(&render::text(&a.report))
    );
    let _ = writeln!(s, "</body></html>");
    s
}

fn svg_open(s: &mut String, id: &str, title: &str) {
    let _ = writeln!(
        s,
        "<svg id=\"{id}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" font-family=\"sans-serif\" font-size=\"12\"><title>{}</title>",
        escape(title)
    );
}

fn legend(s: &mut String, items: &[Figure]) {
    for (i, m) in items.iter().enumerate() {
        let y = MT + 10.0 + 18.0 * i as f64;
        let x = W - MR + 15.0;
        let _ = writeln!(
            s,
            "<rect x=\"{x}\" y=\"{:.1}\" width=\"14\" height=\"10\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            y - 9.0,
            color(*m),
            x + 20.0,
            y,
            m.name()
        );
    }
}

/// The plot's two axis lines: the y axis on the left, the x axis at the bottom.
fn axes(s: &mut String) {
    let _ = writeln!(
            s,
            "<line x1=\"{ML}\" x2=\"{ML}\" y1=\"{MT}\" y2=\"{:.1}\" stroke=\"#333\"/><line x1=\"{ML}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#333\"/>",
            H - MB,
            W - MR,
            H - MB,
            H - MB
        );
}

/// Y axis with ~6 nice ticks from 0 to `max`; returns the rounded max.
fn y_axis(s: &mut String, max: f64, label: &str) -> f64 {
    let (top, ticks) = axis::linear(max);
    for v in ticks {
        let y = MT + (H - MT - MB) * (1.0 - v / top);
        let _ = writeln!(
            s,
            "<line x1=\"{ML}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#eee\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            W - MR,
            ML - 6.0,
            y + 4.0,
            trim_num(v)
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"14\" y=\"{:.1}\" transform=\"rotate(-90 14 {:.1})\" text-anchor=\"middle\">{}</text>",
        (MT + H - MB) / 2.0,
        (MT + H - MB) / 2.0,
        label
    );
    axes(s);
    top
}

/// A curve; `class` (empty: none) lets the page's CSS hide or show it.
fn polyline_in(
    s: &mut String,
    pts: &[(f64, f64)],
    col: &str,
    dashed: bool,
    title: &str,
    class: &str,
) {
    if pts.is_empty() {
        return;
    }
    let mut d = String::with_capacity(pts.len() * 14);
    for (x, y) in pts {
        let _ = write!(d, "{x:.1},{y:.1} ");
    }
    let dash = if dashed {
        " stroke-dasharray=\"6 4\" opacity=\"0.7\""
    } else {
        ""
    };
    let class = if class.is_empty() {
        String::new()
    } else {
        format!(" class=\"{class}\"")
    };
    let _ = writeln!(
        s,
        "<polyline{class} fill=\"none\" stroke=\"{col}\" stroke-width=\"1.8\"{dash} points=\"{d}\"><title>{}</title></polyline>",
        escape(title)
    );
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

/// Opens a plot's `div.plot`: the host figures' checkboxes, then the svg.
fn plot_open(s: &mut String, id: &str, title: &str, ms: &[Figure]) {
    let _ = writeln!(s, "<div class=\"plot\">");
    // The robot's host figures, then the server's (the host table's order).
    let host: Vec<Figure> = figures::host_rows()
        .into_iter()
        .filter(|f| ms.contains(f))
        .collect();
    host_toggles(s, id, &host);
    svg_open(s, id, title);
}

fn hdr_plot(s: &mut String, g: &GroupData, base: Option<&GroupData>, suffix: &str) {
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

fn cdf_plot(s: &mut String, g: &GroupData, base: Option<&GroupData>, suffix: &str) {
    let ms = curves(g);
    let (mut lo, mut hi) = (f64::INFINITY, 0f64);
    for m in &ms {
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
    plot_open(
        s,
        &format!("cdf-plot{suffix}"),
        "cumulative distribution",
        &ms,
    );
    // Y axis: fraction of calls.
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
    let tx = |v: f64| -> f64 {
        if log {
            (v.max(lo).ln() - lo.ln()) / (hi.ln() - lo.ln())
        } else {
            (v - lo) / (hi - lo)
        }
    };
    let px = |v: f64| ML + (W - ML - MR) * tx(v).clamp(0.0, 1.0);
    let py = |f: f64| MT + (H - MT - MB) * (1.0 - f);
    // X ticks.
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::analysis::{self, AnalyzeOptions};
    use crate::load::{Dataset, LoadOptions};
    use crate::watchdog::within;

    /// Odd values a column could hold were the loader to let them through.
    const ODD: [f32; 6] = [
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MAX,
        -f32::MAX,
        1e30,
    ];

    #[test]
    fn y_axis_draws_few_ticks_on_any_range() {
        for max in [
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            1e300,
            f64::MAX,
            0.0,
        ] {
            let s = within(10, &format!("y axis to {max}"), move || {
                let mut s = String::new();
                let top = y_axis(&mut s, max, "ms");
                (s, top)
            });
            let (s, top) = s;
            assert!(top.is_finite(), "{max}: top {top}");
            // One grid line per tick, plus the two axis lines.
            let lines = s.matches("<line").count();
            assert!(
                (3..=axis::MAX_TICKS + 2).contains(&lines),
                "{max}: {lines} lines"
            );
        }
    }

    /// A whole report over columns holding values the loader refuses:
    /// every plot ends, and the page stays small.
    #[test]
    fn a_report_over_odd_columns_ends() {
        let lines: String = (0..100)
            .map(|i| {
                format!(
                    "{{\"seq\":{i},\"ts_unix_ms\":{},\"kind\":\"call\",\"infer_ms\":{},\"e2e_ms\":{}}}\n",
                    1_764_000_000_000.0 + 20.0 * f64::from(i),
                    30.0 + f64::from(i % 7),
                    35.0 + f64::from(i % 11)
                )
            })
            .collect();
        for odd in ODD {
            let mut ds =
                Dataset::load_reader(lines.as_bytes(), Path::new("odd"), LoadOptions::default())
                    .unwrap();
            for (f, call) in [(Figure::E2e, 3), (Figure::Infer, 5), (Figure::E2e, 60)] {
                ds.columns[f.index()][call] = odd;
            }
            let page = within(30, &format!("report with {odd}"), move || {
                let a = analysis::analyze(&ds, None, &AnalyzeOptions::default());
                html(&a)
            });
            assert!(page.len() < 4 << 20, "{odd}: {} bytes", page.len());
            assert!(page.ends_with("</body></html>\n"), "{odd}");
        }
    }

    /// The percentile plot shows the stages; each host figure's curve is
    /// there but hidden until its checkbox is ticked (CSS, no script).
    #[test]
    fn host_figures_are_added_by_checkbox() {
        let lines: String = (0..100)
            .map(|i| {
                format!(
                    "{{\"seq\":{i},\"ts_unix_ms\":{},\"kind\":\"call\",\"uplink_ms\":1,\"queue_ms\":0.3,\"infer_ms\":25,\"downlink_ms\":1,\"e2e_ms\":{},\"run_wait_ms\":0.2,\"server_cpu_stall_ms\":0.4}}\n",
                    1_764_000_000_000.0 + 20.0 * f64::from(i),
                    28.0 + f64::from(i % 3)
                )
            })
            .collect();
        let ds =
            Dataset::load_reader(lines.as_bytes(), Path::new("h"), LoadOptions::default()).unwrap();
        let page = html(&analysis::analyze(&ds, None, &AnalyzeOptions::default()));
        assert!(!page.contains("<script"), "no script");
        let from = page.find("<div class=\"plot\">").unwrap();
        let plot = &page[from..from + page[from..].find("</svg>").unwrap()];
        for f in [Figure::RunWait, Figure::ServerCpuStall] {
            let n = f.name();
            // A checkbox before the plot, its label naming the figure.
            let input = format!("<input type=\"checkbox\" id=\"hdr-plot-{n}\" class=\"h-{n}\">");
            assert!(plot.contains(&input), "{n}: {plot}");
            assert!(plot.find(&input) < plot.find("<svg"), "{n}");
            // Its curve, hidden by default, shown by the checked box.
            assert!(
                plot.contains(&format!("<polyline class=\"host-curve c-{n}\"")),
                "{n}"
            );
            assert!(page.contains(&format!(
                ".plot input.h-{n}:checked~svg .c-{n}{{display:inline}}"
            )));
            // Not in the plot's legend.
            assert!(!plot.contains(&format!(">{n}</text>")), "{n}");
        }
        assert!(page.contains(".host-curve{display:none}"));
        // The stages' curves are shown as they are.
        for f in [Figure::Uplink, Figure::Infer] {
            assert!(plot.contains(&format!(">{}</text>", f.name())), "{f}");
        }
        assert!(!plot.contains("class=\"host-curve c-infer\""));
    }

    /// Infer's and queue's parts are curves of their own, never stacked on
    /// infer in the per-call timeline: they are parts, not extra stages.
    #[test]
    fn infer_s_parts_are_drawn_but_not_stacked() {
        let lines: String = (0..100)
            .map(|i| {
                format!(
                    "{{\"seq\":{i},\"ts_unix_ms\":{},\"kind\":\"call\",\"uplink_ms\":1,\"queue_ms\":0.3,\"accept_wait_ms\":0.1,\"infer_ms\":25,\"pre_ms\":3,\"model_ms\":20,\"device_ms\":18,\"post_ms\":2,\"downlink_ms\":1,\"e2e_ms\":{}}}\n",
                    1_764_000_000_000.0 + 20.0 * f64::from(i),
                    28.0 + f64::from(i % 3)
                )
            })
            .collect();
        let ds =
            Dataset::load_reader(lines.as_bytes(), Path::new("p"), LoadOptions::default()).unwrap();
        let a = analysis::analyze(&ds, None, &AnalyzeOptions::default());
        let page = html(&a);
        let svg = |id: &str| {
            let from = page.find(&format!("<svg id=\"{id}\"")).unwrap();
            let to = from + page[from..].find("</svg>").unwrap();
            page[from..to].to_string()
        };
        let timeline = svg("timeline-plot");
        let parts = [
            Figure::Pre,
            Figure::Model,
            Figure::Post,
            Figure::Device,
            Figure::AcceptWait,
        ];
        for f in parts {
            assert!(!timeline.contains(color(f)), "{f} stacked");
            assert!(
                !timeline.contains(&format!(">{}</text>", f.name())),
                "{f} in the legend"
            );
        }
        for f in [
            Figure::Uplink,
            Figure::Queue,
            Figure::Infer,
            Figure::Downlink,
        ] {
            assert!(timeline.contains(&format!(">{}</text>", f.name())), "{f}");
        }
        // The stack is the stages: the axis tops out at the tick above the
        // e2e (30 ms, with its margin: 40), not above the stages plus
        // infer's parts again (55 ms: 60).
        let top: f64 = timeline
            .split("text-anchor=\"end\">")
            .skip(1)
            .filter_map(|t| t.split('<').next()?.parse().ok())
            .fold(0.0, f64::max);
        assert!(top <= 40.0, "y axis to {top}");
        // The percentile plot draws infer and each of its parts.
        let hdr = svg("hdr-plot");
        for f in [Figure::Infer, Figure::Queue].into_iter().chain(parts) {
            assert!(
                hdr.contains(&format!("<title>{}</title>", f.name())),
                "{f} curve"
            );
        }
    }
}
