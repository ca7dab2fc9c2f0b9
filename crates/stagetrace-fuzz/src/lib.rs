//! Mutation fuzzing of every parser stagetrace feeds untrusted input to,
//! on stable Rust (`docs/architecture.md` §8).
//!
//! One [`Target`](targets::Target) per parser: `traceparent`, `tracestate`,
//! a request's trace context (`trace-context`: several of both), the `stagetrace-timing` and `Server-Timing` headers, the msgpack
//! `server_timing` map, a whole msgpack message (`MsgMap`), the record
//! loader, the `--fail-if` gate expression and the Parquet reader (`parquet`:
//! whole files, mutated where Parquet keeps its structure by a
//! structure-aware mutator of its own, [`targets::MutateFn`]). Each is fed mutants of valid
//! inputs made by the project's own encoders and of hand-picked edge cases
//! ([`mutate`]), deterministic from a seed, and checks invariants on what
//! the parser accepts — floats finite, values within the parser's
//! documented bounds, re-encoding and parsing again gives the same value —
//! and the most memory one parse holds, measured by a counting global
//! allocator ([`alloc`]) against a bound stated per target. Panics are
//! caught and counted as failures.
//!
//! `cargo test -p stagetrace-fuzz` (part of `cargo xtask test`) runs a fixed
//! number of inputs per target; `cargo xtask fuzz` runs ten million per
//! target in a release build (`src/main.rs`).

pub mod alloc;
pub mod driver;
pub mod mutate;
pub mod targets;
