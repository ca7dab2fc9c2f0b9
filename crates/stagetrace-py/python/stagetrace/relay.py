"""A relay (gateway) between robots and a policy server, in Python: the same
wire as the Rust ``stagetrace_net::ws::Relay`` (``docs/protocol.md``,
"Relays").

It forwards each request of the openpi / LingBot-VA WebSocket + msgpack
protocol to the downstream server (a policy server, or another relay) and
answers with the downstream's action. What it adds:

* the trace continues: the forwarded request carries the caller's trace id,
  a new parent id (the relay's own span), the caller's sampled and random
  flags and its ``tracestate`` (W3C Trace Context Level 2, by the Rust
  core's rules: several ``traceparent`` values start a new trace,
  ``tracestate`` lines are combined, a repeated key keeps its left-most
  member, a malformed list is dropped whole; rejected ones are counted in
  :meth:`Relay.stats` and ``stagetrace.server.stats()``);
* its own timing, on its own clock: ``recv_unix_ns`` (whole request in),
  ``forward_ns`` (→ request handed to the downstream's send), ``reply_ns``
  (→ the downstream's whole reply in) and ``total_ns`` (→ reply handed to
  the upstream socket), with the downstream's ``server_timing`` nested
  unchanged as ``downstream``. A stagetrace client then records every hop
  (``hops``) and the relay's own time (``relay_ms``);
* when its loop was busy as a request came (another connection's inline
  gateway work, a collection), its receive stamp at the bytes' arrival (the
  kernel's receive stamp, as ``stagetrace.server`` takes it) and the wait
  as ``loop_wait_ns``: the relay's own time, never the hop before it.

Start one in front of a policy server::

    import asyncio
    from stagetrace.relay import Relay

    async def main():
        relay = Relay("ws://10.0.0.5:8000", "0.0.0.0", 8001)
        await relay.run()

    asyncio.run(main())

or ``python3 -m stagetrace.relay ws://10.0.0.5:8000 --port 8001``.

A gateway that does work of its own on each request (authentication,
rewriting the observation) passes ``transform``: a function (or coroutine
function) taking the request map and returning the map to forward; its time
is the relay's own (``relay_ms``), not the network's.

One downstream connection per upstream connection (the protocol answers in
order), taken from a pool of idle ones. A downstream that fails or closes
fails the request: the caller gets the error as a text frame and the
connection closes with 1011, as a policy server's failure does; the next
request connects anew.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import msgpack

from . import _loopwait, _native
from ._counters import _COUNTERS
from .codec import DEFAULT_MAX_MESSAGE_BYTES, MalformedRequest
from ._listener import _Listener
from .timer import _ANCHOR, SERVER_TIMING_KEY
from .trace import TRACEPARENT_KEY, TRACESTATE_KEY, Continued, continue_trace

__all__ = ["DOWNSTREAM_KEY", "MAX_HOPS", "Relay", "RelayRecord"]

logger = logging.getLogger("stagetrace.relay")

#: Key of the downstream's map inside a relay's ``server_timing``.
DOWNSTREAM_KEY = "downstream"
#: Most relays one ``server_timing`` nests (the Rust core's ``MAX_HOPS``).
MAX_HOPS: int = _native.MAX_HOPS

_TRACE_KEYS = (TRACEPARENT_KEY, TRACEPARENT_KEY.encode(), TRACESTATE_KEY, TRACESTATE_KEY.encode())


def _continue(parents: list[Any], states: list[Any]) -> Continued:
    """The continued trace of one request; rejected headers counted."""
    c = continue_trace(parents, states)
    if c.rejected_traceparent:
        _COUNTERS.add("rejected_traceparent")
    if c.rejected_tracestate:
        _COUNTERS.add("rejected_tracestate")
    return c


class _Map(dict):
    """A decoded msgpack map that remembers its trace context values,
    repeated keys included (a plain dict keeps only the last)."""

    __slots__ = ("parents", "states")


def _pairs_hook(pairs: list[tuple[Any, Any]]) -> _Map:
    m = _Map(pairs)
    m.parents = [v for k, v in pairs if k in _TRACE_KEYS[:2]]
    m.states = [v for k, v in pairs if k in _TRACE_KEYS[2:]]
    return m


def _unpack(data: Any) -> _Map:
    """The request map, arrays left encoded (the relay forwards them as they
    came). Raises :class:`MalformedRequest`."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise MalformedRequest(f"expected a binary frame, got {type(data).__name__}")
    try:
        obj = msgpack.unpackb(data, object_pairs_hook=_pairs_hook, raw=False, strict_map_key=False)
    except Exception as e:  # msgpack raises several unrelated types
        raise MalformedRequest(f"not valid msgpack: {type(e).__name__}: {e}") from e
    if not isinstance(obj, _Map):
        raise MalformedRequest(f"request must be a msgpack map, got {type(obj).__name__}")
    return obj


