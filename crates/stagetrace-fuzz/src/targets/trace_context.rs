//! The trace context of one request as a server takes it
//! (`stagetrace_wire::TraceContext::extract`): all its `traceparent` values
//! and `tracestate` lines together, as a middle service receives them.
//!
//! An input is a list of header lines separated by `\n`: a line starting
//! with `p` is a `traceparent` value (the rest of the line), any other line a
//! `tracestate` line (after its first byte).

use stagetrace_wire::{
    TraceContext, TraceParent, TraceState, MAX_TRACESTATE_INPUT, MAX_TRACESTATE_MEMBERS,
};

use super::{ensure, Outcome, Target, DEFAULT_TEST_INPUTS};
use crate::alloc::peak_during;

const P: &str = "p00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03";

fn seeds() -> Vec<Vec<u8>> {
    let mut full = String::from(P);
    for i in 0..MAX_TRACESTATE_MEMBERS {
        full.push_str(&format!("\nsk{i}=v{i}"));
    }
    [
        P.to_owned(),
        format!("{P}\nscongo=t61rcWkgMzE\nsrojo=00f067aa0ba902b7"),
        format!("{P}\nsfoo=1,foo=2\nsfoo=3,1a@b@c=x"),
        format!("{P}\ns\ns  ,\nsfoo=1"),
        format!("{P}\n{P}\nsfoo=1"),
        "pcc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff-x\nsa=1".to_owned(),
        "sfoo=1".to_owned(),
        full,
    ]
    .into_iter()
    .map(String::into_bytes)
    .collect()
}

fn check(input: &[u8]) -> Result<Outcome, String> {
    let mut parents: Vec<&[u8]> = Vec::new();
    let mut states: Vec<&[u8]> = Vec::new();
    for line in input.split(|&c| c == b'\n') {
        match line.split_first() {
            Some((b'p', rest)) => parents.push(rest),
            Some((_, rest)) => states.push(rest),
            None => states.push(line),
        }
    }
    let (found, peak) = peak_during(|| TraceContext::extract(&parents, &states));
    ensure(found.rejected() <= 2, || "more than two rejections".into())?;
    let one_valid = match parents.as_slice() {
        [one] => TraceParent::parse_bytes(one).ok(),
        _ => None,
    };
    let Some(ctx) = found.context else {
        ensure(one_valid.is_none(), || {
            format!("dropped the valid traceparent {one_valid:?}")
        })?;
        return Ok(Outcome {
            accepted: false,
            peak_bytes: peak,
        });
    };
    ensure(one_valid == Some(ctx.parent), || {
        format!(
            "continued {:?} from {} traceparents",
            ctx.parent,
            parents.len()
        )
    })?;
    ensure(ctx.state.len() <= MAX_TRACESTATE_MEMBERS, || {
        format!("kept {} members", ctx.state.len())
    })?;
    // Every kept member follows the grammar, and no key repeats.
    let mut rebuilt = TraceState::new();
    for (k, v) in ctx.state.iter() {
        rebuilt
            .insert(k, v)
            .map_err(|e| format!("kept member {k:?}={v:?} breaks the grammar: {e}"))?;
    }
    ensure(rebuilt.len() == ctx.state.len(), || {
        "kept a repeated key".into()
    })?;
    // Without a complaint the lines are exactly the joined header.
    if found.tracestate_error.is_none() {
        let joined = states.join(&b","[..]);
        if joined.len() <= MAX_TRACESTATE_INPUT {
            let single = TraceState::parse_bytes(&joined)
                .map_err(|e| format!("lines kept whole, joined they fail: {e}"))?;
            ensure(single == ctx.state, || {
                format!("lines gave {:?}, joined {single:?}", ctx.state)
            })?;
        }
    }
    Ok(Outcome {
        accepted: true,
        peak_bytes: peak,
    })
}

/// As `tracestate` (the kept members' strings, at most the input's bytes,
/// and the member list), plus the context itself: twice the input plus
/// 4 KiB.
fn bound(len: usize) -> usize {
    2 * len + 4096
}

/// A request's `traceparent` values and `tracestate` lines
/// (`TraceContext::extract`).
pub(super) const TRACE_CONTEXT: Target = Target {
    name: "trace-context",
    max_len: MAX_TRACESTATE_INPUT + 128,
    seeds,
    dict: &[
        b"\np", b"\ns", b",", b"=", b"@", b"-01", b"-02", b"ff-", b"cc-", b" ", b"\t", b"k=v", b"A",
    ],
    check,
    mem_bound: bound,
    min_accept_share: 0.05,
    mutate: None,
    test_inputs: DEFAULT_TEST_INPUTS,
};
