//! `stagetrace compare`.

use std::path::PathBuf;
use std::process::ExitCode;

use stagetrace_analyze::compare;
use stagetrace_analyze::load::LoadOptions;

use crate::inputs::Inputs;
use crate::{exit, stdout};

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
    /// The most the two machines' clocks drift apart (ppm; a quartz clock
    /// without NTP is within 50–100, a disciplined one within a few). On
    /// estimated clocks the split cannot tell which direction of the link
    /// moved between two runs; with this bound the baseline's clock offset
    /// is carried to the second run, and the direction is named when the
    /// drift over the time between the runs is smaller than the change
    /// (docs/clocks.md, "Carrying the offset between runs").
    #[arg(long, value_name = "PPM", value_parser = drift_ppm, allow_hyphen_values = true)]
    drift_ppm: Option<f64>,
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
    let opts = LoadOptions {
        skip_bad: args.skip_bad,
        keep_digests: true,
    };
    let sel = args.select.selection()?;
    let before = Inputs::resolve("before", std::slice::from_ref(&args.before), &sel)?;
    let after = Inputs::resolve("after", std::slice::from_ref(&args.after), &sel)?;
    Inputs::stdin_at_most_once(&[&before, &after])?;
    let (before, after) = (before.load(opts)?, after.load(opts)?);
    let mut c = compare::compare_with(&before, &after, args.seed, args.drift_ppm);
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

/// A drift bound: a finite number of ppm, 0 or more.
fn drift_ppm(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!(
            "{s:?} is not a drift bound: give the most the clocks drift apart in ppm, e.g. --drift-ppm 100"
        )),
    }
}
