//! The conventions every subcommand shares (docs/report.md, "Exit codes"):
//! 0 success, 1 a condition asked about fired, 2 bad usage or unreadable
//! input, 130 interrupted; `-` reads records from standard input; a closed
//! stdout pipe ends the output quietly; `--baseline` takes one path per
//! flag; `tail --json` prints a line per window.

#![allow(clippy::unwrap_used)]

mod support;

use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::gen::{self, Scenario};
use support::{assert_usage_error, p, seeded, stagetrace, stderr, window};

/// The real binary.
fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_stagetrace"))
}

/// Runs `stagetrace ARGS…` with `input` on its standard input.
fn with_stdin(args: &[&str], input: &Path) -> Output {
    bin()
        .args(args)
        .stdin(fs::File::open(input).unwrap())
        .output()
        .unwrap()
}

fn json_of(o: &Output) -> Value {
    assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Waits up to `limit` for `child` to exit.
fn exit_within(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// Runs `cmd` with nobody reading its standard output: the read end of the
/// pipe is closed as soon as the process starts, before it has anything
/// to print (as `| head -1` does once it has its line). Returns the exit
/// status and what it wrote to stderr.
fn into_closed_pipe(mut cmd: Command, limit: Duration) -> (Option<i32>, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let mut err_pipe = child.stderr.take().unwrap();
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err_pipe.read_to_string(&mut s);
        s
    });
    let status = exit_within(&mut child, limit);
    let err = err.join().unwrap();
    assert!(status.is_some(), "still running after {limit:?}: {err}");
    (status.and_then(|s| s.code()), err)
}

#[track_caller]
fn assert_quiet_end((code, err): (Option<i32>, String)) {
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!err.to_lowercase().contains("broken pipe"), "{err}");
}

/// SIGINT to `child`, as Ctrl-C in a terminal sends.
fn ctrl_c(child: &Child) {
    let ok = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
}

// ---------------------------------------------------------------------------
// `tail` (summary lines: `support::window`)
// ---------------------------------------------------------------------------

/// `stagetrace tail DIR --interval 0.1 EXTRA…`, its stdout as lines on a channel.
fn start_tail(dir: &Path, extra: &[&str]) -> (Child, mpsc::Receiver<String>) {
    let mut child = bin()
        .args(["tail", p(dir), "--interval", "0.1"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

/// The next line of `rx` that contains `needle`.
fn line_with(rx: &mpsc::Receiver<String>, needle: &str) -> String {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.contains(needle) => return l,
            Ok(_) => {}
            Err(e) => panic!("no line with '{needle}': {e}"),
        }
    }
}

/// Stops `child` with Ctrl-C; returns its exit code and stderr.
fn interrupt(mut child: Child) -> (Option<i32>, String) {
    ctrl_c(&child);
    let status = exit_within(&mut child, Duration::from_secs(10));
    let mut err = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    assert!(status.is_some(), "no exit after Ctrl-C: {err}");
    (status.and_then(|s| s.code()), err)
}

// ---------------------------------------------------------------------------
// exit codes
// ---------------------------------------------------------------------------

#[test]
fn ctrl_c_ends_tail_with_130() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("summary.2026-12-02-10.jsonl"),
        window("run-a", 0, 30.0),
    )
    .unwrap();
    let (child, rx) = start_tail(dir.path(), &[]);
    line_with(&rx, "rolling window #0");
    let (code, err) = interrupt(child);
    assert_eq!(code, Some(130), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    // Also while it waits for the first summary file.
    let empty = tempfile::tempdir().unwrap();
    let (child, _rx) = start_tail(empty.path(), &[]);
    std::thread::sleep(Duration::from_millis(500));
    let (code, err) = interrupt(child);
    assert_eq!(code, Some(130), "{err}");
    assert!(err.contains("waiting for summary"), "{err}");
}

