//! `stagetrace report`.

use std::process::ExitCode;

/// Arguments of `stagetrace report`.
#[derive(Debug, clap::Args)]
pub(crate) struct ReportArgs {}

pub(crate) fn run(_args: ReportArgs) -> ExitCode {
    eprintln!("stagetrace report: not built yet");
    ExitCode::FAILURE
}
