//! `compare BEFORE AFTER`: per-stage change with confidence (`~` when it is
//! noise), and output consistency where records carry an output digest.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde::Serialize;

use stagetrace_schema::Figure;

use crate::analysis::{group_data, inputs_of, min_cost_ms, GroupData, Inputs, ALL_KINDS};
use crate::figures;
use crate::format::{fmt_ms, signed_ms};
use crate::load::{Dataset, HopFig};
use crate::stats;
use crate::table::{Align, Table};

/// Version tag of the compare `--json` document.
pub const COMPARE_SCHEMA: &str = "stagetrace-compare/1";

/// Family-wise significance level (Holm over every row of a comparison).
pub const COMPARE_ALPHA: f64 = 0.05;

/// Most digest mismatches listed (all are counted).
const MAX_LISTED_MISMATCHES: usize = 20;

/// The result of comparing two runs.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    /// [`COMPARE_SCHEMA`].
    pub schema: &'static str,
    /// The first run.
    pub before: Inputs,
    /// The second run.
    pub after: Inputs,
    /// Per kind.
    pub groups: Vec<GroupComparison>,
    /// Output consistency.
    pub outputs: DigestCheck,
    /// Rows whose change is significant.
    pub significant: u64,
}

/// One kind's comparison.
#[derive(Clone, Debug, Serialize)]
pub struct GroupComparison {
    /// The request kind.
    pub kind: String,
    /// Steady calls before.
    pub before_n: u64,
    /// Steady calls after.
    pub after_n: u64,
    /// The answer, in a few sentences: what changed, largest first, with
    /// the figures (the text prints it first).
    pub summary: Vec<String>,
    /// How far the clock split may put a one-way change on the wrong side
    /// (ms): the median `split_err_ms` of each run that carries one, added.
    /// `null` when neither does (trusted clocks, or no split).
    pub split_err_ms: Option<f64>,
    /// One row per stage and statistic.
    pub rows: Vec<Row>,
    /// Calls through gateways: per hop of the records' `hops`, one row per
    /// figure (`up`, `down`, `net`, `relay`) and statistic. Absent without.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hops: Vec<HopRows>,
}

/// One hop's rows.
#[derive(Clone, Debug, Serialize)]
pub struct HopRows {
    /// The hop's number ("hop 2"): the records' `hops[hop − 1]`.
    pub hop: usize,
    /// The node before it (`robot`, a gateway).
    pub from: String,
    /// The node at its end (a gateway, or `server`).
    pub to: String,
    /// One row per figure and statistic; `stage` names the figure.
    pub rows: Vec<Row>,
}

/// One stage statistic, before and after.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Stage name.
    pub stage: &'static str,
    /// `p50`, `p90` or `p99`.
    pub stat: &'static str,
    /// Value before (ms).
    pub before: f64,
    /// Value after (ms).
    pub after: f64,
    /// `%` (a duration: the change as a ratio) or `ms` (a signed figure,
    /// `late` or a clock offset: the change as a difference, since a ratio
    /// of values that cross zero means nothing).
    pub unit: &'static str,
    /// Change in percent (`+20.0` = 20 % slower); `null` for `ms` rows.
    pub delta_pct: f64,
    /// 95 % bootstrap interval of the change, percent; `null` for `ms` rows.
    pub ci_pct: [f64; 2],
    /// Change in ms (`after − before`), every row.
    pub delta_ms: f64,
    /// 95 % bootstrap interval of the difference (ms); `ms` rows only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ci_ms: Option<[f64; 2]>,
    /// The smallest change that counts (ms): the report's floor, 1 % of the
    /// first run's e2e median and at least 0.01 ms. A change below it is
    /// never significant, however small its p-value.
    pub min_effect_ms: f64,
    /// p-value: Mann–Whitney for `p50`, bootstrap for the other quantiles.
    pub p: f64,
    /// `mann_whitney` or `bootstrap`.
    pub test: &'static str,
    /// Significant after Holm's correction over all rows at [`COMPARE_ALPHA`],
    /// its interval clear of "no change", and at least `min_effect_ms` —
    /// and, for a one-way figure (`uplink`, `downlink`, a hop's `up` /
    /// `down`), larger than the clock split's bound.
    pub significant: bool,
    /// A one-way figure that moved by the tests but within the clock
    /// split's bound: the move may belong to the other direction, so which
    /// direction moved cannot be told (never `significant`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub direction_unknown: bool,
}

