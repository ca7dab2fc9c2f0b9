"""Per-request timing in the Python server module: :class:`RequestTimer`
(receive stamp, stages, ``server_timing``), :class:`Session` (openpi's
``prev_total_ms``, the connection's arrival stamps) and the response
encoder; re-exported by :mod:`stagetrace.server`.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import numbers
import sys
import time
import weakref
from collections.abc import Mapping, MutableMapping
from typing import Any, TypeVar

import msgpack
import numpy as np

from . import _loopwait, device
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

# The parts of the stage model's `infer` (the seeds' load / infer /
# post-process): pre- and post-processing compete for the same CPU/GPU as the
# model, so infer_ns spans all three. "infer" is the model's old name: a
# server that times stage("infer") keeps working, as its model part.
_PARTS = ("pre", "model", "post")
_STAGES = ("queue", "pre", "model", "post", "infer")
_ALIASES = {"infer": "model"}
# What a server that cannot see inside the policy times around it
# (PolicyServer): counted in infer_ns, not a part.
_BRACKET = "_bracket"
# Waits before the handler got the request, sent as <name>_ns and counted in
# queue_ns (docs/protocol.md).
_WAITS = ("loop_wait", "accept_wait")

T = TypeVar("T")


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
    handler read the whole request; the receive moves back to when its bytes
    arrived when the session knows it (the wait is ``loop_wait_ns`` /
    ``rx_wait_ns``, in ``queue_ns``). Every duration uses
    ``perf_counter_ns``; ``recv_unix_ns`` is that receive turned into wall
    time.
    :meth:`set_batch_size` / :meth:`set_cache_hit` add what a batcher or a
    result cache did with the request.
    """

    __slots__ = (
        "recv_unix_ns",
        "_recv_mono",
        "_read_mono",
        "_waits",
        "arrival_source",
        "_device_ns",
        "_rx_wait_ns",
        "_mark",
        "_bracket_start",
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
        # When the handler got the request; _recv_mono moves back to when its
        # bytes arrived when that is known (arrived_at).
        self._read_mono = self._recv_mono
        self._waits: dict[str, int] = {}
        #: How the arrival was placed: ``"kernel"`` (the kernel's receive
        #: stamp), ``"tcp_info"`` (a lower bound from TCP_INFO), another
        #: source named to :meth:`arrived_at`, or None (the read stamp).
        self.arrival_source: str | None = None
        self._device_ns: int | None = None
        self._rx_wait_ns: int | None = None
        # Where the next part starts: the last part's end, or the bracket's
        # start (Stage).
        self._mark: int | None = None
        self._bracket_start: int | None = None
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

    def stage(self, name: str, *, sync: bool | None = None) -> Stage:
        """Time a block as stage ``name``: ``pre``, ``model``, ``post`` (the
        parts of inference) or ``queue``; ``infer`` is ``model`` under its
        old name. ``infer_ns`` runs from the first part's start to the last
        one's end; ``queue_ns`` from the arrival to that start (a timed
        ``queue`` stage is only used when no inference was timed).
        ``pre_ns``, ``model_ns`` and ``post_ns`` add up every entry of their
        stage. The parts are back to back: a part starts where the previous
        one ended, so they add up to ``infer_ns`` (see :class:`Stage`).

        The stage ends when the device arrays handed to ``.result()`` are
        ready (JAX, CUDA tensors: ``stagetrace.device``)::

            with t.stage("model") as s:
                actions = s.result(jitted_model(obs))

        ``sync=False`` ends it when the block returns (the dispatch only);
        the default follows ``stagetrace.device.set_sync``. A ``model``
        stage whose results are CUDA tensors also reports the device's own
        time, ``device_ns`` (CUDA events)."""
        return Stage(self, _stage_name(name), sync)

    def _bracket(self, sync: bool | None = None) -> Stage:
        """A block around a policy whose parts this server cannot see
        (PolicyServer around ``policy.infer``): in ``infer_ns``, not a part."""
        return Stage(self, _BRACKET, sync)

    def record(self, name: str, duration_ns: int) -> None:
        """Record a stage measured elsewhere (e.g. with CUDA events), as if it
        ended now. Negative or non-integer durations are rejected."""
        key = _stage_name(name)
        if isinstance(duration_ns, bool) or not isinstance(duration_ns, int) or duration_ns < 0:
            raise ValueError(f"duration_ns must be a non-negative int, got {duration_ns!r}")
        end = time.perf_counter_ns()
        self._add(key, end - duration_ns, end)

    def arrived_at(self, at_ns: int, wait: str = "loop_wait", *, source: str | None = None) -> None:
        """The request's bytes were in at ``at_ns`` (a ``time.perf_counter_ns``
        reading), before this timer was made: the receive stamp moves there
        and the time until the timer was made is sent as ``<wait>_ns``
        (``loop_wait``: the event loop was busy; ``accept_wait``: no worker
        was free), part of ``queue_ns``. :class:`Session` calls it with the
        kernel's receive stamp. A time after the timer was made, or not an
        int, is ignored."""
        if wait not in _WAITS:
            raise ValueError(f"unknown wait {wait!r}: use one of {', '.join(_WAITS)}")
        if isinstance(at_ns, bool) or not isinstance(at_ns, int) or at_ns > self._read_mono:
            return
        self._recv_mono = at_ns
        self.recv_unix_ns = _ANCHOR.wall_ns(at_ns)
        self._waits = {wait: self._read_mono - at_ns}
        self._rx_wait_ns = None
        self.arrival_source = source if source is not None else wait

    def received_at(self, at_ns: int) -> None:
        """The request was whole at ``at_ns`` (a ``time.perf_counter_ns``
        reading), at or before this timer was made: the receive stamp, and
        ``recv_unix_ns`` with it, move there. No wait is reported for the
        time until the timer was made: a caller that knows what it was says
        so itself (``stagetrace.grpc``: the wait for a worker,
        ``accept_wait_ns``, and the stream's reading, ``transfer_ns``); use
        :meth:`arrived_at` when all of it was a wait. A time after the timer
        was made, or not an int, is ignored."""
        if isinstance(at_ns, bool) or not isinstance(at_ns, int) or at_ns > self._read_mono:
            return
        self._recv_mono = at_ns
        self.recv_unix_ns = _ANCHOR.wall_ns(at_ns)

    def _arrived(self, arrival: _loopwait.Arrival) -> None:
        """Place the receive at a connection's known arrival (Session)."""
        if arrival.at_ns > self._read_mono:
            return
        self._recv_mono = arrival.at_ns
        self.recv_unix_ns = _ANCHOR.wall_ns(arrival.at_ns)
        self._waits = {"loop_wait": arrival.loop_wait_ns}
        self._rx_wait_ns = arrival.rx_wait_ns
        self.arrival_source = arrival.source

    @property
    def loop_wait_ns(self) -> int | None:
        """Of the time the request's bytes were in before the handler read
        it, the part while the event loop was busy, when known; see
        :class:`Session`."""
        return self._waits.get("loop_wait")

    @property
    def rx_wait_ns(self) -> int | None:
        """Of that time, the part while the loop waited in the kernel to be
        woken (its thread waiting for a core), when known."""
        return self._rx_wait_ns

    @property
    def read_ns(self) -> int:
        """When the handler got the request (``time.perf_counter_ns``)."""
        return self._read_mono

    @property
    def arrival_ns(self) -> int:
        """When the request was in (``time.perf_counter_ns``): the read,
        or earlier when its arrival is known."""
        return self._recv_mono

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
        self._first[name] = min(start, self._first.get(name, start))
        self._last[name] = max(end, self._last.get(name, end))

    def _close_bracket(self, start: int, end: int) -> None:
        """The bracket around a policy ended: its time before the first part
        is pre-processing and after the last one post-processing, so the
        parts fill it (as the Rust InferTimer's marks do)."""
        self._bracket_start = None
        parts = [p for p in _PARTS if p in self._first and self._first[p] >= start]
        if parts:
            first = min(self._first[p] for p in parts)
            if first > start:
                self._add("pre", start, first)
            last = max(self._last[p] for p in parts)
            if end > last:
                self._add("post", last, end)
        self._add(_BRACKET, start, end)
        self._mark = None

    def _add_device(self, ns: int) -> None:
        self._device_ns = ns if self._device_ns is None else self._device_ns + ns

    def _infer_span(self) -> tuple[int, int] | None:
        """(start, end) of the stage model's infer: first pre/model/post (or
        bracket) start to the last end, or None when none was timed."""
        parts = [p for p in (*_PARTS, _BRACKET) if p in self._sums]
        if not parts:
            return None
        return min(self._first[p] for p in parts), max(self._last[p] for p in parts)

    def server_timing(self) -> dict[str, Any]:
        """The ``server_timing`` map, with ``total_ns`` measured now: call it
        immediately before packing the response."""
        now = time.perf_counter_ns()
        if now - self._read_mono >= _loopwait.BLOCK_NS:
            # The handler held its thread since the read (on an event loop,
            # the loop): a request that came in meanwhile is still unread, and
            # the kernel can say when it arrived.
            _loopwait.block_ended()
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
        prev_tx = None if self._session is None else self._session._prev_tx_wait_ns
        if prev_tx is not None:
            # The previous response's wait before its write: a response
            # cannot carry its own (docs/protocol.md).
            out["prev_tx_wait_ns"] = prev_tx
        waits = sum(self._waits.values()) + (self._rx_wait_ns or 0)
        if span is not None:
            # Arrival -> inference start: the loop's (or pool's) wait, decoding
            # and waiting (docs/protocol.md).
            out["queue_ns"] = max(0, span[0] - self._recv_mono)
        elif "queue" in self._sums:
            out["queue_ns"] = self._sums["queue"] + waits
        elif self._waits:
            out["queue_ns"] = waits
        for w, ns in self._waits.items():
            out[f"{w}_ns"] = ns
        if infer_ns is not None:
            out["infer_ns"] = infer_ns
        for p in _PARTS:
            if p in self._sums:
                out[f"{p}_ns"] = self._sums[p]
        if self._device_ns is not None:
            out["device_ns"] = self._device_ns
        if self._batch_size is not None:
            out[BATCH_SIZE_KEY] = self._batch_size
        if self._cache_hit is not None:
            out[CACHE_KEY] = _cache_word(self._cache_hit)
        if self._host is not None:
            out.update(HostSample.now().since(self._host))
        if self._rx_wait_ns is not None:
            # A host figure, as the Rust server's: part of queue_ns.
            out["rx_wait_ns"] = self._rx_wait_ns
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
        now = time.perf_counter_ns()
        total = now - self._recv_mono
        if self._session is not None and not self._sent:
            self._session._prev_total_ns = total
            if self._total_ns is not None:
                # Ready (total_ns stamped) → the write that handed the frame
                # to the kernel: stamped inside the transport's write when
                # the session watches one, else the send's return. Sent in the
                # next response as prev_tx_wait_ns.
                ready = self._recv_mono + self._total_ns
                wrote = self._session._wrote_ns
                at = wrote if wrote is not None and ready <= wrote <= now else now
                self._session._prev_tx_wait_ns = at - ready
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


def _stage_name(name: str) -> str:
    if name not in _STAGES:
        raise ValueError(f"unknown stage {name!r}: use one of {', '.join(_STAGES)}")
    return _ALIASES.get(name, name)


class Stage:
    """One timed block of a request (:meth:`RequestTimer.stage`): a context
    manager whose :meth:`result` names the values the stage waits for.

    The parts of inference are back to back, as the Rust ``InferTimer``'s
    marks are: a part starts where the previous part ended, so the code
    between two parts counts in the next one, and ``pre + model + post =
    infer``. Around a policy (PolicyServer's bracket) what runs before the
    first part is ``pre`` and what runs after the last one is ``post``."""

    __slots__ = ("_timer", "_name", "_sync", "_values", "_device", "_start")

    def __init__(self, timer: RequestTimer, name: str, sync: bool | None) -> None:
        self._timer = timer
        self._name = name
        self._sync = sync
        self._values: list[Any] | None = None
        self._device: device.DeviceTimer | None = None
        self._start = 0

    def __enter__(self) -> Stage:
        t = self._timer
        # CUDA events only where torch is loaded (the model's device time).
        if self._name == "model" and "torch" in sys.modules:
            self._device = device.DeviceTimer()
        self._start = time.perf_counter_ns()
        if self._name == _BRACKET:
            t._bracket_start = t._mark = self._start
        elif self._name in _PARTS and t._mark is not None:
            # Back to back with the previous part; after the bracket's start
            # only pre-processing begins there (a policy's code before its
            # model is its pre-processing, counted as such at the bracket's end).
            if t._mark != t._bracket_start or self._name == "pre":
                self._start = t._mark
        return self

    def result(self, value: T) -> T:
        """Return ``value`` and make the stage end only when the device
        arrays in it are ready (unless the stage's sync is off)."""
        if self._values is None:
            self._values = [value]
        else:
            self._values.append(value)
        return value

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        t = self._timer
        # A block that raised has nothing to wait for: end it now.
        if exc_type is None and self._values is not None:
            sync = device.sync_enabled() if self._sync is None else self._sync
            if self._device is not None:
                ns = self._device.stop(self._values, sync)
                if ns is not None:
                    t._add_device(ns)
            else:
                device._ready(self._values, sync)
        end = time.perf_counter_ns()
        if self._name == _BRACKET:
            t._close_bracket(self._start, end)
            return False
        t._add(self._name, self._start, end)
        if self._name in _PARTS:
            t._mark = end
        if end - self._start >= _loopwait.BLOCK_NS and t._bracket_start is None:
            # A long stage on an event loop's thread held the loop (inside a
            # bracket, the response's stamp looks).
            _loopwait.block_ended()
        return False


class _NoStage:
    """:func:`stage` outside a request: times nothing, waits for nothing."""

    __slots__ = ()

    def __enter__(self) -> _NoStage:
        return self

    def result(self, value: T) -> T:
        return value

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        return False


_NO_STAGE = _NoStage()

_current: contextvars.ContextVar[RequestTimer | None] = contextvars.ContextVar(
    "stagetrace_server_timer", default=None
)


def current() -> RequestTimer | None:
    """The timer of the request being handled (inside
    :class:`~stagetrace.server.PolicyServer`'s ``policy.infer``, or inside
    :func:`handling`), else None."""
    return _current.get()


def stage(name: str, *, sync: bool | None = None) -> Stage | _NoStage:
    """Stage ``name`` of the request being handled (:func:`current`), for a
    policy that times its own parts::

        from stagetrace import server as st

        def infer(self, obs):
            with st.stage("pre"):
                x = self.transform(obs)
            with st.stage("model") as s:
                y = s.result(self.sample_actions(x))   # ends when y is ready
            with st.stage("post"):
                return self.untransform(np.asarray(y))

    Outside a request it times nothing (the policy runs as before)."""
    t = _current.get()
    if t is None:
        _stage_name(name)  # a misspelt stage fails the same way everywhere
        return _NO_STAGE
    return t.stage(name, sync=sync)


class handling:
    """``with handling(timer):`` makes ``timer`` the :func:`current` one for
    the block (``to_thread`` and tasks started inside inherit it)."""

    __slots__ = ("_timer", "_token")

    def __init__(self, timer: RequestTimer) -> None:
        self._timer = timer
        self._token: contextvars.Token[RequestTimer | None] | None = None

    def __enter__(self) -> RequestTimer:
        self._token = _current.set(self._timer)
        return self._timer

    def __exit__(self, *exc: Any) -> bool:
        if self._token is not None:
            _current.reset(self._token)
        return False


class Session:
    """Per-connection state: carries ``prev_total_ms`` from one request to
    the next, as openpi does, and — given the connection — learns when each
    request's bytes arrived, so a request read late because the event loop
    was busy has that wait reported as ``loop_wait_ns`` (part of
    ``queue_ns``), not charged to the uplink (``docs/stages.md``, "Event
    loops")::

        with st.Session(websocket) as session:
            async for raw in websocket:
                t = session.received(frame=raw)

    ``websocket``: the connection (a ``websockets`` connection, an asyncio
    transport or a socket); without it the receive is the read, as before.
    :meth:`close` (or the ``with``) releases what watching it holds (a
    duplicate of its descriptor); a session collected unclosed releases it too.
    """

    def __init__(self, websocket: Any = None) -> None:
        self._prev_total_ns: int | None = None
        self._prev_tx_wait_ns: int | None = None
        #: perf_counter_ns right after the transport's last write returned.
        self._wrote_ns: int | None = None
        self._conn = None if websocket is None else _loopwait.connection(websocket, owner=self)
        self._transport = None if websocket is None else _stamp_writes(websocket, self)

    def received(self, request: Any = None, *, frame: Any = None) -> RequestTimer:
        """Start timing a request whose bytes have all arrived. Call it right
        after ``recv`` returns; pass the decoded request (or call
        :meth:`RequestTimer.read_trace` later) to honour its traceparent,
        and the message as received (``frame=raw``) so the kernel's receive
        stamp can be matched to it."""
        t = RequestTimer(prev_total_ns=self._prev_total_ns, session=self)
        if self._conn is not None:
            arrival = self._conn.arrival(t._read_mono, t.recv_unix_ns, _loopwait.wire_len(frame))
            if arrival is not None:
                t._arrived(arrival)
        if request is not None:
            t.read_trace(request)
        return t

    def close(self) -> None:
        """Stop watching the connection (idempotent)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        transport, self._transport = self._transport, None
        if transport is not None:
            with contextlib.suppress(AttributeError):
                del transport.write  # the class's own write again

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.close()
        return False


def _stamp_writes(websocket: Any, session: Session) -> Any:
    """Note when each write of ``websocket``'s asyncio transport was made:
    the response's bytes went to the kernel then (an asyncio transport
    tries the socket at once and buffers only what the kernel would not
    take). Stamped inside the write, not after the ``await`` of the send,
    so the loop's own scheduling around the write is not counted as the
    send's wait. Returns the transport wrapped, or None (no asyncio
    transport: the send's return stands in, in :meth:`RequestTimer.sent`)."""
    transport = getattr(websocket, "transport", None)
    write = getattr(transport, "write", None)
    if transport is None or write is None or "write" in getattr(transport, "__dict__", {}):
        return None
    session_ref = weakref.ref(session)

    def stamped_write(data: Any) -> None:
        # Stamped just before the write, not at its return: on one host the
        # write wakes the reader, which may take the core before the call
        # returns, and its run is not the server's wait (docs/protocol.md).
        s = session_ref()
        if s is not None:
            s._wrote_ns = time.perf_counter_ns()
        write(data)

    try:
        transport.write = stamped_write
    except AttributeError:  # a transport with __slots__
        return None
    return transport


def received(request: Any = None, *, at_ns: int | None = None) -> RequestTimer:
    """Start timing a request outside any :class:`Session` (no ``prev_total_ms``).
    ``at_ns``: the request was whole then, before now (a
    ``time.perf_counter_ns`` reading; see :meth:`RequestTimer.received_at`)."""
    t = RequestTimer()
    if at_ns is not None:
        t.received_at(at_ns)
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
