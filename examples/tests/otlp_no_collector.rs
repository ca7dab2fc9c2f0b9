//! The app of docs/jaeger.md section 2 (`examples/examples/otlp_client.rs`),
//! run as a real process with nothing listening where it exports: it must
//! still exit 0, and its log must say, once, how many calls were lost and
//! what to check (issue 40: it used to lose all 20 and print nothing).

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The example's calls (its loop runs `0..20`).
const CALLS: u64 = 20;

/// The longest the app may take: 20 calls of 8 ms, then a flush bounded by
/// the exporter's 3 s shutdown timeout. Far above both; the bound only
/// keeps a hung app from hanging the test.
const RUN_LIMIT: Duration = Duration::from_secs(60);

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the examples crate sits in the workspace")
        .to_path_buf()
}

/// Builds `--example name` (cargo does not build examples for a lone
/// `--test` target) and returns its path.
fn example(name: &str) -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(root())
        .args(["build", "-p", "examples", "--example", name])
        .args(["--message-format=json-render-diagnostics"])
        .stderr(Stdio::inherit())
        .output()
        .expect("cargo runs");
    assert!(out.status.success(), "building the {name} example failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == name)
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| panic!("cargo named no executable for the {name} example"))
}

/// A loopback port nothing listens on: bound by us, read, released.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("its address").port()
}

/// Runs `exe` with `env`, bounded by `RUN_LIMIT`: (exit code, stderr).
fn run(exe: &Path, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut cmd = Command::new(exe);
    // Only what the test sets decides where the app exports.
    for (k, _) in std::env::vars() {
        if k.starts_with("OTEL_") {
            cmd.env_remove(k);
        }
    }
    let mut child = cmd
        .envs(env.iter().copied())
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the example starts");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the example") {
            break status;
        }
        if start.elapsed() > RUN_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the app did not exit within {RUN_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status.code(), reader.join().expect("stderr reader"))
}

#[test]
fn with_no_collector_listening_the_apps_log_has_one_warning_with_the_calls_lost() {
    let exe = example("otlp_client");
    let endpoint = format!("http://127.0.0.1:{}", free_port());
    let (code, log) = run(&exe, &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)]);

    assert_eq!(
        code,
        Some(0),
        "the app must not fail for its exporter:\n{log}"
    );
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains(" WARN ")).collect();
    assert_eq!(warnings.len(), 1, "exactly one warning expected:\n{log}");
    let warning = warnings[0];
    let url = format!("{endpoint}/v1/traces");
    for expected in [
        " WARN stagetrace: ".to_owned(),
        format!("{CALLS} of {CALLS} calls of service robot-client were not exported to {url}"),
        format!("is the collector (e.g. Jaeger) running at {url}"),
        format!("lost={CALLS}"),
    ] {
        assert!(
            warning.contains(&expected),
            "{expected:?} missing from {warning:?}"
        );
    }
    assert!(
        !log.contains("ERROR"),
        "the exporter's failure is a warning, not an error:\n{log}"
    );
}

/// "Built from the docs' snippet": the Rust block under docs/jaeger.md's
/// "## 2." is the example's code, word for word.
#[test]
fn the_example_is_the_snippet_of_jaeger_md_section_2() {
    let doc = std::fs::read_to_string(root().join("docs/jaeger.md")).expect("read jaeger.md");
    let example = std::fs::read_to_string(root().join("examples/examples/otlp_client.rs"))
        .expect("read the example");
    let section = &doc[doc.find("\n## 2.").expect("jaeger.md has a section 2")..];
    let fence = "```rust,no_run\n";
    let start = section.find(fence).expect("section 2 has a Rust block") + fence.len();
    let len = section[start..].find("```").expect("the block ends");
    let block = &section[start..start + len];
    assert!(block.contains("fn main()"), "{block}");
    assert!(
        example.ends_with(block),
        "examples/examples/otlp_client.rs no longer ends with docs/jaeger.md's section 2 \
         block; make them the same again:\n{block}"
    );
}
