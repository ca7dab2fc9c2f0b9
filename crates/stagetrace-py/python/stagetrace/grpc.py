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

A request-streaming method's request has arrived when its iterator is
exhausted: its timer starts then (``timer()`` is None before). The
response's stamp is taken when the handler returns it: gRPC serialises and
writes it after that, which lands in the downlink.

Nothing here raises into the host: a malformed ``traceparent`` or timing
entry is ignored and counted (``stagetrace.server.stats()``).
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import grpc

from . import _mark
from ._counters import _COUNTERS
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
        return self._traced(continuation, details, request_iterator)

    @staticmethod
    def _traced(continuation: Callable, details: Any, request: Any) -> Any:
        call = _current_call.get()
        if call is None:
            return continuation(details, request)
        transport = call.transport(details.method)
        try:
            outcome = continuation(with_trace(details, transport.traceparent()), request)
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


def client_interceptor() -> Any:
    """An interceptor for ``grpc.intercept_channel``: each unary-response
    call (unary or request-streaming) made inside ``with st.call()`` is the
    call's transport stage, its trace context in the request metadata and
    the server's timing read from the trailing metadata. Calls made outside
    a call pass through untouched."""
    return _ClientInterceptor()


# --------------------------------------------------------------------------
# Server side.


def _set_timing(context: grpc.ServicerContext, t: RequestTimer) -> None:
    """Add ``t``'s timing map to the response's trailing metadata, keeping
    what the handler set there itself."""
    try:
        existing = tuple(context.trailing_metadata() or ()) if hasattr(context, "trailing_metadata") else ()
        kept = tuple((k, v) for k, v in existing if k != TIMING_KEY)
        context.set_trailing_metadata(kept + ((TIMING_KEY, packb(t.server_timing())),))
    except Exception:  # noqa: BLE001 - timing must never fail the request
        _COUNTERS.add("timing_errors")
        logger.debug("could not set the timing trailer", exc_info=True)


def _start(metadata: Sequence[tuple[str, Any]] | None) -> RequestTimer:
    t = received()
    t.read_trace(dict(metadata or ()), pop=False)
    return t


def _unary(behavior: Callable, metadata: Any) -> Callable:
    def handle(request: Any, context: grpc.ServicerContext) -> Any:
        t = _start(metadata)
        token = _timer.set(t)
        try:
            with continuing(t.trace, t.tracestate):
                return behavior(request, context)
        finally:
            _timer.reset(token)
            _set_timing(context, t)
            t.sent()

    return handle


class _Arrival:
    """A streamed request's iterator: the request has arrived when it is
    exhausted, or when a message ``is_last`` says ends it (a handler that
    stops reading there never sees the stream's end), and the timer starts
    then."""

    def __init__(self, inner: Iterator[Any], metadata: Any, is_last: Callable[[Any], bool] | None = None) -> None:
        self._inner = inner
        self._metadata = metadata
        self._is_last = is_last
        self.timer: RequestTimer | None = None

    def __iter__(self) -> _Arrival:
        return self

    def __next__(self) -> Any:
        try:
            item = next(self._inner)
        except StopIteration:
            self._arrived()
            raise
        if self._is_last is not None:
            try:
                last = bool(self._is_last(item))
            except Exception:  # noqa: BLE001 - a foreign message: keep reading
                last = False
            if last:
                self._arrived()
        return item

    def _arrived(self) -> None:
        if self.timer is None:
            self.timer = _start(self._metadata)
            _timer.set(self.timer)


def _streamed(behavior: Callable, metadata: Any) -> Callable:
    def handle(request_iterator: Iterator[Any], context: grpc.ServicerContext) -> Any:
        arrival = _Arrival(request_iterator, metadata)
        # The handler runs in this context: the timer _Arrival sets once
        # the stream ends is visible to it, and gone after.
        ctx = contextvars.copy_context()
        try:
            return ctx.run(behavior, arrival, context)
        finally:
            if arrival.timer is not None:
                _set_timing(context, arrival.timer)
                arrival.timer.sent()

    return handle


class _ServerInterceptor(grpc.ServerInterceptor):
    def intercept_service(self, continuation: Callable, details: Any) -> Any:
        handler = continuation(details)
        if handler is None:
            return None
        metadata = details.invocation_metadata
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                _unary(handler.unary_unary, metadata),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                _streamed(handler.stream_unary, metadata),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        # Streamed responses have no one send stamp: passed through.
        return handler


def server_interceptor() -> Any:
    """An interceptor for ``grpc.server(..., interceptors=[...])``: each
    unary-response method honours the caller's trace context and sends its
    timing (receive → the handler returned, queue and infer when timed
    with :func:`timer`) in the trailing metadata."""
    return _ServerInterceptor()