/// Same inputs, same outputs?
#[derive(Clone, Debug, Serialize)]
pub struct DigestCheck {
    /// Calls with a digest on both sides, joined by (kind, seq).
    pub compared: u64,
    /// Of those, equal digests.
    pub matched: u64,
    /// Of those, different digests.
    pub mismatched: u64,
    /// Digests only in the first run.
    pub only_before: u64,
    /// Digests only in the second run.
    pub only_after: u64,
    /// The first mismatches.
    pub mismatches: Vec<Mismatch>,
}

/// One call whose output changed.
#[derive(Clone, Debug, Serialize)]
pub struct Mismatch {
    /// Request kind.
    pub kind: String,
    /// The call's `seq`.
    pub seq: u64,
    /// Digest before.
    pub before: String,
    /// Digest after.
    pub after: String,
}

impl Comparison {
    /// Keeps only the rows of `figures` (the answer stays whole: it says
    /// what changed, whatever the rows shown); hops are dropped.
    pub fn only(&mut self, figures: &[Figure]) {
        for g in &mut self.groups {
            g.rows
                .retain(|r| figures.iter().any(|f| f.name() == r.stage));
            g.hops.clear();
        }
    }
}

impl DigestCheck {
    /// True when some output changed.
    pub fn failed(&self) -> bool {
        self.mismatched > 0
    }
}

/// Compares two runs.
pub fn compare(before: &Dataset, after: &Dataset, seed: u64) -> Comparison {
    let gb = group_data(before);
    let ga = group_data(after);
    let mut groups = Vec::new();
    // Per group, per hop: that hop's clock bound on a change (ms).
    let mut hop_errs: Vec<Vec<f64>> = Vec::new();
    let mut pvals = Vec::new();
    for b in gb.iter().filter(|g| g.kind != ALL_KINDS) {
        let Some(a) = ga.iter().find(|a| a.kind == b.kind) else {
            continue;
        };
        let floor = min_cost_ms(stats::quantile(b.sorted(Figure::E2e), 0.5));
        let mut rows = Vec::new();
        for m in figures::display_order() {
            let side = Side {
                xs: b.sorted(m),
                ys: a.sorted(m),
                signed: m.is_signed(),
                floor,
            };
            rows.extend(rows_of(
                m.name(),
                &side,
                seed ^ m.index() as u64,
                &mut pvals,
            ));
        }
        let hops = hop_rows(b, a, seed, floor, &mut pvals);
        let median = |xs: &[f32]| (!xs.is_empty()).then(|| stats::quantile(xs, 0.5));
        let split_err_ms = match (
            median(b.sorted(Figure::SplitErr)),
            median(a.sorted(Figure::SplitErr)),
        ) {
            (None, None) => None,
            (x, y) => Some(x.unwrap_or(0.0) + y.unwrap_or(0.0)),
        };
        let hop_err = (0..hops.len())
            .map(|l| {
                let e = |g: &GroupData| median(g.hop_sorted(l, HopFig::Err));
                e(b).unwrap_or(0.0) + e(a).unwrap_or(0.0)
            })
            .collect::<Vec<f64>>();
        groups.push(GroupComparison {
            kind: b.kind.clone(),
            before_n: b.calls.len() as u64,
            after_n: a.calls.len() as u64,
            summary: Vec::new(),
            split_err_ms,
            rows,
            hops,
        });
        hop_errs.push(hop_err);
    }
    let sig = stats::holm(&pvals, COMPARE_ALPHA);
    let mut k = 0;
    let mut significant = 0;
    for g in groups.iter_mut() {
        // In the order their p-values were pushed: stages, then hops.
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
    for (g, errs) in groups.iter_mut().zip(&hop_errs) {
        one_way_rule(&mut g.rows, g.split_err_ms, |f| {
            Figure::from_name(f).is_some_and(figures::is_one_way)
        });
        for (h, err) in g.hops.iter_mut().zip(errs) {
            let bound = (*err > 0.0).then_some(*err);
            one_way_rule(&mut h.rows, bound, |f| {
                f == HopFig::Up.name() || f == HopFig::Down.name()
            });
        }
        significant += g
            .rows
            .iter()
            .chain(g.hops.iter().flat_map(|h| h.rows.iter()))
            .filter(|r| r.significant)
            .count() as u64;
        g.summary = summary(g);
    }
    Comparison {
        schema: COMPARE_SCHEMA,
        before: inputs_of(before),
        after: inputs_of(after),
        groups,
        outputs: digests(before, after),
        significant,
    }
}

/// One figure's values on both sides, and how to compare them.
struct Side<'a> {
    xs: &'a [f32],
    ys: &'a [f32],
    /// A figure that can be negative: compared as a difference.
    signed: bool,
    /// The smallest change that counts (ms).
    floor: f64,
}

