"""stagetrace for gRPC (``grpcio``): trace context out in the request's
metadata, the server's timing back in its trailing metadata.

The same map a WebSocket server puts in a response's ``server_timing``
(``docs/protocol.md``) travels here as the trailing metadata entry
``stagetrace-timing-bin`` (msgpack), and the caller's W3C ``traceparent`` /
``tracestate`` as request metadata, so a gRPC call is split into uplink,
server (queue, infer) and downlink like any other.

Robot side: a call made inside ``with st.call()`` through an intercepted
channel gets its transport stage, with the server's timing::

    import grpc
    import stagetrace as st
    from stagetrace.grpc import client_interceptor

    channel = grpc.intercept_channel(grpc.insecure_channel(addr), client_interceptor())
    stub = MyPolicyStub(channel)
    with st.call(kind="infer"):
        reply = stub.Infer(request)          # transport stage, traceparent out

Server side::

    from stagetrace.grpc import server_interceptor, timer

    server = grpc.server(pool, interceptors=[server_interceptor()])

    def Infer(self, request, context):
        with timer().stage("infer"):          # the request's RequestTimer
            return run_policy(request)

A request that waited for a worker of the server's thread pool waited on
the server: ``queue`` (its part ``accept_wait``), never uplink. The
interceptor sees each call arrive (grpcio runs it in its serving thread,
before the call is handed to the pool) and sees the handler start (in the
worker): the difference is sent as ``accept_wait_ns`` and the receive stamp
is the arrival. A request-streaming method's request has arrived when its
iterator is exhausted (``timer()`` is None before): its receive stamp is the
call's arrival plus the stream's reading, from the handler's first read to
the moment grpcio's serving thread handed the last message over (the
transfer, ``transfer_ns``), so a wait for a worker is ``accept_wait`` and
chunks still on their way are uplink, while the handler's own work before
its first read and its thread's wait to run again are the server's. What
no hook can see is the serving thread's own wait before it runs any Python
for the call (the GIL another thread holds, a core it waits for): that
stays in the uplink. The response's stamp is taken when
the handler returns it: gRPC serialises and writes it after that, which
lands in the downlink.

Robot side, ``tx_wait``: grpcio's C core writes the request on threads of
its own, out of Python's reach. For a request-streaming call the robot's
own part ends when grpcio's request thread takes the first message (grpc
sends it from there without the GIL): a thread of the robot holding the
GIL, or the robot's wait for a core, before that is the robot's. A unary
call hands its request to the C core inside one grpcio call: no
``tx_wait``, and no ``rx_wait`` on any gRPC call (the socket is grpc's).

Nothing here raises into the host: a malformed ``traceparent`` or timing
entry is ignored and counted (``stagetrace.server.stats()``).
"""

from __future__ import annotations

import contextvars
import logging
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import grpc

from . import _host, _mark
from ._counters import _COUNTERS
from ._native import clock_ns as _clock_ns
from ._native import current as _current_call
from .codec import packb, unpackb
from .timer import RequestTimer, received
from .trace import TRACEPARENT_KEY, TRACESTATE_KEY, continuing, outgoing

__all__ = [
    "TIMING_KEY",
    "client_interceptor",
    "server_interceptor",
    "timer",
    "timing_of",
]

logger = logging.getLogger("stagetrace")

#: Trailing metadata key of the server's timing map (msgpack; a ``-bin``
#: key, so gRPC carries the bytes as they are).
TIMING_KEY = "stagetrace-timing-bin"

_timer: contextvars.ContextVar[RequestTimer | None] = contextvars.ContextVar(
    "stagetrace_grpc_timer", default=None
)


def timer() -> RequestTimer | None:
    """The :class:`~stagetrace.server.RequestTimer` of the request this
    handler serves (None outside an intercepted handler, or before a
    streamed request has fully arrived)."""
    return _timer.get()


# --------------------------------------------------------------------------
# Metadata helpers.


def _md_value(metadata: Sequence[tuple[str, Any]] | None, key: str) -> Any:
    for k, v in metadata or ():
        if k == key:
            return v
    return None


