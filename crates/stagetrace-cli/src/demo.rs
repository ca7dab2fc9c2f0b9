//! `stagetrace demo`: the command over `stagetrace-demo`, which owns the
//! knobs and the run; here the signals that stop it, where its report goes
//! and the exit status.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use stagetrace_demo::DemoArgs;

use crate::{exit, interrupt, stdout};

pub(crate) fn run(args: DemoArgs) -> ExitCode {
    // Ctrl-C and SIGTERM watched from the start: the loop stops after the
    // call in flight and the run is still reported.
    let stop = interrupt::watch();
    let ran = demo(&args, &stop);
    // Interrupted: whatever the run managed is reported; the exit says why it ended.
    if stop.load(Ordering::SeqCst) {
        eprintln!("stagetrace demo: interrupted; the calls made so far are reported above and in the output directory");
        return exit::code(exit::INTERRUPTED);
    }
    match ran {
        Ok(()) => exit::code(exit::OK),
        Err(e) => {
            eprintln!("stagetrace demo: {e}");
            exit::code(exit::USAGE)
        }
    }
}

/// The run, its report on standard output (a closed pipe, `| head`, ends
/// it quietly), then whether it failed despite the report.
fn demo(args: &DemoArgs, stop: &Arc<AtomicBool>) -> Result<(), String> {
    let outcome = stagetrace_demo::run(args, stop).map_err(|e| e.to_string())?;
    stdout::print(&outcome.report)?;
    outcome.failed.map_or(Ok(()), |e| Err(e.to_string()))
}
