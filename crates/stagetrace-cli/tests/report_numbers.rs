//! Numbers that do not fit: a figure beyond the range a
//! latency can have is a per-line error naming file, line and field (exit 2),
//! or a skipped and counted line under `--skip-bad`; never infinity, and no
//! output (text, `--json`, `--html`, `--fail-if`) hangs or shows a
//! non-finite number.

#![allow(clippy::unwrap_used)]

mod support;

use std::fs::{self, File};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use support::gen::{self, Scenario};
use support::p;

/// Long enough for a debug build on a loaded machine, short enough that a
/// report looping over an infinite axis fails instead of hanging the suite.
const LIMIT: Duration = Duration::from_secs(60);

/// Runs `stagetrace ARGS…`, killed (and the test failed) after [`LIMIT`].
fn stagetrace_bounded(dir: &Path, args: &[&str]) -> Output {
    let (out_path, err_path) = (dir.join("stdout"), dir.join("stderr"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_stagetrace"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(File::create(&out_path).unwrap())
        .stderr(File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("stagetrace {args:?} still running after {LIMIT:?}");
        }
        thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: fs::read(&out_path).unwrap(),
        stderr: fs::read(&err_path).unwrap(),
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// 100 good calls with line 7's `e2e_ms` replaced by `bad`.
fn records_with(dir: &Path, bad: &str) -> std::path::PathBuf {
    let s = Scenario {
        seed: 15,
        calls: 100,
        warmup: 0,
        ..Scenario::default()
    };
    let mut lines: Vec<String> = gen::lines(&s).lines().map(str::to_string).collect();
    let line = &mut lines[6];
    let start = line.find("\"e2e_ms\":").unwrap() + "\"e2e_ms\":".len();
    let end = start + line[start..].find(',').unwrap();
    line.replace_range(start..end, bad);
    let f = dir.join("records-huge.jsonl");
    fs::write(&f, lines.join("\n") + "\n").unwrap();
    f
}

/// True when a printed report holds a non-finite number (`inf`, `NaN` as
/// words of their own: `infer` is a stage).
fn shows_non_finite(s: &str) -> bool {
    s.split(|c: char| !c.is_ascii_alphanumeric())
        .any(|w| matches!(w, "inf" | "NaN" | "nan" | "Infinity"))
}

#[test]
fn a_figure_beyond_a_latency_is_a_line_error() {
    for bad in ["1e300", "-1e300"] {
        let dir = tempfile::tempdir().unwrap();
        let f = records_with(dir.path(), bad);
        let html = dir.path().join("report.html");
        let want = format!(
            "{}:7: not a stagetrace record: e2e_ms = {bad} is not a latency (|ms| must be at most 86400000)",
            f.display()
        );
        for extra in [
            &[][..],
            &["--json"][..],
            &["--html", p(&html)][..],
            &["--fail-if", "e2e.max>1s"][..],
        ] {
            let mut args = vec!["report", p(&f)];
            args.extend_from_slice(extra);
            let out = stagetrace_bounded(dir.path(), &args);
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            assert!(err.contains(&want), "{args:?}: {err}");
            assert!(err.contains("--skip-bad"), "{args:?}: {err}");
            assert!(out.stdout.is_empty(), "{args:?}: {}", text(&out.stdout));
            assert!(!html.exists(), "{args:?}");
        }
    }
}

#[test]
fn skip_bad_skips_counts_and_reports_finite_numbers() {
    for bad in ["1e300", "-1e300"] {
        let dir = tempfile::tempdir().unwrap();
        let f = records_with(dir.path(), bad);
        let html = dir.path().join("report.html");
        let out = stagetrace_bounded(
            dir.path(),
            &[
                "report",
                p(&f),
                "--skip-bad",
                "--json",
                "--html",
                p(&html),
                "--fail-if",
                "e2e.max>1s",
            ],
        );
        let err = text(&out.stderr);
        // The gate holds: the 99 calls left are all ~36 ms.
        assert_eq!(out.status.code(), Some(0), "{bad}: {err}");
        assert!(err.contains("skipped 1 corrupt line(s)"), "{bad}: {err}");
        assert!(
            err.contains(&format!(
                "{}:7: e2e_ms = {bad} is not a latency",
                f.display()
            )),
            "{bad}: {err}"
        );
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json["inputs"]["skipped_bad"], 1, "{bad}");
        assert_eq!(json["inputs"]["records"], 99, "{bad}");
        assert_eq!(json["groups"][0]["steady"], 99, "{bad}");
        let e2e = &json["groups"][0]["stages"]["e2e"];
        assert_eq!(e2e["n"], 99, "{bad}: {e2e}");
        for stat in ["min", "p50", "p99", "max", "mean", "stddev"] {
            let v = e2e[stat].as_f64().unwrap_or(f64::NAN);
            assert!(
                v.is_finite() && (0.0..100.0).contains(&v),
                "{bad}: {stat} {e2e}"
            );
        }
        let page = fs::read_to_string(&html).unwrap();
        assert!(page.contains("<svg"), "{bad}");
        assert!(
            !shows_non_finite(&page),
            "{bad}: the HTML shows a non-finite number"
        );

        let out = stagetrace_bounded(dir.path(), &["report", p(&f), "--skip-bad"]);
        let table = text(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{bad}: {}", text(&out.stderr));
        assert!(table.contains("99 steady call(s)"), "{bad}: {table}");
        assert!(!shows_non_finite(&table), "{bad}: {table}");
    }
}
