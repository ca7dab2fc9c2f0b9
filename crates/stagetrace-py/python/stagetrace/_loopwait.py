"""When a request's bytes arrived, for a server whose event loop was busy.

An asyncio server stamps a request when its handler reads it. If the loop
was blocked when the bytes came in (the policy running on the loop for
another robot, a long garbage collection, a slow callback), that stamp is
late by the whole block, and the client charges the wait to the uplink: the
network blamed for the server's loop (issue: two robots on one openpi-style
server, the second read 17 ms late every call). The same happens, by less,
when the loop sat idle but its thread waited for a core. Here the server
learns when the bytes really arrived, places its receive stamp there and
reports the wait until the handler read them, in ``queue_ns``: as
``loop_wait_ns`` the part while the loop was busy, as ``rx_wait_ns`` (a
host figure, as the Rust server's) the part while the loop waited in the
kernel to be woken (``docs/stages.md``, "Event loops").

Every watched connection's socket asks the kernel for software receive
stamps (``SO_TIMESTAMPING``). The stamp is read by peeking the socket
(``MSG_PEEK | MSG_TRUNC``: nothing consumed, nothing copied) before the
loop reads it; the kernel reports the receive time of the newest segment
waiting. Three ways, the better first:

* **The loop's selector.** On asyncio's own event loops the selector's
  ``select`` is wrapped: when it reports a watched connection readable, the
  connection is peeked before any callback reads it, and the times the loop
  called and left ``select`` are kept with the stamp (how the wait splits
  into busy and idle). Exact to the kernel's stamp (µs), for every request.
* **When a block ends.** On a loop whose selector cannot be wrapped
  (uvloop), when a block on the loop's thread ends — a server stage of 1 ms
  or more, the handler's own work before its response, a collection of 1 ms
  or more — every watched connection of that thread is peeked: bytes that
  came in during the block are still unread. Taken when the bytes peeked
  cover the whole frame.
* **``TCP_INFO``'s ``tcpi_last_data_recv``** when no stamp was peeked (a
  block the server did not see end): the time since the socket's newest
  data arrived, counted in scheduler ticks (4 ms at ``HZ=250``). Only the
  part that is certain is reported: the count less one tick, so a wait under
  two ticks is not seen and the rest of a longer one (up to a tick) stays in
  the uplink.

All err only one way: data that arrived after the request (a ping, the next
request) makes the arrival look later, the wait shorter — never network time
charged to the server. Where none is available (not Linux, the kernel
refuses the option), nothing is reported and the read stamp stands.
"""

from __future__ import annotations

import asyncio
import gc
import mmap
import os
import platform
import socket
import struct
import sys
import threading
import time
import weakref
from typing import Any

__all__ = ["Arrival", "Connection", "block_ended", "connection", "wire_len"]

#: A block shorter than this is not peeked after: a request that arrived
#: during it waited less, and that wait stays in the uplink.
BLOCK_NS = 1_000_000

#: The oldest kernel stamp believed: older is a wall-clock step, not a wait.
_MAX_AGE_NS = 10_000_000_000
#: A stamp this far after the read (µs-level disagreement between the
#: kernel's wall clock and ours through the anchor) is taken as "no wait".
_SLACK_NS = 50_000

_LINUX = sys.platform.startswith("linux")
# The option's number is the generic one on these; other architectures (mips,
# sparc, parisc, alpha) number it differently, and a wrong number would set
# some other option: there the kernel stamp is not asked for.
_GENERIC_ABI = platform.machine().lower() in (
    "x86_64",
    "amd64",
    "i386",
    "i686",
    "aarch64",
    "arm64",
    "armv7l",
    "armv8l",
    "riscv64",
    "s390x",
    "ppc64le",
    "ppc64",
    "loongarch64",
)
_SO_TIMESTAMPING = 37 if (_LINUX and _GENERIC_ABI) else None
_SOF_RX_SOFTWARE = 1 << 3
_SOF_SOFTWARE = 1 << 4
_TIMESPEC = struct.Struct("@ll")
_PEEK_FLAGS = getattr(socket, "MSG_PEEK", 0) | getattr(socket, "MSG_TRUNC", 0) | getattr(socket, "MSG_DONTWAIT", 0)
_CMSG_SPACE = 128

