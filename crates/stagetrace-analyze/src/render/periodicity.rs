//! How a kind's figures spike over time (the period of their spikes) and
//! their second modes (a shape, not spikes).

use std::fmt::Write as _;

use crate::analysis::GroupReport;
use crate::format::fmt_ms;

/// Periodicity of each figure's spikes, and the second modes.
pub(super) fn periodicity_and_shapes(s: &mut String, g: &GroupReport) {
    if !g.periodicity.is_empty() {
        let _ = writeln!(s, "\n  periodicity of spikes:");
        for p in &g.periodicity {
            match p.period_s {
                Some(period) => {
                    let calls = p
                        .period_calls
                        .map_or(String::new(), |n| format!(" = every {n} calls"));
                    let _ = writeln!(
                        s,
                        "    {:<10} {} spikes, period {:.2} s{calls} (autocorrelation {:.2}, threshold {:.2}; {:.0}% of intervals on period)",
                        p.stage, p.spikes, period, p.acf, p.acf_threshold, 100.0 * p.isi_on_period
                    );
                }
                None => {
                    let _ = writeln!(
                        s,
                        "    {:<10} {} spikes, no period (best autocorrelation {:.2} at {:.2} s, threshold {:.2}; {:.0}% of intervals on it)",
                        p.stage, p.spikes, p.acf, p.acf_lag_s, p.acf_threshold, 100.0 * p.isi_on_period
                    );
                }
            }
        }
    }
    if !g.modes.is_empty() {
        let _ = writeln!(s, "\n  shapes (second modes, not spikes):");
        for m in &g.modes {
            let _ = writeln!(
                s,
                "    {:<10} bimodal: {:.1}% of the calls {} above its median of {}{}",
                m.stage,
                100.0 * m.share,
                fmt_ms(m.excess_ms),
                fmt_ms(m.median_ms),
                if m.matters {
                    " (a tenth of the call or more: see the verdict)"
                } else {
                    " (small against the call: a shape, not a fault)"
                }
            );
        }
    }
}
