//! `stagetrace demo --transport grpc-async`: LeRobot's async inference over
//! real gRPC on loopback (`stagetrace-grpc`'s LeRobot-style pair): the
//! robot streams observations, the server keeps one (a newer one replaces
//! it, a similar one or one of a timestep already predicted is skipped),
//! the robot polls for chunks and executes one action per control tick
//! from its action queue, sending its next observation when the queue
//! falls to `--refill-threshold` × `--chunk-size`. Behind the built-in
//! proxy (the injected network delays), with the server's clock skewed.
//!
//! Printed: the report of the records (`stagetrace report`'s tables and
//! verdicts, the action queue's line), then the truth table: what was
//! injected or counted where it happened, against what the records say.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stagetrace::{clock::ClockMode, record::CallRecord, sink::RecordSink, StageLayer};
use stagetrace_analyze::render;
use stagetrace_analyze::table::{Align, Table};
use stagetrace_grpc::lerobot::{
    PolicyConfig, PolicyServer, Robot, RobotConfig, ServerEvent, SpawnedServer,
};
use stagetrace_grpc::tower::ServerLayer;
use stagetrace_grpc::wire::Disposition;
use stagetrace_net::ServerClock;
use stagetrace_schema::{ms_to_ns, Figure};
use stagetrace_sim::ms;
use tonic::transport::Channel;

use super::args::{ClockArg, DemoArgs};
use super::error::{err, DemoError};
use super::figures::analyze_run;
use crate::stdout;

/// Every record of the run, for the truth table (bounded by the ticks: one
/// observation at most per tick).
struct Collect(Arc<Mutex<Vec<CallRecord>>>, usize);

impl RecordSink for Collect {
    fn on_record(&mut self, rec: &CallRecord) {
        if let Ok(mut v) = self.0.lock() {
            if v.len() < self.1 {
                v.push(rec.clone());
            }
        }
    }
}

/// What the server did, as it did it: the dropped observations, and per
/// chunk its own readings (queue, infer, the uplink on the one wall clock
/// robot and server share in the demo).
#[derive(Debug, Default)]
struct ServerTruth {
    queued: u64,
    replaced: u64,
    skipped: u64,
    chunks: u64,
    /// (timestep, queue, infer, uplink) per chunk, in ms; at most
    /// [`MAX_CHUNK_TRUTHS`].
    per_chunk: Vec<ChunkTruth>,
}

/// A chunk's timestep and the server's own queue, infer and one-clock
/// uplink readings (ms).
type ChunkTruth = (u64, f64, f64, f64);

/// Chunks whose truth is kept: a chunk per control tick at most.
const MAX_CHUNK_TRUTHS: usize = 1 << 20;

fn serve(a: &DemoArgs, events: Arc<Mutex<ServerTruth>>) -> Result<SpawnedServer, DemoError> {
    let policy = PolicyConfig {
        chunk_size: a.lerobot.chunk_size,
        pre: Duration::ZERO,
        model: ms(a.model_ms),
        post: Duration::ZERO,
        latency: ms(a.lerobot.inference_latency_ms),
        similarity: a.lerobot.similarity,
        poll_timeout: Duration::from_millis(200),
    };
    let skew = ms_to_ns(a.server_skew_ms).unwrap_or_default();
    let policy = PolicyServer::new(policy).on_event(move |e| record_event(&events, e));
    let layer = ServerLayer::new().clock(ServerClock::skewed_ns(skew));
    SpawnedServer::start(policy, layer, "demo-server")
        .map_err(|e| err(format!("cannot start the policy server: {e}")))
}

fn record_event(events: &Mutex<ServerTruth>, e: ServerEvent) {
    let Ok(mut t) = events.lock() else { return };
    match e {
        ServerEvent::Observation(o) => {
            match o.disposition {
                Disposition::Queued => t.queued += 1,
                Disposition::SkippedSimilar | Disposition::SkippedPredicted => t.skipped += 1,
            }
            t.replaced += u64::from(o.replaced.is_some());
        }
        ServerEvent::Chunk {
            timestep,
            queued,
            inferred,
            uplink_wall,
        } => {
            t.chunks += 1;
            if t.per_chunk.len() < MAX_CHUNK_TRUTHS {
                let ms = |d: Duration| d.as_secs_f64() * 1e3;
                t.per_chunk
                    .push((timestep, ms(queued), ms(inferred), ms(uplink_wall)));
            }
        }
        ServerEvent::EmptyPoll => {}
    }
}

