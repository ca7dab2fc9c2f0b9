//! Every table the CLI prints keeps its columns: `report` (stages, hosts,
//! against the baseline, hops, robots), `compare`, `tail`, the core's
//! `summary.table()` and the demo (its report and its truth table). Each
//! row's cells sit under the header's columns — a name starts where its
//! header starts, a number ends where its header ends — however long a
//! name (`server_cpu_stall`, `downlink ± 12.8`, `hop 2 (gateway → server)`).

#![allow(clippy::unwrap_used)]

mod support;

use std::fs;
use std::process::Command;

use support::gen::{self, Gateway, Scenario, Wait};
use support::{check_tables, p, stagetrace, stderr, stdout, tables_misaligned};

/// A run with every kind of row: infer's and queue's parts, host figures on
/// both ends (long names), deadlines, an estimated clock's split.
fn full(seed: u64) -> Scenario {
    Scenario {
        seed,
        calls: 300,
        hz: 30.0,
        deadline: true,
        host_figures: true,
        infer_ms: (12.0, 0.3),
        parts: Some(gen::Parts {
            device: Some(0.9),
            ..gen::Parts::default()
        }),
        waits: vec![Wait {
            field: "accept_wait_ms",
            base_ms: 0.05,
            frac: 0.0,
            range: (0.0, 0.0),
        }],
        small_fields: &["server_tx_wait_ms", "tx_wait_ms"],
        split_err_ms: 1.35,
        digests: true,
        ..Scenario::default()
    }
}

#[test]
fn the_checker_catches_a_misaligned_column() {
    // Issue 40's table: fixed widths, a name longer than its column
    // pushes its row's numbers right.
    let line = |name: &str, n: &str, min: &str, p50: &str| {
        format!("  {name:<10} {n:>8} {min:>9} {p50:>9}\n")
    };
    let head = line("stage", "n", "min", "p50");
    let capture = line("capture", "290", "2.008", "2.238");
    assert_eq!(tables_misaligned(&(head.clone() + &capture)), Ok(1));
    let broken = head + &capture + &line("server_run_wait", "290", "0.000", "0.000");
    assert!(tables_misaligned(&broken).is_err(), "{broken}");
    // A text column: a cell that neither starts nor ends under its header.
    let text = "  field   measured  note\n  net_ms    1.0 ms  exact\n  up_ms     2.0 ms   inside\n";
    let (good, bad) = text.split_at(text.find("  up_ms").unwrap());
    assert_eq!(tables_misaligned(good), Ok(1));
    assert!(tables_misaligned(&(good.to_string() + bad)).is_err());
}

