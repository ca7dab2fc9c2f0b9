//! Offline analysis of stagetrace records: which stage, what shape, how often.
//!
//! `stagetrace-analyze` reads the public record format (`records-*.jsonl`,
//! one JSON object per call, see `docs/report.md`) and the rolling summary
//! files (`summary.*.jsonl`). It does not depend on the `stagetrace` layer:
//! any tool that writes the format can be analysed.
//!
//! # Core concepts
//!
//! - The figures come from the schema's table (`stagetrace-schema`,
//!   re-exported as [`Figure`]): the reader, the tables, `--json`,
//!   `--fail-if` and the verdicts walk it; [`figures`] says which figures
//!   the analysis reads.
//! - [`Dataset`]: records streamed line by line into compact
//!   columns (one `f32` per figure per call).
//! - [`analyze`](analysis::analyze): exact per-stage distributions per kind
//!   (warm-up and failed calls kept out and counted), the comparison with a
//!   baseline run, outlier rounds, shape (median shift vs tail only),
//!   periodicity of spikes, the gap's share of e2e jitter, inference's
//!   parts (each one's share of infer at p50 and p95, the bottleneck), the
//!   server's waits (a starved worker pool, a blocked event loop), and
//!   verdicts.
//! - [`compare`](compare::compare): per-stage change between two runs with
//!   confidence intervals and significance, and output-digest consistency.
//! - Renderers: [`render::text`], [`render::json`], [`html::html`],
//!   [`hgrm::percentile_spectrum`], and [`gate::Gate`] for `--fail-if`.
//! - [`report_files`]: record files to the report in one call.
//!
//! # Usage
//!
//! ```
//! use stagetrace_analyze::{analysis, load::{Dataset, LoadOptions}};
//! # use std::path::Path;
//! let lines: String = (0..100)
//!     .map(|i| format!(
//!         "{{\"seq\":{i},\"ts_unix_ms\":{},\"kind\":\"call\",\"infer_ms\":{},\"e2e_ms\":{}}}\n",
//!         1_700_000_000_000u64 + 20 * i, 10 + i % 3, 15 + i % 3)
//!     )
//!     .collect();
//! let ds = Dataset::load_reader(lines.as_bytes(), Path::new("inline"), LoadOptions::default())?;
//! let a = analysis::analyze(&ds, None, &analysis::AnalyzeOptions::default());
//! assert_eq!(a.report.groups[0].stages["infer"].p50, 11.0);
//! # Ok::<(), stagetrace_analyze::load::LoadError>(())
//! ```
//!
//! # Supported Rust versions
//!
//! The workspace's `rust-version` (1.85) and newer.

pub mod analysis;
mod axis;
pub mod compare;
pub mod figures;
pub mod format;
pub mod gate;
pub mod hgrm;
pub mod html;
pub mod load;
pub mod render;
pub mod stats;
pub mod table;
pub mod tail;
#[cfg(test)]
mod watchdog;

use std::path::Path;

use analysis::{AnalyzeOptions, Report};
use load::{Dataset, LoadError, LoadOptions};

/// Reads record files and analyses them: the report `stagetrace report
/// FILES` prints, in one call. Render it with [`Format::render`].
///
/// ```no_run
/// use stagetrace_analyze::{analysis::AnalyzeOptions, render::Format, report_files};
/// let report = report_files(&["out/records-run.jsonl"], &AnalyzeOptions::default())?;
/// print!("{}", Format::Text.render(&report)?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn report_files<P: AsRef<Path>>(
    paths: &[P],
    opts: &AnalyzeOptions,
) -> Result<Report, LoadError> {
    let ds = Dataset::load(paths, LoadOptions::default())?;
    Ok(analysis::analyze(&ds, None, opts).report)
}
