//! The answer for one kind, printed before the rows: what changed, largest
//! first, in a few sentences with the figures. A figure is named only when
//! none of its parts is (a slower infer is not also a slower server and
//! roundtrip); the whole call (e2e), the hosts and the hops are said apart.

use stagetrace_schema::Figure;

use super::{CarriedOffset, GroupComparison, Row};
use crate::figures;
use crate::format::{fmt_ms, signed_ms};

/// Most changes the first sentence names; the rows below list them all.
const NAMED: usize = 3;

/// The answer's sentences for one judged kind.
pub(super) fn summary(g: &GroupComparison) -> Vec<String> {
    if g.rows.is_empty() {
        return vec!["Too few calls to compare: each figure needs two values a side.".to_string()];
    }
    let (host, call): (Vec<_>, Vec<_>) =
        changes(&g.rows).into_iter().partition(|(f, _)| f.is_host());
    let mut out = what_changed(g, &named_changes(&call));
    out.extend(whole_call(g, &call, out.is_empty()));
    out.extend(on_the_hosts(&host));
    out.extend(per_hop(g));
    out
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

/// The call's figures the first sentence may name: not the whole call or
/// its lateness (said apart, after what moved), nor a figure one of whose
/// parts moved; medians that moved first, then tails, each by size.
fn named_changes<'r>(call: &[(Figure, &'r Row)]) -> Vec<(Figure, &'r Row)> {
    let flagged: Vec<Figure> = call.iter().map(|(f, _)| *f).collect();
    let mut named: Vec<(Figure, &Row)> = call
        .iter()
        .filter(|(f, _)| !matches!(*f, Figure::E2e | Figure::Late))
        .filter(|(f, _)| !figures::descendants(*f).iter().any(|d| flagged.contains(d)))
        .copied()
        .collect();
    named.sort_by(|a, b| {
        (a.1.stat != "p50")
            .cmp(&(b.1.stat != "p50"))
            .then(b.1.delta_ms.abs().total_cmp(&a.1.delta_ms.abs()))
    });
    named
}

