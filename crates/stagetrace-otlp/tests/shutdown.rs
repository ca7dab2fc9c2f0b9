//! Shutdown against a collector that accepts connections and never answers
//!: flushing at shutdown waits one bound for the whole
//! process, whatever the number of exporters and flushes, and the last word
//! accounts for every record — exported + dropped + failed + abandoned =
//! produced — in the exporter's stats, its final message and the layer's
//! cumulative summary.

#![allow(missing_docs, clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stagetrace::{record::ServerRecord, summary::WindowSummary, StageLayer};
use stagetrace_otlp::{ExportStats, OtlpBuilder, OtlpExporter, ShutdownDeadline};
use stagetrace_test_support::collector::silent_collector;
use stagetrace_test_support::{read_summaries, timing, Collect};
use tracing_subscriber::layer::SubscriberExt;

use common::records::two_span_call;

/// The shutdown bound the tests configure.
const BOUND: Duration = Duration::from_millis(1500);
/// What a shutdown may take beyond its bound.
const MARGIN: Duration = Duration::from_secs(1);

/// A collector that answers every request, `delay` after it arrived;
/// returns its endpoint and when each request arrived.
fn slow_collector(delay: Duration) -> (String, Arc<Mutex<Vec<Instant>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&arrivals);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let seen = Arc::clone(&seen);
            std::thread::spawn(
                move || {
                    while answer_late(&stream, delay, &seen).is_some() {}
                },
            );
        }
    });
    (format!("http://127.0.0.1:{port}"), arrivals)
}

/// Reads one request of a keep-alive connection, notes when it arrived,
/// answers `200 OK` after `delay`. `None` when the connection is done.
fn answer_late(stream: &TcpStream, delay: Duration, seen: &Mutex<Vec<Instant>>) -> Option<()> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    seen.lock().unwrap().push(Instant::now());
    let mut len = 0;
    loop {
        line.clear();
        reader.read_line(&mut line).ok()?;
        let head = line.trim_end().to_ascii_lowercase();
        if head.is_empty() {
            break;
        }
        if let Some(v) = head.strip_prefix("content-length:") {
            len = v.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    std::thread::sleep(delay);
    let mut out = stream;
    out.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n",
    )
    .ok()
}

/// An exporter whose requests to `endpoint` hang far longer than the
/// shutdown bound (the default 10 s export timeout), sending small batches
/// soon, so that one is in flight when shutdown starts.
fn builder(endpoint: &str, service: &str) -> OtlpBuilder {
    OtlpExporter::builder()
        .endpoint(endpoint)
        .service_name(service)
        .batch_size(16)
        .export_interval(Duration::from_millis(20))
        .shutdown_timeout(BOUND)
}

/// `n` control cycles through the stage layer.
fn calls(n: u64) {
    for _ in 0..n {
        let _call = tracing::info_span!("call", kind = "infer").entered();
        tracing::info_span!("capture").in_scope(|| ());
        tracing::info_span!("transport").in_scope(|| ());
        tracing::info_span!("dispatch").in_scope(|| ());
    }
}

fn counter(summary: &WindowSummary, name: &str) -> u64 {
    summary.sink_counters.get(name).copied().unwrap_or(0)
}

/// Every record in exactly one count, and as many as were produced.
#[track_caller]
fn accounts_for_all(stats: &ExportStats, produced: u64) {
    assert_eq!(stats.produced_records(), produced, "{stats}");
    assert_eq!(
        stats.exported_records
            + stats.dropped_records
            + stats.failed_records
            + stats.abandoned_records,
        produced,
        "{stats}"
    );
    assert_eq!(stats.pending_records(), 0, "{stats}");
    let said = stats.to_string();
    assert!(
        said.contains(&format!("otlp: {produced} records: "))
            && said.contains(&format!(
                "{} abandoned at shutdown",
                stats.abandoned_records
            )),
        "the final message accounts for every record: {said}"
    );
}

/// The cumulative summary's `sink_counters` add up to `produced`.
#[track_caller]
fn summary_accounts_for_all(summary: &WindowSummary, produced: u64) {
    let c = |name| counter(summary, name);
    assert_eq!(
        c("otlp.queued") + c("otlp.dropped"),
        produced,
        "{:?}",
        summary.sink_counters
    );
    assert_eq!(
        c("otlp.exported") + c("otlp.dropped") + c("otlp.failed") + c("otlp.abandoned"),
        produced,
        "the summary's counters are read after the final flush: {:?}",
        summary.sink_counters
    );
}

