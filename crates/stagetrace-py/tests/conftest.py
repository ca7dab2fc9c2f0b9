"""Shared fixtures: servers on loopback, for the installed `stagetrace` package
(`cargo xtask test` builds it into target/py-venv with `maturin develop`)."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Optional

import pytest

from stagetrace import server as st

MODEL_MS = 20.0


HOST_KEYS = frozenset(
    ("run_wait_ns", "cpu_stall_ns", "gc_ns", "rx_wait_ns")
    + ("involuntary_switches", "minor_faults", "major_faults", "gc_collections")
)


def without_host(timing: dict) -> dict:
    """A server timing map without its host figures (sent by default, each
    only where the host offers it): each must be a non-negative int."""
    for k in HOST_KEYS & set(timing):
        assert type(timing[k]) is int and timing[k] >= 0, (k, timing[k])
    return {k: v for k, v in timing.items() if k not in HOST_KEYS}


def report_timing(what: str, error: float, bound: float) -> None:
    """A timing test's error against the most it allows, said before it
    asserts: ``cargo xtask timing`` runs such tests many times and keeps the
    worst line of each (``stagetrace_test_support::timing`` in Rust)."""
    print(f"stagetrace-timing: {what} error={abs(error):.4f} bound={bound:.4f}", file=sys.stderr)


class LoopThread:
    """An asyncio loop on a background thread, for servers the test talks to."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="server-loop", daemon=True)
        self._thread.start()

    def run(self, coro: Any, timeout: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@pytest.fixture
def loop_thread() -> Iterator[LoopThread]:
    lt = LoopThread()
    yield lt
    lt.stop()


def assert_model_cost(infer_ms: list[float], own_ns: list[int], model_ms: float) -> None:
    """The reported inference time is the model's cost.

    Robust on a loaded 2-core machine, where a preempted spin overshoots: no
    call reports less than the cost, the quickest call reports it within
    1 ms, and what wraps the model (the stage timer) adds under 0.5 ms in the
    typical call.
    """
    assert len(infer_ms) == len(own_ns)
    assert min(infer_ms) >= model_ms - 0.01
    assert min(infer_ms) <= model_ms + 1.0, infer_ms
    overhead = sorted(i - o / 1e6 for i, o in zip(infer_ms, own_ns))
    assert overhead[0] >= -0.002  # µs rounding of the record
    assert overhead[len(overhead) // 2] < 0.5, overhead


class EchoPolicy:
    """Returns the observation's keys and a copy of its ``image``, after a
    spin-waited model cost."""

    def __init__(self, model_ms: float = MODEL_MS) -> None:
        # Spin the whole cost: a sleep can overshoot by ms on a loaded machine.
        self._inner = st._SleepPolicy(model_ms, spin_ms=model_ms)
        self.seen: list[dict[str, Any]] = []
        #: The model's own cost per call (ns), measured inside ``infer``.
        self.own_ns: list[int] = []

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        self.seen.append(obs)
        start = time.perf_counter_ns()
        out = self._inner.infer(obs)
        self.own_ns.append(time.perf_counter_ns() - start)
        out["keys"] = sorted(str(k) for k in obs)
        if "image" in obs:
            out["image"] = obs["image"]
        return out


@pytest.fixture
def start_server(loop_thread: LoopThread) -> Iterator[Callable[..., tuple[st.PolicyServer, int]]]:
    """start_server(policy, metadata=None) -> (server, port) on 127.0.0.1."""
    started: list[st.PolicyServer] = []

    def start(policy: Any, metadata: dict[str, Any] | None = None, **kw: Any) -> tuple[st.PolicyServer, int]:
        server = st.PolicyServer(policy, "127.0.0.1", 0, metadata, **kw)
        port = loop_thread.run(server.start())
        started.append(server)
        return server, port

    yield start
    for s in started:
        loop_thread.run(s.close())


async def openpi_style_handler(websocket: Any, policy: Any, metadata: dict[str, Any]) -> None:
    """An unmodified openpi-style server loop: only ``infer_ms`` and
    ``prev_total_ms``, no traceparent handling, no stagetrace at all."""
    import websockets.exceptions

    packer = st.Packer()
    await websocket.send(packer.pack(metadata))
    prev_total = None
    while True:
        try:
            start = time.monotonic()
            obs = st.unpackb(await websocket.recv())
            t_infer = time.monotonic()
            action = policy.infer(obs)
            action["server_timing"] = {"infer_ms": (time.monotonic() - t_infer) * 1000}
            if prev_total is not None:
                action["server_timing"]["prev_total_ms"] = prev_total * 1000
            await websocket.send(packer.pack(action))
            prev_total = time.monotonic() - start
        except websockets.exceptions.ConnectionClosed:
            return


@pytest.fixture
def start_handler(loop_thread: LoopThread) -> Iterator[Callable[..., int]]:
    """start_handler(handler, **serve_options) -> port of a plain
    ``websockets`` server on 127.0.0.1 running ``handler(websocket)``;
    closed at teardown."""
    from websockets.asyncio.server import serve

    servers: list[Any] = []

    def start(handler: Callable[[Any], Awaitable[None]], **options: Any) -> int:
        async def go() -> Any:
            return await serve(handler, "127.0.0.1", 0, **options)

        server = loop_thread.run(go())
        servers.append(server)
        return next(iter(server.sockets)).getsockname()[1]

    yield start

    async def stop(s: Any) -> None:
        s.close()
        await s.wait_closed()

    for s in servers:
        loop_thread.run(stop(s))


@pytest.fixture
def start_openpi_server(start_handler: Callable[..., int]) -> Callable[..., int]:
    """start_openpi_server(policy) -> port of a plain openpi-style server."""

    def start(policy: Any, metadata: dict[str, Any] | None = None) -> int:
        return start_handler(
            lambda ws: openpi_style_handler(ws, policy, metadata or {}), compression=None, max_size=None
        )

    return start


#: ``respond(websocket, timer, obs, packer)``: the frame answering one
#: request, or None to end the connection.
Respond = Callable[[Any, st.RequestTimer, dict[str, Any], Any], Optional[bytes]]


async def stagetrace_loop(websocket: Any, respond: Respond, metadata: dict[str, Any] | None = None) -> None:
    """An existing openpi-style server loop with this module's lines added
    (the README's recipe): a :class:`~stagetrace.server.Session` per
    connection, the receive stamp as soon as ``recv`` returns, the trace
    context taken out of the observation, ``sent()`` after each send.
    What happens in between is ``respond``'s."""
    import websockets.exceptions

    packer = st.Packer()
    session = st.Session()
    await websocket.send(packer.pack(metadata or {}))
    while True:
        try:
            raw = await websocket.recv()
        except websockets.exceptions.ConnectionClosed:
            return
        t = session.received()
        obs = st.unpackb(raw)
        t.read_trace(obs)
        frame = respond(websocket, t, obs, packer)
        if frame is None:
            return
        try:
            await websocket.send(frame)
        except websockets.exceptions.ConnectionClosed:
            return
        t.sent()


def _cargo() -> "str | None":
    import os
    import shutil

    return os.environ.get("CARGO") or shutil.which("cargo")


def cargo_artifact(*args: str, name: str) -> "Any":
    """Build a workspace binary with cargo (honouring ``CARGO_TARGET_DIR``) and
    return its path. A missing cargo fails under CI and skips, loudly,
    elsewhere (docs/architecture.md §8)."""
    import json
    import os
    import subprocess
    from pathlib import Path

    cargo = _cargo()
    if cargo is None:
        why = (
            f"tests needing the Rust {name} NOT RUN: cargo is not on PATH (nor $CARGO); "
            "install a Rust toolchain (https://rustup.rs) and re-run pytest"
        )
        if os.environ.get("CI", "").strip() in ("true", "1"):
            pytest.fail(why)
        pytest.skip(why)
    root = Path(__file__).resolve().parents[3]
    build = subprocess.run(
        [cargo, "build", *args, "--message-format=json-render-diagnostics"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if build.returncode != 0:
        pytest.fail(f"building {name} failed:\n{build.stderr[-6000:]}")
    for line in build.stdout.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg["target"]["name"] == name and msg.get("executable"):
            return Path(msg["executable"])
    pytest.fail(f"cargo built no {name} executable:\n{build.stdout[-3000:]}")
