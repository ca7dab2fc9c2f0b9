//! `stagetrace tail`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::Value;
use stagetrace_analyze::summary::{window_table, Follower};

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
    if !args.dir.is_dir() {
        return Err(format!(
            "{}: not a directory (give the run directory the summaries are written to)",
            args.dir.display()
        ));
    }
    if !(args.interval.is_finite() && args.interval > 0.0) {
        return Err(format!(
            "--interval {}: must be a positive number of seconds",
            args.interval
        ));
    }
    let stop = interrupt::watch();
    let mut follower = Follower::new(&args.dir);
    let redraw = !args.json && !args.once && std::io::stdout().is_terminal();
    let mut waiting_said = false;
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
        } else if follower.current().is_none() && !waiting_said {
            eprintln!("waiting for summary*.jsonl in {} …", args.dir.display());
            waiting_said = true;
        }
        let pause = Duration::from_secs_f64(args.interval.min(3600.0));
        if interrupt::sleep(&stop, pause) {
            return Ok(exit::INTERRUPTED);
        }
    }
}

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