/// Run the async scenario into `out` and print its report and truth table.
pub(crate) fn run(
    a: &DemoArgs,
    out: &Path,
    rt: &tokio::runtime::Runtime,
    stop: &AtomicBool,
) -> Result<(), DemoError> {
    let events = Arc::new(Mutex::new(ServerTruth::default()));
    let served = serve(a, Arc::clone(&events))?;
    let proxy = (a.uplink_delay_ms > 0.0 || a.downlink_delay_ms > 0.0)
        .then(|| {
            super::hops::proxy(
                served.addr(),
                a.uplink_delay_ms,
                a.downlink_delay_ms,
                a.proxy_cpu,
            )
        })
        .transpose()?;
    let target = proxy.as_ref().map_or(served.addr(), |p| p.local_addr());

    let records = Arc::new(Mutex::new(Vec::new()));
    let (layer, guard) = StageLayer::builder()
        .output_dir(out)
        .clock_mode(match a.clock {
            ClockArg::Estimate => ClockMode::Estimate,
            ClockArg::Trusted => ClockMode::Trusted,
            ClockArg::None => ClockMode::None,
        })
        .sink(Box::new(Collect(
            Arc::clone(&records),
            4 * a.calls as usize + 64,
        )))
        .build()
        .map_err(|e| err(format!("cannot start the stage layer: {e}")))?;
    let cfg = RobotConfig {
        fps: a.hz,
        chunk_size: a.lerobot.chunk_size,
        refill_threshold: a.lerobot.refill_threshold,
        ticks: a.calls,
        capture: ms(a.capture_ms),
        frame_bytes: 64 * 1024,
        drain: Duration::from_secs(5),
    };
    eprintln!(
        "stagetrace demo: LeRobot-style async inference over gRPC, {} control ticks at {} Hz …",
        a.calls, a.hz
    );
    let report = rt.block_on(async {
        let channel = Channel::from_shared(format!("http://{target}"))
            .map_err(|e| err(format!("bad server address: {e}")))?
            .connect()
            .await
            .map_err(|e| err(format!("cannot connect to the policy server: {e}")))?;
        let robot = Robot::new(
            channel,
            layer.direct_calls(),
            cfg,
            format!("grpc://{target}"),
        );
        // The robot moves by one step per timestep: `--similarity` in steps.
        Ok::<_, DemoError>(robot.run(|ts| ts as f64).await)
    })?;
    let summary = guard.finish();
    if let Some(p) = proxy {
        p.shutdown();
    }
    drop(served);
    if stop.load(Ordering::SeqCst) {
        return Ok(());
    }
    let records = records.lock().map(|v| v.clone()).unwrap_or_default();
    let truth = events
        .lock()
        .map(|mut t| std::mem::take(&mut *t))
        .unwrap_or_default();
    let analysis = analyze_run(out, &summary.run)?;
    let mut text = render::text(&analysis);
    text.push_str(&truth_table(a, &records, &truth, report.dry_ticks));
    text.push_str(&format!("\nrecords and summaries: {}\n", out.display()));
    stdout::print(&text).map_err(err)?;
    if report.chunks == 0 {
        return Err(err(format!(
            "no chunk came back ({} observations sent, {} poll errors): is the server reachable?",
            report.observations, report.poll_errors
        )));
    }
    Ok(())
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_unstable_by(f64::total_cmp);
    let n = v.len();
    (n > 0).then(|| {
        if n % 2 == 1 {
            v[n / 2]
        } else {
            0.5 * (v[n / 2 - 1] + v[n / 2])
        }
    })
}

