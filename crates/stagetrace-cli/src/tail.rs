//! `stagetrace tail`.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::Value;
use stagetrace_analyze::tail::{window_table_of, Follower};
use stagetrace_analyze::Figure;

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
    /// Seconds to wait for DIR to be created and for a run to start
    /// writing in it (a records or summary file) before giving up with
    /// status 2; 0 waits as long as it takes.
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    wait: f64,
    /// Only this stage's rows (repeatable): a figure's name (`infer`) or
    /// the span names the docs tell you to write (`transport` = roundtrip,
    /// `call` = e2e).
    #[arg(long = "stage", value_name = "STAGE")]
    stages: Vec<String>,
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
    if !(args.wait.is_finite() && args.wait >= 0.0) {
        return Err(format!(
            "--wait {}: must be a number of seconds (0: as long as it takes)",
            args.wait
        ));
    }
    let only = crate::stage_names::parse(&args.stages)?;
    let pause = Duration::from_secs_f64(args.interval.min(3600.0));
    let give_up = (args.wait > 0.0).then(|| Duration::from_secs_f64(args.wait.min(1e9)));
    let stop = interrupt::watch();
    let started = Instant::now();
    // A run about to start may not have made its directory yet: wait for
    // it, for a bounded time (a mistyped path must not wait forever).
    if !args.dir.exists() {
        if args.once {
            return Err(format!(
                "{} does not exist (yet): give the run directory the summaries are written to{}",
                args.dir.display(),
                nearby(&args.dir)
            ));
        }
        eprintln!(
            "{} does not exist yet: waiting for it to be created by a run (the directory given to the stage layer's output_dir), {} …",
            args.dir.display(),
            give_up.map_or_else(
                || "as long as it takes".to_string(),
                |d| format!("up to {} s", d.as_secs())
            ),
        );
        while !args.dir.exists() {
            if interrupt::sleep(&stop, pause) {
                return Ok(exit::INTERRUPTED);
            }
            if give_up.is_some_and(|d| started.elapsed() >= d) {
                return Err(format!(
                    "{} was not created in {} s: is the path right?{} (--wait SECS waits longer, --wait 0 as long as it takes)",
                    args.dir.display(),
                    started.elapsed().as_secs(),
                    nearby(&args.dir)
                ));
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
    // When the last window came, how long windows are, whether the
    // silence since was said.
    let mut last_new = Instant::now();
    let mut window_len = Duration::from_secs(10);
    let mut said_stale = false;
    let mut last_shown: Option<Value> = None;
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
            // The cumulative line is written at the run's shutdown: the
            // run is over, and the table is its whole run.
            let ended = windows.iter().any(is_cumulative);
            let text: String = if args.json {
                windows.iter().map(|w| format!("{w}\n")).collect()
            } else {
                let mut t = windows
                    .last()
                    .map(|w| render(w, &follower, redraw, &only))
                    .unwrap_or_default();
                if ended {
                    t.push_str(&ended_note(windows.last(), &args.dir));
                }
                t
            };
            shown_any = true;
            last_new = Instant::now();
            said_stale = false;
            if let Some(len) = windows.last().and_then(window_length) {
                window_len = len;
            }
            last_shown = windows.last().cloned();
            if stdout::print(&text)? == Reader::Gone {
                return Ok(exit::OK);
            }
            if args.once || ended {
                return Ok(exit::OK);
            }
        } else if shown_any && !args.json && !said_stale {
            // No cumulative line and no new window for a few window
            // lengths: the run stopped writing without its shutdown
            // (crashed, killed, or its host stopped): say so under the
            // last window rather than keep showing it as live.
            let silent = last_new.elapsed();
            if silent >= (3 * window_len).max(STALE_AFTER) {
                let note = stale_note(silent, window_len);
                let text = match (&last_shown, redraw) {
                    (Some(w), true) => render(w, &follower, redraw, &only) + &note,
                    _ => note,
                };
                said_stale = true;
                if stdout::print(&text)? == Reader::Gone {
                    return Ok(exit::OK);
                }
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
            // A directory no run writes to (no records, no summary) is
            // given up on after --wait; once a run writes, its first
            // window comes when its window closes.
            if follower.current().is_none()
                && give_up.is_some_and(|d| started.elapsed() >= d)
                && !has_records(&args.dir)
            {
                return Err(format!(
                    "no run wrote to {} in {} s (no records-*.jsonl, no summary*.jsonl): is it the run's output directory? (--wait SECS waits longer, --wait 0 as long as it takes)",
                    args.dir.display(),
                    started.elapsed().as_secs()
                ));
            }
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

/// The least silence before a run that stopped writing is said to have
/// stopped (the rule is three window lengths: 30 s for the default 10 s
/// windows; a busy host may hold one window back, hardly three).
const STALE_AFTER: Duration = Duration::from_secs(3);

/// Whether a summary line is the run's last, written at its shutdown.
fn is_cumulative(w: &Value) -> bool {
    w.get("window").and_then(Value::as_str) == Some("cumulative")
}

/// How long a rolling window is (its end − start).
fn window_length(w: &Value) -> Option<Duration> {
    if is_cumulative(w) {
        return None;
    }
    let t = |k: &str| w.get(k).and_then(Value::as_f64);
    let ms = t("end_unix_ms")? - t("start_unix_ms")?;
    (ms.is_finite() && ms > 0.0).then(|| Duration::from_secs_f64((ms / 1000.0).min(86_400.0)))
}

/// Said under the table when the run's cumulative line came.
fn ended_note(w: Option<&Value>, dir: &Path) -> String {
    let at = w
        .and_then(|w| w.get("end_unix_ms"))
        .and_then(Value::as_f64)
        .map_or_else(String::new, |ms| {
            format!(" at {}", stagetrace_analyze::format::iso_time(ms))
        });
    format!(
        "the run ended{at}: the table above is the whole run (its cumulative summary, written at shutdown). For the full report: stagetrace report {}\n",
        dir.display()
    )
}

/// Said under the last window when no window came for a while and the run
/// wrote no cumulative line.
fn stale_note(silent: Duration, window_len: Duration) -> String {
    format!(
        "\nno new window for {} s (this run's windows close every {} s) and no final summary: the run stopped writing — it crashed, was killed, or its host is stuck. The table above is its last window; still watching (Ctrl-C to stop).\n",
        silent.as_secs(),
        window_len.as_secs().max(1)
    )
}

/// Whether `dir` holds a run's records (a run is writing there).
fn has_records(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut it| {
        it.any(|e| {
            e.ok()
                .and_then(|e| e.file_name().into_string().ok())
                .is_some_and(|n| n.starts_with("records") && n.ends_with(".jsonl"))
        })
    })
}

/// The directories next to a missing `dir` (its parent's), to spot a typo:
/// "; next to it: runs/a, runs/b".
fn nearby(dir: &Path) -> String {
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let Ok(entries) = std::fs::read_dir(&parent) else {
        return format!("; {} does not exist either", parent.display());
    };
    let mut dirs: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .map(|e| e.path().display().to_string())
        .collect();
    dirs.sort();
    const SHOWN: usize = 8;
    match dirs.len() {
        0 => format!("; {} holds no directory", parent.display()),
        n if n > SHOWN => format!(
            "; next to it: {} … ({} more)",
            dirs[..SHOWN].join(", "),
            n - SHOWN
        ),
        _ => format!("; next to it: {}", dirs.join(", ")),
    }
}

/// One window as a table (after clearing the screen when it redraws a
/// terminal).
fn render(window: &Value, follower: &Follower, redraw: bool, only: &[Figure]) -> String {
    let table = window_table_of(window, follower.current(), only);
    if redraw {
        format!("\x1b[2J\x1b[H{table}\n")
    } else {
        format!("{table}\n")
    }
}
