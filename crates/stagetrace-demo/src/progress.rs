//! The demo's progress line on stderr.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// Progress on stderr: a live line on a terminal, a few lines otherwise.
pub(crate) struct Progress {
    total: u64,
    tty: bool,
    start: Instant,
    last: std::cell::Cell<Instant>,
}

impl Progress {
    pub(crate) fn new(total: u64) -> Self {
        let now = Instant::now();
        Progress {
            total,
            tty: std::io::stderr().is_terminal(),
            start: now,
            last: std::cell::Cell::new(now),
        }
    }

    pub(crate) fn tick(&self, done: u64, failed: u64) {
        let now = Instant::now();
        let quarter = (self.total / 4).max(1);
        let show = if self.tty {
            now.duration_since(self.last.get()) >= Duration::from_millis(200) || done == self.total
        } else {
            done % quarter == 0 && done != self.total
        };
        if !show {
            return;
        }
        self.last.set(now);
        let line = format!(
            "demo: {done}/{} calls, {failed} failed, {:.1} s",
            self.total,
            now.duration_since(self.start).as_secs_f64()
        );
        if self.tty {
            eprint!("\r{line}  ");
        } else {
            eprintln!("{line}");
        }
    }

    pub(crate) fn done(&self) {
        if self.tty {
            eprintln!();
        }
    }
}
