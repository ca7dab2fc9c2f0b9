//! What can stop an experiment, with a message that says what to do.

use std::fmt;
use std::path::PathBuf;

/// Why an experiment could not run (or stopped before its baseline).
#[derive(Debug)]
pub enum ExperimentError {
    /// The plan is invalid.
    Plan(String),
    /// A part of the target or an injector could not start.
    Start(String),
    /// A file or directory could not be written.
    Io(PathBuf, std::io::Error),
    /// The run stopped before the baseline was complete.
    Stopped(String),
}

impl fmt::Display for ExperimentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExperimentError::Plan(e) => f.write_str(e),
            ExperimentError::Start(e) => write!(
                f,
                "cannot start {e}; check that loopback networking and threads are available"
            ),
            ExperimentError::Io(p, e) => write!(
                f,
                "cannot write {} ({e}); pass a writable --out DIR",
                p.display()
            ),
            ExperimentError::Stopped(why) => write!(
                f,
                "the experiment stopped before its baseline was complete ({why}); nothing to compare — everything it changed was restored"
            ),
        }
    }
}

impl std::error::Error for ExperimentError {}
