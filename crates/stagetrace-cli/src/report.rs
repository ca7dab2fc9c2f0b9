//! `stagetrace report`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use stagetrace_analyze::analysis::{self, AnalyzeOptions, ALL_KINDS};
use stagetrace_analyze::gate::Gate;
use stagetrace_analyze::load::LoadOptions;
use stagetrace_analyze::{figures, hgrm, html, render::Format};

use crate::budget::{self, OverBudget};
use crate::inputs::Inputs;
use crate::{exit, input, stdout, summarize};

/// Arguments of `stagetrace report`.
#[derive(Debug, clap::Args)]
pub(crate) struct ReportArgs {
    /// Record files (`records-*.jsonl`) of the run, or directories holding
    /// them; Parquet files or trees (`robot=…/date=…/*.parquet`); `-` reads
    /// records from standard input.
    #[arg(required = true, value_name = "FILES")]
    files: Vec<PathBuf>,
    /// Record file or run directory of an idle run to hold each stage against
    /// (ratios with confidence intervals, shape tests, outliers by the
    /// baseline's rule). One path per flag: repeat it for several files;
    /// `-` reads them from standard input.
    #[arg(long, value_name = "IDLE_FILE")]
    baseline: Vec<PathBuf>,
    /// Print the report as JSON (stable field names, see docs/report.md).
    #[arg(long)]
    json: bool,
    /// Also write a self-contained HTML report (inline SVG plots) to FILE.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Also write one HdrHistogram percentile-spectrum file per kind and
    /// stage (`KIND.STAGE.hgrm`) into DIR, for HDR plotting tools.
    #[arg(long, value_name = "DIR")]
    hgrm: Option<PathBuf>,
    /// Exit with status 1 when a condition holds, e.g. 'infer.p99>80ms';
    /// with --per-robot also per robot: 'arm-2@infer.p99>40ms', or
    /// '*@infer.p99>40ms' for each robot (repeatable; see docs/report.md).
    #[arg(long = "fail-if", value_name = "COND")]
    fail_if: Vec<String>,
    /// Skip corrupt lines (counted and reported) instead of stopping at the first.
    #[arg(long)]
    skip_bad: bool,
    /// Outlier rule: stands out above median + K·1.4826·MAD (of the baseline
    /// when given) [default: 5].
    #[arg(long, value_name = "K")]
    outlier_k: Option<f64>,
    /// Seed of the bootstrap (reports are reproducible; change it to check stability).
    #[arg(long, value_name = "SEED")]
    seed: Option<u64>,
    /// A fleet: each of FILES is one robot (named after its directory); a
    /// Parquet tree is one robot per `robot=` partition.
    /// The tables merge them; each stage gets every robot's p50 / p99, and
    /// a robot slower than the others pooled is named in the verdict
    /// (robot_differs; see docs/fleet.md).
    #[arg(long)]
    per_robot: bool,
    /// Not an option: the tables already show every stage's p50, p90,
    /// p99, p99.9 and max. Taken (hidden) so that the answer says so,
    /// rather than the parser's nearest option name (`--until`).
    #[arg(long, alias = "quantile", hide = true, value_name = "Q", num_args = 0..=1)]
    percentile: Option<Option<String>>,
    /// Memory the exact report may take, in MB (2^20 bytes) [default: 512]:
    /// inputs estimated to need more (Parquet footers' row counts, JSON
    /// lines' sizes) get the summary's report, HdrHistogram quantiles
    /// within 0.1 %, as `stagetrace summarize` prints it, and say so.
    #[arg(long, value_name = "MB")]
    memory_budget: Option<u64>,
    #[command(flatten)]
    select: crate::parquet_input::SelectArgs,
}

impl ReportArgs {
    /// The options given that only the exact report answers, as typed.
    fn exact_only(&self) -> Vec<&'static str> {
        [
            ("--fail-if", !self.fail_if.is_empty()),
            ("--html", self.html.is_some()),
            ("--hgrm", self.hgrm.is_some()),
            ("--per-robot", self.per_robot),
            ("--outlier-k", self.outlier_k.is_some()),
            ("--seed", self.seed.is_some()),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect()
    }
}

fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name == ALL_KINDS {
        "all".into()
    } else {
        s
    }
}

