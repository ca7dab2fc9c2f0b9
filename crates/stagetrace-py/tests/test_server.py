"""WebSocket round trips against PolicyServer with a Python client."""

from __future__ import annotations

import time
import urllib.request

import numpy as np
import pytest
from conftest import MODEL_MS, EchoPolicy, assert_model_cost, report_timing, stagetrace_loop
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from stagetrace import server as st

TID = "4bf92f3577b34da6a3ce929d0e0e4736"
VALID = f"00-{TID}-00f067aa0ba902b7-01"


def call(ws, obs: dict) -> tuple[dict, int, int, int, int]:
    """One call; returns (response, t0 wall, t3 wall, t0 mono, t3 mono)."""
    frame = st.packb(obs)
    w0, m0 = time.time_ns(), time.perf_counter_ns()
    ws.send(frame)
    raw = ws.recv(timeout=30)
    m3, w3 = time.perf_counter_ns(), time.time_ns()
    return st.unpackb(raw), w0, w3, m0, m3


def test_round_trip(start_server) -> None:
    policy = EchoPolicy()
    _, port = start_server(policy, {"robot": "test-arm", "action_horizon": 10})
    image = np.random.default_rng(1).integers(0, 255, (96, 96, 3), dtype=np.uint8)
    with connect(f"ws://127.0.0.1:{port}", compression=None, max_size=None, open_timeout=10) as ws:
        meta = st.unpackb(ws.recv(timeout=10))
        assert meta == {"robot": "test-arm", "action_horizon": 10}
        infer_ms, totals = [], []
        for i in range(20):
            resp, w0, w3, m0, m3 = call(ws, {"image": image, "traceparent": VALID, "i": i})
            timing = resp["server_timing"]
            # The observation reached the policy intact, without the trace keys.
            assert resp["keys"] == ["i", "image"]
            np.testing.assert_array_equal(resp["image"], image)
            assert resp["actions"].shape == (10, 7)
            # Same host, same clock: the wall anchor falls inside the call.
            assert w0 <= timing["recv_unix_ns"] <= w3
            roundtrip = m3 - m0
            assert timing["infer_ns"] <= timing["total_ns"] <= roundtrip
            assert timing["infer_ms"] == pytest.approx(timing["infer_ns"] / 1e6)
            assert ("prev_total_ms" in timing) == (i > 0)
            if i > 0:
                # The previous call's total, which ended after its response was stamped.
                assert timing["prev_total_ms"] * 1e6 >= totals[-1]
            infer_ms.append(timing["infer_ms"])
            totals.append(timing["total_ns"])
    assert len(policy.seen) == 20
    assert_model_cost(infer_ms, policy.own_ns, MODEL_MS)


def test_bad_traceparent_is_counted_and_served(start_server) -> None:
    _, port = start_server(EchoPolicy(model_ms=0))
    before = st.stats()["rejected_traceparent"]
    with connect(f"ws://127.0.0.1:{port}", open_timeout=10) as ws:
        ws.recv(timeout=10)
        for bad in ["00-" + "0" * 32 + "-00f067aa0ba902b7-01", "x" * 100_000, 12345, b"\xff\xfe"]:
            resp, *_ = call(ws, {"traceparent": bad, "state": 1})
            assert resp["keys"] == ["state"]
            assert "total_ns" in resp["server_timing"]
    assert st.stats()["rejected_traceparent"] - before == 4


def test_undecodable_request_closes_with_1007(start_server) -> None:
    _, port = start_server(EchoPolicy(model_ms=0))
    before = st.stats()["bad_requests"]
    for frame in [b"\xc1garbage", st.packb([1, 2, 3]), "a text frame"]:
        with connect(f"ws://127.0.0.1:{port}", open_timeout=10) as ws:
            ws.recv(timeout=10)
            ws.send(frame)
            with pytest.raises(ConnectionClosed) as exc:
                ws.recv(timeout=10)
            assert exc.value.rcvd is not None and exc.value.rcvd.code == 1007
    assert st.stats()["bad_requests"] - before == 3
    # The server is still up for well-behaved clients.
    with connect(f"ws://127.0.0.1:{port}", open_timeout=10) as ws:
        ws.recv(timeout=10)
        assert call(ws, {"state": 1})[0]["keys"] == ["state"]


