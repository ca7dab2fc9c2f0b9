//! What every plot of the page shares: its frame (an SVG of fixed size
//! with margins for the axes and the legend), its axes, its legend and
//! its curves.

use std::fmt::Write as _;

use stagetrace_schema::Figure;

use super::escape;
use super::palette::color;
use crate::axis::{self, trim_num};

/// The plot's width.
pub(super) const W: f64 = 1200.0;
/// The plot's height.
pub(super) const H: f64 = 420.0;
/// The margin left of the plot area (the y axis's labels).
pub(super) const ML: f64 = 70.0;
/// The margin right of it (the legend).
pub(super) const MR: f64 = 150.0;
/// The margin above it.
pub(super) const MT: f64 = 30.0;
/// The margin below it (the x axis's labels).
pub(super) const MB: f64 = 50.0;

/// Opens a plot's svg element, titled.
pub(super) fn svg_open(s: &mut String, id: &str, title: &str) {
    let _ = writeln!(
        s,
        "<svg id=\"{id}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" font-family=\"sans-serif\" font-size=\"12\"><title>{}</title>",
        escape(title)
    );
}

/// The legend right of the plot: a swatch of each figure's colour, its name.
pub(super) fn legend(s: &mut String, items: &[Figure]) {
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
pub(super) fn axes(s: &mut String) {
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
pub(super) fn y_axis(s: &mut String, max: f64, label: &str) -> f64 {
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
pub(super) fn polyline_in(
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