fn write_hgrm(dir: &Path, a: &analysis::Analysis<'_>) -> Result<usize, String> {
    fs::create_dir_all(dir).map_err(|e| format!("{}: cannot create: {e}", dir.display()))?;
    let mut n = 0;
    for g in &a.groups {
        for m in figures::read() {
            let sorted = g.sorted(m);
            if sorted.is_empty() {
                continue;
            }
            let path = dir.join(format!("{}.{}.hgrm", sanitize(&g.kind), m.name()));
            fs::write(&path, hgrm::percentile_spectrum(sorted))
                .map_err(|e| format!("{}: cannot write: {e}", path.display()))?;
            n += 1;
        }
    }
    Ok(n)
}

pub(crate) fn run(args: ReportArgs) -> ExitCode {
    match report(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("stagetrace report: {e}");
            exit::code(exit::USAGE)
        }
    }
}

/// Runs that share a directory are said to be pooled, in the report itself
/// (with --per-robot, pooling the robots is the point), and every warning
/// of the inputs goes to stderr.
fn warn_of_pooling(
    args: &ReportArgs,
    run: &Inputs,
    baseline: Option<&Inputs>,
    a: &mut analysis::Analysis<'_>,
) {
    let pooled_inputs = if args.per_robot {
        Vec::new()
    } else {
        [("run", Some(run)), ("baseline", baseline)]
            .into_iter()
            .filter_map(|(what, i)| Some((what, i?)))
            .collect()
    };
    for (what, inputs) in pooled_inputs {
        let runs = inputs.pooled_runs();
        if !runs.is_empty() {
            a.report
                .inputs
                .warnings
                .push(input::pooled_warning(what, &runs));
        }
    }
    let dirs = run.dirs();
    if !args.per_robot && dirs > 1 {
        eprintln!(
            "hint: {dirs} directories are pooled into one run; if each is a robot, add --per-robot to see each robot's column and which one differs"
        );
    }
    for w in a
        .report
        .inputs
        .warnings
        .iter()
        .chain(a.report.baseline.iter().flat_map(|b| b.warnings.iter()))
    {
        eprintln!("warning: {w}");
    }
}

fn report(args: ReportArgs) -> Result<ExitCode, String> {
    let gates = checked_gates(&args)?;
    let sel = args.select.selection()?;
    let run_inputs = Inputs::resolve("run", &args.files, &sel)?;
    let baseline_inputs = if args.baseline.is_empty() {
        None
    } else {
        Some(Inputs::resolve("baseline", &args.baseline, &sel)?)
    };
    Inputs::stdin_at_most_once(
        &[&run_inputs]
            .into_iter()
            .chain(&baseline_inputs)
            .collect::<Vec<_>>(),
    )?;
    if let Some(over) = over_budget(&args, &run_inputs, baseline_inputs.as_ref())? {
        return summary_report(&args, &run_inputs, &sel, &over);
    }
    let robots = if args.per_robot {
        run_inputs.robots()?
    } else {
        Vec::new()
    };
    let load_opts = LoadOptions {
        skip_bad: args.skip_bad,
        keep_digests: false,
    };
    let run = run_inputs.load(load_opts)?;
    let baseline = baseline_inputs
        .as_ref()
        .map(|b| b.load(load_opts))
        .transpose()?;
    let mut opts = AnalyzeOptions::default();
    if let Some(k) = args.outlier_k {
        opts.outlier_k = k;
    }
    if let Some(seed) = args.seed {
        opts.seed = seed;
    }
    let mut a = analysis::analyze(&run, baseline.as_ref(), &opts);
    analysis::per_robot(&mut a, &robots, &opts);
    warn_of_pooling(&args, &run_inputs, baseline_inputs.as_ref(), &mut a);
    write_report(&args, &a)?;
    let fired = fire(&gates, &a)?;
    Ok(exit::code(if fired > 0 { exit::FIRED } else { exit::OK }))
}

