//! `stagetrace tail`: the newest window of the newest summary file, live
//! refresh as windows arrive, rotation to a newer file.

#![allow(clippy::unwrap_used)]

mod support;

use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::{assert_usage_error, p, stagetrace, stderr, stdout, window};

#[test]
fn once_shows_the_newest_complete_window() {
    let dir = tempfile::tempdir().unwrap();
    assert_usage_error(&["tail", p(dir.path()), "--once"], "no summary");

    let f = dir.path().join("summary.2026-12-02-10.jsonl");
    let mut text = window("run-a", 0, 30.0) + &window("run-a", 1, 31.5);
    text.push_str("{\"run\":\"run-a\",\"window\":\"rolling\",\"index\":2,\"sta"); // mid-write
    fs::write(&f, text).unwrap();
    fs::write(dir.path().join("records-run-a.jsonl"), "{}\n").unwrap(); // not a summary
    let out = stagetrace(&["tail", p(dir.path()), "--once"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let s = stdout(&out);
    assert!(s.contains("rolling window #1"), "{s}");
    assert!(!s.contains("#2"), "{s}");
    let infer = s
        .lines()
        .find(|l| l.trim_start().starts_with("infer"))
        .unwrap();
    assert!(infer.contains("31.500"), "{infer}");
    assert!(s.contains("kind \"call\":"), "{s}");
    assert!(s.contains("deadline misses 3"), "{s}");
    assert!(s.contains("observer p50 2.5 µs"), "{s}");
}

fn wait_for(buf: &Arc<Mutex<String>>, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if buf.lock().unwrap().contains(needle) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("'{needle}' never appeared in:\n{}", buf.lock().unwrap());
}

#[test]
fn live_view_follows_new_windows_and_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("summary.2026-12-02-10.jsonl");
    fs::write(&first, window("run-a", 0, 30.0)).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_stagetrace"))
        .args(["tail", p(dir.path()), "--interval", "0.1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let buf = Arc::new(Mutex::new(String::new()));
    let mut pipe = child.stdout.take().unwrap();
    let sink = Arc::clone(&buf);
    let reader = std::thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut chunk) {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&chunk[..n]));
        }
    });
    let result = std::panic::catch_unwind(|| {
        wait_for(&buf, "rolling window #0");
        // A window arrives in two writes: only the complete line is shown.
        let line = window("run-a", 1, 44.25);
        let (head, tail) = line.split_at(40);
        let mut f = OpenOptions::new().append(true).open(&first).unwrap();
        f.write_all(head.as_bytes()).unwrap();
        f.flush().unwrap();
        std::thread::sleep(Duration::from_millis(400));
        f.write_all(tail.as_bytes()).unwrap();
        f.flush().unwrap();
        wait_for(&buf, "44.250");
        // Rotation: a newer file takes over.
        std::thread::sleep(Duration::from_millis(50));
        fs::write(
            dir.path().join("summary.2026-12-02-11.jsonl"),
            window("run-b", 0, 55.75),
        )
        .unwrap();
        wait_for(&buf, "run run-b");
        wait_for(&buf, "55.750");
    });
    let _ = child.kill();
    let _ = child.wait();
    let _ = reader.join();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    assert!(Path::new(&first).exists());
}

#[test]
fn a_lone_kind_is_not_shown_twice() {
    let dir = tempfile::tempdir().unwrap();
    let mut w: serde_json::Value = serde_json::from_str(&window("run-a", 0, 30.0)).unwrap();
    w["kinds"]["call"]["stages"] = w["stages"].clone();
    fs::write(dir.path().join("summary.x.jsonl"), format!("{w}\n")).unwrap();
    let out = stagetrace(&["tail", p(dir.path()), "--once"]);
    let s = stdout(&out);
    assert_eq!(s.matches("(ms)").count(), 1, "{s}");
    assert!(!s.contains("kind \"call\""), "{s}");
}

/// Spawns `stagetrace tail ARGS` with both outputs collected as they come.
fn spawn_tail(args: &[&str]) -> (std::process::Child, Arc<Mutex<String>>, Arc<Mutex<String>>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_stagetrace"))
        .arg("tail")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let collect = |mut pipe: Box<dyn Read + Send>| {
        let buf = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&buf);
        std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&chunk[..n]));
            }
        });
        buf
    };
    let out = collect(Box::new(child.stdout.take().unwrap()));
    let err = collect(Box::new(child.stderr.take().unwrap()));
    (child, out, err)
}

#[test]
fn a_directory_that_does_not_exist_yet_is_waited_for() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("run");
    assert_usage_error(&["tail", p(&dir), "--once"], "does not exist (yet)");
    let (mut child, out, err) = spawn_tail(&[p(&dir), "--interval", "0.1"]);
    let result = std::panic::catch_unwind(|| {
        wait_for(&err, "waiting for");
        assert!(err.lock().unwrap().contains("to be created"));
        fs::create_dir(&dir).unwrap();
        // The file exists, its first window is still being written.
        let f = dir.join("summary.2026-12-02-10.jsonl");
        fs::write(&f, "{\"run\":\"run-a\",\"win").unwrap();
        wait_for(&err, "the first complete window in");
        fs::write(&f, window("run-a", 0, 30.0)).unwrap();
        wait_for(&out, "rolling window #0");
    });
    let _ = child.kill();
    let _ = child.wait();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

