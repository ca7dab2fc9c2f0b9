//! Printing results to standard output, where the reader may go away.
//!
//! `stagetrace report --json | head -1`: once `head` has its line it closes
//! the pipe and the next write fails with EPIPE (Rust ignores SIGPIPE).
//! `println!` would panic on that; here it is the normal end of the output.

use std::io::{self, Write};

/// Whether anyone still reads standard output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reader {
    /// The text was written.
    There,
    /// The reader closed the pipe: nothing more needs printing.
    Gone,
}

/// Writes `text` to standard output and flushes it.
///
/// A closed pipe is [`Reader::Gone`], not an error; any other failure (a
/// full disk behind `> file`) is an error message naming stdout.
pub(crate) fn print(text: &str) -> Result<Reader, String> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(Reader::There),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(Reader::Gone),
        Err(e) => Err(format!(
            "cannot write to standard output: {e} (check where it is redirected)"
        )),
    }
}
