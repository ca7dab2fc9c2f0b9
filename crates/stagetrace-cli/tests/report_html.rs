//! The HTML report is one self-contained file with the three plots, and a
//! real browser (headless Chromium) renders it.

#![allow(clippy::unwrap_used)]

mod support;

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::gen::{self, Scenario};
use support::{p, seeded, stagetrace, stderr};

/// Debian's chromium, or the binary xtask found (`STAGETRACE_CHROMIUM`).
fn chromium_bin() -> String {
    std::env::var("STAGETRACE_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_string())
}
const PLOTS: [&str; 3] = ["hdr-plot", "timeline-plot", "cdf-plot"];

fn write_report(dir: &Path) -> std::path::PathBuf {
    let run = dir.join("records.jsonl");
    let idle = dir.join("idle.jsonl");
    gen::write(
        &run,
        &Scenario {
            seed: 501,
            transport_tail: Some((0.03, 15.0)),
            dispatch_spikes: Some((2.0, 8.0)),
            ..Scenario::default()
        },
    );
    gen::write(&idle, &seeded(502));
    let html = dir.join("report.html");
    let out = stagetrace(&[
        "report",
        p(&run),
        "--baseline",
        p(&idle),
        "--html",
        p(&html),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    html
}

#[test]
fn html_is_self_contained_with_three_plots() {
    let dir = tempfile::tempdir().unwrap();
    let html = fs::read_to_string(write_report(dir.path())).unwrap();
    for id in PLOTS {
        assert!(html.contains(&format!("<svg id=\"{id}\"")), "{id}");
    }
    assert!(!html.contains("<script"), "no script");
    assert!(
        !html.contains(" src=") && !html.contains(" href="),
        "no external resource"
    );
    let without_ns = html.replace("http://www.w3.org/2000/svg", "");
    assert!(!without_ns.contains("http://") && !without_ns.contains("https://"));
    // Outlier rounds are marked on the timeline, baseline curves are drawn dashed.
    assert!(html.matches("class=\"outlier\"").count() > 10);
    assert!(html.contains("stroke-dasharray"));
    assert!(html.contains("99.9%"), "HDR axis labels");
    assert!(html.contains("(tail_only)") || html.contains("tail_only"));
}

/// Runs chromium with a deadline; returns its stdout.
fn chromium(args: &[String]) -> Vec<u8> {
    let mut child = Command::new(chromium_bin())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut buf).unwrap();
        buf
    });
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "chromium exited with {status}");
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within 180 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    reader.join().unwrap()
}

#[test]
fn headless_chromium_renders_the_three_plots() {
    let bin = chromium_bin();
    if !Path::new(&bin).exists() {
        stagetrace_test_support::prereq::missing(
            "headless_chromium_renders_the_three_plots",
            "chromium",
            &format!("{bin} is not installed (apt-get install -y chromium)"),
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let html = write_report(dir.path());
    let url = format!("file://{}", html.display());
    let profile = dir.path().join("profile");
    let png = dir.path().join("shot.png");
    let common = |extra: &[String]| -> Vec<String> {
        let mut a: Vec<String> = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1400,2400",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.push(format!("--user-data-dir={}", profile.display()));
        a.extend_from_slice(extra);
        a.push(url.clone());
        a
    };
    let dom = String::from_utf8(chromium(&common(&["--dump-dom".to_string()]))).unwrap();
    for id in PLOTS {
        let at = dom
            .find(&format!("id=\"{id}\""))
            .unwrap_or_else(|| panic!("{id} not in the rendered DOM"));
        let svg_end = dom[at..].find("</svg>").unwrap();
        let body = &dom[at..at + svg_end];
        assert!(
            body.contains("<polyline") || body.contains("<rect"),
            "{id} has no drawing"
        );
    }
    chromium(&common(&[format!("--screenshot={}", png.display())]));
    let bytes = fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "a PNG");
    // A rendered page with three plots compresses to far more than a blank page.
    assert!(
        bytes.len() > 40_000,
        "screenshot only {} bytes",
        bytes.len()
    );
    if let Ok(keep) = std::env::var("STAGETRACE_KEEP_SCREENSHOT") {
        fs::copy(&png, keep).unwrap();
    }
}