/// The p50 / p90 / p99 rows of one figure (none below two values a side),
/// their p-values pushed to `pvals` in row order.
fn rows_of(stage: &'static str, side: &Side<'_>, seed: u64, pvals: &mut Vec<f64>) -> Vec<Row> {
    let (xs, ys) = (side.xs, side.ys);
    let mut rows = Vec::new();
    if xs.len() < 2 || ys.len() < 2 {
        return rows;
    }
    for (stat, q) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99)] {
        let change = if side.signed {
            stats::quantile_diff(xs, ys, q, seed).map(|d| Change {
                before: d.before,
                after: d.after,
                pct: [f64::NAN; 3],
                ci_ms: Some([d.lo, d.hi]),
                p: d.p,
            })
        } else {
            stats::quantile_ratio(xs, ys, q, seed).map(|r| Change {
                before: r.before,
                after: r.after,
                pct: [
                    100.0 * (r.ratio - 1.0),
                    100.0 * (r.lo - 1.0),
                    100.0 * (r.hi - 1.0),
                ],
                ci_ms: None,
                p: r.p,
            })
        };
        let Some(c) = change else {
            continue;
        };
        let (p, test) = if stat == "p50" {
            (
                stats::mann_whitney(xs, ys).map_or(1.0, |mw| mw.p),
                "mann_whitney",
            )
        } else {
            (c.p, "bootstrap")
        };
        pvals.push(p);
        rows.push(Row {
            stage,
            stat,
            before: c.before,
            after: c.after,
            unit: if side.signed { "ms" } else { "%" },
            delta_pct: c.pct[0],
            ci_pct: [c.pct[1], c.pct[2]],
            delta_ms: c.after - c.before,
            ci_ms: c.ci_ms,
            min_effect_ms: side.floor,
            p,
            test,
            significant: false,
            direction_unknown: false,
        });
    }
    rows
}

/// One quantile's change, as a ratio or a difference.
struct Change {
    before: f64,
    after: f64,
    /// Change, interval low, interval high, percent (NaN for a difference).
    pct: [f64; 3],
    ci_ms: Option<[f64; 2]>,
    p: f64,
}

/// The rows of the hops both runs have (the same path: hop `n` is the
/// same hop on both sides).
fn hop_rows(
    b: &GroupData,
    a: &GroupData,
    seed: u64,
    floor: f64,
    pvals: &mut Vec<f64>,
) -> Vec<HopRows> {
    let hops = b.hop_sorted.len().min(a.hop_sorted.len());
    let names = crate::analysis::hop_nodes(hops);
    (0..hops)
        .map(|l| {
            let mut rows = Vec::new();
            for fig in [HopFig::Up, HopFig::Down, HopFig::Net, HopFig::Relay] {
                // Seeds apart from the stages' (their figure indices are small).
                let seed = seed ^ (0x4000 + (l * 8 + fig.index()) as u64);
                let side = Side {
                    xs: b.hop_sorted(l, fig),
                    ys: a.hop_sorted(l, fig),
                    signed: false,
                    floor,
                };
                rows.extend(rows_of(fig.name(), &side, seed, pvals));
            }
            HopRows {
                hop: l + 1,
                from: names[l].clone(),
                to: names[l + 1].clone(),
                rows,
            }
        })
        .collect()
}

