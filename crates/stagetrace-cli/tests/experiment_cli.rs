//! `stagetrace experiment` end to end: a plan file, `--json`, and Ctrl-C
//! mid-way (the run stops promptly, restores what it changed, closes the
//! proxy and writes a partial report).

#![allow(clippy::unwrap_used)]

use std::io::Read;
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const PLAN: &str = r#"
name = "net ramp (cli)"
[target]
kind = "demo"
hz = 20
model_ms = 5
payload_kb = 8
warmup_s = 0.5
[baseline]
hold_s = 2
[factor]
kind = "net"
direction = "uplink"
hold_s = HOLD
levels = [10]
"#;

fn plan(dir: &std::path::Path, hold: &str) -> std::path::PathBuf {
    let p = dir.join("plan.toml");
    std::fs::write(&p, PLAN.replace("HOLD", hold)).unwrap();
    p
}

#[test]
fn json_names_uplink_for_an_uplink_delay() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_stagetrace"))
        .args(["experiment", "--json", "--out"])
        .arg(dir.path().join("run"))
        .arg(plan(dir.path(), "2.5"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        json["verdict"]["first_stage"], "uplink",
        "{}",
        json["verdict"]
    );
    assert_eq!(json["interrupted"], false);
    // Uplink-only delay: the split may later shift part of it into downlink
    // (path asymmetry cannot be measured from two clocks); uplink moves most.
    let ratio = |s: &str| {
        json["levels"][0]["components"][s]["p50_ratio"]["ratio"]
            .as_f64()
            .unwrap()
    };
    assert!(ratio("uplink") > ratio("downlink"));
}

#[test]
fn bad_plan_names_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.toml");
    std::fs::write(&p, "[target]\nkind = \"demo\"\n[baseline]\nhold_s = 1\n[factor]\nkind = \"cpu\"\nhold_s = 1\nlevels = [{ delay_ms = 3 }]\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_stagetrace"))
        .args(["experiment"])
        .arg(&p)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("delay_ms does not apply to a cpu factor"),
        "{err}"
    );
}

#[test]
fn ctrl_c_mid_way_restores_and_closes_the_proxy() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("run");
    let mut child = Command::new(env!("CARGO_BIN_EXE_stagetrace"))
        .args(["experiment", "--quiet", "--out"])
        .arg(&run_dir)
        .arg(plan(dir.path(), "60"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the level is running: its records are tagged "level".
    let records = run_dir.join("records-experiment.jsonl");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "the level never started");
        assert!(child.try_wait().unwrap().is_none(), "exited early");
        // The records file is buffered: look at the resource samples too.
        let res = std::fs::read_to_string(run_dir.join("resources.jsonl")).unwrap_or_default();
        let recs = std::fs::read_to_string(&records).unwrap_or_default();
        if res.contains("\"phase\":\"level\"") || recs.contains("\"phase\":\"level\"") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    let sent = Instant::now();
    let ok = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(20),
            "no exit after Ctrl-C"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("restored: proxy links reset"), "{err}");
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("experiment.json")).unwrap())
            .unwrap();
    assert_eq!(json["interrupted"], true);
    assert_eq!(json["phases"][2]["phase"], "level");
    for addr in json["addresses"].as_object().unwrap().values() {
        let addr = addr.as_str().unwrap().parse().unwrap();
        assert!(
            TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err(),
            "{addr} still accepts connections"
        );
    }
}
