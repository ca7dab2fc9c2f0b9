//! The terminal table of an experiment.

use std::fmt::Write as _;

use stagetrace_schema::Figure;

use crate::figures;
use crate::report::ExperimentReport;
use crate::verdict::{ActionQueuePhase, LevelResult, ResourceSummary};

/// The report as a terminal table and verdict.
pub fn text(r: &ExperimentReport) -> String {
    let mut o = String::new();
    title(&mut o, r);
    stage_table(&mut o, r);
    action_queue_table(&mut o, r);
    let _ = writeln!(o);
    let _ = writeln!(o, "levels:");
    for l in &r.levels {
        level_resources(&mut o, l, r.baseline_resources.as_ref());
    }
    let _ = writeln!(o);
    closing(&mut o, r);
    o
}

/// The title line, and why the run stopped early.
fn title(o: &mut String, r: &ExperimentReport) {
    let _ = writeln!(
        o,
        "stagetrace experiment: {} (factor {}){}",
        r.name,
        r.factor,
        if r.interrupted {
            " — stopped early"
        } else {
            ""
        }
    );
    if let Some(why) = &r.stopped_because {
        let _ = writeln!(o, "stopped: {why}; the levels completed are compared");
    }
    let _ = writeln!(o);
}

/// Each stage's p50 / p99 at baseline and at every level, the moved ones
/// starred, and what "moved" means.
fn stage_table(o: &mut String, r: &ExperimentReport) {
    // Header: one column per phase (baseline, then levels): p50 / p99.
    let _ = write!(o, "{:<10} {:>17}", "stage", "baseline p50/p99");
    for l in &r.levels {
        let _ = write!(o, " {:>17}", format!("L{} p50/p99", l.level));
    }
    let _ = writeln!(o);
    for name in figures::compared().map(Figure::name) {
        let Some(b) = r.baseline.get(name) else {
            continue;
        };
        let _ = write!(o, "{:<10} {:>17}", name, format!("{:.2}/{:.2}", b[1], b[3]));
        for l in &r.levels {
            let cell = match l.components.get(name) {
                Some(c) => {
                    let ratio = c
                        .p50_ratio
                        .map_or(String::new(), |q| format!(" ×{:.1}", q.ratio));
                    format!(
                        "{}{:.2}/{:.2}{ratio}",
                        if c.moved { "*" } else { "" },
                        c.p50,
                        c.p99
                    )
                }
                None => "–".into(),
            };
            let _ = write!(o, " {cell:>17}");
        }
        let _ = writeln!(o);
    }
    let _ = writeln!(
        o,
        "(* moved beyond noise: p50 ≥ {:.2} ms with its 95 % CI above 1, or p99 ≥ {:.2} ms at the low end of its 95 % CI)",
        r.thresholds.min_p50_ms, r.thresholds.min_p99_ms
    );
}

/// The robot's action queue at baseline and at every level (LeRobot's
/// async pair): the margin's low end, dry ticks, actions run per second;
/// a starred cell is the queue's move (the margin fell, it ran dry, the
/// loop fell behind).
fn action_queue_table(o: &mut String, r: &ExperimentReport) {
    let Some(aq) = &r.verdict.action_queue else {
        return;
    };
    let cells = |p: &ActionQueuePhase| {
        [
            format!("{:.1} ms", p.margin_p10),
            format!("{:.1} %", 100.0 * p.dry_tick_share),
            p.actions_per_s.map_or("–".into(), |v| format!("{v:.1}")),
        ]
    };
    let base = cells(&aq.baseline);
    let rows = ["margin p10", "dry ticks", "actions/s"];
    let _ = writeln!(
        o,
        "\naction queue (its margin falling, dry ticks or a loop behind its rate is its move):"
    );
    for (i, name) in rows.iter().enumerate() {
        let _ = write!(o, "{name:<10} {:>17}", base[i]);
        for l in &r.levels {
            let cell = l.action_queue.as_ref().map_or("–".to_owned(), |q| {
                let moved = [q.margin_fell, q.ran_dry, q.fell_behind][i];
                format!("{}{}", if moved { "*" } else { "" }, cells(&q.phase)[i])
            });
            let _ = write!(o, " {cell:>17}");
        }
        let _ = writeln!(o);
    }
}

/// One level's resources: CPU, pressure and run-queue wait, then the clock,
/// loss and GPU lines when there is something to say.
fn level_resources(o: &mut String, l: &LevelResult, baseline: Option<&ResourceSummary>) {
    let res = &l.resources;
    let f = |v: Option<f64>| v.map_or("–".to_owned(), |v| format!("{v:.0}"));
    let _ = writeln!(
        o,
        "  L{} {}: CPU {} % (max core {} %), pressure {} %, run-queue wait {} ms/s — {}",
        l.level,
        l.label,
        f(res.cpu_total_pct),
        f(res.cpu_max_core_pct),
        f(res.psi_cpu_some_pct),
        res.run_delay_ms_per_s
            .map_or("–".into(), |v| format!("{v:.1}")),
        res.state
    );
    if let Some(m) = res.cpu_mhz {
        let base = baseline.and_then(|b| b.cpu_mhz);
        let _ = writeln!(
            o,
            "     CPU clock {m:.0} MHz{}{}",
            base.map_or(String::new(), |b| format!(" (baseline {b:.0} MHz)")),
            res.cpu_throttles
                .filter(|n| *n > 0)
                .map_or(String::new(), |n| format!(", {n} thermal-throttle events"))
        );
    }
    let l = &res.loss;
    let loss: Vec<String> = [
        (l.if_drops, "interface drops"),
        (l.if_errors, "interface errors"),
        (l.udp_in_errors, "UDP receive errors"),
        (l.udp_sndbuf_errors, "UDP sends refused"),
    ]
    .iter()
    .filter_map(|(v, what)| v.filter(|n| *n > 0).map(|n| format!("{n} {what}")))
    .collect();
    if !loss.is_empty() {
        let _ = writeln!(o, "     loss: {}", loss.join(", "));
    }
    if let Some(g) = res.gpu_util_pct {
        let _ = writeln!(o, "     GPU {g:.0} % (busiest GPU)");
    }
    if !res.gpu_throttle.is_empty() {
        let _ = writeln!(
            o,
            "     GPU clocks throttled: {}",
            res.gpu_throttle.join(", ")
        );
    }
}

/// The verdict and next step, the sampler's cost, what was restored, the
/// GPU note and where the files are.
fn closing(o: &mut String, r: &ExperimentReport) {
    let v = &r.verdict;
    let _ = writeln!(o, "verdict: {}", v.summary);
    let _ = writeln!(o, "next step: {}", v.next_step);
    let _ = writeln!(
        o,
        "\nsampler: {} samples, {:.1} ms CPU ({:.2} % of a core); restored: {}",
        r.sampler.samples,
        r.sampler.cpu_ms,
        r.sampler.cpu_pct_of_core,
        if r.restored.is_empty() {
            "nothing to restore".to_owned()
        } else {
            r.restored.join(", ")
        }
    );
    let _ = writeln!(o, "{}", r.gpu);
    let _ = writeln!(
        o,
        "files: {}/records-experiment.jsonl, resources.jsonl, experiment.json, experiment.html",
        r.out
    );
}