fn digests(before: &Dataset, after: &Dataset) -> DigestCheck {
    let mut map: HashMap<(&str, u64), &str> = HashMap::new();
    for (i, d) in before.digests() {
        if before.is_failed(i) {
            continue;
        }
        map.entry((before.kind_of(i), before.seq(i))).or_insert(d);
    }
    let mut check = DigestCheck {
        compared: 0,
        matched: 0,
        mismatched: 0,
        only_before: 0,
        only_after: 0,
        mismatches: Vec::new(),
    };
    let mut seen = 0u64;
    for (i, d) in after.digests() {
        if after.is_failed(i) {
            continue;
        }
        let key = (after.kind_of(i), after.seq(i));
        match map.get(&key) {
            Some(b) => {
                seen += 1;
                check.compared += 1;
                if *b == d {
                    check.matched += 1;
                } else {
                    check.mismatched += 1;
                    if check.mismatches.len() < MAX_LISTED_MISMATCHES {
                        check.mismatches.push(Mismatch {
                            kind: key.0.to_string(),
                            seq: key.1,
                            before: (*b).to_string(),
                            after: d.to_string(),
                        });
                    }
                }
            }
            None => check.only_after += 1,
        }
    }
    check.only_before = (map.len() as u64).saturating_sub(seen);
    check
}

/// The report's rule for a one-way change (`docs/report.md`, "Uplink vs
/// downlink"): a one-way figure that moved by no more than the clock
/// split's bound may have moved in the other direction, so it is not
/// named — it is marked `direction_unknown` instead of `significant`. One
/// that moved by more keeps its significance.
fn one_way_rule(rows: &mut [Row], bound: Option<f64>, one_way: impl Fn(&str) -> bool) {
    let Some(err) = bound else {
        return;
    };
    for r in rows
        .iter_mut()
        .filter(|r| r.significant && one_way(r.stage) && r.delta_ms.abs() <= err)
    {
        r.significant = false;
        r.direction_unknown = true;
    }
}

/// Per figure, the row that says how it changed: its median's when that
/// is significant, else its tail's (p99, then p90); `None` when neither.
fn changes(rows: &[Row]) -> Vec<(Figure, &Row)> {
    let mut out: Vec<(Figure, &Row)> = Vec::new();
    for stat in ["p50", "p99", "p90"] {
        for r in rows.iter().filter(|r| r.significant && r.stat == stat) {
            let Some(f) = Figure::from_name(r.stage) else {
                continue;
            };
            if !out.iter().any(|(g, _)| *g == f) {
                out.push((f, r));
            }
        }
    }
    out
}

/// "infer slower by 2.41 ms at p50 (12.10 → 14.51 ms, +19.9 %)".
fn change(name: &str, r: &Row) -> String {
    if r.unit == "ms" {
        return format!(
            "{name} {} at {} ({} → {})",
            signed_ms(r.delta_ms),
            r.stat,
            fmt_ms(r.before),
            fmt_ms(r.after)
        );
    }
    format!(
        "{name} {} by {} at {} ({} → {}, {:+.1} %)",
        if r.delta_ms >= 0.0 {
            "slower"
        } else {
            "faster"
        },
        fmt_ms(r.delta_ms.abs()),
        r.stat,
        fmt_ms(r.before),
        fmt_ms(r.after),
        r.delta_pct
    )
}

/// Most changes the first sentence names; the rows below list them all.
const NAMED: usize = 3;

