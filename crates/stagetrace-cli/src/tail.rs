//! `stagetrace tail`.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use serde_json::Value;
use stagetrace_analyze::tail::{window_table_of, Follower};
use stagetrace_schema::Figure;

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
    /// line's object, see docs/report.md) instead of redrawing a table. A
    /// run that stops writing without its final summary gets one line of
    /// its own: `{"stale":true,"silent_s":…,"window_s":…}` with the last
    /// window's `run`, `last_index` and `last_end_unix_ms`.
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
    let (pause, give_up) = check_times(args)?;
    let only = crate::stage_names::parse(&args.stages)?;
    let stop = interrupt::watch();
    let started = Instant::now();
    // A run about to start may not have made its directory yet: wait for
    // it, for a bounded time (a mistyped path must not wait forever).
    if !args.dir.exists() {
        if let Some(code) = wait_for_dir(args, pause, give_up, &stop, started)? {
            return Ok(code);
        }
    }
    if !args.dir.is_dir() {
        return Err(format!(
            "{}: not a directory (give the run directory the summaries are written to)",
            args.dir.display()
        ));
    }
    let mut watch = Watch::new(args, only, started, give_up);
    loop {
        if let Some(code) = watch.look()? {
            return Ok(code);
        }
        if interrupt::sleep(&stop, pause) {
            return Ok(exit::INTERRUPTED);
        }
    }
}

/// `--interval` and `--wait` as durations: the pause between looks, and
/// how long to wait for a run before giving up (`None`: as long as it
/// takes).
fn check_times(args: &TailArgs) -> Result<(Duration, Option<Duration>), String> {
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
    let pause = Duration::from_secs_f64(args.interval.min(3600.0));
    let give_up = (args.wait > 0.0).then(|| Duration::from_secs_f64(args.wait.min(1e9)));
    Ok((pause, give_up))
}

/// Waits for the missing run directory to be created (not with `--once`);
/// `Some` exit code when interrupted meanwhile.
fn wait_for_dir(
    args: &TailArgs,
    pause: Duration,
    give_up: Option<Duration>,
    stop: &AtomicBool,
    started: Instant,
) -> Result<Option<u8>, String> {
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
        if interrupt::sleep(stop, pause) {
            return Ok(Some(exit::INTERRUPTED));
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
    Ok(None)
}

/// The live view between two looks at the run directory: what was shown,
/// and what is known of the run's pace.
struct Watch<'a> {
    args: &'a TailArgs,
    only: Vec<Figure>,
    follower: Follower,
    /// Clear the screen before each table (a terminal, neither `--json`
    /// nor `--once`).
    redraw: bool,
    started: Instant,
    give_up: Option<Duration>,
    /// When the last window came, how long windows are, whether the
    /// silence since was said.
    last_new: Instant,
    window_len: Duration,
    said_stale: bool,
    last_shown: Option<Value>,
    /// When the wait was last reported, and what for.
    waiting: Option<(Instant, bool)>,
    shown_bad: u64,
    /// The first look shows the newest window already there; after that
    /// `--json` prints every window that arrives, each once, and the table
    /// shows the newest.
    shown_any: bool,
}

impl<'a> Watch<'a> {
    fn new(
        args: &'a TailArgs,
        only: Vec<Figure>,
        started: Instant,
        give_up: Option<Duration>,
    ) -> Self {
        Watch {
            args,
            only,
            follower: Follower::new(&args.dir),
            redraw: !args.json && !args.once && std::io::stdout().is_terminal(),
            started,
            give_up,
            last_new: Instant::now(),
            window_len: Duration::from_secs(10),
            said_stale: false,
            last_shown: None,
            waiting: None,
            shown_bad: 0,
            shown_any: false,
        }
    }

    /// One look: shows what arrived, or says the run stopped writing, or
    /// what tail still waits for; `Some` exit code when tail is done.
    fn look(&mut self) -> Result<Option<u8>, String> {
        let windows = self.poll()?;
        if !windows.is_empty() {
            self.show(&windows)
        } else if self.shown_any && !self.said_stale {
            self.say_if_stale()
        } else if self.args.once {
            Err(match self.follower.current() {
                None => format!(
                    "no summary*.jsonl in {} yet (is a run writing there?)",
                    self.args.dir.display()
                ),
                Some(p) => format!("{} holds no complete window yet", p.display()),
            })
        } else if !self.shown_any {
            self.wait_for_first().map(|()| None)
        } else {
            Ok(None)
        }
    }