_TCP_INFO = getattr(socket, "TCP_INFO", None) if _LINUX else None
# struct tcp_info: 8 bytes of u8 fields, then u32s; tcpi_last_data_recv is
# the twelfth (ms since the newest data segment arrived, in whole ticks).
_LAST_DATA_RECV = struct.Struct("@I")
_LAST_DATA_RECV_AT = 8 + 11 * 4


def _tick_ns() -> int | None:
    """The kernel's scheduler tick (what ``tcpi_last_data_recv`` counts in):
    the resolution of CLOCK_MONOTONIC_COARSE, which advances once a tick."""
    if not _LINUX:
        return None
    try:
        res = time.clock_getres(getattr(time, "CLOCK_MONOTONIC_COARSE", 6))
    except (OSError, ValueError):
        return None
    ns = int(round(res * 1e9))
    return ns if 0 < ns <= 100_000_000 else None


_TICK_NS = _tick_ns()

# What the peeks read into: with MSG_TRUNC the kernel copies nothing, so the
# length is all that matters; an anonymous mapping costs no memory until
# written (and if a kernel did copy, it would fill this private buffer only).
_PEEK_LEN = 64 << 20
_peek_buf: memoryview | None = None


def _buffer() -> memoryview:
    global _peek_buf
    if _peek_buf is None:
        _peek_buf = memoryview(mmap.mmap(-1, _PEEK_LEN))
    return _peek_buf


def _fd_of(conn: Any) -> int | None:
    """The socket descriptor under a websockets connection, an asyncio
    transport, a socket, or a descriptor."""
    if isinstance(conn, int):
        return conn
    transport = getattr(conn, "transport", None)
    if transport is not None:
        conn = transport
    elif getattr(conn, "socket", None) is not None:  # websockets' threaded connections
        conn = conn.socket
    get_extra = getattr(conn, "get_extra_info", None)
    if get_extra is not None:
        conn = get_extra("socket")
    fileno = getattr(conn, "fileno", None)
    if fileno is None:
        return None
    try:
        fd = fileno()
    except (OSError, ValueError):
        return None
    return fd if isinstance(fd, int) and fd >= 0 else None


