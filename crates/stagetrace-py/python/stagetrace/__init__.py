"""stagetrace for Python: where does a robot control loop's latency go?

The same engine as the Rust crate (a PyO3 extension, ``stagetrace._native``):
a call timed here is measured, clock-stitched, summarised and written by the
Rust core, so its record line is the one a Rust client writes for the same
call, and ``stagetrace report`` reads both.

Client side::

    import stagetrace as st

    st.init("stagetrace-out", target_hz=10)      # records-*.jsonl, summary.*.jsonl
    policy = st.TracedClientPolicy(host="10.0.0.5", port=8000)  # openpi's client, traced
    while running:
        with st.call(kind="infer"):
            with st.stage("capture"):
                obs = camera.read()
            action = policy.infer(obs)           # the transport stage, traceparent out,
                                                 # server_timing in
            with st.stage("dispatch"):
                robot.execute(action)
    print(st.finish().table())                   # cumulative summary (a dict), as a table

Sub-stages: ``@st.timed("post")`` / ``with st.stage("post")`` after
``st.init(stages={"post": "dispatch"})``: a name is mapped onto one of the
canonical stages (``capture``, ``transport``, ``queue``, ``infer``,
``dispatch``), so it lands in the schema's figures. A stage inside another
stage is counted once in the call's gap figure, as in Rust.

A model on an asynchronous device (JAX, even on CPU; CUDA tensors) returns
before its work is done: ``@st.timed`` ends its stage when the JAX arrays /
CUDA tensors the function returned are ready, and inside ``with
st.stage(...)`` wrap the result in ``st.ready(...)`` (:mod:`stagetrace.device`).

The current span is kept in a :class:`contextvars.ContextVar`, so asyncio
tasks on one thread keep their calls apart (``async with st.call():`` works
too). Server side: :mod:`stagetrace.server`.
"""

from __future__ import annotations

import contextvars
import functools
import gc
import inspect
import json
import logging
import os
from typing import Any, Callable, Mapping, Optional, TypeVar

from . import _native
from ._native import FIELDS, STAGES, Call, PartitionSummary, Recorder, Span
from ._native import merge as merge
from ._native import call as call
from ._native import stage as stage
from ._native import summarize as summarize
from .device import ready as ready
from .frames import load as load
from .logwrite import timed_handler as timed_handler

# Python's collector, timed for every call's gc_ms (once per process: a
# reload of this module must not time each collection twice).
if _native._gc_event not in gc.callbacks:
    gc.callbacks.append(_native._gc_event)

__all__ = [
    "Call",
    "FIELDS",
    "PartitionSummary",
    "STAGES",
    "Recorder",
    "Span",
    "Summary",
    "TracedClientPolicy",
    "call",
    "current_span",
    "finish",
    "init",
    "load",
    "merge",
    "ready",
    "recorder",
    "stage",
    "summarize",
    "timed",
    "timed_handler",
]

logger = logging.getLogger("stagetrace")

# The current call of this thread or asyncio task; `with call()` (in Rust:
# `src/call.rs`) sets and resets it, `with stage()` stamps into it.
_current: contextvars.ContextVar[Optional[Call]] = _native.current
_default: Optional[Recorder] = None
_live: Any = None  # stagetrace.rerun.Live, with init(rerun=...)

F = TypeVar("F", bound=Callable[..., Any])


