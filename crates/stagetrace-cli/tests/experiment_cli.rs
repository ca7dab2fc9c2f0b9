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

/// `stagetrace experiment --json` on the demo plan with `hold` seconds per
/// phase, in `dir`; it must succeed.
fn experiment_json(dir: &std::path::Path, hold: &str) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_stagetrace"))
        .args(["experiment", "--json", "--out"])
        .arg(dir.join("run"))
        .arg(plan(dir, hold))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn json_names_uplink_for_an_uplink_delay() {
    let _turn = take_turn();
    let dir = tempfile::tempdir().unwrap();
    let out = experiment_json(dir.path(), "2.5");
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

/// Start `stagetrace experiment` on `plan_text` and wait until its first
/// level runs (its records or samples are tagged "level").
fn start_until_level(
    dir: &std::path::Path,
    plan_text: &str,
) -> (std::process::Child, std::path::PathBuf) {
    let run_dir = dir.join("run");
    let plan = dir.join("plan.toml");
    std::fs::write(&plan, plan_text).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_stagetrace"))
        .args(["experiment", "--quiet", "--out"])
        .arg(&run_dir)
        .arg(&plan)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let records = run_dir.join("records-experiment.jsonl");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if Instant::now() >= deadline || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            let mut err = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut err);
            panic!("the level never started: {err}");
        }
        // The records file is buffered: look at the resource samples too.
        let res = std::fs::read_to_string(run_dir.join("resources.jsonl")).unwrap_or_default();
        let recs = std::fs::read_to_string(&records).unwrap_or_default();
        if res.contains("\"phase\":\"level\"") || recs.contains("\"phase\":\"level\"") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    (child, run_dir)
}

/// SIGINT, then wait for the exit; returns (exit code, stderr).
fn interrupt(mut child: std::process::Child) -> (Option<i32>, String) {
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
    (status.code(), err)
}

fn assert_closed(json: &Value) {
    for addr in json["addresses"].as_object().unwrap().values() {
        let addr = addr.as_str().unwrap().parse().unwrap();
        assert!(
            TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err(),
            "{addr} still accepts connections"
        );
    }
}

#[test]
fn ctrl_c_mid_way_restores_and_closes_the_proxy() {
    let _turn = take_turn();
    let dir = tempfile::tempdir().unwrap();
    let (child, run_dir) = start_until_level(dir.path(), &PLAN.replace("HOLD", "60"));
    let (code, err) = interrupt(child);
    assert_eq!(code, Some(130), "{err}");
    assert!(err.contains("restored: proxy shaping reset"), "{err}");
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("experiment.json")).unwrap())
            .unwrap();
    assert_eq!(json["interrupted"], true);
    assert_eq!(json["phases"][2]["phase"], "level");
    assert_closed(&json);
}

// ---------------------------------------------------------------------------
// the kernel bottleneck (root and iproute2)
// ---------------------------------------------------------------------------

const KERNEL_PLAN: &str = r#"
name = "kernel bottleneck (cli)"
[target]
kind = "demo"
hz = 20
model_ms = 5
payload_kb = 32
warmup_s = 0.5
[baseline]
hold_s = 1.5
[factor]
kind = "net"
kernel = true
hold_s = 60
levels = [{ rate_mbit = 20, cross_mbit = 5, delay_ms = 5 }]
"#;

/// Tests that start runs or sweep take turns: every run starts by deleting
/// the namespaces of dead runs, as `--clean` does, and would otherwise
/// delete what another test killed a run (or made a namespace) to look at.
static DEAD_RUN_NAMESPACES: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn take_turn() -> std::sync::MutexGuard<'static, ()> {
    DEAD_RUN_NAMESPACES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

fn netns_or_skip(test: &str) -> bool {
    stagetrace_test_support::prereq::have(
        test,
        "netns",
        stagetrace_experiment::netns::kernel_bottleneck_available(),
        "the kernel bottleneck needs root and iproute2 (ip, tc)",
    )
}