#[test]
fn an_experiment_that_cannot_run_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.toml");
    fs::write(
        &plan,
        "[target]\nkind = \"demo\"\n[baseline]\nhold_s = 1\n[factor]\nkind = \"net\"\nhold_s = 1\nlevels = [5]\n",
    )
    .unwrap();
    // The output directory cannot be made: a regular file is in the way.
    let blocker = dir.path().join("a-file");
    fs::write(&blocker, "").unwrap();
    let out_dir = blocker.join("run");
    let out = stagetrace(&["experiment", "--quiet", "--out", p(&out_dir), p(&plan)]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("pass a writable --out DIR"), "{err}");
    // An unreadable plan is bad input too.
    let missing = dir.path().join("missing.toml");
    let out = stagetrace(&["experiment", p(&missing)]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn exit_codes_of_report_compare_and_tail() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("records.jsonl");
    gen::write(&f, &seeded(31));
    // 0: done, nothing fired.
    let out = stagetrace(&["report", p(&f), "--fail-if", "infer.p99>80ms"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // 1: the condition asked about fired.
    let out = stagetrace(&["report", p(&f), "--fail-if", "infer.p50>1ms"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    // 2: bad usage (clap's own errors included) or unreadable input.
    assert_usage_error(&["report", p(&f), "--no-such-flag"], "--no-such-flag");
    assert_usage_error(
        &["report", p(&dir.path().join("nope.jsonl"))],
        "cannot read",
    );
    assert_usage_error(&["compare", p(&f)], "AFTER");
    assert_usage_error(
        &["compare", p(&f), p(&dir.path().join("nope.jsonl"))],
        "cannot read",
    );
    assert_usage_error(&["tail", p(&f)], "not a directory");
    assert_usage_error(&["tail", p(dir.path()), "--interval", "0"], "positive");
}

// ---------------------------------------------------------------------------
// `-` reads records from standard input
// ---------------------------------------------------------------------------

#[test]
fn a_dash_reads_records_from_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let today = dir.path().join("today.jsonl");
    let idle = dir.path().join("idle.jsonl");
    gen::write(&today, &seeded(41));
    gen::write(&idle, &seeded(42));

    let from_file = json_of(&stagetrace(&["report", p(&today), "--json"]));
    let from_stdin = json_of(&with_stdin(&["report", "-", "--json"], &today));
    assert_eq!(from_stdin["inputs"]["files"], json!(["<stdin>"]));
    assert_eq!(from_stdin["groups"], from_file["groups"]);

    // The baseline from stdin, the run from a file.
    let out = with_stdin(&["report", p(&today), "--baseline", "-", "--json"], &idle);
    let json = json_of(&out);
    assert_eq!(json["baseline"]["files"], json!(["<stdin>"]));
    assert_eq!(json["inputs"]["files"], json!([p(&today)]));

    // compare: either side.
    let out = with_stdin(&["compare", "-", p(&today), "--json"], &idle);
    let json = json_of(&out);
    assert_eq!(json["before"]["files"], json!(["<stdin>"]));
    let out = with_stdin(&["compare", p(&idle), "-"], &today);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // Corrupt input from stdin names it.
    let bad = dir.path().join("bad.jsonl");
    fs::write(&bad, "garbage\n").unwrap();
    let out = with_stdin(&["report", "-"], &bad);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("<stdin>:1:"), "{}", stderr(&out));
}

#[test]
fn a_second_dash_is_refused_clearly() {
    assert_usage_error(
        &["compare", "-", "-"],
        "`-` (standard input) is given 2 times",
    );
    assert_usage_error(
        &["report", "-", "--baseline", "-"],
        "standard input can be read only once",
    );
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("records.jsonl");
    gen::write(&f, &seeded(43));
    assert_usage_error(&["report", "-", p(&f)], "cannot be mixed with other paths");
}

// ---------------------------------------------------------------------------
// a closed pipe
// ---------------------------------------------------------------------------

#[test]
fn a_closed_pipe_ends_report_and_compare_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let before = dir.path().join("before.jsonl");
    let after = dir.path().join("after.jsonl");
    let digests = |seed, flip: Vec<u64>| Scenario {
        seed,
        digests: true,
        flip_digests: flip,
        ..Scenario::default()
    };
    gen::write(&before, &digests(51, vec![]));
    gen::write(&after, &digests(52, vec![]));
    let limit = Duration::from_secs(60);
    for args in [
        vec!["report", "--json", p(&before)],
        vec!["report", p(&before)],
        vec!["compare", p(&before), p(&after)],
        vec!["compare", "--json", p(&before), p(&after)],
    ] {
        let mut cmd = bin();
        cmd.args(&args);
        assert_quiet_end(into_closed_pipe(cmd, limit));
    }
    // What the user asked about still decides the status.
    let mut cmd = bin();
    cmd.args(["report", p(&before), "--fail-if", "infer.p50>1ms"]);
    let (code, err) = into_closed_pipe(cmd, limit);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("fail-if fired"), "{err}");
    let changed = dir.path().join("changed.jsonl");
    gen::write(&changed, &digests(53, vec![7]));
    let mut cmd = bin();
    cmd.args(["compare", p(&before), p(&changed)]);
    let (code, err) = into_closed_pipe(cmd, limit);
    assert_eq!(code, Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn a_closed_pipe_ends_tail_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("summary.2026-12-02-10.jsonl");
    fs::write(&file, window("run-a", 0, 30.0)).unwrap();
    // New windows keep coming, so a live view writes again even if its
    // first window reached the pipe before the reader closed it.
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let feeder = std::thread::spawn(move || {
        let mut f = OpenOptions::new().append(true).open(&file).unwrap();
        let mut i = 1;
        // Until told to stop, or the test failed and dropped the sender.
        while let Err(mpsc::RecvTimeoutError::Timeout) =
            done_rx.recv_timeout(Duration::from_millis(100))
        {
            f.write_all(window("run-a", i, 30.0).as_bytes()).unwrap();
            i += 1;
        }
    });
    let limit = Duration::from_secs(20);
    for extra in [
        &["--interval", "0.1"][..],
        &["--once"],
        &["--json", "--interval", "0.1"],
        &["--once", "--json"],
    ] {
        let mut cmd = bin();
        cmd.args(["tail", p(dir.path())]).args(extra);
        assert_quiet_end(into_closed_pipe(cmd, limit));
    }
    done_tx.send(()).unwrap();
    feeder.join().unwrap();
}

const PLAN: &str = r#"
name = "closed pipe"
[target]
kind = "demo"
hz = 20
model_ms = 5
payload_kb = 8
warmup_s = 0.5
[baseline]
hold_s = 1
[factor]
kind = "net"
direction = "uplink"
hold_s = 1
levels = [5]
"#;

#[test]
fn a_closed_pipe_ends_experiment_json_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.toml");
    fs::write(&plan, PLAN).unwrap();
    let mut cmd = bin();
    cmd.args(["experiment", "--json", "--out"])
        .arg(dir.path().join("run"))
        .arg(&plan);
    assert_quiet_end(into_closed_pipe(cmd, Duration::from_secs(120)));
    assert!(dir.path().join("run/experiment.json").exists());
}

