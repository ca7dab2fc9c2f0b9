"""W3C Trace Context in the Python server module: reading a request's
``traceparent`` / ``tracestate`` (:func:`read_trace`, re-exported by
:mod:`stagetrace.server`), and trace continuation for Python services in the
middle: a relay, or a policy server whose handler calls another service, sends on
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
import re
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

from . import _native
from ._counters import _COUNTERS
from .codec import _as_text

__all__ = [
    "MAX_TRACEPARENT_LEN",
    "MAX_TRACESTATE_LEN",
    "Continued",
    "TraceParent",
    "continue_trace",
    "continuing",
    "incoming",
    "outgoing",
    "parse_traceparent",
    "parse_tracestate",
    "read_trace",
]

TRACEPARENT_KEY = "traceparent"
TRACESTATE_KEY = "tracestate"
#: Longest ``traceparent`` looked at (docs/protocol.md). Version 00 is
#: exactly 55 characters; later versions may append fields.
MAX_TRACEPARENT_LEN = 512
#: Longest ``tracestate`` looked at (docs/protocol.md; W3C: 32 members).
MAX_TRACESTATE_LEN = 8192
_MAX_TRACESTATE_MEMBERS = 32

_HEX_LC = frozenset("0123456789abcdef")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16
# W3C Trace Context, tracestate list-member (key "=" value); ASCII only.
_TS_KEY = re.compile(
    r"(?:[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13})\Z",
    re.ASCII,
)
_TS_VALUE = re.compile(r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]\Z", re.ASCII)


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
# this thread / task, when it sent a valid one. The native module's: a call
# started inside (``with st.call()``, ``TracedClientPolicy``) continues that
# trace in its own record, as a Rust call span under a remote parent.
_incoming: contextvars.ContextVar[tuple[str, str | None] | None] = _native.incoming


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


# --------------------------------------------------------------------------
# Reading a request's trace context (the policy server).


@dataclasses.dataclass(frozen=True)
class TraceParent:
    """A parsed W3C ``traceparent``: ids as lowercase hex strings."""

    version: int
    trace_id: str
    parent_id: str
    flags: int

    @property
    def sampled(self) -> bool:
        """The ``sampled`` trace flag."""
        return bool(self.flags & 0x01)

    def __str__(self) -> str:
        # We only ever emit version 00, whatever version we received.
        return f"00-{self.trace_id}-{self.parent_id}-{self.flags:02x}"

    def child(self) -> TraceParent:
        """A new span id in the same trace: the ``traceparent`` of the
        server-side span, for the server's own logs or tracer."""
        while True:
            span = os.urandom(8).hex()
            if span != _ZERO_SPAN:
                return TraceParent(0, self.trace_id, span, self.flags)


def _is_hex_lc(s: str) -> bool:
    return all(c in _HEX_LC for c in s)


def parse_traceparent(value: Any) -> TraceParent | None:
    """Parse a ``traceparent`` by the W3C Trace Context rules, or return None.

    Accepts ``str`` or ASCII ``bytes``. Version 00 must be exactly
    ``00-<32 hex>-<16 hex>-<2 hex>`` in lowercase with non-zero ids; a later
    version is parsed by its first four fields and may carry more after a
    ``-``; version ``ff`` is invalid. Surrounding spaces and tabs are
    ignored. Never raises; the caller counts a None.
    """
    s = _as_text(value, MAX_TRACEPARENT_LEN)
    if s is None:
        return None
    s = s.strip(" \t")  # optional whitespace around a header value
    if len(s) < 55:
        return None
    version = s[0:2]
    if not _is_hex_lc(version) or version == "ff":
        return None
    if version == "00" and len(s) != 55:
        return None
    if len(s) > 55 and s[55] != "-":
        return None
    if s[2] != "-" or s[35] != "-" or s[52] != "-":
        return None
    trace_id, parent_id, flags = s[3:35], s[36:52], s[53:55]
    if not (_is_hex_lc(trace_id) and _is_hex_lc(parent_id) and _is_hex_lc(flags)):
        return None
    if trace_id == _ZERO_TRACE or parent_id == _ZERO_SPAN:
        return None
    return TraceParent(int(version, 16), trace_id, parent_id, int(flags, 16))


def parse_tracestate(value: Any) -> str | None:
    """Validate a ``tracestate`` (W3C list of ``key=value`` members) and return
    it with empty members dropped, or None when it is invalid or too long."""
    s = _as_text(value, MAX_TRACESTATE_LEN)
    if s is None:
        return None
    members = [m.strip(" \t") for m in s.split(",")]
    members = [m for m in members if m]
    if len(members) > _MAX_TRACESTATE_MEMBERS:
        return None
    keys = set()
    for m in members:
        key, eq, val = m.partition("=")
        if not eq or not _TS_KEY.match(key) or not _TS_VALUE.match(val) or key in keys:
            return None
        keys.add(key)
    return ",".join(members) if members else None


def _lookup(request: Mapping[Any, Any], key: str) -> tuple[Any, Any]:
    """(stored key, value) for ``key`` given as str or as bytes; (None, None)."""
    if key in request:
        return key, request[key]
    bkey = key.encode()
    if bkey in request:
        return bkey, request[bkey]
    return None, None


def read_trace(request: Any, *, pop: bool = True) -> tuple[TraceParent | None, str | None]:
    """Take ``traceparent`` and ``tracestate`` from a request map.

    Returns ``(traceparent, tracestate)``; an absent key gives None silently,
    a present but invalid one gives None and is counted in :func:`stats`.
    With ``pop`` (the default) both keys are removed from a mutable request so
    the policy sees only the observation. Never raises.
    """
    if not isinstance(request, Mapping):
        return None, None
    tp_key, tp_raw = _lookup(request, TRACEPARENT_KEY)
    ts_key, ts_raw = _lookup(request, TRACESTATE_KEY)
    if pop and isinstance(request, MutableMapping):
        for k in (tp_key, ts_key):
            if k is not None:
                request.pop(k, None)
    tp = None
    if tp_key is not None:
        tp = parse_traceparent(tp_raw)
        if tp is None:
            _COUNTERS.add("rejected_traceparent")
    ts = None
    if ts_key is not None:
        ts = parse_tracestate(ts_raw) if tp is not None else None
        if ts is None and tp is not None:
            _COUNTERS.add("rejected_tracestate")
    return tp, ts
