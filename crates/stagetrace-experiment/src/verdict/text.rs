//! The verdict's words: the next step for the figure that moved first, and
//! the summary sentence.

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

/// Where to look when `f` moved first. Exhaustive on purpose: a figure
/// added to the schema table gets its own advice.
fn figure_step(f: Figure) -> &'static str {
    match f {
        Figure::Queue | Figure::Infer | Figure::Server => {
            "inference moved first under load: limit concurrency, queue with timeouts, then batching"
        }
        Figure::Uplink | Figure::Downlink | Figure::Net | Figure::Roundtrip => {
            "transport moved first: look at bandwidth, frame size and retransmits — compress or lower the frame rate; retries only hide jitter"
        }
        Figure::Relay => {
            "the relay (gateway) on the way moved first: its load, its queue and its own hops — the record's hops show which link or relay"
        }
        Figure::Ttfb => {
            "the wait for the response's first byte moved first: server and network together, a black box (the server reports no timing) — add server timing (docs/protocol.md) to tell inference from the network"
        }
        Figure::Rx => {
            "the response's transfer moved first: downlink bandwidth or the response's size"
        }
        Figure::Dispatch => {
            "dispatch moved first: the executor queue, the bus, or a control period blocked by the last action — merge commands, drop stale actions"
        }
        Figure::ExecWait => {
            "the executor's wait moved first: its task queue, bus occupancy, or a control cycle blocked by the previous action — merge commands, drop stale actions"
        }
        Figure::ExecRelay => {
            "the gateway on the way to the executor moved first: its load, its queue and its own hops"
        }
        Figure::ExecTx => {
            "the chunk's way to the executor moved first: the network to the executor (bandwidth, chunk size, a gateway on the way)"
        }
        Figure::ExecAck => {
            "the executor's ack came back later first: the network back from the executor (the action had already started)"
        }
        Figure::Capture => {
            "capture moved first: the camera path (driver, exposure, copies) competes for the same resource"
        }
        Figure::Gap
        | Figure::E2e
        | Figure::Observer
        | Figure::Late
        | Figure::Offset
        | Figure::SplitErr
        | Figure::ExecOffset
        | Figure::ExecErr => {
            "all stages flat but the calls took longer: client scheduling, memory reclamation (GC), logging, or the observer — the gap and the observer's own figures show it"
        }
        Figure::RunWait
        | Figure::ServerRunWait
        | Figure::CpuStall
        | Figure::ServerCpuStall
        | Figure::RxWait
        | Figure::ServerRxWait
        | Figure::CaptureRunWait
        | Figure::DispatchRunWait
        | Figure::TxWait => {
            "the host ran short of CPU first: pin or reserve cores for the loop, move the other load off them (docs/host.md)"
        }
        Figure::Gc | Figure::ServerGc => {
            "the garbage collector paused the loop first: preallocate, keep cyclic garbage out of the loop, gc.freeze() after start-up (docs/host.md)"
        }
        Figure::PollWait => {
            "the ready chunk waited for the robot's poll first: poll sooner (docs/lerobot.md)"
        }
        Figure::Margin => {
            "the action queue's margin shrank first: raise the refill threshold or cut infer (docs/lerobot.md)"
        }
        Figure::Pre => {
            "pre-processing moved first: decoding and resizing frames, normalisation, data loading — move them to the robot or the GPU, load ahead"
        }
        Figure::Model | Figure::Device => {
            "the model moved first: it competes for the device — limit concurrency, then batching, half precision or a compiled model"
        }
        Figure::Post => {
            "post-processing moved first: un-normalising and decoding actions, or device work that lands after the model stage (docs/stages.md)"
        }
        Figure::AcceptWait => {
            "the wait for a server worker moved first: every worker was busy — raise max_workers, or stop handlers from blocking one"
        }
        Figure::LoopWait => {
            "the server's event loop was blocked first: run infer off the loop (run_in_executor, a worker thread)"
        }
        Figure::ServerTxWait => {
            "the server's send waited for a core first: pin or reserve cores for the policy server (docs/host.md)"
        }
        Figure::LogWrite => {
            "the robot's own log writing moved first: take it off the control thread with a non-blocking writer (docs/host.md)"
        }
    }
}

/// The next step: where to look for `f`, what its shape says, what the
/// resources say.
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
    [figure_step(f), shape_step, res_step]
        .iter()
        .filter(|s| !s.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join("; ")
}

/// The verdict in a sentence or three.
pub(crate) fn summary(x: &Findings<'_>) -> String {
    let (l, fc) = (x.level, x.result);
    let ratio = fc
        .p50_ratio
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
        .unwrap_or_default();
    let mut summary = if let (Figure::Net, Some(why)) = (x.first, x.undetermined) {
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
    };
    if let Some(p) = x.spike_period_s {
        summary.push_str(&format!(" Spikes repeat every {p:.2} s."));
    }
    if !x.dragged.is_empty() {
        let d: Vec<String> = x
            .dragged
            .iter()
            .map(|(f, l)| {
                // The statistic that moved, as the table shows it: a
                // dragged stage is never listed beside a flat ×1.0.
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
            .collect();
        summary.push_str(&format!(" Dragged along: {}.", d.join(", ")));
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
