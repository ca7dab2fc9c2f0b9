//! The HTML section of an experiment: the stage timeline (windowed p90 per
//! stage, phases shaded) with the resource tracks on the same time axis
//! beneath it, and per-level percentile lines (p50 solid, p99 dashed).
//! Self-contained inline SVG, no scripts.

use std::fmt::Write as _;

use stagetrace_analyze::html::escape;
use stagetrace_schema::Figure;

use crate::figures;
use crate::report::{ExperimentReport, Timeline};

/// Line colours, one per drawn figure in order (Tableau 10); a figure past
/// the tenth takes the colours again from the start.
const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

/// The figures drawn, with their colours: the ones that make up the call
/// (every stage, and the gap: what no stage explains).
fn drawn() -> impl Iterator<Item = (Figure, &'static str)> {
    figures::finest()
        .enumerate()
        .map(|(k, f)| (f, PALETTE[k % PALETTE.len()]))
}

/// A whole page holding [`section`].
pub fn page(r: &ExperimentReport) -> String {
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>stagetrace experiment: {}</title>\
         <style>body{{font:14px system-ui,sans-serif;margin:24px;max-width:1100px}}\
         table{{border-collapse:collapse}}td,th{{padding:2px 8px;text-align:right}}\
         th:first-child,td:first-child{{text-align:left}}.moved{{color:#c00;font-weight:600}}\
         svg text{{font:11px system-ui,sans-serif}}</style></head><body>{}</body></html>",
        escape(&r.name),
        section(r)
    )
}

/// The experiment as one HTML `<section>` (for embedding in a report).
pub fn section(r: &ExperimentReport) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "<section class=\"stagetrace-experiment\"><h2>Experiment: {} (factor {})</h2>",
        escape(&r.name),
        r.factor
    );
    let _ = write!(
        o,
        "<p><b>Verdict:</b> {}</p><p><b>Next step:</b> {}</p>",
        escape(&r.verdict.summary),
        escape(&r.verdict.next_step)
    );
    if r.interrupted {
        let _ = write!(
            o,
            "<p><b>Stopped early:</b> {}</p>",
            escape(r.stopped_because.as_deref().unwrap_or(""))
        );
    }
    o.push_str(&timeline_svg(r));
    let _ = write!(o, "<p>{}</p>", escape(&r.gpu));
    o.push_str(&levels_svg(r));
    o.push_str(&table(r));
    o.push_str("</section>");
    o
}

const W: f64 = 1000.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 130.0;

fn x_of(t: f64, t_max: f64) -> f64 {
    LEFT + (W - LEFT - RIGHT) * (t / t_max.max(1e-9)).clamp(0.0, 1.0)
}

fn polyline(pts: &[(f64, f64)], color: &str, dash: bool) -> String {
    if pts.len() < 2 {
        return String::new();
    }
    let mut d = String::new();
    for (x, y) in pts {
        let _ = write!(d, "{x:.1},{y:.1} ");
    }
    format!(
        "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\"{} points=\"{d}\"/>",
        if dash {
            " stroke-dasharray=\"5 3\""
        } else {
            ""
        }
    )
}

/// The timeline's geometry: its time span and value scale, the stage plot's
/// box, and the resource tracks beneath it.
struct TimelineFrame {
    t_max: f64,
    y_max: f64,
    top: f64,
    h: f64,
    track_h: f64,
    height: f64,
}

impl TimelineFrame {
    /// The frame for `tl` with `tracks` resource tracks.
    fn of(tl: &Timeline, tracks: usize) -> TimelineFrame {
        let t_max = tl
            .windows
            .iter()
            .map(|w| w.0)
            .chain(tl.resources.iter().map(|s| s.0))
            .fold(1.0f64, f64::max);
        let (top, h) = (20.0, 240.0);
        let track_h = 50.0;
        let height = top + h + 30.0 + tracks as f64 * (track_h + 10.0) + 20.0;
        let y_max = tl
            .windows
            .iter()
            .flat_map(|w| w.1.iter().copied())
            .filter(|v| v.is_finite())
            .fold(1.0f64, f64::max)
            * 1.1;
        TimelineFrame {
            t_max,
            y_max,
            top,
            h,
            track_h,
            height,
        }
    }
}

