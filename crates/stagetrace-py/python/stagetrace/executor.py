"""The executor helper in Python: an actuator controller
that receives action chunks over the network acknowledges each one when it
**starts** executing it. The wire is the Rust ``ExecutorServer``'s
(``docs/protocol.md``, "Executor ack"), so a Rust ``ExecutorClient`` on the
robot records ``dispatch_ms`` ending at that start and the wait behind the
previous action as ``exec_wait_ms``, exactly (one clock: the executor's).

The controller runs in a thread of its own (an actuator loop), taking chunks
in arrival order::

    import asyncio, threading
    from stagetrace.executor import ExecutorServer

    server = ExecutorServer("0.0.0.0", 8100)

    def controller():
        while (chunk := server.get()) is not None:
            robot.wait_until_idle()              # the previous action
            chunk.ticket.started()               # acks: the robot's dispatch ends here
            robot.execute(chunk.action["actions"])

    threading.Thread(target=controller, daemon=True).start()
    asyncio.run(server.run())

Per chunk the ack is ``{"started": true, "server_timing": {...}}`` with
``recv_unix_ns`` (the whole chunk in, this host's wall clock), ``queue_ns``
(the wait: whole chunk in → :meth:`Ticket.started`), ``infer_ns``
(started → ack sent) and ``total_ns`` (whole chunk in → ack sent), all from
``time.perf_counter_ns``. :meth:`Ticket.dropped` answers ``started: false``
with a reason (the robot counts a stale drop). A chunk's ``traceparent`` is
read as a policy server reads it (:attr:`Chunk.trace`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import queue
import threading
import time
from collections.abc import Mapping
from typing import Any

from ._counters import _COUNTERS
from .codec import DEFAULT_MAX_MESSAGE_BYTES, MalformedRequest, Packer, unpackb
from ._listener import _Listener
from .timer import SERVER_TIMING_KEY, RequestTimer
from .trace import TraceParent

__all__ = ["DEFAULT_QUEUE", "REASON_KEY", "STARTED_KEY", "Chunk", "ExecutorServer", "Ticket"]

#: Key of the ack saying whether the executor started the chunk.
STARTED_KEY = "started"
#: Key of the ack with the reason a chunk was not started.
REASON_KEY = "reason"
#: Chunks that may wait for the controller (the Rust ``DEFAULT_QUEUE``).
DEFAULT_QUEUE = 16


class Ticket:
    """Acknowledges one chunk: :meth:`started` when execution starts (after
    any wait for the previous action), or :meth:`dropped`. Either may be
    called from any thread, once; later calls do nothing."""

    __slots__ = ("_received_ns", "_loop", "_future", "_lock", "_done")

    def __init__(self, received_ns: int, loop: asyncio.AbstractEventLoop, future: asyncio.Future) -> None:
        self._received_ns = received_ns
        self._loop = loop
        self._future = future
        self._lock = threading.Lock()
        self._done = False

    @property
    def received_ns(self) -> int:
        """When the whole chunk had arrived (``time.perf_counter_ns``): what
        the wait is measured from."""
        return self._received_ns

    def _resolve(self, outcome: tuple[str, Any]) -> bool:
        with self._lock:
            if self._done:
                return False
            self._done = True
        with contextlib.suppress(RuntimeError):  # the loop is gone: the connection too
            self._loop.call_soon_threadsafe(_set, self._future, outcome)
        return True

    def started(self) -> int:
        """Execution starts now: the ack leaves with the wait since the chunk
        arrived (``queue_ns``, the robot's ``exec_wait_ms``). Never blocks.
        Returns the start stamp (``perf_counter_ns``)."""
        now = time.perf_counter_ns()
        self._resolve(("started", now))
        return now

    def dropped(self, reason: str = "dropped") -> None:
        """The controller will not execute this chunk (stale, merged into
        the next one): the ack says ``started: false`` with ``reason``."""
        self._resolve(("dropped", str(reason)))


def _set(future: asyncio.Future, outcome: tuple[str, Any]) -> None:
    if not future.done():
        future.set_result(outcome)


@dataclasses.dataclass
class Chunk:
    """One received action chunk and the ticket to acknowledge it with."""

    #: The chunk's map (numpy arrays decoded; ``traceparent`` taken out).
    action: dict[str, Any]
    #: Call :meth:`Ticket.started` when execution starts.
    ticket: Ticket
    #: The robot's ``traceparent``, when it sent a valid one.
    trace: TraceParent | None = None


class ExecutorServer(_Listener):
    """Receives action chunks over WebSocket + msgpack and acks each when the
    controller starts it (module doc). Connections are served one chunk at
    a time each, in order; the controller takes them from :meth:`get`."""

    def __init__(
        self,
        host: str = "0.0.0.0",
        port: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        *,
        queue_size: int = DEFAULT_QUEUE,
        max_message_bytes: int | None = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:
        self._host = host
        self._port = port
        self._metadata = dict(metadata or {})
        self._max_size = max_message_bytes
        self._chunks: queue.Queue[Chunk | None] = queue.Queue(max(1, queue_size))
        self._server: Any = None

    def get(self, timeout: float | None = None) -> Chunk | None:
        """The next chunk, blocking the controller's thread (never call it on
        the server's event loop); None once the server closed or on timeout."""
        try:
            return self._chunks.get(timeout=timeout)
        except queue.Empty:
            return None

    async def close(self) -> None:
        """Stop accepting, close connections; :meth:`get` then returns None."""
        await self._stop_listening()
        with contextlib.suppress(queue.Full):
            self._chunks.put_nowait(None)

    async def _handler(self, websocket: Any) -> None:
        import websockets.exceptions
        from websockets.frames import CloseCode

        packer = Packer()
        loop = asyncio.get_running_loop()
        await websocket.send(packer.pack(self._metadata))
        while True:
            try:
                raw = await websocket.recv()
            except websockets.exceptions.ConnectionClosed:
                return
            timer = RequestTimer()  # the receive stamp: the whole chunk is in
            try:
                action = unpackb(raw)
                if not isinstance(action, dict):
                    raise MalformedRequest(f"chunk must be a msgpack map, got {type(action).__name__}")
            except MalformedRequest as e:
                _COUNTERS.add("bad_requests")
                reason = str(e).encode()[:120].decode(errors="ignore")
                with contextlib.suppress(websockets.exceptions.ConnectionClosed):
                    await websocket.close(code=CloseCode.INVALID_DATA, reason=reason)
                return
            timer.read_trace(action)
            future: asyncio.Future = loop.create_future()
            ticket = Ticket(timer._recv_mono, loop, future)
            chunk = Chunk(action, ticket, timer.trace)
            try:
                self._chunks.put_nowait(chunk)
            except queue.Full:
                # Back-pressure: this connection waits (and the wait is the
                # robot's exec_wait, as in the Rust executor).
                await asyncio.to_thread(self._chunks.put, chunk)
            outcome, value = await future
            frame = _ack(timer, outcome, value, packer)
            try:
                await websocket.send(frame)
            except websockets.exceptions.ConnectionClosed:
                return
            timer.sent()


def _ack(timer: RequestTimer, outcome: str, value: Any, packer: Any) -> bytes:
    """The ack frame; ``total_ns`` stamped last, just before the send."""
    recv = timer._recv_mono
    if outcome == "started":
        body = {STARTED_KEY: True}
        timing: dict[str, Any] = {"recv_unix_ns": timer.recv_unix_ns, "queue_ns": max(0, value - recv)}
    else:
        body = {STARTED_KEY: False, REASON_KEY: value}
        timing = {"recv_unix_ns": timer.recv_unix_ns}
    head = packer.pack_map_header(len(body) + 1) + b"".join(packer.pack(k) + packer.pack(v) for k, v in body.items())
    now = time.perf_counter_ns()
    if outcome == "started":
        timing["infer_ns"] = max(0, now - value)
    timing["total_ns"] = now - recv
    return head + packer.pack(SERVER_TIMING_KEY) + packer.pack(timing)
