//! The standard OTEL_* variables against the builder, on real requests.
//! (One test in its own binary: it sets process environment variables.)

#![allow(missing_docs, clippy::unwrap_used)]

mod common;

use std::net::TcpListener;
use std::sync::mpsc;
use std::time::Duration;

use stagetrace::record::CallRecord;
use stagetrace_otlp::OtlpExporter;
use stagetrace_schema::Figure;

/// The request line and headers of one request.
type Seen = (String, Vec<(String, String)>);

/// A collector answering `n` requests; reports each request's line and headers.
fn collector(n: usize) -> (u16, mpsc::Receiver<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten().take(n) {
            let (line, headers, _) = common::collector::answer_one(stream);
            let _ = tx.send((line, headers));
        }
    });
    (port, rx)
}

fn header<'a>(headers: &'a [(String, String)], k: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == k)
        .map(|(_, v)| v.as_str())
}

#[test]
fn explicit_settings_beat_the_environment_which_beats_defaults() {
    let (env_port, from_env) = collector(1);
    let (explicit_port, from_explicit) = collector(1);
    std::env::set_var(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        format!("http://127.0.0.1:{env_port}"),
    );
    std::env::set_var(
        "OTEL_EXPORTER_OTLP_HEADERS",
        "authorization=Basic%20ZW52,x-env=1",
    );
    std::env::set_var("OTEL_SERVICE_NAME", "from-env");
    std::env::set_var("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf");

    let rec = CallRecord {
        kind: "call".into(),
        ts_unix_ns: 1_764_000_000_000_000_000,
        figures: [(Figure::E2e, 1_000_000)].into_iter().collect(),
        ..CallRecord::default()
    };

    let env_only = OtlpExporter::builder().build().unwrap();
    assert_eq!(env_only.service_name(), "from-env");
    assert_eq!(
        env_only.endpoint(),
        format!("http://127.0.0.1:{env_port}/v1/traces")
    );
    assert!(env_only.export_call(&rec));
    assert!(env_only.flush(Duration::from_secs(30)));
    let (line, headers) = from_env.recv_timeout(Duration::from_secs(30)).unwrap();
    assert!(line.starts_with("POST /v1/traces "), "{line}");
    assert_eq!(header(&headers, "authorization"), Some("Basic ZW52"));
    assert_eq!(header(&headers, "x-env"), Some("1"));

    let explicit = OtlpExporter::builder()
        .endpoint(format!("http://127.0.0.1:{explicit_port}"))
        .header("Authorization", "Bearer explicit")
        .service_name("robot-client")
        .build()
        .unwrap();
    assert_eq!(explicit.service_name(), "robot-client");
    assert!(explicit.export_call(&rec));
    assert!(explicit.flush(Duration::from_secs(30)));
    let (_, headers) = from_explicit.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(header(&headers, "authorization"), Some("Bearer explicit"));
    assert_eq!(
        header(&headers, "x-env"),
        Some("1"),
        "other env headers still apply"
    );
    assert_eq!(explicit.stats().exported_records, 1);

    std::env::set_var("OTEL_EXPORTER_OTLP_PROTOCOL", "http/xml");
    let err = OtlpExporter::builder().build().unwrap_err();
    assert!(
        err.to_string().contains("OTEL_EXPORTER_OTLP_PROTOCOL"),
        "{err}"
    );
}
