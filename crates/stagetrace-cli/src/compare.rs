//! `stagetrace compare`.

use std::process::ExitCode;

/// Arguments of `stagetrace compare`.
#[derive(Debug, clap::Args)]
pub(crate) struct CompareArgs {}

pub(crate) fn run(_args: CompareArgs) -> ExitCode {
    eprintln!("stagetrace compare: not built yet");
    ExitCode::FAILURE
}
