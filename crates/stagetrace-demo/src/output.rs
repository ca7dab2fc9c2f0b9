//! What the demo prints: the run's records read back and analysed as
//! `stagetrace report` does (its tables and verdicts), then the comparison
//! with the truth the demo injected; `--json` as one object.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;
use stagetrace::{record::CallRecord, record::ClockBasis, summary::WindowSummary};
use stagetrace_analyze::analysis::Report;
use stagetrace_analyze::render;
use stagetrace_analyze::stats::Distribution;
use stagetrace_sim::{RobotStats, SimServerStats};

use crate::args::{DemoArgs, TransportArg};
use crate::error::{err, DemoError};
use crate::figures::{analyze_run, main_group, stage_table, steady};
use crate::hop_services::HopRun;
use crate::truth::Truth;

/// One finished run of the demo, as the report needs it.
pub(crate) struct Run<'a> {
    pub(crate) args: &'a DemoArgs,
    pub(crate) out: &'a Path,
    /// Every record, in the order the layer finished them.
    pub(crate) records: &'a [CallRecord],
    /// The layer's cumulative summary (its own counters).
    pub(crate) summary: &'a WindowSummary,
    pub(crate) robot: &'a RobotStats,
    pub(crate) server: &'a SimServerStats,
    /// The delay proxy's counters; `None`: the robot connected to the
    /// server directly (no delay asked).
    pub(crate) proxy: Option<stagetrace_net::proxy::ProxyStats>,
    pub(crate) interrupted: bool,
    /// What the truth of the gateway and the executor rests on.
    pub(crate) hops: &'a HopRun,
}

/// What the split rests on for most steady calls.
fn basis(records: &[CallRecord]) -> Option<ClockBasis> {
    let mut counts: Vec<(ClockBasis, usize)> = Vec::new();
    for b in records.iter().filter(|r| steady(r)).filter_map(|r| r.clock) {
        match counts.iter_mut().find(|(c, _)| *c == b) {
            Some((_, n)) => *n += 1,
            None => counts.push((b, 1)),
        }
    }
    counts.into_iter().max_by_key(|(_, n)| *n).map(|(b, _)| b)
}

/// The knobs as the JSON states them.
#[derive(Serialize)]
struct Config {
    calls: u64,
    hz: f64,
    model_ms: f64,
    payload_kb: u64,
    capture_ms: f64,
    dispatch_ms: f64,
    server_skew_ms: f64,
    server_step_ms: f64,
    server_step_at: u64,
    uplink_delay_ms: f64,
    downlink_delay_ms: f64,
    clock: &'static str,
    warmup: u64,
    server_drift_ppm: f64,
    /// The gateway and executor knobs.
    #[serde(flatten)]
    hops: crate::args::HopArgs,
}

/// Counters of the layer, the server and the proxy.
#[derive(Serialize)]
struct Counters {
    queue_drops: u64,
    rejected_headers: u64,
    clamped: u64,
    deadline_misses: Option<u64>,
    server_requests: u64,
    server_requests_with_traceparent: u64,
    /// Absent when the robot connected directly (no delay proxy).
    #[serde(skip_serializing_if = "Option::is_none")]
    proxy_bytes_up: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    proxy_bytes_down: Option<u64>,
}

/// `--json` (and `demo.json`): the figures keyed by record field names,
/// the counters, the comparison with the truth, analyze's report and the
/// records themselves.
#[derive(Serialize)]
struct DemoJson<'a> {
    calls: usize,
    measured: u64,
    warmup: u64,
    failed: u64,
    transport: &'static str,
    clock: Option<ClockBasis>,
    out: String,
    config: Config,
    stages: &'a BTreeMap<&'static str, Distribution>,
    counters: Counters,
    truth: &'a Truth,
    /// Analyze's verdicts, then the comparison with the truth, as printed.
    diagnosis: Vec<String>,
    interrupted: bool,
    report: Option<&'a Report>,
    records: &'a [CallRecord],
}

/// Analyse the run, write `demo.json`; the report to print (or the JSON).
pub(crate) fn report(run: &Run<'_>) -> Result<String, DemoError> {
    let a = run.args;
    let report = analyze(run)?;
    let group = report.as_ref().and_then(main_group);
    let stages = stage_table(group, run.records);
    let truth = Truth::of(a, &stages, run.records, run.summary, run.hops).with_proxy(run.proxy);
    let mut diagnosis: Vec<String> = report
        .iter()
        .flat_map(|r| r.verdicts.iter().map(|v| v.text.clone()))
        .collect();
    diagnosis.extend(truth.sentences(a));
    let doc = DemoJson {
        calls: run.records.len(),
        measured: group.map_or(0, |g| g.steady),
        warmup: group.map_or(0, |g| g.warmup_excluded),
        failed: group.map_or(0, |g| g.failed),
        transport: a.transport.transport().map_or("grpc-async", |t| t.as_str()),
        clock: basis(run.records),
        out: run.out.display().to_string(),
        config: Config::of(a),
        stages: &stages,
        counters: Counters::of(run),
        truth: &truth,
        diagnosis,
        interrupted: run.interrupted,
        report: report.as_ref(),
        records: run.records,
    };
    let pretty = serde_json::to_string_pretty(&doc)
        .map_err(|e| err(format!("cannot encode the report as JSON: {e}")))?;
    let _ = std::fs::write(run.out.join("demo.json"), &pretty);
    if a.json {
        return Ok(pretty + "\n");
    }
    let steady = group.map_or(0, |g| g.steady);
    Ok(text(run, report.as_ref(), &truth, steady))
}

