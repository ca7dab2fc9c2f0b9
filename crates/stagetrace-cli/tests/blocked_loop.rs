//! A control loop blocked by its own logging, and one blocked on a lock:
//! each named for what it is, not as "gap" (docs/host.md, "Log writing and
//! locks").
//!
//! The loop is a real app on the stage layer: a call span with capture,
//! transport and dispatch spans, 200 calls. Between its transport and its
//! dispatch it either
//!
//! - logs one line (3 KiB, an observation dumped) through a
//!   `tracing_subscriber::fmt` layer whose writer is a real pipe, wrapped
//!   with `stagetrace::log_writer::timed`. The pipe holds one page; its
//!   reader (a journald that falls behind) pauses 15 ms before every 10th
//!   line, so every 10th call's write blocks until it reads again; or
//! - takes a `std::sync::Mutex` that another thread holds for 15 ms around
//!   every 10th call.
//!
//! Truth: the calls that blocked, from the app's own stamps around the log
//! line or the lock. `stagetrace report --json` must name `host_log` (the
//! log case) or `blocked_wait` (the lock case) on the gap first, and
//! nothing else but spikes of a stage whose spins the machine really
//! stretched (the app's own stamps around each spin say which).

#![allow(clippy::unwrap_used)]

mod support;

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use stagetrace::StageLayer;
use support::{p, stagetrace, stdout};
use tracing_subscriber::layer::Layered;
use tracing_subscriber::prelude::*;
use tracing_subscriber::{Layer, Registry};

const CALLS: usize = 200;

/// One loop at a time: two spinning loops on a 2-core machine would
/// preempt each other, and their host_cpu verdicts, right as they are,
/// are not what these tests look at.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
const EVERY: usize = 10;
const HELD: Duration = Duration::from_millis(15);

/// Spins for `d`; how long it took (more than `d` when the machine took
/// the core away, or stalled the VM, meanwhile).
fn spin(d: Duration) -> Duration {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
    t.elapsed()
}

/// What one call did, from the app's own stamps: how long its gap blocked,
/// and how long its transport and dispatch spins really took.
struct Truth {
    blocked: Duration,
    transport: Duration,
    dispatch: Duration,
}

/// One call of the loop; `between` runs after its transport, before its
/// dispatch (the gap), and returns how long it blocked.
fn call(seq: usize, between: &mut dyn FnMut(usize) -> Duration) -> Truth {
    let span = tracing::info_span!("call", seq = seq as u64);
    let _c = span.enter();
    let _ = tracing::info_span!("capture").in_scope(|| spin(Duration::from_micros(300)));
    // The request's way (busy-polled: a sleep's wake-up jitter would be
    // transport spikes of the test's own making).
    let transport = tracing::info_span!("transport").in_scope(|| spin(TRANSPORT));
    let blocked = between(seq);
    let dispatch = tracing::info_span!("dispatch").in_scope(|| spin(DISPATCH));
    Truth {
        blocked,
        transport,
        dispatch,
    }
}

const TRANSPORT: Duration = Duration::from_millis(1);
const DISPATCH: Duration = Duration::from_micros(200);

/// The verdicts the report must give: `expected` first, then nothing else
/// but spikes of a stage whose spins the machine really stretched (by a
/// millisecond or more on some call: a stall of the whole VM, which no host
/// figure of the guest sees, is a real spike, rightly named).
fn assert_verdicts(dir: &Path, truth: &[Truth], expected: (&str, &str)) {
    let got = verdicts(dir);
    let stretched = |f: fn(&Truth) -> Duration, d: Duration| {
        truth.iter().any(|t| f(t) >= d + Duration::from_millis(1))
    };
    let real_spikes = [
        ("roundtrip", stretched(|t| t.transport, TRANSPORT)),
        ("dispatch", stretched(|t| t.dispatch, DISPATCH)),
    ];
    assert_eq!(
        got.first().map(|(c, s)| (c.as_str(), s.as_str())),
        Some(expected),
        "{got:?}"
    );
    for (code, stage) in &got[1..] {
        let real = real_spikes
            .iter()
            .any(|(s, real)| *real && code == "spikes" && s == stage);
        assert!(
            real,
            "{code} on {stage}, with no such spike in the loop: {got:?}"
        );
    }
}

/// The app's log layer, if it has one: on top of the stage layer.
type LogLayer = Box<dyn Layer<Layered<StageLayer, Registry>> + Send + Sync>;

