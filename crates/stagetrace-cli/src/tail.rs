//! `stagetrace tail`.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use stagetrace_analyze::summary::{window_table, Follower};

/// Arguments of `stagetrace tail`.
#[derive(Debug, clap::Args)]
pub(crate) struct TailArgs {
    /// Run directory holding the rolling `summary.*.jsonl` files.
    #[arg(value_name = "DIR")]
    dir: PathBuf,
    /// Print the newest window once and exit (status 2 when there is none).
    #[arg(long)]
    once: bool,
    /// Seconds between looks at the directory.
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    interval: f64,
}

pub(crate) fn run(args: TailArgs) -> ExitCode {
    if !args.dir.is_dir() {
        eprintln!(
            "stagetrace tail: {}: not a directory (give the run directory the summaries are written to)",
            args.dir.display()
        );
        return ExitCode::from(2);
    }
    if !(args.interval.is_finite() && args.interval > 0.0) {
        eprintln!(
            "stagetrace tail: --interval {}: must be a positive number of seconds",
            args.interval
        );
        return ExitCode::from(2);
    }
    let mut follower = Follower::new(&args.dir);
    let tty = std::io::stdout().is_terminal();
    let mut waiting_said = false;
    let mut shown_bad = 0;
    loop {
        let newest = match follower.poll() {
            Ok(l) => l,
            Err(e) => {
                eprintln!("stagetrace tail: {}: {e}", args.dir.display());
                return ExitCode::from(2);
            }
        };
        if follower.bad_lines > shown_bad {
            eprintln!(
                "warning: skipped {} summary line(s) that are not JSON objects",
                follower.bad_lines - shown_bad
            );
            shown_bad = follower.bad_lines;
        }
        if let Some(last) = newest {
            let table = window_table(&last, follower.current());
            let mut out = std::io::stdout().lock();
            if tty && !args.once {
                let _ = write!(out, "\x1b[2J\x1b[H");
            }
            let _ = writeln!(out, "{table}");
            let _ = out.flush();
            if args.once {
                return ExitCode::SUCCESS;
            }
        } else if args.once {
            match follower.current() {
                None => eprintln!(
                    "stagetrace tail: no summary*.jsonl in {} yet (is a run writing there?)",
                    args.dir.display()
                ),
                Some(p) => eprintln!(
                    "stagetrace tail: {} holds no complete window yet",
                    p.display()
                ),
            }
            return ExitCode::from(2);
        } else if follower.current().is_none() && !waiting_said {
            eprintln!("waiting for summary*.jsonl in {} …", args.dir.display());
            waiting_said = true;
        }
        std::thread::sleep(Duration::from_secs_f64(args.interval.min(3600.0)));
    }
}
