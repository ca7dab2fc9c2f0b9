//! The hops of calls through gateways: per hop of the
//! records' `hops` array, the network each way, both ways, the gateway's
//! own time at the hop's end and the hop's clock bound — their
//! distributions, their change against the baseline, and the verdicts that
//! name the hop (or the gateway) that moved, with what to do.
//!
//! A hop's direction is named only when it moved by more than that hop's
//! own clock bound allows (its median `err_ms`, run plus baseline), as the
//! whole path's `uplink` / `downlink` are (`moves.rs`, `network`); else the
//! hop's `net` (exact) is named with the direction undetermined.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::json;
use stagetrace_schema::Figure;

use super::baseline::vs_baseline;
use super::group::GroupData;
use super::moves::fmt_p;
use super::options::AnalyzeOptions;
use super::report::{StageVsBaseline, Verdict};
use crate::format::{fmt_ms, signed_ms};
use crate::load::HopFig;
use crate::stats::{self, Distribution};

/// One hop of the path, robot → first gateway first.
#[derive(Clone, Debug, Serialize)]
pub struct HopReport {
    /// The hop's number as the text says it ("hop 2"): the record's
    /// `hops[hop − 1]`.
    pub hop: usize,
    /// The node before it (`robot`, `gateway`, `gateway 1`, …).
    pub from: String,
    /// The node at its end (a gateway, or `server`).
    pub to: String,
    /// Per figure (ms), keyed by the `hops` entry's key (`up_ms`, `down_ms`,
    /// `net_ms`, `relay_ms`, `err_ms`).
    pub figures: BTreeMap<&'static str, Distribution>,
    /// Per figure against the baseline, when one was given.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub baseline: BTreeMap<&'static str, StageVsBaseline>,
    /// The baseline's median `err_ms` on this hop, when it has the hop.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_err_ms: Option<f64>,
}

impl HopReport {
    /// `hop 2 (gateway → server)`.
    pub fn name(&self) -> String {
        format!("hop {} ({} → {})", self.hop, self.from, self.to)
    }
}

/// The nodes of a path of `hops` hops: the robot, its gateways, the server.
pub(crate) fn nodes(hops: usize) -> Vec<String> {
    let gateways = hops.saturating_sub(1);
    let mut v = vec!["robot".to_owned()];
    for g in 1..=gateways {
        v.push(if gateways == 1 {
            "gateway".to_owned()
        } else {
            format!("gateway {g}")
        });
    }
    v.push("server".to_owned());
    v
}

/// The group's hops (none without gateways), against the baseline's.
pub(super) fn hop_reports(
    g: &GroupData,
    base: Option<&GroupData>,
    opts: &AnalyzeOptions,
) -> Vec<HopReport> {
    let hops = g.hop_sorted.len();
    let names = nodes(hops);
    (0..hops)
        .map(|l| {
            let mut figures = BTreeMap::new();
            let mut vs = BTreeMap::new();
            for fig in HopFig::ALL {
                let run = g.hop_sorted(l, fig);
                if let Some(s) = Distribution::of_sorted(run) {
                    figures.insert(fig.field(), s);
                }
                if let Some(b) = base {
                    if fig != HopFig::Err {
                        if let Some(v) = vs_baseline(b.hop_sorted(l, fig), run, opts) {
                            vs.insert(fig.field(), v);
                        }
                    }
                }
            }
            let base_err = base
                .map(|b| b.hop_sorted(l, HopFig::Err))
                .filter(|v| !v.is_empty())
                .map(|v| stats::quantile(v, 0.5));
            HopReport {
                hop: l + 1,
                from: names[l].clone(),
                to: names[l + 1].clone(),
                figures,
                baseline: vs,
                baseline_err_ms: base_err,
            }
        })
        .collect()
}

/// What a move costs the call (ms added to e2e): the median's shift, or
/// the p99's for a tail; `None` when it is not a slowdown.
fn cost(s: &StageVsBaseline) -> Option<f64> {
    match s.shape {
        "median_shift" => Some(s.shift.estimate),
        "tail_only" => Some(s.p99.after - s.p99.before),
        _ => None,
    }
}

/// The path-level figure a hop figure is part of.
fn figure(fig: HopFig) -> Figure {
    match fig {
        HopFig::Up => Figure::Uplink,
        HopFig::Down => Figure::Downlink,
        HopFig::Relay => Figure::Relay,
        HopFig::Net | HopFig::Err => Figure::Net,
    }
}