/// The loop's `CALLS` calls on the stage layer (writing records into
/// `dir`) and `log`, `between` in each call's gap; how long each blocked.
fn run_loop(
    dir: &Path,
    log: Option<LogLayer>,
    between: &mut dyn FnMut(usize) -> Duration,
) -> Vec<Truth> {
    let (stages, guard) = StageLayer::builder().output_dir(dir).build().unwrap();
    let truth = tracing::subscriber::with_default(
        tracing_subscriber::registry().with(stages).with(log),
        || (0..CALLS).map(|seq| call(seq, between)).collect(),
    );
    guard.finish();
    truth
}

/// The verdict codes `stagetrace report --json` gives the records in `dir`,
/// with their stages; `host_cpu` verdicts left out: on a loaded machine a
/// stage the scheduler delayed is rightly laid at the robot's host, and
/// that is not what these tests look at.
fn verdicts(dir: &Path) -> Vec<(String, String)> {
    let out = stagetrace(&["report", p(dir), "--json"]);
    assert!(out.status.success(), "{}", support::stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    v["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| !matches!(v["code"].as_str(), Some("steady" | "faster" | "host_cpu")))
        .map(|v| {
            (
                v["code"].as_str().unwrap_or("").to_owned(),
                v["stage"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

/// A pipe holding one page, its write end and its read end.
fn small_pipe() -> (std::fs::File, std::fs::File) {
    let mut fds = [0; 2];
    // SAFETY: pipe writes two fds into the array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: fresh fds, each owned once.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: F_SETPIPE_SZ on a pipe fd we own; the kernel rounds up to a page.
    unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, 4096) };
    (std::fs::File::from(w), std::fs::File::from(r))
}

#[test]
fn a_loop_blocked_by_its_own_logging_is_named_log_writing() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (pipe_w, mut pipe_r) = small_pipe();
    let line = "x".repeat(3000);
    // The reader: a line at a time, pausing before every 10th.
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; 3100];
        let mut lines = 0usize;
        let mut got = 0usize;
        loop {
            match pipe_r.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    got += n;
                    while got >= 3000 {
                        got -= 3000;
                        lines += 1;
                        if lines % EVERY == EVERY - 1 {
                            std::thread::sleep(HELD);
                        }
                    }
                }
            }
        }
        lines
    });
    // `&File` writes straight through: one write per log line.
    let writer = Arc::new(pipe_w);
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .without_time()
        .with_writer(stagetrace::log_writer::timed(Arc::clone(&writer)));
    let truth = run_loop(dir.path(), Some(Box::new(fmt)), &mut |_| {
        let t = Instant::now();
        tracing::info!(target: "robot", "{line}");
        t.elapsed()
    });
    drop(writer);
    let lines = reader.join().unwrap();
    assert!(lines >= CALLS - 1, "{lines} lines read");
    // The truth: the calls whose log line blocked for most of a pause.
    let blocked = truth.iter().filter(|t| t.blocked >= HELD / 2).count();
    assert!(
        blocked >= CALLS / EVERY / 2,
        "only {blocked} log writes blocked: the pipe did not fill"
    );
    assert_verdicts(dir.path(), &truth, ("host_log", "gap"));
}

#[test]
fn a_loop_blocked_on_a_lock_is_named_a_blocked_wait() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let lock = Arc::new(Mutex::new(0u64));
    // The other thread takes the lock before every 10th call's gap and
    // holds it: the barrier says when.
    let go = Arc::new(Barrier::new(2));
    let holder = {
        let (lock, go) = (Arc::clone(&lock), Arc::clone(&go));
        std::thread::spawn(move || {
            for _ in 0..CALLS / EVERY {
                go.wait();
                let mut g = lock.lock().unwrap();
                go.wait();
                std::thread::sleep(HELD);
                *g += 1;
            }
        })
    };
    let truth = run_loop(dir.path(), None, &mut |seq| {
        if seq % EVERY == EVERY - 1 {
            // Held by the other thread from here on.
            go.wait();
            go.wait();
        }
        let t = Instant::now();
        let mut g = lock.lock().unwrap();
        *g += 1;
        t.elapsed()
    });
    holder.join().unwrap();
    let blocked = truth.iter().filter(|t| t.blocked >= HELD / 2).count();
    assert!(
        blocked >= CALLS / EVERY / 2,
        "only {blocked} calls waited for the lock"
    );
    assert_verdicts(dir.path(), &truth, ("blocked_wait", "gap"));
}