def init(
    output_dir: Optional[os.PathLike[str] | str] = None,
    *,
    window: float = 10.0,
    target_hz: Optional[float] = None,
    clock: str = "estimate",
    warmup_calls: Optional[int] = None,
    queue_capacity: Optional[int] = None,
    stages: Optional[Mapping[str, str]] = None,
    otlp_endpoint: Optional[str] = None,
    service_name: Optional[str] = None,
    parquet_dir: Optional[os.PathLike[str] | str] = None,
    robot: Optional[str] = None,
    host_figures: bool = True,
    rerun: Any = None,
) -> Recorder:
    """Start the process's recorder (the Rust builder's settings).

    ``output_dir``: where ``records-*.jsonl`` and ``summary.*.jsonl`` go (none:
    summaries only). ``window``: rolling summary window, s. ``target_hz``:
    the loop's rate, for deadline misses and lateness. ``clock``:
    ``"estimate"`` (default), ``"trusted"`` (clocks synced) or ``"none"``.
    ``stages``: sub-stage names mapped onto canonical stages. ``otlp_endpoint``
    / ``service_name``: export every call as a trace (the ``OTEL_*``
    variables apply when only one is given). ``parquet_dir``: also write
    every record as Parquet under ``robot=<robot>/date=<day>/`` there
    (``robot``: default ``STAGETRACE_ROBOT``, else the host name); read it
    back with :func:`load` (docs/records.md). ``host_figures``: each record
    says what the host did to the call — the thread's run-queue wait, the
    host's CPU stall, Python's GC pauses (``run_wait_ms``, ``cpu_stall_ms``,
    ``gc_ms``; docs/stages.md); ``False`` saves their few µs per call.
    ``rerun``: also log each finished call to Rerun, a
    ``rerun.RecordingStream`` or an ``.rrd`` path; needs ``output_dir``
    (off by default; :class:`stagetrace.rerun.Live`, docs/viewers.md).
    """
    global _default, _live
    if _default is not None:
        raise RuntimeError("stagetrace is already initialised in this process; call stagetrace.finish() first")
    if rerun is not None:
        if output_dir is None:
            raise ValueError("stagetrace.init(rerun=...) follows the record files: give output_dir too")
        from .rerun import Live, _rr

        _rr()  # the Rerun SDK, before anything starts
    _default = Recorder(
        None if output_dir is None else os.fspath(output_dir),
        window=window,
        target_hz=target_hz,
        clock=clock,
        warmup_calls=warmup_calls,
        queue_capacity=queue_capacity,
        stages=dict(stages) if stages else None,
        otlp_endpoint=otlp_endpoint,
        service_name=service_name,
        parquet_dir=None if parquet_dir is None else os.fspath(parquet_dir),
        robot=robot,
        host_figures=host_figures,
    )
    _native.set_default(_default)
    if rerun is not None:
        _live = Live(output_dir, rerun)
    return _default


def recorder() -> Recorder:
    """The process's recorder; one with default settings (no files) when
    :func:`init` was not called, with a warning."""
    global _default
    if _default is None:
        logger.warning("stagetrace.init() was not called: recording summaries only, no record files")
        _default = Recorder()
        _native.set_default(_default)
    return _default


class Summary(dict):  # type: ignore[type-arg]
    """A summary (a line of ``summary.*.jsonl``; :func:`finish` returns the
    cumulative one) as the dict of that JSON line, with its table for people.

    ``Summary(json.loads(line))`` makes one of any summary line."""

    def table(self) -> str:
        """The Rust core's table of this summary (``summary.table()`` in
        Rust, what ``stagetrace tail`` shows): the stages in call order with
        their parts under them, the hosts' figures under their own heading
        with a one-line legend, every column as wide as its longest cell
        (ms); the counters and the clock below."""
        return _native.summary_table(json.dumps(self))


def finish() -> Summary:
    """Drain the recorder, flush its files and exporter, return the
    cumulative summary (the last line of ``summary.*.jsonl``) as a dict
    (:class:`Summary`: ``.table()`` prints it). What a sink lost for good
    is logged once, as a warning of the ``stagetrace`` logger."""
    global _default, _live
    rec, _default = _default, None
    _native.set_default(None)
    if rec is None:
        raise RuntimeError("stagetrace is not initialised: nothing to finish")
    summary = Summary(json.loads(rec.finish()))
    live, _live = _live, None
    if live is not None:
        live.stop()
    return summary


def _mark(exc: BaseException, reason: str) -> None:
    """Give ``exc`` the call's failure reason, so the scopes it passes
    through on its way out keep it (the first reason is the record's)."""
    try:
        exc._stagetrace_reason = reason  # type: ignore[attr-defined]
    except (AttributeError, TypeError):  # an exception type without __dict__
        pass


def current_span() -> Optional[Call]:
    """The open call of this thread or asyncio task (``None`` outside one)."""
    return _current.get()


def timed(name: str, *, sync: Optional[bool] = None) -> Callable[[F], F]:
    """Decorator: every run of the function is stage ``name`` of the current
    call (coroutine functions too). The stage ends when the JAX arrays and
    CUDA tensors the function returned are ready (:func:`ready`), so a
    jitted model's stage is its work, not its dispatch; ``sync=False`` ends
    it when the function returns (default: ``stagetrace.device.set_sync``)."""

    def wrap(fn: F) -> F:
        # One object per name, resolved against the current call's recorder
        # on entry: fetched once here, not per run.
        scope = stage(name)
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                with scope:
                    return ready(await fn(*args, **kwargs), sync=sync)

            return run_async  # type: ignore[return-value]

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            with scope:
                return ready(fn(*args, **kwargs), sync=sync)

        return run  # type: ignore[return-value]

    return wrap


def __getattr__(name: str) -> Any:
    # openpi_client is optional: imported only when the wrapper is used.
    if name == "TracedClientPolicy":
        from .client import TracedClientPolicy

        return TracedClientPolicy
    raise AttributeError(f"module 'stagetrace' has no attribute {name!r}")