def _relays_in(timing: Any) -> int:
    """How many relays a ``server_timing`` map already nests (bounded)."""
    n = 0
    while isinstance(timing, Mapping) and DOWNSTREAM_KEY in timing and n <= MAX_HOPS:
        n += 1
        timing = timing[DOWNSTREAM_KEY]
    return n


@dataclasses.dataclass(frozen=True)
class RelayRecord:
    """What the relay saw of one request, for the ``on_request`` hook."""

    #: The caller's trace id (hex), None when it sent no usable context.
    trace_id: str | None
    #: The ``traceparent`` / ``tracestate`` sent downstream.
    traceparent: str
    tracestate: str | None
    #: The ``server_timing`` map answered upstream (the relay's, with the
    #: downstream's nested), or None when the request failed.
    timing: dict[str, Any] | None
    #: Why the request failed, when it did.
    error: str | None = None
    #: How the request's arrival was known: ``"kernel"`` (the kernel's
    #: receive stamp), ``"tcp_info"`` (a lower bound in scheduler ticks), or
    #: None (the handler's read stamp: no wait seen).
    arrival: str | None = None


class _Failed(Exception):
    """The downstream could not answer this request."""


class _Downstream:
    """One connection to the downstream server."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws

    async def exchange(self, frame: bytes) -> tuple[int, Any, int]:
        """Send ``frame``; returns (forward stamp, reply frame, reply stamp)."""
        import websockets.exceptions

        forward = time.perf_counter_ns()
        try:
            await self.ws.send(frame)
            reply = await self.ws.recv()
        except websockets.exceptions.ConnectionClosed as e:
            raise _Failed(f"relay: the downstream server closed the connection ({e})") from e
        reply_at = time.perf_counter_ns()
        if isinstance(reply, str):  # openpi: the error, then a close
            raise _Failed(f"relay: the downstream server failed: {reply}")
        return forward, reply, reply_at


class Relay(_Listener):
    """Forwards robot ↔ policy server over WebSocket + msgpack, continuing
    the trace and nesting the downstream's timing in its own (module doc)."""

    def __init__(
        self,
        downstream: str,
        host: str = "0.0.0.0",
        port: int | None = None,
        *,
        transform: Callable[[dict[Any, Any]], Any] | None = None,
        on_request: Callable[[RelayRecord], None] | None = None,
        max_message_bytes: int | None = DEFAULT_MAX_MESSAGE_BYTES,
        max_idle: int = 64,
    ) -> None:
        """``downstream``: the ``ws://`` URL of the policy server (or next
        relay). ``transform(request)``: the gateway's own work on each
        request, returning the map to forward (may be a coroutine function).
        ``on_request(record)``: called after each answer (or failure); an
        exception it raises is logged. ``max_idle``: idle downstream
        connections kept."""
        self._url = downstream
        self._host = host
        self._port = port
        self._transform = transform
        self._on_request = on_request
        self._max_size = max_message_bytes
        self._max_idle = max(1, max_idle)
        self._idle: list[_Downstream] = []
        self._metadata: bytes | None = None
        self._server: Any = None
        self._lock = threading.Lock()
        self._stats = dict.fromkeys(("connections", "requests", "failed"), 0)

    def stats(self) -> dict[str, int]:
        """``connections`` accepted, ``requests`` answered or failed,
        ``failed`` (the downstream failed, or the request was unreadable)."""
        with self._lock:
            return dict(self._stats)

    def _count(self, name: str) -> None:
        with self._lock:
            self._stats[name] += 1

    async def _connect(self) -> tuple[_Downstream, bytes]:
        from websockets.asyncio.client import connect

        try:
            ws = await connect(self._url, compression=None, max_size=self._max_size, open_timeout=10)
            metadata = await ws.recv()
        except Exception as e:
            raise _Failed(f"relay could not reach its downstream policy server at {self._url} ({e})") from e
        if isinstance(metadata, str):
            await ws.close()
            raise _Failed(f"relay: the downstream server sent text instead of its metadata: {metadata[:200]}")
        return _Downstream(ws), metadata

    async def start(self) -> int | None:
        """Connect to the downstream (its metadata is sent on to every
        upstream client), bind and start accepting; returns the bound port.
        Raises ``ConnectionError`` when the downstream cannot be reached."""
        try:
            first, self._metadata = await self._connect()
        except _Failed as e:
            raise ConnectionError(str(e)) from None
        self._idle.append(first)
        return await self._listen()

    async def close(self) -> None:
        """Stop accepting, close upstream and idle downstream connections."""
        await self._stop_listening()
        idle, self._idle = self._idle, []
        for d in idle:
            with contextlib.suppress(Exception):
                await d.ws.close()

    async def _handler(self, websocket: Any) -> None:
        import websockets.exceptions
        from websockets.frames import CloseCode

        self._count("connections")
        await websocket.send(self._metadata)
        down: _Downstream | None = None
        # When each request's bytes were in, for a loop that was busy when
        # they came (another connection's transform, a collection): the
        # wait is the relay's own time, not its uplink's.
        conn = _loopwait.connection(websocket, owner=websocket)
        try:
            while True:
                try:
                    raw = await websocket.recv()
                except websockets.exceptions.ConnectionClosed:
                    return
                recv, recv_unix, loop_wait, source = _received(conn, raw)
                try:
                    request = _unpack(raw)
                except MalformedRequest as e:
                    self._count("requests")
                    self._count("failed")
                    _COUNTERS.add("bad_requests")
                    reason = str(e).encode()[:120].decode(errors="ignore")
                    with contextlib.suppress(websockets.exceptions.ConnectionClosed):
                        await websocket.close(code=CloseCode.INVALID_DATA, reason=reason)
                    return
                c = _continue(request.parents, request.states)
                tp, ts, trace_id = c.traceparent, c.tracestate, c.trace_id
                try:
                    if down is None:
                        down = self._idle.pop() if self._idle else (await self._connect())[0]
                    frame = await self._forward_frame(request, tp, ts)
                    forward, reply_raw, reply_at = await down.exchange(frame)
                    out, timing = self._answer(reply_raw, recv, recv_unix, forward, reply_at, loop_wait)
                except Exception as e:
                    msg = str(e) if isinstance(e, _Failed) else f"relay: {type(e).__name__}: {e}"
                    self._count("requests")
                    self._count("failed")
                    self._emit(RelayRecord(trace_id, tp, ts, None, msg))
                    if down is not None:
                        with contextlib.suppress(Exception):
                            await down.ws.close()
                        down = None
                    with contextlib.suppress(websockets.exceptions.ConnectionClosed):
                        await websocket.send(msg)
                        await websocket.close(code=CloseCode.INTERNAL_ERROR, reason=msg[:120])
                    return
                try:
                    await websocket.send(out)
                except websockets.exceptions.ConnectionClosed:
                    return
                finally:
                    self._count("requests")
                self._emit(RelayRecord(trace_id, tp, ts, timing, arrival=source))
        finally:
            if conn is not None:
                conn.close()
            if down is not None:
                if len(self._idle) < self._max_idle:
                    self._idle.append(down)
                else:
                    with contextlib.suppress(Exception):
                        await down.ws.close()

    async def _forward_frame(self, request: _Map, tp: str, ts: str | None) -> bytes:
        """The request as forwarded: the caller's trace context replaced by
        the continued one, after the gateway's own ``transform``."""
        fwd: dict[Any, Any] = {k: v for k, v in request.items() if k not in _TRACE_KEYS}
        if self._transform is not None:
            out = self._transform(fwd)
            if inspect.isawaitable(out):
                out = await out
            if not isinstance(out, Mapping):
                raise TypeError(f"transform must return the request map, got {type(out).__name__}")
            fwd = {k: v for k, v in out.items() if k not in _TRACE_KEYS}
        fwd[TRACEPARENT_KEY] = tp
        if ts is not None:
            fwd[TRACESTATE_KEY] = ts
        return msgpack.packb(fwd, use_bin_type=True)

    def _answer(
        self, raw: Any, recv: int, recv_unix: int, forward: int, reply_at: int, loop_wait: int | None = None
    ) -> tuple[bytes, dict]:
        """The reply upstream: the downstream's action, its ``server_timing``
        nested in the relay's. ``total_ns`` is stamped after the action is
        packed: only the timing map itself is packed after it. ``loop_wait``:
        how long the request waited for the relay's busy loop after it was
        in (inside ``total_ns``, the relay's own time)."""
        try:
            reply = msgpack.unpackb(raw, raw=False, strict_map_key=False)
        except Exception as e:
            raise _Failed(f"relay: the downstream's reply is not msgpack ({type(e).__name__}: {e})") from e
        if not isinstance(reply, dict):
            raise _Failed(f"relay: the downstream's reply is a {type(reply).__name__}, not a map")
        inner = reply.pop(SERVER_TIMING_KEY, None)
        p = msgpack.Packer(use_bin_type=True)
        body = [p.pack(k) + p.pack(v) for k, v in reply.items()]
        timing: dict[str, Any] = {"recv_unix_ns": recv_unix}
        total = time.perf_counter_ns() - recv
        timing["total_ns"] = total
        if loop_wait is not None:
            timing["loop_wait_ns"] = loop_wait
        if _relays_in(inner) < MAX_HOPS:
            # forward ≤ reply ≤ total: stamps in order on one clock.
            timing["forward_ns"] = forward - recv
            timing["reply_ns"] = reply_at - recv
            timing[DOWNSTREAM_KEY] = inner if isinstance(inner, Mapping) else {}
        # else: the chain is full; the relay answers with its own timing alone.
        frame = b"".join([p.pack_map_header(len(body) + 1), *body, p.pack(SERVER_TIMING_KEY), p.pack(timing)])
        return frame, timing

    def _emit(self, record: RelayRecord) -> None:
        if self._on_request is None:
            return
        try:
            self._on_request(record)
        except Exception:
            logger.exception("on_request hook failed")


