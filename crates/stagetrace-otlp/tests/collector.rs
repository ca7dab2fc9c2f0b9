//! The exporter against collectors that misbehave, over real loopback
//! sockets: nothing listening, a collector that never answers, and one that
//! shows what arrives (path, content type, auth headers).

#![allow(missing_docs, clippy::unwrap_used)]

mod common;

use std::net::TcpListener;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use stagetrace::record::CallRecord;
use stagetrace_otlp::OtlpExporter;
use stagetrace_test_support::collector::silent_collector;
use stagetrace_test_support::timing;

use common::collector::dead_endpoint;
use common::records::two_span_call;

/// Call `seq`, in a trace of its own.
fn record(seq: u64) -> CallRecord {
    CallRecord {
        trace_id: Some(format!("{:032x}", 0xabc0_0000_u128 + u128::from(seq) + 1)),
        ..two_span_call(seq)
    }
}

#[test]
fn nothing_listening_fails_exports_counted_with_a_helpful_error() {
    let endpoint = dead_endpoint();
    let exporter = OtlpExporter::builder()
        .endpoint(&endpoint)
        .timeout(Duration::from_millis(500))
        .export_interval(Duration::from_millis(20))
        .build()
        .unwrap();
    assert_eq!(exporter.endpoint(), format!("{endpoint}/v1/traces"));
    for seq in 0..20 {
        assert!(exporter.export_call(&record(seq)));
    }
    assert!(exporter.flush(Duration::from_secs(30)));
    let stats = exporter.stats();
    assert_eq!(stats.queued_records, 20);
    assert_eq!(stats.exported_records, 0);
    assert_eq!(stats.failed_records, 20, "{stats}");
    assert!(stats.failed_exports >= 1);
    assert_eq!(stats.collector_ok, Some(false));
    let err = stats.last_error.clone().unwrap();
    assert!(err.contains(&endpoint), "{err}");
    assert!(err.contains("is the collector"), "{err}");
    assert!(stats.to_string().contains("collector failing"), "{stats}");
}

#[test]
fn a_collector_that_never_answers_does_not_block_the_caller() {
    // Accepts connections and holds them open without a byte of reply.
    let exporter = OtlpExporter::builder()
        .endpoint(silent_collector())
        .timeout(Duration::from_secs(1))
        .queue_size(8)
        .batch_size(16)
        .build()
        .unwrap();

    let n = 2000;
    let mut slowest = Duration::ZERO;
    let start = Instant::now();
    for seq in 0..n {
        let t = Instant::now();
        exporter.export_call(&record(seq));
        slowest = slowest.max(t.elapsed());
    }
    let took = start.elapsed();
    // A blocking hand-over would wait out the 1 s timeout of each stuck batch.
    timing::error("2000 hand-overs (ms)", took.as_secs_f64() * 1e3, 800.0);
    assert!(
        took < Duration::from_millis(800),
        "{n} hand-overs took {took:?}"
    );
    timing::error("slowest hand-over (ms)", slowest.as_secs_f64() * 1e3, 500.0);
    assert!(
        slowest < Duration::from_millis(500),
        "slowest hand-over {slowest:?}"
    );
    let stats = exporter.stats();
    assert_eq!(stats.queued_records + stats.dropped_records, n, "{stats}");
    assert!(
        stats.dropped_records >= n - 100,
        "the full queue drops: {stats}"
    );

    // The stuck requests time out and are counted as failed.
    assert!(exporter.flush(Duration::from_secs(60)));
    let stats = exporter.stats();
    assert_eq!(stats.exported_records, 0);
    assert_eq!(stats.failed_records, stats.queued_records, "{stats}");
    assert_eq!(stats.collector_ok, Some(false));
}

#[test]
fn requests_carry_protobuf_to_v1_traces_with_the_auth_header() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        if let Some(stream) = listener.incoming().flatten().next() {
            let _ = tx.send(common::collector::answer_one(stream));
        }
    });
    let exporter = OtlpExporter::builder()
        .endpoint(format!("http://127.0.0.1:{port}/"))
        .header("authorization", "Bearer t0ken")
        .headers([("x-scope-orgid", "robots")])
        .service_name("arm-7")
        .build()
        .unwrap();
    assert_eq!(exporter.service_name(), "arm-7");
    assert!(exporter.export_call(&record(1)));
    assert!(exporter.flush(Duration::from_secs(30)));
    let (request_line, headers, len) = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    assert!(
        request_line.starts_with("POST /v1/traces "),
        "{request_line}"
    );
    let header = |k: &str| {
        headers
            .iter()
            .find(|(name, _)| name == k)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(header("content-type"), Some("application/x-protobuf"));
    assert_eq!(header("authorization"), Some("Bearer t0ken"));
    assert_eq!(header("x-scope-orgid"), Some("robots"));
    assert!(len > 100, "a protobuf body with two spans: {len} bytes");
    let stats = exporter.stats();
    assert_eq!(stats.exported_records, 1, "{stats}");
    assert_eq!(stats.exported_spans, 2);
    assert_eq!(stats.collector_ok, Some(true));
}

#[test]
fn a_collector_refusing_the_credentials_says_so() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            common::collector::answer_one_with(stream, "401 Unauthorized");
        }
    });
    let exporter = OtlpExporter::builder()
        .endpoint(format!("http://127.0.0.1:{port}"))
        .header("authorization", "Bearer wrong")
        .build()
        .unwrap();
    assert!(exporter.export_call(&record(1)));
    assert!(exporter.flush(Duration::from_secs(30)));
    let stats = exporter.stats();
    assert_eq!(stats.failed_records, 1, "{stats}");
    let err = stats.last_error.unwrap();
    assert!(err.contains("401"), "{err}");
    assert!(err.contains("authorization header"), "{err}");
}