class FailingPolicy:
    def infer(self, obs: dict) -> dict:
        raise RuntimeError("CUDA out of memory (simulated)")


def test_policy_error_sends_traceback_then_closes(start_server) -> None:
    _, port = start_server(FailingPolicy())
    with connect(f"ws://127.0.0.1:{port}", open_timeout=10) as ws:
        ws.recv(timeout=10)
        ws.send(st.packb({"state": 1}))
        text = ws.recv(timeout=10)
        assert isinstance(text, str) and "CUDA out of memory (simulated)" in text
        with pytest.raises(ConnectionClosed) as exc:
            ws.recv(timeout=10)
        assert exc.value.rcvd is not None and exc.value.rcvd.code == 1011


class SleepingPolicy:
    def infer(self, obs: dict) -> dict:
        time.sleep(0.2)  # releases the GIL, as a GPU wait would
        return {"i": obs["i"]}


def test_in_thread_serves_two_clients_concurrently(start_server) -> None:
    _, port = start_server(SleepingPolicy(), in_thread=True)
    a = connect(f"ws://127.0.0.1:{port}", open_timeout=10)
    b = connect(f"ws://127.0.0.1:{port}", open_timeout=10)
    try:
        a.recv(timeout=10)
        b.recv(timeout=10)
        t0 = time.perf_counter()
        a.send(st.packb({"i": 1}))
        b.send(st.packb({"i": 2}))
        ra, rb = st.unpackb(a.recv(timeout=30)), st.unpackb(b.recv(timeout=30))
        elapsed = time.perf_counter() - t0
    finally:
        a.close()
        b.close()
    assert ra["server_timing"]["infer_ms"] >= 200 and rb["server_timing"]["infer_ms"] >= 200
    report_timing("two 200 ms calls, wall time (s)", elapsed, 0.39)
    assert elapsed < 0.39  # overlapped, not 2 x 200 ms back to back


def test_healthz(start_server) -> None:
    _, port = start_server(EchoPolicy(model_ms=0))
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as r:
        assert r.status == 200 and r.read() == b"OK\n"


def test_existing_openpi_loop_integration(start_handler) -> None:
    """The README's recipe: an existing openpi-style loop with the four lines added."""
    policy = EchoPolicy(model_ms=5)

    def respond(websocket, t: st.RequestTimer, obs: dict, packer) -> bytes:
        infer_start = time.monotonic()
        with t.stage("infer"):
            action = policy.infer(obs)
        action["server_timing"] = {"infer_ms": (time.monotonic() - infer_start) * 1000}
        t.stamp(action)
        return packer.pack(action)

    port = start_handler(lambda ws: stagetrace_loop(ws, respond))
    with connect(f"ws://127.0.0.1:{port}", open_timeout=10) as ws:
        ws.recv(timeout=10)
        for i in range(3):
            resp, w0, w3, *_ = call(ws, {"traceparent": VALID, "i": i})
            timing = resp["server_timing"]
            assert resp["keys"] == ["i"]
            assert w0 <= timing["recv_unix_ns"] <= w3
            assert 5 <= timing["infer_ms"] <= timing["total_ns"] / 1e6
            assert ("prev_total_ms" in timing) == (i > 0)


def test_on_request_hook_sees_trace_and_timing(start_server) -> None:
    seen = []

    def hook(timer: st.RequestTimer, timing) -> None:
        seen.append((timer.trace, timer.span, dict(timing)))
        if len(seen) == 2:
            raise RuntimeError("a broken hook must not break the server")

    _, port = start_server(EchoPolicy(model_ms=1), on_request=hook)
    with connect(f"ws://127.0.0.1:{port}", open_timeout=10) as ws:
        ws.recv(timeout=10)
        sent = [call(ws, {"traceparent": VALID, "i": i})[0]["server_timing"] for i in range(3)]
        assert call(ws, {"i": 3})[0]["keys"] == ["i"]
    deadline = time.monotonic() + 10
    while len(seen) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)  # the hook runs after send: give the server loop a moment
    assert len(seen) == 4
    for (trace, span, timing), got in zip(seen, sent):
        assert trace is not None and trace.trace_id == TID
        assert span is not None and span.trace_id == TID and span.parent_id != trace.parent_id
        assert timing == got
    assert seen[3][0] is None and seen[3][1] is None


