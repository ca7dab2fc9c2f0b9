//! The bounded fuzz run of `cargo xtask test`: a fixed number of inputs per
//! target (counted, not timed), every invariant checked, and each target's
//! mutants reaching the parser's accepting branch on a meaningful share.
//! `cargo xtask fuzz` runs the same targets for ten million inputs each.

use stagetrace_fuzz::{driver, targets};

const SEED: u64 = 0x5eed;

#[test]
fn every_parser_holds_its_invariants_on_mutated_input() {
    // One test: the run silences the panic hook while it catches panics,
    // and a second test in parallel would race with that.
    for t in targets::all() {
        for seed in (t.seeds)() {
            driver::run_one(&t, &seed)
                .unwrap_or_else(|e| panic!("{} seed {}: {e}", t.name, driver::hex(&seed)));
        }
    }
    let mut report = Vec::new();
    for t in targets::all() {
        let s = driver::run(&t, t.test_inputs, SEED);
        eprintln!("{}", s.line(t.name));
        assert_eq!(s.inputs, t.test_inputs);
        assert_eq!(
            s.accepted + s.rejected + s.panics + s.violations,
            t.test_inputs
        );
        if let Some(f) = s.failures.first() {
            report.push(format!(
                "{}: {} panics, {} violations; first: input #{} ({}) {}",
                t.name,
                s.panics,
                s.violations,
                f.index,
                driver::hex(&f.input),
                f.reason
            ));
        }
        assert!(
            s.accept_share() >= t.min_accept_share,
            "{}: {:.2} % of mutants accepted, at least {:.0} % expected: the fuzzing would \
             never reach the accepting branch",
            t.name,
            100.0 * s.accept_share(),
            100.0 * t.min_accept_share
        );
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
}