#[test]
fn two_exporters_and_a_layer_shut_down_within_one_bound_accounting_for_every_record() {
    let endpoint = silent_collector();
    let dir = tempfile::tempdir().unwrap();
    let deadline = ShutdownDeadline::new();
    let client = builder(&endpoint, "robot-client")
        .shutdown_deadline(&deadline)
        .build()
        .unwrap();
    let server = builder(&endpoint, "policy-server")
        .shutdown_deadline(&deadline)
        .build()
        .unwrap();
    let (layer, guard, kept) = Collect::build(
        StageLayer::builder()
            .output_dir(dir.path())
            .sink(Box::new(client.clone())),
    );

    let n: u64 = 300;
    tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || calls(n));
    for _ in 0..n {
        server.export_server(&ServerRecord {
            kind: "infer".into(),
            ..ServerRecord::default()
        });
    }
    kept.wait_for(n as usize);
    // A batch of each exporter is on its way to the collector, which holds it.
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    let summary = guard.finish();
    let client_stats = client.shutdown();
    let server_stats = server.shutdown();
    drop((client, server));
    let took = t0.elapsed();
    eprintln!("shutdown took {took:?}: {client_stats} / {server_stats}");

    timing::error(
        "shutdown wall time (s)",
        took.as_secs_f64(),
        (BOUND + MARGIN).as_secs_f64(),
    );
    assert!(
        took < BOUND + MARGIN,
        "the whole shutdown (layer flush, two exporters, drops) took {took:?}; bound {BOUND:?}"
    );
    assert!(
        client_stats.abandoned_records > 0 && server_stats.abandoned_records > 0,
        "the silent collector took nothing: {client_stats} / {server_stats}"
    );
    accounts_for_all(&client_stats, n);
    accounts_for_all(&server_stats, n);
    summary_accounts_for_all(&summary, n);
    // The summary the layer wrote last (the cumulative one) says the same.
    let written = read_summaries(dir.path());
    let last = written.last().unwrap();
    assert_eq!(last.window, "cumulative");
    assert_eq!(last.sink_counters, summary.sink_counters);
    let client_counters: BTreeMap<String, u64> = client_stats
        .counters()
        .iter()
        .map(|(k, v)| ((*k).to_owned(), *v))
        .collect();
    assert_eq!(
        summary.sink_counters, client_counters,
        "the summary's counters are the exporter's final ones"
    );
}

#[test]
fn a_layer_finishing_then_dropping_its_exporter_waits_one_bound() {
    let endpoint = silent_collector();
    let exporter = builder(&endpoint, "robot-client").build().unwrap();
    let (layer, guard, kept) =
        Collect::build(StageLayer::builder().sink(Box::new(exporter.clone())));
    let n: u64 = 200;
    tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || calls(n));
    kept.wait_for(n as usize);
    std::thread::sleep(Duration::from_millis(200));

    let t0 = Instant::now();
    let summary = guard.finish();
    drop(exporter);
    let took = t0.elapsed();
    eprintln!("shutdown took {took:?}: {:?}", summary.sink_counters);
    timing::error(
        "shutdown wall time (s)",
        took.as_secs_f64(),
        (BOUND + MARGIN).as_secs_f64(),
    );
    assert!(
        took < BOUND + MARGIN,
        "the layer's flush and the exporter's drop took {took:?}; bound {BOUND:?}"
    );
    assert!(
        counter(&summary, "otlp.abandoned") > 0,
        "{:?}",
        summary.sink_counters
    );
    summary_accounts_for_all(&summary, n);
}

#[test]
fn a_slow_collector_gets_no_new_batch_after_the_deadline() {
    // Each batch takes 300 ms: the 50 batches queued need 15 s, ten times the bound.
    let (endpoint, arrivals) = slow_collector(Duration::from_millis(300));
    let exporter = builder(&endpoint, "robot-client")
        .batch_size(4)
        .export_interval(Duration::from_secs(60))
        .build()
        .unwrap();
    let n: u64 = 100;
    for seq in 0..n {
        assert!(exporter.export_call(&two_span_call(seq)));
    }

    let t0 = Instant::now();
    let stats = exporter.shutdown();
    let took = t0.elapsed();
    eprintln!("shutdown took {took:?}: {stats}");
    timing::error(
        "shutdown wall time (s)",
        took.as_secs_f64(),
        (BOUND + MARGIN).as_secs_f64(),
    );
    assert!(
        took < BOUND + MARGIN,
        "shutdown took {took:?}; bound {BOUND:?}"
    );
    assert!(
        stats.exported_records > 0 && stats.abandoned_records > 0,
        "some batches went out before the deadline, the rest were abandoned: {stats}"
    );
    accounts_for_all(&stats, n);

    // The batch in flight at the deadline comes back; no new one starts.
    std::thread::sleep(Duration::from_millis(1200));
    let late: Vec<Duration> = arrivals
        .lock()
        .unwrap()
        .iter()
        .map(|&at| at.saturating_duration_since(t0))
        .filter(|&since| since > BOUND + Duration::from_millis(200))
        .collect();
    timing::worst(
        "batch arrival after shutdown began (s)",
        arrivals
            .lock()
            .unwrap()
            .iter()
            .map(|&at| at.saturating_duration_since(t0).as_secs_f64()),
        (BOUND + Duration::from_millis(200)).as_secs_f64(),
    );
    assert!(
        late.is_empty(),
        "batches sent after the {BOUND:?} deadline, at {late:?} after shutdown began"
    );
    assert_eq!(
        exporter.stats(),
        stats,
        "the last word stays the last word when the batch in flight returns"
    );
}
