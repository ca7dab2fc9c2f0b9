//! The HTML page on odd columns, host figures and inference's parts.

use std::path::Path;

use stagetrace_schema::Figure;

use super::html;
use super::palette::color;
use super::svg::y_axis;
use crate::analysis::{self, AnalyzeOptions};
use crate::axis;
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
