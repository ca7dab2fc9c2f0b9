//! Shared by the experiment tests: a run to its end into a fresh directory,
//! and a run stopped from outside, as Ctrl-C stops it, once a given thread
//! of the run is up.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use stagetrace_experiment::{plan::Plan, report::ExperimentReport, run, thread_names, RunOptions};

/// What [`run_until_thread`] saw.
pub struct Stopped {
    pub report: ExperimentReport,
    /// The thread was seen before the watcher gave up (60 s).
    pub seen: bool,
    /// From the start of the run to its return.
    pub took: Duration,
}

/// Runs `plan` into `out` and sets its stop flag 0.8 s after a thread named
/// `thread` appears; `at_stop` runs just before the flag is set (to note
/// what exists while the level runs).
pub fn run_until_thread(
    plan: &Plan,
    out: &Path,
    thread: &str,
    at_stop: impl FnOnce() + Send + 'static,
) -> Stopped {
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (stop, seen) = (Arc::clone(&stop), Arc::clone(&seen));
        let name = thread.to_owned();
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                if thread_names().contains(&name) {
                    seen.store(true, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(800));
                    at_stop();
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            stop.store(true, Ordering::SeqCst);
        })
    };
    let started = Instant::now();
    let report = run(
        plan,
        &RunOptions {
            out: out.to_path_buf(),
            progress: false,
            stop,
        },
    )
    .unwrap();
    watcher.join().unwrap();
    Stopped {
        report,
        seen: seen.load(Ordering::SeqCst),
        took: started.elapsed(),
    }
}

/// A run that went to its end, with the files it wrote.
pub struct Finished {
    pub report: ExperimentReport,
    /// `experiment.json` as written (what `--json` prints).
    pub json: serde_json::Value,
    /// Holds `records-experiment.jsonl`, `resources.jsonl`, the HTML.
    pub dir: tempfile::TempDir,
}

/// Runs `plan` to its end into a fresh directory; prints the text report.
pub fn run_to_end(plan: &Plan) -> Finished {
    let dir = tempfile::tempdir().unwrap();
    let report = run(
        plan,
        &RunOptions {
            out: dir.path().to_path_buf(),
            progress: false,
            stop: Arc::new(AtomicBool::new(false)),
        },
    )
    .unwrap();
    eprintln!("{}", stagetrace_experiment::text(&report));
    let text = std::fs::read_to_string(dir.path().join("experiment.json")).unwrap();
    Finished {
        report,
        json: serde_json::from_str(&text).unwrap(),
        dir,
    }
}

/// The levels that have at least one record tagged with them.
pub fn levels_with_records(dir: &Path) -> BTreeSet<u64> {
    let recs = std::fs::read_to_string(dir.join("records-experiment.jsonl")).unwrap();
    recs.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["phase"] == "level")
        .map(|r| r["level"].as_u64().unwrap())
        .collect()
}

/// After a run: none of the `threads` is running and none of the run's
/// `addresses` accepts a connection any more.
pub fn assert_gone(report: &ExperimentReport, threads: &[&str]) {
    let names = thread_names();
    for gone in threads {
        assert!(
            !names.iter().any(|n| n == gone),
            "{gone} still running: {names:?}"
        );
    }
    for addr in report.addresses.values() {
        assert!(
            std::net::TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_secs(1))
                .is_err(),
            "{addr} still accepts connections"
        );
    }
}

/// Whether the kernel bottleneck (root, iproute2) is here; says SKIPPED,
/// or fails under CI, when it is not.
pub fn netns_or_skip(test: &str) -> bool {
    stagetrace_test_support::prereq::have(
        test,
        "netns",
        stagetrace_experiment::netns::kernel_bottleneck_available(),
        "the kernel bottleneck needs root and iproute2 (ip, tc)",
    )
}
