"""LeRobot 0.4.4's real async inference, traced: ``lerobot.async_inference``'s
own ``PolicyServer`` and ``RobotClient`` over real gRPC on loopback, with
stagetrace's two lines on each side (docs/lerobot.md), a real ACT policy
that the server loads through LeRobot's factory when the robot sends its
policy instructions (``lerobot_real.save_tiny_act``), and a stub robot
registered as a LeRobot robot type (``lerobot_real.StubArm``: the robot is
not under test, LeRobot's server and client classes and their gRPC are).

The server runs in a process of its own (``lerobot_real_serve.py``), as a
robot meets it; both processes stamp on the host's monotonic clock, and
one host's clocks agree (the true offset is 0).

Truths, stamped where they happened:

- the robot: when LeRobot's ``send_observation`` called the gRPC stub
  (``HandOverWitness``), and every observation its robot gave;
- the server: when the call arrived (a witness interceptor in grpcio's
  serving thread, before the pool), when grpcio called the handler in a
  worker, when LeRobot's ``SendObservations`` started, its first read of
  the stream and the chunk marked ``TRANSFER_END`` in its hands, and what
  LeRobot did with the observation.

Served with ``max_workers=1`` (the shape of LeRobot's own end-to-end test:
``GetActions`` holds the only worker while it waits for an observation, so
each ``SendObservations`` waits for that worker):

- each chunk's ``accept_wait_ms`` is the truth's wait (arrival → grpcio
  called the handler) within ``ACCEPT_BOUND_MS``, and inside ``queue_ms``;
- no uplink ends after the server had the observation by its own stamps
  (the stub call → the call's arrival, plus LeRobot's reading of the
  stream): the wait for the worker, tens of ms, is queue, not uplink.
  Where the hosts kept up (that truth under ``UPLINK_MS / 2``), no uplink
  exceeds ``UPLINK_MS``. On a host short of CPU the server's threads see
  the call late, before any Python runs for it (no hook of grpcio's comes
  earlier), and that lateness stays in the uplink, as docs/lerobot.md
  says: the bound against the truth still holds;
- ``stagetrace report`` names the starved pool (``worker_pool_starved``).

Served with 4 workers, as LeRobot's ``serve()`` does: every observation the
robot took is one record and its outcome is the server's (queued and run: a
chunk; not queued: ``skipped``; queued, never run: ``replaced``, or
``cancelled`` when the robot stopped first), the same truths hold, and the
report names no starved pool.

And the drop-in: ``python -m stagetrace.lerobot
lerobot.async_inference.robot_client`` with LeRobot's own flags traces the
client LeRobot's entry module builds, every observation one record.
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import lerobot_server_process, lerobot_server_truth, records_in, report_timing, stagetrace_report

import stagetrace
from stagetrace.lerobot import trace_robot_client

# PyTorch: LeRobot's async inference modules import it (the torch suite,
# tests/conftest.py).
pytestmark = pytest.mark.torch

FPS = 50
CHUNK = 10
#: LeRobot's GetActions waits this long for an observation (LeRobot's
#: default is 2 s; shorter keeps the test short, the wait is the same kind).
OBS_TIMEOUT_S = 0.15
#: How long the robot runs.
RUN_S = 4.0
#: Each chunk's accept_wait against the handler's own start.
ACCEPT_BOUND_MS = 1.0
#: No observation's uplink on loopback above this, where the hosts keep up.
UPLINK_MS = 5.0
ROUNDING_MS = 0.0005


@pytest.fixture(scope="module")
def robot_client_module(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """LeRobot's client module, imported from a scratch directory (its
    modules make ``logs/`` where they are imported). Importing it sets up
    LeRobot's logging on the root logger (``init_logging``: everything at
    DEBUG to its log file, INFO to the stderr of the moment); the root
    logger is given back to pytest afterwards, LeRobot's own loggers
    keeping their file as LeRobot configured it."""
    import logging

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    cwd = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("lerobot-logs"))
    try:
        from lerobot.async_inference import robot_client
    finally:
        os.chdir(cwd)
        files = [h for h in root.handlers if h not in handlers and isinstance(h, logging.FileHandler)]
        root.handlers = handlers
        root.setLevel(level)
        lerobot_logger = logging.getLogger(robot_client.RobotClient.prefix)
        lerobot_logger.setLevel(logging.DEBUG)
        for h in files:
            lerobot_logger.addHandler(h)
    return robot_client


@pytest.fixture(scope="module")
def tiny_act(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from lerobot_real import save_tiny_act

    return save_tiny_act(tmp_path_factory.mktemp("act"), CHUNK)


class Run:
    """One run: the robot's records, the server's truth (by trace id), the
    robot's hand-over stamps (by trace id) and what the robot observed."""

    def __init__(self, records: list[dict[str, Any]], served: dict[str, Any], before: dict[str, int], observed: int):
        self.records = records
        self.served = served
        self.before = before
        self.observed = observed
        self.chunks = [r for r in records if not r.get("failed")]


