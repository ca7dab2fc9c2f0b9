"""What the host did to a request or a call: run-queue wait, CPU stall,
involuntary switches, page faults, and Python's garbage collector.

Sampled at the start and at the end; the difference is what happened in
between (``docs/protocol.md``, "Host figures"). A figure the platform does
not offer is left out, never 0. Per-thread figures (run-queue wait,
switches, faults) count only when both samples came from one thread; the
host's CPU stall and the GC (which holds every Python thread) always.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from typing import Any

from . import _native

try:  # Linux only
    import resource

    _RUSAGE_THREAD = getattr(resource, "RUSAGE_THREAD", None)
except ImportError:  # pragma: no cover - not Linux
    resource = None  # type: ignore[assignment]
    _RUSAGE_THREAD = None

#: The keys this module adds to ``server_timing``, times in ns.
TIME_KEYS = ("run_wait_ns", "cpu_stall_ns", "gc_ns")
#: The count keys.
COUNT_KEYS = ("involuntary_switches", "minor_faults", "major_faults", "gc_collections", "voluntary_switches")
_PER_THREAD = ("run_wait_ns", "involuntary_switches", "minor_faults", "major_faults", "voluntary_switches")


class _GcClock:
    """Process-wide totals of the collector's pauses, from ``gc.callbacks``:
    every collection's start → stop, and how many ran."""

    def __init__(self) -> None:
        self.total_ns = 0
        self.collections = 0
        self._start = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        # The collector holds the GIL from start to stop: no other Python
        # code runs in between, so plain attributes are safe here.
        if phase == "start":
            self._start = time.perf_counter_ns()
        elif phase == "stop" and self._start:
            self.total_ns += time.perf_counter_ns() - self._start
            self.collections += 1
            self._start = 0


_GC = _GcClock()
_GC_LOCK = threading.Lock()
_GC_INSTALLED = False


def _install_gc_clock() -> None:
    global _GC_INSTALLED
    with _GC_LOCK:
        if not _GC_INSTALLED:
            gc.callbacks.append(_GC)
            _GC_INSTALLED = True


class _ThreadFiles(threading.local):
    def __init__(self) -> None:
        # thread-self names the thread that opens it: one per thread.
        try:
            self.schedstat: int | None = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            self.schedstat = None


_FILES = _ThreadFiles()


def _pressure_fd() -> int | None:
    """The CPU pressure file: the container's cgroup's (v2) when there is
    one, else the host's; None without PSI."""
    try:
        with open("/proc/self/cgroup", encoding="ascii") as f:
            for line in f:
                if line.startswith("0::"):
                    path = line[3:].strip().rstrip("/")
                    try:
                        return os.open(f"/sys/fs/cgroup{path}/cpu.pressure", os.O_RDONLY)
                    except OSError:
                        break
    except OSError:
        pass
    try:
        return os.open("/proc/pressure/cpu", os.O_RDONLY)
    except OSError:
        return None


_PRESSURE = _pressure_fd()


def _run_wait_ns() -> int | None:
    fd = _FILES.schedstat
    if fd is None:
        return None
    try:
        fields = os.pread(fd, 96, 0).split()
        return int(fields[1])
    except (OSError, IndexError, ValueError):
        return None


class _IdleMark(threading.local):
    """This thread's run-queue wait total when it last went idle."""

    def __init__(self) -> None:
        self.run_wait_ns: int | None = None


_IDLE = _IdleMark()


def mark_idle() -> None:
    """A pool's worker thread goes back to wait for its next request: keep
    its run-queue wait total, so the next request's :func:`woken_run_wait_ns`
    is the wait between."""
    _IDLE.run_wait_ns = _run_wait_ns()


def woken_run_wait_ns() -> int | None:
    """How long this thread waited on a run queue since it was marked idle
    (ns): for a worker that sleeps until a request comes, its wait for a
    core once woken for this one — a free worker that starts late on a busy
    host, which is the host's CPU and not a starved pool. None when the
    thread was never marked idle or the kernel gives no schedstat."""
    before = _IDLE.run_wait_ns
    now = _run_wait_ns()
    if before is None or now is None:
        return None
    return max(0, now - before)


def _stall_between_ns(t0_ns: int, t1_ns: int) -> int | None:
    """The host's CPU stall between two ``time.monotonic_ns()`` instants,
    from the core's stall sampler (``stagetrace._native``): the pressure
    file read every 100 ms and interpolated. Read at every request instead,
    the kernel loses most of the stall, for every reader on the host."""
    if _PRESSURE is None:
        return None
    return _native.stall_between_ns(t0_ns, t1_ns)


class HostSample:
    """The host's counters at one moment, on the calling thread."""

    __slots__ = ("thread", "values", "at_ns")

    def __init__(self, thread: int, values: dict[str, int], at_ns: int = 0) -> None:
        self.thread = thread
        self.values = values
        self.at_ns = at_ns

    @classmethod
    def now(cls) -> HostSample:
        _install_gc_clock()
        v: dict[str, int] = {}
        wait = _run_wait_ns()
        if wait is not None:
            v["run_wait_ns"] = wait
        if _RUSAGE_THREAD is not None:
            try:
                ru = resource.getrusage(_RUSAGE_THREAD)
                v["involuntary_switches"] = ru.ru_nivcsw
                v["minor_faults"] = ru.ru_minflt
                v["major_faults"] = ru.ru_majflt
                v["voluntary_switches"] = ru.ru_nvcsw
            except OSError:
                pass
        v["gc_ns"] = _GC.total_ns
        v["gc_collections"] = _GC.collections
        if _PRESSURE is not None:
            _native.keep_stall_sampler()
        return cls(threading.get_ident(), v, time.monotonic_ns())

    def since(self, earlier: HostSample) -> dict[str, int]:
        """What happened between ``earlier`` and this sample: each figure's
        growth (never negative), per-thread figures only when both came from
        one thread."""
        same_thread = self.thread == earlier.thread
        out: dict[str, int] = {}
        for key, now in self.values.items():
            then = earlier.values.get(key)
            if then is None or (key in _PER_THREAD and not same_thread):
                continue
            out[key] = max(0, now - then)
        stall = _stall_between_ns(earlier.at_ns, self.at_ns) if earlier.at_ns else None
        if stall is not None:
            out["cpu_stall_ns"] = stall
        return out