/// The answer for one kind: what changed, largest first, in a few
/// sentences with the figures. A figure is named only when none of its
/// parts is (a slower infer is not also a slower server and roundtrip);
/// the whole call (e2e) is said apart, and so are the hosts.
fn summary(g: &GroupComparison) -> Vec<String> {
    if g.rows.is_empty() {
        return vec!["Too few calls to compare: each figure needs two values a side.".to_string()];
    }
    let moved = changes(&g.rows);
    let (host, call): (Vec<_>, Vec<_>) = moved.iter().partition(|(f, _)| f.is_host());
    let flagged: Vec<Figure> = call.iter().map(|(f, _)| *f).collect();
    // The whole call and its lateness are said apart, after what moved.
    let mut named: Vec<(Figure, &Row)> = call
        .iter()
        .filter(|(f, _)| !matches!(*f, Figure::E2e | Figure::Late))
        .filter(|(f, _)| !figures::descendants(*f).iter().any(|d| flagged.contains(d)))
        .map(|(f, r)| (*f, *r))
        .collect();
    // Medians that moved first, then tails; each by size.
    named.sort_by(|a, b| {
        (a.1.stat != "p50")
            .cmp(&(b.1.stat != "p50"))
            .then(b.1.delta_ms.abs().total_cmp(&a.1.delta_ms.abs()))
    });
    let unknown: Vec<&Row> = g
        .rows
        .iter()
        .filter(|r| r.direction_unknown && r.stat == "p50")
        .collect();
    let mut out = Vec::new();
    let mut items: Vec<String> = Vec::new();
    let mut net_sentence = None;
    for (f, r) in named.iter().take(NAMED) {
        if *f == Figure::Net && !unknown.is_empty() {
            let split: Vec<String> = unknown
                .iter()
                .map(|u| format!("{} {}", u.stage, signed_ms(u.delta_ms)))
                .collect();
            net_sentence = Some(format!(
                "{}; which direction cannot be told: the split reads {}, each within the clock split's ± {} (both runs estimate the server's clock offset, docs/clocks.md). To tell, record both runs with synchronised clocks (--clock trusted), or vary the link within one run, which holds the offset (stagetrace experiment).",
                change("net (uplink + downlink, exact)", r),
                split.join(" and "),
                fmt_ms(g.split_err_ms.unwrap_or(f64::NAN))
            ));
        } else if figures::is_one_way(*f) {
            // A direction told: say the other one stayed, when it did.
            let other = Figure::Net.parts().iter().find(|o| *o != f);
            let still = other.and_then(|o| {
                g.rows.iter().find(|x| {
                    x.stage == o.name() && x.stat == "p50" && !x.significant && !x.direction_unknown
                })
            });
            items.push(match still {
                Some(x) => format!(
                    "{}, {} unchanged (p50 {} → {})",
                    change(f.name(), r),
                    x.stage,
                    fmt_ms(x.before),
                    fmt_ms(x.after)
                ),
                None => change(f.name(), r),
            });
        } else {
            items.push(change(f.name(), r));
        }
    }
    let more = named.len().saturating_sub(NAMED);
    let more = if more > 0 {
        format!("; {more} more in the rows below")
    } else {
        String::new()
    };
    match (items.is_empty(), net_sentence) {
        (false, Some(net)) => {
            out.push(format!("What changed: {net}"));
            out.push(format!("Also: {}{more}.", items.join("; ")));
        }
        (true, Some(net)) => out.push(format!("What changed: {net}")),
        (false, None) => out.push(format!("What changed: {}{more}.", items.join("; "))),
        (true, None) => {}
    }
    let e2e = g
        .rows
        .iter()
        .find(|r| r.stage == Figure::E2e.name() && r.stat == "p50");
    let late = call
        .iter()
        .find(|(f, _)| *f == Figure::Late)
        .map_or(String::new(), |(_, r)| {
            format!(
                ", its lateness against the tick {} at {}",
                signed_ms(r.delta_ms),
                r.stat
            )
        });
    match (call.iter().find(|(f, _)| *f == Figure::E2e), out.is_empty()) {
        (Some((_, r)), _) => out.push(format!("The whole call: {}{late}.", change("e2e", r))),
        (None, false) => {
            if let Some(r) = e2e {
                out.push(format!(
                    "The whole call (e2e) did not move beyond noise: p50 {} → {}.",
                    fmt_ms(r.before),
                    fmt_ms(r.after)
                ));
            }
        }
        (None, true) => {
            let floor = g.rows.first().map_or(f64::NAN, |r| r.min_effect_ms);
            let e2e = e2e.map_or(String::new(), |r| {
                format!(" (e2e p50 {} → {})", fmt_ms(r.before), fmt_ms(r.after))
            });
            out.push(format!(
                "Nothing changed beyond noise: no figure moved by a significant amount of at least {}{e2e}.",
                fmt_ms(floor)
            ));
        }
    }
    if !host.is_empty() {
        let mut host = host.clone();
        host.sort_by(|a, b| b.1.delta_ms.abs().total_cmp(&a.1.delta_ms.abs()));
        let list: Vec<String> = host
            .iter()
            .take(NAMED)
            .map(|(f, r)| change(f.name(), r))
            .collect();
        out.push(format!(
            "On the hosts (inside the stages, docs/host.md): {}.",
            list.join("; ")
        ));
    }
    let hop_moves: Vec<(String, &Row)> = g
        .hops
        .iter()
        .flat_map(|h| {
            h.rows
                .iter()
                .filter(|r| r.significant && r.stat == "p50")
                .map(move |r| {
                    (
                        format!("hop {} ({} → {}) {}", h.hop, h.from, h.to, r.stage),
                        r,
                    )
                })
        })
        .collect();
    if let Some((name, r)) = hop_moves
        .iter()
        .max_by(|a, b| a.1.delta_ms.abs().total_cmp(&b.1.delta_ms.abs()))
    {
        out.push(format!(
            "Per hop: {}{}.",
            change(name, r),
            if hop_moves.len() > 1 {
                format!("; {} more hop row(s) below", hop_moves.len() - 1)
            } else {
                String::new()
            }
        ));
    }
    out
}

