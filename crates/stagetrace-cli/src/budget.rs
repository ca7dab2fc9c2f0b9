//! `report --memory-budget`: whether the exact report fits, and what to say
//! when it does not. The exact report holds every call in memory; over the
//! budget `report` prints the mergeable summary's report instead (HdrHistogram
//! quantiles, `summarize.rs`), says so in plain words, and refuses the options
//! that only the exact dataset can answer (docs/report.md, "Big inputs: the
//! memory budget").

use serde_json::json;
use stagetrace_analyze::summary::{QUANTILE_METHOD, RELATIVE_ERROR};

/// Peak resident memory of the exact report per call, in bytes, measured
/// with `/usr/bin/time -v target/release/stagetrace report --json
/// --memory-budget 100000 DIR` (release build, 2 cores), less the 14.6 MB
/// the same command peaks at on 2000 calls. A figure no call has takes no
/// memory, so the figure follows how many figures the records carry:
/// - the fleet generator's 10 M calls (14 figures a call;
///   `cargo run --release -p stagetrace-parquet --example fleet_records --
///   --calls 10000000 --out /tmp/fleet10m`): 1 769 952 kB peak, 176 bytes
///   a call;
/// - `stagetrace demo --calls 2000`'s records repeated 500 times (1 M
///   calls, 42 keys a record: host counts, the clock split, the server's
///   parts), converted to Parquet: 340 988 kB peak, 326 bytes a call (the
///   same calls as JSON lines: 299 780 kB).
///
/// The larger, rounded up: a budget is a ceiling, better met early than late.
pub(crate) const EXACT_BYTES_PER_CALL: u64 = 330;

/// The default `--memory-budget`, in MB.
pub(crate) const DEFAULT_BUDGET_MB: u64 = 512;

/// One MB of `--memory-budget`: 2^20 bytes.
const MB: u64 = 1 << 20;

/// Inputs too big for the exact report under the budget.
#[derive(Debug)]
pub(crate) struct OverBudget {
    /// The calls the inputs hold, estimated (`Inputs::estimated_calls`).
    calls: u64,
    /// The bytes the exact report would need for them.
    needed: u64,
    budget_mb: u64,
}

/// `Some` when `calls` need more than `budget_mb` for the exact report.
pub(crate) fn over(calls: u64, budget_mb: u64) -> Option<OverBudget> {
    let needed = calls.saturating_mul(EXACT_BYTES_PER_CALL);
    (needed > budget_mb.saturating_mul(MB)).then_some(OverBudget {
        calls,
        needed,
        budget_mb,
    })
}

impl OverBudget {
    /// How much the inputs hold and need, against the budget.
    fn sizes(&self) -> String {
        format!(
            "these inputs hold about {} calls, which need about {} for exact quantiles, \
             over the {} MB budget (--memory-budget)",
            count(self.calls),
            bytes(self.needed),
            self.budget_mb
        )
    }

    /// The sentence that says which quantiles the report used and why
    /// (stderr before a text report; `memory_budget.note` in JSON).
    pub(crate) fn sentence(&self) -> String {
        format!(
            "quantiles: HdrHistogram, within {:.1} % (not exact): {}. The verdicts come through \
             the merge path (each chunk of a file analysed exactly, its evidence merged); the \
             outlier rounds, the tables of every figure and the HTML need the exact path: narrow \
             the inputs with --robot / --since / --until, or raise --memory-budget.",
            RELATIVE_ERROR * 100.0,
            self.sizes()
        )
    }

    /// The refusal of options only the exact report answers (`flags`, as typed).
    pub(crate) fn refusal(&self, flags: &[&str]) -> String {
        let given = flags.join(", ");
        let verb = if flags.len() == 1 { "needs" } else { "need" };
        format!(
            "{given} {verb} the exact report, and {}: narrow the inputs with --robot / --since / \
             --until, raise --memory-budget (about {} MB would do), or leave out {given}",
            self.sizes(),
            self.needed.div_ceil(MB),
        )
    }

    /// The `memory_budget` field of the summary's JSON.
    pub(crate) fn json(&self) -> serde_json::Value {
        json!({
            "budget_mb": self.budget_mb,
            "estimated_calls": self.calls,
            "exact_needs_mb": self.needed.div_ceil(MB),
            "quantiles": QUANTILE_METHOD,
            "note": self.sentence(),
        })
    }
}

/// A count for people: `950`, `12.4 k`, `3.1 M`.
fn count(n: u64) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => format!("{:.1} k", n as f64 / 1e3),
        _ => format!("{:.1} M", n as f64 / 1e6),
    }
}

/// A size for people, in the budget's units: `740 kB`, `310 MB`, `3.1 GB`
/// (2^10, 2^20, 2^30 bytes).
fn bytes(n: u64) -> String {
    let n = n as f64;
    if n < MB as f64 {
        format!("{:.0} kB", n / 1024.0)
    } else if n < (1u64 << 30) as f64 {
        format!("{:.0} MB", n / MB as f64)
    } else {
        format!("{:.1} GB", n / (1u64 << 30) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_over_only_past_it() {
        let fits = DEFAULT_BUDGET_MB * MB / EXACT_BYTES_PER_CALL;
        assert!(over(fits, DEFAULT_BUDGET_MB).is_none());
        assert!(over(fits + 1, DEFAULT_BUDGET_MB).is_some());
        assert!(over(0, 0).is_none(), "no call fits any budget");
        assert!(over(1, 0).is_some());
        assert!(over(u64::MAX, u64::MAX).is_none(), "no overflow");
    }

    #[test]
    fn the_sentence_names_the_calls_the_need_and_the_budget() {
        let o = over(12_400_000, 512).expect("over");
        let s = o.sentence();
        assert!(
            s.starts_with("quantiles: HdrHistogram, within 0.1 % (not exact)"),
            "{s}"
        );
        assert!(s.contains("about 12.4 M calls"), "{s}");
        assert!(
            s.contains("over the 512 MB budget (--memory-budget)"),
            "{s}"
        );
        assert!(s.contains("GB for exact quantiles"), "{s}");
        let r = o.refusal(&["--fail-if", "--html"]);
        assert!(
            r.starts_with("--fail-if, --html need the exact report"),
            "{r}"
        );
        assert!(o.refusal(&["--seed"]).starts_with("--seed needs the exact"));
        assert!(r.contains("512 MB budget"), "{r}");
        assert_eq!(o.json()["budget_mb"], 512);
    }

    #[test]
    fn counts_and_sizes_read_as_people_write_them() {
        assert_eq!(count(950), "950");
        assert_eq!(count(12_400), "12.4 k");
        assert_eq!(count(3_100_000), "3.1 M");
        assert_eq!(bytes(740 * 1024), "740 kB");
        assert_eq!(bytes(310 * MB), "310 MB");
        assert_eq!(bytes(3 * 1024 * MB + 100 * MB), "3.1 GB");
    }
}
