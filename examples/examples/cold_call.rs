//! One call at a time with cold caches, as a robot's control loop makes
//! them: what the layer charges itself (`observer_us`) and what the app
//! thread spends per call, with host figures on or off.
//!
//! ```text
//! cargo run --release -p examples --example cold_call -- [on|off] [STAGE_US] [PERIOD_MS] [CALLS]
//! ```
//!
//! `STAGE_US`: busy time inside each of the four stages (default 0);
//! `PERIOD_MS`: the sleep between calls (default 33, a 30 Hz loop);
//! `CALLS` (default 150). With `--evict` instead of a period, the loop
//! writes 48 MiB between calls (another process's working set), so every
//! line the call touches is cold; run that under callgrind's cache model
//! to count them, function by function (`docs/stages.md` §8, "In a real
//! control loop: cold caches"):
//!
//! ```text
//! valgrind --tool=callgrind --cache-sim=yes --LL=8388608,16,64 \
//!   --toggle-collect='cold_call::one_call' \
//!   target/release/examples/cold_call off 0 --evict 40
//! ```
#![allow(missing_docs, clippy::unwrap_used)]

use stagetrace::StageLayer;
use tracing::info_span;
use tracing_subscriber::prelude::*;

/// Busy for `us` microseconds (0: returns at once).
fn busy(us: u64) {
    let t = std::time::Instant::now();
    while t.elapsed().as_micros() < u128::from(us) {
        std::hint::spin_loop();
    }
}

/// One control cycle's spans.
#[inline(never)]
fn one_call(stage_us: u64) {
    let _call = info_span!("call").entered();
    info_span!("capture").in_scope(|| busy(stage_us));
    info_span!("transport").in_scope(|| busy(stage_us));
    info_span!("infer").in_scope(|| busy(stage_us));
    info_span!("dispatch").in_scope(|| busy(stage_us));
}

/// Writes a buffer far larger than the caches: none of the call's lines
/// survive it.
fn evict(buf: &mut [u8]) {
    for i in (0..buf.len()).step_by(64) {
        buf[i] = buf[i].wrapping_add(1);
    }
    std::hint::black_box(&buf);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let host = args.first().is_none_or(|a| a == "on");
    let stage_us: u64 = args.get(1).map_or(0, |a| a.parse().unwrap());
    let period = args.get(2).map_or("33", String::as_str);
    let calls: usize = args.get(3).map_or(150, |a| a.parse().unwrap());
    let mut evicting = (period == "--evict").then(|| vec![0u8; 48 << 20]);
    let period_ms: u64 = if evicting.is_some() {
        0
    } else {
        period.parse().unwrap()
    };
    let (layer, guard) = StageLayer::builder().host_figures(host).build().unwrap();
    let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
    let mut cpu_ns = Vec::with_capacity(calls);
    tracing::dispatcher::with_default(&dispatch, || {
        for _ in 0..calls {
            match evicting.as_mut() {
                Some(buf) => evict(buf),
                None => std::thread::sleep(std::time::Duration::from_millis(period_ms)),
            }
            let c0 = stagetrace::host::thread_cpu_ns().unwrap_or(0);
            one_call(stage_us);
            cpu_ns.push(stagetrace::host::thread_cpu_ns().unwrap_or(0) - c0);
        }
    });
    drop(dispatch);
    cpu_ns.sort_unstable();
    let summary = guard.finish();
    let observer = summary.observer_us.map(|q| (q.p50, q.p99));
    println!(
        "host figures {}, {stage_us} us per stage, {calls} calls: observer_us p50/p99 {:?}, \
         app-thread CPU per call p50 {:.1} us",
        if host { "on" } else { "off" },
        observer,
        cpu_ns[cpu_ns.len() / 2] as f64 / 1000.0
    );
}