/// A p-value as a row shows it: never `0.000`.
fn fmt_p(p: f64) -> String {
    if p < 0.001 {
        "<0.001".to_string()
    } else {
        format!("{p:.3}")
    }
}

/// The columns of the rows' tables.
fn rows_table(first: &str) -> Table {
    Table::new(
        2,
        &[
            (first, Align::Left),
            ("stat", Align::Left),
            ("before", Align::Right),
            ("after", Align::Right),
            ("change [95% CI]", Align::Left),
            ("p", Align::Right),
        ],
    )
}

/// One row's cells: `~` (and no p) for noise, the change with its
/// interval and p when significant, the change and the bound it lies
/// within when its direction cannot be told.
fn row_cells(label: String, r: &Row, bound: Option<f64>) -> Vec<String> {
    let (delta, p) = if r.direction_unknown {
        (
            format!(
                "{} — within ± {}: direction unknown",
                signed_ms(r.delta_ms),
                bound.map_or_else(|| "-".to_string(), crate::render::bound)
            ),
            String::new(),
        )
    } else if !r.significant {
        ("~".to_string(), String::new())
    } else {
        let d = match r.ci_ms {
            Some([lo, hi]) => format!(
                "{} [{} {}]",
                signed_ms(r.delta_ms),
                signed_ms(lo),
                signed_ms(hi)
            ),
            None => format!(
                "{:+.1}% [{:+.1}% {:+.1}%]",
                r.delta_pct, r.ci_pct[0], r.ci_pct[1]
            ),
        };
        (d, fmt_p(r.p))
    };
    vec![
        label,
        r.stat.to_string(),
        cell(r.before),
        cell(r.after),
        delta,
        p,
    ]
}

/// A table cell: fixed three decimals.
fn cell(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.3}")
    } else {
        "-".into()
    }
}

/// The comparison as the terminal shows it: per kind the answer first,
/// then the rows that changed (every row with `all`; benchstat's `~` for
/// noise), the hosts' rows under their own heading, the hops, and
/// whether the policy's outputs stayed the same.
pub fn render(c: &Comparison, all: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "before: {} record(s) from {}\nafter:  {} record(s) from {}",
        c.before.records,
        c.before.files.join(", "),
        c.after.records,
        c.after.files.join(", ")
    );
    for w in c.before.warnings.iter().chain(c.after.warnings.iter()) {
        let _ = writeln!(s, "warning: {w}");
    }
    for g in &c.groups {
        group_text(&mut s, g, all);
    }
    if c.groups.is_empty() {
        let _ = writeln!(
            s,
            "\nno kind of call is present in both runs: nothing to compare"
        );
    }
    outputs_text(&mut s, &c.outputs);
    s
}

/// The comparison as the terminal shows it by default: the rows that changed.
pub fn text(c: &Comparison) -> String {
    render(c, false)
}

/// Whether a row is shown without `--all`.
fn changed(r: &Row) -> bool {
    r.significant || r.direction_unknown
}

