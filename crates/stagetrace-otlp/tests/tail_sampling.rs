//! Tail sampling at the source: only the calls worth a
//! look reach the collector as traces, every decision is counted in the
//! summary windows, and in a real Jaeger every spike call is there as a full
//! trace while the ordinary calls exported are exactly the seeded random
//! sample, within its rate.
//!
//! The Jaeger test needs `STAGETRACE_JAEGER_BIN` (set by `cargo xtask test`).

#![allow(missing_docs, clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::jaeger::Jaeger;
use opentelemetry_sdk::trace::InMemorySpanExporter;
use stagetrace::prelude::*;
use stagetrace::record::{SpanTime, Timeline};
use stagetrace::{record::CallRecord, sink::RecordSink, StageLayer};
use stagetrace_otlp::{OtlpExporter, SampleStats, TailSampling};
use stagetrace_schema::Figure;
use stagetrace_test_support::Collect;
use tracing_subscriber::layer::SubscriberExt;

const MS: u64 = 1_000_000;
/// Synthetic robot: 30 Hz for 100 s.
const CALLS: u64 = 3000;
const PERIOD_NS: u64 = 1_000_000_000 / 30;
/// A spike every 150 calls (0.67 %: below 1 %, so the p99 stays ordinary).
const SPIKE_EVERY: u64 = 150;
const FAILED_SEQ: u64 = 1000;
const MISSED_SEQ: u64 = 2000;
/// The random sample: 5 % of the rest, at most 0.5 a second.
const RANDOM_P: f64 = 0.05;
const RANDOM_PER_S: f64 = 0.5;
const SEED: u64 = 42;

fn is_spike(seq: u64) -> bool {
    seq % SPIKE_EVERY == SPIKE_EVERY - 1
}

fn at(start_ms: u64, dur_ms: u64) -> Option<SpanTime> {
    Some(SpanTime {
        start_ns: start_ms * MS,
        dur_ns: dur_ms * MS,
    })
}

fn trace_id(seq: u64) -> String {
    format!("5a3e{:028x}", seq + 1)
}

/// Call `seq` of the synthetic robot, starting at `t0 + seq · period`:
/// capture 3, transport 12 (uplink 2, downlink 2), dispatch 4, e2e 20 ms;
/// a spike's model (and so transport, e2e) takes 40 ms more.
fn call(t0_unix_ns: u64, seq: u64) -> CallRecord {
    let extra = if is_spike(seq) { 40 } else { 0 };
    let start = t0_unix_ns + seq * PERIOD_NS;
    let mut rec = CallRecord {
        seq,
        ts_unix_ns: start,
        kind: "infer".into(),
        trace_id: Some(trace_id(seq)),
        timeline: Timeline {
            call_start_unix_ns: start,
            call_dur_ns: (20 + extra) * MS,
            capture: at(0, 3),
            transport: at(3, 12 + extra),
            uplink: at(3, 2),
            downlink: at(13 + extra, 2),
            dispatch: at(15 + extra, 4),
            ..Timeline::default()
        },
        ..CallRecord::default()
    };
    for (f, ms) in [
        (Figure::Capture, 3),
        (Figure::Uplink, 2),
        (Figure::Queue, 1),
        (Figure::Infer, 7 + extra),
        (Figure::Downlink, 2),
        (Figure::Dispatch, 4),
        (Figure::Roundtrip, 12 + extra),
        (Figure::Server, 8 + extra),
        (Figure::Net, 4),
        (Figure::E2e, 20 + extra),
        (Figure::Gap, 1),
    ] {
        rec.set(f, (ms * MS) as i64);
    }
    if seq == FAILED_SEQ {
        rec.failed = Some(true);
        rec.error = Some("timeout".into());
    }
    if seq == MISSED_SEQ {
        rec.deadline_miss = Some(true);
    }
    rec
}

fn sampling() -> TailSampling {
    TailSampling::new()
        .random(RANDOM_P, RANDOM_PER_S)
        .seed(SEED)
}

/// The same records through the same sampler into memory: which trace ids
/// the seeded sampler keeps, and its counts.
fn replay(t0: u64) -> (BTreeSet<String>, SampleStats) {
    let mem = InMemorySpanExporter::default();
    let exp = OtlpExporter::builder()
        .tail_sampling(sampling())
        .build_with_exporter(mem.clone())
        .unwrap();
    for seq in 0..CALLS {
        exp.export_call(&call(t0, seq));
    }
    assert!(exp.flush(Duration::from_secs(10)));
    let ids = mem
        .get_finished_spans()
        .unwrap()
        .iter()
        .map(|s| s.span_context.trace_id().to_string())
        .collect();
    (ids, exp.sample_stats().unwrap())
}

