//! `stagetrace report`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use stagetrace_analyze::analysis::{self, AnalyzeOptions, ALL_KINDS};
use stagetrace_analyze::gate::Gate;
use stagetrace_analyze::load::{Dataset, LoadOptions};
use stagetrace_analyze::metric::Metric;
use stagetrace_analyze::{hgrm, html, render};

/// Arguments of `stagetrace report`.
#[derive(Debug, clap::Args)]
pub(crate) struct ReportArgs {
    /// Record files (`records-*.jsonl`) of the run, or directories holding them.
    #[arg(required = true, value_name = "FILES")]
    files: Vec<PathBuf>,
    /// Record files of an idle run to hold each stage against (ratios with
    /// confidence intervals, shape tests, outliers by the baseline's rule).
    /// Put it after FILES (it takes every path that follows).
    #[arg(long, num_args = 1.., value_name = "IDLE_FILES")]
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
    /// Exit with status 1 when a condition holds, e.g. 'infer.p99>80ms'
    /// (repeatable; see docs/report.md for the syntax).
    #[arg(long = "fail-if", value_name = "COND")]
    fail_if: Vec<String>,
    /// Skip corrupt lines (counted and reported) instead of stopping at the first.
    #[arg(long)]
    skip_bad: bool,
    /// Outlier rule: stands out above median + K·1.4826·MAD (of the baseline when given).
    #[arg(long, value_name = "K", default_value_t = 5.0)]
    outlier_k: f64,
    /// Seed of the bootstrap (reports are reproducible; change it to check stability).
    #[arg(long, value_name = "SEED")]
    seed: Option<u64>,
}

/// A directory stands for the `records*.jsonl` files in it.
pub(crate) fn expand_inputs(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut files: Vec<PathBuf> = fs::read_dir(p)
                .map_err(|e| format!("{}: cannot list: {e}", p.display()))?
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|f| {
                    f.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("records") && n.ends_with(".jsonl"))
                })
                .collect();
            files.sort();
            if files.is_empty() {
                return Err(format!(
                    "{}: no records*.jsonl files in this directory (point at a run's output directory or its record files)",
                    p.display()
                ));
            }
            out.extend(files);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

fn load(paths: &[PathBuf], skip_bad: bool, what: &str) -> Result<Dataset, String> {
    let files = expand_inputs(paths)?;
    let opts = LoadOptions {
        skip_bad,
        keep_digests: false,
    };
    Dataset::load(&files, opts).map_err(|e| format!("{what}: {e}"))
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
        for m in Metric::ALL {
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
            ExitCode::from(2)
        }
    }
}

fn report(args: ReportArgs) -> Result<ExitCode, String> {
    let gates: Vec<Gate> = args
        .fail_if
        .iter()
        .map(|t| t.parse::<Gate>().map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    if !(args.outlier_k.is_finite() && args.outlier_k > 0.0) {
        return Err(format!(
            "--outlier-k {}: must be a positive number of MADs (5 is the default)",
            args.outlier_k
        ));
    }
    let run = load(&args.files, args.skip_bad, "run")?;
    let baseline = if args.baseline.is_empty() {
        None
    } else {
        Some(load(&args.baseline, args.skip_bad, "baseline")?)
    };
    let mut opts = AnalyzeOptions {
        outlier_k: args.outlier_k,
        ..AnalyzeOptions::default()
    };
    if let Some(seed) = args.seed {
        opts.seed = seed;
    }
    let a = analysis::analyze(&run, baseline.as_ref(), &opts);
    for w in a
        .report
        .inputs
        .warnings
        .iter()
        .chain(a.report.baseline.iter().flat_map(|b| b.warnings.iter()))
    {
        eprintln!("warning: {w}");
    }
    if args.json {
        let s = serde_json::to_string_pretty(&a.report)
            .map_err(|e| format!("cannot encode the report as JSON: {e}"))?;
        println!("{s}");
    } else {
        print!("{}", render::text(&a.report));
    }
    if let Some(path) = &args.html {
        fs::write(path, html::html(&a))
            .map_err(|e| format!("{}: cannot write the HTML report: {e}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(dir) = &args.hgrm {
        let n = write_hgrm(dir, &a)?;
        eprintln!("wrote {n} .hgrm file(s) to {}", dir.display());
    }
    let mut fired = 0;
    for g in &gates {
        if let Some(f) = g.check(&a.report).map_err(|e| e.to_string())? {
            eprintln!("{}", f.message);
            fired += 1;
        }
    }
    Ok(if fired > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
