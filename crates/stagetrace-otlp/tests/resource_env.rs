//! The robot's identity from the OpenTelemetry environment, for both
//! signals: a `service.name` in `OTEL_RESOURCE_ATTRIBUTES` names the service
//! (the default name no longer overrides it), the other attributes reach
//! Prometheus, and `host.name` / `service.instance.id` are filled in.
//! (One test in its own binary: it sets process environment variables.)
//!
//! Needs `STAGETRACE_PROMETHEUS_BIN` (set by `cargo xtask test`).

#![allow(missing_docs, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::prometheus::Prometheus;
use stagetrace::{record::CallRecord, sink::RecordSink};
use stagetrace_otlp::{OtlpExporter, OtlpMetrics};
use stagetrace_schema::Figure;

#[test]
fn resource_attributes_from_the_environment_name_the_robot() {
    std::env::set_var(
        "OTEL_RESOURCE_ATTRIBUTES",
        "service.name=arm-9,robot.site=lab-2",
    );
    std::env::remove_var("OTEL_SERVICE_NAME");
    let traces = OtlpExporter::builder()
        .endpoint("http://127.0.0.1:9")
        .build()
        .unwrap();
    assert_eq!(traces.service_name(), "arm-9");

    let Some(prom) =
        Prometheus::start_or_skip("resource_attributes_from_the_environment_name_the_robot")
    else {
        return;
    };
    let mut metrics = OtlpMetrics::builder()
        .endpoint(prom.otlp_endpoint())
        .build()
        .unwrap();
    let mut rec = CallRecord {
        kind: "infer".into(),
        ..CallRecord::default()
    };
    rec.set(Figure::E2e, 20_000_000);
    metrics.on_record(&rec);
    assert!(metrics.flush(), "{}", metrics.stats());
    let calls = prom.wait_value(
        "stagetrace_calls_total{job=\"arm-9\",kind=\"infer\"}",
        Duration::from_secs(20),
        |v| v == 1.0,
    );
    assert_eq!(calls, Some(1.0), "{}", prom.log());
    let info = prom.query("target_info{job=\"arm-9\"}");
    assert_eq!(info.len(), 1, "{info:?}");
    let labels = &info[0].0;
    assert_eq!(labels["robot_site"], "lab-2", "{labels}");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let host = host.trim();
    assert_eq!(labels["host_name"], host, "{labels}");
    assert_eq!(
        labels["instance"],
        format!("{host}-{}", std::process::id()),
        "{labels}"
    );
    metrics.shutdown();
}