def timing_of(trailing_metadata: Sequence[tuple[str, Any]] | None) -> dict[str, Any] | None:
    """The server's timing map from a call's trailing metadata, or None
    (absent, or not a msgpack map: counted as ``rejected_timing``)."""
    raw = _md_value(trailing_metadata, TIMING_KEY)
    if raw is None:
        return None
    try:
        timing = unpackb(bytes(raw))
    except Exception:  # noqa: BLE001 - a peer's bytes must never raise into the caller
        timing = None
    if not isinstance(timing, dict):
        _COUNTERS.add("rejected_timing")
        return None
    return timing


class _Details(NamedTuple):
    """``grpc.ClientCallDetails`` with other metadata (the interface has no
    constructor of its own)."""

    method: str
    timeout: float | None
    metadata: Sequence[tuple[str, Any]] | None
    credentials: Any
    wait_for_ready: bool | None
    compression: Any


class _CallDetails(_Details, grpc.ClientCallDetails):
    pass


def with_trace(details: grpc.ClientCallDetails, traceparent: str | None) -> grpc.ClientCallDetails:
    """``details`` with the trace context of an outgoing call added: inside
    a request this process is handling, the caller's trace continued; else
    ``traceparent`` (a transport stage's own)."""
    if traceparent is None:
        return details
    cont = outgoing(bytes.fromhex(traceparent[36:52]))
    headers = cont.headers() if cont is not None else {TRACEPARENT_KEY: traceparent}
    metadata = [(k, v) for k, v in (details.metadata or ()) if k not in (TRACEPARENT_KEY, TRACESTATE_KEY)]
    metadata.extend(headers.items())
    return _CallDetails(
        details.method,
        details.timeout,
        metadata,
        details.credentials,
        getattr(details, "wait_for_ready", None),
        getattr(details, "compression", None),
    )


def _reason(code: Any) -> str:
    """The record's failure reason for a gRPC status (the Rust client's words)."""
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return "timeout"
    if code == grpc.StatusCode.UNAVAILABLE:
        return "disconnected"
    if code == grpc.StatusCode.CANCELLED:
        return "cancelled"
    return "server error"


# --------------------------------------------------------------------------
# Robot side.


class _ClientInterceptor(
    grpc.UnaryUnaryClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
):
    """A transport stage for each unary-response call made inside a call."""

    def intercept_unary_unary(self, continuation: Callable, details: Any, request: Any) -> Any:
        return self._traced(continuation, details, request)

    def intercept_stream_unary(self, continuation: Callable, details: Any, request_iterator: Any) -> Any:
        return self._traced(continuation, details, request_iterator, streamed=True)

    @staticmethod
    def _traced(continuation: Callable, details: Any, request: Any, streamed: bool = False) -> Any:
        call = _current_call.get()
        if call is None:
            return continuation(details, request)
        transport = call.transport(details.method)
        handed = FirstTaken(request) if streamed else None
        try:
            outcome = continuation(with_trace(details, transport.traceparent()), request if handed is None else handed)
            if handed is not None:
                handed.hand_to(transport)
            # Blocks until the response and its trailers are in: the
            # transport stage ends there.
            error = outcome.exception()
            if error is None:
                timing = timing_of(outcome.trailing_metadata())
                if timing is not None:
                    transport.server_timing(timing)
            else:
                reason = _reason(outcome.code())
                transport.fail(reason)
                # The error the stub raises from here carries the reason,
                # so the enclosing call keeps it (not "exception").
                _mark(error, reason)
            return outcome
        except BaseException:
            transport.fail("exception")
            raise
        finally:
            transport.close()


class FirstTaken:
    """A streamed request, noting when grpcio took its first message: the
    robot's ``tx_wait`` ends there (grpcio's request thread serialises it
    and hands it to the C core, which writes it on threads of its own,
    GIL or not). Not the send's completion: a message larger than the
    stream's HTTP/2 flow-control window cannot all be sent before the server
    reads it, so that stamp could charge a busy server to the robot."""

    __slots__ = ("_inner", "taken")

    def __init__(self, inner: Any) -> None:
        self._inner = iter(inner)
        #: When the first message was taken (``_native.clock_ns()``), or None.
        self.taken: int | None = None

    def __iter__(self) -> FirstTaken:
        return self

    def __next__(self) -> Any:
        item = next(self._inner)
        if self.taken is None:
            self.taken = _clock_ns()
        return item

    def hand_to(self, transport: Any) -> None:
        """Give the transport span the stamp (before it ends): as the end of
        ``tx_wait`` only. The call's headers went out before it (grpcio
        sends them as the call starts), so it is no stamp of the request's
        first byte for the clock estimate."""
        if self.taken is not None:
            transport.request_sent(None, self.taken)


