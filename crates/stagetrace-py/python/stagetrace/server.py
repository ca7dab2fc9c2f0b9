"""stagetrace for Python policy servers (openpi / LingBot-VA WebSocket + msgpack).

What it is
----------
``stagetrace.server``: dependencies ``msgpack`` and ``numpy`` (``websockets``
only for :func:`serve` and :class:`PolicyServer`); it lets a policy server tell a `stagetrace` client where a
call's time went on the server side:

* it honours the W3C ``traceparent`` / ``tracestate`` the client puts in the
  request map (a malformed, oversized or hostile value is ignored and counted,
  never raised);
* it stamps the ``server_timing`` map of each response: openpi's ``infer_ms``
  and ``prev_total_ms`` are kept, and ``recv_unix_ns`` (server wall time when
  the whole request had arrived), ``total_ns`` (receive to send, monotonic) and
  ``queue_ns`` / ``infer_ns`` and its parts ``pre_ns`` / ``model_ns`` /
  ``post_ns`` (and ``device_ns``) when known are added. With those the
  client splits its round trip into uplink, server and downlink;
* it learns when a request's bytes arrived when the event loop was busy as
  they came in (another robot's inference on the loop, a long collection):
  the receive stamp is placed at the arrival and the wait for the loop is
  sent as ``loop_wait_ns``, part of ``queue_ns``, not left in the uplink
  (``docs/stages.md``, "Event loops");
* a stage ends when the device arrays it produced are ready (JAX, CUDA:
  :mod:`stagetrace.device`), so ``model`` is the model's time, not its
  dispatch;
* it says what a mitigation did with the request, as the Rust server's
  ``InferTimer`` does: ``t.set_batch_size(n)`` (the request ran in a batch of
  ``n``) and ``t.set_cache_hit(hit)`` (a result cache answered it, or missed)
  add ``batch_size`` (int) and ``cache`` (``"hit"`` / ``"miss"``) to
  ``server_timing``; the client puts them on the call's record.

Adding it to an existing server (the openpi ``WebsocketPolicyServer`` loop)::

    from stagetrace import server as st

    session = st.Session(websocket)             # one per connection
    while True:
        raw = await websocket.recv()
        t = session.received(frame=raw)         # stamp first, before unpacking
        obs = msgpack_numpy.unpackb(raw)
        t.read_trace(obs)                       # takes traceparent out of obs
        with continuing(t.trace, t.tracestate):  # its traced calls continue the trace
            with t.stage("pre"):
                inputs = policy.transform(obs)
            with t.stage("model") as s:
                outputs = s.result(policy.sample_actions(inputs))  # ends when ready
            with t.stage("post"):
                action = policy.untransform(outputs)
        t.stamp(action)                         # action["server_timing"] = {...}
        await websocket.send(packer.pack(action))
        t.sent()                                # feeds the next prev_total_ms
    # and session.close() when the connection ends

A policy served by :class:`PolicyServer` times its parts with this module's
:func:`stage` (``with st.stage("model") as s: y = s.result(f(x))``), which
is the current request's.

A server that batches requests calls ``t.set_batch_size(len(batch))`` on each
request of the batch; one with a result cache calls ``t.set_cache_hit(True)``
when the cache answered (the model did not run) and ``t.set_cache_hit(False)``
when it missed. A policy served by :class:`PolicyServer` may instead return
``batch_size`` / ``cache`` in its own ``server_timing`` map; a bad value there
is dropped and counted (``stats()["rejected_timing"]``), never sent.

(``continuing`` is ``stagetrace.trace.continuing``: inside it a
``TracedClientPolicy`` call, or ``stagetrace.trace.outgoing()`` for a call of
your own, continues the caller's trace; :class:`PolicyServer` does it for
you.)

Or, starting fresh, ``asyncio.run(st.serve(policy, "0.0.0.0", 8000, metadata))``.
A gateway in front of a policy server is :mod:`stagetrace.relay`; an
actuator controller acknowledging action chunks is :mod:`stagetrace.executor`.

Time sources: ``time.perf_counter_ns()`` for every duration (never a
difference of wall times); ``recv_unix_ns`` is the receive reading of that
clock turned into wall time through a (``time.time_ns()``, monotonic) pair
read right then, so a slewed wall clock cannot move it. The wire format is ``docs/protocol.md``.

The module is this file (the servers) and its parts, whose names it
re-exports: :mod:`stagetrace.codec` (msgpack with numpy arrays),
:mod:`stagetrace.trace` (W3C Trace Context: reading and continuing),
:mod:`stagetrace.timer` (``RequestTimer``, ``Session``, the response
encoder).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

# The module's parts (codec, timer, trace, _counters), re-exported: their names
# stay `stagetrace.server.*`, private ones included (the relay and the executor
# use them). noqa: F401 throughout.
from ._counters import _COUNTERS, stats
from ._listener import _Listener
from .codec import (
    DEFAULT_MAX_MESSAGE_BYTES,
    MalformedRequest,
    Packer,
    _as_text,
    packb,
    unpackb,
)
from .timer import (
    _ANCHOR,
    BATCH_SIZE_KEY,
    CACHE_KEY,
    MAX_BATCH_SIZE,
    SERVER_TIMING_KEY,
    RequestTimer,
    Session,
    Stage,
    _encode,
    _merged,
    current,
    encode_response,
    handling,
    received,
    stage,
)
from .trace import (
    MAX_TRACEPARENT_LEN,
    MAX_TRACESTATE_LEN,
    TRACEPARENT_KEY,
    TRACESTATE_KEY,
    TraceParent,
    continuing,
    parse_traceparent,
    parse_tracestate,
    read_trace,
)

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "MAX_BATCH_SIZE",
    "MAX_TRACEPARENT_LEN",
    "MAX_TRACESTATE_LEN",
    "MalformedRequest",
    "PolicyServer",
    "RequestTimer",
    "Session",
    "Stage",
    "TraceParent",
    "current",
    "encode_response",
    "handling",
    "packb",
    "Packer",
    "parse_traceparent",
    "parse_tracestate",
    "read_trace",
    "received",
    "serve",
    "stage",
    "stats",
    "unpackb",
]

logger = logging.getLogger("stagetrace.server")

# --------------------------------------------------------------------------
# A ready-made server, like openpi's WebsocketPolicyServer but instrumented.


class PolicyServer(_Listener):
    """Serves ``policy.infer(obs) -> dict`` over WebSocket + msgpack (openpi
    protocol) with ``traceparent`` honoured and ``server_timing`` stamped.

    ``policy`` is any object with ``infer(obs)``; inside it, this module's
    :func:`stage` times the request's parts (``pre``, ``model``, ``post``).
    The action it returns is waited for when it holds device arrays (JAX,
    CUDA), so ``infer`` ends when the action exists (``sync_device=False``:
    when ``infer`` returns). When the returned dict has its own
    ``server_timing`` map those keys are kept.
    A policy that batches or caches says so there: ``batch_size`` (a
    positive int) and ``cache`` (``"hit"`` / ``"miss"``); a bad value is
    dropped and counted in ``stats()["rejected_timing"]``.
    Connections are served one request at a time, each in order.
    """

    def __init__(
        self,
        policy: Any,
        host: str = "0.0.0.0",
        port: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        *,
        in_thread: bool = False,
        on_request: Callable[[RequestTimer, Mapping[str, Any]], None] | None = None,
        max_message_bytes: int | None = DEFAULT_MAX_MESSAGE_BYTES,
        sync_device: bool | None = None,
    ) -> None:
        """``in_thread`` runs ``infer`` in a worker thread so other
        connections and pings keep being served while the model runs
        (without it, a request that arrives while another robot's model
        holds the loop waits, and that wait is reported as ``loop_wait_ns``).
        ``max_message_bytes`` bounds one request (a larger one closes the
        connection with 1009); ``None`` lifts the limit, as openpi does.
        ``on_request(timer, server_timing)`` is called after each response
        has been sent (for logs: ``timer.trace``, ``timer.span``); an
        exception it raises is logged, not propagated."""
        self._policy = policy
        self._on_request = on_request
        self._max_size = max_message_bytes
        self._host = host
        self._port = port
        self._metadata = dict(metadata or {})
        self._in_thread = in_thread
        self._sync_device = sync_device
        self._server: Any = None

    async def _handler(self, websocket: Any) -> None:
        packer = Packer()
        with Session(websocket) as session:
            await websocket.send(packer.pack(self._metadata))
            while await self._serve_one(websocket, session, packer):
                pass

    async def _serve_one(self, websocket: Any, session: Session, packer: Packer) -> bool:
        """Answer one request; False when the connection is done."""
        import websockets.exceptions
        from websockets.frames import CloseCode

        try:
            raw = await websocket.recv()
        except websockets.exceptions.ConnectionClosed:
            return False
        timer = session.received(frame=raw)
        try:
            obs = unpackb(raw)
            if not isinstance(obs, dict):
                raise MalformedRequest(f"request must be a msgpack map, got {type(obs).__name__}")
        except MalformedRequest as e:
            _COUNTERS.add("bad_requests")
            logger.warning("bad request from %s: %s", websocket.remote_address, e)
            # A close reason is at most 123 bytes of UTF-8.
            reason = str(e).encode()[:120].decode(errors="ignore")
            with contextlib.suppress(websockets.exceptions.ConnectionClosed):
                await websocket.close(code=CloseCode.INVALID_DATA, reason=reason)
            return False
        timer.read_trace(obs)
        try:
            # A traced call the policy makes continues the caller's trace,
            # and its stage() calls are this request's (to_thread copies
            # the context, so in_thread does too). The bracket ends when
            # the action's device arrays are ready.
            with continuing(timer.trace, timer.tracestate), handling(timer):
                with timer._bracket(self._sync_device) as whole:
                    if self._in_thread:
                        action = whole.result(await asyncio.to_thread(self._policy.infer, obs))
                    else:
                        action = whole.result(self._policy.infer(obs))
            if not isinstance(action, Mapping):
                raise TypeError(f"policy.infer must return a dict, got {type(action).__name__}")
            frame, timing = _encode(action, timer, packer)
        except Exception:
            # As openpi does: the traceback goes to the client, then close.
            with contextlib.suppress(websockets.exceptions.ConnectionClosed):
                await websocket.send(traceback.format_exc())
                await websocket.close(
                    code=CloseCode.INTERNAL_ERROR,
                    reason="Internal server error. Traceback included in previous frame.",
                )
            raise
        try:
            await websocket.send(frame)
        except websockets.exceptions.ConnectionClosed:
            return False
        timer.sent()
        if self._on_request is not None:
            try:
                self._on_request(timer, timing)
            except Exception:
                logger.exception("on_request hook failed")
        return True


async def serve(
    policy: Any,
    host: str = "0.0.0.0",
    port: int = 8000,
    metadata: Mapping[str, Any] | None = None,
    **options: Any,
) -> None:
    """Serve ``policy`` until cancelled: ``asyncio.run(serve(policy, port=8000))``.
    ``options`` are :class:`PolicyServer`'s (``in_thread``, ``on_request``,
    ``max_message_bytes``, ``sync_device``)."""
    await PolicyServer(policy, host, port, metadata, **options).run()


# --------------------------------------------------------------------------
# `python3 -m stagetrace.server --port 8000 --model-ms 20`: a stand-in policy.


class _SleepPolicy:
    """A model that costs ``model_ms`` and returns an action chunk of
    ``horizon`` x ``dof`` float32. It sleeps, then spin-waits the last
    ``spin_ms`` for sub-ms accuracy (``spin_ms >= model_ms``: spin throughout,
    immune to sleep overshoot on a loaded machine)."""

    def __init__(self, model_ms: float, horizon: int = 10, dof: int = 7, spin_ms: float = 1.0) -> None:
        self._model_ns = int(model_ms * 1e6)
        self._spin_ns = int(spin_ms * 1e6)
        self._action = np.zeros((horizon, dof), dtype=np.float32)

    def infer(self, obs: Mapping[str, Any]) -> dict[str, Any]:
        end = time.perf_counter_ns() + self._model_ns
        coarse = (self._model_ns - self._spin_ns) / 1e9
        if coarse > 0:
            time.sleep(coarse)
        while time.perf_counter_ns() < end:
            pass
        return {"actions": self._action}


def _main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(description="A stand-in policy server with stagetrace server timing.")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    ap.add_argument("--model-ms", type=float, default=20.0, help="simulated inference cost")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO)

    async def main() -> None:
        server = PolicyServer(_SleepPolicy(args.model_ms), args.host, args.port, {"server": "stagetrace.server demo"})
        port = await server.start()
        # One parseable line for scripts that start us with --port 0.
        print(f"listening on ws://{args.host}:{port}", flush=True)
        await server.run()

    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(main())
    except OSError as e:
        # A busy port (or an address not on this machine) is a usage error,
        # not a crash: say which and how to go on, exit 2, no traceback.
        what = "is in use" if e.errno == errno.EADDRINUSE else f"cannot be opened ({e.strerror or e})"
        print(
            f"stagetrace.server: ws://{args.host}:{args.port} {what}; "
            "stop what holds it, or pick another --port (0 picks a free one)",
            file=sys.stderr,
        )
        raise SystemExit(2) from None


if __name__ == "__main__":
    _main()
