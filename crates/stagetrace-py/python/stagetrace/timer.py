"""Per-request timing in the Python server module: :class:`RequestTimer`
(receive stamp, stages, ``server_timing``), :class:`Session` (openpi's
``prev_total_ms``) and the response encoder; re-exported by
:mod:`stagetrace.server`.
"""

from __future__ import annotations

import contextlib
import logging
import numbers
import time
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

import msgpack
import numpy as np

from ._counters import _COUNTERS
from ._host import HostSample
from .codec import Packer
from .trace import TraceParent, read_trace

logger = logging.getLogger("stagetrace.server")

SERVER_TIMING_KEY = "server_timing"
BATCH_SIZE_KEY = "batch_size"
CACHE_KEY = "cache"

#: Largest batch size sent (docs/protocol.md; the Rust parser rejects a
#: larger one, and with it the whole ``server_timing`` map).
MAX_BATCH_SIZE = 1 << 20

_STAGES = ("queue", "pre", "infer", "post")
# Stages that make up the stage model's `infer`: pre- and post-processing compete for
# the same CPU/GPU as the model, so infer_ns spans them.
_INFER_PARTS = ("pre", "infer", "post")


class _WallAnchor:
    """Turns a recent monotonic reading into wall time: the wall clock read
    now, carried back by the monotonic time since (docs/protocol.md).

    Read at every conversion, not once a second: an NTP daemon slewing the
    wall clock (chrony slews up to 83 ms/s; a CI machine ran 5 ms/s fast)
    would put a receive stamp up to that far off the wall clock a client on
    the same host reads, a sawtooth its offset filter takes for the network.
    The reading converted is microseconds old, so the slew over it is nil."""

    _TIGHT_NS = 20_000

    @classmethod
    def _read(cls) -> tuple[int, int]:
        best = None
        for _ in range(3):
            m0 = time.perf_counter_ns()
            wall = time.time_ns()
            m1 = time.perf_counter_ns()
            # The pair is as good as the two monotonic reads are close: a
            # preemption between them would shift the wall time derived.
            if best is None or m1 - m0 < best[0]:
                best = (m1 - m0, wall, (m0 + m1) // 2)
            if m1 - m0 <= cls._TIGHT_NS:
                break
        return best[1], best[2]

    def wall_ns(self, mono_ns: int) -> int:
        wall, mono = self._read()
        return wall - (mono - mono_ns)


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
        "_host",
        "trace",
        "tracestate",
        "span",
    )

    def __init__(
        self,
        *,
        prev_total_ns: int | None = None,
        session: Session | None = None,
        host_figures: bool = True,
    ) -> None:
        self._recv_mono = time.perf_counter_ns()
        # What the host does to the request from here to the send
        # (docs/protocol.md, "Host figures"); a few µs per request.
        self._host: HostSample | None = HostSample.now() if host_figures else None
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
        if self._host is not None:
            out.update(HostSample.now().since(self._host))
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
