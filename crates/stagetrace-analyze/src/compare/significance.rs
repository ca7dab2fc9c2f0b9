//! Which rows changed: Holm's correction over every row of the comparison
//! (all kinds, stages and hops), an interval clear of "no change", and a
//! change large enough to matter.

use super::{GroupComparison, COMPARE_ALPHA};
use crate::stats;

/// Marks each row `significant` from `pvals`, the rows' p-values in the
/// order they were pushed (per kind its stages, then its hops).
pub(super) fn mark(groups: &mut [GroupComparison], pvals: &[f64]) {
    let sig = stats::holm(pvals, COMPARE_ALPHA);
    let mut k = 0;
    for g in groups.iter_mut() {
        let GroupComparison { rows, hops, .. } = g;
        let all = rows
            .iter_mut()
            .chain(hops.iter_mut().flat_map(|h| h.rows.iter_mut()));
        for r in all {
            // A significant test whose interval still straddles "no change",
            // or a change too small to matter, is shown as noise.
            let straddles = match r.ci_ms {
                Some([lo, hi]) => lo <= 0.0 && hi >= 0.0,
                None => r.ci_pct[0] <= 0.0 && r.ci_pct[1] >= 0.0,
            };
            r.significant = sig.get(k).copied().unwrap_or(false)
                && !(straddles && r.test == "bootstrap")
                && r.delta_ms.abs() >= r.min_effect_ms;
            k += 1;
        }
    }
}

/// The kind's significant rows, its hops' included.
pub(super) fn count(g: &GroupComparison) -> u64 {
    g.rows
        .iter()
        .chain(g.hops.iter().flat_map(|h| h.rows.iter()))
        .filter(|r| r.significant)
        .count() as u64
}
