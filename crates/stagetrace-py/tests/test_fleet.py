"""A fleet's month on Dask: ``python -m stagetrace.fleet`` over a Hive tree
of 4 robots × 3 days on a two-worker ``LocalCluster`` gives the report
``stagetrace summarize --json`` prints for the same tree (exactly), and its
p50 / p90 / p99 are within the sketch's stated precision (2^-10) of numpy's
exact order statistics of the same calls."""

from __future__ import annotations

import json
import os
import pickle
import random
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

import stagetrace
from conftest import stagetrace_cli

try:
    import dask.distributed  # noqa: F401
except ImportError:  # pragma: no cover - a missing prerequisite
    why = "dask[distributed] is not installed (crates/stagetrace-py/requirements-test.txt): test_fleet NOT RUN"
    if os.environ.get("CI", "").strip() in ("true", "1"):
        pytest.fail(why, pytrace=False)
    pytest.skip(why, allow_module_level=True)

ROBOTS, DAYS, CALLS = 4, 3, 1500
DAY0_MS = 1_764_720_000_000  # 2025-12-03T00:00:00Z
STAGES = ("capture", "infer", "e2e")


def records(robot: int) -> List[Dict[str, Any]]:
    """One robot's 3 days: infer log-normal with a median per robot and day
    (robot 2 slow on day 1), a Pareto tail on 2 % of the calls; warm-up
    calls first, a failure every 97th call, a deadline on every 5th."""
    rng = random.Random(robot)
    out = []
    for day in range(DAYS):
        median = 8.0 + 2.0 * robot + (15.0 if (robot, day) == (2, 1) else 0.0)
        for i in range(CALLS):
            infer = median * rng.lognormvariate(0.0, 0.35)
            if rng.random() < 0.02:
                infer += 5.0 * rng.paretovariate(1.5)
            capture = rng.uniform(0.4, 1.6)
            e2e = infer + capture + 0.3
            r: Dict[str, Any] = {
                "seq": day * CALLS + i,
                "ts_unix_ms": DAY0_MS + day * 86_400_000 + 3_600_000 + i * 40,
                "kind": "infer",
                "capture_ms": round(capture, 3),
                "infer_ms": round(infer, 3),
                "e2e_ms": round(e2e, 3),
            }
            if day == 0 and i < 4:
                r["warmup"] = True
            elif i % 97 == 11:
                r["failed"] = True
                r["error"] = "timeout" if i % 2 else "connection reset"
            if i % 5 == 0:
                r["late_ms"] = 0.0
                r["deadline_miss"] = e2e > 40.0
            out.append(r)
    return out


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    root = tmp_path_factory.mktemp("fleet")
    tree = root / "tree"
    cli = stagetrace_cli()
    calls: List[Dict[str, Any]] = []
    for robot in range(ROBOTS):
        recs = records(robot)
        calls.extend(recs)
        src = root / f"records-arm{robot}.jsonl"
        src.write_text("".join(json.dumps(r) + "\n" for r in recs))
        conv = subprocess.run(
            [cli, "convert", str(src), "--to", str(tree), "--robot", f"arm-{robot}"],
            capture_output=True, text=True, timeout=120,
        )
        assert conv.returncode == 0, conv.stderr
    # A file damaged on disk: skipped whole and named, by the CLI and by
    # the cluster alike.
    broken = tree / "robot=arm-2" / "date=2025-12-04" / "part-broken.parquet"
    broken.write_bytes(b"PAR1 not a parquet file")
    return {"tree": tree, "cli": cli, "calls": calls, "broken": broken}


def test_the_tree_is_4_robots_by_3_days(fleet: Dict[str, Any]) -> None:
    from stagetrace.fleet import partition_files

    files = partition_files(fleet["tree"])
    parts = {(Path(f).parent.parent.name, Path(f).parent.name) for f in files}
    assert len(parts) == ROBOTS * DAYS, parts


