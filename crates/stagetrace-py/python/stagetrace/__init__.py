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
    print(st.finish())                           # cumulative summary (a dict)

Sub-stages: ``@st.timed("post")`` / ``with st.stage("post")`` after
``st.init(stages={"post": "dispatch"})``: a name is mapped onto one of the
canonical stages (``capture``, ``transport``, ``queue``, ``infer``,
``dispatch``), so it lands in the schema's figures. A stage inside another
stage is counted once in the call's gap figure, as in Rust.

The current span is kept in a :class:`contextvars.ContextVar`, so asyncio
tasks on one thread keep their calls apart (``async with st.call():`` works
too). Server side: :mod:`stagetrace.server`.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import json
import logging
import os
from typing import Any, Callable, Mapping, Optional, TypeVar

from ._native import FIELDS, STAGES, Recorder, Span

__all__ = [
    "FIELDS",
    "STAGES",
    "Recorder",
    "Span",
    "TracedClientPolicy",
    "call",
    "current_span",
    "finish",
    "init",
    "recorder",
    "stage",
    "timed",
]

logger = logging.getLogger("stagetrace")

_current: contextvars.ContextVar[Optional[Span]] = contextvars.ContextVar("stagetrace_span", default=None)
_default: Optional[Recorder] = None

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
) -> Recorder:
    """Start the process's recorder (the Rust builder's settings).

    ``output_dir``: where ``records-*.jsonl`` and ``summary.*.jsonl`` go (none:
    summaries only). ``window``: rolling summary window, s. ``target_hz``:
    the loop's rate, for deadline misses and lateness. ``clock``:
    ``"estimate"`` (default), ``"trusted"`` (clocks synced) or ``"none"``.
    ``stages``: sub-stage names mapped onto canonical stages. ``otlp_endpoint``
    / ``service_name``: export every call as a trace (the ``OTEL_*``
    variables apply when only one is given).
    """
    global _default
    if _default is not None:
        raise RuntimeError("stagetrace is already initialised in this process; call stagetrace.finish() first")
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
    )
    return _default


def recorder() -> Recorder:
    """The process's recorder; one with default settings (no files) when
    :func:`init` was not called, with a warning."""
    global _default
    if _default is None:
        logger.warning("stagetrace.init() was not called: recording summaries only, no record files")
        _default = Recorder()
    return _default


def finish() -> dict[str, Any]:
    """Drain the recorder, flush its files and exporter, return the
    cumulative summary (the last line of ``summary.*.jsonl``) as a dict."""
    global _default
    rec, _default = _default, None
    if rec is None:
        raise RuntimeError("stagetrace is not initialised: nothing to finish")
    return json.loads(rec.finish())


def _first_failure(exc: Optional[BaseException]) -> bool:
    """Whether a scope ending with ``exc`` should mark its call failed
    ("exception"): not when an inner scope or the client already gave the
    call its reason (the first reason is the one the record keeps)."""
    if exc is None or getattr(exc, "_stagetrace_reason", None) is not None:
        return False
    _mark(exc, "exception")
    return True


def _mark(exc: BaseException, reason: str) -> None:
    try:
        exc._stagetrace_reason = reason  # type: ignore[attr-defined]
    except (AttributeError, TypeError):  # an exception type without __dict__
        pass


def current_span() -> Optional[Span]:
    """The innermost open call / stage span of this thread or asyncio task."""
    return _current.get()


class call:  # noqa: N801 - a context manager used like a function
    """``with st.call(kind="infer"):`` one control cycle (a record line)."""

    __slots__ = ("_kind", "_seq", "_rec", "_span", "_token")

    def __init__(self, kind: Optional[str] = None, seq: Optional[int] = None, *, recorder: Optional[Recorder] = None):
        self._kind = kind
        self._seq = seq
        self._rec = recorder

    def __enter__(self) -> Span:
        rec = self._rec if self._rec is not None else (_default or recorder())
        self._span = rec.call(self._kind, self._seq)
        self._token = _current.set(self._span)
        return self._span

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        _current.reset(self._token)
        self._span.close(_first_failure(exc))
        return False

    async def __aenter__(self) -> Span:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        return self.__exit__(exc_type, exc, tb)


class stage:  # noqa: N801
    """``with st.stage("capture"):`` a stage of the current call."""

    __slots__ = ("_name", "_rec", "_span", "_token")

    def __init__(self, name: str, *, recorder: Optional[Recorder] = None):
        self._name = name
        self._rec = recorder

    def __enter__(self) -> Span:
        parent = _current.get()
        if parent is not None:
            self._span = parent.stage(self._name)
        else:
            rec = self._rec if self._rec is not None else (_default or recorder())
            self._span = rec.stage(self._name)
        self._token = _current.set(self._span)
        return self._span

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        _current.reset(self._token)
        self._span.close(_first_failure(exc))
        return False

    async def __aenter__(self) -> Span:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        return self.__exit__(exc_type, exc, tb)


def timed(name: str) -> Callable[[F], F]:
    """Decorator: every run of the function is stage ``name`` of the current
    call (coroutine functions too)."""

    def wrap(fn: F) -> F:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                with stage(name):
                    return await fn(*args, **kwargs)

            return run_async  # type: ignore[return-value]

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            with stage(name):
                return fn(*args, **kwargs)

        return run  # type: ignore[return-value]

    return wrap


def __getattr__(name: str) -> Any:
    # openpi_client is optional: imported only when the wrapper is used.
    if name == "TracedClientPolicy":
        from .client import TracedClientPolicy

        return TracedClientPolicy
    raise AttributeError(f"module 'stagetrace' has no attribute {name!r}")
