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
  observation (past its wait for a worker, ``accept_wait_ms``), ``infer_ms`` the model's run, ``poll_wait_ms`` the chunk ready
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

import itertools
import json
import statistics
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import msgpack
import pytest
from conftest import LoopThread, cargo_artifact, records_in, report_timing, robot_running, server_process
from delay_proxy import DelayProxy
from lerobot_peers import PolicyServer, RobotClient, TimedAction, TimedObservation

import stagetrace
from stagetrace import timer as st_timer
from stagetrace.lerobot import trace_policy_server, trace_robot_client

SKEW_MS = 250.0
UP_S, DOWN_S = 0.004, 0.009
MODEL_S = 0.015
DT_S = 0.02
CHUNK = 10
TICKS = 200
DRAIN_TICKS = 100
#: Between the tracer's stamp and the server's own, on one thread: a dict
#: look-up, a lock, a ``perf_counter_ns`` call.
STAMP_US = 200
#: A handler thread's wake-up once grpcio has handed its request over (µs,
#: typical on a 2-core VM: 0.15–0.2 ms): the servicer's truth stamp comes
#: after it, the queue's start before it.
WAKE_US = 300
#: Records carry ms with 3 decimals.
ROUNDING_MS = 0.0005


@pytest.fixture
def skewed_server_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Python server's wall stamps read ``SKEW_MS`` ahead (the robot's
    clock, the Rust core's, is untouched)."""
    wall_ns = st_timer._ANCHOR.wall_ns
    monkeypatch.setattr(st_timer._ANCHOR, "wall_ns", lambda mono: wall_ns(mono) + int(SKEW_MS * 1e6))


def test_every_chunk_is_one_record_and_every_lost_observation_is_counted(
    tmp_path: Path, loop_thread: LoopThread, skewed_server_clock: None, serve_lerobot: Callable[..., int]
) -> None:
    server = trace_policy_server(
        PolicyServer(model_s=MODEL_S, chunk_size=CHUNK, dt_s=DT_S, inference_latency_s=0.03, atol=0.05)
    )
    proxy = loop_thread.run(DelayProxy.start(serve_lerobot(server), UP_S, DOWN_S))
    rec = stagetrace.Recorder(str(tmp_path), clock="estimate")
    address = f"127.0.0.1:{proxy.port}"
    client = RobotClient(
        grpc.insecure_channel(address), address, dt_s=DT_S, chunk_size=CHUNK, threshold=0.5, step=0.1
    )
    trace_robot_client(client, recorder=rec)
    try:
        with robot_running(client):
            client.control_loop(TICKS)

            # Then no new observation until every one in flight became a
            # chunk the robot executed: the truth below has no observation
            # cut short by the stop (that case has its own test).
            def settled() -> bool:
                t = server.truth
                waiting = any(o == "queued" and s not in t.replied for s, o in list(t.outcome.items()))
                return not waiting and client.truth.chunks_received == len(t.replied) and not client.actions_available()

            client.control_loop(DRAIN_TICKS, observe=False, until=settled)
            assert settled(), "the robot did not drain in time"
    finally:
        loop_thread.run(proxy.close())
    rec.finish()
    records = records_in(tmp_path)

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
    errors: dict[str, list[float]] = {"queue": [], "infer": [], "poll_wait": []}
    for r in chunks:
        serials = ran[r["seq"]]
        if len(serials) != 1:
            continue
        s = serials[0]
        # The queue from the whole observation in; its wait for a worker
        # (accept_wait, before the handler read it) is on top (test_accept_wait.py).
        errors["queue"].append(r["queue_ms"] - r["accept_wait_ms"] - (t.dequeued[s] - t.arrived[s]) / 1e6)
        errors["infer"].append(r["infer_ms"] - (t.model[s][1] - t.model[s][0]) / 1e6)
        errors["poll_wait"].append(r["poll_wait_ms"] - (t.replied[s] - t.ready[s]) / 1e6)
        # The server's clock, recovered within the record's own bound.
        miss = abs(r["offset_ms"] - SKEW_MS) / r["split_err_ms"]
        worst_split = max(worst_split, miss)
        assert miss <= 1.0, r
        # Each direction, placed with the true offset, carries at least the
        # delay the proxy held it (the estimate moves time between the two
        # by its own error, which the line above bounds).
        error_ms = r["offset_ms"] - SKEW_MS
        assert r["uplink_ms"] + error_ms >= UP_S * 1e3 - ROUNDING_MS, r
        assert r["downlink_ms"] - error_ms >= DOWN_S * 1e3 - ROUNDING_MS, r
    # The tracer's queue and infer bracket the server's own (its stamps
    # are taken just outside the server's: a queue cut at the wrong end,
    # or an infer without the model, falls short), off by the tracer's own
    # bookkeeping, a few tens of µs, on the typical call (one preempted
    # thread may add its time slice to one call).
    for name in ("queue", "infer"):
        assert min(errors[name]) >= -ROUNDING_MS, (name, sorted(errors[name])[:5])
    for name, errs in errors.items():
        typical = statistics.median(abs(e) for e in errs)
        # The queue starts where grpcio's serving thread handed the
        # observation's last chunk over; the servicer's own stamp is taken
        # after its thread woke up to read it (the server's time, in queue).
        bound_ms = (STAMP_US + (WAKE_US if name == "queue" else 0)) / 1e3
        report_timing(f"{name} vs the server's own (median, ms)", typical, bound_ms)
        assert typical <= bound_ms, (name, sorted(errs))
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


