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
  ``queue_ns`` / ``infer_ns`` / ``pre_ns`` / ``post_ns`` when known are added.
  With those the client splits its round trip into uplink, server and downlink;
* it says what a mitigation did with the request, as the Rust server's
  ``InferTimer`` does: ``t.set_batch_size(n)`` (the request ran in a batch of
  ``n``) and ``t.set_cache_hit(hit)`` (a result cache answered it, or missed)
  add ``batch_size`` (int) and ``cache`` (``"hit"`` / ``"miss"``) to
  ``server_timing``; the client puts them on the call's record.

Adding it to an existing server (the openpi ``WebsocketPolicyServer`` loop)::

    from stagetrace import server as st

    session = st.Session()                      # one per connection
    while True:
        raw = await websocket.recv()
        t = session.received()                  # stamp first, before unpacking
        obs = msgpack_numpy.unpackb(raw)
        t.read_trace(obs)                       # takes traceparent out of obs
        with t.stage("infer"), continuing(t.trace, t.tracestate):
            action = policy.infer(obs)          # its traced calls continue the trace
        t.stamp(action)                         # action["server_timing"] = {...}
        await websocket.send(packer.pack(action))
        t.sent()                                # feeds the next prev_total_ms

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
clock turned into wall time through a (``time.time_ns()``, monotonic) anchor
refreshed every second. The wire format is ``docs/protocol.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import http
import logging
import numbers
import os
import re
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any

import msgpack
import numpy as np

from .trace import continuing

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "MAX_BATCH_SIZE",
    "MAX_TRACEPARENT_LEN",
    "MAX_TRACESTATE_LEN",
    "MalformedRequest",
    "PolicyServer",
    "RequestTimer",
    "Session",
    "TraceParent",
    "encode_response",
    "packb",
    "Packer",
    "parse_traceparent",
    "parse_tracestate",
    "read_trace",
    "received",
    "serve",
    "stats",
    "unpackb",
]

logger = logging.getLogger("stagetrace.server")

TRACEPARENT_KEY = "traceparent"
TRACESTATE_KEY = "tracestate"
SERVER_TIMING_KEY = "server_timing"
BATCH_SIZE_KEY = "batch_size"
CACHE_KEY = "cache"

#: Largest batch size sent (docs/protocol.md; the Rust parser rejects a
#: larger one, and with it the whole ``server_timing`` map).
MAX_BATCH_SIZE = 1 << 20

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

_STAGES = ("queue", "pre", "infer", "post")
# Stages that make up the stage model's `infer`: pre- and post-processing compete for
# the same CPU/GPU as the model, so infer_ns spans them.
_INFER_PARTS = ("pre", "infer", "post")


# --------------------------------------------------------------------------
# Counters: rejected headers and bad requests, readable at any time.


class _Counters:
    """Process-wide counts of ignored input; thread-safe."""

    _NAMES = ("rejected_traceparent", "rejected_tracestate", "rejected_timing", "bad_requests", "requests")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(self._NAMES, 0)

    def add(self, name: str, n: int = 1) -> int:
        """Add ``n`` to ``name``; returns the new count."""
        with self._lock:
            self._counts[name] += n
            return self._counts[name]

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


_COUNTERS = _Counters()


def stats() -> dict[str, int]:
    """Counts since the process started: ``rejected_traceparent``,
    ``rejected_tracestate``, ``rejected_timing`` (bad ``batch_size`` /
    ``cache`` values in a response's own ``server_timing`` map, dropped),
    ``bad_requests`` (undecodable requests seen by :class:`PolicyServer`) and
    ``requests`` (timers created)."""
    return _COUNTERS.snapshot()


# --------------------------------------------------------------------------
# W3C Trace Context.


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


