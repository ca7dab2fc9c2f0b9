//! Exit codes, the same for every subcommand (docs/report.md, "Exit codes").

use std::process::ExitCode;

/// The command did what was asked and found nothing the user asked to be told of.
pub(crate) const OK: u8 = 0;
/// A condition the user asked about fired: a `--fail-if` gate, `compare`
/// found changed outputs.
pub(crate) const FIRED: u8 = 1;
/// Bad usage, unreadable input, or a run that could not be carried out.
pub(crate) const USAGE: u8 = 2;
/// Interrupted (Ctrl-C / SIGINT, SIGTERM): 128 + SIGINT, as shells report it.
pub(crate) const INTERRUPTED: u8 = 130;

/// `code` as the process's exit status.
pub(crate) fn code(code: u8) -> ExitCode {
    ExitCode::from(code)
}
