//! One fuzz target per parser that takes untrusted input: what it is fed
//! with, how it is called, and what must hold of what it accepts.

use crate::mutate::Mutator;

mod analyze;
mod msgpack;
pub mod parquet;
mod timing_chain;
mod trace_context;
mod wire;

/// What one input did, when nothing was violated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The parser accepted the input (and its value passed every check).
    pub accepted: bool,
    /// Most bytes held at once during the parse itself (not the checks).
    pub peak_bytes: usize,
}

/// A structure-aware mutator: writes into `out` a mutant of `base`
/// (`other` is a second corpus entry), drawing every choice from the
/// mutator's seeded generator.
pub type MutateFn = fn(m: &mut Mutator, base: &[u8], other: &[u8], out: &mut Vec<u8>);

/// A parser under fuzzing.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    /// Name on the command line and in failure files.
    pub name: &'static str,
    /// Longest input generated: a little beyond the parser's own length
    /// cap, so the "too long" branch is reached too.
    pub max_len: usize,
    /// Valid inputs (from the project's own encoders) and edge cases.
    pub seeds: fn() -> Vec<Vec<u8>>,
    /// Tokens of the format, inserted whole by the mutator.
    pub dict: &'static [&'static [u8]],
    /// Parses one input and checks the invariants; `Err` names the broken
    /// one.
    pub check: fn(&[u8]) -> Result<Outcome, String>,
    /// Most bytes one parse may hold for an input of this length (the
    /// reason is stated where each target defines it).
    pub mem_bound: fn(usize) -> usize,
    /// Least share of inputs the parser must accept: below it the mutants
    /// never reach the accepting branch and the fuzzing tests little.
    pub min_accept_share: f64,
    /// A structure-aware mutator for formats whose damage the generic
    /// byte mutations rarely reach (`None`: [`Mutator::mutate`] alone).
    pub mutate: Option<MutateFn>,
    /// Inputs of the bounded run of `cargo test` (a fixed count; a target
    /// whose every input decodes a whole file runs fewer).
    pub test_inputs: u64,
}

/// Inputs per target of the bounded run of `cargo test`: the byte-string
/// parsers together take about 8 s in a debug build on a 2-core machine.
pub const DEFAULT_TEST_INPUTS: u64 = 100_000;

/// Every target, in a fixed order.
pub fn all() -> Vec<Target> {
    vec![
        wire::TRACEPARENT,
        wire::TRACESTATE,
        trace_context::TRACE_CONTEXT,
        wire::TIMING_HEADER,
        wire::SERVER_TIMING,
        msgpack::TIMING_MAP,
        timing_chain::TIMING_CHAIN,
        timing_chain::TIMING_CHAIN_HEADER,
        msgpack::MSG_MAP,
        analyze::RECORD,
        analyze::GATE,
        parquet::PARQUET,
    ]
}

/// The target named `name`.
pub fn by_name(name: &str) -> Option<Target> {
    all().into_iter().find(|t| t.name == name)
}

/// `Err(msg)` unless `cond`: the invariant checks read as sentences.
pub(crate) fn ensure(cond: bool, msg: impl FnOnce() -> String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(msg())
    }
}
