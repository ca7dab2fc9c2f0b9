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
    /// its interval clear of "no change", and at least `min_effect_ms`.
    pub significant: bool,
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
        groups.push(GroupComparison {
            kind: b.kind.clone(),
            before_n: b.calls.len() as u64,
            after_n: a.calls.len() as u64,
            rows,
            hops,
        });
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
            significant += u64::from(r.significant);
            k += 1;
        }
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

fn row_line(s: &mut String, label: &str, width: usize, r: &Row) {
    let delta = match (r.significant, r.ci_ms) {
        (false, _) => "~".to_string(),
        (true, Some([lo, hi])) => format!(
            "{} [{} {}]",
            signed_ms(r.delta_ms),
            signed_ms(lo),
            signed_ms(hi)
        ),
        (true, None) => format!(
            "{:+.1}% [{:+.1}% {:+.1}%]",
            r.delta_pct, r.ci_pct[0], r.ci_pct[1]
        ),
    };
    let _ = writeln!(
        s,
        "  {label:<width$} {:<4} {:>12} {:>12}   {:<34} {:.3}",
        r.stat,
        fmt_ms(r.before),
        fmt_ms(r.after),
        delta,
        r.p
    );
}

/// The comparison as the terminal shows it (benchstat style: `~` for noise).
pub fn text(c: &Comparison) -> String {
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
        let _ = writeln!(
            s,
            "\nkind \"{}\" (n = {} before, {} after; p50 by Mann–Whitney, p90/p99 by bootstrap; Holm-corrected, α = {COMPARE_ALPHA}; `~` also below {}: too small to matter)",
            g.kind, g.before_n, g.after_n,
            g.rows.first().map_or_else(|| "—".to_string(), |r| fmt_ms(r.min_effect_ms))
        );
        let _ = writeln!(
            s,
            "  {:<10} {:<4} {:>12} {:>12}   {:<34} p",
            "stage", "stat", "before", "after", "delta [95% CI]"
        );
        for r in &g.rows {
            row_line(&mut s, r.stage, 10, r);
        }
        if !g.hops.is_empty() {
            let _ = writeln!(
                s,
                "  hops (per hop: up / down each way, net both ways, relay = the gateway's own time at its end):"
            );
        }
        for h in &g.hops {
            for r in &h.rows {
                // `hop 2 relay`: wider than a stage's column.
                row_line(&mut s, &format!("hop {} {}", h.hop, r.stage), 12, r);
            }
        }
    }
    if c.groups.is_empty() {
        let _ = writeln!(
            s,
            "\nno kind of call is present in both runs: nothing to compare"
        );
    }
    let o = &c.outputs;
    if o.compared == 0 {
        let _ = writeln!(
            s,
            "\noutputs: no call carries an output digest in both runs (by kind and seq): consistency not checked"
        );
    } else if o.failed() {
        let _ = writeln!(
            s,
            "\nOUTPUTS CHANGED: {} of {} calls returned a different output digest — the change altered the results:",
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
            "\noutputs: identical for all {} calls compared by (kind, seq)",
            o.compared
        );
    }
    if o.only_before + o.only_after > 0 {
        let _ = writeln!(
            s,
            "  ({} digest(s) only before, {} only after: not compared)",
            o.only_before, o.only_after
        );
    }
    s
}
