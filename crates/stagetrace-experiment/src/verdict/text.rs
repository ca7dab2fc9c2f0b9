//! The verdict's words: the next step for the figure that moved first, and
//! the summary sentence. The figure's own remedy is its row's in the schema
//! table ([`Figure::advice`]), the one `stagetrace report` gives.

use stagetrace_schema::Figure;

use super::direction;
use super::result::{ComponentResult, LevelResult};
use crate::figures;

/// What the verdict found, for its summary.
pub(crate) struct Findings<'a> {
    /// The figure that moved first.
    pub(crate) first: Figure,
    /// The level it moved at.
    pub(crate) level: &'a LevelResult,
    /// Its result at that level.
    pub(crate) result: &'a ComponentResult,
    /// Period of its spikes, s.
    pub(crate) spike_period_s: Option<f64>,
    /// Figures that moved with it or later, with their level.
    pub(crate) dragged: &'a [(Figure, usize)],
    /// Every level's results (for what a dragged figure did).
    pub(crate) levels: &'a [LevelResult],
    /// Figures that stayed flat.
    pub(crate) flat: &'a [Figure],
    /// What the resources say.
    pub(crate) resource_note: Option<&'a str>,
    /// The one-way stages' moves the clock split cannot tell apart, in words
    /// (the network moved; which direction is undetermined).
    pub(crate) undetermined: Option<&'a str>,
    /// A one-way stage's move the split cannot tell from its error, left out
    /// while another one-way stage's is named.
    pub(crate) unnamed: Option<&'a str>,
}

/// The next step: where to look for `f` (its remedy, the schema table's, as
/// `stagetrace report` gives it), what its shape says, what the resources say.
pub(crate) fn next_step(f: Figure, shape: Option<&str>, res_state: Option<&str>) -> String {
    let shape_step = match shape {
        Some("median") => "the median rose: the whole stage got slower",
        Some("tail") => {
            "p99 rose with a flat median: a few requests are held up (queueing or contention)"
        }
        _ => "",
    };
    let res_step = match res_state {
        Some("saturated") => "resources saturated: capacity",
        Some("throttled") => "CPU clock throttled: the same work runs slower — cooling, power limits or the frequency governor, not load",
        // A one-way stage that got slower on unsaturated hosts is the network's: the
        // hosts' locks and queues are not where to look.
        Some(_) if direction::is_one_way(f) || f == Figure::Net => "",
        Some(_) => "resources not saturated while slower: locks, queues, scheduling",
        None => "",
    };
    [f.advice(), shape_step, res_step]
        .iter()
        .filter(|s| !s.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join("; ")
}

/// The verdict in a sentence or three: what moved first and by how much,
/// then what moved with it, what the split could not tell, what stayed flat
/// and what the resources say.
pub(crate) fn summary(x: &Findings<'_>) -> String {
    let mut summary = first_moved(x);
    if let Some(p) = x.spike_period_s {
        summary.push_str(&format!(" Spikes repeat every {p:.2} s."));
    }
    if !x.dragged.is_empty() {
        summary.push_str(&format!(" Dragged along: {}.", dragged(x).join(", ")));
    }
    if let (false, Some(why)) = (x.first == Figure::Net, x.undetermined) {
        summary.push_str(&format!(
            " The network moved; which direction is undetermined: {why}."
        ));
    }
    if let Some(why) = x.unnamed {
        summary.push_str(&format!(" Not named: {why}."));
    }
    // Only the figures that make up the call: a flat sum (net) says nothing more.
    let flat_named: Vec<&str> = x
        .flat
        .iter()
        .filter(|f| figures::is_finest(**f))
        .map(|f| f.name())
        .collect();
    if !flat_named.is_empty() {
        summary.push_str(&format!(" Flat: {}.", flat_named.join(", ")));
    }
    if let Some(n) = x.resource_note {
        summary.push_str(&format!(" {n}"));
    }
    summary
}

/// The first sentence: the figure that moved first, its level and its move.
fn first_moved(x: &Findings<'_>) -> String {
    let (l, ratio) = (x.level, moved_ratio(x.result));
    if let (Figure::Net, Some(why)) = (x.first, x.undetermined) {
        format!(
            "the network moved first, at level {} ({}): net {ratio}; which direction is undetermined: {why}.",
            l.level, l.label
        )
    } else if x.first == Figure::Gap {
        format!(
            "all stages flat; the gap (time no stage explains) moved first, at level {} ({}): {ratio}.",
            l.level, l.label
        )
    } else {
        format!(
            "{} moved first, at level {} ({}): {ratio}.",
            x.first, l.level, l.label
        )
    }
}

/// The statistic that moved, with its ratio and interval: p50 for a
/// median shift, else p99 (empty when neither was measured).
fn moved_ratio(fc: &ComponentResult) -> String {
    fc.p50_ratio
        .filter(|_| fc.shape == Some("median"))
        .or(fc.p99_ratio)
        .map(|q| {
            format!(
                "p{} {:.2} → {:.2} ms (×{:.2}, 95 % CI {:.2}–{:.2})",
                if q.q == 0.5 { "50" } else { "99" },
                q.before,
                q.after,
                q.ratio,
                q.lo,
                q.hi
            )
        })
        .unwrap_or_default()
}

/// Each figure dragged along, with its level and the statistic that moved
/// as the table shows it: a dragged stage is never listed beside a flat ×1.0.
fn dragged(x: &Findings<'_>) -> Vec<String> {
    x.dragged
        .iter()
        .map(|(f, l)| {
            let moved = x
                .levels
                .iter()
                .find(|lv| lv.level == *l)
                .and_then(|lv| lv.components.get(f.name()))
                .and_then(|c| {
                    let (stat, q) = if c.shape == Some("median") {
                        ("p50", c.p50_ratio)
                    } else {
                        ("p99", c.p99_ratio)
                    };
                    q.map(|q| format!(": {stat} {:.2} → {:.2} ms", q.before, q.after))
                })
                .unwrap_or_default();
            format!("{f} (level {l}{moved})")
        })
        .collect()
}