class _LoopWatch:
    """The watched connections of one thread (the thread an event loop runs
    on), by the descriptor the loop reads: its selector's events peek them,
    or, where the selector is not wrapped, the end of a block on the thread."""

    __slots__ = ("_conns", "_lock", "_selector", "hooked")

    def __init__(self) -> None:
        self._conns: dict[int, Connection] = {}
        # A connection is dropped from a finalizer, which a collection may run
        # on any thread: the map is copied under the lock before a peek.
        self._lock = threading.Lock()
        self._selector: Any = None
        #: The loop's selector peeks for us: blocks need not.
        self.hooked = False

    def add(self, conn: Connection) -> None:
        with self._lock:
            self._conns[conn.fd] = conn
        self._hook()

    def remove(self, conn: Connection) -> None:
        with self._lock:
            if self._conns.get(conn.fd) is conn:
                del self._conns[conn.fd]

    def peek_all(self) -> None:
        with self._lock:
            conns = tuple(self._conns.values())
        for c in conns:
            c.peek(None, None)

    def _hook(self) -> None:
        """Wrap the running asyncio loop's selector (once per loop). One loop
        runs on a thread at a time: the latest connection's loop decides
        whether blocks must peek (no selector wrapped: uvloop, no loop)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.hooked = False
            return
        selector = getattr(loop, "_selector", None)
        if selector is not None and selector is self._selector:
            self.hooked = True
            return
        self.hooked = False
        select = getattr(selector, "select", None)
        if select is None or getattr(select, "_stagetrace", False):
            return
        conns = self._conns

        def peeking_select(timeout: Any = None) -> Any:
            called = time.perf_counter_ns()
            events = select(timeout)
            if events and conns:
                left = time.perf_counter_ns()
                for key, mask in events:
                    # EVENT_READ is 1 for every selector of the stdlib.
                    if mask & 1:
                        c = conns.get(key.fd)
                        if c is not None:
                            c.peek(called, left)
            return events

        peeking_select._stagetrace = True  # type: ignore[attr-defined]
        try:
            selector.select = peeking_select
        except (AttributeError, TypeError):  # a selector that takes no attribute
            return
        self._selector = selector
        self.hooked = True


_WATCHES: dict[int, _LoopWatch] = {}
_WATCHES_LOCK = threading.Lock()


def _watch_of_this_thread(create: bool) -> _LoopWatch | None:
    tid = threading.get_ident()
    w = _WATCHES.get(tid)
    if w is None and create:
        with _WATCHES_LOCK:
            w = _WATCHES.setdefault(tid, _LoopWatch())
    return w


def block_ended() -> None:
    """A block of this thread ended: peek every connection its loop watches
    (unless its selector does). Call it after work on the loop that held it
    for a while, before the loop runs again (the server's stages and
    response do)."""
    w = _WATCHES.get(threading.get_ident())
    if w is not None and not w.hooked:
        w.peek_all()


class _GcWatch:
    """Peeks after a collection of :data:`BLOCK_NS` or more on a thread that
    watches connections: the collector holds the loop as a slow policy does."""

    def __init__(self) -> None:
        self._start = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        # The collector holds the GIL from start to stop: plain state is safe.
        if phase == "start":
            self._start = time.perf_counter_ns()
        elif phase == "stop" and self._start:
            took = time.perf_counter_ns() - self._start
            self._start = 0
            if took >= BLOCK_NS and _WATCHES:
                try:
                    block_ended()
                except Exception:  # noqa: BLE001 - never disturb the collector
                    pass


_GC_WATCH = _GcWatch()
_GC_INSTALLED = False


def _install_gc_watch() -> None:
    global _GC_INSTALLED
    with _WATCHES_LOCK:
        if not _GC_INSTALLED:
            gc.callbacks.append(_GC_WATCH)
            _GC_INSTALLED = True


def _enable_stamps(sock: socket.socket) -> bool:
    """Ask the kernel to stamp this socket's receives (keeping any stamping
    flags already set on it); False where it will not."""
    if _SO_TIMESTAMPING is None:
        return False
    try:
        flags = sock.getsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPING)
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPING, flags | _SOF_RX_SOFTWARE | _SOF_SOFTWARE)
        return True
    except OSError:
        return False


def _stamp_of(ancdata: list[tuple[int, int, bytes]]) -> int | None:
    """The software receive stamp (wall ns) in a recvmsg's control data."""
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPING and len(data) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(data, 0)
            if sec > 0:
                return sec * 1_000_000_000 + nsec
    return None


class Arrival:
    """When a request was in and how long it then waited, in ns."""

    __slots__ = ("at_ns", "loop_wait_ns", "rx_wait_ns", "source")

    def __init__(self, at_ns: int, loop_wait_ns: int, rx_wait_ns: int | None, source: str) -> None:
        #: When the request's bytes were in (``time.perf_counter_ns``).
        self.at_ns = at_ns
        #: Of the wait until the read, the part while the loop was busy.
        self.loop_wait_ns = loop_wait_ns
        #: The part while the loop waited in the kernel to be woken (only
        #: known from the selector).
        self.rx_wait_ns = rx_wait_ns
        #: ``"kernel"`` (a kernel stamp) or ``"tcp_info"`` (a lower bound).
        self.source = source


