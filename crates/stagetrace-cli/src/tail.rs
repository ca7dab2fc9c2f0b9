//! `stagetrace tail`.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::Value;
use stagetrace_analyze::tail::{window_table, Follower};

use crate::stdout::{self, Reader};
use crate::{exit, interrupt};

/// Arguments of `stagetrace tail`.
#[derive(Debug, clap::Args)]
pub(crate) struct TailArgs {
    /// Run directory holding the rolling `summary.*.jsonl` files.
    #[arg(value_name = "DIR")]
    dir: PathBuf,
    /// Print the newest window once and exit (status 2 when there is none).
    #[arg(long)]
    once: bool,
    /// Print each window as it arrives as one line of JSON (the summary
    /// line's object, see docs/report.md) instead of redrawing a table.
    #[arg(long)]
    json: bool,
    /// Seconds between looks at the directory.
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    interval: f64,
}

pub(crate) fn run(args: TailArgs) -> ExitCode {
    match tail(&args) {
        Ok(code) => exit::code(code),
        Err(e) => {
            eprintln!("stagetrace tail: {e}");
            exit::code(exit::USAGE)
        }
    }
}

fn tail(args: &TailArgs) -> Result<u8, String> {
    if !(args.interval.is_finite() && args.interval > 0.0) {
        return Err(format!(
            "--interval {}: must be a positive number of seconds",
            args.interval
        ));
    }
    let pause = Duration::from_secs_f64(args.interval.min(3600.0));
    let stop = interrupt::watch();
    // A run about to start may not have made its directory yet: wait for it.
    if !args.dir.exists() {
        if args.once {
            return Err(format!(
                "{} does not exist (yet): give the run directory the summaries are written to",
                args.dir.display()
            ));
        }
        eprintln!(
            "waiting for {} to be created (by the run's stage layer) …",
            args.dir.display()
        );
        while !args.dir.exists() {
            if interrupt::sleep(&stop, pause) {
                return Ok(exit::INTERRUPTED);
            }
        }
    }
    if !args.dir.is_dir() {
        return Err(format!(
            "{}: not a directory (give the run directory the summaries are written to)",
            args.dir.display()
        ));
    }
    let mut follower = Follower::new(&args.dir);
    let redraw = !args.json && !args.once && std::io::stdout().is_terminal();
    let started = Instant::now();
    // When the wait was last reported, and what for.
    let mut waiting: Option<(Instant, bool)> = None;
    let mut shown_bad = 0;
    // The first look shows the newest window already there; after that
    // `--json` prints every window that arrives, each once, and the table
    // shows the newest.
    let mut shown_any = false;
    loop {
        let windows = if args.json && shown_any {
            follower.poll()
        } else {
            follower.poll_newest().map(|w| w.into_iter().collect())
        }
        .map_err(|e| format!("{}: {e}", args.dir.display()))?;
        if follower.bad_lines > shown_bad {
            eprintln!(
                "warning: skipped {} summary line(s) that are not JSON objects",
                follower.bad_lines - shown_bad
            );
            shown_bad = follower.bad_lines;
        }
        if !windows.is_empty() {
            let text: String = if args.json {
                windows.iter().map(|w| format!("{w}\n")).collect()
            } else {
                windows
                    .last()
                    .map(|w| render(w, &follower, redraw))
                    .unwrap_or_default()
            };
            shown_any = true;
            if stdout::print(&text)? == Reader::Gone {
                return Ok(exit::OK);
            }
            if args.once {
                return Ok(exit::OK);
            }
        } else if args.once {
            return Err(match follower.current() {
                None => format!(
                    "no summary*.jsonl in {} yet (is a run writing there?)",
                    args.dir.display()
                ),
                Some(p) => format!("{} holds no complete window yet", p.display()),
            });
        } else if !shown_any {
            say_waiting(&mut waiting, started, follower.current(), args);
        }
        if interrupt::sleep(&stop, pause) {
            return Ok(exit::INTERRUPTED);
        }
    }
}

/// Says what tail waits for before the first window, and again every
/// [`WAIT_REPORT`] for how long it has waited.
fn say_waiting(
    waiting: &mut Option<(Instant, bool)>,
    started: Instant,
    file: Option<&Path>,
    args: &TailArgs,
) {
    let has_file = file.is_some();
    let due = match *waiting {
        None => true,
        Some((at, had_file)) => had_file != has_file || at.elapsed() >= WAIT_REPORT,
    };
    if !due {
        return;
    }
    let waited = started.elapsed().as_secs();
    let what = match file {
        None => format!("summary*.jsonl in {}", args.dir.display()),
        Some(p) => format!(
            "the first complete window in {} (one per window, 10 s by default)",
            p.display()
        ),
    };
    if waiting.is_none() {
        eprintln!("waiting for {what} …");
    } else {
        eprintln!("still waiting for {what}: {waited} s so far");
    }
    *waiting = Some((Instant::now(), has_file));
}

/// How often a long wait for the first window is reported.
const WAIT_REPORT: Duration = Duration::from_secs(10);

/// One window as a table (after clearing the screen when it redraws a
/// terminal).
fn render(window: &Value, follower: &Follower, redraw: bool) -> String {
    let table = window_table(window, follower.current());
    if redraw {
        format!("\x1b[2J\x1b[H{table}\n")
    } else {
        format!("{table}\n")
    }
}