def _run(tmp_path: Path, robot_client: Any, policy: Path, workers: int) -> Run:
    """LeRobot's real robot client against its real policy server (in a
    process of its own, run from a scratch folder: LeRobot writes ``logs/``
    there), for ``RUN_S``."""
    from lerobot.async_inference.configs import RobotClientConfig
    from lerobot_real import HandOverWitness, StubArmConfig

    handover = HandOverWitness()
    with lerobot_server_process("lerobot_real_serve.py", workers, OBS_TIMEOUT_S, cwd=tmp_path / "server") as (
        proc,
        address,
    ):
        rec = stagetrace.Recorder(str(tmp_path / "robot"))
        config = RobotClientConfig(
            policy_type="act",
            pretrained_name_or_path=str(policy),
            robot=StubArmConfig(calibration_dir=tmp_path / "calibration"),
            actions_per_chunk=CHUNK,
            server_address=address,
            chunk_size_threshold=0.5,
            fps=FPS,
        )
        client = robot_client.RobotClient(config)
        # The robot's truth: under stagetrace's interceptor, and around it.
        client.channel = grpc.intercept_channel(client.channel, handover.interceptor())
        trace_robot_client(client, recorder=rec)  # docs/lerobot.md's line
        client.stub = handover.stub(client.stub)
        assert client.start(), "the robot's handshake with the server failed"
        # What LeRobot's async_client() does, for RUN_S.
        receiver = threading.Thread(target=client.receive_actions, daemon=True)
        control = threading.Thread(target=client.control_loop, args=("",), daemon=True)
        receiver.start()
        control.start()
        time.sleep(RUN_S)
        client.stop()
        control.join(timeout=10)
        receiver.join(timeout=10)
        assert not control.is_alive() and not receiver.is_alive(), "the robot's threads did not stop"
        served = lerobot_server_truth(proc)
        rec.finish()
    return Run(records_in(tmp_path / "robot"), served, dict(handover.before), client.robot.observed)


def _every_observation_is_one_record(run: Run) -> None:
    """Each observation the robot gave is one record, and each record's
    outcome is what LeRobot's server did with it."""
    assert len(run.records) == run.observed, (len(run.records), run.observed)
    seen = Counter(r["trace_id"] for r in run.records)
    assert max(seen.values()) == 1, [t for t, n in seen.items() if n > 1]
    # Every observation the server received is a record of the robot's.
    assert set(run.served) <= set(seen), set(run.served) - set(seen)
    reasons = Counter(r.get("error", "chunk") for r in run.records)
    for r in run.records:
        s = run.served.get(r["trace_id"])
        why = r.get("error", "chunk")
        if why == "chunk":
            assert s is not None and s["queued"] and s["ran"], (r, s)
        elif why == "skipped":
            assert s is not None and s["queued"] is False, (r, s)
        elif why == "replaced":
            assert s is not None and s["queued"] and not s["ran"], (r, s)
        elif why == "cancelled":
            # Queued when the robot stopped, or refused by LeRobot's client
            # once it had stopped (never sent).
            assert s is None or s["queued"], (r, s)
        else:
            # Cut off by the robot's stop: the channel closed under the
            # send, whatever the server had done with it by then.
            assert why == "disconnected", (r, s)
    # Only the robot's stop cuts an observation off.
    cut = [r for r in run.records if r.get("error") == "disconnected" or (r.get("error") == "cancelled" and r["trace_id"] not in run.served)]
    assert len(cut) <= 1, reasons


