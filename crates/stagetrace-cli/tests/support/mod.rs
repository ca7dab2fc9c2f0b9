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

pub(crate) fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}
