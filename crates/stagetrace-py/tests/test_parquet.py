"""Parquet records from Python: the recorder's ``parquet_dir`` writes the
same calls as its JSON lines (``stagetrace report`` gives the same report
for both), ``stagetrace.load`` reads them into a DataFrame, and DuckDB's
quantiles over the tree agree with the report's."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import duckdb
import pytest

import stagetrace
from conftest import cargo_artifact

CALLS = 240


@pytest.fixture(scope="module")
def cli() -> Path:
    return cargo_artifact("-p", "stagetrace-cli", "--bin", "stagetrace", name="stagetrace")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """One recorder, both formats: the JSON-line run directory and the Parquet tree."""
    root = tmp_path_factory.mktemp("parquet")
    lines, tree = root / "lines", root / "tree"
    rec = stagetrace.Recorder(str(lines), parquet_dir=str(tree), robot="arm-7", warmup_calls=5)
    for i in range(CALLS):
        with stagetrace.call(kind="infer", recorder=rec):
            with stagetrace.stage("capture"):
                time.sleep(0.0002)
            with stagetrace.stage("infer"):
                # Two modes, so the median and the p99 differ.
                time.sleep(0.0015 if i % 10 else 0.004)
    summary = json.loads(rec.finish())
    assert summary["sink_counters"].get("parquet.dropped", 0) == 0, summary
    return lines, tree


def report(cli: Path, path: Path) -> dict[str, Any]:
    out = subprocess.run([cli, "report", str(path), "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def without_files(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: without_files(x) for k, x in v.items() if k != "files"}
    if isinstance(v, list):
        return [without_files(x) for x in v]
    return v


def test_the_same_calls_give_the_same_report_from_both_formats(cli: Path, run: tuple[Path, Path]) -> None:
    lines, tree = run
    assert (tree / "robot=arm-7").is_dir()
    from_lines, from_parquet = report(cli, lines), report(cli, tree)
    assert from_lines["inputs"]["records"] == CALLS
    assert without_files(from_lines) == without_files(from_parquet)


def test_load_gives_one_row_per_call_with_the_schema_columns(run: tuple[Path, Path]) -> None:
    _, tree = run
    calls = stagetrace.load(tree)
    assert len(calls) == CALLS
    for column in ("seq", "ts_unix_ms", "kind", "trace_id", "capture_ms", "infer_ms", "e2e_ms", "robot", "date"):
        assert column in calls.columns, column
    assert set(calls["robot"].astype(str)) == {"arm-7"}
    assert calls["infer_ms"].between(1.0, 1000.0).all()
    assert len(stagetrace.load(tree, robot="arm-8")) == 0


def test_duckdb_quantiles_per_stage_agree_with_the_report(cli: Path, run: tuple[Path, Path]) -> None:
    _, tree = run
    stages = report(cli, tree)["groups"][0]["stages"]
    glob = str(tree / "**" / "*.parquet")
    for stage in ("capture", "infer", "e2e"):
        # report: the steady calls (no warm-up, no failure), nearest rank.
        disc_p50, disc_p99, cont_p50, n = duckdb.sql(
            f"""SELECT quantile_disc({stage}_ms, 0.5), quantile_disc({stage}_ms, 0.99),
                       quantile_cont({stage}_ms, 0.5), count(*)
                FROM read_parquet('{glob}', hive_partitioning = true)
                WHERE warmup IS NULL AND failed IS NULL AND robot = 'arm-7'"""
        ).fetchone()
        want = stages[stage]
        assert n == want["n"], (stage, n, want)
        # The report holds figures as f32 and prints them to the microsecond.
        assert disc_p50 == pytest.approx(want["p50"], abs=0.002), (stage, disc_p50, want)
        assert disc_p99 == pytest.approx(want["p99"], abs=0.002), (stage, disc_p99, want)
        assert cont_p50 == pytest.approx(want["p50"], rel=0.05), (stage, cont_p50, want)


def test_a_query_for_one_robot_and_day_reads_only_that_partition(run: tuple[Path, Path], tmp_path: Path) -> None:
    import shutil

    _, tree = run
    copy = tmp_path / "tree"
    shutil.copytree(tree, copy)
    (day,) = [d.name for d in (copy / "robot=arm-7").iterdir()]
    # Another robot's partition holds a file no engine could read: a query
    # that opened it would fail.
    other = copy / "robot=arm-8" / day
    other.mkdir(parents=True)
    (other / "part-broken.parquet").write_bytes(b"PAR1 not a parquet file")
    glob = str(copy / "**" / "*.parquet")
    (n,) = duckdb.sql(
        f"""SELECT count(*) FROM read_parquet('{glob}', hive_partitioning = true)
            WHERE robot = 'arm-7' AND date = '{day.removeprefix("date=")}'"""
    ).fetchone()
    assert n == CALLS
    with pytest.raises(duckdb.Error):
        duckdb.sql(f"SELECT count(*) FROM read_parquet('{glob}', hive_partitioning = true)").fetchone()
    assert len(stagetrace.load(copy, robot="arm-7")) == CALLS