def _received(conn: _loopwait.Connection | None, raw: Any) -> tuple[int, int, int | None, str | None]:
    """When the request just read was in: (perf_counter_ns, its wall ns, the
    wait for the loop after it was in, how it was known). The read's own stamp unless the
    connection's watch knows the bytes' arrival (a kernel receive stamp, or
    TCP_INFO's lower bound; ``stagetrace._loopwait``)."""
    recv = time.perf_counter_ns()
    recv_unix = _ANCHOR.wall_ns(recv)
    if conn is None:
        return recv, recv_unix, None, None
    arrival = conn.arrival(recv, recv_unix, _loopwait.wire_len(raw))
    if arrival is None or arrival.at_ns > recv:
        return recv, recv_unix, None, None
    return arrival.at_ns, _ANCHOR.wall_ns(arrival.at_ns), arrival.loop_wait_ns, arrival.source


def _main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(description="A stagetrace relay (gateway) in front of a policy server.")
    ap.add_argument("downstream", help="the policy server's ws:// URL (or the next relay's)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8001, help="0 picks a free port")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO)

    async def main() -> None:
        relay = Relay(args.downstream, args.host, args.port)
        port = await relay.start()
        print(f"relaying ws://{args.host}:{port} -> {args.downstream}", flush=True)
        await relay.run()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())


if __name__ == "__main__":
    _main()
