"""What the host did to each request, in the Python server's timing: the
garbage collector's pauses (and how many collections ran) on exactly the
calls that collected, and the thread's run-queue wait and faults where the
kernel offers them."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from websockets.sync.client import connect

from conftest import cargo_artifact

from stagetrace import server as st
from stagetrace.timer import RequestTimer

CALLS = 20
EVERY = 5


class GarbagePolicy:
    """Makes cyclic garbage on every call and collects it on every
    ``EVERY``-th: which calls collected, and how long each collection took
    (its own clock around ``gc.collect()``), is known."""

    def __init__(self, cycles: int = 100_000, every: int = EVERY) -> None:
        self.cycles = cycles
        self.every = every
        #: Per call: (collections, ns spent in gc.collect()).
        self.collected: list[tuple[int, int]] = []

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        junk = []
        for _ in range(self.cycles):
            a: list[Any] = []
            a.append(a)  # a cycle: only the collector frees it
            junk.append(a)
        del junk
        if len(self.collected) % self.every == self.every - 1:
            t0 = time.perf_counter_ns()
            gc.collect()
            self.collected.append((1, time.perf_counter_ns() - t0))
        else:
            self.collected.append((0, 0))
        return {"actions": np.zeros((10, 7), np.float32)}


@pytest.fixture
def explicit_gc() -> Iterator[None]:
    """Automatic collections off: only the policy's own run."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_gc_pauses_are_sent_on_exactly_the_calls_that_collected(start_server, explicit_gc) -> None:
    policy = GarbagePolicy()
    _, port = start_server(policy)
    timings = []
    with connect(f"ws://127.0.0.1:{port}", compression=None, open_timeout=10) as ws:
        ws.recv(timeout=10)
        for i in range(CALLS):
            ws.send(st.packb({"i": i}))
            timings.append(st.unpackb(ws.recv(timeout=30))["server_timing"])
    assert len(policy.collected) == CALLS
    for i, (timing, (n, collect_ns)) in enumerate(zip(timings, policy.collected)):
        assert timing["gc_collections"] == n, (i, timing)
        if n == 0:
            assert timing["gc_ns"] == 0, (i, timing)
            continue
        # The callbacks' start -> stop lies inside gc.collect(): the rest of
        # that call (entering it, other callbacks) is all that is left out.
        gc_ns = timing["gc_ns"]
        assert collect_ns > 1_000_000, f"a collection of {policy.cycles} cycles took {collect_ns} ns"
        assert 0 <= collect_ns - gc_ns <= 0.05 * collect_ns + 500_000, (i, gc_ns, collect_ns)
        assert gc_ns <= timing["infer_ns"], (i, timing)


def test_run_queue_wait_and_faults_are_sent_where_the_kernel_has_them(start_server) -> None:
    on_linux = sys.platform.startswith("linux") and os.path.exists("/proc/thread-self/schedstat")
    if not on_linux:
        assert os.environ.get("CI", "").strip() not in ("true", "1"), "no schedstat under CI"
        pytest.skip("not Linux: no per-thread run-queue wait")
    _, port = start_server(GarbagePolicy(cycles=10))
    with connect(f"ws://127.0.0.1:{port}", compression=None, open_timeout=10) as ws:
        ws.recv(timeout=10)
        ws.send(st.packb({"i": 0}))
        timing = st.unpackb(ws.recv(timeout=30))["server_timing"]
    for key in ("run_wait_ns", "involuntary_switches", "minor_faults", "major_faults"):
        assert isinstance(timing[key], int) and 0 <= timing[key], (key, timing)
    assert timing["run_wait_ns"] <= timing["total_ns"]
    if os.path.exists("/proc/pressure/cpu"):
        assert 0 <= timing["cpu_stall_ns"]


def test_a_timer_without_host_figures_sends_none() -> None:
    timer = RequestTimer(host_figures=False)
    keys = set(timer.server_timing())
    assert not keys & {"run_wait_ns", "cpu_stall_ns", "gc_ns", "gc_collections", "minor_faults"}
    assert {"run_wait_ns", "gc_ns", "gc_collections"} <= set(RequestTimer().server_timing())


@pytest.fixture(scope="module")
def policy_client() -> Path:
    return cargo_artifact("-p", "examples", "--example", "policy_client", name="policy_client")


@pytest.fixture(scope="module")
def stagetrace_cli() -> Path:
    return cargo_artifact("-p", "stagetrace-cli", "--bin", "stagetrace", name="stagetrace")


def test_a_rust_robot_names_the_servers_gc_as_the_cause_of_its_infer_spikes(
    policy_client: Path, stagetrace_cli: Path, start_server, explicit_gc, tmp_path: Path
) -> None:
    calls = 200
    policy = GarbagePolicy(cycles=50_000, every=25)  # 8 collections: 4 % of the calls
    _, port = start_server(policy)
    run = subprocess.run(
        [str(policy_client), f"ws://127.0.0.1:{port}", "--calls", str(calls), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    files = sorted(tmp_path.glob("records*.jsonl"))
    records = [json.loads(line) for f in files for line in f.read_text().splitlines() if line.strip()]
    assert len(records) == calls == len(policy.collected)
    # Each record counts the collections its call's request saw, and their time.
    for r, (n, collect_ns) in zip(records, policy.collected):
        assert r["server_gc_collections"] == n, r
        if n:
            assert 0 <= collect_ns / 1e6 - r["server_gc_ms"] <= 0.05 * collect_ns / 1e6 + 0.5, (r, collect_ns)
        else:
            assert r["server_gc_ms"] == 0, r
    # The report names the server's GC as the cause of infer's spikes, not the model.
    report = subprocess.run(
        [str(stagetrace_cli), "report", str(tmp_path), "--json"], capture_output=True, text=True, timeout=120
    )
    assert report.returncode == 0, report.stderr[-4000:]
    verdicts = json.loads(report.stdout)["verdicts"]
    assert any(v["code"] == "host_gc" and v["stage"] == "infer" and v["group"] == "server" for v in verdicts), verdicts
    assert not any(v["code"] == "spikes" and v["stage"] == "infer" for v in verdicts), verdicts
