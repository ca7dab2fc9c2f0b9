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
/// [`in_own_process!`](crate::in_own_process) calls it with the test's
/// own name.
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

/// The calling test's path in its binary, as `--exact` takes it
/// (`host::stall_clock::tests::a_steady_stall…`): the path of the function
/// it is written in, the crate's name taken off, so a renamed test still
/// finds itself in the child.
#[macro_export]
macro_rules! test_name {
    () => {{
        fn here() {}
        let path = ::std::any::type_name_of_val(&here);
        let path = path.strip_suffix("::here").unwrap_or(path);
        path.split_once("::").map_or(path, |(_crate, rest)| rest)
    }};
}

/// [`in_own_process`] for the test this is written in
/// ([`test_name!`](crate::test_name) spells its name): no caller can pass
/// another test's.
#[macro_export]
macro_rules! in_own_process {
    () => {
        $crate::alone::in_own_process($crate::test_name!())
    };
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_tests_name_is_its_path_without_the_crate() {
        assert_eq!(
            crate::test_name!(),
            "alone::tests::a_tests_name_is_its_path_without_the_crate"
        );
    }
}