def test_dask_on_two_workers_gives_the_report_of_the_cli(fleet: Dict[str, Any]) -> None:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    dask_run = subprocess.run(
        [sys.executable, "-m", "stagetrace.fleet", str(fleet["tree"]), "--workers", "2"],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert dask_run.returncode == 0, dask_run.stderr[-4000:]
    merged = json.loads(dask_run.stdout)
    cli_run = subprocess.run(
        [fleet["cli"], "summarize", str(fleet["tree"]), "--json"], capture_output=True, text=True, timeout=120
    )
    assert cli_run.returncode == 0, cli_run.stderr
    assert merged == json.loads(cli_run.stdout)
    assert "part-broken.parquet" in cli_run.stderr
    (skipped,) = merged["damaged_files"]
    assert skipped["file"] == str(fleet["broken"])
    assert "not a readable Parquet footer" in skipped["reason"]
    # Every partition was analysed for its verdicts, on the workers as by
    # the CLI: the same verdicts, sentences and numbers.
    (group,) = merged["groups"]
    assert group["verdict_calls"] == group["steady"]
    assert merged["verdicts"] and merged["verdicts"] == group["verdicts"]
    assert merged["quantiles"] == "hdr-3-sigfig"
    assert merged["calls"] == ROBOTS * DAYS * CALLS
    assert merged["robots"] == {f"arm-{r}": DAYS * CALLS for r in range(ROBOTS)}
    check_against_numpy(merged, fleet["calls"])


def check_against_numpy(report: Dict[str, Any], calls: List[Dict[str, Any]]) -> None:
    steady = [c for c in calls if not c.get("warmup") and not c.get("failed")]
    assert report["warmup"] == sum(1 for c in calls if c.get("warmup"))
    assert report["failed"] == sum(1 for c in calls if c.get("failed"))
    (group,) = report["groups"]
    assert group["steady"] == len(steady)
    with_deadline = [c for c in steady if "deadline_miss" in c]
    assert group["deadline_calls"] == len(with_deadline)
    assert group["deadline_misses"] == sum(1 for c in with_deadline if c["deadline_miss"])
    rel = report["relative_error"]
    assert rel == 2.0**-10
    by_name = {s["stage"]: s for s in group["stages"]}
    for stage in STAGES:
        values = np.array([c[f"{stage}_ms"] for c in steady], dtype=np.float64)
        got = by_name[stage]
        assert got["n"] == len(values)
        assert got["max"] == pytest.approx(values.max(), rel=1e-6)
        for q, key in ((0.5, "p50"), (0.9, "p90"), (0.99, "p99")):
            # Nearest rank, as the report's rule: the smallest value with
            # at least q·n values at or below it.
            exact = float(np.quantile(values, q, method="inverted_cdf"))
            # The sketch's bucket top is at or above the value, by at most
            # 2^-10 of it; 1e-6 more for the loader's f32 and the ns rounding.
            assert exact * (1 - 1e-6) <= got[key] <= exact * (1 + rel + 1e-6), (stage, key, got[key], exact)
        for t, above in zip(report["thresholds_ms"], got["above"]):
            assert above == int((values > t).sum()), (stage, t)
    e2e = sorted((c["e2e_ms"] for c in steady), reverse=True)
    assert [c["e2e_ms"] for c in report["slowest"]] == e2e[:20]


def test_summaries_pickle_merge_in_any_order_and_refuse_a_bad_blob(fleet: Dict[str, Any]) -> None:
    from stagetrace.fleet import partition_files

    parts = [stagetrace.summarize(f) for f in partition_files(fleet["tree"])]
    shipped = [pickle.loads(pickle.dumps(s)) for s in parts]
    forward = stagetrace.merge(shipped)
    backward = stagetrace.merge(reversed(parts))
    assert forward.to_bytes() == backward.to_bytes()
    assert stagetrace.PartitionSummary.from_bytes(forward.to_bytes()).report() == forward.report()
    # A robot's directory partition is one summary of its files.
    one = stagetrace.summarize(fleet["tree"] / "robot=arm-1")
    assert one.calls == DAYS * CALLS
    with pytest.raises(ValueError, match="not a stagetrace summary"):
        stagetrace.PartitionSummary.from_bytes(b"\x00\x01 not json")
    with pytest.raises(ValueError, match="takes PartitionSummary"):
        stagetrace.merge([forward, "x"])
