//! The Prometheus the metrics tests use: built from the
//! pinned Go tool module (`tests/prometheus-tool`, `cargo xtask prometheus`),
//! started with its OTLP receiver on.
//!
//! Needs `STAGETRACE_PROMETHEUS_BIN` (set by `cargo xtask test`).

#![allow(missing_docs, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::prometheus::Prometheus;

#[test]
fn prometheus_starts_with_its_otlp_receiver_on() {
    let Some(prom) = Prometheus::start_or_skip("prometheus_starts_with_its_otlp_receiver_on")
    else {
        return;
    };
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    // An empty ExportMetricsServiceRequest (zero protobuf bytes) is a valid
    // OTLP request: the receiver answers 200; without
    // --web.enable-otlp-receiver the path does not exist.
    let resp = http
        .post(format!("{}/v1/metrics", prom.otlp_endpoint()))
        .header("content-type", "application/x-protobuf")
        .body(Vec::<u8>::new())
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200, "{}", prom.log());
    let version: serde_json::Value = http
        .get(format!(
            "http://127.0.0.1:{}/api/v1/status/buildinfo",
            prom.port
        ))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(version["status"], "success", "{version}");
    // Prometheus answers PromQL.
    assert_eq!(prom.query("vector(1)")[0].1, 1.0);
}
