"""What one call with four stages costs the app thread, four ways, in one run:

* ``bindings``: ``with st.call(): with st.stage(...)`` x4 (this package: the
  call's stamps kept in Rust, queued to the core's worker when it ends);
* ``pure``: the seeds' method, ``time.perf_counter_ns()`` stamps into a dict
  (the goal's baseline);
* ``pure_cm``: the same stamps into a dict from a pure-Python context-manager
  class (``with call(): with stage(...)``, the shape the bindings offer);
* ``otel``: OpenTelemetry's Python SDK, a ``call`` span with four child spans
  (``start_as_current_span``), batch processor, an exporter that discards.

Rounds alternate between them so machine load hits them alike; the medians
of the rounds and the ratios (of the medians, and the median of the rounds'
own ratios) are printed (goal: bindings <= 1.45x pure, <= 0.3x otel). Build the
extension in release first, or the ratio measures a debug build:

    maturin develop --release -m crates/stagetrace-py/Cargo.toml
    pip install opentelemetry-sdk
    python crates/stagetrace-py/bench/overhead.py [--calls 20000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

import stagetrace as st

STAGES = ("capture", "transport", "infer", "dispatch")


def bindings(calls: int) -> int:
    call, stage = st.call, st.stage
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        with call(kind="infer"):
            with stage("capture"):
                pass
            with stage("transport"):
                pass
            with stage("infer"):
                pass
            with stage("dispatch"):
                pass
    return time.perf_counter_ns() - t0


def pure(calls: int) -> int:
    pc = time.perf_counter_ns
    sink: list[dict[str, int]] = []
    t0 = pc()
    for _ in range(calls):
        d: dict[str, int] = {}
        d["call_start"] = pc()
        for name in STAGES:
            d[name + "_start"] = pc()
            d[name + "_end"] = pc()
        d["call_end"] = pc()
        sink.append(d)
        if len(sink) > 1024:
            sink.clear()
    return pc() - t0


class _PureCall:
    """A call as a pure-Python context manager: the seeds' stamps into a dict."""

    __slots__ = ("d",)
    current: "_PureCall | None" = None

    def __init__(self, kind: str) -> None:
        self.d: dict[str, Any] = {"kind": kind}

    def __enter__(self) -> "_PureCall":
        self.d["call_start"] = time.perf_counter_ns()
        _PureCall.current = self
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.d["call_end"] = time.perf_counter_ns()
        _PureCall.current = None
        _PURE_SINK.append(self.d)
        if len(_PURE_SINK) > 1024:
            _PURE_SINK.clear()
        return False


class _PureStage:
    """A stage as a pure-Python context manager stamping into its call's dict."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> None:
        c = _PureCall.current
        if c is not None:
            c.d[self.name + "_start"] = time.perf_counter_ns()

    def __exit__(self, *exc: Any) -> bool:
        c = _PureCall.current
        if c is not None:
            c.d[self.name + "_end"] = time.perf_counter_ns()
        return False


_PURE_SINK: list[dict[str, Any]] = []


def pure_cm(calls: int) -> int:
    call, stage = _PureCall, _PureStage
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        with call(kind="infer"):
            with stage("capture"):
                pass
            with stage("transport"):
                pass
            with stage("infer"):
                pass
            with stage("dispatch"):
                pass
    return time.perf_counter_ns() - t0


def otel_runner() -> Callable[[int], int] | None:
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    except ImportError:
        return None

    class Discard(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Discard(), max_queue_size=1 << 16))
    tracer = provider.get_tracer("bench")

    def otel(calls: int) -> int:
        span = tracer.start_as_current_span
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            with span("call", attributes={"kind": "infer"}):
                with span("capture"):
                    pass
                with span("transport"):
                    pass
                with span("infer"):
                    pass
                with span("dispatch"):
                    pass
        return time.perf_counter_ns() - t0

    return otel


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument(
        "--host-figures",
        action="store_true",
        help="keep the per-call host figures on (run-queue wait, CPU stall, GC); the goal is measured without",
    )
    args = ap.parse_args()
    # No files: the worker still stitches and summarises every call; a queue
    # large enough that no call is dropped in a round.
    st.init(None, queue_capacity=1 << 17, host_figures=args.host_figures)
    runs: dict[str, Callable[[int], int]] = {"bindings": bindings, "pure": pure, "pure_cm": pure_cm}
    otel = otel_runner()
    if otel is not None:
        runs["otel"] = otel
    for f in runs.values():  # warm-up
        f(1000)
    per_call: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(args.rounds):
        for name, f in runs.items():
            per_call[name].append(f(args.calls) / args.calls)
            time.sleep(0.05)  # let the worker drain between rounds
    summary = st.finish()
    med = {k: statistics.median(v) for k, v in per_call.items()}

    def round_ratio(other: str) -> float:
        # Each round's own ratio (same moment, same load), then the median.
        return statistics.median(b / o for b, o in zip(per_call["bindings"], per_call[other]))

    print(f"host figures: {'on' if args.host_figures else 'off'}")
    for k, v in med.items():
        print(f"{k:9s} {v / 1000:8.2f} us per call (4 stages), median of {args.rounds} rounds of {args.calls}")
    print(
        f"bindings / pure    = {med['bindings'] / med['pure']:.2f}  "
        f"(median of round ratios {round_ratio('pure'):.2f}; "
        + ("goal <= 2 with host figures on, the default)" if args.host_figures else "goal <= 1.45 with host figures off)")
    )
    print(
        f"bindings / pure_cm = {med['bindings'] / med['pure_cm']:.2f}  "
        f"(median of round ratios {round_ratio('pure_cm'):.2f})"
    )
    if "otel" in med:
        print(
            f"bindings / otel    = {med['bindings'] / med['otel']:.2f}  "
            f"(median of round ratios {round_ratio('otel'):.2f}; goal <= 0.3)"
        )
    else:
        print("otel: not installed (pip install opentelemetry-sdk)")
    print(
        f"recorded calls: {summary['calls'] + summary['warmup_calls']}, queue drops: {summary['queue_drops']}, "
        f"observer p50: {summary.get('observer_us', {}).get('p50')} us"
    )


if __name__ == "__main__":
    main()
