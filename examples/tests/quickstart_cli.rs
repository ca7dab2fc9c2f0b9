//! The quickstart example's command line: `--help` prints the usage and
//! succeeds; a bad option says what is wrong and shows the usage.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;

/// `target/<profile>/examples/quickstart`, which `cargo test` builds with
/// the tests (next to this test's own `deps/` directory).
fn quickstart() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|d| d.parent()).unwrap();
    let bin = profile_dir.join("examples/quickstart");
    assert!(bin.exists(), "{} not built", bin.display());
    bin
}

#[test]
fn help_prints_the_usage_and_succeeds() {
    for flag in ["--help", "-h"] {
        let out = Command::new(quickstart()).arg(flag).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{flag}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.starts_with("usage: quickstart [--calls N]"), "{text}");
    }
}

#[test]
fn a_bad_option_says_so_with_the_usage() {
    let out = Command::new(quickstart())
        .arg("--nope")
        .arg("1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        err.contains("unknown option --nope") && err.contains("usage: quickstart"),
        "{err}"
    );
}
