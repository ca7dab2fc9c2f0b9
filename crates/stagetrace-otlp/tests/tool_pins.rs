//! The Go tool modules pin the Jaeger and Prometheus the tests run against
//! (`tests/jaeger-tool/go.mod`, `tests/prometheus-tool/go.mod`). The version
//! is read from go.mod, never from the docs: the docs must name what go.mod
//! requires, and the binary the tests start must be built from it.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The release of the Jaeger module the project approves (the newer tags
/// are served by the module proxy but not approved).
const APPROVED_JAEGER: &str = "v1.75.0";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The version go.mod requires for `module` (`github.com/x/y`).
fn required(go_mod: &Path, module: &str) -> String {
    let text = std::fs::read_to_string(go_mod).unwrap();
    let prefix = format!("{module} ");
    text.lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split_whitespace().next())
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("{} does not require {module}", go_mod.display()))
}

fn jaeger_pin() -> String {
    required(
        &repo().join("crates/stagetrace-otlp/tests/jaeger-tool/go.mod"),
        "github.com/jaegertracing/jaeger",
    )
}

/// Every `v1.N.N` version written within a few lines of the word "Jaeger"
/// in the README and docs/, with where it was found.
fn jaeger_versions_in_docs() -> Vec<(String, String)> {
    let mut files = vec![repo().join("README.md")];
    for entry in std::fs::read_dir(repo().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let near = lines[i.saturating_sub(2)..(i + 3).min(lines.len())].join(" ");
            if !near.to_ascii_lowercase().contains("jaeger") {
                continue;
            }
            for word in line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '.')) {
                let word = word.trim_end_matches('.');
                let is_v1 = word.strip_prefix("v1.").is_some_and(|rest| {
                    let parts: Vec<&str> = rest.split('.').collect();
                    parts.len() == 2 && parts.iter().all(|p| p.parse::<u32>().is_ok())
                });
                if is_v1 {
                    found.push((word.to_owned(), format!("{}:{}", file.display(), i + 1)));
                }
            }
        }
    }
    found
}

#[test]
fn the_jaeger_tool_module_requires_the_approved_release() {
    assert_eq!(jaeger_pin(), APPROVED_JAEGER);
}

#[test]
fn the_docs_name_the_jaeger_release_go_mod_requires() {
    let pin = jaeger_pin();
    let versions = jaeger_versions_in_docs();
    assert!(
        !versions.is_empty(),
        "the docs name no Jaeger module version at all"
    );
    let wrong: Vec<_> = versions.iter().filter(|(v, _)| *v != pin).collect();
    assert!(
        wrong.is_empty(),
        "go.mod requires Jaeger {pin}, the docs say otherwise: {wrong:?}"
    );
}

#[test]
fn the_jaeger_the_tests_start_is_built_from_the_pinned_module() {
    let Ok(bin) = std::env::var("STAGETRACE_JAEGER_BIN") else {
        stagetrace_test_support::prereq::missing(
            "the_jaeger_the_tests_start_is_built_from_the_pinned_module",
            "jaeger",
            "STAGETRACE_JAEGER_BIN is not set (cargo xtask test builds Jaeger and sets it)",
        );
        return;
    };
    // Go writes the main module's version into every binary it builds.
    let out = match Command::new("go").args(["version", "-m", &bin]).output() {
        Ok(out) if out.status.success() => out,
        _ => {
            stagetrace_test_support::prereq::missing(
                "the_jaeger_the_tests_start_is_built_from_the_pinned_module",
                "jaeger",
                "`go version -m` cannot read the binary's module (is Go installed?)",
            );
            return;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let built = text
        .lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix("mod\tgithub.com/jaegertracing/jaeger\t"))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no Jaeger module in `go version -m {bin}`:\n{text}"));
    assert_eq!(built, jaeger_pin(), "{bin} was built from another Jaeger");
}
