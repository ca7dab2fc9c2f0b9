//! What the demo says when it cannot run.

use std::fmt;

/// Why the demo could not run: a knob out of range, a part that could not
/// start, a run in which no call completed.
#[derive(Debug)]
pub struct DemoError(String);

impl fmt::Display for DemoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DemoError {}

pub(crate) fn err(msg: impl Into<String>) -> DemoError {
    DemoError(msg.into())
}