#[test]
fn report_tables_keep_their_columns() {
    let dir = tempfile::tempdir().unwrap();
    let (run, idle) = (dir.path().join("run.jsonl"), dir.path().join("idle.jsonl"));
    gen::write(&run, &full(701));
    gen::write(&idle, &full(702));
    let out = stagetrace(&["report", p(&run), "--baseline", p(&idle)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    // The stages, the hosts, against the baseline.
    assert_eq!(check_tables(&text, "report --baseline"), 3);
    assert!(text.contains("server_cpu_stall"), "{text}");
    assert!(text.contains("uplink ± 1.35"), "{text}");
    // Calls through a gateway: the hops, and the hops against the baseline.
    let (hop_run, hop_idle) = (
        dir.path().join("hops.jsonl"),
        dir.path().join("hops-idle.jsonl"),
    );
    let through = |seed, gateway| Scenario {
        seed,
        gateway: Some(gateway),
        ..Scenario::default()
    };
    gen::write(
        &hop_run,
        &through(
            703,
            Gateway {
                down: [4.0, 2.0],
                ..Gateway::default()
            },
        ),
    );
    gen::write(&hop_idle, &through(704, Gateway::default()));
    let out = stagetrace(&["report", p(&hop_run), "--baseline", p(&hop_idle)]);
    let text = stdout(&out);
    assert_eq!(check_tables(&text, "report (hops)"), 4, "{text}");
    // A fleet: the robots' column.
    let (a, b) = (dir.path().join("arm-1"), dir.path().join("arm-2"));
    for (d, seed) in [(&a, 705), (&b, 706)] {
        fs::create_dir(d).unwrap();
        gen::write(&d.join("records-x.jsonl"), &full(seed));
    }
    let out = stagetrace(&["report", "--per-robot", p(&a), p(&b)]);
    let text = stdout(&out);
    assert_eq!(check_tables(&text, "report --per-robot"), 3, "{text}");
}

#[test]
fn compare_tables_keep_their_columns() {
    let dir = tempfile::tempdir().unwrap();
    let (before, after) = (
        dir.path().join("before.jsonl"),
        dir.path().join("after.jsonl"),
    );
    gen::write(&before, &full(711));
    gen::write(
        &after,
        &Scenario {
            seed: 712,
            link_delay_ms: (15.0, 0.0),
            infer_factor: 1.2,
            ..full(711)
        },
    );
    for all in [false, true] {
        let mut args = vec!["compare", p(&before), p(&after)];
        if all {
            args.push("--all");
        }
        let out = stagetrace(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        let text = stdout(&out);
        // The call's rows, and the hosts' (every row of them with --all).
        let least = if all { 2 } else { 1 };
        assert!(check_tables(&text, "compare") >= least, "{text}");
    }
    let (hb, ha) = (dir.path().join("hb.jsonl"), dir.path().join("ha.jsonl"));
    let through = |seed, gateway| Scenario {
        seed,
        gateway: Some(gateway),
        ..Scenario::default()
    };
    gen::write(&hb, &through(713, Gateway::default()));
    gen::write(
        &ha,
        &through(
            714,
            Gateway {
                down: [4.0, 2.0],
                ..Gateway::default()
            },
        ),
    );
    let out = stagetrace(&["compare", p(&hb), p(&ha), "--all"]);
    let text = stdout(&out);
    assert_eq!(check_tables(&text, "compare (hops)"), 2, "{text}");
}

/// A summary line as the layer writes it, with the host figures of both
/// ends and the clock of an estimated split.
fn summary_line() -> String {
    let st = |p50: f64| {
        serde_json::json!({"count": 300, "min": p50 * 0.8, "p50": p50, "p90": p50 * 1.1,
            "p99": p50 * 1.3, "p99.9": p50 * 1.5, "max": p50 * 2.0, "mean": p50 * 1.02})
    };
    let stages = serde_json::json!({
        "capture": st(2.2), "uplink": st(13.2), "queue": st(0.46), "infer": st(12.3),
        "pre": st(0.06), "model": st(12.1), "post": st(0.12), "downlink": st(12.8),
        "dispatch": st(1.04), "roundtrip": st(38.8), "server": st(12.8), "net": st(26.0),
        "e2e": st(44.0), "gap": st(0.5), "run_wait": st(2.1), "cpu_stall": st(43.5),
        "server_run_wait": st(0.03), "server_cpu_stall": st(12.5), "rx_wait": st(0.3),
        "server_rx_wait": st(0.18), "capture_run_wait": st(1.45), "tx_wait": st(0.3),
        "server_tx_wait": st(0.13)
    });
    serde_json::json!({
        "run": "run-a", "window": "rolling", "index": 3,
        "start_unix_ms": 1_764_000_000_000.0, "end_unix_ms": 1_764_000_010_000.0,
        "calls": 300, "warmup_calls": 0, "failed_calls": 0,
        "stages": stages, "kinds": {"call": {"calls": 300, "stages": stages}},
        "observer_us": {"p50": 2.5, "p99": 6.0},
        "queue_drops": 0, "write_failures": 0, "rejected_headers": 0, "clamped": 0,
        "ignored_spans": 0, "empty_calls": 0,
        "clock": {"calls": 300, "offset_ms": {"min": 240.0, "max": 262.0, "last": 257.5},
                  "split_err_ms": {"p50": 12.79, "p99": 13.5}, "steps": 0}
    })
    .to_string()
}

#[test]
fn tail_and_the_summary_table_keep_their_columns() {
    let line = summary_line();
    let summary: stagetrace::summary::WindowSummary = serde_json::from_str(&line).unwrap();
    let table = summary.table();
    // The stages, then the hosts.
    assert_eq!(check_tables(&table, "summary.table()"), 2, "{table}");
    assert!(table.contains("downlink ± 12.8"), "{table}");
    let host = table.find("host (ms)").unwrap();
    assert!(table.find("server_cpu_stall").unwrap() > host, "{table}");
    assert!(table.find("e2e").unwrap() < host, "{table}");
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("summary.x.jsonl"), line + "\n").unwrap();
    let out = stagetrace(&["tail", p(dir.path()), "--once"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(check_tables(&text, "tail"), 2, "{text}");
}

#[test]
fn the_demo_s_tables_keep_their_columns() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_stagetrace"))
        .args([
            "demo", "--calls", "60", "--hz", "50", "--warmup", "5", "--out",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(out.status.success(), "{}\n{text}", stderr(&out));
    // The report's stages (the hosts' too where the host offers them:
    // Linux) and the truth table.
    let tables = check_tables(&text, "demo");
    assert!(tables >= 2, "{text}");
    assert!(text.contains("  field "), "{text}");
    // LeRobot's async inference: its own truth table.
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_stagetrace"))
        .args([
            "demo",
            "--transport",
            "grpc-async",
            "--calls",
            "60",
            "--hz",
            "30",
        ])
        .args(["--model-ms", "10", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(out.status.success(), "{}\n{text}", stderr(&out));
    assert!(
        check_tables(&text, "demo --transport grpc-async") >= 2,
        "{text}"
    );
    assert!(text.contains("  figure "), "{text}");
}