def _uplink_truths(run: Run) -> tuple[list[float], list[float]]:
    """Every chunk's uplink against the truth: it ends no later than the
    server had the observation by its own stamps (the robot's stub call →
    the call's arrival, plus the handler's reading of the stream), give or
    take the clock estimate's offset from the true 0 and the serving
    thread's steps between the witness's stamp and stagetrace's (what the
    record's wait falls short of its truth by, plus the worker's steps
    from the handler's start to stagetrace's pickup, at most to LeRobot's
    first line). Returns the uplinks and their truths (ms)."""
    ups, truths = [], []
    for r in run.chunks:
        s, before = run.served[r["trace_id"]], run.before[r["trace_id"]]
        truth = (s["came"] - before + s["read_end"] - s["read_start"]) / 1e6
        steps = (s["entered"] - s["came"] + s["started"] - s["entered"]) / 1e6 - r["accept_wait_ms"]
        assert r["uplink_ms"] <= truth + abs(r["offset_ms"]) + steps + ROUNDING_MS, (truth, steps, r, s)
        ups.append(r["uplink_ms"])
        truths.append(truth)
    return ups, truths


def _accept_waits(run: Run) -> list[float]:
    """Each chunk's accept_wait against the truth, the call's arrival (the
    witness interceptor) → the handler's start (grpcio called it in a
    worker): within ACCEPT_BOUND_MS, stagetrace stamping a few steps after
    each of the two (its arrival between the witness's and the serving
    thread's hand-over to the pool, its pickup first thing inside the
    handler). Where a thread lost its turn on either way (the serving
    thread between the witness and the hand-over, the worker between
    grpcio's call and LeRobot's first line: a thread of the server held
    the GIL, the host held the core, more than ACCEPT_BOUND_MS for a few
    steps of code), stagetrace's stamps lie somewhere in between: the
    wait lies between the two truths, the hand-over → the handler's start
    and the arrival → LeRobot's first line. And inside queue. Returns the
    truths (ms)."""
    truths, errors, held = [], [], 0
    for r in run.chunks:
        s = run.served[r["trace_id"]]
        at_call = (s["entered"] - s["came"]) / 1e6
        shortest, longest = (s["entered"] - s["pooled"]) / 1e6, (s["started"] - s["came"]) / 1e6
        wait = r["accept_wait_ms"]
        assert r["queue_ms"] >= wait - ROUNDING_MS, r
        if longest - shortest <= ACCEPT_BOUND_MS:
            errors.append(wait - at_call)
            assert abs(wait - at_call) <= ACCEPT_BOUND_MS, (wait, at_call, r, s)
        else:
            held += 1
            assert shortest - ROUNDING_MS <= wait <= longest + ROUNDING_MS, (wait, shortest, longest, r, s)
        truths.append(at_call)
    # Most workers go straight on: the tight check is the rule, not the
    # exception (one chunk in seven was held under a load of 8 on 2 cores).
    print(f"accept_wait: {held} of {len(run.chunks)} chunks' threads held on their way in", file=sys.stderr)
    assert held <= len(run.chunks) // 2, (held, len(run.chunks))
    worst = max(errors, key=abs)
    report_timing("lerobot real: accept_wait against the handler's start (ms)", worst, ACCEPT_BOUND_MS)
    return truths


def test_with_one_worker_the_wait_for_it_is_accept_wait_not_uplink(
    tmp_path: Path, robot_client_module: Any, tiny_act: Path
) -> None:
    run = _run(tmp_path, robot_client_module, tiny_act, workers=1)
    assert len(run.chunks) >= 20, Counter(r.get("error", "chunk") for r in run.records)
    _every_observation_is_one_record(run)
    waits = _accept_waits(run)
    # The case is exercised: observations waited for GetActions to give the
    # worker up, tens of ms and more.
    assert statistics.median(waits) >= 10.0, waits
    ups, truths = _uplink_truths(run)
    # Where the hosts kept up (by the truth: the server had the observation
    # within UPLINK_MS / 2 of the robot's stub call; on an idle loopback
    # nearly every one), no uplink above UPLINK_MS. A host short of CPU
    # adds only what its own stamps say it was late (the bound above).
    kept_up = [u for u, t in zip(ups, truths) if t <= UPLINK_MS / 2]
    assert kept_up, (ups, truths)
    report_timing("lerobot real: uplink where the hosts kept up, worst (ms)", max(kept_up), UPLINK_MS)
    assert max(kept_up) <= UPLINK_MS, sorted(kept_up)[-5:]
    print(
        f"workers=1: {len(run.chunks)} chunks of {len(run.records)} records; uplink median "
        f"{statistics.median(ups):.3f} max {max(ups):.3f} ms (truth max {max(truths):.3f}); "
        f"accept_wait truth median {statistics.median(waits):.1f} ms",
        file=sys.stderr,
    )
    report = stagetrace_report(tmp_path / "robot")
    assert "worker_pool_starved" in [v["code"] for v in report["verdicts"]], report["verdicts"]