#[test]
fn a_directory_never_created_is_given_up_on() {
    let parent = tempfile::tempdir().unwrap();
    fs::create_dir(parent.path().join("run-a")).unwrap();
    let dir = parent.path().join("run-b");
    let started = Instant::now();
    let out = stagetrace(&["tail", p(&dir), "--wait", "1", "--interval", "0.1"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("was not created in 1 s"), "{err}");
    // The directories next to it, to spot a typo.
    assert!(err.contains("run-a"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(60));
    // A directory no run writes to is given up on too.
    let empty = tempfile::tempdir().unwrap();
    let out = stagetrace(&["tail", p(empty.path()), "--wait", "1", "--interval", "0.1"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("no run wrote to"), "{}", stderr(&out));
}

/// A window line of `len_ms`, run `run-a`, numbered `index`.
fn window_of(index: u64, len_ms: f64, kind: &str) -> String {
    let mut w: serde_json::Value = serde_json::from_str(&window("run-a", index, 30.0)).unwrap();
    let start = w["start_unix_ms"].as_f64().unwrap();
    w["end_unix_ms"] = (start + len_ms).into();
    w["window"] = kind.into();
    format!("{w}\n")
}

#[test]
fn the_run_s_end_ends_the_live_view() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("summary.x.jsonl");
    fs::write(&f, window_of(0, 10_000.0, "rolling")).unwrap();
    let (mut child, out, _err) = spawn_tail(&[p(dir.path()), "--interval", "0.1"]);
    let result = std::panic::catch_unwind(|| {
        wait_for(&out, "rolling window #0");
        // The writer's shutdown: its cumulative line.
        let mut file = OpenOptions::new().append(true).open(&f).unwrap();
        file.write_all(window_of(1, 10_000.0, "cumulative").as_bytes())
            .unwrap();
        wait_for(&out, "the run ended");
    });
    let status = wait_exit(&mut child);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    assert_eq!(status.and_then(|s| s.code()), Some(0));
    assert!(out.lock().unwrap().contains("cumulative window"));
}

#[test]
fn a_run_that_stops_writing_is_said_to_have_stopped() {
    let dir = tempfile::tempdir().unwrap();
    // One-second windows: silent for three of them, the run has stopped.
    fs::write(
        dir.path().join("summary.x.jsonl"),
        window_of(0, 1_000.0, "rolling"),
    )
    .unwrap();
    let (mut child, out, _err) = spawn_tail(&[p(dir.path()), "--interval", "0.1"]);
    let result = std::panic::catch_unwind(|| {
        wait_for(&out, "rolling window #0");
        wait_for(&out, "the run stopped writing");
    });
    let _ = child.kill();
    let _ = child.wait();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    let text = out.lock().unwrap().clone();
    assert!(text.contains("windows close every 1 s"), "{text}");
}

#[test]
fn json_says_when_the_run_stops_writing() {
    let dir = tempfile::tempdir().unwrap();
    // One-second windows: silent for three of them, the run has stopped.
    fs::write(
        dir.path().join("summary.x.jsonl"),
        window_of(0, 1_000.0, "rolling"),
    )
    .unwrap();
    let (mut child, out, _err) = spawn_tail(&[p(dir.path()), "--json", "--interval", "0.1"]);
    let result = std::panic::catch_unwind(|| {
        wait_for(&out, "\"index\":0");
        wait_for(&out, "\"stale\":true");
    });
    let _ = child.kill();
    let _ = child.wait();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    let text = out.lock().unwrap().clone();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The window as written, then the note, said once: a line of its own
    // that no window filter (`.window`, `.stages`) mistakes for a window.
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(lines[0]["index"], 0, "{text}");
    let note = &lines[1];
    assert_eq!(note["stale"], true, "{text}");
    assert!(note.get("window").is_none() && note.get("stages").is_none());
    // What the table's note says: how long no window came, how often
    // windows close, and which run and window it was.
    assert!(note["silent_s"].as_u64().unwrap() >= 3, "{text}");
    assert_eq!(note["window_s"], 1, "{text}");
    assert_eq!(note["run"], "run-a", "{text}");
    assert_eq!(note["last_index"], 0, "{text}");
    assert!(note["last_end_unix_ms"].is_number(), "{text}");
}

/// Waits up to 30 s for `child` to exit by itself.
fn wait_exit(child: &mut std::process::Child) -> Option<std::process::ExitStatus> {
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[test]
fn stage_limits_the_rows_and_takes_the_span_names() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("summary.x.jsonl"), window("run-a", 0, 30.0)).unwrap();
    // `call` is the records' e2e (36 ms here).
    let out = stagetrace(&["tail", p(dir.path()), "--once", "--stage", "call"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let s = stdout(&out);
    let rows: Vec<&str> = s
        .lines()
        .filter(|l| l.starts_with("  ") && !l.trim_start().starts_with("stage (ms)"))
        .collect();
    assert_eq!(rows.len(), 1, "{s}");
    assert!(rows[0].trim_start().starts_with("e2e "), "{s}");
    assert!(rows[0].contains("36.000"), "{s}");
    assert_usage_error(
        &["tail", p(dir.path()), "--once", "--stage", "nope"],
        "--stage nope: no such stage",
    );
}
