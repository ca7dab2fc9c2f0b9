"""The server's own send, named: a Python server whose thread is held up
between its ``total`` stamp and its write reports that wait in the next
response (``prev_tx_wait_ns``), and the robot's record of the delayed call
carries it as ``server_tx_wait_ms``, inside its downlink (issue: "the waits
real servers hide", item 4)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
from conftest import records_in, stagetrace_loop

import stagetrace
from stagetrace import server as st

CALLS = 25
#: Every DELAYED-th response waits before its write.
DELAYED = 5
HOLD_S = 0.010
PERIOD_S = 0.02


def test_a_servers_held_send_is_server_tx_wait_on_the_delayed_call(
    start_handler: Callable[..., int], tmp_path: Path
) -> None:
    # The truth, per request, on the server's own clock: the least the send
    # waited (the hold it slept) and the most (ready → the send returned,
    # bracketing the stamp the server takes inside encode_response).
    truth: list[tuple[int, int]] = []

    def respond(websocket: Any, t: st.RequestTimer, obs: dict[str, Any], packer: Any) -> bytes:
        before = time.perf_counter_ns()
        frame = st.encode_response({"actions": np.zeros((4, 7), np.float32)}, t, packer)
        held = 0
        if len(truth) % DELAYED == DELAYED - 1:
            h0 = time.perf_counter_ns()
            time.sleep(HOLD_S)  # the server's thread loses the CPU before its write
            held = time.perf_counter_ns() - h0
        truth.append((held, before))
        return frame

    sent_at: list[int] = []
    # The openpi-style loop of the README's recipe, its Session given the
    # connection (as PolicyServer does), so the write is stamped inside the
    # transport.
    port = start_handler(
        lambda ws: stagetrace_loop(ws, respond, watch=True, on_sent=lambda: sent_at.append(time.perf_counter_ns())),
        compression=None,
        max_size=None,
    )
    out = tmp_path / "robot"
    rec = stagetrace.Recorder(str(out))
    client = stagetrace.TracedClientPolicy("127.0.0.1", port, recorder=rec)
    for i in range(CALLS):
        client.infer({"i": i, "state": np.zeros(7, np.float32)})
        time.sleep(PERIOD_S)
    rec.finish()

    rs = sorted(records_in(out), key=lambda r: r["seq"])
    assert len(rs) == CALLS and len(truth) == CALLS and len(sent_at) == CALLS
    # The last response has no next one to carry its wait: absent, never 0.
    assert "server_tx_wait_ms" not in rs[-1]
    for i, r in enumerate(rs[:-1]):
        held_ns, before = truth[i]
        most_ms = (sent_at[i] - before) / 1e6
        got = r.get("server_tx_wait_ms")
        assert got is not None, f"call {i}: no server_tx_wait_ms in {r}"
        # Within the record's 1 µs resolution of the two bounds.
        assert held_ns / 1e6 - 0.001 <= got <= most_ms + 0.001, (
            f"call {i}: server_tx_wait {got} ms outside [{held_ns / 1e6:.3f}, {most_ms:.3f}] ms"
        )
        if held_ns:
            # Inside the downlink: the bytes left after the hold, so the
            # downlink holds it (to the split's bound).
            assert r["downlink_ms"] + r["split_err_ms"] >= held_ns / 1e6 - 0.001, r