/// "What changed: …" (and "Also: …" after a net change whose direction
/// cannot be told): the first [`NAMED`] changes; nothing when none moved.
fn what_changed(g: &GroupComparison, named: &[(Figure, &Row)]) -> Vec<String> {
    let unknown: Vec<&Row> = g
        .rows
        .iter()
        .filter(|r| r.direction_unknown && r.stat == "p50")
        .collect();
    let mut items: Vec<String> = Vec::new();
    let mut net_sentence = None;
    for (f, r) in named.iter().take(NAMED) {
        if *f == Figure::Net && !unknown.is_empty() {
            net_sentence = Some(match &g.carried {
                Some(c) => net_with_carried_offset(r, c),
                None => net_without_direction(g, r, &unknown),
            });
        } else if figures::is_one_way(*f) {
            items.push(one_way_change(g, *f, r));
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
        (false, Some(net)) => vec![
            format!("What changed: {net}"),
            format!("Also: {}{more}.", items.join("; ")),
        ],
        (true, Some(net)) => vec![format!("What changed: {net}")],
        (false, None) => vec![format!("What changed: {}{more}.", items.join("; "))],
        (true, None) => Vec::new(),
    }
}

/// Net moved and the split cannot say which way: the change, what the
/// split reads within its bound, and how to tell.
fn net_without_direction(g: &GroupComparison, net: &Row, unknown: &[&Row]) -> String {
    let split: Vec<String> = unknown
        .iter()
        .map(|u| format!("{} {}", u.stage, signed_ms(u.delta_ms)))
        .collect();
    format!(
        "{}; which direction cannot be told: the split reads {}, each within the clock split's ± {} (both runs estimate the server's clock offset, docs/clocks.md). To tell, record both runs with synchronised clocks (--clock trusted), or vary the link within one run, which holds the offset (stagetrace experiment).",
        change("net (uplink + downlink, exact)", net),
        split.join(" and "),
        fmt_ms(g.split_err_ms.unwrap_or(f64::NAN))
    )
}

/// Net moved, the split cannot say which way, and the user stated a drift
/// bound: the baseline's offset carried names the direction when the drift
/// over the time between the runs is smaller than the change.
fn net_with_carried_offset(net: &Row, c: &CarriedOffset) -> String {
    let how = format!(
        "the baseline's clock offset carried to the run (the clocks drift apart by at most {} ppm, over the {:.0} s from the first run's first call to the second's last: ± {})",
        c.drift_ppm,
        c.elapsed_s,
        fmt_ms(c.bound_ms)
    );
    let moved = c.moved(net.min_effect_ms);
    let each = format!(
        "uplink {}, downlink {}",
        signed_ms(c.uplink_ms),
        signed_ms(c.downlink_ms)
    );
    if moved.is_empty() {
        return format!(
            "{}; which direction cannot be told even with {how}: {each}, neither beyond ± {}. To tell, record both runs closer together or with synchronised clocks (--clock trusted), or vary the link within one run (stagetrace experiment).",
            change("net (uplink + downlink, exact)", net),
            fmt_ms(c.bound_ms.max(net.min_effect_ms))
        );
    }
    let named: Vec<&str> = moved.iter().map(|(f, _)| f.name()).collect();
    let stayed = if moved.len() == 1 {
        let other = if moved[0].0 == Figure::Uplink {
            "downlink"
        } else {
            "uplink"
        };
        format!(", the {other} unchanged within it")
    } else {
        String::new()
    };
    format!(
        "{}; with {how}, it is the {}: {each}{stayed}.",
        change("net (uplink + downlink, exact)", net),
        named.join(" and the ")
    )
}

/// A direction told: its change, and that the other one stayed, when it did.
fn one_way_change(g: &GroupComparison, f: Figure, r: &Row) -> String {
    let other = Figure::Net.parts().iter().find(|o| **o != f);
    let still = other.and_then(|o| {
        g.rows.iter().find(|x| {
            x.stage == o.name() && x.stat == "p50" && !x.significant && !x.direction_unknown
        })
    });
    match still {
        Some(x) => format!(
            "{}, {} unchanged (p50 {} → {})",
            change(f.name(), r),
            x.stage,
            fmt_ms(x.before),
            fmt_ms(x.after)
        ),
        None => change(f.name(), r),
    }
}

/// The whole call's sentence: e2e's change with its lateness; that e2e did
/// not move when something else did; or that nothing moved at all.
fn whole_call(g: &GroupComparison, call: &[(Figure, &Row)], nothing_said: bool) -> Option<String> {
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
    match (call.iter().find(|(f, _)| *f == Figure::E2e), nothing_said) {
        (Some((_, r)), _) => Some(format!("The whole call: {}{late}.", change("e2e", r))),
        (None, false) => e2e.map(|r| {
            format!(
                "The whole call (e2e) did not move beyond noise: p50 {} → {}.",
                fmt_ms(r.before),
                fmt_ms(r.after)
            )
        }),
        (None, true) => {
            let floor = g.rows.first().map_or(f64::NAN, |r| r.min_effect_ms);
            let e2e = e2e.map_or(String::new(), |r| {
                format!(" (e2e p50 {} → {})", fmt_ms(r.before), fmt_ms(r.after))
            });
            Some(format!(
                "Nothing changed beyond noise: no figure moved by a significant amount of at least {}{e2e}.",
                fmt_ms(floor)
            ))
        }
    }
}

/// The hosts' changes (inside the stages), largest first.
fn on_the_hosts(host: &[(Figure, &Row)]) -> Option<String> {
    if host.is_empty() {
        return None;
    }
    let mut host = host.to_vec();
    host.sort_by(|a, b| b.1.delta_ms.abs().total_cmp(&a.1.delta_ms.abs()));
    let list: Vec<String> = host
        .iter()
        .take(NAMED)
        .map(|(f, r)| change(f.name(), r))
        .collect();
    Some(format!(
        "On the hosts (inside the stages, docs/host.md): {}.",
        list.join("; ")
    ))
}

/// The hops' largest median change, and how many more hop rows moved.
fn per_hop(g: &GroupComparison) -> Option<String> {
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
    let (name, r) = hop_moves
        .iter()
        .max_by(|a, b| a.1.delta_ms.abs().total_cmp(&b.1.delta_ms.abs()))?;
    Some(format!(
        "Per hop: {}{}.",
        change(name, r),
        if hop_moves.len() > 1 {
            format!("; {} more hop row(s) below", hop_moves.len() - 1)
        } else {
            String::new()
        }
    ))
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
    // A figure that was 0 before (a host's wait that never happened) has
    // no ratio to give.
    let pct = if r.delta_pct.is_finite() {
        format!(", {:+.1} %", r.delta_pct)
    } else {
        String::new()
    };
    format!(
        "{name} {} by {} at {} ({} → {}{pct})",
        if r.delta_ms >= 0.0 {
            "slower"
        } else {
            "faster"
        },
        fmt_ms(r.delta_ms.abs()),
        r.stat,
        fmt_ms(r.before),
        fmt_ms(r.after),
    )
}
