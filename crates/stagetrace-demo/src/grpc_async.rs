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
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stagetrace::{record::CallRecord, FlushGuard, StageLayer};
use stagetrace_analyze::render;
use stagetrace_analyze::stats::median;
use stagetrace_analyze::table::{Align, Table};
use stagetrace_grpc::lerobot::{
    PolicyConfig, PolicyServer, Robot, RobotConfig, RobotReport, ServerEvent, SpawnedServer,
};
use stagetrace_grpc::tower::ServerLayer;
use stagetrace_grpc::wire::Disposition;
use stagetrace_net::ServerClock;
use stagetrace_schema::{ms_to_ns, Figure};
use stagetrace_sim::ms;
use tonic::transport::Channel;

use crate::args::DemoArgs;
use crate::error::{err, DemoError};
use crate::figures::analyze_run;
use crate::hop_services::server_proxy;
use crate::records::Collect;
use crate::Outcome;

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

/// Run the async scenario into `out`; its report and truth table.
pub(crate) fn run(
    a: &DemoArgs,
    out: &Path,
    rt: &tokio::runtime::Runtime,
    stop: &AtomicBool,
) -> Result<Outcome, DemoError> {
    let events = Arc::new(Mutex::new(ServerTruth::default()));
    let served = serve(a, Arc::clone(&events))?;
    let proxy = server_proxy(a, served.addr())?;
    let target = proxy.as_ref().map_or(served.addr(), |p| p.local_addr());
    let records = Arc::new(Mutex::new(Vec::new()));
    let (layer, guard) = stage_layer(a, out, &records)?;
    let robot = drive_robot(a, rt, &layer, target)?;
    let summary = guard.finish();
    if let Some(p) = proxy {
        p.shutdown();
    }
    drop(served);
    if stop.load(Ordering::SeqCst) {
        return Ok(Outcome::done(String::new()));
    }
    let records = records.lock().map(|v| v.clone()).unwrap_or_default();
    let truth = events
        .lock()
        .map(|mut t| std::mem::take(&mut *t))
        .unwrap_or_default();
    let mut text = render::text(&analyze_run(out, &summary.run)?);
    text.push_str(&truth_table(a, &records, &truth, robot.dry_ticks));
    text.push_str(&format!("\nrecords and summaries: {}\n", out.display()));
    Ok(Outcome {
        report: text,
        failed: no_chunk(&robot),
    })
}

/// The robot's stage layer: records and summaries to `out`, every record
/// also to `records` (for the truth table; one observation at most per
/// tick bounds them).
fn stage_layer(
    a: &DemoArgs,
    out: &Path,
    records: &Arc<Mutex<Vec<CallRecord>>>,
) -> Result<(StageLayer, FlushGuard), DemoError> {
    StageLayer::builder()
        .output_dir(out)
        .clock_mode(a.clock.mode())
        .sink(Box::new(Collect::new(
            Arc::clone(records),
            4 * a.calls as usize + 64,
        )))
        .build()
        .map_err(|e| err(format!("cannot start the stage layer: {e}")))
}

/// The LeRobot-style robot for `--calls` control ticks at `--hz`, its
/// calls stamped through `layer`, against the policy server at `target`.
fn drive_robot(
    a: &DemoArgs,
    rt: &tokio::runtime::Runtime,
    layer: &StageLayer,
    target: SocketAddr,
) -> Result<RobotReport, DemoError> {
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
    rt.block_on(async {
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
        Ok(robot.run(|ts| ts as f64).await)
    })
}