#[test]
fn in_jaeger_every_spike_is_a_full_trace_and_ordinary_calls_are_the_random_sample() {
    let Some(jaeger) = Jaeger::start_or_skip(
        "in_jaeger_every_spike_is_a_full_trace_and_ordinary_calls_are_the_random_sample",
    ) else {
        return;
    };
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    // The synthetic run ended 10 s ago (Jaeger's search looks back from now).
    let t0 = now.as_nanos() as u64 - (CALLS * PERIOD_NS + 10_000 * MS);
    let t_end = t0 + CALLS * PERIOD_NS + 100 * MS;
    let service = "stagetrace-tail-sampling";
    let exp = OtlpExporter::builder()
        .endpoint(jaeger.otlp_endpoint())
        .service_name(service)
        .export_interval(Duration::from_millis(100))
        .timeout(Duration::from_secs(5))
        .tail_sampling(sampling())
        .build()
        .unwrap();
    let mut sink: Box<dyn RecordSink> = Box::new(exp.clone());
    for seq in 0..CALLS {
        sink.on_record(&call(t0, seq));
    }
    assert!(exp.flush(Duration::from_secs(20)), "{}", exp.stats());
    let stats = exp.sample_stats().unwrap();
    eprintln!("{stats}");

    let spikes: BTreeSet<String> = (0..CALLS).filter(|&s| is_spike(s)).map(trace_id).collect();
    assert_eq!(spikes.len(), 20);
    // What the sampler said: every spike (above the rolling p99), the failed
    // call, the missed deadline, the random sample; the rest dropped.
    assert_eq!(stats.above_p99, 20, "{stats}");
    assert_eq!(stats.failed, 1, "{stats}");
    assert_eq!(stats.deadline_miss, 1, "{stats}");
    assert_eq!((stats.threshold, stats.unjudged), (0, 0), "{stats}");
    assert_eq!(stats.kept + stats.dropped, CALLS, "{stats}");
    assert_eq!(stats.kept, 22 + stats.random, "{stats}");
    // The random sample is the seeded one (a replay keeps the same calls)
    // and within its rate: a burst of 1 plus 0.5 a second over the run.
    let (replayed, replay_stats) = replay(t0);
    assert_eq!(replay_stats, stats);
    let run_s = (CALLS * PERIOD_NS) as f64 / 1e9;
    assert!(
        stats.random as f64 <= 1.0 + RANDOM_PER_S * run_s,
        "{} random calls in {run_s} s at most {RANDOM_PER_S}/s",
        stats.random
    );
    assert!(stats.random > 0, "{stats}");

    // Jaeger holds exactly the kept calls' traces.
    let mut in_jaeger = BTreeSet::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while in_jaeger.len() < stats.kept as usize && std::time::Instant::now() < deadline {
        in_jaeger = jaeger
            .trace_ids(service, t0, t_end, 10_000)
            .into_iter()
            .collect();
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(in_jaeger, replayed, "{}", jaeger.log());
    assert_eq!(in_jaeger.len() as u64, stats.kept);
    assert!(spikes.is_subset(&in_jaeger));
    assert!(in_jaeger.contains(&trace_id(FAILED_SEQ)));
    assert!(in_jaeger.contains(&trace_id(MISSED_SEQ)));
    let ordinary = in_jaeger.len() - spikes.len() - 2;
    assert_eq!(ordinary as u64, stats.random);

    // Each spike is a full trace: the call and its five client spans, with
    // the record's figures.
    for id in &spikes {
        let spans = jaeger.wait_trace(id, Duration::from_secs(10), |s| s.len() >= 6);
        let names: BTreeSet<&str> = spans.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            BTreeSet::from([
                "call",
                "capture",
                "transport",
                "uplink",
                "downlink",
                "dispatch"
            ]),
            "trace {id}"
        );
        let root = spans.iter().find(|s| s.name == "call").unwrap();
        assert_eq!(root.attr_f64("stagetrace.e2e_ms"), Some(60.0), "trace {id}");
        assert_eq!(root.dur_ms(), 60.0);
    }
    let shut = exp.shutdown();
    assert_eq!(shut.exported_records, stats.kept, "{shut}");
    assert_eq!(shut.lost_records(), 0, "{shut}");
}

/// Through a real layer: the kept and dropped counts are in every summary
/// window (`sink_counters`), and the cumulative line's are the exporter's.
#[test]
fn kept_and_dropped_counts_are_in_every_summary_window() {
    let mem = InMemorySpanExporter::default();
    let exp = OtlpExporter::builder()
        .tail_sampling(TailSampling::new().keep_above_p99(false).random(0.0, 0.0))
        .build_with_exporter(mem.clone())
        .unwrap();
    let (layer, guard, kept) = Collect::build(
        StageLayer::builder()
            .window(Duration::from_millis(100))
            .sink(Box::new(exp.clone())),
    );
    let calls = 60u64;
    tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
        for seq in 0..calls {
            let span = tracing::info_span!("call", kind = "infer", seq = seq);
            let _call = span.enter();
            {
                let _capture = tracing::info_span!("capture").entered();
                std::thread::sleep(Duration::from_millis(5));
            }
            if seq % 20 == 7 {
                span.mark_failed("timeout");
            }
        }
    });
    let summary = guard.finish();
    let windows = kept.windows();
    assert!(windows.len() >= 2, "{} windows", windows.len());
    for w in &windows {
        for key in [
            "otlp.sample.kept",
            "otlp.sample.dropped",
            "otlp.sample.failed",
        ] {
            assert!(
                w.sink_counters.contains_key(key),
                "window {:?}: {key}",
                w.index
            );
        }
    }
    let c = |k: &str| summary.sink_counters[k];
    assert_eq!(c("otlp.sample.kept"), 3);
    assert_eq!(c("otlp.sample.failed"), 3);
    assert_eq!(c("otlp.sample.dropped"), calls - 3);
    assert_eq!(c("otlp.queued"), 3);
    assert_eq!(c("otlp.exported"), 3);
    let stats = exp.sample_stats().unwrap();
    assert_eq!((stats.kept, stats.dropped), (3, calls - 3));
    // Full export (the default) reports no sampling counters.
    let full = OtlpExporter::builder()
        .build_with_exporter(InMemorySpanExporter::default())
        .unwrap();
    assert_eq!(full.sample_stats(), None);
    assert!(!RecordSink::counters(&full)
        .iter()
        .any(|(k, _)| k.starts_with("otlp.sample")));
}
