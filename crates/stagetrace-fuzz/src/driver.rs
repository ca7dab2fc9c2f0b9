//! Runs a target: mutants of its corpus through its check, every call
//! inside `catch_unwind`, counting what was accepted, rejected and broken.

use std::collections::hash_map::DefaultHasher;
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::mutate::Mutator;
use crate::targets::{Outcome, Target};

/// Accepted mutants kept as extra corpus entries, so the fuzzer goes on
/// from inputs that already passed the parser.
const KEPT_ACCEPTED: usize = 256;
/// Failures written out per run; later ones are counted only.
const MAX_FAILURE_FILES: usize = 16;

/// One input that broke an invariant, panicked or overran its memory bound.
#[derive(Clone, Debug)]
pub struct Failure {
    /// Index of the input in the run (the run is deterministic from its seed).
    pub index: u64,
    /// What went wrong.
    pub reason: String,
    /// The input.
    pub input: Vec<u8>,
    /// Where it was written, when it was.
    pub file: Option<PathBuf>,
}

/// What one run of a target did.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Inputs run.
    pub inputs: u64,
    /// Inputs the parser accepted (and whose value passed every check).
    pub accepted: u64,
    /// Inputs the parser rejected.
    pub rejected: u64,
    /// Inputs whose parse panicked.
    pub panics: u64,
    /// Inputs that broke an invariant or the memory bound.
    pub violations: u64,
    /// Most bytes one parse held.
    pub peak_bytes: usize,
    /// Length of the input that held them.
    pub peak_input_len: usize,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// The first failures, in order.
    pub failures: Vec<Failure>,
}

impl Stats {
    /// Share of inputs accepted.
    pub fn accept_share(&self) -> f64 {
        self.accepted as f64 / self.inputs.max(1) as f64
    }

    fn note_peak(&mut self, peak: usize, len: usize) {
        if peak > self.peak_bytes {
            self.peak_bytes = peak;
            self.peak_input_len = len;
        }
    }

    /// One line for the terminal.
    pub fn line(&self, name: &str) -> String {
        let secs = self.elapsed.as_secs_f64();
        format!(
            "{name:<14} {:>11} inputs  {:>5.1} % accepted  {:>11} rejected  {} panics  {} violations  \
             peak {} B (input {} B)  {:>9.0} inputs/s  {:.1} s",
            self.inputs,
            100.0 * self.accept_share(),
            self.rejected,
            self.panics,
            self.violations,
            self.peak_bytes,
            self.peak_input_len,
            self.inputs as f64 / secs.max(1e-9),
            secs,
        )
    }
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(2 * bytes.len());
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Runs one input through `target`: what it did, or why it failed (a
/// panic, a broken invariant, more memory than the target's bound).
pub fn run_one(target: &Target, input: &[u8]) -> Result<Outcome, String> {
    match panic::catch_unwind(AssertUnwindSafe(|| (target.check)(input))) {
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            Err(format!("panic: {msg}"))
        }
        Ok(Err(why)) => Err(why),
        Ok(Ok(o)) => {
            let bound = (target.mem_bound)(input.len());
            if o.peak_bytes > bound {
                return Err(format!(
                    "held {} bytes for a {}-byte input, bound {bound}",
                    o.peak_bytes,
                    input.len()
                ));
            }
            Ok(o)
        }
    }
}

/// Where failing inputs go: `target/fuzz-failures/` of the workspace.
pub fn failure_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap_or(Path::new("."))
        .join("target/fuzz-failures")
}

fn save(target: &Target, input: &[u8]) -> Option<PathBuf> {
    let mut h = DefaultHasher::new();
    input.hash(&mut h);
    let dir = failure_dir();
    std::fs::create_dir_all(&dir).ok()?;
    let path = dir.join(format!("{}-{:016x}.bin", target.name, h.finish()));
    std::fs::write(&path, input).ok()?;
    Some(path)
}

/// Runs `inputs` mutants of `target`'s corpus, deterministic from `seed`.
/// Panics are caught and counted (their default message is silenced for
/// the run); each failure is printed with the seed and its input in hex,
/// and written to [`failure_dir`].
pub fn run(target: &Target, inputs: u64, seed: u64) -> Stats {
    let seeds = (target.seeds)();
    let mut kept: Vec<Vec<u8>> = Vec::with_capacity(KEPT_ACCEPTED);
    let mut next_kept = 0;
    let mut m = Mutator::new(seed, target.dict, target.max_len);
    let mut stats = Stats::default();
    let mut input = Vec::with_capacity(target.max_len);
    let hook = panic::take_hook();
    panic::set_hook(Box::new(|_| {}));
    let started = Instant::now();
    for index in 0..inputs {
        let pool = seeds.len() + kept.len();
        let pick = |k: usize| {
            if k < seeds.len() {
                &seeds[k]
            } else {
                &kept[k - seeds.len()]
            }
        };
        let (a, b) = (m.below(pool), m.below(pool));
        // The seeds themselves go first: they must pass as they are.
        if index < seeds.len() as u64 {
            input.clear();
            input.extend_from_slice(&seeds[index as usize]);
        } else {
            match target.mutate {
                Some(mutate) => mutate(&mut m, pick(a), pick(b), &mut input),
                None => m.mutate(pick(a), pick(b), &mut input),
            }
        }
        stats.inputs += 1;
        match run_one(target, &input) {
            Ok(o) if o.accepted => {
                stats.accepted += 1;
                stats.note_peak(o.peak_bytes, input.len());
                if kept.len() < KEPT_ACCEPTED {
                    kept.push(input.clone());
                } else if m.below(16) == 0 {
                    kept[next_kept] = input.clone();
                    next_kept = (next_kept + 1) % KEPT_ACCEPTED;
                }
            }
            Ok(o) => {
                stats.rejected += 1;
                stats.note_peak(o.peak_bytes, input.len());
            }
            Err(reason) => {
                if reason.starts_with("panic:") {
                    stats.panics += 1;
                } else {
                    stats.violations += 1;
                }
                if stats.failures.len() < MAX_FAILURE_FILES {
                    let file = save(target, &input);
                    eprintln!(
                        "FUZZ FAILURE target {} seed {seed} input #{index}: {reason}\n  input ({} bytes, hex): {}\n  written to {}",
                        target.name,
                        input.len(),
                        hex(&input),
                        file.as_deref().map_or("(not written)".into(), |p| p.display().to_string()),
                    );
                    stats.failures.push(Failure {
                        index,
                        reason,
                        input: input.clone(),
                        file,
                    });
                }
            }
        }
    }
    stats.elapsed = started.elapsed();
    panic::set_hook(hook);
    stats
}
