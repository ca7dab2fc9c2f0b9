//! A test that must not share its process with the other tests of its
//! binary: it runs again, by itself, in a child process of the same binary.
//!
//! `cargo test` runs a binary's tests on several threads at once. A test
//! that measures something host-wide inside its process (the host's CPU
//! stall, which every reader of the pressure file disturbs) would measure
//! its neighbours too; `cargo xtask timing` runs each test alone, so a
//! bound it held there would not hold in the suite.

use std::process::Command;

/// Names the one test a child runs.
const CHILD_ENV: &str = "STAGETRACE_TEST_ALONE";

/// Whether the calling test (`name`, its full path in the binary, as
/// `--exact` takes it) should run its body here: `true` in the child this
/// starts; in the parent, `false` once the child ran the test alone
/// (`--test-threads=1`) and passed, its stderr (the timing lines
/// included) passed on. Panics when the child failed, with its output.
#[track_caller]
pub fn in_own_process(name: &str) -> bool {
    if std::env::var(CHILD_ENV).is_ok_and(|n| n == name) {
        return true;
    }
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, name)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprint!("{stderr}");
    assert!(
        out.status.success(),
        "{name} failed in its own process ({}):\n{stdout}\n{stderr}",
        out.status
    );
    // `--exact` with a name that matches nothing runs 0 tests and passes.
    assert!(
        stdout.contains("1 passed"),
        "{name} did not run in its own process:\n{stdout}"
    );
    false
}
