//! Calls the collector never got are said once, as a warning through the
//! app's `tracing`, with how many and what to check, and counted as
//! `otlp.lost` (issue 40: with the collector down the exporter used to lose
//! every call in silence). Nothing listens on the endpoint: a loopback port
//! bound and released.

#![allow(missing_docs, clippy::unwrap_used)]

mod common;

use stagetrace::StageLayer;
use stagetrace_otlp::OtlpExporter;
use stagetrace_test_support::app_log::AppLog;
use tracing_subscriber::prelude::*;

use common::collector::dead_endpoint;
use common::records::two_span_call;

#[test]
fn an_exporter_dropped_after_failed_exports_warns_once_with_the_calls_lost() {
    let endpoint = dead_endpoint();
    let log = AppLog::default();
    tracing::subscriber::with_default(log.subscriber(), || {
        let exporter = OtlpExporter::builder()
            .endpoint(&endpoint)
            .service_name("arm-2")
            .build()
            .unwrap();
        for seq in 0..12 {
            assert!(exporter.export_call(&two_span_call(seq)));
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
    let log = AppLog::default();
    let stats = tracing::subscriber::with_default(log.subscriber(), || {
        let exporter = OtlpExporter::builder().endpoint(&endpoint).build().unwrap();
        for seq in 0..5 {
            exporter.export_call(&two_span_call(seq));
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
    let log = AppLog::default();
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
        .with(log.layer());
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
