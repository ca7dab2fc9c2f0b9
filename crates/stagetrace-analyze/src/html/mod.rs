//! The self-contained HTML report: inline SVG only (no script, no external
//! file): an HDR percentile plot on a log 1/(1−q) axis, a per-call stacked
//! stage timeline with outlier rounds marked, and a CDF, per kind.
//!
//! This file writes the page; `curves` draws the percentile and CDF plots,
//! `timeline` the timeline, `svg` and `palette` what every plot shares (the
//! frame, axes, legend and each figure's colour), `host_toggles` the
//! checkboxes that add the hosts' curves; `hops` and `robots` the tables
//! of the gateways' hops and of the fleet's robots.

mod curves;
mod hop_table;
mod host_toggles;
mod palette;
mod robots;
mod svg;
mod timeline;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;

use std::fmt::Write as _;

// `timeline` draws in the same frame and colours as the other plots.
use palette::color;
use svg::{legend, svg_open, y_axis, H, MB, ML, MR, MT, W};

use crate::analysis::{Analysis, GroupData, GroupReport, ALL_KINDS};
use crate::render;

/// Escapes text for HTML element content and attribute values: `&`, `<`,
/// `>` and `"`.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The whole HTML document.
pub fn html(a: &Analysis<'_>) -> String {
    let mut s = String::new();
    head(&mut s, a);
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
        kind_section(&mut s, a, g, r, &order, &suffix);
    }
    let _ = writeln!(
        s,
        "<h2>Tables</h2>\n<pre>{}</pre>",
        escape(&render::text(&a.report))
    );
    let _ = writeln!(s, "</body></html>");
    s
}

/// The page's head and style, its title, the inputs and the verdicts.
fn head(s: &mut String, a: &Analysis<'_>) {
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
        host_toggles::css()
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
}

/// One kind: its percentile plot, timeline and CDF, its hops and robots.
fn kind_section(
    s: &mut String,
    a: &Analysis<'_>,
    g: &GroupData,
    r: &GroupReport,
    order: &[String],
    suffix: &str,
) {
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
    curves::hdr_plot(s, g, base, suffix);
    let _ = writeln!(
        s,
        "<h3>Per-call stages (stacked, time order; each column shows its slowest call; ▼ outlier round)</h3>"
    );
    timeline::plot(s, a, g, r, suffix);
    let _ = writeln!(s, "<h3>CDF</h3>");
    curves::cdf_plot(s, g, base, suffix);
    hop_table::table(s, r, suffix);
    robots::table(s, r, order, suffix);
}