/// Analyze's report of the run; `None` when nothing steady was left to
/// analyse (interrupted, or no call completed).
fn analyze(run: &Run<'_>) -> Result<Option<Report>, DemoError> {
    match analyze_run(run.out, &run.summary.run) {
        Ok(r) => Ok(Some(r)),
        // Nothing steady to analyse: said below, not an error of its own.
        Err(_) if run.interrupted || run.robot.completed == 0 => Ok(None),
        Err(e) => Err(e),
    }
}

impl Config {
    /// The knobs of `a`.
    fn of(a: &DemoArgs) -> Config {
        Config {
            calls: a.calls,
            hz: a.hz,
            model_ms: a.model_ms,
            payload_kb: a.payload_kb,
            capture_ms: a.capture_ms,
            dispatch_ms: a.dispatch_ms,
            server_skew_ms: a.server_skew_ms,
            server_step_ms: a.server_step_ms,
            server_step_at: a.step_at(),
            uplink_delay_ms: a.uplink_delay_ms,
            downlink_delay_ms: a.downlink_delay_ms,
            clock: a.clock.as_str(),
            warmup: a.warmup,
            server_drift_ppm: a.server_drift_ppm,
            hops: a.hops.clone(),
        }
    }
}

impl Counters {
    /// The counters of `run`.
    fn of(run: &Run<'_>) -> Counters {
        Counters {
            queue_drops: run.summary.queue_drops,
            rejected_headers: run.summary.rejected_headers,
            clamped: run.summary.clamped,
            deadline_misses: run.summary.deadline.map(|d| d.misses),
            server_requests: run.server.requests,
            server_requests_with_traceparent: run.server.with_trace_context,
            proxy_bytes_up: run.proxy.map(|p| p.bytes_up),
            proxy_bytes_down: run.proxy.map(|p| p.bytes_down),
        }
    }
}

/// The printed report: what was injected, analyze's tables and verdicts,
/// the comparison with the truth over `steady` calls, the counters.
fn text(run: &Run<'_>, report: Option<&Report>, truth: &Truth, steady: u64) -> String {
    let a = run.args;
    let mut s = injected(a);
    s.push('\n');
    // Said before the tables, whose uplink and downlink it puts in doubt.
    if let Some(w) = truth.warning(a) {
        let _ = writeln!(s, "WARNING: {w}\n");
    }
    match report {
        Some(r) => s.push_str(&render::text(r)),
        None => s.push_str("no call completed: nothing to analyse\n"),
    }
    s.push('\n');
    s.push_str(&truth.text(a, steady));
    let _ = writeln!(
        s,
        "  - the layer's own counters: queue drops {}, rejected headers {}, clamped {}; the server saw {} request(s), {} with a trace context.",
        run.summary.queue_drops,
        run.summary.rejected_headers,
        run.summary.clamped,
        run.server.requests,
        run.server.with_trace_context
    );
    if let Some(e) = &run.robot.first_error {
        let _ = writeln!(s, "  first failure: {e}");
    }
    let _ = writeln!(
        s,
        "\nrecords and summaries: {}  (try: stagetrace report {})",
        run.out.display(),
        run.out.display()
    );
    s
}

/// The report's head: the run's knobs and what the demo injected.
fn injected(a: &DemoArgs) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "stagetrace demo: {} calls at {} Hz over {} (loopback), model {} ms, frame {} KiB",
        a.calls,
        a.hz,
        match a.transport {
            TransportArg::Ws => "WebSocket + msgpack",
            TransportArg::Http => "HTTP",
            TransportArg::GrpcAsync => "gRPC, async (LeRobot)",
        },
        a.model_ms,
        a.payload_kb
    );
    let _ = writeln!(
        s,
        "injected: server clock {:+} ms, uplink +{} ms, downlink +{} ms; clock mode {}",
        a.server_skew_ms,
        a.uplink_delay_ms,
        a.downlink_delay_ms,
        a.clock.as_str()
    );
    let h = &a.hops;
    if a.server_drift_ppm != 0.0 {
        let _ = writeln!(
            s,
            "injected: server clock drift {:+} ppm",
            a.server_drift_ppm
        );
    }
    if h.gateway {
        let _ = writeln!(
            s,
            "injected: gateway between robot and server (the delays above are gateway → server): gateway clock {:+} ms, {:+} ppm; robot → gateway +{} ms, gateway → robot +{} ms",
            h.gateway_skew_ms, h.gateway_drift_ppm, h.gateway_uplink_delay_ms, h.gateway_downlink_delay_ms
        );
    }
    if h.executor {
        let _ = writeln!(
            s,
            "injected: remote executor: clock {:+} ms, {:+} ppm; robot → executor +{} ms, executor → robot +{} ms; {}",
            h.executor_skew_ms, h.executor_drift_ppm, h.executor_uplink_delay_ms,
            h.executor_downlink_delay_ms,
            if h.executor_busy_every > 0 {
                format!("busy {} ms on 1 chunk in {}", h.executor_busy_ms, h.executor_busy_every)
            } else {
                "never busy".to_owned()
            }
        );
    }
    s
}