/// The verdicts naming a hop or a gateway that got slower against the
/// baseline by at least `floor_ms`, with their cost.
pub(super) fn hop_verdicts(kind: &str, hops: &[HopReport], floor_ms: f64) -> Vec<Verdict> {
    let mut out = Vec::new();
    for h in hops {
        // The hop's clock bound on a change: its median err, run + baseline.
        let err = h.figures.get(HopFig::Err.field()).map_or(0.0, |s| s.p50)
            + h.baseline_err_ms.unwrap_or(0.0);
        let moved = |fig: HopFig| {
            let s = h.baseline.get(fig.field())?;
            let c = cost(s)?;
            (c >= floor_ms).then_some((s, c))
        };
        let mut named_direction = false;
        for fig in [HopFig::Up, HopFig::Down] {
            if let Some((s, c)) = moved(fig) {
                if c > err {
                    named_direction = true;
                    out.push(verdict(kind, h, fig, s, c, err));
                }
            }
        }
        if !named_direction {
            if let Some((s, c)) = moved(HopFig::Net) {
                out.push(verdict(kind, h, HopFig::Net, s, c, err));
            }
        }
        if let Some((s, c)) = moved(HopFig::Relay) {
            out.push(verdict(kind, h, HopFig::Relay, s, c, err));
        }
    }
    out
}

fn verdict(
    kind: &str,
    h: &HopReport,
    fig: HopFig,
    s: &StageVsBaseline,
    cost: f64,
    err: f64,
) -> Verdict {
    let what = match fig {
        HopFig::Relay => format!(
            "the {}'s own time (where hop {}, {} → {}, ends)",
            h.to, h.hop, h.from, h.to
        ),
        HopFig::Net => format!("{}'s network", h.name()),
        _ => format!("{} {}", h.name(), fig.label()),
    };
    let how = if s.shape == "tail_only" {
        format!(
            "has a longer tail with a flat median: p99 {} → {} (×{:.2}, 95% CI {:.2}–{:.2}), {:.1}% of calls above the baseline p99 (baseline {:.1}%, p={}): a few requests are held up there",
            fmt_ms(s.p99.before), fmt_ms(s.p99.after), s.p99.ratio, s.p99.lo, s.p99.hi,
            100.0 * s.exceed, 100.0 * s.baseline_exceed, fmt_p(s.exceed_p)
        )
    } else {
        format!(
            "got slower as a whole: median {} → {} ({}, 95% CI {}–{}; Mann–Whitney p={}); p99 ×{:.2}",
            fmt_ms(s.p50.before), fmt_ms(s.p50.after), signed_ms(s.shift.estimate),
            fmt_ms(s.shift.lo), fmt_ms(s.shift.hi), fmt_p(s.mann_whitney.p), s.p99.ratio
        )
    };
    let bound = match fig {
        HopFig::Up | HopFig::Down => format!(
            ", beyond the ±{} this hop's clock split allows (its err_ms, run + baseline)",
            fmt_ms(err)
        ),
        HopFig::Net => format!(
            "; which direction is undetermined within the ±{} this hop's clock split allows (net itself is exact)",
            fmt_ms(err)
        ),
        _ => String::new(),
    };
    let todo = match fig {
        HopFig::Relay => Figure::Relay.advice().to_owned(),
        _ => format!("on that hop: {}", Figure::Net.advice()),
    };
    let f = figure(fig);
    Verdict {
        from_spikes: false,
        code: "hop_slower",
        kind: kind.to_string(),
        stage: Some(f.name()),
        group: Some(f.side().as_str()),
        text: format!("{what} {how}{bound} — {todo}."),
        evidence: json!({
            "cost_ms": cost,
            "hop": h.hop, "from": h.from, "to": h.to, "figure": fig.field(),
            "shape": s.shape, "split_err_ms": err,
            "p50_before_ms": s.p50.before, "p50_after_ms": s.p50.after,
            "p99_before_ms": s.p99.before, "p99_after_ms": s.p99.after,
            "mann_whitney_p": s.mann_whitney.p, "shift_ms": s.shift.estimate,
        }),
    }
}

/// Path-level verdicts a hop verdict says better: the path's one-way stages,
/// its network and the gateways' time together, and the verdicts saying
/// nothing (or no stage) moved.
pub(super) fn superseded(v: &Verdict) -> bool {
    let path = [
        Figure::Uplink,
        Figure::Downlink,
        Figure::Net,
        Figure::Roundtrip,
        Figure::Relay,
    ];
    match v.code {
        "steady" | "e2e_moved" => true,
        "median_shift" | "tail_only" | "network_moved" => {
            v.stage.is_some_and(|s| path.iter().any(|f| f.name() == s))
        }
        _ => false,
    }
}