class Connection:
    """One connection whose requests' arrival the server wants to know: a
    duplicate of its socket's descriptor (closed by :meth:`close`, or when
    the owner is collected), registered with the current thread's loop."""

    __slots__ = ("_sock", "_stamps", "_pending", "_watch", "fd", "__weakref__")

    def __init__(self, sock: socket.socket, fd: int, watch: _LoopWatch) -> None:
        self._sock: socket.socket | None = sock
        #: The descriptor the loop reads (not the duplicate).
        self.fd = fd
        self._stamps = _enable_stamps(sock)
        # (kernel receive stamp of the newest unread bytes, wall ns; unread
        # bytes; when the loop called and left select, or None after a block)
        self._pending: tuple[int, int, int | None, int | None] | None = None
        self._watch = watch
        watch.add(self)

    @property
    def stamps(self) -> bool:
        """Whether the kernel agreed to stamp this socket's receives."""
        return self._stamps

    def peek(self, called: int | None, left: int | None) -> None:
        """Note the kernel's stamp of the bytes waiting unread, if any, and
        when the loop called and left ``select`` (None: after a block)."""
        sock = self._sock
        if sock is None or not self._stamps:
            return
        try:
            n, anc, _flags, _addr = sock.recvmsg_into([_buffer()], _CMSG_SPACE, _PEEK_FLAGS)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._stamps = False  # a closed or broken socket: stop asking
            return
        if n > 0:
            stamp = _stamp_of(anc)
            if stamp is not None:
                self._pending = (stamp, n, called, left)

    def arrival(self, read_ns: int, read_wall_ns: int, wire_len: int | None) -> Arrival | None:
        """When the request read at ``read_ns`` (perf_counter_ns; wall time
        ``read_wall_ns``) arrived, or None when not known. ``wire_len``: the
        request's size on the wire, so that a stamp peeked after a block,
        before the whole request was in, is not taken for its arrival (the
        selector's peeks are of bytes the loop reads at once: the last one
        before the read saw the request's end)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            stamp, unread, called, left = pending
            age = read_wall_ns - stamp
            whole = called is not None or (wire_len is not None and unread >= wire_len)
            if whole and -_SLACK_NS <= age <= _MAX_AGE_NS:
                at = read_ns - max(0, age)
                if called is None or left is None:
                    return Arrival(at, read_ns - at, None, "kernel")
                # The bytes waited in the kernel while the loop sat in select
                # (its thread to be woken: the host's CPU), and otherwise while
                # the loop was busy (before it called select, and with the
                # callbacks ahead of the handler after).
                idle = max(0, min(left, read_ns) - max(at, called))
                return Arrival(at, read_ns - at - idle, idle, "kernel")
        lag = self._tcp_lag_ns(read_ns)
        if lag is not None:
            return Arrival(read_ns - lag, lag, None, "tcp_info")
        return None

    def _tcp_lag_ns(self, read_ns: int) -> int | None:
        """A certain lower bound on the time from the socket's newest data
        to ``read_ns``, when it is at least a tick; else None."""
        sock = self._sock
        if sock is None or _TCP_INFO is None or _TICK_NS is None:
            return None
        try:
            info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _LAST_DATA_RECV_AT + 4)
        except OSError:
            return None
        asked = time.perf_counter_ns()
        if len(info) < _LAST_DATA_RECV_AT + 4:
            return None
        ms = _LAST_DATA_RECV.unpack_from(info, _LAST_DATA_RECV_AT)[0]
        # n whole ticks between the arrival's tick and now's: more than n - 1
        # ticks passed. With a tick that is not a whole ms the kernel rounds
        # the count up to ms: one ms more is taken off.
        rounding = 0 if _TICK_NS % 1_000_000 == 0 else 1_000_000
        lag = ms * 1_000_000 - _TICK_NS - rounding - (asked - read_ns)
        return lag if lag > 0 else None

    def close(self) -> None:
        """Stop watching and close the duplicate descriptor (the server's own
        socket is not touched)."""
        self._watch.remove(self)
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass


def wire_len(frame: Any) -> int | None:
    """The size of a client's WebSocket message on the wire, in one frame:
    payload, length bytes and mask (what must have arrived before it could
    be read); None when ``frame`` is not the message as received."""
    if isinstance(frame, (bytes, bytearray, memoryview)):
        n = len(frame)
    elif isinstance(frame, str):
        n = len(frame.encode())
    else:
        return None
    return n + 2 + (0 if n < 126 else 2 if n < 65536 else 8) + 4


def connection(conn: Any, owner: Any = None) -> Connection | None:
    """Watch ``conn`` (a websockets connection, an asyncio transport, a
    socket or a descriptor) from the current thread's loop. ``owner``: an
    object whose collection closes the watch (a forgotten ``close()`` must
    not leak the descriptor). None when ``conn`` has no TCP socket here or
    its descriptor cannot be duplicated."""
    if not _LINUX:
        return None
    fd = _fd_of(conn)
    if fd is None:
        return None
    try:
        dup = os.dup(fd)
    except OSError:
        return None
    try:
        sock = socket.socket(fileno=dup)
    except OSError:
        os.close(dup)
        return None
    if sock.type != socket.SOCK_STREAM or sock.family not in (socket.AF_INET, socket.AF_INET6):
        sock.close()
        return None
    watch = _watch_of_this_thread(create=True)
    assert watch is not None
    _install_gc_watch()
    c = Connection(sock, fd, watch)
    if owner is not None:
        weakref.finalize(owner, c.close)
    return c
