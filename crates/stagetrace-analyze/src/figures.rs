//! Which figures of the schema's table (`stagetrace-schema`) the analysis
//! reads, and how they stand in for one another when a run lacks some.
//!
//! No list of figures is kept here: the rules below go by the table's
//! groups and parts, and name only the sums that stand in for missing
//! stages (`net`, `roundtrip`, `server`) and the gap. A stage added to the
//! table is read, tabled, tested and drawn with no change here.

use stagetrace_schema::{Figure, Group, Side, Unit};

/// Whether the analysis reads a figure into its tables, shapes and verdicts:
/// every figure but the clock's (`offset`, `split_err`), which say what the
/// uplink/downlink split rests on rather than how long a part of the call
/// took, and the action queue's `margin`, which is not a time the call
/// spent (a larger one is better: its spikes are no fault) and has a
/// verdict of its own (`analysis/async_queue.rs`). The loader keeps those
/// too ([`crate::load::Dataset::value`]).
pub fn is_read(f: Figure) -> bool {
    f.group() != Group::Clock && f != Figure::Margin
}

/// The figures the analysis reads ([`is_read`]), in display order.
pub fn read() -> impl Iterator<Item = Figure> + Clone {
    Figure::ALL.into_iter().filter(|f| is_read(*f))
}

/// Divisor from a value in `unit` to milliseconds, the one unit every
/// column of the analysis shares (`observer_us` is shown in ms too). A
/// division by an exact power of ten keeps `_ms` values bit for bit.
pub(crate) fn per_ms(unit: Unit) -> f64 {
    Unit::Millis.ns() as f64 / unit.ns() as f64
}

/// Every figure `f` is made of, at any depth, in table order (`server`:
/// queue, infer and their parts; `e2e`: the stages, their parts, the
/// sums between them and, through the gap, the observer).
pub(crate) fn descendants(f: Figure) -> Vec<Figure> {
    let mut out: Vec<Figure> = Vec::new();
    let mut todo: Vec<Figure> = f.parts().to_vec();
    while let Some(p) = todo.pop() {
        if !out.contains(&p) {
            out.push(p);
            todo.extend_from_slice(p.parts());
        }
    }
    out.sort_unstable();
    out
}

/// The tightest figure among `among` that holds `f` at any depth (the one
/// made of the fewest figures): where a text shows `f` "of which" (`pre`
/// under `infer`, `infer` under `server`, the observer under the gap).
/// `None` when none of them holds it.
pub(crate) fn container(f: Figure, among: impl Iterator<Item = Figure>) -> Option<Figure> {
    among
        .filter(|c| *c != f)
        .map(|c| (descendants(c), c))
        .filter(|(d, _)| d.contains(&f))
        .min_by_key(|(d, _)| d.len())
        .map(|(_, c)| c)
}

/// Whether `f` is the gap, what it is made of or what it is part of: the
/// figures that move when the call's unexplained time moves (`gap`,
/// `observer`, `e2e`).
pub(crate) fn is_gap_related(f: Figure) -> bool {
    f == Figure::Gap || Figure::Gap.parts().contains(&f) || f.parts().contains(&Figure::Gap)
}

/// The figures the analysis reads ([`read`]) in the order the tables show
/// them: the table's order, except that a part the table lists past a later
/// stage comes right under the figure it is a part of (infer's `pre`,
/// `model` — with its `device` — and `post` under `infer`, queue's
/// `accept_wait` and `loop_wait` under `queue`). Parts already next to
/// their sum (dispatch's `exec_tx`, the gap's observer) keep their place.
pub fn display_order() -> Vec<Figure> {
    let stage_between = |sum: Figure, part: Figure| {
        Figure::STAGES
            .iter()
            .any(|s| sum.index() < s.index() && s.index() < part.index())
    };
    // The figures shown under a sum: such parts and what they are made of.
    let pulled: Vec<Figure> = read()
        .flat_map(|f| f.parts().iter().map(move |p| (f, *p)))
        .filter(|(f, p)| stage_between(*f, *p))
        .flat_map(|(_, p)| std::iter::once(p).chain(descendants(p)))
        .collect();
    fn with_parts(f: Figure, pulled: &[Figure], out: &mut Vec<Figure>) {
        out.push(f);
        for &p in f.parts() {
            if pulled.contains(&p) && is_read(p) && !out.contains(&p) {
                with_parts(p, pulled, out);
            }
        }
    }
    let mut out = Vec::new();
    for f in read().filter(|f| !pulled.contains(f)) {
        with_parts(f, &pulled, &mut out);
    }
    out
}

/// The figures of the call's own timeline in the order the tables show
/// them ([`display_order`] without the host figures): the stages in call
/// order, each stage's parts right under it, then the sums, the gap and
/// lateness.
pub fn call_rows() -> Vec<Figure> {
    display_order()
        .into_iter()
        .filter(|f| !f.is_host())
        .collect()
}