/// Whether the exact report's calls (the run's and the baseline's,
/// estimated) exceed `--memory-budget`; an error when they do and an
/// option only the exact report answers was given, or when the budget was
/// given for standard input, whose size is not known before it is read.
fn over_budget(
    args: &ReportArgs,
    run: &Inputs,
    baseline: Option<&Inputs>,
) -> Result<Option<OverBudget>, String> {
    let estimates = [Some(run), baseline]
        .into_iter()
        .flatten()
        .map(Inputs::estimated_calls)
        .collect::<Option<Vec<u64>>>();
    let Some(estimates) = estimates else {
        // Standard input is read as it comes, exactly, as before the budget.
        return match args.memory_budget {
            Some(_) => Err(
                "--memory-budget: the size of `-` (standard input) is not known \
                            before it is read; save the records to a file and report that"
                    .into(),
            ),
            None => Ok(None),
        };
    };
    let calls = estimates.iter().fold(0u64, |a, n| a.saturating_add(*n));
    let budget_mb = args.memory_budget.unwrap_or(budget::DEFAULT_BUDGET_MB);
    let Some(over) = budget::over(calls, budget_mb) else {
        return Ok(None);
    };
    let flags = args.exact_only();
    if !flags.is_empty() {
        return Err(over.refusal(&flags));
    }
    Ok(Some(over))
}

/// The report of inputs over the budget: the summary's (every file read
/// alone and merged, as `stagetrace summarize` does), after the sentence
/// that says which quantiles it used and why (stderr; in JSON its
/// `memory_budget` field).
fn summary_report(
    args: &ReportArgs,
    run: &Inputs,
    sel: &stagetrace_parquet::read::Selection,
    over: &OverBudget,
) -> Result<ExitCode, String> {
    let opts = LoadOptions {
        skip_bad: args.skip_bad,
        keep_digests: false,
    };
    if !args.json {
        eprintln!("{}", over.sentence());
    }
    let baseline = summarize::load_baseline(&args.baseline, sel, opts)?;
    let how = summarize::Summarise {
        verdicts: true,
        baseline: baseline.as_ref(),
    };
    let summary = summarize::summary_of(run, sel, opts, &how)?;
    let note = args.json.then(|| over.json());
    summarize::print(&summary, args.json, note.as_ref())?;
    Ok(exit::code(exit::OK))
}

/// The gates to check, once the options that need no input are checked
/// (`--percentile` is no option of report; `--outlier-k` is a positive
/// number of MADs).
fn checked_gates(args: &ReportArgs) -> Result<Vec<Gate>, String> {
    if let Some(q) = &args.percentile {
        let q = q.as_deref().unwrap_or("99");
        return Err(format!(
            "--percentile: report has no such option — its tables already show every stage's p50, p90, p99, p99.9 and max; for one figure read the JSON (--json | jq '.groups[0].stages.e2e.p{q}'), or gate on it (--fail-if 'e2e.p{q}>40ms'; STAT: p50 p90 p99 p999)"
        ));
    }
    let gates: Vec<Gate> = args
        .fail_if
        .iter()
        .map(|t| t.parse::<Gate>().map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    if let Some(k) = args.outlier_k.filter(|k| !(k.is_finite() && *k > 0.0)) {
        return Err(format!(
            "--outlier-k {k}: must be a positive number of MADs (5 is the default)"
        ));
    }
    Ok(gates)
}

/// The report on standard output (text or JSON), and the HTML page and
/// `.hgrm` files when asked for.
fn write_report(args: &ReportArgs, a: &analysis::Analysis<'_>) -> Result<(), String> {
    let format = if args.json {
        Format::Json
    } else {
        Format::Text
    };
    let text = format
        .render(&a.report)
        .map_err(|e| format!("cannot encode the report as JSON: {e}"))?;
    // A reader that stopped early (`| head`) does not change the outcome:
    // the files below are still written and the gates still decide.
    stdout::print(&text)?;
    if let Some(path) = &args.html {
        fs::write(path, html::html(a))
            .map_err(|e| format!("{}: cannot write the HTML report: {e}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(dir) = &args.hgrm {
        let n = write_hgrm(dir, a)?;
        eprintln!("wrote {n} .hgrm file(s) to {}", dir.display());
    }
    Ok(())
}

/// Checks every gate on the report, says each one that fired; how many did.
fn fire(gates: &[Gate], a: &analysis::Analysis<'_>) -> Result<usize, String> {
    let mut fired = 0;
    for g in gates {
        if let Some(f) = g.check(&a.report).map_err(|e| e.to_string())? {
            eprintln!("{}", f.message);
            fired += 1;
        }
    }
    Ok(fired)
}