def client_interceptor() -> Any:
    """An interceptor for ``grpc.intercept_channel``: each unary-response
    call (unary or request-streaming) made inside ``with st.call()`` is the
    call's transport stage, its trace context in the request metadata and
    the server's timing read from the trailing metadata. Calls made outside
    a call pass through untouched."""
    return _ClientInterceptor()


# --------------------------------------------------------------------------
# Server side.


def _set_timing(context: grpc.ServicerContext, t: RequestTimer, extra: dict[str, Any] | None = None) -> None:
    """Add ``t``'s timing map (and ``extra``'s keys) to the response's
    trailing metadata, keeping what the handler set there itself."""
    try:
        existing = tuple(context.trailing_metadata() or ()) if hasattr(context, "trailing_metadata") else ()
        kept = tuple((k, v) for k, v in existing if k != TIMING_KEY)
        timing = with_receive(t.server_timing(), extra)
        context.set_trailing_metadata(kept + ((TIMING_KEY, packb(timing)),))
    except Exception:  # noqa: BLE001 - timing must never fail the request
        _COUNTERS.add("timing_errors")
        logger.debug("could not set the timing trailer", exc_info=True)


def _start(metadata: Sequence[tuple[str, Any]] | None) -> RequestTimer:
    t = received()
    t.read_trace(dict(metadata or ()), pop=False)
    return t


def place_receive(
    t: RequestTimer,
    arrived: int | None,
    picked: int,
    streamed: bool,
    reading: int | None = None,
    whole: int | None = None,
    woken: int | None = None,
) -> dict[str, Any]:
    """Put ``t``'s receive stamp where the request was in, and return the
    keys the timing map needs for it (``perf_counter_ns`` stamps).

    ``arrived``: the call arrived (grpcio's serving thread, before the
    pool); ``picked``: a worker started the handler; ``t`` was created when
    the whole request had been read (the same moment as ``picked`` for a
    unary request, which grpcio reads before the handler runs);
    ``reading``: when the handler first read the stream (``picked`` when
    not given); ``whole``: when grpcio handed the request's last message
    over (its serving thread, :class:`_MessageStamps`; ``t``'s creation when
    not given). With the arrival, the wait for a worker is
    ``accept_wait_ns`` (inside ``queue_ns``) and the receive stamp is the
    arrival plus the stream's reading, from the handler's first read to
    the last message handed over (its chunks' transfer: uplink, not a
    wait; ``transfer_ns``). What the handler did between the pickup and its
    first read (its own logging, a garbage collection), and its thread's
    wait to run again once the last message was handed over, are the
    server's, not the transfer. Without the arrival the receive stamp is
    the pickup, sent as such (``recv_at_pickup``): the robot estimates the
    arrival from the path's delay.

    ``woken``: the worker thread's run-queue wait since it last went idle
    (:func:`stagetrace._host.woken_run_wait_ns`). A free worker that starts
    late because the host's cores were busy waited for a core, not for the
    pool: that part of ``accept_wait_ns`` is sent as ``rx_wait_ns`` (the
    request was in and its thread waited for a core: the host's CPU, as
    the asyncio server's kernel-stamped figure), so the report can tell a
    busy host from a starved pool."""
    complete = t.read_ns
    picked = min(picked, complete)
    if arrived is not None and arrived <= picked:
        first = picked if reading is None else min(max(reading, picked), complete)
        last = complete if whole is None else min(max(whole, first), complete)
        transfer = last - first
        recv = arrived + transfer
        wait = picked - arrived
        extra: dict[str, Any] = {"accept_wait_ns": wait}
        if woken is not None:
            extra["rx_wait_ns"] = min(max(woken, 0), wait)
        if streamed:
            extra["transfer_ns"] = transfer
    else:
        recv, extra = picked, {"recv_at_pickup": 1}
    t.received_at(recv)
    return extra


