"""Shared by tests/test_rerun.py and tests/test_mcap.py: the demo run they
export, the prerequisite check, and a records file with every kind of bad
line the exporters must skip and name."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import records_in, stagetrace_cli


def need(module: str, pip: str) -> Any:
    """Import ``module``; missing, it fails under CI (requirements-test.txt
    pins it, so CI must have it) and skips, saying so, elsewhere."""
    try:
        return importlib.import_module(module)
    except ImportError:
        why = f"tests needing {module} NOT RUN: pip install {pip} (pinned in requirements-test.txt)"
        if os.environ.get("CI", "").strip() in ("true", "1"):
            pytest.fail(why)
        pytest.skip(why)


def make_demo(out: Path) -> list[dict[str, Any]]:
    """``stagetrace demo`` with a remote executor busy every 10th chunk:
    periodic dispatch spikes, so the report has outlier rounds and verdicts
    that name calls. Returns its records."""
    cli = stagetrace_cli()
    run = subprocess.run(
        [str(cli), "demo", "--out", str(out), "--calls", "150", "--executor", "--executor-busy-every", "10",
         "--executor-busy-ms", "15"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "NO_COLOR": "1"},
    )
    assert run.returncode == 0, run.stderr[-4000:]
    records = records_in(out)
    assert len(records) == 150
    return records


def write_bad_run(good: list[dict[str, Any]], out: Path) -> dict[str, Any]:
    """A records file built from ``good`` records with: an unknown kind (a
    number), a record without ``kind``, one without ``e2e_ms``, a line that
    is not JSON, a field the record table does not know, a call missing a
    stage the others carry, and a torn last line. Returns what the
    exporters must make of it."""
    out.mkdir(parents=True, exist_ok=True)
    recs = [dict(r) for r in good[:40]]
    lines = [json.dumps(r) for r in recs]
    recs[7] = {k: v for k, v in recs[7].items() if k != "infer_ms"}  # a missing stage
    lines[7] = json.dumps(recs[7])
    recs[8] = {**recs[8], "future_ms": 1.5}  # a field from a newer stagetrace
    lines[8] = json.dumps(recs[8])
    bad_kind = {**good[40], "kind": 5}
    no_kind = {k: v for k, v in good[41].items() if k != "kind"}
    no_e2e = {k: v for k, v in good[42].items() if k != "e2e_ms"}
    lines[10:10] = [json.dumps(bad_kind), json.dumps(no_kind), "{not json", json.dumps(no_e2e)]
    torn = json.dumps(good[43])[:57]
    f = out / "records-bad.jsonl"
    f.write_text("\n".join(lines) + "\n" + torn)
    return {
        "file": f,
        "records": recs,
        "skips": [
            f"records-bad.jsonl line 11: unknown kind 5",
            "records-bad.jsonl line 12: no kind",
            "records-bad.jsonl line 13: not JSON",
            "records-bad.jsonl line 14: no e2e_ms",
            f"records-bad.jsonl line {len(lines) + 1}: a torn last line",
            "'future_ms'",
            f"have no infer_ms (seq {recs[7]['seq']})",
        ],
    }
