"""An openpi-shaped policy server for tests/test_event_loop.py: a
:class:`stagetrace.server.PolicyServer` whose policy runs on the event loop
(openpi issue #717), spinning ``--model-ms`` of CPU per request so the loop
is really held, with pre / model / post parts timed through
``stagetrace.server.stage``.

Its own process, as a real server is: the robots' threads then never wait
for this interpreter's lock, and what they measure is the network and the
server. It prints ``listening on ws://127.0.0.1:PORT``, then one JSON line
per answered request with the truth where it happened: the policy's own
stamps of when its inference started and ended, the server's read and arrival
stamps, and the ``server_timing`` map it sent (``time.perf_counter_ns``:
CLOCK_MONOTONIC, the same clock in every process of the host).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

import numpy as np

from stagetrace import server as st


def spin_until(end_ns: int) -> None:
    while time.perf_counter_ns() < end_ns:
        pass


class SpinPolicy:
    """pre 0.5 ms, model the rest of ``model_ms`` less 1 ms, post 0.5 ms; all
    spinning on the loop's thread, holding it."""

    def __init__(self, model_ms: float) -> None:
        self._ns = int(model_ms * 1e6)
        #: id of the request's timer -> (robot, call, model start, model end)
        self.stamps: dict[int, tuple[str, int, int, int]] = {}

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        start = time.perf_counter_ns()
        with st.stage("pre"):
            spin_until(start + 500_000)
        with st.stage("model"):
            spin_until(start + self._ns - 500_000)
        with st.stage("post"):
            spin_until(start + self._ns)
            action = {"actions": np.zeros((10, 7), np.float32)}
        self.stamps[id(st.current())] = (str(obs.get("robot")), int(obs.get("i", -1)), start, time.perf_counter_ns())
        return action


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-ms", type=float, default=30.0)
    args = ap.parse_args()
    policy = SpinPolicy(args.model_ms)

    def on_request(timer: st.RequestTimer, timing: Any) -> None:
        # The hook runs after the send, when another request may have run:
        # the policy's stamps are found by the request's timer.
        robot, i, start, end = policy.stamps.pop(id(timer), (None, None, None, None))
        line = {
            "robot": robot,
            "i": i,
            "infer_start_ns": start,
            "infer_end_ns": end,
            "read_ns": timer.read_ns,
            "arrival_ns": timer.arrival_ns,
            "source": timer.arrival_source,
            # Each stage's first start and last end, to say where a gap was.
            "spans": {k: [timer._first[k], timer._last[k]] for k in timer._first},
            "timing": {k: v for k, v in timing.items() if isinstance(v, (int, float, str))},
        }
        print(json.dumps(line), flush=True)

    async def serve() -> None:
        server = st.PolicyServer(policy, "127.0.0.1", 0, {"server": "loop"}, on_request=on_request)
        port = await server.start()
        print(f"listening on ws://127.0.0.1:{port}", flush=True)
        await server.run()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
