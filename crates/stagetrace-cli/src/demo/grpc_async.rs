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

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stagetrace::{CallRecord, ClockMode, RecordSink, StageLayer};
use stagetrace_analyze::render;
use stagetrace_grpc::lerobot::{PolicyConfig, PolicyServer, Robot, RobotConfig, ServerEvent};
use stagetrace_grpc::wire::Disposition;
use stagetrace_grpc::ServerLayer;
use stagetrace_net::ServerClock;
use stagetrace_schema::{ms_to_ns, Figure};
use stagetrace_sim::ms;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};

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

/// The policy server on a thread and runtime of its own, until dropped.
struct Served {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What the server did, as it did it (the truth of the dropped observations).
#[derive(Debug, Default)]
struct ServerTruth {
    queued: u64,
    replaced: u64,
    skipped: u64,
    chunks: u64,
}

fn serve(a: &DemoArgs, events: Arc<Mutex<ServerTruth>>) -> Result<Served, DemoError> {
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
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("demo-server".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = addr_tx.send(Err(format!("cannot start its runtime: {e}")));
                    return;
                }
            };
            rt.block_on(async move {
                // Without TCP_NODELAY the trailers, written apart from the
                // reply's data, would wait out the robot's delayed ACK.
                let incoming = match TcpIncoming::bind(SocketAddr::from(([127, 0, 0, 1], 0))) {
                    Ok(i) => i.with_nodelay(Some(true)),
                    Err(e) => {
                        let _ = addr_tx.send(Err(format!("cannot listen on loopback: {e}")));
                        return;
                    }
                };
                let _ = addr_tx.send(incoming.local_addr().map_err(|e| e.to_string()));
                let svc = PolicyServer::new(policy)
                    .on_event(move |e| record_event(&events, e))
                    .into_service();
                let _ = Server::builder()
                    .layer(ServerLayer::new().clock(ServerClock::skewed_ns(skew)))
                    .add_service(svc)
                    .serve_with_incoming_shutdown(incoming, async move {
                        let _ = stop_rx.await;
                    })
                    .await;
            });
        })
        .map_err(|e| err(format!("cannot start the policy server: {e}")))?;
    let addr = addr_rx
        .recv_timeout(Duration::from_secs(10))
        .map_err(|_| err("the policy server did not start".to_string()))?
        .map_err(|e| err(format!("the policy server did not start: {e}")))?;
    Ok(Served {
        addr,
        stop: Some(stop_tx),
        thread: Some(thread),
    })
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
        ServerEvent::Chunk { .. } => t.chunks += 1,
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
                served.addr,
                a.uplink_delay_ms,
                a.downlink_delay_ms,
                a.proxy_cpu,
            )
        })
        .transpose()?;
    let target = proxy.as_ref().map_or(served.addr, |p| p.local_addr());

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
        .map(|t| ServerTruth { ..*t })
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

/// The truth table: injected or counted where it happened, against the
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
    let mut s = String::from("\ntruth (injected or counted where it happened) vs the records:\n");
    let mut row = |what: &str, truth: String, measured: String| {
        s.push_str(&format!("  {what:<34} {truth:>14}   {measured:>14}\n"));
    };
    row("figure", "truth".into(), "records".into());
    let fmt = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{v:.3} ms"));
    row(
        "uplink p50 (proxy delay)",
        format!("{:.3} ms", a.uplink_delay_ms),
        fmt(p50(Figure::Uplink)),
    );
    row(
        "downlink p50 (proxy delay)",
        format!("{:.3} ms", a.downlink_delay_ms),
        fmt(p50(Figure::Downlink)),
    );
    row(
        "infer p50 (the model's time)",
        format!("{:.3} ms", a.model_ms),
        fmt(p50(Figure::Infer)),
    );
    row(
        "clock offset p50 (server skew)",
        format!("{:.3} ms", a.server_skew_ms),
        fmt(p50(Figure::Offset)),
    );
    row(
        "chunks (server sent)",
        t.chunks.to_string(),
        chunks.len().to_string(),
    );
    row(
        "observations replaced",
        t.replaced.to_string(),
        reason("replaced").to_string(),
    );
    row(
        "observations skipped",
        t.skipped.to_string(),
        reason("skipped").to_string(),
    );
    row(
        "idle control ticks (robot counted)",
        dry_ticks.to_string(),
        in_records.to_string(),
    );
    s.push_str("  (queue and poll_wait are the server's own clock, placed on the robot's by the offset; cancelled: ");
    s.push_str(&format!(
        "{} observations in flight at the end)\n",
        reason("cancelled")
    ));
    s
}
