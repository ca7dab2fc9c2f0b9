//! The Python package's side of the test run: its venv under
//! `target/py-venv`, the package built into it, its pytest suite, and which
//! of its modules form the torch suite.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{run, Prereqs};

/// The Python package's test environment: a venv under `target/py-venv`
/// with `crates/stagetrace-py/requirements-test.txt` installed (maturin,
/// pytest, the real openpi-client), with `requirements-torch.txt` too for the
/// torch suite (`torch`), and `requirements-nodeps.txt` without its
/// dependencies (LeRobot's wire and classes, not its torch). Rebuilt only when
/// a file changes; a venv built for the torch suite serves the default one.
/// Returns the venv's directory.
fn python_env(root: &Path, torch: bool) -> Result<PathBuf, String> {
    let venv = root.join("target/py-venv");
    let dir = root.join("crates/stagetrace-py");
    let (reqs, torch_reqs, nodeps) = (
        dir.join("requirements-test.txt"),
        dir.join("requirements-torch.txt"),
        dir.join("requirements-nodeps.txt"),
    );
    let read = |p: &Path| std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()));
    let (base, extra, nodeps_text) = (read(&reqs)?, read(&torch_reqs)?, read(&nodeps)?);
    let stamp_of = |with_torch: bool| {
        let mut s = base.clone();
        if with_torch {
            s.extend_from_slice(&extra);
        }
        s.extend_from_slice(&nodeps_text);
        s
    };
    let stamp = venv.join("requirements.stamp");
    let have = std::fs::read(&stamp).ok();
    if have.as_deref() == Some(&stamp_of(true)[..])
        || (!torch && have.as_deref() == Some(&stamp_of(false)[..]))
    {
        return Ok(venv);
    }
    run(Command::new("python3")
        .args(["-m", "venv", "--clear"])
        .arg(&venv))?;
    // One resolve over both files, so torch's dependencies cannot move a pin
    // the default suite was tested with.
    let mut pip = Command::new(venv.join("bin/python"));
    pip.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "-r",
    ])
    .arg(&reqs);
    if torch {
        pip.arg("-r").arg(&torch_reqs);
    }
    run(&mut pip)?;
    run(Command::new(venv.join("bin/python"))
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "-r",
        ])
        .arg(&nodeps))?;
    std::fs::write(&stamp, stamp_of(torch))
        .map_err(|e| format!("cannot write {}: {e}", stamp.display()))?;
    Ok(venv)
}

/// Builds the `stagetrace` Python package in debug (`maturin develop`, an
/// editable install into the venv, reusing the workspace's target folder)
/// and runs its tests: the moved server tests, the bindings, the real
/// openpi-client against the Rust and Python servers, and the wheel built
/// from the files git tracks and pip-installed into a fresh venv
/// (`tests/test_wheel.py`; `CI=true` makes its missing tools failures).
pub(crate) fn python_tests(root: &Path, ci: &Prereqs, torch: bool) -> Result<(), String> {
    let (python, path) = match python_developed(root, torch) {
        Ok(p) => p,
        Err(e) => {
            return ci.missing(
                "python",
                &format!("the Python test environment could not be set up ({e})"),
                "the Python package's tests (pytest)",
            )
        }
    };
    run(Command::new(python)
        .current_dir(root.join("crates/stagetrace-py"))
        .args(["-m", "pytest", "-q"])
        .env("STAGETRACE_TORCH", if torch { "1" } else { "0" })
        .env("PATH", &path))
}

/// The venv set up ([`python_env`]) and the package built into it
/// (`maturin develop`): the venv's python and the `PATH` to run it with.
pub(crate) fn python_developed(root: &Path, torch: bool) -> Result<(PathBuf, String), String> {
    let venv = python_env(root, torch)?;
    let path = format!(
        "{}:{}",
        venv.join("bin").display(),
        env::var("PATH").unwrap_or_default()
    );
    run(Command::new(venv.join("bin/maturin"))
        .current_dir(root.join("crates/stagetrace-py"))
        .args(["develop", "--quiet"])
        .env("VIRTUAL_ENV", &venv)
        .env("PATH", &path))?;
    Ok((venv.join("bin/python"), path))
}

/// The Python test modules that need PyTorch (`requirements-torch.txt`):
/// run only with `--torch`, named as not run otherwise (the package's
/// `tests/conftest.py` keeps the same list).
pub(crate) const TORCH_MODULES: [&str; 2] =
    ["tests/test_device_torch.py", "tests/test_lerobot_real.py"];

/// Whether a pytest id (`tests/x.py::name`) belongs to the torch suite.
pub(crate) fn in_torch_suite(test: &str) -> bool {
    TORCH_MODULES
        .iter()
        .any(|m| test.split("::").next() == Some(*m))
}
