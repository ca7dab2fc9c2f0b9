//! The demo in Jaeger, end to end: `stagetrace demo --otlp` exports the
//! demo's robot client and policy server to a real Jaeger (one of the test's
//! own, on free loopback ports); every call is read back through Jaeger's
//! query API and checked against the record the demo wrote for it.
//!
//! Needs `STAGETRACE_JAEGER_BIN` (set by `cargo xtask test`); without it the
//! test says loudly that it was SKIPPED.

#![allow(clippy::unwrap_used)]

/// The OTLP crate's Jaeger harness: the Jaeger and the tool process it runs in.
#[path = "../../stagetrace-otlp/tests/common"]
mod common {
    pub mod jaeger;
    pub mod tool;
}

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::jaeger::{
    assert_gateway_tree, assert_span_names, one, span_list, FourServices, JSpan, Jaeger,
    ROBOT_HOP_SPANS,
};
use serde_json::Value;

const CLIENT: &str = "stagetrace-demo-client";
const SERVER: &str = "stagetrace-demo-server";

/// Runs the demo with 8 calls (2 of them warm-up) at 20 Hz, 10 kB
/// payloads and a 4 ms model, plus `extra`, exporting to `jaeger`; its
/// records go to `dir`. Returns the demo's stderr.
fn demo_into(jaeger: &Jaeger, dir: &Path, extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_stagetrace"))
        .args(["demo", "--calls", "8", "--warmup", "2", "--hz", "20"])
        .args(["--payload-kb", "10", "--model-ms", "4", "--json"])
        .args(extra)
        .arg("--out")
        .arg(dir)
        .arg("--otlp")
        .arg(jaeger.otlp_endpoint())
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_SERVICE_NAME")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "demo failed: {stderr}");
    stderr
}

/// The completed calls' records in `dir` (at least 6 of the 8).
fn completed(dir: &Path) -> Vec<Value> {
    let done: Vec<Value> = records(dir)
        .into_iter()
        .filter(|r| r.get("failed").is_none())
        .collect();
    assert!(done.len() >= 6, "{} completed calls of 8", done.len());
    done
}

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
    let stderr = demo_into(&jaeger, dir.path(), &[]);
    assert!(
        stderr.contains("otlp"),
        "the demo reports its export: {stderr}"
    );

    for rec in &completed(dir.path()) {
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
        // The transport span ends at the robot's read; the roundtrip where
        // its kernel had the response (kernel receive stamps), rx_wait earlier.
        let roundtrip = rec["roundtrip_ms"].as_f64().unwrap();
        let read_late = rec["rx_wait_ms"].as_f64().unwrap_or(0.0);
        assert!(
            (transport.dur_ms() - (roundtrip + read_late)).abs() <= 1.0,
            "transport: {:.3} ms in Jaeger vs roundtrip {roundtrip:.3} + rx_wait {read_late:.3} ms in the record",
            transport.dur_ms()
        );
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

const GATEWAY: &str = "stagetrace-demo-gateway";
const EXECUTOR: &str = "stagetrace-demo-executor";

/// `stagetrace demo --gateway --executor --otlp`
/// puts each call into Jaeger as one trace of four services — the robot,
/// the gateway, the policy server, the executor — each span under exactly
/// the span it belongs to, with the robot's synthesized per-hop spans.
#[test]
fn demo_with_a_gateway_and_an_executor_is_one_trace_of_four_services_in_jaeger() {
    let test = "demo_with_a_gateway_and_an_executor_is_one_trace_of_four_services_in_jaeger";
    let Some(jaeger) = Jaeger::start_or_skip(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let stderr = demo_into(
        &jaeger,
        dir.path(),
        &[
            "--gateway",
            "--gateway-skew-ms",
            "300",
            "--executor",
            "--executor-skew-ms",
            "-40",
            "--executor-busy-ms",
            "5",
            "--executor-busy-every",
            "3",
        ],
    );
    for service in [CLIENT, SERVER, GATEWAY, EXECUTOR] {
        assert!(
            stderr.contains(&format!("{service} -> ")),
            "the demo reports {service}'s export: {stderr}"
        );
    }

    for rec in &completed(dir.path()) {
        let trace_id = rec["trace_id"].as_str().unwrap();
        let queue = rec.get("queue_ms").is_some();
        let policy_spans: &[&str] = if queue {
            &["infer", "queue"]
        } else {
            &["infer"]
        };
        let total = ROBOT_HOP_SPANS.len() + 2 + policy_spans.len() + 1;
        let spans = jaeger.wait_trace(trace_id, Duration::from_secs(30), |s| s.len() >= total);
        let dump = || format!("{}\n{}", span_list(trace_id, &spans), jaeger.log());
        assert_eq!(spans.len(), total, "{}", dump());
        assert_span_names(
            &spans,
            &[
                (CLIENT, &ROBOT_HOP_SPANS[..]),
                (GATEWAY, &["forward", "relay"][..]),
                (SERVER, policy_spans),
                (EXECUTOR, &["exec_wait"][..]),
            ],
            &dump,
        );
        let span = |service: &str, name: &str| one(&spans, service, name);
        let tree = assert_gateway_tree(
            &spans,
            &FourServices {
                robot: CLIENT,
                gateway: GATEWAY,
                policy: SERVER,
                executor: EXECUTOR,
            },
            &dump,
        );
        if queue {
            assert_eq!(
                span(SERVER, "queue").parent_span_id,
                tree.forward.span_id,
                "{}",
                dump()
            );
        }
        let dispatch = tree.dispatch;
        // The spans carry the record's figures: the gateway's own time, the
        // executor's wait, the policy server's inference.
        close(
            "exec_wait",
            span(EXECUTOR, "exec_wait"),
            rec,
            "exec_wait_ms",
        );
        close("infer", span(SERVER, "infer"), rec, "infer_ms");
        // The robot's dispatch span as drawn is the whole span: dispatch
        // (to the executor's start) and the ack's way back.
        let span_ms = rec["dispatch_ms"].as_f64().unwrap() + rec["exec_ack_ms"].as_f64().unwrap();
        assert!(
            (dispatch.dur_ms() - span_ms).abs() <= 1.0,
            "dispatch span {:.3} ms in Jaeger vs dispatch_ms + exec_ack_ms = {span_ms:.3} ms",
            dispatch.dur_ms()
        );
    }
}
