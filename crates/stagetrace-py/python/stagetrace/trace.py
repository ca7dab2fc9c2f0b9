"""Trace continuation for Python services in the middle (issue 11, item 1):
a relay, or a policy server whose handler calls another service, sends on
its caller's trace by the Rust core's W3C Trace Context Level 2 rules
(``docs/protocol.md``, "Trace continuation").

A neutral module: :mod:`stagetrace.server` sets the request being handled
(:func:`continuing`), :mod:`stagetrace.client` and :mod:`stagetrace.relay`
read it; none of them imports another for it.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
from collections.abc import Iterator
from typing import Any

from . import _native

__all__ = ["Continued", "continue_trace", "continuing", "incoming", "outgoing"]


@dataclasses.dataclass(frozen=True)
class Continued:
    """What a service in the middle sends on for one request."""

    #: The ``traceparent`` to send: the caller's trace id, the sending span's
    #: id, the caller's sampled and random flags (a new trace without a
    #: usable caller context).
    traceparent: str
    #: The ``tracestate`` to send (the caller's list, combined and checked),
    #: or None.
    tracestate: str | None
    #: The caller's trace id (hex), None when a new trace was started.
    trace_id: str | None
    #: The caller's ``traceparent`` values were rejected (malformed, or more
    #: than one): one rejected header to count.
    rejected_traceparent: bool = False
    #: Its ``tracestate`` lines were rejected or repaired: one to count.
    rejected_tracestate: bool = False

    def headers(self) -> dict[str, str]:
        """As request map entries / HTTP headers."""
        out = {"traceparent": self.traceparent}
        if self.tracestate is not None:
            out["tracestate"] = self.tracestate
        return out


def new_span_id() -> bytes:
    """A random, non-zero 8-byte span id."""
    while True:
        span = os.urandom(8)
        if span != bytes(8):
            return span


def continue_trace(traceparents: list[Any], tracestates: list[Any], span_id: bytes | None = None) -> Continued:
    """From every ``traceparent`` value and ``tracestate`` line of one
    request (``str`` or ``bytes``, in the order received), what to send on.

    The Rust core decides (``TraceContext::extract``: several
    ``traceparent`` values are no context, ``tracestate`` lines are
    combined, a repeated key keeps its left-most member, a malformed list is
    dropped whole; then the continued parent and the 512-character cut).
    ``span_id`` (8 bytes) is the sending span's id, a random one when
    omitted. Without a usable context a new trace starts: a random trace id,
    flags ``03`` (sampled, random). Never raises for any header value.
    """
    span = span_id if span_id is not None else new_span_id()
    tp, ts, trace_id, bad_tp, bad_ts = _native.continue_trace(list(traceparents), list(tracestates), span)
    if tp is None:
        trace = os.urandom(16)
        while trace == bytes(16):
            trace = os.urandom(16)
        return Continued(f"00-{trace.hex()}-{span.hex()}-03", None, None, bad_tp, bad_ts)
    return Continued(tp, ts, trace_id, bad_tp, bad_ts)


# The caller's (traceparent, tracestate) of the request being handled in
# this thread / task, when it sent a valid one.
_incoming: contextvars.ContextVar[tuple[str, str | None] | None] = contextvars.ContextVar(
    "stagetrace_incoming_trace", default=None
)


def incoming() -> tuple[str, str | None] | None:
    """The caller's ``(traceparent, tracestate)`` of the request being
    handled here, or None (no request, or it carried no valid context)."""
    return _incoming.get()


@contextlib.contextmanager
def continuing(traceparent: Any, tracestate: str | None = None) -> Iterator[None]:
    """Handle a request under its caller's trace: inside the block,
    :func:`outgoing` and ``TracedClientPolicy`` continue that trace.
    ``traceparent`` is the caller's (a ``str``, or a
    ``stagetrace.server.TraceParent``); None continues nothing."""
    value = None if traceparent is None else (str(traceparent), tracestate)
    token = _incoming.set(value)
    try:
        yield
    finally:
        _incoming.reset(token)


def outgoing(span_id: bytes | None = None) -> Continued | None:
    """What an outgoing call made while handling a request sends, continuing
    the caller's trace (``span_id``: the calling span's id, random when
    omitted); None outside :func:`continuing` or without a caller context."""
    ctx = _incoming.get()
    if ctx is None:
        return None
    tp, ts = ctx
    return continue_trace([tp], [] if ts is None else [ts], span_id)