/// Per chunk, a record's figure against the server's own reading of the
/// same chunk: (truth p50, records p50, worst |records − truth|), over the
/// chunks whose timestep ran once (a must-go observation can repeat one).
fn per_chunk(
    records: &[&CallRecord],
    truth: &[ChunkTruth],
    f: Figure,
    pick: fn(&ChunkTruth) -> f64,
) -> Option<(f64, f64, f64)> {
    let mut by_ts: HashMap<u64, Vec<f64>> = HashMap::new();
    for t in truth {
        by_ts.entry(t.0).or_default().push(pick(t));
    }
    let (mut tv, mut rv, mut worst) = (Vec::new(), Vec::new(), 0.0f64);
    for r in records {
        let (Some(v), Some([t])) = (r.ms(f), by_ts.get(&r.seq).map(Vec::as_slice)) else {
            continue;
        };
        worst = worst.max((v - t).abs());
        tv.push(*t);
        rv.push(v);
    }
    Some((median(tv)?, median(rv)?, worst))
}

/// The truth table: measured or counted where it happened, against the
/// records.
fn truth_table(a: &DemoArgs, records: &[CallRecord], t: &ServerTruth, dry_ticks: u64) -> String {
    let chunks: Vec<&CallRecord> = records.iter().filter(|r| r.failed != Some(true)).collect();
    let p50 = |f: Figure| median(chunks.iter().filter_map(|r| r.ms(f)).collect());
    let reason = |why: &str| {
        records
            .iter()
            .filter(|r| r.error.as_deref() == Some(why))
            .count()
    };
    let in_records: u64 = chunks
        .iter()
        .filter_map(|r| r.dry_ticks)
        .map(u64::from)
        .sum();
    let mut s = String::from("\ntruth (measured or counted where it happened) vs the records:\n");
    let mut table = Table::new(
        2,
        &[
            ("figure", Align::Left),
            ("truth", Align::Right),
            ("records", Align::Right),
            ("worst |error|", Align::Right),
        ],
    );
    let mut row = |what: &str, truth: String, measured: String, worst: String| {
        table.row(vec![what.to_string(), truth, measured, worst]);
    };
    let ms = |v: f64| format!("{v:.3} ms");
    let uplink: fn(&ChunkTruth) -> f64 = |c| c.3;
    let queue: fn(&ChunkTruth) -> f64 = |c| c.1;
    let infer: fn(&ChunkTruth) -> f64 = |c| c.2;
    for (name, f, pick) in [
        ("uplink p50 (one wall clock)", Figure::Uplink, uplink),
        ("queue p50 (server's own stamps)", Figure::Queue, queue),
        ("infer p50 (server's own stamps)", Figure::Infer, infer),
    ] {
        if let Some((truth, got, worst)) = per_chunk(&chunks, &t.per_chunk, f, pick) {
            row(name, ms(truth), ms(got), ms(worst));
        }
    }
    let fmt = |v: Option<f64>| v.map_or("—".to_string(), ms);
    let none = String::new;
    // A one-way figure with its bound, when the split rests on an estimate.
    let one_way = |f: Figure| match p50(Figure::SplitErr) {
        Some(e) => format!("{} ± {}", fmt(p50(f)), render::bound(e)),
        None => fmt(p50(f)),
    };
    row(
        "uplink delay injected (proxy)",
        ms(a.uplink_delay_ms),
        one_way(Figure::Uplink),
        none(),
    );
    row(
        "downlink delay injected (proxy)",
        ms(a.downlink_delay_ms),
        one_way(Figure::Downlink),
        none(),
    );
    row(
        "clock offset p50 (server skew)",
        ms(a.server_skew_ms),
        fmt(p50(Figure::Offset)),
        none(),
    );
    row(
        "chunks (server sent)",
        t.chunks.to_string(),
        chunks.len().to_string(),
        none(),
    );
    row(
        "observations replaced",
        t.replaced.to_string(),
        reason("replaced").to_string(),
        none(),
    );
    row(
        "observations skipped",
        t.skipped.to_string(),
        reason("skipped").to_string(),
        none(),
    );
    row(
        "idle control ticks (robot counted)",
        dry_ticks.to_string(),
        in_records.to_string(),
        none(),
    );
    table.write(&mut s);
    s.push_str(&format!(
        "    (split_err p50 {}: each record's bound on its uplink/downlink; cancelled at the end: {})\n",
        fmt(p50(Figure::SplitErr)),
        reason("cancelled")
    ));
    s
}
