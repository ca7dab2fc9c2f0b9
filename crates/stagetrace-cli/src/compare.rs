//! `stagetrace compare`.

use std::path::PathBuf;
use std::process::ExitCode;

use stagetrace_analyze::compare;
use stagetrace_analyze::load::LoadOptions;

use crate::{exit, input, run_input, stdout};

/// Arguments of `stagetrace compare`.
#[derive(Debug, clap::Args)]
pub(crate) struct CompareArgs {
    /// Record file (or run directory, or Parquet file or tree) before the
    /// change; `-` reads it from standard input.
    #[arg(value_name = "BEFORE")]
    before: PathBuf,
    /// Record file (or run directory) after the change; `-` reads it from
    /// standard input.
    #[arg(value_name = "AFTER")]
    after: PathBuf,
    /// Print the comparison as JSON (see docs/report.md).
    #[arg(long)]
    json: bool,
    /// List every row, the unchanged ones (`~`) too; by default only the
    /// rows that changed are listed, under the answer.
    #[arg(long)]
    all: bool,
    /// Only this stage's rows (repeatable): a figure's name (`infer`,
    /// `infer_ms`) or the span names the docs tell you to write
    /// (`transport` = roundtrip, `call` = e2e).
    #[arg(long = "stage", value_name = "STAGE")]
    stages: Vec<String>,
    /// Skip corrupt lines (counted and reported) instead of stopping at the first.
    #[arg(long)]
    skip_bad: bool,
    /// Seed of the bootstrap.
    #[arg(long, value_name = "SEED", default_value_t = 0x5eed_57a9e)]
    seed: u64,
    #[command(flatten)]
    select: crate::parquet_input::SelectArgs,
}

pub(crate) fn run(args: CompareArgs) -> ExitCode {
    match compare_runs(&args) {
        Ok(code) => exit::code(code),
        Err(e) => {
            eprintln!("stagetrace compare: {e}");
            exit::code(exit::USAGE)
        }
    }
}

fn compare_runs(args: &CompareArgs) -> Result<u8, String> {
    let stages = crate::stage_names::parse(&args.stages)?;
    input::stdin_at_most_once([&args.before, &args.after])?;
    let opts = LoadOptions {
        skip_bad: args.skip_bad,
        keep_digests: true,
    };
    let sel = args.select.selection()?;
    let before = run_input::load(std::slice::from_ref(&args.before), opts, "before", &sel)?;
    let after = run_input::load(std::slice::from_ref(&args.after), opts, "after", &sel)?;
    let mut c = compare::compare(&before, &after, args.seed);
    if !stages.is_empty() {
        c.only(&stages);
    }
    // A reader that stopped early (`| head`) does not change the verdict on
    // the outputs below.
    if args.json {
        let s = serde_json::to_string_pretty(&c)
            .map_err(|e| format!("cannot encode the comparison as JSON: {e}"))?;
        stdout::print(&(s + "\n"))?;
        for w in c.before.warnings.iter().chain(c.after.warnings.iter()) {
            eprintln!("warning: {w}");
        }
    } else {
        stdout::print(&compare::render(&c, args.all))?;
    }
    if c.outputs.failed() {
        eprintln!(
            "stagetrace compare: FAILED — {} of {} calls gave a different output digest for the same (kind, seq): the change altered the results",
            c.outputs.mismatched, c.outputs.compared
        );
        return Ok(exit::FIRED);
    }
    Ok(exit::OK)
}