def test_oversized_request_closes_with_1009(start_server) -> None:
    _, port = start_server(EchoPolicy(model_ms=0), max_message_bytes=1 << 20)
    with connect(f"ws://127.0.0.1:{port}", open_timeout=10, max_size=None) as ws:
        ws.recv(timeout=10)
        assert call(ws, {"image": np.zeros(500_000, np.uint8)})[0]["image"].size == 500_000
        with pytest.raises(ConnectionClosed) as exc:
            ws.send(st.packb({"image": np.zeros(2 << 20, np.uint8)}))
            ws.recv(timeout=10)
        assert exc.value.rcvd is not None and exc.value.rcvd.code == 1009


def test_command_line_server() -> None:
    """`python3 -m stagetrace.server --port 0 --model-ms 5`, as the README says."""
    import subprocess
    import sys
    from pathlib import Path

    proc = subprocess.Popen(
        [sys.executable, "-m", "stagetrace.server", "--port", "0", "--model-ms", "5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = proc.stdout.readline()  # the server prints it once listening
        assert line.startswith("listening on ws://127.0.0.1:"), line
        with connect(line.split()[-1], open_timeout=10) as ws:
            assert st.unpackb(ws.recv(timeout=10)) == {"server": "stagetrace.server demo"}
            resp, w0, w3, *_ = call(ws, {"traceparent": VALID, "state": np.zeros(7, np.float32)})
        assert resp["actions"].shape == (10, 7)
        assert resp["server_timing"]["infer_ms"] >= 5
        assert w0 <= resp["server_timing"]["recv_unix_ns"] <= w3
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_client_gone_mid_call_leaves_server_healthy(start_server, caplog) -> None:
    import logging
    import socket

    caplog.set_level(logging.INFO)
    policy = EchoPolicy(model_ms=50)
    # in_thread: the event loop sees the connection drop while the model runs.
    _, port = start_server(policy, in_thread=True)
    ws = connect(f"ws://127.0.0.1:{port}", open_timeout=10)
    ws.recv(timeout=10)
    ws.send(st.packb({"i": 0}))
    # Vanish without a close frame while the model runs.
    ws.socket.shutdown(socket.SHUT_RDWR)
    deadline = time.monotonic() + 10
    while len(policy.seen) < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    with connect(f"ws://127.0.0.1:{port}", open_timeout=10) as ws2:
        ws2.recv(timeout=10)
        resp, *_ = call(ws2, {"i": 1})
        assert resp["keys"] == ["i"]
    ws.close()
    assert len(policy.seen) == 2
    # The vanished client is a normal event, not a handler failure.
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]


def test_openpi_method_names_serve_forever_blocks_run_is_the_coroutine() -> None:
    """As openpi's WebsocketPolicyServer: a drop-in `serve_forever()` call
    serves (it used to return a coroutine that never ran)."""
    import inspect
    import socket
    import threading

    from openpi_client.websocket_client_policy import WebsocketClientPolicy

    assert inspect.iscoroutinefunction(st.PolicyServer.run)
    assert not inspect.iscoroutinefunction(st.PolicyServer.serve_forever)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = st.PolicyServer(EchoPolicy(model_ms=1), "127.0.0.1", port, {"m": 1})
    done = threading.Event()

    def serve() -> None:
        try:
            server.serve_forever()  # blocks until the server is closed
        except BaseException:
            pass
        done.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    client = None
    while client is None and time.monotonic() < deadline:
        try:
            client = WebsocketClientPolicy("127.0.0.1", port)
        except OSError:
            time.sleep(0.05)
    assert client is not None and client.get_server_metadata() == {"m": 1}
    assert client.infer({"x": np.zeros(3, np.float32)})["keys"] == ["x"]
    assert not done.is_set()  # still serving: it blocks
    ws_server = server._server
    ws_server.loop.call_soon_threadsafe(ws_server.close)
    assert done.wait(10)


def test_a_busy_port_is_a_usage_error_not_a_traceback():
    """`python -m stagetrace.server` on a port already taken: one line that
    says so and what to do, exit status 2, no traceback."""
    import socket
    import subprocess
    import sys

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        out = subprocess.run(
            [sys.executable, "-m", "stagetrace.server", "--port", str(port), "--model-ms", "1"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert out.returncode == 2, out
    assert f"ws://127.0.0.1:{port} is in use" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