fn group_text(s: &mut String, g: &GroupComparison, all: bool) {
    let _ = writeln!(
        s,
        "\nkind \"{}\" ({} calls before, {} after):",
        g.kind, g.before_n, g.after_n
    );
    for line in &g.summary {
        let _ = writeln!(s, "  {line}");
    }
    let floor = g
        .rows
        .first()
        .map_or_else(|| "—".to_string(), |r| fmt_ms(r.min_effect_ms));
    let shown = |r: &&Row| all || changed(r);
    let is_host = |r: &Row| Figure::from_name(r.stage).is_some_and(Figure::is_host);
    let mut calls = rows_table("stage (ms)");
    let mut hosts = rows_table("host (ms)");
    for r in g.rows.iter().filter(shown) {
        let f = Figure::from_name(r.stage);
        let label = f.map_or_else(
            || r.stage.to_string(),
            |f| crate::render::row_name(f, g.split_err_ms),
        );
        let cells = row_cells(label, r, g.split_err_ms);
        if is_host(r) {
            hosts.row(cells);
        } else {
            calls.row(cells);
        }
    }
    let mut hops = rows_table("hop (ms)");
    for h in &g.hops {
        for r in h.rows.iter().filter(shown) {
            hops.row(row_cells(format!("hop {} {}", h.hop, r.stage), r, None));
        }
    }
    let total = g.rows.len() + g.hops.iter().map(|h| h.rows.len()).sum::<usize>();
    let listed = g.rows.iter().filter(|r| changed(r)).count()
        + g.hops
            .iter()
            .flat_map(|h| h.rows.iter())
            .filter(|r| changed(r))
            .count();
    if all || listed > 0 {
        let _ = writeln!(
            s,
            "\n  {} (p50 by Mann–Whitney, p90 / p99 by bootstrap; Holm-corrected over all {total} rows, α = {COMPARE_ALPHA}; a change under {floor} does not count):",
            if all { "every row" } else { "the rows that changed" }
        );
    }
    if !calls.is_empty() {
        calls.write(s);
    }
    if !hosts.is_empty() {
        let _ = writeln!(s, "\n  {}:", figures::HOST_HEADING);
        hosts.write(s);
        let _ = writeln!(s, "    {}", figures::HOST_LEGEND);
    }
    if !hops.is_empty() {
        let _ = writeln!(
            s,
            "\n  hops (per hop: up / down each way, net both ways, relay = the gateway's own time at its end):"
        );
        hops.write(s);
    }
    if g.rows.iter().any(|r| r.direction_unknown) {
        if let Some(e) = g.split_err_ms {
            let _ = writeln!(
                s,
                "    direction unknown: uplink / downlink moved by no more than the clock split's ± {} (each run's median split_err_ms, added): the move may be the other direction's — net is exact",
                crate::render::bound(e)
            );
        }
    }
    if !all {
        let unchanged = total - listed;
        if unchanged > 0 {
            let _ = writeln!(
                s,
                "{}  {unchanged} row(s) unchanged (noise, or under {floor}): --all lists them with `~`",
                if listed == 0 { "\n" } else { "" }
            );
        }
    }
}

/// Whether the policy's outputs stayed the same, in words.
fn outputs_text(s: &mut String, o: &DigestCheck) {
    if o.compared == 0 {
        let _ = writeln!(
            s,
            "\noutputs: not compared — no call carries an output digest (output_digest) in both runs with the same kind and seq"
        );
    } else if o.failed() {
        let _ = writeln!(
            s,
            "\nOUTPUTS CHANGED: {} of {} calls (same kind and seq) returned a different output — the change altered the policy's results:",
            o.mismatched, o.compared
        );
        for m in &o.mismatches {
            let _ = writeln!(
                s,
                "  kind {} seq {}: {} → {}",
                m.kind, m.seq, m.before, m.after
            );
        }
    } else {
        let _ = writeln!(
            s,
            "\noutputs: the policy's outputs were identical for all {} calls (same kind and seq)",
            o.compared
        );
    }
    if o.only_before + o.only_after > 0 {
        let _ = writeln!(
            s,
            "  ({} call(s) with a digest only before, {} only after: not compared)",
            o.only_before, o.only_after
        );
    }
}
