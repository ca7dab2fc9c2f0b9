//! `stagetrace tail`.

use std::process::ExitCode;

/// Arguments of `stagetrace tail`.
#[derive(Debug, clap::Args)]
pub(crate) struct TailArgs {}

pub(crate) fn run(_args: TailArgs) -> ExitCode {
    eprintln!("stagetrace tail: not built yet");
    ExitCode::FAILURE
}