// ---------------------------------------------------------------------------
// `--baseline`, one path per flag
// ---------------------------------------------------------------------------

#[test]
fn baseline_takes_one_path_per_flag() {
    let dir = tempfile::tempdir().unwrap();
    let today = dir.path().join("today.jsonl");
    let idle = dir.path().join("idle.jsonl");
    let idle2 = dir.path().join("idle-2.jsonl");
    gen::write(&today, &seeded(61));
    gen::write(&idle, &seeded(62));
    gen::write(&idle2, &seeded(63));

    // As people type it: the path after the baseline's is the run.
    let json = json_of(&stagetrace(&[
        "report",
        "--baseline",
        p(&idle),
        p(&today),
        "--json",
    ]));
    assert_eq!(json["inputs"]["files"], json!([p(&today)]));
    assert_eq!(json["baseline"]["files"], json!([p(&idle)]));

    // Several baseline files: repeat the flag.
    let json = json_of(&stagetrace(&[
        "report",
        p(&today),
        "--baseline",
        p(&idle),
        "--baseline",
        p(&idle2),
        "--json",
    ]));
    assert_eq!(json["inputs"]["files"], json!([p(&today)]));
    assert_eq!(json["baseline"]["files"], json!([p(&idle), p(&idle2)]));
}

// ---------------------------------------------------------------------------
// `tail --json`
// ---------------------------------------------------------------------------

#[test]
fn tail_json_prints_each_window_as_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("summary.2026-12-02-10.jsonl");
    fs::write(&first, window("run-a", 0, 30.0) + &window("run-a", 1, 31.5)).unwrap();

    // --once: the newest complete window, the line as written.
    let out = stagetrace(&["tail", p(dir.path()), "--once", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    let line: Value = serde_json::from_str(&text).unwrap();
    let written: Value = serde_json::from_str(&window("run-a", 1, 31.5)).unwrap();
    assert_eq!(line, written);

    // Live: a line per window as it arrives, rotation included.
    let (child, rx) = start_tail(dir.path(), &["--json"]);
    let parse = |l: String| serde_json::from_str::<Value>(&l).unwrap();
    let w = parse(line_with(&rx, "\"index\":1"));
    assert_eq!(w["stages"]["infer"]["p50"], 31.5);
    let mut f = OpenOptions::new().append(true).open(&first).unwrap();
    f.write_all(window("run-a", 2, 44.25).as_bytes()).unwrap();
    f.flush().unwrap();
    let w = parse(rx.recv_timeout(Duration::from_secs(30)).unwrap());
    assert_eq!(
        (w["run"].clone(), w["index"].clone()),
        (json!("run-a"), json!(2))
    );
    assert_eq!(w["stages"]["infer"]["p50"], 44.25);
    std::thread::sleep(Duration::from_millis(50));
    fs::write(
        dir.path().join("summary.2026-12-02-11.jsonl"),
        window("run-b", 0, 55.75),
    )
    .unwrap();
    let w = parse(rx.recv_timeout(Duration::from_secs(30)).unwrap());
    assert_eq!(
        (w["run"].clone(), w["index"].clone()),
        (json!("run-b"), json!(0))
    );
    assert_eq!(w["kinds"]["call"]["stages"]["infer"]["p50"], 55.75);
    // No screen clearing or table in between.
    assert!(rx.try_recv().is_err());
    let (code, err) = interrupt(child);
    assert_eq!(code, Some(130), "{err}");
}

#[test]
fn help_lists_every_subcommand() {
    let out = bin().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let about = help.lines().next().unwrap();
    // Every command the help lists is named in its first line.
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.contains(&"convert"), "{help}");
    for c in commands {
        assert!(about.contains(c), "{c} not in {about:?}");
    }
}

#[test]
fn a_percentile_option_is_answered_with_what_the_tables_show() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("r.jsonl");
    gen::write(&f, &seeded(3));
    let out = stagetrace(&["report", "--percentile", "99", p(&f)]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(!err.contains("--until"), "{err}");
    assert!(
        err.contains("already show every stage's p50, p90, p99"),
        "{err}"
    );
    assert!(err.contains("--fail-if 'e2e.p99>40ms'"), "{err}");
}