def test_with_workers_to_spare_every_observation_is_one_record(
    tmp_path: Path, robot_client_module: Any, tiny_act: Path
) -> None:
    run = _run(tmp_path, robot_client_module, tiny_act, workers=4)
    assert len(run.chunks) >= 20, Counter(r.get("error", "chunk") for r in run.records)
    _every_observation_is_one_record(run)
    waits = _accept_waits(run)
    # A worker was free: no call waited for GetActions to give one up (as
    # with one worker, up to OBS_TIMEOUT_S). What the pool's hand-over takes
    # is a fraction of a ms on an idle host, ms where its cores are busy.
    assert max(waits) < OBS_TIMEOUT_S * 1e3 / 2, sorted(waits)[-5:]
    ups, truths = _uplink_truths(run)
    print(
        f"workers=4: {len(run.chunks)} chunks of {len(run.records)} records; uplink median "
        f"{statistics.median(ups):.3f} max {max(ups):.3f} ms (truth max {max(truths):.3f})",
        file=sys.stderr,
    )
    report = stagetrace_report(tmp_path / "robot")
    assert "worker_pool_starved" not in [v["code"] for v in report["verdicts"]], report["verdicts"]


def test_the_drop_in_traces_lerobots_own_robot_client_module(
    tmp_path: Path, robot_client_module: Any, tiny_act: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python -m stagetrace.lerobot lerobot.async_inference.robot_client``
    with LeRobot's own flags, no change to LeRobot: its entry module parses
    them (draccus), builds its ``RobotClient``, which is traced, and runs
    it until the robot is stopped (here after ``RUN_S``, as a person's
    Ctrl-C stops it: ``async_client()`` then stops the client). Every
    observation the robot gave is one record in ``$STAGETRACE_OUT``, with
    the server's outcome."""
    from lerobot_real import ROBOT_TYPE

    from stagetrace.lerobot import main

    running: list[Any] = []
    control_loop = robot_client_module.RobotClient.control_loop

    def stopped_after_a_while(self: Any, *args: Any, **kwargs: Any) -> Any:
        running.append(self)
        threading.Timer(RUN_S, self.stop).start()
        return control_loop(self, *args, **kwargs)

    monkeypatch.setattr(robot_client_module.RobotClient, "control_loop", stopped_after_a_while)
    # main() traces the class's every instance from here on: this test's only.
    monkeypatch.setattr(robot_client_module.RobotClient, "__init__", robot_client_module.RobotClient.__init__)
    monkeypatch.setenv("STAGETRACE_OUT", str(tmp_path / "robot"))
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    with lerobot_server_process("lerobot_real_serve.py", 4, OBS_TIMEOUT_S, cwd=tmp_path / "server") as (
        proc,
        address,
    ):
        flags = [
            f"--robot.type={ROBOT_TYPE}",
            f"--robot.calibration_dir={tmp_path / 'calibration'}",
            f"--server_address={address}",
            "--policy_type=act",
            f"--pretrained_name_or_path={tiny_act}",
            f"--actions_per_chunk={CHUNK}",
            f"--fps={FPS}",
        ]
        assert main(["lerobot.async_inference.robot_client", *flags]) == 0
        served = lerobot_server_truth(proc)
    (client,) = running
    run = Run(records_in(tmp_path / "robot"), served, {}, client.robot.observed)
    assert len(run.chunks) >= 20, Counter(r.get("error", "chunk") for r in run.records)
    _every_observation_is_one_record(run)