/// A run in which no chunk came back, with what the robot sent.
fn no_chunk(robot: &RobotReport) -> Option<DemoError> {
    (robot.chunks == 0).then(|| {
        err(format!(
            "no chunk came back ({} observations sent, {} poll errors): is the server reachable?",
            robot.observations, robot.poll_errors
        ))
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
    Some((median(&mut tv)?, median(&mut rv)?, worst))
}

/// The median of figure `f` over the chunks' records, ms.
fn p50(chunks: &[&CallRecord], f: Figure) -> Option<f64> {
    median(&mut chunks.iter().filter_map(|r| r.ms(f)).collect::<Vec<_>>())
}

/// A figure in ms, as the truth table prints it.
fn ms_text(v: f64) -> String {
    format!("{v:.3} ms")
}

/// A figure that may be missing (`—`).
fn opt_ms_text(v: Option<f64>) -> String {
    v.map_or("—".to_string(), ms_text)
}

/// The records that failed for reason `why` (`replaced`, `cancelled`).
fn failed_for(records: &[CallRecord], why: &str) -> usize {
    records
        .iter()
        .filter(|r| r.error.as_deref() == Some(why))
        .count()
}

/// The truth table: measured or counted where it happened, against the
/// records.
fn truth_table(a: &DemoArgs, records: &[CallRecord], t: &ServerTruth, dry_ticks: u64) -> String {
    let chunks: Vec<&CallRecord> = records.iter().filter(|r| r.failed != Some(true)).collect();
    let mut table = Table::new(
        2,
        &[
            ("figure", Align::Left),
            ("truth", Align::Right),
            ("records", Align::Right),
            ("worst |error|", Align::Right),
        ],
    );
    per_chunk_rows(&mut table, &chunks, t);
    injected_rows(&mut table, a, &chunks);
    count_rows(&mut table, records, &chunks, t, dry_ticks);
    let mut s = String::from("\ntruth (measured or counted where it happened) vs the records:\n");
    table.write(&mut s);
    s.push_str(&format!(
        "    (split_err p50 {}: each record's bound on its uplink/downlink; cancelled at the end: {})\n",
        opt_ms_text(p50(&chunks, Figure::SplitErr)),
        failed_for(records, "cancelled")
    ));
    s
}

/// The rows of the figures the server read itself, chunk by chunk: the
/// uplink on the one wall clock, queue and infer on its own stamps.
fn per_chunk_rows(table: &mut Table, chunks: &[&CallRecord], t: &ServerTruth) {
    let uplink: fn(&ChunkTruth) -> f64 = |c| c.3;
    let queue: fn(&ChunkTruth) -> f64 = |c| c.1;
    let infer: fn(&ChunkTruth) -> f64 = |c| c.2;
    for (name, f, pick) in [
        ("uplink p50 (one wall clock)", Figure::Uplink, uplink),
        ("queue p50 (server's own stamps)", Figure::Queue, queue),
        ("infer p50 (server's own stamps)", Figure::Infer, infer),
    ] {
        if let Some((truth, got, worst)) = per_chunk(chunks, &t.per_chunk, f, pick) {
            table.row(vec![
                name.to_string(),
                ms_text(truth),
                ms_text(got),
                ms_text(worst),
            ]);
        }
    }
}

/// The rows of what the demo injected: the proxy's delays and the server's
/// skew, against the records' medians.
fn injected_rows(table: &mut Table, a: &DemoArgs, chunks: &[&CallRecord]) {
    // A one-way figure with its bound, when the split rests on an estimate.
    let one_way = |f: Figure| match p50(chunks, Figure::SplitErr) {
        Some(e) => format!(
            "{} ± {}",
            opt_ms_text(p50(chunks, f)),
            stagetrace_schema::notes::bound(e)
        ),
        None => opt_ms_text(p50(chunks, f)),
    };
    for (what, injected, measured) in [
        (
            "uplink delay injected (proxy)",
            a.uplink_delay_ms,
            one_way(Figure::Uplink),
        ),
        (
            "downlink delay injected (proxy)",
            a.downlink_delay_ms,
            one_way(Figure::Downlink),
        ),
        (
            "clock offset p50 (server skew)",
            a.server_skew_ms,
            opt_ms_text(p50(chunks, Figure::Offset)),
        ),
    ] {
        table.row(vec![
            what.to_string(),
            ms_text(injected),
            measured,
            String::new(),
        ]);
    }
}

/// The rows of what was counted: chunks, the server's dropped
/// observations, the robot's idle ticks, against the records.
fn count_rows(
    table: &mut Table,
    records: &[CallRecord],
    chunks: &[&CallRecord],
    t: &ServerTruth,
    dry_ticks: u64,
) {
    let in_records: u64 = chunks
        .iter()
        .filter_map(|r| r.dry_ticks)
        .map(u64::from)
        .sum();
    for (what, counted, in_the_records) in [
        ("chunks (server sent)", t.chunks, chunks.len() as u64),
        (
            "observations replaced",
            t.replaced,
            failed_for(records, "replaced") as u64,
        ),
        (
            "observations skipped",
            t.skipped,
            failed_for(records, "skipped") as u64,
        ),
        ("idle control ticks (robot counted)", dry_ticks, in_records),
    ] {
        table.row(vec![
            what.to_string(),
            counted.to_string(),
            in_the_records.to_string(),
            String::new(),
        ]);
    }
}