/// The host figures in the order their own table shows them: the robot's,
/// then the policy server's (`server_…`), each in the figure table's order.
pub fn host_rows() -> Vec<Figure> {
    let mut rows: Vec<Figure> = read().filter(|f| f.is_host()).collect();
    rows.sort_by_key(|f| (f.side() == Side::Server, f.index()));
    rows
}

/// The stage named by the name a user wrote: a figure's short or record
/// name (`infer`, `infer_ms`), or the span names the docs tell users to
/// write — `transport` (the client's span around send → response, which
/// the records call `roundtrip`) and `call` (the whole call, `e2e`).
pub fn from_user_name(name: &str) -> Option<Figure> {
    match name {
        "transport" => Some(Figure::Roundtrip),
        "call" => Some(Figure::E2e),
        _ => Figure::from_name(name),
    }
}

/// The names [`from_user_name`] reads besides the figures' own, with the
/// figure each stands for: for messages that list what is accepted.
pub const USER_NAMES: [(&str, Figure); 2] =
    [("transport", Figure::Roundtrip), ("call", Figure::E2e)];

/// A one-way stage: one of the parts of `net`.
pub(crate) fn is_one_way(stage: Figure) -> bool {
    Figure::Net.parts().contains(&stage)
}

/// A stage between send and response (one-way stage or server): one of the parts
/// of `roundtrip`.
fn is_in_roundtrip(stage: Figure) -> bool {
    Figure::Roundtrip.parts().contains(&stage)
}

/// The part of a silent server's black box (`ttfb`, `rx`) that stands in
/// for a stage between send and response, when the run has both: the
/// response's transfer for the downlink, the wait for its first byte for
/// everything before it. `None` without them (then `roundtrip` stands in).
fn black_box_part(stage: Figure, has: &impl Fn(Figure) -> bool) -> Option<Figure> {
    (has(Figure::Ttfb) && has(Figure::Rx)).then_some(if stage == Figure::Downlink {
        Figure::Rx
    } else {
        Figure::Ttfb
    })
}

/// Keeps the figures the run has, each once, in the order given.
fn present(figures: impl Iterator<Item = Figure>, has: impl Fn(Figure) -> bool) -> Vec<Figure> {
    let mut out: Vec<Figure> = Vec::new();
    for f in figures {
        if has(f) && !out.contains(&f) {
            out.push(f);
        }
    }
    out
}

/// The figures stacked per call on the HTML timeline, in display order: the
/// stages and the gap. Without the one-way split `net` stands in for the one-way
/// stages, and without `net` the black box of a server that reports no
/// timing (`ttfb`, `rx`), or else `roundtrip`, for everything between send
/// and response; figures the run lacks are left out.
pub(crate) fn stacked(has: impl Fn(Figure) -> bool) -> Vec<Figure> {
    let link_split = Figure::Net.parts().iter().any(|p| has(*p));
    let stand_in = |stage: Figure| {
        if link_split || !is_in_roundtrip(stage) {
            stage
        } else if has(Figure::Net) {
            if is_one_way(stage) {
                Figure::Net
            } else {
                stage
            }
        } else {
            black_box_part(stage, &has).unwrap_or(Figure::Roundtrip)
        }
    };
    let figures = Figure::STAGES
        .into_iter()
        .map(stand_in)
        .chain([Figure::Gap]);
    present(figures, &has)
}

