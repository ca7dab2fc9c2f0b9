//! `compare` in units that mean something: a signed
//! figure changes by ms, not by a percentage of a value that crosses zero,
//! and a change below the report's floor is never significant.

#![allow(clippy::unwrap_used)]

#[path = "support/gen.rs"]
mod gen;

use gen::Scenario;
use stagetrace_analyze::compare::{compare, Row};

fn row<'a>(rows: &'a [Row], stage: &str, stat: &str) -> &'a Row {
    rows.iter()
        .find(|r| r.stage == stage && r.stat == stat)
        .unwrap_or_else(|| panic!("no {stage} {stat} row"))
}

#[test]
fn lateness_changes_in_ms_and_a_tiny_shift_is_not_significant() {
    // 20 Hz: 50 ms ticks; e2e ≈ 37 ms before (late ≈ −13 ms), ≈ 45 ms after.
    let before = Scenario {
        seed: 501,
        hz: 20.0,
        deadline: true,
        queue_ms: (0.2, 0.0005),
        ..Scenario::default()
    };
    let after = Scenario {
        seed: 502,
        infer_ms: (38.0, 1.5),
        // 5 µs slower with a 0.5 µs spread: detectable, irrelevant.
        queue_ms: (0.205, 0.0005),
        ..before.clone()
    };
    let c = compare(&gen::dataset(&before), &gen::dataset(&after), 7);
    let rows = &c.groups[0].rows;
    let late = row(rows, "late", "p50");
    assert_eq!(late.unit, "ms");
    assert!(late.before < -10.0 && late.after < 0.0, "{late:?}");
    // The change is the difference of the medians, +8 ms, with its interval.
    assert!((late.delta_ms - 8.0).abs() < 0.3, "{late:?}");
    let [lo, hi] = late.ci_ms.unwrap();
    assert!(
        lo < late.delta_ms && late.delta_ms < hi && lo > 7.0,
        "{late:?}"
    );
    assert!(late.delta_pct.is_nan(), "{late:?}");
    assert!(late.significant, "{late:?}");
    // A duration keeps its percentage.
    let infer = row(rows, "infer", "p50");
    assert_eq!(infer.unit, "%");
    assert!((infer.delta_pct - 26.7).abs() < 1.5, "{infer:?}");
    assert!(infer.significant);
    // queue +5 µs: Mann–Whitney finds it, the floor (1 % of e2e ≈ 0.37 ms) drops it.
    let queue = row(rows, "queue", "p50");
    assert!(queue.p < 1e-6, "{queue:?}");
    assert!((queue.delta_ms - 0.005).abs() < 0.002, "{queue:?}");
    assert!(queue.min_effect_ms > 0.3, "{queue:?}");
    assert!(!queue.significant, "{queue:?}");
    let text = stagetrace_analyze::compare::text(&c);
    eprintln!("{text}");
    let late_line = text
        .lines()
        .find(|l| l.trim_start().starts_with("late ") && l.contains("p50"))
        .unwrap();
    assert!(late_line.contains("+8."), "{late_line}");
    assert!(!late_line.contains('%'), "{late_line}");
}
