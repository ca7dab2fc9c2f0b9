//! Offline analysis of stagetrace records: which stage, what shape, how often.
//!
//! `stagetrace-analyze` reads the public record format (`records-*.jsonl`,
//! one JSON object per call, see `docs/report.md`) and the rolling summary
//! files (`summary.*.jsonl`). It does not depend on the `stagetrace` layer:
//! any tool that writes the format can be analysed.
//!
//! # Core concepts
//!
//! - The figures come from the schema's table (`stagetrace-schema`'s
//!   [`Figure`](stagetrace_schema::Figure)): the reader, the tables, `--json`,
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
//! - [`summary::Summary`]: a partition's mergeable summary (HdrHistograms
//!   at 3 significant figures, exact counts, the slowest calls), for a
//!   fleet's month in bounded memory: summarise each partition, merge.
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
//!
//! # Public API
//!
//! At the root:
//!
//! - [`report_files`]: record files to the report `stagetrace report`
//!   prints, in one call.
//!
//! [`load`]: reading records:
//!
//! - [`load::Dataset`]: the calls of one or more record files as columns;
//!   [`load::Dataset::load`] reads files, [`load::Dataset::load_reader`] any
//!   reader.
//! - [`load::LoadOptions`]: how to load; [`load::LoadNotes`]: what the
//!   reader skipped or tolerated; [`load::LoadError`]: why loading failed.
//! - [`load::HopFig`]: a per-hop figure read from a `hops` entry.
//! - [`load::Dataset::load_parts`]: files read on every core, one
//!   [`load::FilePart`] each ([`load::FilePart::read_lines`] for JSON
//!   lines; a reader of typed columns fills a [`load::Row`] with
//!   [`load::Cell`]s and pushes it), appended in the files' order.
//!
//! [`analysis`]: from records to figures and verdicts:
//!
//! - [`analysis::analyze`]: analyse a dataset, optionally against a
//!   baseline, tuned by [`analysis::AnalyzeOptions`]; returns an
//!   [`analysis::Analysis`] (the [`analysis::Report`] plus what renderers
//!   need).
//! - [`analysis::per_robot`]: add the fleet view, one
//!   [`analysis::RobotInput`] / [`analysis::Robot`] per robot.
//! - [`analysis::group_data`]: split a dataset into per-kind groups
//!   ([`analysis::GroupData`]), for custom renderers.
//! - The report's parts, as `--json` prints them: [`analysis::GroupReport`],
//!   [`analysis::Inputs`], [`analysis::Rate`], [`analysis::Deadline`],
//!   [`analysis::DeadlineCause`], [`analysis::DeadlineShare`],
//!   [`analysis::StageVsBaseline`], [`analysis::Outliers`],
//!   [`analysis::OutlierRound`], [`analysis::OutlierStage`],
//!   [`analysis::Periodicity`], [`analysis::SecondMode`],
//!   [`analysis::GapReport`], [`analysis::Stall`], [`analysis::HostCause`],
//!   [`analysis::InferParts`], [`analysis::PartShare`],
//!   [`analysis::DeviceTime`], [`analysis::ServerWait`],
//!   [`analysis::HopReport`], [`analysis::ActionQueue`],
//!   [`analysis::Mitigations`], [`analysis::ErrorCount`],
//!   [`analysis::RobotStages`], [`analysis::RobotStage`],
//!   [`analysis::Verdict`].
//! - Constants: [`analysis::ALL_KINDS`] (the pooled group's kind),
//!   [`analysis::REPORT_SCHEMA`] (the `--json` version tag),
//!   [`analysis::QUANTILE_METHOD`] (`"exact"`, the `quantiles` field).
//!
//! [`compare`]: two runs, stage by stage:
//!
//! - [`compare::compare`], [`compare::compare_with`] (with a clock-drift
//!   bound): returns a [`compare::Comparison`].
//! - [`compare::text`], [`compare::render`]: the comparison as the terminal
//!   shows it (changed rows, or every row).
//! - Its parts: [`compare::GroupComparison`], [`compare::Row`],
//!   [`compare::HopRows`], [`compare::CarriedOffset`],
//!   [`compare::DigestCheck`], [`compare::Mismatch`].
//! - Constants: [`compare::COMPARE_SCHEMA`], [`compare::COMPARE_ALPHA`].
//!
//! [`render`]: the report as text:
//!
//! - [`render::Format`]: text or JSON, with [`render::Format::render`].
//! - [`render::text`], [`render::json`]: the terminal tables and the
//!   `--json` document.
//! - [`render::row_name`], [`render::split_note`],
//!   [`render::lacks_server_timing`]: row names and notes, for other tables
//!   of figures.
//!
//! [`html`]: the self-contained HTML report:
//!
//! - [`html::html`]: the whole document; [`html::escape`]: HTML escaping.
//!
//! [`hgrm`]: HdrHistogram percentile spectra:
//!
//! - [`hgrm::percentile_spectrum`]: a sorted sample as an `.hgrm` file.
//!
//! [`gate`]: `--fail-if` conditions for CI:
//!
//! - [`gate::Gate`]: one condition (`str::parse` it, then
//!   [`check`](gate::Gate::check) a report), looking at a
//!   [`gate::Target`] with an [`gate::Op`]; [`gate::Fired`]: one that fired;
//!   [`gate::GateError`]: why one could not be read or evaluated.
//!
//! [`tail`]: rolling summary files for `stagetrace tail`:
//!
//! - [`tail::newest_summary`]: the newest summary file of a directory;
//!   [`tail::Follower`] follows it.
//! - [`tail::window_table`], [`tail::window_table_of`]: a window as a
//!   terminal table; [`tail::stats_tables`]: its statistics objects.
//!
//! [`figures`]: which schema figures the analysis reads:
//!
//! - [`figures::is_read`], [`figures::read`], [`figures::display_order`],
//!   [`figures::call_rows`], [`figures::host_rows`]: the figures read and
//!   the orders the tables show them in.
//! - [`figures::from_user_name`]: the figure a user's stage name means;
//!   [`figures::USER_NAMES`]: the extra names it accepts.
//!
//! [`stats`]: exact order statistics and tests:
//!
//! - [`stats::Distribution`]: one figure's exact distribution;
//!   [`stats::QUANTILES`]: the percentiles every table shows.
//! - [`stats::quantile`], [`stats::median`], [`stats::median_mad`],
//!   [`stats::mean_var`], [`stats::covariance`], [`stats::cdf_at`],
//!   [`stats::count_above`], [`stats::thin_sorted`], [`stats::sort_f32`]:
//!   descriptive statistics on (sorted) samples.
//! - [`stats::quantile_ratio`] ([`stats::RatioCi`]), [`stats::quantile_diff`]
//!   ([`stats::DiffCi`]): bootstrap intervals, [`stats::BOOTSTRAP_ITERATIONS`]
//!   resamples.
//! - [`stats::mann_whitney`] ([`stats::MannWhitney`]),
//!   [`stats::hodges_lehmann`] ([`stats::Shift`]), [`stats::exceedance`],
//!   [`stats::holm`], [`stats::normal_sf`]: tests and corrections.
//! - [`stats::SplitMix64`]: the seeded generator that keeps reports
//!   reproducible.
//!
//! [`summary`]: mergeable per-partition summaries (`stagetrace summarize`,
//! Python's `stagetrace.summarize` / `stagetrace.merge`):
//!
//! - [`summary::Summary`]: [`of`](summary::Summary::of) a dataset,
//!   [`merge`](summary::Summary::merge) (exact, associative, commutative),
//!   [`to_bytes`](summary::Summary::to_bytes) /
//!   [`from_bytes`](summary::Summary::from_bytes) (a bad blob is a
//!   [`summary::SummaryError`]), [`report`](summary::Summary::report).
//! - [`summary::SummaryReport`] (with [`summary::SummaryGroup`],
//!   [`summary::SummaryStage`], [`summary::SlowCall`]): p50 / p90 / p99 /
//!   max per kind × figure; [`summary::SummaryReport::text`] its table.
//! - [`summary::robot_of`]: the robot a record file belongs to.
//! - Constants: [`summary::SUMMARY_FORMAT`], [`summary::REPORT_SCHEMA`],
//!   [`summary::QUANTILE_METHOD`], [`summary::SIGFIG`],
//!   [`summary::RELATIVE_ERROR`], [`summary::THRESHOLDS_MS`],
//!   [`summary::TOP_K`], [`summary::MAX_REASONS`].
//!
//! [`format`](mod@format): how numbers and times are written:
//!
//! - [`format::fmt_ms`], [`format::signed_ms`], [`format::iso_time`].
//!
//! [`table`]: text tables for people:
//!
//! - [`table::Table`]: a table under construction; [`table::Align`]: a
//!   column's alignment; [`table::GAP`]: the space between columns.

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
pub mod summary;
pub mod table;
pub mod tail;
#[cfg(test)]
mod watchdog;

use std::path::Path;

use analysis::{AnalyzeOptions, Report};
use load::{Dataset, LoadError, LoadOptions};

/// Reads record files and analyses them: the report `stagetrace report
/// FILES` prints, in one call. Render it with
/// [`Format::render`](render::Format::render).
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