/// The stage timeline (windowed p90 per stage, phases shaded) with the
/// resource tracks beneath it on the same time axis.
fn timeline_svg(r: &ExperimentReport) -> String {
    let tl = &r.timeline;
    let all_tracks = [
        "CPU %",
        "CPU pressure %",
        "run-queue wait %",
        "target CPU %",
        "GPU %",
    ];
    // The GPU track only where GPUs were sampled.
    let has_gpu = tl.resources.iter().any(|s| s.1[4].is_finite());
    let tracks = &all_tracks[..if has_gpu { 5 } else { 4 }];
    let fr = TimelineFrame::of(tl, tracks.len());
    let mut o = format!(
        "<h3>Stage timeline (windowed p90) and resources</h3><svg viewBox=\"0 0 {W} {:.0}\" width=\"100%\" role=\"img\">",
        fr.height
    );
    phase_bands(&mut o, r, &fr);
    stage_lines(&mut o, tl, &fr);
    resource_tracks(&mut o, tl, tracks, &fr);
    let _ = write!(
        o,
        "<text x=\"{:.0}\" y=\"{:.0}\">{:.1} s</text></svg>",
        W - RIGHT - 30.0,
        fr.height - 2.0,
        fr.t_max
    );
    o
}

/// Each phase but the warm-up shaded and labelled.
fn phase_bands(o: &mut String, r: &ExperimentReport, fr: &TimelineFrame) {
    let (t0, t_max, top) = (r.timeline.t0_unix_ms, fr.t_max, fr.top);
    for (i, p) in r.phases.iter().filter(|p| p.phase != "warmup").enumerate() {
        let a = (p.start_unix_ms - t0) / 1e3;
        let b = if p.end_unix_ms.is_finite() {
            (p.end_unix_ms - t0) / 1e3
        } else {
            t_max
        };
        let (xa, xb) = (x_of(a, t_max), x_of(b, t_max));
        let _ = write!(
            o,
            "<rect x=\"{xa:.1}\" y=\"{top}\" width=\"{:.1}\" height=\"{:.0}\" fill=\"{}\"/>\
             <text x=\"{:.1}\" y=\"{:.0}\">{}</text>",
            (xb - xa).max(0.0),
            fr.height - top - 10.0,
            if i % 2 == 0 { "#f4f4f4" } else { "#e9eef5" },
            xa + 3.0,
            top - 6.0,
            escape(if p.phase == "baseline" {
                "baseline"
            } else {
                &p.label
            })
        );
    }
}

/// The stage plot's axis and one line per drawn figure, labelled at the
/// right.
fn stage_lines(o: &mut String, tl: &Timeline, fr: &TimelineFrame) {
    let (t_max, y_max, top, h) = (fr.t_max, fr.y_max, fr.top, fr.h);
    let _ = write!(
        o,
        "<line x1=\"{LEFT}\" y1=\"{:.0}\" x2=\"{:.0}\" y2=\"{:.0}\" stroke=\"#888\"/>\
         <text x=\"4\" y=\"{:.0}\">{y_max:.1} ms</text><text x=\"4\" y=\"{:.0}\">0</text>",
        top + h,
        W - RIGHT,
        top + h,
        top + 10.0,
        top + h
    );
    for (k, (f, color)) in drawn().enumerate() {
        let i = f.index();
        let pts: Vec<(f64, f64)> = tl
            .windows
            .iter()
            .filter(|w| w.1[i].is_finite())
            .map(|w| (x_of(w.0, t_max), top + h - h * w.1[i] / y_max))
            .collect();
        if pts.is_empty() {
            continue;
        }
        o.push_str(&polyline(&pts, color, false));
        let _ = write!(
            o,
            "<text x=\"{:.0}\" y=\"{:.0}\" fill=\"{color}\">{f}</text>",
            W - RIGHT + 8.0,
            top + 14.0 * (k as f64 + 1.0),
        );
    }
}

/// One track per resource beneath the stage plot, 0 to 100, labelled at
/// the right.
fn resource_tracks(o: &mut String, tl: &Timeline, tracks: &[&str], fr: &TimelineFrame) {
    let (t_max, top, h, track_h) = (fr.t_max, fr.top, fr.h, fr.track_h);
    for (j, label) in tracks.iter().enumerate() {
        let y0 = top + h + 30.0 + j as f64 * (track_h + 10.0);
        let _ = write!(
            o,
            "<line x1=\"{LEFT}\" y1=\"{:.0}\" x2=\"{:.0}\" y2=\"{:.0}\" stroke=\"#bbb\"/>\
             <text x=\"{:.0}\" y=\"{:.0}\">{label}</text><text x=\"4\" y=\"{:.0}\">100</text>",
            y0 + track_h,
            W - RIGHT,
            y0 + track_h,
            W - RIGHT + 8.0,
            y0 + track_h / 2.0,
            y0 + 10.0
        );
        let pts: Vec<(f64, f64)> = tl
            .resources
            .iter()
            .filter(|s| s.1[j].is_finite())
            .map(|s| {
                (
                    x_of(s.0, t_max),
                    y0 + track_h - track_h * s.1[j].clamp(0.0, 100.0) / 100.0,
                )
            })
            .collect();
        o.push_str(&polyline(&pts, "#555", false));
    }
}

