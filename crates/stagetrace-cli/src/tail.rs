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
    let mut seen_before = None;
    loop {
        let newest = follower
            .poll()
            .map_err(|e| format!("{}: {e}", args.dir.display()))?;
        if follower.bad_lines > shown_bad {
            eprintln!(
                "warning: skipped {} summary line(s) that are not JSON objects",
                follower.bad_lines - shown_bad
            );
            shown_bad = follower.bad_lines;
        }
        if let Some(last) = newest {
            if args.json {
                // The first look shows only the newest of the windows
                // already there, as the table does; later ones should each
                // get a line.
                if let Some(before) = seen_before {
                    let missed = follower.windows_seen.saturating_sub(before + 1);
                    if missed > 0 {
                        eprintln!(
                            "warning: {missed} window(s) arrived together with a newer one and were not printed (lower --interval)"
                        );
                    }
                }
                seen_before = Some(follower.windows_seen);
            }
            if stdout::print(&render(&last, &follower, args.json, redraw))? == Reader::Gone {
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

/// One window as printed: a line of JSON, or the table (after clearing the
/// screen when it redraws a terminal).
fn render(window: &Value, follower: &Follower, json: bool, redraw: bool) -> String {
    if json {
        return format!("{window}\n");
    }
    let table = window_table(window, follower.current());
    if redraw {
        format!("\x1b[2J\x1b[H{table}\n")
    } else {
        format!("{table}\n")
    }
}
