//! Helpers shared by the CLI tests: run the binary, generate record files.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

#[path = "../../../stagetrace-analyze/tests/support/gen.rs"]
pub(crate) mod gen;

/// Runs `stagetrace ARGS…`.
pub(crate) fn stagetrace(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stagetrace"))
        .args(args)
        .output()
        .unwrap()
}

pub(crate) fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub(crate) fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `stagetrace ARGS…`, which must fail as a usage error (status 2)
/// whose message contains `says`.
#[track_caller]
pub(crate) fn assert_usage_error(args: &[&str], says: &str) {
    let out = stagetrace(args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(says), "{err}");
}

/// The default generated run, with `seed`.
pub(crate) fn seeded(seed: u64) -> gen::Scenario {
    gen::Scenario {
        seed,
        ..gen::Scenario::default()
    }
}

pub(crate) fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}
