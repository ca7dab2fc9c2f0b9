//! Test prerequisites that a machine may lack (Jaeger, Chromium, network
//! namespaces, Python packages): one rule for every test that needs one.
//!
//! A missing prerequisite is a **failure** when the run must be complete:
//! under CI (`CI=true` or `CI=1`), or when `STAGETRACE_REQUIRE_<NAME>=1`
//! (`cargo xtask test` sets it for what it provided). It is a skip only
//! when `STAGETRACE_ALLOW_MISSING` names it (`jaeger,chromium`) or outside
//! CI. Every skip is printed straight to stderr (libtest hides the output of
//! passing tests) and appended to the file `STAGETRACE_SKIP_LOG` names, which
//! `cargo xtask test` counts and prints at the end of the run.

use std::io::Write as _;

/// What decides whether a missing prerequisite fails the test.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// `CI` is `true` or `1`.
    pub ci: bool,
    /// `STAGETRACE_REQUIRE_<NAME>=1`.
    pub required: bool,
    /// `STAGETRACE_ALLOW_MISSING` lists the prerequisite.
    pub allowed: bool,
}

impl Policy {
    /// The policy for prerequisite `name` (`"jaeger"`) from the environment.
    pub fn from_env(name: &str) -> Policy {
        let var = |k: &str| std::env::var(k).unwrap_or_default();
        Policy {
            ci: matches!(var("CI").trim(), "true" | "1"),
            required: var(&format!("STAGETRACE_REQUIRE_{}", name.to_ascii_uppercase())) == "1",
            allowed: allowed_in(&var("STAGETRACE_ALLOW_MISSING"), name),
        }
    }

    /// Whether a missing prerequisite fails the run.
    pub fn must_have(&self) -> bool {
        self.required || (self.ci && !self.allowed)
    }
}

/// Whether the comma-separated `list` names `name` (case-insensitive).
pub fn allowed_in(list: &str, name: &str) -> bool {
    list.split(',')
        .any(|item| item.trim().eq_ignore_ascii_case(name))
}

/// Call when `test` cannot run because prerequisite `name` is missing
/// (`why`: what is missing and how to get it). Panics when the run must be
/// complete; otherwise says SKIPPED loudly, logs the skip and returns, and
/// the test returns early.
#[track_caller]
pub fn missing(test: &str, name: &str, why: &str) {
    let policy = Policy::from_env(name);
    if policy.must_have() {
        panic!(
            "{test}: prerequisite `{name}` is missing: {why}\n\
             (a missing prerequisite fails under CI; set STAGETRACE_ALLOW_MISSING={name} \
             to skip it knowingly)"
        );
    }
    let bang = "!".repeat(72);
    let banner = format!("\n{bang}\n!!! SKIPPED {test}: no {name}: {why}\n{bang}\n\n");
    let _ = std::io::stderr().write_all(banner.as_bytes());
    if let Some(path) = std::env::var_os("STAGETRACE_SKIP_LOG") {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(f, "{test}\t{name}\t{why}");
        }
    }
}

/// `present`, after saying [`missing`] when it is not: `if !have(…) {
/// return; }` at the top of a test whose prerequisite is `name`.
#[track_caller]
pub fn have(test: &str, name: &str, present: bool, why: &str) -> bool {
    if !present {
        missing(test, name, why);
    }
    present
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ci_makes_a_missing_prerequisite_fatal_unless_allowed() {
        let ci = Policy {
            ci: true,
            ..Policy::default()
        };
        assert!(ci.must_have());
        assert!(!Policy {
            allowed: true,
            ..ci.clone()
        }
        .must_have());
        assert!(!Policy::default().must_have());
        assert!(Policy {
            required: true,
            allowed: true,
            ..Policy::default()
        }
        .must_have());
    }

    #[test]
    fn the_allow_list_is_comma_separated() {
        assert!(allowed_in("jaeger, Chromium", "chromium"));
        assert!(!allowed_in("jaegerx", "jaeger"));
        assert!(!allowed_in("", "jaeger"));
    }
}