fn levels_svg(r: &ExperimentReport) -> String {
    // Columns: baseline, then each level.
    let n = r.levels.len() + 1;
    let value = |f: Figure, col: usize, p99: bool| -> Option<f64> {
        let name = f.name();
        if col == 0 {
            r.baseline.get(name).map(|b| if p99 { b[3] } else { b[1] })
        } else {
            r.levels[col - 1]
                .components
                .get(name)
                .map(|c| if p99 { c.p99 } else { c.p50 })
        }
    };
    let y_max = drawn()
        .flat_map(|(f, _)| (0..n).filter_map(move |c| value(f, c, true)))
        .filter(|v| v.is_finite())
        .fold(1.0f64, f64::max)
        * 1.1;
    let (top, h) = (20.0, 220.0);
    let col_x = |c: usize| LEFT + (W - LEFT - RIGHT) * (c as f64 + 0.5) / n as f64;
    let mut o = format!(
        "<h3>Per-level percentiles (p50 solid, p99 dashed)</h3><svg viewBox=\"0 0 {W} {:.0}\" width=\"100%\" role=\"img\">\
         <line x1=\"{LEFT}\" y1=\"{:.0}\" x2=\"{:.0}\" y2=\"{:.0}\" stroke=\"#888\"/>\
         <text x=\"4\" y=\"{:.0}\">{y_max:.1} ms</text><text x=\"4\" y=\"{:.0}\">0</text>",
        top + h + 30.0,
        top + h,
        W - RIGHT,
        top + h,
        top + 10.0,
        top + h
    );
    for c in 0..n {
        let label = if c == 0 {
            "baseline".to_owned()
        } else {
            format!("L{}", r.levels[c - 1].level)
        };
        let _ = write!(
            o,
            "<text x=\"{:.0}\" y=\"{:.0}\" text-anchor=\"middle\">{label}</text>",
            col_x(c),
            top + h + 16.0
        );
    }
    for (k, (f, color)) in drawn().enumerate() {
        for p99 in [false, true] {
            let pts: Vec<(f64, f64)> = (0..n)
                .filter_map(|c| value(f, c, p99).map(|v| (c, v)))
                .filter(|(_, v)| v.is_finite())
                .map(|(c, v)| (col_x(c), top + h - h * v / y_max))
                .collect();
            o.push_str(&polyline(&pts, color, p99));
        }
        let _ = write!(
            o,
            "<text x=\"{:.0}\" y=\"{:.0}\" fill=\"{color}\">{f}</text>",
            W - RIGHT + 8.0,
            top + 14.0 * (k as f64 + 1.0),
        );
    }
    o.push_str("</svg>");
    o
}

fn table(r: &ExperimentReport) -> String {
    let mut o = String::from(
        "<h3>Stages against the baseline</h3><table><tr><th>stage</th><th>baseline p50 / p99</th>",
    );
    for l in &r.levels {
        let _ = write!(o, "<th>L{} {}</th>", l.level, escape(&l.label));
    }
    o.push_str("</tr>");
    for name in figures::compared().map(Figure::name) {
        let Some(b) = r.baseline.get(name) else {
            continue;
        };
        let _ = write!(o, "<tr><td>{name}</td><td>{:.2} / {:.2}</td>", b[1], b[3]);
        for l in &r.levels {
            match l.components.get(name) {
                Some(c) => {
                    let _ = write!(
                        o,
                        "<td{}>{:.2} / {:.2}{}</td>",
                        if c.moved { " class=\"moved\"" } else { "" },
                        c.p50,
                        c.p99,
                        c.p50_ratio
                            .map_or(String::new(), |q| format!(" (×{:.2})", q.ratio))
                    );
                }
                None => o.push_str("<td>–</td>"),
            }
        }
        o.push_str("</tr>");
    }
    o.push_str("</table>");
    o
}