/// The figures that make up e2e without overlap, for its variance shares:
/// the client stages, the one-way stages (or `net`, or the black box `ttfb` +
/// `rx`, or `roundtrip`), the server
/// total (or its stages), and the gap. Figures the run lacks are left out.
pub(crate) fn e2e_parts(has: impl Fn(Figure) -> bool) -> Vec<Figure> {
    let link_split = Figure::Net.parts().iter().all(|p| has(*p));
    let stand_in = |stage: Figure| -> Option<Figure> {
        if !is_in_roundtrip(stage) {
            return Some(stage);
        }
        let one_way = is_one_way(stage);
        if link_split {
            // The server total also covers what lies between its stages.
            Some(if !one_way && has(Figure::Server) {
                Figure::Server
            } else {
                stage
            })
        } else if has(Figure::Net) && has(Figure::Server) {
            Some(if one_way { Figure::Net } else { Figure::Server })
        } else if let Some(part) = black_box_part(stage, &has) {
            Some(part)
        } else if has(Figure::Roundtrip) {
            Some(Figure::Roundtrip)
        } else {
            // No transport figure at all: the server stages alone.
            (!one_way).then_some(stage)
        }
    };
    let figures = Figure::STAGES
        .into_iter()
        .filter_map(stand_in)
        .chain([Figure::Gap]);
    present(figures, &has)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_figure_but_the_clocks_and_the_margin_is_read() {
        for f in Figure::ALL {
            let expected = f.group() != Group::Clock && f != Figure::Margin;
            assert_eq!(is_read(f), expected, "{f}");
        }
        assert!(Figure::ALL
            .into_iter()
            .filter(|f| f.is_call_time())
            .all(is_read));
        assert!(is_read(Figure::Observer) && is_read(Figure::Late));
    }

    #[test]
    fn stand_ins_follow_what_the_run_carries() {
        use Figure as F;
        let with = |set: &[Figure]| {
            let set = set.to_vec();
            move |f: Figure| set.contains(&f)
        };
        // A full record's call-time figures and the observer: the table up to `late`.
        let full = &Figure::ALL[..F::Late.index()];
        // The six stages, then the gap.
        assert_eq!(
            stacked(with(full)),
            [&Figure::STAGES[..], &[F::Gap]].concat()
        );
        assert_eq!(
            e2e_parts(with(full)),
            [
                F::Capture,
                F::Uplink,
                F::Server,
                F::Downlink,
                F::Dispatch,
                F::Gap
            ]
        );
        // No clock split: net stands in for the one-way stages.
        let no_split = [
            F::Queue,
            F::Infer,
            F::Roundtrip,
            F::Server,
            F::Net,
            F::E2e,
            F::Gap,
        ];
        assert_eq!(
            stacked(with(&no_split)),
            [F::Net, F::Queue, F::Infer, F::Gap]
        );
        assert_eq!(e2e_parts(with(&no_split)), [F::Net, F::Server, F::Gap]);
        // Only the model's time: roundtrip stands in for the transport.
        let degraded = [F::Infer, F::Roundtrip, F::E2e, F::Gap];
        assert_eq!(stacked(with(&degraded)), [F::Roundtrip, F::Gap]);
        assert_eq!(e2e_parts(with(&degraded)), [F::Roundtrip, F::Gap]);
        // A server that reports no timing, with first-byte stamps: the
        // black box's two parts stand in for the transport, never infer.
        let silent = [F::Roundtrip, F::Ttfb, F::Rx, F::E2e, F::Gap];
        assert_eq!(stacked(with(&silent)), [F::Ttfb, F::Rx, F::Gap]);
        assert_eq!(e2e_parts(with(&silent)), [F::Ttfb, F::Rx, F::Gap]);
        // No transport figure at all: the server stages.
        let server_only = [F::Queue, F::Infer, F::E2e];
        assert_eq!(e2e_parts(with(&server_only)), [F::Queue, F::Infer]);
    }

    #[test]
    fn nesting_and_the_gaps_relatives() {
        use Figure as F;
        let related: Vec<Figure> = Figure::ALL
            .into_iter()
            .filter(|f| is_gap_related(*f))
            .collect();
        // The gap holds the observer and a remote executor's ack.
        assert_eq!(related, [F::E2e, F::Gap, F::Observer, F::ExecAck]);
        // Inference's parts, the model's device time inside it.
        assert_eq!(
            descendants(F::Infer),
            [F::Pre, F::Model, F::Post, F::Device]
        );
        assert_eq!(
            descendants(F::Server),
            [
                F::Queue,
                F::Infer,
                F::Pre,
                F::Model,
                F::Post,
                F::Device,
                F::AcceptWait,
                F::LoopWait
            ]
        );
        // e2e holds every stage, their parts and the sums between them.
        let e2e = descendants(F::E2e);
        for f in Figure::STAGES.into_iter().chain([
            F::ExecTx,
            F::ExecWait,
            F::Ttfb,
            F::Rx,
            F::Observer,
            F::ExecAck,
            F::Pre,
            F::Device,
            F::LoopWait,
            F::Server,
            F::Net,
        ]) {
            assert!(e2e.contains(&f), "{f}");
        }
        assert!(!e2e.contains(&F::E2e) && !e2e.contains(&F::TxWait));
        // The tightest holder is the one a text nests a figure under.
        let shares = [
            F::Uplink,
            F::Server,
            F::Queue,
            F::Infer,
            F::Pre,
            F::Gap,
            F::Observer,
        ];
        let under = |f: Figure| container(f, shares.into_iter());
        assert_eq!(under(F::Pre), Some(F::Infer));
        assert_eq!(under(F::Infer), Some(F::Server));
        assert_eq!(under(F::Observer), Some(F::Gap));
        assert_eq!(under(F::Server), None);
        assert_eq!(under(F::Uplink), None);
    }

    /// The parts the table lists after a later stage come right under
    /// their sum; every other figure keeps the table's order.
    #[test]
    fn parts_of_a_stage_show_under_it() {
        use Figure as F;
        let order = display_order();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, read().collect::<Vec<_>>(), "each read figure once");
        let at = |f: Figure| order.iter().position(|x| *x == f).unwrap();
        assert_eq!(
            &order[at(F::Queue)..=at(F::Infer) + 4],
            [
                F::Queue,
                F::AcceptWait,
                F::LoopWait,
                F::Infer,
                F::Pre,
                F::Model,
                F::Device,
                F::Post
            ]
        );
        assert_eq!(order[at(F::Post) + 1], F::Downlink);
        // The rest as before.
        let rest: Vec<Figure> = order
            .iter()
            .copied()
            .filter(|f| !descendants(F::Infer).contains(f) && !descendants(F::Queue).contains(f))
            .collect();
        let table: Vec<Figure> = read()
            .filter(|f| !descendants(F::Infer).contains(f) && !descendants(F::Queue).contains(f))
            .collect();
        assert_eq!(rest, table);
    }
}
