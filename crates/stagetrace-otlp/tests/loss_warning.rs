//! Calls the collector never got are said once, as a warning through the
//! app's `tracing`, with how many and what to check, and counted as
//! `otlp.lost` (issue 40: with the collector down the exporter used to lose
//! every call in silence). Nothing listens on the endpoint: a loopback port
//! bound and released.

#![allow(missing_docs, clippy::unwrap_used)]

use std::io::{self, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex, PoisonError};

use stagetrace::record::{SpanTime, Timeline};
use stagetrace::{CallRecord, Figure, StageLayer};
use stagetrace_otlp::OtlpExporter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::prelude::*;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// What the app's fmt layer wrote.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl Log {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(PoisonError::into_inner)).into_owned()
    }

    fn warnings(&self) -> Vec<String> {
        self.text()
            .lines()
            .filter(|l| l.contains(" WARN "))
            .map(str::to_owned)
            .collect()
    }
}

impl Write for Log {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Log {
    type Writer = Log;

    fn make_writer(&'a self) -> Log {
        self.clone()
    }
}

/// The app's fmt layer writing to `log`, at INFO as an app's would (the
/// HTTP client's own debug lines stay out).
fn fmt_layer<S>(log: &Log) -> impl Layer<S> + Send + Sync
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    tracing_subscriber::fmt::layer()
        .with_writer(log.clone())
        .with_ansi(false)
        .with_filter(tracing_subscriber::filter::LevelFilter::INFO)
}

/// The app's subscriber: its fmt layer only.
fn app_log(log: &Log) -> impl tracing::Subscriber + Send + Sync {
    tracing_subscriber::registry().with(fmt_layer(log))
}

fn record(seq: u64) -> CallRecord {
    CallRecord {
        seq,
        ts_unix_ns: 1_764_000_000_000_000_000,
        kind: "call".into(),
        figures: [(Figure::Capture, 1_000_000), (Figure::E2e, 2_000_000)]
            .into_iter()
            .collect(),
        timeline: Timeline {
            call_start_unix_ns: 1_764_000_000_000_000_000,
            call_dur_ns: 2_000_000,
            capture: Some(SpanTime {
                start_ns: 0,
                dur_ns: 1_000_000,
            }),
            ..Timeline::default()
        },
        ..CallRecord::default()
    }
}

/// An endpoint nothing listens on.
fn dead_endpoint() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://127.0.0.1:{}", l.local_addr().unwrap().port())
}

#[test]
fn an_exporter_dropped_after_failed_exports_warns_once_with_the_calls_lost() {
    let endpoint = dead_endpoint();
    let log = Log::default();
    tracing::subscriber::with_default(app_log(&log), || {
        let exporter = OtlpExporter::builder()
            .endpoint(&endpoint)
            .service_name("arm-2")
            .build()
            .unwrap();
        for seq in 0..12 {
            assert!(exporter.export_call(&record(seq)));
        }
        let clone = exporter.clone();
        drop(exporter);
        assert!(
            log.warnings().is_empty(),
            "a clone is alive: not the end yet"
        );
        drop(clone);
    });
    let warnings = log.warnings();
    assert_eq!(warnings.len(), 1, "{}", log.text());
    let w = &warnings[0];
    let url = format!("{endpoint}/v1/traces");
    assert!(
        w.contains(&format!(
            "WARN stagetrace: 12 of 12 calls of service arm-2 were not exported to {url} and are lost: "
        )),
        "{w}"
    );
    assert!(
        w.contains(&format!("is the collector (e.g. Jaeger) running at {url}")),
        "{w}"
    );
    assert!(w.ends_with("lost=12"), "{w}");
}

#[test]
fn shutdown_hands_the_loss_to_the_caller_and_the_drop_says_nothing_more() {
    let endpoint = dead_endpoint();
    let log = Log::default();
    let stats = tracing::subscriber::with_default(app_log(&log), || {
        let exporter = OtlpExporter::builder().endpoint(&endpoint).build().unwrap();
        for seq in 0..5 {
            exporter.export_call(&record(seq));
        }
        let stats = exporter.shutdown();
        drop(exporter);
        stats
    });
    assert_eq!(stats.lost_records(), 5, "{stats}");
    assert!(log.warnings().is_empty(), "{}", log.text());
}

#[test]
fn in_a_layer_the_guard_warns_once_and_the_summary_counts_otlp_lost() {
    let endpoint = dead_endpoint();
    let log = Log::default();
    let otlp = OtlpExporter::builder()
        .endpoint(&endpoint)
        .service_name("robot-client")
        .build()
        .unwrap();
    let (stages, guard) = StageLayer::builder()
        .sink(Box::new(otlp.clone()))
        .build()
        .unwrap();
    let subscriber = tracing_subscriber::registry()
        .with(stages)
        .with(fmt_layer(&log));
    let summary = tracing::subscriber::with_default(subscriber, || {
        for seq in 0..9u64 {
            let _call = tracing::info_span!("call", seq).entered();
            tracing::info_span!("capture").in_scope(|| {});
        }
        let summary = guard.finish();
        // The app's own clone goes last, as in `main`: told already.
        drop(otlp);
        summary
    });
    let warnings = log.warnings();
    assert_eq!(warnings.len(), 1, "{}", log.text());
    assert!(
        warnings[0].contains("WARN stagetrace: 9 of 9 calls of service robot-client"),
        "{}",
        warnings[0]
    );
    assert!(warnings[0].ends_with("lost=9"), "{}", warnings[0]);
    assert_eq!(summary.calls, 9);
    assert_eq!(
        summary.sink_counters.get("otlp.lost"),
        Some(&9),
        "{:?}",
        summary.sink_counters
    );
}
