//! The parsers of `stagetrace-analyze`: the record loader
//! (`Dataset::load_reader`, one `records-*.jsonl` file) and the `--fail-if`
//! gate expression (`Gate::from_str`).

use std::path::Path;

use stagetrace::record::CallRecord;
use stagetrace_analyze::gate::{Gate, Op, Target as GateTarget};
use stagetrace_analyze::load::{Dataset, LoadOptions};
use stagetrace_schema::Figure;
use stagetrace_schema::{Group, Unit};

use super::{ensure, Outcome, Target, DEFAULT_TEST_INPUTS};
use crate::alloc::peak_during;

// ---------------------------------------------------------------- record loader

/// The loader's documented bounds (`load/range.rs`), kept here as the
/// oracle's own: a latency is at most a day, a clock offset and a timestamp
/// at most the last Unix nanosecond
/// an `i64` holds.
const MAX_LATENCY_MS: f64 = 86_400_000.0;
const MAX_UNIX_MS: f64 = 9_223_372_036_854.775;

fn records() -> Vec<CallRecord> {
    let mut full = CallRecord {
        seq: 41,
        ts_unix_ns: 1_700_000_000_123_456_789,
        kind: "infer".into(),
        trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
        warmup: Some(true),
        output_digest: Some("ab12".into()),
        batch_size: Some(4),
        stale_dropped: Some(2),
        ..CallRecord::default()
    };
    for (i, f) in Figure::ALL.into_iter().enumerate() {
        let ns = 1_234_567 * (i as i64 + 1);
        full.set(f, if f.is_signed() { -ns } else { ns });
    }
    let mut failed = CallRecord {
        seq: 3,
        ts_unix_ns: 1_000_000,
        kind: "call".into(),
        failed: Some(true),
        error: Some("timeout".into()),
        deadline_miss: Some(false),
        ..CallRecord::default()
    };
    failed.set(Figure::E2e, 86_400_000_000_000);
    vec![full, failed]
}

fn record_seeds() -> Vec<Vec<u8>> {
    let lines: Vec<String> = records().iter().map(CallRecord::to_json_line).collect();
    let mut s: Vec<Vec<u8>> = lines.iter().map(|l| l.clone().into_bytes()).collect();
    s.push(lines.join("\n").into_bytes());
    // The general (serde) path: escapes, exponents, nulls, unknown keys.
    s.push(
        br#"{"seq":1,"ts_unix_ms":1.7e12,"kind":"a\"b","e2e_ms":1e1,"offset_ms":-9223372036854.775,"x":null}"#
            .to_vec(),
    );
    s
}

/// Divisor from a figure's record unit to ms (the loader's `per_ms`).
fn per_ms(f: Figure) -> f64 {
    match f.unit() {
        Unit::Millis => 1.0,
        Unit::Micros => 1e3,
    }
}

/// One call of a loaded dataset, written back as a record line.
fn line_of(ds: &Dataset, i: usize, digests: &[(usize, &str)]) -> String {
    let mut m = serde_json::Map::new();
    m.insert("seq".into(), ds.seq(i).into());
    m.insert("ts_unix_ms".into(), ds.ts_unix_ms(i).into());
    m.insert("kind".into(), ds.kind_of(i).into());
    if ds.is_warmup(i) {
        m.insert("warmup".into(), true.into());
    }
    for f in Figure::ALL {
        if let Some(v) = ds.value(f, i) {
            m.insert(f.field().into(), (v * per_ms(f)).into());
        }
    }
    if let Some((_, d)) = digests.iter().find(|(c, _)| *c == i) {
        m.insert("output_digest".into(), (*d).into());
    }
    serde_json::Value::Object(m).to_string()
}

fn load(input: &[u8]) -> Result<Dataset, String> {
    let opts = LoadOptions {
        skip_bad: false,
        keep_digests: true,
    };
    Dataset::load_reader(input, Path::new("fuzz.jsonl"), opts).map_err(|e| e.to_string())
}