def _as_text(value: Any, limit: int) -> str | None:
    """``value`` as an ASCII ``str`` of at most ``limit`` characters, else None."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        if len(value) > limit:
            return None
        try:
            return bytes(value).decode("ascii")
        except UnicodeDecodeError:
            return None
    if isinstance(value, str):
        if len(value) > limit or not value.isascii():
            return None
        return value
    return None


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


# --------------------------------------------------------------------------
# Per-request timing.


class _WallAnchor:
    """A (wall, monotonic) pair, refreshed every second: a monotonic reading
    becomes wall time without a second wall-clock read (docs/protocol.md)."""

    _REFRESH_NS = 1_000_000_000
    _TIGHT_NS = 20_000

    def __init__(self) -> None:
        self._pair = self._read()

    @classmethod
    def _read(cls) -> tuple[int, int]:
        best = None
        for _ in range(3):
            m0 = time.perf_counter_ns()
            wall = time.time_ns()
            m1 = time.perf_counter_ns()
            # The pair is as good as the two monotonic reads are close: a
            # preemption between them would shift every wall time derived.
            if best is None or m1 - m0 < best[0]:
                best = (m1 - m0, wall, (m0 + m1) // 2)
            if m1 - m0 <= cls._TIGHT_NS:
                break
        return best[1], best[2]

    def wall_ns(self, mono_ns: int) -> int:
        wall, mono = self._pair  # one tuple: consistent without a lock
        if mono_ns - mono > self._REFRESH_NS:
            self._pair = self._read()
            wall, mono = self._pair
        return wall + (mono_ns - mono)


_ANCHOR = _WallAnchor()


def _batch_size(n: Any) -> int:
    """``n`` as the ``batch_size`` to send, or ValueError. Values above
    :data:`MAX_BATCH_SIZE` are capped to it, as the Rust ``InferTimer`` does."""
    # bool is an int, and numpy's bool_ is not: neither is a batch size.
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, numbers.Integral):
        raise ValueError(
            f"batch size must be a positive int (the requests in the batch, this one included), got {n!r}"
        )
    if n < 1:
        raise ValueError(f"batch size must be at least 1 (the batch holds this request), got {n!r}")
    return min(int(n), MAX_BATCH_SIZE)  # int(): numpy packs as an {"__npgeneric__"} map


def _cache_hit(hit: Any) -> bool:
    """``hit`` as a bool, or ValueError."""
    if not isinstance(hit, (bool, np.bool_)):
        raise ValueError(
            f"cache hit must be True (the cache answered, the model did not run) "
            f"or False (it missed, the model ran), got {hit!r}"
        )
    return bool(hit)


def _cache_word(hit: bool) -> str:
    return "hit" if hit else "miss"


def _mitigation_value(key: str, value: Any) -> Any:
    """A ``batch_size`` / ``cache`` value found in a response's own
    ``server_timing`` map, as it goes on the wire, or None when it is not
    what :meth:`RequestTimer.set_batch_size` takes / ``"hit"`` or ``"miss"``
    (a bad one could make the Rust client reject the whole map)."""
    if key == BATCH_SIZE_KEY:
        try:
            return _batch_size(value)
        except ValueError:
            return None
    if isinstance(value, str) and value in ("hit", "miss"):
        return value
    return None


class RequestTimer:
    """Times one request on the server.

    Created by :func:`received` / :meth:`Session.received` right after the
    whole request has arrived. Every duration uses ``perf_counter_ns``;
    ``recv_unix_ns`` is that same receive reading turned into wall time.
    :meth:`set_batch_size` / :meth:`set_cache_hit` add what a batcher or a
    result cache did with the request.
    """

    __slots__ = (
        "recv_unix_ns",
        "_recv_mono",
        "_prev_total_ns",
        "_session",
        "_sums",
        "_first",
        "_last",
        "_total_ns",
        "_sent",
        "_batch_size",
        "_cache_hit",
        "trace",
        "tracestate",
        "span",
    )

    def __init__(self, *, prev_total_ns: int | None = None, session: Session | None = None) -> None:
        self._recv_mono = time.perf_counter_ns()
        self.recv_unix_ns: int = _ANCHOR.wall_ns(self._recv_mono)
        self._prev_total_ns = prev_total_ns
        self._session = session
        self._sums: dict[str, int] = {}
        self._first: dict[str, int] = {}
        self._last: dict[str, int] = {}
        self._total_ns: int | None = None
        self._sent = False
        self._batch_size: int | None = None
        self._cache_hit: bool | None = None
        #: The client's ``traceparent``, when it sent a valid one.
        self.trace: TraceParent | None = None
        #: The client's ``tracestate``, when valid and a traceparent came with it.
        self.tracestate: str | None = None
        #: ``traceparent`` of this server span (child of :attr:`trace`), or None.
        self.span: TraceParent | None = None
        _COUNTERS.add("requests")

    def read_trace(self, request: Any, *, pop: bool = True) -> TraceParent | None:
        """Read (and by default remove) the trace context of ``request``; see
        :func:`read_trace`. Returns the client's traceparent or None."""
        self.trace, self.tracestate = read_trace(request, pop=pop)
        self.span = self.trace.child() if self.trace is not None else None
        return self.trace

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time a block as stage ``name``: ``pre``, ``infer``, ``post`` or
        ``queue``. ``infer_ns`` runs from the first pre/infer/post start to
        the last end; ``queue_ns`` from receive to that start (a timed
        ``queue`` stage is only used when no inference was timed). ``pre_ns``
        and ``post_ns`` add up every entry of their stage."""
        if name not in _STAGES:
            raise ValueError(f"unknown stage {name!r}: use one of {', '.join(_STAGES)}")
        start = time.perf_counter_ns()
        try:
            yield
        finally:
            self._add(name, start, time.perf_counter_ns())

    def record(self, name: str, duration_ns: int) -> None:
        """Record a stage measured elsewhere (e.g. with CUDA events), as if it
        ended now. Negative or non-integer durations are rejected."""
        if name not in _STAGES:
            raise ValueError(f"unknown stage {name!r}: use one of {', '.join(_STAGES)}")
        if isinstance(duration_ns, bool) or not isinstance(duration_ns, int) or duration_ns < 0:
            raise ValueError(f"duration_ns must be a non-negative int, got {duration_ns!r}")
        end = time.perf_counter_ns()
        self._add(name, end - duration_ns, end)

    def set_batch_size(self, n: int) -> None:
        """The request ran in a batch of ``n`` requests, itself included
        (Rust: ``InferTimer::set_batch_size``). Sent as ``server_timing``'s
        ``batch_size``; the client's record of the call carries it.

        ``n`` is an int (a numpy integer is fine) of at least 1; values above
        :data:`MAX_BATCH_SIZE` are capped to it. Anything else (0, a negative
        or float or bool) raises ValueError and leaves the timer unchanged.
        A later call replaces the value. May be called from another thread
        (a batcher's worker) until the response is stamped.
        """
        self._batch_size = _batch_size(n)

    def set_cache_hit(self, hit: bool) -> None:
        """A result cache answered the request (``True``: the model did not
        run) or missed (``False``: the model ran) (Rust:
        ``InferTimer::set_cache_hit``). Sent as ``server_timing``'s
        ``cache``, ``"hit"`` or ``"miss"``.

        ``hit`` must be a bool (or numpy bool); anything else, the string
        ``"hit"`` included, raises ValueError and leaves the timer unchanged.
        A later call replaces the value.
        """
        self._cache_hit = _cache_hit(hit)

    @property
    def batch_size(self) -> int | None:
        """The batch size set with :meth:`set_batch_size`, or None."""
        return self._batch_size

    @property
    def cache_hit(self) -> bool | None:
        """The cache outcome set with :meth:`set_cache_hit`, or None."""
        return self._cache_hit

    def _add(self, name: str, start: int, end: int) -> None:
        self._sums[name] = self._sums.get(name, 0) + (end - start)
        self._first.setdefault(name, start)
        self._last[name] = end

    def _infer_span(self) -> tuple[int, int] | None:
        """(start, end) of the stage model's infer: first pre/infer/post start to the
        last end, or None when none was timed."""
        parts = [p for p in _INFER_PARTS if p in self._sums]
        if not parts:
            return None
        return min(self._first[p] for p in parts), max(self._last[p] for p in parts)

    def server_timing(self) -> dict[str, Any]:
        """The ``server_timing`` map, with ``total_ns`` measured now: call it
        immediately before packing the response."""
        now = time.perf_counter_ns()
        self._total_ns = now - self._recv_mono
        out: dict[str, Any] = {}
        span = self._infer_span()
        infer_ns = None if span is None else span[1] - span[0]
        if infer_ns is not None:
            out["infer_ms"] = infer_ns / 1e6
        if self._prev_total_ns is not None:
            out["prev_total_ms"] = self._prev_total_ns / 1e6
        out["recv_unix_ns"] = self.recv_unix_ns
        out["total_ns"] = self._total_ns
        if span is not None:
            # Receive -> inference start: waiting and decoding (docs/protocol.md).
            out["queue_ns"] = max(0, span[0] - self._recv_mono)
        elif "queue" in self._sums:
            out["queue_ns"] = self._sums["queue"]
        if infer_ns is not None:
            out["infer_ns"] = infer_ns
        for p in ("pre", "post"):
            if p in self._sums:
                out[f"{p}_ns"] = self._sums[p]
        if self._batch_size is not None:
            out[BATCH_SIZE_KEY] = self._batch_size
        if self._cache_hit is not None:
            out[CACHE_KEY] = _cache_word(self._cache_hit)
        return out

    def stamp(self, response: MutableMapping[Any, Any]) -> MutableMapping[Any, Any]:
        """Set ``response["server_timing"]`` (see :meth:`server_timing`).

        Keys an existing ``server_timing`` map already has (openpi's own
        ``infer_ms``, say) are kept unless this timer measured them too. Its
        ``batch_size`` / ``cache``, when this timer has none, are kept when
        valid (see :meth:`set_batch_size`; ``cache`` the string ``"hit"`` or
        ``"miss"``) and otherwise dropped and counted in
        ``stats()["rejected_timing"]``: a bad one would make the client
        reject the whole map.
        """
        response[SERVER_TIMING_KEY] = _merged(response.get(SERVER_TIMING_KEY), self.server_timing())
        return response

    def sent(self) -> int:
        """Call once the response has been sent. Returns receive → sent in
        ns, which the session reports as the next ``prev_total_ms``."""
        total = time.perf_counter_ns() - self._recv_mono
        if self._session is not None and not self._sent:
            self._session._prev_total_ns = total
        self._sent = True
        return total


def _merged(existing: Any, timing: dict[str, Any]) -> dict[str, Any]:
    """``timing`` over an existing ``server_timing`` map, whose other keys
    stay; its ``batch_size`` / ``cache`` only when valid (a bad one is
    dropped and counted)."""
    if not isinstance(existing, Mapping):
        return timing
    merged = dict(existing)
    for key in (BATCH_SIZE_KEY, CACHE_KEY):
        if key in merged and key not in timing:
            value = _mitigation_value(key, merged[key])
            if value is not None:
                merged[key] = value
                continue
            bad = merged.pop(key)
            if _COUNTERS.add("rejected_timing") == 1:
                logger.warning(
                    "dropped server_timing[%r] = %.60r: send %s (further ones are only counted in "
                    "stats()['rejected_timing'])",
                    key,
                    bad,
                    "a positive int" if key == BATCH_SIZE_KEY else '"hit" or "miss"',
                )
    merged.update(timing)
    return merged


class Session:
    """Per-connection state: carries ``prev_total_ms`` from one request to
    the next, as openpi does."""

    def __init__(self) -> None:
        self._prev_total_ns: int | None = None

    def received(self, request: Any = None) -> RequestTimer:
        """Start timing a request whose bytes have all arrived. Call it right
        after ``recv`` returns; pass the decoded request (or call
        :meth:`RequestTimer.read_trace` later) to honour its traceparent."""
        t = RequestTimer(prev_total_ns=self._prev_total_ns, session=self)
        if request is not None:
            t.read_trace(request)
        return t


def received(request: Any = None) -> RequestTimer:
    """Start timing a request outside any :class:`Session` (no ``prev_total_ms``)."""
    t = RequestTimer()
    if request is not None:
        t.read_trace(request)
    return t


# --------------------------------------------------------------------------
# msgpack with numpy arrays, wire-compatible with openpi_client.msgpack_numpy.


class MalformedRequest(ValueError):
    """A request that is not a valid msgpack map in the openpi encoding."""


_MAX_NDIM = 32
#: Largest request :class:`PolicyServer` accepts by default (same as the Rust client's limit).
DEFAULT_MAX_MESSAGE_BYTES = 32 << 20


def _pack_default(obj: Any) -> Any:
    if isinstance(obj, (np.ndarray, np.generic)) and obj.dtype.kind in ("V", "O", "c"):
        raise TypeError(f"cannot send numpy dtype {obj.dtype}: convert it to a numeric or string dtype first")
    if isinstance(obj, np.ndarray):
        # Same encoding as openpi: bin keys, C-order bytes, dtype.str.
        return {
            b"__ndarray__": True,
            b"data": np.ascontiguousarray(obj).tobytes(),
            b"dtype": obj.dtype.str,
            b"shape": list(obj.shape),
        }
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise TypeError(f"cannot msgpack an object of type {type(obj).__name__}")


def _field(obj: Mapping[Any, Any], name: str) -> Any:
    if name in obj:
        return obj[name]
    return obj.get(name.encode())


def _dtype(raw: Any) -> np.dtype:
    text = _as_text(raw, 32)
    if text is None:
        raise MalformedRequest("ndarray dtype must be a short ASCII string such as '<f4'")
    try:
        dt = np.dtype(text)
    except Exception as e:  # numpy raises TypeError, ValueError or SyntaxError
        raise MalformedRequest(f"ndarray dtype {text!r} is not a numpy dtype") from e
    if dt.kind in ("V", "O", "c") or dt.itemsize == 0:
        raise MalformedRequest(f"ndarray dtype {text!r} is not allowed")
    return dt


def _unpack_hook(obj: dict[Any, Any]) -> Any:
    if _field(obj, "__ndarray__") is True:
        data = _field(obj, "data")
        shape = _field(obj, "shape")
        dt = _dtype(_field(obj, "dtype"))
        if not isinstance(data, (bytes, bytearray)):
            raise MalformedRequest("ndarray data must be msgpack bin")
        if not isinstance(shape, (list, tuple)) or len(shape) > _MAX_NDIM:
            raise MalformedRequest("ndarray shape must be a list of at most 32 sizes")
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise MalformedRequest("ndarray shape must hold non-negative integers")
        count = 1
        for d in shape:
            count *= d
        if count * dt.itemsize != len(data):
            raise MalformedRequest(
                f"ndarray data is {len(data)} bytes, shape {list(shape)} of {dt.str} needs {count * dt.itemsize}"
            )
        return np.frombuffer(data, dtype=dt, count=count).reshape(shape)
    if _field(obj, "__npgeneric__") is True:
        dt = _dtype(_field(obj, "dtype"))
        try:
            return dt.type(_field(obj, "data"))
        except (TypeError, ValueError, OverflowError) as e:
            raise MalformedRequest(f"bad numpy scalar of dtype {dt.str}") from e
    return obj


def packb(obj: Any) -> bytes:
    """msgpack-encode ``obj``, numpy arrays in the openpi encoding."""
    return msgpack.packb(obj, default=_pack_default, use_bin_type=True)


def Packer() -> msgpack.Packer:  # noqa: N802 - mirrors openpi's factory name
    """A reusable msgpack packer with the openpi numpy encoding."""
    return msgpack.Packer(default=_pack_default, use_bin_type=True)


def unpackb(data: bytes) -> Any:
    """Decode msgpack bytes, rebuilding numpy arrays (read-only views).

    Raises :class:`MalformedRequest` for anything that is not valid msgpack in
    the openpi encoding (truncated, trailing bytes, bad array header, too deep).
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise MalformedRequest(f"expected a binary frame, got {type(data).__name__}")
    try:
        return msgpack.unpackb(data, object_hook=_unpack_hook, raw=False, strict_map_key=False)
    except MalformedRequest:
        raise
    except Exception as e:  # msgpack raises several unrelated types
        raise MalformedRequest(f"not valid msgpack: {type(e).__name__}: {e}") from e


def encode_response(
    response: Mapping[Any, Any], timer: RequestTimer, packer: msgpack.Packer | None = None
) -> bytes:
    """Pack ``response`` plus its ``server_timing`` as one msgpack map.

    The action is packed first and ``total_ns`` stamped after, so the time to
    serialise a large action chunk counts as server time, not downlink.
    """
    return _encode(response, timer, packer)[0]


def _encode(
    response: Mapping[Any, Any], timer: RequestTimer, packer: msgpack.Packer | None
) -> tuple[bytes, dict[str, Any]]:
    p = packer if packer is not None else Packer()
    body = [p.pack(k) + p.pack(v) for k, v in response.items() if k != SERVER_TIMING_KEY]
    timing = _merged(response.get(SERVER_TIMING_KEY), timer.server_timing())
    frame = b"".join([p.pack_map_header(len(body) + 1), *body, p.pack(SERVER_TIMING_KEY), p.pack(timing)])
    return frame, timing


# --------------------------------------------------------------------------
# A ready-made server, like openpi's WebsocketPolicyServer but instrumented.


class PolicyServer:
    """Serves ``policy.infer(obs) -> dict`` over WebSocket + msgpack (openpi
    protocol) with ``traceparent`` honoured and ``server_timing`` stamped.

    ``policy`` is any object with ``infer(obs)``; when the returned dict has
    its own ``server_timing`` map (with ``pre_ns`` etc.) those keys are kept.
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
    ) -> None:
        """``in_thread`` runs ``infer`` in a worker thread so other
        connections and pings keep being served while the model runs.
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
        self._server: Any = None

    @property
    def port(self) -> int | None:
        """The bound port once started (useful with ``port=0``)."""
        if self._server is None:
            return self._port
        for sock in self._server.sockets:
            return sock.getsockname()[1]
        return None

    async def start(self) -> int | None:
        """Bind and start accepting; returns the bound port."""
        try:
            from websockets.asyncio.server import serve as ws_serve
        except ImportError as e:  # pragma: no cover - depends on the install
            raise ImportError("PolicyServer needs websockets >= 13: pip install 'websockets>=13'") from e
        self._server = await ws_serve(
            self._handler,
            self._host,
            self._port,
            compression=None,
            max_size=self._max_size,
            process_request=_health_check,
        )
        return self.port

    async def close(self) -> None:
        """Stop accepting and close open connections."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def run(self) -> None:
        """The coroutine: start (if needed) and serve until cancelled
        (openpi's ``WebsocketPolicyServer.run``)."""
        if self._server is None:
            await self.start()
        try:
            await self._server.serve_forever()
        finally:
            await self.close()

    def serve_forever(self) -> None:
        """Blocking: serve forever on a new event loop (openpi's
        ``WebsocketPolicyServer.serve_forever``)."""
        asyncio.run(self.run())

    async def _handler(self, websocket: Any) -> None:
        import websockets.exceptions
        from websockets.frames import CloseCode

        packer = Packer()
        session = Session()
        await websocket.send(packer.pack(self._metadata))
        while True:
            try:
                raw = await websocket.recv()
            except websockets.exceptions.ConnectionClosed:
                return
            timer = session.received()
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
                return
            timer.read_trace(obs)
            try:
                # A traced call the policy makes continues the caller's trace
                # (to_thread copies the context, so in_thread does too).
                with continuing(timer.trace, timer.tracestate), timer.stage("infer"):
                    if self._in_thread:
                        action = await asyncio.to_thread(self._policy.infer, obs)
                    else:
                        action = self._policy.infer(obs)
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
                return
            timer.sent()
            if self._on_request is not None:
                try:
                    self._on_request(timer, timing)
                except Exception:
                    logger.exception("on_request hook failed")


def _health_check(connection: Any, request: Any) -> Any:
    if request.path == "/healthz":
        return connection.respond(http.HTTPStatus.OK, "OK\n")
    return None


async def serve(
    policy: Any,
    host: str = "0.0.0.0",
    port: int = 8000,
    metadata: Mapping[str, Any] | None = None,
    **options: Any,
) -> None:
    """Serve ``policy`` until cancelled: ``asyncio.run(serve(policy, port=8000))``.
    ``options`` are :class:`PolicyServer`'s (``in_thread``, ``on_request``)."""
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

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())


if __name__ == "__main__":
    _main()
