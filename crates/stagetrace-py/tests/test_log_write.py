"""A Python control loop blocked by its own logging: ``stagetrace.timed_handler``
around a real ``logging.StreamHandler`` whose stream is a one-page pipe; the
pipe's reader (a journald that falls behind, in a process of its own)
pauses 15 ms before every 10th line. Each call logs one 3 KiB line between
its transport and its dispatch.

Truth, on every call, between two stamps: the pipe's write itself (a
witness around the handler's stream: where the bytes move and the loop
blocks) and the loop's own stamps around the log call. The records'
``log_write_ms`` (the handler's lock, format, write) lies between the two,
so every blocked write is on its call whatever else the loop lost (a
preemption between the loop's stamps is not log writing), and
``stagetrace report`` lays the gap's spikes at the robot's log writing
(``host_log``), nothing else.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from conftest import report_timing, stagetrace_report

import stagetrace

CALLS = 200
EVERY = 10
HELD_S = 0.015
LINE = "x" * 3000
ROUNDING_MS = 0.002


#: The pipe's reader: a line at a time, pausing before every EVERY-th.
READER = """
import os, sys, time
line, every, held = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
lines = got = 0
while True:
    chunk = os.read(0, 4096)
    if not chunk:
        break
    got += len(chunk)
    while got >= line:
        got -= line
        lines += 1
        if lines % every == every - 1:
            time.sleep(held)
"""


def spin(s: float) -> None:
    end = time.perf_counter() + s
    while time.perf_counter() < end:
        pass


class WriteWitness:
    """The handler's stream, timing its writes and flushes: how long the
    loop was held where the bytes move."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.held_ns = 0

    def write(self, text: str) -> int:
        t0 = time.perf_counter_ns()
        try:
            return self.stream.write(text)
        finally:
            self.held_ns += time.perf_counter_ns() - t0

    def flush(self) -> None:
        t0 = time.perf_counter_ns()
        try:
            self.stream.flush()
        finally:
            self.held_ns += time.perf_counter_ns() - t0

    def take_ms(self) -> float:
        held, self.held_ns = self.held_ns, 0
        return held / 1e6


def records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for f in sorted(out.glob("records*.jsonl")) for line in f.read_text().splitlines()]


def test_a_loop_blocked_by_its_own_logging_is_named_log_writing(tmp_path: Path) -> None:
    r, w = os.pipe()
    fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 4096)

    # The reader is a process of its own, as journald is: a reader thread
    # here would take the GIL from the loop as it wakes, and lay its own
    # delays on the loop's next capture.
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(len(LINE) + 1), str(EVERY), str(HELD_S)], stdin=r
    )
    os.close(r)
    stream = os.fdopen(w, "w", buffering=1)
    pipe = WriteWitness(stream)
    handler = stagetrace.timed_handler(logging.StreamHandler(pipe))
    handler.setFormatter(logging.Formatter("%(message)s"))
    log = logging.getLogger("robot.loop")
    log.propagate = False
    log.addHandler(handler)
    log.setLevel(logging.INFO)

    stagetrace.init(tmp_path)
    # (the pipe's write, the loop's stamps around the log call) per call, ms
    truth: list[tuple[float, float]] = []
    try:
        for seq in range(CALLS):
            with stagetrace.call(seq=seq):
                with stagetrace.stage("capture"):
                    spin(0.0003)
                with stagetrace.stage("transport"):
                    spin(0.001)
                t0 = time.perf_counter_ns()
                log.info(LINE)
                around = (time.perf_counter_ns() - t0) / 1e6
                truth.append((pipe.take_ms(), around))
                with stagetrace.stage("dispatch"):
                    spin(0.0002)
    finally:
        stagetrace.finish()
        log.removeHandler(handler)
        stream.close()
        reader.wait(10)

    blocked = sum(1 for write, _ in truth if write >= HELD_S * 1000 / 2)
    assert blocked >= CALLS // EVERY // 2, f"only {blocked} log writes blocked: the pipe did not fill"
    recs = sorted(records(tmp_path), key=lambda x: x["seq"])
    assert len(recs) == CALLS
    # The handler's time lies between the pipe's write and the loop's
    # stamps, on every call (µs rounding): a blocked write is on its call.
    for rec, (write, around) in zip(recs, truth):
        assert write - ROUNDING_MS <= rec["log_write_ms"] <= around + ROUNDING_MS, (rec["log_write_ms"], write, around)
    worst = max(write - rec["log_write_ms"] for rec, (write, _) in zip(recs, truth))
    report_timing("python log_write_ms short of the pipe's write, worst (ms)", max(worst, 0.0), ROUNDING_MS)
    report = stagetrace_report(tmp_path)
    named = [(v["code"], v["stage"]) for v in report["verdicts"] if v["code"] not in ("steady", "faster", "host_cpu")]
    assert named == [("host_log", "gap")], report["verdicts"]