/// What of process `pid` is left in the root namespace: namespaces listed
/// by `ip netns list` and veth interfaces in `ip link`.
fn leftovers(pid: u32) -> Vec<String> {
    let text = |args: &[&str]| {
        let out = Command::new("ip").args(args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let ns = format!("stagetrace-{pid}-");
    let dev = format!("st{pid}-");
    let mut left: Vec<String> = text(&["netns", "list"])
        .lines()
        .filter(|l| l.starts_with(&ns))
        .map(str::to_owned)
        .collect();
    left.extend(
        text(&["-o", "hop"])
            .lines()
            .filter_map(|l| l.split(": ").nth(1))
            .filter(|n| n.starts_with(&dev))
            .map(str::to_owned),
    );
    left
}

#[test]
fn ctrl_c_mid_way_removes_the_kernel_bottleneck() {
    if !netns_or_skip("ctrl_c_mid_way_removes_the_kernel_bottleneck") {
        return;
    }
    let _turn = take_turn();
    let dir = tempfile::tempdir().unwrap();
    let (child, run_dir) = start_until_level(dir.path(), KERNEL_PLAN);
    let pid = child.id();
    assert_eq!(
        stagetrace_experiment::netns::namespaces_of(pid).len(),
        2,
        "the run's namespaces are not there while it runs"
    );
    let (code, err) = interrupt(child);
    assert_eq!(code, Some(130), "{err}");
    for undone in [
        "proxy shaping reset",
        "cross traffic stopped",
        "tbf removed",
        "deleted",
    ] {
        assert!(err.contains(undone), "{undone}: {err}");
    }
    assert_eq!(leftovers(pid), Vec::<String>::new());
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("experiment.json")).unwrap())
            .unwrap();
    assert_eq!(json["interrupted"], true);
    assert!(json["counters"]["cross_traffic_bytes"].as_u64().unwrap() > 0);
    assert_closed(&json);
}

#[test]
fn a_killed_run_leaves_namespaces_that_the_next_run_removes() {
    if !netns_or_skip("a_killed_run_leaves_namespaces_that_the_next_run_removes") {
        return;
    }
    let _turn = take_turn();
    let dir = tempfile::tempdir().unwrap();
    let (mut child, _) = start_until_level(dir.path(), KERNEL_PLAN);
    let pid = child.id();
    // SIGKILL: no chance to restore anything.
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        stagetrace_experiment::netns::namespaces_of(pid).len(),
        2,
        "a SIGKILL cannot clean up; the namespaces should still be there"
    );
    // The next run (any factor) deletes the dead run's namespaces first.
    let next = tempfile::tempdir().unwrap();
    experiment_json(next.path(), "1");
    assert_eq!(leftovers(pid), Vec::<String>::new());
}

#[test]
fn the_kernel_bottleneck_is_refused_without_root_never_faked() {
    let setpriv = std::path::Path::new("/usr/bin/setpriv");
    if !(stagetrace_experiment::netns::kernel_bottleneck_available() && setpriv.exists()) {
        stagetrace_test_support::prereq::missing(
            "the_kernel_bottleneck_is_refused_without_root_never_faked",
            "netns",
            "needs root, iproute2 and /usr/bin/setpriv",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let plan = dir.path().join("plan.toml");
    std::fs::write(&plan, KERNEL_PLAN).unwrap();
    std::fs::set_permissions(&plan, std::fs::Permissions::from_mode(0o644)).unwrap();
    // A copy nobody can reach: the checkout's own folders may be closed to it.
    let exe = dir.path().join("stagetrace");
    std::fs::copy(env!("CARGO_BIN_EXE_stagetrace"), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    // As nobody.
    let out = Command::new(setpriv)
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&exe)
        .args(["experiment", "--quiet", "--out"])
        .arg(dir.path().join("run"))
        .arg(&plan)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("Permission denied") {
        stagetrace_test_support::prereq::missing(
            "the_kernel_bottleneck_is_refused_without_root_never_faked",
            "nobody",
            &format!("user nobody cannot run the test binary from this checkout ({err})"),
        );
        return;
    }
    // A run that cannot be carried out is status 2 (docs/report.md, "Exit codes").
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(
            "kernel bottleneck needs root and iproute2; use the userspace proxy (kernel = false)"
        ),
        "{err}"
    );
    assert!(!dir.path().join("run/experiment.json").exists());
}

#[test]
fn clean_removes_what_a_killed_run_left_and_says_so() {
    if !netns_or_skip("clean_removes_what_a_killed_run_left_and_says_so") {
        return;
    }
    let _turn = take_turn();
    // A namespace named like a run's, for a process that has exited.
    let mut gone = Command::new("true").spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    let name = format!("stagetrace-{pid}-0-a");
    let added = Command::new("ip")
        .args(["netns", "add", &name])
        .status()
        .unwrap();
    assert!(added.success());
    assert_eq!(leftovers(pid), vec![name.clone()]);

    let out = Command::new(env!("CARGO_BIN_EXE_stagetrace"))
        .args(["experiment", "--clean"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("deleted network namespace {name}")),
        "{stdout}"
    );
    assert_eq!(leftovers(pid), Vec::<String>::new());

    // Nothing left: it says so and succeeds. (Other tests' runs are alive,
    // so their namespaces are not touched.)
    let again = Command::new(env!("CARGO_BIN_EXE_stagetrace"))
        .args(["experiment", "--clean"])
        .output()
        .unwrap();
    assert!(again.status.success());
    assert!(!String::from_utf8_lossy(&again.stdout).contains(&name));
}

#[test]
fn clean_and_a_plan_do_not_go_together() {
    let out = Command::new(env!("CARGO_BIN_EXE_stagetrace"))
        .args(["experiment", "--clean", "plan.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));
}
