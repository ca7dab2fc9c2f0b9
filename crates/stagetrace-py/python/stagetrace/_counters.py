"""Counts of ignored input in the Python server module: rejected headers,
bad requests, requests timed. Process-wide, thread-safe, read with
``stagetrace.server.stats()``. A neutral module: the codec, the trace
context, the timer and the servers count here; it imports none of them.
"""

from __future__ import annotations

import threading

class _Counters:
    """Process-wide counts of ignored input; thread-safe."""

    _NAMES = (
        "rejected_traceparent",
        "rejected_tracestate",
        "rejected_timing",
        "bad_requests",
        "requests",
        "device_sync_errors",
    )

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(self._NAMES, 0)

    def add(self, name: str, n: int = 1) -> int:
        """Add ``n`` to ``name``; returns the new count."""
        with self._lock:
            # A name not listed above starts at 0 rather than raising: a
            # count must never fail the code path it counts.
            self._counts[name] = self._counts.get(name, 0) + n
            return self._counts[name]

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


_COUNTERS = _Counters()


def stats() -> dict[str, int]:
    """Counts since the process started: ``rejected_traceparent``,
    ``rejected_tracestate``, ``rejected_timing`` (bad ``batch_size`` /
    ``cache`` values in a response's own ``server_timing`` map, dropped),
    ``bad_requests`` (undecodable requests seen by :class:`PolicyServer`),
    ``requests`` (timers created) and ``device_sync_errors`` (a stage's wait
    for its device arrays failed: ``stagetrace.device.ready``)."""
    return _COUNTERS.snapshot()
