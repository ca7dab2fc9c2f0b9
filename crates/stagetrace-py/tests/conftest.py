"""Shared fixtures: servers on loopback, for the installed `stagetrace` package
(`cargo xtask test` builds it into target/py-venv with `maturin develop`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, Optional

import pytest

from stagetrace import server as st

MODEL_MS = 20.0

# The torch suite: modules that need PyTorch (requirements-torch.txt, about
# 7 GB of venv with its CUDA libraries, more than a CI machine's disk may
# hold). `cargo xtask test --torch` installs it and sets STAGETRACE_TORCH=1;
# without it these modules are not collected (their imports need torch) and
# the run's summary names them as not run. Inside the torch suite a missing
# torch is an import error: a failure.
TORCH_SUITE = os.environ.get("STAGETRACE_TORCH") == "1"
TORCH_MODULES = ("test_device_torch.py", "test_lerobot_real.py")


_LEFT_OUT: list[str] = []


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> "bool | None":
    if not TORCH_SUITE and collection_path.name in TORCH_MODULES:
        _LEFT_OUT.append(f"tests/{collection_path.name}")
        return True
    return None


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _LEFT_OUT:
        terminalreporter.write_line(
            "NOT RUN (the torch suite; `cargo xtask test --torch` runs it): " + ", ".join(sorted(set(_LEFT_OUT)))
        )


HOST_KEYS = frozenset(
    ("run_wait_ns", "cpu_stall_ns", "gc_ns", "rx_wait_ns")
    + ("involuntary_switches", "minor_faults", "major_faults", "gc_collections", "voluntary_switches")
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


async def stagetrace_loop(
    websocket: Any,
    respond: Respond,
    metadata: dict[str, Any] | None = None,
    *,
    watch: bool = False,
    on_sent: Callable[[], None] | None = None,
) -> None:
    """An existing openpi-style server loop with this module's lines added
    (the README's recipe): a :class:`~stagetrace.server.Session` per
    connection, the receive stamp as soon as ``recv`` returns, the trace
    context taken out of the observation, ``sent()`` after each send.
    What happens in between is ``respond``'s. ``watch``: the session is
    given the connection (as PolicyServer does: the arrival from the
    kernel's stamps, the write stamped inside the transport);
    ``on_sent``: called after each send returned, before ``sent()``."""
    import websockets.exceptions

    packer = st.Packer()
    await websocket.send(packer.pack(metadata or {}))
    with st.Session(websocket if watch else None) as session:
        while True:
            try:
                raw = await websocket.recv()
            except websockets.exceptions.ConnectionClosed:
                return
            t = session.received(frame=raw)
            obs = st.unpackb(raw)
            t.read_trace(obs)
            frame = respond(websocket, t, obs, packer)
            if frame is None:
                return
            try:
                await websocket.send(frame)
            except websockets.exceptions.ConnectionClosed:
                return
            if on_sent is not None:
                on_sent()
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



# ---------------------------------------------------------------- records and the CLI


def records_in(out: Path | str) -> list[dict[str, Any]]:
    """Every record a recorder wrote under ``out`` (its ``records*.jsonl``
    files, in name order)."""
    files = sorted(Path(out).glob("records*.jsonl"))
    return [json.loads(line) for f in files for line in f.read_text().splitlines() if line.strip()]


_CLI: list[Path] = []


def stagetrace_cli() -> Path:
    """The ``stagetrace`` CLI, built once per session (:func:`cargo_artifact`)."""
    if not _CLI:
        _CLI.append(cargo_artifact("-p", "stagetrace-cli", "--bin", "stagetrace", name="stagetrace"))
    return _CLI[0]


def stagetrace_report(out: Path | str, *, as_json: bool = True) -> Any:
    """``stagetrace report`` over the records under ``out`` (a folder or one
    file): its ``--json`` document, or its text (``as_json=False``, no
    colour)."""
    args = [str(stagetrace_cli()), "report", str(out)] + (["--json"] if as_json else [])
    run = subprocess.run(args, capture_output=True, text=True, timeout=180, env={**os.environ, "NO_COLOR": "1"})
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout) if as_json else run.stdout


# ---------------------------------------------------------------- peers in processes of their own


@contextlib.contextmanager
def server_process(argv: list[str], *, ready: str, **popen: Any) -> Iterator[tuple[subprocess.Popen, str]]:
    """A server in a process of its own (as a robot meets it: no GIL shared
    with the test): started with ``argv``, its first line on stdout must
    start with ``ready``; yields the process and that line, and ends the
    process at the end if it is still running."""
    popen.setdefault("stderr", subprocess.PIPE)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, **popen)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith(ready):
            proc.poll()
            err = popen["stderr"]
            said = proc.stderr.read() if proc.stderr else Path(err.name).read_text() if hasattr(err, "name") else ""
            raise AssertionError(f"{argv[0]} did not start ({line!r}, exit {proc.returncode}):\n{said[-4000:]}")
        yield proc, line
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def json_lines(proc: subprocess.Popen) -> list[dict[str, Any]]:
    """The JSON lines ``proc`` prints on stdout from now on, each appended
    to the list returned as it comes (a daemon thread reads them)."""
    lines: list[dict[str, Any]] = []

    def read() -> None:
        for line in proc.stdout or ():
            lines.append(json.loads(line))

    threading.Thread(target=read, daemon=True).start()
    return lines


@contextlib.contextmanager
def rust_policy_server(model_ms: float) -> Iterator[int]:
    """The Rust openpi-style policy server (the ``policy_server`` example:
    kernel receive stamps) on a free loopback port; yields the port."""
    exe = cargo_artifact("-p", "examples", "--example", "policy_server", name="policy_server")
    with server_process([str(exe), "--port", "0", "--model-ms", str(model_ms)], ready="listening on ws://127.0.0.1:") as (
        _,
        line,
    ):
        yield int(line.rsplit(":", 1)[1])


@contextlib.contextmanager
def lerobot_server_process(script: str, *args: Any, cwd: Path) -> Iterator[tuple[subprocess.Popen, str]]:
    """A LeRobot policy server script of this folder (``lerobot_serve.py``,
    ``lerobot_real_serve.py``) in a process of its own, run from ``cwd``
    (LeRobot's modules write ``logs/`` where they run), its stderr (LeRobot
    logs every inference there) in ``cwd/stderr.log``, never a pipe nobody
    reads: it prints ``listening <port>``, serves until a line arrives on
    its stdin, then prints its truth as one JSON line. Yields the process
    and the server's address; :func:`lerobot_server_truth` stops it and
    reads the truth."""
    cwd.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, str(Path(__file__).with_name(script)), *map(str, args)]
    with open(cwd / "stderr.log", "w") as err:
        with server_process(argv, ready="listening ", stdin=subprocess.PIPE, stderr=err, cwd=cwd) as (proc, line):
            yield proc, f"127.0.0.1:{line.split()[1]}"


def lerobot_server_truth(proc: subprocess.Popen) -> Any:
    """Stop a :func:`lerobot_server_process` and return its truth (JSON)."""
    out, _ = proc.communicate("stop\n", timeout=60)
    assert proc.returncode == 0, f"the server exited {proc.returncode}; its stderr.log says why"
    return json.loads(out.strip().splitlines()[-1])


# ---------------------------------------------------------------- LeRobot's peers in this process


@pytest.fixture
def serve_lerobot() -> Iterator[Callable[..., int]]:
    """serve_lerobot(servicer, workers=4, interceptors=()) -> port of a
    ``grpc.server`` on 127.0.0.1 serving ``servicer`` as LeRobot's
    ``transport.AsyncInference`` (LeRobot's own ``serve()`` uses 4 workers);
    stopped at teardown."""
    from concurrent import futures

    import grpc
    from lerobot.transport import services_pb2_grpc

    servers: list[Any] = []

    def serve(servicer: Any, workers: int = 4, interceptors: tuple[Any, ...] = ()) -> int:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers), interceptors=list(interceptors))
        services_pb2_grpc.add_AsyncInferenceServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return port

    yield serve
    for server in servers:
        server.stop(grace=None)


@contextlib.contextmanager
def robot_running(client: Any) -> Iterator[Any]:
    """A LeRobot-style robot client (``lerobot_peers.RobotClient``) started,
    its action receiver on a thread of its own, as LeRobot's
    ``async_client()`` runs it; the control loop is the caller's. Stopped,
    and its receiver joined, at the end."""
    client.start()
    receiver = threading.Thread(target=client.receive_actions, daemon=True)
    receiver.start()
    try:
        yield client
    finally:
        client.stop()
        receiver.join(timeout=5)