fn record_check(input: &[u8]) -> Result<Outcome, String> {
    let (r, peak) = peak_during(|| load(input));
    let Ok(ds) = r else {
        return Ok(Outcome {
            accepted: false,
            peak_bytes: peak,
        });
    };
    for i in 0..ds.len() {
        let ts = ds.ts_unix_ms(i);
        ensure((0.0..=MAX_UNIX_MS).contains(&ts), || {
            format!("call {i}: ts_unix_ms = {ts}")
        })?;
        for f in Figure::ALL {
            let Some(v) = ds.value(f, i) else { continue };
            // A clock offset (signed, of the clock group: `offset`,
            // `exec_offset`) may be as wide as two clocks apart.
            let max = if f.is_signed() && f.group() == Group::Clock {
                MAX_UNIX_MS
            } else {
                MAX_LATENCY_MS
            };
            ensure(v.is_finite() && v.abs() <= max, || {
                format!("call {i}: {} = {v} ms is beyond {max}", f.field())
            })?;
        }
    }
    // What was loaded, written back as records, loads to the same columns.
    let digests: Vec<(usize, &str)> = ds.digests().collect();
    let text: Vec<String> = (0..ds.len()).map(|i| line_of(&ds, i, &digests)).collect();
    let again = load(text.join("\n").as_bytes()).map_err(|e| {
        format!(
            "written back, the calls do not load: {e}\n{}",
            text.join("\n")
        )
    })?;
    ensure(again.len() == ds.len(), || {
        "written back, the count changed".into()
    })?;
    for (i, line) in text.iter().enumerate() {
        let same_values = Figure::ALL
            .into_iter()
            .all(|f| ds.value(f, i).map(f64::to_bits) == again.value(f, i).map(f64::to_bits));
        ensure(
            same_values
                && ds.seq(i) == again.seq(i)
                && ds.ts_unix_ms(i).to_bits() == again.ts_unix_ms(i).to_bits()
                && ds.kind_of(i) == again.kind_of(i)
                && ds.is_warmup(i) == again.is_warmup(i),
            || format!("written back, call {i} changed: {line}"),
        )?;
    }
    let again_digests: Vec<(usize, &str)> = again.digests().collect();
    ensure(again_digests == digests, || {
        "written back, the digests changed".into()
    })?;
    Ok(Outcome {
        accepted: true,
        peak_bytes: peak,
    })
}

/// The reader's fixed 1 MiB line buffer (`BufReader::with_capacity`), then
/// per input byte at most a few bytes of columns, strings and line buffer
/// (each call takes at least 40 input bytes and ~70 bytes of columns,
/// vectors doubling): 16 bytes per input byte and 64 KiB for the fixed
/// tables and the error text.
fn record_bound(len: usize) -> usize {
    (1 << 20) + 16 * len + 64 * 1024
}

/// The record loader (`Dataset::load_reader`, one file).
pub(super) const RECORD: Target = Target {
    name: "record",
    max_len: 4096,
    seeds: record_seeds,
    dict: &[
        b"{",
        b"}",
        b"\"",
        b":",
        b",",
        b"\n",
        b"\\",
        b"\\u0041",
        b"null",
        b"true",
        b"false",
        b"\"e2e_ms\":",
        b"\"seq\":",
        b"\"ts_unix_ms\":",
        b"\"kind\":",
        b"\"offset_ms\":",
        b"\"observer_us\":",
        b"\"warmup\":",
        b"\"output_digest\":",
        b"NaN",
        b"Infinity",
        b"-Infinity",
        b"1e309",
        b"-1e309",
        b"1e-400",
        b"-0",
        b"86400000",
        b"86400000.1",
        b"86400000000",
        b"9223372036854.775",
        b"9223372036854.776",
        b"9223372036854775",
        b"18446744073709551615",
        b"18446744073709551616",
        b"1E3",
        b"0.5e2",
        b"[]",
        b"{}",
    ],
    check: record_check,
    mem_bound: record_bound,
    min_accept_share: 0.05,
    mutate: None,
    test_inputs: DEFAULT_TEST_INPUTS,
};

// ---------------------------------------------------------------- gate

