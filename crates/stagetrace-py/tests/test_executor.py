"""The Python executor helper (``stagetrace.executor``, the
same as the Rust one), driven by the Rust
``BlockingExecutorClient`` (the ``executor_client`` example): an executor
busy with the previous action for a known time on every n-th chunk shows
exactly those calls' wait, as ``crates/stagetrace-net/tests/executor.rs``
asks of the Rust executor.

The truth is the controller's own stamps: the chunk's receive stamp
(``Ticket.received_ns``) and its start (``Ticket.started()``), one clock.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import LoopThread, cargo_artifact, report_timing

from stagetrace.executor import ExecutorServer
from stagetrace.relay import Relay

CALLS = 24
#: Every EVERY-th chunk finds the controller busy for BUSY_MS.
EVERY = 4
BUSY_MS = 25.0
US = 0.0011  # the record's µs resolution


def busy(seq: int) -> bool:
    return seq % EVERY == EVERY - 1


@pytest.fixture(scope="module")
def executor_client() -> Path:
    return cargo_artifact("-p", "examples", "--example", "executor_client", name="executor_client")


@pytest.mark.parametrize("through", ["direct", "python-relay"])
def test_rust_robot_to_the_python_executor_shows_exactly_the_busy_calls_wait(
    executor_client: Path, loop_thread: LoopThread, tmp_path: Path, through: str
) -> None:
    """Direct, and through the Python relay (a gateway in front of the
    executor): the ack is relayed like any response, the executor's map
    innermost, and the wait stays exact."""
    server = ExecutorServer("127.0.0.1", 0, {"executor": "python-arm"})
    port = loop_thread.run(server.start())
    relay = None
    if through == "python-relay":
        relay = Relay(f"ws://127.0.0.1:{port}", "127.0.0.1", 0)
        port = loop_thread.run(relay.start())
    truth: dict[int, tuple[int, int]] = {}
    traces: dict[int, str] = {}

    def controller() -> None:
        while (chunk := server.get(timeout=30)) is not None:
            seq = int(chunk.action["seq"])
            received = chunk.ticket.received_ns
            if busy(seq):
                # The previous action runs until BUSY_MS after this chunk
                # arrived (a spin: a sleep may oversleep).
                while time.perf_counter_ns() < received + int(BUSY_MS * 1e6):
                    pass
            started = chunk.ticket.started()
            truth[seq] = (received, started)
            if chunk.trace is not None:
                traces[seq] = chunk.trace.trace_id

    worker = threading.Thread(target=controller, name="controller", daemon=True)
    worker.start()
    try:
        proc = subprocess.run(
            [str(executor_client), f"ws://127.0.0.1:{port}", "--calls", str(CALLS), "--out", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=240,
        )
    finally:
        if relay is not None:
            loop_thread.run(relay.close())
        loop_thread.run(server.close())
        worker.join(10)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary == {"calls": CALLS, "started": CALLS, "dropped": 0, "failed": 0}
    records: list[dict[str, Any]] = [
        json.loads(line) for f in sorted(tmp_path.glob("records*.jsonl")) for line in f.read_text().splitlines() if line
    ]
    assert sorted(r["seq"] for r in records) == list(range(CALLS))
    waits = {r["seq"]: (r["exec_wait_ms"], (truth[r["seq"]][1] - truth[r["seq"]][0]) / 1e6) for r in records}
    report_timing("exec_wait vs the controller's (ms)", max(abs(w - t) for w, t in waits.values()), US)
    report_timing("idle exec_wait, the longest (ms)", max(w for s, (w, _) in waits.items() if not busy(s)), BUSY_MS / 2)
    print("seq  exec_wait  (truth)  exec_tx  dispatch  exec_err")
    for r in sorted(records, key=lambda r: r["seq"]):
        received, started = truth[r["seq"]]
        true_wait = (started - received) / 1e6
        print(
            f"{r['seq']:>3}  {r['exec_wait_ms']:>9.3f}  {true_wait:>7.3f}  {r['exec_tx_ms']:>7.3f}  "
            f"{r['dispatch_ms']:>8.3f}  {r['exec_err_ms']:>8.3f}"
        )
        # Exact: the executor's own wait, to the record's µs.
        assert r["exec_wait_ms"] == pytest.approx(true_wait, abs=US), r
        if busy(r["seq"]):
            assert r["exec_wait_ms"] >= BUSY_MS - 0.002, r
        else:
            assert r["exec_wait_ms"] < BUSY_MS / 2, r
        # dispatch ends at the executor's start: transfer + wait.
        assert r["dispatch_ms"] == pytest.approx(r["exec_tx_ms"] + r["exec_wait_ms"], abs=2 * US), r
        # One clock on this host: the executor's true offset, 0, inside its bound.
        assert abs(r["exec_offset_ms"]) <= r["exec_err_ms"] + US, r
        # The chunk carried the robot's trace.
        assert traces[r["seq"]] == r["trace_id"]


def test_a_dropped_chunk_is_acked_not_started_with_its_reason(loop_thread: LoopThread) -> None:
    """``Ticket.dropped``: ``started: false`` and the reason (the robot
    counts a stale drop); a ticket resolves once."""
    from websockets.sync.client import connect

    from stagetrace import server as st

    server = ExecutorServer("127.0.0.1", 0)
    port = loop_thread.run(server.start())

    def controller() -> None:
        while (chunk := server.get(timeout=30)) is not None:
            if chunk.action["seq"] == 0:
                chunk.ticket.dropped("stale")
            chunk.ticket.started()  # after a drop: nothing more is sent

    worker = threading.Thread(target=controller, daemon=True)
    worker.start()
    try:
        with connect(f"ws://127.0.0.1:{port}", compression=None) as ws:
            assert st.unpackb(ws.recv()) == {}
            acks = []
            for seq in range(2):
                ws.send(st.packb({"seq": seq}))
                acks.append(st.unpackb(ws.recv()))
    finally:
        loop_thread.run(server.close())
        worker.join(10)
    dropped, started = acks
    assert dropped["started"] is False and dropped["reason"] == "stale"
    assert "queue_ns" not in dropped["server_timing"]
    assert started["started"] is True
    t = started["server_timing"]
    assert t["queue_ns"] + t["infer_ns"] <= t["total_ns"]
