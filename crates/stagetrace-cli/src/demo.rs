//! `stagetrace demo`.

use std::process::ExitCode;

/// Arguments of `stagetrace demo`.
#[derive(Debug, clap::Args)]
pub(crate) struct DemoArgs {}

pub(crate) fn run(_args: DemoArgs) -> ExitCode {
    eprintln!("stagetrace demo: not built yet");
    ExitCode::FAILURE
}