fn gate_seeds() -> Vec<Vec<u8>> {
    [
        "infer.p99>80ms",
        "call:e2e.p99.9 >= 0.2s",
        "uplink_ms.max<500us",
        "deadline.miss_rate>1%",
        "deadline.misses>=3",
        "outliers.count<=0",
        "e2e.n<100",
        "queue.median<=2µs",
        "net.count>0",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

/// The gate written back in its canonical form.
fn gate_text(g: &Gate) -> String {
    let robot = g
        .robot
        .as_deref()
        .map(|r| format!("{r}@"))
        .unwrap_or_default();
    let kind = g
        .kind
        .as_deref()
        .map(|k| format!("{k}:"))
        .unwrap_or_default();
    let lhs = match &g.target {
        GateTarget::Stage { figure, stat } => format!("{}.{stat}", figure.name()),
        GateTarget::DeadlineMisses => "deadline.misses".into(),
        GateTarget::DeadlineMissRate => "deadline.miss_rate".into(),
        GateTarget::Outliers => "outliers.count".into(),
    };
    let op = match g.op {
        Op::Gt => ">",
        Op::Ge => ">=",
        Op::Lt => "<",
        Op::Le => "<=",
    };
    // `{:?}` is the shortest text that reads back to the same f64.
    format!("{robot}{kind}{lhs}{op}{:?}", g.limit)
}

const STATS: &[&str] = &[
    "n", "min", "p50", "p90", "p99", "p999", "max", "mean", "stddev",
];

fn gate_check(input: &[u8]) -> Result<Outcome, String> {
    // The command line hands the gate over as a `String`.
    let Ok(text) = std::str::from_utf8(input) else {
        return Ok(Outcome {
            accepted: false,
            peak_bytes: 0,
        });
    };
    let (r, peak) = peak_during(|| text.parse::<Gate>());
    let Ok(g) = r else {
        return Ok(Outcome {
            accepted: false,
            peak_bytes: peak,
        });
    };
    ensure(g.limit.is_finite(), || {
        format!("accepted a limit of {} from {text:?}", g.limit)
    })?;
    ensure(g.kind.as_deref() != Some(""), || {
        "accepted an empty kind".into()
    })?;
    ensure(g.robot.as_deref() != Some(""), || {
        "accepted an empty robot".into()
    })?;
    if let GateTarget::Stage { stat, .. } = &g.target {
        ensure(STATS.contains(&stat.as_str()), || {
            format!("accepted statistic {stat:?}")
        })?;
    }
    let canon = gate_text(&g);
    let again: Gate = canon
        .parse()
        .map_err(|e| format!("canonical form {canon:?} does not parse: {e}"))?;
    ensure(
        again.kind == g.kind
            && again.robot == g.robot
            && again.target == g.target
            && again.op == g.op
            && again.limit.to_bits() == g.limit.to_bits(),
        || format!("{text:?} → {canon:?} reads back as {again:?}"),
    )?;
    Ok(Outcome {
        accepted: true,
        peak_bytes: peak,
    })
}

/// The whitespace-free copy, the kept text, kind and statistic (each at
/// most the input), and an error message: the input quoted once plus the
/// fixed syntax help (under 1 KiB), with `format!`'s growth: 8 bytes per
/// input byte and 4 KiB.
fn gate_bound(len: usize) -> usize {
    8 * len + 4096
}

/// The `--fail-if` gate expression (`Gate::from_str`).
pub(super) const GATE: Target = Target {
    name: "gate",
    max_len: 256,
    seeds: gate_seeds,
    dict: &[
        b"arm-2@",
        b"*@",
        b"@",
        b"infer",
        b"e2e",
        b"uplink_ms",
        b"observer",
        b"offset",
        b".p99",
        b".p99.9",
        b".max",
        b".n",
        b".count",
        b".median",
        b".p98",
        b">",
        b">=",
        b"<",
        b"<=",
        b"<==",
        b"=",
        b"ms",
        b"us",
        "µs".as_bytes(),
        b"s",
        b"%",
        b"call:",
        b":",
        b"deadline.misses",
        b"deadline.miss_rate",
        b"outliers.count",
        b"1e309",
        b"1e306",
        b"-1e308",
        b"-",
        b"+",
        b"e",
        b"NaN",
        b"inf",
        b".",
        b"0.2",
        b" ",
        b"\xc2\xa0",
    ],
    check: gate_check,
    mem_bound: gate_bound,
    min_accept_share: 0.05,
    mutate: None,
    test_inputs: DEFAULT_TEST_INPUTS,
};