def with_receive(timing: dict[str, Any], extra: dict[str, Any] | None) -> dict[str, Any]:
    """``timing`` with :func:`place_receive`'s keys. The wait for a worker is
    a part of ``queue_ns``: a handler that timed no stage still sends that
    much queue (what it did after the pickup is unsplit server time)."""
    if extra:
        timing.update(extra)
        if "queue_ns" not in timing and "accept_wait_ns" in extra:
            timing["queue_ns"] = extra["accept_wait_ns"]
    return timing


def _unary(behavior: Callable, metadata: Any, arrived: int | None) -> Callable:
    def handle(request: Any, context: grpc.ServicerContext) -> Any:
        woken = _host.woken_run_wait_ns()
        t = _start(metadata)
        extra = place_receive(t, arrived, t.read_ns, streamed=False, woken=woken)
        token = _timer.set(t)
        try:
            with continuing(t.trace, t.tracestate):
                return behavior(request, context)
        finally:
            _timer.reset(token)
            _set_timing(context, t, extra)
            t.sent()
            # The worker goes back to wait for its next request.
            _host.mark_idle()

    return handle


class _MessageStamps:
    """A call's request deserializer, noting when each message was handed
    over: grpcio runs it in its serving thread as it takes the message from
    its C core, before it wakes the handler's thread (whose wait to run
    again is the server's, not the transfer's)."""

    __slots__ = ("_inner", "last")

    def __init__(self, inner: Callable[[bytes], Any] | None) -> None:
        self._inner = inner
        #: When the latest message was handed over (``perf_counter_ns``).
        self.last: int | None = None

    def __call__(self, data: bytes) -> Any:
        self.last = time.perf_counter_ns()
        return data if self._inner is None else self._inner(data)


class _Arrival:
    """A streamed request's iterator: the request has arrived when it is
    exhausted, or when a message ``is_last`` says ends it (a handler that
    stops reading there never sees the stream's end), and the timer starts
    then, its receive stamp placed by :func:`place_receive` (``arrived``:
    the call's arrival, when known; ``messages``: the call's
    :class:`_MessageStamps`, when known; the handler started when this was
    made)."""

    def __init__(
        self,
        inner: Iterator[Any],
        metadata: Any,
        is_last: Callable[[Any], bool] | None = None,
        arrived: int | None = None,
        messages: _MessageStamps | None = None,
    ) -> None:
        self._picked = time.perf_counter_ns()
        #: The worker's wait for a core since it went idle (place_receive).
        self._woken = _host.woken_run_wait_ns()
        #: When the handler first asked for a message (the stream's reading
        #: starts there, not at the pickup).
        self._reading: int | None = None
        self._messages = messages
        self._inner = inner
        self._metadata = metadata
        self._is_last = is_last
        self._came = arrived
        self.timer: RequestTimer | None = None
        #: The timing map's keys for the receive stamp (:func:`place_receive`).
        self.extra: dict[str, Any] = {}

    def __iter__(self) -> _Arrival:
        return self

    def __next__(self) -> Any:
        if self._reading is None:
            self._reading = time.perf_counter_ns()
        try:
            item = next(self._inner)
        except StopIteration:
            # The stream's end: no message was handed over for it.
            self._arrived(None)
            raise
        if self._is_last is not None:
            try:
                last = bool(self._is_last(item))
            except Exception:  # noqa: BLE001 - a foreign message: keep reading
                last = False
            if last:
                self._arrived(self._messages.last if self._messages is not None else None)
        return item

    def _arrived(self, whole: int | None) -> None:
        if self.timer is None:
            t = _start(self._metadata)
            self.extra = place_receive(
                t,
                self._came,
                self._picked,
                streamed=True,
                reading=self._reading,
                whole=whole,
                woken=self._woken,
            )
            self.timer = t
            _timer.set(t)


def _streamed(behavior: Callable, metadata: Any, arrived: int | None, messages: _MessageStamps | None) -> Callable:
    def handle(request_iterator: Iterator[Any], context: grpc.ServicerContext) -> Any:
        arrival = _Arrival(request_iterator, metadata, arrived=arrived, messages=messages)
        # The handler runs in this context: the timer _Arrival sets once
        # the stream ends is visible to it, and gone after.
        ctx = contextvars.copy_context()
        try:
            return ctx.run(behavior, arrival, context)
        finally:
            if arrival.timer is not None:
                _set_timing(context, arrival.timer, arrival.extra)
                arrival.timer.sent()
            _host.mark_idle()

    return handle


