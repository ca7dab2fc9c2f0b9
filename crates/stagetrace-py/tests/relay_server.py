"""A stagetrace relay whose gateway work holds its event loop, for
tests/test_relay_loop.py: robot 1's requests spin ``--block-ms`` on the
relay's loop (a synchronous transform, the shape of a gateway that decodes
or authenticates inline).

Its own process, as a real gateway is: the robots' threads then never wait
for this interpreter's lock (a spin on the loop holds the GIL, and a robot
thread of the same process would wait for it before its request's bytes
left: the robot's own ``tx_wait``, not the relay's). It prints
``listening on ws://127.0.0.1:PORT``, then one JSON line per request: the
caller's trace id, the ``server_timing`` map the relay answered with, and
how the request's arrival was known (``RelayRecord.arrival``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from stagetrace.relay import Relay, RelayRecord


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("downstream")
    ap.add_argument("--block-ms", type=float, required=True)
    args = ap.parse_args()
    block_s = args.block_ms / 1e3

    def blocking_gateway(request: dict[Any, Any]) -> dict[Any, Any]:
        """Robot 1's requests hold the relay's loop."""
        if request.get("robot") == 1:
            end = time.perf_counter() + block_s
            while time.perf_counter() < end:
                pass
        return request

    def emit(r: RelayRecord) -> None:
        line = {"trace_id": r.trace_id, "timing": r.timing, "arrival": r.arrival, "error": r.error}
        print(json.dumps(line, default=repr), flush=True)

    async def serve() -> None:
        relay = Relay(args.downstream, "127.0.0.1", 0, transform=blocking_gateway, on_request=emit)
        port = await relay.start()
        print(f"listening on ws://127.0.0.1:{port}", flush=True)
        await relay.run()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
