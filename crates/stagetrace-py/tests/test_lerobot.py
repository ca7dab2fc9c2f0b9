"""LeRobot's async inference, traced: a robot streaming observations and
polling chunks over real gRPC (``grpcio``, LeRobot's own ``services_pb2``)
through ``stagetrace.lerobot`` against a policy server that replaces and
skips observations as LeRobot's does (``lerobot_peers.py``), behind a proxy
that delays each direction by a known time, the server's clock skewed by a
known offset.

Truths, from each side's own stamps where it did the thing (never from the
records):

- every observation the server took ends as exactly one record with its
  timestep as ``seq``: a chunk's record with the split, or a failed record
  whose ``error`` says why it never became one (``replaced``, ``skipped``),
  as many of each as the server did;
- a chunk's ``queue_ms`` is the server's arrival → the policy's take of the
  observation, ``infer_ms`` the model's run, ``poll_wait_ms`` the chunk ready
  → the reply returned: each within the µs that separate the tracer's stamp
  from the server's own on the same thread;
- the server clock's offset (``SKEW_MS``) lies within each chunk's stated
  ``split_err_ms`` of the record's ``offset_ms``, and each direction carries
  at least its injected delay;
- ``margin_ms`` / ``dry_ticks`` are the robot's action queue when the chunk
  came, as the robot's own loop counted it (for chunks no control tick
  raced).
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import LoopThread, report_timing
from delay_proxy import DelayProxy
from lerobot.transport import services_pb2_grpc
from lerobot_peers import PolicyServer, RobotClient

import stagetrace
from stagetrace import timer as st_timer
from stagetrace.lerobot import trace_policy_server, trace_robot_client

SKEW_MS = 250.0
UP_S, DOWN_S = 0.004, 0.009
MODEL_S = 0.015
DT_S = 0.02
CHUNK = 10
TICKS = 200
#: Between the tracer's stamp and the server's own, on one thread: a dict
#: look-up, a lock, a ``perf_counter_ns`` call.
STAMP_US = 200


def _records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for f in sorted(out.glob("records*.jsonl")) for line in f.read_text().splitlines()]


@pytest.fixture
def skewed_server_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Python server's wall stamps read ``SKEW_MS`` ahead (the robot's
    clock, the Rust core's, is untouched)."""
    wall_ns = st_timer._ANCHOR.wall_ns
    monkeypatch.setattr(st_timer._ANCHOR, "wall_ns", lambda mono: wall_ns(mono) + int(SKEW_MS * 1e6))


def test_every_chunk_is_one_record_and_every_lost_observation_is_counted(
    tmp_path: Path, loop_thread: LoopThread, skewed_server_clock: None
) -> None:
    server = trace_policy_server(
        PolicyServer(model_s=MODEL_S, chunk_size=CHUNK, dt_s=DT_S, inference_latency_s=0.03, atol=0.05)
    )
    grpc_server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    services_pb2_grpc.add_AsyncInferenceServicer_to_server(server, grpc_server)
    port = grpc_server.add_insecure_port("127.0.0.1:0")
    grpc_server.start()
    proxy = loop_thread.run(DelayProxy.start(port, UP_S, DOWN_S))
    rec = stagetrace.Recorder(str(tmp_path), clock="estimate")
    address = f"127.0.0.1:{proxy.port}"
    client = RobotClient(
        grpc.insecure_channel(address), address, dt_s=DT_S, chunk_size=CHUNK, threshold=0.5, step=0.1
    )
    trace_robot_client(client, recorder=rec)
    try:
        client.start()
        receiver = threading.Thread(target=client.receive_actions, daemon=True)
        receiver.start()
        client.control_loop(TICKS)
        client.stop()
        receiver.join(timeout=5)
    finally:
        grpc_server.stop(grace=None)
        loop_thread.run(proxy.close())
    rec.finish()
    records = _records(tmp_path)

    # Every observation the server saw is one record, as the server said.
    t = server.truth
    truth = Counter(
        (t.timestep[serial], "chunk" if serial in t.replied else outcome.split("_")[0])
        for serial, outcome in t.outcome.items()
    )
    seen = Counter((r["seq"], "chunk" if not r.get("failed") else r["error"]) for r in records)
    assert seen == truth, f"records {seen - truth} beyond the truth, {truth - seen} missing"
    chunks = [r for r in records if not r.get("failed")]
    assert len(chunks) >= TICKS * DT_S / (MODEL_S + 0.03) / 2, len(chunks)
    assert any(r.get("error") in ("replaced", "skipped") for r in records), "no observation was lost: a weak run"

    # A chunk's serial: the one observation of its timestep that was run
    # (a timestep run twice, by a must-go observation, is left out).
    ran: dict[int, list[int]] = {}
    for serial in t.replied:
        ran.setdefault(t.timestep[serial], []).append(serial)
    worst_split = 0.0
    for r in chunks:
        serials = ran[r["seq"]]
        if len(serials) != 1:
            continue
        s = serials[0]
        queue_ms = (t.dequeued[s] - t.arrived[s]) / 1e6
        model_ms = (t.model[s][1] - t.model[s][0]) / 1e6
        poll_ms = (t.replied[s] - t.ready[s]) / 1e6
        assert abs(r["queue_ms"] - queue_ms) <= STAMP_US / 1e3, (r, queue_ms)
        assert 0 <= r["infer_ms"] - model_ms <= STAMP_US / 1e3, (r, model_ms)
        assert abs(r["poll_wait_ms"] - poll_ms) <= STAMP_US / 1e3, (r, poll_ms)
        # The server's clock, recovered within the record's own bound.
        miss = abs(r["offset_ms"] - SKEW_MS) / r["split_err_ms"]
        worst_split = max(worst_split, miss)
        assert miss <= 1.0, r
        assert r["uplink_ms"] >= UP_S * 1e3 and r["downlink_ms"] >= DOWN_S * 1e3, r
    report_timing("skew inside split_err (ratio)", worst_split, 1.0)

    # The action queue when each chunk came, where no control tick raced
    # the two readings (the tracer's, then the robot's own a few µs later).
    checked = 0
    for r in chunks:
        ts = r["seq"]
        came = client.truth.chunk_in[ts]
        if any(0 <= came - at <= 2_000_000 for at in client.truth.executed.values()):
            continue
        left, idle = client.truth.queue_at_arrival[ts]
        if left > 0:
            assert r["margin_ms"] == pytest.approx(left * DT_S * 1e3, abs=1e-3), r
            assert r.get("dry_ticks", 0) == 0, r
        else:
            assert r["margin_ms"] <= 0 and r["dry_ticks"] == idle, (r, idle)
        checked += 1
    assert checked >= len(chunks) // 2, (checked, len(chunks))
