"""A ``logging`` handler that times itself, so that a control loop blocked
by its own logging is named as such (``log_write_ms``), not as "gap".

A synchronous handler writes on the thread that logs. When its stream is
slow (a terminal over SSH, a pipe to a busy journald, a file on an SD card
flushing), the write blocks the loop, and nothing in the host's counters
tells that wait from a lock's. Wrapped, the time spent in the handler (its
lock, its formatting, its write and flush) is added to the calling thread's
log-write total, which every call on that thread reads at its start and end
(the same total as Rust's ``stagetrace::log_writer``)::

    handler = stagetrace.timed_handler(logging.StreamHandler())
    logging.getLogger().addHandler(handler)

The remedy the report names for a loop it finds blocked this way is the
standard one: ``logging.handlers.QueueHandler`` on the loop's thread and a
``QueueListener`` that writes.
"""

from __future__ import annotations

import logging
import time

from . import _native


def timed_handler(handler: logging.Handler) -> logging.Handler:
    """``handler``, its ``handle`` timed into the thread's log-write total;
    returns the same handler (call it once per handler)."""
    if getattr(handler, "_stagetrace_timed", False):
        return handler
    handle = handler.handle
    clock = time.monotonic_ns
    add = _native.add_log_write_ns

    def timed(record: logging.LogRecord) -> bool:
        t0 = clock()
        try:
            return bool(handle(record))
        finally:
            add(clock() - t0)

    handler.handle = timed  # type: ignore[method-assign]
    handler._stagetrace_timed = True  # type: ignore[attr-defined]
    # Marks the process as one whose log writing is measured (0 until a
    # line is written: a loop that never logs has 0 of it, not "unknown").
    add(0)
    return handler
