"""A Python robot whose send is held up by another thread of its own: the
wait is the robot's (``tx_wait_ms``), not the network's.

The robot is openpi's real ``WebsocketClientPolicy`` inside stagetrace's
``TracedClientPolicy``, against the Rust policy server (the ``policy_server``
example: kernel receive stamps, so the uplink ends when the server's kernel
had the request) on loopback. Another thread of the robot holds the GIL for
10 ms (a C call made through ``ctypes.PyDLL``, which keeps the GIL) on every
20th call, between the transport's start and the write: the robot cannot
reach its socket until the hold ends.

Truths, stamped where they happened, on the robot's monotonic clock:

- the hold's start (the holding thread, before its C call; the hold lasts
  at least ``HOLD_US`` from there) and the robot's request path entered
  (the inner client's ``infer``, after the transport stage started): the
  write could not come before the hold ended, so each held call's
  ``tx_wait_ms`` is at least hold start + 10 ms − that entry, and a call not
  held has the encoding and the write only (its median under 1 ms);
- the uplink beyond the robot's own part (``uplink_ms − tx_wait_ms``) stays
  at loopback's on every call, held or not;
- ``stagetrace report`` names the robot's host (its ``tx_wait``) for the
  uplink's spikes, not the network.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import records_in, report_timing, rust_policy_server, stagetrace_report
from openpi_client.websocket_client_policy import WebsocketClientPolicy

import stagetrace

CALLS = 100
EVERY = 20
HOLD_US = 10_000
PERIOD_S = 0.02
MODEL_MS = 2.0
#: Loopback's uplink past the robot's own part, with room for a loaded
#: machine (measured: 0.1–0.3 ms idle).
NET_MS = 2.0
#: The typical tx_wait of a call not held: the encoding and the write.
FREE_MS = 1.0
ROUNDING_MS = 0.0005


@pytest.fixture(scope="module")
def rust_server() -> Iterator[int]:
    """The Rust example server on a free loopback port; yields the port."""
    with rust_policy_server(MODEL_MS) as port:
        yield port


class GilHolder:
    """A thread that, when told, holds the GIL for ``HOLD_US`` in one C call
    (``usleep`` through ``ctypes.PyDLL``: the GIL stays held) and notes when
    the hold began. The hold ends no earlier than that plus ``HOLD_US``
    (its end is not stamped: the first bytecode after the C call returns
    may hand the GIL over before any stamp is taken)."""

    def __init__(self) -> None:
        self._usleep = ctypes.PyDLL(None).usleep
        self._go = threading.Event()
        self._holding = threading.Event()
        self._stop = False
        self.starts: list[int] = []
        self._thread = threading.Thread(target=self._run, name="gil-holder", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self._go.wait()
            self._go.clear()
            if self._stop:
                self._holding.set()
                return
            self.starts.append(time.perf_counter_ns())
            self._holding.set()
            # Before the waiter woken above gets the GIL back: it asks for it
            # now, and is given it after this C call returns.
            self._usleep(HOLD_US)

    def hold_now(self) -> None:
        """Start a hold and return once it is over: this thread waits (the
        GIL released) until the holder has the GIL and is in its C call,
        then for the GIL itself."""
        self._holding.clear()
        self._go.set()
        assert self._holding.wait(timeout=10), "the GIL holder did not start"

    def stop(self) -> None:
        self._stop = True
        self._go.set()
        self._thread.join(timeout=5)


class HeldClient(WebsocketClientPolicy):
    """openpi's client; a call marked ``hold`` has the GIL taken from it on
    its way to the socket, and every call notes when it entered."""

    hold = False
    holder: GilHolder | None = None
    entered: int = 0

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        self.entered = time.perf_counter_ns()
        if self.hold and self.holder is not None:
            self.holder.hold_now()
        return super().infer(obs)


def test_a_send_held_up_by_another_python_thread_is_the_robots_tx_wait(tmp_path: Path, rust_server: int) -> None:
    holder = GilHolder()
    # One host, one wall clock: the uplink is the server's kernel stamp less
    # the robot's start, with no estimate's error in it.
    rec = stagetrace.Recorder(str(tmp_path), clock="trusted")
    inner = HeldClient("127.0.0.1", rust_server)
    inner.holder = holder
    policy = stagetrace.TracedClientPolicy(policy=inner, recorder=rec)
    entered: list[int] = []
    try:
        for i in range(CALLS):
            inner.hold = i % EVERY == EVERY // 2
            with stagetrace.call(kind="infer", seq=i, recorder=rec):
                policy.infer({"state": [float(i)] * 8})
            entered.append(inner.entered)
            time.sleep(PERIOD_S)
    finally:
        holder.stop()
        inner._ws.close()
    rec.finish()
    records = {r["seq"]: r for r in records_in(tmp_path)}
    assert len(records) == CALLS, len(records)
    held = [i for i in range(CALLS) if i % EVERY == EVERY // 2]
    assert len(holder.starts) == len(held)

    # Each held call waited for the hold before its write: tx_wait carries it.
    for i, start in zip(held, holder.starts):
        floor_ms = (start + HOLD_US * 1000 - entered[i]) / 1e6
        assert records[i]["tx_wait_ms"] >= floor_ms - ROUNDING_MS, (floor_ms, records[i])
    # The others did not: the robot's own time before the write is the
    # encoding and the write itself (a fraction of a ms; the model's 2 ms
    # would show if tx_wait ran past the request).
    free = sorted(r["tx_wait_ms"] for i, r in records.items() if i not in held)
    report_timing("tx_wait of calls not held, median (ms)", free[len(free) // 2], FREE_MS)
    assert free[len(free) // 2] <= FREE_MS, free

    # The uplink's network part stays loopback's, held or not.
    nets = []
    for i, r in records.items():
        assert "tx_wait_ms" in r, r
        net = r["uplink_ms"] - r["tx_wait_ms"]
        nets.append(net)
        assert net <= NET_MS, (i, r)
    report_timing("uplink past tx_wait, worst (ms)", max(max(nets), 0.0), NET_MS)
    # The kernel's receive stamps reach the Python robot too (after the
    # first response, read before the socket was stamped).
    assert sum(1 for r in records.values() if "rx_wait_ms" in r) >= CALLS - 2, [r.get("rx_wait_ms") for r in records.values()]

    # The report: the uplink's spikes are the robot's, named as such.
    files = sorted(tmp_path.glob("records*.jsonl"))
    text = stagetrace_report(files[0], as_json=False)
    verdict = text.split("verdict:", 1)[-1]
    uplink = [line for line in verdict.splitlines() if line.strip().startswith("* uplink")]
    assert len(uplink) == 1, text
    # Named the robot's (its tx_wait), coded host_cpu: not the network's.
    assert uplink[0].endswith("(host_cpu)"), text
    assert "the robot handing the request to the kernel late" in uplink[0], text
    assert "bandwidth" not in verdict, text
