//! `stagetrace compare`.

use std::path::PathBuf;
use std::process::ExitCode;

use stagetrace_analyze::compare;
use stagetrace_analyze::load::{Dataset, LoadOptions};

use crate::report::expand_inputs;

/// Arguments of `stagetrace compare`.
#[derive(Debug, clap::Args)]
pub(crate) struct CompareArgs {
    /// Record file (or run directory) before the change.
    #[arg(value_name = "BEFORE")]
    before: PathBuf,
    /// Record file (or run directory) after the change.
    #[arg(value_name = "AFTER")]
    after: PathBuf,
    /// Print the comparison as JSON (see docs/report.md).
    #[arg(long)]
    json: bool,
    /// Skip corrupt lines (counted and reported) instead of stopping at the first.
    #[arg(long)]
    skip_bad: bool,
    /// Seed of the bootstrap.
    #[arg(long, value_name = "SEED", default_value_t = 0x5eed_57a9e)]
    seed: u64,
}

fn load(path: &PathBuf, skip_bad: bool, what: &str) -> Result<Dataset, String> {
    let files = expand_inputs(std::slice::from_ref(path))?;
    let opts = LoadOptions {
        skip_bad,
        keep_digests: true,
    };
    Dataset::load(&files, opts).map_err(|e| format!("{what}: {e}"))
}

pub(crate) fn run(args: CompareArgs) -> ExitCode {
    let result = (|| -> Result<ExitCode, String> {
        let before = load(&args.before, args.skip_bad, "before")?;
        let after = load(&args.after, args.skip_bad, "after")?;
        let c = compare::compare(&before, &after, args.seed);
        if args.json {
            let s = serde_json::to_string_pretty(&c)
                .map_err(|e| format!("cannot encode the comparison as JSON: {e}"))?;
            println!("{s}");
            for w in c.before.warnings.iter().chain(c.after.warnings.iter()) {
                eprintln!("warning: {w}");
            }
        } else {
            print!("{}", compare::text(&c));
        }
        if c.outputs.failed() {
            eprintln!(
                "stagetrace compare: FAILED — {} of {} calls gave a different output digest for the same (kind, seq): the change altered the results",
                c.outputs.mismatched, c.outputs.compared
            );
            return Ok(ExitCode::from(1));
        }
        Ok(ExitCode::SUCCESS)
    })();
    result.unwrap_or_else(|e| {
        eprintln!("stagetrace compare: {e}");
        ExitCode::from(2)
    })
}