def test_observations_in_flight_when_the_robot_stops_are_counted_as_cancelled(
    tmp_path: Path, serve_lerobot: Callable[..., int]
) -> None:
    """The robot stops with an observation queued on the server: it never
    becomes an executed chunk, and its record says so (``cancelled``), as
    does every chunk that came in after the last control tick."""
    server = trace_policy_server(
        # A model slower than a control tick: the tick after a send finds
        # the observation still unanswered.
        PolicyServer(model_s=2.5 * DT_S, chunk_size=CHUNK, dt_s=DT_S, inference_latency_s=0.03, atol=0.05)
    )
    rec = stagetrace.Recorder(str(tmp_path))
    address = f"127.0.0.1:{serve_lerobot(server)}"
    client = RobotClient(
        grpc.insecure_channel(address), address, dt_s=DT_S, chunk_size=CHUNK, threshold=0.5, step=0.1
    )
    trace_robot_client(client, recorder=rec)

    def waiting() -> list[int]:
        t = server.truth
        return [s for s, o in list(t.outcome.items()) if o == "queued" and s not in t.replied]

    with robot_running(client):
        client.control_loop(TICKS // 4)
        # Then on until the server holds an observation it has not answered.
        client.control_loop(DRAIN_TICKS, until=lambda: bool(waiting()))
        assert waiting(), "no observation was left in flight: the case is not exercised"
    rec.finish()
    records = records_in(tmp_path)

    t = server.truth
    # One record per observation the server saw, and no other.
    assert Counter(r["seq"] for r in records) == Counter(t.timestep[s] for s in t.outcome)
    by_reason = Counter(r.get("error", "chunk") for r in records)
    lost = Counter(o.split("_")[0] for o in t.outcome.values() if o != "queued")
    assert {k: by_reason[k] for k in ("replaced", "skipped")} == {k: lost[k] for k in ("replaced", "skipped")}
    # What the server queued became an executed chunk or was cancelled.
    queued = sum(1 for o in t.outcome.values() if o == "queued")
    assert by_reason["chunk"] + by_reason["cancelled"] == queued, by_reason
    assert by_reason["cancelled"] >= 1, by_reason
    assert set(by_reason) <= {"chunk", "cancelled", "replaced", "skipped"}, by_reason


class MsgpackPolicyServer(PolicyServer):
    """The same LeRobot-style server, reading the Rust robot's observations
    (stagetrace-grpc's msgpack: the Rust side does not pickle) and answering
    chunks the Rust robot reads; every observation gets the next serial."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._serials = itertools.count()

    def _loads(self, data: bytes) -> TimedObservation:
        m = msgpack.unpackb(data)
        state = {"state": [float(m["value"]), 0.0], "serial": next(self._serials)}
        return TimedObservation(m["timestamp_ns"] / 1e9, int(m["timestep"]), state, bool(m["must_go"]))

    def _dumps(self, chunk: list[TimedAction]) -> bytes:
        return msgpack.packb({"timestep": chunk[0].get_timestep(), "actions": [a.get_action()[0] for a in chunk]})


def test_a_rust_robot_is_traced_through_a_python_server(
    tmp_path: Path, skewed_server_clock: None, serve_lerobot: Callable[..., int]
) -> None:
    """Across languages on the same wire: the Rust robot
    (``stagetrace-grpc``, the ``lerobot_robot`` example) against a Python
    server traced with ``stagetrace.lerobot``. The robot's records are the
    Python server's account, observation for observation, the split comes
    from the Python trailers, and the Python server's skewed clock is
    recovered within each record's bound."""
    exe = cargo_artifact("-p", "examples", "--example", "lerobot_robot", name="lerobot_robot")
    server = trace_policy_server(
        MsgpackPolicyServer(model_s=MODEL_S, chunk_size=CHUNK, dt_s=DT_S, inference_latency_s=0.03, atol=0.5)
    )
    run = subprocess.run(
        [str(exe), "--server", f"127.0.0.1:{serve_lerobot(server)}", "--out", str(tmp_path), "--ticks", "150",
         "--fps", str(round(1 / DT_S)), "--chunk-size", str(CHUNK), "--threshold", "0.5"],
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stderr
    robot = json.loads(run.stdout.strip().splitlines()[-1])
    records = records_in(tmp_path)
    t = server.truth
    truth = Counter(
        (t.timestep[serial], "chunk" if serial in t.replied else outcome.split("_")[0])
        for serial, outcome in t.outcome.items()
    )
    seen = Counter((r["seq"], "chunk" if not r.get("failed") else r["error"]) for r in records)
    assert seen == truth, f"records {seen - truth} beyond the truth, {truth - seen} missing; robot {robot}"
    chunks = [r for r in records if not r.get("failed")]
    assert len(chunks) == robot["completed"] >= 10, robot
    for r in chunks:
        for f in ("capture_ms", "uplink_ms", "queue_ms", "infer_ms", "poll_wait_ms", "downlink_ms", "dispatch_ms", "margin_ms"):
            assert f in r, (f, r)
        assert abs(r["offset_ms"] - SKEW_MS) <= r["split_err_ms"], r


class MsgpackRobotClient(RobotClient):
    """The same LeRobot-style robot, speaking the Rust server's msgpack."""

    def _dumps_obs(self, obs: TimedObservation) -> bytes:
        return msgpack.packb(
            {
                "timestep": obs.get_timestep(),
                "value": float(obs.get_observation()["state"][0]),
                "timestamp_ns": int(obs.get_timestamp() * 1e9),
                "must_go": bool(obs.must_go),
                "frame": b"",
            }
        )

    def _loads_chunk(self, data: bytes) -> list[TimedAction]:
        m = msgpack.unpackb(data)
        first = int(m["timestep"])
        return [TimedAction(0.0, first + i, [a]) for i, a in enumerate(m["actions"])]


def test_the_python_robot_is_traced_through_a_rust_server(tmp_path: Path) -> None:
    """The other way across: the Python robot traced with
    ``stagetrace.lerobot`` against the Rust server (``stagetrace-grpc``,
    the ``lerobot_server`` example, its clock 250 ms ahead). Every
    observation the robot sent is one record; the chunks carry the split
    from the Rust trailers and the skew is recovered within each record's
    bound."""
    exe = cargo_artifact("-p", "examples", "--example", "lerobot_server", name="lerobot_server")
    argv = [str(exe), "--port", "0", "--model-ms", str(MODEL_S * 1e3), "--skew-ms", str(SKEW_MS),
            "--latency-ms", "30", "--chunk-size", str(CHUNK)]
    with server_process(argv, ready="listening on 127.0.0.1:") as (_, line):
        address = line.split()[-1]
        rec = stagetrace.Recorder(str(tmp_path), clock="estimate")
        # step 1: every observation differs from the last one run by a step.
        client = MsgpackRobotClient(
            grpc.insecure_channel(address), address, dt_s=DT_S, chunk_size=CHUNK, threshold=0.5, step=1.0
        )
        trace_robot_client(client, recorder=rec)
        with robot_running(client):
            client.control_loop(TICKS)
            client.control_loop(DRAIN_TICKS, observe=False, until=lambda: not client.actions_available())
        rec.finish()
    records = records_in(tmp_path)
    sent = len(client.truth.captured)
    assert len(records) == sent >= 10, (len(records), sent)
    reasons = Counter(r.get("error", "chunk") for r in records)
    assert set(reasons) <= {"chunk", "replaced", "skipped", "cancelled"}, reasons
    chunks = [r for r in records if not r.get("failed")]
    # Every chunk the robot received is a chunk's record, or cancelled when
    # its first action never ran.
    assert len(chunks) + reasons["cancelled"] == client.truth.chunks_received, (reasons, client.truth.chunks_received)
    assert len(chunks) >= 10, reasons
    for r in chunks:
        for f in ("uplink_ms", "queue_ms", "infer_ms", "poll_wait_ms", "downlink_ms", "dispatch_ms", "margin_ms"):
            assert f in r, (f, r)
        assert r["infer_ms"] >= MODEL_S * 1e3, r
        assert abs(r["offset_ms"] - SKEW_MS) <= r["split_err_ms"], r


def test_the_drop_in_traces_the_robot_client_of_lerobots_entry_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, serve_lerobot: Callable[..., int]
) -> None:
    """``python -m stagetrace.lerobot lerobot.async_inference.robot_client …``
    with no change to LeRobot: every ``RobotClient`` the module builds is
    traced and the records land in ``$STAGETRACE_OUT``. Here a module of
    the same name and shape stands in for LeRobot's: its ``RobotClient``
    class (this file's peers, whose truth the test reads) and its
    ``async_client()`` entry, which reads ``--server_address`` from
    ``sys.argv`` as LeRobot's draccus config does. LeRobot's own module,
    its flags and its ``RobotClient``, is run the same way in
    ``test_lerobot_real.py``."""
    import sys
    import types

    from stagetrace.lerobot import main

    server = trace_policy_server(
        PolicyServer(model_s=MODEL_S, chunk_size=CHUNK, dt_s=DT_S, inference_latency_s=0.03, atol=0.05)
    )
    port = serve_lerobot(server)

    entry = types.ModuleType("lerobot.async_inference.robot_client")

    class StandInRobotClient(RobotClient):
        pass

    def async_client() -> None:
        address = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--server_address="))
        client = entry.RobotClient(
            grpc.insecure_channel(address), address, dt_s=DT_S, chunk_size=CHUNK, threshold=0.5, step=0.1
        )
        with robot_running(client):
            client.control_loop(TICKS // 2)
            client.control_loop(DRAIN_TICKS, observe=False, until=lambda: not client.actions_available())
        entry.last = client

    entry.RobotClient = StandInRobotClient
    entry.async_client = async_client
    monkeypatch.setitem(sys.modules, "lerobot.async_inference.robot_client", entry)
    monkeypatch.setenv("STAGETRACE_OUT", str(tmp_path))
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    assert main(["lerobot.async_inference.robot_client", f"--server_address=127.0.0.1:{port}"]) == 0
    records = records_in(tmp_path)
    # Every observation the robot captured is a record: the class was traced.
    assert len(records) == len(entry.last.truth.captured) >= 5, len(records)
    assert sum(1 for r in records if not r.get("failed")) >= 5
    assert main([]) == 2  # no module named: the usage, not a crash