    /// The windows that arrived since the last look (the newest only,
    /// unless `--json` has shown its first); skipped lines are warned of.
    fn poll(&mut self) -> Result<Vec<Value>, String> {
        let windows = if self.args.json && self.shown_any {
            self.follower.poll()
        } else {
            self.follower.poll_newest().map(|w| w.into_iter().collect())
        }
        .map_err(|e| format!("{}: {e}", self.args.dir.display()))?;
        if self.follower.bad_lines > self.shown_bad {
            eprintln!(
                "warning: skipped {} summary line(s) that are not JSON objects",
                self.follower.bad_lines - self.shown_bad
            );
            self.shown_bad = self.follower.bad_lines;
        }
        Ok(windows)
    }

    /// Prints what arrived: each window's line with `--json`, else the
    /// newest window's table (with the run's end under it when it ended).
    fn show(&mut self, windows: &[Value]) -> Result<Option<u8>, String> {
        // The cumulative line is written at the run's shutdown: the run is
        // over, and the table is its whole run.
        let ended = windows.iter().any(is_cumulative);
        let text: String = if self.args.json {
            windows.iter().map(|w| format!("{w}\n")).collect()
        } else {
            let mut t = windows.last().map(|w| self.render(w)).unwrap_or_default();
            if ended {
                t.push_str(&ended_note(windows.last(), &self.args.dir));
            }
            t
        };
        self.shown_any = true;
        self.last_new = Instant::now();
        self.said_stale = false;
        if let Some(len) = windows.last().and_then(window_length) {
            self.window_len = len;
        }
        self.last_shown = windows.last().cloned();
        if stdout::print(&text)? == Reader::Gone || self.args.once || ended {
            return Ok(Some(exit::OK));
        }
        Ok(None)
    }

    /// No cumulative line and no new window for a few window lengths: the
    /// run stopped writing without its shutdown (crashed, killed, or its
    /// host stopped): says so once, under the last window rather than keep
    /// showing it as live, or as a line of its own with `--json`.
    fn say_if_stale(&mut self) -> Result<Option<u8>, String> {
        let silent = self.last_new.elapsed();
        if silent < (3 * self.window_len).max(STALE_AFTER) {
            return Ok(None);
        }
        let text = if self.args.json {
            stale_json(silent, self.window_len, self.last_shown.as_ref())
        } else {
            let note = stale_note(silent, self.window_len);
            match (&self.last_shown, self.redraw) {
                (Some(w), true) => self.render(w) + &note,
                _ => note,
            }
        };
        self.said_stale = true;
        if stdout::print(&text)? == Reader::Gone {
            return Ok(Some(exit::OK));
        }
        Ok(None)
    }

    /// Before the first window: says what tail waits for, and gives up on
    /// a directory no run writes to (no records, no summary) after
    /// `--wait`; once a run writes, its first window comes when its window
    /// closes.
    fn wait_for_first(&mut self) -> Result<(), String> {
        say_waiting(
            &mut self.waiting,
            self.started,
            self.follower.current(),
            self.args,
        );
        if self.follower.current().is_none()
            && self.give_up.is_some_and(|d| self.started.elapsed() >= d)
            && !has_records(&self.args.dir)
        {
            return Err(format!(
                "no run wrote to {} in {} s (no records-*.jsonl, no summary*.jsonl): is it the run's output directory? (--wait SECS waits longer, --wait 0 as long as it takes)",
                self.args.dir.display(),
                self.started.elapsed().as_secs()
            ));
        }
        Ok(())
    }

    /// One window as a table (after clearing the screen when it redraws a
    /// terminal).
    fn render(&self, window: &Value) -> String {
        let table = window_table_of(window, self.follower.current(), &self.only);
        if self.redraw {
            format!("\x1b[2J\x1b[H{table}\n")
        } else {
            format!("{table}\n")
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

/// `--json`'s note when no window came for a while and the run wrote no
/// cumulative line: a line of its own, not a window (no `window` key), with
/// the facts of the table's note — how long no window came (`silent_s`),
/// how often windows close (`window_s`) — and the last window's run, index
/// and end.
fn stale_json(silent: Duration, window_len: Duration, last: Option<&Value>) -> String {
    let mut note = serde_json::json!({
        "stale": true,
        "silent_s": silent.as_secs(),
        "window_s": window_len.as_secs().max(1),
    });
    for (key, as_key) in [
        ("run", "run"),
        ("index", "last_index"),
        ("end_unix_ms", "last_end_unix_ms"),
    ] {
        if let Some(v) = last.and_then(|w| w.get(key)) {
            note[as_key] = v.clone();
        }
    }
    format!("{note}\n")
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
