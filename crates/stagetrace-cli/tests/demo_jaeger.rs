//! Issue 4's "Must show", end to end: `stagetrace demo --otlp` exports the
//! demo's robot client and policy server to a real Jaeger (one of the test's
//! own, on free loopback ports); every call is read back through Jaeger's
//! query API and checked against the record the demo wrote for it.
//!
//! Needs `STAGETRACE_JAEGER_BIN` (set by `cargo xtask test`); without it the
//! test says loudly that it was SKIPPED.

#![allow(clippy::unwrap_used)]

#[path = "../../stagetrace-otlp/tests/common/jaeger.rs"]
mod jaeger;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use jaeger::{JSpan, Jaeger};
use serde_json::Value;

const CLIENT: &str = "stagetrace-demo-client";
const SERVER: &str = "stagetrace-demo-server";

fn records(dir: &Path) -> Vec<Value> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("records") && name.contains(".jsonl") {
            for line in std::fs::read_to_string(&path).unwrap().lines() {
                out.push(serde_json::from_str::<Value>(line).unwrap());
            }
        }
    }
    out.sort_by_key(|r| r["seq"].as_u64().unwrap());
    out
}

fn close(what: &str, span: &JSpan, record: &Value, field: &str) {
    let want = record[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{what}: record has no {field}: {record}"));
    let got = span.dur_ms();
    assert!(
        (got - want).abs() <= 1.0,
        "{what}: {got:.3} ms in Jaeger vs {field} = {want:.3} ms in the record"
    );
}

#[test]
fn demo_calls_arrive_in_jaeger_as_one_trace_across_client_and_server() {
    let Some(jaeger) =
        Jaeger::start_or_skip("demo_calls_arrive_in_jaeger_as_one_trace_across_client_and_server")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_stagetrace"))
        .args([
            "demo",
            "--calls",
            "8",
            "--warmup",
            "2",
            "--hz",
            "20",
            "--payload-kb",
            "10",
        ])
        .args(["--model-ms", "4", "--json", "--out"])
        .arg(dir.path())
        .arg("--otlp")
        .arg(jaeger.otlp_endpoint())
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_SERVICE_NAME")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed: {stderr}");
    assert!(
        stderr.contains("otlp"),
        "the demo reports its export: {stderr}"
    );

    let records = records(dir.path());
    let done: Vec<&Value> = records
        .iter()
        .filter(|r| r.get("failed").is_none())
        .collect();
    assert!(done.len() >= 6, "{} completed calls of 8", done.len());
    for rec in done {
        let trace_id = rec["trace_id"].as_str().unwrap();
        let spans = jaeger.wait_trace(trace_id, Duration::from_secs(30), |s| {
            s.iter().filter(|s| s.service == CLIENT).count() == 6
                && s.iter().any(|s| s.service == SERVER && s.name == "infer")
                && (rec.get("queue_ms").is_none()
                    || s.iter().any(|s| s.service == SERVER && s.name == "queue"))
        });
        let named: HashMap<&str, &JSpan> = spans.iter().map(|s| (s.name.as_str(), s)).collect();
        assert_eq!(named.len(), spans.len(), "one span per name: {spans:#?}");
        for name in [
            "call",
            "capture",
            "transport",
            "uplink",
            "downlink",
            "dispatch",
        ] {
            let s = named.get(name).unwrap_or_else(|| {
                panic!(
                    "trace {trace_id} has no {name}: {spans:#?}\n{}",
                    jaeger.log()
                )
            });
            assert_eq!(s.service, CLIENT, "{name}");
        }
        for s in spans.iter().filter(|s| s.service == SERVER) {
            assert!(
                matches!(s.name.as_str(), "queue" | "infer"),
                "server span {}",
                s.name
            );
        }

        let call = named["call"];
        let transport = named["transport"];
        assert!(call.parent_span_id.is_empty(), "call is the root");
        for name in ["capture", "transport", "dispatch"] {
            assert_eq!(
                named[name].parent_span_id, call.span_id,
                "{name} under call"
            );
        }
        for s in spans
            .iter()
            .filter(|s| matches!(s.name.as_str(), "uplink" | "downlink" | "queue" | "infer"))
        {
            assert_eq!(
                s.parent_span_id, transport.span_id,
                "{} under transport",
                s.name
            );
        }

        close("call", call, rec, "e2e_ms");
        close("capture", named["capture"], rec, "capture_ms");
        close("transport", transport, rec, "roundtrip_ms");
        close("uplink", named["uplink"], rec, "uplink_ms");
        close("downlink", named["downlink"], rec, "downlink_ms");
        close("dispatch", named["dispatch"], rec, "dispatch_ms");
        close("infer", named["infer"], rec, "infer_ms");
        if let Some(q) = named.get("queue") {
            close("queue", q, rec, "queue_ms");
        }
        assert_eq!(call.attr_f64("stagetrace.seq"), rec["seq"].as_f64());
    }
}
