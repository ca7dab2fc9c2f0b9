//! The outlier rounds of a kind: the rule, a whole-run shift against the
//! baseline, and the first rounds with the figures that stood out.

use std::fmt::Write as _;

use crate::analysis::GroupReport;
use crate::format::{fmt_ms, signed_ms};

/// Most outlier rounds printed in the terminal (the JSON has more).
const SHOWN_ROUNDS: usize = 15;

/// The outlier rounds: the rule, a whole-run shift, the first rounds.
pub(super) fn outliers(s: &mut String, g: &GroupReport) {
    let o = &g.outliers;
    if let Some(x) = o.whole_run_shift() {
        let each: Vec<String> = o
            .shifted
            .iter()
            .map(|(f, d)| format!("{f} {}", signed_ms(*d)))
            .collect();
        let _ = writeln!(
            s,
            "\n  the whole run shifted ({}): medians against the baseline {}; rounds are measured against the run's own median",
            signed_ms(x),
            each.join(", ")
        );
    }
    let _ = writeln!(
        s,
        "\n  outlier rounds: {} of {} ({})",
        o.count, g.steady, o.rule
    );
    for r in o.rounds.iter().take(SHOWN_ROUNDS) {
        let st: Vec<String> = r
            .stages
            .iter()
            .map(|x| {
                format!(
                    "{} {} (> {})",
                    x.stage,
                    fmt_ms(x.value_ms),
                    fmt_ms(x.threshold_ms)
                )
            })
            .collect();
        let who = r.robot.as_ref().map_or(String::new(), |n| format!(" {n}"));
        let _ = writeln!(
            s,
            "    seq {:<8}{who} {}  e2e {:>10}  {}",
            r.seq,
            r.time,
            fmt_ms(r.e2e_ms),
            st.join(", ")
        );
    }
    if o.count as usize > SHOWN_ROUNDS.min(o.rounds.len()) {
        let _ = writeln!(
            s,
            "    … {} more (all in --json / --html)",
            o.count as usize - SHOWN_ROUNDS.min(o.rounds.len())
        );
    }
}