#: The attributes :class:`ArrivalStamped` leaves on grpcio's request
#: iterator: the call's arrival, and its :class:`_MessageStamps`.
_ARRIVAL_ATTR = "_stagetrace_arrival_ns"
_MESSAGES_ATTR = "_stagetrace_messages"


class ArrivalStamped:
    """A request-streaming handler registered without an interceptor (a
    servicer's method: ``stagetrace.lerobot``) that still learns when its
    call arrived, before grpcio's thread pool.

    grpcio (1.73, the version LeRobot 0.4 pins) asks a handler for its
    ``experimental_thread_pool`` in its serving thread, as the call arrives
    and before the call is queued for a worker. This property stamps then,
    leaves the stamp on the call's request iterator (the object the handler
    is given: the pairing is exact), and says there is no pool of its own,
    so the server's pool serves the call as before. It also wraps the
    iterator's deserializer in :class:`_MessageStamps`, so the reading of
    the stream ends where grpcio handed its last message over. Where grpcio
    does not ask, or its frames differ, no stamp is left and the handler's
    receive stamp is its pickup, sent as such (``recv_at_pickup``)."""

    __slots__ = ("_fn",)

    def __init__(self, fn: Callable[[Any, Any], Any]) -> None:
        self._fn = fn

    def __call__(self, request_iterator: Any, context: Any) -> Any:
        return self._fn(request_iterator, context)

    @property
    def experimental_thread_pool(self) -> Any:
        now = time.perf_counter_ns()
        try:
            # 0: here; 1: grpcio's _select_thread_pool_for_behavior; 2: the
            # _handle_stream_unary that made the call's request iterator.
            frame = sys._getframe(2)
            if frame.f_code.co_name == "_handle_stream_unary":
                it = frame.f_locals.get("request_iterator")
                if it is not None:
                    setattr(it, _ARRIVAL_ATTR, now)
                    if hasattr(it, "_request_deserializer"):
                        messages = _MessageStamps(it._request_deserializer)
                        it._request_deserializer = messages
                        setattr(it, _MESSAGES_ATTR, messages)
        except Exception:  # noqa: BLE001 - another grpcio: no stamp, the pickup stands
            pass
        # No pool of its own (hasattr() is False): grpcio uses the server's.
        raise AttributeError("experimental_thread_pool")


def arrival_of(request_iterator: Any) -> int | None:
    """The arrival :class:`ArrivalStamped` left on a call's request
    iterator (``perf_counter_ns``), or None."""
    v = getattr(request_iterator, _ARRIVAL_ATTR, None)
    return v if isinstance(v, int) else None


def messages_of(request_iterator: Any) -> _MessageStamps | None:
    """The :class:`_MessageStamps` :class:`ArrivalStamped` left on a call's
    request iterator, or None."""
    v = getattr(request_iterator, _MESSAGES_ATTR, None)
    return v if isinstance(v, _MessageStamps) else None


class _ServerInterceptor(grpc.ServerInterceptor):
    def intercept_service(self, continuation: Callable, details: Any) -> Any:
        # grpcio runs this in its serving thread as the call arrives,
        # before the call waits for a worker of the pool.
        arrived = time.perf_counter_ns()
        handler = continuation(details)
        if handler is None:
            return None
        metadata = details.invocation_metadata
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                _unary(handler.unary_unary, metadata, arrived),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_unary is not None:
            messages = _MessageStamps(handler.request_deserializer)
            return grpc.stream_unary_rpc_method_handler(
                _streamed(handler.stream_unary, metadata, arrived, messages),
                request_deserializer=messages,
                response_serializer=handler.response_serializer,
            )
        # Streamed responses have no one send stamp: passed through.
        return handler


def server_interceptor() -> Any:
    """An interceptor for ``grpc.server(..., interceptors=[...])``: each
    unary-response method honours the caller's trace context and sends its
    timing (receive → the handler returned, queue and infer when timed
    with :func:`timer`, the wait for a worker of the pool as
    ``accept_wait``) in the trailing metadata."""
    return _ServerInterceptor()
