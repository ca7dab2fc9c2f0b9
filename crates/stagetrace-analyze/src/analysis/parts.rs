//! Parts and sums: which of a sum (`server`, `roundtrip`, `gap`, `e2e`)
//! and its parts a verdict names when both stand out (`docs/report.md`,
//! "Parts and sums"). A sum is left to its parts when they carry at least
//! half of what its spikes cost; a part's period is left to its sum when
//! it is a small share of the sum's spikes on the same calls.

use stagetrace_schema::Figure;

use super::report::{GroupReport, Verdict};

/// The figures whose spikes are a verdict of their own: `flagged` less
/// the sums left to their parts already named (spiking, or recurring with
/// a period: `periodic`; [`left_to_parts`]). Their own verdicts say it;
/// the e2e that holds them would say it again.
pub(super) fn spiked(
    flagged: &[Figure],
    periodic: &[Figure],
    cost: impl Fn(Figure) -> f64,
) -> Vec<Figure> {
    let named: Vec<Figure> = flagged.iter().chain(periodic).copied().collect();
    flagged
        .iter()
        .copied()
        .filter(|&f| !left_to_parts(f, &named, &cost))
        .collect()
}

/// Whether the sum `f`'s spikes are its parts' in `named`: they carry at
/// least half of what its spikes cost (`cost`: a figure's mean spike over
/// its median, ms). A sum whose spikes are mostly its own stays named: a
/// 15 ms lock wait in the gap beside the observer's 0.2 ms on the same
/// calls is the gap's.
pub(super) fn left_to_parts(f: Figure, named: &[Figure], cost: &impl Fn(Figure) -> f64) -> bool {
    let mut parts = f.parts().iter().filter(|p| named.contains(p)).peekable();
    if parts.peek().is_none() {
        return false;
    }
    let carried: f64 = parts.map(|&p| cost(p).max(0.0)).sum();
    2.0 * carried >= cost(f)
}

/// What a figure's spikes add to its call: their mean over its median
/// (ms); for a figure the outlier rule does not count (the observer's own
/// cost), its p99 over its median, as its periodic verdict gives it.
pub(super) fn spike_cost(r: &GroupReport, f: Figure) -> f64 {
    let Some(stage) = r.stages.get(f.name()) else {
        return 0.0;
    };
    match r.outliers.by_stage.get(f.name()) {
        Some(s) => s.mean_ms - stage.p50,
        None => stage.p99 - stage.p50,
    }
}

/// The figures of `periodic` whose period is a verdict of its own: less
/// the parts [`in_a_larger_spike`] of a sum named on its own, recurring
/// or spiking (`spiked`: the spike rules' verdicts).
pub(super) fn recurring_on_their_own(
    r: &GroupReport,
    periodic: &[Figure],
    spiked: &[Verdict],
) -> Vec<Figure> {
    let cost = |f: Figure| spike_cost(r, f);
    let sums: Vec<Figure> = periodic
        .iter()
        .copied()
        .filter(|&m| !m.parts().is_empty() && !left_to_parts(m, periodic, &cost))
        .chain(
            spiked
                .iter()
                .filter(|v| v.from_spikes)
                .filter_map(|v| v.stage.and_then(Figure::from_name)),
        )
        .collect();
    periodic
        .iter()
        .copied()
        .filter(|&m| !in_a_larger_spike(r, m, &sums))
        .collect()
}

/// Whether the recurring spikes of `part` are a small share of the spikes
/// of a sum named on its own (`sums`), on the same calls: a thread woken
/// after a 15 ms lock wait runs the observer's callbacks cold, 0.2 ms more
/// on those very calls. That is the wait's, told by the sum's verdict; a
/// period of the part's own would send the user after the observer. Small:
/// under half of what the sum's spikes cost (as [`left_to_parts`] keeps
/// the sum); the same calls: more than half of the part's spike events
/// start on a call where the sum spiked by more than twice that (its own
/// spike, not the part's lifting it).
fn in_a_larger_spike(r: &GroupReport, part: Figure, sums: &[Figure]) -> bool {
    let cost = |f: Figure| spike_cost(r, f);
    let calls = r
        .periodicity
        .iter()
        .find(|p| p.stage == part.name())
        .map_or(&[][..], |p| &p.event_calls[..]);
    let part_cost = cost(part).max(0.0);
    sums.iter()
        .filter(|sum| sum.parts().contains(&part))
        .any(|sum| {
            // The sum's own spikes: more than twice what the part adds (the
            // part alone may lift the sum over its threshold).
            let above = r.stages.get(sum.name()).map_or(f64::INFINITY, |s| s.p50) + 2.0 * part_cost;
            2.0 * part_cost < cost(*sum)
                && 2.0 * r.outliers.share_within(calls, sum.name(), above) > 1.0
        })
}
