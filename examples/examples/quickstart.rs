//! A 30 Hz control loop observed by stagetrace: capture → transport (to a
//! simulated policy server) → dispatch, with tunable costs.
//!
//! ```sh
//! cargo run -p examples --example quickstart
//! cargo run -p examples --example quickstart -- --calls 600 --infer-ms 25 --out runs/slow
//! tail -f runs/quickstart/summary.*.jsonl      # while it runs
//! ```
//!
//! Prints the per-stage table at the end and leaves `records-<run>.*.jsonl`
//! (one line per call) and `summary.*.jsonl` (one line per 2 s window, then the
//! cumulative one) in the output directory.

use std::error::Error;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use stagetrace::{ServerTiming, StageLayer, StageSpanExt};
use tracing::info_span;
use tracing_subscriber::prelude::*;

/// The knobs, from `--name value` arguments.
struct Knobs {
    calls: u64,
    hz: f64,
    capture_ms: f64,
    uplink_ms: f64,
    infer_ms: f64,
    downlink_ms: f64,
    dispatch_ms: f64,
    /// Every n-th inference takes 3× as long (0 = never): a tail to look at.
    slow_every: u64,
    out: String,
}

const USAGE: &str = "usage: quickstart [--calls N] [--hz HZ] [--capture-ms MS] [--uplink-ms MS] \
[--infer-ms MS] [--downlink-ms MS] [--dispatch-ms MS] [--slow-every N] [--out DIR]\n\
Defaults: 300 calls at 30 Hz, capture 3, uplink 2, infer 12, downlink 1.5, dispatch 1 ms, \
every 40th inference 3x slower, out runs/quickstart.";

impl Knobs {
    /// The knobs from the command line's arguments (program name left
    /// out), or `None` when `--help` / `-h` asked for the usage.
    fn from_args(args: impl IntoIterator<Item = String>) -> Result<Option<Self>, String> {
        let mut k = Knobs {
            calls: 300,
            hz: 30.0,
            capture_ms: 3.0,
            uplink_ms: 2.0,
            infer_ms: 12.0,
            downlink_ms: 1.5,
            dispatch_ms: 1.0,
            slow_every: 40,
            out: "runs/quickstart".to_owned(),
        };
        let args: Vec<String> = args.into_iter().collect();
        if args.iter().any(|a| a == "--help" || a == "-h") {
            return Ok(None);
        }
        for pair in args.chunks(2) {
            let (name, value) = match pair {
                [n, v] => (n.as_str(), v.as_str()),
                [n] => return Err(format!("{n} needs a value\n{USAGE}")),
                _ => unreachable!("chunks(2) yields one or two items"),
            };
            let num = || {
                value
                    .parse::<f64>()
                    .map_err(|_| format!("{name}: {value:?} is not a number"))
            };
            match name {
                "--calls" => k.calls = num()? as u64,
                "--hz" => k.hz = num()?,
                "--capture-ms" => k.capture_ms = num()?,
                "--uplink-ms" => k.uplink_ms = num()?,
                "--infer-ms" => k.infer_ms = num()?,
                "--downlink-ms" => k.downlink_ms = num()?,
                "--dispatch-ms" => k.dispatch_ms = num()?,
                "--slow-every" => k.slow_every = num()? as u64,
                "--out" => k.out = value.to_owned(),
                _ => return Err(format!("unknown option {name}\n{USAGE}")),
            }
        }
        Ok(Some(k))
    }
}

/// Busy work for `ms` milliseconds (sleeps the bulk, spins the rest).
fn work(ms: f64) {
    let d = Duration::from_secs_f64(ms.max(0.0) / 1e3);
    let start = Instant::now();
    if d > Duration::from_millis(2) {
        std::thread::sleep(d - Duration::from_millis(1));
    }
    while start.elapsed() < d {
        std::hint::spin_loop();
    }
}

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The simulated policy server: what `stagetrace-net` does on a real one is
/// to measure this and send it back with the response.
fn policy_server(k: &Knobs, call: u64) -> ServerTiming {
    let recv_unix_ns = unix_ns();
    let recv = Instant::now();
    let slow = k.slow_every > 0 && call % k.slow_every == k.slow_every - 1;
    let infer = Instant::now();
    work(if slow { k.infer_ms * 3.0 } else { k.infer_ms });
    let infer_ns = infer.elapsed().as_nanos() as u64;
    ServerTiming {
        recv_unix_ns: Some(recv_unix_ns),
        total_ns: Some(recv.elapsed().as_nanos() as u64),
        infer_ns: Some(infer_ns),
        ..ServerTiming::default()
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let k = match Knobs::from_args(std::env::args().skip(1)) {
        Ok(Some(k)) => k,
        Ok(None) => {
            println!("{USAGE}");
            return Ok(());
        }
        Err(e) => {
            // Before anything is started: nothing to flush.
            eprintln!("quickstart: {e}");
            std::process::exit(2);
        }
    };

    // 1. Register the stage layer next to whatever the app already uses.
    let (stages, guard) = StageLayer::builder()
        .output_dir(&k.out)
        .window(Duration::from_secs(2))
        .target_hz(k.hz)
        .warmup_calls(10)
        .build()?;
    tracing_subscriber::registry().with(stages).init();

    // 2. The control loop: one `call` span per cycle, stage spans inside.
    println!(
        "quickstart: {} calls at {} Hz; records and summaries in {}/",
        k.calls, k.hz, k.out
    );
    let period = Duration::from_secs_f64(1.0 / k.hz);
    let mut next = Instant::now();
    for i in 0..k.calls {
        let call = info_span!("call", kind = "infer", seq = i).entered();
        info_span!("capture").in_scope(|| work(k.capture_ms));
        let transport = info_span!("transport");
        transport.in_scope(|| {
            std::thread::sleep(Duration::from_secs_f64(k.uplink_ms / 1e3));
            let timing = policy_server(&k, i);
            std::thread::sleep(Duration::from_secs_f64(k.downlink_ms / 1e3));
            transport.record_server_timing(timing);
        });
        drop(transport);
        info_span!("dispatch").in_scope(|| work(k.dispatch_ms));
        drop(call);

        next += period;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            // Fell behind: skip the missed ticks (they count as deadline misses).
            while next <= now {
                next += period;
            }
        }
    }

    // 3. Drain the worker and print the cumulative table.
    let summary = guard.finish();
    println!("\n{}", summary.table());
    println!(
        "files: {}/records-{}.*.jsonl, {}/summary.*.jsonl",
        k.out, summary.run, k.out
    );
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Option<Knobs>, String> {
        Knobs::from_args(args.iter().map(|a| (*a).to_owned()))
    }

    #[test]
    fn help_asks_for_the_usage() {
        for flag in ["--help", "-h"] {
            assert!(parse(&[flag]).unwrap().is_none(), "{flag}");
            assert!(parse(&["--calls", "5", flag]).unwrap().is_none(), "{flag}");
        }
        assert!(USAGE.starts_with("usage: quickstart [--calls N]"));
    }

    #[test]
    fn knobs_and_mistakes() {
        let k = parse(&["--calls", "600", "--infer-ms", "25", "--out", "runs/slow"])
            .unwrap()
            .unwrap();
        assert_eq!(
            (k.calls, k.infer_ms, k.out.as_str()),
            (600, 25.0, "runs/slow")
        );
        let err = parse(&["--nope", "1"]).err().unwrap();
        assert!(
            err.starts_with("unknown option --nope\nusage: quickstart"),
            "{err}"
        );
        let err = parse(&["--calls"]).err().unwrap();
        assert!(err.starts_with("--calls needs a value\nusage:"), "{err}");
    }
}
