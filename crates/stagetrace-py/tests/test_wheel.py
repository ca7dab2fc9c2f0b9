"""The wheel builds from a clean checkout and works in a fresh venv.

Only the files git tracks are copied (what a clone has: a source file
someone forgot to add fails here, not on a user's machine), the wheel is
built there with maturin, installed with pip into a new venv (its
dependencies come from the package registry), and a call with stages is
recorded from outside the source tree. The build reuses the workspace's
target folder (``CARGO_TARGET_DIR``) and copies keep their modification
times, so a warm run recompiles nothing that did not change.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

# Runs in the fresh venv, from a folder outside the checkout.
SCRIPT = """
import json, sys
import stagetrace as st
out = sys.argv[1]
st.init(out, stages={"post": "dispatch"})
with st.call(kind="wheel", seq=41):
    with st.stage("capture"):
        pass
    with st.stage("post"):
        pass
summary = st.finish()
print(json.dumps({"file": st.__file__, "native": st._native.__file__, "calls": summary["calls"] + summary["warmup_calls"]}))
"""


def _missing(why: str) -> None:
    """A missing tool fails under CI and skips, loudly, elsewhere
    (docs/architecture.md §8)."""
    if os.environ.get("CI", "").strip() in ("true", "1"):
        pytest.fail(why)
    pytest.skip(why)


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, **kw)  # type: ignore[call-overload]
    if r.returncode != 0:
        pytest.fail(f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}")
    return r


def _tracked_copy(dest: Path) -> int:
    """Copy the files git tracks (working-tree contents) to ``dest``."""
    files = _run(["git", "ls-files", "-z", "--cached"], cwd=ROOT).stdout.split("\0")
    n = 0
    for name in filter(None, files):
        src = ROOT / name
        if not src.is_file():  # deleted in the working tree, or a submodule
            continue
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / name)
        n += 1
    return n


def test_the_wheel_builds_from_a_clean_checkout_and_records_in_a_fresh_venv(tmp_path: Path) -> None:
    for tool in ("git", "maturin"):
        if shutil.which(tool) is None:
            _missing(f"the wheel test NOT RUN: {tool} is not on PATH (cargo xtask test installs maturin)")
    if os.environ.get("CARGO") is None and shutil.which("cargo") is None:
        _missing("the wheel test NOT RUN: cargo is not on PATH; install a Rust toolchain (https://rustup.rs)")
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    # A fixed place under the target folder: the same paths every run, so
    # cargo's fingerprints of the copied crates stay valid between runs.
    checkout = target / "wheel-check" / "checkout"
    shutil.rmtree(checkout, ignore_errors=True)
    checkout.mkdir(parents=True)
    assert _tracked_copy(checkout) > 0
    assert not (checkout / "target").exists()

    dist = tmp_path / "dist"
    env = dict(os.environ, CARGO_TARGET_DIR=str(target))
    env.pop("VIRTUAL_ENV", None)  # maturin build must not look at the test venv
    _run(
        [
            "maturin",
            "build",
            "--locked",
            "--quiet",
            "-m",
            str(checkout / "crates/stagetrace-py/Cargo.toml"),
            "--interpreter",
            sys.executable,
            "--out",
            str(dist),
        ],
        cwd=checkout,
        env=env,
    )
    (wheel,) = dist.glob("stagetrace-*.whl")
    assert "-cp310-abi3-" in wheel.name  # one wheel for CPython 3.10+

    fresh = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(fresh)
    py = fresh / "bin" / "python"
    _run([str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel)])

    out = tmp_path / "out"
    work = tmp_path / "elsewhere"
    work.mkdir()
    clean_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    r = _run([str(py), "-c", SCRIPT, str(out)], cwd=work, env=clean_env)
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    # The package imported is the installed wheel's, not the source tree's.
    assert Path(seen["file"]).resolve().is_relative_to(fresh.resolve()), seen
    assert Path(seen["native"]).resolve().is_relative_to(fresh.resolve()), seen
    assert seen["calls"] == 1

    (records,) = out.glob("records*.jsonl")
    (rec,) = [json.loads(line) for line in records.read_text().splitlines()]
    assert (rec["kind"], rec["seq"]) == ("wheel", 41)
    assert "capture_ms" in rec and "dispatch_ms" in rec and "e2e_ms" in rec
    assert len(rec["trace_id"]) == 32
